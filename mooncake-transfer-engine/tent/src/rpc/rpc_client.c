/* Client side of the RPC protocol: connection set-up and the two control
 * calls (descriptor fetch, notification). */
#include "common/error.h"
#include "rpc/rpc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int tent_rpc_parse_addr(const char *name, char *host, size_t cap,
                        uint16_t *port)
{
    const char *colon = name ? strrchr(name, ':') : NULL;
    if (!colon || colon == name || !colon[1])
        return tent_set_error(TENT_EINVAL,
                              "segment name '%s' is not '<host>:<port>'",
                              name ? name : "(null)");
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (*end || errno || p <= 0 || p > 65535)
        return tent_set_error(TENT_EINVAL,
                              "segment name '%s' has no valid port", name);
    const char *h = name;
    size_t hl = (size_t)(colon - name);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= cap)
        return tent_set_error(TENT_EINVAL,
                              "segment name '%s' has an empty or too long host",
                              name);
    memcpy(host, h, hl);
    host[hl] = 0;
    *port = (uint16_t)p;
    return TENT_OK;
}

void tent_rpc_set_timeouts(int fd, int timeout_ms)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000,
                         .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int tent_rpc_connect(const char *host, uint16_t port, int timeout_ms, int *out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", (unsigned)port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0)
        return tent_set_error(TENT_EPEER, "cannot resolve '%s': %s", host,
                              gai_strerror(g));
    int rc = TENT_EPEER, err = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family,
                        a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            r = poll(&p, 1, timeout_ms);
            if (r == 0) {
                err = ETIMEDOUT;
                close(fd);
                continue;
            }
            socklen_t sl = sizeof(err);
            err = 0;
            if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) ||
                err) {
                if (!err)
                    err = errno;
                close(fd);
                continue;
            }
        } else if (r != 0) {
            err = errno;
            close(fd);
            continue;
        }
        int fl = fcntl(fd, F_GETFL); /* back to blocking, with timeouts */
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
            err = errno;
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        tent_rpc_set_timeouts(fd, timeout_ms);
        *out = fd;
        rc = TENT_OK;
        break;
    }
    freeaddrinfo(res);
    if (rc)
        return tent_set_error(err == ETIMEDOUT ? TENT_ETIMEDOUT : TENT_EPEER,
                              "connect to %s:%u failed: %s", host,
                              (unsigned)port, strerror(err));
    return TENT_OK;
}

int tent_rpc_send_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int err = errno;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return tent_set_error(TENT_ETIMEDOUT,
                                      "send timed out with %zu bytes left", n);
            return tent_set_error(TENT_EPEER, "send failed: %s", strerror(err));
        }
        p += w;
        n -= (size_t)w;
    }
    return TENT_OK;
}

int tent_rpc_recv_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return tent_set_error(TENT_EPEER,
                                  "connection closed by peer with %zu bytes "
                                  "outstanding",
                                  n);
        if (r < 0) {
            int err = errno;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return tent_set_error(
                    TENT_ETIMEDOUT, "receive timed out with %zu bytes left", n);
            return tent_set_error(TENT_EPEER, "receive failed: %s",
                                  strerror(err));
        }
        p += r;
        n -= (size_t)r;
    }
    return TENT_OK;
}

/* Sends one request frame and receives the header of the answer. */
static int call(int fd, uint8_t type, const void *body, uint32_t len,
                struct tent_wire_hdr *resp)
{
    uint8_t hdr[TENT_WIRE_HDR_LEN];
    tent_wire_encode_hdr(hdr, type, 1, len);
    int rc = tent_rpc_send_all(fd, hdr, sizeof(hdr));
    if (!rc && len)
        rc = tent_rpc_send_all(fd, body, len);
    if (!rc)
        rc = tent_rpc_recv_all(fd, hdr, sizeof(hdr));
    if (!rc)
        rc = tent_wire_decode_hdr(hdr, sizeof(hdr), resp);
    if (!rc && resp->seq != 1)
        rc = tent_set_error(TENT_EPROTO, "answer carries sequence %u, not 1",
                            resp->seq);
    return rc;
}

int tent_rpc_fetch_desc(const char *host, uint16_t port, int timeout_ms,
                        struct tent_wire_desc *out)
{
    int fd;
    int rc = tent_rpc_connect(host, port, timeout_ms, &fd);
    if (rc)
        return rc;
    struct tent_wire_hdr h;
    char *body = NULL;
    rc = call(fd, TENT_WIRE_DESC_REQ, NULL, 0, &h);
    if (!rc && h.type != TENT_WIRE_DESC_RESP)
        rc = tent_set_error(TENT_EPROTO,
                            "descriptor request answered by frame type %u",
                            h.type);
    if (!rc && !(body = malloc(h.len ? h.len : 1)))
        rc = tent_set_error(TENT_ENOMEM, "descriptor: out of memory");
    if (!rc)
        rc = tent_rpc_recv_all(fd, body, h.len);
    if (!rc)
        rc = tent_wire_decode_desc(body, h.len, out);
    free(body);
    close(fd);
    return rc;
}

int tent_rpc_notify(const char *host, uint16_t port, int timeout_ms,
                    const char *name, const char *msg, const char *from)
{
    uint8_t body[TENT_WIRE_MAX_NOTIFY];
    int len = tent_wire_encode_notify(body, name, msg, from);
    if (len < 0)
        return len;
    int fd;
    int rc = tent_rpc_connect(host, port, timeout_ms, &fd);
    if (rc)
        return rc;
    struct tent_wire_hdr h;
    uint8_t resp[TENT_WIRE_RESP_LEN];
    int32_t status = 0;
    rc = call(fd, TENT_WIRE_NOTIFY, body, (uint32_t)len, &h);
    if (!rc && (h.type != TENT_WIRE_RESP || h.len != TENT_WIRE_RESP_LEN))
        rc = tent_set_error(TENT_EPROTO,
                            "notification answered by frame type %u len %u",
                            h.type, h.len);
    if (!rc)
        rc = tent_rpc_recv_all(fd, resp, sizeof(resp));
    if (!rc)
        rc = tent_wire_decode_resp(resp, sizeof(resp), &status);
    if (!rc && status)
        rc = tent_set_error(status, "peer %s:%u refused the notification: %s",
                            host, (unsigned)port, tent_strerror(status));
    close(fd);
    return rc;
}
