/* The one interface every transport implements.
 *
 * A transport only moves bytes.  The runtime gives it resolved requests
 * (local address, remote address, length, target segment) and asks it for
 * per-task status; it never sees policies, failover or batch ids.  A
 * transport reaches the runtime only through the control-plane functions
 * declared at the end of this file.
 *
 * Every op is filled (no NULL checks in the runtime): a transport with
 * nothing to do for an op points it at the shared tent_xport_noop_* stub of
 * the same signature (declared below). */
#ifndef TENT_TRANSPORT_TRANSPORT_H
#define TENT_TRANSPORT_TRANSPORT_H

#include "tent/transfer_engine.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tent_engine;
struct tent_segment;
struct tent_config;

/* The buffer view: a registered buffer as the runtime and the transports
 * both see it.  In the local segment it is one the application (or
 * tent_allocate_memory) registered; in a remote segment, one the peer
 * published.  A transport reads base, length, location, perm, is_device,
 * alloc_fd and shm_*, and writes shm_name/shm_offset only in its add_buffer
 * (before the buffer is published); every other field is the runtime's.
 * The runtime keeps a record alive while inflight > 0. */
struct tent_buffer {
    uint64_t base;
    uint64_t length;
    char location[64];
    int perm;            /* PERM_* */
    uint32_t xport_mask; /* bit (1 << TRANSPORT_*) per transport serving it */
    atomic_int inflight; /* tasks that may touch it (remote ones too: a
                            descriptor refresh must not free it while > 0) */
    int refs;            /* local only: registrations of exactly this range */
    int alloc_fd;        /* local only: memfd whose offset 0 is base, or -1;
                            this process holds a POSIX read lock on it for
                            as long as the memory is allocated */
    bool is_device;      /* location names an accelerator */
    char shm_name[64];   /* shm transport: handle a same-host peer can map */
    uint64_t shm_offset;
};

/* Capability bits: which (local memory, remote memory) kinds a transport can
 * move between.  "dram" is host memory, "device" is accelerator memory. */
#define TENT_CAP_DRAM_TO_DRAM     (1u << 0)
#define TENT_CAP_DRAM_TO_DEVICE   (1u << 1)
#define TENT_CAP_DEVICE_TO_DRAM   (1u << 2)
#define TENT_CAP_DEVICE_TO_DEVICE (1u << 3)
#define TENT_CAP_ALL              0xfu

/* One resolved request.  slot is the task's index in the runtime batch and
 * the index at which the transport keeps that task's state in its
 * sub-batch (slot < the capacity the sub-batch was allocated with). */
struct tent_xfer {
    uint32_t slot;
    int opcode; /* OPCODE_READ: remote -> local; OPCODE_WRITE: local -> remote
                 */
    void *local;
    uint64_t remote; /* address in the target segment's address space */
    uint64_t length;
    struct tent_segment *target;
    const struct tent_buffer *target_buf; /* the target buffer holding remote */
};

/* Per-task state reported by a transport. */
enum tent_xfer_state {
    TENT_XFER_PENDING = 0,
    TENT_XFER_COMPLETED = 1,
    TENT_XFER_FAILED =
        2, /* terminal: the transport touches the memory no more */
};

struct tent_xfer_status {
    int state;       /* enum tent_xfer_state */
    uint64_t bytes;  /* confirmed bytes; 0 unless COMPLETED */
    int native_code; /* the backend's own code for a failure, or 0 */
};

/* Base of a transport's sub-batch; a transport embeds it first in its own. */
struct tent_sub_batch {
    struct tent_transport *owner;
    size_t capacity;
};

/* Base of a transport instance; a transport embeds it first in its own
 * struct of ops->instance_size bytes, which the runtime allocates zeroed. */
/* engine and cfg are valid from install until the engine is destroyed.  A
 * transport whose quiesce failed at teardown is abandoned, not uninstalled:
 * the runtime sets engine and cfg to NULL before freeing them, so whatever
 * outlives the engine (vendor threads, callbacks, a later reclaim) may only
 * use what the instance copied or owns itself. */
struct tent_transport {
    const struct tent_transport_ops *ops;
    struct tent_engine *engine;
    const struct tent_config *cfg;
    int index; /* position in the engine's transport list */
};

struct tent_transport_ops {
    const char *name;     /* "tcp", "shm", "memfabric": also the config key */
    int type;             /* TRANSPORT_* */
    bool default_enabled; /* when transports/<name>/enable is absent */
    size_t instance_size;

    /* Brings the transport up.  On failure it undoes everything it did
     * before returning, and the instance is freed without uninstall (the
     * one rule, tent_transport_instance_new).  TENT_ENODEV = DeviceNotFound. */
    int (*install)(struct tent_transport *t);
    /* Called once, only after a successful install (and quiesce). */
    void (*uninstall)(struct tent_transport *t);
    uint32_t (*capabilities)(struct tent_transport *t);
    /* Whether the transport can reach the given target segment at all. */
    bool (*can_reach)(struct tent_transport *t,
                      const struct tent_segment *target);

    int (*alloc_sub_batch)(struct tent_transport *t, size_t capacity,
                           struct tent_sub_batch **out);
    /* TENT_EBUSY while the backend may still touch memory of its tasks. */
    int (*free_sub_batch)(struct tent_transport *t, struct tent_sub_batch *sb);

    /* Starts n requests.  results[i] = 0 when request i started (its status
     * will become terminal), or a negative TENT_E* code when it did not start
     * (it touched no memory and may go to another transport).  Returns 0 when
     * all started, else the first failure code. */
    int (*submit)(struct tent_transport *t, struct tent_sub_batch *sb,
                  const struct tent_xfer *reqs, size_t n, int *results);
    /* Fills *out for one slot.  A negative return means the status could not
     * be determined: the task is still in flight as far as anyone knows. */
    int (*status)(struct tent_transport *t, struct tent_sub_batch *sb,
                  uint32_t slot, struct tent_xfer_status *out);
    /* Stops new submissions and waits for outstanding work (bounded). */
    int (*quiesce)(struct tent_transport *t);

    int (*add_buffer)(struct tent_transport *t, struct tent_buffer *buf);
    /* A failure means peers may still reach the memory through this
     * transport: the runtime keeps the buffer registered and returns the
     * error to the caller (the memory must not be freed). */
    int (*remove_buffer)(struct tent_transport *t, struct tent_buffer *buf);
};

/* Shared stubs of the exact op signatures for ops a transport has nothing
 * to do for (never a cast). */
/* can_reach: every segment. */
bool tent_xport_reach_any(struct tent_transport *t,
                          const struct tent_segment *target);
/* quiesce: nothing outstanding to wait for; returns 0. */
int tent_xport_noop_quiesce(struct tent_transport *t);
/* add_buffer / remove_buffer: no per-buffer registration; returns 0. */
int tent_xport_noop_buffer(struct tent_transport *t, struct tent_buffer *buf);

/* ---- registry of transports compiled in (and test transports) ---------- */
/* The one bound on transports: entries in the registry, transports installed
 * in an engine, candidates of a task. */
#define TENT_MAX_TRANSPORTS 8

/* Allocates an instance of ops (ops->instance_size bytes, zeroed), fills the
 * base and installs it.  A failed install leaves nothing: the instance is
 * freed and the install's code returned. */
int tent_transport_instance_new(const struct tent_transport_ops *ops,
                                struct tent_engine *e,
                                const struct tent_config *cfg, int index,
                                struct tent_transport **out);
/* Uninstalls and frees an instance. */
void tent_transport_instance_free(struct tent_transport *t);

/* Adds ops to the process-wide registry (tests add fakes); engines created
 * afterwards consider it.  Returns TENT_EEXIST for a name already there. */
int tent_transport_register(const struct tent_transport_ops *ops);
int tent_transport_unregister(const char *name);
size_t tent_transport_registry_snapshot(const struct tent_transport_ops **out,
                                        size_t max);
const char *tent_transport_type_name(int type);
int tent_transport_type_from_name(const char *name);

/* ---- control-plane interface for transports ----------------------------- */
const struct tent_config *tent_engine_config(const struct tent_engine *e);
/* The engine's metrics registry (metrics/metrics.h), or NULL when metrics
 * are disabled or e is NULL: update it with tm_add(tm_shard(...), ...). */
struct tent_metrics *tent_engine_metrics(const struct tent_engine *e);
/* Host the engine's servers bind to and peers reach it by. */
const char *tent_engine_hostname(const struct tent_engine *e);
/* Copies this engine's host identity (boot id and host name: what tells a
 * same-host peer apart) into buf; false, with buf = "", when there is none
 * or it does not fit. */
bool tent_engine_host_id(const struct tent_engine *e, char *buf, size_t len);
/* Whether seg's published host identity equals host_id (read under the
 * segment's lock: a descriptor refresh may rewrite it). */
bool tent_segment_on_host(const struct tent_segment *seg, const char *host_id);
/* Publishes key=value in the local segment's descriptor (attributes of the
 * local segment), replacing a previous value; value NULL removes it. */
int tent_engine_publish_attr(struct tent_engine *e, const char *key,
                             const char *value);
/* Copies an attribute of a segment ("memfabric_unique_id", "rpc_addr") into
 * buf under the segment's lock (a descriptor refresh may rewrite it at any
 * time).  Returns false, with buf = "", when it is absent or longer than
 * len - 1. */
bool tent_segment_attr_copy(const struct tent_segment *seg, const char *key,
                            char *buf, size_t len);
const char *tent_segment_name_of(const struct tent_segment *seg);
bool tent_segment_is_local(const struct tent_segment *seg);

#endif
