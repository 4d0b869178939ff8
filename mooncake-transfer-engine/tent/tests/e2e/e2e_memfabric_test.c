/* End-to-end over the memfabric transport with mf_host as libmf_smem.so:
 * two engines in two processes on 127.0.0.1, argv[1] = "host_tcp" or
 * "host_shm" (MF_PROTOCOL).  MF_SMEM_LIBRARY names the mf_host library of
 * this build (MF_HOST_LIB).
 *
 *  - memfabric only (tcp and shm disabled on both sides): reads and writes
 *    from 1 B to 17 MiB at random offsets, batches of 1 to 256, every byte
 *    checked on both sides;
 *  - the target killed mid-batch: the peer-down callback fires with the
 *    target's unique id and every task is FAILED within a bound;
 *  - memfabric first and tcp second (the default order): the target's
 *    memfabric transport goes away mid-batch while its engine keeps serving
 *    over tcp, and the engine fails over: every task completes and every
 *    byte lands. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
// clang-format on

#include "e2e_peer.h"
#include "runtime/engine.h"
#include "tent/transfer_engine.h"
#include "transport/memfabric/memfabric_transport.h"

#define RW_LEN ((size_t)48 << 20)
#define BIG    (((size_t)17 << 20) + 12345)

static const char *g_proto; /* "host_tcp" or "host_shm" */

struct fixture {
    struct e2e_peer peer;
    tent_engine_t e;
    tent_segment_id_t seg;
    uint8_t *mirror; /* expected content of the peer's rw buffer */
    uint8_t *src, *dst;
    uint64_t rng;
    size_t len; /* of the peer's rw buffer and of src/dst */
};

static uint64_t rnd(struct fixture *f)
{
    f->rng ^= f->rng << 13;
    f->rng ^= f->rng >> 7;
    f->rng ^= f->rng << 17;
    return f->rng;
}

/* The engine's transport of the given type, or NULL. */
static struct tent_transport *xport_of(tent_engine_t h, int type, int *index)
{
    struct tent_engine *e = tent_engine_cast(h);
    for (int i = 0; i < e->nxports; i++)
        if (e->xports[i]->ops->type == type) {
            if (index)
                *index = i;
            return e->xports[i];
        }
    return NULL;
}

static struct memfabric_transport *mf_of(tent_engine_t h)
{
    return (struct memfabric_transport *)xport_of(h, TRANSPORT_MEMFABRIC, NULL);
}

/* The runtime's record of task i of batch id (see engine.h: slot is the low
 * half of the id, minus one). */
static struct tent_task *task_of(tent_engine_t h, tent_batch_id_t id, size_t i)
{
    struct tent_engine *e = tent_engine_cast(h);
    struct tent_batch *b = e->batches[(id & 0xffffffffu) - 1];
    assert_non_null(b);
    assert_true(i < b->ntasks);
    return &b->tasks[i];
}

static int setup_common(void **state, size_t len, bool tcp)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    f->len = len;
    e2e_set_memfabric(true);
    if (e2e_peer_start(&f->peer, len, false, tcp) != 0) {
        free(f);
        return -1;
    }
    e2e_config(false, tcp);
    f->e = tent_create_engine();
    if (!f->e)
        return -1;
    void *p;
    if (tent_allocate_memory(f->e, &p, len, "cpu"))
        return -1;
    f->src = p;
    if (tent_allocate_memory(f->e, &p, len, "cpu"))
        return -1;
    f->dst = p;
    f->mirror = malloc(len);
    for (size_t i = 0; i < len; i++)
        f->mirror[i] = e2e_pattern(i);
    if (tent_open_segment(f->e, &f->seg, f->peer.name))
        return -1;
    *state = f;
    return 0;
}

/* memfabric only, on both sides. */
static int setup(void **state)
{
    return setup_common(state, RW_LEN, false);
}

/* memfabric first, tcp second, on both sides. */
static int setup_with_tcp(void **state)
{
    return setup_common(state, (size_t)80 << 20, true);
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

/* Polls b to a terminal state and returns it (bounded). */
static tent_status_t wait_done(struct fixture *f, tent_batch_id_t b, int ms)
{
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, ms, &st), 0);
    return st;
}

/* One batch of n requests, each in its own lane of the buffer; writes pick
 * random lengths (log-uniform up to maxlen) and offsets and random bytes. */
static void run_batch(struct fixture *f, int opcode, size_t n, size_t maxlen,
                      uint64_t *offs, uint64_t *lens)
{
    size_t lane = f->len / n;
    if (maxlen > lane)
        maxlen = lane;
    tent_request_t *r = calloc(n, sizeof(*r));
    for (size_t i = 0; i < n; i++) {
        if (opcode == OPCODE_WRITE) {
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
        } else {
            memset(f->dst + offs[i], 0, lens[i]);
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
    tent_status_t st = wait_done(f, b, 30000);
    assert_int_equal(st.status, STATUS_COMPLETED);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += lens[i];
        /* memfabric is the only transport: nothing went elsewhere */
        struct tent_task *t = task_of(f->e, b, i);
        assert_int_equal(t->attempts, 0);
    }
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

static void test_only_memfabric_installed(void **state)
{
    struct fixture *f = *state;
    struct tent_engine *e = tent_engine_cast(f->e);
    assert_int_equal(e->nxports, 1);
    struct memfabric_transport *mf = mf_of(f->e);
    assert_non_null(mf);
    assert_string_equal(mf->set.protocol, g_proto);
    /* the peer publishes its mf_host unique id "<host>:<port>" */
    struct tent_segment *seg = tent_engine_segment(f->e, f->seg);
    const char *id = tent_segment_attr(seg, MEMFABRIC_UNIQUE_ID_ATTR);
    assert_non_null(id);
    assert_true(strncmp(id, "127.0.0.1:", 10) == 0);
    assert_string_not_equal(id, mf->unique_id);
}

static void test_random_reads_writes(void **state)
{
    struct fixture *f = *state;
    static const size_t batches[] = {1, 3, 32, 256};
    for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
        size_t n = batches[bi];
        uint64_t *offs = calloc(n, 8), *lens = calloc(n, 8);
        run_batch(f, OPCODE_WRITE, n, (size_t)4 << 20, offs, lens);
        run_batch(f, OPCODE_READ, n, 0, offs, lens);
        free(offs);
        free(lens);
    }
    /* 1 B and 17 MiB + a bit at random offsets, alone in their batch. */
    uint64_t off = rnd(f) % f->len, len = 1;
    run_batch(f, OPCODE_WRITE, 1, 1, &off, &len);
    run_batch(f, OPCODE_READ, 1, 0, &off, &len);
    uint64_t offs[1] = {rnd(f) % (f->len - BIG)}, lens[1] = {BIG};
    for (size_t k = 0; k < BIG; k++)
        f->src[offs[0] + k] = (uint8_t)rnd(f);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = f->src + offs[0],
                        .target_id = f->seg,
                        .target_offset = f->peer.rw_base + offs[0],
                        .length = BIG};
    tent_batch_id_t b = tent_allocate_batch(f->e, 1);
    assert_int_equal(tent_submit(f->e, b, &r, 1), 0);
    tent_status_t st = wait_done(f, b, 30000);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, BIG);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    memcpy(f->mirror + offs[0], f->src + offs[0], BIG);
    run_batch(f, OPCODE_READ, 1, 0, offs, lens);
    /* The target's own view of its memory matches, byte for byte. */
    assert_true(e2e_peer_hash(&f->peer, false, 0, f->len) ==
                e2e_fnv(f->mirror, f->len));
}

/* Plain registered (malloc) memory of the target is reachable too, and a
 * buffer the target freed (deregistered at its mf_host) is refused by the
 * vendor library: FAILED, never COMPLETED. */
static void test_plain_memory_and_freed_buffer(void **state)
{
    struct fixture *f = *state;
    for (size_t i = 0; i < 4096; i++)
        f->src[i] = (uint8_t)(i * 13 + 5);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = f->src,
                        .target_id = f->seg,
                        .target_offset = f->peer.reg_base + 100,
                        .length = 4096};
    tent_batch_id_t b = tent_allocate_batch(f->e, 1);
    assert_int_equal(tent_submit(f->e, b, &r, 1), 0);
    assert_int_equal(wait_done(f, b, 10000).status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    assert_true(e2e_peer_hash(&f->peer, true, 100, 4096) ==
                e2e_fnv(f->src, 4096));

    assert_int_equal(e2e_peer_free_rw(&f->peer), 0);
    r.target_offset = f->peer.rw_base;
    b = tent_allocate_batch(f->e, 1);
    int rc = tent_submit(f->e, b, &r, 1);
    if (rc == 0)
        assert_int_equal(wait_done(f, b, 10000).status, STATUS_FAILED);
    else
        assert_true(rc < 0);
    assert_int_equal(tent_free_batch(f->e, b), 0);
}

static void test_kill_target_mid_batch(void **state)
{
    struct fixture *f = *state;
    struct memfabric_transport *mf = mf_of(f->e);
    const char *peer_id = tent_segment_attr(tent_engine_segment(f->e, f->seg),
                                            MEMFABRIC_UNIQUE_ID_ATTR);
    assert_non_null(peer_id);
    char expect_id[256];
    snprintf(expect_id, sizeof(expect_id), "%s", peer_id);
    const size_t n = 192, len = (size_t)256 << 10;
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
    /* may start (and fail) or be refused outright: nothing hangs */
    int rc2 = tent_submit(f->e, b, r + n / 2, n / 2);
    tent_status_t st = wait_done(f, b, 15000);
    long took = e2e_now_ms() - t0;
    assert_int_equal(st.status, STATUS_FAILED);
    /* what was submitted after the kill failed, task by task (the first
     * half may have landed before the target died) */
    for (size_t i = n / 2; rc2 == 0 && i < n; i++) {
        tent_status_t ts;
        assert_int_equal(tent_task_status(f->e, b, i, &ts), 0);
        assert_int_equal(ts.status, STATUS_FAILED);
    }
    /* mf_host sees the control connection drop at once; well under its own
     * I/O bound (10 s) */
    assert_in_range(took, 0, 5000);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    /* the vendor's peer-down callback named the target */
    long end = e2e_now_ms() + 5000;
    while (atomic_load(&mf->peer_down_events) == 0 && e2e_now_ms() < end)
        usleep(1000);
    assert_true(atomic_load(&mf->peer_down_events) > 0);
    pthread_mutex_lock(&mf->peer_lock);
    bool named = false;
    for (int i = 0; i < mf->ndown && i < MEMFABRIC_MAX_DOWN_PEERS; i++)
        named |= strcmp(mf->down_peers[i], expect_id) == 0;
    pthread_mutex_unlock(&mf->peer_lock);
    assert_true(named);
    /* a new batch to the dead peer fails at once, without hanging */
    b = tent_allocate_batch(f->e, 1);
    int rc = tent_submit(f->e, b, r, 1);
    if (rc == 0)
        assert_int_equal(wait_done(f, b, 5000).status, STATUS_FAILED);
    else
        assert_true(rc < 0);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    free(r);
}

/* Failover.  Both engines run memfabric and tcp; memfabric comes first in
 * the default order.  Mid-batch, the target's memfabric transport is
 * uninstalled (its mf_host instance destroyed: server, connections, all)
 * while the target engine keeps serving over tcp, as when the vendor's
 * service fails but the process lives.  The initiator's mf_host reports the
 * peer down; in-flight memfabric batches end failed and fail over to tcp
 * when polled; later requests are refused by memfabric at submission and go
 * to tcp.  Every task completes and every byte lands at the target. */
static void test_failover_memfabric_to_tcp(void **state)
{
    struct fixture *f = *state;
    int mfi = -1, tcpi = -1;
    assert_non_null(xport_of(f->e, TRANSPORT_MEMFABRIC, &mfi));
    assert_non_null(xport_of(f->e, TRANSPORT_TCP, &tcpi));
    struct memfabric_transport *mf = mf_of(f->e);
    const size_t len = (size_t)1 << 20, n = 64;
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
    }
    /* Before: memfabric carries everything, at the first attempt. */
    tent_batch_id_t b = tent_allocate_batch(f->e, 8);
    assert_int_equal(tent_submit(f->e, b, r, 8), 0);
    assert_int_equal(wait_done(f, b, 10000).status, STATUS_COMPLETED);
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(task_of(f->e, b, i)->xport, mfi);
        assert_int_equal(task_of(f->e, b, i)->attempts, 0);
    }
    assert_int_equal(tent_free_batch(f->e, b), 0);

    /* Rewrite all of it with fresh bytes, half in flight when memfabric
     * goes away at the target. */
    for (size_t i = 0; i < n * len; i++)
        f->src[i] = (uint8_t)rnd(f);
    b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n / 2), 0);
    assert_int_equal(e2e_peer_drop_memfabric(&f->peer), 0);
    long end = e2e_now_ms() + 5000;
    while (atomic_load(&mf->peer_down_events) == 0 && e2e_now_ms() < end)
        usleep(1000);
    assert_true(atomic_load(&mf->peer_down_events) > 0);
    assert_int_equal(tent_submit(f->e, b, r + n / 2, n / 2), 0);
    tent_status_t st = wait_done(f, b, 20000);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, n * len);
    int failed_over = 0;
    for (size_t i = 0; i < n; i++) {
        struct tent_task *t = task_of(f->e, b, i);
        if (i >= n / 2) /* refused by memfabric (peer down): tcp */
            assert_int_equal(t->xport, tcpi);
        failed_over += t->attempts > 0;
    }
    assert_true(failed_over >= (int)(n / 2));
    assert_int_equal(tent_free_batch(f->e, b), 0);
    assert_true(e2e_peer_hash(&f->peer, false, 0, n * len) ==
                e2e_fnv(f->src, n * len));

    /* And back: reads go to tcp now; every byte checked. */
    memset(f->dst, 0, n * len);
    for (size_t i = 0; i < n; i++) {
        r[i].opcode = OPCODE_READ;
        r[i].source = f->dst + i * len;
    }
    b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n), 0);
    assert_int_equal(wait_done(f, b, 20000).status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    assert_memory_equal(f->dst, f->src, n * len);
}

int main(int argc, char **argv)
{
    g_proto = argc > 1 ? argv[1] : "host_tcp";
    if (strcmp(g_proto, "host_tcp") != 0 && strcmp(g_proto, "host_shm") != 0) {
        fprintf(stderr, "usage: %s host_tcp|host_shm\n", argv[0]);
        return 2;
    }
    /* Children inherit the environment. */
    setenv("MF_PROTOCOL", g_proto, 1);
    setenv("MF_SMEM_LIBRARY", MF_HOST_LIB, 1);
    setenv("MF_TRANSFER_TIMEOUT", "5000", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_only_memfabric_installed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_random_reads_writes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_plain_memory_and_freed_buffer,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_target_mid_batch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failover_memfabric_to_tcp,
                                        setup_with_tcp, teardown),
    };
    char name[64];
    snprintf(name, sizeof(name), "e2e_memfabric_%s", g_proto);
    return cmocka_run_group_tests_name(name, tests, NULL, NULL);
}
