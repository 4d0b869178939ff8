/* P2P control plane: the engine's RPC server and the segment ops that fetch
 * peers' descriptors from their servers. */
#ifndef TENT_RUNTIME_P2P_META_H
#define TENT_RUNTIME_P2P_META_H

struct tent_engine;
struct tent_segment_ops;
struct tent_segment;
struct tent_wire_desc;

extern const struct tent_segment_ops tent_p2p_segment_ops;

/* Starts the RPC server, fixes the segment name to "<host>:<port>" (unless
 * local_segment_name is configured), publishes host identity, rpc_addr and
 * pid, and installs the p2p segment ops when metadata_type is "p2p". */
int tent_p2p_start(struct tent_engine *e);
/* Stops the server (idempotent): no server thread runs afterwards. */
void tent_p2p_stop(struct tent_engine *e);
/* Stops and frees the control-plane state. */
void tent_p2p_free(struct tent_engine *e);
/* Installs a decoded descriptor into a remote segment (buffer records that
 * left it are retired, never freed while the segment lives); on failure seg
 * is unchanged.  Shared with the metadata-service backends. */
int tent_p2p_apply_desc(struct tent_segment *seg,
                        const struct tent_wire_desc *d);

#endif
