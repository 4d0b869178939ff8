/* The engine's RPC server: descriptor fetches and notifications (its own
 * frames, rpc/wire.h) and every frame type a transport installs a handler
 * for (rpc.h tent_rpc_server_handle).
 *
 * One loop thread owns the listening sockets and every connection waiting
 * between frames (epoll, one-shot) and hands a connection to a worker once
 * a whole header is in; the worker serves frames on it -- a handler may
 * block, bounded by the frame's deadline -- and keeps it while frames
 * follow within LINGER_MS.  So idle and header-trickling connections hold
 * no thread, and the workers (started on demand, ended after WORKER_IDLE_MS
 * idle) number about the connections inside frames.  Whoever holds a
 * connection checks its frame deadline and idle time (rpc.h
 * tent_rpc_limits): a worker at every receive, the loop every TICK_MS.
 *
 * Every frame is decoded by wire.c before use; one that does not validate
 * closes its connection.  The server knows neither its owner nor the
 * transports' frames beyond the handler tables of rpc.h.
 *
 * Why, and the policies for a full server, descriptors and CPUs:
 * docs/design.md "The RPC server", docs/security.md "Robustness against
 * hostile clients". */
#include "common/auth.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "rpc/rpc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define IO_TICK_MS      500  /* a worker's socket timeouts: stop, deadlines */
#define MID_FRAME_TICKS 20   /* a frame stalled this long (10 s) is dropped */
#define LOG_EVERY_MS    5000 /* rate of the refusal and eviction warnings */

#define TICK_MS           250  /* the loop checks the connections it holds */
#define LINGER_MS         20   /* a worker waits this long for a next frame */
#define WORKER_IDLE_MS    2000 /* an idle worker beyond WORKERS_KEPT ends */
#define WORKERS_KEPT      2
#define SLOW_GRACE_MS     1000
#define WORK_HALF_LIFE_MS 60000
#define FRAME_CREDIT      4096
#define ACCEPT_BATCH      64   /* accepts per wake-up of the loop */
#define LISTEN_BACKLOG    4096 /* the kernel clamps it to somaxconn */
#define BACKOFF_MIN_MS    10
#define BACKOFF_MAX_MS    1000
#define FD_RECOVER_MS     30000
#define MAX_EVENTS        256
#define NOFILE_CEILING    (1u << 20) /* raise no further than this */

#define FOLLOW_MIN    65536 /* data frames that follow their sender's CPU */
#define CROWD_HOLD_MS 50    /* crowded this long after the last sign of it */
#define FOLLOW_ASK_MS 1     /* a followed connection's CPU asked this often */

#define IOBUF      65536 /* per-connection input and output buffers */
#define DIRECT_MIN 16384 /* larger reads bypass the input buffer */
/* While bytes land in memory, the client's hang-up is looked for at least
 * this often, so that after a pause (the process may have been stopped)
 * nothing it sent before its reset lands */
#define LAND_CHECK_MS 2
/* a frame's header and the longest prefix a handler measures */
_Static_assert(TENT_WIRE_HDR_LEN + TENT_RPC_MAX_PREFIX <= DIRECT_MIN &&
                   DIRECT_MIN <= IOBUF,
               "in[] holds a small body or the start of a next frame");

/* What a connection is doing, for the choice of whom to replace. */
enum conn_state {
    CS_IDLE,   /* between frames, none of the next one in */
    CS_HEADER, /* part of a frame's header is in (held by the loop) */
    CS_FRAME,  /* a frame being served (held by a worker) */
};

/* A connection is held by the loop (in the epoll set, armed) or by one
 * worker (on the ready queue or being served); only its holder reads or
 * writes the socket, the buffers and deadline_ms, and only its holder
 * closes it.  Small requests are read many at a time into in[] and their
 * small answers gathered in out[], which is flushed before the holder would
 * wait for input (so a client waiting for answers always gets them) and
 * before any answer that carries data (so answers stay in order).  A large
 * body (DIRECT_MIN or more) is received straight into its destination:
 * in[] holds only what of it came in with the bytes before it (read_some,
 * srv_recv). */
struct tent_rpc_conn {
    struct tent_rpc_server *srv;
    int fd;
    char peer[64];         /* "<ip>:<port>" of the client */
    long long deadline_ms; /* of the frame under way */
    bool frame_failed;     /* the frame under way was answered an error */
    bool loopback;         /* both ends loopback addresses (set at accept) */
    bool authed;           /* the handshake is done (with a secret) */
    char ident[TENT_AUTH_MAX_IDENT + 1]; /* the segment it proved to be */
    /* spin_us (rpc.h), holder only: spins that ran out in a row, and waits
     * left that sleep at once before the next spin is tried */
    unsigned spin_misses, spin_skip;
    /* Published by the holder (one writer) for the loop's choice. */
    atomic_int state;            /* enum conn_state */
    atomic_llong frame_start_ms; /* first byte of the frame under way */
    atomic_ullong frame_bytes;   /* bytes in and out of it so far */
    atomic_llong last_ms;        /* end of the last frame (or accept) */
    atomic_ullong work;          /* useful work as of work_ms */
    atomic_llong work_ms;
    /* Set once, under the server lock, by whoever decides the connection
     * must go (eviction, timeout, stop), with a shutdown() of the socket
     * so that its holder notices and closes it. */
    atomic_bool closing;
    bool on_worker; /* server lock: held by a worker, else by the loop */
    uint64_t tag;   /* server lock: tent_rpc_conn_tag's, 0 if none */
    struct tent_rpc_conn *prev, *next; /* server lock: every connection */
    struct tent_rpc_conn *qnext;       /* server lock: ready queue */
    uint8_t in[IOBUF];
    size_t in_pos, in_len;
    uint8_t out[IOBUF];
    size_t out_len;
};

/* One installed frame handler (ops.serve NULL: none).  lock is held for
 * reading around every call of ops and for writing to change them, so a
 * removal returns only once no call is running. */
struct frame_slot {
    pthread_rwlock_t lock;
    struct tent_rpc_frame_ops ops;
};

/* A worker thread.  Idle workers wait on their own condition variable in
 * a stack, so that work goes to the one idle the shortest time and the
 * others can end after WORKER_IDLE_MS: the pool shrinks back after a
 * burst.  Server lock. */
struct worker {
    pthread_t thread;
    struct tent_rpc_server *srv;
    pthread_cond_t cv;            /* a job, or stop */
    struct tent_rpc_conn *job;    /* the connection to serve next */
    bool idle;                    /* on the idle stack */
    bool done;                    /* ended, to be joined */
    struct worker *next;          /* every worker */
    struct worker *iprev, *inext; /* the idle stack, top first */
};

/* lock guards the connection list and every connection's on_worker, links
 * and closing decision, the ready queue, the workers, the cap and the
 * counters that are not atomic.  It is a leaf lock: no handler is called
 * and no other lock is taken while it is held.  The loop-only fields are
 * touched by the loop thread alone. */
struct tent_rpc_server {
    struct tent_rpc_handlers h;
    struct frame_slot frames[256];
    struct tent_rpc_limits lim;
    /* listening sockets: the server's address, then the ones
     * tent_rpc_server_listen added (lock; the loop adds them to ep) */
    int lfds[TENT_RPC_MAX_LISTEN];
    int nlfd;
    /* the largest prefix a handler measures, read with a frame's header */
    atomic_uint max_prefix;
    /* tags tent_rpc_conn_close_tagged closed (lock): tagging a connection
     * with one later (its first frame was still in the network) fails */
    uint64_t closed_tags[64];
    unsigned nclosed_tags;
    int wake_fd, ep;
    pthread_t loop_thread;
    atomic_bool stop;
    pthread_mutex_t lock;
    struct tent_rpc_conn *conns;
    int nlive; /* connections not closing: what the cap counts */
    int cap, sized_cap;
    /* ready for a worker when none could be started (rare) */
    struct tent_rpc_conn *q_head, *q_tail;
    int queued;
    struct worker *workers, *idle_top;
    int nworkers;
    uint64_t accepted, evicted, evicted_working, refused, refused_no_fd;
    atomic_ulong idle_closed, frame_timeouts;
    atomic_ulong auth_refused, notify_spoofed;
    struct tent_log_ratelimit auth_rl;
    /* loop thread only */
    int reserve_fd;        /* /dev/null, given up when accept() runs out */
    bool listening;        /* the listening socket is in the epoll set */
    long long resume_ms;   /* accepting paused until then */
    int backoff_ms;        /* the last pause, 0 after an accept succeeded */
    long long fd_short_ms; /* accept() last ran out of descriptors */
    struct tent_log_ratelimit refuse_rl, evict_rl, fd_rl;
    /* CPUs (tcp_loopback_follow_cpu): the process's at start, the large
     * loopback frames in progress, and until when the CPUs count as
     * crowded (tent_now_ms) */
    int ncpus;
    atomic_int big_frames;
    atomic_llong crowded_until_ms;
};

/* ---- frames and their accounting ---------------------------------------- */

/* What a read into an empty in[] takes: a frame's header and the prefix
 * handlers measure. */
static size_t first_read(struct tent_rpc_server *s)
{
    return TENT_WIRE_HDR_LEN +
           atomic_load_explicit(&s->max_prefix, memory_order_relaxed);
}

static void add_bytes(struct tent_rpc_conn *c, uint64_t n)
{
    /* one writer (the holder): no read-modify-write needed */
    atomic_store_explicit(
        &c->frame_bytes,
        atomic_load_explicit(&c->frame_bytes, memory_order_relaxed) + n,
        memory_order_relaxed);
}

/* The first byte of a frame is here: its whole must follow in time. */
static void frame_begin(struct tent_rpc_conn *c, long long now)
{
    c->deadline_ms = now + c->srv->lim.frame_timeout_ms;
    atomic_store(&c->frame_bytes, 0);
    atomic_store(&c->frame_start_ms, now);
    atomic_store(&c->state, CS_HEADER);
}

/* work as of now: halved once per WORK_HALF_LIFE_MS since it was set. */
static uint64_t work_now(const struct tent_rpc_conn *c, long long now)
{
    uint64_t w = atomic_load(&c->work);
    long long halvings = (now - atomic_load(&c->work_ms)) / WORK_HALF_LIFE_MS;
    return halvings >= 64 ? 0 : w >> (halvings > 0 ? halvings : 0);
}

/* Served.  Its answers may still sit in out[]: they get a frame's time to
 * leave (flushed before the next receive).  A data frame (work) that
 * succeeded adds to the connection's work.  Bytes already in in[] are the
 * start of the next frame, whose time starts now. */
static void frame_end(struct tent_rpc_conn *c, bool work)
{
    long long now = tent_now_ms();
    if (work && !c->frame_failed) {
        uint64_t b = atomic_load(&c->frame_bytes);
        atomic_store(&c->work,
                     work_now(c, now) + (b > FRAME_CREDIT ? b : FRAME_CREDIT));
        atomic_store(&c->work_ms, now);
    }
    c->frame_failed = false;
    atomic_store(&c->last_ms, now);
    if (c->in_len > c->in_pos) {
        frame_begin(c, now);
    } else {
        c->deadline_ms = now + c->srv->lim.frame_timeout_ms;
        atomic_store(&c->state, CS_IDLE);
    }
}

/* A send may wait out MID_FRAME_TICKS timeouts in a row, unless the
 * server stops, the connection is closing or the frame's deadline passes (a
 * client that does not read its answers holds the connection no longer
 * than a slow request would). */
static bool srv_send_wait(void *arg, int stalls)
{
    struct tent_rpc_conn *c = arg;
    if (tent_now_ms() >= c->deadline_ms) {
        atomic_fetch_add(&c->srv->frame_timeouts, 1);
        LOG_DEBUG("rpc: %s: answer not taken within rpc_frame_timeout_ms",
                  c->peer);
        return false;
    }
    return !atomic_load(&c->srv->stop) && !atomic_load(&c->closing) &&
           stalls < MID_FRAME_TICKS;
}

static int srv_send(struct tent_rpc_conn *c, struct iovec *iov, int n)
{
    if (atomic_load(&c->srv->stop))
        return -1;
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (tent_net_sendv_all(c->fd, iov, n, 0, srv_send_wait, c))
        return -1;
    add_bytes(c, total);
    return 0;
}

static int flush_out(struct tent_rpc_conn *c)
{
    if (!c->out_len)
        return 0;
    struct iovec iov = {c->out, c->out_len};
    c->out_len = 0;
    return srv_send(c, &iov, 1);
}

/* Whether the client hung up (FIN) or reset (RST) the connection: the
 * kernel says so while bytes it sent before are still queued. */
static bool client_gone(struct tent_rpc_conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return false;
    LOG_DEBUG("rpc: %s: hung up inside a frame; refusing what it sent",
              c->peer);
    return true;
}

/* Whether this wait may spin before it sleeps.  A spin that runs out (the
 * peer took longer, or could not run because we held the CPU it needed)
 * makes the next 2^k - 1 waits sleep at once after k such spins in a row,
 * so a crowded machine or a slow peer costs little spinning; one that
 * finds bytes starts over. */
#define SPIN_MAX_BACKOFF 6
static bool spin_may(struct tent_rpc_conn *c)
{
    if (!c->srv->lim.spin_us)
        return false;
    if (c->spin_skip) {
        c->spin_skip--;
        return false;
    }
    return true;
}

static void spin_done(struct tent_rpc_conn *c, bool found)
{
    if (found) {
        c->spin_misses = 0;
        return;
    }
    if (c->spin_misses < SPIN_MAX_BACKOFF)
        c->spin_misses++;
    c->spin_skip = (1u << c->spin_misses) - 1;
}

/* Copies up to n bytes of what in[] holds to dst; returns the count. */
static size_t take_buffered(struct tent_rpc_conn *c, char *dst, size_t n)
{
    size_t k = c->in_len - c->in_pos;
    if (k > n)
        k = n;
    memcpy(dst, c->in + c->in_pos, k);
    c->in_pos += k;
    return k;
}

/* A landing receive's wait for bytes, as the socket's timeout would wait
 * but seeing a hang-up too: 1 when bytes came, 0 after a tick without,
 * -1 when the connection must be dropped. */
static int land_wait(struct tent_rpc_conn *c)
{
    struct pollfd pf = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
    int pr = poll(&pf, 1, IO_TICK_MS);
    if (pr < 0 && errno != EINTR)
        return -1;
    if (pr > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return -1;
    return pr > 0 ? 1 : 0;
}

/* Receives exactly n bytes of the frame being served, which fails once the
 * frame's deadline passes, however slowly bytes keep coming.  A large body
 * (DIRECT_MIN or more) goes straight into buf, and each receive of it also
 * takes, into in[], the start of whatever follows (the next frame's header
 * and the prefix its handler measures, when its client has sent them): the
 * worker then
 * has the next request without another system call, and none of the body
 * is copied twice.  0, or -1 when the connection must be dropped. */
static int srv_recv_as(struct tent_rpc_conn *c, void *buf, size_t n, bool land)
{
    char *p = buf;
    int ticks = 0;
    size_t got = 0;
    /* Each wait for bytes: non-blocking receives until spin_end_ns (set at
     * the first that finds nothing) when spin_may allows, then blocking ones
     * (the socket's timeout). */
    const int spin_flags = c->srv->lim.spin_us ? MSG_DONTWAIT : 0;
    int flags = spin_flags;
    uint64_t spin_end_ns = 0;
    long long checked = 0;
    while (got < n) {
        if (land) {
            long long now = tent_now_ms();
            if (!checked || now - checked >= LAND_CHECK_MS) {
                if (client_gone(c))
                    return -1;
                checked = now; /* again within LAND_CHECK_MS of copying */
            }
        }
        if (c->in_pos < c->in_len) {
            got += take_buffered(c, p + got, n - got);
            ticks = 0;
            continue;
        }
        if (flush_out(c) || atomic_load(&c->srv->stop) ||
            atomic_load(&c->closing))
            return -1;
        if (tent_now_ms() >= c->deadline_ms) {
            atomic_fetch_add(&c->srv->frame_timeouts, 1);
            LOG_DEBUG("rpc: %s: dropping a frame not whole within %d ms",
                      c->peer, c->srv->lim.frame_timeout_ms);
            return -1;
        }
        /* in[] is used up: what comes next lands at its start */
        size_t want = n - got;
        struct iovec iov[2] = {{p + got, want}, {c->in, first_read(c->srv)}};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
        if (n < DIRECT_MIN) {
            iov[0] = (struct iovec){c->in, sizeof(c->in)};
            m.msg_iovlen = 1;
        }
        ssize_t r = recvmsg(c->fd, &m, land ? flags | MSG_DONTWAIT : flags);
        if (r > 0 && spin_end_ns) {
            spin_done(c, true);
            spin_end_ns = 0;
        }
        if (r > 0) {
            flags = spin_flags; /* the next wait may spin again */
            add_bytes(c, (uint64_t)r);
            if (n < DIRECT_MIN) {
                c->in_pos = 0;
                c->in_len = (size_t)r;
            } else if ((size_t)r > want) {
                got = n;
                c->in_pos = 0;
                c->in_len = (size_t)r - want;
            } else {
                got += (size_t)r;
            }
            ticks = 0;
            continue;
        }
        if (r == 0)
            return -1;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        if (flags) {
            uint64_t now = tent_now_ns();
            if (!spin_end_ns) {
                if (!spin_may(c)) {
                    flags = 0;
                    continue;
                }
                spin_end_ns = now + (uint64_t)c->srv->lim.spin_us * 1000u;
            } else if (now >= spin_end_ns) {
                spin_done(c, false);
                spin_end_ns = 0;
                flags = 0;
            }
            continue;
        }
        if (land) {
            int pr = land_wait(c);
            if (pr < 0)
                return -1;
            if (pr > 0) {
                checked = tent_now_ms();
                continue;
            }
        }
        if (++ticks >= MID_FRAME_TICKS)
            return -1;
    }
    return 0;
}

static int srv_recv(struct tent_rpc_conn *c, void *buf, size_t n)
{
    return srv_recv_as(c, buf, n, false);
}

/* Whether in[] starts with the whole header of a frame whose body is large
 * enough for srv_recv's direct reads (or more than the buffer holds). */
static bool large_frame_first(const struct tent_rpc_conn *c)
{
    struct tent_wire_hdr h;
    /* a header that does not decode is serve_frame's to refuse */
    return c->in_len - c->in_pos >= TENT_WIRE_HDR_LEN &&
           !tent_wire_decode_hdr(c->in + c->in_pos, TENT_WIRE_HDR_LEN, &h) &&
           h.len >= DIRECT_MIN + atomic_load_explicit(&c->srv->max_prefix,
                                                      memory_order_relaxed);
}

/* Reads what the socket has now into in[] without waiting; the first byte
 * of a frame starts its deadline.  Returns the bytes read (0: none now),
 * or -1 when the peer closed the connection or it failed. */
static long read_some(struct tent_rpc_conn *c)
{
    size_t have = c->in_len - c->in_pos;
    if (c->in_pos) {
        memmove(c->in, c->in + c->in_pos, have);
        c->in_pos = 0;
        c->in_len = have;
    }
    long total = 0;
    while (c->in_len < sizeof(c->in)) {
        /* Into an empty buffer, one frame's header and measured prefix
         * first: when the body that follows is large, srv_recv reads it
         * straight into its destination, and none of it is copied twice. */
        size_t want =
            c->in_len ? sizeof(c->in) - c->in_len : first_read(c->srv);
        ssize_t r = recv(c->fd, c->in + c->in_len, want, MSG_DONTWAIT);
        if (r > 0) {
            if (c->in_len == 0)
                frame_begin(c, tent_now_ms());
            c->in_len += (size_t)r;
            add_bytes(c, (uint64_t)r);
            total += r;
            if (c->in_len == (size_t)r && large_frame_first(c))
                return total;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return total;
        return total ? total : -1; /* closed: serve what came first */
    }
    return total;
}

static bool header_in(const struct tent_rpc_conn *c)
{
    return c->in_len - c->in_pos >= TENT_WIRE_HDR_LEN;
}

/* After a frame: waits up to LINGER_MS (within the idle timeout) for the
 * next frame's header.  1 when it is in, 0 when the connection should go
 * back to the loop, -1 when it must be closed. */
static int await_header(struct tent_rpc_conn *c)
{
    struct tent_rpc_server *s = c->srv;
    long long until = tent_now_ms() + LINGER_MS;
    long long idle_end = atomic_load(&c->last_ms) + s->lim.idle_timeout_ms;
    if (idle_end < until)
        until = idle_end;
    /* With nothing of a next frame in in[], its client most likely waits
     * for the answer just sent: wait before reading, not after a read that
     * finds nothing (a system call fewer per request/response; the wait
     * returns at once when bytes are there). */
    bool wait_first = c->in_pos == c->in_len;
    /* then reads without sleeping for spin_us (rpc.h), within the wait */
    uint64_t spin_end_ns =
        spin_may(c) ? tent_now_ns() + (uint64_t)s->lim.spin_us * 1000u : 0;
    if (spin_end_ns > (uint64_t)until * 1000000u)
        spin_end_ns = (uint64_t)until * 1000000u;
    for (;;) {
        if (header_in(c)) {
            if (spin_end_ns)
                spin_done(c, true);
            return 1;
        }
        if (flush_out(c) || atomic_load(&s->stop) || atomic_load(&c->closing))
            return -1;
        if (!wait_first) {
            long r = read_some(c);
            if (r < 0)
                return -1;
            if (r > 0)
                continue;
        }
        wait_first = false;
        if (spin_end_ns) {
            if (tent_now_ns() < spin_end_ns)
                continue; /* read_some again */
            spin_done(c, false);
            spin_end_ns = 0;
        }
        long long left = until - tent_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
        if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
            return -1;
    }
}

static int send_resp(struct tent_rpc_conn *c, uint32_t seq, int32_t status,
                     const void *data, uint32_t len)
{
    uint8_t h[TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN];
    if (status)
        c->frame_failed = true;
    tent_wire_encode_hdr(h, TENT_WIRE_RESP, seq, TENT_WIRE_RESP_LEN + len);
    tent_wire_encode_resp(h + TENT_WIRE_HDR_LEN, status);
    if (!len && c->out_len + sizeof(h) <= sizeof(c->out)) {
        memcpy(c->out + c->out_len, h, sizeof(h));
        c->out_len += sizeof(h);
        add_bytes(c, sizeof(h));
        return 0;
    }
    if (flush_out(c))
        return -1;
    struct iovec iov[2] = {{h, sizeof(h)}, {(void *)data, len}};
    return srv_send(c, iov, len ? 2 : 1);
}

static int drain(struct tent_rpc_conn *c, uint64_t n)
{
    char tmp[65536];
    while (n) {
        size_t k = n < sizeof(tmp) ? (size_t)n : sizeof(tmp);
        if (srv_recv(c, tmp, k))
            return -1;
        n -= k;
    }
    return 0;
}

/* ---- the frame handlers' view of a connection ------------------------- */

int tent_rpc_conn_recv(struct tent_rpc_conn *c, void *buf, size_t n)
{
    return srv_recv(c, buf, n);
}

int tent_rpc_conn_land(struct tent_rpc_conn *c, void *buf, size_t n)
{
    return srv_recv_as(c, buf, n, true);
}

int tent_rpc_conn_drain(struct tent_rpc_conn *c, uint64_t n)
{
    return drain(c, n);
}

int tent_rpc_conn_send_resp(struct tent_rpc_conn *c, uint32_t seq,
                            int32_t status, const void *data, uint32_t len)
{
    return send_resp(c, seq, status, data, len);
}

const char *tent_rpc_conn_peer(const struct tent_rpc_conn *c)
{
    return c->peer;
}

/* ---- serving one frame -------------------------------------------------- */

static int serve_notify(struct tent_rpc_conn *c, const struct tent_wire_hdr *h)
{
    uint8_t *body = malloc(h->len ? h->len : 1);
    struct tent_wire_notify *n = malloc(sizeof(*n));
    int rc = -1;
    if (!body || !n || srv_recv(c, body, h->len) ||
        tent_wire_decode_notify(body, h->len, n))
        goto out;
    const struct tent_rpc_handlers *hd = &c->srv->h;
    int st;
    if (c->srv->lim.auth && strcmp(n->from, c->ident) != 0) {
        /* with a secret the sender is who the connection proved to be */
        atomic_fetch_add(&c->srv->notify_spoofed, 1);
        tm_add(tm_shard(c->srv->lim.metrics), TM_NOTIFY_SPOOFED, 0, 0, 1);
        LOG_WARN("rpc: dropping a notification from %s that claims sender "
                 "'%s' on a connection authenticated as '%s'",
                 c->peer, n->from, c->ident);
        st = TENT_EPERM;
    } else {
        st = hd->notify(hd->ctx, c->peer, n->from, n->name, n->msg);
    }
    rc = send_resp(c, h->seq, st, NULL, 0);
out:
    free(n);
    free(body);
    return rc;
}

static int serve_desc(struct tent_rpc_conn *c, const struct tent_wire_hdr *h)
{
    size_t len = 0;
    char *json = c->srv->h.describe(c->srv->h.ctx, &len);
    if (!json || len > TENT_WIRE_MAX_BODY) {
        free(json);
        LOG_ERROR("rpc: cannot encode the local segment descriptor");
        return -1;
    }
    uint8_t hdr[TENT_WIRE_HDR_LEN];
    tent_wire_encode_hdr(hdr, TENT_WIRE_DESC_RESP, h->seq, (uint32_t)len);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {json, len}};
    int rc = flush_out(c) ? -1 : srv_send(c, iov, 2);
    free(json);
    return rc;
}

static bool kill_locked(struct tent_rpc_server *s, struct tent_rpc_conn *c);

/* ---- tags ---------------------------------------------------------------- */

int tent_rpc_conn_tag(struct tent_rpc_conn *c, uint64_t tag)
{
    struct tent_rpc_server *s = c->srv;
    bool closed = false;
    pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < 64 && i < s->nclosed_tags; i++)
        closed |= s->closed_tags[i] == tag;
    if (!closed)
        c->tag = tag;
    pthread_mutex_unlock(&s->lock);
    if (closed)
        return tent_set_error(TENT_ESHUTDOWN,
                              "rpc: %s: tag %#llx was closed before", c->peer,
                              (unsigned long long)tag);
    return TENT_OK;
}

int tent_rpc_conn_close_tagged(struct tent_rpc_conn *c, uint64_t tag)
{
    struct tent_rpc_server *s = c->srv;
    int bound =
        s->lim.frame_timeout_ms / 2 < 5000 ? s->lim.frame_timeout_ms / 2 : 5000;
    long long until = tent_now_ms() + bound;
    pthread_mutex_lock(&s->lock);
    s->closed_tags[s->nclosed_tags++ % 64] = tag;
    pthread_mutex_unlock(&s->lock);
    for (;;) {
        bool present = false;
        pthread_mutex_lock(&s->lock);
        for (struct tent_rpc_conn *x = s->conns; x; x = x->next)
            if (x != c && x->tag == tag) {
                present = true;
                kill_locked(s, x);
            }
        pthread_mutex_unlock(&s->lock);
        if (!present)
            return TENT_OK;
        if (tent_now_ms() >= until || atomic_load(&s->stop))
            return tent_set_error(TENT_ETIMEDOUT,
                                  "rpc: the connections tagged %#llx were "
                                  "not closed within %d ms",
                                  (unsigned long long)tag, bound);
        poll(NULL, 0, 1);
    }
}

/* ---- following a same-host sender's CPU --------------------------------- */

/* tcp_loopback_follow_cpu.  A client on this host sends from one of our
 * CPUs: the kernel processes its segments there, and they are warm in that
 * CPU's cache; a worker copying them on another CPU pulls every line
 * across.  While spare CPUs run the two sides side by side that costs less
 * than sharing one; when they do not, it costs the most.  So a worker
 * serving a data frame of FOLLOW_MIN or more bytes on a loopback-to-loopback
 * connection, while such frames were in progress in more than half the
 * CPUs' number within CROWD_HOLD_MS, runs on the CPU the frame came in on
 * (SO_INCOMING_CPU, when the process may use it); a frame that does not
 * qualify, or the connection going back to the loop, gives the worker its
 * CPUs back.  One sender, where a CPU is spare, is left alone: following
 * cost it.  Figures: docs/performance.md "Design figures". */

/* A worker's CPU while it serves one connection: cpu it was moved to (-1:
 * none), and the CPUs it had before. */
struct follow {
    int cpu;
    long long asked_ms; /* when the frame's CPU was last asked (cpu >= 0) */
    cpu_set_t home;
};

static void follow_leave(struct follow *f)
{
    if (f->cpu < 0)
        return;
    int e = pthread_setaffinity_np(pthread_self(), sizeof(f->home), &f->home);
    if (e)
        LOG_DEBUG("rpc: a worker keeps CPU %d: restoring its CPUs failed: %s",
                  f->cpu, strerror(e));
    f->cpu = -1;
}

/* Moves the worker to the CPU the connection's frames come in on.  Once it
 * runs there, the kernel is asked again only every FOLLOW_ASK_MS: a sender
 * seldom moves, and the question is a system call on every large frame
 * (its cost: docs/performance.md "Design figures"). */
static void follow_to(struct tent_rpc_conn *c, struct follow *f, long long now)
{
    if (f->cpu >= 0 && now - f->asked_ms < FOLLOW_ASK_MS)
        return;
    f->asked_ms = now;
    int cpu = -1;
    socklen_t len = sizeof(cpu);
    if (getsockopt(c->fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu, &len) || cpu < 0 ||
        cpu >= CPU_SETSIZE || cpu == f->cpu)
        return;
    if (f->cpu < 0 &&
        pthread_getaffinity_np(pthread_self(), sizeof(f->home), &f->home))
        return;
    if (!CPU_ISSET(cpu, &f->home)) /* a CPU this process may not use */
        return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (!pthread_setaffinity_np(pthread_self(), sizeof(one), &one))
        f->cpu = cpu;
}

/* Before serving a frame that moves data bytes: moves the worker to the
 * frame's CPU or back to its own.  True when the frame counts in big_frames
 * (the caller then calls follow_frame_end after it). */
static bool follow_frame_begin(struct tent_rpc_conn *c, uint64_t data,
                               struct follow *f)
{
    struct tent_rpc_server *s = c->srv;
    if (!c->loopback || data < FOLLOW_MIN) {
        follow_leave(f);
        return false;
    }
    int n = atomic_fetch_add(&s->big_frames, 1) + 1;
    long long now = tent_now_ms();
    if (2 * n > s->ncpus)
        atomic_store(&s->crowded_until_ms, now + CROWD_HOLD_MS);
    if (now < atomic_load(&s->crowded_until_ms))
        follow_to(c, f, now);
    else
        follow_leave(f);
    return true;
}

static void follow_frame_end(struct tent_rpc_conn *c)
{
    atomic_fetch_sub(&c->srv->big_frames, 1);
}

/* A frame of a type a transport serves: its handler, on the CPU f chooses
 * (*work: whether it counts as work), else the body is skipped and the
 * client told TENT_ENOTSUP (no transport here serves it). */
static int serve_installed(struct tent_rpc_conn *c,
                           const struct tent_wire_hdr *h, struct follow *f,
                           bool *work)
{
    struct frame_slot *fs = &c->srv->frames[h->type];
    pthread_rwlock_rdlock(&fs->lock);
    const struct tent_rpc_frame_ops *o = &fs->ops;
    int rc;
    uint64_t data = 0;
    if (!o->serve) {
        follow_leave(f);
        rc = drain(c, h->len);
        if (!rc)
            rc = send_resp(c, h->seq, TENT_ENOTSUP, NULL, 0);
    } else if (o->measure(o->ctx, h, c->in + c->in_pos, c->in_len - c->in_pos,
                          &data)) {
        LOG_WARN("rpc: dropping connection from %s: %s: %s", c->peer, o->owner,
                 tent_last_error());
        rc = -1;
    } else {
        bool counted = follow_frame_begin(c, data, f);
        rc = o->serve(o->ctx, c, h);
        if (counted)
            follow_frame_end(c);
        *work = o->work;
    }
    pthread_rwlock_unlock(&fs->lock);
    return rc;
}

/* Serves the frame whose header is whole in in[], on the CPU f chooses.
 * 0 keeps the connection, -1 drops it. */
static int serve_frame(struct tent_rpc_conn *c, struct follow *f)
{
    struct tent_wire_hdr h;
    if (tent_wire_decode_hdr(c->in + c->in_pos, TENT_WIRE_HDR_LEN, &h)) {
        LOG_WARN("rpc: dropping connection from %s: %s", c->peer,
                 tent_last_error());
        return -1;
    }
    c->in_pos += TENT_WIRE_HDR_LEN;
    atomic_store(&c->state, CS_FRAME);
    bool work = false;
    int rc;
    switch (h.type) {
    case TENT_WIRE_DESC_REQ:
        follow_leave(f);
        rc = serve_desc(c, &h);
        break;
    case TENT_WIRE_NOTIFY:
        follow_leave(f);
        rc = serve_notify(c, &h);
        break;
    case TENT_WIRE_DESC_RESP:
    case TENT_WIRE_RESP:
        LOG_WARN("rpc: dropping connection from %s: frame type %u is not a "
                 "request",
                 c->peer, h.type);
        rc = -1;
        break;
    default:
        rc = serve_installed(c, &h, f, &work);
    }
    if (rc) {
        LOG_DEBUG("rpc: connection from %s closed after frame type %u", c->peer,
                  h.type);
        return -1;
    }
    frame_end(c, work);
    return 0;
}

/* ---- holding connections ------------------------------------------------ */

static void unlink_locked(struct tent_rpc_server *s, struct tent_rpc_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (!atomic_load(&c->closing))
        s->nlive--;
}

/* The holder closes c: answers already gathered go first when flush. */
static void conn_close(struct tent_rpc_conn *c, bool flush)
{
    struct tent_rpc_server *s = c->srv;
    if (flush)
        (void)flush_out(c); /* answers to the requests before the end */
    pthread_mutex_lock(&s->lock);
    unlink_locked(s, c);
    pthread_mutex_unlock(&s->lock);
    close(c->fd);
    free(c);
}

/* Decides that c must go: its holder sees the shut-down socket (or the
 * flag) and closes it.  False when it was already going.  Caller holds
 * lock. */
static bool kill_locked(struct tent_rpc_server *s, struct tent_rpc_conn *c)
{
    if (atomic_load(&c->closing))
        return false;
    atomic_store(&c->closing, true);
    s->nlive--;
    shutdown(c->fd, SHUT_RDWR);
    return true;
}

void tent_rpc_conn_abort(struct tent_rpc_conn *c)
{
    struct tent_rpc_server *s = c->srv;
    pthread_mutex_lock(&s->lock);
    kill_locked(s, c);
    pthread_mutex_unlock(&s->lock);
}

/* Arms c in the epoll set: the loop holds it from now on (the caller must
 * not touch it after a success). */
static int arm(struct tent_rpc_server *s, struct tent_rpc_conn *c, int op)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT,
                             .data.ptr = c};
    return epoll_ctl(s->ep, op, c->fd, &ev);
}

/* A worker gives c back to the loop, or closes it when it is going. */
static void give_back(struct tent_rpc_server *s, struct tent_rpc_conn *c)
{
    pthread_mutex_lock(&s->lock);
    bool going = atomic_load(&c->closing) || atomic_load(&s->stop);
    if (!going)
        c->on_worker = false;
    pthread_mutex_unlock(&s->lock);
    if (going || arm(s, c, EPOLL_CTL_MOD) != 0)
        conn_close(c, false);
}

/* The handshake of common/auth.h, the first bytes of a connection when the
 * server has a secret; within the frame deadline its first byte started.
 * 0 when the client proved the secret. */
static int authenticate(struct tent_rpc_conn *c)
{
    struct tent_rpc_server *s = c->srv;
    struct tent_auth_server_state st;
    uint8_t hello[TENT_AUTH_HELLO_LEN], ident[TENT_AUTH_MAX_IDENT];
    uint8_t reply[TENT_AUTH_REPLY_LEN], proof[TENT_AUTH_MAC_LEN];
    size_t il = 0;
    int rc = -1;
    atomic_store(&c->state, CS_FRAME);
    /* the first 8 bytes tell a hello from a frame: a client without the
     * secret is refused at once, not after a timeout */
    if (!srv_recv(c, hello, 8) && tent_auth_hello_start(hello) &&
        !srv_recv(c, hello + 8, sizeof(hello) - 8) &&
        !tent_auth_hello_parse(hello, &st, &il) && !srv_recv(c, ident, il) &&
        !tent_auth_server_reply(s->lim.auth, &st, ident, reply)) {
        struct iovec iov = {reply, sizeof(reply)};
        if (!srv_send(c, &iov, 1) && !srv_recv(c, proof, sizeof(proof)) &&
            tent_auth_server_check(s->lim.auth, &st, proof))
            rc = 0;
    }
    if (rc) {
        atomic_fetch_add(&s->auth_refused, 1);
        tm_add(tm_shard(s->lim.metrics), TM_AUTH_REFUSED, 0, 0, 1);
        unsigned long held;
        if (tent_log_ratelimit_ok(&s->auth_rl, LOG_EVERY_MS, &held))
            LOG_WARN("rpc: closing the connection from %s: it did not prove "
                     "the cluster secret (%lu more not logged)",
                     c->peer, held);
        return -1;
    }
    memcpy(c->ident, st.ident, sizeof(c->ident));
    c->authed = true;
    frame_end(c, false);
    return 0;
}

/* A worker serves frames on c (a whole header is in) while they come. */
static void serve_conn(struct tent_rpc_server *s, struct tent_rpc_conn *c)
{
    struct follow f = {.cpu = -1};
    if (s->lim.auth && !c->authed) {
        int r = authenticate(c) ? -1 : header_in(c) ? 1 : await_header(c);
        if (r <= 0) {
            if (r < 0)
                conn_close(c, false);
            else
                give_back(s, c);
            return;
        }
    }
    for (;;) {
        if (atomic_load(&c->closing) || atomic_load(&s->stop) ||
            serve_frame(c, &f)) {
            conn_close(c, true);
            break;
        }
        int r = await_header(c);
        if (r < 0) {
            conn_close(c, true);
            break;
        }
        if (r == 0) {
            give_back(s, c);
            break;
        }
    }
    follow_leave(&f);
}

static void idle_push(struct tent_rpc_server *s, struct worker *w)
{
    w->idle = true;
    w->iprev = NULL;
    w->inext = s->idle_top;
    if (s->idle_top)
        s->idle_top->iprev = w;
    s->idle_top = w;
}

static void idle_remove(struct tent_rpc_server *s, struct worker *w)
{
    if (w->iprev)
        w->iprev->inext = w->inext;
    else
        s->idle_top = w->inext;
    if (w->inext)
        w->inext->iprev = w->iprev;
    w->idle = false;
}

static struct tent_rpc_conn *dequeue_locked(struct tent_rpc_server *s)
{
    struct tent_rpc_conn *c = s->q_head;
    if (c) {
        s->q_head = c->qnext;
        if (!s->q_head)
            s->q_tail = NULL;
        s->queued--;
    }
    return c;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct tent_rpc_server *s = w->srv;
    pthread_setname_np(pthread_self(), "tent-rpc-w");
    pthread_mutex_lock(&s->lock);
    for (;;) {
        struct tent_rpc_conn *c = w->job ? w->job : dequeue_locked(s);
        w->job = NULL;
        if (c) {
            pthread_mutex_unlock(&s->lock);
            serve_conn(s, c);
            pthread_mutex_lock(&s->lock);
            continue;
        }
        if (atomic_load(&s->stop))
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += WORKER_IDLE_MS / 1000;
        idle_push(s, w);
        int rc = 0;
        while (!w->job && !atomic_load(&s->stop) && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&w->cv, &s->lock, &ts);
        if (w->idle)
            idle_remove(s, w); /* a job was given: already off the stack */
        if (!w->job && !atomic_load(&s->stop) && rc == ETIMEDOUT &&
            s->nworkers > WORKERS_KEPT)
            break;
    }
    s->nworkers--;
    w->done = true;
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Starts a worker whose first job is c.  Caller holds lock. */
static int spawn_locked(struct tent_rpc_server *s, struct tent_rpc_conn *c)
{
    struct worker *w = calloc(1, sizeof(*w));
    if (!w)
        return -1;
    w->srv = s;
    w->job = c;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        free(w);
        return -1;
    }
    w->next = s->workers;
    s->workers = w;
    s->nworkers++;
    return 0;
}

/* Gives c to the worker idle the shortest time, else to a new one.  -1
 * when no worker could be started (c then waits on the queue).  Caller
 * holds lock. */
static int dispatch_locked(struct tent_rpc_server *s, struct tent_rpc_conn *c)
{
    struct worker *w = s->idle_top;
    if (w) {
        idle_remove(s, w);
        w->job = c;
        pthread_cond_signal(&w->cv);
        return 0;
    }
    if (spawn_locked(s, c) == 0)
        return 0;
    c->qnext = NULL;
    if (s->q_tail)
        s->q_tail->qnext = c;
    else
        s->q_head = c;
    s->q_tail = c;
    s->queued++;
    return -1;
}

/* The loop hands c, a whole header in, to a worker. */
static void hand_off(struct tent_rpc_server *s, struct tent_rpc_conn *c)
{
    pthread_mutex_lock(&s->lock);
    c->on_worker = true;
    if (dispatch_locked(s, c) != 0)
        LOG_WARN("rpc: cannot start a worker thread (%d running); the "
                 "request from %s waits for a busy one",
                 s->nworkers, c->peer);
    pthread_mutex_unlock(&s->lock);
}

/* Joins workers that have ended. */
static void reap_workers(struct tent_rpc_server *s)
{
    struct worker *done = NULL;
    pthread_mutex_lock(&s->lock);
    for (struct worker **pp = &s->workers; *pp;) {
        struct worker *w = *pp;
        if (!w->done) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        w->next = done;
        done = w;
    }
    pthread_mutex_unlock(&s->lock);
    while (done) {
        struct worker *w = done;
        done = w->next;
        pthread_join(w->thread, NULL);
        pthread_cond_destroy(&w->cv);
        free(w);
    }
}

/* ---- whom a newcomer replaces ------------------------------------------- */

/* Whom a newcomer replaces when the server is full.  A connection's work is
 * the bytes its data frames (types whose handler counts them as work)
 * moved, each such frame that succeeded counting at least FRAME_CREDIT,
 * halved every WORK_HALF_LIFE_MS since the last one: a peer's pooled data
 * connection scores above zero until the idle timeout closes it; one that
 * only fetched descriptors or sent notifications, or never finished a data
 * frame, scores zero.  A frame is slow once in progress for SLOW_GRACE_MS
 * at under rpc_frame_min_rate bytes a second overall.  The order:
 *   0. zero work, inside a slow frame: the oldest frame first;
 *   1. zero work, between frames: the longest idle first (a connection just
 *      opened comes last);
 *   2. zero work, inside a frame that keeps the floor rate: oldest first;
 *   3. some work, inside a slow frame or between frames: least work first.
 * A connection with work inside a frame that keeps the floor rate is never
 * replaced (-1); when every connection is one, the newcomer is refused.  So
 * to hold a slot against peers that move data, a client must move data
 * itself, on every connection it holds.
 *
 * Returns c's tier (lower goes first); *key orders within it (lower first). */
static int rank(const struct tent_rpc_server *s, const struct tent_rpc_conn *c,
                long long now, uint64_t *key)
{
    uint64_t w = work_now(c, now);
    bool in_frame = atomic_load(&c->state) != CS_IDLE;
    long long start = atomic_load(&c->frame_start_ms);
    bool slow = false;
    if (in_frame) {
        long long age = now - start;
        slow = s->lim.min_frame_rate > 0 && age >= SLOW_GRACE_MS &&
               atomic_load(&c->frame_bytes) * 1000 <
                   (uint64_t)s->lim.min_frame_rate * (uint64_t)age;
    }
    if (w == 0) {
        long long t = slow || in_frame ? start : atomic_load(&c->last_ms);
        *key = t > 0 ? (uint64_t)t : 0;
        return slow ? 0 : in_frame ? 2 : 1;
    }
    *key = w;
    return slow || !in_frame ? 3 : -1;
}

/* Caller holds lock. */
static struct tent_rpc_conn *pick_victim_locked(struct tent_rpc_server *s,
                                                long long now)
{
    struct tent_rpc_conn *best = NULL;
    int best_tier = 4;
    uint64_t best_key = 0;
    for (struct tent_rpc_conn *c = s->conns; c; c = c->next) {
        if (atomic_load(&c->closing))
            continue;
        uint64_t key;
        int tier = rank(s, c, now, &key);
        if (tier < 0)
            continue;
        /* the list is newest first: on a tie (same millisecond, same
         * work) the older connection, found later, goes */
        if (tier < best_tier || (tier == best_tier && key <= best_key)) {
            best = c;
            best_tier = tier;
            best_key = key;
        }
    }
    return best;
}

/* Closes v to make room.  Caller holds lock. */
static void evict_locked(struct tent_rpc_server *s, struct tent_rpc_conn *v,
                         const char *for_peer, long long now)
{
    bool working = work_now(v, now) > 0;
    kill_locked(s, v);
    s->evicted++;
    s->evicted_working += working;
    unsigned long held;
    if (tent_log_ratelimit_ok(&s->evict_rl, LOG_EVERY_MS, &held))
        LOG_WARN("rpc: %d connections open (rpc_max_connections): closing "
                 "%s connection from %s to admit %s (%lu more evictions not "
                 "logged)",
                 s->cap, working ? "the least used" : "an unproductive",
                 v->peer, for_peer, held);
}

/* ---- admission ---------------------------------------------------------- */

static void peer_name(int fd, char *buf, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv,
                    sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(buf, cap, "?");
        return;
    }
    tent_net_format_hostport(buf, cap, host, (unsigned)atoi(serv));
}

/* Takes in one accepted socket: replaces a connection to make room when
 * full, or refuses it when none may be replaced. */
static void admit(struct tent_rpc_server *s, int fd)
{
    struct tent_rpc_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        LOG_WARN("rpc: refusing a connection: out of memory");
        close(fd);
        return;
    }
    long long now = tent_now_ms();
    c->srv = s;
    c->fd = fd;
    tent_rpc_tune_loopback(fd, s->lim.loopback_cc);
    c->loopback = s->lim.loopback_follow_cpu && tent_net_is_loopback_pair(fd);
    peer_name(fd, c->peer, sizeof(c->peer));
    atomic_init(&c->state, CS_IDLE);
    atomic_init(&c->last_ms, now);
    atomic_init(&c->work_ms, now);

    pthread_mutex_lock(&s->lock);
    if (s->nlive >= s->cap) {
        struct tent_rpc_conn *v = pick_victim_locked(s, now);
        if (!v) {
            s->refused++;
            int open = s->nlive;
            pthread_mutex_unlock(&s->lock);
            unsigned long held;
            if (tent_log_ratelimit_ok(&s->refuse_rl, LOG_EVERY_MS, &held))
                LOG_WARN("rpc: refusing a connection from %s: all %d "
                         "connections (rpc_max_connections) are peers "
                         "moving data (%lu more refusals not logged)",
                         c->peer, open, held);
            close(fd);
            free(c);
            return;
        }
        evict_locked(s, v, c->peer, now);
    }
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nlive++;
    s->accepted++;
    pthread_mutex_unlock(&s->lock);
    if (arm(s, c, EPOLL_CTL_ADD) != 0) {
        LOG_WARN("rpc: dropping the connection from %s: epoll_ctl failed: %s",
                 c->peer, strerror(errno));
        conn_close(c, false);
    }
}

static void listen_pause(struct tent_rpc_server *s, long long now)
{
    s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (s->backoff_ms > BACKOFF_MAX_MS)
        s->backoff_ms = BACKOFF_MAX_MS;
    s->resume_ms = now + s->backoff_ms;
    pthread_mutex_lock(&s->lock);
    if (s->listening) {
        for (int i = 0; i < s->nlfd; i++)
            (void)epoll_ctl(s->ep, EPOLL_CTL_DEL, s->lfds[i], NULL);
        s->listening = false;
    }
    pthread_mutex_unlock(&s->lock);
}

static int listen_arm(struct tent_rpc_server *s, int i)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->lfds[i]};
    return epoll_ctl(s->ep, EPOLL_CTL_ADD, s->lfds[i], &ev);
}

static void listen_resume(struct tent_rpc_server *s)
{
    pthread_mutex_lock(&s->lock);
    if (!s->listening) {
        bool ok = true;
        for (int i = 0; i < s->nlfd; i++)
            ok &= listen_arm(s, i) == 0 || errno == EEXIST;
        s->listening = ok;
    }
    pthread_mutex_unlock(&s->lock);
}

/* Which listening socket an epoll event names, or -1. */
static int listener_of(struct tent_rpc_server *s, const void *p)
{
    const int *q = p;
    if (q >= s->lfds && q < s->lfds + TENT_RPC_MAX_LISTEN)
        return *q;
    return -1;
}

/* accept() on lfd ran out of descriptors (err: EMFILE or ENFILE): something
 * else holds them.  A reserve descriptor is given up to accept the waiting
 * connection and close it at once -- a refusal, counted and logged
 * (rate-limited) -- instead of leaving it queued to wake the loop again and
 * again; the cap drops below the connections open, so later newcomers
 * replace connections instead of meeting the limit; accepting pauses
 * (BACKOFF_MIN_MS, doubling to BACKOFF_MAX_MS while the shortage lasts);
 * the cap comes back FD_RECOVER_MS after the last shortage. */
static void out_of_fds(struct tent_rpc_server *s, int lfd, int err)
{
    long long now = tent_now_ms();
    char peer[64] = "a client";
    bool drained = false;
    if (s->reserve_fd >= 0) {
        close(s->reserve_fd);
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            peer_name(fd, peer, sizeof(peer));
            close(fd);
            drained = true;
        }
        s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    pthread_mutex_lock(&s->lock);
    s->refused++;
    s->refused_no_fd++;
    int open = s->nlive, was = s->cap;
    /* below what is open, with room for the sockets of newcomers */
    int headroom = open / 16 > 8 ? open / 16 : 8;
    int cap = open - headroom > 1 ? open - headroom : 1;
    if (cap < s->cap)
        s->cap = cap;
    while (s->nlive > s->cap) {
        struct tent_rpc_conn *v = pick_victim_locked(s, now);
        if (!v)
            break;
        evict_locked(s, v, "newcomers", now);
    }
    cap = s->cap;
    s->fd_short_ms = now;
    pthread_mutex_unlock(&s->lock);
    unsigned long held;
    if (tent_log_ratelimit_ok(&s->fd_rl, LOG_EVERY_MS, &held))
        LOG_WARN("rpc: refusing %s: out of descriptors (%s) with %d "
                 "connections open; the connection cap is now %d (was %d, "
                 "rpc_max_connections %d) (%lu more refusals not logged)",
                 drained ? peer : "a connection", strerror(err), open, cap, was,
                 s->lim.max_conns, held);
    listen_pause(s, now);
}

static void accept_some(struct tent_rpc_server *s, int lfd)
{
    for (int k = 0; k < ACCEPT_BATCH && !atomic_load(&s->stop); k++) {
        int fd = tent_net_accept(lfd, IO_TICK_MS);
        if (fd >= 0) {
            s->backoff_ms = 0;
            admit(s, fd);
            continue;
        }
        switch (-fd) {
        case EAGAIN:
            return;
        case EINTR:
        case ECONNABORTED:
        case EPROTO:
        case EPERM:
            continue; /* that client went away; others may wait */
        case EMFILE:
        case ENFILE:
            out_of_fds(s, lfd, -fd);
            return;
        default: /* ENOBUFS, ENOMEM: wait for the system to recover */
            LOG_WARN("rpc: accept failed: %s; pausing new connections",
                     strerror(-fd));
            listen_pause(s, tent_now_ms());
            return;
        }
    }
}

/* ---- the loop ----------------------------------------------------------- */

/* A connection the loop holds is readable (or closing, or closed). */
static void conn_event(struct tent_rpc_server *s, struct tent_rpc_conn *c)
{
    /* the lock also orders the holder's last writes before ours */
    pthread_mutex_lock(&s->lock);
    bool going = atomic_load(&c->closing);
    pthread_mutex_unlock(&s->lock);
    if (going) {
        conn_close(c, false);
        return;
    }
    long r = read_some(c);
    if (header_in(c))
        hand_off(s, c);
    else if (r < 0 || arm(s, c, EPOLL_CTL_MOD) != 0)
        conn_close(c, false);
}

/* Every TICK_MS: deadlines of the connections the loop holds, the cap's
 * recovery after a descriptor shortage, ended workers. */
static void housekeeping(struct tent_rpc_server *s, long long now)
{
    pthread_mutex_lock(&s->lock);
    for (struct tent_rpc_conn *c = s->conns; c; c = c->next) {
        if (c->on_worker || atomic_load(&c->closing))
            continue;
        int st = atomic_load(&c->state);
        if (st != CS_IDLE && now >= c->deadline_ms) {
            kill_locked(s, c);
            atomic_fetch_add(&s->frame_timeouts, 1);
            LOG_DEBUG("rpc: %s: dropping a frame not whole within %d ms",
                      c->peer, s->lim.frame_timeout_ms);
        } else if (st == CS_IDLE &&
                   now - atomic_load(&c->last_ms) >= s->lim.idle_timeout_ms) {
            kill_locked(s, c);
            atomic_fetch_add(&s->idle_closed, 1);
            LOG_DEBUG("rpc: %s: closing a connection idle for %d ms", c->peer,
                      s->lim.idle_timeout_ms);
        }
    }
    if (s->cap < s->sized_cap && now - s->fd_short_ms >= FD_RECOVER_MS) {
        LOG_INFO("rpc: no descriptor shortage for %d s: the connection cap "
                 "is %d again",
                 FD_RECOVER_MS / 1000, s->sized_cap);
        s->cap = s->sized_cap;
    }
    if (s->queued && s->nworkers == 0) {
        struct tent_rpc_conn *c = dequeue_locked(s);
        if (dispatch_locked(s, c) != 0)
            LOG_WARN("rpc: cannot start a worker thread; %d request(s) wait",
                     s->queued);
    }
    pthread_mutex_unlock(&s->lock);
    reap_workers(s);
    if (s->reserve_fd < 0)
        s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void *loop_main(void *arg)
{
    struct tent_rpc_server *s = arg;
    pthread_setname_np(pthread_self(), "tent-rpc");
    struct epoll_event ev[MAX_EVENTS];
    long long next_tick = tent_now_ms() + TICK_MS;
    while (!atomic_load(&s->stop)) {
        long long now = tent_now_ms();
        long long until = next_tick;
        if (!s->listening && s->resume_ms < until)
            until = s->resume_ms;
        int n = epoll_wait(s->ep, ev, MAX_EVENTS,
                           until > now ? (int)(until - now) : 0);
        for (int i = 0; i < n && !atomic_load(&s->stop); i++) {
            void *p = ev[i].data.ptr;
            if (p == &s->wake_fd)
                continue; /* stop is set */
            int lfd = listener_of(s, p);
            if (lfd >= 0)
                accept_some(s, lfd);
            else
                conn_event(s, p);
        }
        now = tent_now_ms();
        if (!s->listening && now >= s->resume_ms)
            listen_resume(s);
        if (now >= next_tick) {
            housekeeping(s, now);
            next_tick = now + TICK_MS;
        }
    }
    return NULL;
}

/* ---- start, stop, stats ------------------------------------------------- */

/* The soft descriptor limit up to the hard one (sized_cap: once per
 * process). */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = rl.rlim_max;
    if (want == RLIM_INFINITY || want > NOFILE_CEILING)
        want = NOFILE_CEILING;
    if (rl.rlim_cur >= want)
        return;
    unsigned long long was = (unsigned long long)rl.rlim_cur;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
        LOG_INFO("rpc: raised the soft descriptor limit (RLIMIT_NOFILE) "
                 "from %llu to %llu (the hard limit)",
                 was, (unsigned long long)want);
    else
        LOG_WARN("rpc: cannot raise the soft descriptor limit "
                 "(RLIMIT_NOFILE) from %llu to %llu: %s",
                 was, (unsigned long long)want, strerror(errno));
}

/* The process that last raised the limit: a child forked after an engine
 * started is another process (it may have lowered its own limit). */
static pthread_mutex_t nofile_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t nofile_pid;

/* The connection cap the descriptor limit allows: three quarters of the
 * soft limit (at least 64 descriptors kept for the rest), leaving a quarter
 * to the engine's other descriptors (tcp pools, shm mappings, the metrics
 * endpoint) and to the application. */
static int sized_cap(int want)
{
    pthread_mutex_lock(&nofile_lock);
    if (nofile_pid != getpid()) {
        raise_nofile();
        nofile_pid = getpid();
    }
    pthread_mutex_unlock(&nofile_lock);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return want;
    unsigned long long soft = (unsigned long long)rl.rlim_cur;
    unsigned long long keep = soft / 4 > 64 ? soft / 4 : 64;
    unsigned long long fit = soft > keep ? soft - keep : 1;
    if (fit >= (unsigned long long)want)
        return want;
    LOG_WARN("rpc: rpc_max_connections %d does not fit the descriptor limit: "
             "at most %llu connections (RLIMIT_NOFILE %llu, hard %llu; a "
             "quarter is kept for the engine's other descriptors)",
             want, fit, soft, (unsigned long long)rl.rlim_max);
    return (int)fit;
}

void tent_rpc_server_stats(struct tent_rpc_server *s,
                           struct tent_rpc_stats *out)
{
    long long now = tent_now_ms();
    pthread_mutex_lock(&s->lock);
    out->accepted = s->accepted;
    out->evicted = s->evicted;
    out->evicted_working = s->evicted_working;
    out->refused = s->refused;
    out->refused_no_fd = s->refused_no_fd;
    out->open = s->nlive;
    out->max_conns = s->cap;
    out->workers = s->nworkers;
    out->busy = 0;
    for (struct tent_rpc_conn *c = s->conns; c; c = c->next) {
        uint64_t key;
        out->busy += !atomic_load(&c->closing) && rank(s, c, now, &key) < 0;
    }
    pthread_mutex_unlock(&s->lock);
    out->idle_closed = atomic_load(&s->idle_closed);
    out->frame_timeouts = atomic_load(&s->frame_timeouts);
    out->auth_refused = atomic_load(&s->auth_refused);
    out->notify_spoofed = atomic_load(&s->notify_spoofed);
}

int tent_rpc_server_start(const struct tent_rpc_handlers *h,
                          const struct tent_rpc_limits *lim, const char *host,
                          uint16_t port, struct tent_rpc_server **out,
                          uint16_t *bound_port)
{
    static const struct tent_rpc_limits defaults = {
        .max_conns = TENT_RPC_DEFAULT_MAX_CONNS,
        .idle_timeout_ms = TENT_RPC_DEFAULT_IDLE_MS,
        .frame_timeout_ms = TENT_RPC_DEFAULT_FRAME_MS,
        .min_frame_rate = TENT_RPC_DEFAULT_MIN_RATE,
        .loopback_cc = TENT_RPC_CC_DEFAULT,
        .loopback_follow_cpu = TENT_RPC_FOLLOW_DEFAULT,
        .spin_us = TENT_RPC_DEFAULT_SPIN_US,
    };
    if (!lim)
        lim = &defaults;
    if (lim->max_conns < 1 || lim->idle_timeout_ms < 1 ||
        lim->frame_timeout_ms < 1 || lim->min_frame_rate < 0 ||
        lim->spin_us < 0 || lim->spin_us > TENT_RPC_MAX_SPIN_US)
        return tent_set_error(TENT_EINVAL,
                              "rpc server: limits must be positive (max "
                              "connections %d, idle %d ms, frame %d ms, "
                              "floor rate %d B/s, spin %d us)",
                              lim->max_conns, lim->idle_timeout_ms,
                              lim->frame_timeout_ms, lim->min_frame_rate,
                              lim->spin_us);
    /* non-blocking: a connection reset between epoll and accept must not
     * stall the loop */
    int rc, lfd;
    uint16_t real;
    int nrc = tent_net_listen(host, port, true, &lfd, &real);
    if (tent_net_is_resolve_error(nrc))
        return tent_set_error(TENT_ECONFIG,
                              "rpc_server_hostname '%s' does not resolve: %s",
                              host, tent_net_strerror(nrc));
    if (nrc)
        return tent_set_error(TENT_EPEER, "rpc server: cannot bind %s:%u: %s",
                              host, (unsigned)port, tent_net_strerror(nrc));
    /* a longer queue than tent_net_listen's: a burst of connections waits
     * there instead of in the kernel's handshake retries (1 s, 3 s, ...) */
    (void)listen(lfd, LISTEN_BACKLOG);

    struct tent_rpc_server *s = calloc(1, sizeof(*s));
    if (!s) {
        rc = tent_set_error(TENT_ENOMEM, "rpc server: out of memory");
        goto fail_alloc;
    }
    s->h = *h;
    s->lim = *lim;
    s->lim.loopback_cc[TENT_RPC_CC_MAX - 1] = 0;
    cpu_set_t cpus;
    s->ncpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0
                   ? CPU_COUNT(&cpus)
                   : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (s->ncpus < 1)
        s->ncpus = 1;
    s->lfds[0] = lfd;
    s->nlfd = 1;
    pthread_mutex_init(&s->lock, NULL);
    s->sized_cap = s->cap = sized_cap(lim->max_conns);
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->wake_fd < 0) {
        rc = tent_set_error(TENT_ENOMEM, "rpc server: eventfd failed: %s",
                            strerror(errno));
        goto fail_event;
    }
    s->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &s->wake_fd};
    if (s->ep < 0 || epoll_ctl(s->ep, EPOLL_CTL_ADD, s->wake_fd, &wev) != 0) {
        rc = tent_set_error(TENT_ENOMEM, "rpc server: epoll failed: %s",
                            strerror(errno));
        goto fail_epoll;
    }
    listen_resume(s);
    if (!s->listening) {
        rc = tent_set_error(TENT_ENOMEM, "rpc server: epoll failed: %s",
                            strerror(errno));
        goto fail_epoll;
    }
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (size_t i = 0; i < sizeof(s->frames) / sizeof(s->frames[0]); i++)
        pthread_rwlock_init(&s->frames[i].lock, NULL);
    if (pthread_create(&s->loop_thread, NULL, loop_main, s) != 0) {
        rc = tent_set_error(TENT_ENOMEM, "rpc server: cannot start a thread");
        goto fail_thread;
    }
    LOG_INFO("rpc server listening on %s:%u (at most %d connections)", host,
             (unsigned)real, s->cap);
    *out = s;
    *bound_port = real;
    return TENT_OK;

fail_thread:
    for (size_t i = 0; i < sizeof(s->frames) / sizeof(s->frames[0]); i++)
        pthread_rwlock_destroy(&s->frames[i].lock);
    if (s->reserve_fd >= 0)
        close(s->reserve_fd);
fail_epoll:
    if (s->ep >= 0)
        close(s->ep);
    close(s->wake_fd);
fail_event:
    pthread_mutex_destroy(&s->lock);
    free(s);
fail_alloc:
    close(lfd);
    return rc;
}

void tent_rpc_server_stop(struct tent_rpc_server *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->stop, true);
    for (struct worker *w = s->workers; w; w = w->next)
        pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&s->lock);
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof(one)) < 0)
        LOG_DEBUG("rpc server: wake-up write failed: %s", strerror(errno));
    pthread_join(s->loop_thread, NULL);
    /* Workers see their sockets shut down (or stop) and close them. */
    pthread_mutex_lock(&s->lock);
    for (struct tent_rpc_conn *c = s->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    struct worker *w = s->workers;
    s->workers = NULL;
    pthread_mutex_unlock(&s->lock);
    while (w) {
        struct worker *next = w->next;
        pthread_join(w->thread, NULL);
        pthread_cond_destroy(&w->cv);
        free(w);
        w = next;
    }
    /* What is left has no holder any more: armed or queued. */
    while (s->conns)
        conn_close(s->conns, false);
    for (int i = 0; i < s->nlfd; i++)
        close(s->lfds[i]);
    close(s->ep);
    close(s->wake_fd);
    if (s->reserve_fd >= 0)
        close(s->reserve_fd);
    for (size_t i = 0; i < sizeof(s->frames) / sizeof(s->frames[0]); i++)
        pthread_rwlock_destroy(&s->frames[i].lock);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int tent_rpc_server_listen(struct tent_rpc_server *s, const char *host,
                           uint16_t port, uint16_t *bound_port)
{
    if (!s || !host || !bound_port)
        return tent_set_error(TENT_ENULL,
                              "rpc server: server, host or port is NULL");
    int lfd;
    uint16_t real;
    int nrc = tent_net_listen(host, port, true, &lfd, &real);
    if (nrc)
        return tent_set_error(tent_net_is_resolve_error(nrc) ? TENT_ECONFIG
                                                             : TENT_EPEER,
                              "rpc server: cannot listen on %s:%u: %s", host,
                              (unsigned)port, tent_net_strerror(nrc));
    (void)listen(lfd, LISTEN_BACKLOG);
    int rc = TENT_OK;
    pthread_mutex_lock(&s->lock);
    if (s->nlfd == TENT_RPC_MAX_LISTEN) {
        rc = tent_set_error(TENT_EOVERFLOW,
                            "rpc server: already listening on %d addresses",
                            TENT_RPC_MAX_LISTEN);
    } else {
        s->lfds[s->nlfd] = lfd;
        /* while accepting is paused, the loop arms it when it resumes */
        if (s->listening && listen_arm(s, s->nlfd) != 0)
            rc = tent_set_error(TENT_ENOMEM, "rpc server: epoll failed: %s",
                                strerror(errno));
        else
            s->nlfd++;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc) {
        close(lfd);
        return rc;
    }
    LOG_INFO("rpc server also listening on %s:%u", host, (unsigned)real);
    *bound_port = real;
    return TENT_OK;
}

int tent_rpc_server_handle(struct tent_rpc_server *s, uint8_t type,
                           const struct tent_rpc_frame_ops *ops)
{
    if (!s)
        return tent_set_error(TENT_ENULL, "rpc server: server is NULL");
    if (type == 0 || type == TENT_WIRE_DESC_REQ ||
        type == TENT_WIRE_DESC_RESP || type == TENT_WIRE_NOTIFY ||
        type == TENT_WIRE_RESP)
        return tent_set_error(TENT_EINVAL,
                              "rpc server: frame type %u is the server's own",
                              (unsigned)type);
    if (ops &&
        (!ops->serve || !ops->measure || ops->prefix > TENT_RPC_MAX_PREFIX))
        return tent_set_error(TENT_EINVAL,
                              "rpc server: the handler of frame type %u needs "
                              "serve and measure and a prefix of at most %d "
                              "bytes",
                              (unsigned)type, TENT_RPC_MAX_PREFIX);
    struct frame_slot *f = &s->frames[type];
    pthread_rwlock_wrlock(&f->lock);
    int rc = TENT_OK;
    const struct tent_rpc_frame_ops *o = &f->ops;
    if (ops && o->serve &&
        (o->serve != ops->serve || o->measure != ops->measure ||
         o->ctx != ops->ctx || o->prefix != ops->prefix ||
         o->work != ops->work))
        rc = tent_set_error(TENT_EEXIST,
                            "rpc server: frame type %u is already served "
                            "(by %s)",
                            (unsigned)type,
                            f->ops.owner ? f->ops.owner : "another handler");
    else if (ops)
        f->ops = *ops;
    else
        memset(&f->ops, 0, sizeof(f->ops));
    pthread_rwlock_unlock(&f->lock);
    if (!rc && ops) {
        /* only grows: a removed handler's prefix stays (a longer first
         * read only takes a few body bytes more into in[]) */
        unsigned cur = atomic_load(&s->max_prefix);
        while (ops->prefix > cur &&
               !atomic_compare_exchange_weak(&s->max_prefix, &cur, ops->prefix))
            ;
    }
    return rc;
}
