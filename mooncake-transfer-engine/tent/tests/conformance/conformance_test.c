/* The conformance suite: one set of two-process cases that every transport
 * moving memory must pass, instantiated once per built transport (as UCX's
 * uct tests are, per transport).  argv[1] names the transport; any further
 * arguments are KEY=VALUE environment settings the instantiation needs (the
 * memfabric one names its vendor library), inherited by the peers.
 *
 * The transport under test is the only one enabled on both sides: the
 * transport list is the build's (tent_transports_built.def, generated from
 * src/transport/transports.def), so a transport added there is disabled
 * here when another is under test and gets its own instantiation from
 * tests/conformance/CMakeLists.txt.  A transport that moves no memory
 * (tent_available() is 0 with it alone: the file transports) exits 77.
 *
 * The peer is tests/e2e's forked target (e2e_peer.h): an rw buffer of
 * f->len bytes filled with e2e_pattern, a read-only, a LOCAL-only and a
 * plain (malloc) registered buffer.  This process keeps a mirror of the
 * peer's rw buffer: every write is checked by the peer's own hash of the
 * range, every read byte by byte against the mirror, and a failed request
 * must leave the peer's bytes as they were.
 *
 * Not here: a peer restarted under the same name as a new incarnation (see
 * the marked place below), and tcp-only behaviour (priorities, lending:
 * tests/e2e). */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include "e2e_peer.h"
#include "tent/transfer_engine.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The peer's rw buffer, and this process's src and dst: BIG_LEN for the
 * sizes case (the largest request, 64 MiB, at an unaligned offset fits),
 * RW_LEN for the others (cheaper to set up). */
#define BIG_LEN ((size_t)66 << 20)
#define RW_LEN  ((size_t)32 << 20)
#define BIG     ((size_t)64 << 20)
/* The bound on one wait: a transfer that takes longer failed. */
#define WAIT_MS 30000

/* The built transports, in transports.def's order. */
static const char *const g_built[] = {
#define TENT_XPORT(name, suffix) #name,
#include "tent_transports_built.def"
};
#define NBUILT (sizeof(g_built) / sizeof(g_built[0]))

static const char *g_x; /* the transport under test */
static char g_keys[NBUILT][96];
/* transports/<name>/enable for every built transport: true for g_x only;
 * the peers get the same list (e2e_set_child_config) */
static const char *g_kv[2 * NBUILT + 1];

/* Cases skipped for a missing capability; all of them skipped: exit 77. */
static int g_skipped;
#define SKIP_CASE(...)                                                         \
    do {                                                                       \
        print_message("    skipped: " __VA_ARGS__);                            \
        print_message("\n");                                                   \
        g_skipped++;                                                           \
        skip();                                                                \
    } while (0)

/* Engine bugs this suite found that are not fixed yet: the case runs all
 * the same -- a COMPLETED request or a changed byte still fails it -- but
 * a wrong cause is tolerated and the case ends skipped, naming the bug. */
static const struct {
    const char *xport, *test, *bug;
} known_bugs[] = {
    /* mf_host reports a peer that stalled past MF_TRANSFER_TIMEOUT
     * (host_tcp) as down; memfabric marks the peer's handle and refuses it
     * until the handle is closed (the segment closed, a new incarnation),
     * though the peer runs again.  A restarted peer comes back under a new
     * id; a resumed one needs the vendor to say it is back, which the ABI
     * has no call for.  (host_shm copies without the peer.) */
    {"memfabric", "test_stalled_peer",
     "memfabric: a peer stopped past MF_TRANSFER_TIMEOUT stays marked down "
     "once it runs again, until its segment is opened again"},
};
static const char *g_bug; /* the running case's known bug, or NULL */
static bool g_bug_seen;   /* and it showed */

/* At the start of a case: whether it has a known bug over g_x. */
static void known_bug(const char *test)
{
    g_bug = NULL;
    g_bug_seen = false;
    for (size_t i = 0; i < sizeof(known_bugs) / sizeof(known_bugs[0]); i++)
        if (strcmp(known_bugs[i].xport, g_x) == 0 &&
            strcmp(known_bugs[i].test, test) == 0)
            g_bug = known_bugs[i].bug;
}

/* At the end of a case: skipped when its known bug showed. */
static void end_case(void)
{
    if (g_bug_seen)
        SKIP_CASE("known bug: %s", g_bug);
}

/* This process's next engine: the common e2e settings, g_x alone. */
static void config(void)
{
    e2e_set_memfabric(strcmp(g_x, "memfabric") == 0);
    e2e_config(false, false);
    for (size_t i = 0; i < NBUILT; i++)
        tent_set_config(g_kv[2 * i], g_kv[2 * i + 1]);
}

struct fx {
    struct e2e_peer peer;
    tent_engine_t e;
    tent_segment_id_t seg;
    uint8_t *src, *dst;
    uint8_t *mirror; /* the peer's rw buffer as it must be */
    size_t len;      /* of the peer's rw buffer, src, dst and mirror */
    uint64_t rng;
};

static uint64_t rnd(struct fx *f)
{
    f->rng ^= f->rng << 13;
    f->rng ^= f->rng >> 7;
    f->rng ^= f->rng << 17;
    return f->rng;
}

/* n bytes of fresh data at buf: the pattern from seed, every byte xor-ed
 * with a nonzero x, so that even data written where the peer's pattern has
 * the same seed changes every byte. */
static void fill_data(uint8_t *buf, size_t n, uint64_t seed, uint8_t x)
{
    e2e_pattern_fill(buf, n, seed);
    x |= 1;
    for (size_t i = 0; i < n; i++)
        buf[i] ^= x;
}

static int setup_len(void **state, size_t len)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    *state = f;
    f->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    f->len = len;
    g_bug = NULL; /* until the case names its known bug */
    g_bug_seen = false;
    config();
    if (e2e_peer_start(&f->peer, len, false, false) != 0) {
        print_error("the peer did not start\n");
        return -1;
    }
    f->e = tent_create_engine();
    void *p;
    if (!f->e || tent_allocate_memory(f->e, &p, len, "cpu") ||
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
    if (tent_open_segment(f->e, &f->seg, f->peer.name)) {
        print_error("open %s: %s\n", f->peer.name, tent_last_error());
        return -1;
    }
    return 0;
}

static int setup(void **state)
{
    return setup_len(state, RW_LEN);
}

static int setup_big(void **state)
{
    return setup_len(state, BIG_LEN);
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (!f)
        return 0;
    if (f->peer.pid > 0) {
        kill(f->peer.pid, SIGCONT);
        e2e_peer_quit(&f->peer);
    }
    if (f->e)
        tent_destroy_engine(f->e);
    free(f->mirror);
    free(f);
    return 0;
}

/* ---- running requests ---------------------------------------------------- */

/* The outcome of one request: its status, and the cause when it failed
 * (code TENT_E*, message); submit_rc is the refusal of tent_submit. */
struct outcome {
    int submit_rc;
    int status;
    int code;
    char msg[512];
};

/* Runs n requests in one batch to their end (bounded), each task's outcome
 * into out[i] (a refused submit gives every task its code). */
static void run(struct fx *f, const tent_request_t *r, size_t n,
                struct outcome *out)
{
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    assert_int_not_equal(b, TENT_INVALID_BATCH_ID);
    int rc = tent_submit(f->e, b, (tent_request_t *)r, n);
    if (rc) {
        for (size_t i = 0; i < n; i++) {
            out[i] = (struct outcome){
                .submit_rc = rc, .status = STATUS_FAILED, .code = rc};
            snprintf(out[i].msg, sizeof(out[i].msg), "%s", tent_last_error());
        }
        assert_int_equal(tent_free_batch(f->e, b), 0);
        return;
    }
    tent_status_t st;
    int w = e2e_wait(f->e, b, WAIT_MS, &st);
    if (w == 1)
        fail_msg("%zu request(s) over %s still pending after %d ms", n, g_x,
                 WAIT_MS);
    assert_int_equal(w, 0);
    for (size_t i = 0; i < n; i++) {
        tent_status_t ts;
        assert_int_equal(tent_task_status(f->e, b, i, &ts), 0);
        out[i] = (struct outcome){.status = ts.status};
        int native = 0;
        assert_int_equal(tent_task_error(f->e, b, i, &out[i].code, &native,
                                         out[i].msg, sizeof(out[i].msg)),
                         0);
    }
    assert_int_equal(tent_free_batch(f->e, b), 0);
}

static tent_request_t req(struct fx *f, int opcode, void *local,
                          uint64_t remote, uint64_t len)
{
    return (tent_request_t){.opcode = opcode,
                            .source = local,
                            .target_id = f->seg,
                            .target_offset = remote,
                            .length = len};
}

/* One request that must complete. */
static void must_complete(struct fx *f, tent_request_t r)
{
    struct outcome o;
    run(f, &r, 1, &o);
    if (o.status != STATUS_COMPLETED)
        fail_msg("%s of %llu B at 0x%llx over %s: status %d, %s: %s",
                 r.opcode == OPCODE_READ ? "read" : "write",
                 (unsigned long long)r.length,
                 (unsigned long long)r.target_offset, g_x, o.status,
                 tent_strerror(o.code), o.msg);
}

/* One request that must fail with cause want (refused at submit or FAILED
 * as a task), with a message. */
static void must_fail(struct fx *f, tent_request_t r, int want,
                      const char *what)
{
    struct outcome o;
    run(f, &r, 1, &o);
    print_message("    %s: %s, %s: %s\n", what,
                  o.submit_rc                    ? "refused"
                  : o.status == STATUS_COMPLETED ? "COMPLETED"
                  : o.status == STATUS_FAILED    ? "FAILED"
                                                 : "not ended",
                  tent_strerror(o.code), o.msg);
    if (o.status == STATUS_COMPLETED)
        fail_msg("%s over %s: COMPLETED", what, g_x);
    assert_int_equal(o.status, STATUS_FAILED);
    if (o.code != want && g_bug) {
        g_bug_seen = true;
    } else if (o.code != want)
        fail_msg("%s over %s: cause %s, want %s (%s)", what, g_x,
                 tent_strerror(o.code), tent_strerror(want), o.msg);
    assert_true(o.msg[0] != '\0');
}

/* A capability the transport lacks shows as a refusal saying no installed
 * transport can serve the request (TENT_ENOTRANSPORT, or TENT_ENOTSUP):
 * the case is skipped.  Anything else must complete. */
static bool must_complete_if_capable(struct fx *f, tent_request_t r,
                                     const char *capability)
{
    struct outcome o;
    run(f, &r, 1, &o);
    if (o.status != STATUS_COMPLETED &&
        (o.code == TENT_ENOTRANSPORT || o.code == TENT_ENOTSUP)) {
        print_message("    %s cannot %s: %s\n", g_x, capability, o.msg);
        return false;
    }
    if (o.status != STATUS_COMPLETED && g_bug) {
        print_message("    %s: %s\n", tent_strerror(o.code), o.msg);
        g_bug_seen = true;
        return false;
    }
    if (o.status != STATUS_COMPLETED)
        fail_msg("%s of %llu B at 0x%llx over %s: status %d, %s: %s",
                 r.opcode == OPCODE_READ ? "read" : "write",
                 (unsigned long long)r.length,
                 (unsigned long long)r.target_offset, g_x, o.status,
                 tent_strerror(o.code), o.msg);
    return true;
}

/* The peer's rw bytes [off, off+len) are the mirror's. */
static void assert_peer(struct fx *f, uint64_t off, uint64_t len)
{
    if (e2e_peer_hash(&f->peer, false, off, len) !=
        e2e_fnv(f->mirror + off, len))
        fail_msg("the peer's bytes [%llu, +%llu) are not what was written",
                 (unsigned long long)off, (unsigned long long)len);
}

/* Writes len bytes of fresh data from src+soff to the peer's rw+roff, then
 * reads them back into dst+doff: both checked, every byte. */
static void write_read(struct fx *f, size_t soff, uint64_t roff, size_t doff,
                       size_t len)
{
    fill_data(f->src + soff, len, rnd(f), (uint8_t)rnd(f));
    must_complete(
        f, req(f, OPCODE_WRITE, f->src + soff, f->peer.rw_base + roff, len));
    memcpy(f->mirror + roff, f->src + soff, len);
    assert_peer(f, roff, len);
    memset(f->dst + doff, 0, len);
    must_complete(
        f, req(f, OPCODE_READ, f->dst + doff, f->peer.rw_base + roff, len));
    assert_memory_equal(f->dst + doff, f->mirror + roff, len);
}

/* ---- data ---------------------------------------------------------------- */

/* 1 B to 64 MiB, each at an unaligned remote offset and unaligned local
 * addresses: written, checked at the peer, read back, checked here. */
static void test_sizes(void **state)
{
    struct fx *f = *state;
    static const size_t sizes[] = {1,
                                   2,
                                   3,
                                   7,
                                   8,
                                   63,
                                   4095,
                                   4096,
                                   4097,
                                   65537,
                                   ((size_t)1 << 20) + 1,
                                   ((size_t)16 << 20) - 3,
                                   BIG};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t len = sizes[i];
        size_t room = f->len - len; /* at least 2 MiB */
        /* odd remote and source offsets, a destination at 3 mod 4 */
        uint64_t roff = (rnd(f) % (room / 2)) * 2 + 1;
        size_t soff = (rnd(f) % (room / 2)) * 2 + 1;
        size_t doff = (rnd(f) % (room / 4)) * 4 + 3;
        long t0 = e2e_now_ms();
        write_read(f, soff, roff, doff, len);
        if (len >= ((size_t)1 << 20))
            print_message("    %zu B at +%llu: written and read back, "
                          "checked, in %ld ms\n",
                          len, (unsigned long long)roff, e2e_now_ms() - t0);
    }
    /* the peer's whole buffer is still the mirror */
    assert_peer(f, 0, f->len);
}

/* Every misalignment of local and remote address (0..7 each) with lengths
 * that are not multiples of 8, one batch per length: written, checked at
 * the peer, read back. */
static void test_unaligned(void **state)
{
    struct fx *f = *state;
    static const size_t lens[] = {1, 5, 13, 4099, 65531};
    const size_t lane = 96 << 10; /* 5 x 64 lanes fit RW_LEN */
    tent_request_t r[64];
    struct outcome o[64];
    for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
        size_t len = lens[li];
        for (int opcode = OPCODE_READ; opcode <= OPCODE_WRITE; opcode++) {
            /* writes first, then the reads of what they wrote */
            int op = opcode == OPCODE_READ ? OPCODE_WRITE : OPCODE_READ;
            for (size_t k = 0; k < 64; k++) {
                size_t la = k % 8, ra = k / 8;
                uint64_t roff = li * 64 * lane + k * lane + ra;
                uint8_t *local =
                    (op == OPCODE_WRITE ? f->src : f->dst) + k * lane + la;
                if (op == OPCODE_WRITE)
                    fill_data(local, len, rnd(f), (uint8_t)k);
                else
                    memset(local, 0, len);
                r[k] = req(f, op, local, f->peer.rw_base + roff, len);
            }
            run(f, r, 64, o);
            for (size_t k = 0; k < 64; k++) {
                if (o[k].status != STATUS_COMPLETED)
                    fail_msg("unaligned %s %zu (local +%zu, remote +%zu) over "
                             "%s: status %d, %s: %s",
                             op == OPCODE_READ ? "read" : "write", len, k % 8,
                             k / 8, g_x, o[k].status, tent_strerror(o[k].code),
                             o[k].msg);
                uint64_t roff = r[k].target_offset - f->peer.rw_base;
                if (op == OPCODE_WRITE)
                    memcpy(f->mirror + roff, r[k].source, len);
                else
                    assert_memory_equal(r[k].source, f->mirror + roff, len);
            }
        }
        assert_peer(f, li * 64 * lane, 64 * lane);
    }
}

/* Batches of 1, 32 and 128 requests, reads and writes mixed at random, each
 * in a lane of its own, random lengths (log-uniform up to 1 MiB) and
 * offsets; then the peer's whole buffer is checked. */
static void test_batches(void **state)
{
    struct fx *f = *state;
    static const size_t ns[] = {1, 32, 128};
    tent_request_t r[128];
    struct outcome o[128];
    for (size_t bi = 0; bi < sizeof(ns) / sizeof(ns[0]); bi++) {
        size_t n = ns[bi], lane = f->len / n;
        for (int round = 0; round < 3; round++) {
            size_t maxlen = lane < ((size_t)1 << 20) ? lane : (size_t)1 << 20;
            for (size_t i = 0; i < n; i++) {
                uint64_t len = 1 + rnd(f) % ((uint64_t)1 << (rnd(f) % 21));
                if (len > maxlen)
                    len = maxlen;
                uint64_t off = i * lane + rnd(f) % (lane - len + 1);
                int op = rnd(f) % 2 ? OPCODE_WRITE : OPCODE_READ;
                uint8_t *local = (op == OPCODE_WRITE ? f->src : f->dst) + off;
                if (op == OPCODE_WRITE)
                    fill_data(local, len, rnd(f), (uint8_t)i);
                else
                    memset(local, 0, len);
                r[i] = req(f, op, local, f->peer.rw_base + off, len);
            }
            run(f, r, n, o);
            int reads = 0;
            for (size_t i = 0; i < n; i++) {
                if (o[i].status != STATUS_COMPLETED)
                    fail_msg("batch of %zu over %s: task %zu status %d, %s: %s",
                             n, g_x, i, o[i].status, tent_strerror(o[i].code),
                             o[i].msg);
                uint64_t off = r[i].target_offset - f->peer.rw_base;
                if (r[i].opcode == OPCODE_WRITE) {
                    memcpy(f->mirror + off, r[i].source, r[i].length);
                } else {
                    reads++;
                    assert_memory_equal(r[i].source, f->mirror + off,
                                        r[i].length);
                }
            }
            if (round == 0)
                print_message("    batch of %zu: %d read(s), %zu write(s)\n", n,
                              reads, n - reads);
        }
        assert_peer(f, 0, f->len);
    }
}

/* ---- failures toward a remote segment ------------------------------------ */

/* An address the peer never registered: TENT_ERANGE. */
static void test_fail_unregistered(void **state)
{
    struct fx *f = *state;
    must_fail(f, req(f, OPCODE_READ, f->dst, 0x1000, 16), TENT_ERANGE,
              "read of an address nobody registered");
    must_fail(f, req(f, OPCODE_WRITE, f->src, 0x1000, 16), TENT_ERANGE,
              "write to an address nobody registered");
    /* this side's memory must be registered too */
    uint8_t *plain = malloc(4096);
    assert_non_null(plain);
    memset(plain, 0x5c, 4096);
    must_fail(f, req(f, OPCODE_WRITE, plain, f->peer.rw_base, 4096),
              TENT_ENOTREG, "write from unregistered local memory");
    free(plain);
    assert_peer(f, 0, 4096);
    /* between two of the peer's buffers: past rw's end, before the next */
    must_fail(f,
              req(f, OPCODE_READ, f->dst, f->peer.rw_base + f->len + 4096, 16),
              TENT_ERANGE, "read of a gap between buffers");
    assert_peer(f, f->len - 4096, 4096);
}

/* A range the peer unregistered after this engine fetched its descriptor
 * (the plain malloc buffer, then the rw buffer): TENT_ERANGE both ways,
 * and nothing changed. */
static void test_fail_unregistered_since(void **state)
{
    struct fx *f = *state;
    known_bug("test_fail_unregistered_since");
    fill_data(f->src, 4096, 7, 0x11);
    must_complete(f, req(f, OPCODE_WRITE, f->src, f->peer.reg_base, 4096));
    uint64_t h = e2e_peer_hash(&f->peer, true, 0, 4096);
    assert_int_equal(h, e2e_fnv(f->src, 4096));
    assert_int_equal(e2e_peer_unregister_plain(&f->peer), 0);
    fill_data(f->src, 4096, 9, 0x22);
    must_fail(f, req(f, OPCODE_WRITE, f->src, f->peer.reg_base, 4096),
              TENT_ERANGE, "write to a range the peer unregistered");
    must_fail(f, req(f, OPCODE_READ, f->dst, f->peer.reg_base, 4096),
              TENT_ERANGE, "read of a range the peer unregistered");
    assert_int_equal(e2e_peer_hash(&f->peer, true, 0, 4096), h);
    write_read(f, 0, 4096, 0, 4096);
    assert_int_equal(e2e_peer_unregister_rw(&f->peer), 0);
    must_fail(f, req(f, OPCODE_READ, f->dst, f->peer.rw_base + 4096, 4096),
              TENT_ERANGE, "read of a buffer the peer unregistered");
    must_fail(f, req(f, OPCODE_WRITE, f->src + 1, f->peer.rw_base + 4097, 99),
              TENT_ERANGE, "write to a buffer the peer unregistered");
    assert_peer(f, 0, f->len);
    end_case();
}

/* Past the end of a buffer: straddling it, just beyond it (TENT_ERANGE), a
 * length that wraps the address space (TENT_EINVAL); nothing changed. */
static void test_fail_out_of_bounds(void **state)
{
    struct fx *f = *state;
    uint64_t end = f->peer.rw_base + f->len;
    fill_data(f->src, 4096, 3, 0x33);
    must_fail(f, req(f, OPCODE_WRITE, f->src, end - 8, 16), TENT_ERANGE,
              "write straddling the end");
    must_fail(f, req(f, OPCODE_READ, f->dst, end - 8, 16), TENT_ERANGE,
              "read straddling the end");
    must_fail(f, req(f, OPCODE_WRITE, f->src, end, 1), TENT_ERANGE,
              "write one byte past the end");
    must_fail(
        f,
        req(f, OPCODE_WRITE, f->src, f->peer.rw_base + 4096, UINT64_MAX - 4095),
        TENT_EINVAL, "write whose length wraps");
    assert_peer(f, f->len - 4096, 4096);
    assert_peer(f, 0, 8192);
    /* the last byte itself is in bounds */
    write_read(f, 1, f->len - 1, 3, 1);
}

/* The read-only buffer's n bytes, read here, are still the pattern. */
static bool read_only_intact(struct fx *f, const char *capability)
{
    size_t n = f->peer.small_len;
    memset(f->dst, 0, n);
    if (!must_complete_if_capable(
            f, req(f, OPCODE_READ, f->dst, f->peer.ro_base, n), capability))
        return false;
    for (size_t i = 0; i < n; i++)
        if (f->dst[i] != e2e_pattern(i))
            fail_msg("read-only buffer byte %zu: %u, want %u", i, f->dst[i],
                     e2e_pattern(i));
    return true;
}

/* A read-only buffer: writes fail with TENT_EPERM and change nothing;
 * reads are served where the transport serves read-only buffers (every
 * byte checked), else the case is skipped after the write's check. */
static void test_fail_read_only_written(void **state)
{
    struct fx *f = *state;
    fill_data(f->src, f->peer.small_len, 5, 0x44);
    must_fail(f, req(f, OPCODE_WRITE, f->src, f->peer.ro_base + 1, 100),
              TENT_EPERM, "write to a read-only buffer");
    if (!read_only_intact(f, "read a read-only buffer"))
        SKIP_CASE("%s serves no read-only buffer", g_x);
}

/* A buffer the peer made read-only after we fetched its descriptor:
 * writes fail with TENT_EPERM, nothing changes, reads are served where the
 * transport serves read-only buffers. */
static void test_fail_made_read_only_since(void **state)
{
    struct fx *f = *state;
    known_bug("test_fail_made_read_only_since");
    fill_data(f->src, 4096, 6, 0x55);
    must_complete(f, req(f, OPCODE_WRITE, f->src, f->peer.rw_base, 4096));
    memcpy(f->mirror, f->src, 4096);
    assert_int_equal(e2e_peer_reregister_rw(&f->peer, PERM_GLOBAL_READ_ONLY),
                     0);
    fill_data(f->src, 4096, 7, 0x56);
    must_fail(f, req(f, OPCODE_WRITE, f->src, f->peer.rw_base, 4096),
              TENT_EPERM, "write to a buffer made read-only since");
    assert_peer(f, 0, 8192);
    memset(f->dst, 0, 4096);
    if (!must_complete_if_capable(
            f, req(f, OPCODE_READ, f->dst, f->peer.rw_base, 4096),
            "read a read-only buffer")) {
        end_case();
        SKIP_CASE("%s serves no read-only buffer", g_x);
    }
    assert_memory_equal(f->dst, f->mirror, 4096);
    end_case();
}

/* LOCAL permission: no remote access at all, TENT_EPERM both ways. */
static void test_fail_local_permission(void **state)
{
    struct fx *f = *state;
    must_fail(f, req(f, OPCODE_READ, f->dst, f->peer.local_base, 64),
              TENT_EPERM, "read of a LOCAL buffer");
    must_fail(f, req(f, OPCODE_WRITE, f->src, f->peer.local_base, 64),
              TENT_EPERM, "write to a LOCAL buffer");
}

/* A buffer the peer made LOCAL after we fetched its descriptor: TENT_EPERM
 * both ways, nothing changed. */
static void test_fail_made_local_since(void **state)
{
    struct fx *f = *state;
    known_bug("test_fail_made_local_since");
    must_complete(f, req(f, OPCODE_READ, f->dst, f->peer.rw_base, 64));
    assert_int_equal(e2e_peer_reregister_rw(&f->peer, PERM_LOCAL_READ_WRITE),
                     0);
    fill_data(f->src, 4096, 8, 0x66);
    must_fail(f, req(f, OPCODE_WRITE, f->src, f->peer.rw_base, 4096),
              TENT_EPERM, "write to a buffer made LOCAL since");
    must_fail(f, req(f, OPCODE_READ, f->dst, f->peer.rw_base, 4096), TENT_EPERM,
              "read of a buffer made LOCAL since");
    assert_peer(f, 0, 8192);
    end_case();
}

/* The name of a peer that has ended (its buffer at dead_base) opens to no
 * segment; or, when the tests beside this one run engines too, to another
 * engine that has bound the freed port since: one without that buffer. */
static void assert_name_gone(struct fx *f, const char *name, uint64_t dead_base)
{
    tent_segment_id_t s = 0;
    int rc = tent_open_segment(f->e, &s, name);
    print_message("    open of %s after its peer ended: %s: %s\n", name,
                  tent_strerror(rc), rc ? tent_last_error() : "");
    if (rc < 0)
        return;
    tent_segment_info_t info = {0};
    assert_int_equal(tent_get_segment_info(f->e, s, &info), 0);
    for (int i = 0; i < info.num_buffers; i++)
        if (info.buffers[i].base == dead_base)
            fail_msg("%s opened to the ended peer's buffer at %#llx", name,
                     (unsigned long long)dead_base);
    tent_free_segment_info(&info);
    print_message("    (another engine serves %s now)\n", name);
    assert_int_equal(tent_close_segment(f->e, s), 0);
}

/* A closed segment's id and an id never handed out: TENT_ENOSEGMENT; a
 * name nobody serves cannot be opened. */
static void test_fail_closed_or_unknown_segment(void **state)
{
    struct fx *f = *state;
    write_read(f, 0, 100, 0, 4096);
    tent_segment_id_t old = f->seg;
    assert_int_equal(tent_close_segment(f->e, old), 0);
    fill_data(f->src, 4096, 10, 0x77);
    must_fail(f, req(f, OPCODE_WRITE, f->src, f->peer.rw_base + 100, 4096),
              TENT_ENOSEGMENT, "write to a closed segment");
    must_fail(f, req(f, OPCODE_READ, f->dst, f->peer.rw_base + 100, 4096),
              TENT_ENOSEGMENT, "read of a closed segment");
    f->seg = old + 0x5eed;
    must_fail(f, req(f, OPCODE_READ, f->dst, f->peer.rw_base, 16),
              TENT_ENOSEGMENT, "read of a segment id never opened");
    assert_peer(f, 0, 8192);
    /* opened again, it serves */
    assert_int_equal(tent_open_segment(f->e, &f->seg, f->peer.name), 0);
    write_read(f, 5, 101, 9, 4096);
    /* a name nobody serves: the peer's own once it has quit (closed first:
     * an open segment of the same name would be reused) */
    char name[256];
    snprintf(name, sizeof(name), "%s", f->peer.name);
    assert_int_equal(tent_close_segment(f->e, f->seg), 0);
    e2e_peer_quit(&f->peer);
    assert_name_gone(f, name, f->peer.rw_base);
}

/* ---- peer death ---------------------------------------------------------- */

/* The cause of a task that did not complete: FAILED with a code and a
 * message. */
static void assert_failed_with_cause(const struct outcome *o, const char *what)
{
    if (o->status != STATUS_FAILED)
        fail_msg("%s over %s: status %d, not FAILED", what, g_x, o->status);
    if (o->code >= 0 || o->msg[0] == '\0')
        fail_msg("%s over %s: FAILED without a cause (%d, '%s')", what, g_x,
                 o->code, o->msg);
}

/* The peer is killed with a batch in flight: what completed is correct
 * (reads checked byte by byte), everything else FAILED with a cause, every
 * task submitted after the kill FAILED, nothing hangs; later requests to
 * the dead peer fail with a cause. */
static void test_peer_killed_mid_transfer(void **state)
{
    struct fx *f = *state;
    enum { N = 64 };
    const size_t len = (size_t)512 << 10; /* N of them fit RW_LEN */
    tent_request_t r[N];
    for (size_t i = 0; i < N; i++) {
        int op = i % 4 == 3 ? OPCODE_WRITE : OPCODE_READ;
        uint8_t *local = (op == OPCODE_WRITE ? f->src : f->dst) + i * len;
        if (op == OPCODE_WRITE)
            fill_data(local, len, i, 0x5a);
        else
            memset(local, 0, len);
        r[i] = req(f, op, local, f->peer.rw_base + i * len, len);
    }
    tent_batch_id_t b = tent_allocate_batch(f->e, N);
    assert_int_not_equal(b, TENT_INVALID_BATCH_ID);
    assert_int_equal(tent_submit(f->e, b, r, N / 2), 0);
    /* killed once the first task has ended: the others are in flight, or
     * done when the transport is that quick */
    for (long end = e2e_now_ms() + WAIT_MS;;) {
        tent_status_t ts;
        assert_int_equal(tent_task_status(f->e, b, 0, &ts), 0);
        if (ts.status != STATUS_PENDING && ts.status != STATUS_WAITING)
            break;
        if (e2e_now_ms() > end)
            fail_msg("the first of %d reads over %s still pending after %d ms",
                     N / 2, g_x, WAIT_MS);
        usleep(100);
    }
    e2e_peer_kill(&f->peer);
    long t0 = e2e_now_ms();
    int rc2 = tent_submit(f->e, b, r + N / 2, N / 2);
    tent_status_t st;
    int w = e2e_wait(f->e, b, WAIT_MS, &st);
    long took = e2e_now_ms() - t0;
    if (w == 1)
        fail_msg("a batch to a killed peer still pending after %d ms", WAIT_MS);
    assert_int_equal(w, 0);
    size_t ntasks = rc2 == 0 ? N : N / 2;
    int completed = 0;
    for (size_t i = 0; i < ntasks; i++) {
        tent_status_t ts;
        assert_int_equal(tent_task_status(f->e, b, i, &ts), 0);
        struct outcome o = {.status = ts.status};
        int native;
        assert_int_equal(
            tent_task_error(f->e, b, i, &o.code, &native, o.msg, sizeof(o.msg)),
            0);
        if (i >= N / 2 || ts.status != STATUS_COMPLETED) {
            assert_failed_with_cause(&o, i >= N / 2
                                             ? "a task submitted after the kill"
                                             : "a task in flight at the kill");
            continue;
        }
        completed++;
        if (r[i].opcode == OPCODE_READ)
            assert_memory_equal(r[i].source, f->mirror + i * len, len);
    }
    print_message("    killed mid-batch: %d of %d in-flight task(s) completed "
                  "first, the rest FAILED %ld ms after the kill; the second "
                  "submit %s\n",
                  completed, N / 2, took,
                  rc2 ? tent_strerror(rc2) : "was accepted");
    assert_int_equal(tent_free_batch(f->e, b), 0);
    /* later requests to the dead peer */
    for (int op = OPCODE_READ; op <= OPCODE_WRITE; op++) {
        struct outcome o;
        tent_request_t one = r[op == OPCODE_READ ? 0 : 3];
        one.length = 4096;
        run(f, &one, 1, &o);
        assert_failed_with_cause(&o, "a request to a dead peer");
        print_message("    %s to the dead peer: %s: %s\n",
                      op == OPCODE_READ ? "read" : "write",
                      tent_strerror(o.code), o.msg);
    }
}

/* A peer that dies between transfers: requests fail with a cause within
 * the bound, its name can no longer be opened, and the engine goes on
 * serving a new peer. */
static void test_peer_death(void **state)
{
    struct fx *f = *state;
    write_read(f, 0, 0, 0, 65536);
    char name[256];
    snprintf(name, sizeof(name), "%s", f->peer.name);
    e2e_peer_kill(&f->peer);
    struct outcome o;
    tent_request_t r = req(f, OPCODE_WRITE, f->src, f->peer.rw_base, 65536);
    run(f, &r, 1, &o);
    assert_failed_with_cause(&o, "a write to a dead peer");
    r.opcode = OPCODE_READ;
    r.source = f->dst;
    run(f, &r, 1, &o);
    assert_failed_with_cause(&o, "a read of a dead peer");
    assert_int_equal(tent_close_segment(f->e, f->seg), 0);
    assert_name_gone(f, name, f->peer.rw_base);
    /* a new peer: served as the first was */
    assert_int_equal(e2e_peer_start(&f->peer, f->len, false, false), 0);
    assert_int_equal(tent_open_segment(f->e, &f->seg, f->peer.name), 0);
    e2e_pattern_fill(f->mirror, f->len, 0);
    write_read(f, 1, 7, 3, 65536);
}

/* Stops the peer (SIGSTOP) and waits, bounded, until the kernel says it
 * is stopped: kill returns before the signal takes effect. */
static void stop_peer(pid_t pid)
{
    assert_int_equal(kill(pid, SIGSTOP), 0);
    char path[64], st[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    for (long end = e2e_now_ms() + WAIT_MS; e2e_now_ms() < end;) {
        FILE *fp = fopen(path, "r");
        size_t n = fp ? fread(st, 1, sizeof(st) - 1, fp) : 0;
        if (fp)
            fclose(fp);
        st[n] = 0;
        const char *p = strrchr(st, ')');
        if (p && p[1] == ' ' && p[2] == 'T')
            return;
        usleep(1000);
    }
    fail_msg("peer %ld did not stop within %d ms", (long)pid, WAIT_MS);
}

/* A stopped peer (alive, its sockets open, nothing served): each request
 * completes -- a transport that copies without the peer's help needs
 * nothing from it -- or fails with a cause within the transport's bound;
 * none hangs.  Once the peer runs again, every completed write is there
 * and every completed read was right; a failed write's range holds, byte
 * by byte, the old data or the new. */
static void test_stalled_peer(void **state)
{
    struct fx *f = *state;
    known_bug("test_stalled_peer");
    enum { N = 8 };
    const size_t len = 65536, base = (size_t)1 << 20;
    write_read(f, 0, 0, 0, 4096); /* connections up */
    tent_request_t r[N];
    for (size_t i = 0; i < N; i++) {
        int op = i % 2 ? OPCODE_READ : OPCODE_WRITE;
        uint8_t *local = (op == OPCODE_WRITE ? f->src : f->dst) + i * len;
        if (op == OPCODE_WRITE)
            fill_data(local, len, i, 0x3c);
        else
            memset(local, 0, len);
        r[i] = req(f, op, local, f->peer.rw_base + base + i * len, len);
    }
    stop_peer(f->peer.pid);
    long t0 = e2e_now_ms();
    struct outcome o[N];
    run(f, r, N, o);
    long took = e2e_now_ms() - t0;
    assert_int_equal(kill(f->peer.pid, SIGCONT), 0);
    /* What the stopped peer's server still holds (frames the initiator gave
     * up on) it takes up within moments of running again: give it them, so
     * that a late write shows below whenever it lands, not only when the
     * read-backs lose a race with it. */
    usleep(200 * 1000);
    /* running again, the peer is served again */
    memset(f->dst + (size_t)N * len, 0, 4096);
    struct outcome again;
    tent_request_t probe =
        req(f, OPCODE_READ, f->dst + (size_t)N * len, f->peer.rw_base, 4096);
    run(f, &probe, 1, &again);
    if (again.status != STATUS_COMPLETED && g_bug) {
        print_message("    stopped peer: the batch ended after %ld ms; once "
                      "the peer runs again: %s: %s\n",
                      took, tent_strerror(again.code), again.msg);
        for (size_t i = 0; i < N; i++)
            if (o[i].status != STATUS_COMPLETED)
                assert_failed_with_cause(&o[i], "a request to a stopped peer");
        g_bug_seen = true;
        end_case();
    }
    if (again.status != STATUS_COMPLETED)
        fail_msg("a read over %s once the stopped peer runs again: %s: %s", g_x,
                 tent_strerror(again.code), again.msg);
    assert_memory_equal(f->dst + (size_t)N * len, f->mirror, 4096);
    int done = 0, failed_code = 0;
    for (size_t i = 0; i < N; i++) {
        uint64_t off = base + i * len;
        if (o[i].status == STATUS_COMPLETED) {
            done++;
            if (r[i].opcode == OPCODE_WRITE)
                memcpy(f->mirror + off, r[i].source, len);
            else
                assert_memory_equal(r[i].source, f->mirror + off, len);
            continue;
        }
        assert_failed_with_cause(&o[i], "a request to a stopped peer");
        failed_code = o[i].code;
        if (r[i].opcode != OPCODE_WRITE)
            continue;
        /* what landed of a failed write: read it back, old or new bytes */
        uint8_t *back = f->dst + (size_t)N * len;
        memset(back, 0, len);
        must_complete(f, req(f, OPCODE_READ, back, f->peer.rw_base + off, len));
        const uint8_t *nu = r[i].source;
        for (size_t j = 0; j < len; j++)
            if (back[j] != f->mirror[off + j] && back[j] != nu[j])
                fail_msg("byte %zu of a failed write to a stopped peer is "
                         "neither the old data nor the new",
                         j);
        memcpy(f->mirror + off, back, len);
    }
    print_message("    stopped peer: %d of %d request(s) completed, the rest "
                  "failed (%s), after %ld ms\n",
                  done, N, done == N ? "none" : tent_strerror(failed_code),
                  took);
    if (g_bug && e2e_peer_hash(&f->peer, false, 0, f->len) !=
                     e2e_fnv(f->mirror, f->len)) {
        print_message("    a failed write landed after it was reported "
                      "FAILED\n");
        g_bug_seen = true;
        end_case();
    }
    assert_peer(f, 0, f->len);
    write_read(f, 3, 5, 7, 65536); /* and it serves again */
}

/* ==== TO ADD: test_peer_restart_new_incarnation =========================
 * With incarnations (issue 41, item 3; being implemented separately), and
 * registered in main's table after test_peer_death: the peer quits and a
 * new process starts under the same name (e2e_set_child_config with
 * rpc_server_port) with its rw buffer at the same address.  A request
 * addressed through the old descriptor must never be COMPLETED into the
 * new process as if it were the old one: it fails with a cause that names
 * the incarnation, or completes only after the descriptor was fetched
 * again; reads and writes after the refetch are checked byte by byte, and
 * a task addressed to the old process that no longer exists fails saying
 * so.  Today tcp and memfabric complete such writes (issue 41). */

/* ---- revocation ---------------------------------------------------------- */

/* The initiator loops writing a 16 KiB range of the peer while the peer
 * unregisters the buffer.  Once tent_unregister_memory has returned there,
 * no byte of the range changes, and no batch submitted afterwards
 * completes. */
struct looper {
    struct fx *f;
    atomic_bool revoked, stop;
    atomic_long batches;
    long completed_after; /* tasks COMPLETED in batches submitted after */
    long completed_before;
    int last_code;
    char last_msg[256];
    int error; /* a call that should not fail did */
    /* per task k: the last round whose write k COMPLETED (its data is
     * fill_data of that round), and the rounds since whose write k was
     * submitted before the flag and FAILED (it may have landed in part) */
    long last_ok[4];
    long torn[4][4];
    int ntorn[4];
};

static void *loop_main(void *arg)
{
    struct looper *l = arg;
    struct fx *f = l->f;
    enum { N = 4, LEN = 4096 };
    for (long i = 0; !atomic_load(&l->stop); i++) {
        bool after = atomic_load(&l->revoked);
        fill_data(f->src, N * LEN, (uint64_t)i, (uint8_t)(i + 1));
        tent_request_t r[N];
        for (size_t k = 0; k < N; k++)
            r[k] = req(f, OPCODE_WRITE, f->src + k * LEN,
                       f->peer.rw_base + k * LEN, LEN);
        tent_batch_id_t b = tent_allocate_batch(f->e, N);
        if (b == TENT_INVALID_BATCH_ID) {
            l->error = 1;
            break;
        }
        int rc = tent_submit(f->e, b, r, N);
        if (rc == 0) {
            tent_status_t st;
            if (e2e_wait(f->e, b, WAIT_MS, &st) != 0) {
                l->error = 2;
                tent_free_batch(f->e, b);
                break;
            }
            for (size_t k = 0; k < N; k++) {
                tent_status_t ts;
                tent_task_status(f->e, b, k, &ts);
                if (ts.status == STATUS_COMPLETED) {
                    if (after)
                        l->completed_after++;
                    else
                        l->completed_before++;
                    l->last_ok[k] = i;
                    l->ntorn[k] = 0;
                } else {
                    if (!after && l->ntorn[k] < 4)
                        l->torn[k][l->ntorn[k]++] = i;
                    int native;
                    tent_task_error(f->e, b, k, &l->last_code, &native,
                                    l->last_msg, sizeof(l->last_msg));
                }
            }
        } else {
            l->last_code = rc;
            snprintf(l->last_msg, sizeof(l->last_msg), "%s", tent_last_error());
        }
        tent_free_batch(f->e, b);
        atomic_fetch_add(&l->batches, 1);
    }
    return NULL;
}

/* Waits (bounded) until the looper has run want batches in all. */
static void wait_batches(struct looper *l, long want, const char *when)
{
    long end = e2e_now_ms() + WAIT_MS;
    while (atomic_load(&l->batches) < want && !l->error) {
        if (e2e_now_ms() > end)
            fail_msg("the initiator's loop ran %ld of %ld batches %s within "
                     "%d ms",
                     atomic_load(&l->batches), want, when, WAIT_MS);
        usleep(1000);
    }
}

static void test_revocation(void **state)
{
    struct fx *f = *state;
    struct looper l = {.f = f, .last_ok = {-1, -1, -1, -1}};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, loop_main, &l), 0);
    wait_batches(&l, 20, "before the unregister");
    long t0 = e2e_now_ms();
    int rc = e2e_peer_unregister_rw(&f->peer);
    long took = e2e_now_ms() - t0;
    atomic_store(&l.revoked, true);
    long at = atomic_load(&l.batches);
    uint64_t h0 = e2e_peer_hash(&f->peer, false, 0, 16384);
    /* the loop goes on: 50 more whole batches after the flag was seen */
    wait_batches(&l, at + 51, "after the unregister");
    atomic_store(&l.stop, true);
    pthread_join(th, NULL);
    uint64_t h1 = e2e_peer_hash(&f->peer, false, 0, 16384);
    print_message("    unregister returned %s after %ld ms with the loop at "
                  "batch %ld; %ld task(s) completed before, %ld after; last "
                  "cause %s: %s\n",
                  tent_strerror(rc), took, at, l.completed_before,
                  l.completed_after, tent_strerror(l.last_code), l.last_msg);
    assert_int_equal(l.error, 0);
    assert_int_equal(rc, 0);
    assert_true(l.completed_before > 0);
    assert_int_equal(l.completed_after, 0);
    assert_true(l.last_code < 0);
    if (h0 != h1)
        fail_msg("the revoked range changed after tent_unregister_memory "
                 "returned at the peer");
    /* Each byte holds the last write to it that COMPLETED, or one that
     * FAILED after it, in flight at the unregister: registered again, the
     * range is read back and checked byte by byte. */
    assert_int_equal(e2e_peer_reregister_rw(&f->peer, PERM_GLOBAL_READ_WRITE),
                     0);
    memset(f->dst, 0, 16384);
    must_complete(f, req(f, OPCODE_READ, f->dst, f->peer.rw_base, 16384));
    assert_int_equal(e2e_fnv(f->dst, 16384), h1);
    uint8_t *cand = malloc(5 * 16384);
    assert_non_null(cand);
    int torn = 0;
    for (size_t k = 0; k < 4; k++) {
        assert_true(l.last_ok[k] >= 0);
        long rounds[5] = {l.last_ok[k]};
        int nr = 1;
        for (int t = 0; t < l.ntorn[k]; t++)
            rounds[nr++] = l.torn[k][t];
        torn += nr > 1;
        for (int c = 0; c < nr; c++)
            fill_data(cand + c * 16384, 16384, (uint64_t)rounds[c],
                      (uint8_t)(rounds[c] + 1));
        for (size_t j = k * 4096; j < (k + 1) * 4096; j++) {
            bool ok = false;
            for (int c = 0; c < nr && !ok; c++)
                ok = f->dst[j] == cand[c * 16384 + j];
            if (!ok)
                fail_msg("byte %zu of the revoked range is from no write "
                         "that COMPLETED or was in flight at the unregister",
                         j);
        }
    }
    free(cand);
    print_message("    the range holds the last completed writes (%d of 4 "
                  "torn by a write in flight at the unregister)\n",
                  torn);
    /* the bytes outside the range were never touched */
    assert_peer(f, 16384, f->len - 16384);
}

/* ---- churn --------------------------------------------------------------- */

/* Open, transfer (checked), close the same peer segment 200 times. */
static void test_churn_segment(void **state)
{
    struct fx *f = *state;
    assert_int_equal(tent_close_segment(f->e, f->seg), 0);
    long t0 = e2e_now_ms();
    for (int i = 0; i < 200; i++) {
        if (tent_open_segment(f->e, &f->seg, f->peer.name))
            fail_msg("cycle %d: open %s: %s", i, f->peer.name,
                     tent_last_error());
        write_read(f, (size_t)i * 8192 + i % 7, (uint64_t)i * 4099,
                   (size_t)i * 8192 + 3, 4096 + i);
        assert_int_equal(tent_close_segment(f->e, f->seg), 0);
    }
    print_message("    200 open/transfer/close cycles in %ld ms\n",
                  e2e_now_ms() - t0);
    assert_int_equal(tent_open_segment(f->e, &f->seg, f->peer.name), 0);
    assert_peer(f, 0, f->len);
}

/* Peers come and go around one long-lived engine: eight in turn, each
 * opened, written and read (checked), closed; every other one killed
 * rather than asked to quit, two alive at once now and then. */
static void test_churn_peers(void **state)
{
    struct fx *f = *state;
    const size_t len = (size_t)1 << 20;
    uint8_t *want = malloc(len);
    assert_non_null(want);
    long t0 = e2e_now_ms();
    for (int i = 0; i < 8; i++) {
        struct e2e_peer p;
        assert_int_equal(e2e_peer_start(&p, len, false, false), 0);
        tent_segment_id_t s;
        assert_int_equal(tent_open_segment(f->e, &s, p.name), 0);
        size_t n = 4096 + (size_t)i * 1000 + 1;
        fill_data(f->src, n, (uint64_t)i, (uint8_t)i);
        tent_request_t r = {.opcode = OPCODE_WRITE,
                            .source = f->src,
                            .target_id = s,
                            .target_offset = p.rw_base + 11,
                            .length = n};
        must_complete(f, r);
        assert_int_equal(e2e_peer_hash(&p, false, 11, n), e2e_fnv(f->src, n));
        /* the rest of its buffer: its own pattern, read here */
        memset(f->dst, 0, len);
        r = (tent_request_t){.opcode = OPCODE_READ,
                             .source = f->dst,
                             .target_id = s,
                             .target_offset = p.rw_base,
                             .length = len};
        must_complete(f, r);
        e2e_pattern_fill(want, len, 0);
        memcpy(want + 11, f->src, n);
        assert_memory_equal(f->dst, want, len);
        /* the fixture's peer is served meanwhile */
        write_read(f, 1, (uint64_t)i * 65536 + 1, 1, 65536 - 1);
        assert_int_equal(tent_close_segment(f->e, s), 0);
        if (i % 2)
            e2e_peer_kill(&p);
        else
            e2e_peer_quit(&p);
    }
    print_message("    8 peers came and went in %ld ms\n", e2e_now_ms() - t0);
    free(want);
    assert_peer(f, 0, f->len);
}

/* ---- main ---------------------------------------------------------------- */

/* Whether g_x alone moves memory here (installed, and not a file
 * transport). */
static bool moves_memory(void)
{
    config();
    tent_engine_t e = tent_create_engine();
    if (!e) {
        fprintf(stderr, "an engine with %s alone: %s\n", g_x,
                tent_last_error());
        return false;
    }
    bool ok = tent_available(e) == 1;
    tent_destroy_engine(e);
    return ok;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        fprintf(stderr, "usage: %s TRANSPORT [KEY=VALUE ...]\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < NBUILT; i++)
        if (strcmp(argv[1], g_built[i]) == 0)
            g_x = g_built[i];
    if (!g_x) {
        fprintf(stderr, "%s: transport %s is not in this build\n", argv[0],
                argv[1]);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "%s: %s is not KEY=VALUE\n", argv[0], argv[i]);
            return 2;
        }
        *eq = 0;
        setenv(argv[i], eq + 1, 1);
    }
    for (size_t i = 0; i < NBUILT; i++) {
        snprintf(g_keys[i], sizeof(g_keys[i]), "transports/%s/enable",
                 g_built[i]);
        g_kv[2 * i] = g_keys[i];
        g_kv[2 * i + 1] = g_built[i] == g_x ? "true" : "false";
    }
    g_kv[2 * NBUILT] = NULL;
    e2e_set_child_config(g_kv);
    if (!moves_memory()) {
        printf("conformance_%s: %s alone moves no memory between processes "
               "here (a file transport, or not installable): skipped\n",
               g_x, g_x);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sizes, setup_big, teardown),
        cmocka_unit_test_setup_teardown(test_unaligned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fail_unregistered, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fail_unregistered_since, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fail_out_of_bounds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fail_read_only_written, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fail_made_read_only_since, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fail_local_permission, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fail_made_local_since, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fail_closed_or_unknown_segment,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_killed_mid_transfer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_peer_death, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stalled_peer, setup, teardown),
        /* TO ADD: test_peer_restart_new_incarnation (see its comment) */
        cmocka_unit_test_setup_teardown(test_revocation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_churn_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_churn_peers, setup, teardown),
    };
    const size_t n = sizeof(tests) / sizeof(tests[0]);
    char group[64];
    snprintf(group, sizeof(group), "conformance_%s", g_x);
    int failed = _cmocka_run_group_tests(group, tests, n, NULL, NULL);
    if (failed == 0 && g_skipped == (int)n)
        return 77;
    return failed;
}
