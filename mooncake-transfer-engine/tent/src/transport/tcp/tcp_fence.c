/* tcp transport: naming and fencing data connections.  An initiator opens
 * each data connection with a HELLO that names it by a token; when a window
 * on it fails mid-way, it asks the target over another rail to FENCE the
 * token: the target closes that connection and answers once nothing it
 * carried can still land, so the window's writes may go elsewhere.  Both
 * frames are served here through the RPC server's connection tags. */
#include "common/error.h"
#include "common/log.h"
#include "rpc/rpc.h"
#include "transport/tcp/tcp.h"

#include <unistd.h>

/* The token body HELLO and FENCE carry; -1 (drop the connection) when it is
 * malformed. */
static int recv_token(struct tent_rpc_conn *c, const struct tent_wire_hdr *h,
                      uint64_t *tok)
{
    uint8_t b[TCP_WIRE_TOKEN_LEN];
    if (h->len != TCP_WIRE_TOKEN_LEN || tent_rpc_conn_recv(c, b, sizeof(b)) ||
        tcp_wire_decode_token(b, sizeof(b), tok))
        return -1;
    return 0;
}

/* HELLO: the connection is known by the token from now on; a token fenced
 * before (this HELLO was still in the network) drops the connection before
 * anything on it is served. */
int tcp_serve_hello(void *ctx, struct tent_rpc_conn *c,
                    const struct tent_wire_hdr *h)
{
    (void)ctx;
    uint64_t tok;
    if (recv_token(c, h, &tok))
        return -1;
    if (tent_rpc_conn_tag(c, tok)) {
        LOG_DEBUG("tcp: %s: a connection fenced before it said hello",
                  tent_rpc_conn_peer(c));
        return -1;
    }
    return tent_rpc_conn_send_resp(c, h->seq, 0, NULL, 0);
}

/* FENCE: closes the connections the token names and answers once they are
 * gone, TENT_ETIMEDOUT if that takes too long (rpc.h
 * tent_rpc_conn_close_tagged). */
int tcp_serve_fence(void *ctx, struct tent_rpc_conn *c,
                    const struct tent_wire_hdr *h)
{
    (void)ctx;
    uint64_t tok;
    if (recv_token(c, h, &tok))
        return -1;
    int st = tent_rpc_conn_close_tagged(c, tok);
    LOG_DEBUG("tcp: %s fenced a connection: %s", tent_rpc_conn_peer(c),
              tent_strerror(st));
    return tent_rpc_conn_send_resp(c, h->seq, st, NULL, 0);
}

int tcp_fence(const struct tent_auth *auth, const char *ident, const char *host,
              uint16_t port, const char *src, int timeout_ms, uint64_t token)
{
    int fd;
    int rc = tent_rpc_open(auth, ident, host, port, src, timeout_ms, &fd);
    if (rc)
        return rc;
    uint8_t body[TCP_WIRE_TOKEN_LEN];
    tcp_wire_encode_token(body, token);
    int32_t status = 0;
    rc = tent_rpc_call_status(fd, TCP_WIRE_FENCE, body, sizeof(body), "fence",
                              &status);
    if (!rc && status)
        rc = tent_set_error(status,
                            "peer %s:%u could not close the old connection: "
                            "%s",
                            host, (unsigned)port, tent_strerror(status));
    close(fd);
    return rc;
}
