/* The RPC server against a hostile client in another process (issue 19,
 * items 5 and 6).  The target engine runs in a child (e2e_peer) under the
 * descriptor limit being tested; an attacker child holds about a thousand
 * connections in whatever states a hostile client can choose (never used,
 * one request and then idle, a request every 500 ms, a header or a write
 * body trickled a byte at a time, half a header and then silence), and
 * reconnects whatever the server closes; this process is the real peer.
 *
 * What must hold: the target does not spin at its descriptor limit; a new
 * peer's transfer (open the segment, read 1 MiB, every byte checked)
 * completes within 2 s while the attack goes on; and an established peer's
 * pooled connections, which moved data before the attack, are still open
 * after it.  Each test prints its figures (target CPU, each new peer's
 * time, the target's threads and server counters). */
// clang-format off
#include <setjmp.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
// clang-format on

#include "../common/test_child.h"
#include "e2e_peer.h"
#include "rpc/rpc.h"
#include "transport/tcp/tcp_wire.h"
#include "rpc/wire.h"
#include "tent/transfer_engine.h"

#define MIB           (1u << 20)
#define PEER_LIMIT_MS 2000 /* a new peer's transfer under attack */
#define CPU_LIMIT_PCT 10.0 /* the target at rest with the attack parked */

/* ---- the attacker ------------------------------------------------------- */

enum role {
    R_IDLE,         /* connects, never sends */
    R_DESC_IDLE,    /* one descriptor request, then idle */
    R_REFRESH,      /* a descriptor request every 500 ms */
    R_TRICKLE_HDR,  /* one request, then headers a byte per tick */
    R_TRICKLE_BODY, /* one request, then a 64 KiB write a byte per tick */
    R_PARKED,       /* one request, then half a header and silence */
    NROLES
};

#define TICK_MS      250
#define REFRESH_MS   500
#define RECONNECT_MS 200
/* New connections per 10 ms at most (3,200/s): paced so that the
 * server's listen queue, not the kernel's handshake retries, sets how fast
 * they arrive. */
#define CONNECT_BURST 32

struct atk_cfg {
    char host[64];
    uint16_t port;
    int n;
    int mix[NROLES];               /* weights of the roles over the n slots */
    bool reconnect;                /* reopen what the server closes */
    uint64_t body_addr, body_span; /* where trickled writes point */
    uint64_t body_pattern;         /* e2e_pattern index of body_addr's byte */
};

struct atk_status {
    int32_t n, connected, ready, ever_ready, closed;
};

enum slot_state { S_DOWN, S_DEAD, S_CONNECTING, S_RESP, S_TRICKLE, S_HOLD };

struct slot {
    int fd;
    enum role role;
    enum slot_state st;
    bool ready, ever_ready;
    uint8_t frame[TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN];
    size_t frame_len, frame_at;
    uint8_t rh[TENT_WIRE_HDR_LEN];
    size_t rgot;
    uint32_t rleft;
    bool in_body; /* the trickle is a write body (after frame[]) */
    uint64_t body_at;
    long next_ms;
};

static int send_now(int fd, const void *b, size_t n)
{
    return send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n ? 0 : -1;
}

static void slot_down(struct slot *s, const struct atk_cfg *c, long now,
                      int *closed)
{
    if (s->fd >= 0) {
        close(s->fd);
        (*closed)++;
    }
    s->fd = -1;
    s->ready = false;
    s->st = c->reconnect ? S_DOWN : S_DEAD;
    s->next_ms = now + RECONNECT_MS;
}

static int desc_request(struct slot *s)
{
    uint8_t h[TENT_WIRE_HDR_LEN];
    tent_wire_encode_hdr(h, TENT_WIRE_DESC_REQ, 1, 0);
    s->st = S_RESP;
    s->rgot = 0;
    s->rleft = 0;
    return send_now(s->fd, h, sizeof(h));
}

/* The first descriptor answer is in: the slot takes up its role. */
static int slot_role(struct slot *s, const struct atk_cfg *c, int idx, long now)
{
    s->ready = s->ever_ready = true;
    s->next_ms = now + TICK_MS;
    switch (s->role) {
    case R_REFRESH:
        s->next_ms = now + REFRESH_MS;
        /* fallthrough */
    case R_IDLE:
    case R_DESC_IDLE:
        s->st = S_HOLD;
        return 0;
    case R_TRICKLE_HDR:
        /* the next frame starts at once: never at a frame boundary */
        tent_wire_encode_hdr(s->frame, TENT_WIRE_DESC_REQ, 2, 0);
        s->frame_len = TENT_WIRE_HDR_LEN;
        s->frame_at = 1;
        s->in_body = false;
        s->st = S_TRICKLE;
        return send_now(s->fd, s->frame, 1);
    case R_TRICKLE_BODY: {
        uint64_t off = (uint64_t)(idx % 16) * 65536 % c->body_span;
        tent_wire_encode_hdr(s->frame, TCP_WIRE_WRITE, 3,
                             TCP_WIRE_RW_LEN + 65536);
        tcp_wire_encode_rw(s->frame + TENT_WIRE_HDR_LEN, c->body_addr + off,
                            65536, NULL);
        s->in_body = true;
        s->body_at = c->body_pattern + off; /* the next byte's pattern */
        s->st = S_TRICKLE;
        return send_now(s->fd, s->frame, TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN);
    }
    case R_PARKED:
        tent_wire_encode_hdr(s->frame, TENT_WIRE_DESC_REQ, 4, 0);
        s->st = S_HOLD;
        return send_now(s->fd, s->frame, 8);
    default:
        return -1;
    }
}

/* The connection is up: a slot that has a role beyond idling starts with
 * the descriptor request every peer begins with. */
static int slot_start(struct slot *s, const struct atk_cfg *c, int idx,
                      long now)
{
    if (s->role == R_IDLE)
        return slot_role(s, c, idx, now);
    return desc_request(s);
}

static int slot_connect(struct slot *s, const struct atk_cfg *c, int idx,
                        long now)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(c->port)};
    inet_pton(AF_INET, c->host, &a.sin_addr);
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->fd < 0)
        return -1;
    if (connect(s->fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        return slot_start(s, c, idx, now);
    if (errno != EINPROGRESS)
        return -1;
    s->st = S_CONNECTING;
    return 0;
}

/* Reads what came in; -1 when the server closed the connection. */
static int slot_read(struct slot *s, const struct atk_cfg *c, int idx, long now)
{
    uint8_t buf[4096];
    for (;;) {
        ssize_t r = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r == 0)
            return -1;
        if (r < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        if (s->st != S_RESP)
            continue; /* nothing else is due; ignore it */
        size_t at = 0;
        while (at < (size_t)r && s->st == S_RESP) {
            if (s->rgot < sizeof(s->rh)) {
                size_t k = sizeof(s->rh) - s->rgot;
                if (k > (size_t)r - at)
                    k = (size_t)r - at;
                memcpy(s->rh + s->rgot, buf + at, k);
                s->rgot += k;
                at += k;
                if (s->rgot < sizeof(s->rh))
                    break;
                struct tent_wire_hdr h;
                if (tent_wire_decode_hdr(s->rh, sizeof(s->rh), &h))
                    return -1;
                s->rleft = h.len;
            }
            size_t k = s->rleft < (size_t)r - at ? s->rleft : (size_t)r - at;
            s->rleft -= (uint32_t)k;
            at += k;
            if (s->rleft == 0 && slot_role(s, c, idx, now))
                return -1;
        }
    }
}

/* Time has come for the slot's next byte or request. */
static int slot_tick(struct slot *s, long now)
{
    if (s->st == S_HOLD && s->role == R_REFRESH && s->ready)
        return desc_request(s);
    if (s->st != S_TRICKLE)
        return 0;
    s->next_ms = now + TICK_MS;
    if (s->in_body) {
        uint8_t b = e2e_pattern(s->body_at++);
        return send_now(s->fd, &b, 1);
    }
    if (send_now(s->fd, s->frame + s->frame_at++, 1))
        return -1;
    if (s->frame_at == s->frame_len) {
        s->st = S_RESP; /* the trickled request is whole: its answer */
        s->rgot = 0;
        s->rleft = 0;
    }
    return 0;
}

static void attacker(int cmd_fd, int ans_fd, void *arg)
{
    const struct atk_cfg *c = arg;
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    struct slot *s = calloc((size_t)c->n, sizeof(*s));
    struct pollfd *p = calloc((size_t)c->n + 1, sizeof(*p));
    int wsum = 0;
    for (int r = 0; r < NROLES; r++)
        wsum += c->mix[r];
    long now = e2e_now_ms();
    for (int i = 0; i < c->n; i++) {
        /* roles interleaved: the slots of one role are not all adjacent */
        int pick = (int)(((long)i * 7919) % wsum), r = 0;
        while (pick >= c->mix[r])
            pick -= c->mix[r++];
        s[i] = (struct slot){
            .fd = -1, .role = (enum role)r, .st = S_DOWN, .next_ms = now};
    }
    int closed = 0;
    for (;;) {
        now = e2e_now_ms();
        long wait = 50;
        int budget = CONNECT_BURST;
        for (int i = 0; i < c->n; i++) {
            struct slot *x = &s[i];
            if (x->st == S_DOWN && now >= x->next_ms && budget-- <= 0)
                x->next_ms = now + 10;
            else if (x->st == S_DOWN && now >= x->next_ms &&
                     slot_connect(x, c, i, now))
                slot_down(x, c, now, &closed);
            else if (x->fd >= 0 && now >= x->next_ms && slot_tick(x, now))
                slot_down(x, c, now, &closed);
            bool timer = x->st == S_DOWN || x->st == S_TRICKLE ||
                         (x->st == S_HOLD && x->role == R_REFRESH);
            if (timer && x->next_ms - now < wait)
                wait = x->next_ms - now > 0 ? x->next_ms - now : 0;
            p[i].fd = x->fd;
            p[i].events = x->st == S_CONNECTING ? POLLOUT : POLLIN | POLLRDHUP;
            p[i].revents = 0;
        }
        p[c->n] = (struct pollfd){.fd = cmd_fd, .events = POLLIN};
        if (poll(p, (nfds_t)c->n + 1, (int)wait) < 0 && errno != EINTR)
            _exit(1);
        now = e2e_now_ms();
        for (int i = 0; i < c->n; i++) {
            struct slot *x = &s[i];
            if (x->fd < 0 || !p[i].revents)
                continue;
            if (x->st == S_CONNECTING) {
                int err = 0;
                socklen_t el = sizeof(err);
                getsockopt(x->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err || slot_start(x, c, i, now))
                    slot_down(x, c, now, &closed);
                continue;
            }
            if (slot_read(x, c, i, now) ||
                (p[i].revents & (POLLHUP | POLLERR | POLLRDHUP)))
                slot_down(x, c, now, &closed);
        }
        if (p[c->n].revents) {
            char op;
            if (tc_read_all(cmd_fd, &op, 1) || op != 'S')
                _exit(0);
            struct atk_status st = {.n = c->n, .closed = closed};
            for (int i = 0; i < c->n; i++) {
                st.connected += s[i].fd >= 0 && s[i].st != S_CONNECTING;
                st.ready += s[i].ready;
                st.ever_ready += s[i].ever_ready;
            }
            tc_write_all(ans_fd, &st, sizeof(st));
        }
    }
}

struct atk {
    pid_t pid;
    int cmd, ans;
};

static struct atk_status atk_status(struct atk *a)
{
    struct atk_status st = {0};
    char op = 'S';
    assert_int_equal(tc_write_all(a->cmd, &op, 1), 0);
    assert_int_equal(tc_read_all(a->ans, &st, sizeof(st)), 0);
    return st;
}

/* A fresh process (an exec of this binary): this one may run an engine's
 * threads when the attack starts, and a fork alone could leave the
 * attacker a lock one of them held. */
TC_CHILD_ROLE("rpc_attacker", attacker)

static void atk_start(struct atk *a, struct atk_cfg *c)
{
    a->pid = tc_spawn_child("rpc_attacker", c, sizeof(*c), &a->cmd, &a->ans);
    assert_true(a->pid > 0);
}

static void atk_stop(struct atk *a)
{
    char op = 'Q';
    (void)tc_write_all(a->cmd, &op, 1);
    waitpid(a->pid, NULL, 0);
    close(a->cmd);
    close(a->ans);
}

/* Waits until every slot has taken up its role once (or 20 s). */
static struct atk_status atk_wait_ready(struct atk *a)
{
    long end = e2e_now_ms() + 20000;
    for (;;) {
        struct atk_status st = atk_status(a);
        if (st.ever_ready >= st.n || e2e_now_ms() >= end)
            return st;
        poll(NULL, 0, 50);
    }
}

/* ---- the target and the real peers -------------------------------------- */

struct target {
    struct e2e_peer p;
    char host[64];
    uint16_t port;
};

static void target_start(struct target *t, unsigned long soft,
                         unsigned long hard, size_t rw_len)
{
    e2e_set_child_nofile(soft, hard);
    assert_int_equal(e2e_peer_start(&t->p, rw_len, false, true), 0);
    e2e_set_child_nofile(0, 0);
    assert_int_equal(
        tent_rpc_parse_addr(t->p.name, t->host, sizeof(t->host), &t->port), 0);
}

static struct tent_rpc_stats target_stats(struct target *t)
{
    struct tent_rpc_stats st;
    assert_int_equal(e2e_peer_rpc_stats(&t->p, &st), 0);
    return st;
}

/* utime + stime of a process, in ms. */
static long cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *q = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* fields 3.. after the name; utime and stime are fields 14 and 15 */
    if (!q ||
        sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
               &ut, &st) != 2)
        return -1;
    return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

/* The share of one CPU the process used over window_ms, in percent. */
static double cpu_percent(pid_t pid, int window_ms)
{
    long c0 = cpu_ms(pid), t0 = e2e_now_ms();
    poll(NULL, 0, window_ms);
    long c1 = cpu_ms(pid), t1 = e2e_now_ms();
    return 100.0 * (double)(c1 - c0) / (double)(t1 - t0);
}

/* A line's number from /proc/<pid>/<file> ("Threads:", "Max open files"). */
static long proc_field(pid_t pid, const char *file, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, strlen(key)) == 0) {
            v = strtol(line + strlen(key), NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* A new peer: a fresh engine opens the target and reads 1 MiB of its
 * pattern.  Returns the ms from tent_open_segment to the checked data, or
 * -1 when it failed (the reason in why). */
static long new_peer_read_ms(struct target *t, char *why, size_t cap)
{
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    void *buf = NULL;
    assert_int_equal(tent_allocate_memory(e, &buf, MIB, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, buf, MIB), 0);
    memset(buf, 0, MIB);
    long t0 = e2e_now_ms(), ms = -1;
    tent_segment_id_t seg;
    int rc = tent_open_segment(e, &seg, t->p.name);
    if (rc) {
        snprintf(why, cap, "open: %s", tent_last_error());
        goto out;
    }
    tent_request_t r = {.opcode = OPCODE_READ,
                        .source = buf,
                        .target_id = seg,
                        .target_offset = t->p.rw_base,
                        .length = MIB};
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    tent_status_t st = {0};
    rc = tent_submit(e, b, &r, 1);
    if (!rc)
        rc = e2e_wait(e, b, 5000, &st);
    if (rc || st.status != STATUS_COMPLETED) {
        snprintf(why, cap, "read: rc %d status %d: %s", rc, (int)st.status,
                 tent_last_error());
    } else {
        ms = e2e_now_ms() - t0;
        for (size_t i = 0; i < MIB; i++)
            if (((uint8_t *)buf)[i] != e2e_pattern(i)) {
                snprintf(why, cap, "byte %zu differs", i);
                ms = -1;
                break;
            }
    }
    tent_free_batch(e, b);
out:
    tent_unregister_memory(e, buf, MIB);
    tent_free_memory(e, buf);
    tent_destroy_engine(e);
    return ms;
}

/* rounds new peers one after another; each must get its data within
 * PEER_LIMIT_MS.  Prints every time. */
static void new_peers_within_limit(struct target *t, int rounds,
                                   const char *what)
{
    long ms[8];
    char why[8][256];
    int ok = 0;
    assert_true(rounds <= 8);
    for (int i = 0; i < rounds; i++) {
        why[i][0] = 0;
        ms[i] = new_peer_read_ms(t, why[i], sizeof(why[i]));
        ok += ms[i] >= 0 && ms[i] <= PEER_LIMIT_MS;
    }
    printf("  %s: new peers (open + 1 MiB read):", what);
    for (int i = 0; i < rounds; i++)
        printf(ms[i] >= 0 ? " %ld ms" : " failed", ms[i]);
    printf("; %d of %d within %d ms\n", ok, rounds, PEER_LIMIT_MS);
    for (int i = 0; i < rounds; i++)
        if (why[i][0])
            printf("    peer %d: %s\n", i, why[i]);
    fflush(stdout);
    assert_int_equal(ok, rounds);
}

/* Waits until the target's server has taken in (admitted or refused) n
 * connections, or 20 s (connections the listen queue could not hold come
 * in as the kernel retries their handshakes). */
static struct tent_rpc_stats target_settle(struct target *t, uint64_t n)
{
    long end = e2e_now_ms() + 20000;
    for (;;) {
        struct tent_rpc_stats st = target_stats(t);
        if (st.accepted + st.refused >= n || e2e_now_ms() >= end)
            return st;
        poll(NULL, 0, 50);
    }
}

static bool can_hold(rlim_t n)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    return rl.rlim_max >= n || geteuid() == 0;
}

static void print_stats(const char *what, const struct tent_rpc_stats *st,
                        pid_t pid)
{
    printf("  %s: server accepted %llu evicted %llu (working %llu) refused "
           "%llu (no descriptor %llu) open %d of %d, %d workers; target "
           "threads %ld\n",
           what, (unsigned long long)st->accepted,
           (unsigned long long)st->evicted,
           (unsigned long long)st->evicted_working,
           (unsigned long long)st->refused,
           (unsigned long long)st->refused_no_fd, st->open, st->max_conns,
           st->workers, proc_field(pid, "status", "Threads:"));
    fflush(stdout);
}

/* An idle flood past Debian's default limit of 1,024 descriptors (soft and
 * hard: it cannot be raised): the server neither spins nor locks peers out;
 * it keeps room for the engine's own descriptors. */
static void test_idle_flood_at_fd_limit(void **state)
{
    (void)state;
    if (!can_hold(1400))
        skip();
    struct target t;
    target_start(&t, 1024, 1024, MIB);
    struct atk_cfg c = {.port = t.port, .n = 1100};
    snprintf(c.host, sizeof(c.host), "%s", t.host);
    c.mix[R_IDLE] = 1;
    struct atk a;
    atk_start(&a, &c);
    struct atk_status as = atk_wait_ready(&a);
    struct tent_rpc_stats st = target_settle(&t, (uint64_t)c.n);
    double cpu = cpu_percent(t.p.pid, 2000);
    printf("  limit 1024/1024, %d idle connections (%d connected, %d closed "
           "by the server): target CPU %.1f%%\n",
           c.n, as.connected, as.closed, cpu);
    print_stats("after the flood", &st, t.p.pid);
    new_peers_within_limit(&t, 3, "1100 idle connections at the fd limit");
    st = target_stats(&t);
    print_stats("after the new peers", &st, t.p.pid);
    assert_true(cpu < CPU_LIMIT_PCT);
    /* room kept for the engine's own descriptors: a quarter */
    assert_int_equal(st.max_conns, 768);
    assert_true(st.open <= st.max_conns);
    atk_stop(&a);
    e2e_peer_quit(&t.p);
}

/* Soft limit 1,024 under a hard limit of 4,096: the engine raises its soft
 * limit to the hard one, so the configured 1,024 connections fit. */
static void test_soft_limit_raised(void **state)
{
    (void)state;
    if (!can_hold(4096))
        skip();
    struct target t;
    target_start(&t, 1024, 4096, MIB);
    long soft = proc_field(t.p.pid, "limits", "Max open files");
    printf("  soft limit 1024, hard 4096: the target's soft limit is now "
           "%ld\n",
           soft);
    assert_int_equal(soft, 4096);
    struct atk_cfg c = {.port = t.port, .n = 1100};
    snprintf(c.host, sizeof(c.host), "%s", t.host);
    c.mix[R_IDLE] = 1;
    struct atk a;
    atk_start(&a, &c);
    atk_wait_ready(&a);
    struct tent_rpc_stats st = target_settle(&t, (uint64_t)c.n);
    double cpu = cpu_percent(t.p.pid, 2000);
    printf("  %d idle connections: target CPU %.1f%%\n", c.n, cpu);
    print_stats("after the flood", &st, t.p.pid);
    new_peers_within_limit(&t, 3, "1100 idle connections, raised limit");
    st = target_stats(&t);
    assert_true(cpu < CPU_LIMIT_PCT);
    /* the configured cap, not the descriptor limit, bounded the flood */
    assert_int_equal(st.max_conns, TENT_RPC_DEFAULT_MAX_CONNS);
    assert_true(st.open <= TENT_RPC_DEFAULT_MAX_CONNS);
    assert_true(st.evicted >= (uint64_t)(c.n - TENT_RPC_DEFAULT_MAX_CONNS));
    atk_stop(&a);
    e2e_peer_quit(&t.p);
}

/* The application itself holds most of the descriptors, so accept() fails
 * with EMFILE below the connection cap: the server refuses (and counts)
 * without spinning, and new peers still get in. */
static void test_emfile_without_spinning(void **state)
{
    (void)state;
    if (!can_hold(1400))
        skip();
    struct target t;
    target_start(&t, 1024, 1024, MIB);
    int held = e2e_peer_hold_fds(&t.p, 200);
    assert_true(held > 500);
    struct atk_cfg c = {.port = t.port, .n = 1100};
    snprintf(c.host, sizeof(c.host), "%s", t.host);
    c.mix[R_IDLE] = 1;
    struct atk a;
    atk_start(&a, &c);
    struct atk_status as = atk_wait_ready(&a);
    struct tent_rpc_stats st = target_settle(&t, (uint64_t)c.n);
    double cpu = cpu_percent(t.p.pid, 2000);
    printf("  limit 1024/1024, %d descriptors held by the application, %d "
           "idle connections (%d closed by the server): target CPU %.1f%%\n",
           held, c.n, as.closed, cpu);
    print_stats("after the flood", &st, t.p.pid);
    new_peers_within_limit(&t, 3, "descriptors exhausted");
    st = target_stats(&t);
    print_stats("after the new peers", &st, t.p.pid);
    assert_true(cpu < CPU_LIMIT_PCT);
    /* counted, as a shortage of descriptors; and the cap came down below
     * what was open so that newcomers replace idle connections */
    assert_true(st.refused >= 1);
    assert_int_equal(st.refused_no_fd, st.refused);
    assert_true(st.max_conns < 200);
    atk_stop(&a);
    assert_true(e2e_peer_hold_fds(&t.p, -1) == 0);
    e2e_peer_quit(&t.p);
}

/* Sockets of this process connected to the target (an engine's pool). */
static int sockets_to(uint16_t port, int *fds, int cap)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int n = 0;
    assert_non_null(d);
    while ((de = readdir(d)) && n < cap) {
        int fd = atoi(de->d_name);
        struct stat sb;
        struct sockaddr_in a;
        socklen_t al = sizeof(a);
        if (de->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &sb) ||
            !S_ISSOCK(sb.st_mode) ||
            getpeername(fd, (struct sockaddr *)&a, &al) ||
            a.sin_family != AF_INET || ntohs(a.sin_port) != port)
            continue;
        fds[n++] = fd;
    }
    closedir(d);
    return n;
}

/* How many of fds the server has closed (readable or hung up while their
 * engine sends nothing). */
static int closed_count(const int *fds, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN | POLLRDHUP};
        k += poll(&p, 1, 0) > 0;
    }
    return k;
}

/* An established peer: reads 4 MiB (four slices, spread over its pool) and
 * checks every byte. */
static void established_read(tent_engine_t e, tent_segment_id_t seg,
                             struct target *t, uint8_t *buf)
{
    memset(buf, 0, 4 * MIB);
    tent_request_t r[4];
    for (int i = 0; i < 4; i++)
        r[i] = (tent_request_t){.opcode = OPCODE_READ,
                                .source = buf + (size_t)i * MIB,
                                .target_id = seg,
                                .target_offset = t->p.rw_base + (size_t)i * MIB,
                                .length = MIB};
    tent_batch_id_t b = tent_allocate_batch(e, 4);
    assert_int_equal(tent_submit(e, b, r, 4), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(e, b, 5000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    for (size_t i = 0; i < 4 * MIB; i++)
        if (buf[i] != e2e_pattern(i))
            fail_msg("established peer: byte %zu differs", i);
    assert_int_equal(tent_free_batch(e, b), 0);
}

static void attack_phase(struct target *t, const int *mix, const char *what,
                         const int *pool, int npool)
{
    struct atk_cfg c = {
        .port = t->port, .n = TENT_RPC_DEFAULT_MAX_CONNS, .reconnect = true};
    snprintf(c.host, sizeof(c.host), "%s", t->host);
    memcpy(c.mix, mix, sizeof(c.mix));
    /* trickled writes go to the upper 4 MiB, away from what peers read */
    c.body_addr = t->p.rw_base + 4 * MIB;
    c.body_span = 4 * MIB;
    c.body_pattern = 4 * MIB;
    struct atk a;
    atk_start(&a, &c);
    struct atk_status as = atk_wait_ready(&a);
    printf("  %s: %d connections, %d took up their role, %d connected\n", what,
           as.n, as.ever_ready, as.connected);
    struct tent_rpc_stats st = target_stats(t);
    print_stats("under attack", &st, t->p.pid);
    /* threads serve frames in progress (here the trickled write bodies,
     * at most a third of the connections), not connections */
    assert_true(proc_field(t->p.pid, "status", "Threads:") < c.n / 2 + 100);
    new_peers_within_limit(t, 6, what);
    as = atk_status(&a);
    st = target_stats(t);
    print_stats("after the new peers", &st, t->p.pid);
    int gone = closed_count(pool, npool);
    printf("  established peer: %d of its %d pooled connections closed by "
           "the server; attacker connections closed %d\n",
           gone, npool, as.closed);
    fflush(stdout);
    assert_int_equal(gone, 0);
    assert_int_equal(st.evicted_working, 0);
    atk_stop(&a);
}

/* Connections that did one descriptor request and then trickle or park a
 * frame, and every other mix of idle and slow ones, holding all 1,024 slots
 * (the configured cap; the descriptor limit is 4,096): new peers get in
 * within 2 s, and the established peer keeps its pooled connections. */
static void test_parked_frames_do_not_lock_peers_out(void **state)
{
    (void)state;
    if (!can_hold(4096))
        skip();
    struct target t;
    target_start(&t, 4096, 4096, 8 * MIB);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    uint8_t *buf = NULL;
    assert_int_equal(tent_allocate_memory(e, (void **)&buf, 4 * MIB, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, buf, 4 * MIB), 0);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, t.p.name), 0);
    established_read(e, seg, &t, buf);
    int pool[16];
    int npool = sockets_to(t.port, pool, 16);
    printf("  established peer holds %d pooled connection(s)\n", npool);
    assert_true(npool >= 1);

    /* the case: one descriptor request, then a frame trickled or
     * parked */
    static const int trickle[NROLES] = {
        [R_TRICKLE_HDR] = 1, [R_TRICKLE_BODY] = 1, [R_PARKED] = 1};
    attack_phase(&t, trickle, "trickled and parked frames", pool, npool);
    static const int all[NROLES] = {1, 1, 1, 1, 1, 1};
    attack_phase(&t, all, "every kind mixed", pool, npool);

    /* the established peer moves data on its pool as before (it may open
     * more connections; the ones it had are still open) */
    established_read(e, seg, &t, buf);
    assert_int_equal(closed_count(pool, npool), 0);
    tent_unregister_memory(e, buf, 4 * MIB);
    tent_free_memory(e, buf);
    tent_destroy_engine(e);
    e2e_peer_quit(&t.p);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    e2e_config(false, true);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_flood_at_fd_limit),
        cmocka_unit_test(test_soft_limit_raised),
        cmocka_unit_test(test_emfile_without_spinning),
        cmocka_unit_test(test_parked_frames_do_not_lock_peers_out),
    };
    return cmocka_run_group_tests_name("e2e_rpc_hostile", tests, group_setup,
                                       NULL);
}
