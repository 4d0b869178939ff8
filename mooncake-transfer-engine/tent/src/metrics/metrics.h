/* Metrics of one engine: counters, gauges and histograms with TENT's names,
 * rendered as Prometheus text (format 0.0.4) or JSON and served over HTTP.
 *
 * Cost on the data path: every thread writes its own shard (a cache-line
 * aligned array of cells, one writer each), so an update is a relaxed load
 * and store into memory no other thread writes: no lock, no atomic
 * read-modify-write, no shared cache line.  Readers (HTTP, the report line,
 * tent_metrics_prometheus) add the shards up under the registry's lock, which
 * the data path takes only the first time a thread touches a registry.
 *
 * Transport labels: slot 0 is "unspec" (a request that failed before any
 * transport took it); slot i + 1 is the engine's transport i, labelled with
 * TENT's lowercase name ("tcp", "shm", "memfabric", ...).  TM_X(xi) maps an
 * engine transport index (-1 = none) to its slot. */
#ifndef TENT_METRICS_METRICS_H
#define TENT_METRICS_METRICS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tent_config;

#define TM_NXPORT    13 /* "unspec" + TENT_MAX_TRANSPORTS */
#define TM_X(xi)     ((unsigned)((xi) + 1))
#define TM_NOP       2 /* operation: read, write (OPCODE_READ/WRITE) */
#define TM_NSTATE    2 /* peer state: up, down */
#define TM_PEER_UP   0
#define TM_PEER_DOWN 1

enum tm_type { TM_COUNTER, TM_GAUGE, TM_HISTOGRAM };

/* Label shapes: the first and second dimension of a family's series. */
enum tm_labels {
    TM_L_NONE,       /* one series */
    TM_L_XPORT,      /* {transport} */
    TM_L_XPORT_OP,   /* {transport, operation} */
    TM_L_FROM_TO,    /* {from, to} */
    TM_L_XPORT_STATE /* {transport, state} */
};

enum tm_buckets {
    TM_B_NONE,
    TM_B_LATENCY_US,
    TM_B_SIZE_BYTES,
    TM_B_MLU_PERMILLE /* TENT's MLU x 1000 bounds, 100 .. 5000 */
};

/* Each transport's own families live in its folder (transport/<name>/
 * metrics.def, defining TENT_XPORT_METRICS_<name>(X)); the build lists the
 * built ones in TENT_TRANSPORT_METRIC_FAMILIES (generated). */
#include "tent_transport_metrics.def"

/* Every family: id, exposed name (NULL = internal cells, not exposed; none at
 * present), type, labels, buckets, help.  Families computed from others when
 * rendered (tent_*_bytes_total, tent_*_requests_total, tent_tasks_in_flight)
 * have no cells of their own: see metrics.c. */
#define TENT_METRIC_FAMILIES(X)                                                \
    X(READ_BYTES, "tent_read_bytes_total", TM_COUNTER, TM_L_XPORT, TM_B_NONE,  \
      "Bytes moved by reads that completed, by final transport")               \
    X(WRITE_BYTES, "tent_write_bytes_total", TM_COUNTER, TM_L_XPORT,           \
      TM_B_NONE, "Bytes moved by writes that completed, by final transport")   \
    X(READ_REQUESTS, "tent_read_requests_total", TM_COUNTER, TM_L_XPORT,       \
      TM_B_NONE,                                                               \
      "Read requests that reached a terminal state (completed or "             \
      "failed), by final transport")                                           \
    X(WRITE_REQUESTS, "tent_write_requests_total", TM_COUNTER, TM_L_XPORT,     \
      TM_B_NONE,                                                               \
      "Write requests that reached a terminal state (completed or "            \
      "failed), by final transport")                                           \
    X(READ_FAILURES, "tent_read_failures_total", TM_COUNTER, TM_L_XPORT,       \
      TM_B_NONE, "Read requests that failed for good, by final transport")     \
    X(WRITE_FAILURES, "tent_write_failures_total", TM_COUNTER, TM_L_XPORT,     \
      TM_B_NONE, "Write requests that failed for good, by final transport")    \
    X(FAILOVER, "tent_transport_failover_total", TM_COUNTER, TM_L_FROM_TO,     \
      TM_B_NONE, "Tasks moved from one transport to the next after a failure") \
    X(ATTEMPTS, "tent_transport_attempts_total", TM_COUNTER, TM_L_XPORT_OP,    \
      TM_B_NONE,                                                               \
      "Requests handed to a transport (attempts), refused ones included")      \
    X(ATTEMPT_FAILURES, "tent_transport_attempt_failures_total", TM_COUNTER,   \
      TM_L_XPORT_OP, TM_B_NONE,                                                \
      "Attempts that a transport refused at submit or failed at completion")   \
    X(READ_LATENCY, "tent_read_latency_us", TM_HISTOGRAM, TM_L_XPORT,          \
      TM_B_LATENCY_US,                                                         \
      "Read latency from submit to terminal state in microseconds (sampled)")  \
    X(WRITE_LATENCY, "tent_write_latency_us", TM_HISTOGRAM, TM_L_XPORT,        \
      TM_B_LATENCY_US,                                                         \
      "Write latency from submit to terminal state in microseconds (sampled)") \
    X(READ_SIZE, "tent_read_size_bytes", TM_HISTOGRAM, TM_L_XPORT,             \
      TM_B_SIZE_BYTES, "Sizes of completed reads in bytes")                    \
    X(WRITE_SIZE, "tent_write_size_bytes", TM_HISTOGRAM, TM_L_XPORT,           \
      TM_B_SIZE_BYTES, "Sizes of completed writes in bytes")                   \
    X(ATTEMPT_LATENCY, "tent_transport_attempt_latency_us", TM_HISTOGRAM,      \
      TM_L_XPORT, TM_B_LATENCY_US,                                             \
      "Latency of one transport attempt in microseconds (sampled)")            \
    X(TASKS_IN_FLIGHT, "tent_tasks_in_flight", TM_GAUGE, TM_L_XPORT,           \
      TM_B_NONE, "Tasks a transport is executing now")                         \
    X(BATCHES, "tent_batches_allocated", TM_GAUGE, TM_L_NONE, TM_B_NONE,       \
      "Batches allocated and not yet freed")                                   \
    X(REGISTERED_BYTES, "tent_registered_bytes", TM_GAUGE, TM_L_NONE,          \
      TM_B_NONE, "Bytes of local memory registered with the engine")           \
    X(PEERS, "tent_peers", TM_GAUGE, TM_L_XPORT_STATE, TM_B_NONE,              \
      "Peers a transport knows, by state (up, down)")                          \
    X(META_PUBLISH_FAILURES, "tent_metadata_publish_failures_total",           \
      TM_COUNTER, TM_L_NONE, TM_B_NONE,                                        \
      "Failed publications or refreshes of the segment descriptor")            \
    X(AUTH_REFUSED, "tent_rpc_auth_refused_total", TM_COUNTER, TM_L_NONE,      \
      TM_B_NONE, "Connections closed for not proving the cluster secret")      \
    X(NOTIFY_SPOOFED, "tent_notify_spoofed_total", TM_COUNTER, TM_L_NONE,      \
      TM_B_NONE,                                                               \
      "Notifications dropped: sender not the authenticated segment")           \
    X(DEADLINE_INFEASIBLE, "tent_deadline_infeasible_total", TM_COUNTER,       \
      TM_L_XPORT, TM_B_NONE,                                                   \
      "Transfers whose deadline had passed at submit, or that the runtime "    \
      "queue dropped as unable to meet it")                                    \
    X(DEADLINE_MLU, "tent_deadline_mlu_permille", TM_HISTOGRAM, TM_L_XPORT,    \
      TM_B_MLU_PERMILLE,                                                       \
      "Deadline feasibility ratio (MLU x 1000) of completed transfers that "   \
      "carried a deadline; 1000 = the deadline exactly")                       \
    TENT_TRANSPORT_METRIC_FAMILIES(X)

enum tm_id {
#define TM_ENUM(id, name, type, labels, buckets, help) TM_##id,
    TENT_METRIC_FAMILIES(TM_ENUM)
#undef TM_ENUM
        TM_NFAMILIES
};

struct tm_family {
    const char *name;
    const char *help;
    enum tm_type type;
    enum tm_labels labels;
    enum tm_buckets buckets;
    uint32_t dim1, dim2; /* label dimensions (1 when absent) */
    uint32_t width;      /* cells per series: 1, or buckets + 1 + sum */
    uint32_t offset;     /* first cell in a shard; unused for derived ones */
    bool derived;        /* computed from other families when rendered */
};

/* The family table (metrics.c), laid out by the macros below. */
extern const struct tm_family tm_families[TM_NFAMILIES];

/* One thread's cells.  Written only by its owner thread; read by anyone. */
struct tm_shard {
    struct tm_shard *next;
    pthread_t owner;
    _Alignas(64) _Atomic uint64_t cells[];
};

/* Start of struct tent_metrics that the inline update path needs. */
struct tm_head {
    uint64_t id;          /* unique per registry, never reused */
    uint32_t sample_mask; /* latency: time one request in (mask + 1) */
};

struct tm_tls {
    uint64_t id;
    struct tm_shard *shard;
};
extern __thread struct tm_tls tm_tls_cache
    __attribute__((tls_model("initial-exec")));

struct tent_metrics;

struct tm_shard *tm_shard_slow(struct tent_metrics *m);

/* The calling thread's shard of m; NULL when m is NULL (metrics disabled)
 * or when no memory could be had for a shard (the update is dropped). */
static inline struct tm_shard *tm_shard(struct tent_metrics *m)
{
    if (!m)
        return NULL;
    const struct tm_head *h = (const struct tm_head *)m;
    if (__builtin_expect(tm_tls_cache.id == h->id, 1))
        return tm_tls_cache.shard;
    return tm_shard_slow(m);
}

/* The cell layout, as constants so that an update with a constant family
 * compiles to a fixed offset (no table lookups on the data path). */
#define TM_NLAT  22 /* latency bounds, see metrics.c */
#define TM_NSIZE 13 /* size bounds: 64 B << 2i, i = 0..12 */
#define TM_NMLU  10 /* MLU permille bounds, see metrics.c */
#define TM_DIM2_OF(lb)                                                         \
    ((lb) == TM_L_XPORT_OP      ? TM_NOP                                       \
     : (lb) == TM_L_FROM_TO     ? TM_NXPORT                                    \
     : (lb) == TM_L_XPORT_STATE ? TM_NSTATE                                    \
                                : 1)
#define TM_DIM1_OF(lb) ((lb) == TM_L_NONE ? 1 : TM_NXPORT)
#define TM_WIDTH_OF(ty, bk)                                                    \
    ((ty) == TM_HISTOGRAM ? ((bk) == TM_B_LATENCY_US     ? TM_NLAT             \
                             : (bk) == TM_B_MLU_PERMILLE ? TM_NMLU             \
                                                         : TM_NSIZE) +         \
                                2                                              \
                          : 1)
/* Families computed when rendered have no cells of their own. */
#define TM_DERIVED(id)                                                         \
    (TM_##id == TM_READ_BYTES || TM_##id == TM_WRITE_BYTES ||                  \
     TM_##id == TM_READ_REQUESTS || TM_##id == TM_WRITE_REQUESTS ||            \
     TM_##id == TM_TASKS_IN_FLIGHT)
#define TM_NCELLS_OF(id, ty, lb, bk)                                           \
    (TM_DERIVED(id) ? 0 : TM_DIM1_OF(lb) * TM_DIM2_OF(lb) * TM_WIDTH_OF(ty, bk))

enum tm_offsets {
#define TM_OFFS(id, name, type, labels, buckets, help)                         \
    TM_OFF_##id,                                                               \
        TM_LAST_##id =                                                         \
            TM_OFF_##id + TM_NCELLS_OF(id, type, labels, buckets) - 1,
    TENT_METRIC_FAMILIES(TM_OFFS)
#undef TM_OFFS
        TM_NCELLS
};

struct tm_layout {
    uint32_t off, dim2, width;
};
static const struct tm_layout tm_layout[TM_NFAMILIES] = {
#define TM_LAY(id, name, type, labels, buckets, help)                          \
    [TM_##id] = {TM_OFF_##id, TM_DIM2_OF(labels), TM_WIDTH_OF(type, buckets)},
    TENT_METRIC_FAMILIES(TM_LAY)
#undef TM_LAY
};

/* Cell of series (l1, l2) of family id; for a histogram, its first cell. */
static inline uint32_t tm_cell(enum tm_id id, unsigned l1, unsigned l2)
{
    return tm_layout[id].off +
           (l1 * tm_layout[id].dim2 + l2) * tm_layout[id].width;
}

/* Single writer: a relaxed load and store, no read-modify-write. */
static inline void tm_cell_add(struct tm_shard *s, uint32_t cell, uint64_t v)
{
    _Atomic uint64_t *c = &s->cells[cell];
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

static inline void tm_add(struct tm_shard *s, enum tm_id id, unsigned l1,
                          unsigned l2, uint64_t v)
{
    if (s)
        tm_cell_add(s, tm_cell(id, l1, l2), v);
}

/* Gauges may go down: a wrapped add, summed as signed when read. */
static inline void tm_gauge_add(struct tm_shard *s, enum tm_id id, unsigned l1,
                                unsigned l2, int64_t v)
{
    if (s)
        tm_cell_add(s, tm_cell(id, l1, l2), (uint64_t)v);
}

/* Bucket index of v in the size buckets (64 B, 256 B, ... 1 GiB: powers of
 * four) without a search; 13 = +Inf. */
static inline unsigned tm_size_bucket(uint64_t v)
{
    if (v <= 64)
        return 0;
    unsigned l = 64u - (unsigned)__builtin_clzll(v - 1); /* ceil(log2 v) */
    unsigned i = (l - 6 + 1) / 2;
    return i > 13 ? 13 : i;
}

void tm_observe(struct tm_shard *s, enum tm_id id, unsigned l1, unsigned l2,
                uint64_t v);

/* A size histogram sample: O(1), for every completed request. */
static inline void tm_observe_size(struct tm_shard *s, enum tm_id id,
                                   unsigned l1, uint64_t bytes)
{
    if (!s)
        return;
    uint32_t c = tm_cell(id, l1, 0);
    tm_cell_add(s, c + tm_size_bucket(bytes), 1);
    tm_cell_add(s, c + tm_layout[id].width - 1, bytes);
}

/* n size samples of bytes each (none when n is 0). */
static inline void tm_observe_size_n(struct tm_shard *s, enum tm_id id,
                                     unsigned l1, uint64_t bytes, uint64_t n)
{
    if (!s || !n)
        return;
    uint32_t c = tm_cell(id, l1, 0);
    tm_cell_add(s, c + tm_size_bucket(bytes), n);
    tm_cell_add(s, c + tm_layout[id].width - 1, bytes * n);
}

/* Latency sampling: of n requests submitted now by this thread, those at
 * index first, first + every, first + 2 * every ... (< n) are timed, where
 * first is returned (n when none) and every is tm_sample_every(m). */
unsigned tm_sample_pick(struct tent_metrics *m, size_t n);
static inline unsigned tm_sample_every(const struct tent_metrics *m)
{
    return ((const struct tm_head *)m)->sample_mask + 1;
}

/* Monotonic time in nanoseconds for latency samples. */
uint64_t tm_now_ns(void);

/* ---- configuration and lifecycle -------------------------------------- */

struct tent_metrics_config {
    bool enabled;            /* metrics/enabled (default true) */
    char http_host[256];     /* metrics/http_host (127.0.0.1) */
    int http_port;           /* metrics/http_port, -1 = no endpoint */
    int http_threads;        /* metrics/http_server_threads (1) */
    int http_max_conns;      /* metrics/http_max_connections (128) */
    int http_max_per_addr;   /* metrics/http_max_connections_per_address
                                (32) */
    int http_timeout_s;      /* metrics/http_timeout_seconds (5) */
    bool http_required;      /* metrics/http_required: bind failure fails
                                the engine (default false: logged) */
    int report_interval_s;   /* metrics/report_interval_seconds (0) */
    unsigned latency_sample; /* metrics/latency_sample: time one request
                                in N, a power of two (default 256) */
};

/* Reads the "metrics" block, then the TENT_METRICS_* environment variables
 * (which win).  A wrong value is TENT_ECONFIG naming the key or variable. */
int tent_metrics_config_load(const struct tent_config *cfg,
                             struct tent_metrics_config *out);

int tent_metrics_create(const struct tent_metrics_config *cfg,
                        struct tent_metrics **out);
/* Names transport slot TM_X(xi) ("tcp"); before tent_metrics_start. */
void tent_metrics_set_transport(struct tent_metrics *m, int xi,
                                const char *name);
/* Names the engine in the report line (its segment name); before start. */
void tent_metrics_set_name(struct tent_metrics *m, const char *name);

/* Families whose series are read from elsewhere when rendering (the rails of
 * the scheduler: their labels are not known in advance).  The callback runs
 * in the rendering thread and emits families, each followed by its samples;
 * labels are NULL-terminated name, value pairs. */
struct tm_dyn_sink;
void tm_dyn_family(struct tm_dyn_sink *k, const char *name, enum tm_type type,
                   const char *help);
void tm_dyn_sample(struct tm_dyn_sink *k, const char *const *labels,
                   double value);
typedef void (*tm_dyn_fn)(void *arg, struct tm_dyn_sink *k);
/* Before tent_metrics_start; fn NULL removes it. */
void tent_metrics_set_dynamic(struct tent_metrics *m, tm_dyn_fn fn, void *arg);
/* Starts the HTTP endpoint (when a port is configured) and the report line.
 * A bind failure is TENT_EIO naming host and port. */
int tent_metrics_start(struct tent_metrics *m);
/* Stops the endpoint and the report thread; readers are gone afterwards. */
void tent_metrics_stop(struct tent_metrics *m);
void tent_metrics_destroy(struct tent_metrics *m);

/* Bound address of the endpoint; TENT_ENOTSUP when it is not running. */
int tent_metrics_http_addr(struct tent_metrics *m, char *host, size_t len,
                           uint16_t *port);

/* ---- rendering ---------------------------------------------------------- */

enum tm_format { TM_FMT_PROMETHEUS, TM_FMT_JSON };

/* Renders into a malloc'ed NUL-terminated string (*len without the NUL). */
int tent_metrics_render(struct tent_metrics *m, enum tm_format fmt, char **out,
                        size_t *len);

/* Sum over all series of a family (derived ones included): tools, tests. */
int64_t tent_metrics_total(struct tent_metrics *m, enum tm_id id);
/* Value of one series (a histogram's count); derived ones included. */
int64_t tent_metrics_value(struct tent_metrics *m, enum tm_id id, unsigned l1,
                           unsigned l2);

/* The one-line summary logged every report_interval_seconds. */
int tent_metrics_summary(struct tent_metrics *m, char *buf, size_t len);

/* metrics_http.c */
struct tm_http;
int tm_http_start(struct tent_metrics *m, const struct tent_metrics_config *cfg,
                  struct tm_http **out);
void tm_http_stop(struct tm_http *h);
void tm_http_addr(const struct tm_http *h, char *host, size_t len,
                  uint16_t *port);

#endif
