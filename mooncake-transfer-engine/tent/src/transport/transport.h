/* The one interface every transport implements.
 *
 * A transport only moves bytes.  The runtime gives it resolved requests
 * (local address, remote address, length, target segment) and asks it for
 * per-task status; it never sees policies, failover or batch ids.  A
 * transport reaches the runtime only through the control-plane functions
 * declared at the end of this file.
 *
 * Every op is filled (no NULL checks in the runtime): a transport that lacks
 * one points it at the tent_xport_nosup_* stub of the same signature. */
#ifndef TENT_TRANSPORT_TRANSPORT_H
#define TENT_TRANSPORT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tent/transfer_engine.h"

struct tent_engine;
struct tent_segment;
struct tent_buffer;
struct tent_config;

/* Capability bits: which (local memory, remote memory) kinds a transport can
 * move between.  "dram" is host memory, "device" is accelerator memory. */
#define TENT_CAP_DRAM_TO_DRAM (1u << 0)
#define TENT_CAP_DRAM_TO_DEVICE (1u << 1)
#define TENT_CAP_DEVICE_TO_DRAM (1u << 2)
#define TENT_CAP_DEVICE_TO_DEVICE (1u << 3)
#define TENT_CAP_ALL 0xfu

/* One resolved request.  slot is the task's index in the runtime batch and
 * the index at which the transport keeps that task's state in its
 * sub-batch (slot < the capacity the sub-batch was allocated with). */
struct tent_xfer {
    uint32_t slot;
    int opcode;     /* OPCODE_READ: remote -> local; OPCODE_WRITE: local -> remote */
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
    TENT_XFER_FAILED = 2, /* terminal: the transport touches the memory no more */
};

struct tent_xfer_status {
    int state;          /* enum tent_xfer_state */
    uint64_t bytes;     /* confirmed bytes; 0 unless COMPLETED */
    int native_code;    /* the backend's own code for a failure, or 0 */
};

/* Base of a transport's sub-batch; a transport embeds it first in its own. */
struct tent_sub_batch {
    struct tent_transport *owner;
    size_t capacity;
};

/* Base of a transport instance; a transport embeds it first in its own
 * struct of ops->instance_size bytes, which the runtime allocates zeroed. */
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

    /* Brings the transport up; on failure everything it did is undone and the
     * runtime leaves it out.  TENT_ENODEV = DeviceNotFound. */
    int (*install)(struct tent_transport *t);
    /* Idempotent; safe after a failed install. */
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
    int (*remove_buffer)(struct tent_transport *t, struct tent_buffer *buf);
};

/* Not-supported stubs of the exact op signatures. */
bool tent_xport_reach_any(struct tent_transport *t,
                          const struct tent_segment *target);
int tent_xport_nosup_quiesce(struct tent_transport *t);
int tent_xport_nosup_buffer(struct tent_transport *t, struct tent_buffer *buf);

/* ---- registry of transports compiled in (and test transports) ---------- */
#define TENT_MAX_TRANSPORTS 8

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
/* Host the engine's servers bind to and peers reach it by. */
const char *tent_engine_hostname(const struct tent_engine *e);
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
