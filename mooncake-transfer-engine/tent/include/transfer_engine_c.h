/*
 * Mooncake's classic transfer-engine C API (libtransfer_engine), over TENT in
 * C: Mooncake's names, types, struct layouts, constants and argument order,
 * so programs and bindings written for it (NIXL's Mooncake backend, the Go
 * and Rust bindings) compile and link against this library unchanged.
 * Results follow Mooncake: submitTransfer[WithNotify], getTransferStatus and
 * freeBatchID return a Status code (0, or positive: 1 invalid argument, 2
 * too many requests, 3 address not registered, 4 batch busy, ...); the other
 * int functions 0 (openSegment: an id >= 0) or a negative ERR_* (-1 invalid
 * argument, -3 not registered, -7 overlapped, -200 metadata, ...);
 * createTransferEngine and installTransport NULL, allocateBatchID
 * INVALID_BATCH.  Every failure is logged with its reason.  Threads: any
 * function from any thread, concurrently on one engine. Ownership: strings
 * passed in are copied; registered memory stays the caller's and must
 * outlive its registration.  Differences from Mooncake:
 * docs/classic-c-api.md.
 */
#ifndef TRANSFER_ENGINE_C
#define TRANSFER_ENGINE_C

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif /* __cplusplus */

#define segment_handle_t int32_t
#define segment_id_t     int32_t
#define batch_id_t       uint64_t
/** openSegment() of the engine's own name returns this. */
#define LOCAL_SEGMENT (0)
/** allocateBatchID() returns this on failure. */
#define INVALID_BATCH UINT64_MAX

#define OPCODE_READ  (0)
#define OPCODE_WRITE (1)

/** One transfer.  target_offset is an address inside a buffer the target
 *  registered; source lies inside a buffer registered here. */
struct transfer_request {
    int opcode; /**< OPCODE_READ or OPCODE_WRITE */
    void *source;
    segment_id_t target_id; /**< from openSegment() */
    uint64_t target_offset;
    uint64_t length;
};

typedef struct transfer_request transfer_request_t;

/* Beyond Mooncake: TENT's request fields, through submitTransferEx().
 * struct transfer_request keeps Mooncake's layout; this one is separate. */

/** transfer_request_ex.priority: TENT's classes (PRIO_HIGH is the
 *  default of a zeroed request, as in TENT). */
#define TRANSFER_PRIO_HIGH   (0)
#define TRANSFER_PRIO_MEDIUM (1)
#define TRANSFER_PRIO_LOW    (2)

/** transfer_request_ex.intent_type: TENT's IntentType values, matched by
 *  policy rules that name an intent_type. */
#define TRANSFER_INTENT_UNSPEC              (0)
#define TRANSFER_INTENT_FOREGROUND_GET      (1)
#define TRANSFER_INTENT_BACKGROUND_PREFETCH (2)
#define TRANSFER_INTENT_MIGRATION           (3)
#define TRANSFER_INTENT_CHECKPOINT          (4)
#define TRANSFER_INTENT_WEIGHT_LOADING      (5)
#define TRANSFER_INTENT_STAGING_INTERNAL    (6)

/** A transfer_request with TENT's request fields.  Zero-initialise it:
 *  a zero field changes nothing. */
struct transfer_request_ex {
    int opcode; /**< OPCODE_READ or OPCODE_WRITE */
    void *source;
    segment_id_t target_id; /**< from openSegment() */
    uint64_t target_offset;
    uint64_t length;
    int priority;    /**< TRANSFER_PRIO_* */
    int intent_type; /**< TRANSFER_INTENT_* */
    /** Absolute deadline in CLOCK_MONOTONIC nanoseconds; 0: none. */
    uint64_t deadline_ns;
    /** The policy rule to use, by name, ahead of every filter (NULL: match
     *  the rules).  Read during the submit only. */
    const char *policy_name;
};

typedef struct transfer_request_ex transfer_request_ex_t;

/** A notification: the sender's name and its message. */
struct notify_msg {
    char *name;
    char *msg;
};

typedef struct notify_msg notify_msg_t;

#define STATUS_WAITING   (0)
#define STATUS_PENDING   (1)
#define STATUS_INVALID   (2)
#define STATUS_CANCELED  (3)
#define STATUS_COMPLETED (4)
#define STATUS_TIMEOUT   (5)
#define STATUS_FAILED    (6)

struct transfer_status {
    int status; /**< STATUS_*: a task still moving is STATUS_WAITING */
    uint64_t transferred_bytes;
};

/** Kept for source compatibility; no function of this API takes it. */
struct segment_desc {
    int type;
    union {
        struct {
            void *addr;
            uint64_t size;
            const char *location;
        } rdma;
        struct {
            const char *file_path;
            const char *subsystem_name;
            const char *proto;
            const char *ip;
            uint64_t port;
        } nvmeof;
    } desc_;
};

typedef struct transfer_status transfer_status_t;

struct buffer_entry {
    void *addr;
    size_t length;
};
typedef struct buffer_entry buffer_entry_t;

typedef struct segment_desc segment_desc_t;
typedef void *transfer_engine_t;
typedef void *transport_t;

/** Starts an engine.  metadata_conn_string is "P2PHANDSHAKE" (peers open
 *  "<host>:<port>" names) or a metadata service: "etcd://host:port[,...]",
 *  "redis://host:port", "http://host:port/path", or "host:port" (etcd).
 *  auto_discover != 0 (or MC_FORCE_TCP in the environment) installs tcp.
 *  Returns NULL on failure. */
transfer_engine_t createTransferEngine(const char *metadata_conn_string,
                                       const char *local_server_name,
                                       const char *ip_or_host_name,
                                       uint64_t rpc_port, int auto_discover);

/** No devices to discover here: returns 0. */
int discoverTopology(transfer_engine_t engine);

/** Writes "<ip>:<rpc port>" (what peers pass to openSegment in P2PHANDSHAKE
 *  mode) into buf_out. */
int getLocalIpAndPort(transfer_engine_t engine, char *buf_out, size_t buf_len);

/** Installs a transport: "tcp", "shm", "ascend"/"memfabric".  A protocol
 *  whose devices are absent here ("rdma", "efa", "nvlink", "gds", ...: the
 *  names of Mooncake's protocol table) installs tcp and logs one warning.
 *  A transport of this engine that cannot run (ascend without
 *  libmf_smem.so or MF_PROTOCOL) returns NULL and logs the cause in the
 *  seed's words ("InvalidArgument: MF_PROTOCOL must be set",
 *  "DeviceNotFound: ... libmf_smem.so unavailable"); tcp does not stand in.
 *  args (a NIC priority matrix) is not used. */
transport_t installTransport(transfer_engine_t engine, const char *proto,
                             void **args);

/** Returns 0: transports stay installed until the engine is destroyed. */
int uninstallTransport(transfer_engine_t engine, const char *proto);

/** Returns the segment id (>= 0) of segment_name, or a negative ERR_*.  The
 *  same name gives the same id while it is open. */
segment_id_t openSegment(transfer_engine_t engine, const char *segment_name);

/** openSegment() with a fresh descriptor: an id already open for this name
 *  is closed and a new one returned. */
segment_id_t openSegmentNoCache(transfer_engine_t engine,
                                const char *segment_name);

/** Closes a segment id; it is invalid afterwards. */
int closeSegment(transfer_engine_t engine, segment_id_t segment_id);

/** There is no EFA here: returns 0. */
int warmupEfaSegment(transfer_engine_t engine, const char *segment_name);

/** Removing the engine's own metadata entry while it runs is not supported
 *  (the entry goes with destroyTransferEngine): ERR_NOT_IMPLEMENTED. */
int removeLocalSegment(transfer_engine_t engine, const char *segment_name);

/** Stops the engine and frees it; NULL is ignored.  Calls already inside
 *  the engine on other threads finish first, and a call that begins while
 *  it runs fails; once it has returned the handle is gone, and no thread
 *  may use it again. */
void destroyTransferEngine(transfer_engine_t engine);

/** Registers [addr, addr + length).  location: "*" (any), "cpu:<node>",
 *  "npu:<id>".  remote_accessible = 0 keeps it from peers.  A range that
 *  overlaps a registered one is refused (ERR_ADDRESS_OVERLAPPED). */
int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length,
                        const char *location, int remote_accessible);

/** Unregisters the range registered at addr. */
int unregisterLocalMemory(transfer_engine_t engine, void *addr);

/** Registers every buffer of the list, or none. */
int registerLocalMemoryBatch(transfer_engine_t engine,
                             buffer_entry_t *buffer_list, size_t buffer_len,
                             const char *location);

/** Unregisters each address it can; returns the first error. */
int unregisterLocalMemoryBatch(transfer_engine_t engine, void **addr_list,
                               size_t addr_len);

/** A batch holding up to batch_size requests, or INVALID_BATCH. */
batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size);

/** Starts the requests; task ids continue from the batch's earlier
 *  submissions.  Nothing is started when a request is invalid. */
int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
                   struct transfer_request *entries, size_t count);

/** submitTransfer(), and notify_msg goes to the target of entries[0] once
 *  every task of the batch has completed (seen by getTransferStatus). */
int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id,
                             struct transfer_request *entries, size_t count,
                             notify_msg_t notify_msg);

/** submitTransfer() of requests with TENT's fields: priority, intent_type,
 *  deadline_ns and policy_name act as in TENT (docs/qos.md).  notify_msg
 *  may be NULL; otherwise it is sent as by submitTransferWithNotify().  A
 *  request with an unknown policy_name, priority or intent_type is refused
 *  (Status 1) and nothing is started.  A request whose deadline cannot be
 *  met fails: its status is STATUS_FAILED and getTransferError() gives
 *  STATUS_TIMEOUT and the cause. */
int submitTransferEx(transfer_engine_t engine, batch_id_t batch_id,
                     const struct transfer_request_ex *entries, size_t count,
                     const notify_msg_t *notify_msg);

/** Why a task failed: *cause gets 0 when it has not failed, STATUS_TIMEOUT
 *  when it timed out or its deadline could not be met, STATUS_FAILED for
 *  any other failure; msg (may be NULL) gets the cause, NUL-terminated and
 *  truncated to len bytes ("" when none).  Returns a Status code. */
int getTransferError(transfer_engine_t engine, batch_id_t batch_id,
                     size_t task_id, int *cause, char *msg, size_t len);

/** Takes the notifications received so far: an array of *size entries
 *  (NULL when there are none), each name and msg malloc'ed.  The caller
 *  frees it with freeNotifsMsgBuf(). */
notify_msg_t *getNotifsFromEngine(transfer_engine_t engine, int *size);

/** Frees what getNotifsFromEngine() returned (NULL is fine). */
int freeNotifsMsgBuf(notify_msg_t *msg, int size);

/** Sends a notification to an open segment (target_id from openSegment). */
int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id,
                      notify_msg_t notify_msg);

/** The state of one task; *status is written only on success. */
int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id,
                      size_t task_id, struct transfer_status *status);

/** Frees a batch (Status 4, batch busy, while a task is still moving). */
int freeBatchID(transfer_engine_t engine, batch_id_t batch_id);

/** Returns 0: segment descriptors are refreshed on a miss. */
int syncSegmentCache(transfer_engine_t engine);

struct nic_load_stat {
    char device_name[64];
    uint64_t inflight_bytes;
    double ewma_bandwidth_bps;
};

typedef struct nic_load_stat nic_load_stat_t;

/** The network devices the transports use and the bytes in flight on each.
 *  *count: in, the capacity of stats; out, the number of devices (entries
 *  beyond the capacity are not written). */
int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t *stats,
                    size_t *count);

/** On SIGINT/SIGTERM (and at exit) the engine is destroyed, so that its
 *  metadata entry goes away, before the process ends. */
void enableGracefulShutdown(transfer_engine_t engine);

/** A description of the links (JSON when json != 0) into buf_out. */
int showLinks(transfer_engine_t engine, char *buf_out, size_t buf_len,
              int json);

#ifdef __cplusplus
}
#endif /* __cplusplus */

#endif /* TRANSFER_ENGINE_C */
