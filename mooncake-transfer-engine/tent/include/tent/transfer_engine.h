/*
 * TENT in C: public API.
 *
 * The names, types, constants and argument order are those of Mooncake
 * TENT's C API, so a program written against TENT compiles against this
 * library.  Beyond TENT:
 *   - functions that return int return 0 on success and a negative TENT_E*
 *     code on failure (tent_strerror() names it);
 *   - tent_last_error() returns the calling thread's message for its last
 *     failure, naming the value that was wrong;
 *   - TRANSPORT_MEMFABRIC selects the MemFabric (libmf_smem.so) transport,
 *     TRANSPORT_BUFIO the buffered file transport, TRANSPORT_LIBFABRIC the
 *     libfabric RMA transport;
 *   - tent_task_error() gives the cause of a failed task.
 *
 * Thread safety: any call from any thread, concurrently on one engine,
 * except tent_destroy_engine; a batch may be polled from several threads,
 * its tasks are best submitted from one.  Ownership: registered memory stays
 * the caller's and must outlive its registration; what a call allocates for the
 * caller is freed with the matching tent_free_*.  A NULL engine or output
 * pointer is TENT_ENULL, never a crash.
 */
#ifndef TENT_TRANSFER_ENGINE_H
#define TENT_TRANSFER_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TENT_API __attribute__((visibility("default")))
#else
#define TENT_API
#endif

#define tent_batch_id_t   uint64_t
#define tent_segment_id_t uint64_t

/** The engine's own segment: a request whose target_id is this targets local
 *  memory, and target_offset is then a local address. */
#define TENT_LOCAL_SEGMENT_ID 0ull
#ifndef LOCAL_SEGMENT_ID
#define LOCAL_SEGMENT_ID TENT_LOCAL_SEGMENT_ID
#endif

/** tent_allocate_batch() returns this on failure. */
#define TENT_INVALID_BATCH_ID 0ull

#define OPCODE_READ  (0)
#define OPCODE_WRITE (1)

/** A request's intent (TENT's IntentType), for policy rules. */
#define TENT_INTENT_UNSPEC              (0)
#define TENT_INTENT_FOREGROUND_GET      (1)
#define TENT_INTENT_BACKGROUND_PREFETCH (2)
#define TENT_INTENT_MIGRATION           (3)
#define TENT_INTENT_CHECKPOINT          (4)
#define TENT_INTENT_WEIGHT_LOADING      (5)
#define TENT_INTENT_STAGING_INTERNAL    (6)

/**
 * One transfer.  Zero-initialise it (`tent_request_t r = {0};`): a zero
 * transport_hint means "follow the policy".
 *
 * target_offset is an address in the target segment's address space, i.e. it
 * must fall inside one of the buffers the target registered.
 */
struct tent_request {
    int opcode;                  /**< OPCODE_READ or OPCODE_WRITE */
    void *source;                /**< local, registered memory */
    tent_segment_id_t target_id; /**< from tent_open_segment() */
    uint64_t target_offset;      /**< address inside the target's buffers */
    uint64_t length;             /**< bytes, > 0 */
    int priority;                /**< 0 high, 1 medium, 2 low */
    int transport_hint; /**< TRANSPORT_UNSPEC or a pinned TRANSPORT_* */
    /* Beyond TENT's C struct: the fields of TENT's C++ Request.  Zero
     * (the default of a zero-initialised request) changes nothing. */
    /** Absolute deadline, CLOCK_MONOTONIC nanoseconds (tent_now_ns's
     *  clock, TENT's steady_clock); 0: none. */
    uint64_t deadline_ns;
    int intent_type; /**< TENT_INTENT_*: matched by policy rules */
    /** The policy rule to use, by name, ahead of every filter of the rules
     *  (NULL: match the rules).  Read during tent_submit only. */
    const char *policy_name;
};
typedef struct tent_request tent_request_t;

#define STATUS_WAITING   (0)
#define STATUS_PENDING   (1)
#define STATUS_INVALID   (2)
#define STATUS_CANCELED  (3)
#define STATUS_COMPLETED (4)
#define STATUS_TIMEOUT   (5)
#define STATUS_FAILED    (6)

struct tent_status {
    int status;                 /**< STATUS_* */
    uint64_t transferred_bytes; /**< counted only for a successful execution */
};
typedef struct tent_status tent_status_t;

typedef void *tent_engine_t;

struct tent_buffer_info {
    uint64_t base, length;
    char location[64];
};

#define TYPE_MEMORY (0)
#define TYPE_FILE   (1)

struct tent_segment_info {
    int type;
    int num_buffers;
    struct tent_buffer_info *buffers;
};
typedef struct tent_segment_info tent_segment_info_t;

struct tent_notifi_record {
    tent_segment_id_t handle;
    char name[256];
    char msg[4096];
};
typedef struct tent_notifi_record tent_notifi_record_t;

struct tent_notifi_info {
    int num_records;
    struct tent_notifi_record *records;
};
typedef struct tent_notifi_info tent_notifi_info;

#define PERM_LOCAL_READ_WRITE  (0)
#define PERM_GLOBAL_READ_ONLY  (1)
#define PERM_GLOBAL_READ_WRITE (2)

#define TRANSPORT_UNSPEC        (0)
#define TRANSPORT_RDMA          (1)
#define TRANSPORT_MNNVL         (2)
#define TRANSPORT_SHM           (3)
#define TRANSPORT_NVLINK        (4)
#define TRANSPORT_GDS           (5)
#define TRANSPORT_IOURING       (6)
#define TRANSPORT_TCP           (7)
#define TRANSPORT_ASCEND_DIRECT (8)
#define TRANSPORT_SUNRISE_LINK  (9)
#define TRANSPORT_TPU           (10)
#define TRANSPORT_UB            (11)
#define TRANSPORT_MPCOMM        (12)
/** Beyond TENT: the MemFabric transport, the first value TENT does not use. */
#define TRANSPORT_MEMFABRIC (13)
/** Beyond TENT: the buffered file transport (pread/pwrite on worker threads)
 *  for file segments where io_uring is refused; TENT has no value for it. */
#define TRANSPORT_BUFIO (14)
/** Beyond TENT: one-sided RMA through libfabric (verbs, efa, cxi, tcp, shm
 *  providers), loaded at run time; TENT and its forks do not use 15. */
#define TRANSPORT_LIBFABRIC (15)

struct tent_memory_options {
    char location[64];  /**< "cpu", "cpu:<numa node>", "npu:<id>"; "" = "cpu" */
    int permission;     /**< PERM_* */
    int transport_type; /**< TRANSPORT_UNSPEC or TRANSPORT_* to register with */
    char shm_path[256];
    size_t shm_offset;
    int internal;
};
typedef struct tent_memory_options tent_memory_options_t;

/* ---- error codes (beyond TENT) ---------------------------------------- */
#define TENT_OK           (0)
#define TENT_EINVAL       (-1)  /**< an argument has an invalid value */
#define TENT_ENULL        (-2)  /**< a required pointer or the engine is NULL */
#define TENT_ENOMEM       (-3)  /**< out of memory */
#define TENT_ENOSEGMENT   (-4)  /**< unknown segment id or name */
#define TENT_ENOBATCH     (-5)  /**< unknown batch id */
#define TENT_ENOTREG      (-6)  /**< local memory is not registered */
#define TENT_ERANGE       (-7)  /**< range outside the target's buffers */
#define TENT_EPERM        (-8)  /**< the target's permission forbids it */
#define TENT_ECAPACITY    (-9)  /**< more requests than the batch holds */
#define TENT_EBUSY        (-10) /**< tasks are still in flight */
#define TENT_EEXIST       (-11) /**< duplicate or overlapping registration */
#define TENT_ECONFIG      (-12) /**< configuration is malformed or mistyped */
#define TENT_ENODEV       (-13) /**< DeviceNotFound: a library is unavailable */
#define TENT_ENOTRANSPORT (-14) /**< no installed transport can serve it */
#define TENT_EIO          (-15) /**< a system call or transfer failed */
#define TENT_ETIMEDOUT    (-16) /**< a deadline expired */
#define TENT_ENOTSUP      (-17) /**< not supported by this transport/build */
#define TENT_EVENDOR      (-18) /**< the vendor library returned an error */
#define TENT_EPEER        (-19) /**< the peer is unreachable or went away */
#define TENT_EPROTO       (-20) /**< malformed message from the network */
#define TENT_ENOTASK      (-21) /**< task id beyond the batch's tasks */
#define TENT_ESHUTDOWN    (-22) /**< transport quiesced: no new submissions */
#define TENT_EOVERFLOW    (-23) /**< output buffer too small */
#define TENT_ERUNNING                                                          \
    (-24) /**< task is on the wire; its transport cannot stop it */
#define TENT_ESTALE                                                            \
    (-25) /**< the peer restarted: the request named an earlier incarnation */

/** Name of a TENT_E* code ("TENT_EINVAL: invalid argument"). Never NULL. */
TENT_API const char *tent_strerror(int code);

/** The calling thread's message for its last failed call ("" if none). */
TENT_API const char *tent_last_error(void);

/* ---- configuration ---------------------------------------------------- */

/** Load a JSON config file for engines created afterwards.  A file that is
 *  not there is a warning and the defaults; one that is not a regular file,
 *  is larger than 16 MiB, does not parse or gives a key twice makes the next
 *  tent_create_engine() fail naming the file and the position or key.  Every
 *  key: docs/configuration.md. */
TENT_API void tent_load_config_from_file(const char *path);

/** Override one key ("transports/tcp/enable", "log_level"...).  value is
 *  parsed as JSON when it is a number, true/false, an array or an object, and
 *  taken as a string otherwise. */
TENT_API void tent_set_config(const char *key, const char *value);

/* ---- engine ----------------------------------------------------------- */
/** Creates an engine from the staged configuration; NULL with the reason
 *  in tent_last_error().  A wrong configuration fails it: a value out of
 *  range or of the wrong kind (an enabled transport's too) names the key
 *  and the value (for memfabric, the seed's "InvalidArgument: MF_PROTOCOL
 *  must be set").  A transport that is not available here (no device,
 *  library missing) is left out with a warning, unless it is off by
 *  default, the configuration enables it and no memory transport is left:
 *  then creation fails with its cause ("DeviceNotFound: ... libmf_smem.so
 *  unavailable"). */
TENT_API tent_engine_t tent_create_engine(void);
/** Destroys the engine.  Not safe against other calls on the same engine:
 *  as in TENT, the caller must make sure that no other thread is inside a
 *  call on it (submit, status, register, ...) or will start one, and that
 *  no tent_engine_t copy is used afterwards; a racing call may crash.  The
 *  Python module and the classic C API serialise this for their callers
 *  (close() / destroyTransferEngine wait for the calls in progress). */
TENT_API void tent_destroy_engine(tent_engine_t engine);
/** 1 when the engine has a transport for memory segments installed (the
 *  file transports io_uring and bufio alone do not count), else 0. */
TENT_API int tent_available(tent_engine_t engine);
/** Copies the name peers open this engine by (tent_open_segment) into buf:
 *  "<host>:<port>" in p2p mode, else local_segment_name.  TENT_EOVERFLOW
 *  when buf_len cannot hold it with its NUL, TENT_ENULL for a NULL
 *  argument. */
TENT_API int tent_segment_name(tent_engine_t engine, char *buf, size_t buf_len);
/** The address and port the engine's RPC server listens on (the p2p
 *  endpoint peers connect to): addr_buf gets the host as a string (as
 *  tent_segment_name, TENT_EOVERFLOW when too small), *port the port. */
TENT_API int tent_rpc_server_addr_port(tent_engine_t engine, char *addr_buf,
                                       size_t buf_len, uint16_t *port);

/* ---- segments --------------------------------------------------------- */
/** Opens a peer's segment by name ("host:port" in p2p mode, a name in the
 *  metadata service, or "file://<path>" for a file segment) and fetches its
 *  descriptor; *handle names it in requests.  Opening a name that is open
 *  returns the same handle.  TENT_ENOSEGMENT when no such segment answers,
 *  TENT_EPEER when the peer or metadata service cannot be reached. */
TENT_API int tent_open_segment(tent_engine_t engine, tent_segment_id_t *handle,
                               const char *segment_name);
/** Closes a segment: the handle is invalid afterwards (TENT_ENOSEGMENT), and
 *  opening the name again fetches a fresh descriptor under a new handle.
 *  TENT_EBUSY while a task still uses it (a file segment). */
TENT_API int tent_close_segment(tent_engine_t engine, tent_segment_id_t handle);
/** Fills *info with the type (TYPE_MEMORY / TYPE_FILE) of the open segment
 *  handle and its buffers as last fetched; the caller frees it with
 *  tent_free_segment_info.  TENT_ENOSEGMENT for an unknown handle. */
TENT_API int tent_get_segment_info(tent_engine_t engine,
                                   tent_segment_id_t handle,
                                   tent_segment_info_t *info);
/** Frees what tent_get_segment_info allocated in *info (not info itself). */
TENT_API void tent_free_segment_info(tent_segment_info_t *info);

/* ---- memory ----------------------------------------------------------- */
/** Allocates size bytes at location ("cpu", "cpu:<numa node>", "npu:<N>")
 *  into *addr.  It only allocates, as in TENT: peers see nothing until the
 *  memory is registered.  Host memory is memfd-backed (a same-host peer can
 *  map it once registered); "npu:<N>" is Ascend device memory through ACL
 *  (TENT_ENODEV naming libascendcl.so when it cannot be loaded). */
TENT_API int tent_allocate_memory(tent_engine_t engine, void **addr,
                                  size_t size, const char *location);
/** Frees memory from tent_allocate_memory[_ex].  Registrations inside it
 *  are unregistered first; TENT_EBUSY while tasks use it, and a transport's
 *  failure to release a range is returned with the memory kept (no
 *  registration ever points at freed memory). */
TENT_API int tent_free_memory(tent_engine_t engine, void *addr);
/** Registers [addr, addr+size) with every installed transport and
 *  publishes it (PERM_GLOBAL_READ_WRITE).  Registering the same range again
 *  raises a reference count; overlapping different ranges are separate
 *  entries.  The memory stays the caller's and must stay valid until it is
 *  unregistered.  TENT_ENULL for a NULL addr, TENT_EINVAL for size 0 or a
 *  range that wraps, TENT_ENOTRANSPORT when no transport can take it,
 *  TENT_ENOMEM; on failure nothing is registered. */
TENT_API int tent_register_memory(tent_engine_t engine, void *addr,
                                  size_t size);
/** Drops one reference to the range (size 0: the first range registered
 *  at addr); the last one removes it.  When it returns 0 no peer's copy
 *  touches the range any more: copies in flight finished before or are
 *  reported FAILED; a peer that cannot be stopped within revoke_timeout_ms
 *  fails the call and the range stays registered.  TENT_ENOTREG for a
 *  range that is not registered (TENT returns success). */
TENT_API int tent_unregister_memory(tent_engine_t engine, void *addr,
                                    size_t size);
/** tent_register_memory of [addr, addr+size) with a permission:
 *  PERM_LOCAL_READ_WRITE (no peer may touch it), PERM_GLOBAL_READ_ONLY
 *  (peers may read it) or PERM_GLOBAL_READ_WRITE; another value is
 *  TENT_EINVAL.  Otherwise the same codes. */
TENT_API int tent_register_memory_with_perm(tent_engine_t engine, void *addr,
                                            size_t size, int permission);
/** Registers count ranges, [addrs[i], addrs[i]+sizes[i]), with one
 *  permission.  All or nothing: a failure part-way gives back every entry
 *  it added or counted and returns that range's code. */
TENT_API int tent_register_memory_batch(tent_engine_t engine, void **addrs,
                                        size_t *sizes, size_t count,
                                        int permission);
/** tent_unregister_memory of each [addrs[i], addrs[i]+sizes[i]) of the
 *  count ranges (sizes NULL: every size 0).  Every entry is checked first:
 *  one not registered (TENT_ENOTREG), in use by tasks (TENT_EBUSY) or
 *  named twice (TENT_EINVAL) changes nothing.  A failure after that stops
 *  at its entry (the ones before it are unregistered) and names it. */
TENT_API int tent_unregister_memory_batch(tent_engine_t engine, void **addrs,
                                          size_t *sizes, size_t count);
/** tent_allocate_memory with options: opts->location (and the rest of
 *  tent_memory_options_t as TENT reads them). */
TENT_API int tent_allocate_memory_ex(tent_engine_t engine, void **addr,
                                     size_t size, tent_memory_options_t *opts);
/** tent_register_memory with options: opts->permission and
 *  opts->transport_type (TRANSPORT_UNSPEC: every installed transport; else
 *  that one only). */
TENT_API int tent_register_memory_ex(tent_engine_t engine, void *addr,
                                     size_t size, tent_memory_options_t *opts);
/** tent_register_memory_batch with options, all or nothing. */
TENT_API int tent_register_memory_batch_ex(tent_engine_t engine, void **addrs,
                                           size_t *sizes, size_t count,
                                           tent_memory_options_t *opts);

/* ---- batches and transfers -------------------------------------------- */

/** Returns the id of a new batch that holds up to batch_size requests
 *  over all its submits (1..16777216), or TENT_INVALID_BATCH_ID (0) with
 *  the cause in tent_last_error(): a NULL engine, a size out of range, out
 *  of memory or of batches.  Free it with tent_free_batch. */
TENT_API tent_batch_id_t tent_allocate_batch(tent_engine_t engine,
                                             size_t batch_size);
/** Frees a batch id.  As TENT's lazy free, it returns 0 even while tasks
 *  of the batch are still in flight: the id is gone at once, but the batch
 *  is released only when they end, and until then the transports may
 *  still read the requests' source memory and WRITE INTO their
 *  destination memory (a READ keeps landing in the local buffer after the
 *  call).  Wait for every task to leave STATUS_PENDING (tent_task_status,
 *  tent_overall_status) before reusing, unregistering or freeing that
 *  memory. */
TENT_API int tent_free_batch(tent_engine_t engine, tent_batch_id_t batch_id);

/** Starts count requests (entries[0..count)) in batch batch_id; the
 *  entries are read during the call only.  Validates every request first:
 *  on error nothing is submitted.  Task ids continue from the batch's
 *  previous submissions.  TENT_ENULL, TENT_EINVAL (count 0, a bad opcode,
 *  length, priority or policy_name), TENT_ENOBATCH, TENT_ECAPACITY (more
 *  than the batch has left), TENT_ENOTREG (source not registered here),
 *  TENT_ENOSEGMENT, TENT_ERANGE or TENT_EPERM (target outside the peer's
 *  buffers or not permitted), TENT_ENOTRANSPORT.  A failure after the call
 *  is the task's: tent_task_status, tent_task_error. */
TENT_API int tent_submit(tent_engine_t engine, tent_batch_id_t batch_id,
                         tent_request_t *entries, size_t count);
/** tent_submit, then a notification (name, message) to the target segment
 *  of the entries once every task of the batch has COMPLETED; it is dropped
 *  (with a warning) when a task fails or is cancelled. */
TENT_API int tent_submit_notif(tent_engine_t engine, tent_batch_id_t batch_id,
                               tent_request_t *entries, size_t count,
                               const char *name, const char *message);
/** Sends a notification (name, message) to the engine of the open
 *  segment handle now; its receive queue is bounded in total and per
 *  sender (notify_max_queued_bytes[_per_sender]).  TENT_ENOSEGMENT for an
 *  unknown handle, the peer's error (TENT_EPEER...) when it is refused. */
TENT_API int tent_send_notifs(tent_engine_t engine, tent_segment_id_t handle,
                              const char *name, const char *message);
/** Takes every queued notification into *info (num_records may be 0); the
 *  caller frees it with tent_free_notifs. */
TENT_API int tent_recv_notifs(tent_engine_t engine, tent_notifi_info *info);
/** Frees the records tent_recv_notifs allocated in *info. */
TENT_API void tent_free_notifs(tent_notifi_info *info);

/** Polls task task_id of batch batch_id into *status (and may fail it over
 *  to the next transport).  TENT_ENOBATCH for an unknown batch, TENT_ENOTASK
 *  (status STATUS_INVALID) for a task id not submitted.  A transport
 *  whose status query itself failed makes this return that error with
 *  status->status = STATUS_PENDING: the task may still be running. */
TENT_API int tent_task_status(tent_engine_t engine, tent_batch_id_t batch_id,
                              size_t task_id, tent_status_t *status);
/** Cancels a task not yet on the wire (it becomes STATUS_CANCELED and never
 *  runs); TENT_ERUNNING for one a transport is executing, which cannot be
 *  taken back: poll it until it is terminal. */
TENT_API int tent_cancel_task(tent_engine_t engine, tent_batch_id_t batch_id,
                              size_t task_id);
/** Polls every task of the batch (failing over where needed) and sums
 *  them up: PENDING while any task is, else FAILED if one failed, else
 *  CANCELED if one was, else COMPLETED; transferred_bytes is the sum of the
 *  completed tasks'.  STATUS_WAITING for a batch with no task. */
TENT_API int tent_overall_status(tent_engine_t engine, tent_batch_id_t batch_id,
                                 tent_status_t *status);
/** The status of every task of batch batch_id, as tent_task_status polls
 *  them, into statuses.  *count: in, capacity of statuses; out, number of
 *  tasks written, or with TENT_EOVERFLOW the number it needs.
 *  TENT_ENOBATCH for an unknown batch. */
TENT_API int tent_task_status_list(tent_engine_t engine,
                                   tent_batch_id_t batch_id,
                                   tent_status_t *statuses, size_t *count);

/** Load of one local NIC a transport sends through: bytes of slices in
 *  flight on its rails, and its EWMA bandwidth in bytes per second (the
 *  estimate rail scheduling uses; its link speed, or the transport's
 *  default, before any transfer). */
struct tent_nic_load_stat {
    char device_name[64];
    uint64_t inflight_bytes;
    double ewma_bandwidth_bps;
};
typedef struct tent_nic_load_stat tent_nic_load_stat_t;

/** Fills up to *count entries of stats; *count becomes the number of NICs
 *  (which may be larger: call again with room for all).  Returns 0,
 *  TENT_ENULL or TENT_ENOMEM. */
TENT_API int tent_get_nic_load_stats(tent_engine_t engine,
                                     tent_nic_load_stat_t *stats,
                                     size_t *count);

/* ---- beyond TENT ------------------------------------------------------ */

/** Name of the transport that executed (or is executing) the task: "tcp",
 *  "shm", "memfabric"...; "" when no transport accepted it.  After a failover
 *  this is the last transport tried. */
TENT_API int tent_task_transport(tent_engine_t engine, tent_batch_id_t batch_id,
                                 size_t task_id, char *name, size_t name_len);

/** Why a task failed, as recorded where the failure was first seen: *code
 *  is the TENT_E* cause (TENT_OK when the task has not failed), *native the
 *  code it carried from below (an errno value, the vendor library's code;
 *  0 if none), and msg (may be NULL) gets the message, NUL-terminated and
 *  truncated to len bytes.  After a failover the cause is that of the last
 *  transport tried.  Returns 0, or an error for an unknown batch or task. */
TENT_API int tent_task_error(tent_engine_t engine, tent_batch_id_t batch_id,
                             size_t task_id, int *code, int *native, char *msg,
                             size_t len);

/* ---- metrics (beyond TENT) -------------------------------------------- */

/** Writes the engine's metrics in Prometheus text format 0.0.4 (what the
 *  /metrics endpoint serves) into buf, NUL-terminated, so an application can
 *  serve them itself.  *len: in, the capacity of buf; out, the length written
 *  without the NUL, or with TENT_EOVERFLOW the capacity needed (NUL
 *  included).  TENT_ENOTSUP when metrics/enabled is false. */
TENT_API int tent_metrics_prometheus(tent_engine_t engine, char *buf,
                                     size_t *len);

/** The same metrics as JSON (what /metrics/json serves) into buf; *len and
 *  the return codes as tent_metrics_prometheus. */
TENT_API int tent_metrics_json(tent_engine_t engine, char *buf, size_t *len);

/** Host and port the metrics HTTP endpoint is bound to (metrics/http_port 0
 *  gives an ephemeral port).  TENT_ENOTSUP when the endpoint is not running:
 *  no port configured, metrics disabled, or the port could not be bound. */
TENT_API int tent_metrics_http_addr_port(tent_engine_t engine, char *addr_buf,
                                         size_t buf_len, uint16_t *port);

#ifdef __cplusplus
}
#endif

#endif /* TENT_TRANSFER_ENGINE_H */
