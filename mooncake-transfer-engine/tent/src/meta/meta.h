/* Metadata service (metadata_type "etcd", "redis", "http"): the engine's
 * segment descriptor (the JSON of the RPC server's DESC_RESP, wire.c) is
 * stored under <metadata_key_prefix><segment name>, with a lease / expiry
 * the engine keeps alive from a thread; peers resolve segment names there
 * and then reach the RPC address (and shm handles, memfabric id...) that the
 * descriptor carries.  "p2p" (the default) does not use this module. */
#ifndef TENT_META_META_H
#define TENT_META_META_H

struct tent_engine;

/* For metadata_type p2p: nothing.  Otherwise: reads the metadata_* keys,
 * fixes the segment name (local_segment_name, else a generated unique
 * one), publishes the descriptor (failing with an error that names the
 * endpoint(s) when the service cannot be reached), starts the keepalive
 * thread and installs the segment ops.  Call after tent_p2p_start. */
int tent_meta_start(struct tent_engine *e);
/* The local descriptor changed (register, unregister, attribute): publish
 * it now if the service is reachable, else mark it for the keepalive thread
 * to publish on reconnect.  No-op in p2p mode.  Never fails. */
void tent_meta_local_changed(struct tent_engine *e);
/* Stops the thread, deletes the key (best effort), frees everything.
 * Idempotent; no-op in p2p mode. */
void tent_meta_stop(struct tent_engine *e);

#endif
