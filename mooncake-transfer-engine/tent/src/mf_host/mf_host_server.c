/* mf_host's rpc server: an accept thread and one thread per incoming
 * connection, serving HELLO, CHECK, RANGES, WRITE, READ and PING.  A
 * connection says HELLO first; any other request before it closes the
 * connection.  Every request is checked against the handle's registered
 * ranges (ranges.c), and its copy into or out of them runs inside the
 * connection's window, which a deregistration waits for (mf_host_ctl.h).
 *
 * Limits, so that clients that open connections and never use them cannot
 * lock peers out: at most h->max_conns connections, a newcomer beyond them
 * replacing an idle one (pick_victim_locked); a connection idle longer than
 * h->idle_timeout_ms is closed by its own thread (wait_request); running
 * out of descriptors evicts and backs off (out_of_fds, accept_main). */
#include "common/auth.h"
#include "common/clock.h"
#include "mf_host.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SRV_TICK_MS        100
#define SRV_BACKOFF_MIN_MS 10
#define SRV_BACKOFF_MAX_MS 1000
#define SRV_EVICT_WAIT_MS  2    /* for an evicted connection to end */
#define SRV_LOG_EVERY_MS   5000 /* rate of refusal and shortage warnings */
#define SRV_STACK_BYTES    (1u << 20)

/* A served connection's buffered input and output.  Requests of a
 * pipelined run arrive together: they are read with one receive call and
 * their small answers leave with one send, instead of one system call per
 * header and per answer.  Pending answers are flushed before every
 * blocking receive, so a peer waiting for them is never kept waiting. */
struct srv_io {
    struct mfh_srv_conn *c;
    int fd;
    size_t in_pos, in_len, out_len;
    size_t in_cap, out_cap;
    uint8_t *in, *out;
};

/* Buffer sizes before HELLO (enough for it and its answer), so that
 * connections that never say it cost little, and after. */
#define SRV_IN_FIRST  256
#define SRV_OUT_FIRST 256
#define SRV_IN_CAP    65536
#define SRV_OUT_CAP   8192

static struct srv_io *io_new(struct mfh_srv_conn *c)
{
    struct srv_io *io = calloc(1, sizeof(*io));
    if (!io)
        return NULL;
    io->c = c;
    io->fd = c->fd;
    io->in_cap = SRV_IN_FIRST;
    io->out_cap = SRV_OUT_FIRST;
    io->in = malloc(io->in_cap);
    io->out = malloc(io->out_cap);
    if (!io->in || !io->out) {
        free(io->in);
        free(io->out);
        free(io);
        return NULL;
    }
    return io;
}

/* After HELLO: the full buffers; what they hold is kept.  0 or -1. */
static int io_grow(struct srv_io *io)
{
    if (io->in_cap == SRV_IN_CAP)
        return 0;
    uint8_t *in = realloc(io->in, SRV_IN_CAP);
    if (in)
        io->in = in;
    uint8_t *out = in ? realloc(io->out, SRV_OUT_CAP) : NULL;
    if (out)
        io->out = out;
    if (!in || !out)
        return -1;
    io->in_cap = SRV_IN_CAP;
    io->out_cap = SRV_OUT_CAP;
    return 0;
}

static void io_free(struct srv_io *io)
{
    if (!io)
        return;
    free(io->in);
    free(io->out);
    free(io);
}

/* Payloads of at least this many bytes are received straight into place. */
#define SRV_DIRECT_MIN 16384

static int io_flush(struct srv_io *io)
{
    if (io->out_len == 0)
        return 0;
    size_t n = io->out_len;
    io->out_len = 0;
    return mfh_send_full(io->fd, io->out, n);
}

/* Waits between requests until the connection can be read: -1 with
 * errno ETIMEDOUT once it has been idle for the handle's idle timeout
 * (before its HELLO: h->io_timeout_ms, when shorter; a peer pings its
 * control connection sooner, mf_host_peers.c).  An
 * eviction or the server's stop shuts the socket down, which wakes us. */
static int wait_request(struct mfh_handle *h, struct srv_io *io)
{
    struct mfh_srv_conn *c = io->c;
    atomic_store(&c->between, true);
    int rc = 0;
    /* a connection says HELLO at once: until it has, the socket timeout
     * bounds its wait too */
    int limit = h->idle_timeout_ms;
    if (!atomic_load(&c->greeted) && (limit == 0 || h->io_timeout_ms < limit))
        limit = h->io_timeout_ms;
    for (;;) {
        int wait = -1;
        if (limit > 0) {
            long long left = atomic_load(&c->last_ms) + limit - tent_now_ms();
            if (left <= 0) {
                MFH_DEBUG("%s: closing a connection idle for %d ms", h->uid,
                          limit);
                errno = ETIMEDOUT;
                rc = -1;
                break;
            }
            wait = (int)left;
        }
        struct pollfd pfd = {.fd = io->fd, .events = POLLIN};
        int r = poll(&pfd, 1, wait);
        if (r > 0)
            break; /* data, or a hang-up the receive reports */
        if (r < 0 && errno != EINTR) {
            rc = -1;
            break;
        }
    }
    atomic_store(&c->between, false);
    return rc;
}

/* Fills the input buffer with one blocking receive (flushing first).
 * idle: nothing of the current message was read yet, so the connection
 * waits for a request, bounded by the idle timeout (wait_request). */
static int io_fill(struct mfh_handle *h, struct srv_io *io, bool idle)
{
    if (io_flush(io) != 0)
        return -1;
    if (idle && wait_request(h, io) != 0)
        return -1;
    for (;;) {
        ssize_t r = recv(io->fd, io->in, io->in_cap, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = ECONNRESET;
            return -1;
        }
        io->in_pos = 0;
        io->in_len = (size_t)r;
        return 0;
    }
}

/* Reads n bytes into our own memory dst (from the buffer first); see
 * io_fill for idle. */
static int io_read(struct mfh_handle *h, struct srv_io *io, void *dst, size_t n,
                   bool idle)
{
    uint8_t *p = dst;
    while (n > 0) {
        if (io->in_pos < io->in_len) {
            size_t k =
                io->in_len - io->in_pos < n ? io->in_len - io->in_pos : n;
            memcpy(p, io->in + io->in_pos, k);
            io->in_pos += k;
            p += k;
            n -= k;
            idle = false;
            continue;
        }
        if (n >= SRV_DIRECT_MIN) { /* bulk: straight into place */
            if (io_flush(io) != 0)
                return -1;
            return mfh_recv_full(io->fd, p, n);
        }
        if (io_fill(h, io, idle) != 0)
            return -1;
    }
    return 0;
}

/* Sends len bytes of our own memory after what is pending. */
static int io_send(struct srv_io *io, const void *buf, size_t len)
{
    if (len <= io->out_cap - io->out_len) {
        memcpy(io->out + io->out_len, buf, len);
        io->out_len += len;
        return 0;
    }
    if (io_flush(io) != 0)
        return -1;
    return mfh_send_full(io->fd, buf, len);
}

/* Waits until the connection can be read (POLLIN) or written (POLLOUT);
 * -1 with errno EAGAIN after the handle's timeout. */
static int io_wait(struct mfh_handle *h, struct srv_io *io, short events)
{
    for (;;) {
        struct pollfd pfd = {.fd = io->fd, .events = events};
        int r = poll(&pfd, 1, h->io_timeout_ms);
        if (r > 0)
            return 0; /* an error or hang-up shows in the next call */
        if (r == 0) {
            errno = EAGAIN;
            return -1;
        }
        if (errno != EINTR)
            return -1;
    }
}

static int reply(struct srv_io *io, int32_t status, uint64_t addr, uint64_t len,
                 uint64_t gen)
{
    struct mfh_msg m = {.magic = MFH_MAGIC,
                        .type = MFH_MSG_REPLY,
                        .status = status,
                        .addr = addr,
                        .len = len,
                        .gen = gen};
    return io_send(io, &m, sizeof(m));
}

static int drain(struct mfh_handle *h, struct srv_io *io, uint64_t len)
{
    char scratch[16384];
    while (len > 0) {
        size_t n = len < sizeof(scratch) ? (size_t)len : sizeof(scratch);
        if (io_read(h, io, scratch, n, false) != 0)
            return -1;
        len -= n;
    }
    return 0;
}

/* The header's length was checked by mfh_wire_check_request. */
static int serve_hello(struct mfh_handle *h, struct mfh_srv_conn *c,
                       struct srv_io *io)
{
    /* Nothing here is an address of ours: a peer on this host that may
     * map the control page finds what cross-memory attach needs there. */
    struct mfh_hello in,
        out = {.version = MFH_VERSION,
               .pid = (uint32_t)getpid(),
               .proto = h->proto,
               .ctl_fd = h->ctl_fd,
               .ctl_ino = h->ctl_ino,
               .idle_timeout_ms = (uint32_t)h->idle_timeout_ms};
    if (io_read(h, io, &in, sizeof(in), false) != 0)
        return -1;
    bool same_version = mfh_wire_take_hello(&in) == 0;
    if (same_version)
        atomic_store(&c->greeted, true);
    snprintf(out.uid, sizeof(out.uid), "%s", h->uid);
    MFH_DEBUG("%s: hello from %s (pid %u)", h->uid, in.uid, in.pid);
    pthread_mutex_lock(&h->srv_lock); /* who copies: named on a revocation */
    snprintf(c->peer_uid, sizeof(c->peer_uid), "%s", in.uid);
    c->peer_pid = (pid_t)in.pid;
    pthread_mutex_unlock(&h->srv_lock);
    if (reply(io, same_version ? SM_OK : SM_NOT_SUPPORTED, 0, sizeof(out), 0) !=
        0)
        return -1;
    return io_send(io, &out, sizeof(out));
}

static int serve_check(struct mfh_handle *h, struct srv_io *io,
                       const struct mfh_msg *m)
{
    struct mfh_wire_range *r = malloc(m->len);
    if (!r)
        return drain(h, io, m->len) == 0 ? reply(io, SM_MALLOC_FAILED, 0, 0, 0)
                                         : -1;
    if (io_read(h, io, r, m->len, false) != 0) {
        free(r);
        return -1;
    }
    int32_t status = SM_OK;
    uint64_t bad = 0;
    pthread_rwlock_rdlock(&h->mem_lock);
    uint64_t gen = atomic_load(&h->ctl->rev_gen);
    for (uint32_t i = 0; i < m->count; i++) {
        if (!mfh_ranges_cover(h->ranges, h->n_ranges, r[i].addr, r[i].len,
                              r[i].key)) {
            status = SM_INVALID_PARAM;
            bad = i;
            break;
        }
    }
    pthread_rwlock_unlock(&h->mem_lock);
    if (status != SM_OK)
        MFH_WARN("%s: range [0x%llx, +%llu) is not registered here", h->uid,
                 (unsigned long long)r[bad].addr,
                 (unsigned long long)r[bad].len);
    free(r);
    return reply(io, status, bad, 0, gen);
}

static int serve_ranges(struct mfh_handle *h, struct srv_io *io)
{
    pthread_rwlock_rdlock(&h->mem_lock);
    uint64_t mem_gen = atomic_load(&h->ctl->mem_gen);
    uint64_t rev_gen = atomic_load(&h->ctl->rev_gen);
    size_t n = h->n_ranges;
    struct mfh_wire_range *w = malloc((n ? n : 1) * sizeof(*w));
    for (size_t i = 0; w && i < n; i++)
        w[i] = (struct mfh_wire_range){.addr = h->ranges[i].base,
                                       .len = h->ranges[i].len};
    pthread_rwlock_unlock(&h->mem_lock);
    if (!w)
        return reply(io, SM_MALLOC_FAILED, 0, 0, 0);
    struct mfh_msg r = {.magic = MFH_MAGIC,
                        .type = MFH_MSG_REPLY,
                        .status = SM_OK,
                        .count = (uint32_t)n,
                        .addr = mem_gen,
                        .len = n * sizeof(*w),
                        .gen = rev_gen};
    int rc = io_send(io, &r, sizeof(r));
    if (rc == 0 && n)
        rc = io_send(io, w, n * sizeof(*w));
    free(w);
    return rc;
}

/* Whether a WRITE or READ may touch [m->addr, +m->len): the range is
 * registered now (with the key the request carries, when it was registered
 * with one: a wrong key is answered as an unregistered range), and nothing
 * overlapping it was deregistered since the check of its batch (m->gen; 0: a
 * batch of one request, never checked). *snap: the rev_gen its copy is admitted
 * at. */
static bool admit(struct mfh_handle *h, const struct mfh_msg *m,
                  const char *what, uint64_t *snap)
{
    pthread_rwlock_rdlock(&h->mem_lock);
    uint64_t now = atomic_load(&h->ctl->rev_gen);
    bool covered =
        mfh_ranges_cover(h->ranges, h->n_ranges, m->addr, m->len, m->key);
    bool revoked = covered && m->gen != 0 &&
                   mfh_ctl_revoked(h->ctl, m->gen, now, m->addr, m->len);
    pthread_rwlock_unlock(&h->mem_lock);
    *snap = now;
    if (!covered || revoked)
        MFH_WARN("%s: %s of [0x%llx, +%llu) refused: %s", h->uid, what,
                 (unsigned long long)m->addr, (unsigned long long)m->len,
                 covered ? "deregistered since its batch was checked"
                         : "not registered");
    return covered && !revoked;
}

/* Copies of user memory run inside the connection's window (mf_host_ctl.h)
 * and never block there: a receive or send that would wait returns, and
 * the wait happens outside.  A deregistration therefore waits for us only
 * as long as one non-blocking call, however slow the peer; once it has
 * revoked the range (*revoked), nothing more of it is touched: the rest of
 * a write is received into scratch, the rest of a read is sent as zeros,
 * and the request is answered SM_INVALID_PARAM. */
/* Whether the client hung up (FIN) or reset (RST): the kernel says so
 * while bytes it sent before are still queued. */
static bool client_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static int recv_payload(struct mfh_handle *h, struct srv_io *io,
                        struct mfh_win *w, uint64_t snap, uint8_t *dst,
                        size_t n, bool *revoked)
{
    long long checked = 0;
    while (n > 0 && !*revoked) {
        /* A client that gave up on this request reset the connection: what
         * it sent before must not land (looked for at the start and after
         * any pause, as this process may have been stopped meanwhile). */
        long long now = tent_now_ms();
        if (!checked || now - checked >= 2) {
            if (client_gone(io->fd)) {
                errno = ECONNRESET;
                return -1;
            }
            checked = now; /* again within 2 ms of copying */
        }
        bool buffered = io->in_pos < io->in_len;
        if (!buffered && n < SRV_DIRECT_MIN) {
            if (io_fill(h, io, false) != 0)
                return -1;
            continue;
        }
        size_t k = buffered && io->in_len - io->in_pos < n
                       ? io->in_len - io->in_pos
                       : n;
        if (!mfh_win_open(w, h->ctl, snap, (uintptr_t)dst, k)) {
            *revoked = true;
            break;
        }
        ssize_t r;
        int err = 0;
        TENT_USER_IO_BEGIN();
        if (buffered) {
            memcpy(dst, io->in + io->in_pos, k);
            io->in_pos += k;
            r = (ssize_t)k;
        } else {
            r = recv(io->fd, dst, k, MSG_DONTWAIT);
            err = errno;
        }
        TENT_USER_IO_END();
        if (!mfh_win_close(w))
            *revoked = true;
        if (r > 0) {
            dst += r;
            n -= (size_t)r;
        } else if (r == 0) {
            errno = ECONNRESET;
            return -1;
        } else if (err == EAGAIN || err == EWOULDBLOCK) {
            if (io_flush(io) != 0 || io_wait(h, io, POLLIN) != 0)
                return -1;
            checked = 0; /* what woke us may be a hang-up */
        } else if (err != EINTR) {
            errno = err;
            return -1;
        }
    }
    return n > 0 ? drain(h, io, n) : 0;
}

static int send_payload(struct mfh_handle *h, struct srv_io *io,
                        struct mfh_win *w, uint64_t snap, const uint8_t *src,
                        size_t n, bool *revoked)
{
    static const uint8_t zeros[16384];
    while (n > 0) {
        if (*revoked) {
            size_t k = n < sizeof(zeros) ? n : sizeof(zeros);
            if (io_send(io, zeros, k) != 0)
                return -1;
            n -= k;
            continue;
        }
        /* small: into the output buffer, with the answers around it */
        bool small = n <= io->out_cap - io->out_len;
        if (!small && n <= io->out_cap) {
            if (io_flush(io) != 0)
                return -1;
            continue;
        }
        if (!small && io_flush(io) != 0)
            return -1;
        if (!mfh_win_open(w, h->ctl, snap, (uintptr_t)src, n)) {
            *revoked = true;
            continue;
        }
        ssize_t r;
        int err = 0;
        TENT_USER_IO_BEGIN();
        if (small) {
            memcpy(io->out + io->out_len, src, n);
            io->out_len += n;
            r = (ssize_t)n;
        } else {
            r = send(io->fd, src, n, MSG_DONTWAIT | MSG_NOSIGNAL);
            err = errno;
        }
        TENT_USER_IO_END();
        if (!mfh_win_close(w))
            *revoked = true;
        if (r > 0) {
            src += r;
            n -= (size_t)r;
        } else if (r < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
            if (io_wait(h, io, POLLOUT) != 0)
                return -1;
        } else if (r == 0 || err != EINTR) {
            errno = r == 0 ? EPIPE : err;
            return -1;
        }
    }
    return 0;
}

static int serve_write(struct mfh_handle *h, struct mfh_srv_conn *c,
                       struct srv_io *io, const struct mfh_msg *m)
{
    uint64_t snap;
    if (!admit(h, m, "write", &snap)) {
        if (drain(h, io, m->len) != 0)
            return -1;
        return reply(io, SM_INVALID_PARAM, 0, 0, 0);
    }
    bool revoked = false;
    if (recv_payload(h, io, &c->win, snap, (uint8_t *)(uintptr_t)m->addr,
                     m->len, &revoked) != 0)
        return -1;
    if (revoked)
        MFH_WARN("%s: write to [0x%llx, +%llu) stopped half-way: the range "
                 "was deregistered meanwhile",
                 h->uid, (unsigned long long)m->addr,
                 (unsigned long long)m->len);
    return reply(io, revoked ? SM_INVALID_PARAM : SM_OK, 0, 0, 0);
}

/* An admitted read is answered SM_OK with its bytes, then the final status
 * (mfh_msg). */
static int serve_read(struct mfh_handle *h, struct mfh_srv_conn *c,
                      struct srv_io *io, const struct mfh_msg *m)
{
    uint64_t snap;
    if (!admit(h, m, "read", &snap))
        return reply(io, SM_INVALID_PARAM, 0, 0, 0);
    bool revoked = false;
    if (reply(io, SM_OK, 0, m->len, 0) != 0 ||
        send_payload(h, io, &c->win, snap, (const uint8_t *)(uintptr_t)m->addr,
                     m->len, &revoked) != 0)
        return -1;
    if (revoked)
        MFH_WARN("%s: read of [0x%llx, +%llu) stopped half-way: the range "
                 "was deregistered meanwhile",
                 h->uid, (unsigned long long)m->addr,
                 (unsigned long long)m->len);
    return reply(io, revoked ? SM_INVALID_PARAM : SM_OK, 0, 0, 0);
}

/* The server half of the handshake (common/auth.h), before any request:
 * 0 when the client proved the cluster secret. */
static int authenticate(struct mfh_handle *h, struct srv_io *io)
{
    struct tent_auth_server_state st;
    uint8_t hello[TENT_AUTH_HELLO_LEN], ident[TENT_AUTH_MAX_IDENT];
    uint8_t reply[TENT_AUTH_REPLY_LEN], proof[TENT_AUTH_MAC_LEN];
    size_t il = 0;
    /* the first 8 bytes tell a hello from a request */
    if (io_read(h, io, hello, 8, true) != 0 || !tent_auth_hello_start(hello) ||
        io_read(h, io, hello + 8, sizeof(hello) - 8, false) != 0 ||
        tent_auth_hello_parse(hello, &st, &il) != 0 ||
        io_read(h, io, ident, il, false) != 0 ||
        tent_auth_server_reply(h->auth, &st, ident, reply) != 0 ||
        io_send(io, reply, sizeof(reply)) != 0 || io_flush(io) != 0 ||
        io_read(h, io, proof, sizeof(proof), false) != 0 ||
        !tent_auth_server_check(h->auth, &st, proof))
        return -1;
    return 0;
}

static void *srv_conn_main(void *arg)
{
    struct mfh_srv_conn *c = arg;
    struct mfh_handle *h = c->h;
    struct srv_io *io = io_new(c);
    if (io && h->auth && authenticate(h, io) != 0) {
        MFH_WARN("%s: closing a connection that did not prove the cluster "
                 "secret",
                 h->uid);
        io_free(io);
        io = NULL;
    }
    while (io) {
        struct mfh_msg m;
        if (io_read(h, io, &m, sizeof(m), true) != 0)
            break;
        const char *why;
        if (mfh_wire_check_request(&m, atomic_load(&c->greeted), &why) != 0) {
            MFH_WARN("%s: %s (magic 0x%x, type %u, len %llu), closing "
                     "connection",
                     h->uid, why, m.magic, m.type, (unsigned long long)m.len);
            break;
        }
        int rc;
        switch (m.type) {
        case MFH_MSG_HELLO:
            rc = serve_hello(h, c, io);
            if (rc == 0 && atomic_load(&c->greeted))
                rc = io_grow(io);
            break;
        case MFH_MSG_CHECK:
            rc = serve_check(h, io, &m);
            break;
        case MFH_MSG_WRITE:
            rc = serve_write(h, c, io, &m);
            break;
        case MFH_MSG_READ:
            rc = serve_read(h, c, io, &m);
            break;
        case MFH_MSG_RANGES:
            rc = serve_ranges(h, io);
            break;
        case MFH_MSG_PING:
            rc = 0; /* the connection is in use: its idle time restarts */
            break;
        default:
            MFH_WARN("%s: unknown request type %u", h->uid, m.type);
            rc = -1;
        }
        if (rc != 0)
            break;
        atomic_store(&c->last_ms, tent_now_ms());
    }
    io_free(io);
    shutdown(c->fd, SHUT_RDWR);
    atomic_store(&c->finished, true);
    return NULL;
}

/* Joins and closes the connections that ended (all: every one, after they
 * were shut down). */
static void reap_conns(struct mfh_handle *h, bool all)
{
    pthread_mutex_lock(&h->srv_lock);
    struct mfh_srv_conn **pp = &h->srv_conns, *dead = NULL;
    while (*pp) {
        struct mfh_srv_conn *c = *pp;
        if (all || atomic_load(&c->finished)) {
            *pp = c->next;
            c->next = dead;
            dead = c;
            if (!atomic_load(&c->evicted))
                h->n_srv_conns--;
            h->n_srv_listed--;
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&h->srv_lock);
    while (dead) {
        struct mfh_srv_conn *c = dead;
        dead = c->next;
        pthread_join(c->thread, NULL);
        close(c->fd);
        free(c);
    }
}

/* The connection a newcomer replaces: one that never said HELLO (the
 * oldest first), else one waiting between requests (the longest idle
 * first); NULL when every one is inside a request (the newcomer is then
 * refused).  Caller holds
 * srv_lock. */
static struct mfh_srv_conn *pick_victim_locked(struct mfh_handle *h)
{
    struct mfh_srv_conn *best = NULL;
    bool best_greeted = true;
    long long best_ms = 0;
    for (struct mfh_srv_conn *c = h->srv_conns; c; c = c->next) {
        if (atomic_load(&c->finished) || atomic_load(&c->evicted))
            continue;
        bool greeted = atomic_load(&c->greeted);
        if (greeted && !atomic_load(&c->between))
            continue;
        long long ms = atomic_load(&c->last_ms);
        if (!best || (best_greeted && !greeted) ||
            (best_greeted == greeted && ms < best_ms)) {
            best = c;
            best_greeted = greeted;
            best_ms = ms;
        }
    }
    return best;
}

/* Shuts v down (its thread ends; the reaper closes it).  srv_lock held. */
static void evict_locked(struct mfh_handle *h, struct mfh_srv_conn *v)
{
    atomic_store(&v->evicted, true);
    h->n_srv_conns--;
    shutdown(v->fd, SHUT_RDWR);
}

/* Serves fd on a thread of its own, in the place of another connection
 * when the server is full, or refuses it. */
static void admit_conn(struct mfh_handle *h, int fd)
{
    static struct tent_log_ratelimit refuse_rl;
    struct mfh_srv_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    c->h = h;
    c->fd = fd;
    atomic_init(&c->last_ms, tent_now_ms());
    const char *why = NULL;
    pthread_attr_t attr;
    bool attr_ok = pthread_attr_init(&attr) == 0;
    if (attr_ok)
        pthread_attr_setstacksize(&attr, SRV_STACK_BYTES);
    pthread_mutex_lock(&h->srv_lock);
    if (h->n_srv_conns >= h->max_conns) {
        struct mfh_srv_conn *v = pick_victim_locked(h);
        if (v)
            evict_locked(h, v);
        else
            why = "every connection is inside a request";
    }
    if (!why && (atomic_load(&h->stopping) ||
                 pthread_create(&c->thread, attr_ok ? &attr : NULL,
                                srv_conn_main, c) != 0))
        why = "no thread for it";
    if (!why) {
        c->next = h->srv_conns;
        h->srv_conns = c;
        h->n_srv_conns++;
        h->n_srv_listed++;
    }
    pthread_mutex_unlock(&h->srv_lock);
    if (attr_ok)
        pthread_attr_destroy(&attr);
    if (why) {
        unsigned long held = 0;
        if (!atomic_load(&h->stopping) &&
            tent_log_ratelimit_ok(&refuse_rl, SRV_LOG_EVERY_MS, &held))
            MFH_WARN("%s: refusing a connection: %s (at most %d, "
                     "MF_HOST_MAX_CONNECTIONS) (%lu more refusals not "
                     "logged)",
                     h->uid, why, h->max_conns, held);
        close(fd);
        free(c);
    }
}

/* accept() ran out of descriptors (err): gives up the reserve descriptor
 * to take the waiting connection and close it, so it does not wake us
 * again and again, and evicts the longest idle connection. */
static void out_of_fds(struct mfh_handle *h, int err)
{
    static struct tent_log_ratelimit fd_rl;
    if (h->reserve_fd >= 0) {
        close(h->reserve_fd);
        h->reserve_fd = -1;
        int fd = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            close(fd);
    }
    pthread_mutex_lock(&h->srv_lock);
    struct mfh_srv_conn *v = pick_victim_locked(h);
    if (v)
        evict_locked(h, v);
    pthread_mutex_unlock(&h->srv_lock);
    unsigned long held = 0;
    if (tent_log_ratelimit_ok(&fd_rl, SRV_LOG_EVERY_MS, &held))
        MFH_WARN("%s: accept: %s: refusing connections until descriptors "
                 "free up (%lu more not logged)",
                 h->uid, strerror(err), held);
}

/* Whether the server is full and connections it evicted have not ended
 * yet: their descriptors count until they are reaped. */
static bool evictions_pending(struct mfh_handle *h)
{
    pthread_mutex_lock(&h->srv_lock);
    bool pending =
        h->n_srv_listed >= h->max_conns && h->n_srv_listed > h->n_srv_conns;
    pthread_mutex_unlock(&h->srv_lock);
    return pending;
}

/* Wakes every SRV_TICK_MS to join and close the connections that ended,
 * whether or not anyone connects.  An evicted connection counts until then,
 * so newcomers wait in the backlog meanwhile and the server never holds
 * more than max_conns + 1 connections.  After out_of_fds it pauses
 * SRV_BACKOFF_MIN_MS, doubling to SRV_BACKOFF_MAX_MS while the shortage
 * lasts; it ends only when the handle stops. */
static void *accept_main(void *arg)
{
    struct mfh_handle *h = arg;
    int backoff = 0;
    while (!atomic_load(&h->stopping)) {
        struct pollfd pfd = {.fd = h->listen_fd, .events = POLLIN};
        int r = poll(&pfd, 1, backoff ? backoff : SRV_TICK_MS);
        reap_conns(h, false);
        if (h->reserve_fd < 0)
            h->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (atomic_load(&h->stopping))
            break;
        if (r <= 0 && !backoff)
            continue; /* a tick, or EINTR */
        if (evictions_pending(h)) {
            backoff = SRV_EVICT_WAIT_MS; /* newcomers wait in the backlog */
            continue;
        }
        int fd = tent_net_accept(h->listen_fd, h->io_timeout_ms);
        if (fd >= 0) {
            backoff = 0;
            admit_conn(h, fd);
            continue;
        }
        int err = -fd;
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
            out_of_fds(h, err);
            backoff = backoff ? backoff * 2 : SRV_BACKOFF_MIN_MS;
            if (backoff > SRV_BACKOFF_MAX_MS)
                backoff = SRV_BACKOFF_MAX_MS;
        } else if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR ||
                   err == ECONNABORTED || err == EPROTO) {
            backoff = 0; /* nothing waiting, or it left already */
        } else if (!atomic_load(&h->stopping)) {
            static struct tent_log_ratelimit err_rl;
            unsigned long held = 0;
            if (tent_log_ratelimit_ok(&err_rl, SRV_LOG_EVERY_MS, &held))
                MFH_ERROR("%s: accept: %s (%lu more not logged)", h->uid,
                          strerror(err), held);
            backoff = SRV_BACKOFF_MAX_MS;
        }
    }
    return NULL;
}

int mfh_server_start(struct mfh_handle *h)
{
    int fd = -1;
    int rc = tent_net_listen(h->host, h->port, true, &fd, &h->port);
    if (tent_net_is_resolve_error(rc)) {
        MFH_ERROR("cannot resolve host '%s' of url: %s", h->host,
                  tent_net_strerror(rc));
        return SM_INVALID_PARAM;
    }
    if (rc) {
        MFH_ERROR("cannot listen on %s:%u: %s", h->host, (unsigned)h->port,
                  tent_net_strerror(rc));
        return SM_ERROR;
    }
    h->listen_fd = fd;
    h->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    /* The unique id peers use as destUrl; set before anyone can ask. */
    tent_net_format_hostport(h->uid, sizeof(h->uid), h->host, h->port);
    if (pthread_create(&h->accept_thread, NULL, accept_main, h) != 0) {
        MFH_ERROR("cannot start the rpc server thread");
        close(fd);
        h->listen_fd = -1;
        return SM_ERROR;
    }
    h->accept_started = true;
    return SM_OK;
}

void mfh_server_stop(struct mfh_handle *h)
{
    if (h->accept_started) {
        shutdown(h->listen_fd, SHUT_RDWR);
        pthread_join(h->accept_thread, NULL);
        h->accept_started = false;
    }
    if (h->listen_fd >= 0) { /* refuses who waits in the backlog */
        close(h->listen_fd);
        h->listen_fd = -1;
    }
    pthread_mutex_lock(&h->srv_lock);
    for (struct mfh_srv_conn *c = h->srv_conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&h->srv_lock);
    reap_conns(h, true);
    if (h->reserve_fd >= 0) {
        close(h->reserve_fd);
        h->reserve_fd = -1;
    }
}
