/* Metadata backends against the real servers: argv[1] = etcd | redis | http
 * (argv[2] = the http test server script).  The test starts its own server
 * (etcd, redis-server, or http_meta_server.py) on free loopback ports with
 * a temporary data directory, and stops it.  A missing server binary is a
 * test FAILURE (CI installs them), not a skip.
 *
 * Two processes move data through segments resolved by name in the
 * service, every byte checked; a killed engine's segment expires within the
 * TTL (etcd, redis; the HTTP protocol has no expiry); the service restarting
 * under running engines: transfers go on and the descriptors come back. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
// clang-format on

#include "../common/meta_server.h"
#include "../common/test_child.h"
#include "common/config.h"
#include "e2e_peer.h"
#include "meta/meta_kv.h"
#include "tent/transfer_engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUF_LEN ((size_t)16 << 20)
#define TTL_S   2
#define EXTRA   ((size_t)256 << 10)

static const char *g_kind;
static const char *g_script; /* http server script */
static char g_tmp[256];
static int g_port, g_port2;
static pid_t g_srv = -1;
static char g_servers[256];
static char g_prefix[64];

/* ---- helpers ----------------------------------------------------------------
 */

static const struct tent_meta_kv_ops *kv_ops(void)
{
#ifdef TENT_WITH_CURL
    if (strcmp(g_kind, "etcd") == 0)
        return &tent_meta_etcd_ops;
    if (strcmp(g_kind, "http") == 0)
        return &tent_meta_http_ops;
#endif
#ifdef TENT_WITH_HIREDIS
    if (strcmp(g_kind, "redis") == 0)
        return &tent_meta_redis_ops;
#endif
    return NULL;
}

/* Reads key from the service directly: 0, TENT_ENOSEGMENT or an error. */
static int kv_get(const char *key, char **val)
{
    const struct tent_meta_kv_ops *ops = kv_ops();
    struct tent_meta_kv_conf c = {.nendpoints = 1,
                                  .ttl_s = TTL_S,
                                  .timeout_ms = 1000,
                                  .password = "tentpw",
                                  .db = 3};
    c.endpoints[0] = g_servers;
    void *kv = NULL;
    int rc = ops->create(&c, &kv);
    if (rc)
        return rc;
    char *v = NULL;
    size_t len = 0;
    rc = ops->get(kv, key, &v, &len);
    ops->destroy(kv);
    if (val)
        *val = v;
    else
        free(v);
    return rc;
}

static bool kv_has(const char *name)
{
    char key[512];
    snprintf(key, sizeof(key), "%s%s", g_prefix, name);
    return kv_get(key, NULL) == 0;
}

/* Polls until the key's presence is `want`; returns the ms it took or -1. */
static long wait_key(const char *name, bool want, long timeout_ms)
{
    long t0 = e2e_now_ms();
    while (e2e_now_ms() - t0 < timeout_ms) {
        if (kv_has(name) == want)
            return e2e_now_ms() - t0;
        usleep(50000);
    }
    return -1;
}

static void start_server(void)
{
    char dir[300], log[300];
    snprintf(dir, sizeof(dir), "%s/data", g_tmp);
    snprintf(log, sizeof(log), "%s/server.log", g_tmp);
    pid_t pid = ms_spawn(g_kind, g_port, g_port2, dir, log, g_script, "tentpw");
    assert_true(pid > 0);
    g_srv = pid;
    /* Ready when a write through the backend works. */
    const struct tent_meta_kv_ops *ops = kv_ops();
    struct tent_meta_kv_conf c = {.nendpoints = 1,
                                  .ttl_s = 30,
                                  .timeout_ms = 1000,
                                  .password = "tentpw",
                                  .db = 3};
    c.endpoints[0] = g_servers;
    long t0 = e2e_now_ms();
    for (;;) {
        void *kv = NULL;
        assert_int_equal(ops->create(&c, &kv), 0);
        int rc = ops->put(kv, "meta-test-ready", "1", 1);
        ops->destroy(kv);
        if (rc == 0)
            break;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            g_srv = -1;
            fail_msg("%s server exited during start-up (status %d); see %s",
                     g_kind, st, log);
        }
        if (e2e_now_ms() - t0 > 30000)
            fail_msg("%s server on port %d not ready after 30 s: %s; see %s",
                     g_kind, g_port, tent_last_error(), log);
        usleep(50000);
    }
}

static void stop_server(void)
{
    ms_stop(g_srv);
    g_srv = -1;
}

static void configure(const char *servers, const char *segname)
{
    tent_config_reset_global();
    tent_set_config("log_level",
                    getenv("META_LOG") ? getenv("META_LOG") : "error");
    tent_set_config("transports/shm/enable", "false");
    tent_set_config("transports/tcp/enable", "true");
    tent_set_config("transports/tcp/timeout_ms", "1500");
    tent_set_config("metadata_type", g_kind);
    tent_set_config("metadata_servers", servers);
    tent_set_config("metadata_key_prefix", g_prefix);
    tent_set_config("metadata_ttl_s", "2");
    tent_set_config("metadata_timeout_ms", "1000");
    if (strcmp(g_kind, "redis") == 0) {
        tent_set_config("metadata_password", "tentpw");
        tent_set_config("metadata_db", "3");
    }
    if (segname)
        tent_set_config("local_segment_name", segname);
}

/* ---- target process -------------------------------------------------------
 */

struct target {
    pid_t pid;
    int cmd, ans;
    char name[256];
    char rpc[128];
    uint64_t base;
};

struct tcmd {
    char op;
    uint64_t len;
};

static void target_main(int cfd, int afd, const char *segname)
{
    /* the JSON-array form of metadata_servers */
    char arr[300];
    snprintf(arr, sizeof(arr), "[\"%s\"]", g_servers);
    configure(arr, segname);
    tent_engine_t e = tent_create_engine();
    if (!e) {
        fprintf(stderr, "target: %s\n", tent_last_error());
        _exit(2);
    }
    void *buf;
    if (tent_allocate_memory(e, &buf, BUF_LEN, "cpu") ||
        tent_register_memory(e, buf, BUF_LEN))
        _exit(3);
    e2e_pattern_fill(buf, BUF_LEN, 0);
    struct target t = {0};
    tent_segment_name(e, t.name, sizeof(t.name));
    char host[64];
    uint16_t port;
    tent_rpc_server_addr_port(e, host, sizeof(host), &port);
    snprintf(t.rpc, sizeof(t.rpc), "%s:%u", host, (unsigned)port);
    t.base = (uintptr_t)buf;
    if (write(afd, &t, sizeof(t)) != (ssize_t)sizeof(t))
        _exit(4);
    struct tcmd c;
    while (tc_read_all(cfd, &c, sizeof(c)) == 0) {
        if (c.op == 'H') {
            uint64_t h = e2e_fnv(buf, BUF_LEN);
            if (write(afd, &h, sizeof(h)) != sizeof(h))
                break;
        } else if (c.op == 'R') {
            /* as e2e_peer's 'R': 0 answers a failure, and leaks nothing */
            uint8_t *m = malloc(c.len);
            uint64_t a = 0;
            if (m) {
                e2e_pattern_fill(m, c.len, 7);
                if (tent_register_memory(e, m, c.len) == 0)
                    a = (uintptr_t)m;
                else
                    free(m);
            }
            if (write(afd, &a, sizeof(a)) != sizeof(a))
                break;
        } else {
            break;
        }
    }
    tent_destroy_engine(e);
    _exit(0);
}

static void target_child(int cfd, int afd, void *arg)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    target_main(cfd, afd, *(const char **)arg);
}

static void target_start(struct target *t, const char *segname)
{
    int cmd_fd = -1, ans_fd = -1;
    pid_t pid = tc_fork_child(target_child, &segname, &cmd_fd, &ans_fd);
    assert_true(pid >= 0);
    struct pollfd pf = {.fd = ans_fd, .events = POLLIN};
    if (poll(&pf, 1, 15000) != 1 || tc_read_all(ans_fd, t, sizeof(*t))) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("target engine '%s' did not start (%s backend)", segname,
                 g_kind);
    }
    t->pid = pid;
    t->cmd = cmd_fd;
    t->ans = ans_fd;
}

static uint64_t target_call(struct target *t, char op, uint64_t len)
{
    struct tcmd c = {.op = op, .len = len};
    uint64_t r = 0;
    assert_int_equal(write(t->cmd, &c, sizeof(c)), sizeof(c));
    assert_int_equal(tc_read_all(t->ans, &r, sizeof(r)), 0);
    return r;
}

static void target_quit(struct target *t)
{
    struct tcmd c = {.op = 'Q'};
    if (write(t->cmd, &c, sizeof(c)) != sizeof(c))
        kill(t->pid, SIGKILL);
    long t0 = e2e_now_ms();
    while (waitpid(t->pid, NULL, WNOHANG) == 0) {
        if (e2e_now_ms() - t0 > 10000) {
            kill(t->pid, SIGKILL);
            waitpid(t->pid, NULL, 0);
            break;
        }
        usleep(2000);
    }
    close(t->cmd);
    close(t->ans);
    t->pid = 0;
}

static void target_kill(struct target *t)
{
    kill(t->pid, SIGKILL);
    waitpid(t->pid, NULL, 0);
    close(t->cmd);
    close(t->ans);
    t->pid = 0;
}

/* ---- initiator ------------------------------------------------------------
 */

struct init {
    tent_engine_t e;
    tent_segment_id_t seg;
    uint8_t *src, *dst, *mirror;
    uint64_t rng;
};

static uint64_t rnd(struct init *in)
{
    in->rng ^= in->rng << 13;
    in->rng ^= in->rng >> 7;
    in->rng ^= in->rng << 17;
    return in->rng;
}

static void init_open(struct init *in, const char *servers, struct target *t)
{
    configure(servers, NULL);
    in->e = tent_create_engine();
    if (!in->e)
        fail_msg("initiator engine: %s", tent_last_error());
    void *p;
    assert_int_equal(tent_allocate_memory(in->e, &p, BUF_LEN, "cpu"), 0);
    assert_int_equal(tent_register_memory(in->e, p, BUF_LEN), 0);
    in->src = p;
    assert_int_equal(tent_allocate_memory(in->e, &p, BUF_LEN, "cpu"), 0);
    assert_int_equal(tent_register_memory(in->e, p, BUF_LEN), 0);
    in->dst = p;
    in->mirror = malloc(BUF_LEN);
    e2e_pattern_fill(in->mirror, BUF_LEN, 0);
    in->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    int rc = tent_open_segment(in->e, &in->seg, t->name);
    if (rc)
        fail_msg("open '%s': %s", t->name, tent_last_error());
}

static void init_close(struct init *in)
{
    tent_destroy_engine(in->e);
    free(in->mirror);
    in->e = NULL;
}

static void run(struct init *in, tent_request_t *r, size_t n)
{
    tent_batch_id_t b = tent_allocate_batch(in->e, n);
    assert_int_not_equal(b, 0);
    int rc = tent_submit(in->e, b, r, n);
    if (rc)
        fail_msg("submit: %s", tent_last_error());
    tent_status_t st;
    assert_int_equal(e2e_wait(in->e, b, 20000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(in->e, b), 0);
}

/* Random writes then reads of the same ranges, every byte checked. */
static void rounds(struct init *in, struct target *t, int nrounds)
{
    static const size_t sizes[] = {1, 7, 64};
    for (int k = 0; k < nrounds; k++) {
        size_t n = sizes[k % 3], lane = BUF_LEN / n;
        tent_request_t *r = calloc(n, sizeof(*r));
        for (size_t i = 0; i < n; i++) {
            uint64_t len = 1 + rnd(in) % ((uint64_t)1 << (rnd(in) % 21));
            if (len > lane)
                len = lane;
            uint64_t off = i * lane + rnd(in) % (lane - len + 1);
            for (uint64_t j = 0; j < len; j++)
                in->src[off + j] = (uint8_t)rnd(in);
            r[i] = (tent_request_t){.opcode = OPCODE_WRITE,
                                    .source = in->src + off,
                                    .target_id = in->seg,
                                    .target_offset = t->base + off,
                                    .length = len};
        }
        run(in, r, n);
        for (size_t i = 0; i < n; i++) {
            uint64_t off = r[i].target_offset - t->base;
            memcpy(in->mirror + off, in->src + off, r[i].length);
            r[i].opcode = OPCODE_READ;
            r[i].source = in->dst + off;
        }
        run(in, r, n);
        for (size_t i = 0; i < n; i++) {
            uint64_t off = r[i].target_offset - t->base;
            assert_memory_equal(in->dst + off, in->mirror + off, r[i].length);
        }
        free(r);
    }
    assert_true(target_call(t, 'H', 0) == e2e_fnv(in->mirror, BUF_LEN));
}

/* Reads a buffer the target registered after we opened it. */
static void read_extra(struct init *in, tent_segment_id_t seg, uint64_t addr)
{
    tent_request_t r = {.opcode = OPCODE_READ,
                        .source = in->dst,
                        .target_id = seg,
                        .target_offset = addr,
                        .length = EXTRA};
    memset(in->dst, 0, EXTRA);
    run(in, &r, 1);
    for (size_t i = 0; i < EXTRA; i++)
        if (in->dst[i] != e2e_pattern(i + 7))
            fail_msg("extra buffer byte %zu differs", i);
}

/* ---- tests ------------------------------------------------------------------
 */

static void test_down_at_start(void **state)
{
    (void)state;
    char dead[128];
    int port = ms_free_port();
    ms_endpoint(g_kind, port, dead, sizeof(dead));
    configure(dead, NULL);
    tent_engine_t e = tent_create_engine();
    assert_null(e);
    char want[32];
    snprintf(want, sizeof(want), "127.0.0.1:%d", port);
    if (!strstr(tent_last_error(), want))
        fail_msg("error does not name the endpoint %s: %s", want,
                 tent_last_error());
    /* Unknown backends and missing endpoint lists are configuration errors */
    tent_config_reset_global();
    tent_set_config("log_level", "error");
    tent_set_config("metadata_type", g_kind);
    assert_null(tent_create_engine());
    assert_non_null(strstr(tent_last_error(), "metadata_servers"));
    tent_set_config("metadata_type", "zookeeper");
    assert_null(tent_create_engine());
    assert_non_null(strstr(tent_last_error(), "zookeeper"));
    if (strcmp(g_kind, "redis") == 0) {
        /* a wrong password is refused with the server's reason */
        configure(g_servers, NULL);
        tent_set_config("metadata_password", "wrong");
        assert_null(tent_create_engine());
        if (!strstr(tent_last_error(), "AUTH"))
            fail_msg("wrong password: %s", tent_last_error());
    }
}

static void test_transfer(void **state)
{
    (void)state;
    struct target t;
    char name[64];
    snprintf(name, sizeof(name), "meta-tgt-%d", (int)getpid());
    target_start(&t, name);
    assert_string_equal(t.name, name);
    assert_true(kv_has(name));
    /* The first endpoint is dead: the next one is used. */
    char dead[128], servers[400];
    ms_endpoint(g_kind, ms_free_port(), dead, sizeof(dead));
    snprintf(servers, sizeof(servers), "%s,%s", dead, g_servers);
    struct init in = {0};
    init_open(&in, servers, &t);
    /* A generated name, published too. */
    char mine[256], pid[32];
    assert_int_equal(tent_segment_name(in.e, mine, sizeof(mine)), 0);
    snprintf(pid, sizeof(pid), "-%d-", (int)getpid());
    assert_non_null(strstr(mine, pid));
    assert_true(kv_has(mine));
    rounds(&in, &t, 12);
    /* More memory on the target: the miss refreshes from the service. */
    uint64_t extra = target_call(&t, 'R', EXTRA);
    assert_int_not_equal(extra, 0);
    read_extra(&in, in.seg, extra);
    /* "<host>:<port>" still works, as in p2p mode. */
    tent_segment_id_t s2;
    assert_int_equal(tent_open_segment(in.e, &s2, t.rpc), 0);
    read_extra(&in, s2, extra);
    /* An unknown name fails, naming the key. */
    tent_segment_id_t s3;
    assert_int_equal(tent_open_segment(in.e, &s3, "meta-nobody"),
                     TENT_ENOSEGMENT);
    assert_non_null(strstr(tent_last_error(), "meta-nobody"));
    /* A clean shutdown removes the key at once. */
    target_quit(&t);
    assert_false(kv_has(name));
    init_close(&in);
    assert_false(kv_has(mine));
}

static void test_expiry(void **state)
{
    (void)state;
    struct target t;
    char name[64];
    snprintf(name, sizeof(name), "meta-exp-%d", (int)getpid());
    target_start(&t, name);
    struct init in = {0};
    init_open(&in, g_servers, &t);
    rounds(&in, &t, 3);
    /* Kept alive well past the TTL. */
    usleep((TTL_S * 2 + 1) * 1000000);
    assert_true(kv_has(name));
    target_kill(&t);
    if (strcmp(g_kind, "http") == 0) {
        /* TENT's HTTP protocol has no expiry: the key stays until deleted. */
        usleep((TTL_S + 1) * 1000000);
        assert_true(kv_has(name));
    } else {
        long ms = wait_key(name, false, (TTL_S + 4) * 1000);
        if (ms < 0)
            fail_msg("segment '%s' of a killed engine still in %s after %d s",
                     name, g_kind, TTL_S + 4);
        printf("# %s: killed engine's segment expired after %ld ms (TTL %d "
               "s)\n",
               g_kind, ms, TTL_S);
        /* A fresh engine cannot open it any more. */
        configure(g_servers, NULL);
        tent_engine_t e = tent_create_engine();
        assert_non_null(e);
        tent_segment_id_t s;
        assert_int_equal(tent_open_segment(e, &s, name), TENT_ENOSEGMENT);
        tent_destroy_engine(e);
    }
    init_close(&in);
}

static void test_restart(void **state)
{
    (void)state;
    struct target t;
    char name[64], mine[256];
    snprintf(name, sizeof(name), "meta-rst-%d", (int)getpid());
    target_start(&t, name);
    struct init in = {0};
    init_open(&in, g_servers, &t);
    tent_segment_name(in.e, mine, sizeof(mine));
    rounds(&in, &t, 3);

    stop_server();
    /* The data path does not need the service. */
    rounds(&in, &t, 6);
    /* Registration does not wait for it either. */
    long t0 = e2e_now_ms();
    uint64_t extra = target_call(&t, 'R', EXTRA);
    assert_int_not_equal(extra, 0);
    void *p;
    assert_int_equal(tent_allocate_memory(in.e, &p, 1 << 20, "cpu"), 0);
    assert_int_equal(tent_register_memory(in.e, p, 1 << 20), 0);
    assert_true(e2e_now_ms() - t0 < 5000);
    /* A miss while the service is down refreshes from the peer directly. */
    read_extra(&in, in.seg, extra);
    /* The registration above could not be published: the metric counts it
     * (or the keepalive that found the service gone before). */
    static char text[1 << 17];
    size_t tlen = sizeof(text);
    assert_int_equal(tent_metrics_prometheus(in.e, text, &tlen), 0);
    const char *fl = strstr(text, "\ntent_metadata_publish_failures_total ");
    assert_non_null(fl);
    assert_true(atoi(fl + strlen("\ntent_metadata_publish_failures_total ")) >=
                1);

    if (strcmp(g_kind, "etcd") == 0) {
        /* a rebuilt cluster: no key, no lease survives */
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s/data'", g_tmp);
        assert_int_equal(system(cmd), 0);
    }
    start_server();
    /* Both engines publish again, with what changed during the outage. */
    long ms = wait_key(name, true, 10000);
    assert_true(ms >= 0);
    assert_true(wait_key(mine, true, 10000) >= 0);
    printf("# %s: re-published %ld ms after the service came back\n", g_kind,
           ms);
    struct init in2 = {0};
    init_open(&in2, g_servers, &t);
    memcpy(in2.mirror, in.mirror, BUF_LEN);
    read_extra(&in2, in2.seg, extra);
    rounds(&in2, &t, 3);
    memcpy(in.mirror, in2.mirror, BUF_LEN);
    rounds(&in, &t, 3);
    init_close(&in2);
    target_quit(&t);
    init_close(&in);
}

static int group_setup(void **state)
{
    (void)state;
    g_port = ms_free_port();
    g_port2 = ms_free_port();
    ms_endpoint(g_kind, g_port, g_servers, sizeof(g_servers));
    snprintf(g_prefix, sizeof(g_prefix), "tent-test/%d/", (int)getpid());
    start_server();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    stop_server();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", g_tmp);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2 || (strcmp(argv[1], "etcd") && strcmp(argv[1], "redis") &&
                     strcmp(argv[1], "http"))) {
        fprintf(stderr, "usage: %s etcd|redis|http [http_meta_server.py]\n",
                argv[0]);
        return 2;
    }
    g_kind = argv[1];
    g_script = argc > 2 ? argv[2] : NULL;
    if (!kv_ops()) {
        fprintf(stderr,
                "FAIL: metadata backend '%s' is not built in (libcurl / "
                "hiredis missing at configure time; install "
                "libcurl4-openssl-dev libhiredis-dev)\n",
                g_kind);
        return 1;
    }
    const char *bin = ms_server_bin(g_kind);
    if (!ms_in_path(bin)) {
        fprintf(stderr,
                "FAIL: '%s' not found in PATH; the %s metadata test needs "
                "the real server (apt-get install %s)\n",
                bin, g_kind, ms_server_package(g_kind));
        return 1;
    }
    if (strcmp(g_kind, "http") == 0 && (!g_script || access(g_script, R_OK))) {
        fprintf(stderr, "FAIL: http test server script missing: %s\n",
                g_script ? g_script : "(none given)");
        return 1;
    }
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/tent-meta-%s-XXXXXX", g_kind);
    if (!mkdtemp(g_tmp)) {
        fprintf(stderr, "FAIL: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    /* the service is on loopback: never through a proxy */
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_down_at_start),
        cmocka_unit_test(test_transfer),
        cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_restart),
    };
    return cmocka_run_group_tests_name(g_kind, tests, group_setup,
                                       group_teardown);
}
