/* Helpers of the metrics tests: quiet configuration, and a small blocking
 * HTTP/1.0 client (raw sockets on loopback) to probe the endpoint with good
 * and bad requests.  Header-only. */
#ifndef TENT_METRICS_TEST_UTIL_H
#define TENT_METRICS_TEST_UTIL_H

#include "common/config.h"
#include "tent/transfer_engine.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static inline void mt_config_quiet(void)
{
    tent_config_reset_global();
    tent_set_config("log_level", "error");
}

static inline double mt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline uint16_t mt_port(tent_engine_t e)
{
    char host[64];
    uint16_t port = 0;
    if (tent_metrics_http_addr_port(e, host, sizeof(host), &port) != TENT_OK)
        return 0;
    return port;
}

static inline int mt_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    if (rc != 0 && errno == EINTR) {
        /* A signal cut the wait short (a socket with a timeout is not
         * restarted); the connection goes on being made: wait for it. */
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n, err = 0;
        socklen_t len = sizeof(err);
        do
            n = poll(&p, 1, 20000);
        while (n < 0 && errno == EINTR);
        rc = -1;
        if (n == 0) {
            errno = ETIMEDOUT;
        } else if (n == 1 &&
                   getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0) {
            errno = err;
            rc = err ? -1 : 0;
        }
    }
    if (rc != 0) {
        fprintf(stderr, "mt_connect: 127.0.0.1:%u: %s\n", port,
                strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

struct mt_reply {
    int status; /* 0 when the server closed without a status line */
    char *head; /* status line and headers */
    char *body;
};

static inline void mt_reply_free(struct mt_reply *r)
{
    free(r->head);
    r->head = r->body = NULL;
}

/* Sends req and reads until the server closes; 0 on success. */
static inline int mt_get(uint16_t port, const char *req, struct mt_reply *r)
{
    memset(r, 0, sizeof(*r));
    int fd = mt_connect(port);
    if (fd < 0)
        return -1;
    size_t len = strlen(req), off = 0;
    while (off < len) {
        ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* the server may hang up on a bad request */
        off += (size_t)n;
    }
    size_t cap = 1 << 16, got = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (got == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        ssize_t n = recv(fd, buf + got, cap - got, 0);
        if (n < 0 && errno == EINTR)
            continue; /* a signal to this thread is not the end */
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    r->head = buf;
    char *sep = strstr(buf, "\r\n\r\n");
    if (sep) {
        *sep = '\0';
        r->body = sep + 4;
    } else {
        r->body = buf + got;
    }
    if (strncmp(buf, "HTTP/1.", 7) == 0 && got > 12)
        r->status = atoi(buf + 9);
    return 0;
}

/* n clients at once (non-blocking, one poll loop): each sends a scrape and
 * reads the whole answer.  Returns how many got 200 with a full body;
 * *unanswered counts those closed before any byte of an answer came. */
static inline int mt_scrape_many(uint16_t port, int n, double limit_s,
                                 int *unanswered)
{
    struct pollfd *p = calloc((size_t)n, sizeof(*p));
    size_t *got = calloc((size_t)n, sizeof(*got));
    char **buf = calloc((size_t)n, sizeof(*buf));
    bool *sent = calloc((size_t)n, sizeof(*sent));
    static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    for (int i = 0; i < n; i++) {
        p[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        connect(p[i].fd, (struct sockaddr *)&a, sizeof(a));
        p[i].events = POLLOUT;
        buf[i] = malloc(1 << 16);
    }
    int open_ = n, ok = 0;
    *unanswered = 0;
    double end = mt_now() + limit_s;
    while (open_ > 0 && mt_now() < end) {
        if (poll(p, (nfds_t)n, 1000) < 0)
            break;
        for (int i = 0; i < n; i++) {
            if (p[i].fd < 0 || !p[i].revents)
                continue;
            if (!sent[i] && (p[i].revents & POLLOUT)) {
                ssize_t w = send(p[i].fd, req, sizeof(req) - 1, MSG_NOSIGNAL);
                if (w == (ssize_t)(sizeof(req) - 1)) {
                    sent[i] = true;
                    p[i].events = POLLIN;
                } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    close(p[i].fd); /* refused or reset before the request */
                    p[i].fd = -1;
                    open_--;
                    ++*unanswered;
                }
                continue;
            }
            ssize_t r =
                recv(p[i].fd, buf[i] + got[i], (1 << 16) - 1 - got[i], 0);
            if (r > 0) {
                got[i] += (size_t)r;
                if (got[i] < (1 << 16) - 1)
                    continue;
            } else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
                continue;
            }
            buf[i][got[i]] = '\0';
            if (strncmp(buf[i], "HTTP/1.", 7) == 0 && atoi(buf[i] + 9) == 200 &&
                strstr(buf[i], "tent_write_bytes_total"))
                ok++;
            else if (got[i] == 0)
                ++*unanswered; /* closed before any byte of an answer */
            close(p[i].fd);
            p[i].fd = -1;
            open_--;
        }
    }
    for (int i = 0; i < n; i++) {
        if (p[i].fd >= 0)
            close(p[i].fd);
        free(buf[i]);
    }
    free(p);
    free(got);
    free(buf);
    free(sent);
    return ok;
}

static inline int mt_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

#endif
