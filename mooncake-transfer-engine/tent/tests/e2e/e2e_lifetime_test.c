/* Peers with a lifetime, with real processes (issue 41):
 *
 *  churn_tcp, churn_shm: a long-lived engine whose peers restart, each a
 *    new process on a new port (open its segment, a verified transfer,
 *    close it, the peer quits).  Afterwards the engine's threads, file
 *    descriptors and resident memory are back near where they started:
 *    what a transport kept for a peer went with its handle.
 *  restart_tcp: a peer restarted under the same name (same port) whose new
 *    buffer sits at the same address.  A write through the descriptor of
 *    the old process must not complete into the new one: the target
 *    refuses the old incarnation, the initiator refetches and fails the
 *    task saying the peer restarted; the new process's memory is intact.
 *
 * E2E_CHURN_RESTARTS overrides the number of restarts (tcp: 200, shm: 12). */
#include "e2e_peer.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static bool g_skipped;

static int restarts(int dflt)
{
    const char *s = getenv("E2E_CHURN_RESTARTS");
    int n = s ? atoi(s) : 0;
    return n > 0 ? n : dflt;
}

/* One peer's life: start, open, write the whole buffer from src (in
 * 4 MiB requests), check the peer's hash, read some back, close, quit. */
static void one_life(tent_engine_t e, uint8_t *src, size_t len, bool shm,
                     uint64_t seed)
{
    struct e2e_peer p;
    tent_segment_id_t seg;
    for (int attempt = 0;; attempt++) {
        assert_int_equal(e2e_peer_start(&p, len, shm, !shm), 0);
        if (tent_open_segment(e, &seg, p.name) == 0)
            break;
        /* say why, and leave no peer behind to hold the run up */
        char why[512];
        snprintf(why, sizeof(why), "%s", tent_last_error());
        e2e_peer_kill(&p);
        /* A peer forked (without exec) from this threaded process that
         * never answers at all was seen only under ASan: most likely an
         * allocator lock another thread held at the fork.  It is started
         * again once, and said; twice is a failure. */
        if (attempt == 0 && strstr(why, "timed out with 16 bytes left")) {
            print_message("    peer '%s' never answered (%s); started "
                          "again\n",
                          p.name, why);
            continue;
        }
        fail_msg("opening restarted peer '%s': %s", p.name, why);
    }
    e2e_pattern_fill(src, len, seed);
    const size_t chunk = 4u << 20;
    size_t n = (len + chunk - 1) / chunk;
    tent_request_t *r = calloc(n, sizeof(*r));
    for (size_t i = 0; i < n; i++) {
        size_t off = i * chunk, l = len - off < chunk ? len - off : chunk;
        r[i] = (tent_request_t){.opcode = OPCODE_WRITE,
                                .source = src + off,
                                .target_id = seg,
                                .target_offset = p.rw_base + off,
                                .length = l};
    }
    tent_batch_id_t b = tent_allocate_batch(e, n);
    assert_int_equal(tent_submit(e, b, r, n), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(e, b, 20000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(e, b), 0);
    free(r);
    assert_true(e2e_peer_hash(&p, false, 0, len) == e2e_fnv(src, len));
    /* and a read of the first KiB back */
    memset(src, 0, 1024);
    tent_request_t rd = {.opcode = OPCODE_READ,
                         .source = src,
                         .target_id = seg,
                         .target_offset = p.rw_base,
                         .length = 1024};
    assert_int_equal(e2e_run_one(e, &rd, 20000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(src[7], e2e_pattern(seed + 7));
    assert_int_equal(tent_close_segment(e, seg), 0);
    e2e_peer_quit(&p);
}

static void churn(bool shm, size_t len, int n)
{
    e2e_config(shm, !shm);
    /* a descriptor fetch from a peer that just started, beside other
     * suites under a sanitizer, may take longer than the default 3 s */
    tent_set_config("rpc_timeout_ms", "15000");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    void *src;
    assert_int_equal(tent_allocate_memory(e, &src, len, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, src, len), 0);
    /* one life first: what the engine makes once (the lend thread, the
     * first mapping of a pool, the allocator's arenas) is not a peer's */
    one_life(e, src, len, shm, 1);
    struct e2e_usage before = e2e_usage_now();
    long t0 = e2e_now_ms();
    for (int i = 0; i < n; i++)
        one_life(e, src, len, shm, 2 + (uint64_t)i);
    struct e2e_usage after = e2e_usage_now();
    print_message("    %d %s restarts (%zu-byte buffers) in %ld ms: threads "
                  "%ld -> %ld, fds %ld -> %ld, VmRSS %ld -> %ld kB\n",
                  n, shm ? "shm" : "tcp", len, e2e_now_ms() - t0,
                  before.threads, after.threads, before.fds, after.fds,
                  before.rss_kb, after.rss_kb);
    /* Nothing per dead peer: a thread or descriptor each would show as n. */
    assert_true(after.threads <= before.threads + 1);
    assert_true(after.fds <= before.fds + 1);
    /* Less than one peer's buffer (shm maps it) and, for tcp, less than
     * 16 kB per restart (the closed segment records the engine keeps). */
    long rss_bound = shm ? (long)(len / 2048) : 16L * n + 4096;
#if !defined(__SANITIZE_ADDRESS__)
    /* (ASan's quarantine keeps freed memory resident on purpose) */
    assert_true(after.rss_kb - before.rss_kb < rss_bound);
#else
    (void)rss_bound;
#endif
    assert_int_equal(tent_unregister_memory(e, src, len), 0);
    tent_free_memory(e, src);
    tent_destroy_engine(e);
}

static void test_churn_tcp(void **state)
{
    (void)state;
    churn(false, 1u << 20, restarts(200));
}

static void test_churn_shm(void **state)
{
    (void)state;
    churn(true, 64u << 20, restarts(12));
}

/* A free loopback port (bound, then released). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
        getsockname(fd, (struct sockaddr *)&a, &l)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static void test_restart_tcp(void **state)
{
    (void)state;
    char port[16];
    int pn = free_port();
    assert_true(pn > 0);
    snprintf(port, sizeof(port), "%d", pn);
    static const char *kv[3] = {"rpc_server_port", NULL, NULL};
    kv[1] = port;
    e2e_set_child_config(kv);
    e2e_set_child_rw_at(0x7e9000000000ull); /* free in plain and TSan layouts */
    e2e_config(false, true);
    const size_t len = 1u << 20;
    struct e2e_peer a, b;
    assert_int_equal(e2e_peer_start(&a, len, false, true), 0);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    void *src;
    assert_int_equal(tent_allocate_memory(e, &src, len, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, src, len), 0);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, a.name), 0);
    memset(src, 0x5a, 4096);
    tent_request_t w = {.opcode = OPCODE_WRITE,
                        .source = src,
                        .target_id = seg,
                        .target_offset = a.rw_base,
                        .length = 4096};
    tent_status_t st;
    assert_int_equal(e2e_run_one(e, &w, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);

    /* the peer restarts: same name, and its buffer at the same address */
    e2e_peer_kill(&a);
    int tries = 0;
    while (e2e_peer_start(&b, len, false, true) != 0 && ++tries < 50)
        usleep(100 * 1000); /* the port may linger a moment */
    assert_true(tries < 50);
    e2e_set_child_config(NULL);
    e2e_set_child_rw_at(0);
    assert_string_equal(a.name, b.name);
    if (b.rw_base != a.rw_base) {
        print_message("    the new buffer is at %#llx, not %#llx: nothing "
                      "to test here\n",
                      (unsigned long long)b.rw_base,
                      (unsigned long long)a.rw_base);
        e2e_peer_quit(&b);
        tent_destroy_engine(e);
        g_skipped = true;
        return;
    }
    uint64_t intact = e2e_peer_hash(&b, false, 0, 4096);

    /* through the descriptor of the old process */
    tent_batch_id_t bt = tent_allocate_batch(e, 1);
    assert_int_equal(tent_submit(e, bt, &w, 1), 0);
    assert_int_equal(e2e_wait(e, bt, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_FAILED);
    int code = 0, native = 0;
    char msg[512];
    assert_int_equal(
        tent_task_error(e, bt, 0, &code, &native, msg, sizeof(msg)), 0);
    print_message("    cause: %s (%s)\n", msg, tent_strerror(code));
    assert_int_equal(code, TENT_ESTALE);
    assert_non_null(strstr(msg, "restarted"));
    assert_non_null(strstr(msg, a.name));
    assert_int_equal(tent_free_batch(e, bt), 0);
    assert_true(e2e_peer_hash(&b, false, 0, 4096) == intact);

    /* the segment opened again reaches the new process */
    assert_int_equal(tent_close_segment(e, seg), 0);
    assert_int_equal(tent_open_segment(e, &seg, b.name), 0);
    w.target_id = seg;
    assert_int_equal(e2e_run_one(e, &w, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_true(e2e_peer_hash(&b, false, 0, 4096) == e2e_fnv(src, 4096));
    e2e_peer_quit(&b);
    assert_int_equal(tent_unregister_memory(e, src, len), 0);
    tent_free_memory(e, src);
    tent_destroy_engine(e);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    signal(SIGPIPE, SIG_IGN);
    struct CMUnitTest t;
    if (strcmp(mode, "churn_tcp") == 0)
        t = (struct CMUnitTest)cmocka_unit_test(test_churn_tcp);
    else if (strcmp(mode, "churn_shm") == 0)
        t = (struct CMUnitTest)cmocka_unit_test(test_churn_shm);
    else if (strcmp(mode, "restart_tcp") == 0)
        t = (struct CMUnitTest)cmocka_unit_test(test_restart_tcp);
    else {
        fprintf(stderr, "usage: %s churn_tcp|churn_shm|restart_tcp\n",
                argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {t};
    int failed = cmocka_run_group_tests_name(mode, tests, NULL, NULL);
    return failed ? failed : g_skipped ? 77 : 0;
}
