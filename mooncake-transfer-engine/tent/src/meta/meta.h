/* Metadata backends: how segment names are resolved to descriptors.
 *
 * "p2p" (the default, meta_p2p.c): a segment's name is "<host>:<port>" of
 * its engine's RPC server and the descriptor is fetched from that server.
 * "etcd", "redis", "http" (meta_service.c): the engine's descriptor (the
 * JSON of the RPC server's DESC_RESP, wire.c) is stored under
 * <metadata_key_prefix><segment name>, with a lease / expiry kept alive
 * from a thread; peers resolve names there and then reach the RPC address
 * the descriptor carries.
 *
 * Every backend fills the same ops table.  The control plane knows nothing
 * of the runtime: it deals in encoded descriptors (describe) and decoded
 * ones (struct tent_wire_desc); the runtime's descriptor module
 * (runtime/seg_desc.c) turns them into segments. */
#ifndef TENT_META_META_H
#define TENT_META_META_H

#include <stdbool.h>
#include <stddef.h>

struct tent_auth;
struct tent_config;
struct tent_meta;
struct tent_wire_desc;

/* What the runtime hands a backend at start. */
struct tent_meta_env {
    const struct tent_config *cfg;
    const char *segment_name; /* the local segment's final name */
    int rpc_timeout_ms;       /* bound on one call to a peer's RPC server */
    /* The local segment's descriptor as JSON (malloc'd, length in *len), or
     * NULL when out of memory.  Called with the backend's lock held. */
    char *(*describe)(void *ctx, size_t *len);
    void *ctx;
    /* The engine's metrics registry (metrics/metrics.h), NULL when off:
     * failed publications count into tent_metadata_publish_failures_total. */
    struct tent_metrics *metrics;
    /* The cluster secret (common/auth.h), NULL for none: connections to
     * peers authenticate with it and published descriptors are signed with
     * it (and refused unsigned). */
    const struct tent_auth *auth;
};

struct tent_meta_ops {
    const char *name; /* for messages */
    /* The local segment name when local_segment_name is not configured;
     * rpc_addr is "<host>:<port>" of the engine's RPC server. */
    void (*default_name)(const char *rpc_addr, char *buf, size_t cap);
    /* Reads the backend's config keys and publishes the local descriptor
     * (failing with an error that names the endpoint(s) when the service
     * cannot be reached).  env is copied; nothing is left on failure. */
    int (*start)(const struct tent_meta_env *env, struct tent_meta **out);
    /* Resolves segment name into *out (free with tent_wire_desc_free).
     * addr is the RPC address the segment published when it was resolved
     * before (a refresh), else NULL. */
    int (*fetch)(struct tent_meta *m, const char *name, const char *addr,
                 struct tent_wire_desc *out);
    /* Delivers a notification to the engine at RPC address addr. */
    int (*notify)(struct tent_meta *m, const char *addr, const char *name,
                  const char *msg, const char *from);
    /* The local descriptor changed (register, unregister, attribute):
     * publish it now if the service is reachable, else mark it for the
     * keepalive thread to publish on reconnect.  Never fails. */
    void (*local_changed)(struct tent_meta *m);
    /* Stops the backend's thread, withdraws the descriptor (best effort)
     * and frees everything.  NULL is a no-op. */
    void (*stop)(struct tent_meta *m);
};

extern const struct tent_meta_ops tent_meta_p2p_ops;
/* etcd, redis and http: the backend reads metadata_type itself. */
extern const struct tent_meta_ops tent_meta_service_ops;

/* The backend for metadata_type type; TENT_ECONFIG for an unknown type,
 * TENT_ENOTSUP for one whose library was missing at configure time. */
int tent_meta_find(const char *type, const struct tent_meta_ops **out);

/* Fetches the descriptor of segment name from the RPC server at addr (NULL:
 * name is "<host>:<port>"); the p2p fetch, also the service backends'
 * fallback (meta_p2p.c). */
int tent_meta_p2p_fetch(const struct tent_meta_env *env, const char *name,
                        const char *addr, struct tent_wire_desc *out);
/* Delivers a notification to the RPC server at addr. */
int tent_meta_p2p_notify(const struct tent_meta_env *env, const char *addr,
                         const char *name, const char *msg, const char *from);

#endif
