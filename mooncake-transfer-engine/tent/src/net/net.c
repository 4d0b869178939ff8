#include "net/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(int err)
{
    errno = err;
    return -err;
}

const char *tent_net_strerror(int rc)
{
    if (tent_net_is_resolve_error(rc))
        return gai_strerror(rc - TENT_NET_EAI_BASE);
    return strerror(-rc);
}

int tent_net_split_hostport(const char *s, char *host, size_t cap,
                            uint16_t *port)
{
    const char *colon = s ? strrchr(s, ':') : NULL;
    if (!colon || colon == s || !colon[1])
        return fail(EINVAL);
    unsigned long p = 0;
    for (const char *d = colon + 1; *d; d++) {
        if (*d < '0' || *d > '9' || p > 65535)
            return fail(EINVAL);
        p = p * 10 + (unsigned long)(*d - '0');
    }
    if (p > 65535)
        return fail(EINVAL);
    const char *h = s;
    size_t n = (size_t)(colon - s);
    if (h[0] == '[') { /* [v6]:port */
        if (n < 2 || h[n - 1] != ']')
            return fail(EINVAL);
        h++;
        n -= 2;
    }
    if (n == 0 || n >= cap)
        return fail(EINVAL);
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (uint16_t)p;
    return 0;
}

static bool host_literal(const char *h)
{
    struct in6_addr a6;
    struct in_addr a4;
    return inet_pton(AF_INET6, h, &a6) == 1 ||
           inet_pton(AF_INET, h, &a4) == 1 || strcmp(h, "localhost") == 0;
}

bool tent_net_address_of(const char *name, char *host, size_t cap,
                         bool *with_port)
{
    if (!name || !*name || strlen(name) >= cap)
        return false;
    if (host_literal(name)) {
        memcpy(host, name, strlen(name) + 1);
        if (with_port)
            *with_port = false;
        return true;
    }
    uint16_t port;
    if (tent_net_split_hostport(name, host, cap, &port) != 0 ||
        !host_literal(host))
        return false;
    if (with_port)
        *with_port = true;
    return true;
}

int tent_net_format_hostport(char *buf, size_t len, const char *host,
                             unsigned port)
{
    if (strchr(host, ':'))
        return snprintf(buf, len, "[%s]:%u", host, port);
    return snprintf(buf, len, "%s:%u", host, port);
}

void tent_net_set_timeouts(int fd, int timeout_ms)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000,
                         .tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void tent_net_set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static bool sockaddr_is_loopback(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)a;
        return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
    }
    if (a->ss_family == AF_INET6) {
        const struct in6_addr *x = &((const struct sockaddr_in6 *)a)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(x))
            return x->s6_addr[12] == 127;
        return IN6_IS_ADDR_LOOPBACK(x);
    }
    return false;
}

bool tent_net_is_loopback_pair(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    return !getsockname(fd, (struct sockaddr *)&me, &ml) &&
           !getpeername(fd, (struct sockaddr *)&peer, &pl) &&
           sockaddr_is_loopback(&me) && sockaddr_is_loopback(&peer);
}

int tent_net_set_loopback_cc(int fd, const char *cc)
{
    if (!cc || !*cc || !tent_net_is_loopback_pair(fd))
        return 0;
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)))
        return -errno;
    return 1;
}

static int resolve(const char *host, uint16_t port, bool passive,
                   struct addrinfo **res)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags =
                                 AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
    char service[8];
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    int g = getaddrinfo(host, service, &hints, res);
    if (g != 0) {
        errno = EHOSTUNREACH;
        return TENT_NET_EAI_BASE + g;
    }
    return 0;
}

/* One connect attempt bounded by connect_ms; 0 or an errno value. */
static int connect_one(int fd, const struct addrinfo *a, int connect_ms)
{
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
        return 0;
    if (errno != EINPROGRESS)
        return errno;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int r;
    do
        r = poll(&p, 1, connect_ms);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return ETIMEDOUT;
    if (r < 0)
        return errno;
    int err = 0;
    socklen_t sl = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) != 0)
        return errno;
    return err;
}

int tent_net_connect(const char *host, uint16_t port, int connect_ms, int io_ms,
                     int *out)
{
    return tent_net_connect_from(host, port, NULL, connect_ms, io_ms, out);
}

/* Binds fd to the numeric address src (port 0) of family fam.  The port
 * is left to connect() (IP_BIND_ADDRESS_NO_PORT), which may share one with
 * other connections to other destinations: a bind() that picks it reserves
 * it for this socket alone, TIME_WAIT included, and a host that opens and
 * closes many bound connections runs out of ephemeral ports -- for every
 * program on it, not just this one. */
static int bind_source(int fd, int fam, const char *src)
{
#ifdef IP_BIND_ADDRESS_NO_PORT
    int one = 1;
    (void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
                     sizeof(one)); /* older kernels: bind() picks the port */
#endif
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t len;
    if (fam == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        if (inet_pton(AF_INET, src, &a->sin_addr) != 1)
            return EAFNOSUPPORT;
        len = sizeof(*a);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, src, &a->sin6_addr) != 1)
            return EAFNOSUPPORT;
        len = sizeof(*a);
    }
    return bind(fd, (struct sockaddr *)&ss, len) == 0 ? 0 : errno;
}

int tent_net_connect_from(const char *host, uint16_t port, const char *src,
                          int connect_ms, int io_ms, int *out)
{
    struct addrinfo *res = NULL;
    int rc = resolve(host, port, false, &res);
    if (rc)
        return rc;
    int err = ECONNREFUSED;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd =
            socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                   a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        err = src && *src ? bind_source(fd, a->ai_family, src) : 0;
        if (err == EAFNOSUPPORT) { /* the source is of the other family */
            close(fd);
            continue;
        }
        if (!err)
            err = connect_one(fd, a, connect_ms);
        int fl = err ? 0 : fcntl(fd, F_GETFL); /* blocking, with timeouts */
        if (!err && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
            err = errno;
        if (err) {
            close(fd);
            continue;
        }
        tent_net_set_nodelay(fd);
        tent_net_set_timeouts(fd, io_ms);
        freeaddrinfo(res);
        *out = fd;
        return 0;
    }
    freeaddrinfo(res);
    return fail(err);
}

int tent_net_listen(const char *host, uint16_t port, bool nonblock, int *out,
                    uint16_t *bound)
{
    struct addrinfo *res = NULL;
    int rc = resolve(host, port, true, &res);
    if (rc)
        return rc;
    int fd = -1, err = EADDRNOTAVAIL;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family,
                    a->ai_socktype | SOCK_CLOEXEC |
                        (nonblock ? SOCK_NONBLOCK : 0),
                    a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return fail(err);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        err = errno;
        close(fd);
        return fail(err);
    }
    *bound =
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
    *out = fd;
    return 0;
}

int tent_net_accept(int lfd, int io_ms)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return -errno;
    tent_net_set_nodelay(fd);
    tent_net_set_timeouts(fd, io_ms);
    return fd;
}

/* EWOULDBLOCK and EAGAIN are one condition: a socket timeout. */
static int io_error(int err)
{
    return fail(err == EWOULDBLOCK ? EAGAIN : err);
}

int tent_net_send_all(int fd, const void *buf, size_t n, size_t *left)
{
    const char *p = buf;
    int rc = 0;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = io_error(errno);
            break;
        }
        p += w;
        n -= (size_t)w;
    }
    if (left)
        *left = n;
    return rc;
}

int tent_net_recv_all(int fd, void *buf, size_t n, size_t *left)
{
    char *p = buf;
    int rc = 0;
    while (n) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = io_error(r == 0 ? ECONNRESET : errno);
            break;
        }
        p += r;
        n -= (size_t)r;
    }
    if (left)
        *left = n;
    return rc;
}

int tent_net_inbuf_read(int fd, struct tent_net_inbuf *in, void *dst, size_t n,
                        size_t direct_min)
{
    uint8_t *p = dst;
    while (n) {
        if (in->pos < in->len) {
            size_t k = in->len - in->pos < n ? in->len - in->pos : n;
            memcpy(p, in->b + in->pos, k);
            in->pos += k;
            p += k;
            n -= k;
            continue;
        }
        if (n >= direct_min)
            return tent_net_recv_all(fd, p, n, NULL);
        ssize_t r = recv(fd, in->b, in->cap, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return io_error(r == 0 ? ECONNRESET : errno);
        in->pos = 0;
        in->len = (size_t)r;
    }
    return 0;
}

int tent_net_sendv_some(int fd, struct iovec *iov, int n, int *at)
{
    while (*at < n) {
        int left = n - *at;
        struct msghdr m = {.msg_iov = iov + *at,
                           .msg_iovlen =
                               (size_t)(left < IOV_MAX ? left : IOV_MAX)};
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return io_error(errno);
        }
        size_t done = (size_t)w;
        while (*at < n && done >= iov[*at].iov_len) {
            done -= iov[*at].iov_len;
            iov[*at].iov_len = 0;
            (*at)++;
        }
        if (*at < n) {
            iov[*at].iov_base = (char *)iov[*at].iov_base + done;
            iov[*at].iov_len -= done;
        }
    }
    return 0;
}

long tent_net_inbuf_read_some(int fd, struct tent_net_inbuf *in, void *dst,
                              size_t n, size_t direct_min)
{
    if (in->pos < in->len) {
        size_t k = in->len - in->pos < n ? in->len - in->pos : n;
        memcpy(dst, in->b + in->pos, k);
        in->pos += k;
        return (long)k;
    }
    for (;;) {
        bool direct = n >= direct_min;
        ssize_t r = direct ? recv(fd, dst, n, MSG_DONTWAIT)
                           : recv(fd, in->b, in->cap, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return io_error(r == 0 ? ECONNRESET : errno);
        if (direct)
            return (long)r;
        in->pos = 0;
        in->len = (size_t)r;
        size_t k = (size_t)r < n ? (size_t)r : n;
        memcpy(dst, in->b, k);
        in->pos = k;
        return (long)k;
    }
}

int tent_net_sendv_all(int fd, struct iovec *iov, int n, int flags,
                       tent_net_wait_fn wait, void *arg)
{
    int stalls = 0;
    while (n > 0) {
        struct msghdr m = {.msg_iov = iov,
                           .msg_iovlen = (size_t)(n < IOV_MAX ? n : IOV_MAX)};
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL | flags);
        if (w < 0) {
            int err = errno;
            if (err == EINTR)
                continue;
            if ((err == EAGAIN || err == EWOULDBLOCK) && wait &&
                wait(arg, ++stalls))
                continue;
            return io_error(err);
        }
        stalls = 0;
        size_t done = (size_t)w;
        while (n > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return 0;
}
