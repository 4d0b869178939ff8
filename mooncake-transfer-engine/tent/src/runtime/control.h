/* The runtime's control plane: RPC server, local segment naming and the
 * metadata backend (runtime/control.c). */
#ifndef TENT_RUNTIME_CONTROL_H
#define TENT_RUNTIME_CONTROL_H

struct tent_engine;

/* Starts the RPC server, names the local segment ("<host>:<port>" in p2p
 * mode, local_segment_name when configured, a unique name for the metadata
 * services), publishes host identity, rpc_addr and pid, starts the metadata
 * backend of metadata_type and installs the segment ops.  On failure
 * nothing is left running. */
int tent_ctrl_start(struct tent_engine *e);
/* Without a cluster secret, warns (once, at engine creation) which
 * addresses serve registered memory to anyone who can reach them. */
void tent_ctrl_warn_open(struct tent_engine *e);
/* The local descriptor changed: tell the metadata backend.  Never fails. */
void tent_ctrl_local_changed(struct tent_engine *e);
/* Stops the RPC server only (idempotent): no server thread runs afterwards. */
void tent_ctrl_stop_server(struct tent_engine *e);
/* Stops the metadata backend (withdrawing the descriptor) and the RPC
 * server.  Idempotent. */
void tent_ctrl_stop(struct tent_engine *e);

#endif
