/* Deregistration revokes (issue 19 item 1), across two processes: this
 * process owns memory and deregisters it while a forked child, the
 * initiator, copies into or out of it.  Once smem_trans_deregister_mem
 * returns SM_OK no copy of the child touches the range any more; a batch
 * in flight across it fails; a child stalled inside a copy that the owner
 * cannot stop within MF_TRANSFER_TIMEOUT makes the deregistration fail
 * (SM_RESOURCE_IN_USE) with the range still registered, and its batch is
 * reported failed when it resumes.
 *
 *  - host_shm (the child copies with memcpy through a mapping of our memfd,
 *    or with process_vm_writev into anonymous memory): deregistering in
 *    the middle of a batch; the child stopped inside a copy;
 *  - host_tcp (our server thread copies): the child stopped in the middle
 *    of a write or a read; deregistered and registered again while the
 *    child is stopped in the middle of a batch. */
/* cmocka.h needs these first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include "mfh_ctl_probe.h"
#include "mfh_test_util.h"

#include <sys/uio.h>

static struct mfh_api api;
static const struct mfh_api *A = &api;

#define BIG ((size_t)256 << 20) /* the copies caught in the middle */

#define OWNER_FILL 0xee /* our memory before the child writes */
#define CHILD_FILL 0x11 /* the child's buffer */

/* The child's bytes land in our memory behind the compiler's back. */
static uint8_t peek(const uint8_t *p)
{
    return *(const volatile uint8_t *)p;
}

static bool all_are(const uint8_t *p, size_t n, uint8_t v)
{
    const volatile uint8_t *q = p;
    for (size_t i = 0; i < n; i++)
        if (q[i] != v)
            return false;
    return true;
}

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* MF_TRANSFER_TIMEOUT of the instances created from now on (ms). */
static void set_timeout(int ms)
{
    char v[16];
    snprintf(v, sizeof(v), "%d", ms);
    assert_int_equal(setenv("MF_TRANSFER_TIMEOUT", v, 1), 0);
}

/* ---- the initiator, a child process --------------------------------------
 * It registers a local buffer of `size` bytes (filled with CHILD_FILL) and
 * answers its address; then, per command:
 *   'B': one batch of `opcode` between its buffer and [remote, +len)
 *        at `url`, in entries of `entry` bytes; answers the result;
 *   'Q': quits. */
struct icmd {
    char op;
    uint8_t opcode;
    uint8_t pad[6];
    uint64_t remote, len, entry;
    char url[64];
};

struct ichild {
    pid_t pid;
    int cmd_fd, ans_fd;
    uint64_t local; /* its buffer, in its address space */
};

struct ichild_args {
    uint32_t proto;
    size_t size;
};

static int32_t run_batch(smem_trans_t h, const struct icmd *c, uint8_t *local)
{
    size_t n = (size_t)((c->len + c->entry - 1) / c->entry);
    void **src = calloc(n, sizeof(*src)), **dst = calloc(n, sizeof(*dst));
    size_t *sz = calloc(n, sizeof(*sz));
    int32_t rc = SM_MALLOC_FAILED;
    if (src && dst && sz) {
        for (size_t i = 0; i < n; i++) {
            uint64_t off = (uint64_t)i * c->entry;
            src[i] = local + off;
            dst[i] = (void *)(uintptr_t)(c->remote + off);
            sz[i] = (size_t)(c->len - off < c->entry ? c->len - off : c->entry);
        }
        smem_trans_batch_params_t p = {.destUrl = c->url,
                                       .srcList = src,
                                       .destList = dst,
                                       .sizeList = sz,
                                       .batchSize = (uint32_t)n,
                                       .opcode =
                                           (smem_trans_opcode_t)c->opcode};
        uint64_t id = 0;
        rc = A->smem_trans_batch_copy(h, &p, &id);
        if (rc == SM_OK) {
            int32_t result = 0;
            rc = mfh_wait(A, h, id, &result, 120);
            if (rc == SM_OK)
                rc = result;
        }
    }
    free(src);
    free(dst);
    free(sz);
    return rc;
}

static void ichild_main(int cmd_fd, int ans_fd, void *arg)
{
    const struct ichild_args *x = arg;
    uint8_t *local = mmap(NULL, x->size, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (local == MAP_FAILED || A->smem_trans_init(0, 0) != SM_OK)
        _exit(2);
    memset(local, CHILD_FILL, x->size);
    smem_trans_t h = mfh_create(A, x->proto);
    if (!h || A->smem_trans_register_mem(h, local, x->size, 0) != SM_OK)
        _exit(3);
    uint64_t hello = (uint64_t)(uintptr_t)local;
    if (tc_write_all(ans_fd, &hello, sizeof(hello)) != 0)
        _exit(4);
    struct icmd c;
    while (tc_read_all(cmd_fd, &c, sizeof(c)) == 0 && c.op != 'Q') {
        c.url[sizeof(c.url) - 1] = '\0';
        if (c.op == 'B') {
            int32_t r = run_batch(h, &c, local);
            if (tc_write_all(ans_fd, &r, sizeof(r)) != 0)
                break;
        }
    }
    A->smem_trans_destroy(h, 0);
    A->smem_trans_uninit(0);
    _exit(0);
}

static void ichild_start(struct ichild *c, uint32_t proto, size_t size)
{
    struct ichild_args args = {proto, size};
    c->pid = tc_fork_child(ichild_main, &args, &c->cmd_fd, &c->ans_fd);
    assert_true(c->pid > 0);
    assert_int_equal(tc_read_all(c->ans_fd, &c->local, sizeof(c->local)), 0);
}

static void ichild_send(struct ichild *c, char op, const char *url,
                        smem_trans_opcode_t opcode, const void *remote,
                        uint64_t len, uint64_t entry)
{
    struct icmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = op;
    cmd.opcode = (uint8_t)opcode;
    cmd.remote = (uint64_t)(uintptr_t)remote;
    cmd.len = len;
    cmd.entry = entry;
    snprintf(cmd.url, sizeof(cmd.url), "%s", url);
    assert_int_equal(tc_write_all(c->cmd_fd, &cmd, sizeof(cmd)), 0);
}

static int32_t ichild_result(struct ichild *c)
{
    int32_t r = -1;
    assert_int_equal(tc_read_all(c->ans_fd, &r, sizeof(r)), 0);
    return r;
}

static void ichild_stop(struct ichild *c)
{
    kill(c->pid, SIGCONT);
    struct icmd cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = 'Q';
    ssize_t n = write(c->cmd_fd, &cmd, sizeof(cmd));
    (void)n;
    int st = 0;
    waitpid(c->pid, &st, 0);
    close(c->cmd_fd);
    close(c->ans_fd);
}

/* Stops the child and waits until it is stopped for real. */
static void stop_child(pid_t pid)
{
    assert_int_equal(kill(pid, SIGSTOP), 0);
    for (int i = 0; i < 5000; i++) {
        char path[64], st[512] = "";
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        FILE *fp = fopen(path, "r");
        if (fp) {
            size_t n = fread(st, 1, sizeof(st) - 1, fp);
            st[n] = 0;
            fclose(fp);
        }
        const char *p = strrchr(st, ')');
        if (p && p[2] == 'T')
            return;
        mfh_sleep_ms(1);
    }
    fail_msg("child %d did not stop", (int)pid);
}

/* ---- the owner: this process -------------------------------------------- */

struct owner {
    smem_trans_t h;
    uint8_t *buf;
    size_t len;
    int mfd;
    char uid[64];
};

/* An instance with len bytes registered: a shared mapping of a memfd (what
 * tent_allocate_memory gives out; host_shm peers map it) or anonymous
 * memory (host_shm peers use process_vm_writev), filled with OWNER_FILL. */
static void owner_start(struct owner *o, uint32_t proto, size_t len, bool memfd)
{
    o->len = len;
    o->mfd = memfd ? memfd_create("mfh_revoke_owner", MFD_CLOEXEC) : -1;
    if (memfd)
        assert_int_equal(ftruncate(o->mfd, (off_t)len), 0);
    o->buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
                  memfd ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, o->mfd, 0);
    assert_true(o->buf != MAP_FAILED);
    memset(o->buf, OWNER_FILL, len);
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    o->h = mfh_create(A, proto);
    assert_non_null(o->h);
    assert_int_equal(A->smem_trans_register_mem(o->h, o->buf, len, 0), SM_OK);
    mfh_uid(A, o->h, o->uid, sizeof(o->uid));
}

static void owner_stop(struct owner *o)
{
    A->smem_trans_destroy(o->h, 0);
    A->smem_trans_uninit(0);
    munmap(o->buf, o->len);
    if (o->mfd >= 0)
        close(o->mfd);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    return mfh_api_load(&api);
}

/* ---- host_shm -------------------------------------------------------------
 */

/* The child writes BIG bytes into our memory in 1 MiB entries; we
 * deregister as soon as its first bytes have landed, long before its last
 * ones.  The batch was in flight across the deregistration: it fails, and
 * none of its bytes land after the deregistration returned (the last MiB
 * keeps our fill).  A later batch is refused. */
static void deregister_mid_batch(bool memfd)
{
    set_timeout(1000);
    struct ichild c;
    ichild_start(&c, SMEMB_DATA_OP_HOST_SHM, BIG);
    struct owner o;
    owner_start(&o, SMEMB_DATA_OP_HOST_SHM, BIG, memfd);
    uint8_t *tail = o.buf + BIG - (1u << 20);
    ichild_send(&c, 'B', o.uid, SMEM_TRANS_OP_WRITE, o.buf, BIG, 1u << 20);
    double end = mfh_now() + 30;
    while (peek(o.buf) == OWNER_FILL && mfh_now() < end)
        ;
    assert_int_not_equal(peek(o.buf), OWNER_FILL);
    assert_int_equal(A->smem_trans_deregister_mem(o.h, o.buf), SM_OK);
    bool unfinished = all_are(tail, 1u << 20, OWNER_FILL);
    uint64_t h0 = fnv(o.buf, BIG);
    int32_t r = ichild_result(&c);
    uint64_t h1 = fnv(o.buf, BIG);
    bool tail_kept = all_are(tail, 1u << 20, OWNER_FILL);
    print_message("    %s memory: the batch in flight ended with %d; its "
                  "last MiB %s; memory %s after the deregistration\n",
                  memfd ? "memfd" : "anonymous", r,
                  tail_kept ? "never landed" : "LANDED",
                  h0 == h1 ? "untouched" : "WRITTEN");
    assert_true(unfinished);
    assert_true(tail_kept);
    assert_true(h0 == h1);
    assert_int_equal(r, SM_INVALID_PARAM);
    ichild_send(&c, 'B', o.uid, SMEM_TRANS_OP_WRITE, o.buf, 4096, 4096);
    assert_int_equal(ichild_result(&c), SM_INVALID_PARAM);
    assert_true(h1 == fnv(o.buf, BIG));
    ichild_stop(&c);
    owner_stop(&o);
}

static void test_shm_deregister_mid_batch_memfd(void **state)
{
    (void)state;
    deregister_mid_batch(true);
}

static void test_shm_deregister_mid_batch_anon(void **state)
{
    (void)state;
    deregister_mid_batch(false);
}

/* The child writes BIG bytes into our memory and we stop it inside a copy
 * (the control page shows its window open).  mf_host cannot take the
 * memory back from it: the deregistration fails after MF_TRANSFER_TIMEOUT
 * with SM_RESOURCE_IN_USE, the range stays registered (the child's next
 * batch into it completes), and the stalled batch is reported failed once
 * the child resumes.  Had the deregistration returned
 * SM_OK instead (a stop that caught no copy in the middle), nothing of the
 * child may land afterwards and its batch fails. */
static void stalled_initiator(bool memfd)
{
    set_timeout(1000);
    struct ichild c;
    ichild_start(&c, SMEMB_DATA_OP_HOST_SHM, BIG);
    struct owner o;
    owner_start(&o, SMEMB_DATA_OP_HOST_SHM, BIG, memfd);
    struct mfh_probe probe;
    mfh_probe_open(&probe);
    bool stalled = false, in_window = false;
    for (int attempt = 0; attempt < 10 && !stalled; attempt++) {
        memset(o.buf, OWNER_FILL, BIG);
        ichild_send(&c, 'B', o.uid, SMEM_TRANS_OP_WRITE, o.buf, BIG, BIG);
        uint8_t *tail = o.buf + BIG - (1u << 20);
        double end = mfh_now() + 30;
        while (mfh_now() < end && all_are(tail, 1u << 20, OWNER_FILL) &&
               (peek(o.buf) != CHILD_FILL ||
                (probe.n && !mfh_probe_window_open(&probe, c.pid))))
            ;
        stop_child(c.pid);
        in_window = probe.n && mfh_probe_window_open(&probe, c.pid);
        stalled =
            all_are(tail, 1u << 20, OWNER_FILL) && (in_window || probe.n == 0);
        if (!stalled) {
            kill(c.pid, SIGCONT);
            assert_int_equal(ichild_result(&c), 0);
        }
    }
    assert_true(stalled);
    double t0 = mfh_now();
    int32_t rc = A->smem_trans_deregister_mem(o.h, o.buf);
    double took = mfh_now() - t0;
    uint64_t h0 = fnv(o.buf, BIG);
    kill(c.pid, SIGCONT);
    int32_t r = ichild_result(&c);
    uint64_t h1 = fnv(o.buf, BIG);
    print_message("    %s memory, child stopped %s: deregister returned %d "
                  "after %.0f ms; the child's batch ended with %d\n",
                  memfd ? "memfd" : "anonymous",
                  in_window ? "inside a copy" : "mid-batch", rc, took * 1000,
                  r);
    if (rc == SM_OK) {
        assert_true(took < 0.5);
        assert_int_not_equal(r, 0);
        assert_true(h0 == h1);
    } else {
        assert_int_equal(rc, SM_RESOURCE_IN_USE);
        assert_true(took >= 0.9);
        /* the stalled copy reports SM_TIMEOUT, unless another slice of
         * the batch, refused since the attempt, failed it first */
        assert_true(r == SM_TIMEOUT || r == SM_INVALID_PARAM);
        /* still registered: the child's next batch lands */
        ichild_send(&c, 'B', o.uid, SMEM_TRANS_OP_WRITE, o.buf, 4096, 4096);
        assert_int_equal(ichild_result(&c), 0);
        assert_int_equal(A->smem_trans_deregister_mem(o.h, o.buf), SM_OK);
    }
    /* the stop caught the child inside a copy: the case this test is for */
    assert_true(in_window);
    mfh_probe_close(&probe);
    ichild_stop(&c);
    owner_stop(&o);
}

static void test_shm_stalled_initiator_memfd(void **state)
{
    (void)state;
    stalled_initiator(true);
}

static void test_shm_stalled_initiator_anon(void **state)
{
    (void)state;
    stalled_initiator(false);
}

/* ---- host_tcp -------------------------------------------------------------
 */

/* Reads n bytes of the child's memory at addr. */
static void peek_child(pid_t pid, uint64_t addr, void *out, size_t n)
{
    struct iovec l = {.iov_base = out, .iov_len = n};
    struct iovec r = {.iov_base = (void *)(uintptr_t)addr, .iov_len = n};
    assert_int_equal(process_vm_readv(pid, &l, 1, &r, 1, 0), (ssize_t)n);
}

/* Whether the child's BIG copy has begun and not ended: a write has
 * landed its first bytes here and not its last MiB; a read has landed our
 * first bytes in the child's buffer and not our last MiB. */
static bool mid_copy(struct owner *o, struct ichild *c, bool write)
{
    static uint8_t head[4096], tail[1u << 20];
    if (write)
        return peek(o->buf) == CHILD_FILL &&
               all_are(o->buf + BIG - sizeof(tail), sizeof(tail), OWNER_FILL);
    peek_child(c->pid, c->local, head, sizeof(head));
    peek_child(c->pid, c->local + BIG - sizeof(tail), tail, sizeof(tail));
    return head[0] == OWNER_FILL && all_are(tail, sizeof(tail), CHILD_FILL);
}

#define SLICE ((size_t)1 << 20) /* mf_host's requests: one slice each */

/* How far each 1 MiB slice of our memory is written (a server thread
 * receives a slice front to back): the sum, and whether one is written
 * part of the way, its request waiting for the rest. */
static uint64_t written(const struct owner *o, bool *partial)
{
    uint64_t sum = 0;
    *partial = false;
    for (size_t off = 0; off < BIG; off += SLICE) {
        size_t lo = 0, hi = SLICE; /* the first byte still ours */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (peek(o->buf + off + mid) == OWNER_FILL)
                hi = mid;
            else
                lo = mid + 1;
        }
        sum += lo;
        *partial |= lo > 0 && lo < SLICE;
    }
    return sum;
}

/* After the child stopped: once the bytes it had sent have landed, whether
 * one of our server threads is left inside a request, waiting for the
 * rest of its payload. */
static bool write_left_mid_request(const struct owner *o)
{
    bool partial = false;
    uint64_t last = written(o, &partial);
    for (int i = 0; i < 100; i++) {
        mfh_sleep_ms(20);
        uint64_t now = written(o, &partial);
        if (now == last)
            break;
        last = now;
    }
    return partial;
}

/* Starts a BIG write or read of the child against our memory and stops
 * the child in the middle of it (a write: with a request of it half
 * received). */
static void stall_tcp_child(struct owner *o, struct ichild *c, bool write)
{
    for (int attempt = 0; attempt < 10; attempt++) {
        ichild_send(c, 'B', o->uid,
                    write ? SMEM_TRANS_OP_WRITE : SMEM_TRANS_OP_READ, o->buf,
                    BIG, BIG);
        double end = mfh_now() + 30;
        while (!mid_copy(o, c, write) && mfh_now() < end)
            ;
        stop_child(c->pid);
        if (mid_copy(o, c, write) && (!write || write_left_mid_request(o)))
            return;
        kill(c->pid, SIGCONT); /* it ended before the stop: again */
        assert_int_equal(ichild_result(c), 0);
        memset(o->buf, OWNER_FILL, BIG);
    }
    fail_msg("the child's copy was never caught in the middle");
}

/* The child stopped in the middle of a write or a read over host_tcp: our
 * server thread copies, not the child, so the deregistration returns at
 * once (it waits for no socket timeout), nothing lands afterwards, and the
 * child's batch fails with the refusal (SM_INVALID_PARAM) rather than a
 * broken connection: the child can go on copying to our other memory. */
static void tcp_stalled(bool write, bool reregister)
{
    set_timeout(5000);
    struct ichild c;
    ichild_start(&c, SMEMB_DATA_OP_HOST_TCP, BIG);
    struct owner o;
    owner_start(&o, SMEMB_DATA_OP_HOST_TCP, BIG, false);
    uint8_t *other = calloc(1, 4096);
    assert_non_null(other);
    assert_int_equal(A->smem_trans_register_mem(o.h, other, 4096, 0), SM_OK);
    stall_tcp_child(&o, &c, write);
    double t0 = mfh_now();
    int32_t rc = A->smem_trans_deregister_mem(o.h, o.buf);
    double took = mfh_now() - t0;
    if (reregister) /* the same range again, before the child goes on */
        assert_int_equal(A->smem_trans_register_mem(o.h, o.buf, BIG, 0), SM_OK);
    uint64_t h0 = fnv(o.buf, BIG);
    kill(c.pid, SIGCONT);
    int32_t r = ichild_result(&c);
    uint64_t h1 = fnv(o.buf, BIG);
    print_message("    %s stopped mid-way: deregister returned %d after %.0f "
                  "ms%s; the child's batch ended with %d; memory %s\n",
                  write ? "writer" : "reader", rc, took * 1000,
                  reregister ? " (registered again at once)" : "", r,
                  h0 == h1 ? "untouched since" : "WRITTEN since");
    assert_int_equal(rc, SM_OK);
    assert_true(took < 0.5);
    assert_int_equal(r, SM_INVALID_PARAM);
    assert_true(h0 == h1);
    /* the child's first 4 KiB: its own bytes, or ours it read */
    ichild_send(&c, 'B', o.uid, SMEM_TRANS_OP_WRITE, other, 4096, 4096);
    assert_int_equal(ichild_result(&c), 0);
    assert_true(all_are(other, 4096, write ? CHILD_FILL : OWNER_FILL));
    ichild_stop(&c);
    assert_int_equal(A->smem_trans_deregister_mem(o.h, other), SM_OK);
    if (reregister)
        assert_int_equal(A->smem_trans_deregister_mem(o.h, o.buf), SM_OK);
    owner_stop(&o);
    free(other);
}

static void test_tcp_stalled_writer(void **state)
{
    (void)state;
    tcp_stalled(true, false);
}

static void test_tcp_stalled_reader(void **state)
{
    (void)state;
    tcp_stalled(false, false);
}

/* Deregistered and registered again while a batch into it is stopped
 * half-way: the batch was in flight across the deregistration, so it fails
 * even though the range is registered again when it goes on. */
static void test_tcp_reregistered_mid_batch(void **state)
{
    (void)state;
    tcp_stalled(true, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_deregister_mid_batch_memfd),
        cmocka_unit_test(test_shm_deregister_mid_batch_anon),
        cmocka_unit_test(test_shm_stalled_initiator_memfd),
        cmocka_unit_test(test_shm_stalled_initiator_anon),
        cmocka_unit_test(test_tcp_stalled_writer),
        cmocka_unit_test(test_tcp_stalled_reader),
        cmocka_unit_test(test_tcp_reregistered_mid_batch),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
