/* tcp transport: reads and writes against a peer engine's registered memory,
 * served by the peer's RPC server (src/rpc, READ/WRITE frames).
 *
 * Requests are cut into slices of at most slice_size bytes and queued on
 * the target peer.  Each peer has a small pool of connections, each driven
 * by its own worker thread, so a slow peer holds only its own workers and a
 * large request is spread over the pool while small ones interleave with
 * it.  A worker takes a window of slices of one opcode (so that only one
 * direction carries bulk data and neither side can block the other), sends
 * every request, then reads the answers in order.  A window carries at most
 * slice_size bytes of data (or WINDOW_SLICES slices), so that a batch of
 * many blocks is spread over the connections like one large request is:
 * on a 2-core loopback two streams moved 1.4-2x what one did, and a
 * single window per batch left the other connections idle.
 *
 * Failure: sockets carry send/receive timeouts of timeout_ms, so a dead or
 * stalled peer fails the window within that bound; the worker then fails
 * every slice still queued on the peer as well, so a whole batch turns
 * FAILED within about one timeout rather than one timeout per slice.
 *
 * Small submits (at most INLINE_BYTES to a peer, one opcode) run to
 * completion on the submitting thread over the peer's own inline
 * connection when no other thread is using it (a try-lock): the round trip
 * a worker would make, minus two thread hand-offs.  Its failures are bounded
 * by the same timeout_ms; when the connection is busy the slices go to the
 * workers as usual. */
#include "common/compiler.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "metrics/metrics.h"
#include "rpc/rpc.h"
#include "transport/transport.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS     16
#define WINDOW_SLICES 64
/* A submit whose slices to one peer carry at most this many bytes runs to
 * completion on the submitting thread when the peer's inline connection is
 * free: no hand-off to a worker and back. */
#define INLINE_BYTES (64u << 10)

struct tcp_sub;

struct slice {
    struct tcp_sub *sb;
    uint32_t slot;
    int opcode;
    char *local;
    uint64_t remote;
    uint32_t len;
    struct slice *next;
};

struct tcp_task {
    atomic_uint remaining; /* slices not yet terminal */
    atomic_int error;      /* first failure, 0 if none */
    uint64_t length;
};

struct tcp_sub {
    struct tent_sub_batch base;
    struct tcp_task *tasks;
};

struct tcp_transport;

/* lock guards queue/tail/stop/fds/down and the idle stack; each worker
 * sleeps on its own wake[i] (with lock).  Never held together with the
 * transport's lock (peers are found under that one, then it is dropped
 * before this one is taken), and no runtime lock is taken while it is held.
 *
 * Idle workers form a stack: new work wakes the one that went idle last,
 * and only as many as it makes windows.  Waking the whole pool for every
 * submit cost a batch-1 transfer several wake-ups, and waking the longest
 * idle worker moved each transfer to a cold connection and server thread. */
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
    int fds[MAX_CONNS];
    pthread_t workers[MAX_CONNS];
    bool down; /* the last connection or window failed (tent_peers) */
    /* inline connection: ilock (try-locked by submitters) guards ifd/iin */
    pthread_mutex_t ilock;
    int ifd;
    struct inbuf *iin;
    struct tcp_peer *next;
};

/* lock guards peers and accepting.  A leaf for the runtime: it is taken
 * under the runtime's batch lock (submit) and takes no other lock. */
struct tcp_transport {
    struct tent_transport base;
    int timeout_ms;
    int nconns;
    uint32_t slice_size;
    pthread_mutex_t lock;
    struct tcp_peer *peers;
    bool accepting;
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

/* The remaining decrement is the slice's last touch of its sub-batch: once
 * every task of a sub-batch has remaining == 0 it may be freed. */
static void slice_done(struct tcp_transport *t, struct slice *s, int err)
{
    struct tcp_task *k = &s->sb->tasks[s->slot];
    free(s);
    if (err) {
        int zero = 0;
        atomic_compare_exchange_strong(&k->error, &zero, err);
    }
    atomic_fetch_sub(&k->remaining, 1);
    atomic_fetch_sub(&t->inflight, 1);
}

static void fail_list(struct tcp_transport *t, struct slice *s, int err)
{
    while (s) {
        struct slice *n = s->next;
        slice_done(t, s, err);
        s = n;
    }
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000;
}

/* The window's send deadline, as tent_net_sendv_all's wait hook: sends do
 * not block (MSG_DONTWAIT); only a full socket buffer costs a poll, and the
 * whole window gets timeout_ms: a peer that drains a little now and then (a
 * stopped process's kernel still fills its receive buffer) does not restart
 * the clock. */
struct send_deadline {
    int fd;
    int timeout_ms;
    long deadline; /* -1 until the first full buffer */
    int why;       /* 0, or why the wait gave up: ETIMEDOUT or poll's errno */
};

static bool send_deadline_wait(void *arg, TENT_UNUSED int stalls)
{
    struct send_deadline *d = arg;
    long now = now_ms();
    if (d->deadline < 0)
        d->deadline = now + d->timeout_ms;
    if (now >= d->deadline) {
        d->why = ETIMEDOUT;
        return false;
    }
    struct pollfd pf = {.fd = d->fd, .events = POLLOUT};
    if (poll(&pf, 1, (int)(d->deadline - now)) < 0 && errno != EINTR) {
        d->why = errno;
        return false;
    }
    return true;
}

/* sendmsg until every iovec is out, within timeout_ms for the whole window
 * (send_deadline_wait). */
static int send_iov(int fd, struct iovec *iov, int n, int timeout_ms)
{
    struct send_deadline d = {
        .fd = fd, .timeout_ms = timeout_ms, .deadline = -1};
    int rc =
        tent_net_sendv_all(fd, iov, n, MSG_DONTWAIT, send_deadline_wait, &d);
    if (!rc)
        return TENT_OK;
    if (d.why == ETIMEDOUT)
        return tent_set_error(TENT_ETIMEDOUT, "tcp: send timed out after %d ms",
                              timeout_ms);
    if (d.why)
        return tent_set_error(TENT_EPEER, "tcp: poll failed: %s",
                              strerror(d.why));
    return tent_set_error(TENT_EPEER, "tcp: send failed: %s", strerror(-rc));
}

/* Answers are read through a per-connection buffer, so that a window of
 * small answers costs one receive call rather than one per answer. */
struct inbuf {
    struct tent_net_inbuf nb;
    uint8_t b[65536];
};

static int in_read(int fd, struct inbuf *in, void *dst, size_t n)
{
    int rc = tent_net_inbuf_read(fd, &in->nb, dst, n, 16384);
    if (rc == -EAGAIN)
        return tent_set_error(TENT_ETIMEDOUT, "tcp: receive timed out");
    if (rc == -ECONNRESET)
        return tent_set_error(TENT_EPEER, "tcp: connection closed by peer");
    if (rc)
        return tent_set_error(TENT_EPEER, "tcp: receive failed: %s",
                              tent_net_strerror(rc));
    return TENT_OK;
}

/* Sends the window's requests, then reads the answers in order.  Returns 0
 * or the connection-level error (the connection must then be dropped);
 * per-slice refusals by the peer are recorded in status[]. */
static int run_window(int fd, struct inbuf *in, struct slice **w, int n,
                      int32_t *status, int timeout_ms)
{
    uint8_t hdrs[WINDOW_SLICES][TENT_WIRE_HDR_LEN + TENT_WIRE_RW_LEN];
    struct iovec iov[2 * WINDOW_SLICES];
    int k = 0;
    for (int i = 0; i < n; i++) {
        struct slice *s = w[i];
        bool wr = s->opcode == OPCODE_WRITE;
        tent_wire_encode_hdr(hdrs[i], wr ? TENT_WIRE_WRITE : TENT_WIRE_READ,
                             (uint32_t)i, TENT_WIRE_RW_LEN + (wr ? s->len : 0));
        tent_wire_encode_rw(hdrs[i] + TENT_WIRE_HDR_LEN, s->remote, s->len);
        iov[k].iov_base = hdrs[i];
        iov[k++].iov_len = sizeof(hdrs[i]);
        if (wr) {
            iov[k].iov_base = s->local;
            iov[k++].iov_len = s->len;
        }
    }
    int rc = send_iov(fd, iov, k, timeout_ms);
    if (rc)
        return rc;
    for (int i = 0; i < n; i++) {
        struct slice *s = w[i];
        uint8_t h[TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN];
        struct tent_wire_hdr hdr;
        rc = in_read(fd, in, h, sizeof(h));
        if (!rc)
            rc = tent_wire_decode_hdr(h, TENT_WIRE_HDR_LEN, &hdr);
        if (!rc && (hdr.type != TENT_WIRE_RESP || hdr.seq != (uint32_t)i ||
                    hdr.len < TENT_WIRE_RESP_LEN))
            rc = tent_set_error(TENT_EPROTO,
                                "tcp: unexpected answer type %u seq %u",
                                hdr.type, hdr.seq);
        if (!rc)
            rc = tent_wire_decode_resp(h + TENT_WIRE_HDR_LEN,
                                       TENT_WIRE_RESP_LEN, &status[i]);
        if (rc)
            return rc;
        uint32_t data = hdr.len - TENT_WIRE_RESP_LEN;
        bool rd_ok = s->opcode == OPCODE_READ && status[i] == 0;
        if (data != (rd_ok ? s->len : 0))
            return tent_set_error(TENT_EPROTO,
                                  "tcp: answer carries %u bytes, expected %u",
                                  data, rd_ok ? s->len : 0);
        if (rd_ok && (rc = in_read(fd, in, s->local, s->len)))
            return rc;
    }
    return TENT_OK;
}

/* Whether the server has closed an idle pooled connection (its idle
 * timeout, or an eviction to admit another client): between windows
 * nothing is due from it, so anything readable means it is gone. */
static bool closed_while_idle(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) > 0;
}

/* Owned by its worker thread, which frees it on exit. */
struct worker_arg {
    struct tcp_peer *p;
    int idx;
    struct inbuf in;
};

static void *worker_main(void *arg)
{
    struct worker_arg *wa = arg;
    struct inbuf *in = &wa->in;
    struct tcp_peer *p = wa->p;
    struct tcp_transport *t = p->t;
    int fd = -1;
    struct slice *w[WINDOW_SLICES];
    int32_t status[WINDOW_SLICES];
    for (;;) {
        pthread_mutex_lock(&p->lock);
        while (!p->queue && !p->stop) {
            int me = wa->idx;
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

        int rc = TENT_OK;
        if (fd >= 0 && closed_while_idle(fd)) {
            LOG_DEBUG("tcp: peer %s closed an idle connection; reconnecting",
                      p->addr);
            pthread_mutex_lock(&p->lock);
            p->fds[wa->idx] = -1;
            pthread_mutex_unlock(&p->lock);
            close(fd);
            fd = -1;
        }
        if (fd < 0) {
            rc = tent_rpc_connect(p->host, p->port, t->timeout_ms, &fd);
            /* nothing carries over connections */
            in->nb = (struct tent_net_inbuf){.b = in->b, .cap = sizeof(in->b)};
            if (!rc) {
                pthread_mutex_lock(&p->lock);
                p->fds[wa->idx] = fd;
                pthread_mutex_unlock(&p->lock);
            }
        }
        if (!rc)
            rc = run_window(fd, in, w, n, status, t->timeout_ms);
        if (rc) {
            LOG_WARN("tcp: peer %s: %s; failing %d slice(s) and the peer's "
                     "queue",
                     p->addr, tent_last_error(), n);
            pthread_mutex_lock(&p->lock);
            struct slice *rest = p->queue;
            p->queue = p->tail = NULL;
            if (fd >= 0) {
                p->fds[wa->idx] = -1;
                close(fd);
                fd = -1;
            }
            pthread_mutex_unlock(&p->lock);
            peer_mark(p, true);
            for (int i = 0; i < n; i++)
                slice_done(t, w[i], rc);
            fail_list(t, rest, rc);
            continue;
        }
        peer_mark(p, false);
        for (int i = 0; i < n; i++)
            slice_done(t, w[i], status[i]);
    }
    if (fd >= 0) {
        pthread_mutex_lock(&p->lock);
        p->fds[wa->idx] = -1;
        pthread_mutex_unlock(&p->lock);
        close(fd);
    }
    free(wa);
    return NULL;
}

static void peer_stop(struct tcp_peer *p)
{
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    for (int i = 0; i < p->nworkers; i++)
        if (p->fds[i] >= 0)
            shutdown(p->fds[i], SHUT_RDWR);
    for (int i = 0; i < p->nworkers; i++)
        pthread_cond_signal(&p->wake[i]);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i], NULL);
    pthread_mutex_lock(&p->ilock); /* waits out an inline round trip */
    if (p->ifd >= 0)
        close(p->ifd);
    p->ifd = -1;
    free(p->iin);
    p->iin = NULL;
    pthread_mutex_unlock(&p->ilock);
    pthread_mutex_destroy(&p->ilock);
    pthread_mutex_destroy(&p->lock);
    for (int i = 0; i < MAX_CONNS; i++)
        pthread_cond_destroy(&p->wake[i]);
}

/* Runs the slices list (one opcode, at most WINDOW_SLICES) to completion on
 * this thread over p's inline connection; false (nothing done) when another
 * thread holds that connection. */
static bool run_inline(struct tcp_transport *t, struct tcp_peer *p,
                       struct slice *head)
{
    if (pthread_mutex_trylock(&p->ilock) != 0)
        return false;
    struct slice *w[WINDOW_SLICES];
    int32_t status[WINDOW_SLICES];
    int n = 0;
    for (struct slice *s = head; s; s = s->next)
        w[n++] = s;
    int rc = TENT_OK;
    if (p->ifd >= 0 && closed_while_idle(p->ifd)) {
        LOG_DEBUG("tcp: peer %s closed the idle inline connection; "
                  "reconnecting",
                  p->addr);
        close(p->ifd);
        p->ifd = -1;
    }
    if (p->ifd < 0) {
        if (!p->iin)
            p->iin = malloc(sizeof(*p->iin));
        rc = p->iin ? tent_rpc_connect(p->host, p->port, t->timeout_ms, &p->ifd)
                    : tent_set_error(TENT_ENOMEM, "tcp: out of memory");
        if (p->iin)
            p->iin->nb = (struct tent_net_inbuf){.b = p->iin->b,
                                                 .cap = sizeof(p->iin->b)};
    }
    if (!rc)
        rc = run_window(p->ifd, p->iin, w, n, status, t->timeout_ms);
    if (rc) {
        LOG_WARN("tcp: peer %s: %s; failing %d slice(s)", p->addr,
                 tent_last_error(), n);
        if (p->ifd >= 0)
            close(p->ifd);
        p->ifd = -1;
    }
    pthread_mutex_unlock(&p->ilock);
    peer_mark(p, rc != 0);
    for (int i = 0; i < n; i++)
        slice_done(t, w[i], rc ? rc : status[i]);
    return true;
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
    p->ifd = -1;
    pthread_mutex_init(&p->ilock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    for (int i = 0; i < MAX_CONNS; i++) {
        pthread_cond_init(&p->wake[i], NULL);
        p->fds[i] = -1;
    }
    for (int i = 0; i < t->nconns; i++) {
        struct worker_arg *wa = malloc(sizeof(*wa));
        if (!wa || (wa->p = p, wa->idx = i,
                    pthread_create(&p->workers[i], NULL, worker_main, wa))) {
            free(wa);
            break;
        }
        p->nworkers++;
    }
    if (p->nworkers == 0) {
        pthread_mutex_destroy(&p->ilock);
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

static int tcp_install(struct tent_transport *base)
{
    struct tcp_transport *t = tcp_of(base);
    t->metrics = tent_engine_metrics(base->engine);
    int64_t to, nc, ss;
    int rc = tent_config_get_int_range(base->cfg, "transports/tcp/timeout_ms",
                                       3000, 1, 600000, &to);
    if (!rc)
        rc = tent_config_get_int_range(base->cfg, "transports/tcp/connections",
                                       4, 1, MAX_CONNS, &nc);
    if (!rc)
        rc = tent_config_get_int_range(base->cfg, "transports/tcp/slice_size",
                                       1 << 20, 4096, TENT_WIRE_MAX_DATA, &ss);
    if (rc)
        return rc;
    t->timeout_ms = (int)to;
    t->nconns = (int)nc;
    t->slice_size = (uint32_t)ss;
    pthread_mutex_init(&t->lock, NULL);
    t->accepting = true;
    return TENT_OK;
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
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long limit_ms = 2L * t->timeout_ms + 1000;
    while (atomic_load(&t->inflight) > 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (now.tv_sec - start.tv_sec) * 1000 +
                  (now.tv_nsec - start.tv_nsec) / 1000000;
        if (ms > limit_ms)
            return tent_set_error(TENT_ETIMEDOUT,
                                  "tcp: %zu slice(s) still in flight after "
                                  "%ld ms",
                                  atomic_load(&t->inflight), ms);
        poll(NULL, 0, 1);
    }
    return TENT_OK;
}

static void tcp_uninstall(struct tent_transport *base)
{
    struct tcp_transport *t = tcp_of(base);
    pthread_mutex_lock(&t->lock);
    struct tcp_peer *p = t->peers;
    t->peers = NULL;
    t->accepting = false;
    pthread_mutex_unlock(&t->lock);
    while (p) {
        struct tcp_peer *n = p->next;
        peer_stop(p);
        peer_gauge(t, p->down ? TM_PEER_DOWN : TM_PEER_UP, -1);
        fail_list(t, p->queue, TENT_ESHUTDOWN);
        free(p);
        p = n;
    }
    pthread_mutex_destroy(&t->lock);
}

static uint32_t tcp_caps(TENT_UNUSED struct tent_transport *t)
{
    return TENT_CAP_DRAM_TO_DRAM;
}

static bool tcp_can_reach(TENT_UNUSED struct tent_transport *t,
                          const struct tent_segment *target)
{
    char a[256];
    return tent_segment_attr_copy(target, "rpc_addr", a, sizeof(a)) && *a;
}

static int tcp_alloc_sub(struct tent_transport *t, size_t capacity,
                         struct tent_sub_batch **out)
{
    struct tcp_sub *sb = calloc(1, sizeof(*sb));
    struct tcp_task *tasks = calloc(capacity, sizeof(*tasks));
    if (!sb || !tasks) {
        free(sb);
        free(tasks);
        return tent_set_error(TENT_ENOMEM, "tcp: out of memory for %zu tasks",
                              capacity);
    }
    sb->base.owner = t;
    sb->base.capacity = capacity;
    sb->tasks = tasks;
    *out = &sb->base;
    return TENT_OK;
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
    free(sb->tasks);
    free(sb);
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
                      const struct tent_xfer *reqs, size_t n, int *results)
{
    struct tcp_transport *t = tcp_of(base);
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
        const char *addr = tent_segment_attr_copy(x->target, "rpc_addr",
                                                  addr_buf, sizeof(addr_buf))
                               ? addr_buf
                               : NULL;
        struct tcp_peer *p = NULL;
        struct slice *head, *tail;
        uint32_t cnt = 0;
        int rc = TENT_OK;
        if (x->slot >= sb->base.capacity)
            rc = tent_set_error(TENT_EINVAL, "tcp: slot %u beyond capacity",
                                x->slot);
        else if (!addr)
            rc = tent_set_error(TENT_EPEER,
                                "tcp: segment '%s' publishes no rpc_addr",
                                tent_segment_name_of(x->target));
        if (!rc) {
            pthread_mutex_lock(&t->lock);
            rc = t->accepting ? peer_get_locked(t, addr, &p)
                              : tent_set_error(TENT_ESHUTDOWN,
                                               "tcp: transport is shutting "
                                               "down");
            pthread_mutex_unlock(&t->lock);
        }
        if (!rc)
            rc = make_slices(t, sb, x, &head, &tail, &cnt);
        results[i] = rc;
        if (rc) {
            if (!first)
                first = rc;
            continue;
        }
        struct tcp_task *k = &sb->tasks[x->slot];
        atomic_store(&k->error, 0);
        k->length = x->length;
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
            q->nslices <= WINDOW_SLICES && run_inline(t, q->p, q->head))
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
    if (atomic_load(&k->remaining) > 0) {
        out->state = TENT_XFER_PENDING;
        return TENT_OK;
    }
    int err = atomic_load(&k->error);
    if (err) {
        out->state = TENT_XFER_FAILED;
        out->native_code = err;
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
