/* tcp transport: what its two halves share.  tcp_transport.c is the
 * initiator (slices, windows, connection pools); tcp_target.c serves the
 * peers' READ and WRITE frames through the engine's RPC server. */
#ifndef TENT_TRANSPORT_TCP_TCP_H
#define TENT_TRANSPORT_TCP_TCP_H

#include "transport/transport.h"

/* Installs the READ and WRITE frame handlers on the engine's RPC server;
 * nothing is left installed on failure. */
int tcp_target_start(const struct tent_xport_env *env);
/* Removes them; returns once no handler call is running. */
void tcp_target_stop(const struct tent_xport_env *env);

#endif
