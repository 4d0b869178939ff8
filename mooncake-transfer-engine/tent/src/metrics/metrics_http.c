/* The metrics endpoint: /metrics (Prometheus text 0.0.4), /metrics/json and
 * /health, served by libmicrohttpd.
 *
 * We bind the listening socket ourselves so that a port already taken is
 * reported with the host, the port and the system's reason, and port 0 gives
 * an ephemeral port we can read back.  libmicrohttpd does all the HTTP: an
 * internal polling thread (epoll), or a pool of them, and every response is
 * rendered from a snapshot, so scrapes never block transfers.
 *
 * Slow clients: timeouts alone cannot stop slowloris (a client that sends a
 * header line now and then is never silent), and libmicrohttpd's own
 * limits refuse the scraper with the attacker (docs/security.md).  So this
 * endpoint keeps its own account of the connections, per address and in
 * total, and a newcomer beyond either count replaces the connection that
 * has waited longest for a request (make_room_locked). */
#include "common/clock.h"
#include "common/compiler.h"
#include "common/error.h"
#include "common/log.h"
#include "metrics/metrics.h"

#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received */
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define LISTEN_BACKLOG  1024
#define GRACE_MS        250   /* a connection this young is not replaced */
#define SILENT_GRACE_MS 2000  /* nor one this young that has sent nothing */
#define TRICKLE_SPAN_MS 1000  /* the sweeper: still sending this long after */
#define SWEEP_QUIET_MS  50    /* ... and quiet for this long */
#define SWEEP_MS        250   /* the sweeper's period while over a count */
#define BUSY_MAX_MS     10000 /* an answer not taken in this long: may be */
#define LOG_EVERY_MS    5000
#define BACKSTOP        16 /* libmicrohttpd's limit: this many times ours */

/* An address connections come from, and how many it holds. */
struct tm_addr {
    struct tm_addr *next;
    uint8_t key[17]; /* the family, then 4 or 16 address bytes */
    char name[64];   /* for the log */
    int n;           /* its connections */
    int live;        /* of which not replaced (what its share counts) */
};

/* One connection from its start to its close: socket_context. */
struct tm_conn {
    struct tm_conn *prev, *next; /* oldest since_ms first */
    int fd;
    struct tm_addr *addr;
    const struct MHD_Daemon *daemon; /* the (pool) daemon that runs it */
    long long since_ms; /* waiting for a request, or answering, since */
    bool busy;          /* a request is being answered */
    bool served;        /* it has had a request answered */
    bool evicted;       /* its socket is shut down; MHD closes it */
};

/* lock guards the connection list, the addresses and the sweeper's state
 * (libmicrohttpd calls in from each of its threads).  A leaf lock. */
struct tm_http {
    struct MHD_Daemon *d;
    struct tent_metrics *m;
    char host[256];
    uint16_t port;
    int max_conns, max_per_addr;
    pthread_mutex_t lock;
    pthread_cond_t over_cv; /* over a count with nobody replaceable yet */
    bool over, stop;
    pthread_t sweeper;
    struct tm_conn *head, *tail;
    struct tm_addr *addrs;
    int nconns; /* open */
    int live;   /* of which not replaced (what max_conns counts) */
    struct tent_log_ratelimit evict_rl;
};

/* ---- the connections' account ------------------------------------------- */

static void addr_key(const struct sockaddr *sa, uint8_t key[17], char *name,
                     size_t cap)
{
    memset(key, 0, 17);
    snprintf(name, cap, "?");
    if (!sa)
        return;
    socklen_t sl = 0;
    if (sa->sa_family == AF_INET) {
        key[0] = 4;
        memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        sl = sizeof(struct sockaddr_in);
    } else if (sa->sa_family == AF_INET6) {
        key[0] = 6;
        memcpy(key + 1, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        sl = sizeof(struct sockaddr_in6);
    }
    if (sl &&
        getnameinfo(sa, sl, name, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(name, cap, "?");
}

static void list_unlink(struct tm_http *h, struct tm_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        h->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        h->tail = c->prev;
    c->prev = c->next = NULL;
}

static void list_append(struct tm_http *h, struct tm_conn *c)
{
    c->prev = h->tail;
    c->next = NULL;
    if (h->tail)
        h->tail->next = c;
    else
        h->head = c;
    h->tail = c;
}

/* c starts waiting (busy false) or answering (busy true) now. */
static void conn_touch(struct tm_http *h, struct tm_conn *c, bool busy)
{
    pthread_mutex_lock(&h->lock);
    c->busy = busy;
    c->served = c->served || !busy;
    c->since_ms = tent_now_ms();
    list_unlink(h, c);
    list_append(h, c);
    pthread_mutex_unlock(&h->lock);
}

static bool has_unread(int fd)
{
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/* The kernel's view of what the client sent: false when it does not say. */
static bool tcp_rx(int fd, uint64_t *bytes, long long *quiet_ms)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) +
                  sizeof(ti.tcpi_bytes_received))
        return false;
    *bytes = ti.tcpi_bytes_received;
    *quiet_ms = ti.tcpi_last_data_recv; /* since the last data came */
    return true;
}

/* Whether c may be replaced now.  From a libmicrohttpd thread (d: the
 * daemon it runs), only a connection of that daemon: libmicrohttpd reads a
 * request and calls the handler in one step, so a connection past its grace
 * that is not answering and has nothing unread has sent no whole request.
 * From the sweeper (d NULL), which runs beside libmicrohttpd and could meet
 * a request between that read and the handler, only a client that is still
 * sending TRICKLE_SPAN_MS after it connected without a request whole, or
 * one that does not take its answer. */
static bool replaceable(const struct tm_conn *c, const struct MHD_Daemon *d,
                        long long now)
{
    long long age = now - c->since_ms;
    if (c->busy)
        return age >= BUSY_MAX_MS;
    uint64_t rx = 0;
    long long quiet = 0;
    if (d) {
        if (c->daemon != d || age < GRACE_MS || has_unread(c->fd))
            return false;
        return age >= SILENT_GRACE_MS || !tcp_rx(c->fd, &rx, &quiet) || rx > 0;
    }
    if (c->served || age < TRICKLE_SPAN_MS)
        return false;
    return tcp_rx(c->fd, &rx, &quiet) && rx > 0 && quiet >= SWEEP_QUIET_MS &&
           age - quiet >= TRICKLE_SPAN_MS && !has_unread(c->fd);
}

/* The connection of addr (any when NULL) that has waited longest, among
 * those replaceable (by d's thread, or the sweeper).  Caller holds lock. */
static struct tm_conn *oldest_locked(struct tm_http *h,
                                     const struct tm_addr *addr,
                                     const struct MHD_Daemon *d, long long now)
{
    for (struct tm_conn *c = h->head; c; c = c->next)
        if (!c->evicted && (!addr || c->addr == addr) && replaceable(c, d, now))
            return c;
    return NULL;
}

static void evict_locked(struct tm_http *h, struct tm_conn *v, long long now,
                         const char *key, int count)
{
    v->evicted = true;
    v->addr->live--;
    h->live--;
    shutdown(v->fd, SHUT_RDWR);
    unsigned long held;
    if (tent_log_ratelimit_ok(&h->evict_rl, LOG_EVERY_MS, &held))
        LOG_WARN("metrics http: %d connections open: closing one from %s "
                 "that waited %lld ms for a request, to keep to %s %d (%lu "
                 "more not logged)",
                 h->nconns, v->addr->name, now - v->since_ms, key, count, held);
}

/* Replaces connections, those that waited longest first, until every
 * address keeps to its share and the endpoint to its count (from the
 * address that holds the most), from d's thread or the sweeper (d NULL).
 * Replacing is shutting the socket down; libmicrohttpd then closes it.
 * Returns whether some count is still exceeded with nobody replaceable
 * yet.  Caller holds lock. */
static bool make_room_locked(struct tm_http *h, const struct MHD_Daemon *d,
                             long long now)
{
    bool over = false;
    for (struct tm_addr *a = h->addrs; a; a = a->next)
        while (a->live > h->max_per_addr) {
            struct tm_conn *v = oldest_locked(h, a, d, now);
            if (!v) {
                over = true;
                break;
            }
            evict_locked(h, v, now, "metrics/http_max_connections_per_address",
                         h->max_per_addr);
        }
    while (h->live > h->max_conns) {
        struct tm_addr *most = h->addrs;
        for (struct tm_addr *a = h->addrs; a; a = a->next)
            if (a->live > most->live)
                most = a;
        struct tm_conn *v = oldest_locked(h, most, d, now);
        if (!v)
            v = oldest_locked(h, NULL, d, now);
        if (!v) {
            over = true;
            break;
        }
        evict_locked(h, v, now, "metrics/http_max_connections", h->max_conns);
    }
    return over;
}

/* Replaces the trickling connections newcomers could not replace yet (too
 * young then), so that counts are kept when no newcomer comes (the
 * backstop reached, or the attack over): every SWEEP_MS while some count
 * is exceeded, asleep otherwise. */
static void *sweeper_main(void *arg)
{
    struct tm_http *h = arg;
    pthread_setname_np(pthread_self(), "tent-metrics-sw");
    pthread_mutex_lock(&h->lock);
    while (!h->stop) {
        if (!h->over) {
            pthread_cond_wait(&h->over_cv, &h->lock);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += SWEEP_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->over_cv, &h->lock, &ts);
        if (!h->stop)
            h->over = make_room_locked(h, NULL, tent_now_ms());
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

static void conn_started(struct tm_http *h, struct MHD_Connection *mc,
                         void **socket_context)
{
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const union MHD_ConnectionInfo *di =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_DAEMON);
    struct tm_conn *c = fi ? calloc(1, sizeof(*c)) : NULL;
    uint8_t key[17];
    char name[64];
    addr_key(ai ? ai->client_addr : NULL, key, name, sizeof(name));
    long long now = tent_now_ms();
    pthread_mutex_lock(&h->lock);
    struct tm_addr *a = h->addrs;
    while (a && memcmp(a->key, key, sizeof(key)) != 0)
        a = a->next;
    if (c && !a && (a = calloc(1, sizeof(*a))) != NULL) {
        memcpy(a->key, key, sizeof(key));
        snprintf(a->name, sizeof(a->name), "%s", name);
        a->next = h->addrs;
        h->addrs = a;
    }
    if (!c || !a) {
        pthread_mutex_unlock(&h->lock);
        free(c);
        *socket_context = NULL;
        /* untracked, it could not be replaced: do not keep it */
        if (fi)
            shutdown(fi->connect_fd, SHUT_RDWR);
        LOG_WARN("metrics http: dropping a connection from %s: out of "
                 "memory",
                 name);
        return;
    }
    c->fd = fi->connect_fd;
    c->daemon = di ? di->daemon : NULL;
    c->addr = a;
    c->since_ms = now;
    a->n++;
    a->live++;
    h->nconns++;
    h->live++;
    list_append(h, c);
    if (make_room_locked(h, c->daemon, now) && !h->over) {
        h->over = true;
        pthread_cond_signal(&h->over_cv);
    }
    pthread_mutex_unlock(&h->lock);
    *socket_context = c;
}

static void conn_closed(struct tm_http *h, struct tm_conn *c)
{
    pthread_mutex_lock(&h->lock);
    list_unlink(h, c);
    h->nconns--;
    if (!c->evicted) {
        h->live--;
        c->addr->live--;
    }
    if (--c->addr->n == 0) {
        struct tm_addr **pp = &h->addrs;
        while (*pp != c->addr)
            pp = &(*pp)->next;
        *pp = c->addr->next;
        free(c->addr);
    }
    pthread_mutex_unlock(&h->lock);
    free(c);
}

/* libmicrohttpd's connection notification: the choices of replacement are
 * made here, in its own thread, where no request can be half-way between
 * being read and being handed to us. */
static void conn_notify(void *cls, struct MHD_Connection *mc,
                        void **socket_context,
                        enum MHD_ConnectionNotificationCode code)
{
    struct tm_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_started(h, mc, socket_context);
    } else if (*socket_context) {
        conn_closed(h, *socket_context);
        *socket_context = NULL;
    }
}

static struct tm_conn *conn_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

/* A request has been answered (or abandoned): the connection waits for the
 * next one, from now. */
static void request_done(void *cls, struct MHD_Connection *mc,
                         void **req_cls TENT_UNUSED,
                         enum MHD_RequestTerminationCode toe TENT_UNUSED)
{
    struct tm_conn *c = conn_of(mc);
    if (c)
        conn_touch(cls, c, false);
}

/* ---- requests ----------------------------------------------------------- */

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status,
                             const char *type, char *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status,
                                  const char *text)
{
    char *body = strdup(text);
    if (!body)
        return MHD_NO;
    return reply(c, status, "text/plain; charset=utf-8", body, strlen(body));
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version TENT_UNUSED,
                              const char *upload_data TENT_UNUSED,
                              size_t *upload_data_size, void **req_cls)
{
    struct tm_http *h = cls;
    /* The first call only announces the request (its header is whole: the
     * connection is answering from now); answer on the second, once any
     * body has been read (and ignored). */
    if (!*req_cls) {
        *req_cls = h;
        struct tm_conn *tc = conn_of(c);
        if (tc)
            conn_touch(h, tc, true);
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
        strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED,
                          "only GET and HEAD are served\n");
    if (strcmp(url, "/health") == 0)
        return reply(c, MHD_HTTP_OK, "application/json",
                     strdup("{\"status\":\"ok\"}\n"), 16);
    enum tm_format fmt;
    const char *type;
    if (strcmp(url, "/metrics") == 0) {
        fmt = TM_FMT_PROMETHEUS;
        type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (strcmp(url, "/metrics/json") == 0) {
        fmt = TM_FMT_JSON;
        type = "application/json";
    } else {
        return reply_text(c, MHD_HTTP_NOT_FOUND,
                          "not found: try /metrics, /metrics/json or "
                          "/health\n");
    }
    char *body = NULL;
    size_t len = 0;
    if (tent_metrics_render(h->m, fmt, &body, &len) != TENT_OK)
        return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                          "metrics could not be rendered\n");
    return reply(c, MHD_HTTP_OK, type, body, len);
}

static void mhd_log(void *cls TENT_UNUSED, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void mhd_log(void *cls TENT_UNUSED, const char *fmt, va_list ap)
{
    if (!TENT_LOG_ENABLED(TENT_LOG_DEBUG))
        return;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    LOG_DEBUG("metrics http: %s", msg);
}

/* Binds host:port (port 0 = ephemeral) and listens; returns the socket. */
static int bind_listen(const char *host, int port, int *out)
{
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host, service, &hints, &res);
    if (gai != 0)
        return tent_set_error(TENT_ECONFIG,
                              "metrics: cannot resolve http_host '%s': %s",
                              host, gai_strerror(gai));
    int rc = TENT_OK, fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, LISTEN_BACKLOG) == 0)
            break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        rc = tent_set_error(TENT_EIO,
                            "metrics: cannot listen on %s port %d "
                            "(metrics/http_port): %s",
                            host, port, strerror(err));
    else
        *out = fd;
    return rc;
}

static uint16_t bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        return 0;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void stop_sweeper(struct tm_http *h)
{
    pthread_mutex_lock(&h->lock);
    h->stop = true;
    pthread_cond_signal(&h->over_cv);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->sweeper, NULL);
}

int tm_http_start(struct tent_metrics *m, const struct tent_metrics_config *cfg,
                  struct tm_http **out)
{
    struct tm_http *h = calloc(1, sizeof(*h));
    if (!h)
        return tent_set_error(TENT_ENOMEM, "metrics: out of memory");
    int fd = -1;
    int rc = bind_listen(cfg->http_host, cfg->http_port, &fd);
    if (rc)
        goto fail_bind;
    h->m = m;
    snprintf(h->host, sizeof(h->host), "%s", cfg->http_host);
    h->port = bound_port(fd);
    h->max_conns = cfg->http_max_conns;
    h->max_per_addr = cfg->http_max_per_addr;
    pthread_mutex_init(&h->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->over_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&h->sweeper, NULL, sweeper_main, h) != 0) {
        rc = tent_set_error(TENT_ENOMEM, "metrics: cannot start a thread");
        goto fail_thread;
    }
    unsigned threads =
        (unsigned)(cfg->http_threads > 1 ? cfg->http_threads : 0);
    /* the backstop for bursts of real scrapes (which replace nobody):
     * beyond it newcomers wait in the listen queue, so descriptors stay
     * bounded whatever a client opens.  libmicrohttpd's per-address limit
     * stays off: it would refuse a scraper sharing the attacker's address
     * (loopback, NAT). */
    unsigned limit = (unsigned)cfg->http_max_conns * BACKSTOP;
    if (limit > 65536)
        limit = 65536;
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    h->d = MHD_start_daemon(
        flags, 0, NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
        NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->http_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, limit, MHD_OPTION_NOTIFY_CONNECTION,
        conn_notify, h, MHD_OPTION_NOTIFY_COMPLETED, request_done, h,
        MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_END);
    if (!h->d) {
        rc = tent_set_error(TENT_EIO,
                            "metrics: libmicrohttpd could not start on %s "
                            "port %u",
                            cfg->http_host, (unsigned)h->port);
        goto fail_daemon;
    }
    *out = h;
    return TENT_OK;

fail_daemon:
    stop_sweeper(h);
fail_thread:
    pthread_cond_destroy(&h->over_cv);
    pthread_mutex_destroy(&h->lock);
    close(fd);
fail_bind:
    free(h);
    return rc;
}

void tm_http_stop(struct tm_http *h)
{
    if (!h)
        return;
    stop_sweeper(h);
    /* Closes the listening socket and every connection (each one's closed
     * notification frees its entry), joins the threads. */
    MHD_stop_daemon(h->d);
    pthread_cond_destroy(&h->over_cv);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

void tm_http_addr(const struct tm_http *h, char *host, size_t len,
                  uint16_t *port)
{
    snprintf(host, len, "%s", h->host);
    *port = h->port;
}
