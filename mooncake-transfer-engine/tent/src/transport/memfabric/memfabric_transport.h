/* MemFabric transport internals, shared with its unit test.
 *
 * The transport drives libmf_smem.so through memfabric_api.h.  A runtime
 * sub-batch (the seed's MemFabricSubBatch) keeps, per task slot, which vendor
 * batch carries it (task_list); per vendor batch, its id and, once the one
 * consuming query has answered SM_OK, its terminal result
 * (batch_status_cache); and pending_batch_count, the vendor batches whose
 * result has not been seen yet. */
#ifndef TENT_MEMFABRIC_TRANSPORT_H
#define TENT_MEMFABRIC_TRANSPORT_H

#include "transport/memfabric/smem_trans_abi.h"
#include "transport/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MEMFABRIC_UNIQUE_ID_ATTR     "memfabric_unique_id"
#define MEMFABRIC_DEFAULT_TIMEOUT_MS 10000u
#define MEMFABRIC_STATUS_QUERY_ABI   "transports/memfabric/status_query_abi"

/* Everything the environment and configuration say, read once at install. */
struct memfabric_settings {
    const char *protocol;         /* one of the accepted names */
    const char *protocol_var;     /* MF_PROTOCOL, else MF_DATA_OP_TYPE */
    smem_bm_data_op_type op_type; /* its smem_bm_data_op_type bit */
    int status_query_abi;         /* 4 (the seed's) or 3 (the fork's) */
    uint32_t timeout_ms;          /* MF_TRANSFER_TIMEOUT, default 10000 */
    uint32_t device_id;           /* aclrtGetDevice, else config, default 0 */
    int vendor_log_level;         /* TENT's log level in the vendor's scale */
};

enum memfabric_vb_state {
    MEMFABRIC_VB_PENDING = 0, /* no SM_OK yet: the vendor may touch memory */
    MEMFABRIC_VB_DONE = 1,    /* result cached; memory access has stopped */
};

/* One smem_trans_batch_copy: an entry of batch_status_cache. */
struct memfabric_vendor_batch {
    uint64_t batch_id;
    int state;      /* enum memfabric_vb_state */
    int32_t result; /* valid when DONE: 0 success, else the vendor's code */
    struct tent_xerr *err; /* DONE with a failure: its cause, for its tasks */
    char peer[256];        /* destUrl, for messages */
};

/* An entry of task_list, indexed by the runtime's slot. */
struct memfabric_task {
    bool used;
    uint32_t vb; /* index in batch_status_cache */
    uint64_t length;
};

struct memfabric_sub_batch {
    struct tent_sub_batch base;
    struct memfabric_sub_batch *prev, *next; /* transport's list */
    struct memfabric_task *task_list;        /* base.capacity entries */
    struct memfabric_vendor_batch *batch_status_cache;
    size_t nvb, vb_cap;
    size_t pending_batch_count; /* vendor batches without a result yet */
};

/* Lock order: the runtime's batch lock, then lock, then peer_lock.
 * lock serialises submission, status polling (status() and each iteration
 * of quiesce()) and buffer registration; it guards accepting, subs and every
 * sub-batch's state.  peer_lock guards the list of peer handles only; the
 * vendor's peer-down callback takes nothing else, so it may run on any vendor
 * thread, even while a vendor call made under lock is in progress.
 *
 * The instance exists only between a successful install and uninstall (the
 * registry's one rule: a failed install is freed, never uninstalled), so
 * it keeps no "installed" flags.  An instance the engine abandons at
 * teardown keeps working on its own copies (settings, unique_id): its
 * base.engine and base.cfg are NULL from then on. */
struct memfabric_transport {
    struct tent_transport base;
    struct memfabric_settings set;
    /* The engine's metrics (NULL: off), taken at install: vendor threads use
     * it, and it outlives an engine that abandoned this transport. */
    struct tent_metrics *metrics;

    smem_trans_t handle;
    char unique_id[256]; /* "<host>:<port>" */

    pthread_mutex_t lock;
    bool accepting; /* false once quiesce() started */
    struct memfabric_sub_batch *subs;

    pthread_mutex_t peer_lock;
    struct mf_peer *peers; /* the open peer handles */
    atomic_int peer_down_events;
};

/* The peer handle (transport.h): the unique id the peer's descriptor
 * published, resolved once by peer_open, and whether the vendor reported
 * the peer down since (a handle opened later starts without the mark: the
 * runtime opens one when the peer answered again). */
struct mf_peer {
    struct tent_peer base;
    char unique_id[256];
    atomic_bool down;
    struct mf_peer *next; /* on the transport's list, under peer_lock */
};

extern const struct tent_transport_ops tent_memfabric_transport_ops;

/* MF_PROTOCOL name -> smem_bm_data_op_type bit; 0 if unknown. */
smem_bm_data_op_type memfabric_protocol_bit(const char *name);
/* The vendor's log level for a TENT_LOG_* level. */
int memfabric_vendor_log_level(int tent_level);

#endif
