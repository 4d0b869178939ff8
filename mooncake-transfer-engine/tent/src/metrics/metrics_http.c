/* The metrics endpoint: /metrics (Prometheus text 0.0.4), /metrics/json and
 * /health, served by libmicrohttpd.
 *
 * We bind the listening socket ourselves so that a port already taken is
 * reported with the host, the port and the system's reason, and port 0 gives
 * an ephemeral port we can read back.  libmicrohttpd does all the HTTP: one
 * internal polling thread (epoll), connections that idle past the timeout are
 * dropped (a slow client holds only its own connection), and every response
 * is rendered from a snapshot, so scrapes never block transfers. */
#include "common/compiler.h"
#include "common/error.h"
#include "common/log.h"
#include "metrics/metrics.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONNECTION_TIMEOUT_S 10
#define CONNECTION_LIMIT     4096
#define LISTEN_BACKLOG       1024

struct tm_http {
    struct MHD_Daemon *d;
    struct tent_metrics *m;
    char host[256];
    uint16_t port;
};

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
    /* The first call only announces the request; answer on the second, once
     * any body has been read (and ignored). */
    if (!*req_cls) {
        *req_cls = h;
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

int tm_http_start(struct tent_metrics *m, const char *host, int port,
                  int threads, struct tm_http **out)
{
    struct tm_http *h = calloc(1, sizeof(*h));
    if (!h)
        return tent_set_error(TENT_ENOMEM, "metrics: out of memory");
    int fd = -1;
    int rc = bind_listen(host, port, &fd);
    if (rc)
        goto fail_bind;
    h->m = m;
    snprintf(h->host, sizeof(h->host), "%s", host);
    h->port = bound_port(fd);
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    h->d = MHD_start_daemon(
        flags, 0, NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
        NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTION_LIMIT,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(threads > 1 ? threads : 0),
        MHD_OPTION_END);
    if (!h->d) {
        rc = tent_set_error(TENT_EIO,
                            "metrics: libmicrohttpd could not start on %s "
                            "port %u",
                            host, (unsigned)h->port);
        goto fail_daemon;
    }
    *out = h;
    return TENT_OK;

fail_daemon:
    close(fd);
fail_bind:
    free(h);
    return rc;
}

void tm_http_stop(struct tm_http *h)
{
    if (!h)
        return;
    /* Closes the listening socket and every connection, joins the thread. */
    MHD_stop_daemon(h->d);
    free(h);
}

void tm_http_addr(const struct tm_http *h, char *host, size_t len,
                  uint16_t *port)
{
    snprintf(host, len, "%s", h->host);
    *port = h->port;
}
