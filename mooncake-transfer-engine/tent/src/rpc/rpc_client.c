/* Client side of the RPC protocol: connection set-up and the two control
 * calls (descriptor fetch, notification). */
#include "common/auth.h"
#include "common/error.h"
#include "common/log.h"
#include "rpc/rpc.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tent_rpc_parse_addr(const char *name, char *host, size_t cap,
                        uint16_t *port)
{
    if (tent_net_split_hostport(name, host, cap, port) != 0 || *port == 0)
        return tent_set_error(TENT_EINVAL,
                              "segment name '%s' is not '<host>:<port>' with "
                              "a port 1..65535 and a host of 1..%zu "
                              "characters",
                              name ? name : "(null)", cap ? cap - 1 : 0);
    return TENT_OK;
}

int tent_rpc_connect(const char *host, uint16_t port, int timeout_ms, int *out)
{
    return tent_rpc_connect_from(host, port, NULL, timeout_ms, out);
}

int tent_rpc_connect_from(const char *host, uint16_t port, const char *src,
                          int timeout_ms, int *out)
{
    int rc =
        tent_net_connect_from(host, port, src, timeout_ms, timeout_ms, out);
    if (tent_net_is_resolve_error(rc))
        return tent_set_error(TENT_EPEER, "cannot resolve '%s': %s", host,
                              tent_net_strerror(rc));
    if (rc)
        return tent_set_error(rc == -ETIMEDOUT ? TENT_ETIMEDOUT : TENT_EPEER,
                              "connect to %s:%u%s%s failed: %s", host,
                              (unsigned)port, src && *src ? " from " : "",
                              src && *src ? src : "", tent_net_strerror(rc));
    return TENT_OK;
}

int tent_rpc_open(const struct tent_auth *auth, const char *ident,
                  const char *host, uint16_t port, const char *src,
                  int timeout_ms, int *out)
{
    int fd;
    int rc = tent_rpc_connect_from(host, port, src, timeout_ms, &fd);
    if (rc || !auth) {
        *out = rc ? -1 : fd;
        return rc;
    }
    char peer[300];
    tent_net_format_hostport(peer, sizeof(peer), host, port);
    rc = tent_auth_client(auth, fd, ident, peer);
    if (rc) {
        int err = errno; /* the socket's, for a caller that retries */
        close(fd);
        errno = err;
        *out = -1;
        return rc;
    }
    *out = fd;
    return TENT_OK;
}

int tent_rpc_send_all(int fd, const void *buf, size_t n)
{
    size_t left;
    int rc = tent_net_send_all(fd, buf, n, &left);
    if (rc == -EAGAIN)
        return tent_set_error(TENT_ETIMEDOUT,
                              "send timed out with %zu bytes left", left);
    if (rc)
        return tent_set_error(TENT_EPEER, "send failed: %s",
                              tent_net_strerror(rc));
    return TENT_OK;
}

int tent_rpc_recv_all(int fd, void *buf, size_t n)
{
    size_t left;
    int rc = tent_net_recv_all(fd, buf, n, &left);
    if (rc == -EAGAIN)
        return tent_set_error(TENT_ETIMEDOUT,
                              "receive timed out with %zu bytes left", left);
    if (rc == -ECONNRESET)
        return tent_set_error(TENT_EPEER,
                              "connection closed by peer with %zu bytes "
                              "outstanding",
                              left);
    if (rc)
        return tent_set_error(TENT_EPEER, "receive failed: %s",
                              tent_net_strerror(rc));
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

int tent_rpc_fetch_desc(const struct tent_auth *auth, const char *ident,
                        const char *host, uint16_t port, int timeout_ms,
                        struct tent_wire_desc *out)
{
    int fd;
    int rc = tent_rpc_open(auth, ident, host, port, NULL, timeout_ms, &fd);
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

int tent_rpc_call_status(int fd, uint8_t type, const void *body, uint32_t len,
                         const char *what, int32_t *status)
{
    struct tent_wire_hdr h;
    uint8_t resp[TENT_WIRE_RESP_LEN];
    int rc = call(fd, type, body, len, &h);
    if (!rc && (h.type != TENT_WIRE_RESP || h.len != TENT_WIRE_RESP_LEN))
        rc = tent_set_error(TENT_EPROTO, "%s answered by frame type %u len %u",
                            what, h.type, h.len);
    if (!rc)
        rc = tent_rpc_recv_all(fd, resp, sizeof(resp));
    if (!rc)
        rc = tent_wire_decode_resp(resp, sizeof(resp), status);
    return rc;
}

int tent_rpc_notify(const struct tent_auth *auth, const char *host,
                    uint16_t port, int timeout_ms, const char *name,
                    const char *msg, const char *from)
{
    uint8_t body[TENT_WIRE_MAX_NOTIFY];
    int len = tent_wire_encode_notify(body, name, msg, from);
    if (len < 0)
        return len;
    int fd;
    int rc = tent_rpc_open(auth, from, host, port, NULL, timeout_ms, &fd);
    if (rc)
        return rc;
    int32_t status = 0;
    rc = tent_rpc_call_status(fd, TENT_WIRE_NOTIFY, body, (uint32_t)len,
                              "notification", &status);
    if (!rc && status)
        rc = tent_set_error(status, "peer %s:%u refused the notification: %s",
                            host, (unsigned)port, tent_strerror(status));
    close(fd);
    return rc;
}

int tent_rpc_cc_parse(const char *cc, char *out)
{
    size_t n = strlen(cc);
    bool ok = n < TENT_RPC_CC_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)cc[i]) || cc[i] == '_' || cc[i] == '-';
    if (!ok)
        return tent_set_error(TENT_ECONFIG,
                              "config: '%s' is '%s', not a congestion "
                              "control name (at most %d letters, digits, "
                              "'_', '-'; \"\" for the kernel's default)",
                              TENT_RPC_CC_KEY, cc, TENT_RPC_CC_MAX - 1);
    memcpy(out, cc, n + 1);
    return TENT_OK;
}

void tent_rpc_tune_loopback(int fd, const char *cc)
{
    int r = tent_net_set_loopback_cc(fd, cc);
    static atomic_bool told;
    if (r < 0 && !atomic_exchange(&told, true))
        LOG_INFO("rpc: loopback connections keep the kernel's congestion "
                 "control: %s '%s' was refused: %s (see "
                 "net.ipv4.tcp_allowed_congestion_control)",
                 TENT_RPC_CC_KEY, cc, strerror(-r));
}
