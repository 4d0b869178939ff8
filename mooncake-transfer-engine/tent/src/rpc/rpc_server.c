/* The engine's RPC server: an accept thread (poll on the listening socket
 * and a wake-up eventfd) and one thread per connection, so that a slow or
 * stalled peer holds only its own thread.  Every frame is decoded by
 * wire.c before use; a frame that does not validate closes its connection.
 *
 * Data requests are checked by the owner's pin handler (bounds, permission,
 * served by tcp), which keeps the buffer pinned for the duration of the
 * copy, so an unregister in parallel answers busy instead of freeing memory
 * under the server.  The server knows its owner only through the handler
 * table (rpc.h). */
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
#include <unistd.h>

#define MAX_CONNS       256
#define IO_TICK_MS      500 /* receive timeout; the stop flag is checked */
#define MID_FRAME_TICKS 20  /* a frame stalled this long (10 s) is dropped */

#define IOBUF      65536 /* per-connection input and output buffers */
#define DIRECT_MIN 16384 /* larger reads bypass the input buffer */

/* Small requests are read many at a time into in[] and their small answers
 * gathered in out[], which is flushed before the thread would wait for
 * input (so a client waiting for answers always gets them) and before any
 * answer that carries data (so answers stay in order). */
struct conn {
    struct tent_rpc_server *srv;
    int fd;
    uint8_t in[IOBUF];
    size_t in_pos, in_len;
    uint8_t out[IOBUF];
    size_t out_len;
    pthread_t thread;
    atomic_bool done;
    struct conn *next;
};

/* lock guards conns/nconns; stop is set once, under lock.  It is a leaf
 * lock: no handler is called and no other lock is taken while it is held. */
struct tent_rpc_server {
    struct tent_rpc_handlers h;
    int lfd, wake_fd;
    pthread_t accept_thread;
    atomic_bool stop;
    pthread_mutex_t lock;
    struct conn *conns;
    int nconns;
};

/* A send may wait out MID_FRAME_TICKS timeouts in a row, unless the
 * server stops. */
static bool srv_send_wait(void *arg, int stalls)
{
    struct conn *c = arg;
    return !atomic_load(&c->srv->stop) && stalls < MID_FRAME_TICKS;
}

static int srv_send(struct conn *c, struct iovec *iov, int n)
{
    if (atomic_load(&c->srv->stop))
        return -1;
    return tent_net_sendv_all(c->fd, iov, n, srv_send_wait, c) ? -1 : 0;
}

static int flush_out(struct conn *c)
{
    if (!c->out_len)
        return 0;
    struct iovec iov = {c->out, c->out_len};
    c->out_len = 0;
    return srv_send(c, &iov, 1);
}

/* Receives exactly n bytes; idle_ok lets a frame boundary wait forever (until
 * stop).  0, or -1 when the connection must be dropped. */
static int srv_recv(struct conn *c, void *buf, size_t n, bool idle_ok)
{
    char *p = buf;
    int ticks = 0;
    size_t got = 0;
    while (got < n) {
        if (c->in_pos < c->in_len) {
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
        if (got == 0 && idle_ok)
            continue;
        if (++ticks >= MID_FRAME_TICKS)
            return -1;
    }
    return 0;
}

static int send_resp(struct conn *c, uint32_t seq, int32_t status,
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

static int serve_read(struct conn *c, const struct tent_wire_hdr *h)
{
    uint8_t body[TENT_WIRE_RW_LEN];
    struct tent_wire_rw rw;
    if (h->len != TENT_WIRE_RW_LEN || srv_recv(c, body, sizeof(body), false) ||
        tent_wire_decode_rw(body, sizeof(body), &rw))
        return -1;
    const struct tent_rpc_handlers *hd = &c->srv->h;
    void *pin;
    int st = hd->pin(hd->ctx, rw.addr, rw.length, false, &pin);
    if (st)
        return send_resp(c, h->seq, st, NULL, 0);
    int rc = send_resp(c, h->seq, 0, (const void *)(uintptr_t)rw.addr,
                       (uint32_t)rw.length);
    hd->unpin(hd->ctx, pin);
    return rc;
}

static int drain(struct conn *c, uint64_t n)
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

static int serve_write(struct conn *c, const struct tent_wire_hdr *h)
{
    uint8_t body[TENT_WIRE_RW_LEN];
    struct tent_wire_rw rw;
    if (h->len < TENT_WIRE_RW_LEN || srv_recv(c, body, sizeof(body), false) ||
        tent_wire_decode_rw(body, sizeof(body), &rw) ||
        rw.length != h->len - TENT_WIRE_RW_LEN)
        return -1;
    const struct tent_rpc_handlers *hd = &c->srv->h;
    void *pin;
    int st = hd->pin(hd->ctx, rw.addr, rw.length, true, &pin);
    if (st) {
        if (drain(c, rw.length))
            return -1;
        return send_resp(c, h->seq, st, NULL, 0);
    }
    int rc = srv_recv(c, (void *)(uintptr_t)rw.addr, rw.length, false);
    hd->unpin(hd->ctx, pin);
    if (rc)
        return -1;
    return send_resp(c, h->seq, 0, NULL, 0);
}

static int serve_notify(struct conn *c, const struct tent_wire_hdr *h)
{
    uint8_t *body = malloc(h->len ? h->len : 1);
    struct tent_wire_notify *n = malloc(sizeof(*n));
    int rc = -1;
    if (!body || !n || srv_recv(c, body, h->len, false) ||
        tent_wire_decode_notify(body, h->len, n))
        goto out;
    const struct tent_rpc_handlers *hd = &c->srv->h;
    int st = hd->notify(hd->ctx, n->from, n->name, n->msg);
    rc = send_resp(c, h->seq, st, NULL, 0);
out:
    free(n);
    free(body);
    return rc;
}

static int serve_desc(struct conn *c, const struct tent_wire_hdr *h)
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
    struct conn *c = arg;
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
            rc = serve_read(c, &h);
            break;
        case TENT_WIRE_WRITE:
            rc = serve_write(c, &h);
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
    }
    (void)flush_out(c); /* answers to the requests before the end */
    shutdown(c->fd, SHUT_RDWR);
    atomic_store(&c->done, true);
    return NULL;
}

/* Joins connections whose thread has finished.  Caller holds lock. */
static void reap_locked(struct tent_rpc_server *s, bool all)
{
    struct conn **pp = &s->conns;
    while (*pp) {
        struct conn *c = *pp;
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
        free(c);
    }
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
        if (fd < 0)
            continue;
        pthread_mutex_lock(&s->lock);
        struct conn *c = s->nconns < MAX_CONNS ? calloc(1, sizeof(*c)) : NULL;
        if (!c) {
            pthread_mutex_unlock(&s->lock);
            LOG_WARN("rpc: refusing a connection: %d open", MAX_CONNS);
            close(fd);
            continue;
        }
        c->srv = s;
        c->fd = fd;
        if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
            pthread_mutex_unlock(&s->lock);
            close(fd);
            free(c);
            continue;
        }
        c->next = s->conns;
        s->conns = c;
        s->nconns++;
        pthread_mutex_unlock(&s->lock);
    }
    return NULL;
}

int tent_rpc_server_start(const struct tent_rpc_handlers *h, const char *host,
                          uint16_t port, struct tent_rpc_server **out,
                          uint16_t *bound_port)
{
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
    s->lfd = lfd;
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->wake_fd < 0) {
        rc = tent_set_error(TENT_ENOMEM, "rpc server: eventfd failed: %s",
                            strerror(errno));
        goto fail_event;
    }
    pthread_mutex_init(&s->lock, NULL);
    if (pthread_create(&s->accept_thread, NULL, accept_main, s) != 0) {
        rc = tent_set_error(TENT_ENOMEM, "rpc server: cannot start a thread");
        goto fail_thread;
    }
    LOG_INFO("rpc server listening on %s:%u", host, (unsigned)real);
    *out = s;
    *bound_port = real;
    return TENT_OK;

fail_thread:
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
    pthread_mutex_destroy(&s->lock);
    free(s);
}
