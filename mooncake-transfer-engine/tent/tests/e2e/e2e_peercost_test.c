/* What a peer costs an engine, with real processes (issue 41, item 2):
 *
 *  threads_tcp: an engine that has talked to N peers (all at once, each a
 *    process of its own) has at most transports/tcp/workers more threads
 *    than before it opened any: the tcp initiator's threads are one pool
 *    per engine, not a few per peer.
 *  idle_tcp: a connection unused for transports/tcp/idle_timeout_ms is
 *    closed (the engine's descriptors come back down), and the next
 *    transfer opens a new one.
 *  overcap_tcp: more initiators (processes) than the target's
 *    rpc_max_connections, each moving data in rounds with the others: the
 *    target evicts idle connections or refuses newcomers, the initiators
 *    reconnect and retry, and every task COMPLETES.
 *  overcap_secret_tcp: the same with a cluster secret (a refusal then
 *    comes during the handshake, and must still be retried).
 *  measure N: prints the engine's threads, descriptors and resident memory
 *    before and after opening N peers and moving data with all of them at
 *    once, and after idle_timeout_ms (docs/performance.md, "Cost per
 *    peer").
 *
 * E2E_PEERCOST_PEERS overrides N of threads_tcp (16). */
#include "e2e_peer.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEN (1u << 20)

struct fleet {
    int n;
    struct e2e_peer *p;
    tent_segment_id_t *seg;
};

static void fleet_start(struct fleet *f, int n)
{
    f->n = n;
    f->p = calloc((size_t)n, sizeof(*f->p));
    f->seg = calloc((size_t)n, sizeof(*f->seg));
    assert_non_null(f->p);
    assert_non_null(f->seg);
    for (int i = 0; i < n; i++)
        assert_int_equal(e2e_peer_start(&f->p[i], LEN, false, true), 0);
}

static void fleet_quit(struct fleet *f)
{
    for (int i = 0; i < f->n; i++)
        e2e_peer_quit(&f->p[i]);
    free(f->p);
    free(f->seg);
}

/* One batch: a write of len bytes to every peer, all in flight together;
 * then a read of the same bytes back from each, checked. */
static void move_all(tent_engine_t e, struct fleet *f, uint8_t *buf,
                     size_t len)
{
    tent_request_t *r = calloc((size_t)f->n, sizeof(*r));
    assert_non_null(r);
    for (int op = 0; op < 2; op++) {
        for (int i = 0; i < f->n; i++)
            r[i] = (tent_request_t){
                .opcode = op ? OPCODE_READ : OPCODE_WRITE,
                .source = buf + (op ? (size_t)i * len : 0),
                .target_id = f->seg[i],
                .target_offset = f->p[i].rw_base,
                .length = len};
        tent_batch_id_t b = tent_allocate_batch(e, (size_t)f->n);
        assert_int_equal(tent_submit(e, b, r, (size_t)f->n), 0);
        tent_status_t st;
        assert_int_equal(e2e_wait(e, b, 30000, &st), 0);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_int_equal(tent_free_batch(e, b), 0);
    }
    for (int i = 0; i < f->n; i++)
        assert_memory_equal(buf + (size_t)i * len, buf, len);
    free(r);
}

/* An engine (workers threads in its pool, 0: the default) that opens n
 * peers and moves data with all of them at once; the usage before the
 * opens, after the transfers and (idle_ms > 0) once the idle connections
 * are closed. */
static void cost(int n, int workers, int idle_ms, struct e2e_usage out[3])
{
    struct fleet f;
    fleet_start(&f, n); /* the children first: no threads here yet */
    e2e_config(false, true);
    char wk[16], id[16];
    snprintf(wk, sizeof(wk), "%d", workers);
    snprintf(id, sizeof(id), "%d", idle_ms > 0 ? idle_ms : 60000);
    tent_set_config("transports/tcp/workers", wk);
    tent_set_config("transports/tcp/idle_timeout_ms", id);
    tent_set_config("rpc_timeout_ms", "15000");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    size_t len = 64u << 10;
    uint8_t *buf;
    assert_int_equal(
        tent_allocate_memory(e, (void **)&buf, (size_t)n * len, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, buf, (size_t)n * len), 0);
    e2e_pattern_fill(buf, len, 7);
    out[0] = e2e_usage_now();
    for (int i = 0; i < n; i++)
        assert_int_equal(tent_open_segment(e, &f.seg[i], f.p[i].name), 0);
    for (int round = 0; round < 3; round++)
        move_all(e, &f, buf, len);
    out[1] = e2e_usage_now();
    out[2] = out[1];
    if (idle_ms > 0) {
        long t0 = e2e_now_ms();
        while (e2e_now_ms() - t0 < idle_ms + 5000) {
            usleep(20 * 1000);
            out[2] = e2e_usage_now();
            if (out[2].fds <= out[0].fds)
                break;
        }
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(tent_close_segment(e, f.seg[i]), 0);
    assert_int_equal(tent_unregister_memory(e, buf, (size_t)n * len), 0);
    tent_free_memory(e, buf);
    tent_destroy_engine(e);
    fleet_quit(&f);
}

static int peers(void)
{
    const char *s = getenv("E2E_PEERCOST_PEERS");
    int n = s ? atoi(s) : 0;
    return n > 0 ? n : 16;
}

static void test_threads_tcp(void **state)
{
    (void)state;
    const int workers = 4;
    int n = peers();
    struct e2e_usage u[3];
    cost(n, workers, 0, u);
    print_message("    %d peers, %d pool threads: threads %ld -> %ld, fds %ld "
                  "-> %ld, VmRSS %ld -> %ld kB\n",
                  n, workers, u[0].threads, u[1].threads, u[0].fds, u[1].fds,
                  u[0].rss_kb, u[1].rss_kb);
    /* the pool (one thread of it runs from the start) and nothing per
     * peer: a thread per peer would show as n */
    assert_true(u[1].threads - u[0].threads <= workers);
    /* a connection per peer at least (all in flight at once), not more
     * than the rail allows */
    assert_true(u[1].fds - u[0].fds >= n);
    assert_true(u[1].fds - u[0].fds <= 4L * n);
}

static void test_idle_tcp(void **state)
{
    (void)state;
    const int idle_ms = 300;
    struct e2e_usage u[3];
    long t0 = e2e_now_ms();
    cost(2, 0, idle_ms, u);
    print_message("    idle_timeout_ms %d: fds %ld -> %ld -> %ld (%ld ms)\n",
                  idle_ms, u[0].fds, u[1].fds, u[2].fds, e2e_now_ms() - t0);
    assert_true(u[1].fds >= u[0].fds + 2);
    assert_true(u[2].fds <= u[0].fds);
}

/* And a transfer after the close: a new connection. */
static void test_idle_reuse_tcp(void **state)
{
    (void)state;
    struct e2e_peer p;
    assert_int_equal(e2e_peer_start(&p, LEN, false, true), 0);
    e2e_config(false, true);
    tent_set_config("transports/tcp/idle_timeout_ms", "100");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    void *buf;
    assert_int_equal(tent_allocate_memory(e, &buf, 4096, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, buf, 4096), 0);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, p.name), 0);
    long base = e2e_count_fds();
    for (int i = 0; i < 3; i++) {
        memset(buf, 0x30 + i, 4096);
        tent_request_t w = {.opcode = OPCODE_WRITE,
                            .source = buf,
                            .target_id = seg,
                            .target_offset = p.rw_base,
                            .length = 4096};
        tent_status_t st;
        assert_int_equal(e2e_run_one(e, &w, 10000, &st), 0);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_true(e2e_peer_hash(&p, false, 0, 4096) == e2e_fnv(buf, 4096));
        long t0 = e2e_now_ms();
        while (e2e_count_fds() > base && e2e_now_ms() - t0 < 5000)
            usleep(10 * 1000);
        assert_true(e2e_count_fds() <= base);
    }
    assert_int_equal(tent_close_segment(e, seg), 0);
    tent_destroy_engine(e);
    e2e_peer_quit(&p);
}

static void test_overcap_tcp(void **state)
{
    (void)state;
    const int n = 12, rounds = 20, cap = 4;
    const size_t len = 256u << 10;
    struct e2e_peer *p = calloc(n, sizeof(*p));
    assert_non_null(p);
    for (int i = 0; i < n; i++)
        assert_int_equal(e2e_peer_start(&p[i], 4u << 20, false, true), 0);
    e2e_config(false, true);
    char c[16];
    snprintf(c, sizeof(c), "%d", cap);
    tent_set_config("rpc_max_connections", c);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    uint8_t *buf;
    assert_int_equal(
        tent_allocate_memory(e, (void **)&buf, (size_t)n * len, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, buf, (size_t)n * len), 0);
    char name[256];
    assert_int_equal(tent_segment_name(e, name, sizeof(name)), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(e2e_peer_open(&p[i], name), 0);
    int failed = 0, last_code = 0;
    for (int r = 0; r < rounds; r++) {
        int op = r % 2 ? OPCODE_READ : OPCODE_WRITE;
        for (int i = 0; i < n; i++)
            assert_int_equal(
                e2e_peer_transfer_start(&p[i], op, false,
                                        (uintptr_t)buf + (size_t)i * len, len),
                0);
        for (int i = 0; i < n; i++) {
            int code = 0;
            int st = e2e_peer_transfer_end(&p[i], &code);
            if (st != STATUS_COMPLETED) {
                failed++;
                last_code = code;
            }
        }
    }
    print_message("    %d initiators, rpc_max_connections %d, %d rounds: %d "
                  "of %d tasks failed%s%s\n",
                  n, cap, rounds, failed, n * rounds, failed ? ", the last: " : "",
                  failed ? tent_strerror(last_code) : "");
    assert_int_equal(failed, 0);
    for (int i = 0; i < n; i++)
        e2e_peer_quit(&p[i]);
    free(p);
    assert_int_equal(tent_unregister_memory(e, buf, (size_t)n * len), 0);
    tent_free_memory(e, buf);
    tent_destroy_engine(e);
}

static void measure(int n)
{
    struct e2e_usage u[3];
    cost(n, 0, 1000, u);
    printf("peers %d: threads %ld -> %ld (idle %ld), fds %ld -> %ld (idle "
           "%ld), VmRSS %ld -> %ld kB (idle %ld)\n",
           n, u[0].threads, u[1].threads, u[2].threads, u[0].fds, u[1].fds,
           u[2].fds, u[0].rss_kb, u[1].rss_kb, u[2].rss_kb);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    signal(SIGPIPE, SIG_IGN);
    struct CMUnitTest t;
    if (strcmp(mode, "measure") == 0 && argc > 2) {
        measure(atoi(argv[2]));
        return 0;
    }
    if (strcmp(mode, "threads_tcp") == 0)
        t = (struct CMUnitTest)cmocka_unit_test(test_threads_tcp);
    else if (strcmp(mode, "idle_tcp") == 0)
        t = (struct CMUnitTest)cmocka_unit_test(test_idle_tcp);
    else if (strcmp(mode, "idle_reuse_tcp") == 0)
        t = (struct CMUnitTest)cmocka_unit_test(test_idle_reuse_tcp);
    else if (strcmp(mode, "overcap_tcp") == 0)
        t = (struct CMUnitTest)cmocka_unit_test(test_overcap_tcp);
    else if (strcmp(mode, "overcap_secret_tcp") == 0) {
        /* every process of the test, children too, holds the secret */
        static char path[] = "/tmp/tent_peercost_secretXXXXXX";
        int fd = mkstemp(path); /* mode 0600 */
        if (fd < 0 || write(fd, "peercost-test-cluster-secret\n", 29) != 29)
            return 1;
        close(fd);
        setenv("MC_TENT_SECRET_FILE", path, 1);
        t = (struct CMUnitTest)cmocka_unit_test(test_overcap_tcp);
        const struct CMUnitTest tests[] = {t};
        int rc = cmocka_run_group_tests_name(mode, tests, NULL, NULL);
        unlink(path);
        return rc;
    }
    else {
        fprintf(stderr,
                "usage: %s threads_tcp|idle_tcp|idle_reuse_tcp|overcap_tcp|"
                "overcap_secret_tcp|measure N\n",
                argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {t};
    return cmocka_run_group_tests_name(mode, tests, NULL, NULL);
}
