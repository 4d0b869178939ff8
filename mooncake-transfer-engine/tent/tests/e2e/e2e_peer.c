#include "e2e_peer.h"

#include "../common/test_child.h"
#include "common/config.h"
#include "rpc/rpc.h"
#include "runtime/control.h"
#include "runtime/engine.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SMALL (64 * 1024)

long e2e_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint8_t e2e_pattern(uint64_t i)
{
    return (uint8_t)((i * 2654435761u) >> 13);
}

/* e2e_pattern(i) is bits 13..20 of i * K, which depend on the low 21 bits
 * of i only: a period of 2 MiB. */
#define PATTERN_PERIOD ((size_t)1 << 21)

void e2e_pattern_fill(void *buf, size_t n, uint64_t seed)
{
    uint8_t *b = buf;
    size_t done = n < PATTERN_PERIOD ? n : PATTERN_PERIOD;
    for (size_t i = 0; i < done; i++)
        b[i] = e2e_pattern(seed + i);
    /* done stays a multiple of the period while it doubles */
    while (done < n) {
        size_t k = n - done < done ? n - done : done;
        memcpy(b + done, b, k);
        done += k;
    }
}

uint64_t e2e_fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static bool g_memfabric;
static unsigned long g_nofile_soft, g_nofile_hard;
static const char *const *g_child_kv;
static uint64_t g_child_rw_at;

void e2e_set_memfabric(bool on)
{
    g_memfabric = on;
}

void e2e_set_child_nofile(unsigned long soft, unsigned long hard)
{
    g_nofile_soft = soft;
    g_nofile_hard = hard;
}

void e2e_set_child_rw_at(uint64_t addr)
{
    g_child_rw_at = addr;
}

void e2e_set_child_config(const char *const *kv)
{
    g_child_kv = kv;
}

/* In the child, before its engine exists: the limits the test asked for. */
static void child_limits(void)
{
    if (!g_nofile_soft && !g_nofile_hard)
        return;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        _exit(6);
    if (g_nofile_hard)
        rl.rlim_max = g_nofile_hard;
    if (g_nofile_soft)
        rl.rlim_cur = g_nofile_soft;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        _exit(6);
}

static int count_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = -3; /* ".", ".." and the directory's own descriptor */
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* The descriptors e2e_peer_hold_fds made the child keep. */
struct held_fds {
    int *fd;
    int n;
};

static int hold_fds(struct held_fds *h, int free_left)
{
    if (free_left < 0) {
        for (int i = 0; i < h->n; i++)
            close(h->fd[i]);
        free(h->fd);
        *h = (struct held_fds){0};
        return 0;
    }
    struct rlimit rl;
    int open_now = count_open_fds();
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || open_now < 0)
        return h->n;
    long want = (long)rl.rlim_cur - free_left - open_now;
    if (want <= 0)
        return h->n;
    int *fd = realloc(h->fd, (size_t)(h->n + want) * sizeof(int));
    if (!fd)
        return h->n;
    h->fd = fd;
    for (long i = 0; i < want; i++) {
        int f = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (f < 0)
            break;
        h->fd[h->n++] = f;
    }
    return h->n;
}

int e2e_tcp_timeout_ms(void)
{
    const char *v = getenv("E2E_TCP_TIMEOUT_MS");
    int ms = v ? atoi(v) : 0;
    return ms >= 100 && ms <= 600000 ? ms : 1500;
}

void e2e_config(bool shm, bool tcp)
{
    tent_config_reset_global();
    tent_set_config("log_level",
                    getenv("E2E_LOG") ? getenv("E2E_LOG") : "error");
    tent_set_config("transports/shm/enable", shm ? "true" : "false");
    tent_set_config("transports/tcp/enable", tcp ? "true" : "false");
    char to[16];
    snprintf(to, sizeof(to), "%d", e2e_tcp_timeout_ms());
    tent_set_config("transports/tcp/timeout_ms", to);
    tent_set_config("transports/memfabric/enable",
                    g_memfabric ? "true" : "false");
    /* memory transports only: the file ones are tests/file's */
    tent_set_config("transports/io_uring/enable", "false");
    tent_set_config("transports/bufio/enable", "false");
}

struct cmd {
    char op;
    uint8_t plain;
    int32_t arg;
    uint64_t off, len;
};

/* The data was written by an RPC server thread, and the parent told us so
 * over a pipe: a causality TSan cannot see.  The server drops its pin on
 * the buffer under the engine's pin lock after the copy, so taking that
 * lock orders the copy before our reads, for TSan and the C11 model. */
static void sync_with_server(struct tent_engine *e, const void *addr)
{
    (void)addr;
    pthread_mutex_lock(&e->pin_lock);
    pthread_mutex_unlock(&e->pin_lock);
}

struct stack_arg {
    int ms;
    bool ok;
};

static void *stack_main(void *p)
{
    struct stack_arg *a = p;
    enum { N = 4u << 20 };
    volatile uint8_t *area = __builtin_alloca(N);
    for (size_t i = 0; i < N; i++)
        area[i] = e2e_pattern(i);
    for (long end = e2e_now_ms() + a->ms; e2e_now_ms() < end;)
        usleep(1000);
    a->ok = true;
    for (size_t i = 0; i < N && a->ok; i++)
        a->ok = area[i] == e2e_pattern(i);
    return NULL;
}

/* Four threads of 8 MiB stacks each keep 4 MiB of them patterned for ms. */
static bool stack_check(int ms)
{
    pthread_t th[4];
    struct stack_arg a[4];
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 8u << 20);
    int n = 0;
    for (; n < 4; n++) {
        a[n] = (struct stack_arg){.ms = ms};
        if (pthread_create(&th[n], &at, stack_main, &a[n]))
            break;
    }
    pthread_attr_destroy(&at);
    bool ok = n == 4;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        ok &= a[i].ok;
    }
    return ok;
}

static void child(int cfd, int afd, size_t rw_len, bool shm, bool tcp)
{
    child_limits();
    e2e_config(shm, tcp);
    for (const char *const *kv = g_child_kv; kv && kv[0]; kv += 2)
        tent_set_config(kv[0], kv[1]);
    tent_engine_t eh = tent_create_engine();
    if (!eh)
        _exit(2);
    struct tent_engine *e = eh;
    void *rw = NULL;
    if (g_child_rw_at) {
        rw = mmap((void *)(uintptr_t)g_child_rw_at, rw_len,
                  PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (rw != (void *)(uintptr_t)g_child_rw_at ||
            tent_register_memory(eh, rw, rw_len))
            _exit(3);
    } else if (tent_allocate_memory(eh, &rw, rw_len, "cpu") ||
               tent_register_memory(eh, rw, rw_len)) {
        _exit(3);
    }
    uint8_t *plain = malloc(SMALL), *ro = malloc(SMALL), *loc = malloc(SMALL);
    e2e_pattern_fill(rw, rw_len, 0);
    for (size_t i = 0; i < SMALL; i++)
        plain[i] = ro[i] = loc[i] = e2e_pattern(i);
    if (tent_register_memory_with_perm(eh, ro, SMALL, PERM_GLOBAL_READ_ONLY) ||
        tent_register_memory_with_perm(eh, loc, SMALL, PERM_LOCAL_READ_WRITE) ||
        tent_register_memory(eh, plain, SMALL))
        _exit(4);
    /* as a transport would publish memfabric_unique_id (the real one does
     * when memfabric is enabled) */
    if (!g_memfabric &&
        tent_engine_publish_attr(e, "memfabric_unique_id", "127.0.0.1:4242"))
        _exit(5);
    struct e2e_peer info = {0};
    tent_segment_name(eh, info.name, sizeof(info.name));
    info.rw_base = (uintptr_t)rw;
    info.ro_base = (uintptr_t)ro;
    info.local_base = (uintptr_t)loc;
    info.reg_base = (uintptr_t)plain;
    info.rw_len = rw_len;
    info.small_len = SMALL;
    tc_write_all(afd, &info, sizeof(info));
    uint64_t last_notif_seq = 0;
    tent_segment_id_t remote_seg = 0;
    struct held_fds held = {0};
    for (;;) {
        struct cmd c;
        if (tc_read_all(cfd, &c, sizeof(c)))
            break;
        if (c.op == 'H') {
            const uint8_t *b = c.plain ? plain : rw;
            sync_with_server(e, b);
            uint64_t h = e2e_fnv(b + c.off, c.len);
            tc_write_all(afd, &h, sizeof(h));
        } else if (c.op == 'Y') {
            /* FNV-1a of [off, +len) of this process's memory: a buffer the
             * parent knows the address of (info), registered or not. */
            const uint8_t *b = (const uint8_t *)(uintptr_t)c.off;
            sync_with_server(e, b);
            uint64_t h = e2e_fnv(b, c.len);
            tc_write_all(afd, &h, sizeof(h));
        } else if (c.op == 'R') {
            /* Registers one more buffer (filled with the pattern). */
            uint8_t *m = malloc(c.len);
            uint64_t a = 0;
            if (m) {
                e2e_pattern_fill(m, c.len, 0);
                if (tent_register_memory(eh, m, c.len) == 0)
                    a = (uintptr_t)m;
                else
                    free(m);
            }
            tc_write_all(afd, &a, sizeof(a));
        } else if (c.op == 'A') {
            void *m = NULL;
            uint64_t a = 0;
            if (tent_allocate_memory(eh, &m, c.len, "cpu") == 0) {
                int rc = tent_register_memory(eh, m, c.len);
                if (rc == 0 || rc == TENT_EEXIST)
                    a = (uintptr_t)m;
                else
                    tent_free_memory(eh, m);
            }
            tc_write_all(afd, &a, sizeof(a));
        } else if (c.op == 'U') {
            void *m = (void *)(uintptr_t)c.off;
            /* TENT's order; an engine whose tent_allocate_memory also
             * registers refuses the unregister (EINVAL: "release it with
             * tent_free_memory") and the free does both */
            int32_t ur = tent_unregister_memory(eh, m, c.len);
            int32_t rc = tent_free_memory(eh, m);
            if (rc == 0 && ur != 0 && ur != TENT_EINVAL)
                rc = ur;
            tc_write_all(afd, &rc, sizeof(rc));
        } else if (c.op == 'F') {
            int32_t rc = tent_free_memory(eh, rw);
            tc_write_all(afd, &rc, sizeof(rc));
        } else if (c.op == 'X') {
            /* Unregisters the rw (or plain) buffer; the memory stays. */
            int32_t rc = c.plain ? tent_unregister_memory(eh, plain, SMALL)
                                 : tent_unregister_memory(eh, rw, rw_len);
            tc_write_all(afd, &rc, sizeof(rc));
        } else if (c.op == 'K') {
            /* Unregisters and frees (free()) a buffer 'R' registered. */
            void *m = (void *)(uintptr_t)c.off;
            int32_t rc = tent_unregister_memory(eh, m, c.len);
            if (rc == 0)
                free(m);
            tc_write_all(afd, &rc, sizeof(rc));
        } else if (c.op == 'T') {
            /* Threads with big stacks (where glibc puts freed large
             * blocks) fill them with a pattern for arg ms and check it:
             * the answer is 1 when every byte stayed as written. */
            int32_t ok = stack_check(c.arg) ? 1 : 0;
            tc_write_all(afd, &ok, sizeof(ok));
        } else if (c.op == 'O') {
            /* Opens the segment whose name follows the command. */
            char seg_name[256];
            int32_t rc = -1;
            if (!tc_read_all(cfd, seg_name, sizeof(seg_name))) {
                seg_name[sizeof(seg_name) - 1] = 0;
                rc = tent_open_segment(eh, &remote_seg, seg_name);
            }
            tc_write_all(afd, &rc, sizeof(rc));
        } else if (c.op == 'W') {
            /* One request of len bytes between our rw buffer (or plain)
             * and address off of the segment opened with 'O' (opcode
             * arg), polled to its end: the answer is its status and the
             * cause's code. */
            tent_request_t r = {.opcode = c.arg,
                                .source = c.plain ? (void *)plain : rw,
                                .target_id = remote_seg,
                                .target_offset = c.off,
                                .length = c.len};
            int32_t ans[2] = {-1, 0};
            tent_batch_id_t b = tent_allocate_batch(eh, 1);
            if (b && tent_submit(eh, b, &r, 1) == 0) {
                tent_status_t st;
                if (e2e_wait(eh, b, 60000, &st) == 0) {
                    int code = 0, native = 0;
                    tent_task_error(eh, b, 0, &code, &native, NULL, 0);
                    ans[0] = st.status;
                    ans[1] = code;
                }
            }
            if (b)
                tent_free_batch(eh, b);
            tc_write_all(afd, ans, sizeof(ans));
        } else if (c.op == 'P') {
            /* Registers the rw buffer again with permission arg (after an
             * 'X'), or unregisters and re-registers it so. */
            (void)tent_unregister_memory(eh, rw, rw_len);
            int32_t rc = tent_register_memory_with_perm(eh, rw, rw_len, c.arg);
            tc_write_all(afd, &rc, sizeof(rc));
        } else if (c.op == 'V') {
            struct tent_rpc_stats st = {0};
            if (e->rpc)
                tent_rpc_server_stats(e->rpc, &st);
            tc_write_all(afd, &st, sizeof(st));
        } else if (c.op == 'D') {
            int32_t n = hold_fds(&held, c.arg);
            tc_write_all(afd, &n, sizeof(n));
        } else if (c.op == 'S') {
            tent_ctrl_stop_server(e);
            char ok = 1;
            tc_write_all(afd, &ok, 1);
        } else if (c.op == 'M') {
            int32_t rc = -1;
            for (int i = 0; i < e->nxports; i++) {
                struct tent_transport *t = e->xports[i];
                if (t->ops->type != TRANSPORT_MEMFABRIC ||
                    e->xport_abandoned[i])
                    continue;
                /* Marked first: from now on the engine leaves it alone
                 * (buffers, teardown), as after a failed quiesce. */
                e->xport_abandoned[i] = true;
                (void)t->ops->quiesce(t);
                t->ops->uninstall(t);
                rc = 0;
            }
            tc_write_all(afd, &rc, sizeof(rc));
        } else if (c.op == 'N') {
            int got = 0;
            int32_t ok = 1;
            long end = e2e_now_ms() + c.arg;
            while (got < (int)c.len && e2e_now_ms() < end) {
                tent_notifi_info ni;
                tent_recv_notifs(eh, &ni);
                sync_with_server(e, rw);
                for (int i = 0; i < ni.num_records; i++) {
                    unsigned long long seq, off, len, h;
                    if (sscanf(ni.records[i].msg, "%llu %llu %llu %llu", &seq,
                               &off, &len, &h) != 4 ||
                        seq != last_notif_seq + 1 || off + len > rw_len ||
                        e2e_fnv((uint8_t *)rw + off, len) != h ||
                        strcmp(ni.records[i].name, "e2e") != 0)
                        ok = 0;
                    last_notif_seq = seq;
                    got++;
                }
                tent_free_notifs(&ni);
                if (got < (int)c.len)
                    usleep(1000);
            }
            /* Anything extra (a duplicate) shows up a little later. */
            usleep(50000);
            tent_notifi_info ni;
            tent_recv_notifs(eh, &ni);
            got += ni.num_records;
            tent_free_notifs(&ni);
            int32_t r[2] = {got, ok};
            tc_write_all(afd, r, sizeof(r));
        } else {
            break;
        }
    }
    hold_fds(&held, -1);
    tent_destroy_engine(eh);
    _exit(0);
}

/* What a child needs from this process, as bytes (tc_spawn_child): the
 * buffer and transport choices, the settings e2e_set_* made, and the
 * config pairs, each string NUL-terminated, after the fixed part. */
struct child_args {
    uint64_t rw_len, nofile_soft, nofile_hard, rw_at;
    uint8_t shm, tcp, memfabric;
    uint32_t nkv; /* strings that follow: keys and values */
};

#define CHILD_ARGS_MAX 16384

static void child_main(int cfd, int afd, void *arg)
{
    struct child_args a;
    memcpy(&a, arg, sizeof(a));
    g_memfabric = a.memfabric;
    g_nofile_soft = a.nofile_soft;
    g_nofile_hard = a.nofile_hard;
    g_child_rw_at = a.rw_at;
    /* the strings are NUL-terminated: the parent wrote at most
     * CHILD_ARGS_MAX bytes, each string with its terminator */
    const char **kv = calloc(a.nkv + 2, sizeof(*kv));
    if (!kv)
        _exit(7);
    const char *at = (const char *)arg + sizeof(a);
    for (uint32_t i = 0; i < a.nkv; i++) {
        kv[i] = at;
        at += strlen(at) + 1;
    }
    g_child_kv = kv;
    child(cfd, afd, a.rw_len, a.shm, a.tcp);
}

/* The child starts in a fresh process (an exec of this binary): a fork
 * alone, made while this process runs its engine's threads, could leave
 * the child a lock one of them held, and the child hang on it. */
TC_CHILD_ROLE("e2e_peer", child_main)

int e2e_peer_start(struct e2e_peer *p, size_t rw_len, bool shm, bool tcp)
{
    char *buf = malloc(CHILD_ARGS_MAX);
    if (!buf)
        return -1;
    struct child_args a = {.rw_len = rw_len,
                           .nofile_soft = g_nofile_soft,
                           .nofile_hard = g_nofile_hard,
                           .rw_at = g_child_rw_at,
                           .shm = shm,
                           .tcp = tcp,
                           .memfabric = g_memfabric};
    size_t n = sizeof(a);
    for (const char *const *kv = g_child_kv; kv && kv[0]; kv += 2)
        for (int i = 0; i < 2; i++) {
            size_t l = strlen(kv[i]) + 1;
            if (n + l > CHILD_ARGS_MAX) {
                free(buf);
                return -1;
            }
            memcpy(buf + n, kv[i], l);
            n += l;
            a.nkv++;
        }
    memcpy(buf, &a, sizeof(a));
    int cmd_fd = -1, ans_fd = -1;
    pid_t pid = tc_spawn_child("e2e_peer", buf, n, &cmd_fd, &ans_fd);
    free(buf);
    if (pid < 0)
        return -1;
    /* A child that fails exits, and its answer pipe reads end of file at
     * once; the bound only catches one that hangs.  It is generous: under
     * ThreadSanitizer on a slow machine, a child that registers a large
     * buffer can take several seconds to answer. */
    struct pollfd pf = {.fd = ans_fd, .events = POLLIN};
    if (poll(&pf, 1, 60000) != 1 || tc_read_all(ans_fd, p, sizeof(*p))) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(cmd_fd);
        close(ans_fd);
        return -1;
    }
    p->pid = pid;
    p->cmd_fd = cmd_fd;
    p->ans_fd = ans_fd;
    return 0;
}

/* Sends command c and reads its n-byte answer into ans: 0, or -1 when the
 * peer is gone. */
static int ask(struct e2e_peer *p, const struct cmd *c, void *ans, size_t n)
{
    return tc_write_all(p->cmd_fd, c, sizeof(*c)) ||
                   tc_read_all(p->ans_fd, ans, n)
               ? -1
               : 0;
}

/* Commands answered by an address or a hash (0: the peer is gone). */
static uint64_t ask_u64(struct e2e_peer *p, struct cmd c)
{
    uint64_t v = 0;
    return ask(p, &c, &v, sizeof(v)) ? 0 : v;
}

/* Commands answered by a TENT return code (-1: the peer is gone). */
static int ask_rc(struct e2e_peer *p, struct cmd c)
{
    int32_t rc = -1;
    return ask(p, &c, &rc, sizeof(rc)) ? -1 : rc;
}

uint64_t e2e_peer_hash(struct e2e_peer *p, bool plain, uint64_t off,
                       uint64_t len)
{
    return ask_u64(
        p, (struct cmd){.op = 'H', .plain = plain, .off = off, .len = len});
}

uint64_t e2e_peer_hash_at(struct e2e_peer *p, uint64_t addr, uint64_t len)
{
    return ask_u64(p, (struct cmd){.op = 'Y', .off = addr, .len = len});
}

uint64_t e2e_peer_register(struct e2e_peer *p, uint64_t len)
{
    return ask_u64(p, (struct cmd){.op = 'R', .len = len});
}

uint64_t e2e_peer_alloc(struct e2e_peer *p, uint64_t len)
{
    return ask_u64(p, (struct cmd){.op = 'A', .len = len});
}

int e2e_peer_release(struct e2e_peer *p, uint64_t addr, uint64_t len)
{
    return ask_rc(p, (struct cmd){.op = 'U', .off = addr, .len = len});
}

int e2e_peer_free_rw(struct e2e_peer *p)
{
    return ask_rc(p, (struct cmd){.op = 'F'});
}

int e2e_peer_unregister_rw(struct e2e_peer *p)
{
    return ask_rc(p, (struct cmd){.op = 'X'});
}

int e2e_peer_release_malloc(struct e2e_peer *p, uint64_t addr, uint64_t len)
{
    return ask_rc(p, (struct cmd){.op = 'K', .off = addr, .len = len});
}

int e2e_peer_stack_check(struct e2e_peer *p, int ms)
{
    return ask_rc(p, (struct cmd){.op = 'T', .arg = ms});
}

int e2e_peer_unregister_plain(struct e2e_peer *p)
{
    return ask_rc(p, (struct cmd){.op = 'X', .plain = 1});
}

int e2e_peer_open(struct e2e_peer *p, const char *name)
{
    char n[256] = {0};
    snprintf(n, sizeof(n), "%s", name);
    struct cmd c = {.op = 'O'};
    int32_t rc = -1;
    if (tc_write_all(p->cmd_fd, &c, sizeof(c)) ||
        tc_write_all(p->cmd_fd, n, sizeof(n)) ||
        tc_read_all(p->ans_fd, &rc, sizeof(rc)))
        return -1;
    return rc;
}

int e2e_peer_transfer_start(struct e2e_peer *p, int opcode, bool plain,
                            uint64_t remote, uint64_t len)
{
    struct cmd c = {
        .op = 'W', .plain = plain, .arg = opcode, .off = remote, .len = len};
    return tc_write_all(p->cmd_fd, &c, sizeof(c)) ? -1 : 0;
}

int e2e_peer_transfer_end(struct e2e_peer *p, int *code)
{
    int32_t ans[2] = {-1, 0};
    if (tc_read_all(p->ans_fd, ans, sizeof(ans)))
        return -1;
    *code = ans[1];
    return ans[0];
}

int e2e_peer_reregister_rw(struct e2e_peer *p, int perm)
{
    return ask_rc(p, (struct cmd){.op = 'P', .arg = perm});
}

void e2e_peer_stop_rpc(struct e2e_peer *p)
{
    char ok;
    (void)ask(p, &(struct cmd){.op = 'S'}, &ok, 1);
}

int e2e_peer_drop_memfabric(struct e2e_peer *p)
{
    return ask_rc(p, (struct cmd){.op = 'M'});
}

int e2e_peer_check_notifs(struct e2e_peer *p, int expect, int timeout_ms,
                          bool *ok)
{
    struct cmd c = {.op = 'N', .arg = timeout_ms, .len = (uint64_t)expect};
    int32_t r[2] = {-1, 0};
    if (ask(p, &c, r, sizeof(r)))
        return -1;
    *ok = r[1] != 0;
    return r[0];
}

int e2e_peer_rpc_stats(struct e2e_peer *p, struct tent_rpc_stats *out)
{
    return ask(p, &(struct cmd){.op = 'V'}, out, sizeof(*out));
}

int e2e_peer_hold_fds(struct e2e_peer *p, int free_left)
{
    return ask_rc(p, (struct cmd){.op = 'D', .arg = free_left});
}

void e2e_peer_kill(struct e2e_peer *p)
{
    if (p->pid > 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        p->pid = 0;
    }
    close(p->cmd_fd);
    close(p->ans_fd);
}

void e2e_peer_quit(struct e2e_peer *p)
{
    if (p->pid <= 0)
        return;
    struct cmd c = {.op = 'Q'};
    (void)tc_write_all(p->cmd_fd, &c, sizeof(c));
    long end = e2e_now_ms() + 10000;
    int st;
    while (waitpid(p->pid, &st, WNOHANG) == 0) {
        if (e2e_now_ms() > end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, NULL, 0);
            break;
        }
        usleep(1000);
    }
    p->pid = 0;
    close(p->cmd_fd);
    close(p->ans_fd);
}

int e2e_run_one(tent_engine_t e, const tent_request_t *r, int timeout_ms,
                tent_status_t *st)
{
    memset(st, 0, sizeof(*st));
    st->status = STATUS_FAILED;
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    if (b == TENT_INVALID_BATCH_ID)
        return 2;
    tent_request_t req = *r;
    int rc = tent_submit(e, b, &req, 1);
    if (rc == 0)
        rc = e2e_wait(e, b, timeout_ms, st);
    return tent_free_batch(e, b) ? 2 : rc;
}

int e2e_wait(tent_engine_t e, tent_batch_id_t b, int timeout_ms,
             tent_status_t *st)
{
    long end = e2e_now_ms() + timeout_ms;
    for (;;) {
        int rc = tent_overall_status(e, b, st);
        if (rc)
            return rc;
        if (st->status != STATUS_PENDING && st->status != STATUS_WAITING)
            return 0;
        if (e2e_now_ms() > end)
            return 1;
        usleep(200);
    }
}

int e2e_desc_key(const char *host, uint16_t port, uint64_t addr,
                 uint8_t key[TENT_WIRE_KEY_LEN])
{
    memset(key, 0, TENT_WIRE_KEY_LEN);
    int fd = -1, rc = -1;
    if (tent_rpc_connect(host, port, 3000, &fd))
        return -1;
    uint8_t h[TENT_WIRE_HDR_LEN];
    struct tent_wire_hdr hdr;
    char *body = NULL;
    struct tent_wire_desc d;
    memset(&d, 0, sizeof(d));
    tent_wire_encode_hdr(h, TENT_WIRE_DESC_REQ, 1, 0);
    if (tent_rpc_send_all(fd, h, sizeof(h)) ||
        tent_rpc_recv_all(fd, h, sizeof(h)) ||
        tent_wire_decode_hdr(h, sizeof(h), &hdr) ||
        hdr.type != TENT_WIRE_DESC_RESP || !(body = malloc(hdr.len)) ||
        tent_rpc_recv_all(fd, body, hdr.len) ||
        tent_wire_decode_desc(body, hdr.len, &d))
        goto out;
    rc = 1;
    for (size_t i = 0; i < d.nbufs; i++)
        if (addr >= d.bufs[i].base && addr - d.bufs[i].base < d.bufs[i].length) {
            memcpy(key, d.bufs[i].key, TENT_WIRE_KEY_LEN);
            rc = 0;
            break;
        }
    tent_wire_desc_free(&d);
out:
    free(body);
    close(fd);
    return rc;
}

long e2e_status_field(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtol(line + kl + 1, NULL, 10);
            break;
        }
    if (f)
        fclose(f);
    return v;
}

long e2e_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    long n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - 1; /* the directory's own */
}

struct e2e_usage e2e_usage_now(void)
{
    return (struct e2e_usage){e2e_status_field("Threads"), e2e_count_fds(),
                              e2e_status_field("VmRSS")};
}
