/* mf_host peers: for each destUrl a control connection (HELLO, then
 * watched by the monitor thread: EOF there = peer down, reported to the
 * handle's peer-down callback; pinged every third of the peer server's
 * idle timeout, so that it stays open) and a pool of data connections
 * (each begins with a HELLO; one idle for half that timeout is closed
 * before reuse). */
#include "common/clock.h"
#include "mf_host.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- the peer-down callback ---------------------------------------------- */

void mfh_peer_down_callback_set(struct mfh_handle *h,
                                smem_trans_peer_down_callback_t cb, void *user)
{
    pthread_mutex_lock(&h->cb_lock);
    h->cb = cb;
    h->cb_user = user;
    pthread_mutex_unlock(&h->cb_lock);
}

static void fire_peer_down(struct mfh_handle *h, const char *uid)
{
    pthread_mutex_lock(&h->cb_lock);
    smem_trans_peer_down_callback_t cb = h->cb;
    void *user = h->cb_user;
    pthread_mutex_unlock(&h->cb_lock);
    if (cb)
        cb(uid, user);
}

static void wake_monitor(struct mfh_handle *h)
{
    uint64_t one = 1;
    ssize_t n = write(h->monitor_efd, &one, sizeof(one));
    (void)n;
}

void mfh_peer_put(struct mfh_peer *p)
{
    if (atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    struct mfh_conn *c = p->conns;
    while (c) {
        struct mfh_conn *next = c->next;
        close(c->fd);
        free(c);
        c = next;
    }
    if (p->ctrl_fd >= 0)
        close(p->ctrl_fd);
    free(p->cache);
    mfh_shm_release(p);
    mfh_ctl_detach(p);
    pthread_mutex_destroy(&p->cache_lock);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}

static void peer_shutdown_conns(struct mfh_peer *p)
{
    pthread_mutex_lock(&p->lock);
    for (struct mfh_conn *c = p->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    if (p->ctrl_fd >= 0)
        shutdown(p->ctrl_fd, SHUT_RDWR);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

/* Idempotent; the caller holds a reference on p. */
void mfh_peer_mark_down(struct mfh_peer *p, const char *why)
{
    struct mfh_handle *h = p->h;
    if (atomic_exchange(&p->down, true))
        return;
    bool listed = false;
    pthread_mutex_lock(&h->peer_lock);
    for (struct mfh_peer **pp = &h->peers; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            listed = true;
            break;
        }
    }
    pthread_mutex_unlock(&h->peer_lock);
    peer_shutdown_conns(p);
    wake_monitor(h);
    if (!atomic_load(&h->stopping)) {
        MFH_WARN("%s: peer %s is down (%s)", h->uid, p->uid, why);
        fire_peer_down(h, p->uid);
    }
    if (listed)
        mfh_peer_put(p);
}

/* Says HELLO on a new connection fd and takes the answer into *in; 0, or
 * -1 with errno.  Every connection, control or data, begins with it: the
 * server serves nothing before. */
static int hello(struct mfh_handle *h, int fd, struct mfh_hello *in)
{
    struct mfh_hello out = {.version = MFH_VERSION,
                            .pid = (uint32_t)getpid(),
                            .proto = h->proto,
                            .ctl_fd = -1}; /* the server side needs none */
    snprintf(out.uid, sizeof(out.uid), "%s", h->uid);
    struct mfh_msg m = {
        .magic = MFH_MAGIC, .type = MFH_MSG_HELLO, .len = sizeof(out)};
    if (mfh_send_full(fd, &m, sizeof(m)) != 0 ||
        mfh_send_full(fd, &out, sizeof(out)) != 0 ||
        mfh_recv_full(fd, &m, sizeof(m)) != 0)
        return -1;
    if (mfh_wire_check_hello_reply(&m) != 0) {
        errno = EPROTO;
        return -1;
    }
    if (mfh_recv_full(fd, in, sizeof(*in)) != 0)
        return -1;
    if (mfh_wire_take_hello(in) != 0) {
        errno = EPROTO;
        return -1;
    }
    return 0;
}

/* host_shm: maps the peer's control page, then reads the token it holds
 * from the peer's memory with cross-memory attach, at the address the page
 * names; true when both work. */
static bool attach_cma(struct mfh_handle *h, struct mfh_peer *p,
                       const struct mfh_hello *in)
{
    const char *why = NULL;
    if (mfh_ctl_attach(p, in->ctl_fd, in->ctl_ino, &why) != 0) {
        MFH_WARN("%s: host_shm: cannot map the control page of %s (pid %d): "
                 "%s; copying over the tcp data path",
                 h->uid, p->uid, (int)p->pid, why);
        return false;
    }
    uint64_t base = p->ctl->self_addr, want = p->ctl->probe, v = 0;
    struct iovec l = {.iov_base = &v, .iov_len = sizeof(v)};
    struct iovec r = {
        .iov_base = (void *)(uintptr_t)(base + offsetof(struct mfh_ctl, probe)),
        .iov_len = sizeof(v)};
    ssize_t n = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
    if (n == (ssize_t)sizeof(v) && v == want) {
        p->gen_addr = base + offsetof(struct mfh_ctl, mem_gen);
        return true;
    }
    MFH_WARN("%s: host_shm: cross-memory attach to %s (pid %d) failed (%s); "
             "copying over the tcp data path",
             h->uid, p->uid, (int)p->pid,
             n < 0 ? strerror(errno) : "not the same process");
    mfh_ctl_detach(p);
    return false;
}

static int handshake(struct mfh_handle *h, struct mfh_peer *p)
{
    struct mfh_hello in;
    if (hello(h, p->ctrl_fd, &in) != 0)
        return -1;
    snprintf(p->uid, sizeof(p->uid), "%s", in.uid[0] ? in.uid : p->url);
    p->pid = (pid_t)in.pid;
    p->srv_idle_ms =
        (int)(in.idle_timeout_ms > MFH_IO_TIMEOUT_MAX_MS ? MFH_IO_TIMEOUT_MAX_MS
                                                         : in.idle_timeout_ms);
    p->ping_ms = tent_now_ms();
    if (h->proto == SMEMB_DATA_OP_HOST_SHM)
        p->use_cma = attach_cma(h, p, &in);
    return 0;
}

/* Returns a referenced, connected peer for url, connecting on first use;
 * NULL if nobody answers there. */
static struct mfh_peer *peer_lookup(struct mfh_handle *h, const char *url)
{
    pthread_mutex_lock(&h->peer_lock);
    struct mfh_peer *p = h->peers;
    while (p && strcmp(p->url, url) != 0)
        p = p->next;
    if (p)
        atomic_fetch_add(&p->refs, 1);
    pthread_mutex_unlock(&h->peer_lock);
    return p;
}

struct mfh_peer *mfh_peer_get(struct mfh_handle *h, const char *url)
{
    /* Known peers never wait behind a connection being made to another. */
    struct mfh_peer *p = peer_lookup(h, url);
    if (p)
        return p;
    pthread_mutex_lock(&h->connect_lock);
    p = peer_lookup(h, url); /* connected while we waited? */
    if (p) {
        pthread_mutex_unlock(&h->connect_lock);
        return p;
    }

    char host[MFH_UID_MAX];
    uint16_t port;
    if (strlen(url) >= MFH_UID_MAX ||
        tent_net_split_hostport(url, host, sizeof(host), &port) != 0 ||
        port == 0) {
        MFH_ERROR("%s: bad peer url '%s' (want <host>:<port>)", h->uid, url);
        goto out_unlock;
    }
    p = calloc(1, sizeof(*p));
    if (!p)
        goto out_unlock;
    atomic_init(&p->refs, 1);
    atomic_init(&p->down, false);
    p->h = h;
    snprintf(p->url, sizeof(p->url), "%s", url);
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->cache_lock, NULL);
    pthread_rwlock_init(&p->map_lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->ctrl_fd = mfh_connect_url(url, h->io_timeout_ms);
    if (p->ctrl_fd < 0) {
        MFH_ERROR("%s: cannot connect to peer %s: %s", h->uid, url,
                  strerror(errno));
        goto out_free;
    }
    if (handshake(h, p) != 0) {
        MFH_ERROR("%s: handshake with peer %s failed: %s", h->uid, url,
                  strerror(errno));
        goto out_free;
    }
    pthread_mutex_lock(&h->peer_lock);
    if (atomic_load(&h->stopping)) {
        pthread_mutex_unlock(&h->peer_lock);
        goto out_free;
    }
    atomic_fetch_add(&p->refs, 1); /* the list's reference */
    p->next = h->peers;
    h->peers = p;
    pthread_mutex_unlock(&h->peer_lock);
    pthread_mutex_unlock(&h->connect_lock);
    wake_monitor(h);
    MFH_INFO("%s: connected to peer %s (pid %d, %s)", h->uid, p->uid,
             (int)p->pid, p->use_cma ? "cross-memory attach" : "tcp");
    return p;

out_free:
    mfh_peer_put(p);
    p = NULL;
out_unlock:
    pthread_mutex_unlock(&h->connect_lock);
    return NULL;
}

/* Shuts down every peer connection so blocked copies return at once. */
void mfh_peers_shutdown(struct mfh_handle *h)
{
    pthread_mutex_lock(&h->peer_lock);
    for (struct mfh_peer *p = h->peers; p; p = p->next)
        peer_shutdown_conns(p);
    pthread_mutex_unlock(&h->peer_lock);
}

void mfh_peers_release(struct mfh_handle *h)
{
    pthread_mutex_lock(&h->peer_lock);
    struct mfh_peer *p = h->peers;
    h->peers = NULL;
    pthread_mutex_unlock(&h->peer_lock);
    while (p) {
        struct mfh_peer *next = p->next;
        mfh_peer_put(p);
        p = next;
    }
}

/* A data connection for exclusive use, or NULL if the peer is down, the
 * handle stops, or no connection can be made. */
struct mfh_conn *mfh_conn_acquire(struct mfh_peer *p)
{
    struct mfh_handle *h = p->h;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (atomic_load(&p->down) || atomic_load(&h->stopping)) {
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
        /* a pooled connection idle for half the server's idle timeout is
         * closed here, before the server closes it under a request */
        long long now = tent_now_ms();
        for (struct mfh_conn **pp = &p->conns; *pp;) {
            struct mfh_conn *c = *pp;
            if (!c->busy && p->srv_idle_ms > 0 &&
                now - c->last_ms >= p->srv_idle_ms / 2) {
                *pp = c->next;
                p->n_conns--;
                close(c->fd);
                free(c);
                continue;
            }
            if (!c->busy) {
                c->busy = true;
                pthread_mutex_unlock(&p->lock);
                return c;
            }
            pp = &c->next;
        }
        if (p->n_conns < MFH_POOL_MAX)
            break;
        pthread_cond_wait(&p->cond, &p->lock);
    }
    p->n_conns++; /* reserve a slot while connecting */
    pthread_mutex_unlock(&p->lock);

    int fd = mfh_connect_url(p->url, h->io_timeout_ms);
    int err = errno;
    struct mfh_conn *c = fd >= 0 ? calloc(1, sizeof(*c)) : NULL;

    pthread_mutex_lock(&p->lock);
    if (!c || atomic_load(&p->down) || atomic_load(&h->stopping)) {
        p->n_conns--;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        if (fd >= 0)
            close(fd);
        else
            MFH_WARN("%s: data connection to %s failed: %s", h->uid, p->uid,
                     strerror(err));
        free(c);
        return NULL;
    }
    /* listed (busy) before its HELLO, so that a shutdown of the peer's
     * connections interrupts the exchange */
    c->fd = fd;
    c->busy = true;
    c->next = p->conns;
    p->conns = c;
    pthread_mutex_unlock(&p->lock);
    struct mfh_hello in;
    if (hello(h, fd, &in) != 0) {
        if (!atomic_load(&p->down) && !atomic_load(&h->stopping))
            MFH_WARN("%s: data connection to %s failed: HELLO: %s", h->uid,
                     p->uid, strerror(errno));
        mfh_conn_release(p, c, true);
        return NULL;
    }
    return c;
}

void mfh_conn_release(struct mfh_peer *p, struct mfh_conn *c, bool broken)
{
    pthread_mutex_lock(&p->lock);
    if (broken) {
        for (struct mfh_conn **pp = &p->conns; *pp; pp = &(*pp)->next) {
            if (*pp == c) {
                *pp = c->next;
                break;
            }
        }
        p->n_conns--;
    } else {
        c->busy = false;
        c->last_ms = tent_now_ms();
    }
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    if (broken) {
        /* A reset, sent at once: the server refuses what it still holds of
         * a request given up on (recv_payload), so that a write reported
         * failed never lands later. */
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        close(c->fd);
        free(c);
    }
}

/* ---- monitor ------------------------------------------------------------ */

/* Pings the control connections of snap[1..n) that are due; returns the
 * milliseconds until the next is due (-1: none ever is).  Only this
 * thread writes a listed peer's control connection.  A ping that does not
 * fit the socket's buffer is skipped: the connection is then busy enough
 * to break for other reasons. */
static int ping_due(struct mfh_peer **snap, size_t n)
{
    long long now = tent_now_ms(), next = -1;
    for (size_t i = 1; i < n; i++) {
        struct mfh_peer *p = snap[i];
        if (p->srv_idle_ms <= 0)
            continue;
        long long every = p->srv_idle_ms / 3 > 0 ? p->srv_idle_ms / 3 : 1;
        if (now - p->ping_ms >= every) {
            struct mfh_msg m = {.magic = MFH_MAGIC, .type = MFH_MSG_PING};
            ssize_t r =
                send(p->ctrl_fd, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL);
            (void)r; /* a broken connection shows in the poll */
            p->ping_ms = now;
        }
        long long left = p->ping_ms + every - now;
        if (next < 0 || left < next)
            next = left;
    }
    return next < 0 ? -1 : next > INT32_MAX ? INT32_MAX : (int)next;
}

/* Peers never send anything unsolicited on the control connection, so any
 * readiness there means it was closed or broke: the peer is down. */
static void *monitor_main(void *arg)
{
    struct mfh_handle *h = arg;
    struct pollfd *fds = NULL;
    struct mfh_peer **snap = NULL;
    size_t cap = 0;
    while (!atomic_load(&h->stopping)) {
        size_t n = 0;
        pthread_mutex_lock(&h->peer_lock);
        size_t want = 1;
        for (struct mfh_peer *p = h->peers; p; p = p->next)
            want++;
        if (want > cap) {
            struct pollfd *nf = realloc(fds, want * sizeof(*fds));
            if (nf)
                fds = nf;
            struct mfh_peer **ns = realloc(snap, want * sizeof(*snap));
            if (ns)
                snap = ns;
            if (nf && ns)
                cap = want;
        }
        if (cap == 0) { /* out of memory: retry shortly */
            pthread_mutex_unlock(&h->peer_lock);
            poll(NULL, 0, 100);
            continue;
        }
        fds[0] = (struct pollfd){.fd = h->monitor_efd, .events = POLLIN};
        n = 1;
        for (struct mfh_peer *p = h->peers; p && n < cap; p = p->next) {
            atomic_fetch_add(&p->refs, 1);
            snap[n] = p;
            fds[n] = (struct pollfd){.fd = p->ctrl_fd, .events = POLLIN};
            n++;
        }
        pthread_mutex_unlock(&h->peer_lock);

        int rc = poll(fds, n, ping_due(snap, n));
        if (rc > 0 && (fds[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(h->monitor_efd, &v, sizeof(v));
            (void)r;
        }
        for (size_t i = 1; i < n; i++) {
            if (rc > 0 && fds[i].revents && !atomic_load(&h->stopping)) {
                char b;
                ssize_t r = recv(fds[i].fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
                    mfh_peer_mark_down(snap[i], "control connection closed");
                else if (r > 0)
                    mfh_peer_mark_down(snap[i], "protocol violation");
            }
            mfh_peer_put(snap[i]);
        }
    }
    free(fds);
    free(snap);
    return NULL;
}

int mfh_monitor_start(struct mfh_handle *h)
{
    h->monitor_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->monitor_efd < 0) {
        MFH_ERROR("eventfd: %s", strerror(errno));
        return SM_ERROR;
    }
    if (pthread_create(&h->monitor_thread, NULL, monitor_main, h) != 0) {
        MFH_ERROR("cannot start the monitor thread");
        close(h->monitor_efd);
        h->monitor_efd = -1;
        return SM_ERROR;
    }
    h->monitor_started = true;
    return SM_OK;
}

void mfh_monitor_stop(struct mfh_handle *h)
{
    if (h->monitor_started) {
        wake_monitor(h);
        pthread_join(h->monitor_thread, NULL);
        h->monitor_started = false;
    }
    if (h->monitor_efd >= 0) {
        close(h->monitor_efd);
        h->monitor_efd = -1;
    }
}
