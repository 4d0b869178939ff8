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
 *     TRANSPORT_BUFIO the buffered file transport;
 *   - tent_task_error() gives the cause of a failed task.
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

/** Load a JSON config file for engines created afterwards.  A file that
 *  cannot be read or parsed makes the next tent_create_engine() fail with the
 *  file name and the position of the error. */
TENT_API void tent_load_config_from_file(const char *path);

/** Override one key ("transports/tcp/enable", "log_level"...).  value is
 *  parsed as JSON when it is a number, true/false, an array or an object, and
 *  taken as a string otherwise. */
TENT_API void tent_set_config(const char *key, const char *value);

/* ---- engine ----------------------------------------------------------- */
TENT_API tent_engine_t tent_create_engine(void);
TENT_API void tent_destroy_engine(tent_engine_t engine);
/** 1 when the engine has a transport for memory segments installed (the
 *  file transports io_uring and bufio alone do not count), else 0. */
TENT_API int tent_available(tent_engine_t engine);
TENT_API int tent_segment_name(tent_engine_t engine, char *buf, size_t buf_len);
TENT_API int tent_rpc_server_addr_port(tent_engine_t engine, char *addr_buf,
                                       size_t buf_len, uint16_t *port);

/* ---- segments --------------------------------------------------------- */
TENT_API int tent_open_segment(tent_engine_t engine, tent_segment_id_t *handle,
                               const char *segment_name);
TENT_API int tent_close_segment(tent_engine_t engine, tent_segment_id_t handle);
TENT_API int tent_get_segment_info(tent_engine_t engine,
                                   tent_segment_id_t handle,
                                   tent_segment_info_t *info);
TENT_API void tent_free_segment_info(tent_segment_info_t *info);

/* ---- memory ----------------------------------------------------------- */
TENT_API int tent_allocate_memory(tent_engine_t engine, void **addr,
                                  size_t size, const char *location);
TENT_API int tent_free_memory(tent_engine_t engine, void *addr);
TENT_API int tent_register_memory(tent_engine_t engine, void *addr,
                                  size_t size);
TENT_API int tent_unregister_memory(tent_engine_t engine, void *addr,
                                    size_t size);
TENT_API int tent_register_memory_with_perm(tent_engine_t engine, void *addr,
                                            size_t size, int permission);
TENT_API int tent_register_memory_batch(tent_engine_t engine, void **addrs,
                                        size_t *sizes, size_t count,
                                        int permission);
TENT_API int tent_unregister_memory_batch(tent_engine_t engine, void **addrs,
                                          size_t *sizes, size_t count);
TENT_API int tent_allocate_memory_ex(tent_engine_t engine, void **addr,
                                     size_t size, tent_memory_options_t *opts);
TENT_API int tent_register_memory_ex(tent_engine_t engine, void *addr,
                                     size_t size, tent_memory_options_t *opts);
TENT_API int tent_register_memory_batch_ex(tent_engine_t engine, void **addrs,
                                           size_t *sizes, size_t count,
                                           tent_memory_options_t *opts);

/* ---- batches and transfers -------------------------------------------- */

/** Returns a batch id, or TENT_INVALID_BATCH_ID (0) on failure. */
TENT_API tent_batch_id_t tent_allocate_batch(tent_engine_t engine,
                                             size_t batch_size);
TENT_API int tent_free_batch(tent_engine_t engine, tent_batch_id_t batch_id);

/** Validates every request first: on error nothing is submitted.  Task ids
 *  continue from the batch's previous submissions. */
TENT_API int tent_submit(tent_engine_t engine, tent_batch_id_t batch_id,
                         tent_request_t *entries, size_t count);
TENT_API int tent_submit_notif(tent_engine_t engine, tent_batch_id_t batch_id,
                               tent_request_t *entries, size_t count,
                               const char *name, const char *message);
TENT_API int tent_send_notifs(tent_engine_t engine, tent_segment_id_t handle,
                              const char *name, const char *message);
TENT_API int tent_recv_notifs(tent_engine_t engine, tent_notifi_info *info);
TENT_API void tent_free_notifs(tent_notifi_info *info);

/** Polls the task (and may fail it over to the next transport).  A transport
 *  whose status query itself failed makes this return that error with
 *  status->status = STATUS_PENDING: the task may still be running. */
TENT_API int tent_task_status(tent_engine_t engine, tent_batch_id_t batch_id,
                              size_t task_id, tent_status_t *status);
TENT_API int tent_cancel_task(tent_engine_t engine, tent_batch_id_t batch_id,
                              size_t task_id);
TENT_API int tent_overall_status(tent_engine_t engine, tent_batch_id_t batch_id,
                                 tent_status_t *status);
/** *count: in, capacity of statuses; out, number of tasks written. */
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
 *  (which may be larger: call again with room for all). */
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

/** The same metrics as JSON (what /metrics/json serves); same contract. */
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
