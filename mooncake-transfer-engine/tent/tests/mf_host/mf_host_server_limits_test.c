/* mf_host's server against hostile and careless clients, seen from outside:
 * a forked target (optionally with a low RLIMIT_NOFILE and server limits
 * in its environment) and raw sockets speaking the wire of mf_host.h.
 *  - idle connections up to the fd limit, then closed: the target's
 *    descriptors come back and a normal transfer is served;
 *  - more idle connections than the cap: a transfer is served meanwhile;
 *  - an idle connection is closed after MF_HOST_IDLE_TIMEOUT_MS, while a
 *    peer's own connections stay usable across several timeouts; one that
 *    never says HELLO is closed after the socket timeout even without;
 *  - the HELLO answer holds no value inside any mapping of the target;
 *  - READ, WRITE and RANGES before a HELLO close the connection, unserved;
 *  - a range registered with a key refuses requests with another key as
 *    if it were not registered.
 */
/* cmocka.h needs these first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include "mf_host/mf_host.h"
#include "mfh_test_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

static struct mfh_api api;
static const struct mfh_api *A = &api;

#define TARGET_SIZE ((size_t)1 << 20)
#define CHILD_NOFILE 64

static int group_setup(void **state)
{
    (void)state;
    return mfh_api_load(&api);
}

/* ---- the target ---------------------------------------------------------- */

struct target_args {
    uint32_t proto;
    rlim_t nofile; /* 0: leave the limit alone */
};

static void target_run(int cmd_fd, int ans_fd, void *arg)
{
    const struct target_args *x = arg;
    /* none of this process's sockets: they would count against the limit */
    for (int fd = 3; fd < 4096; fd++)
        if (fd != cmd_fd && fd != ans_fd)
            close(fd);
    if (x->nofile) {
        struct rlimit rl = {.rlim_cur = x->nofile, .rlim_max = x->nofile};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(5);
    }
    mfh_child_main(A, x->proto, TARGET_SIZE, cmd_fd, ans_fd);
}

/* Forks a target with env (NAME=VALUE pairs, NULL-terminated) set in it
 * only. */
static void target_start(struct mfh_child *c, uint32_t proto, rlim_t nofile,
                         const char *const *env)
{
    for (const char *const *e = env; e && *e; e++)
        assert_int_equal(putenv((char *)*e), 0);
    struct target_args args = {proto, nofile};
    pid_t pid = tc_fork_child(target_run, &args, &c->cmd_fd, &c->ans_fd);
    for (const char *const *e = env; e && *e; e++) {
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(*e, "="), *e);
        unsetenv(name);
    }
    assert_true(pid > 0);
    c->pid = pid;
    c->size = TARGET_SIZE;
    struct mfh_child_hello hello;
    assert_int_equal(tc_read_all(c->ans_fd, &hello, sizeof(hello)), 0);
    hello.uid[sizeof(hello.uid) - 1] = '\0';
    snprintf(c->uid, sizeof(c->uid), "%s", hello.uid);
    c->base = (uint8_t *)(uintptr_t)hello.base;
}

static int count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Waits up to timeout_s for the target's descriptor count to satisfy
 * (at_least ? >= : <=) n; returns the last count. */
static int wait_fds(pid_t pid, int n, bool at_least, double timeout_s)
{
    double end = mfh_now() + timeout_s;
    int best = at_least ? 0 : 1 << 30;
    for (;;) {
        int k = count_fds(pid);
        /* at_least: the highest count seen (at the limit the server gives
         * a descriptor back now and then), else the lowest */
        best = at_least ? (k > best ? k : best) : (k < best ? k : best);
        if ((at_least ? k >= n : k <= n) || mfh_now() > end)
            return best;
        mfh_sleep_ms(2);
    }
}

/* ---- raw wire ------------------------------------------------------------ */

static uint16_t port_of(const char *uid)
{
    const char *colon = strrchr(uid, ':');
    assert_non_null(colon);
    return (uint16_t)atoi(colon + 1);
}

/* A connection to uid; blocking unless nonblock (then possibly still
 * connecting). */
static int raw_connect(const char *uid, bool nonblock, int rcv_timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC |
                                 (nonblock ? SOCK_NONBLOCK : 0),
                    0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = rcv_timeout_ms / 1000,
                         .tv_usec = (rcv_timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(port_of(uid))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    assert_true(rc == 0 || (nonblock && errno == EINPROGRESS));
    return fd;
}

static void send_msg(int fd, uint16_t type, uint64_t addr, uint64_t len)
{
    struct mfh_msg m = {
        .magic = MFH_MAGIC, .type = type, .addr = addr, .len = len};
    assert_int_equal(send(fd, &m, sizeof(m), MSG_NOSIGNAL), (ssize_t)sizeof(m));
}

/* Reads until EOF, an error or the receive timeout: the bytes received
 * (at most cap kept in buf); *eof: the connection was closed by the
 * other side. */
static size_t read_until_close(int fd, uint8_t *buf, size_t cap, bool *eof)
{
    size_t got = 0;
    *eof = false;
    for (;;) {
        uint8_t tmp[4096];
        ssize_t r = recv(fd, tmp, sizeof(tmp), 0);
        if (r > 0) {
            size_t k = got < cap ? cap - got : 0;
            memcpy(buf + got, tmp, (size_t)r < k ? (size_t)r : k);
            got += (size_t)r;
            continue;
        }
        *eof = r == 0 || errno == ECONNRESET;
        return got;
    }
}

/* Says HELLO on fd and reads the whole answer into out (header, hello). */
static void raw_hello(int fd, uint8_t *out, size_t *out_len)
{
    struct mfh_hello h;
    memset(&h, 0, sizeof(h));
    h.version = MFH_VERSION;
    h.pid = (uint32_t)getpid();
    h.ctl_fd = -1;
    snprintf(h.uid, sizeof(h.uid), "rogue");
    send_msg(fd, MFH_MSG_HELLO, 0, sizeof(h));
    assert_int_equal(send(fd, &h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
    struct mfh_msg m;
    assert_int_equal(tc_read_all(fd, &m, sizeof(m)), 0);
    assert_int_equal(m.magic, MFH_MAGIC);
    assert_int_equal(m.type, MFH_MSG_REPLY);
    assert_int_equal(m.status, SM_OK);
    assert_int_equal(m.len, sizeof(struct mfh_hello));
    memcpy(out, &m, sizeof(m));
    assert_int_equal(tc_read_all(fd, out + sizeof(m), m.len), 0);
    *out_len = sizeof(m) + m.len;
}

/* ---- a normal transfer --------------------------------------------------- */

/* Writes a pattern into the target and reads it back through an instance
 * of this process made now (a fresh one: no connection made before). */
static void normal_transfer(struct mfh_child *c, uint32_t seed)
{
    setenv("MF_TRANSFER_TIMEOUT", "3000", 1);
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    smem_trans_t h = mfh_create(A, SMEMB_DATA_OP_HOST_TCP);
    unsetenv("MF_TRANSFER_TIMEOUT");
    assert_non_null(h);
    enum { LEN = 64 << 10 };
    uint8_t *buf = malloc(LEN);
    assert_non_null(buf);
    mfh_fill(buf, LEN, seed);
    assert_int_equal(mfh_child_cmd(c, 'Z', 0, 0, 0), 0);
    assert_int_equal(A->smem_trans_register_mem(h, buf, LEN, 0), SM_OK);
    assert_int_equal(
        mfh_copy1(A, h, c->uid, SMEM_TRANS_OP_WRITE, buf, c->base + 4096, LEN),
        0);
    assert_int_equal(mfh_child_cmd(c, 'V', 4096, LEN, seed), 0);
    memset(buf, 0, LEN);
    assert_int_equal(
        mfh_copy1(A, h, c->uid, SMEM_TRANS_OP_READ, buf, c->base + 4096, LEN),
        0);
    assert_int_equal(mfh_check(buf, LEN, seed), LEN);
    A->smem_trans_destroy(h, 0);
    A->smem_trans_uninit(0);
    free(buf);
}

/* ---- tests --------------------------------------------------------------- */

/* Idle connections past the fd limit (the cap set above it, so accept()
 * runs out of descriptors), then all closed: the target's descriptors come
 * back near where they started without anyone connecting, and it serves a
 * transfer. */
static void test_fd_exhaustion_recovers(void **state)
{
    (void)state;
    static const char *const env[] = {"MF_HOST_MAX_CONNECTIONS=1000", NULL};
    struct mfh_child c;
    target_start(&c, SMEMB_DATA_OP_HOST_TCP, CHILD_NOFILE, env);
    int start = count_fds(c.pid);
    assert_true(start > 0 && start < CHILD_NOFILE / 2);
    enum { N = 3 * CHILD_NOFILE };
    int fds[N];
    for (int i = 0; i < N; i++)
        fds[i] = raw_connect(c.uid, true, 1000);
    int peak = wait_fds(c.pid, CHILD_NOFILE - 2, true, 15.0);
    print_message("target: %d descriptors at start, %d under %d idle "
                  "connections (limit %d)\n",
                  start, peak, N, CHILD_NOFILE);
    assert_true(peak >= CHILD_NOFILE - 4); /* it did run out */
    for (int i = 0; i < N; i++)
        close(fds[i]);
    int after = wait_fds(c.pid, start + 2, false, 5.0);
    print_message("target: %d descriptors after they closed\n", after);
    assert_true(after <= start + 2);
    normal_transfer(&c, 11);
    assert_int_equal(mfh_child_stop(&c, false), 0);
}

/* More idle connections than the cap, kept open: the target holds at most
 * the cap and one more, and serves a transfer meanwhile. */
static void test_capped_serves_while_attacked(void **state)
{
    (void)state;
    enum { CAP = 8 };
    static const char *const env[] = {"MF_HOST_MAX_CONNECTIONS=8", NULL};
    struct mfh_child c;
    target_start(&c, SMEMB_DATA_OP_HOST_TCP, CHILD_NOFILE, env);
    int start = count_fds(c.pid);
    enum { N = 2 * CHILD_NOFILE };
    int fds[N];
    for (int i = 0; i < N; i++)
        fds[i] = raw_connect(c.uid, true, 1000);
    mfh_sleep_ms(300); /* let the target take them in */
    int held = count_fds(c.pid);
    print_message("target: %d descriptors at start, %d under %d idle "
                  "connections\n",
                  start, held, N);
    assert_true(held <= start + CAP + 1);
    normal_transfer(&c, 12);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    assert_int_equal(mfh_child_stop(&c, false), 0);
}

/* A connection that says nothing is closed after the idle timeout; a
 * peer's own connections (control and pooled) outlive several timeouts. */
static void test_idle_timeout(void **state)
{
    (void)state;
    static const char *const env[] = {"MF_HOST_IDLE_TIMEOUT_MS=300", NULL};
    struct mfh_child c;
    target_start(&c, SMEMB_DATA_OP_HOST_TCP, 0, env);
    int fd = raw_connect(c.uid, false, 5000);
    double t0 = mfh_now();
    uint8_t b[16];
    bool eof = false;
    size_t got = read_until_close(fd, b, sizeof(b), &eof);
    double waited = mfh_now() - t0;
    print_message("idle connection closed after %.3f s\n", waited);
    assert_int_equal(got, 0);
    assert_true(eof);
    assert_true(waited >= 0.25 && waited < 4.0);
    close(fd);

    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    smem_trans_t h = mfh_create(A, SMEMB_DATA_OP_HOST_TCP);
    assert_non_null(h);
    struct mfh_down_rec rec = {.lock = PTHREAD_MUTEX_INITIALIZER};
    assert_int_equal(A->smem_trans_set_peer_down_callback(h, mfh_on_down, &rec),
                     SM_OK);
    uint8_t *buf = calloc(1, 4096);
    assert_non_null(buf);
    assert_int_equal(A->smem_trans_register_mem(h, buf, 4096, 0), SM_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(mfh_copy1(A, h, c.uid, SMEM_TRANS_OP_WRITE, buf,
                                   c.base, 4096),
                         0);
        mfh_sleep_ms(700); /* idle across two of the target's timeouts */
    }
    pthread_mutex_lock(&rec.lock);
    assert_int_equal(rec.calls, 0); /* its control connection stayed */
    pthread_mutex_unlock(&rec.lock);
    A->smem_trans_destroy(h, 0);
    A->smem_trans_uninit(0);
    free(buf);
    assert_int_equal(mfh_child_stop(&c, false), 0);
}

/* With no idle timeout, a connection that never says HELLO is still
 * closed, after the socket timeout (MF_TRANSFER_TIMEOUT). */
static void test_silent_before_hello_closed(void **state)
{
    (void)state;
    static const char *const env[] = {"MF_HOST_IDLE_TIMEOUT_MS=0",
                                      "MF_TRANSFER_TIMEOUT=400", NULL};
    struct mfh_child c;
    target_start(&c, SMEMB_DATA_OP_HOST_TCP, 0, env);
    int fd = raw_connect(c.uid, false, 5000);
    double t0 = mfh_now();
    uint8_t b[16];
    bool eof = false;
    size_t got = read_until_close(fd, b, sizeof(b), &eof);
    double waited = mfh_now() - t0;
    print_message("silent connection closed after %.3f s\n", waited);
    assert_int_equal(got, 0);
    assert_true(eof);
    assert_true(waited >= 0.35 && waited < 4.0);
    close(fd);
    assert_int_equal(mfh_child_stop(&c, false), 0);
}

struct range {
    uint64_t lo, hi;
};

/* Every mapping of pid but those of a terabyte or more (a sanitizer's
 * shadow and gaps, which would make any small number look like an
 * address). */
static size_t read_maps(pid_t pid, struct range *r, size_t cap)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = 0;
    char line[512];
    while (n < cap && fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi;
        if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && hi - lo < (1ull << 40))
            r[n++] = (struct range){lo, hi};
    }
    fclose(f);
    return n;
}

/* The HELLO answer (over host_tcp and host_shm) holds no 8-byte word (at
 * the 8-byte offsets where its 64-bit fields and strings lie) inside any
 * mapping of the target: no heap, stack, library or control-page
 * address. */
static void hello_no_addresses(uint32_t proto)
{
    struct mfh_child c;
    target_start(&c, proto, 0, NULL);
    int fd = raw_connect(c.uid, false, 5000);
    uint8_t ans[sizeof(struct mfh_msg) + sizeof(struct mfh_hello)];
    size_t len = 0;
    raw_hello(fd, ans, &len);
    static struct range maps[4096];
    size_t n = read_maps(c.pid, maps, 4096);
    assert_true(n > 0);
    /* Fields of 32 bits hold no address, but read as a word two of them
     * can look like one: version 5 beside pid 0x60ef fell inside ASan's
     * heap once.  They are zeroed; the 64-bit fields and the strings stay. */
    struct mfh_msg m;
    struct mfh_hello h;
    memcpy(&m, ans, sizeof(m));
    memcpy(&h, ans + sizeof(m), sizeof(h));
    m.magic = 0;
    m.type = m.flags = 0;
    m.status = 0;
    m.count = 0;
    h.version = h.pid = h.proto = 0;
    h.ctl_fd = 0;
    h.idle_timeout_ms = h.pad = 0;
    memcpy(ans, &m, sizeof(m));
    memcpy(ans + sizeof(m), &h, sizeof(h));
    int hits = 0;
    for (size_t off = 0; off + 8 <= len; off += 8) {
        uint64_t v;
        memcpy(&v, ans + off, 8);
        for (size_t i = 0; i < n; i++) {
            if (v >= maps[i].lo && v < maps[i].hi) {
                print_message("byte %zu of the answer: 0x%llx is inside "
                              "[0x%llx, 0x%llx)\n",
                              off, (unsigned long long)v,
                              (unsigned long long)maps[i].lo,
                              (unsigned long long)maps[i].hi);
                hits++;
            }
        }
    }
    assert_int_equal(hits, 0);
    close(fd);
    assert_int_equal(mfh_child_stop(&c, false), 0);
}

static void test_hello_no_addresses_tcp(void **state)
{
    (void)state;
    hello_no_addresses(SMEMB_DATA_OP_HOST_TCP);
}

static void test_hello_no_addresses_shm(void **state)
{
    (void)state;
    hello_no_addresses(SMEMB_DATA_OP_HOST_SHM);
}

/* READ, RANGES and WRITE before a HELLO: the connection is closed, nothing
 * is answered and nothing written; after a HELLO the same READ is served. */
static void test_requests_before_hello_refused(void **state)
{
    (void)state;
    struct mfh_child c;
    target_start(&c, SMEMB_DATA_OP_HOST_TCP, 0, NULL);
    enum { LEN = 4096 };
    assert_int_equal(mfh_child_cmd(&c, 'Z', 0, 0, 0), 0);
    assert_int_equal(mfh_child_cmd(&c, 'F', 0, LEN, 21), 0);
    uint64_t base = (uint64_t)(uintptr_t)c.base;
    static uint8_t got[2 * LEN + 256];
    bool eof = false;

    int fd = raw_connect(c.uid, false, 5000);
    send_msg(fd, MFH_MSG_READ, base, LEN);
    assert_int_equal(read_until_close(fd, got, sizeof(got), &eof), 0);
    assert_true(eof);
    close(fd);

    fd = raw_connect(c.uid, false, 5000);
    send_msg(fd, MFH_MSG_RANGES, 0, 0);
    assert_int_equal(read_until_close(fd, got, sizeof(got), &eof), 0);
    assert_true(eof);
    close(fd);

    fd = raw_connect(c.uid, false, 5000);
    send_msg(fd, MFH_MSG_WRITE, base, LEN);
    uint8_t junk[LEN];
    memset(junk, 0xee, sizeof(junk));
    ssize_t s = send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
    (void)s; /* may fail: the target may have closed already */
    assert_int_equal(read_until_close(fd, got, sizeof(got), &eof), 0);
    assert_true(eof);
    close(fd);
    assert_int_equal(mfh_child_cmd(&c, 'V', 0, LEN, 21), 0); /* unchanged */

    /* The control: after a HELLO the same READ is answered with the bytes. */
    fd = raw_connect(c.uid, false, 5000);
    uint8_t ans[sizeof(struct mfh_msg) + sizeof(struct mfh_hello)];
    size_t len = 0;
    raw_hello(fd, ans, &len);
    send_msg(fd, MFH_MSG_READ, base, LEN);
    struct mfh_msg m;
    assert_int_equal(tc_read_all(fd, &m, sizeof(m)), 0);
    assert_int_equal(m.status, SM_OK);
    assert_int_equal(m.len, LEN);
    assert_int_equal(tc_read_all(fd, got, LEN), 0);
    assert_int_equal(mfh_check(got, LEN, 21), LEN);
    close(fd);
    assert_int_equal(mfh_child_stop(&c, false), 0);
}

/* One request on a greeted connection with key (NULL: zeros); the reply
 * header (a READ answered SM_OK: its data into got, then its final
 * status, which must be SM_OK). */
static struct mfh_msg keyed_req(int fd, uint16_t type, uint64_t addr,
                                uint64_t len, const uint8_t *key,
                                const uint8_t *data, uint8_t *got)
{
    struct mfh_msg m = {
        .magic = MFH_MAGIC, .type = type, .addr = addr, .len = len};
    if (key)
        memcpy(m.key, key, MFH_KEY_LEN);
    struct mfh_wire_range r = {.addr = addr, .len = len};
    if (type == MFH_MSG_CHECK) {
        if (key)
            memcpy(r.key, key, MFH_KEY_LEN);
        m.count = 1;
        m.addr = 0;
        m.len = sizeof(r);
    }
    assert_int_equal(send(fd, &m, sizeof(m), MSG_NOSIGNAL), (ssize_t)sizeof(m));
    if (type == MFH_MSG_CHECK)
        assert_int_equal(send(fd, &r, sizeof(r), MSG_NOSIGNAL),
                         (ssize_t)sizeof(r));
    if (type == MFH_MSG_WRITE)
        assert_int_equal(send(fd, data, len, MSG_NOSIGNAL), (ssize_t)len);
    struct mfh_msg a;
    assert_int_equal(tc_read_all(fd, &a, sizeof(a)), 0);
    assert_int_equal(a.type, MFH_MSG_REPLY);
    if (type == MFH_MSG_READ && a.status == SM_OK) {
        assert_int_equal(a.len, len);
        assert_int_equal(tc_read_all(fd, got, len), 0);
        struct mfh_msg fin;
        assert_int_equal(tc_read_all(fd, &fin, sizeof(fin)), 0);
        assert_int_equal(fin.status, SM_OK);
    }
    return a;
}

/* One keyed batch of two entries (so the batch is CHECKed first) from
 * instance h: its result. */
static int32_t keyed_copy(smem_trans_t h, const char *uid,
                          smem_trans_opcode_t op, uint8_t *local,
                          uint8_t *remote, size_t len, const uint8_t *key)
{
    void *src[2] = {local, local + len / 2},
         *dst[2] = {remote, remote + len / 2};
    size_t sz[2] = {len / 2, len - len / 2};
    uint8_t keys[2 * MFH_KEY_LEN];
    memcpy(keys, key, MFH_KEY_LEN);
    memcpy(keys + MFH_KEY_LEN, key, MFH_KEY_LEN);
    smem_trans_batch_params_t p = {.destUrl = uid,
                                   .srcList = src,
                                   .destList = dst,
                                   .sizeList = sz,
                                   .batchSize = 2,
                                   .opcode = op};
    uint64_t id = 0;
    int32_t rc = A->smem_trans_ext_batch_copy_keyed(h, &p, keys, &id);
    if (rc != SM_OK)
        return rc;
    int32_t result = -12345;
    rc = mfh_wait(A, h, id, &result, 30.0);
    return rc != SM_OK ? rc : result;
}

/* A range registered with a key: READ, WRITE and CHECK without it (zeros)
 * or with another are answered exactly as an unregistered range is, and
 * write nothing; RANGES never hands the key out; the key is served; a new
 * registration at the same address gets a new key and the old one is
 * refused, through raw frames and through an instance of this library. */
static void test_keyed_range_refuses_other_keys(void **state)
{
    (void)state;
    struct mfh_child c;
    target_start(&c, SMEMB_DATA_OP_HOST_TCP, 0, NULL);
    enum { LEN = 8192 };
    assert_int_equal(mfh_child_cmd(&c, 'Z', 0, 0, 0), 0);
    assert_int_equal(mfh_child_cmd(&c, 'F', 0, LEN, 21), 0);
    assert_int_equal(mfh_child_cmd(&c, 'K', 0, 0, 7), 0);
    uint64_t base = (uint64_t)(uintptr_t)c.base;
    uint8_t k7[MFH_KEY_LEN], k8[MFH_KEY_LEN], off[MFH_KEY_LEN];
    mfh_test_key(7, k7);
    mfh_test_key(8, k8);
    memcpy(off, k7, MFH_KEY_LEN);
    off[0] ^= 0x80;
    static uint8_t got[LEN], junk[LEN];
    memset(junk, 0xee, sizeof(junk));

    int fd = raw_connect(c.uid, false, 5000);
    uint8_t ans[sizeof(struct mfh_msg) + sizeof(struct mfh_hello)];
    size_t alen = 0;
    raw_hello(fd, ans, &alen);
    /* the answer to an unregistered range, the reference */
    struct mfh_msg none_r =
        keyed_req(fd, MFH_MSG_READ, 0x1000, LEN, NULL, NULL, got);
    struct mfh_msg none_w =
        keyed_req(fd, MFH_MSG_WRITE, 0x1000, LEN, NULL, junk, NULL);
    struct mfh_msg none_c =
        keyed_req(fd, MFH_MSG_CHECK, 0x1000, LEN, NULL, NULL, NULL);
    assert_int_not_equal(none_r.status, SM_OK);
    const uint8_t *bad[] = {NULL, off};
    for (int i = 0; i < 2; i++) {
        struct mfh_msg r =
            keyed_req(fd, MFH_MSG_READ, base, LEN, bad[i], NULL, got);
        assert_memory_equal(&r, &none_r, sizeof(r));
        r = keyed_req(fd, MFH_MSG_WRITE, base, LEN, bad[i], junk, NULL);
        assert_memory_equal(&r, &none_w, sizeof(r));
        r = keyed_req(fd, MFH_MSG_CHECK, base, LEN, bad[i], NULL, NULL);
        assert_int_equal(r.status, none_c.status);
        assert_int_equal(r.addr, none_c.addr);
        assert_int_equal(r.len, none_c.len);
    }
    assert_int_equal(mfh_child_cmd(&c, 'V', 0, LEN, 21), 0); /* unchanged */
    /* RANGES: the range, never its key */
    struct mfh_msg m = {.magic = MFH_MAGIC, .type = MFH_MSG_RANGES};
    assert_int_equal(send(fd, &m, sizeof(m), MSG_NOSIGNAL), (ssize_t)sizeof(m));
    assert_int_equal(tc_read_all(fd, &m, sizeof(m)), 0);
    assert_int_equal(m.status, SM_OK);
    assert_int_equal(m.count, 1);
    struct mfh_wire_range wr;
    assert_int_equal(tc_read_all(fd, &wr, sizeof(wr)), 0);
    assert_int_equal(wr.addr, base);
    static const uint8_t zero[MFH_KEY_LEN];
    assert_memory_equal(wr.key, zero, MFH_KEY_LEN);
    /* the key: served */
    memset(got, 0, sizeof(got));
    m = keyed_req(fd, MFH_MSG_READ, base, LEN, k7, NULL, got);
    assert_int_equal(m.status, SM_OK);
    assert_int_equal(mfh_check(got, LEN, 21), LEN);
    m = keyed_req(fd, MFH_MSG_CHECK, base, LEN, k7, NULL, NULL);
    assert_int_equal(m.status, SM_OK);
    /* registered again: a new key, the old one refused */
    assert_int_equal(mfh_child_cmd(&c, 'K', 0, 0, 8), 0);
    m = keyed_req(fd, MFH_MSG_WRITE, base, LEN, k7, junk, NULL);
    assert_memory_equal(&m, &none_w, sizeof(m));
    m = keyed_req(fd, MFH_MSG_READ, base, LEN, k7, NULL, got);
    assert_memory_equal(&m, &none_r, sizeof(m));
    assert_int_equal(mfh_child_cmd(&c, 'V', 0, LEN, 21), 0);
    close(fd);

    /* the same through an instance of this library: the old key's batch
     * fails and writes nothing, the new key's moves every byte */
    assert_int_equal(A->smem_trans_init(0, 0), SM_OK);
    smem_trans_t h = mfh_create(A, SMEMB_DATA_OP_HOST_TCP);
    assert_non_null(h);
    uint8_t *buf = malloc(LEN);
    assert_non_null(buf);
    assert_int_equal(A->smem_trans_register_mem(h, buf, LEN, 0), SM_OK);
    mfh_fill(buf, LEN, 33);
    assert_int_not_equal(
        keyed_copy(h, c.uid, SMEM_TRANS_OP_WRITE, buf, c.base, LEN, k7), SM_OK);
    assert_int_equal(mfh_child_cmd(&c, 'V', 0, LEN, 21), 0);
    assert_int_equal(
        keyed_copy(h, c.uid, SMEM_TRANS_OP_WRITE, buf, c.base, LEN, k8), SM_OK);
    assert_int_equal(mfh_child_cmd(&c, 'V', 0, LEN, 33), 0);
    memset(buf, 0, LEN);
    assert_int_equal(
        keyed_copy(h, c.uid, SMEM_TRANS_OP_READ, buf, c.base, LEN, k8), SM_OK);
    assert_int_equal(mfh_check(buf, LEN, 33), LEN);
    A->smem_trans_destroy(h, 0);
    A->smem_trans_uninit(0);
    free(buf);
    assert_int_equal(mfh_child_stop(&c, false), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requests_before_hello_refused),
        cmocka_unit_test(test_keyed_range_refuses_other_keys),
        cmocka_unit_test(test_hello_no_addresses_tcp),
        cmocka_unit_test(test_hello_no_addresses_shm),
        cmocka_unit_test(test_idle_timeout),
        cmocka_unit_test(test_silent_before_hello_closed),
        cmocka_unit_test(test_capped_serves_while_attacked),
        cmocka_unit_test(test_fd_exhaustion_recovers),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
