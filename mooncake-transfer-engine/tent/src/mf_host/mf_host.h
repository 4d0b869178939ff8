/* mf_host: a host-memory implementation of the smem_trans ABI
 * (src/transport/memfabric/smem_trans_abi.h), built as its own
 * libmf_smem.so so the memfabric transport moves real bytes without an NPU.
 *
 * Each instance ("handle") has an rpc server that validates every request
 * against its registered ranges (mf_host_server.c), peers reached by a
 * control connection and a pool of data connections (or, for host_shm on
 * the same host, by cross-memory attach and shared mappings), worker
 * threads that CHECK a batch's remote ranges before copying it in slices
 * (mf_host_batch.c), and a control page through which deregistration
 * revokes a range from every copier (mf_host_ctl.h).  The lock order is
 * given above struct mfh_handle.  More: docs/mf_host.md (Internals). */
#ifndef TENT_MF_HOST_H
#define TENT_MF_HOST_H

#include "common/log.h"
#include "common/tsan.h"
#include "mf_host/mf_host_ctl.h"
#include "net/net.h"
#include "transport/memfabric/smem_trans_abi.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define MFH_EXPORT __attribute__((visibility("default")))

#define MFH_UID_MAX            64
#define MFH_WORKERS            4          /* copy threads per handle */
#define MFH_POOL_MAX           4          /* data connections per peer */
#define MFH_SLICE              (1u << 20) /* copies are cut into slices of this size */
#define MFH_IO_TIMEOUT_MS      10000 /* default bound on a blocking socket call */
#define MFH_IO_TIMEOUT_MAX_MS  86400000 /* one day, as the transport accepts */
#define MFH_CONNECT_TIMEOUT_MS 3000     /* bound on connect() */
#define MFH_IDLE_TIMEOUT_MS    60000    /* server: default idle timeout */
#define MFH_MAX_CONNS_DEFAULT  1024     /* server: default cap, at most */
#define MFH_MAX_CONNS_MIN      16       /* and at least */
#define MFH_MAX_CONNS_MAX      65536
#define MFH_MAX_BATCH          (1u << 20)
#define MFH_RUN_MAX            64         /* slices a worker takes at once */
#define MFH_RUN_BYTES          (4u << 20) /* and at most this many bytes */
#define MFH_BATCH_BUCKETS      256

/* ---- logging ------------------------------------------------------------
 * The vendor's levels (set by smem_set_log_level, kept in net.c); lines
 * written by libtent's formatter (common/log.c), tagged "mf_host". */
enum { MFH_LOG_DEBUG = 0, MFH_LOG_INFO, MFH_LOG_WARN, MFH_LOG_ERROR };
extern atomic_int mfh_log_level;
#define MFH_LOG(lvl, name, ...)                                                \
    do {                                                                       \
        if ((lvl) >=                                                           \
            atomic_load_explicit(&mfh_log_level, memory_order_relaxed))        \
            tent_log_emit(name, "mf_host", __FILE__, __LINE__, __VA_ARGS__);   \
    } while (0)
#define MFH_DEBUG(...) MFH_LOG(MFH_LOG_DEBUG, "DEBUG", __VA_ARGS__)
#define MFH_INFO(...)  MFH_LOG(MFH_LOG_INFO, "INFO", __VA_ARGS__)
#define MFH_WARN(...)  MFH_LOG(MFH_LOG_WARN, "WARN", __VA_ARGS__)
#define MFH_ERROR(...) MFH_LOG(MFH_LOG_ERROR, "ERROR", __VA_ARGS__)

/* net.c: the socket calls of net/net.h on user memory, hidden from TSan
 * (common/tsan.h); 0 or -1 with errno. */
int mfh_sendv_user(int fd, struct iovec *iov, int n);
/* Receives exactly the bytes of iov[0..n) (user memory; consumes iov). */
int mfh_recvv_user(int fd, struct iovec *iov, int n);

/* ---- wire format (both ends are this library on one byte order) ------- */
#define MFH_MAGIC   0x3148464du /* "MFH1" */
#define MFH_VERSION 5u
#define MFH_KEY_LEN SMEM_TRANS_EXT_KEY_LEN

enum mfh_msg_type {
    MFH_MSG_HELLO = 1,
    MFH_MSG_CHECK = 2,
    MFH_MSG_WRITE = 3,
    MFH_MSG_READ = 4,
    MFH_MSG_REPLY = 5,
    MFH_MSG_RANGES = 6, /* reply: addr = mem_gen, gen = rev_gen, count
                           ranges follow */
    MFH_MSG_PING = 7,   /* no payload, no reply: keeps an idle connection
                           (a peer's control connection) open */
};

/* A READ answered SM_OK is its len bytes followed by a second REPLY header
 * (no payload), the final status: the server may have stopped sending the
 * memory half-way (deregistered meanwhile), sending zeros instead. */
struct mfh_msg {
    uint32_t magic;
    uint16_t type;
    uint16_t flags;
    int32_t status; /* replies: SM_OK or an SM_* error */
    uint32_t count; /* CHECK: number of ranges */
    uint64_t addr;  /* WRITE/READ: remote address; CHECK reply: bad index */
    uint64_t len;   /* payload bytes following the header */
    /* CHECK reply: the owner's rev_gen the check was made at; WRITE/READ:
     * that of the batch's check (0: none, admit as of now) */
    uint64_t gen;
    /* WRITE/READ: the access key of the range addr lies in (zeros: none;
     * a range registered with a key refuses any other, as if it were not
     * registered) */
    uint8_t key[MFH_KEY_LEN];
};

struct mfh_hello {
    uint32_t version;
    uint32_t pid;
    uint32_t proto;
    int32_t ctl_fd;   /* the sender's descriptor of its control page, or -1 */
    uint64_t ctl_ino; /* and that page's inode */
    /* answers: the server closes connections idle this long (0: never);
     * a peer pings its control connection and drops pooled ones sooner */
    uint32_t idle_timeout_ms;
    uint32_t pad;
    char uid[MFH_UID_MAX];
};

/* CHECK: a range and the key of the registration it lies in; RANGES
 * answers: the key is zeros (keys are never handed out). */
struct mfh_wire_range {
    uint64_t addr;
    uint64_t len;
    uint8_t key[MFH_KEY_LEN];
};

/* ---- objects ---------------------------------------------------------- */
struct mfh_range {
    uintptr_t base;
    size_t len;
    bool keyed; /* registered with key: served only to requests naming it */
    uint8_t key[MFH_KEY_LEN];
};

struct mfh_conn {
    struct mfh_conn *next;
    int fd;
    bool busy;
    long long last_ms; /* when it was last released */
};

struct mfh_map;

/* A remote instance we copy to/from.  refs: one for h->peers membership,
 * one per batch, one per monitor snapshot.  p->lock guards conns, n_conns,
 * connecting.  A cma peer's control page is mapped here, with one window
 * slot per worker of ours. */
struct mfh_peer {
    struct mfh_peer *next;
    atomic_int refs;
    atomic_bool down;
    struct mfh_handle *h;
    char url[MFH_UID_MAX];
    char uid[MFH_UID_MAX];
    pid_t pid;
    bool use_cma;
    int srv_idle_ms;     /* its server's idle timeout (0: none) */
    long long ping_ms;   /* monitor: when its control connection was pinged */
    uint64_t gen_addr;   /* cma peers: where to read their mem_gen */
    struct mfh_ctl *ctl; /* cma peers: their control page, mapped */
    struct mfh_win *slots[MFH_WORKERS];
    int ctrl_fd;
    /* cma peers: their registered ranges as of generation cache_gen (and
     * rev_gen cache_rev), so a batch is checked with a read of their
     * control page instead of a round trip while the peer's registrations
     * do not change. */
    pthread_mutex_t cache_lock;
    bool cache_valid;
    uint64_t cache_gen, cache_rev;
    struct mfh_range *cache;
    size_t n_cache;
    /* cma peers: shared mappings of their registered ranges (shm.c);
     * dropped whenever the range cache is refreshed.  map_lock is taken
     * before cache_lock and held (read) across each copy through a map. */
    pthread_rwlock_t map_lock;
    struct mfh_map *maps;
    size_t n_maps, cap_maps;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct mfh_conn *conns;
    int n_conns; /* including ones being connected */
};

/* One slice of one entry of a batch. */
struct mfh_slice {
    uintptr_t local;
    uint64_t remote;
    size_t len;
    const uint8_t *key; /* its range's (the batch's ranges[i].key) */
};

enum mfh_batch_phase { MFH_PHASE_CHECK, MFH_PHASE_COPY };

/* A batch: in h->batch_tab (batch_lock) from submit until its result is
 * consumed; in the work queue (q_lock) while it has unclaimed work. */
struct mfh_batch {
    struct mfh_batch *tab_next; /* batch_lock */
    struct mfh_batch *q_next;   /* q_lock */
    uint64_t id;
    struct mfh_peer *peer; /* ref held until the batch finishes */
    smem_trans_opcode_t opcode;
    enum mfh_batch_phase phase;    /* q_lock */
    struct mfh_wire_range *ranges; /* remote ranges, for CHECK */
    uint32_t n_ranges;
    struct mfh_slice *slices;
    size_t n_slices;
    size_t next_slice;       /* q_lock */
    uint64_t bytes_left;     /* q_lock: in slices not yet claimed */
    atomic_size_t remaining; /* slices not yet finished */
    atomic_int first_error;
    atomic_bool used_map; /* a slice went through a shared mapping */
    uint64_t rev_snap;    /* the peer's rev_gen its check was made at (0:
                             none: one tcp slice, the server admits it) */
    bool done;            /* batch_lock */
    int32_t result;       /* batch_lock, valid when done */
};

struct mfh_srv_conn {
    struct mfh_srv_conn *next;
    struct mfh_handle *h;
    int fd;
    pthread_t thread;
    atomic_bool finished;
    atomic_bool evicted;       /* shut down by the server to make room */
    atomic_bool between;       /* waiting for a request header */
    atomic_bool greeted;       /* said HELLO */
    _Atomic long long last_ms; /* when a request last arrived or ended */
    struct mfh_win win;        /* the request this thread copies for */
    /* srv_lock: who said HELLO on this connection (a peer's control
     * connection), to name it */
    char peer_uid[MFH_UID_MAX];
    pid_t peer_pid;
};

/* A worker thread's handle and index (its window slot at cma peers). */
struct mfh_worker {
    struct mfh_handle *h;
    int idx;
};

/* Lock order (outer first): g_lock (api.c) > h->connect_lock >
 * h->peer_lock > p->lock; h->reg_lock > h->mem_lock and h->srv_lock;
 * h->q_lock, h->batch_lock, h->mem_lock, h->cb_lock and h->srv_lock are
 * leaves (nothing else is taken while they are held).  The peer-down
 * callback is called with no lock held. */
struct mfh_handle {
    struct mfh_handle *next; /* g_lock: registry of live handles */
    int api_refs;            /* g_lock: API calls using this handle */
    atomic_bool stopping;
    uint32_t proto; /* SMEMB_DATA_OP_HOST_TCP or _HOST_SHM */
    char host[MFH_UID_MAX];
    uint16_t port;
    char uid[MFH_UID_MAX];
    /* Bound on every blocking socket call of this instance:
     * MF_TRANSFER_TIMEOUT (ms) when set at create, else MFH_IO_TIMEOUT_MS. */
    int io_timeout_ms;
    /* The cluster secret (MC_TENT_SECRET_FILE at create; common/auth.h),
     * NULL for none: every connection, served or made, opens with the
     * handshake. */
    struct tent_auth *auth;

    pthread_mutex_t reg_lock;  /* one registration change at a time */
    pthread_rwlock_t mem_lock; /* registered ranges */
    struct mfh_range *ranges;
    size_t n_ranges, cap_ranges;
    /* The control page (mf_host_ctl.h): a memfd peers map (ctl_fd >= 0),
     * or private memory when none could be made (peers then copy over
     * tcp).  Its mem_gen and rev_gen change under mem_lock (write). */
    struct mfh_ctl *ctl;
    int ctl_fd;
    uint64_t ctl_ino;

    pthread_mutex_t cb_lock;
    smem_trans_peer_down_callback_t cb;
    void *cb_user;

    /* The server's limits (server.c), read at create: at most max_conns
     * connections are served, one closed after idle_timeout_ms without a
     * request (0: never). */
    int max_conns;
    int idle_timeout_ms;
    int listen_fd;
    int reserve_fd; /* /dev/null, given up when accept() runs out */
    pthread_t accept_thread;
    bool accept_started;
    pthread_mutex_t srv_lock; /* srv_conns, n_srv_conns, n_srv_listed */
    struct mfh_srv_conn *srv_conns;
    int n_srv_conns;  /* listed and not evicted */
    int n_srv_listed; /* listed: not yet joined and closed */

    pthread_mutex_t connect_lock; /* serializes peer creation */
    pthread_mutex_t peer_lock;    /* peers list */
    struct mfh_peer *peers;
    int monitor_efd;
    pthread_t monitor_thread;
    bool monitor_started;

    pthread_mutex_t batch_lock;
    struct mfh_batch *batch_tab[MFH_BATCH_BUCKETS];
    uint64_t next_batch_id;

    pthread_mutex_t q_lock;
    pthread_cond_t q_cond;
    struct mfh_batch *q_head, *q_tail;
    pthread_t workers[MFH_WORKERS];
    struct mfh_worker worker_args[MFH_WORKERS];
    int n_workers;
};

/* Who calls whom (one direction): api.c -> batch.c -> peers.c -> shm.c ->
 * ranges.c -> ctl.c -> net.c; api.c also starts server.c, which uses
 * ranges.c, ctl.c and net.c.  Nothing calls back into api.c. */

/* ranges.c: a handle's registered memory (h->mem_lock) */
bool mfh_range_registered(struct mfh_handle *h, uint64_t addr, uint64_t len);
/* Whether the ranges of r that admit key cover [addr, +len): a range
 * registered without a key admits any, one with a key admits only that
 * key (constant-time compare); key NULL: every range (the initiator's own
 * view of a peer, whose keys it never has). */
bool mfh_ranges_cover(const struct mfh_range *r, size_t n, uint64_t addr,
                      uint64_t len, const uint8_t *key);
/* keys: count keys back to back, or NULL (registered without one). */
int32_t mfh_ranges_add(struct mfh_handle *h, void *const *addrs,
                       const size_t *caps, const uint8_t *keys, uint32_t count);
/* Deregisters the range at addr and revokes it from every copier: SM_OK
 * once none touches it any more; SM_RESOURCE_IN_USE (logged, naming the
 * peer) when one is still inside a copy after the handle's timeout, with
 * the range registered again. */
int32_t mfh_ranges_revoke(struct mfh_handle *h, void *addr);

/* ctl.c: the control page (mf_host_ctl.h) */
/* The owner's side: creates h's page (a memfd, or private memory when
 * that fails: ctl_fd -1); SM_OK or SM_MALLOC_FAILED. */
int32_t mfh_ctl_create(struct mfh_handle *h);
void mfh_ctl_destroy(struct mfh_handle *h);
/* Records the removal of [base, base+len); caller holds mem_lock (write). */
void mfh_ctl_log_removal(struct mfh_handle *h, uint64_t base, uint64_t len);
/* Waits until no window over a range overlapping [base, base+len) is open;
 * 0, or -1 after timeout_ms with the window marked broken and *who naming
 * its holder. */
int mfh_ctl_wait(struct mfh_handle *h, uint64_t base, uint64_t len,
                 int timeout_ms, char *who, size_t who_len);
/* The initiator's side: maps peer p's page (its fd number and inode from
 * the HELLO) and takes MFH_WORKERS window slots; 0, or -1 with *why. */
int mfh_ctl_attach(struct mfh_peer *p, int fd, uint64_t ino, const char **why);
void mfh_ctl_detach(struct mfh_peer *p);

/* net.c: blocking send/receive, 0 or -1 with errno */
int mfh_send_full(int fd, const void *buf, size_t len);
int mfh_recv_full(int fd, void *buf, size_t len);
/* A connected socket with I/O timeouts of io_ms to url, or -1 with errno. */
struct tent_auth;
/* Connects to url and, with a cluster secret (auth non-NULL), runs the
 * handshake of common/auth.h as ident before anything else; -1 (errno
 * EACCES when the peer did not prove the secret). */
int mfh_connect_url(const char *url, int io_ms, const struct tent_auth *auth,
                    const char *ident);

/* server.c */
int mfh_server_start(struct mfh_handle *h);
void mfh_server_stop(struct mfh_handle *h);

/* peers.c: peers, their connection pools, the monitor and the peer-down
 * callback */
void mfh_peer_down_callback_set(struct mfh_handle *h,
                                smem_trans_peer_down_callback_t cb, void *user);
int mfh_monitor_start(struct mfh_handle *h);
void mfh_monitor_stop(struct mfh_handle *h);
struct mfh_peer *mfh_peer_get(struct mfh_handle *h, const char *url);
void mfh_peer_put(struct mfh_peer *p);
void mfh_peer_mark_down(struct mfh_peer *p, const char *why);
void mfh_peers_shutdown(struct mfh_handle *h);
void mfh_peers_release(struct mfh_handle *h);
struct mfh_conn *mfh_conn_acquire(struct mfh_peer *p);
void mfh_conn_release(struct mfh_peer *p, struct mfh_conn *c, bool broken);

/* wire.c: checks of received messages, no I/O (fuzz/fuzz_mf_host_wire.c) */
/* A request header as the server read it on a connection that has
 * (greeted) or has not yet said a HELLO of our version: 0 if it may be
 * served (a HELLO comes first; its payload length fits its type), else -1
 * with *why saying what is wrong. */
int mfh_wire_check_request(const struct mfh_msg *m, bool greeted,
                           const char **why);
/* The reply header to our HELLO: 0 if a hello of ours follows. */
int mfh_wire_check_hello_reply(const struct mfh_msg *m);
/* A received hello: terminates uid; 0 if its version is ours, else -1. */
int mfh_wire_take_hello(struct mfh_hello *h);

/* shm.c: copies to/from a cma peer through shared mappings */
#define MFH_SHM_NOMAP 2 /* not an SM_* code: use cross-memory attach */
int32_t mfh_shm_copy(struct mfh_peer *p, smem_trans_opcode_t op,
                     const struct mfh_slice *s);
bool mfh_shm_peer_alive(struct mfh_peer *p);
void mfh_shm_invalidate(struct mfh_peer *p);
void mfh_shm_release(struct mfh_peer *p);

/* batch.c */
int mfh_workers_start(struct mfh_handle *h);
void mfh_workers_stop(struct mfh_handle *h);
/* keys: one per entry (MFH_KEY_LEN bytes each), or NULL (zeros). */
int32_t mfh_batch_submit(struct mfh_handle *h, struct mfh_peer *p,
                         const smem_trans_batch_params_t *params,
                         const uint8_t *keys, uint64_t *batch_id);
int32_t mfh_batch_query(struct mfh_handle *h, uint64_t id, int32_t *result);
void mfh_batches_free(struct mfh_handle *h);

#endif
