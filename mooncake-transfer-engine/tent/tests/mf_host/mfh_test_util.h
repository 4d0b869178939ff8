/* Helpers shared by the mf_host tests: load the built libmf_smem.so with
 * dlopen (as the memfabric transport does), wait for batches with a
 * deadline, a byte pattern, and a forked target process driven over pipes.
 */
#ifndef TENT_MFH_TEST_UTIL_H
#define TENT_MFH_TEST_UTIL_H

#include "../common/test_child.h"
#include "transport/memfabric/smem_trans_abi.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MF_HOST_LIB
#error "MF_HOST_LIB must name the built libmf_smem.so"
#endif

/* The 13 entry points, loaded by name from the X-macro list. */
struct mfh_api {
    void *dl;
#define MFH_API_PTR(ret, name, params) ret(*name) params;
    SMEM_TRANS_SYMBOLS(MFH_API_PTR)
    SMEM_TRANS_EXT_SYMBOLS(MFH_API_PTR)
#undef MFH_API_PTR
};

static inline int mfh_api_load(struct mfh_api *a)
{
    memset(a, 0, sizeof(*a));
    a->dl = dlopen(MF_HOST_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!a->dl) {
        fprintf(stderr, "dlopen(%s): %s\n", MF_HOST_LIB, dlerror());
        return -1;
    }
#define MFH_API_SYM(ret, name, params)                                         \
    *(void **)(&a->name) = dlsym(a->dl, #name);                                \
    if (!a->name) {                                                            \
        fprintf(stderr, "dlsym(%s) failed\n", #name);                          \
        return -1;                                                             \
    }
    SMEM_TRANS_SYMBOLS(MFH_API_SYM)
    SMEM_TRANS_EXT_SYMBOLS(MFH_API_SYM)
#undef MFH_API_SYM
    return 0;
}

/* The access key the tests derive from seed (what a descriptor would
 * publish for a registration). */
static inline void mfh_test_key(uint32_t seed, uint8_t key[SMEM_TRANS_EXT_KEY_LEN])
{
    for (int i = 0; i < SMEM_TRANS_EXT_KEY_LEN; i++)
        key[i] = (uint8_t)(seed * 131u + (uint32_t)i * 29u + 1u);
}

static inline double mfh_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void mfh_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls batch id until the query stops answering SM_NEED_RETRY; returns
 * the query's return code and stores the result. Gives up (returning
 * SM_TIMEOUT) after timeout_s. */
static inline int32_t mfh_wait(const struct mfh_api *a, smem_trans_t h,
                               uint64_t id, int32_t *result, double timeout_s)
{
    double end = mfh_now() + timeout_s;
    for (;;) {
        int32_t rc = a->smem_trans_batch_status_query(h, id, result, 0);
        if (rc != SM_NEED_RETRY)
            return rc;
        if (mfh_now() > end)
            return SM_TIMEOUT;
        mfh_sleep_ms(1);
    }
}

/* Copies one entry and waits: returns the batch result, or the error of
 * the submit/query, or SM_TIMEOUT. */
static inline int32_t mfh_copy1(const struct mfh_api *a, smem_trans_t h,
                                const char *url, smem_trans_opcode_t op,
                                void *local, void *remote, size_t len)
{
    void *src[1] = {local}, *dst[1] = {remote};
    size_t sz[1] = {len};
    smem_trans_batch_params_t p = {.destUrl = url,
                                   .srcList = src,
                                   .destList = dst,
                                   .sizeList = sz,
                                   .batchSize = 1,
                                   .opcode = op};
    uint64_t id = 0;
    int32_t rc = a->smem_trans_batch_copy(h, &p, &id);
    if (rc != SM_OK)
        return rc;
    int32_t result = -12345;
    rc = mfh_wait(a, h, id, &result, 30.0);
    return rc != SM_OK ? rc : result;
}

static inline uint8_t mfh_pattern(uint32_t seed, size_t i)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ULL + seed * 0x632be5abULL;
    x ^= x >> 29;
    return (uint8_t)(x ^ (x >> 8) ^ (i >> 12));
}

static inline void mfh_fill(uint8_t *p, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = mfh_pattern(seed, i);
}

/* Index of the first byte that differs from the pattern, or len. */
static inline size_t mfh_check(const uint8_t *p, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != mfh_pattern(seed, i))
            return i;
    return len;
}

static inline smem_trans_t mfh_create(const struct mfh_api *a, uint32_t proto)
{
    smem_trans_config_t cfg;
    if (a->smem_trans_config_init(&cfg) != SM_OK)
        return NULL;
    cfg.dataOpType = (smem_bm_data_op_type)proto;
    snprintf(cfg.url, sizeof(cfg.url), "127.0.0.1:0");
    return a->smem_trans_create(&cfg, 0);
}

static inline void mfh_uid(const struct mfh_api *a, smem_trans_t h, char *uid,
                           size_t len)
{
    uint16_t port = 0;
    a->smem_trans_get_rpc_port(h, &port);
    snprintf(uid, len, "127.0.0.1:%u", (unsigned)port);
}

/* ---- a target in a child process ---------------------------------------
 * The child creates an instance with the given protocol, registers `size`
 * bytes and reports {uid, address} on a pipe; then it serves commands:
 *   'Z' zero the buffer; 'F' off len seed: fill a range with the pattern;
 *   'V' off len seed: verify a range against the pattern and that the bytes
 *   just outside it are zero; 'M' (MFH_CHILD_MEMFD only) replace the
 *   buffer by a new memfd at the same address; 'K' seed: register the
 *   buffer again with the key mfh_test_key(seed); 'Q' quit.  Each command
 *   answers one byte
 *   (1 = ok). */
struct mfh_child {
    pid_t pid;
    int cmd_fd, ans_fd;
    char uid[64];
    uint8_t *base;
    size_t size;
};

struct mfh_child_cmd {
    char op;
    uint64_t off, len;
    uint32_t seed;
};

struct mfh_child_hello {
    char uid[64];
    uint64_t base;
};

static inline void mfh_child_main(const struct mfh_api *a, uint32_t proto,
                                  size_t size, int cmd_fd, int ans_fd)
{
    /* MFH_CHILD_MEMFD=1: the buffer is a shared mapping of a memfd (as
     * TENT's tent_allocate_memory makes), and 'M' replaces it by a new
     * memfd mapped at the same address (deregistered, then registered). */
    bool memfd = getenv("MFH_CHILD_MEMFD") != NULL;
    int mfd = memfd ? memfd_create("mfh_child_a", MFD_CLOEXEC) : -1;
    if (memfd && (mfd < 0 || ftruncate(mfd, (off_t)size) != 0))
        _exit(2);
    uint8_t *buf =
        mmap(NULL, size, PROT_READ | PROT_WRITE,
             memfd ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, mfd, 0);
    if (buf == MAP_FAILED || a->smem_trans_init(0, 0) != SM_OK)
        _exit(2);
    smem_trans_t h = mfh_create(a, proto);
    if (!h || a->smem_trans_register_mem(h, buf, size, 0) != SM_OK)
        _exit(3);
    struct mfh_child_hello hello;
    memset(&hello, 0, sizeof(hello));
    hello.base = (uint64_t)(uintptr_t)buf;
    mfh_uid(a, h, hello.uid, sizeof(hello.uid));
    if (write(ans_fd, &hello, sizeof(hello)) != (ssize_t)sizeof(hello))
        _exit(4);
    struct mfh_child_cmd c;
    while (tc_read_all(cmd_fd, &c, sizeof(c)) == 0) {
        uint8_t ok = 1;
        if (c.op == 'Q')
            break;
        if (c.off > size || c.len > size - c.off) {
            ok = 0;
        } else if (c.op == 'M' && memfd) {
            int nfd = memfd_create("mfh_child_b", MFD_CLOEXEC);
            ok = a->smem_trans_deregister_mem(h, buf) == SM_OK && nfd >= 0 &&
                 ftruncate(nfd, (off_t)size) == 0 &&
                 mmap(buf, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                      nfd, 0) == buf &&
                 a->smem_trans_register_mem(h, buf, size, 0) == SM_OK;
            close(mfd);
            mfd = nfd;
        } else if (c.op == 'K') {
            uint8_t key[SMEM_TRANS_EXT_KEY_LEN];
            mfh_test_key(c.seed, key);
            ok = a->smem_trans_deregister_mem(h, buf) == SM_OK &&
                 a->smem_trans_ext_register_mem_keyed(h, buf, size, key, 0) ==
                     SM_OK;
        } else if (c.op == 'Z') {
            memset(buf, 0, size);
        } else if (c.op == 'F') {
            mfh_fill(buf + c.off, c.len, c.seed);
        } else if (c.op == 'V') {
            size_t bad = mfh_check(buf + c.off, c.len, c.seed);
            if (bad != c.len) {
                fprintf(stderr, "child: byte %zu of [%llu,+%llu) differs\n",
                        bad, (unsigned long long)c.off,
                        (unsigned long long)c.len);
                ok = 0;
            }
            if (c.off > 0 && buf[c.off - 1] != 0)
                ok = 0;
            if (c.off + c.len < size && buf[c.off + c.len] != 0)
                ok = 0;
        }
        if (write(ans_fd, &ok, 1) != 1)
            break;
    }
    a->smem_trans_destroy(h, 0);
    a->smem_trans_uninit(0);
    munmap(buf, size);
    if (mfd >= 0)
        close(mfd);
    _exit(0);
}

/* A peer-down callback's record: how often it ran and the last unique id
 * (initialise lock with PTHREAD_MUTEX_INITIALIZER). */
struct mfh_down_rec {
    pthread_mutex_t lock;
    int calls;
    char uid[64];
};

static inline void mfh_on_down(const char *uid, void *user)
{
    struct mfh_down_rec *r = user;
    pthread_mutex_lock(&r->lock);
    r->calls++;
    snprintf(r->uid, sizeof(r->uid), "%s", uid);
    pthread_mutex_unlock(&r->lock);
}

struct mfh_child_args {
    const struct mfh_api *a;
    uint32_t proto;
    size_t size;
};

static inline void mfh_child_run(int cmd_fd, int ans_fd, void *arg)
{
    const struct mfh_child_args *x = arg;
    mfh_child_main(x->a, x->proto, x->size, cmd_fd, ans_fd);
}

/* Forks a target; call before this process creates any instance. */
static inline int mfh_child_start(struct mfh_child *c, const struct mfh_api *a,
                                  uint32_t proto, size_t size)
{
    struct mfh_child_args args = {a, proto, size};
    pid_t pid = tc_fork_child(mfh_child_run, &args, &c->cmd_fd, &c->ans_fd);
    if (pid < 0)
        return -1;
    c->pid = pid;
    c->size = size;
    struct mfh_child_hello hello;
    if (tc_read_all(c->ans_fd, &hello, sizeof(hello)) != 0)
        return -1;
    hello.uid[sizeof(hello.uid) - 1] = '\0';
    snprintf(c->uid, sizeof(c->uid), "%s", hello.uid);
    c->base = (uint8_t *)(uintptr_t)hello.base;
    return 0;
}

static inline int mfh_child_cmd(struct mfh_child *c, char op, uint64_t off,
                                uint64_t len, uint32_t seed)
{
    struct mfh_child_cmd cmd;
    memset(&cmd, 0, sizeof(cmd)); /* no uninitialized padding on the pipe */
    cmd.op = op;
    cmd.off = off;
    cmd.len = len;
    cmd.seed = seed;
    uint8_t ok = 0;
    if (write(c->cmd_fd, &cmd, sizeof(cmd)) != (ssize_t)sizeof(cmd) ||
        tc_read_all(c->ans_fd, &ok, 1) != 0)
        return -1;
    return ok ? 0 : -1;
}

/* Asks the child to quit (or kills it) and reaps it; returns its status. */
static inline int mfh_child_stop(struct mfh_child *c, bool kill_it)
{
    if (kill_it) {
        kill(c->pid, SIGKILL);
    } else {
        struct mfh_child_cmd cmd;
        memset(&cmd, 0, sizeof(cmd));
        cmd.op = 'Q';
        ssize_t n = write(c->cmd_fd, &cmd, sizeof(cmd));
        (void)n;
    }
    int status = 0;
    waitpid(c->pid, &status, 0);
    close(c->cmd_fd);
    close(c->ans_fd);
    return status;
}

#endif
