/* End-to-end: unregister revokes (issue 19 item 1).  Once the owner's
 * tent_unregister_memory or tent_free_memory returns 0, no peer's copy over
 * any transport touches the range; a copy in flight then either finished
 * before the call returned or is reported FAILED to its initiator; a peer
 * that cannot be made to stop makes the call fail naming it (memory the
 * engine allocated is taken back from it instead).  Peers learn the change:
 * a request that meets a range its target no longer has refetches the
 * descriptor once, then succeeds or fails with the cause (item 3).
 *
 * Two processes on 127.0.0.1, once per transport (argv[1] "shm" or "tcp",
 * or "memfabric_host_tcp" / "memfabric_host_shm": the memfabric transport
 * alone on both sides, with mf_host as libmf_smem.so and MF_PROTOCOL
 * host_tcp or host_shm).  In some cases this process is the target and the
 * child the initiator (e2e_peer_open / e2e_peer_transfer_*), so that the
 * test can stop the initiator in the middle of its copy.
 *
 * Over memfabric the revocation is the vendor library's: the transport's
 * remove_buffer is smem_trans_deregister_mem, and a failure there keeps the
 * buffer registered.  Where the expectations differ from shm and tcp, the
 * case says so: mf_host cannot move the owner's pages away from a peer that
 * copies into them itself (host_shm), the vendor ABI has no read-only
 * registration, and a batch the vendor refuses (TENT_EVENDOR) is told
 * apart only by the descriptor fetched again. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include "e2e_peer.h"
#include "rpc/rpc.h"
#include "runtime/engine.h"
#include "tent/transfer_engine.h"
#include "transport/shm/shm_handle.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The transport under test. */
enum mode { M_SHM, M_TCP, M_MF_TCP, M_MF_SHM };
static enum mode g_mode;
static bool g_shm, g_tcp; /* the engine transports enabled (memfabric: none) */
static bool g_mf;         /* memfabric over mf_host */

/* MF_TRANSFER_TIMEOUT of the memfabric modes: the bound mf_host waits for a
 * peer still copying into a range being deregistered (host_shm), and on
 * each socket call (host_tcp: long enough for a child we keep stopped not
 * to lose its connections meanwhile). */
static int g_mf_timeout_ms;

#define LEN (4u << 20)

struct fixture {
    struct e2e_peer peer;
    tent_engine_t e;
    tent_segment_id_t seg;
    uint8_t *src;
};

static void config(void)
{
    e2e_set_memfabric(g_mf);
    e2e_config(g_shm, g_tcp);
    tent_set_config("revoke_timeout_ms", "300");
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    *state = f;
    if (!f || e2e_peer_start(&f->peer, LEN, g_shm, g_tcp) != 0)
        return -1;
    config();
    f->e = tent_create_engine();
    void *p;
    if (!f->e || tent_allocate_memory(f->e, &p, LEN, "cpu") ||
        tent_register_memory(f->e, p, LEN))
        return -1;
    f->src = p;
    return tent_open_segment(f->e, &f->seg, f->peer.name) ? -1 : 0;
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

/* n requests of len bytes from src to the peer's addr..., polled to their
 * end; returns how many COMPLETED. */
static int write_batch(struct fixture *f, uint64_t addr, size_t n, size_t len,
                       int opcode, int *code)
{
    tent_request_t r[8];
    for (size_t i = 0; i < n; i++)
        r[i] = (tent_request_t){.opcode = opcode,
                                .source = f->src + i * len,
                                .target_id = f->seg,
                                .target_offset = addr + i * len,
                                .length = len};
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    assert_int_not_equal(b, 0);
    int rc = tent_submit(f->e, b, r, n);
    if (rc) {
        /* the descriptor, fetched again by an earlier request, no longer
         * has the range: refused before anything started */
        assert_int_equal(tent_free_batch(f->e, b), 0);
        if (code)
            *code = rc;
        return 0;
    }
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, 30000, &st), 0);
    int done = 0;
    for (size_t i = 0; i < n; i++) {
        tent_status_t ts;
        assert_int_equal(tent_task_status(f->e, b, i, &ts), 0);
        done += ts.status == STATUS_COMPLETED;
        if (ts.status == STATUS_FAILED && code) {
            int native;
            assert_int_equal(
                tent_task_error(f->e, b, i, code, &native, NULL, 0), 0);
        }
    }
    assert_int_equal(tent_free_batch(f->e, b), 0);
    return done;
}

/* After the owner unregistered a buffer, hundreds of writes from a peer
 * that opened its segment before all fail and leave it untouched. */
static void hammer_after_unregister(struct fixture *f, bool plain)
{
    uint64_t addr = plain ? f->peer.reg_base : f->peer.rw_base;
    size_t len = 4096;
    memset(f->src, 0x5a, 8 * len);
    assert_int_equal(write_batch(f, addr, 4, len, OPCODE_WRITE, NULL), 4);
    assert_int_equal(plain ? e2e_peer_unregister_plain(&f->peer)
                           : e2e_peer_unregister_rw(&f->peer),
                     0);
    uint64_t h0 = e2e_peer_hash(&f->peer, plain, 0, 4 * len);
    int completed = 0, code = 0;
    for (int round = 0; round < 300; round++) {
        memset(f->src, round, 8 * len);
        completed += write_batch(f, addr, 4, len, OPCODE_WRITE, &code);
    }
    print_message("    %s buffer: 300 batches after the unregister, %d task(s) "
                  "completed, last cause %s\n",
                  plain ? "malloc" : "memfd", completed, tent_strerror(code));
    assert_int_equal(completed, 0);
    /* memfabric: the vendor refuses the batch (mf_host: SM_INVALID_PARAM,
     * the range is not registered there), TENT_EVENDOR, for which the
     * descriptor is fetched again: then TENT_ERANGE as everywhere */
    assert_int_equal(code, TENT_ERANGE);
    assert_int_equal(e2e_peer_hash(&f->peer, plain, 0, 4 * len), h0);
}

static void test_unregister_revokes_allocated(void **state)
{
    hammer_after_unregister(*state, false);
}

static void test_unregister_revokes_malloc(void **state)
{
    hammer_after_unregister(*state, true);
}

/* Registered again read-only: writes fail with EPERM (after one refetch),
 * reads go on, the memory is untouched.  memfabric: the vendor ABI has no
 * read-only registration, so the buffer is not registered with it any more:
 * writes fail with the vendor's refusal (TENT_EVENDOR) or, once the fresh
 * descriptor is in, TENT_EPERM; reads fail as no transport can serve a
 * read-only buffer (memfabric is the only one) or with the vendor's
 * refusal. */
static void test_reregister_read_only(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(
        write_batch(f, f->peer.rw_base, 2, 4096, OPCODE_WRITE, NULL), 2);
    assert_int_equal(e2e_peer_reregister_rw(&f->peer, PERM_GLOBAL_READ_ONLY),
                     0);
    uint64_t h0 = e2e_peer_hash(&f->peer, false, 0, 8192);
    int code = 0;
    memset(f->src, 0x77, 8192);
    assert_int_equal(
        write_batch(f, f->peer.rw_base, 2, 4096, OPCODE_WRITE, &code), 0);
    if (g_mf)
        assert_true(code == TENT_EVENDOR || code == TENT_EPERM);
    else
        assert_int_equal(code, TENT_EPERM);
    assert_int_equal(e2e_peer_hash(&f->peer, false, 0, 8192), h0);
    memset(f->src, 0, 8192);
    if (g_mf) {
        assert_int_equal(
            write_batch(f, f->peer.rw_base, 2, 4096, OPCODE_READ, &code), 0);
        assert_true(code == TENT_EVENDOR || code == TENT_ENOTRANSPORT);
        return;
    }
    assert_int_equal(
        write_batch(f, f->peer.rw_base, 2, 4096, OPCODE_READ, NULL), 2);
    assert_int_equal(e2e_fnv(f->src, 8192), h0);
}

/* Unregistered and registered again: the old descriptor's entry is stale,
 * the request refetches it once and completes. */
static void test_reregister_refetches_and_completes(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(
        write_batch(f, f->peer.rw_base, 1, 4096, OPCODE_WRITE, NULL), 1);
    assert_int_equal(e2e_peer_unregister_rw(&f->peer), 0);
    assert_int_equal(e2e_peer_reregister_rw(&f->peer, PERM_GLOBAL_READ_WRITE),
                     0);
    memset(f->src, 0x3c, 4096);
    assert_int_equal(
        write_batch(f, f->peer.rw_base, 1, 4096, OPCODE_WRITE, NULL), 1);
    assert_int_equal(e2e_peer_hash(&f->peer, false, 0, 4096),
                     e2e_fnv(f->src, 4096));
}

/* One batch of small writes in runs of RUN like, contiguous requests that
 * alternate between the peer's memfd and plain buffers (RUNS runs per
 * call, each call at its own offsets); the plain buffer is unregistered
 * between two calls on the batch, once the first call's tasks are done.  Every task of the first call completes;
 * in the second exactly the plain runs fail (TENT_ERANGE once the
 * descriptor is fetched again), the memfd runs complete; the bytes are
 * where the completed tasks say and the revoked range is untouched. */
static void test_mixed_batch_one_buffer_revoked(void **state)
{
    enum { RUN = 16, RUNS = 4, SZ = 64, CALL = RUN * RUNS };
    struct fixture *f = *state;
    if (g_mf) {
        /* mf_host fails a vendor batch as a whole when one of its ranges
         * is not registered there (the plain buffer never is) */
        print_message("    skipped over memfabric: one vendor batch\n");
        return;
    }
    e2e_pattern_fill(f->src, 2 * CALL * SZ, 7);
    tent_batch_id_t b = tent_allocate_batch(f->e, 2 * CALL);
    assert_int_not_equal(b, 0);
    uint64_t h_plain = 0;
    for (int call = 0; call < 2; call++) {
        if (call == 1) {
            /* the first call's copies over (a copy still in flight at
             * the unregister may fail), then the revocation */
            tent_status_t st0;
            assert_int_equal(e2e_wait(f->e, b, 30000, &st0), 0);
            assert_int_equal(st0.status, STATUS_COMPLETED);
            assert_int_equal(e2e_peer_unregister_plain(&f->peer), 0);
            h_plain = e2e_peer_hash(&f->peer, true, 0, 2 * CALL * SZ);
        }
        tent_request_t r[CALL];
        for (size_t i = 0; i < CALL; i++) {
            bool plain = (i / RUN) % 2;
            uint64_t base = plain ? f->peer.reg_base : f->peer.rw_base;
            size_t k = (size_t)call * CALL + i; /* this request's slice */
            r[i] = (tent_request_t){.opcode = OPCODE_WRITE,
                                    .source = f->src + k * SZ,
                                    .target_id = f->seg,
                                    .target_offset = base + k * SZ,
                                    .length = SZ};
        }
        assert_int_equal(tent_submit(f->e, b, r, CALL), TENT_OK);
    }
    tent_status_t st;
    assert_int_equal(e2e_wait(f->e, b, 30000, &st), 0);
    assert_int_equal(st.status, STATUS_FAILED);
    uint64_t want_bytes = 0;
    for (size_t k = 0; k < 2 * CALL; k++) {
        bool plain = (k % CALL / RUN) % 2;
        bool revoked = plain && k >= CALL;
        tent_status_t ts;
        assert_int_equal(tent_task_status(f->e, b, k, &ts), 0);
        if (ts.status != (revoked ? STATUS_FAILED : STATUS_COMPLETED)) {
            int code = 0, native = 0;
            char msg[256] = "";
            tent_task_error(f->e, b, k, &code, &native, msg, sizeof(msg));
            fail_msg("task %zu (%s, call %zu) ended %d: %s (%s)", k,
                     plain ? "plain" : "memfd", k / CALL, ts.status,
                     tent_strerror(code), msg);
        }
        if (revoked) {
            int code = 0, native;
            assert_int_equal(
                tent_task_error(f->e, b, k, &code, &native, NULL, 0), 0);
            assert_int_equal(code, TENT_ERANGE);
            continue;
        }
        assert_int_equal(ts.transferred_bytes, SZ);
        want_bytes += SZ;
        assert_int_equal(e2e_peer_hash(&f->peer, plain, k * SZ, SZ),
                         e2e_fnv(f->src + k * SZ, SZ));
    }
    assert_int_equal(st.transferred_bytes, want_bytes);
    assert_int_equal(e2e_peer_hash(&f->peer, true, 0, 2 * CALL * SZ), h_plain);
    assert_int_equal(tent_free_batch(f->e, b), 0);
    /* every pin the batch took on our buffer was released */
    assert_int_equal(tent_unregister_memory(f->e, f->src, LEN), 0);
}

/* The target restarts at the same name (same port) with a new, larger
 * buffer: a write inside the old buffer's range and one beyond it both
 * complete into the new process's memory after one descriptor refetch;
 * nothing is reported COMPLETED into the dead process's pages. */
static void test_restarted_target_refetches(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(
        write_batch(f, f->peer.rw_base, 1, 4096, OPCODE_WRITE, NULL), 1);
    char host[64];
    uint16_t port;
    assert_int_equal(
        tent_rpc_parse_addr(f->peer.name, host, sizeof(host), &port), 0);
    char name[256];
    snprintf(name, sizeof(name), "%s", f->peer.name);
    e2e_peer_quit(&f->peer);
    char ps[16];
    snprintf(ps, sizeof(ps), "%u", (unsigned)port);
    const char *kv[] = {"rpc_server_port", ps, NULL};
    e2e_set_child_config(kv);
    int rc = e2e_peer_start(&f->peer, 2 * LEN, g_shm, g_tcp);
    e2e_set_child_config(NULL);
    assert_int_equal(rc, 0);
    assert_string_equal(f->peer.name, name);
    memset(f->src, 0x6e, 8192);
    /* inside the old range (the new buffer holds it too), and past it */
    uint64_t in = f->peer.rw_base, past = f->peer.rw_base + LEN + 4096;
    int code = 0;
    assert_int_equal(write_batch(f, in, 1, 4096, OPCODE_WRITE, &code), 1);
    assert_int_equal(write_batch(f, past, 1, 4096, OPCODE_WRITE, &code), 1);
    assert_int_equal(e2e_peer_hash(&f->peer, false, 0, 4096),
                     e2e_fnv(f->src, 4096));
    assert_int_equal(e2e_peer_hash(&f->peer, false, LEN + 4096, 4096),
                     e2e_fnv(f->src, 4096));
}

/* The case of the issue: a malloc'ed 8 MiB buffer is unregistered and
 * freed, glibc gives its pages back and new threads' stacks land there;
 * the initiator's writes to the old address never reach them. */
static void test_freed_malloc_buffer_never_written(void **state)
{
    struct fixture *f = *state;
    const uint64_t big = 8u << 20;
    uint64_t a = e2e_peer_register(&f->peer, big);
    assert_int_not_equal(a, 0);
    assert_int_equal(write_batch(f, a, 4, 4096, OPCODE_WRITE, NULL), 4);
    assert_int_equal(e2e_peer_release_malloc(&f->peer, a, big), 0);
    /* the peer's threads run while we write to where the buffer was */
    struct e2e_peer *p = &f->peer;
    struct {
        char op;
        uint8_t plain;
        int32_t arg;
        uint64_t off, len;
    } cmd = {.op = 'T', .arg = 1500};
    assert_int_equal(write(p->cmd_fd, &cmd, sizeof(cmd)), (ssize_t)sizeof(cmd));
    int completed = 0, rounds = 0;
    for (long end = e2e_now_ms() + 1200; e2e_now_ms() < end; rounds++)
        for (uint64_t off = 0; off < big; off += 2u << 20)
            completed += write_batch(f, a + off, 4, 4096, OPCODE_WRITE, NULL);
    int32_t ok = 0;
    assert_int_equal(read(p->ans_fd, &ok, sizeof(ok)), (ssize_t)sizeof(ok));
    int st = 0;
    assert_int_equal(waitpid(p->pid, &st, WNOHANG), 0); /* still alive */
    print_message("    %d rounds of writes to the freed buffer: %d "
                  "completed, the peer's thread stacks %s\n",
                  rounds, completed, ok ? "intact" : "CORRUPTED");
    assert_int_equal(completed, 0);
    assert_int_equal(ok, 1);
}

/* ---- this process as the target, the child as the initiator ----------- */

struct owner {
    tent_engine_t e;
    void *buf;
    size_t len;
    char name[256];
};

/* This process's engine with a buffer of len bytes, from
 * tent_allocate_memory (allocated) or malloc, registered. */
static void owner_start(struct owner *o, size_t len, bool allocated)
{
    config();
    o->e = tent_create_engine();
    assert_non_null(o->e);
    o->len = len;
    if (allocated)
        assert_int_equal(tent_allocate_memory(o->e, &o->buf, len, "cpu"), 0);
    else
        assert_non_null(o->buf = aligned_alloc(4096, len));
    memset(o->buf, 0xee, len);
    assert_int_equal(tent_register_memory(o->e, o->buf, len), 0);
    assert_int_equal(tent_segment_name(o->e, o->name, sizeof(o->name)), 0);
}

/* Whether every byte of [p, p+n) is still o's fill.  By memcmp, a page
 * at a time: a byte loop under ThreadSanitizer is slow enough to miss a
 * whole copy between two looks. */
static bool untouched(const uint8_t *p, size_t n)
{
    static uint8_t fill[4096];
    if (fill[0] != 0xee)
        memset(fill, 0xee, sizeof(fill));
    for (size_t off = 0; off < n; off += sizeof(fill)) {
        size_t k = n - off < sizeof(fill) ? n - off : sizeof(fill);
        if (memcmp(p + off, fill, k) != 0)
            return false;
    }
    return true;
}

/* memfabric: the peer's copy into o's memory has reached its last MiB (it
 * ended, or is about to). */
static bool mf_copy_over(const struct owner *o)
{
    return g_mf &&
           !untouched((const uint8_t *)o->buf + o->len - (1u << 20), 1u << 20);
}

/* Whether a peer's copy into o's memory is running now. */
static bool copy_running(struct owner *o)
{
    struct tent_engine *e = tent_engine_cast(o->e);
    if (g_mf) {
        /* The vendor's copy is out of the engine's sight: it runs when its
         * bytes (the peer's pattern, never the fill) have begun to land and
         * the last MiB is still untouched. */
        const uint8_t *b = o->buf;
        return !untouched(b, 4096) &&
               untouched(b + o->len - (1u << 20), 1u << 20);
    }
    if (g_shm) {
        for (int i = 0; i < e->nxports; i++)
            if (e->xports[i]->ops->type == TRANSPORT_SHM)
                return tent_shm_copies_in_progress(e->xports[i]) > 0;
        return false;
    }
    pthread_mutex_lock(&e->pin_lock);
    bool busy = false;
    for (size_t i = 0; i < e->local->nbufs; i++)
        busy |= e->local->bufs[i]->pins != NULL;
    pthread_mutex_unlock(&e->pin_lock);
    return busy;
}

/* memfabric_host_tcp: how far each 1 MiB slice of o's memory (one request
 * of mf_host, received front to back by its server) is written, summed;
 * *partial when one is written part of the way. */
static uint64_t mf_written(const struct owner *o, bool *partial)
{
    const size_t slice = 1u << 20;
    uint64_t sum = 0;
    *partial = false;
    for (size_t off = 0; off < o->len; off += slice) {
        size_t lo = 0, hi = slice - 3; /* the first 4 bytes still ours */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (untouched((const uint8_t *)o->buf + off + mid, 4))
                hi = mid;
            else
                lo = mid + 1;
        }
        sum += lo;
        *partial |= lo > 0 && lo < slice - 3;
    }
    return sum;
}

/* memfabric_host_tcp, the child stopped: once what it had sent has landed,
 * whether a server thread of ours is left inside a request, waiting for
 * the rest of its bytes (a stop between two requests would test less). */
static bool mf_request_left_open(const struct owner *o)
{
    bool partial = false;
    uint64_t last = mf_written(o, &partial);
    for (int i = 0; i < 100; i++) {
        usleep(20000);
        uint64_t now = mf_written(o, &partial);
        if (now == last)
            break;
        last = now;
    }
    return partial;
}

/* Stops the child once its copy into o runs; false if it ended first. */
static bool stop_mid_copy(struct owner *o, pid_t child)
{
    for (long end = e2e_now_ms() + 20000; e2e_now_ms() < end;) {
        if (mf_copy_over(o))
            return false; /* missed: the caller lets it end and tries again */
        if (copy_running(o)) {
            kill(child, SIGSTOP);
            /* stopped for real, and still inside the copy */
            for (int i = 0; i < 5000; i++) {
                char path[64], st[512] = "";
                snprintf(path, sizeof(path), "/proc/%d/stat", (int)child);
                FILE *fp = fopen(path, "r");
                if (fp) {
                    size_t n = fread(st, 1, sizeof(st) - 1, fp);
                    st[n] = 0;
                    fclose(fp);
                }
                const char *p = strrchr(st, ')');
                if (p && p[2] == 'T')
                    break;
                usleep(1000);
            }
            /* tcp: the child may have sent every byte before the stop
             * (under load, our server lags), then the copy still ends;
             * with the last quarter untouched it has not (more than any
             * socket buffers hold) */
            bool tcp = !g_mf && !g_shm;
            if (copy_running(o) &&
                (g_mode != M_MF_TCP || mf_request_left_open(o)) &&
                (!tcp ||
                 untouched((const uint8_t *)o->buf + o->len - o->len / 4,
                           o->len / 4)))
                return true;
            /* stopped between two copies: let it go on, catch it later in
             * the same transfer */
            kill(child, SIGCONT);
        }
    }
    return false;
}

/* The child writes big bytes into our memory; we stop it in the middle and
 * unregister.  Over shm, engine-allocated memory is taken back: the
 * unregister returns 0 after revoke_timeout_ms, our memory never changes
 * afterwards, and the child's copy is FAILED once it resumes; malloc memory
 * cannot be taken back: the unregister fails naming the child, the range
 * stays registered, and once the child is gone a second unregister
 * succeeds.  Over tcp the copy runs in our own server thread: the
 * unregister aborts its connection and returns at once.
 *
 * memfabric_host_tcp: as tcp, the copy runs in mf_host's server thread,
 * which stops touching the range at once (the stalled peer's remaining
 * bytes go nowhere and its batch fails), so the unregister returns 0 at
 * once.  memfabric_host_shm: the child copies into our memory itself and
 * mf_host cannot move our pages away from it, engine-allocated or not.
 * Stopped inside a copy, it makes smem_trans_deregister_mem fail after
 * MF_TRANSFER_TIMEOUT: the unregister fails, the buffer stays registered
 * (the peer is named in mf_host's log: the vendor ABI returns a code, not
 * a message), the child's batch is FAILED when it resumes, and a second
 * unregister succeeds once it is gone.  Stopped between two copies (the
 * stop caught no copy in the middle), the unregister returns 0 at once and
 * the child's batch fails without touching the memory again. */
static void stalled_initiator(bool allocated)
{
    const size_t big = 256u << 20;
    /* the child first: this process has no threads yet (TSan) */
    struct e2e_peer p;
    assert_int_equal(e2e_peer_start(&p, big, g_shm, g_tcp), 0);
    struct owner o;
    owner_start(&o, big, allocated);
    assert_int_equal(e2e_peer_open(&p, o.name), 0);
    bool stalled = false;
    for (int attempt = 0; attempt < 10 && !stalled; attempt++) {
        assert_int_equal(e2e_peer_transfer_start(&p, OPCODE_WRITE, false,
                                                 (uintptr_t)o.buf, big),
                         0);
        stalled = stop_mid_copy(&o, p.pid);
        if (!stalled) { /* it finished before we caught it: again */
            kill(p.pid, SIGCONT);
            int code;
            assert_int_equal(e2e_peer_transfer_end(&p, &code),
                             STATUS_COMPLETED);
            memset(o.buf, 0xee, big); /* memfabric's copy_running */
        }
    }
    assert_true(stalled);
    long t0 = e2e_now_ms();
    int rc = tent_unregister_memory(o.e, o.buf, big);
    long took = e2e_now_ms() - t0;
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", tent_last_error());
    uint64_t h0 = e2e_fnv(o.buf, big);
    print_message("    %s memory, initiator stopped mid-copy: unregister "
                  "returned %s after %ld ms%s%s\n",
                  allocated ? "allocated" : "malloc", tent_strerror(rc), took,
                  rc ? ": " : "", rc ? msg : "");
    kill(p.pid, SIGCONT);
    int code = 0;
    int status = e2e_peer_transfer_end(&p, &code);
    print_message("    the initiator's task ended %s (%s)\n",
                  status == STATUS_FAILED ? "FAILED" : "COMPLETED",
                  tent_strerror(code));
    if (g_mode == M_MF_SHM) {
        if (rc == TENT_OK) {
            assert_true(took < 250);
            assert_int_equal(e2e_fnv(o.buf, big), h0);
        } else {
            assert_int_equal(rc, TENT_EBUSY);
            assert_true(took >= g_mf_timeout_ms - 50);
            assert_non_null(strstr(msg, "stays registered"));
            assert_non_null(strstr(msg, "MF_TRANSFER_TIMEOUT"));
            e2e_peer_quit(&p);
            assert_int_equal(tent_unregister_memory(o.e, o.buf, big), TENT_OK);
        }
        assert_int_equal(status, STATUS_FAILED);
    } else if (!g_shm) {
        /* tcp: the copy runs in our server thread, whose connection the
         * unregister shuts down: it returns at once, whatever the memory
         * (memfabric_host_tcp: mf_host's server thread stops copying) */
        assert_int_equal(rc, TENT_OK);
        assert_true(took < 250);
        assert_int_equal(status, STATUS_FAILED);
        assert_int_equal(e2e_fnv(o.buf, big), h0);
    } else if (allocated) {
        assert_int_equal(rc, TENT_OK);
        assert_true(took >= 250);
        assert_int_equal(status, STATUS_FAILED);
        /* whatever the child wrote after our unregister went elsewhere */
        assert_int_equal(e2e_fnv(o.buf, big), h0);
    } else {
        char pid[32];
        snprintf(pid, sizeof(pid), "%ld", (long)p.pid);
        assert_int_equal(rc, TENT_EBUSY);
        assert_non_null(strstr(msg, pid));
        assert_non_null(strstr(msg, "stays registered"));
        /* the stalled copy was reported FAILED; the initiator fetched the
         * descriptor again, found the range still registered and ran it
         * once more, which may complete */
        assert_true(status == STATUS_FAILED || status == STATUS_COMPLETED);
        e2e_peer_quit(&p);
        assert_int_equal(tent_unregister_memory(o.e, o.buf, big), TENT_OK);
    }
    if (p.pid > 0)
        e2e_peer_quit(&p);
    if (allocated)
        assert_int_equal(tent_free_memory(o.e, o.buf), 0);
    else
        free(o.buf);
    tent_destroy_engine(o.e);
}

static void test_stalled_initiator_allocated(void **state)
{
    (void)state;
    stalled_initiator(true);
}

static void test_stalled_initiator_malloc(void **state)
{
    (void)state;
    stalled_initiator(false);
}

/* The initiator dies in the middle of its copy: the unregister does not
 * wait for it. */
static void test_initiator_killed_mid_copy(void **state)
{
    (void)state;
    const size_t big = 256u << 20;
    /* the child first: this process has no threads yet (TSan) */
    struct e2e_peer p;
    assert_int_equal(e2e_peer_start(&p, big, g_shm, g_tcp), 0);
    struct owner o;
    owner_start(&o, big, false);
    assert_int_equal(e2e_peer_open(&p, o.name), 0);
    bool stalled = false;
    for (int attempt = 0; attempt < 10 && !stalled; attempt++) {
        assert_int_equal(e2e_peer_transfer_start(&p, OPCODE_WRITE, false,
                                                 (uintptr_t)o.buf, big),
                         0);
        stalled = stop_mid_copy(&o, p.pid);
        if (!stalled) {
            kill(p.pid, SIGCONT);
            int code;
            assert_int_equal(e2e_peer_transfer_end(&p, &code),
                             STATUS_COMPLETED);
            memset(o.buf, 0xee, big);
        }
    }
    assert_true(stalled);
    e2e_peer_kill(&p);
    long t0 = e2e_now_ms();
    assert_int_equal(tent_unregister_memory(o.e, o.buf, big), TENT_OK);
    long took = e2e_now_ms() - t0;
    print_message("    initiator killed mid-copy: unregister took %ld ms\n",
                  took);
    assert_true(took < 250);
    free(o.buf);
    tent_destroy_engine(o.e);
}

int main(int argc, char **argv)
{
    static const char *const names[] = {
        [M_SHM] = "shm",
        [M_TCP] = "tcp",
        [M_MF_TCP] = "memfabric_host_tcp",
        [M_MF_SHM] = "memfabric_host_shm",
    };
    const char *mode = argc > 1 ? argv[1] : "shm";
    signal(SIGPIPE, SIG_IGN);
    int m = 0;
    while (m < 4 && strcmp(mode, names[m]))
        m++;
    if (m == 4) {
        fprintf(stderr,
                "usage: %s shm|tcp|memfabric_host_tcp|"
                "memfabric_host_shm\n",
                argv[0]);
        return 2;
    }
    g_mode = (enum mode)m;
    g_shm = g_mode == M_SHM;
    g_tcp = g_mode == M_TCP;
    g_mf = g_mode == M_MF_TCP || g_mode == M_MF_SHM;
    e2e_set_memfabric(g_mf); /* before the first child starts */
    if (g_mf) {
#ifdef MF_HOST_LIB
        /* Children inherit the environment. */
        setenv("MF_PROTOCOL", g_mode == M_MF_TCP ? "host_tcp" : "host_shm", 1);
        setenv("MF_SMEM_LIBRARY", MF_HOST_LIB, 1);
        g_mf_timeout_ms = g_mode == M_MF_SHM ? 1000 : 5000;
        char to[16];
        snprintf(to, sizeof(to), "%d", g_mf_timeout_ms);
        setenv("MF_TRANSFER_TIMEOUT", to, 1);
#else
        fprintf(stderr, "%s: built without memfabric over mf_host\n", argv[0]);
        return 2;
#endif
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unregister_revokes_allocated,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_unregister_revokes_malloc, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reregister_read_only, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reregister_refetches_and_completes,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_restarted_target_refetches, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_mixed_batch_one_buffer_revoked,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_freed_malloc_buffer_never_written,
                                        setup, teardown),
        cmocka_unit_test(test_stalled_initiator_allocated),
        cmocka_unit_test(test_stalled_initiator_malloc),
        cmocka_unit_test(test_initiator_killed_mid_copy),
    };
    char group[64];
    snprintf(group, sizeof(group), "e2e_revoke_%s", mode);
    return cmocka_run_group_tests_name(group, tests, NULL, NULL);
}
