/* tcp transport: what its parts share.  tcp_transport.c is the initiator
 * (slices, windows, connection pools); tcp_target.c serves the peers' READ
 * and WRITE frames and tcp_fence.c their HELLO and FENCE frames through the
 * engine's RPC server; tcp_wire.h defines the frames. */
#ifndef TENT_TRANSPORT_TCP_TCP_H
#define TENT_TRANSPORT_TCP_TCP_H

#include "transport/tcp/tcp_wire.h"
#include "transport/transport.h"

/* Installs tcp's frame handlers (READ, WRITE, HELLO, FENCE) on the
 * engine's RPC server; nothing is left installed on failure. */
int tcp_target_start(const struct tent_xport_env *env);
/* Removes them; returns once no handler call is running. */
void tcp_target_stop(const struct tent_xport_env *env);

/* The RPC server's view of tcp's frames (rpc.h tent_rpc_frame_ops.measure:
 * tcp_wire_frame_data). */
int tcp_frame_measure(void *ctx, const struct tent_wire_hdr *h,
                      const uint8_t *body, size_t n, uint64_t *data);
/* The HELLO and FENCE handlers (tcp_fence.c). */
int tcp_serve_hello(void *ctx, struct tent_rpc_conn *c,
                    const struct tent_wire_hdr *h);
int tcp_serve_fence(void *ctx, struct tent_rpc_conn *c,
                    const struct tent_wire_hdr *h);

/* Asks the server at host:port (from src, "" = any) to close the data
 * connection token names and answer once nothing it carried can touch
 * memory any more (FENCE). */
int tcp_fence(const char *host, uint16_t port, const char *src, int timeout_ms,
              uint64_t token);

#endif
