/* Runtime internals: engine, segments, registered buffers, batches, tasks.
 *
 * Lock order (outer to inner; each lock is described where it is declared):
 *
 *   engine->reg_lock -> the metadata backend's lock -> segment->lock
 *   batch->lock -> engine->batch_lock | engine->seg_lock | engine->notif_lock
 *   batch->lock -> the metadata backend's lock (refetch on a miss)
 *   batch->lock -> segment->lock -> a transport's own locks
 *   batch->lock -> segment->peer_lock -> segment->lock (read) -> a
 *                  transport's own locks (peer_open reads the descriptor)
 *   segment->peer_lock -> engine->peers_lock
 *
 * engine->batch_lock, seg_lock and notif_lock are leaves: held for a table
 * lookup or update only, never while waiting for another lock or calling
 * out.  A batch lookup takes no table lock: it locks the batch it reads
 * from the table and checks the id (batch memory is type-stable), then
 * keeps the batch by a reference (refs), so one slow batch never blocks
 * lookups of the others.  The RPC server, the metadata backends and the
 * transports never take a runtime lock themselves: they reach runtime state
 * only through the functions they are handed (rpc.h handlers, meta.h env,
 * transport.h). */
#ifndef TENT_RUNTIME_ENGINE_H
#define TENT_RUNTIME_ENGINE_H

#include "common/config.h"
#include "common/log.h"
#include "tent/transfer_engine.h"
#include "transport/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tent_rpc_server;
struct tent_engine;
struct tent_segment;
struct tent_meta;
struct tent_meta_ops;

#define TENT_MAX_ATTRS    16
#define TENT_MAX_POLICIES 32

struct tent_attr {
    char key[64];
    char value[256];
};

/* Remote segment hooks, filled by the control plane (p2p RPC, etcd, ...). */
struct tent_segment_ops {
    /* Fetches the descriptor of name into seg (buffers, attrs, host_id). */
    int (*fetch)(struct tent_engine *e, const char *name,
                 struct tent_segment *seg);
    void (*release)(struct tent_engine *e, struct tent_segment *seg);
    /* Delivers a notification to the peer owning seg. */
    int (*notify)(struct tent_engine *e, struct tent_segment *seg,
                  const char *name, const char *msg);
};

struct tent_file_seg;

/* A transport's peer handle for one segment as the runtime keeps it
 * (peers.c).  tasks counts the tasks submitted with it that are not
 * terminal (and the dispatcher's own use); a handle that left its segment
 * (closed, or a new incarnation) is closed once that drops to 0. */
struct tent_peer_ref {
    struct tent_peer *h;
    int xi; /* engine transport index */
    atomic_int tasks;
    struct tent_peer_ref *next_retired; /* engine's list */
};

struct tent_segment {
    struct tent_seg_view v; /* id, name, local: fixed once created */
    int type;               /* TYPE_MEMORY, or TYPE_FILE (file_segment.c) */
    char host_id[128];      /* machine identity, for same-host detection */
    /* Guards bufs/nbufs/cap, attrs/nattrs, host_id and (remote) priv; the
     * name is written under it too.  Readers: lookups, descriptor export,
     * attribute copies; writers: register/unregister, descriptor import.
     * Taken after reg_lock and batch->lock, before any transport lock. */
    pthread_rwlock_t lock;
    struct tent_buffer **bufs; /* sorted by base; ranges may overlap */
    size_t nbufs, cap;
    struct tent_attr attrs[TENT_MAX_ATTRS];
    int nattrs;
    void *priv;        /* control plane's per-segment state */
    uint64_t desc_gen; /* remote: bumped by an import that changed anything */
    /* The peer engine's incarnation its descriptor names (0: none); written
     * under lock by an import, read without it. */
    _Atomic uint64_t incarnation;
    /* Guards peers (peers.c): one handle per transport, opened on first
     * use.  Taken under batch->lock, never under lock or a table lock. */
    pthread_mutex_t peer_lock;
    struct tent_peer_ref *peers[TENT_MAX_TRANSPORTS];
    struct tent_segment *next_closed; /* engine's list of closed segments */
    /* TYPE_FILE: the open file (file_segment.c); its record is local (v.local)
     * and its one buffer, [0, file size), never changes. */
    struct tent_file_seg *file;
};

/* One rule of TENT's transport selector (selector.c).  A filter left out
 * of the rule matches anything: -1 for the ints, "" for the patterns. */
#define TENT_POLICY_DEVICES 8
struct tent_policy {
    char name[64];
    int segment_type; /* TYPE_MEMORY / TYPE_FILE */
    int priority;     /* TENT_PRIO_*, -1 any */
    int intent;       /* TENT_INTENT_*, -1 any */
    int same_machine; /* 0 / 1, -1 any */
    uint64_t min_size, max_size;
    /* memory type of the local and the remote buffer: "cpu", "cuda",
     * "npu", "rocm" ... as a buffer's location names it before ':' */
    char local_mem[16], remote_mem[16];
    /* NICs the request's rails may use (none listed: every one) */
    char devices[TENT_POLICY_DEVICES][32];
    int ndevices;
    int transports[TENT_MAX_TRANSPORTS]; /* TRANSPORT_* in order */
    int ntransports;
};

struct tent_task {
    tent_request_t req;
    struct tent_buffer *src_buf; /* pinned (inflight) until terminal */
    struct tent_buffer *dst_buf; /* target buffer, pinned too */
    /* The incarnation of the descriptor its target buffer was resolved in. */
    uint64_t incarnation;
    /* From bytes to t_submit: zero at submit (task_init clears them as one
     * range).  The cause of the last failure (tent_task_error): our code,
     * the native one and the message (heap, or NULL). */
    uint64_t bytes;
    char *error_msg;
    int32_t last_error;
    int32_t native_error;
    /* The peer handle the task is in flight with (leads only; released
     * when it leaves its transport). */
    struct tent_peer_ref *peer;
    /* Its entry in the runtime queue (rqueue.c) until it is terminal;
     * NULL when enable_runtime_queue is off. */
    struct tent_rq_node *rqn;
    /* metrics: submit and attempt start (ns) of a timed task; 0 = untimed */
    uint64_t t_submit, t_attempt;
    /* With a deadline: the time it gave at submit, µs (rounded up, at most
     * UINT32_MAX), 0 when it had passed; for its MLU.  Else not read. */
    uint32_t dl_window_us;
    /* The task whose transport slot carries this one: its own index, or,
     * when merge_requests joined it to the request before it, the index of
     * the first task of that merged request. */
    uint32_t lead;
    /* Eight bytes that submit sets together.  busy: this task's slot is
     * in a transport call with the batch lock released (a submit of the
     * group it leads, a status of its slot): nobody else hands the slot to
     * a transport meanwhile (batch.h).  needs_refetch: the target's
     * descriptor is to be fetched again before the task goes on (it met a
     * range the target no longer has as published); once per task
     * (refetched). */
    bool busy;
    bool needs_refetch, refetched;
    int8_t xport;      /* engine transport index now executing it, -1 none */
    int8_t last_xport; /* the last one that took it, -1 none */
    uint8_t attempts;  /* failovers taken */
    /* The rule req.policy_name named (its index), or -1: follow the rules.
     * The caller's string is not kept (req.policy_name is NULL). */
    int8_t policy;
    /* Set at submit when the task is like the one before it in the call
     * in everything selection reads, within the same two buffers (like);
     * and its source and target start where that one's end (follows):
     * dispatch then merges it without comparing them again.  Cleared when
     * the task leaves its first transport (tent_task_advance). */
    bool like;
    bool follows;
    /* The selection, copied whole from a run's head to its like tasks
     * (TENT_TASK_SEL_BYTES): the candidates, how many, the one being
     * tried, and the state (STATUS_*). */
    uint8_t cands[TENT_MAX_TRANSPORTS];
    uint8_t ncand, cand_pos;
    uint8_t state;
};

#define TENT_TASK_SEL_BYTES (TENT_MAX_TRANSPORTS + 3)
_Static_assert(offsetof(struct tent_task, state) + 1 -
                       offsetof(struct tent_task, cands) ==
                   TENT_TASK_SEL_BYTES,
               "a task's selection is one block");
_Static_assert(offsetof(struct tent_task, like) + 1 -
                       offsetof(struct tent_task, busy) ==
                   8,
               "the flags submit sets are one 8-byte word");

/* Batch table geometry: 1024 chunks of 1024 slots, so at most 1M batches
 * allocated at once per engine. */
#define TENT_BATCH_CHUNK  1024u
#define TENT_BATCH_CHUNKS 1024u
typedef struct tent_batch *_Atomic tent_batch_slot;

struct tent_batch {
    /* Batch memory is type-stable: a batch whose last reference goes is
     * recycled into its engine's pool, never freed before the engine, so
     * a lookup may lock a batch it found in the table without the table
     * lock and then check the id (batch_table.c).  Written while unlocked
     * when the batch is (re)issued, hence atomic. */
    _Atomic uint64_t id;
    struct tent_engine *engine;
    /* One for the table's entry, one per caller between lookup and unlock;
     * the last reference returns the batch to the pool. */
    atomic_int refs;
    /* Guards everything below.  Outermost of the runtime's locks on the data
     * path: taken before batch_lock, seg_lock, notif_lock, segment locks and
     * transport locks, and never while holding any of them. */
    pthread_mutex_t lock;
    bool dead; /* unlinked by tent_free_batch: every use now fails */
    /* Slots claimed (busy) by threads inside transport calls; idle is
     * signalled when it drops to 0 while idle_waiters threads wait for that
     * (tent_free_batch, teardown): no signal when nobody waits. */
    int nbusy, idle_waiters;
    pthread_cond_t idle;
    size_t capacity, ntasks;
    /* Tasks recorded COMPLETED by a completed merged request in submit
     * (complete_merged: each once, and COMPLETED is final), the bytes they
     * moved and whether one keeps a cause message: when they are all the
     * batch's tasks, status and free need not look at each. */
    size_t ndone;
    uint64_t done_bytes;
    bool done_msgs;
    struct tent_task *tasks;
    size_t tasks_cap; /* tasks' length: kept across recycling */
    struct tent_sub_batch *subs[TENT_MAX_TRANSPORTS];
    struct tent_batch *next_deferred; /* engine's list of freed-in-flight */
    struct tent_batch *next_free;     /* engine's pool */
    /* tent_submit_notif: sent once every task has completed. */
    char *notif_name, *notif_msg;
    uint64_t notif_target;
};

/* A tent_allocate_memory allocation.  Allocating registers nothing; a
 * registration whose range starts at base publishes the memfd to shm. */
struct tent_alloc {
    uintptr_t base;
    size_t size;       /* what the caller asked for */
    size_t map_len;    /* host: the page-rounded mapping */
    int fd;            /* host: memfd backing it; -1 for device memory */
    int device;        /* accelerator index for "npu:N", -1 for host memory */
    char location[64]; /* as allocated; a registration inside inherits it */
    /* Some pages were moved off the memfd (tent_memory_reclaim_pages): new
     * registrations inside are not published as the memfd any more. */
    bool split;
};

struct tent_engine {
    struct tent_config *cfg;
    char hostname[256];
    char segment_name[320];
    /* tcp_loopback_congestion, checked: for the RPC server and tcp */
    char loopback_cc[TENT_RPC_CC_MAX];
    uint16_t rpc_port;

    /* Settings read once from cfg at creation. */
    int max_failover_attempts;
    /* merge_requests: adjacent requests of one submit (same target, opcode
     * and buffers, contiguous on both sides) go to the transport as one,
     * up to merge_max_bytes. */
    bool merge_requests;
    uint64_t merge_max_bytes;
    bool auto_failover_on_poll;
    bool use_hugepage;
    size_t hugepage_size;
    struct tent_policy policies[TENT_MAX_POLICIES];
    int npolicies;

    /* What every transport of this engine is handed (xport_env.c). */
    struct tent_xport_env xenv;
    /* Random, non-zero, drawn at creation (xport_env.c): published in the
     * descriptor, checked by the transports' target halves. */
    uint64_t incarnation;
    /* Peer handles that left their segment, closed once no task uses them
     * (peers.c).  peers_lock guards the list; a leaf. */
    pthread_mutex_t peers_lock;
    struct tent_peer_ref *retired_peers;
    atomic_size_t nretired_peers;
    char host_id[128];
    struct tent_transport *xports[TENT_MAX_TRANSPORTS];
    int nxports;
    bool xport_abandoned[TENT_MAX_TRANSPORTS]; /* quiesce failed at teardown */
    /* Set once tent_destroy_engine begins: from then on no task is started
     * or failed over (a transport quiesced first must never see new work). */
    atomic_bool stopping;

    /* Segments: slot i holds segment id i (0 = local).  seg_lock guards
     * segs/nsegs (the table, not the segments); a leaf lock. */
    pthread_mutex_t seg_lock;
    struct tent_segment **segs;
    size_t nsegs;
    struct tent_segment *closed_segs; /* closed, freed with the engine */
    struct tent_segment *local;
    const struct tent_segment_ops *seg_ops;

    /* Control plane (control.c): set up at creation, torn down at
     * destruction, read-only in between. */
    struct tent_rpc_server *rpc;
    int rpc_timeout_ms;
    /* security/secret_file (common/auth.h), NULL for none; freed last */
    struct tent_auth *auth;
    const struct tent_meta_ops *meta_ops; /* backend of metadata_type */
    struct tent_meta *meta;               /* its state, NULL once stopped */
    struct tent_metrics *metrics; /* NULL when metrics/enabled is false */
    struct tent_sched *sched;     /* rails of the transports (sched/rails.h) */
    /* TENT's runtime admission queue (rqueue.c); NULL unless
     * enable_runtime_queue.  Its lock is a leaf, taken under batch->lock. */
    struct tent_rq *rq;

    /* Serialises register/unregister/allocate/free of local memory (and
     * the transports' add/remove_buffer calls they make).  Outermost: taken
     * before the metadata backend's lock and segment->lock. */
    pthread_mutex_t reg_lock;
    struct tent_alloc *allocs; /* guarded by reg_lock */
    size_t nallocs, alloc_cap;
    /* Guards every local buffer's pins list (peers' uses through a
     * transport's target half); pin_cond is signalled when one goes.  A
     * leaf, taken under the local segment's lock by env->pin_local. */
    pthread_mutex_t pin_lock;
    pthread_cond_t pin_cond;
    int revoke_timeout_ms; /* revoke_timeout_ms: waiting for those uses */

    /* Received notifications (notify.c).  notif_lock guards notifs,
     * notif_peers, nnotifs, notif_cap, notif_bytes and the senders table; a
     * leaf lock (taken from RPC server threads and under batch->lock).  The
     * queue is bounded in bytes in total and per sender (limits read at
     * creation); a notification beyond them is refused and counted. */
    pthread_mutex_t notif_lock;
    struct tent_notifi_record *notifs;
    struct tent_notif_peer *notif_peers; /* parallel to notifs */
    size_t nnotifs, notif_cap;
    size_t notif_bytes;
    struct tent_notif_sender *senders;
    size_t nsenders, senders_cap;
    size_t notif_max_bytes, notif_max_sender_bytes;
    atomic_ulong notif_dropped;
    struct tent_log_ratelimit notif_rl;

    /* Batches: slot (id & 0xffffffff) - 1, a process-wide sequence number
     * in the high half (batch_table.c).  The table is two-level, chunks of
     * TENT_BATCH_CHUNK slots that never move: lookups read it with atomic
     * loads and no lock.  batch_lock guards changes to it, the free slots,
     * the pool and the deferred list; a leaf lock, taken alone or under one
     * batch->lock. */
    pthread_mutex_t batch_lock;
    tent_batch_slot *_Atomic batch_chunks[TENT_BATCH_CHUNKS];
    uint32_t nslots;      /* slots ever used: [0, nslots) */
    uint32_t *free_slots; /* stack of unused slots below nslots */
    uint32_t nfree, free_cap;
    struct tent_batch *batch_pool; /* recycled batches (next_free) */
    /* One dispatch group kept between submits (batch_submit.c); a
     * concurrent dispatch allocates its own. */
    void *_Atomic spare_group;
    /* Batches tent_free_batch unlinked while tasks were still in flight
     * (TENT defers the free): reaped by later calls once every task is
     * terminal.  Guarded by batch_lock; each holds the table's reference. */
    struct tent_batch *deferred;
    atomic_size_t ndeferred; /* its length, read without the lock */
};

static inline struct tent_segment *tent_seg_of(const struct tent_seg_view *v)
{
    return (struct tent_segment *)((char *)v -
                                   offsetof(struct tent_segment, v));
}

/* segment.c */
/* Pointer into the segment's attributes: only for tests and for code that
 * holds off descriptor refreshes; everyone else uses tent_segment_attr_copy. */
const char *tent_segment_attr(const struct tent_segment *seg, const char *key);
int tent_segment_new(uint64_t id, const char *name, bool local,
                     struct tent_segment **out);
void tent_segment_free(struct tent_segment *seg);
/* Frees a buffer record and its attributes. */
void tent_buffer_free(struct tent_buffer *buf);
/* Finds the buffer wholly containing [addr, addr+len); caller holds lock. */
struct tent_buffer *tent_segment_find_locked(const struct tent_segment *seg,
                                             uint64_t addr, uint64_t len);
/* Like tent_segment_find_locked, but among overlapping ranges prefers one
 * that grants the access (a write; from a remote peer); when none does,
 * returns one that holds the range, whose permission then refuses it.  key
 * non-NULL: only a buffer with that access key counts (constant-time
 * compare). */
struct tent_buffer *
tent_segment_find_access_locked(const struct tent_segment *seg, uint64_t addr,
                                uint64_t len, bool write, bool remote,
                                const uint8_t *key);
/* Whether any buffer overlaps [addr, addr+len); caller holds lock. */
bool tent_segment_overlaps_locked(const struct tent_segment *seg, uint64_t addr,
                                  uint64_t len);
int tent_segment_insert_locked(struct tent_segment *seg,
                               struct tent_buffer *buf);
void tent_segment_remove_locked(struct tent_segment *seg,
                                struct tent_buffer *buf);
int tent_segment_set_attr_locked(struct tent_segment *seg, const char *key,
                                 const char *value);
struct tent_segment *tent_engine_segment(struct tent_engine *e, uint64_t id);
/* Copies an attribute of seg into buf under its lock; false, with buf = "",
 * when absent or longer than len - 1. */
bool tent_segment_attr_copy(const struct tent_segment *seg, const char *key,
                            char *buf, size_t len);
/* Publishes key=value in the local segment (value NULL removes it) and
 * tells the metadata backend. */
int tent_engine_publish_attr(struct tent_engine *e, const char *key,
                             const char *value);

/* Puts seg (a new, unlisted record) into the segment table and sets
 * *handle; TENT_EEXIST with *handle = the other's when a segment of the same
 * name was added meanwhile (the caller frees its own). */
int tent_engine_add_segment(struct tent_engine *e, struct tent_segment *seg,
                            uint64_t *handle);

/* file_segment.c: segments named "file://<path>" (TYPE_FILE). */
bool tent_file_segment_name(const char *name);
/* Opens the file as a segment: called by tent_open_segment once no open
 * segment has the name. */
int tent_file_segment_open(struct tent_engine *e, const char *name,
                           uint64_t *handle);
/* tent_close_segment of a file segment: TENT_EBUSY while tasks use it. */
int tent_file_segment_close(struct tent_engine *e, uint64_t handle);
/* Engine teardown, before the transports go: closes every file segment. */
void tent_file_segments_teardown(struct tent_engine *e);

/* xport_env.c */
/* Draws e->incarnation and fills e->xenv, the table every transport of e is
 * handed at install. */
void tent_xport_env_init(struct tent_engine *e);

/* peers.c: the peer handles of segments (transport.h). */
/* The handle of transport xi for seg, addressed to incarnation inc (the one
 * the task's target was resolved in), opened when missing and counted n
 * times (tasks + n).  TENT_ESTALE when seg now names another incarnation: the
 * task was meant for a process that is gone.  Else peer_open's error.
 * Caller holds no lock but possibly a batch lock. */
int tent_peer_get(struct tent_engine *e, struct tent_segment *seg, int xi,
                  uint64_t inc, int n, struct tent_peer_ref **out);
static inline void tent_peer_put(struct tent_peer_ref *r)
{
    atomic_fetch_sub_explicit(&r->tasks, 1, memory_order_release);
}
/* Releases of one handle counted for a pass over completions, applied in
 * one atomic operation (as tent_pin_run). */
struct tent_peer_run {
    struct tent_peer_ref *r;
    int n;
};
static inline void tent_peer_run_flush(struct tent_peer_run *pr)
{
    if (pr->n)
        atomic_fetch_sub_explicit(&pr->r->tasks, pr->n, memory_order_release);
    pr->r = NULL;
    pr->n = 0;
}
/* The task's handle, released in pr (NULL: at once). */
static inline void tent_task_unpeer_run(struct tent_task *t,
                                        struct tent_peer_run *pr)
{
    if (!t->peer)
        return;
    if (!pr) {
        tent_peer_put(t->peer);
    } else {
        if (pr->r != t->peer)
            tent_peer_run_flush(pr);
        pr->r = t->peer;
        pr->n++;
    }
    t->peer = NULL;
}
/* The task's handle, released (it left its transport). */
static inline void tent_task_unpeer(struct tent_task *t)
{
    if (t->peer) {
        tent_peer_put(t->peer);
        t->peer = NULL;
    }
}
/* Takes every handle off seg (closed, or re-resolved): each is closed
 * once its tasks are done (tent_peers_reap). */
void tent_segment_peers_retire(struct tent_engine *e, struct tent_segment *seg);
/* Closes the retired handles no task uses any more.  No runtime lock held. */
void tent_peers_reap(struct tent_engine *e);
/* Teardown, transports quiesced: closes every handle of every segment
 * (those of abandoned transports are left). */
void tent_peers_teardown(struct tent_engine *e);
/* The message of a task addressed to incarnation inc of seg when the
 * descriptor now names cur (0: the peer is not there any more). */
void tent_peer_restarted_msg(char *buf, size_t len, const char *name,
                             uint64_t inc, uint64_t cur);

/* rails_api.c: the scheduler's rails as dynamic metric families (arg: the
 * engine's struct tent_sched). */
struct tm_dyn_sink;
void tent_rails_metrics(void *arg, struct tm_dyn_sink *k);

/* memory.c */
void tent_memory_release_all(struct tent_engine *e);
/* env->reclaim_pages (transport.h); caller holds e->reg_lock. */
int tent_memory_reclaim_pages(struct tent_engine *e,
                              const struct tent_buffer *buf);
bool tent_location_is_device(const char *location);

/* selector.c */
int tent_policies_load(struct tent_engine *e);
/* Fills task->cands with engine transport indices, best first. */
/* The index of the rule named name for segments of type seg_type, or -1. */
int tent_policy_named(const struct tent_engine *e, const char *name,
                      int seg_type);
void tent_select_candidates(struct tent_engine *e, struct tent_task *task,
                            const struct tent_segment *target,
                            const struct tent_buffer *target_buf);

/* rqueue.c: TENT's opt-in runtime admission queue (enable_runtime_queue). */
struct tent_rq_node;
/* Reads enable_runtime_queue and runtime_queue/...; sets e->rq when on. */
int tent_rq_load(struct tent_engine *e);
void tent_rq_free(struct tent_engine *e);
/* Admits the new tasks [first, first+n) of b (locked, resolved, WAITING)
 * into the queue, or none: TENT_ECAPACITY naming the limit.  A task whose
 * deadline cannot be met is failed at once (TENT_ETIMEDOUT, the cause
 * naming the figures). */
int tent_rq_admit(struct tent_engine *e, struct tent_batch *b, size_t first,
                  size_t n);
/* The task (its batch locked) is terminal: its entry leaves the queue or
 * the dispatch window; completed with bytes feeds the measured rate. */
void tent_rq_end(struct tent_task *t, bool completed, uint64_t bytes);
/* Moves queued tasks into the dispatch window while it has room (EDF
 * order when deadline_aware).  Call with no runtime lock held. */
void tent_rq_pump(struct tent_engine *e);
/* tent_free_batch: b's tasks still queued are cancelled (b locked). */
void tent_rq_batch_freed(struct tent_engine *e, struct tent_batch *b);

/* notify.c */
/* Where a queued notification came from, beside tent_notifi_record (whose
 * public layout has no room for it): the connection's address, "local"
 * for a notification to self. */
struct tent_notif_peer {
    char addr[64];
};
int tent_notifs_load_settings(struct tent_engine *e);
/* Queues a received notification for tent_recv_notifs: from is the
 * sender's segment id here (0 if not open), peer the connection's address,
 * sender the segment name it declared.  TENT_EBUSY beyond the queue's
 * bounds. */
int tent_engine_deliver_notif(struct tent_engine *e, uint64_t from,
                              const char *peer, const char *sender,
                              const char *name, const char *msg);
/* tent_recv_notifs, also handing over the peer address of each record
 * (*peers, parallel to info->records, free() it; NULL when none). */
int tent_engine_recv_notifs(struct tent_engine *e, tent_notifi_info *info,
                            struct tent_notif_peer **peers);
void tent_notifs_teardown(struct tent_engine *e);
int tent_engine_send_notif(struct tent_engine *e, uint64_t handle,
                           const char *name, const char *msg);
int tent_notif_validate(const char *name, const char *msg, const char *what);

/* batch_table.c */
void tent_batches_teardown(struct tent_engine *e);
/* Frees the deferred batches whose tasks have all ended (cheap when there
 * are none).  Takes batch locks: call it holding no runtime lock. */
void tent_batches_reap(struct tent_engine *e);

static inline struct tent_engine *tent_engine_cast(tent_engine_t h)
{
    return (struct tent_engine *)h;
}

#endif
