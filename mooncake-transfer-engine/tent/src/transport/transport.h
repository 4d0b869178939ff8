/* The contract between the runtime and a transport.
 *
 * A transport only moves bytes.  The runtime gives it resolved requests
 * (local address, remote address, length, the target segment and buffer,
 * the peer handle) and asks it for per-task status; it never sees
 * policies, failover or batch ids.  Everything a transport needs from the
 * engine is handed down at install in an environment table (struct
 * tent_xport_env).  Nothing under transport/ includes runtime headers,
 * calls runtime functions by name or takes a runtime lock.
 *
 * One folder per transport (transport/<name>/) and one line of
 * transports.def, the one list everything else follows.  The calling
 * context of each op and the peer handle's lifetime are described at
 * struct tent_transport_ops; docs/transports.md is the guide. */
#ifndef TENT_TRANSPORT_TRANSPORT_H
#define TENT_TRANSPORT_TRANSPORT_H

#include "rpc/rpc.h"
#include "tent/transfer_engine.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct tent_config;
struct tent_metrics;

/* ---- attributes ---------------------------------------------------------
 * Key/value strings a transport attaches to a buffer it serves (shm's
 * mapping handle, say).  They travel in the segment descriptor with the
 * buffer, so a peer's transport of the same kind reads them back. */
struct tent_attrs; /* opaque; NULL is the empty set */
struct tent_pin;

/* Value of key, or NULL. */
const char *tent_attrs_get(const struct tent_attrs *a, const char *key);
/* Sets key to value (NULL removes it) in *a, allocating as needed.  Keys
 * are at most TENT_ATTR_KEY_MAX - 1 bytes, values TENT_ATTR_VALUE_MAX - 1,
 * at most TENT_MAX_BUF_ATTRS per set. */
int tent_attrs_set(struct tent_attrs **a, const char *key, const char *value);
/* Number of attributes and the i-th of them (i < count). */
size_t tent_attrs_count(const struct tent_attrs *a);
void tent_attrs_at(const struct tent_attrs *a, size_t i, const char **key,
                   const char **value);
void tent_attrs_free(struct tent_attrs *a);
/* The descriptor carries them (rpc/wire.h): the same bounds. */
#define TENT_ATTR_KEY_MAX   TENT_WIRE_ATTR_KEY_MAX
#define TENT_ATTR_VALUE_MAX TENT_WIRE_ATTR_VAL_MAX
#define TENT_MAX_BUF_ATTRS  TENT_WIRE_MAX_BUF_ATTRS

/* ---- the views a transport is given -------------------------------------- */

/* A segment as a transport sees it.  The fields never change after the
 * segment is created; what a descriptor refresh may rewrite (attributes,
 * host identity) is read through the env callbacks. */
struct tent_seg_view {
    uint64_t id;
    char name[256];
    bool local;
};

/* Base of a transport's per-peer state; a transport embeds it first in its
 * own (peer_open fills it).  incarnation is the one of the descriptor the
 * handle was opened from: the peer engine's random id (0 when its
 * descriptor names none); every request through the handle is addressed
 * to that incarnation, and a target of another refuses it (TENT_ESTALE). */
struct tent_peer {
    struct tent_transport *owner;
    uint64_t incarnation;
};

/* Bytes of a registration's access key. */
#define TENT_BUF_KEY_LEN 16

/* Whether two access keys are equal, in time independent of where they
 * differ (a refused peer learns nothing of the key from the answer time):
 * both words are always compared, with no branch on either. */
_Static_assert(TENT_BUF_KEY_LEN == 16, "a key is two 64-bit words");
static inline bool tent_key_equal(const uint8_t *a, const uint8_t *b)
{
    uint64_t a0, a1, b0, b1;
    memcpy(&a0, a, 8);
    memcpy(&a1, a + 8, 8);
    memcpy(&b0, b, 8);
    memcpy(&b1, b + 8, 8);
    uint64_t d = (a0 ^ b0) | (a1 ^ b1);
    /* the compiler may not turn the OR into a compare per word */
    __asm__("" : "+r"(d));
    return d == 0;
}

/* A registered buffer.  In the local segment it is one the application (or
 * tent_allocate_memory) registered; in a remote segment, one the peer
 * published.  A transport reads base, length, location, perm, is_device,
 * alloc_fd, key and attrs, and writes attrs only in its add_buffer (before
 * the buffer is published); every other field is the runtime's.  The
 * runtime keeps a record alive while inflight > 0. */
struct tent_buffer {
    uint64_t base;
    uint64_t length;
    char location[64];
    int perm;       /* PERM_* */
    bool is_device; /* location names an accelerator */
    int alloc_fd;   /* local only: memfd whose offset 0 is base, or -1 */
    /* The registration's access key: random (getrandom), drawn afresh by
     * every registration, published in the descriptor with the buffer.  A
     * peer's request names it (a remote record: the descriptor's); a
     * target half refuses a request whose key is not the registration's as
     * if the range were not registered (pin_local). */
    uint8_t key[TENT_BUF_KEY_LEN];
    struct tent_attrs *attrs;
    /* runtime's */
    uint32_t xport_mask;   /* bit (1 << TRANSPORT_*) per transport serving it */
    atomic_int inflight;   /* tasks that may touch it (remote ones too: a
                              descriptor refresh must not free it while > 0) */
    int refs;              /* local only: registrations of exactly this range */
    struct tent_pin *pins; /* local only: peers' uses (env->pin_local) */
};

/* Capability bits: which (local memory, remote memory) kinds a transport can
 * move between.  "dram" is host memory, "device" is accelerator memory. */
#define TENT_CAP_DRAM_TO_DRAM     (1u << 0)
#define TENT_CAP_DRAM_TO_DEVICE   (1u << 1)
#define TENT_CAP_DEVICE_TO_DRAM   (1u << 2)
#define TENT_CAP_DEVICE_TO_DEVICE (1u << 3)
#define TENT_CAP_ALL              0xfu
/* A file transport: it moves bytes between host memory and file segments
 * (TYPE_FILE), and only those.  The selector gives file segments to file
 * transports only and memory segments never to them. */
#define TENT_CAP_FILE (1u << 4)

/* ---- file segments ---------------------------------------------------------
 * tent_open_segment("file://<path>") opens the file in the runtime and makes
 * a segment of type TYPE_FILE whose one buffer is [0, file size): a
 * request's remote address is the file offset.  The runtime hands that
 * buffer to the add_buffer of every installed file transport (and to its
 * remove_buffer when the segment is closed with no task in flight); the
 * attributes below tell the transport what to open.  It opens descriptors
 * of its own (a dup, or a reopen through /proc/self/fd/<fd> with flags of
 * its choice) and never closes file_fd. */
#define TENT_FILE_ATTR_FD       "file_fd"       /* the runtime's descriptor */
#define TENT_FILE_ATTR_WRITABLE "file_writable" /* "1": opened read-write */

/* Request priorities (tent_request_t.priority; TENT's PRIO_* values). */
#define TENT_PRIO_HIGH   0
#define TENT_PRIO_MEDIUM 1
#define TENT_PRIO_LOW    2
#define TENT_NPRIO       3

/* A request's class: its priority, HIGH when out of range (the runtime
 * refuses those at submit; a transport never indexes past its queues). */
static inline int tent_prio_class(int priority)
{
    return priority >= TENT_PRIO_HIGH && priority <= TENT_PRIO_LOW
               ? priority
               : TENT_PRIO_HIGH;
}

/* Promotion, as every transport's queues apply it.  A class queue waits
 * since the later of its head's arrival (enq_ns) and the last time the
 * queue was served (served_ns): a LOW queue that is being served, if
 * behind HIGH, is not starving, and promoting it would only put its bulk
 * in front of HIGH requests. */
static inline uint64_t tent_prio_since(uint64_t enq_ns, uint64_t served_ns)
{
    return enq_ns > served_ns ? enq_ns : served_ns;
}

/* The class a queue of class prio waiting since since_ns is served as at
 * now: one class higher per promo_ns (TENT's
 * priority_promotion_timeout_us; 0: never promoted), so LOW is never
 * starved. */
static inline int tent_prio_effective(int prio, uint64_t since_ns, uint64_t now,
                                      uint64_t promo_ns)
{
    if (!promo_ns || now <= since_ns)
        return prio;
    uint64_t up = (now - since_ns) / promo_ns;
    return up >= (uint64_t)prio ? TENT_PRIO_HIGH : prio - (int)up;
}

/* The class queue to serve next, or -1: since[c] is when queue c began
 * waiting (tent_prio_since), or TENT_PRIO_IDLE when it has nothing that
 * may go now.  The best effective class, and between equal classes the
 * queue that waited longer (a promoted queue is not held back for ever by
 * a stream of new HIGH requests). */
#define TENT_PRIO_IDLE UINT64_MAX
static inline int tent_prio_pick(const uint64_t since[TENT_NPRIO], uint64_t now,
                                 uint64_t promo_ns)
{
    int best = -1, best_e = TENT_NPRIO;
    for (int c = 0; c < TENT_NPRIO; c++) {
        if (since[c] == TENT_PRIO_IDLE)
            continue;
        int e = tent_prio_effective(c, since[c], now, promo_ns);
        if (e < best_e || (e == best_e && since[c] < since[best])) {
            best_e = e;
            best = c;
        }
    }
    return best;
}

/* One resolved request.  slot is the task's index in the runtime batch and
 * the index at which the transport keeps that task's state in its
 * sub-batch (slot < the capacity the sub-batch was allocated with).  The
 * views stay valid until the task is terminal. */
struct tent_xfer {
    uint32_t slot;
    int opcode;   /* OPCODE_READ: remote -> local; OPCODE_WRITE: local -> remote
                   */
    int priority; /* TENT_PRIO_HIGH (0) .. TENT_PRIO_LOW (2) */
    void *local;
    uint64_t remote; /* address in the target segment's address space */
    uint64_t length;
    const struct tent_seg_view *target;
    const struct tent_buffer *target_buf; /* the target buffer holding remote */
    /* WRITE: COMPLETED only once the bytes are on stable storage (a file
     * transport's fdatasync), whatever this transport's own configuration
     * says.  The runtime sets it when a transport the task was routed to
     * (this one or one it failed over from) is durable: a failover never
     * lowers the durability a request was first given.  Transports that
     * write no file ignore it. */
    bool durable;
    /* This transport's handle for the target segment (peer_open), open
     * until the task is terminal. */
    struct tent_peer *peer;
};

/* ---- results and causes ---------------------------------------------------
 * A failure carries our code (TENT_E*), the native one (errno, the vendor's
 * code, or 0) and a message, recorded where the error is first seen; the
 * runtime keeps all three with the task (tent_task_error) and decides
 * failover from the code (tent_error_is_transient). */

/* Outcome of one request handed to submit. */
struct tent_xfer_result {
    int code;   /* 0: started (its status will become terminal); else it did
                   not start and touched no memory */
    int native; /* when code != 0 */
    /* code 0 and already COMPLETED with all its bytes (a transport that
     * copies in submit and needs no later check): the runtime records the
     * outcome at once and asks status no more for the slot.  The runtime
     * clears it before each submit; a transport may leave it alone (one
     * that wraps another and decides completion itself clears it). */
    bool done;
    char msg[160];
};

/* Refuses a request: res gets code, native and the calling thread's last
 * error message (tent_set_error just before).  Returns code. */
int tent_xres_fail(struct tent_xfer_result *res, int code, int native);

/* Per-task state reported by a transport. */
enum tent_xfer_state {
    TENT_XFER_PENDING = 0,
    TENT_XFER_COMPLETED = 1,
    TENT_XFER_FAILED = 2, /* terminal: the transport touches the memory no
                             more */
};

struct tent_xfer_status {
    int state;       /* enum tent_xfer_state */
    uint64_t bytes;  /* confirmed bytes; 0 unless COMPLETED */
    int code;        /* FAILED: the TENT_E* cause */
    int native;      /* FAILED: errno or the vendor's code, 0 if none */
    const char *msg; /* FAILED: the cause, or NULL; valid until the slot is
                        submitted again or the sub-batch is freed */
};

/* A failure cause kept by a transport for a task (heap, one allocation). */
struct tent_xerr {
    int code;
    int native;
    char msg[];
};
struct tent_xerr *tent_xerr_new(int code, int native, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fills a FAILED status from e (which may be NULL: then code and native). */
void tent_xstatus_failed(struct tent_xfer_status *out,
                         const struct tent_xerr *e, int code, int native);

/* A transport's use of a local buffer on behalf of a peer (its target half
 * serving a read or write), for env->pin_local.  The caller owns it (its
 * stack will do) and fills peer, abort and arg; the rest is the runtime's. */
struct tent_pin {
    const char *peer;         /* who uses the buffer, for messages */
    void (*abort)(void *arg); /* makes the use end soon; never NULL */
    void *arg;
    /* runtime's */
    const struct tent_buffer *buf;
    bool aborted;
    struct tent_pin *next, *prev;
};

/* ---- the environment handed to a transport ----------------------------- */

/* Valid from install until the transport is uninstalled or abandoned
 * (t->env is NULL from then on).  Callbacks take ctx first; they may take
 * runtime locks internally (seg_attr and seg_on_host the segment's read
 * lock).  A transport's own locks are inner to every runtime lock: it never
 * calls back into the env while holding one.  tcp and memfabric read the
 * peer's attributes once, in peer_open, before they take a lock of their
 * own; their submit and status take only their own locks. */
struct tent_xport_env {
    void *ctx;
    const struct tent_config *cfg;
    /* The engine's metrics registry (metrics/metrics.h), NULL when off.  It
     * outlives an abandoned transport: copy the pointer at install. */
    struct tent_metrics *metrics;
    const char *hostname; /* host the engine's servers bind to */
    const char *host_id;  /* boot id and host name ("" when unknown): what
                             tells a same-host peer apart */
    long pid;             /* this process */
    /* This engine's incarnation: random, non-zero, drawn at creation and
     * published in its descriptor.  A target half refuses a request that
     * names another one (non-zero) with TENT_ESTALE. */
    uint64_t incarnation;
    /* The cluster secret (common/auth.h), NULL for none: every connection
     * to a peer's server opens with tent_rpc_open(auth, segment_name, ...).
     * It outlives the transport. */
    const struct tent_auth *auth;
    const char *segment_name; /* this engine's segment */

    /* Publishes key=value in the local segment's descriptor (replacing a
     * previous value; value NULL removes it). */
    int (*publish_attr)(void *ctx, const char *key, const char *value);
    /* Copies attribute key of seg ("rpc_addr", "pid", ...) into buf; false,
     * with buf = "", when absent or longer than len - 1. */
    bool (*seg_attr)(void *ctx, const struct tent_seg_view *seg,
                     const char *key, char *buf, size_t len);
    /* Whether seg's published host identity equals this engine's. */
    bool (*seg_on_host)(void *ctx, const struct tent_seg_view *seg);

    /* The local registrations, as a peer's request through transport type
     * sees them: finds the buffer wholly holding [addr, +len) whose access
     * key is key (TENT_BUF_KEY_LEN bytes, compared in constant time), that
     * grants the access (a write if write) to remote peers and that type
     * serves, and pins it (pin->buf) until unpin_local.  Otherwise the
     * TENT_E* code the peer is to be answered (TENT_ERANGE: not registered,
     * or no registration holding it has that key: the two are one answer;
     * TENT_EPERM: the permission refuses it; TENT_ENOTSUP: not served by
     * type).  While
     * pinned, an unregister of the buffer calls pin->abort(pin->arg) (from
     * the unregistering thread, at most once: make the use end soon, e.g.
     * shut its connection down) and waits, bounded by revoke_timeout_ms,
     * for the unpin; pin->peer names the user in its error otherwise. */
    int (*pin_local)(void *ctx, int type, uint64_t addr, uint64_t len,
                     bool write, const uint8_t *key, struct tent_pin *pin);
    void (*unpin_local)(void *ctx, struct tent_pin *pin);
    /* How long an unregister waits for peers to stop using a range. */
    int revoke_timeout_ms;
    /* tcp_loopback_congestion, checked (tent_rpc_cc_parse): the algorithm
     * for connections between two loopback addresses, "" the kernel's. */
    const char *loopback_cc;

    /* For a remove_buffer that cannot make a peer stop (stalled inside a
     * copy it started before the revocation): moves the owner's own mapping
     * of buf, when it is memory tent_allocate_memory gave out, to fresh
     * pages with the same content, so the pages that peer still maps are
     * nobody's memory any more.  TENT_ENOTSUP (message set) for memory the
     * engine did not allocate, or whose pages it shares with another
     * registration.  Under the registration lock (remove_buffer's
     * context). */
    int (*reclaim_pages)(void *ctx, const struct tent_buffer *buf);

    /* Installs (ops NULL: removes) the transport's handler of RPC frame
     * type on the engine's server (rpc.h tent_rpc_server_handle). */
    int (*serve_frames)(void *ctx, uint8_t type,
                        const struct tent_rpc_frame_ops *ops);
    /* The port of the engine's RPC server (the one rpc_addr names; 0 when
     * the engine runs none). */
    uint16_t rpc_port;
    /* Makes the engine's RPC server also accept on host (numeric) at port
     * (0: any), serving the same frames: a NIC a transport publishes.
     * *bound gets the port.  It stays until the server stops. */
    int (*listen)(void *ctx, const char *host, uint16_t port, uint16_t *bound);

    /* The engine's rail scheduler (sched/rails.h): a transport with several
     * paths to a peer makes its rail sets here, and the engine reports
     * their NICs (tent_get_nic_load_stats) and rails (metrics). */
    struct tent_sched *sched;
};

/* ---- the transport ------------------------------------------------------- */

/* Base of a transport's sub-batch; a transport embeds it first in its own. */
struct tent_sub_batch {
    struct tent_transport *owner;
    size_t capacity;
};

/* Allocates a sub-batch of size bytes (zeroed, base first) with a zeroed
 * array of capacity tasks of task_size bytes at *tasks. */
int tent_sub_batch_new(struct tent_transport *t, size_t size, size_t capacity,
                       size_t task_size, void **tasks,
                       struct tent_sub_batch **out);
/* Frees what tent_sub_batch_new made. */
void tent_sub_batch_delete(struct tent_sub_batch *sb, void *tasks);

/* Base of a transport instance; a transport embeds it first in its own
 * struct of ops->instance_size bytes, which the runtime allocates zeroed. */
struct tent_transport {
    const struct tent_transport_ops *ops;
    /* NULL once the engine abandons the transport (its quiesce failed at
     * teardown): whatever outlives the engine (vendor threads, callbacks)
     * may only use what the instance copied or owns itself. */
    const struct tent_xport_env *env;
    int index; /* position in the engine's transport list */
    /* Set by install: every WRITE this transport completes is on stable
     * storage (a file transport's transports/<name>/sync).  The runtime
     * passes it on to a failover target (tent_xfer.durable). */
    bool durable;
};

/* The ops of a transport.
 *
 * Every op is filled (the runtime never tests for NULL): an op a transport
 * has nothing to do for points at a shared tent_xport_* stub of the exact
 * signature (below).
 *
 * Calling context.  "Runtime locks" are the engine's batch, segment and
 * registration locks.  Unless an op says otherwise it is called with no
 * runtime lock held, and it must not call back into the runtime except
 * through the env table.
 *   - submit and status never wait on the network or the vendor: they do
 *     non-blocking work only (a syscall that cannot block, a queue hand-off,
 *     an asynchronous vendor submission), so tent_submit and the status
 *     calls return within microseconds even when a peer stalls.  Progress
 *     on the network belongs to the transport's own threads or to
 *     non-blocking steps taken inside these calls.
 *   - The runtime calls submit and status for one slot from one thread at a
 *     time, but may call them for different slots of one sub-batch from
 *     different threads at once (a submit on slots 4..7 while another
 *     thread polls slot 2): per-slot state needs no lock, state shared by
 *     slots does.
 *   - add_buffer and remove_buffer run under the engine's registration
 *     lock (one at a time per engine) and may block, bounded by the
 *     transport's own timeout; install, uninstall and quiesce run alone
 *     (engine creation and destruction) and may block, bounded.
 *   - peer_open runs under the segment's peer lock (a runtime lock, itself
 *     possibly under a batch lock): it may start threads and map memory,
 *     but never waits on the network (connect lazily, on the first
 *     request).  peer_close runs with no runtime lock held (or alone, at
 *     teardown) and may join threads, bounded.
 *
 * Peers.  Everything a transport keeps for one peer (connections, rails,
 * threads, mappings, resolved vendor addresses, whether it is down) lives
 * in the peer handle peer_open makes from the segment's descriptor, and is
 * gone when peer_close returns.  The runtime opens one handle per (segment,
 * transport) on first use, hands it to every request (tent_xfer.peer),
 * and closes it when the segment is closed, when the segment's descriptor
 * names a new incarnation of the peer and at engine teardown, never while
 * a task submitted with it may still be in flight.  No request looks its
 * peer up by name: a transport reads the descriptor (env->seg_attr) in
 * peer_open, once. */
struct tent_transport_ops {
    const char *name;     /* "tcp", "shm", "memfabric": also the config key */
    int type;             /* TRANSPORT_* */
    bool default_enabled; /* when transports/<name>/enable is absent */
    size_t instance_size;

    /* Brings the transport up.  On failure it undoes everything it did
     * before returning, and the instance is freed without uninstall (the
     * one rule, tent_transport_instance_new).  TENT_ENODEV = DeviceNotFound.
     * Alone; may block (bounded). */
    int (*install)(struct tent_transport *t);
    /* Called once, only after a successful install (and quiesce).  Alone. */
    void (*uninstall)(struct tent_transport *t);
    /* Never blocks. */
    uint32_t (*capabilities)(struct tent_transport *t);
    /* Whether the transport can reach the target segment at all.  Never
     * blocks; may call env->seg_attr. */
    bool (*can_reach)(struct tent_transport *t,
                      const struct tent_seg_view *target);

    /* Never block.  free_sub_batch answers TENT_EBUSY while the backend may
     * still touch memory of its tasks. */
    int (*alloc_sub_batch)(struct tent_transport *t, size_t capacity,
                           struct tent_sub_batch **out);
    int (*free_sub_batch)(struct tent_transport *t, struct tent_sub_batch *sb);

    /* Starts n requests (see the calling context above: never waits on the
     * network or the vendor).  res[i].code = 0 when request i started (its
     * status will become terminal), else a negative TENT_E* code with its
     * native code and message (tent_xres_fail): it did not start, touched
     * no memory and may go to another transport; res[i].done = true when
     * it has also completed (its status would say COMPLETED with every
     * byte from now on).  Returns 0 when all started, else the first
     * failure code. */
    int (*submit)(struct tent_transport *t, struct tent_sub_batch *sb,
                  const struct tent_xfer *reqs, size_t n,
                  struct tent_xfer_result *res);
    /* Fills *out for one slot (never waits).  A negative return means the
     * status could not be determined: the task is still in flight as far as
     * anyone knows.  Once a slot is terminal, later calls report the same
     * outcome until it is submitted again. */
    int (*status)(struct tent_transport *t, struct tent_sub_batch *sb,
                  uint32_t slot, struct tent_xfer_status *out);
    /* Stops new submissions and waits for outstanding work (bounded).
     * Alone. */
    int (*quiesce)(struct tent_transport *t);

    /* Makes the handle for peer seg (remote, or the local segment) from
     * its descriptor as it is now (env->seg_attr), addressed to
     * incarnation: *out is the transport's struct, tent_peer first, base
     * filled.  Under the segment's peer lock; never waits on the network.
     * On failure nothing is left (the segment cannot be reached through
     * this transport; the error says why: the request goes to its next
     * transport). */
    int (*peer_open)(struct tent_transport *t, const struct tent_seg_view *seg,
                     uint64_t incarnation, struct tent_peer **out);
    /* Frees everything kept for the peer (threads joined, connections and
     * mappings closed).  No task submitted with it is in flight any more.
     * No runtime lock held, or alone at teardown. */
    void (*peer_close)(struct tent_transport *t, struct tent_peer *peer);

    /* Under the registration lock; may block (bounded). */
    int (*add_buffer)(struct tent_transport *t, struct tent_buffer *buf);
    /* A failure means peers may still reach the memory through this
     * transport: the runtime keeps the buffer registered and returns the
     * error to the caller (the memory must not be freed).  Under the
     * registration lock; may block (bounded). */
    int (*remove_buffer)(struct tent_transport *t, struct tent_buffer *buf);
};

/* Shared stubs of the exact op signatures for ops a transport has nothing
 * to do for (never a cast). */
/* can_reach: every segment. */
bool tent_xport_reach_any(struct tent_transport *t,
                          const struct tent_seg_view *target);
/* quiesce: nothing outstanding to wait for; returns 0. */
int tent_xport_noop_quiesce(struct tent_transport *t);
/* add_buffer / remove_buffer: no per-buffer registration; returns 0. */
int tent_xport_noop_buffer(struct tent_transport *t, struct tent_buffer *buf);
/* peer_open / peer_close: nothing kept per peer; the handle is a bare
 * struct tent_peer. */
int tent_xport_peer_open_plain(struct tent_transport *t,
                               const struct tent_seg_view *seg,
                               uint64_t incarnation, struct tent_peer **out);
void tent_xport_peer_close_plain(struct tent_transport *t,
                                 struct tent_peer *peer);

/* ---- registry of transports compiled in (and test transports) ---------- */
/* The one bound on transports: entries in the registry, transports installed
 * in an engine, candidates of a task. */
#define TENT_MAX_TRANSPORTS 12

/* Allocates an instance of ops (ops->instance_size bytes, zeroed), fills the
 * base and installs it.  A failed install leaves nothing: the instance is
 * freed and the install's code returned. */
int tent_transport_instance_new(const struct tent_transport_ops *ops,
                                const struct tent_xport_env *env, int index,
                                struct tent_transport **out);
/* Uninstalls and frees an instance. */
void tent_transport_instance_free(struct tent_transport *t);

/* Adds ops to the process-wide registry (tests add fakes); engines created
 * afterwards consider it.  Returns TENT_EEXIST for a name already there. */
int tent_transport_register(const struct tent_transport_ops *ops);
size_t tent_transport_registry_snapshot(const struct tent_transport_ops **out,
                                        size_t max);
/* TENT's lowercase name of a TRANSPORT_* value ("tcp", "io_uring"), or of
 * a registered test transport's type; "unknown" otherwise. */
const char *tent_transport_type_name(int type);
/* The TRANSPORT_* value of a name, -1 when unknown. */
int tent_transport_type_from_name(const char *name);

#endif
