/* The engine's RPC server: an accept thread (poll on the listening socket
 * and a wake-up eventfd) and one thread per connection, so that a slow or
 * stalled peer holds only its own thread.  Every frame is decoded by
 * wire.c before use; a frame that does not validate closes its connection.
 *
 * Descriptor requests and notifications are answered through the owner's
 * handler table (rpc.h); every other frame type goes to the frame handler
 * a transport installed for it (tcp's reads and writes), which reads the
 * frame's body and answers through tent_rpc_conn_*.  The server knows
 * neither its owner nor the transports beyond those tables.
 *
 * Bounds (rpc.h tent_rpc_limits): each connection thread checks its own
 * frame deadline and idle time at every receive (at least every IO_TICK_MS);
 * the accept thread enforces the connection cap and picks whom to evict
 * from what the connection threads publish (frames, at_boundary, last_ms). */
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "rpc/rpc.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define IO_TICK_MS      500  /* receive timeout; stop and deadlines checked */
#define MID_FRAME_TICKS 20   /* a frame stalled this long (10 s) is dropped */
#define LOG_EVERY_MS    5000 /* rate of the refusal and eviction warnings */

#define IOBUF      65536 /* per-connection input and output buffers */
#define DIRECT_MIN 16384 /* larger reads bypass the input buffer */

/* Small requests are read many at a time into in[] and their small answers
 * gathered in out[], which is flushed before the thread would wait for
 * input (so a client waiting for answers always gets them) and before any
 * answer that carries data (so answers stay in order). */
struct tent_rpc_conn {
    struct tent_rpc_server *srv;
    int fd;
    char peer[64]; /* "<ip>:<port>" of the client */
    long long accepted_ms;
    long long deadline_ms; /* of the frame being served (this thread only) */
    /* Published for the accept thread's choice of whom to evict. */
    atomic_uint frames;      /* frames served whole */
    atomic_bool at_boundary; /* waiting for a frame, none of it read */
    atomic_llong last_ms;    /* end of the last frame (or accept) */
    bool evicted;            /* server lock */
    uint8_t in[IOBUF];
    size_t in_pos, in_len;
    uint8_t out[IOBUF];
    size_t out_len;
    pthread_t thread;
    atomic_bool done;
    struct tent_rpc_conn *next;
};

/* lock guards conns/nconns/nlive, the evicted flags and the accept thread's
 * counters; stop is set once, under lock.  It is a leaf lock: no handler is
 * called and no other lock is taken while it is held. */
/* One installed frame handler.  lock is held for reading around every call
 * of fn and for writing to change it, so a removal returns only once no
 * call is running. */
struct frame_slot {
    pthread_rwlock_t lock;
    tent_rpc_frame_fn fn;
    void *ctx;
};

struct tent_rpc_server {
    struct tent_rpc_handlers h;
    struct frame_slot frames[256];
    struct tent_rpc_limits lim;
    int lfd, wake_fd;
    pthread_t accept_thread;
    atomic_bool stop;
    pthread_mutex_t lock;
    struct tent_rpc_conn *conns;
    int nconns; /* in the list (evicted ones until reaped) */
    int nlive;  /* not evicted: what the cap counts */
    uint64_t accepted, evicted, refused;
    atomic_ulong idle_closed, frame_timeouts;
    struct tent_log_ratelimit refuse_rl, evict_rl;
};

/* The first byte of a frame is here: its whole must follow in time. */
static void frame_begin(struct tent_rpc_conn *c)
{
    c->deadline_ms = tent_now_ms() + c->srv->lim.frame_timeout_ms;
    atomic_store(&c->at_boundary, false);
}

/* Served.  Its answers may still sit in out[]: they get a frame's time to
 * leave (flushed before the next receive). */
static void frame_end(struct tent_rpc_conn *c)
{
    long long now = tent_now_ms();
    c->deadline_ms = now + c->srv->lim.frame_timeout_ms;
    atomic_store(&c->last_ms, now);
    atomic_fetch_add(&c->frames, 1);
    atomic_store(&c->at_boundary, true);
}

/* A send may wait out MID_FRAME_TICKS timeouts in a row, unless the
 * server stops or the frame's deadline passes (a client that does not read
 * its answers holds the connection no longer than a slow request would). */
static bool srv_send_wait(void *arg, int stalls)
{
    struct tent_rpc_conn *c = arg;
    if (tent_now_ms() >= c->deadline_ms) {
        atomic_fetch_add(&c->srv->frame_timeouts, 1);
        LOG_DEBUG("rpc: %s: answer not taken within rpc_frame_timeout_ms",
                  c->peer);
        return false;
    }
    return !atomic_load(&c->srv->stop) && stalls < MID_FRAME_TICKS;
}

static int srv_send(struct tent_rpc_conn *c, struct iovec *iov, int n)
{
    if (atomic_load(&c->srv->stop))
        return -1;
    return tent_net_sendv_all(c->fd, iov, n, 0, srv_send_wait, c) ? -1 : 0;
}

static int flush_out(struct tent_rpc_conn *c)
{
    if (!c->out_len)
        return 0;
    struct iovec iov = {c->out, c->out_len};
    c->out_len = 0;
    return srv_send(c, &iov, 1);
}

/* Receives exactly n bytes.  first: these are the first bytes of a frame,
 * so before any arrives the connection is idle (bounded by
 * idle_timeout_ms) and the first one starts the frame's deadline; every
 * other receive belongs to the frame being served and fails once its
 * deadline passes, however slowly bytes keep coming.  0, or -1 when the
 * connection must be dropped. */
static int srv_recv(struct tent_rpc_conn *c, void *buf, size_t n, bool first)
{
    char *p = buf;
    int ticks = 0;
    size_t got = 0;
    while (got < n) {
        bool idle = first && got == 0;
        if (c->in_pos < c->in_len) {
            if (idle)
                frame_begin(c);
            size_t k = c->in_len - c->in_pos;
            if (k > n - got)
                k = n - got;
            memcpy(p + got, c->in + c->in_pos, k);
            c->in_pos += k;
            got += k;
            ticks = 0;
            continue;
        }
        if (flush_out(c) || atomic_load(&c->srv->stop))
            return -1;
        long long now = tent_now_ms();
        if (idle &&
            now - atomic_load(&c->last_ms) >= c->srv->lim.idle_timeout_ms) {
            atomic_fetch_add(&c->srv->idle_closed, 1);
            LOG_DEBUG("rpc: %s: closing a connection idle for %d ms", c->peer,
                      c->srv->lim.idle_timeout_ms);
            return -1;
        }
        if (!idle && now >= c->deadline_ms) {
            atomic_fetch_add(&c->srv->frame_timeouts, 1);
            LOG_DEBUG("rpc: %s: dropping a frame not whole within %d ms",
                      c->peer, c->srv->lim.frame_timeout_ms);
            return -1;
        }
        bool direct = n - got >= DIRECT_MIN;
        ssize_t r = direct ? recv(c->fd, p + got, n - got, 0)
                           : recv(c->fd, c->in, sizeof(c->in), 0);
        if (r > 0) {
            if (direct) {
                got += (size_t)r;
            } else {
                c->in_pos = 0;
                c->in_len = (size_t)r;
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
        if (idle)
            continue;
        if (++ticks >= MID_FRAME_TICKS)
            return -1;
    }
    return 0;
}

static int send_resp(struct tent_rpc_conn *c, uint32_t seq, int32_t status,
                     const void *data, uint32_t len)
{
    uint8_t h[TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN];
    tent_wire_encode_hdr(h, TENT_WIRE_RESP, seq, TENT_WIRE_RESP_LEN + len);
    tent_wire_encode_resp(h + TENT_WIRE_HDR_LEN, status);
    if (!len && c->out_len + sizeof(h) <= sizeof(c->out)) {
        memcpy(c->out + c->out_len, h, sizeof(h));
        c->out_len += sizeof(h);
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
        if (srv_recv(c, tmp, k, false))
            return -1;
        n -= k;
    }
    return 0;
}

/* ---- the frame handlers' view of a connection ------------------------- */

int tent_rpc_conn_recv(struct tent_rpc_conn *c, void *buf, size_t n)
{
    return srv_recv(c, buf, n, false);
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

void tent_rpc_conn_abort(struct tent_rpc_conn *c)
{
    shutdown(c->fd, SHUT_RDWR);
}

/* A frame of a type a transport serves: its handler, else the body is
 * skipped and the client told TENT_ENOTSUP (no transport here serves it). */
static int serve_installed(struct tent_rpc_conn *c,
                           const struct tent_wire_hdr *h)
{
    struct frame_slot *f = &c->srv->frames[h->type];
    pthread_rwlock_rdlock(&f->lock);
    int rc;
    if (f->fn) {
        rc = f->fn(f->ctx, c, h);
    } else {
        rc = drain(c, h->len);
        if (!rc)
            rc = send_resp(c, h->seq, TENT_ENOTSUP, NULL, 0);
    }
    pthread_rwlock_unlock(&f->lock);
    return rc;
}

static int serve_notify(struct tent_rpc_conn *c, const struct tent_wire_hdr *h)
{
    uint8_t *body = malloc(h->len ? h->len : 1);
    struct tent_wire_notify *n = malloc(sizeof(*n));
    int rc = -1;
    if (!body || !n || srv_recv(c, body, h->len, false) ||
        tent_wire_decode_notify(body, h->len, n))
        goto out;
    const struct tent_rpc_handlers *hd = &c->srv->h;
    int st = hd->notify(hd->ctx, c->peer, n->from, n->name, n->msg);
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

static void *conn_main(void *arg)
{
    struct tent_rpc_conn *c = arg;
    for (;;) {
        uint8_t raw[TENT_WIRE_HDR_LEN];
        struct tent_wire_hdr h;
        if (srv_recv(c, raw, sizeof(raw), true))
            break;
        if (tent_wire_decode_hdr(raw, sizeof(raw), &h)) {
            LOG_WARN("rpc: dropping connection: %s", tent_last_error());
            break;
        }
        int rc;
        switch (h.type) {
        case TENT_WIRE_DESC_REQ:
            rc = serve_desc(c, &h);
            break;
        case TENT_WIRE_NOTIFY:
            rc = serve_notify(c, &h);
            break;
        case TENT_WIRE_READ:
        case TENT_WIRE_WRITE:
            rc = serve_installed(c, &h);
            break;
        default:
            LOG_WARN("rpc: dropping connection: frame type %u is not a "
                     "request",
                     h.type);
            rc = -1;
        }
        if (rc) {
            LOG_DEBUG("rpc: connection closed after frame type %u", h.type);
            break;
        }
        frame_end(c);
    }
    (void)flush_out(c); /* answers to the requests before the end */
    shutdown(c->fd, SHUT_RDWR);
    atomic_store(&c->done, true);
    return NULL;
}

/* Joins connections whose thread has finished.  Caller holds lock. */
static void reap_locked(struct tent_rpc_server *s, bool all)
{
    struct tent_rpc_conn **pp = &s->conns;
    while (*pp) {
        struct tent_rpc_conn *c = *pp;
        if (!all && !atomic_load(&c->done)) {
            pp = &c->next;
            continue;
        }
        if (all)
            shutdown(c->fd, SHUT_RDWR);
        pthread_join(c->thread, NULL);
        close(c->fd);
        *pp = c->next;
        s->nconns--;
        if (!c->evicted)
            s->nlive--;
        free(c);
    }
}

/* A live connection's class for eviction: 0 never used and waiting, 1
 * inside its first frame, 2 idle between frames, 3 inside a frame after
 * having completed one (a real peer at work: never evicted). */
static int conn_class(struct tent_rpc_conn *c)
{
    bool fresh = atomic_load(&c->frames) == 0;
    bool waiting = atomic_load(&c->at_boundary);
    return fresh ? (waiting ? 0 : 1) : (waiting ? 2 : 3);
}

/* Whom a newcomer replaces when the server is full: the oldest connection
 * that never completed a frame (waiting ones before ones inside their first
 * frame), else the one idle longest between frames.  NULL when every
 * connection is inside a frame after having completed one: a real peer at
 * work.  Caller holds lock. */
static struct tent_rpc_conn *pick_victim_locked(struct tent_rpc_server *s)
{
    long long now = tent_now_ms();
    struct tent_rpc_conn *best = NULL;
    int best_cls = 3;
    long long best_age = -1;
    for (struct tent_rpc_conn *c = s->conns; c; c = c->next) {
        if (c->evicted || atomic_load(&c->done))
            continue;
        int cls = conn_class(c);
        if (cls == 3)
            continue;
        long long age =
            now - (cls == 2 ? atomic_load(&c->last_ms) : c->accepted_ms);
        if (cls < best_cls || (cls == best_cls && age > best_age)) {
            best = c;
            best_cls = cls;
            best_age = age;
        }
    }
    return best;
}

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

/* Takes in one accepted socket: evicts to make room when full, or refuses
 * it when nobody can be evicted. */
static void admit(struct tent_rpc_server *s, int fd)
{
    struct tent_rpc_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        LOG_WARN("rpc: refusing a connection: out of memory");
        close(fd);
        return;
    }
    c->srv = s;
    c->fd = fd;
    peer_name(fd, c->peer, sizeof(c->peer));
    c->accepted_ms = tent_now_ms();
    atomic_init(&c->last_ms, c->accepted_ms);
    atomic_init(&c->at_boundary, true);
    atomic_init(&c->frames, 0);
    atomic_init(&c->done, false);

    unsigned long held;
    pthread_mutex_lock(&s->lock);
    if (s->nlive >= s->lim.max_conns) {
        struct tent_rpc_conn *v = pick_victim_locked(s);
        if (!v) {
            s->refused++;
            int open = s->nlive;
            pthread_mutex_unlock(&s->lock);
            if (tent_log_ratelimit_ok(&s->refuse_rl, LOG_EVERY_MS, &held))
                LOG_WARN("rpc: refusing a connection from %s: all %d "
                         "connections (rpc_max_connections) are serving "
                         "requests (%lu more refusals not logged)",
                         c->peer, open, held);
            close(fd);
            free(c);
            return;
        }
        /* The victim's thread sees its socket shut down, ends, and is
         * reaped later; from now on it does not count. */
        v->evicted = true;
        s->nlive--;
        s->evicted++;
        shutdown(v->fd, SHUT_RDWR);
        bool fresh = atomic_load(&v->frames) == 0;
        if (tent_log_ratelimit_ok(&s->evict_rl, LOG_EVERY_MS, &held))
            LOG_WARN("rpc: %d connections open (rpc_max_connections): closing "
                     "%s connection from %s to admit %s (%lu more evictions "
                     "not logged)",
                     s->lim.max_conns,
                     fresh ? "a never-used" : "the longest idle", v->peer,
                     c->peer, held);
    }
    if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
        pthread_mutex_unlock(&s->lock);
        LOG_WARN("rpc: refusing a connection from %s: cannot start a thread",
                 c->peer);
        close(fd);
        free(c);
        return;
    }
    c->next = s->conns;
    s->conns = c;
    s->nconns++;
    s->nlive++;
    s->accepted++;
    pthread_mutex_unlock(&s->lock);
}

static void *accept_main(void *arg)
{
    struct tent_rpc_server *s = arg;
    struct pollfd p[2] = {{.fd = s->lfd, .events = POLLIN},
                          {.fd = s->wake_fd, .events = POLLIN}};
    while (!atomic_load(&s->stop)) {
        int r = poll(p, 2, 1000);
        pthread_mutex_lock(&s->lock);
        reap_locked(s, false);
        pthread_mutex_unlock(&s->lock);
        if (r <= 0 || !(p[0].revents & POLLIN))
            continue;
        int fd = tent_net_accept(s->lfd, IO_TICK_MS);
        if (fd >= 0)
            admit(s, fd);
    }
    return NULL;
}

void tent_rpc_server_stats(struct tent_rpc_server *s,
                           struct tent_rpc_stats *out)
{
    pthread_mutex_lock(&s->lock);
    out->accepted = s->accepted;
    out->evicted = s->evicted;
    out->refused = s->refused;
    out->open = s->nlive;
    out->in_frame = 0;
    for (struct tent_rpc_conn *c = s->conns; c; c = c->next)
        out->in_frame +=
            !c->evicted && !atomic_load(&c->done) && conn_class(c) == 3;
    pthread_mutex_unlock(&s->lock);
    out->idle_closed = atomic_load(&s->idle_closed);
    out->frame_timeouts = atomic_load(&s->frame_timeouts);
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
    };
    if (!lim)
        lim = &defaults;
    if (lim->max_conns < 1 || lim->idle_timeout_ms < 1 ||
        lim->frame_timeout_ms < 1)
        return tent_set_error(TENT_EINVAL,
                              "rpc server: limits must be positive (max "
                              "connections %d, idle %d ms, frame %d ms)",
                              lim->max_conns, lim->idle_timeout_ms,
                              lim->frame_timeout_ms);
    /* non-blocking: a connection reset between poll and accept must not
     * stall the accept thread */
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

    struct tent_rpc_server *s = calloc(1, sizeof(*s));
    if (!s) {
        rc = tent_set_error(TENT_ENOMEM, "rpc server: out of memory");
        goto fail_alloc;
    }
    s->h = *h;
    s->lim = *lim;
    s->lfd = lfd;
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->wake_fd < 0) {
        rc = tent_set_error(TENT_ENOMEM, "rpc server: eventfd failed: %s",
                            strerror(errno));
        goto fail_event;
    }
    pthread_mutex_init(&s->lock, NULL);
    for (size_t i = 0; i < sizeof(s->frames) / sizeof(s->frames[0]); i++)
        pthread_rwlock_init(&s->frames[i].lock, NULL);
    if (pthread_create(&s->accept_thread, NULL, accept_main, s) != 0) {
        rc = tent_set_error(TENT_ENOMEM, "rpc server: cannot start a thread");
        goto fail_thread;
    }
    LOG_INFO("rpc server listening on %s:%u", host, (unsigned)real);
    *out = s;
    *bound_port = real;
    return TENT_OK;

fail_thread:
    for (size_t i = 0; i < sizeof(s->frames) / sizeof(s->frames[0]); i++)
        pthread_rwlock_destroy(&s->frames[i].lock);
    pthread_mutex_destroy(&s->lock);
    close(s->wake_fd);
fail_event:
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
    pthread_mutex_unlock(&s->lock);
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof(one)) < 0)
        LOG_DEBUG("rpc server: wake-up write failed: %s", strerror(errno));
    pthread_join(s->accept_thread, NULL);
    pthread_mutex_lock(&s->lock);
    reap_locked(s, true);
    pthread_mutex_unlock(&s->lock);
    close(s->lfd);
    close(s->wake_fd);
    for (size_t i = 0; i < sizeof(s->frames) / sizeof(s->frames[0]); i++)
        pthread_rwlock_destroy(&s->frames[i].lock);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int tent_rpc_server_handle(struct tent_rpc_server *s, uint8_t type,
                           tent_rpc_frame_fn fn, void *ctx)
{
    if (!s)
        return tent_set_error(TENT_ENULL, "rpc server: server is NULL");
    if (type != TENT_WIRE_READ && type != TENT_WIRE_WRITE)
        return tent_set_error(TENT_EINVAL,
                              "rpc server: frame type %u is not served by a "
                              "transport",
                              (unsigned)type);
    struct frame_slot *f = &s->frames[type];
    pthread_rwlock_wrlock(&f->lock);
    int rc = TENT_OK;
    if (fn && f->fn && (f->fn != fn || f->ctx != ctx))
        rc = tent_set_error(TENT_EEXIST,
                            "rpc server: frame type %u already has a handler",
                            (unsigned)type);
    else {
        f->fn = fn;
        f->ctx = fn ? ctx : NULL;
    }
    pthread_rwlock_unlock(&f->lock);
    return rc;
}
