/* mf_host networking: sockets, the rpc server, peers and their connection
 * pools, and the monitor thread that turns a dropped control connection
 * into a peer-down event. */
#include "mf_host.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- sockets ------------------------------------------------------------ */

int mfh_split_url(const char *url, char *host, size_t host_len, uint16_t *port)
{
    const char *colon = strrchr(url, ':');
    if (!colon || colon == url || colon[1] == '\0')
        return -1;
    const char *h = url;
    size_t n = (size_t)(colon - url);
    if (h[0] == '[') { /* [v6]:port */
        if (n < 2 || h[n - 1] != ']')
            return -1;
        h++;
        n -= 2;
    }
    if (n == 0 || n >= host_len)
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(colon + 1, &end, 10);
    if (errno || *end != '\0' || v > 65535 || colon[1] < '0' || colon[1] > '9')
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (uint16_t)v;
    return 0;
}

static void set_timeouts(int fd, int timeout_ms)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000,
                         .tv_usec = (timeout_ms % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static void set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Returns a connected socket with I/O timeouts of timeout_ms, or -1 (errno
 * set).  Linux bounds connect() itself by SO_SNDTIMEO. */
int mfh_connect(const char *host, uint16_t port, int timeout_ms)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char service[8];
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        MFH_DEBUG("getaddrinfo(%s): %s", host, gai_strerror(rc));
        errno = EHOSTUNREACH;
        return -1;
    }
    int fd = -1, err = ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        set_timeouts(fd, MFH_CONNECT_TIMEOUT_MS);
        set_nodelay(fd);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            set_timeouts(fd, timeout_ms);
            break;
        }
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        errno = err;
    return fd;
}

/* 0 on success; -1 with errno (EPIPE for a closed peer, EAGAIN for a
 * timeout, EFAULT for a bad local buffer). */
int mfh_send_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int mfh_recv_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int mfh_send_user(int fd, const void *buf, size_t len)
{
    MFH_USER_IO_BEGIN();
    int rc = mfh_send_full(fd, buf, len);
    int err = errno;
    MFH_USER_IO_END();
    errno = err;
    return rc;
}

int mfh_recv_user(int fd, void *buf, size_t len)
{
    MFH_USER_IO_BEGIN();
    int rc = mfh_recv_full(fd, buf, len);
    int err = errno;
    MFH_USER_IO_END();
    errno = err;
    return rc;
}

/* ---- server ------------------------------------------------------------- */

/* A served connection's buffered input and output.  Requests of a
 * pipelined run arrive together: they are read with one receive call and
 * their small answers leave with one send, instead of one system call per
 * header and per answer.  Pending answers are flushed before every
 * blocking receive, so a peer waiting for them is never kept waiting. */
struct srv_io {
    int fd;
    size_t in_pos, in_len, out_len;
    uint8_t in[65536];
    uint8_t out[8192];
};

static int io_flush(struct srv_io *io)
{
    if (io->out_len == 0)
        return 0;
    size_t n = io->out_len;
    io->out_len = 0;
    return mfh_send_full(io->fd, io->out, n);
}

/* Reads n bytes (from the buffer first).  user: dst is user memory (see
 * MFH_USER_IO_BEGIN).  idle: nothing of this message was read yet, so a
 * receive timeout only means an idle connection: keep waiting. */
static int io_read(struct mfh_handle *h, struct srv_io *io, void *dst, size_t n,
                   bool user, bool idle)
{
    uint8_t *p = dst;
    while (n > 0) {
        if (io->in_pos < io->in_len) {
            size_t k =
                io->in_len - io->in_pos < n ? io->in_len - io->in_pos : n;
            if (user)
                MFH_USER_IO_BEGIN();
            memcpy(p, io->in + io->in_pos, k);
            if (user)
                MFH_USER_IO_END();
            io->in_pos += k;
            p += k;
            n -= k;
            idle = false;
            continue;
        }
        if (io_flush(io) != 0)
            return -1;
        if (n >= 16384) /* bulk data: straight into place */
            return user ? mfh_recv_user(io->fd, p, n)
                        : mfh_recv_full(io->fd, p, n);
        ssize_t r = recv(io->fd, io->in, sizeof(io->in), 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN && idle && !atomic_load(&h->stopping))
            continue; /* idle connection: keep waiting */
        if (r <= 0) {
            if (r == 0)
                errno = ECONNRESET;
            return -1;
        }
        io->in_pos = 0;
        io->in_len = (size_t)r;
    }
    return 0;
}

/* Sends len bytes after what is pending.  user: see io_read. */
static int io_send(struct srv_io *io, const void *buf, size_t len, bool user)
{
    if (len <= sizeof(io->out) - io->out_len && !user) {
        memcpy(io->out + io->out_len, buf, len);
        io->out_len += len;
        return 0;
    }
    if (io_flush(io) != 0)
        return -1;
    return user ? mfh_send_user(io->fd, buf, len)
                : mfh_send_full(io->fd, buf, len);
}

static int reply(struct srv_io *io, int32_t status, uint64_t addr, uint64_t len)
{
    struct mfh_msg m = {.magic = MFH_MAGIC,
                        .type = MFH_MSG_REPLY,
                        .status = status,
                        .addr = addr,
                        .len = len};
    return io_send(io, &m, sizeof(m), false);
}

static int drain(struct mfh_handle *h, struct srv_io *io, uint64_t len)
{
    char scratch[16384];
    while (len > 0) {
        size_t n = len < sizeof(scratch) ? (size_t)len : sizeof(scratch);
        if (io_read(h, io, scratch, n, false, false) != 0)
            return -1;
        len -= n;
    }
    return 0;
}

static int serve_hello(struct mfh_handle *h, struct srv_io *io,
                       const struct mfh_msg *m)
{
    struct mfh_hello in,
        out = {.version = MFH_VERSION,
               .pid = (uint32_t)getpid(),
               .proto = h->proto,
               .gen_addr = (uint64_t)(uintptr_t)&h->mem_gen,
               .probe_addr = (uint64_t)(uintptr_t)&h->probe_value,
               .probe_value = h->probe_value};
    if (io_read(h, io, &in, sizeof(in), false, false) != 0)
        return -1;
    bool same_version = mfh_wire_take_hello(&in) == 0;
    snprintf(out.uid, sizeof(out.uid), "%s", h->uid);
    MFH_DEBUG("%s: hello from %s (pid %u)", h->uid, in.uid, in.pid);
    if (reply(io, same_version ? SM_OK : SM_NOT_SUPPORTED, 0, sizeof(out)) != 0)
        return -1;
    return io_send(io, &out, sizeof(out), false);
}

static int serve_check(struct mfh_handle *h, struct srv_io *io,
                       const struct mfh_msg *m)
{
    struct mfh_wire_range *r = malloc(m->len);
    if (!r)
        return drain(h, io, m->len) == 0 ? reply(io, SM_MALLOC_FAILED, 0, 0)
                                         : -1;
    if (io_read(h, io, r, m->len, false, false) != 0) {
        free(r);
        return -1;
    }
    int32_t status = SM_OK;
    uint64_t bad = 0;
    for (uint32_t i = 0; i < m->count; i++) {
        if (!mfh_range_registered(h, r[i].addr, r[i].len)) {
            MFH_WARN("%s: range [0x%llx, +%llu) is not registered here", h->uid,
                     (unsigned long long)r[i].addr,
                     (unsigned long long)r[i].len);
            status = SM_INVALID_PARAM;
            bad = i;
            break;
        }
    }
    free(r);
    return reply(io, status, bad, 0);
}

static int serve_ranges(struct mfh_handle *h, struct srv_io *io,
                        const struct mfh_msg *m)
{
    pthread_rwlock_rdlock(&h->mem_lock);
    uint64_t gen = atomic_load(&h->mem_gen);
    size_t n = h->n_ranges;
    struct mfh_wire_range *w = malloc((n ? n : 1) * sizeof(*w));
    for (size_t i = 0; w && i < n; i++)
        w[i] = (struct mfh_wire_range){.addr = h->ranges[i].base,
                                       .len = h->ranges[i].len};
    pthread_rwlock_unlock(&h->mem_lock);
    if (!w)
        return reply(io, SM_MALLOC_FAILED, 0, 0);
    struct mfh_msg r = {.magic = MFH_MAGIC,
                        .type = MFH_MSG_REPLY,
                        .status = SM_OK,
                        .count = (uint32_t)n,
                        .addr = gen,
                        .len = n * sizeof(*w)};
    int rc = io_send(io, &r, sizeof(r), false);
    if (rc == 0 && n)
        rc = io_send(io, w, n * sizeof(*w), false);
    free(w);
    return rc;
}

/* The range stays registered while the server copies into or out of it: the
 * read side of mem_lock is held across the (time-bounded) socket I/O, so a
 * concurrent smem_trans_deregister_mem waits for the copy instead of
 * returning while bytes are still being written into memory its owner is
 * about to free. */
static int serve_write(struct mfh_handle *h, struct srv_io *io,
                       const struct mfh_msg *m)
{
    pthread_rwlock_rdlock(&h->mem_lock);
    if (!mfh_ranges_cover(h->ranges, h->n_ranges, m->addr, m->len)) {
        pthread_rwlock_unlock(&h->mem_lock);
        MFH_WARN("%s: write to unregistered [0x%llx, +%llu) refused", h->uid,
                 (unsigned long long)m->addr, (unsigned long long)m->len);
        if (drain(h, io, m->len) != 0)
            return -1;
        return reply(io, SM_INVALID_PARAM, 0, 0);
    }
    int rc = io_read(h, io, (void *)(uintptr_t)m->addr, m->len, true, false);
    pthread_rwlock_unlock(&h->mem_lock);
    if (rc != 0)
        return -1;
    return reply(io, SM_OK, 0, 0);
}

static int serve_read(struct mfh_handle *h, struct srv_io *io,
                      const struct mfh_msg *m)
{
    pthread_rwlock_rdlock(&h->mem_lock);
    if (!mfh_ranges_cover(h->ranges, h->n_ranges, m->addr, m->len)) {
        pthread_rwlock_unlock(&h->mem_lock);
        MFH_WARN("%s: read of unregistered [0x%llx, +%llu) refused", h->uid,
                 (unsigned long long)m->addr, (unsigned long long)m->len);
        return reply(io, SM_INVALID_PARAM, 0, 0);
    }
    int rc = reply(io, SM_OK, 0, m->len);
    if (rc == 0)
        rc = io_send(io, (const void *)(uintptr_t)m->addr, m->len, true);
    pthread_rwlock_unlock(&h->mem_lock);
    return rc;
}

static void *srv_conn_main(void *arg)
{
    struct mfh_srv_conn *c = arg;
    struct mfh_handle *h = c->h;
    struct srv_io *io = malloc(sizeof(*io));
    if (io) {
        io->fd = c->fd;
        io->in_pos = io->in_len = io->out_len = 0;
    }
    while (io) {
        struct mfh_msg m;
        if (io_read(h, io, &m, sizeof(m), false, true) != 0)
            break;
        const char *why;
        if (mfh_wire_check_request(&m, &why) != 0) {
            MFH_WARN("%s: %s (magic 0x%x, type %u, len %llu), closing "
                     "connection",
                     h->uid, why, m.magic, m.type, (unsigned long long)m.len);
            break;
        }
        int rc;
        switch (m.type) {
        case MFH_MSG_HELLO:
            rc = serve_hello(h, io, &m);
            break;
        case MFH_MSG_CHECK:
            rc = serve_check(h, io, &m);
            break;
        case MFH_MSG_WRITE:
            rc = serve_write(h, io, &m);
            break;
        case MFH_MSG_READ:
            rc = serve_read(h, io, &m);
            break;
        case MFH_MSG_RANGES:
            rc = serve_ranges(h, io, &m);
            break;
        default:
            MFH_WARN("%s: unknown request type %u", h->uid, m.type);
            rc = -1;
        }
        if (rc != 0)
            break;
    }
    free(io);
    shutdown(c->fd, SHUT_RDWR);
    atomic_store(&c->finished, true);
    return NULL;
}

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

static void *accept_main(void *arg)
{
    struct mfh_handle *h = arg;
    while (!atomic_load(&h->stopping)) {
        int fd = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)
                continue;
            if (!atomic_load(&h->stopping))
                MFH_ERROR("%s: accept: %s", h->uid, strerror(errno));
            break;
        }
        reap_conns(h, false);
        set_timeouts(fd, MFH_IO_TIMEOUT_MS);
        set_nodelay(fd);
        struct mfh_srv_conn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        c->h = h;
        c->fd = fd;
        pthread_mutex_lock(&h->srv_lock);
        if (atomic_load(&h->stopping) ||
            pthread_create(&c->thread, NULL, srv_conn_main, c) != 0) {
            pthread_mutex_unlock(&h->srv_lock);
            close(fd);
            free(c);
            continue;
        }
        c->next = h->srv_conns;
        h->srv_conns = c;
        pthread_mutex_unlock(&h->srv_lock);
    }
    return NULL;
}

int mfh_server_start(struct mfh_handle *h)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *res = NULL;
    char service[8];
    snprintf(service, sizeof(service), "%u", (unsigned)h->port);
    int rc = getaddrinfo(h->host, service, &hints, &res);
    if (rc != 0) {
        MFH_ERROR("cannot resolve host '%s' of url: %s", h->host,
                  gai_strerror(rc));
        return SM_INVALID_PARAM;
    }
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
            listen(fd, 128) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        MFH_ERROR("cannot listen on %s:%u: %s", h->host, (unsigned)h->port,
                  strerror(err));
        return SM_ERROR;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        MFH_ERROR("getsockname: %s", strerror(errno));
        close(fd);
        return SM_ERROR;
    }
    h->port =
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
    h->listen_fd = fd;
    /* The unique id peers use as destUrl; set before anyone can ask. */
    snprintf(h->uid, sizeof(h->uid), strchr(h->host, ':') ? "[%s]:%u" : "%s:%u",
             h->host, (unsigned)h->port);
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
    pthread_mutex_lock(&h->srv_lock);
    for (struct mfh_srv_conn *c = h->srv_conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&h->srv_lock);
    reap_conns(h, true);
    if (h->listen_fd >= 0) {
        close(h->listen_fd);
        h->listen_fd = -1;
    }
}

/* ---- peers -------------------------------------------------------------- */

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
        mfh_fire_peer_down(h, p->uid);
    }
    if (listed)
        mfh_peer_put(p);
}

static int handshake(struct mfh_handle *h, struct mfh_peer *p)
{
    struct mfh_hello out = {
        .version = MFH_VERSION, .pid = (uint32_t)getpid(), .proto = h->proto};
    snprintf(out.uid, sizeof(out.uid), "%s", h->uid);
    struct mfh_msg m = {
        .magic = MFH_MAGIC, .type = MFH_MSG_HELLO, .len = sizeof(out)};
    struct mfh_hello in;
    if (mfh_send_full(p->ctrl_fd, &m, sizeof(m)) != 0 ||
        mfh_send_full(p->ctrl_fd, &out, sizeof(out)) != 0 ||
        mfh_recv_full(p->ctrl_fd, &m, sizeof(m)) != 0)
        return -1;
    if (mfh_wire_check_hello_reply(&m) != 0) {
        errno = EPROTO;
        return -1;
    }
    if (mfh_recv_full(p->ctrl_fd, &in, sizeof(in)) != 0)
        return -1;
    if (mfh_wire_take_hello(&in) != 0) {
        errno = EPROTO;
        return -1;
    }
    snprintf(p->uid, sizeof(p->uid), "%s", in.uid[0] ? in.uid : p->url);
    p->pid = (pid_t)in.pid;
    p->gen_addr = in.gen_addr;
    if (h->proto == SMEMB_DATA_OP_HOST_SHM) {
        uint64_t v = 0;
        struct iovec l = {.iov_base = &v, .iov_len = sizeof(v)};
        struct iovec r = {.iov_base = (void *)(uintptr_t)in.probe_addr,
                          .iov_len = sizeof(v)};
        ssize_t n = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
        if (n == (ssize_t)sizeof(v) && v == in.probe_value) {
            p->use_cma = true;
        } else {
            MFH_WARN("%s: host_shm: cross-memory attach to %s (pid %d) "
                     "failed (%s); copying over the tcp data path",
                     h->uid, p->uid, (int)p->pid,
                     n < 0 ? strerror(errno) : "not the same host");
        }
    }
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
        mfh_split_url(url, host, sizeof(host), &port) != 0 || port == 0) {
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
    p->ctrl_fd = mfh_connect(host, port, MFH_IO_TIMEOUT_MS);
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
        for (struct mfh_conn *c = p->conns; c; c = c->next) {
            if (!c->busy) {
                c->busy = true;
                pthread_mutex_unlock(&p->lock);
                return c;
            }
        }
        if (p->n_conns < MFH_POOL_MAX)
            break;
        pthread_cond_wait(&p->cond, &p->lock);
    }
    p->n_conns++; /* reserve a slot while connecting */
    pthread_mutex_unlock(&p->lock);

    char host[MFH_UID_MAX];
    uint16_t port = 0;
    int fd = -1;
    if (mfh_split_url(p->url, host, sizeof(host), &port) == 0)
        fd = mfh_connect(host, port, MFH_IO_TIMEOUT_MS);
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
    c->fd = fd;
    c->busy = true;
    c->next = p->conns;
    p->conns = c;
    pthread_mutex_unlock(&p->lock);
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
    }
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    if (broken) {
        close(c->fd);
        free(c);
    }
}

/* ---- monitor ------------------------------------------------------------ */

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

        int rc = poll(fds, n, -1);
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
