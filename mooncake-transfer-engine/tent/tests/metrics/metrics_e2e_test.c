/* Metrics against real traffic: two engines in two processes on loopback.
 * The counters and histograms read through the HTTP endpoint equal what was
 * actually moved -- bytes, requests, failures, a forced failover -- and a
 * real Prometheus server started here scrapes the endpoint and answers a
 * query for tent_write_bytes_total with the bytes written.
 *
 *   tent_metrics_e2e_test               the cmocka suite
 *   tent_metrics_e2e_test prometheus    the Prometheus scenario (77 = skipped
 *                                       when the prometheus binary is absent)
 */
#include "e2e_peer.h"
#include "metrics_test_util.h"
#include "tent/transfer_engine.h"

/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RW_LEN ((size_t)16 << 20)

struct fixture {
    struct e2e_peer peer;
    tent_engine_t e;
    uint8_t *src;
    tent_segment_id_t seg;
    uint64_t rng;
};

static uint64_t rnd(struct fixture *f)
{
    f->rng ^= f->rng << 13;
    f->rng ^= f->rng >> 7;
    f->rng ^= f->rng << 17;
    return f->rng;
}

static int setup_with(void **state, bool shm, bool tcp)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->rng = 0x2545f4914f6cdd1dull;
    if (e2e_peer_start(&f->peer, RW_LEN, shm, tcp) != 0) {
        free(f);
        return -1;
    }
    e2e_config(shm, tcp);
    tent_set_config("metrics/http_port", "0");
    tent_set_config("metrics/latency_sample", "1"); /* time every request */
    f->e = tent_create_engine();
    void *p;
    /* TENT's pattern: allocate, then register. */
    if (!f->e || tent_allocate_memory(f->e, &p, RW_LEN, "cpu") ||
        tent_register_memory(f->e, p, RW_LEN))
        return -1;
    f->src = p;
    for (size_t i = 0; i < RW_LEN; i++)
        f->src[i] = (uint8_t)rnd(f);
    if (tent_open_segment(f->e, &f->seg, f->peer.name))
        return -1;
    *state = f;
    return 0;
}

static int setup_tcp(void **state)
{
    return setup_with(state, false, true);
}

static int setup_both(void **state)
{
    return setup_with(state, true, true);
}

#ifdef MF_HOST_LIB
/* memfabric over mf_host (host_tcp), tcp beside it. */
static int setup_mf(void **state)
{
    setenv("MF_PROTOCOL", "host_tcp", 1);
    setenv("MF_SMEM_LIBRARY", MF_HOST_LIB, 1);
    setenv("MF_TRANSFER_TIMEOUT", "5000", 1);
    e2e_set_memfabric(true);
    return setup_with(state, false, true);
}
#endif

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (f->e) {
        tent_unregister_memory(f->e, f->src, RW_LEN);
        tent_free_memory(f->e, f->src);
        tent_destroy_engine(f->e);
    }
    e2e_peer_quit(&f->peer);
    free(f);
    return 0;
}

/* ---- reading the endpoint ------------------------------------------------ */

static cJSON *scrape_json(tent_engine_t e)
{
    struct mt_reply r;
    assert_int_equal(
        mt_get(mt_port(e), "GET /metrics/json HTTP/1.0\r\n\r\n", &r), 0);
    assert_int_equal(r.status, 200);
    cJSON *j = cJSON_Parse(r.body);
    mt_reply_free(&r);
    assert_non_null(j);
    return j;
}

/* Field ("value", "count", "sum") of the series of family fam whose labels
 * include k1=v1 (and k2=v2 when given); 0 when there is no such series. */
static double series(cJSON *root, const char *fam, const char *k1,
                     const char *v1, const char *k2, const char *v2,
                     const char *field)
{
    cJSON *fams = cJSON_GetObjectItem(root, "families"), *f;
    cJSON_ArrayForEach(f, fams)
    {
        if (strcmp(cJSON_GetObjectItem(f, "name")->valuestring, fam) != 0)
            continue;
        cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(f, "series"))
        {
            cJSON *l = cJSON_GetObjectItem(s, "labels");
            cJSON *a = k1 ? cJSON_GetObjectItem(l, k1) : NULL;
            cJSON *b = k2 ? cJSON_GetObjectItem(l, k2) : NULL;
            if (k1 && (!a || strcmp(a->valuestring, v1) != 0))
                continue;
            if (k2 && (!b || strcmp(b->valuestring, v2) != 0))
                continue;
            return cJSON_GetObjectItem(s, field)->valuedouble;
        }
        return 0;
    }
    fail_msg("family %s missing", fam);
    return -1;
}

#define XV(root, fam, x) series(root, fam, "transport", x, NULL, NULL, "value")
#define XOV(root, fam, x, op)                                                  \
    series(root, fam, "transport", x, "operation", op, "value")
#define XH(root, fam, x, what)                                                 \
    series(root, fam, "transport", x, NULL, NULL, what)
#define TOTAL(root, fam) cJSON_GetObjectItem(root, fam)->valuedouble

/* ---- tests ------------------------------------------------------------------
 */

/* Writes and reads of random sizes over tcp: every counter and histogram
 * equals what moved, and the text endpoint says the same as the JSON one. */
static void test_counters_equal_traffic(void **state)
{
    struct fixture *f = *state;
    const int nw = 40, nr = 24, per = 8;
    uint64_t wbytes = 0, rbytes = 0;
    tent_request_t r[8];
    for (int done = 0; done < nw + nr; done += per) {
        bool write = done < nw;
        for (int i = 0; i < per; i++) {
            uint64_t len = 1 + rnd(f) % (256 << 10);
            uint64_t off = (uint64_t)(i * (RW_LEN / per));
            r[i] =
                (tent_request_t){.opcode = write ? OPCODE_WRITE : OPCODE_READ,
                                 .source = f->src + off,
                                 .target_id = f->seg,
                                 .target_offset = f->peer.rw_base + off,
                                 .length = len};
            if (write)
                wbytes += len;
            else
                rbytes += len;
        }
        tent_batch_id_t b = tent_allocate_batch(f->e, per);
        assert_int_not_equal(b, 0);
        assert_int_equal(tent_submit(f->e, b, r, per), 0);
        tent_status_t st;
        assert_int_equal(e2e_wait(f->e, b, 10000, &st), 0);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_int_equal(tent_free_batch(f->e, b), 0);
        if (write)
            for (int i = 0; i < per; i++)
                assert_true(e2e_peer_hash(&f->peer, false,
                                          r[i].target_offset - f->peer.rw_base,
                                          r[i].length) ==
                            e2e_fnv(r[i].source, r[i].length));
    }
    tent_batch_id_t open_batch = tent_allocate_batch(f->e, 4);
    assert_int_not_equal(open_batch, 0);

    cJSON *j = scrape_json(f->e);
    assert_int_equal(XV(j, "tent_write_bytes_total", "tcp"), wbytes);
    assert_int_equal(XV(j, "tent_read_bytes_total", "tcp"), rbytes);
    assert_int_equal(XV(j, "tent_write_requests_total", "tcp"), nw);
    assert_int_equal(XV(j, "tent_read_requests_total", "tcp"), nr);
    assert_int_equal(TOTAL(j, "tent_write_failures_total"), 0);
    assert_int_equal(TOTAL(j, "tent_read_failures_total"), 0);
    assert_int_equal(TOTAL(j, "tent_transport_failover_total"), 0);
    assert_int_equal(XOV(j, "tent_transport_attempts_total", "tcp", "write"),
                     nw);
    assert_int_equal(XOV(j, "tent_transport_attempts_total", "tcp", "read"),
                     nr);
    assert_int_equal(TOTAL(j, "tent_transport_attempt_failures_total"), 0);
    assert_int_equal(XH(j, "tent_write_size_bytes", "tcp", "count"), nw);
    assert_int_equal(XH(j, "tent_write_size_bytes", "tcp", "sum"), wbytes);
    assert_int_equal(XH(j, "tent_read_size_bytes", "tcp", "count"), nr);
    assert_int_equal(XH(j, "tent_read_size_bytes", "tcp", "sum"), rbytes);
    assert_int_equal(XH(j, "tent_write_latency_us", "tcp", "count"), nw);
    assert_int_equal(XH(j, "tent_read_latency_us", "tcp", "count"), nr);
    assert_true(XH(j, "tent_write_latency_us", "tcp", "sum") > 0);
    assert_int_equal(XH(j, "tent_transport_attempt_latency_us", "tcp", "count"),
                     nw + nr);
    assert_int_equal(XV(j, "tent_tasks_in_flight", "tcp"), 0);
    assert_int_equal(TOTAL(j, "tent_batches_allocated"), 1);
    assert_int_equal(TOTAL(j, "tent_registered_bytes"), RW_LEN);
    assert_int_equal(
        series(j, "tent_peers", "transport", "tcp", "state", "up", "value"), 1);
    assert_int_equal(
        series(j, "tent_peers", "transport", "tcp", "state", "down", "value"),
        0);
    /* one rail (loopback): it carried every byte, nothing is left on it */
    assert_int_equal(
        series(j, "tent_rail_bytes_total", "transport", "tcp", "nic", "lo",
               "value"),
        wbytes + rbytes);
    assert_int_equal(series(j, "tent_rail_inflight_bytes", "transport", "tcp",
                            "nic", "lo", "value"),
                     0);
    assert_int_equal(TOTAL(j, "tent_rail_failures_total"), 0);
    assert_int_equal(TOTAL(j, "tent_rail_paused"), 0);
    assert_true(series(j, "tent_rail_bandwidth_bytes_per_second", "transport",
                       "tcp", "nic", "lo", "value") > 0);
    cJSON_Delete(j);
    tent_nic_load_stat_t nics[4];
    size_t nn = 4;
    assert_int_equal(tent_get_nic_load_stats(f->e, nics, &nn), 0);
    assert_int_equal(nn, 1);
    assert_string_equal(nics[0].device_name, "lo");
    assert_int_equal(nics[0].inflight_bytes, 0);
    assert_true(nics[0].ewma_bandwidth_bps > 0);

    struct mt_reply t;
    assert_int_equal(mt_get(mt_port(f->e), "GET /metrics HTTP/1.0\r\n\r\n", &t),
                     0);
    char line[128];
    snprintf(line, sizeof(line),
             "\ntent_write_bytes_total{transport=\"tcp\"} "
             "%llu\n",
             (unsigned long long)wbytes);
    assert_non_null(strstr(t.body, line));
    assert_non_null(strstr(t.body, "\n# TYPE tent_rail_bytes_total counter\n"
                                   "tent_rail_bytes_total{transport=\"tcp\","
                                   "nic=\"lo\",peer=\""));
    mt_reply_free(&t);
    assert_int_equal(tent_free_batch(f->e, open_batch), 0);
}

/* The target's data path goes away with no other transport to go to: the
 * writes fail for good and are counted as failures, with no bytes. */
static void test_failures_counted(void **state)
{
    struct fixture *f = *state;
    const int n = 5;
    tent_request_t r[5];
    for (int i = 0; i < n; i++)
        r[i] = (tent_request_t){.opcode = OPCODE_WRITE,
                                .source = f->src + i * 4096,
                                .target_id = f->seg,
                                .target_offset = f->peer.rw_base + i * 4096,
                                .length = 4096};
    e2e_peer_stop_rpc(&f->peer);
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, 15000, &st), 0);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(tent_free_batch(f->e, b), 0);

    cJSON *j = scrape_json(f->e);
    assert_int_equal(XV(j, "tent_write_failures_total", "tcp"), n);
    assert_int_equal(XV(j, "tent_write_requests_total", "tcp"), n);
    assert_int_equal(TOTAL(j, "tent_write_bytes_total"), 0);
    assert_int_equal(
        XOV(j, "tent_transport_attempt_failures_total", "tcp", "write"), n);
    assert_int_equal(XOV(j, "tent_transport_attempts_total", "tcp", "write"),
                     n);
    assert_int_equal(XH(j, "tent_write_latency_us", "tcp", "count"), n);
    assert_int_equal(XH(j, "tent_write_size_bytes", "tcp", "count"), 0);
    assert_int_equal(TOTAL(j, "tent_tasks_in_flight"), 0);
    assert_int_equal(
        series(j, "tent_peers", "transport", "tcp", "state", "down", "value"),
        1);
    assert_int_equal(
        series(j, "tent_peers", "transport", "tcp", "state", "up", "value"), 0);
    cJSON_Delete(j);
}

/* tcp first (pinned), shm second; the target's tcp data path stops
 * mid-batch.  Every task still completes, and the failover and attempt
 * counters match the transport each task finished on. */
static void test_forced_failover(void **state)
{
    struct fixture *f = *state;
    const size_t n = 32, len = 64 << 10;
    tent_request_t r[32];
    for (size_t i = 0; i < n; i++)
        r[i] = (tent_request_t){.opcode = OPCODE_WRITE,
                                .source = f->src + i * len,
                                .target_id = f->seg,
                                .target_offset = f->peer.rw_base + i * len,
                                .length = len,
                                .transport_hint = TRANSPORT_TCP};
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n / 2), 0);
    e2e_peer_stop_rpc(&f->peer);
    assert_int_equal(tent_submit(f->e, b, r + n / 2, n / 2), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, 15000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    size_t on_shm = 0;
    for (size_t i = 0; i < n; i++) {
        char name[32];
        assert_int_equal(tent_task_transport(f->e, b, i, name, sizeof(name)),
                         0);
        on_shm += strcmp(name, "shm") == 0;
    }
    assert_int_equal(tent_free_batch(f->e, b), 0);
    assert_true(on_shm >= n / 2); /* the second half had no tcp at all */
    assert_true(e2e_peer_hash(&f->peer, false, 0, n * len) ==
                e2e_fnv(f->src, n * len));

    cJSON *j = scrape_json(f->e);
    assert_int_equal(series(j, "tent_transport_failover_total", "from", "tcp",
                            "to", "shm", "value"),
                     on_shm);
    assert_int_equal(TOTAL(j, "tent_transport_failover_total"), on_shm);
    assert_int_equal(XV(j, "tent_write_requests_total", "shm"), on_shm);
    assert_int_equal(XV(j, "tent_write_requests_total", "tcp"), n - on_shm);
    assert_int_equal(XV(j, "tent_write_bytes_total", "shm"), on_shm * len);
    assert_int_equal(XV(j, "tent_write_bytes_total", "tcp"),
                     (n - on_shm) * len);
    assert_int_equal(TOTAL(j, "tent_write_failures_total"), 0);
    assert_int_equal(XOV(j, "tent_transport_attempts_total", "tcp", "write"),
                     n);
    assert_int_equal(XOV(j, "tent_transport_attempts_total", "shm", "write"),
                     on_shm);
    assert_int_equal(
        XOV(j, "tent_transport_attempt_failures_total", "tcp", "write"),
        on_shm);
    assert_int_equal(TOTAL(j, "tent_tasks_in_flight"), 0);
    cJSON_Delete(j);
}

#ifdef MF_HOST_LIB
/* Writes pinned to memfabric: its request counters and the vendor batch
 * counters follow what was moved. */
static void test_memfabric_counters(void **state)
{
    struct fixture *f = *state;
    const size_t n = 16, len = 32 << 10;
    tent_request_t r[16];
    for (size_t i = 0; i < n; i++)
        r[i] = (tent_request_t){.opcode = OPCODE_WRITE,
                                .source = f->src + i * len,
                                .target_id = f->seg,
                                .target_offset = f->peer.rw_base + i * len,
                                .length = len,
                                .transport_hint = TRANSPORT_MEMFABRIC};
    for (int round = 0; round < 2; round++) {
        tent_batch_id_t b = tent_allocate_batch(f->e, n);
        assert_int_equal(tent_submit(f->e, b, r, n), 0);
        tent_status_t st;
        assert_int_equal(e2e_wait(f->e, b, 15000, &st), 0);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_int_equal(tent_free_batch(f->e, b), 0);
    }
    assert_true(e2e_peer_hash(&f->peer, false, 0, n * len) ==
                e2e_fnv(f->src, n * len));
    cJSON *j = scrape_json(f->e);
    assert_int_equal(XV(j, "tent_write_bytes_total", "memfabric"), 2 * n * len);
    assert_int_equal(XV(j, "tent_write_requests_total", "memfabric"), 2 * n);
    assert_int_equal(
        XOV(j, "tent_transport_attempts_total", "memfabric", "write"), 2 * n);
    /* one vendor batch per (peer, opcode) group of each submit call */
    assert_int_equal(TOTAL(j, "tent_memfabric_batches_submitted_total"), 2);
    assert_int_equal(TOTAL(j, "tent_memfabric_batches_pending"), 0);
    assert_int_equal(TOTAL(j, "tent_memfabric_query_errors_total"), 0);
    assert_int_equal(TOTAL(j, "tent_tasks_in_flight"), 0);
    cJSON_Delete(j);
}
#endif

/* ---- a real Prometheus server ----------------------------------------------
 */

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &sl) != 0) {
        close(fd);
        return 0;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int fail_with_log(const char *dir, const char *why)
{
    fprintf(stderr, "prometheus scenario: %s\n---- prometheus log\n", why);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "tail -n 30 %s/prometheus.log >&2", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "(no log)\n");
    return 1;
}

/* Value of `query` from Prometheus's HTTP API, or -1 while it has none. */
static double prom_query(uint16_t port, const char *query)
{
    char req[512];
    snprintf(req, sizeof(req), "GET /api/v1/query?query=%s HTTP/1.0\r\n\r\n",
             query);
    struct mt_reply r;
    if (mt_get(port, req, &r) != 0 || r.status != 200) {
        if (r.head)
            mt_reply_free(&r);
        return -1;
    }
    double v = -1;
    cJSON *j = cJSON_Parse(r.body);
    cJSON *res =
        j ? cJSON_GetObjectItem(cJSON_GetObjectItem(j, "data"), "result")
          : NULL;
    cJSON *first = res ? cJSON_GetArrayItem(res, 0) : NULL;
    cJSON *val = first ? cJSON_GetObjectItem(first, "value") : NULL;
    cJSON *num = val ? cJSON_GetArrayItem(val, 1) : NULL;
    if (num && cJSON_IsString(num))
        v = strtod(num->valuestring, NULL);
    cJSON_Delete(j);
    mt_reply_free(&r);
    return v;
}

static int run_prometheus(void)
{
    if (system("command -v prometheus >/dev/null 2>&1") != 0) {
        fprintf(stderr, "prometheus not installed (Debian package "
                        "prometheus): skipped\n");
        return 77;
    }
    struct fixture *f = NULL;
    void *st = NULL;
    if (setup_tcp(&st) != 0) {
        fprintf(stderr, "setup failed: %s\n", tent_last_error());
        return 1;
    }
    f = st;
    /* 12 writes of 3 sizes */
    uint64_t wbytes = 0;
    for (int i = 0; i < 12; i++) {
        uint64_t len = (uint64_t)(4096 << (i % 3));
        tent_request_t r = {.opcode = OPCODE_WRITE,
                            .source = f->src,
                            .target_id = f->seg,
                            .target_offset = f->peer.rw_base,
                            .length = len};
        tent_batch_id_t b = tent_allocate_batch(f->e, 1);
        tent_status_t s;
        if (!b || tent_submit(f->e, b, &r, 1) || e2e_wait(f->e, b, 10000, &s) ||
            s.status != STATUS_COMPLETED || tent_free_batch(f->e, b)) {
            fprintf(stderr, "write %d failed: %s\n", i, tent_last_error());
            return 1;
        }
        wbytes += len;
    }
    char dir[] = "/tmp/tent_prom_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    uint16_t pport = free_port();
    char path[256];
    snprintf(path, sizeof(path), "%s/prometheus.yml", dir);
    FILE *cf = fopen(path, "w");
    fprintf(cf,
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: tent\n    static_configs:\n"
            "      - targets: ['127.0.0.1:%u']\n",
            (unsigned)mt_port(f->e));
    fclose(cf);
    char cfg[300], data[300], listen[64], log[300];
    snprintf(cfg, sizeof(cfg), "--config.file=%s", path);
    snprintf(data, sizeof(data), "--storage.tsdb.path=%s/data", dir);
    snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%u",
             (unsigned)pport);
    snprintf(log, sizeof(log), "%s/prometheus.log", dir);
    fflush(NULL);
    /* this process runs the engine's threads: the child makes only
     * async-signal-safe calls (no stdio, whose locks a thread may hold)
     * up to the exec */
    pid_t pid = fork();
    if (pid == 0) {
        int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (lfd < 0 || dup2(lfd, 1) < 0 || dup2(lfd, 2) < 0)
            _exit(126);
        execlp("prometheus", "prometheus", cfg, data, listen, (char *)NULL);
        _exit(127);
    }
    /* Prometheus scrapes every second; wait for the query to see it. */
    int rc = 1;
    char q[200];
    snprintf(q, sizeof(q),
             "tent_write_bytes_total%%7Bjob%%3D%%22tent%%22%%2C"
             "transport%%3D%%22tcp%%22%%7D");
    double got = -1;
    double end = mt_now() + 60;
    while (mt_now() < end) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            pid = -1;
            rc = fail_with_log(dir, "prometheus exited early");
            break;
        }
        got = prom_query(pport, q);
        if (got == (double)wbytes) {
            rc = 0;
            break;
        }
        usleep(250 * 1000);
    }
    if (rc == 1 && pid > 0) {
        char why[128];
        snprintf(why, sizeof(why),
                 "query never returned %llu (last answer %.0f)",
                 (unsigned long long)wbytes, got);
        fail_with_log(dir, why);
    }
    if (rc == 0)
        printf("prometheus on 127.0.0.1:%u scraped the engine: "
               "tent_write_bytes_total{transport=\"tcp\"} = %.0f (expected "
               "%llu)\n",
               (unsigned)pport, got, (unsigned long long)wbytes);
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    teardown(&st);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "prometheus") == 0)
        return run_prometheus();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counters_equal_traffic, setup_tcp,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failures_counted, setup_tcp,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_forced_failover, setup_both,
                                        teardown),
#ifdef MF_HOST_LIB
        cmocka_unit_test_setup_teardown(test_memfabric_counters, setup_mf,
                                        teardown),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
