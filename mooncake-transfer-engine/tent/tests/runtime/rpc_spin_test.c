/* The RPC server's spin_us (transports/tcp/spin_us): after a frame, a
 * worker reads its connection without sleeping for up to spin_us before it
 * waits in poll().  A client that sends its next request as soon as the
 * answer is in then finds a worker that did not go to sleep: the workers'
 * voluntary context switches over a ping-pong of small WRITEs, GAP_US
 * apart, stay far below one per request, where with spin_us 0 there is
 * about one per request.  After the traffic the spin ends: the process uses (almost) no
 * CPU while the connection stays open and idle.
 *
 * Each connection's spin backs off when it runs out (rpc_server.c), which a
 * machine too busy to run the client within spin_us makes happen: the test
 * allows a quarter of the requests to sleep (at a load average of 17-20 on
 * 2 CPUs, 0-34 of 400 did). */
#include "common/clock.h"
#include "common/error.h"
#include "net/net.h"
#include "rpc/rpc.h"
#include "rpc/wire.h"
#include "transport/tcp/tcp_wire.h"
#include "tu_assert.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define NREQ   400
#define BODY   64
#define GAP_US 100 /* between an answer and the next request */

static char *describe(void *ctx, size_t *len)
{
    (void)ctx;
    *len = 2;
    return strdup("{}");
}

static int notify(void *ctx, const char *peer, const char *from,
                  const char *name, const char *msg)
{
    (void)ctx, (void)peer, (void)from, (void)name, (void)msg;
    return 0;
}

static int serve_write(void *ctx, struct tent_rpc_conn *c,
                       const struct tent_wire_hdr *h)
{
    (void)ctx;
    uint8_t rw[TCP_WIRE_RW_LEN];
    if (tent_rpc_conn_recv(c, rw, sizeof(rw)) ||
        tent_rpc_conn_drain(c, h->len - TCP_WIRE_RW_LEN))
        return -1;
    return tent_rpc_conn_send_resp(c, h->seq, 0, NULL, 0);
}

static int measure(void *ctx, const struct tent_wire_hdr *h,
                   const uint8_t *body, size_t n, uint64_t *data)
{
    (void)ctx, (void)body, (void)n;
    *data = h->len >= TCP_WIRE_RW_LEN ? h->len - TCP_WIRE_RW_LEN : 0;
    return h->len >= TCP_WIRE_RW_LEN ? 0 : TENT_EINVAL;
}

static const struct tent_rpc_frame_ops write_ops = {
    .owner = "test", .serve = serve_write, .measure = measure, .work = true};

/* Voluntary context switches of the server's worker threads so far. */
static long worker_switches(void)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    long total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char path[300], comm[32] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* ended meanwhile */
        if (!fgets(comm, sizeof(comm), f))
            comm[0] = 0;
        fclose(f);
        if (strncmp(comm, "tent-rpc-w", 10) != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/status", de->d_name);
        f = fopen(path, "r");
        if (!f)
            continue;
        char line[128];
        long v;
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
                total += v;
        fclose(f);
    }
    closedir(d);
    return total;
}

static double cpu_s(void)
{
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void one_write(int fd, uint32_t seq)
{
    uint8_t req[TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN + BODY] = {0};
    tent_wire_encode_hdr(req, TCP_WIRE_WRITE, seq, TCP_WIRE_RW_LEN + BODY);
    tcp_wire_encode_rw(req + TENT_WIRE_HDR_LEN, 0x1000, BODY, NULL);
    uint8_t resp[TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN];
    int32_t st = -1;
    assert_int_equal(tent_net_send_all(fd, req, sizeof(req), NULL), 0);
    assert_int_equal(tent_net_recv_all(fd, resp, sizeof(resp), NULL), 0);
    assert_int_equal(tent_wire_decode_resp(resp + TENT_WIRE_HDR_LEN,
                                           TENT_WIRE_RESP_LEN, &st),
                     0);
    assert_int_equal(st, 0);
}

/* A ping-pong of NREQ small WRITEs on one connection: the workers'
 * voluntary switches over it, and the process's CPU seconds over `idle_ms`
 * of an open, idle connection right after it. */
static void ping_pong(int spin_us, int idle_ms, long *switches, double *idle)
{
    struct tent_rpc_handlers h = {.describe = describe, .notify = notify};
    struct tent_rpc_limits lim = {.max_conns = 16,
                                  .idle_timeout_ms = 60000,
                                  .frame_timeout_ms = 30000,
                                  .spin_us = spin_us};
    struct tent_rpc_server *srv = NULL;
    uint16_t port = 0;
    assert_int_equal(
        tent_rpc_server_start(&h, &lim, "127.0.0.1", 0, &srv, &port), TENT_OK);
    assert_int_equal(
        tent_rpc_server_handle(srv, TCP_WIRE_WRITE, &write_ops),
        TENT_OK);
    int fd = -1;
    assert_int_equal(tent_net_connect("127.0.0.1", port, 5000, 30000, &fd), 0);
    for (uint32_t i = 0; i < 20; i++) /* a worker is started and serving */
        one_write(fd, i + 1);
    long s0 = worker_switches();
    for (uint32_t i = 0; i < NREQ; i++) {
        /* a pause the worker would sleep through without a spin (a client
         * faster than the worker has its next request in before the worker
         * waits, and no worker sleeps at all); busy, so that the client
         * does not wait for a CPU after it */
        uint64_t until = tent_now_ns() + GAP_US * 1000u;
        while (tent_now_ns() < until)
            ;
        one_write(fd, 100 + i);
    }
    *switches = worker_switches() - s0;
    double c0 = cpu_s();
    struct timespec ts = {idle_ms / 1000, (idle_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    *idle = cpu_s() - c0;
    close(fd);
    tent_rpc_server_stop(srv);
}

static void test_spin_keeps_the_worker_awake(void **state)
{
    (void)state;
    long with = 0, without = 0;
    double idle = 0;
    ping_pong(TENT_RPC_MAX_SPIN_US, 10, &with, &idle);
    ping_pong(0, 10, &without, &idle);
    print_message("worker voluntary switches over %d requests: %ld with "
                  "spin_us %d, %ld with 0\n",
                  NREQ, with, TENT_RPC_MAX_SPIN_US, without);
    /* without a spin the worker sleeps before nearly every request: the
     * measure tells the two apart */
    assert_true(without > NREQ / 2);
    assert_true(with < NREQ / 4);
}

static void test_no_cpu_after_traffic(void **state)
{
    (void)state;
    long sw = 0;
    double idle = 0;
    /* the longest spin allowed, then 500 ms with the connection open */
    ping_pong(TENT_RPC_MAX_SPIN_US, 500, &sw, &idle);
    print_message("CPU over 500 ms idle after traffic: %.1f ms\n", idle * 1e3);
    assert_true(idle < 0.05);
}

static void test_limits_refuse_a_bad_spin(void **state)
{
    (void)state;
    struct tent_rpc_handlers h = {.describe = describe, .notify = notify};
    struct tent_rpc_limits lim = {.max_conns = 16,
                                  .idle_timeout_ms = 60000,
                                  .frame_timeout_ms = 30000};
    struct tent_rpc_server *srv = NULL;
    uint16_t port = 0;
    int bad[] = {-1, TENT_RPC_MAX_SPIN_US + 1};
    for (size_t i = 0; i < 2; i++) {
        lim.spin_us = bad[i];
        assert_int_equal(
            tent_rpc_server_start(&h, &lim, "127.0.0.1", 0, &srv, &port),
            TENT_EINVAL);
        assert_non_null(strstr(tent_last_error(), "spin"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spin_keeps_the_worker_awake),
        cmocka_unit_test(test_no_cpu_after_traffic),
        cmocka_unit_test(test_limits_refuse_a_bad_spin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
