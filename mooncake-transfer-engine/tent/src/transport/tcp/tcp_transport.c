/* tcp transport, initiator half: reads and writes against a peer engine's
 * registered memory, served by the peer's RPC server (READ/WRITE frames,
 * handled by the peer's tcp_target.c).
 *
 * Requests are cut into slices of at most slice_size bytes and queued on
 * the target peer.  Each peer has a small pool of connections, each driven
 * by its own worker thread, so a slow peer holds only its own workers and a
 * large request is spread over the pool while small ones interleave with
 * it.  A worker takes a window of slices of one opcode (so that only one
 * direction carries bulk data and neither side can block the other), sends
 * every request, then reads the answers in order.  A window carries at most
 * slice_size bytes of data (or WINDOW_SLICES slices), so that a batch of
 * many blocks is spread over the connections like one large request is.
 *
 * One state machine moves a window on a connection (conn_step): sockets are
 * non-blocking, a worker waits in poll() between steps, and every wait has
 * a deadline: timeout_ms for sending the whole window, then timeout_ms for
 * each answer, however slowly its bytes trickle in.  A connection-level
 * failure fails the window and every slice still queued on the peer, so a
 * whole batch turns FAILED within about one timeout.
 *
 * Small submits (at most INLINE_BYTES to a peer, one opcode) skip the
 * hand-off to a worker: the submitting thread borrows an idle worker's
 * connection (the worker stays asleep), sends the window without blocking
 * and returns; status calls on the peer's tasks (and quiesce) move the
 * borrowed window on with the same non-blocking steps until its answers are
 * in, then give the connection back.  So tent_submit never waits on the
 * network, and a small transfer costs one round trip without a thread
 * hand-off.  One connection per peer is lent at a time; the rest of the
 * pool keeps serving the queue.
 *
 * Causes: a failure is recorded per task (the first one) with our code, the
 * errno or the peer's answer, and a message naming the peer; the window's
 * connection failure is logged once, where it is seen. */
#include "common/clock.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "metrics/metrics.h"
#include "transport/tcp/tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_CONNS     16
#define WINDOW_SLICES 64
/* A submit whose slices to one peer carry at most this many bytes is sent
 * from the submitting thread over a borrowed idle connection. */
#define INLINE_BYTES (64u << 10)
/* Answers larger than this skip the connection's input buffer. */
#define DIRECT_MIN 16384

struct tcp_sub;
struct tcp_transport;

struct slice {
    struct tcp_sub *sb;
    uint32_t slot;
    int opcode;
    char *local;
    uint64_t remote;
    uint32_t len;
    struct slice *next;
};

struct tcp_peer;

struct tcp_task {
    atomic_uint remaining;           /* slices not yet terminal */
    atomic_int code;                 /* the first failure's code, 0 if none */
    _Atomic(struct tent_xerr *) err; /* its cause (NULL: out of memory) */
    uint64_t length;
    struct tcp_peer *peer; /* where its slices went */
};

struct tcp_sub {
    struct tent_sub_batch base;
    struct tcp_task *tasks;
};

/* A connection and the window in progress on it.  It belongs to one
 * worker, which alone touches it, except while it is lent (the worker is
 * asleep then and the holder of the peer's lend_lock moves it). */
struct tcp_conn {
    int fd; /* non-blocking; -1 when not connected */
    struct tent_net_inbuf nb;
    uint8_t inb[65536];
    /* the window: n slices, 0 when none */
    int n;
    struct slice *w[WINDOW_SLICES];
    int32_t status[WINDOW_SLICES];
    uint8_t hdrs[WINDOW_SLICES][TENT_WIRE_HDR_LEN + TENT_WIRE_RW_LEN];
    struct iovec iov[2 * WINDOW_SLICES];
    int iov_at, iov_n; /* send progress */
    int ri;            /* answers received whole */
    uint8_t rh[TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN];
    size_t rh_got;      /* bytes of answer ri's header received */
    uint32_t rdata;     /* bytes of answer ri's data received */
    uint32_t rdata_len; /* data answer ri carries (known once rh is whole) */
    long long deadline; /* ms: of the send, then of each answer */
};

/* lock guards queue/tail/stop/the idle stack/woken/lent/down; each worker
 * sleeps on its own wake[i] (with lock).  lend_lock guards the lent
 * connection's window; whoever holds it does non-blocking steps only.
 * Order: lend_lock, then lock.  No runtime lock is ever taken under either,
 * and t->lock is never taken with lock held (peers are found under t->lock,
 * which is dropped first).
 *
 * Idle workers form a stack: new work wakes the one that went idle last,
 * and only as many as it makes windows.  A lent worker is off the stack. */
struct tcp_peer {
    struct tcp_transport *t;
    char addr[320];
    char host[256];
    uint16_t port;
    pthread_mutex_t lock;
    pthread_cond_t wake[MAX_CONNS];
    bool woken[MAX_CONNS];
    int idle[MAX_CONNS]; /* worker indices, the last idle on top */
    int nidle;
    struct slice *queue, *tail;
    bool stop;
    int nworkers;
    struct tcp_conn *conns[MAX_CONNS]; /* conns[i] is worker i's */
    pthread_t workers[MAX_CONNS];
    bool down; /* the last connection or window failed (tent_peers) */
    pthread_mutex_t lend_lock;
    atomic_int lent; /* worker whose connection is lent, or -1 */
    struct tcp_peer *next;
};

/* lock guards peers and accepting; it is a leaf (taken alone). */
struct tcp_transport {
    struct tent_transport base;
    int timeout_ms;
    int nconns;
    uint32_t slice_size;
    pthread_mutex_t lock;
    struct tcp_peer *peers;
    bool accepting;
    bool serving;           /* the frame handlers are installed */
    atomic_size_t inflight; /* slices queued or in flight, all peers */
    /* The engine's metrics (NULL: off), taken at install: workers use it,
     * and it outlives an engine that abandoned this transport. */
    struct tent_metrics *metrics;
};

static struct tcp_transport *tcp_of(struct tent_transport *t)
{
    return (struct tcp_transport *)t;
}

/* tent_peers{transport="tcp",state}: moves one peer between states (or in
 * and out of the gauge when from or to is -1). */
static void peer_gauge(struct tcp_transport *t, int from, int to)
{
    struct tm_shard *s = tm_shard(t->metrics);
    unsigned x = TM_X(t->base.index);
    if (from >= 0)
        tm_gauge_add(s, TM_PEERS, x, (unsigned)from, -1);
    if (to >= 0)
        tm_gauge_add(s, TM_PEERS, x, (unsigned)to, 1);
}

/* Records whether the peer answered; counts state changes only. */
static void peer_mark(struct tcp_peer *p, bool down)
{
    pthread_mutex_lock(&p->lock);
    bool changed = p->down != down;
    p->down = down;
    pthread_mutex_unlock(&p->lock);
    if (changed)
        peer_gauge(p->t, down ? TM_PEER_UP : TM_PEER_DOWN,
                   down ? TM_PEER_DOWN : TM_PEER_UP);
}

/* ---- slices ---------------------------------------------------------------
 */

/* A slice's outcome.  code != 0 is a failure with its native code and
 * message (printf-style, formatted only for the task's first failure).  The
 * remaining decrement is the slice's last touch of its sub-batch: once
 * every task of a sub-batch has remaining == 0 it may be freed. */
__attribute__((format(printf, 5, 6))) static void
slice_done(struct tcp_transport *t, struct slice *s, int code, int native,
           const char *fmt, ...)
{
    struct tcp_task *k = &s->sb->tasks[s->slot];
    int zero = 0;
    if (code && atomic_compare_exchange_strong(&k->code, &zero, code)) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        atomic_store(&k->err, tent_xerr_new(code, native, "%s", msg));
    }
    free(s);
    atomic_fetch_sub(&k->remaining, 1);
    atomic_fetch_sub(&t->inflight, 1);
}

static void fail_list(struct tcp_transport *t, struct slice *s, int code,
                      int native, const char *why)
{
    while (s) {
        struct slice *n = s->next;
        slice_done(t, s, code, native, "%s", why);
        s = n;
    }
}

/* ---- connections ------------------------------------------------------------
 */

static struct tcp_conn *conn_new(void)
{
    struct tcp_conn *c = calloc(1, sizeof(*c));
    if (c) {
        c->fd = -1;
        c->nb = (struct tent_net_inbuf){.b = c->inb, .cap = sizeof(c->inb)};
    }
    return c;
}

static void conn_close(struct tcp_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->nb.pos = c->nb.len = 0; /* nothing carries over connections */
}

/* Whether the server has closed an idle connection (its idle timeout, or
 * an eviction to admit another client): between windows nothing is due
 * from it, so anything readable means it is gone. */
static bool closed_while_idle(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) > 0;
}

static int conn_open(struct tcp_peer *p, struct tcp_conn *c, int *native)
{
    int fd;
    int rc = tent_rpc_connect(p->host, p->port, p->t->timeout_ms, &fd);
    if (rc) {
        *native = errno;
        return rc;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        *native = errno;
        close(fd);
        return tent_set_error(TENT_EPEER, "tcp: fcntl(O_NONBLOCK) failed: %s",
                              strerror(*native));
    }
    c->fd = fd;
    c->nb.pos = c->nb.len = 0;
    return TENT_OK;
}

/* Puts slices w[0..n) on c as its window: the frames to send and the
 * deadline of the send. */
static void window_setup(struct tcp_conn *c, struct slice **w, int n,
                         int timeout_ms)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        struct slice *s = w[i];
        bool wr = s->opcode == OPCODE_WRITE;
        c->w[i] = s;
        tent_wire_encode_hdr(c->hdrs[i], wr ? TENT_WIRE_WRITE : TENT_WIRE_READ,
                             (uint32_t)i, TENT_WIRE_RW_LEN + (wr ? s->len : 0));
        tent_wire_encode_rw(c->hdrs[i] + TENT_WIRE_HDR_LEN, s->remote, s->len);
        c->iov[k].iov_base = c->hdrs[i];
        c->iov[k++].iov_len = sizeof(c->hdrs[i]);
        if (wr) {
            c->iov[k].iov_base = s->local;
            c->iov[k++].iov_len = s->len;
        }
    }
    c->n = n;
    c->iov_at = 0;
    c->iov_n = k;
    c->ri = 0;
    c->rh_got = 0;
    c->rdata = 0;
    c->rdata_len = 0;
    c->deadline = tent_now_ms() + timeout_ms;
}

/* Parses the header of answer ri once it is whole; the data it carries
 * must be what the slice asked for. */
static int answer_header(struct tcp_conn *c)
{
    struct slice *s = c->w[c->ri];
    struct tent_wire_hdr hdr;
    int rc = tent_wire_decode_hdr(c->rh, TENT_WIRE_HDR_LEN, &hdr);
    if (!rc && (hdr.type != TENT_WIRE_RESP || hdr.seq != (uint32_t)c->ri ||
                hdr.len < TENT_WIRE_RESP_LEN))
        rc =
            tent_set_error(TENT_EPROTO, "tcp: unexpected answer type %u seq %u",
                           hdr.type, hdr.seq);
    if (!rc)
        rc = tent_wire_decode_resp(c->rh + TENT_WIRE_HDR_LEN,
                                   TENT_WIRE_RESP_LEN, &c->status[c->ri]);
    if (rc)
        return rc;
    uint32_t data = hdr.len - TENT_WIRE_RESP_LEN;
    bool rd_ok = s->opcode == OPCODE_READ && c->status[c->ri] == 0;
    if (data != (rd_ok ? s->len : 0))
        return tent_set_error(TENT_EPROTO,
                              "tcp: answer carries %u bytes, expected %u", data,
                              rd_ok ? s->len : 0);
    c->rdata_len = data;
    return TENT_OK;
}

/* A socket call's failure in TENT's terms. */
static int io_fail(int neg, const char *what, const char *addr, int *native)
{
    *native = -neg;
    if (neg == -ECONNRESET)
        return tent_set_error(TENT_EPEER, "tcp: peer %s closed the connection",
                              addr);
    return tent_set_error(TENT_EPEER, "tcp: %s %s failed: %s", what, addr,
                          strerror(-neg));
}

/* Moves the window on c forward: sends what the socket takes, receives the
 * answers there are.  block: waits in poll() until the window is done;
 * else returns at the first EAGAIN.  1 when every answer is in, 0 when not
 * yet (non-blocking only), or a negative TENT_E* code (message set,
 * *native the errno, if any) after which the connection must be closed. */
static int conn_step(struct tcp_conn *c, const char *addr, bool block,
                     int timeout_ms, int *native)
{
    *native = 0;
    for (;;) {
        short want = 0;
        if (c->iov_at < c->iov_n) {
            int r = tent_net_sendv_some(c->fd, c->iov, c->iov_n, &c->iov_at);
            if (r == -EAGAIN)
                want = POLLOUT;
            else if (r)
                return io_fail(r, "send to", addr, native);
            else /* sent: each answer now gets timeout_ms */
                c->deadline = tent_now_ms() + timeout_ms;
        }
        while (!want && c->ri < c->n) {
            struct slice *s = c->w[c->ri];
            long r;
            if (c->rh_got < sizeof(c->rh)) {
                r = tent_net_inbuf_read_some(c->fd, &c->nb, c->rh + c->rh_got,
                                             sizeof(c->rh) - c->rh_got,
                                             SIZE_MAX);
                if (r > 0) {
                    c->rh_got += (size_t)r;
                    if (c->rh_got == sizeof(c->rh) && (r = answer_header(c)))
                        return (int)r;
                    if (c->rh_got < sizeof(c->rh) || c->rdata_len)
                        continue;
                }
            } else {
                r = tent_net_inbuf_read_some(c->fd, &c->nb, s->local + c->rdata,
                                             c->rdata_len - c->rdata,
                                             DIRECT_MIN);
                if (r > 0) {
                    c->rdata += (uint32_t)r;
                    if (c->rdata < c->rdata_len)
                        continue;
                }
            }
            if (r == -EAGAIN) {
                want = POLLIN;
                break;
            }
            if (r < 0)
                return io_fail((int)r, "receive from", addr, native);
            /* answer ri is whole; the next one gets timeout_ms */
            c->ri++;
            c->rh_got = 0;
            c->rdata = 0;
            c->rdata_len = 0;
            c->deadline = tent_now_ms() + timeout_ms;
        }
        if (!want)
            return 1;
        long long now = tent_now_ms();
        if (now >= c->deadline) {
            *native = ETIMEDOUT;
            return tent_set_error(TENT_ETIMEDOUT,
                                  "tcp: peer %s: no %s within %d ms", addr,
                                  want == POLLOUT ? "progress sending the "
                                                    "window"
                                                  : "answer",
                                  timeout_ms);
        }
        if (!block)
            return 0;
        struct pollfd pf = {.fd = c->fd, .events = want};
        long long left = c->deadline - now;
        if (poll(&pf, 1, left > INT_MAX ? INT_MAX : (int)left) < 0 &&
            errno != EINTR) {
            *native = errno;
            return tent_set_error(TENT_EPEER, "tcp: poll failed: %s",
                                  strerror(errno));
        }
    }
}

/* The window on c ended: every slice gets the peer's answer, or the
 * connection's failure (rc, native: the message is tent_last_error()). */
static void window_finish(struct tcp_peer *p, struct tcp_conn *c, int rc,
                          int native)
{
    struct tcp_transport *t = p->t;
    char why[512];
    if (rc)
        snprintf(why, sizeof(why), "%s", tent_last_error());
    for (int i = 0; i < c->n; i++) {
        struct slice *s = c->w[i];
        if (rc)
            slice_done(t, s, rc, native, "%s", why);
        else if (c->status[i])
            slice_done(t, s, c->status[i], 0,
                       "tcp: peer %s refused the %s of [%#llx, +%u): %s",
                       p->addr, s->opcode == OPCODE_WRITE ? "write" : "read",
                       (unsigned long long)s->remote, s->len,
                       tent_strerror(c->status[i]));
        else
            slice_done(t, s, 0, 0, "%s", "");
    }
    c->n = 0;
    peer_mark(p, rc != 0);
}

/* ---- workers ------------------------------------------------------------ */

/* Owned by its worker thread, which frees it on exit. */
struct worker_arg {
    struct tcp_peer *p;
    int idx;
};

static void *worker_main(void *arg)
{
    struct worker_arg *wa = arg;
    struct tcp_peer *p = wa->p;
    int me = wa->idx;
    free(wa);
    struct tcp_transport *t = p->t;
    struct tcp_conn *c = p->conns[me];
    struct slice *w[WINDOW_SLICES];
    for (;;) {
        pthread_mutex_lock(&p->lock);
        while (!p->queue && !p->stop) {
            p->idle[p->nidle++] = me;
            p->woken[me] = false;
            while (!p->woken[me] && !p->stop)
                pthread_cond_wait(&p->wake[me], &p->lock);
            if (!p->woken[me]) /* stopping: still on the stack */
                for (int i = 0; i < p->nidle; i++)
                    if (p->idle[i] == me) {
                        p->idle[i] = p->idle[--p->nidle];
                        break;
                    }
        }
        if (!p->queue && p->stop) {
            pthread_mutex_unlock(&p->lock);
            break;
        }
        int n = 0;
        uint64_t bytes = 0;
        int op = p->queue->opcode;
        while (p->queue && n < WINDOW_SLICES && p->queue->opcode == op &&
               (n == 0 || bytes + p->queue->len <= t->slice_size)) {
            struct slice *s = p->queue;
            p->queue = s->next;
            s->next = NULL;
            bytes += s->len;
            w[n++] = s;
        }
        if (!p->queue)
            p->tail = NULL;
        pthread_mutex_unlock(&p->lock);

        int rc = TENT_OK, native = 0;
        if (c->fd >= 0 && closed_while_idle(c->fd)) {
            LOG_DEBUG("tcp: peer %s closed an idle connection; reconnecting",
                      p->addr);
            conn_close(c);
        }
        if (c->fd < 0)
            rc = conn_open(p, c, &native);
        if (!rc) {
            window_setup(c, w, n, t->timeout_ms);
            rc = conn_step(c, p->addr, true, t->timeout_ms, &native);
        }
        if (rc < 0) {
            LOG_WARN("tcp: peer %s: %s; failing %d slice(s) and the peer's "
                     "queue",
                     p->addr, tent_last_error(), n);
            char why[512];
            snprintf(why, sizeof(why), "%s", tent_last_error());
            pthread_mutex_lock(&p->lock);
            struct slice *rest = p->queue;
            p->queue = p->tail = NULL;
            pthread_mutex_unlock(&p->lock);
            conn_close(c);
            if (c->n == 0) { /* failed before the window was set up */
                c->n = n;
                memcpy(c->w, w, (size_t)n * sizeof(w[0]));
            }
            window_finish(p, c, rc, native);
            fail_list(t, rest, rc, native, why);
            continue;
        }
        window_finish(p, c, TENT_OK, 0);
    }
    conn_close(c);
    return NULL;
}

/* ---- the lent connection ----------------------------------------------------
 */

/* Gives the lent worker back: onto the idle stack, or straight to the
 * queue when work waits.  Caller holds lend_lock. */
static void lend_return(struct tcp_peer *p)
{
    int w = atomic_load(&p->lent);
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->lent, -1);
    p->woken[w] = false;
    p->idle[p->nidle++] = w;
    if (p->queue) {
        p->nidle--;
        p->woken[w] = true;
        pthread_cond_signal(&p->wake[w]);
    }
    pthread_mutex_unlock(&p->lock);
}

/* Moves the lent window on, if any and if no other thread is doing so. */
static void lend_progress(struct tcp_peer *p)
{
    if (atomic_load(&p->lent) < 0 || pthread_mutex_trylock(&p->lend_lock))
        return;
    int w = atomic_load(&p->lent);
    struct tcp_conn *c = w >= 0 ? p->conns[w] : NULL;
    if (c && c->n > 0) {
        int native;
        int rc = conn_step(c, p->addr, false, p->t->timeout_ms, &native);
        if (rc != 0) {
            if (rc < 0) {
                LOG_WARN("tcp: peer %s: %s; failing %d slice(s)", p->addr,
                         tent_last_error(), c->n);
                conn_close(c);
            }
            window_finish(p, c, rc < 0 ? rc : TENT_OK, native);
            lend_return(p);
        }
    }
    pthread_mutex_unlock(&p->lend_lock);
}

/* Sends the slices list (one opcode, at most WINDOW_SLICES) from this
 * thread over an idle worker's connection without blocking; false (nothing
 * done) when none can be had now. */
static bool run_lent(struct tcp_peer *p, struct slice *head)
{
    if (pthread_mutex_trylock(&p->lend_lock))
        return false;
    int w = -1;
    pthread_mutex_lock(&p->lock);
    if (atomic_load(&p->lent) < 0 && p->nidle > 0 && !p->stop) {
        int cand = p->idle[p->nidle - 1];
        if (p->conns[cand]->fd >= 0) {
            w = cand;
            p->nidle--;
            atomic_store(&p->lent, w);
        }
    }
    pthread_mutex_unlock(&p->lock);
    if (w < 0) {
        pthread_mutex_unlock(&p->lend_lock);
        return false;
    }
    struct tcp_conn *c = p->conns[w];
    if (closed_while_idle(c->fd)) {
        /* Its worker reconnects when it next runs: let it. */
        LOG_DEBUG("tcp: peer %s closed an idle connection", p->addr);
        conn_close(c);
        lend_return(p);
        pthread_mutex_unlock(&p->lend_lock);
        return false;
    }
    struct slice *win[WINDOW_SLICES];
    int n = 0;
    for (struct slice *s = head; s; s = s->next)
        win[n++] = s;
    window_setup(c, win, n, p->t->timeout_ms);
    int native;
    int rc = conn_step(c, p->addr, false, p->t->timeout_ms, &native);
    if (rc != 0) {
        if (rc < 0) {
            LOG_WARN("tcp: peer %s: %s; failing %d slice(s)", p->addr,
                     tent_last_error(), n);
            conn_close(c);
        }
        window_finish(p, c, rc < 0 ? rc : TENT_OK, native);
        lend_return(p);
    }
    pthread_mutex_unlock(&p->lend_lock);
    return true;
}

static void peer_stop(struct tcp_peer *p)
{
    /* waits out a thread still moving the lent window */
    pthread_mutex_lock(&p->lend_lock);
    pthread_mutex_unlock(&p->lend_lock);
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    for (int i = 0; i < p->nworkers; i++)
        if (p->conns[i]->fd >= 0)
            shutdown(p->conns[i]->fd, SHUT_RDWR);
    for (int i = 0; i < p->nworkers; i++)
        pthread_cond_signal(&p->wake[i]);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i], NULL);
    for (int i = 0; i < p->nworkers; i++) {
        /* a lent window left behind (abandoned teardown only) */
        if (p->conns[i]->n > 0)
            window_finish(p, p->conns[i], TENT_ESHUTDOWN, 0);
        free(p->conns[i]);
    }
    pthread_mutex_destroy(&p->lend_lock);
    pthread_mutex_destroy(&p->lock);
    for (int i = 0; i < MAX_CONNS; i++)
        pthread_cond_destroy(&p->wake[i]);
}

/* Finds or creates the peer for addr.  Caller holds t->lock. */
static int peer_get_locked(struct tcp_transport *t, const char *addr,
                           struct tcp_peer **out)
{
    for (struct tcp_peer *p = t->peers; p; p = p->next)
        if (strcmp(p->addr, addr) == 0) {
            *out = p;
            return TENT_OK;
        }
    struct tcp_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return tent_set_error(TENT_ENOMEM, "tcp: out of memory");
    int rc = tent_rpc_parse_addr(addr, p->host, sizeof(p->host), &p->port);
    if (rc) {
        free(p);
        return tent_set_error(TENT_EPEER, "tcp: %s", tent_last_error());
    }
    snprintf(p->addr, sizeof(p->addr), "%s", addr);
    p->t = t;
    atomic_init(&p->lent, -1);
    pthread_mutex_init(&p->lend_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    for (int i = 0; i < MAX_CONNS; i++)
        pthread_cond_init(&p->wake[i], NULL);
    for (int i = 0; i < t->nconns; i++) {
        struct worker_arg *wa = malloc(sizeof(*wa));
        struct tcp_conn *c = conn_new();
        if (!wa || !c) {
            free(wa);
            free(c);
            break;
        }
        p->conns[i] = c;
        wa->p = p;
        wa->idx = i;
        if (pthread_create(&p->workers[i], NULL, worker_main, wa)) {
            free(wa);
            free(c);
            p->conns[i] = NULL;
            break;
        }
        p->nworkers++;
    }
    if (p->nworkers == 0) {
        pthread_mutex_destroy(&p->lend_lock);
        pthread_mutex_destroy(&p->lock);
        for (int i = 0; i < MAX_CONNS; i++)
            pthread_cond_destroy(&p->wake[i]);
        free(p);
        return tent_set_error(TENT_ENOMEM, "tcp: cannot start worker threads");
    }
    p->next = t->peers;
    t->peers = p;
    peer_gauge(t, -1, TM_PEER_UP);
    *out = p;
    return TENT_OK;
}

/* ---- ops ------------------------------------------------------------------
 */

static int tcp_install(struct tent_transport *base)
{
    struct tcp_transport *t = tcp_of(base);
    const struct tent_xport_env *env = base->env;
    t->metrics = env->metrics;
    int64_t to, nc, ss;
    int rc = tent_config_get_int_range(env->cfg, "transports/tcp/timeout_ms",
                                       3000, 1, 600000, &to);
    if (!rc)
        rc = tent_config_get_int_range(env->cfg, "transports/tcp/connections",
                                       4, 1, MAX_CONNS, &nc);
    if (!rc)
        rc = tent_config_get_int_range(env->cfg, "transports/tcp/slice_size",
                                       1 << 20, 4096, TENT_WIRE_MAX_DATA, &ss);
    if (rc)
        return rc;
    t->timeout_ms = (int)to;
    t->nconns = (int)nc;
    t->slice_size = (uint32_t)ss;
    /* The target half: peers' reads and writes of our memory. */
    rc = tcp_target_start(env);
    if (rc)
        return rc;
    t->serving = true;
    pthread_mutex_init(&t->lock, NULL);
    t->accepting = true;
    return TENT_OK;
}

/* Moves every peer's lent window on (quiesce: nobody may poll any more). */
static void progress_all_lent(struct tcp_transport *t)
{
    pthread_mutex_lock(&t->lock);
    struct tcp_peer *p = t->peers;
    pthread_mutex_unlock(&t->lock);
    /* the list only grows at its head: what follows p stays valid */
    for (; p; p = p->next)
        lend_progress(p);
}

/* Waits (bounded) until no slice is queued or in flight. */
static int tcp_quiesce(struct tent_transport *base)
{
    struct tcp_transport *t = tcp_of(base);
    pthread_mutex_lock(&t->lock);
    bool idle = !t->accepting && !t->peers;
    t->accepting = false;
    pthread_mutex_unlock(&t->lock);
    if (idle)
        return TENT_OK;
    long long start = tent_now_ms();
    long long limit_ms = 2LL * t->timeout_ms + 1000;
    while (atomic_load(&t->inflight) > 0) {
        long long ms = tent_now_ms() - start;
        if (ms > limit_ms)
            return tent_set_error(TENT_ETIMEDOUT,
                                  "tcp: %zu slice(s) still in flight after "
                                  "%lld ms",
                                  atomic_load(&t->inflight), ms);
        progress_all_lent(t);
        poll(NULL, 0, 1);
    }
    return TENT_OK;
}

static void tcp_uninstall(struct tent_transport *base)
{
    struct tcp_transport *t = tcp_of(base);
    if (t->serving && base->env)
        tcp_target_stop(base->env);
    pthread_mutex_lock(&t->lock);
    struct tcp_peer *p = t->peers;
    t->peers = NULL;
    t->accepting = false;
    pthread_mutex_unlock(&t->lock);
    while (p) {
        struct tcp_peer *n = p->next;
        peer_stop(p);
        peer_gauge(t, p->down ? TM_PEER_DOWN : TM_PEER_UP, -1);
        fail_list(t, p->queue, TENT_ESHUTDOWN, 0,
                  "tcp: the transport was uninstalled");
        free(p);
        p = n;
    }
    pthread_mutex_destroy(&t->lock);
}

static uint32_t tcp_caps(TENT_UNUSED struct tent_transport *t)
{
    return TENT_CAP_DRAM_TO_DRAM;
}

static bool tcp_can_reach(struct tent_transport *t,
                          const struct tent_seg_view *target)
{
    char a[256];
    return t->env->seg_attr(t->env->ctx, target, "rpc_addr", a, sizeof(a)) &&
           *a;
}

static int tcp_alloc_sub(struct tent_transport *t, size_t capacity,
                         struct tent_sub_batch **out)
{
    struct tcp_task *tasks;
    int rc = tent_sub_batch_new(t, sizeof(struct tcp_sub), capacity,
                                sizeof(*tasks), (void **)&tasks, out);
    if (!rc)
        ((struct tcp_sub *)*out)->tasks = tasks;
    return rc;
}

static void task_forget_err(struct tcp_task *k)
{
    free(atomic_exchange(&k->err, NULL));
    atomic_store(&k->code, 0);
}

static int tcp_free_sub(TENT_UNUSED struct tent_transport *t,
                        struct tent_sub_batch *base)
{
    struct tcp_sub *sb = (struct tcp_sub *)base;
    for (size_t i = 0; i < sb->base.capacity; i++)
        if (atomic_load(&sb->tasks[i].remaining) > 0)
            return tent_set_error(TENT_EBUSY,
                                  "tcp: task %zu still has %u slice(s) in "
                                  "flight",
                                  i, atomic_load(&sb->tasks[i].remaining));
    for (size_t i = 0; i < sb->base.capacity; i++)
        task_forget_err(&sb->tasks[i]);
    tent_sub_batch_delete(&sb->base, sb->tasks);
    return TENT_OK;
}

/* Cuts one request into slices (all allocated before any is queued). */
static int make_slices(struct tcp_transport *t, struct tcp_sub *sb,
                       const struct tent_xfer *x, struct slice **head,
                       struct slice **tail, uint32_t *count)
{
    *head = *tail = NULL;
    *count = 0;
    for (uint64_t off = 0; off < x->length; off += t->slice_size) {
        struct slice *s = malloc(sizeof(*s));
        if (!s) {
            while (*head) {
                struct slice *n = (*head)->next;
                free(*head);
                *head = n;
            }
            return tent_set_error(TENT_ENOMEM, "tcp: out of memory");
        }
        uint64_t left = x->length - off;
        s->sb = sb;
        s->slot = x->slot;
        s->opcode = x->opcode;
        s->local = (char *)x->local + off;
        s->remote = x->remote + off;
        s->len = (uint32_t)(left < t->slice_size ? left : t->slice_size);
        s->next = NULL;
        if (*tail)
            (*tail)->next = s;
        else
            *head = s;
        *tail = s;
        (*count)++;
    }
    return TENT_OK;
}

/* Queues a list of nslices slices carrying bytes and wakes as many idle
 * workers as it makes windows, the most recently idle first. */
static void enqueue(struct tcp_peer *p, struct slice *head, struct slice *tail,
                    uint32_t nslices, uint64_t bytes)
{
    uint64_t by_bytes = (bytes + p->t->slice_size - 1) / p->t->slice_size;
    uint64_t by_count = (nslices + WINDOW_SLICES - 1) / WINDOW_SLICES;
    uint64_t windows = by_bytes > by_count ? by_bytes : by_count;
    pthread_mutex_lock(&p->lock);
    if (p->tail)
        p->tail->next = head;
    else
        p->queue = head;
    p->tail = tail;
    for (; windows > 0 && p->nidle > 0; windows--) {
        int w = p->idle[--p->nidle];
        p->woken[w] = true;
        pthread_cond_signal(&p->wake[w]);
    }
    pthread_mutex_unlock(&p->lock);
}

static int tcp_submit(struct tent_transport *base, struct tent_sub_batch *sbb,
                      const struct tent_xfer *reqs, size_t n,
                      struct tent_xfer_result *res)
{
    struct tcp_transport *t = tcp_of(base);
    const struct tent_xport_env *env = base->env;
    struct tcp_sub *sb = (struct tcp_sub *)sbb;
    int first = TENT_OK;
    /* Slices are queued per peer at the end, one wake-up per peer, so that
     * a worker finds the whole group and sends it as one window. */
    struct pending {
        struct tcp_peer *p;
        struct slice *head, *tail;
        uint64_t bytes;
        uint32_t nslices;
        int opcode; /* -1 once mixed */
    } pend[8];
    int npend = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tent_xfer *x = &reqs[i];
        char addr_buf[256];
        bool have = env->seg_attr(env->ctx, x->target, "rpc_addr", addr_buf,
                                  sizeof(addr_buf)) &&
                    *addr_buf;
        struct tcp_peer *p = NULL;
        struct slice *head, *tail;
        uint32_t cnt = 0;
        int rc = TENT_OK;
        if (x->slot >= sb->base.capacity)
            rc = tent_set_error(TENT_EINVAL, "tcp: slot %u beyond capacity",
                                x->slot);
        else if (!have)
            rc = tent_set_error(TENT_EPEER,
                                "tcp: segment '%s' publishes no rpc_addr",
                                x->target->name);
        if (!rc) {
            pthread_mutex_lock(&t->lock);
            rc = t->accepting ? peer_get_locked(t, addr_buf, &p)
                              : tent_set_error(TENT_ESHUTDOWN,
                                               "tcp: transport is shutting "
                                               "down");
            pthread_mutex_unlock(&t->lock);
        }
        if (!rc)
            rc = make_slices(t, sb, x, &head, &tail, &cnt);
        if (rc) {
            tent_xres_fail(&res[i], rc, 0);
            if (!first)
                first = rc;
            continue;
        }
        res[i].code = TENT_OK;
        struct tcp_task *k = &sb->tasks[x->slot];
        task_forget_err(k);
        k->length = x->length;
        k->peer = p;
        atomic_store(&k->remaining, cnt);
        atomic_fetch_add(&t->inflight, cnt);
        int j = 0;
        while (j < npend && pend[j].p != p)
            j++;
        if (j == npend && npend == 8) {
            enqueue(p, head, tail, cnt, x->length);
            continue;
        }
        if (j == npend) {
            pend[npend].p = p;
            pend[npend].head = head;
            pend[npend].bytes = 0;
            pend[npend].nslices = 0;
            pend[npend].opcode = x->opcode;
            pend[npend++].tail = tail;
        } else {
            pend[j].tail->next = head;
            pend[j].tail = tail;
            if (pend[j].opcode != x->opcode)
                pend[j].opcode = -1;
        }
        pend[j].bytes += x->length;
        pend[j].nslices += cnt;
    }
    for (int j = 0; j < npend; j++) {
        struct pending *q = &pend[j];
        if (q->opcode >= 0 && q->bytes <= INLINE_BYTES &&
            q->nslices <= WINDOW_SLICES && run_lent(q->p, q->head))
            continue;
        enqueue(q->p, q->head, q->tail, q->nslices, q->bytes);
    }
    return first;
}

static int tcp_status(TENT_UNUSED struct tent_transport *t,
                      struct tent_sub_batch *sbb, uint32_t slot,
                      struct tent_xfer_status *out)
{
    struct tcp_sub *sb = (struct tcp_sub *)sbb;
    if (slot >= sb->base.capacity)
        return tent_set_error(TENT_EINVAL, "tcp: slot %u beyond capacity",
                              slot);
    struct tcp_task *k = &sb->tasks[slot];
    memset(out, 0, sizeof(*out));
    if (atomic_load(&k->remaining) > 0 && k->peer) {
        lend_progress(k->peer);
        if (atomic_load(&k->remaining) > 0) {
            out->state = TENT_XFER_PENDING;
            return TENT_OK;
        }
    }
    int code = atomic_load(&k->code);
    if (code) {
        tent_xstatus_failed(out, atomic_load(&k->err), code, 0);
    } else {
        out->state = TENT_XFER_COMPLETED;
        out->bytes = k->length;
    }
    return TENT_OK;
}

const struct tent_transport_ops tent_tcp_transport_ops = {
    .name = "tcp",
    .type = TRANSPORT_TCP,
    .default_enabled = true,
    .instance_size = sizeof(struct tcp_transport),
    .install = tcp_install,
    .uninstall = tcp_uninstall,
    .capabilities = tcp_caps,
    .can_reach = tcp_can_reach,
    .alloc_sub_batch = tcp_alloc_sub,
    .free_sub_batch = tcp_free_sub,
    .submit = tcp_submit,
    .status = tcp_status,
    .quiesce = tcp_quiesce,
    .add_buffer = tent_xport_noop_buffer,
    .remove_buffer = tent_xport_noop_buffer,
};
