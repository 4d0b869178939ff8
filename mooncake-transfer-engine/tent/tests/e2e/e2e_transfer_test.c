/* End-to-end: two engines in two processes on 127.0.0.1.  The same suite
 * runs for each transport (argv[1] = "tcp" or "shm"); every byte moved is
 * checked against a mirror of the target's memory. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>
// clang-format on

#include "e2e_peer.h"
#include "runtime/engine.h"
#include "tent/transfer_engine.h"

#define RW_LEN ((size_t)80 << 20)
#define BIG    ((size_t)64 << 20)

static bool g_shm; /* transport under test */

struct fixture {
    struct e2e_peer peer;
    tent_engine_t e;
    tent_segment_id_t seg;
    uint8_t *mirror; /* expected content of the peer's rw buffer */
    uint8_t *src, *dst;
    uint64_t rng;
};

static uint64_t rnd(struct fixture *f)
{
    f->rng ^= f->rng << 13;
    f->rng ^= f->rng >> 7;
    f->rng ^= f->rng << 17;
    return f->rng;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->rng = 0x9e3779b97f4a7c15ull;
    if (e2e_peer_start(&f->peer, RW_LEN, g_shm, !g_shm) != 0) {
        free(f);
        return -1;
    }
    e2e_config(g_shm, !g_shm);
    f->e = tent_create_engine();
    if (!f->e)
        return -1;
    void *p;
    if (tent_allocate_memory(f->e, &p, RW_LEN, "cpu"))
        return -1;
    f->src = p;
    if (tent_allocate_memory(f->e, &p, RW_LEN, "cpu"))
        return -1;
    f->dst = p;
    f->mirror = malloc(RW_LEN);
    for (size_t i = 0; i < RW_LEN; i++)
        f->mirror[i] = e2e_pattern(i);
    if (tent_open_segment(f->e, &f->seg, f->peer.name))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (!f)
        return 0;
    if (f->peer.pid > 0)
        e2e_peer_quit(&f->peer);
    tent_destroy_engine(f->e);
    free(f->mirror);
    free(f);
    return 0;
}

/* One batch of n requests, each in its own lane of the buffer. */
static void run_batch(struct fixture *f, int opcode, size_t n, size_t maxlen,
                      uint64_t *offs, uint64_t *lens)
{
    size_t lane = RW_LEN / n;
    if (maxlen > lane)
        maxlen = lane;
    tent_request_t *r = calloc(n, sizeof(*r));
    for (size_t i = 0; i < n; i++) {
        if (opcode == OPCODE_WRITE) {
            /* log-uniform length in 1..maxlen */
            int bits = 0;
            while (((size_t)1 << bits) < maxlen)
                bits++;
            uint64_t len =
                1 + rnd(f) % (((uint64_t)1 << (rnd(f) % (bits + 1))));
            if (len > maxlen)
                len = maxlen;
            lens[i] = len;
            offs[i] = i * lane + rnd(f) % (lane - len + 1);
            for (uint64_t k = 0; k < len; k++)
                f->src[offs[i] + k] = (uint8_t)rnd(f);
        }
        r[i].opcode = opcode;
        r[i].source = (opcode == OPCODE_WRITE ? f->src : f->dst) + offs[i];
        r[i].target_id = f->seg;
        r[i].target_offset = f->peer.rw_base + offs[i];
        r[i].length = lens[i];
    }
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    assert_int_not_equal(b, 0);
    assert_int_equal(tent_submit(f->e, b, r, n), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, 30000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += lens[i];
    assert_int_equal(st.transferred_bytes, total);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    for (size_t i = 0; i < n; i++) {
        if (opcode == OPCODE_WRITE)
            memcpy(f->mirror + offs[i], f->src + offs[i], lens[i]);
        else
            assert_memory_equal(f->dst + offs[i], f->mirror + offs[i], lens[i]);
    }
    free(r);
}

static void test_random_reads_writes(void **state)
{
    struct fixture *f = *state;
    static const size_t batches[] = {1, 3, 32, 256, 1024};
    for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
        size_t n = batches[bi];
        uint64_t *offs = calloc(n, 8), *lens = calloc(n, 8);
        run_batch(f, OPCODE_WRITE, n, (size_t)4 << 20, offs, lens);
        run_batch(f, OPCODE_READ, n, 0, offs, lens);
        free(offs);
        free(lens);
    }
    /* 1 B and 64 MiB at random offsets, alone in their batch. */
    uint64_t off, len = 1;
    off = rnd(f) % RW_LEN;
    run_batch(f, OPCODE_WRITE, 1, 1, &off, &len);
    run_batch(f, OPCODE_READ, 1, 0, &off, &len);
    len = BIG;
    off = rnd(f) % (RW_LEN - BIG);
    uint64_t offs[1] = {off}, lens[1] = {BIG};
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = f->src + off,
                        .target_id = f->seg,
                        .target_offset = f->peer.rw_base + off,
                        .length = BIG};
    for (size_t k = 0; k < BIG; k += 4096)
        f->src[off + k] = (uint8_t)rnd(f);
    tent_batch_id_t b = tent_allocate_batch(f->e, 1);
    assert_int_equal(tent_submit(f->e, b, &r, 1), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, 30000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    memcpy(f->mirror + off, f->src + off, BIG);
    run_batch(f, OPCODE_READ, 1, 0, offs, lens);
    /* The target's own view of its memory matches, byte for byte. */
    assert_true(e2e_peer_hash(&f->peer, false, 0, RW_LEN) ==
                e2e_fnv(f->mirror, RW_LEN));
}

static int submit_one(struct fixture *f, int opcode, uint64_t addr,
                      uint64_t len, int *status)
{
    tent_request_t r = {.opcode = opcode,
                        .source = f->dst,
                        .target_id = f->seg,
                        .target_offset = addr,
                        .length = len};
    tent_batch_id_t b = tent_allocate_batch(f->e, 1);
    int rc = tent_submit(f->e, b, &r, 1);
    if (rc == 0) {
        tent_status_t st;
        assert_int_equal(e2e_wait(f->e, b, 10000, &st), 0);
        *status = st.status;
    }
    assert_int_equal(tent_free_batch(f->e, b), 0);
    return rc;
}

static void test_bounds_and_permissions(void **state)
{
    struct fixture *f = *state;
    struct e2e_peer *p = &f->peer;
    int st = -1;
    /* past the end of the rw buffer, and an address nobody registered */
    assert_int_equal(
        submit_one(f, OPCODE_WRITE, p->rw_base + RW_LEN - 8, 16, &st),
        TENT_ERANGE);
    assert_int_equal(submit_one(f, OPCODE_READ, 0x1000, 16, &st), TENT_ERANGE);
    /* read-only: reads fine, writes refused */
    assert_int_equal(submit_one(f, OPCODE_WRITE, p->ro_base, 16, &st),
                     TENT_EPERM);
    memset(f->dst, 0, 4096);
    assert_int_equal(submit_one(f, OPCODE_READ, p->ro_base, 4096, &st), 0);
    assert_int_equal(st, STATUS_COMPLETED);
    for (size_t i = 0; i < 4096; i++)
        assert_int_equal(f->dst[i], e2e_pattern(i));
    /* local-only memory is not remotely accessible */
    assert_int_equal(submit_one(f, OPCODE_READ, p->local_base, 16, &st),
                     TENT_EPERM);
    /* plain registered (malloc) memory is reachable */
    for (size_t i = 0; i < 4096; i++)
        f->dst[i] = (uint8_t)(i * 7);
    assert_int_equal(submit_one(f, OPCODE_WRITE, p->reg_base + 100, 4096, &st),
                     0);
    assert_int_equal(st, STATUS_COMPLETED);
    assert_true(e2e_peer_hash(p, true, 100, 4096) == e2e_fnv(f->dst, 4096));
}

static void test_refetch_after_peer_registers(void **state)
{
    struct fixture *f = *state;
    uint64_t a = e2e_peer_register(&f->peer, 8192);
    assert_int_not_equal(a, 0);
    int st = -1;
    memset(f->dst, 0, 8192);
    assert_int_equal(submit_one(f, OPCODE_READ, a + 100, 8000, &st), 0);
    assert_int_equal(st, STATUS_COMPLETED);
    for (size_t i = 0; i < 8000; i++)
        assert_int_equal(f->dst[i], e2e_pattern(i + 100));
    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(f->e, f->seg, &info), 0);
    assert_int_equal(info.num_buffers, 5);
    tent_free_segment_info(&info);
    /* per-transport attributes and host identity travel with it */
    struct tent_segment *seg = tent_engine_segment(f->e, f->seg);
    assert_non_null(seg);
    assert_string_equal(tent_segment_attr(seg, "memfabric_unique_id"),
                        "127.0.0.1:4242");
    assert_non_null(tent_segment_attr(seg, "rpc_addr"));
    assert_true(strlen(seg->host_id) > 1);
}

/* The target frees memory the initiator's cached descriptor still lists:
 * a write there must not be reported COMPLETED (tcp: the server refuses;
 * shm: the published fd no longer names that memory). */
static void test_write_to_freed_memory_not_completed(void **state)
{
    struct fixture *f = *state;
    int st = -1;
    assert_int_equal(submit_one(f, OPCODE_WRITE, f->peer.rw_base, 4096, &st),
                     0);
    assert_int_equal(st, STATUS_COMPLETED);
    assert_int_equal(e2e_peer_free_rw(&f->peer), 0);
    st = -1;
    int rc = submit_one(f, OPCODE_WRITE, f->peer.rw_base, 4096, &st);
    if (rc == 0)
        assert_int_equal(st, STATUS_FAILED);
    else
        assert_true(rc < 0);
}

static void test_kill_target_mid_batch(void **state)
{
    struct fixture *f = *state;
    const size_t n = 256, len = (size_t)256 << 10;
    tent_request_t *r = calloc(n, sizeof(*r));
    for (size_t i = 0; i < n; i++) {
        r[i].opcode = i % 2 ? OPCODE_READ : OPCODE_WRITE;
        r[i].source = (i % 2 ? f->dst : f->src) + i * len;
        r[i].target_id = f->seg;
        r[i].target_offset = f->peer.rw_base + i * len;
        r[i].length = len;
    }
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n / 2), 0);
    e2e_peer_kill(&f->peer);
    long t0 = e2e_now_ms();
    int rc = tent_submit(f->e, b, r + n / 2, n / 2);
    (void)rc; /* may start or fail outright: either way nothing hangs */
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, 10000, &st), 0);
    long took = e2e_now_ms() - t0;
    /* the bound: transports/tcp/timeout_ms = 1500 plus slack */
    assert_in_range(took, 0, 5000);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    free(r);
}

/* A target that stops answering (SIGSTOP: sockets stay open, nothing is
 * read) turns tcp tasks FAILED within transports/tcp/timeout_ms (1500). */
static void test_stalled_target_times_out(void **state)
{
    struct fixture *f = *state;
    if (g_shm) {
        skip(); /* shm copies need no cooperation from the target */
        return;
    }
    const size_t n = 32, len = (size_t)2 << 20;
    tent_request_t *r = calloc(n, sizeof(*r));
    for (size_t i = 0; i < n; i++) {
        r[i].opcode = i % 2 ? OPCODE_READ : OPCODE_WRITE;
        r[i].source = (i % 2 ? f->dst : f->src) + i * len;
        r[i].target_id = f->seg;
        r[i].target_offset = f->peer.rw_base + i * len;
        r[i].length = len;
    }
    kill(f->peer.pid, SIGSTOP);
    long t0 = e2e_now_ms();
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, 15000, &st), 0);
    long took = e2e_now_ms() - t0;
    kill(f->peer.pid, SIGCONT);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_in_range(took, 1000, 6000);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    free(r);
}

static void test_notifications_after_data(void **state)
{
    struct fixture *f = *state;
    const int nb = 20;
    int seq = 0;
    for (int i = 0; i < nb; i++) {
        uint64_t off = rnd(f) % (RW_LEN - 65536), len = 1 + rnd(f) % 65536;
        for (uint64_t k = 0; k < len; k++)
            f->src[off + k] = (uint8_t)rnd(f);
        char msg[128];
        snprintf(msg, sizeof(msg), "%d %llu %llu %llu", ++seq,
                 (unsigned long long)off, (unsigned long long)len,
                 (unsigned long long)e2e_fnv(f->src + off, len));
        tent_request_t r = {.opcode = OPCODE_WRITE,
                            .source = f->src + off,
                            .target_id = f->seg,
                            .target_offset = f->peer.rw_base + off,
                            .length = len};
        tent_batch_id_t b = tent_allocate_batch(f->e, 1);
        assert_int_equal(tent_submit_notif(f->e, b, &r, 1, "e2e", msg), 0);
        tent_status_t st;
        assert_int_equal(e2e_wait(f->e, b, 10000, &st), 0);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_int_equal(tent_free_batch(f->e, b), 0);
        if (i % 4 == 3) { /* a direct notification about settled data */
            snprintf(msg, sizeof(msg), "%d %llu %llu %llu", ++seq,
                     (unsigned long long)off, (unsigned long long)len,
                     (unsigned long long)e2e_fnv(f->src + off, len));
            assert_int_equal(tent_send_notifs(f->e, f->seg, "e2e", msg), 0);
        }
    }
    bool ok = false;
    assert_int_equal(e2e_peer_check_notifs(&f->peer, seq, 10000, &ok), seq);
    assert_true(ok);
}

/* tcp first (pinned by hint), shm second: the target's RPC server (the tcp
 * data path) stops mid-batch, and every task still completes through shm. */
static int setup_both(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->rng = 0x1234567;
    if (e2e_peer_start(&f->peer, 16 << 20, true, true) != 0) {
        free(f);
        return -1;
    }
    e2e_config(true, true);
    f->e = tent_create_engine();
    void *p;
    if (!f->e || tent_allocate_memory(f->e, &p, 16 << 20, "cpu"))
        return -1;
    f->src = p;
    if (tent_open_segment(f->e, &f->seg, f->peer.name))
        return -1;
    *state = f;
    return 0;
}

static void test_failover_tcp_to_shm(void **state)
{
    struct fixture *f = *state;
    const size_t n = 64, len = (size_t)256 << 10;
    for (size_t i = 0; i < n * len; i++)
        f->src[i] = (uint8_t)rnd(f);
    tent_request_t r[64];
    memset(r, 0, sizeof(r));
    for (size_t i = 0; i < n; i++) {
        r[i].opcode = OPCODE_WRITE;
        r[i].source = f->src + i * len;
        r[i].target_id = f->seg;
        r[i].target_offset = f->peer.rw_base + i * len;
        r[i].length = len;
        r[i].transport_hint = TRANSPORT_TCP;
    }
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n / 2), 0);
    e2e_peer_stop_rpc(&f->peer);
    assert_int_equal(tent_submit(f->e, b, r + n / 2, n / 2), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, n * len);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    assert_true(e2e_peer_hash(&f->peer, false, 0, n * len) ==
                e2e_fnv(f->src, n * len));
}

/* A batch that reported COMPLETED is free at once: the transport's
 * sub-batch never looks busy once every task is terminal (tcp once lowered
 * a task's slice count before the sub-batch's own count, so a free right
 * after completion could answer TENT_EBUSY).  Tight polling, no pause
 * between completion and free; tasks of one to three slices. */
static void test_free_right_after_completed(void **state)
{
    struct fixture *f = *state;
    const size_t n = 8;
    tent_request_t r[8];
    for (int iter = 0; iter < 2000; iter++) {
        for (size_t i = 0; i < n; i++) {
            /* log-uniform up to 3 MiB: mostly one slice, some several */
            uint64_t len = 1 + rnd(f) % ((uint64_t)3 << (rnd(f) % 21));
            uint64_t off = i * (RW_LEN / n) + rnd(f) % (RW_LEN / n - len);
            r[i] = (tent_request_t){.opcode = (iter + i) % 3 ? OPCODE_WRITE
                                                             : OPCODE_READ,
                                    .source = f->src + off,
                                    .target_id = f->seg,
                                    .target_offset = f->peer.rw_base + off,
                                    .length = len};
        }
        tent_batch_id_t b = tent_allocate_batch(f->e, n);
        assert_int_not_equal(b, 0);
        assert_int_equal(tent_submit(f->e, b, r, n), 0);
        tent_status_t st;
        long end = e2e_now_ms() + 10000;
        do {
            assert_int_equal(tent_overall_status(f->e, b, &st), 0);
        } while (st.status == STATUS_PENDING && e2e_now_ms() < end);
        assert_int_equal(st.status, STATUS_COMPLETED);
        int rc = tent_free_batch(f->e, b);
        if (rc != 0)
            fail_msg("iteration %d: tent_free_batch right after COMPLETED "
                     "returned %d: %s",
                     iter, rc, tent_last_error());
    }
}

/* One process: the engine's own segment as the target. */
static void test_single_process_local_segment(void **state)
{
    (void)state;
    e2e_config(g_shm, !g_shm);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    char name[256];
    uint16_t port = 0;
    assert_int_equal(tent_segment_name(e, name, sizeof(name)), 0);
    assert_int_equal(tent_rpc_server_addr_port(e, name + 128, 128, &port), 0);
    assert_int_not_equal(port, 0);
    char expect[300];
    snprintf(expect, sizeof(expect), "%s:%u", name + 128, port);
    assert_int_equal(tent_segment_name(e, name, sizeof(name)), 0);
    assert_string_equal(name, expect);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, name), 0);
    assert_int_equal(seg, LOCAL_SEGMENT_ID);
    const size_t len = (size_t)3 << 20;
    void *a, *b;
    assert_int_equal(tent_allocate_memory(e, &a, len, "cpu"), 0);
    assert_int_equal(tent_allocate_memory(e, &b, len, "cpu"), 0);
    for (size_t i = 0; i < len; i++)
        ((uint8_t *)a)[i] = e2e_pattern(i + 5);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = a,
                        .target_id = LOCAL_SEGMENT_ID,
                        .target_offset = (uintptr_t)b,
                        .length = len};
    tent_batch_id_t bt = tent_allocate_batch(e, 1);
    assert_int_equal(tent_submit(e, bt, &r, 1), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(e, bt, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_memory_equal(a, b, len);
    assert_int_equal(tent_free_batch(e, bt), 0);
    tent_destroy_engine(e);
}

/* True when a socket can bind ::1 (the kernel has IPv6 and lo carries ::1). */
static bool have_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
                              .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/* An IPv6 server address gives a bracketed segment name that opens. */
static void test_ipv6_segment_name(void **state)
{
    (void)state;
    e2e_config(g_shm, !g_shm);
    tent_set_config("rpc_server_hostname", "::1");
    if (!have_ipv6_loopback()) {
        skip(); /* no ::1 here */
        return;
    }
    /* ::1 exists, so an engine that cannot serve on it is a failure. */
    tent_engine_t a = tent_create_engine();
    if (!a)
        fail_msg("engine on ::1: %s", tent_last_error());
    tent_engine_t b = tent_create_engine();
    assert_non_null(b);
    char name[256];
    assert_int_equal(tent_segment_name(a, name, sizeof(name)), 0);
    assert_true(strncmp(name, "[::1]:", 6) == 0);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(b, &seg, name), 0);
    void *src, *dst;
    assert_int_equal(tent_allocate_memory(a, &dst, 65536, "cpu"), 0);
    assert_int_equal(tent_allocate_memory(b, &src, 65536, "cpu"), 0);
    memset(src, 0x3c, 65536);
    assert_int_equal(tent_open_segment(b, &seg, name), 0); /* cached */
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = src,
                        .target_id = seg,
                        .target_offset = (uintptr_t)dst,
                        .length = 65536};
    tent_batch_id_t bt = tent_allocate_batch(b, 1);
    assert_int_equal(tent_submit(b, bt, &r, 1), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(b, bt, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_memory_equal(src, dst, 65536);
    assert_int_equal(tent_free_batch(b, bt), 0);
    tent_destroy_engine(b);
    tent_destroy_engine(a);
}

int main(int argc, char **argv)
{
    g_shm = argc > 1 && strcmp(argv[1], "shm") == 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_process_local_segment),
        cmocka_unit_test(test_ipv6_segment_name),
        cmocka_unit_test_setup_teardown(test_random_reads_writes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bounds_and_permissions, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_free_right_after_completed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_refetch_after_peer_registers,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_notifications_after_data, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_write_to_freed_memory_not_completed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_target_mid_batch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stalled_target_times_out, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failover_tcp_to_shm, setup_both,
                                        teardown),
    };
    return cmocka_run_group_tests_name(g_shm ? "e2e_shm" : "e2e_tcp", tests,
                                       NULL, NULL);
}
