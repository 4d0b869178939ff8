/* End-to-end: the cause of a failure reaches the caller, and failover
 * follows its kind (transport contract, issue 18 item 4).  Two engines in
 * two processes on 127.0.0.1, once per transport (argv[1]):
 *  - "tcp": permanent refusals by the target (permission, unregistered
 *    range) fail at once with their cause even with shm installed beside
 *    tcp; transient ones (connection refused) move to shm; a stalled or a
 *    trickling peer fails within the timeout with ETIMEDOUT while
 *    tent_submit itself returns at once;
 *  - "shm": a peer that dropped the memory fails the task with ERANGE and
 *    a message naming the process;
 *  - "memfabric_host_tcp": memfabric over mf_host: a dead peer fails with
 *    the vendor's or the peer's cause, and a peer without memfabric moves
 *    to tcp.
 * Every figure is printed. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include "common/error.h"
#include "e2e_peer.h"
#include "rpc/rpc.h"
#include "transport/tcp/tcp_wire.h"
#include "tent/transfer_engine.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEN (1u << 20)

enum { M_TCP, M_SHM, M_MF };
static int g_mode;

struct fixture {
    struct e2e_peer peer;
    tent_engine_t e;
    tent_segment_id_t seg;
    uint8_t *src;
};

/* The peer and this engine with the given transports (memfabric as the
 * mode says), the peer's segment open, src filled with 0xA5. */
static int start(struct fixture *f, bool shm, bool tcp)
{
    e2e_set_memfabric(g_mode == M_MF);
    if (e2e_peer_start(&f->peer, LEN, shm, tcp) != 0)
        return -1;
    e2e_config(shm, tcp);
    f->e = tent_create_engine();
    void *p;
    if (!f->e || tent_allocate_memory(f->e, &p, LEN, "cpu") ||
        tent_register_memory(f->e, p, LEN))
        return -1;
    f->src = p;
    memset(f->src, 0xA5, LEN);
    return tent_open_segment(f->e, &f->seg, f->peer.name) ? -1 : 0;
}

static int setup_both(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    *state = f;
    return f ? start(f, true, true) : -1;
}

static int setup_tcp(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    *state = f;
    return f ? start(f, false, true) : -1;
}

static int setup_shm(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    *state = f;
    return f ? start(f, true, false) : -1;
}

static int setup_mf(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    *state = f;
    return f ? start(f, false, true) : -1;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (!f)
        return 0;
    if (f->peer.pid > 0) {
        kill(f->peer.pid, SIGCONT);
        e2e_peer_quit(&f->peer);
    }
    if (f->e)
        tent_destroy_engine(f->e);
    free(f);
    return 0;
}

/* One request of len bytes at offset off of the peer's rw buffer, pinned
 * to hint first; returns the batch (its task is terminal). */
static tent_batch_id_t one(struct fixture *f, int opcode, uint64_t off,
                           uint64_t len, int hint, long *submit_ms,
                           long *done_ms)
{
    tent_request_t r = {.opcode = opcode,
                        .source = f->src + off,
                        .target_id = f->seg,
                        .target_offset = f->peer.rw_base + off,
                        .length = len,
                        .transport_hint = hint};
    tent_batch_id_t b = tent_allocate_batch(f->e, 1);
    assert_int_not_equal(b, 0);
    long t0 = e2e_now_ms();
    assert_int_equal(tent_submit(f->e, b, &r, 1), 0);
    long t1 = e2e_now_ms();
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, 30000, &st), 0);
    if (submit_ms)
        *submit_ms = t1 - t0;
    if (done_ms)
        *done_ms = e2e_now_ms() - t0;
    return b;
}

struct cause {
    int status;
    int code, native;
    char msg[512];
    char xport[32];
};

static struct cause cause_of(struct fixture *f, tent_batch_id_t b)
{
    struct cause c = {0};
    tent_status_t st;
    assert_int_equal(tent_task_status(f->e, b, 0, &st), 0);
    c.status = st.status;
    assert_int_equal(
        tent_task_error(f->e, b, 0, &c.code, &c.native, c.msg, sizeof(c.msg)),
        0);
    assert_int_equal(tent_task_transport(f->e, b, 0, c.xport, sizeof(c.xport)),
                     0);
    print_message("    status %d, transport %s, cause %s (native %d): %s\n",
                  c.status, c.xport, tent_strerror(c.code), c.native, c.msg);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    return c;
}

/* The peer's rw bytes [off, +len) are still its pattern. */
static void assert_untouched(struct fixture *f, uint64_t off, uint64_t len)
{
    uint8_t *want = malloc(len);
    assert_non_null(want);
    e2e_pattern_fill(want, len, off);
    assert_int_equal(e2e_peer_hash(&f->peer, false, off, len),
                     e2e_fnv(want, len));
    free(want);
}

/* Stops the peer and waits until the kernel reports it stopped (kill
 * returns before the signal takes effect). */
static void stop_peer(pid_t pid)
{
    kill(pid, SIGSTOP);
    char path[64], stat[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    for (long end = e2e_now_ms() + 5000; e2e_now_ms() < end; usleep(1000)) {
        FILE *fp = fopen(path, "r");
        size_t n = fp ? fread(stat, 1, sizeof(stat) - 1, fp) : 0;
        if (fp)
            fclose(fp);
        stat[n] = 0;
        const char *st = strrchr(stat, ')');
        if (st && st[1] == ' ' && st[2] == 'T')
            return;
    }
    fail_msg("peer %ld did not stop", (long)pid);
}

/* ---- tcp ----------------------------------------------------------------- */

/* The target made the buffer read-only after we fetched its descriptor:
 * its tcp half refuses the write with TENT_EPERM.  No other transport can
 * fix that, so the task does not fail over (shm, installed too, never
 * runs): the descriptor is fetched once more, which says read-only, and the
 * task fails with TENT_EPERM. */
static void test_tcp_permission_refused_no_failover(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(e2e_peer_reregister_rw(&f->peer, PERM_GLOBAL_READ_ONLY),
                     0);
    tent_batch_id_t b =
        one(f, OPCODE_WRITE, 0, 4096, TRANSPORT_TCP, NULL, NULL);
    struct cause c = cause_of(f, b);
    assert_int_equal(c.status, STATUS_FAILED);
    assert_int_equal(c.code, TENT_EPERM);
    assert_string_equal(c.xport, "tcp");
    assert_non_null(strstr(c.msg, "is read-only"));
    assert_non_null(strstr(c.msg, "127.0.0.1:"));
    assert_untouched(f, 0, 4096);
}

/* The target unregistered the range: TENT_ERANGE from its tcp half, no
 * failover; the descriptor fetched again has no such range either. */
static void test_tcp_unregistered_range_no_failover(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(e2e_peer_unregister_rw(&f->peer), 0);
    tent_batch_id_t b =
        one(f, OPCODE_WRITE, 8192, 4096, TRANSPORT_TCP, NULL, NULL);
    struct cause c = cause_of(f, b);
    assert_int_equal(c.status, STATUS_FAILED);
    assert_int_equal(c.code, TENT_ERANGE);
    assert_string_equal(c.xport, "tcp");
    assert_non_null(strstr(c.msg, "fetched again"));
    assert_non_null(strstr(c.msg, "refused the write"));
    assert_untouched(f, 8192, 4096);
}

/* The target's RPC server is gone: tcp's connection is refused, a
 * transient cause, so the task moves to shm, which completes it. */
static void test_tcp_refused_connection_fails_over(void **state)
{
    struct fixture *f = *state;
    e2e_peer_stop_rpc(&f->peer);
    tent_batch_id_t b =
        one(f, OPCODE_WRITE, 4096, 4096, TRANSPORT_TCP, NULL, NULL);
    struct cause c = cause_of(f, b);
    assert_int_equal(c.status, STATUS_COMPLETED);
    assert_string_equal(c.xport, "shm");
    assert_int_equal(c.code, TENT_OK); /* it did not fail in the end */
    assert_int_equal(e2e_peer_hash(&f->peer, false, 4096, 4096),
                     e2e_fnv(f->src + 4096, 4096));
}

/* tcp alone: the same refusal fails the task with its cause. */
static void test_tcp_refused_connection_cause(void **state)
{
    struct fixture *f = *state;
    e2e_peer_stop_rpc(&f->peer);
    tent_batch_id_t b = one(f, OPCODE_WRITE, 0, 4096, 0, NULL, NULL);
    struct cause c = cause_of(f, b);
    assert_int_equal(c.status, STATUS_FAILED);
    assert_int_equal(c.code, TENT_EPEER);
    assert_int_equal(c.native, ECONNREFUSED);
    assert_non_null(strstr(c.msg, "127.0.0.1:"));
}

/* A stopped peer: its kernel takes the small request, nothing answers.
 * tent_submit returns at once; the task fails with ETIMEDOUT within about
 * one timeout. */
static void test_tcp_stalled_peer(void **state)
{
    struct fixture *f = *state;
    /* one transfer first: the connection is up, the small path is warm */
    long s0, d0;
    tent_batch_id_t b = one(f, OPCODE_WRITE, 0, 4096, 0, &s0, &d0);
    assert_int_equal(cause_of(f, b).status, STATUS_COMPLETED);
    stop_peer(f->peer.pid);
    long s1, d1;
    b = one(f, OPCODE_WRITE, 0, 4096, 0, &s1, &d1);
    struct cause c = cause_of(f, b);
    int to = e2e_tcp_timeout_ms();
    print_message("    stalled peer: tent_submit %ld ms, FAILED after %ld ms "
                  "(timeout %d ms)\n",
                  s1, d1, to);
    assert_int_equal(c.status, STATUS_FAILED);
    assert_int_equal(c.code, TENT_ETIMEDOUT);
    assert_true(tent_error_is_transient(c.code));
    assert_true(s1 < 100);
    assert_true(d1 >= to - 50 && d1 < 2 * to + 1000);
    kill(f->peer.pid, SIGCONT);
}

/* ---- a peer that trickles its answers ------------------------------------ */

/* A fake target in this process: it publishes one tcp-served buffer and
 * answers every READ with a valid frame, one byte every gap_ms. */
struct trickler {
    int lfd;
    uint16_t port;
    int gap_ms;
    atomic_bool stop;
    pthread_t th;
    atomic_int reads; /* READ frames received */
};

static int send_all_slowly(struct trickler *t, int fd, const uint8_t *p,
                           size_t n, bool slow)
{
    for (size_t i = 0; i < n && !atomic_load(&t->stop);) {
        ssize_t w = send(fd, p + i, slow ? 1 : n - i, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        i += (size_t)w;
        for (int k = 0; slow && k < t->gap_ms / 10 && !atomic_load(&t->stop);
             k++)
            usleep(10000);
    }
    return 0;
}

static int recv_exact(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static void trickle_conn(struct trickler *t, int fd)
{
    for (;;) {
        uint8_t h[TENT_WIRE_HDR_LEN];
        struct tent_wire_hdr hdr;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        while (!atomic_load(&t->stop) && poll(&pf, 1, 50) == 0)
            ;
        if (atomic_load(&t->stop) || recv_exact(fd, h, sizeof(h)) ||
            tent_wire_decode_hdr(h, sizeof(h), &hdr))
            return;
        if (hdr.type == TENT_WIRE_DESC_REQ) {
            struct tent_wire_buf wb = {.base = 0x100000,
                                       .length = LEN,
                                       .perm = PERM_GLOBAL_READ_WRITE,
                                       .xport_mask = 1u << TRANSPORT_TCP};
            snprintf(wb.location, sizeof(wb.location), "cpu");
            struct tent_wire_desc d = {.bufs = &wb, .nbufs = 1, .nattrs = 1};
            snprintf(d.name, sizeof(d.name), "127.0.0.1:%u", t->port);
            snprintf(d.host_id, sizeof(d.host_id), "trickler/none");
            snprintf(d.attr_key[0], sizeof(d.attr_key[0]), "rpc_addr");
            snprintf(d.attr_value[0], sizeof(d.attr_value[0]), "127.0.0.1:%u",
                     t->port);
            size_t len;
            char *json = tent_wire_encode_desc(&d, &len);
            uint8_t rh[TENT_WIRE_HDR_LEN];
            tent_wire_encode_hdr(rh, TENT_WIRE_DESC_RESP, hdr.seq,
                                 (uint32_t)len);
            int rc =
                json ? send_all_slowly(t, fd, rh, sizeof(rh), false) ||
                           send_all_slowly(t, fd, (uint8_t *)json, len, false)
                     : -1;
            free(json);
            if (rc)
                return;
            continue;
        }
        if (hdr.type == TCP_WIRE_HELLO) {
            /* a tcp data connection names itself: answered at once */
            uint8_t tok[TCP_WIRE_TOKEN_LEN];
            uint8_t rh[TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN];
            tent_wire_encode_hdr(rh, TENT_WIRE_RESP, hdr.seq,
                                 TENT_WIRE_RESP_LEN);
            tent_wire_encode_resp(rh + TENT_WIRE_HDR_LEN, 0);
            if (hdr.len != sizeof(tok) || recv_exact(fd, tok, sizeof(tok)) ||
                send(fd, rh, sizeof(rh), MSG_NOSIGNAL) != (ssize_t)sizeof(rh))
                return;
            continue;
        }
        if (hdr.type != TCP_WIRE_READ || hdr.len != TCP_WIRE_RW_LEN)
            return;
        uint8_t body[TCP_WIRE_RW_LEN];
        struct tcp_wire_rw rw;
        if (recv_exact(fd, body, sizeof(body)) ||
            tcp_wire_decode_rw(body, sizeof(body), &rw))
            return;
        atomic_fetch_add(&t->reads, 1);
        size_t n = TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN + rw.length;
        uint8_t *ans = calloc(1, n);
        if (!ans)
            return;
        tent_wire_encode_hdr(ans, TENT_WIRE_RESP, hdr.seq,
                             (uint32_t)(TENT_WIRE_RESP_LEN + rw.length));
        tent_wire_encode_resp(ans + TENT_WIRE_HDR_LEN, 0);
        int rc = send_all_slowly(t, fd, ans, n, true);
        free(ans);
        if (rc)
            return;
    }
}

static void *trickle_main(void *arg)
{
    struct trickler *t = arg;
    while (!atomic_load(&t->stop)) {
        struct pollfd pf = {.fd = t->lfd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0)
            continue;
        int fd = accept(t->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        trickle_conn(t, fd); /* one client at a time: enough here */
        close(fd);
    }
    return NULL;
}

static void trickler_start(struct trickler *t, int gap_ms)
{
    memset(t, 0, sizeof(*t));
    t->gap_ms = gap_ms;
    t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(t->lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    assert_int_equal(bind(t->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(t->lfd, 16), 0);
    assert_int_equal(getsockname(t->lfd, (struct sockaddr *)&a, &al), 0);
    t->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&t->th, NULL, trickle_main, t), 0);
}

static void trickler_stop(struct trickler *t)
{
    atomic_store(&t->stop, true);
    pthread_join(t->th, NULL);
    close(t->lfd);
}

/* One byte of every answer per 1.5 s with timeout_ms 2000: each answer has
 * one deadline, so the task fails after about 2 s (it used to take as long
 * as the peer kept trickling), and tent_submit never waits for the peer.
 * Both the small path (one 4 KiB read, sent from the submitting thread) and
 * the workers' path (16 reads of 64 KiB) are timed. */
static void test_tcp_trickling_peer(void **state)
{
    (void)state;
    struct trickler t;
    trickler_start(&t, 1500);
    e2e_config(false, true);
    tent_set_config("transports/tcp/timeout_ms", "2000");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    void *buf;
    assert_int_equal(tent_allocate_memory(e, &buf, LEN, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, buf, LEN), 0);
    char name[64];
    snprintf(name, sizeof(name), "127.0.0.1:%u", t.port);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, name), 0);
    for (int round = 0; round < 2; round++) {
        size_t n = round ? 16 : 1, len = round ? 65536 : 4096;
        tent_request_t r[16];
        for (size_t i = 0; i < n; i++)
            r[i] = (tent_request_t){.opcode = OPCODE_READ,
                                    .source = (char *)buf + i * len,
                                    .target_id = seg,
                                    .target_offset = 0x100000 + i * len,
                                    .length = len};
        tent_batch_id_t b = tent_allocate_batch(e, n);
        long t0 = e2e_now_ms();
        assert_int_equal(tent_submit(e, b, r, n), 0);
        long t1 = e2e_now_ms();
        tent_status_t st;
        assert_int_equal(e2e_wait(e, b, 30000, &st), 0);
        long t2 = e2e_now_ms();
        int code, native;
        char msg[256];
        assert_int_equal(
            tent_task_error(e, b, 0, &code, &native, msg, sizeof(msg)), 0);
        print_message("    trickling peer, %zu x %zu B: tent_submit %ld ms, "
                      "FAILED after %ld ms: %s\n",
                      n, len, t1 - t0, t2 - t0, msg);
        assert_int_equal(st.status, STATUS_FAILED);
        assert_int_equal(code, TENT_ETIMEDOUT);
        assert_non_null(strstr(msg, "no answer within 2000 ms"));
        assert_true(t1 - t0 < 100);
        assert_true(t2 - t0 >= 1900 && t2 - t0 < 5000);
        assert_int_equal(tent_free_batch(e, b), 0);
    }
    assert_true(atomic_load(&t.reads) >= 1);
    tent_destroy_engine(e);
    trickler_stop(&t);
}

/* ---- shm ----------------------------------------------------------------- */

/* The peer freed its memory after we mapped it: its free revoked the
 * buffer in its control page, so the copy is refused before it touches
 * anything, with TENT_ERANGE and a message naming the peer's pid. */
static void test_shm_dropped_memory_cause(void **state)
{
    struct fixture *f = *state;
    tent_batch_id_t b = one(f, OPCODE_WRITE, 0, 4096, 0, NULL, NULL);
    assert_int_equal(cause_of(f, b).status, STATUS_COMPLETED);
    assert_int_equal(e2e_peer_free_rw(&f->peer), 0);
    b = one(f, OPCODE_WRITE, 0, 4096, 0, NULL, NULL);
    struct cause c = cause_of(f, b);
    char pid[32];
    snprintf(pid, sizeof(pid), "pid %ld", (long)f->peer.pid);
    assert_int_equal(c.status, STATUS_FAILED);
    assert_int_equal(c.code, TENT_ERANGE);
    assert_non_null(strstr(c.msg, pid));
    assert_non_null(strstr(c.msg, "no longer registered"));
}

/* ---- memfabric over mf_host ------------------------------------------------
 */

/* A dead peer: the vendor's batch fails (or the peer is known down): a
 * transient cause with its code and a message, and tcp (installed too) has
 * nobody to talk to either. */
static void test_mf_dead_peer_cause(void **state)
{
    struct fixture *f = *state;
    tent_batch_id_t b = one(f, OPCODE_WRITE, 0, 4096, 0, NULL, NULL);
    struct cause c = cause_of(f, b);
    assert_int_equal(c.status, STATUS_COMPLETED);
    assert_string_equal(c.xport, "memfabric");
    e2e_peer_kill(&f->peer);
    b = one(f, OPCODE_WRITE, 0, 4096, TRANSPORT_MEMFABRIC, NULL, NULL);
    c = cause_of(f, b);
    assert_int_equal(c.status, STATUS_FAILED);
    assert_true(tent_error_is_transient(c.code));
    assert_true(c.msg[0] != '\0');
}

/* The peer's memfabric instance is gone, its engine serves on: the
 * vendor's failure is transient and the task moves to tcp. */
static void test_mf_failover_to_tcp(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(e2e_peer_drop_memfabric(&f->peer), 0);
    tent_batch_id_t b =
        one(f, OPCODE_WRITE, 0, 4096, TRANSPORT_MEMFABRIC, NULL, NULL);
    struct cause c = cause_of(f, b);
    assert_int_equal(c.status, STATUS_COMPLETED);
    assert_string_equal(c.xport, "tcp");
    assert_int_equal(e2e_peer_hash(&f->peer, false, 0, 4096),
                     e2e_fnv(f->src, 4096));
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "tcp";
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(mode, "tcp") == 0) {
        g_mode = M_TCP;
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(
                test_tcp_permission_refused_no_failover, setup_both, teardown),
            cmocka_unit_test_setup_teardown(
                test_tcp_unregistered_range_no_failover, setup_both, teardown),
            cmocka_unit_test_setup_teardown(
                test_tcp_refused_connection_fails_over, setup_both, teardown),
            cmocka_unit_test_setup_teardown(test_tcp_refused_connection_cause,
                                            setup_tcp, teardown),
            cmocka_unit_test_setup_teardown(test_tcp_stalled_peer, setup_tcp,
                                            teardown),
            cmocka_unit_test(test_tcp_trickling_peer),
        };
        return cmocka_run_group_tests_name("e2e_errors_tcp", tests, NULL, NULL);
    }
    if (strcmp(mode, "shm") == 0) {
        g_mode = M_SHM;
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_shm_dropped_memory_cause,
                                            setup_shm, teardown),
        };
        return cmocka_run_group_tests_name("e2e_errors_shm", tests, NULL, NULL);
    }
    if (strcmp(mode, "memfabric_host_tcp") == 0) {
#ifdef MF_HOST_LIB
        g_mode = M_MF;
        setenv("MF_PROTOCOL", "host_tcp", 1);
        setenv("MF_SMEM_LIBRARY", MF_HOST_LIB, 1);
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_mf_dead_peer_cause, setup_mf,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_mf_failover_to_tcp, setup_mf,
                                            teardown),
        };
        return cmocka_run_group_tests_name("e2e_errors_memfabric", tests, NULL,
                                           NULL);
#else
        fprintf(stderr, "%s: built without memfabric over mf_host\n", argv[0]);
        return 77;
#endif
    }
    fprintf(stderr, "usage: %s tcp|shm|memfabric_host_tcp\n", argv[0]);
    return 2;
}
