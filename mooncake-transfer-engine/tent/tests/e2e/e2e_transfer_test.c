/* End-to-end: two engines in two processes on 127.0.0.1.  One suite, run
 * once per transport (argv[1]):
 *  - "tcp", "shm": that transport only on both sides; "shm" also runs the
 *    tcp-to-shm failover;
 *  - "memfabric_host_tcp", "memfabric_host_shm": the memfabric transport
 *    with mf_host as libmf_smem.so (MF_PROTOCOL host_tcp / host_shm;
 *    MF_SMEM_LIBRARY names the mf_host library of this build, MF_HOST_LIB),
 *    memfabric only on both sides, and memfabric-to-tcp failover.
 * Every byte moved is checked against a mirror of the target's memory.
 * Cases that only make sense for some transports say so in main's table. */
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
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>
// clang-format on

#include "../common/prio_stream.h"
#include "common/clock.h"
#include "e2e_peer.h"
#include "runtime/batch.h"
#include "runtime/engine.h"
#include "sched/rails.h"
#include "tent/transfer_engine.h"
#include "transport/shm/shm_handle.h"
#ifdef E2E_MEMFABRIC
#include "transport/memfabric/memfabric_transport.h"
#endif

/* The transport under test and what its runs use. */
enum { X_TCP = 1, X_SHM = 2, X_MF = 4, X_ANY = X_TCP | X_SHM | X_MF };
/* tcp_loopback_congestion's test alone (it needs a third algorithm: where
 * there is none, the run reports skipped, 77, to CTest) */
enum { X_CC = 8 };
/* tcp's priority tests, on their own (tent_e2e_priorities_tcp_test) */
enum { X_PRIO = 16 };

struct e2e_mode {
    const char *name;  /* argv[1], and the group name after "e2e_" */
    unsigned bit;      /* X_* */
    const char *proto; /* MF_PROTOCOL for memfabric, else NULL */
    size_t rw_len;     /* the peer's rw buffer, and src/dst */
    size_t big;        /* the one large request */
    size_t max_batch;  /* the largest batch of test_random_reads_writes */
    bool seed_pid;     /* the random stream also depends on the pid */
};

static const struct e2e_mode modes[] = {
    {"tcp", X_TCP, NULL, (size_t)80 << 20, (size_t)64 << 20, 1024, false},
    {"loopback_cc", X_CC, NULL, (size_t)1 << 20, (size_t)1 << 20, 1, false},
    {"priorities_tcp", X_PRIO, NULL, (size_t)80 << 20, (size_t)64 << 20, 1,
     false},
    {"shm", X_SHM, NULL, (size_t)80 << 20, (size_t)64 << 20, 1024, false},
    {"memfabric_host_tcp", X_MF, "host_tcp", (size_t)48 << 20,
     ((size_t)17 << 20) + 12345, 256, true},
    {"memfabric_host_shm", X_MF, "host_shm", (size_t)48 << 20,
     ((size_t)17 << 20) + 12345, 256, true},
};

static const struct e2e_mode *g_x;

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

/* The runtime's record of task i of batch id (see engine.h: slot is the low
 * half of the id, minus one). */
static struct tent_task *task_of(tent_engine_t h, tent_batch_id_t id, size_t i)
{
    struct tent_engine *e = tent_engine_cast(h);
    struct tent_batch *b = tent_batch_peek(e, id);
    assert_non_null(b);
    assert_true(i < b->ntasks);
    return &b->tasks[i];
}

/* A peer with an rw buffer of len bytes and an engine with src and dst of
 * len bytes, both with the transports given (memfabric: as the mode says),
 * the peer's segment open. */
static int setup_common(void **state, size_t len, bool shm, bool tcp,
                        uint64_t seed)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    f->rng = seed;
    f->len = len;
    e2e_set_memfabric(g_x->bit == X_MF);
    if (e2e_peer_start(&f->peer, len, shm, tcp) != 0) {
        free(f);
        return -1;
    }
    *state = f; /* teardown cleans up from here on */
    e2e_config(shm, tcp);
    f->e = tent_create_engine();
    if (!f->e)
        return -1;
    void *p;
    /* TENT's pattern: allocate, then register. */
    if (tent_allocate_memory(f->e, &p, len, "cpu") ||
        tent_register_memory(f->e, p, len))
        return -1;
    f->src = p;
    if (tent_allocate_memory(f->e, &p, len, "cpu") ||
        tent_register_memory(f->e, p, len))
        return -1;
    f->dst = p;
    f->mirror = malloc(len);
    if (!f->mirror)
        return -1;
    e2e_pattern_fill(f->mirror, len, 0);
    if (tent_open_segment(f->e, &f->seg, f->peer.name))
        return -1;
    return 0;
}

/* The transport under test only, on both sides. */
static int setup(void **state)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    if (g_x->seed_pid)
        seed ^= (uint64_t)getpid();
    return setup_common(state, g_x->rw_len, g_x->bit == X_SHM,
                        (g_x->bit & (X_TCP | X_PRIO)) != 0, seed);
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (!f)
        return 0;
    if (f->peer.pid > 0)
        e2e_peer_quit(&f->peer);
    if (f->e)
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
 * random lengths (log-uniform up to maxlen) and offsets and random bytes,
 * reads clear their destination first.  Only one transport is installed:
 * every task completes at its first attempt. */
static void run_batch(struct fixture *f, int opcode, size_t n, size_t maxlen,
                      uint64_t *offs, uint64_t *lens)
{
    size_t lane = f->len / n;
    if (maxlen > lane)
        maxlen = lane;
    tent_request_t *r = calloc(n, sizeof(*r));
    assert_non_null(r);
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
        assert_int_equal(task_of(f->e, b, i)->attempts, 0);
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

/* n requests of len bytes in consecutive lanes of the peer's rw buffer:
 * writes from src, or (alternate) writes and reads from dst in turn. */
static void lanes(struct fixture *f, tent_request_t *r, size_t n, size_t len,
                  bool alternate)
{
    memset(r, 0, n * sizeof(*r));
    for (size_t i = 0; i < n; i++) {
        bool rd = alternate && i % 2;
        r[i].opcode = rd ? OPCODE_READ : OPCODE_WRITE;
        r[i].source = (rd ? f->dst : f->src) + i * len;
        r[i].target_id = f->seg;
        r[i].target_offset = f->peer.rw_base + i * len;
        r[i].length = len;
    }
}

static void test_random_reads_writes(void **state)
{
    struct fixture *f = *state;
    static const size_t batches[] = {1, 3, 32, 256, 1024};
    for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
        size_t n = batches[bi];
        if (n > g_x->max_batch)
            break;
        uint64_t *offs = calloc(n, 8), *lens = calloc(n, 8);
        assert_true(offs && lens);
        run_batch(f, OPCODE_WRITE, n, (size_t)4 << 20, offs, lens);
        run_batch(f, OPCODE_READ, n, 0, offs, lens);
        free(offs);
        free(lens);
    }
    /* 1 B and the large request at random offsets, alone in their batch. */
    uint64_t off = rnd(f) % f->len, len = 1;
    run_batch(f, OPCODE_WRITE, 1, 1, &off, &len);
    run_batch(f, OPCODE_READ, 1, 0, &off, &len);
    const size_t big = g_x->big;
    uint64_t offs[1] = {rnd(f) % (f->len - big)}, lens[1] = {big};
    for (size_t k = 0; k < big; k++)
        f->src[offs[0] + k] = (uint8_t)rnd(f);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = f->src + offs[0],
                        .target_id = f->seg,
                        .target_offset = f->peer.rw_base + offs[0],
                        .length = big};
    tent_status_t st;
    assert_int_equal(e2e_run_one(f->e, &r, 30000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, big);
    memcpy(f->mirror + offs[0], f->src + offs[0], big);
    run_batch(f, OPCODE_READ, 1, 0, offs, lens);
    /* The target's own view of its memory matches, byte for byte. */
    assert_true(e2e_peer_hash(&f->peer, false, 0, f->len) ==
                e2e_fnv(f->mirror, f->len));
}

static int submit_one(struct fixture *f, int opcode, uint64_t addr,
                      uint64_t len, int *status)
{
    tent_request_t r = {.opcode = opcode,
                        .source = f->dst,
                        .target_id = f->seg,
                        .target_offset = addr,
                        .length = len};
    tent_status_t st;
    int rc = e2e_run_one(f->e, &r, 10000, &st);
    assert_true(rc <= 0);
    if (rc == 0)
        *status = st.status;
    return rc;
}

static void test_bounds_and_permissions(void **state)
{
    struct fixture *f = *state;
    struct e2e_peer *p = &f->peer;
    int st = -1;
    /* past the end of the rw buffer, and an address nobody registered */
    assert_int_equal(
        submit_one(f, OPCODE_WRITE, p->rw_base + f->len - 8, 16, &st),
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

/* Resident set of this process, in KiB. */
static long rss_kib(void)
{
    long pages = 0, resident = 0;
    FILE *fp = fopen("/proc/self/statm", "r");
    if (fp) {
        if (fscanf(fp, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(fp);
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The target allocates, registers, unregisters and frees a buffer 1,000
 * times; the initiator writes every one of them through shm.  Its mappings
 * of the peer's memory follow what the peer still holds: the count and the
 * resident set stay bounded (they grew by one 256 KiB mapping per cycle
 * when mappings were kept until the transport was uninstalled). */
static void test_peer_alloc_free_cycles_bounded(void **state)
{
    struct fixture *f = *state;
    struct tent_engine *e = tent_engine_cast(f->e);
    struct tent_transport *shm = NULL;
    for (int i = 0; i < e->nxports; i++)
        if (e->xports[i]->ops->type == TRANSPORT_SHM)
            shm = e->xports[i];
    assert_non_null(shm);
    struct tent_segment *seg = tent_engine_segment(f->e, f->seg);
    assert_non_null(seg);
    const size_t len = (size_t)256 << 10;
    const int cycles = 1000;
    size_t most = 0;
    long rss_early = 0;
    for (int i = 0; i < cycles; i++) {
        uint64_t a = e2e_peer_alloc(&f->peer, len);
        assert_int_not_equal(a, 0);
        /* the address may be one a freed buffer had: refresh as a program
         * would after the peer tells it about new memory */
        assert_int_equal(e->seg_ops->fetch(e, seg->v.name, seg), 0);
        memset(f->dst, (uint8_t)i, len);
        int st = -1;
        assert_int_equal(submit_one(f, OPCODE_WRITE, a, len, &st), 0);
        assert_int_equal(st, STATUS_COMPLETED);
        assert_int_equal(e2e_peer_release(&f->peer, a, len), 0);
        size_t n = tent_shm_mapping_count(shm);
        most = n > most ? n : most;
        if (i == 99)
            rss_early = rss_kib();
    }
    long rss_late = rss_kib();
    print_message("peer alloc/free cycles: at most %zu mappings; RSS %ld KiB "
                  "after 100 cycles, %ld KiB after %d\n",
                  most, rss_early, rss_late, cycles);
    /* the fixture's own buffers plus the newest one or two */
    assert_in_range(most, 1, 8);
    /* kept mappings would add 900 x 256 KiB = 225 MiB */
    assert_true(rss_late - rss_early < (32L << 10));
}

#ifdef E2E_MEMFABRIC
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

/* Waits (bounded) for mf_host's peer-down callback and says whether it has
 * fired. */
static bool mf_peer_down_seen(struct memfabric_transport *mf)
{
    long end = e2e_now_ms() + 5000;
    while (atomic_load(&mf->peer_down_events) == 0 && e2e_now_ms() < end)
        usleep(1000);
    return atomic_load(&mf->peer_down_events) > 0;
}
#endif

/* The target is killed with half a batch in flight: the rest may start or
 * be refused, nothing hangs, everything submitted after the kill FAILED
 * within a bound, and a new batch to the dead peer fails too.  memfabric:
 * mf_host's peer-down callback names the target. */
static void test_kill_target_mid_batch(void **state)
{
    struct fixture *f = *state;
#ifdef E2E_MEMFABRIC
    struct memfabric_transport *mf = NULL;
    char expect_id[256] = "";
    if (g_x->bit == X_MF) {
        mf = mf_of(f->e);
        assert_non_null(mf);
        const char *peer_id = tent_segment_attr(
            tent_engine_segment(f->e, f->seg), MEMFABRIC_UNIQUE_ID_ATTR);
        assert_non_null(peer_id);
        snprintf(expect_id, sizeof(expect_id), "%s", peer_id);
    }
#endif
    const size_t len = (size_t)256 << 10;
    const size_t n = f->len / len < 256 ? f->len / len : 256;
    tent_request_t *r = calloc(n, sizeof(*r));
    assert_non_null(r);
    lanes(f, r, n, len, true);
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
    /* the bound: transports/tcp/timeout_ms (1500) plus slack; mf_host sees
     * the control connection drop at once, well under its own I/O bound */
    assert_in_range(took, 0, e2e_tcp_timeout_ms() + 3500);
    assert_int_equal(tent_free_batch(f->e, b), 0);
#ifdef E2E_MEMFABRIC
    if (mf) { /* the vendor's peer-down callback named the target */
        assert_true(mf_peer_down_seen(mf));
        pthread_mutex_lock(&mf->peer_lock);
        bool named = false;
        for (struct mf_peer *p = mf->peers; p; p = p->next)
            named |= strcmp(p->unique_id, expect_id) == 0 &&
                     atomic_load(&p->down);
        pthread_mutex_unlock(&mf->peer_lock);
        assert_true(named);
    }
#endif
    /* a new batch to the dead peer fails, without hanging */
    assert_true(e2e_run_one(f->e, r, e2e_tcp_timeout_ms() + 5000, &st) <= 0);
    assert_int_equal(st.status, STATUS_FAILED);
    free(r);
}

/* A target that stops answering (SIGSTOP: sockets stay open, nothing is
 * read) turns tcp tasks FAILED within about transports/tcp/timeout_ms
 * (e2e_tcp_timeout_ms, 1500): the stopped process's kernel still drains a
 * little into its receive buffer, and that partial progress must not restart
 * the clock (it did: 3 x timeout_ms). */
static void test_stalled_target_times_out(void **state)
{
    struct fixture *f = *state;
    const size_t n = 32, len = (size_t)2 << 20;
    tent_request_t *r = calloc(n, sizeof(*r));
    lanes(f, r, n, len, true);
    kill(f->peer.pid, SIGSTOP);
    long t0 = e2e_now_ms();
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n), 0);
    tent_status_t st;
    const long to = e2e_tcp_timeout_ms();
    assert_int_equal(e2e_wait(f->e, b, (int)to * 4 + 5000, &st), 0);
    long took = e2e_now_ms() - t0;
    assert_int_equal(tent_free_batch(f->e, b), 0);
    /* a new write batch, on fresh connections to the still stopped peer */
    t0 = e2e_now_ms();
    b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n), 0);
    tent_status_t st2;
    assert_int_equal(e2e_wait(f->e, b, (int)to * 4 + 5000, &st2), 0);
    long took2 = e2e_now_ms() - t0;
    assert_int_equal(tent_free_batch(f->e, b), 0);
    /* one small write: tcp runs it to completion on this thread */
    t0 = e2e_now_ms();
    b = tent_allocate_batch(f->e, 1);
    tent_request_t small = r[0];
    small.length = 4096;
    int src3 = tent_submit(f->e, b, &small, 1);
    tent_status_t st3 = {.status = STATUS_FAILED};
    if (src3 == 0)
        assert_int_equal(e2e_wait(f->e, b, (int)to * 4 + 5000, &st3), 0);
    long took3 = e2e_now_ms() - t0;
    print_message("stalled target: small write FAILED after %ld ms\n", took3);
    assert_int_equal(st3.status, STATUS_FAILED);
    assert_in_range(took3, 0, 2 * to - 100);
    kill(f->peer.pid, SIGCONT);
    print_message("stalled target: batches FAILED after %ld and %ld ms\n", took,
                  took2);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(st2.status, STATUS_FAILED);
    assert_in_range(took, to * 2 / 3, 2 * to - 100);
    assert_in_range(took2, to * 2 / 3, 2 * to - 100);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    free(r);
}

/* Whether the n bytes at a equal those at b, read while the engine may
 * still be writing a: the one deliberate race of this file (it watches
 * bytes land without a status call, which is what would order them), so
 * TSan is told to leave it alone; the test compares again after a status
 * call has ordered the bytes. */
__attribute__((noinline, no_sanitize("thread"))) static bool
landed(const volatile uint8_t *a, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

/* An initiator engine of its own (tcp only, timeout_ms 30 s, key = value),
 * with len bytes of registered memory at *mem, and the fixture's peer
 * opened as *seg. */
static tent_engine_t prio_engine(struct fixture *f, const char *key,
                                 const char *value, size_t len, uint8_t **mem,
                                 tent_segment_id_t *seg)
{
    e2e_config(false, true);
    /* a slice queued behind a stream of others is not late */
    tent_set_config("transports/tcp/timeout_ms", "30000");
    if (key)
        tent_set_config(key, value);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    void *p;
    assert_int_equal(tent_allocate_memory(e, &p, len, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, p, len), 0);
    *mem = p;
    assert_int_equal(tent_open_segment(e, seg, f->peer.name), 0);
    return e;
}

static void prio_engine_end(tent_engine_t e, uint8_t *mem, size_t len)
{
    assert_int_equal(tent_unregister_memory(e, mem, len), 0);
    assert_int_equal(tent_free_memory(e, mem), 0);
    tent_destroy_engine(e);
}

/* tcp priorities: LOW writes of 4 x 16 MiB are queued when a HIGH write of
 * 4 KiB is submitted; the HIGH one goes ahead of the LOW windows still
 * queued, so it completes while LOW bytes are still pending (served in
 * order, it would wait behind most of 64 MiB).  Every byte of both lands. */
static void test_tcp_high_ahead_of_low(void **state)
{
    struct fixture *f = *state;
    const size_t blk = (size_t)16 << 20, nlow = 4, len = nlow * blk + 4096;
    uint8_t *mem;
    tent_segment_id_t seg;
    tent_engine_t e = prio_engine(f, NULL, NULL, len, &mem, &seg);
    for (size_t i = 0; i < len; i++)
        mem[i] = (uint8_t)(i * 7 + 3);
    tent_request_t low[4];
    for (size_t i = 0; i < nlow; i++)
        low[i] = (tent_request_t){.opcode = OPCODE_WRITE,
                                  .source = mem + i * blk,
                                  .target_id = seg,
                                  .target_offset = f->peer.rw_base + i * blk,
                                  .length = blk,
                                  .priority = TENT_PRIO_LOW};
    tent_request_t high = {.opcode = OPCODE_WRITE,
                           .source = mem + nlow * blk,
                           .target_id = seg,
                           .target_offset = f->peer.rw_base + nlow * blk,
                           .length = 4096,
                           .priority = TENT_PRIO_HIGH};
    tent_batch_id_t bl = tent_allocate_batch(e, nlow);
    tent_batch_id_t bh = tent_allocate_batch(e, 1);
    assert_int_equal(tent_submit(e, bl, low, nlow), 0);
    assert_int_equal(tent_submit(e, bh, &high, 1), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(e, bh, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    size_t pending = 0;
    for (size_t i = 0; i < nlow; i++) {
        assert_int_equal(tent_task_status(e, bl, i, &st), 0);
        pending += st.status == STATUS_PENDING || st.status == STATUS_WAITING;
    }
    print_message("tcp: the HIGH 4 KiB write completed with %zu of %zu LOW "
                  "16 MiB writes pending\n",
                  pending, nlow);
    if (pending == 0)
        fail_msg("the HIGH write completed after every LOW one");
    assert_int_equal(e2e_wait(e, bl, 30000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, nlow * blk);
    assert_int_equal(tent_free_batch(e, bl), 0);
    assert_int_equal(tent_free_batch(e, bh), 0);
    assert_true(e2e_peer_hash(&f->peer, false, 0, len) == e2e_fnv(mem, len));
    prio_engine_end(e, mem, len);
}

/* One run of test_tcp_low_not_starved (ps_run_fn; ctx: the fixture):
 * HIGH writes of 1 MiB, TCP_NHIGH in flight (about 70 ms of work queued
 * here, so that a feeder thread the scheduler holds back for a while
 * leaves no gap: with 48 the control run failed 2 times in 3, and with 128
 * -- 17 ms at 7.5 GB/s -- once in a parallel ctest run), and a LOW write of
 * 1 MiB after them.  The HIGH writes go to TCP_NDST places (the same bytes
 * to each place). */
#define TCP_NHIGH 512
#define TCP_NDST  48
static double tcp_low_under_high(void *ctx, const char *promo_us, double secs,
                                 int *nhigh)
{
    struct fixture *f = ctx;
    const size_t mib = (size_t)1 << 20, len = (TCP_NDST + 1) * mib;
    uint8_t *mem;
    tent_segment_id_t seg;
    tent_engine_t e =
        prio_engine(f, "transports/tcp/priority_promotion_timeout_us",
                    promo_us, len, &mem, &seg);
    for (size_t i = 0; i < len; i++)
        mem[i] = (uint8_t)(i * 11 + 1);
    tent_request_t hr[TCP_NHIGH];
    for (int i = 0; i < TCP_NHIGH; i++) {
        const size_t at = (size_t)(i % TCP_NDST + 1) * mib;
        hr[i] = (tent_request_t){.opcode = OPCODE_WRITE,
                                 .source = mem + at,
                                 .target_id = seg,
                                 .target_offset = f->peer.rw_base + at,
                                 .length = mib,
                                 .priority = TENT_PRIO_HIGH};
    }
    tent_request_t lr = {.opcode = OPCODE_WRITE,
                         .source = mem,
                         .target_id = seg,
                         .target_offset = f->peer.rw_base,
                         .length = mib,
                         .priority = TENT_PRIO_LOW};
    double done_at = ps_low_under_high(e, hr, TCP_NHIGH, &lr, secs, nhigh);
    assert_true(e2e_peer_hash(&f->peer, false, 0, len) == e2e_fnv(mem, len));
    prio_engine_end(e, mem, len);
    return done_at;
}

/* tcp promotion keeps LOW from starving (ps_check_promotion): under a
 * stream of HIGH writes that keeps the rail's queue full, a LOW write
 * completes while the stream runs (priority_promotion_timeout_us, 10 ms),
 * and with promotion off (0) it is still not done after a second of the
 * stream.  (Under TSan this run once met a window with no answer for
 * 30 s: the peer's rpc workers were reporting, and suppressing, every word
 * of each 1 MiB body as a race -- the test writes the same places from many
 * connections.  The target's copies are now hidden from TSan instead,
 * common/tsan.h.) */
static void test_tcp_low_not_starved(void **state)
{
    ps_check_promotion(tcp_low_under_high, *state, "tcp, LOW 1 MiB");
}

/* A 1 MiB read that tcp sends from this thread over a borrowed connection
 * (one window, one rail): nobody polls, yet its answer is read into dst --
 * the transport's lend thread moves lent windows on -- and the first status
 * call finds it done or all but done. */
static void test_lent_read_lands_unpolled(void **state)
{
    struct fixture *f = *state;
    const size_t len = (size_t)1 << 20;
    tent_request_t r[4];
    /* warm up, writing random bytes: connections open, so the next
     * submits can borrow one */
    for (size_t i = 0; i < 4 * len; i++)
        f->src[i] = (uint8_t)(rnd(f) | 1); /* never the zeroed dst */
    lanes(f, r, 4, len, false);
    tent_batch_id_t b = tent_allocate_batch(f->e, 4);
    assert_int_equal(tent_submit(f->e, b, r, 4), 0);
    assert_int_equal(wait_done(f, b, 30000).status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    for (size_t i = 0; i < 4 * len; i++)
        f->mirror[i] = f->src[i];
    for (int round = 0; round < 3; round++) {
        size_t lane = (size_t)round % 4;
        memset(f->dst + lane * len, 0, len);
        tent_request_t rd = {.opcode = OPCODE_READ,
                             .source = f->dst + lane * len,
                             .target_id = f->seg,
                             .target_offset = f->peer.rw_base + lane * len,
                             .length = len};
        b = tent_allocate_batch(f->e, 1);
        long t0 = e2e_now_ms();
        assert_int_equal(tent_submit(f->e, b, &rd, 1), 0);
        /* no status call until every byte is in dst (bounded) */
        while (!landed(f->dst + lane * len, f->mirror + lane * len, len) &&
               e2e_now_ms() - t0 < 10000)
            usleep(1000);
        long took = e2e_now_ms() - t0;
        print_message("unpolled 1 MiB read %d landed in %ld ms\n", round,
                      took);
        assert_true(took < 10000);
        assert_int_equal(wait_done(f, b, 30000).status, STATUS_COMPLETED);
        assert_memory_equal(f->dst + lane * len, f->mirror + lane * len, len);
        assert_int_equal(tent_free_batch(f->e, b), 0);
    }
}

static double thread_cpu_ms(void)
{
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_THREAD, &ru), 0);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* A caller that polls a batch of large tasks without pause while pool
 * threads move them sleeps in its status calls until slices end: with the
 * target stopped for 300 ms mid-batch, the polling thread uses little CPU
 * (a spinning one takes a whole CPU).  Every byte lands. */
static void test_pooled_poll_sleeps(void **state)
{
    struct fixture *f = *state;
    const size_t len = (size_t)1 << 20, n = 32;
    tent_request_t r[32];
    lanes(f, r, n, len, false);
    for (size_t i = 0; i < n * len; i++)
        f->src[i] = (uint8_t)rnd(f);
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n), 0);
    kill(f->peer.pid, SIGSTOP);
    tent_status_t st;
    long calls = 0, t0 = e2e_now_ms();
    double cpu0 = thread_cpu_ms();
    do {
        assert_int_equal(tent_overall_status(f->e, b, &st), 0);
        calls++;
    } while (st.status == STATUS_PENDING && e2e_now_ms() - t0 < 300);
    double cpu = thread_cpu_ms() - cpu0;
    long took = e2e_now_ms() - t0;
    kill(f->peer.pid, SIGCONT);
    print_message("target stopped: %ld status calls, %.1f ms of CPU in %ld "
                  "ms\n",
                  calls, cpu, took);
    assert_int_equal(st.status, STATUS_PENDING);
    assert_true(cpu < 0.2 * (double)took);
    assert_int_equal(wait_done(f, b, 30000).status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    memset(f->dst, 0, n * len);
    for (size_t i = 0; i < n; i++) {
        r[i].opcode = OPCODE_READ;
        r[i].source = f->dst + i * len;
    }
    b = tent_allocate_batch(f->e, n);
    assert_int_equal(tent_submit(f->e, b, r, n), 0);
    assert_int_equal(wait_done(f, b, 30000).status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    assert_memory_equal(f->dst, f->src, n * len);
}

static void test_notifications_after_data(void **state)
{
    struct fixture *f = *state;
    const int nb = 20;
    int seq = 0;
    for (int i = 0; i < nb; i++) {
        uint64_t off = rnd(f) % (f->len - 65536), len = 1 + rnd(f) % 65536;
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

/* A program written against TENT's C API, in the order of TENT's own
 * benchmark: allocate, register (the _ex form, then once more as a second
 * user of the buffer would), open the target's segment, run batches of
 * writes and reads, unregister (as often as registered), close, free.  The
 * target (the peer) made its buffer the same way.  Every byte is checked on
 * both sides. */
static void test_tent_benchmark_sequence(void **state)
{
    struct fixture *f = *state;
    const size_t block = 64 << 10, nreq = 16, span = block * nreq;
    const size_t len = 2 * span;
    assert_true(len <= f->len);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    void *mem = NULL;
    assert_int_equal(tent_allocate_memory(e, &mem, len, "cpu"), 0);
    uint8_t *buf = mem;
    tent_memory_options_t o = {.permission = PERM_GLOBAL_READ_WRITE};
    assert_int_equal(tent_register_memory_ex(e, buf, len, &o), 0);
    assert_int_equal(tent_register_memory(e, buf, len), 0);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, f->peer.name), 0);
    for (int round = 0; round < 4; round++) {
        bool write = round % 2 == 0;
        uint64_t toff = (uint64_t)(round / 2) * span; /* in the peer's rw */
        uint8_t *local = buf + (write ? 0 : span);
        if (write)
            for (size_t i = 0; i < span; i++)
                local[i] = (uint8_t)(rnd(f) >> 7);
        else
            memset(local, 0, span);
        tent_request_t r[16];
        for (size_t i = 0; i < nreq; i++)
            r[i] = (tent_request_t){
                .opcode = write ? OPCODE_WRITE : OPCODE_READ,
                .source = local + i * block,
                .target_id = seg,
                .target_offset = f->peer.rw_base + toff + i * block,
                .length = block};
        tent_batch_id_t b = tent_allocate_batch(e, nreq);
        assert_int_not_equal(b, 0);
        assert_int_equal(tent_submit(e, b, r, nreq), 0);
        tent_status_t st;
        assert_int_equal(e2e_wait(e, b, 30000, &st), 0);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_int_equal(st.transferred_bytes, span);
        assert_int_equal(tent_free_batch(e, b), 0);
        if (write)
            assert_true(e2e_peer_hash(&f->peer, false, toff, span) ==
                        e2e_fnv(local, span));
        else /* what the previous round wrote there */
            assert_memory_equal(local, buf, span);
    }
    assert_int_equal(tent_unregister_memory(e, buf, len), 0);
    assert_int_equal(tent_unregister_memory(e, buf, 0), 0); /* by address */
    assert_int_equal(tent_unregister_memory(e, buf, len), TENT_ENOTREG);
    assert_int_equal(tent_close_segment(e, seg), 0);
    assert_int_equal(tent_free_memory(e, buf), 0);
    tent_destroy_engine(e);
}

/* The call sequence of NIXL's TENT backend: configuration, engine,
 * availability, the RPC address, its own memory registered with
 * tent_register_memory_ex (PERM_GLOBAL_READ_WRITE), the peer's segment,
 * a batch submitted with a notification, overall status, notifications,
 * cancel of the finished request, free, unregister, destroy.  The target
 * checks the notification against the bytes it received. */
static void test_nixl_backend_sequence(void **state)
{
    struct fixture *f = *state;
    const size_t len = (size_t)1 << 20;
    tent_set_config("log_level", "warning");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    assert_int_equal(tent_available(e), 1);
    char addr[256];
    uint16_t port = 0;
    assert_int_equal(tent_rpc_server_addr_port(e, addr, sizeof(addr), &port),
                     0);
    assert_true(port > 0);
    char name[300];
    assert_int_equal(tent_segment_name(e, name, sizeof(name)), 0);
    assert_non_null(strstr(name, addr));
    uint8_t *mem = aligned_alloc(4096, len);
    assert_non_null(mem);
    for (size_t i = 0; i < len; i++)
        mem[i] = (uint8_t)(rnd(f) >> 9);
    tent_memory_options_t o = {.permission = PERM_GLOBAL_READ_WRITE};
    assert_int_equal(tent_register_memory_ex(e, mem, len, &o), 0);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, f->peer.name), 0);
    const size_t n = 8, part = len / n;
    const uint64_t off = 4096;
    tent_request_t r[8];
    for (size_t i = 0; i < n; i++)
        r[i] =
            (tent_request_t){.opcode = OPCODE_WRITE,
                             .source = mem + i * part,
                             .target_id = seg,
                             .target_offset = f->peer.rw_base + off + i * part,
                             .length = part};
    char msg[128];
    snprintf(msg, sizeof(msg), "1 %llu %llu %llu", (unsigned long long)off,
             (unsigned long long)len, (unsigned long long)e2e_fnv(mem, len));
    tent_batch_id_t b = tent_allocate_batch(e, n);
    assert_int_not_equal(b, 0);
    assert_int_equal(tent_submit_notif(e, b, r, n, "e2e", msg), 0);
    tent_status_t st = {0};
    for (int k = 0; k < 300000; k++) {
        assert_int_equal(tent_overall_status(e, b, &st), 0);
        if (st.status != STATUS_PENDING)
            break;
        usleep(100);
    }
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, len);
    /* Nothing was sent to this side. */
    tent_notifi_info ni;
    memset(&ni, 0, sizeof(ni));
    assert_int_equal(tent_recv_notifs(e, &ni), 0);
    assert_int_equal(ni.num_records, 0);
    tent_free_notifs(&ni);
    /* A finished request: cancel has nothing to stop. */
    assert_int_equal(tent_cancel_task(e, b, 0), 0);
    assert_int_equal(tent_free_batch(e, b), 0);
    bool ok = false;
    assert_int_equal(e2e_peer_check_notifs(&f->peer, 1, 10000, &ok), 1);
    assert_true(ok);
    assert_true(e2e_peer_hash(&f->peer, false, off, len) == e2e_fnv(mem, len));
    assert_int_equal(tent_unregister_memory(e, mem, len), 0);
    tent_destroy_engine(e);
    free(mem);
}

/* tcp first (pinned by hint), shm second: the target's RPC server (the tcp
 * data path) stops mid-batch, and every task still completes through shm. */
static int setup_both(void **state)
{
    return setup_common(state, (size_t)16 << 20, true, true, 0x1234567);
}

static void test_failover_tcp_to_shm(void **state)
{
    struct fixture *f = *state;
    const size_t n = 64, len = (size_t)256 << 10;
    for (size_t i = 0; i < n * len; i++)
        f->src[i] = (uint8_t)rnd(f);
    tent_request_t r[64];
    lanes(f, r, n, len, false);
    for (size_t i = 0; i < n; i++)
        r[i].transport_hint = TRANSPORT_TCP;
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
            uint64_t off = i * (f->len / n) + rnd(f) % (f->len / n - len);
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
        for (size_t i = 0; i < n && st.status != STATUS_COMPLETED; i++) {
            int code = 0, native = 0;
            char why[512] = "";
            tent_task_error(f->e, b, i, &code, &native, why, sizeof(why));
            if (code)
                fail_msg("iteration %d: task %zu (%s of %llu bytes) ended "
                         "%d: %s (%s, native %d)",
                         iter, i, r[i].opcode == OPCODE_READ ? "read" : "write",
                         (unsigned long long)r[i].length, st.status, why,
                         tent_strerror(code), native);
        }
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
    e2e_config(g_x->bit == X_SHM, g_x->bit == X_TCP);
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
    assert_int_equal(tent_register_memory(e, a, len), 0);
    assert_int_equal(tent_allocate_memory(e, &b, len, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, b, len), 0);
    e2e_pattern_fill(a, len, 5);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = a,
                        .target_id = LOCAL_SEGMENT_ID,
                        .target_offset = (uintptr_t)b,
                        .length = len};
    tent_status_t st;
    assert_int_equal(e2e_run_one(e, &r, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_memory_equal(a, b, len);
    tent_destroy_engine(e);
}

/* Run in a child (which inherits this process's fds but not its POSIX
 * locks): how many memfds of tent_allocate_memory (distinct files) carry a
 * read lock held by this process, as a peer's shm check sees them.  This
 * process runs engine threads, so the child makes only async-signal-safe
 * calls: the descriptors are listed here, and the child checks each again
 * (still that memfd) and asks for its lock. */
static int memfds_locked_by_parent(void)
{
    enum { MAXFD = 512 };
    static char path[MAXFD][64];
    int fds[MAXFD], nfd = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    while (d && (de = readdir(d)) && nfd < MAXFD) {
        char link[256];
        int fd = atoi(de->d_name);
        if (de->d_name[0] == '.' || fd == dirfd(d))
            continue;
        snprintf(path[nfd], sizeof(path[nfd]), "/proc/self/fd/%d", fd);
        ssize_t l = readlink(path[nfd], link, sizeof(link) - 1);
        if (l <= 0)
            continue;
        link[l] = 0;
        if (strstr(link, "memfd:tent-buffer"))
            fds[nfd++] = fd;
    }
    if (d)
        closedir(d);
    pid_t parent = getpid();
    pid_t c = fork();
    if (c == 0) {
        int n = 0;
        ino_t seen[100];
        for (int i = 0; i < nfd; i++) {
            char link[256];
            ssize_t l = readlink(path[i], link, sizeof(link) - 1);
            if (l <= 0)
                continue;
            link[l] = 0;
            if (!strstr(link, "memfd:tent-buffer"))
                continue;
            struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
            struct stat sb;
            int fd = fds[i];
            if (fstat(fd, &sb) || fcntl(fd, F_GETLK, &lk) ||
                lk.l_type != F_RDLCK || lk.l_pid != parent)
                continue;
            bool dup = false;
            for (int k = 0; k < n; k++)
                dup |= seen[k] == sb.st_ino;
            if (!dup && n < 100)
                seen[n++] = sb.st_ino;
        }
        _exit(n > 100 ? 100 : n);
    }
    int st = 0;
    if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* Two engines of one process, the second writing into the first's memory
 * over shm: bytes arrive, the owner's lock (which other peers' checks read)
 * survives the second engine's mapping and its teardown, and once the
 * owner frees the memory a write there is not reported COMPLETED. */
static void test_two_engines_one_process(void **state)
{
    (void)state;
    e2e_config(true, false);
    tent_engine_t owner = tent_create_engine();
    tent_engine_t user = tent_create_engine();
    assert_non_null(owner);
    assert_non_null(user);
    const size_t len = (size_t)1 << 20;
    void *mem;
    assert_int_equal(tent_allocate_memory(owner, &mem, len, "cpu"), 0);
    assert_int_equal(tent_register_memory(owner, mem, len), 0);
    assert_int_equal(memfds_locked_by_parent(), 1);
    uint8_t *src = malloc(len); /* plain memory: no memfd of its own */
    assert_non_null(src);
    e2e_pattern_fill(src, len, 11);
    assert_int_equal(tent_register_memory(user, src, len), 0);
    char name[256];
    assert_int_equal(tent_segment_name(owner, name, sizeof(name)), 0);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(user, &seg, name), 0);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = src,
                        .target_id = seg,
                        .target_offset = (uintptr_t)mem,
                        .length = len};
    for (int round = 0; round < 2; round++) {
        tent_status_t st;
        assert_int_equal(e2e_run_one(user, &r, 10000, &st), 0);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_memory_equal(mem, src, len);
        assert_int_equal(memfds_locked_by_parent(), 1);
        if (round == 0) {
            /* the second round maps afresh in a new engine */
            assert_int_equal(tent_unregister_memory(user, src, len), 0);
            tent_destroy_engine(user);
            assert_int_equal(memfds_locked_by_parent(), 1);
            user = tent_create_engine();
            assert_non_null(user);
            assert_int_equal(tent_register_memory(user, src, len), 0);
            assert_int_equal(tent_open_segment(user, &seg, name), 0);
            r.target_id = seg;
        }
    }
    assert_int_equal(tent_unregister_memory(owner, mem, len), 0);
    assert_int_equal(tent_free_memory(owner, mem), 0);
    assert_int_equal(memfds_locked_by_parent(), 0);
    tent_status_t st;
    assert_true(e2e_run_one(user, &r, 10000, &st) <= 0);
    assert_int_not_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_unregister_memory(user, src, len), 0);
    tent_destroy_engine(user);
    tent_destroy_engine(owner);
    free(src);
}

/* Two engines in this process, configured as the caller left the global
 * config: owner with len bytes of registered memory at mem, user with len
 * bytes at src (filled with e2e_pattern from seed) and owner's segment
 * open as seg; port is owner's RPC port. */
struct local_pair {
    tent_engine_t owner, user;
    void *mem;
    uint8_t *src;
    size_t len;
    tent_segment_id_t seg;
    uint16_t port;
};

static void local_pair_open(struct local_pair *lp, size_t len, size_t seed)
{
    lp->owner = tent_create_engine();
    lp->user = tent_create_engine();
    assert_non_null(lp->owner);
    assert_non_null(lp->user);
    lp->len = len;
    assert_int_equal(tent_allocate_memory(lp->owner, &lp->mem, len, "cpu"), 0);
    assert_int_equal(tent_register_memory(lp->owner, lp->mem, len), 0);
    lp->src = malloc(len);
    assert_non_null(lp->src);
    e2e_pattern_fill(lp->src, len, seed);
    assert_int_equal(tent_register_memory(lp->user, lp->src, len), 0);
    char name[256];
    assert_int_equal(tent_segment_name(lp->owner, name, sizeof(name)), 0);
    const char *colon = strrchr(name, ':');
    assert_non_null(colon);
    lp->port = (uint16_t)atoi(colon + 1);
    assert_int_equal(tent_open_segment(lp->user, &lp->seg, name), 0);
}

static void local_pair_close(struct local_pair *lp)
{
    assert_int_equal(tent_unregister_memory(lp->user, lp->src, lp->len), 0);
    tent_destroy_engine(lp->user);
    assert_int_equal(tent_unregister_memory(lp->owner, lp->mem, lp->len), 0);
    assert_int_equal(tent_free_memory(lp->owner, lp->mem), 0);
    tent_destroy_engine(lp->owner);
    free(lp->src);
}

/* Whether fd is a connected TCP socket whose local or peer port is port
 * ('l' or 'p' in *side). */
static bool tcp_on_port(int fd, uint16_t port, char *side)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    int type = 0;
    socklen_t tl = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) || type != SOCK_STREAM ||
        getsockname(fd, (struct sockaddr *)&me, &ml) ||
        getpeername(fd, (struct sockaddr *)&peer, &pl) ||
        me.ss_family != AF_INET)
        return false;
    uint16_t lp = ntohs(((struct sockaddr_in *)&me)->sin_port);
    uint16_t pp = ntohs(((struct sockaddr_in *)&peer)->sin_port);
    if (lp != port && pp != port)
        return false;
    *side = lp == port ? 'l' : 'p';
    return true;
}

/* The congestion control of fd when it is a connected TCP socket whose local
 * or peer port is port ("l" or "p" in *side), else "". */
static void cc_on_port(int fd, uint16_t port, char *cc, size_t cap, char *side)
{
    cc[0] = 0;
    if (!tcp_on_port(fd, port, side))
        return;
    socklen_t l = (socklen_t)cap;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &l))
        cc[0] = 0;
    cc[cap - 1] = 0;
}

/* An algorithm this process may set that is neither the kernel's default
 * nor reno (the key's default), into out[16]; false when there is none. */
static bool cc_other(char *out)
{
    char dflt[64] = "", avail[512] = "";
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_congestion_control", "r");
    if (f) {
        if (!fgets(dflt, sizeof(dflt), f))
            dflt[0] = 0;
        fclose(f);
    }
    dflt[strcspn(dflt, " \n")] = 0;
    f = fopen("/proc/sys/net/ipv4/tcp_available_congestion_control", "r");
    if (!f)
        return false;
    if (!fgets(avail, sizeof(avail), f))
        avail[0] = 0;
    fclose(f);
    for (char *t = strtok(avail, " \n"); t; t = strtok(NULL, " \n")) {
        if (!strcmp(t, dflt) || !strcmp(t, "reno") || strlen(t) >= 16)
            continue;
        /* allowed to us? (unprivileged: tcp_allowed_congestion_control) */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        bool ok = fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, t,
                                        (socklen_t)strlen(t)) == 0;
        if (fd >= 0)
            close(fd);
        if (ok) {
            strcpy(out, t);
            return true;
        }
    }
    return false;
}

/* tcp_loopback_congestion: after a tcp write over loopback, every connection
 * the target accepted runs the configured algorithm, and so does at least
 * one the initiator opened to it (its data connection; control connections
 * keep the kernel's default).  The algorithm is neither the key's default
 * nor the kernel's, so that the setting shows. */
static void test_loopback_congestion(void **state)
{
    (void)state;
    char want[16];
    assert_true(cc_other(want)); /* main checked */
    e2e_config(false, true);
    tent_set_config("tcp_loopback_congestion", want);
    struct local_pair lp;
    local_pair_open(&lp, (size_t)1 << 20, 5);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = lp.src,
                        .target_id = lp.seg,
                        .target_offset = (uintptr_t)lp.mem,
                        .length = lp.len};
    tent_status_t st;
    assert_int_equal(e2e_run_one(lp.user, &r, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_memory_equal(lp.mem, lp.src, lp.len);
    uint16_t port = lp.port;
    int accepted = 0, set_out = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d));) {
        char cc[16], side = 0;
        cc_on_port(atoi(de->d_name), port, cc, sizeof(cc), &side);
        if (!cc[0])
            continue;
        if (side == 'l') {
            accepted++;
            if (strcmp(cc, want))
                fail_msg("a connection the target accepted runs %s", cc);
        } else if (!strcmp(cc, want)) {
            set_out++;
        }
    }
    closedir(d);
    assert_true(accepted > 0);
    assert_true(set_out > 0);
    local_pair_close(&lp);
}

/* How many of this process's connections to port (opened by it) want(fd,
 * arg) says yes to. */
static int conns_where(uint16_t port, bool (*want)(int fd, void *arg),
                       void *arg)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d));) {
        int fd = atoi(de->d_name);
        char side = 0;
        if (tcp_on_port(fd, port, &side) && side == 'p' && want(fd, arg))
            n++;
    }
    closedir(d);
    return n;
}

static bool has_prio(int fd, void *arg)
{
    int p = -1;
    socklen_t l = sizeof(p);
    return !getsockopt(fd, SOL_SOCKET, SO_PRIORITY, &p, &l) &&
           p == *(int *)arg;
}

/* How many of this process's connections to port have SO_PRIORITY prio. */
static int conns_with_prio(uint16_t port, int prio)
{
    return conns_where(port, has_prio, &prio);
}

/* An engine pair (local_pair) for the priority tests, with key = value
 * set: a registered 4 KiB buffer dst, the LOW write of the whole source to
 * the owner's memory and the HIGH read of its second 4 KiB into dst. */
struct prio_pair {
    struct local_pair lp;
    uint8_t *dst;
    tent_request_t low, high;
};

static void prio_pair_open(struct prio_pair *pp, const char *key,
                           const char *value, size_t seed)
{
    e2e_config(false, true);
    tent_set_config(key, value);
    local_pair_open(&pp->lp, (size_t)1 << 20, seed);
    pp->dst = calloc(1, 4096);
    assert_non_null(pp->dst);
    assert_int_equal(tent_register_memory(pp->lp.user, pp->dst, 4096), 0);
    pp->low = (tent_request_t){.opcode = OPCODE_WRITE,
                               .source = pp->lp.src,
                               .target_id = pp->lp.seg,
                               .target_offset = (uintptr_t)pp->lp.mem,
                               .length = pp->lp.len,
                               .priority = TENT_PRIO_LOW};
    pp->high = (tent_request_t){.opcode = OPCODE_READ,
                                .source = pp->dst,
                                .target_id = pp->lp.seg,
                                .target_offset = (uintptr_t)pp->lp.mem + 4096,
                                .length = 4096,
                                .priority = TENT_PRIO_HIGH};
}

/* Runs r (pp->low or pp->high) to completion and checks its bytes. */
static void prio_pair_run(struct prio_pair *pp, tent_request_t *r)
{
    tent_status_t st;
    if (r == &pp->low)
        memset(pp->lp.mem, 0, pp->lp.len);
    else
        memset(pp->dst, 0, 4096);
    assert_int_equal(e2e_run_one(pp->lp.user, r, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    if (r == &pp->low)
        assert_memory_equal(pp->lp.mem, pp->lp.src, pp->lp.len);
    else
        assert_memory_equal(pp->dst, pp->lp.src + 4096, 4096);
}

static void prio_pair_close(struct prio_pair *pp)
{
    assert_int_equal(tent_unregister_memory(pp->lp.user, pp->dst, 4096), 0);
    free(pp->dst);
    local_pair_close(&pp->lp);
}

/* One run of test_tcp_socket_priority: a LOW write, then a HIGH read, from
 * an engine with transports/tcp/socket_priority = mark to another in this
 * process; after each, how many of the initiator's connections carry the
 * class's SO_PRIORITY (the kernel's TC_PRIO_BULK, 2, and
 * TC_PRIO_INTERACTIVE, 6).  Every byte is checked. */
static void socket_priority_run(const char *mark, int *low_after_low,
                                int *high_after_low, int *high_after_high)
{
    struct prio_pair pp;
    prio_pair_open(&pp, "transports/tcp/socket_priority", mark, 9);
    prio_pair_run(&pp, &pp.low);
    *low_after_low = conns_with_prio(pp.lp.port, 2);
    *high_after_low = conns_with_prio(pp.lp.port, 6);
    prio_pair_run(&pp, &pp.high);
    *high_after_high = conns_with_prio(pp.lp.port, 6);
    prio_pair_close(&pp);
}

/* transports/tcp/socket_priority: a window goes out with its class as the
 * socket's SO_PRIORITY, so that a priority-aware qdisc (a Linux host's
 * default pfifo_fast, prio, mqprio) sends HIGH's packets ahead of LOW's;
 * LOW windows mark their connection TC_PRIO_BULK and a HIGH one
 * TC_PRIO_INTERACTIVE.  With the key false no connection is marked. */
static void test_tcp_socket_priority(void **state)
{
    (void)state;
    int low, high0, high;
    socket_priority_run("true", &low, &high0, &high);
    print_message("socket_priority on: %d connection(s) at TC_PRIO_BULK after "
                  "the LOW write, %d at TC_PRIO_INTERACTIVE after the HIGH "
                  "read\n",
                  low, high);
    assert_true(low > 0);
    assert_int_equal(high0, 0);
    assert_true(high > 0);
    socket_priority_run("false", &low, &high0, &high);
    assert_int_equal(low, 0);
    assert_int_equal(high0, 0);
    assert_int_equal(high, 0);
}

/* Whether fd is paced (SO_MAX_PACING_RATE set); *lowest (arg) keeps the
 * lowest rate seen, bytes/s. */
static bool is_paced(int fd, void *arg)
{
    unsigned long v = ~0UL, *lowest = arg;
    socklen_t l = sizeof(v);
    if (getsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &v, &l) ||
        v == ~0UL || v == 0xffffffffUL)
        return false;
    if (v < *lowest)
        *lowest = v;
    return true;
}

static void rail_cap_min(void *arg, const struct tent_rail_load *r)
{
    double *lowest = arg;
    if (!strcmp(r->owner, "tcp") && r->capacity_bps < *lowest)
        *lowest = r->capacity_bps;
}

/* The lowest learned capacity among engine's tcp rails (0 while one has
 * not learned it yet, or there is none). */
static double tcp_rails_capacity(tent_engine_t engine)
{
    double lowest = 1e300;
    tent_sched_foreach_rail(tent_engine_cast(engine)->sched, rail_cap_min,
                            &lowest);
    return lowest == 1e300 ? 0 : lowest;
}

/* One run of test_tcp_low_pacing with transports/tcp/low_pacing_gain =
 * gain: LOW 1 MiB writes until every tcp rail learned its capacity (0.8 s
 * of busy time, nothing paced: no other class went to the peer; on a
 * loaded machine that takes longer than on an idle one, so the loop waits
 * for the rails, bounded at 60 s, not for a fixed time), then a HIGH 4 KiB
 * read and a LOW 1 MiB write; how many connections were paced before the
 * HIGH read and after the last write, and the lowest rate.  Every byte is
 * checked. */
static void low_pacing_run(const char *gain, int *before, int *after,
                           unsigned long *rate)
{
    struct prio_pair pp;
    prio_pair_open(&pp, "transports/tcp/low_pacing_gain", gain, 11);
    uint64_t t0 = tent_now_ns();
    int writes = 0;
    while (writes < 16 || tcp_rails_capacity(pp.lp.user) <= 0) {
        if (tent_now_ns() - t0 > 60000000000ull)
            fail_msg("the tcp rails learned no capacity in 60 s (%d LOW "
                     "writes)",
                     writes);
        prio_pair_run(&pp, &pp.low);
        writes++;
    }
    double ms = (double)(tent_now_ns() - t0) / 1e6;
    *rate = ~0UL;
    *before = conns_where(pp.lp.port, is_paced, rate);
    prio_pair_run(&pp, &pp.high);
    prio_pair_run(&pp, &pp.low);
    *rate = ~0UL;
    *after = conns_where(pp.lp.port, is_paced, rate);
    print_message("low_pacing_gain %s: capacity learned after %d LOW writes "
                  "(%.0f ms); paced connections %d before the HIGH read, %d "
                  "after (lowest %.3f GB/s)\n",
                  gain, writes, ms, *before, *after,
                  *after ? (double)*rate / 1e9 : 0.0);
    prio_pair_close(&pp);
}

/* LOW windows go out paced (SO_MAX_PACING_RATE) just under the rail's
 * capacity while another class goes to the peer, so that they build no
 * queue in the kernel in front of a HIGH request; alone they are not
 * paced.  low_pacing_gain 0 turns it off. */
static void test_tcp_low_pacing(void **state)
{
    (void)state;
    int before, after;
    unsigned long rate;
    low_pacing_run("0.9", &before, &after, &rate);
    assert_int_equal(before, 0);
    assert_true(after > 0);
    /* a real rate: at least 10 MB/s (the capacity of loopback is GB/s) */
    assert_true(rate >= 10000000ul);
    low_pacing_run("0", &before, &after, &rate);
    assert_int_equal(before, 0);
    assert_int_equal(after, 0);
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
    e2e_config(g_x->bit == X_SHM, g_x->bit == X_TCP);
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
    assert_int_equal(tent_register_memory(a, dst, 65536), 0);
    assert_int_equal(tent_allocate_memory(b, &src, 65536, "cpu"), 0);
    assert_int_equal(tent_register_memory(b, src, 65536), 0);
    memset(src, 0x3c, 65536);
    assert_int_equal(tent_open_segment(b, &seg, name), 0); /* cached */
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = src,
                        .target_id = seg,
                        .target_offset = (uintptr_t)dst,
                        .length = 65536};
    tent_status_t st;
    assert_int_equal(e2e_run_one(b, &r, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_memory_equal(src, dst, 65536);
    tent_destroy_engine(b);
    tent_destroy_engine(a);
}

#ifdef E2E_MEMFABRIC
static void test_only_memfabric_installed(void **state)
{
    struct fixture *f = *state;
    struct tent_engine *e = tent_engine_cast(f->e);
    assert_int_equal(e->nxports, 1);
    struct memfabric_transport *mf = mf_of(f->e);
    assert_non_null(mf);
    assert_string_equal(mf->set.protocol, g_x->proto);
    /* the peer publishes its mf_host unique id "<host>:<port>" */
    struct tent_segment *seg = tent_engine_segment(f->e, f->seg);
    const char *id = tent_segment_attr(seg, MEMFABRIC_UNIQUE_ID_ATTR);
    assert_non_null(id);
    assert_true(strncmp(id, "127.0.0.1:", 10) == 0);
    assert_string_not_equal(id, mf->unique_id);
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
    tent_status_t st;
    assert_int_equal(e2e_run_one(f->e, &r, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_true(e2e_peer_hash(&f->peer, true, 100, 4096) ==
                e2e_fnv(f->src, 4096));

    assert_int_equal(e2e_peer_free_rw(&f->peer), 0);
    r.target_offset = f->peer.rw_base;
    assert_true(e2e_run_one(f->e, &r, 10000, &st) <= 0);
    assert_int_equal(st.status, STATUS_FAILED);
}

/* memfabric first, tcp second, on both sides. */
static int setup_with_tcp(void **state)
{
    return setup_common(state, (size_t)80 << 20, false, true,
                        0x9e3779b97f4a7c15ull ^ (uint64_t)getpid());
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
    lanes(f, r, n, len, false);
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

#endif

#define CASE(f, setup_fn, modes)                                               \
    {                                                                          \
        cmocka_unit_test_setup_teardown(f, setup_fn, teardown), (modes)        \
    }

int main(int argc, char **argv)
{
    const char *want = argc > 1 ? argv[1] : "tcp";
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
        if (strcmp(want, modes[i].name) == 0)
            g_x = &modes[i];
    if (!g_x) {
        fprintf(stderr,
                "usage: %s tcp|shm|memfabric_host_tcp|memfabric_host_shm|"
                "loopback_cc|priorities_tcp\n",
                argv[0]);
        return 2;
    }
    char other[16];
    if (g_x->bit == X_CC && !cc_other(other)) {
        printf("e2e_loopback_cc: no congestion control here besides reno and "
               "the kernel's default: skipped\n");
        return 77;
    }
    if (g_x->bit == X_MF) {
#ifdef E2E_MEMFABRIC
        /* Children inherit the environment. */
        setenv("MF_PROTOCOL", g_x->proto, 1);
        setenv("MF_SMEM_LIBRARY", MF_HOST_LIB, 1);
        setenv("MF_TRANSFER_TIMEOUT", "5000", 1);
#else
        fprintf(stderr, "%s: built without memfabric over mf_host\n", argv[0]);
        return 2;
#endif
    }
    static const struct {
        struct CMUnitTest test;
        unsigned modes; /* X_* it runs for */
    } all[] = {
        {cmocka_unit_test(test_single_process_local_segment), X_TCP | X_SHM},
        {cmocka_unit_test(test_ipv6_segment_name), X_TCP | X_SHM},
        {cmocka_unit_test(test_two_engines_one_process), X_SHM},
        {cmocka_unit_test(test_loopback_congestion), X_CC},
#ifdef E2E_MEMFABRIC
        CASE(test_only_memfabric_installed, setup, X_MF),
#endif
        CASE(test_random_reads_writes, setup, X_ANY),
        CASE(test_tent_benchmark_sequence, setup, X_ANY),
        CASE(test_nixl_backend_sequence, setup, X_ANY),
        CASE(test_bounds_and_permissions, setup, X_TCP | X_SHM),
        CASE(test_free_right_after_completed, setup, X_TCP | X_SHM),
        CASE(test_refetch_after_peer_registers, setup, X_TCP | X_SHM),
        CASE(test_notifications_after_data, setup, X_TCP | X_SHM),
        CASE(test_write_to_freed_memory_not_completed, setup, X_TCP | X_SHM),
        CASE(test_peer_alloc_free_cycles_bounded, setup, X_SHM),
#ifdef E2E_MEMFABRIC
        CASE(test_plain_memory_and_freed_buffer, setup, X_MF),
#endif
        CASE(test_kill_target_mid_batch, setup, X_ANY),
        /* tcp only: shm copies need no cooperation from the target */
        CASE(test_stalled_target_times_out, setup, X_TCP),
        CASE(test_lent_read_lands_unpolled, setup, X_TCP),
        CASE(test_pooled_poll_sleeps, setup, X_TCP),
        CASE(test_tcp_high_ahead_of_low, setup, X_PRIO),
        CASE(test_tcp_low_not_starved, setup, X_PRIO),
        {cmocka_unit_test(test_tcp_socket_priority), X_PRIO},
        {cmocka_unit_test(test_tcp_low_pacing), X_PRIO},
        CASE(test_failover_tcp_to_shm, setup_both, X_TCP | X_SHM),
#ifdef E2E_MEMFABRIC
        CASE(test_failover_memfabric_to_tcp, setup_with_tcp, X_MF),
#endif
    };
    struct CMUnitTest tests[sizeof(all) / sizeof(all[0])];
    size_t n = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i].modes & g_x->bit)
            tests[n++] = all[i].test;
    char name[64];
    snprintf(name, sizeof(name), "e2e_%s", g_x->name);
    return _cmocka_run_group_tests(name, tests, n, NULL, NULL);
}
