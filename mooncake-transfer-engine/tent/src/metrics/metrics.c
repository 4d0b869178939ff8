/* Registry, per-thread shards, configuration, rendering and the report line.
 * See metrics.h for the cost model. */
#include "metrics/metrics.h"

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* The one statement of the layout is metrics.h's; this table spells it out
 * per family for the readers. */
const struct tm_family tm_families[TM_NFAMILIES] = {
#define TM_ROW(id, nm, ty, lb, bk, hp)                                         \
    [TM_##id] = {.name = nm,                                                   \
                 .help = hp,                                                   \
                 .type = ty,                                                   \
                 .labels = lb,                                                 \
                 .buckets = bk,                                                \
                 .dim1 = TM_DIM1_OF(lb),                                       \
                 .dim2 = TM_DIM2_OF(lb),                                       \
                 .width = TM_WIDTH_OF(ty, bk),                                 \
                 .offset = TM_OFF_##id,                                        \
                 .derived = TM_DERIVED(id)},
    TENT_METRIC_FAMILIES(TM_ROW)
#undef TM_ROW
};

static const double latency_bounds[] = {
    1,      2,      5,       10,      20,      50,      100,   200,
    500,    1000,   2000,    5000,    10000,   20000,   50000, 100000,
    200000, 500000, 1000000, 2000000, 5000000, 10000000};
#define N_LATENCY (sizeof(latency_bounds) / sizeof(latency_bounds[0]))
_Static_assert(N_LATENCY == TM_NLAT, "TM_NLAT must match latency_bounds");

/* TENT's bounds of tent_deadline_mlu_permille (1000: MLU 1.0). */
static const double mlu_bounds[] = {100,  250,  500,  750,  900,
                                    1000, 1250, 1500, 2000, 5000};
_Static_assert(sizeof(mlu_bounds) / sizeof(mlu_bounds[0]) == TM_NMLU,
               "TM_NMLU must match mlu_bounds");

static double bound(enum tm_buckets b, unsigned i)
{
    return b == TM_B_LATENCY_US     ? latency_bounds[i]
           : b == TM_B_MLU_PERMILLE ? mlu_bounds[i]
                                    : (double)(64ull << (2 * i));
}

/* ---- registry and shards ----------------------------------------------- */

/* lock guards shards (the list; cells are written lock-free by their
 * owners), xnames after start is read-only, http and the reporter fields. */
struct tent_metrics {
    struct tm_head head; /* first: read by the inline update path */
    struct tent_metrics_config cfg;
    pthread_mutex_t lock;
    struct tm_shard *shards;
    size_t shard_bytes;
    char xnames[TM_NXPORT][32]; /* "" = no transport in that slot */
    char name[128];             /* the engine's segment name, for the log */
    struct tm_http *http;
    /* report line: a flag and a condition variable, joined outside lock */
    pthread_t reporter;
    bool reporter_on, stopping;
    pthread_cond_t wake;
    tm_dyn_fn dyn_fn; /* families read when rendering, or NULL */
    void *dyn_arg;
};

__thread struct tm_tls tm_tls_cache __attribute__((tls_model("initial-exec")));
static __thread uint32_t tm_sample_left;
static _Atomic uint64_t next_registry_id = 1;

struct tm_shard *tm_shard_slow(struct tent_metrics *m)
{
    pthread_t self = pthread_self();
    pthread_mutex_lock(&m->lock);
    struct tm_shard *s = m->shards;
    /* A shard outlives its thread; a new thread with the same id (ids are
     * unique among live threads) takes it over: still one writer. */
    while (s && !pthread_equal(s->owner, self))
        s = s->next;
    if (!s) {
        s = aligned_alloc(64, m->shard_bytes);
        if (s) {
            memset(s, 0, m->shard_bytes);
            s->owner = self;
            s->next = m->shards;
            m->shards = s;
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (!s) {
        LOG_WARN("metrics: out of memory for a thread's shard; this "
                 "thread's updates are dropped");
        return NULL;
    }
    tm_tls_cache.id = m->head.id;
    tm_tls_cache.shard = s;
    return s;
}

void tm_observe(struct tm_shard *s, enum tm_id id, unsigned l1, unsigned l2,
                uint64_t v)
{
    if (!s)
        return;
    const struct tm_family *f = &tm_families[id];
    uint32_t c = tm_cell(id, l1, l2);
    unsigned n = (f->width - 2), i = 0;
    if (f->buckets == TM_B_SIZE_BYTES)
        i = tm_size_bucket(v);
    else if (f->buckets == TM_B_MLU_PERMILLE)
        while (i < n && (double)v > mlu_bounds[i])
            i++;
    else
        while (i < n && (double)v > latency_bounds[i])
            i++;
    tm_cell_add(s, c + i, 1);
    tm_cell_add(s, c + f->width - 1, v);
}

unsigned tm_sample_pick(struct tent_metrics *m, size_t n)
{
    unsigned every = tm_sample_every(m);
    if (tm_sample_left >= n) {
        tm_sample_left -= (uint32_t)n;
        return (unsigned)n;
    }
    unsigned first = tm_sample_left;
    size_t last = first + ((n - 1 - first) / every) * every;
    tm_sample_left = (uint32_t)(every - 1 - (n - 1 - last));
    return first;
}

uint64_t tm_now_ns(void)
{
    return tent_now_ns();
}

/* ---- configuration ------------------------------------------------------ */

static int env_bool(const char *var, bool *out)
{
    const char *v = getenv(var);
    if (!v)
        return TENT_OK;
    if (!strcasecmp(v, "1") || !strcasecmp(v, "true") ||
        !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
        *out = true;
    else if (!strcasecmp(v, "0") || !strcasecmp(v, "false") ||
             !strcasecmp(v, "no") || !strcasecmp(v, "off"))
        *out = false;
    else
        return tent_set_error(TENT_ECONFIG,
                              "%s='%s' is not a boolean (accepted: true, "
                              "false, 1, 0, yes, no, on, off)",
                              var, v);
    return TENT_OK;
}

static int env_int(const char *var, long lo, long hi, int *out)
{
    const char *v = getenv(var);
    if (!v)
        return TENT_OK;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return tent_set_error(TENT_ECONFIG,
                              "%s='%s' is not an integer in %ld..%ld", var, v,
                              lo, hi);
    *out = (int)x;
    return TENT_OK;
}

static int cfg_int(const struct tent_config *cfg, const char *key, int64_t def,
                   int64_t lo, int64_t hi, int *out)
{
    int64_t v;
    int rc = tent_config_get_int(cfg, key, def, &v);
    if (rc)
        return rc;
    if (v < lo || v > hi)
        return tent_set_error(TENT_ECONFIG,
                              "config key '%s' = %lld is out of range "
                              "%lld..%lld",
                              key, (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return TENT_OK;
}

int tent_metrics_config_load(const struct tent_config *cfg,
                             struct tent_metrics_config *out)
{
    struct tent_metrics_config c = {0};
    int rc = tent_config_get_bool(cfg, "metrics/enabled", true, &c.enabled);
    if (!rc)
        rc = cfg_int(cfg, "metrics/http_port", -1, -1, 65535, &c.http_port);
    if (!rc)
        rc = cfg_int(cfg, "metrics/http_server_threads", 1, 1, 64,
                     &c.http_threads);
    if (!rc)
        rc = cfg_int(cfg, "metrics/http_max_connections", 128, 1, 65536,
                     &c.http_max_conns);
    if (!rc)
        rc = cfg_int(cfg, "metrics/http_max_connections_per_address", 32, 1,
                     65536, &c.http_max_per_addr);
    if (!rc)
        rc = cfg_int(cfg, "metrics/http_timeout_seconds", 5, 1, 3600,
                     &c.http_timeout_s);
    if (!rc)
        rc = tent_config_get_bool(cfg, "metrics/http_required", false,
                                  &c.http_required);
    if (!rc)
        rc = cfg_int(cfg, "metrics/report_interval_seconds", 0, 0, 86400,
                     &c.report_interval_s);
    int sample = 256;
    if (!rc)
        rc = cfg_int(cfg, "metrics/latency_sample", 256, 1, 65536, &sample);
    if (rc)
        return rc;
    if (sample & (sample - 1))
        return tent_set_error(TENT_ECONFIG,
                              "config key 'metrics/latency_sample' = %d is "
                              "not a power of two",
                              sample);
    c.latency_sample = (unsigned)sample;
    const char *host = NULL;
    rc = tent_config_get_string(cfg, "metrics/http_host", "127.0.0.1", &host);
    if (rc)
        return rc;
    const char *env_host = getenv("TENT_METRICS_HTTP_HOST");
    if (env_host)
        host = env_host;
    if (!*host || strlen(host) >= sizeof(c.http_host))
        return tent_set_error(TENT_ECONFIG,
                              "%s is empty or longer than %zu characters",
                              env_host ? "TENT_METRICS_HTTP_HOST"
                                       : "config key 'metrics/http_host'",
                              sizeof(c.http_host) - 1);
    snprintf(c.http_host, sizeof(c.http_host), "%s", host);
    rc = env_bool("TENT_METRICS_ENABLED", &c.enabled);
    if (!rc)
        rc = env_int("TENT_METRICS_HTTP_PORT", -1, 65535, &c.http_port);
    if (!rc)
        rc = env_int("TENT_METRICS_REPORT_INTERVAL", 0, 86400,
                     &c.report_interval_s);
    if (rc)
        return rc;
    *out = c;
    return TENT_OK;
}

/* ---- lifecycle ---------------------------------------------------------- */

int tent_metrics_create(const struct tent_metrics_config *cfg,
                        struct tent_metrics **out)
{
    struct tent_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return tent_set_error(TENT_ENOMEM, "metrics: out of memory");
    m->cfg = *cfg;
    m->head.id = atomic_fetch_add(&next_registry_id, 1);
    m->head.sample_mask = cfg->latency_sample ? cfg->latency_sample - 1 : 0;
    size_t bytes = sizeof(struct tm_shard) + TM_NCELLS * sizeof(uint64_t);
    m->shard_bytes = (bytes + 63) & ~(size_t)63; /* no line shared */
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->wake, NULL);
    snprintf(m->xnames[0], sizeof(m->xnames[0]), "unspec");
    *out = m;
    return TENT_OK;
}

void tent_metrics_set_transport(struct tent_metrics *m, int xi,
                                const char *name)
{
    if (!m || xi < 0 || TM_X(xi) >= TM_NXPORT)
        return;
    pthread_mutex_lock(&m->lock);
    snprintf(m->xnames[TM_X(xi)], sizeof(m->xnames[0]), "%s", name);
    pthread_mutex_unlock(&m->lock);
}

void tent_metrics_set_dynamic(struct tent_metrics *m, tm_dyn_fn fn, void *arg)
{
    if (!m)
        return;
    m->dyn_fn = fn;
    m->dyn_arg = arg;
}

void tent_metrics_set_name(struct tent_metrics *m, const char *name)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    snprintf(m->name, sizeof(m->name), "%s", name);
    pthread_mutex_unlock(&m->lock);
}

static void *report_main(void *arg);

int tent_metrics_start(struct tent_metrics *m)
{
    if (!m)
        return TENT_OK;
    if (m->cfg.http_port >= 0) {
        struct tm_http *h = NULL;
        int rc = tm_http_start(m, &m->cfg, &h);
        if (rc) {
            if (m->cfg.http_required)
                return rc;
            LOG_ERROR("%s; the engine runs without the HTTP "
                      "endpoint (set metrics/http_required to fail instead)",
                      tent_last_error());
        } else {
            pthread_mutex_lock(&m->lock);
            m->http = h;
            pthread_mutex_unlock(&m->lock);
            char host[256];
            uint16_t port;
            tm_http_addr(h, host, sizeof(host), &port);
            LOG_INFO("metrics: serving /metrics, /metrics/json and /health "
                     "on http://%s:%u",
                     host, (unsigned)port);
        }
    }
    if (m->cfg.report_interval_s > 0) {
        if (pthread_create(&m->reporter, NULL, report_main, m) == 0)
            m->reporter_on = true;
        else
            LOG_WARN("metrics: cannot start the report thread: %s",
                     strerror(errno));
    }
    return TENT_OK;
}

void tent_metrics_stop(struct tent_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    struct tm_http *h = m->http;
    m->http = NULL;
    m->stopping = true;
    pthread_cond_broadcast(&m->wake);
    bool join = m->reporter_on;
    m->reporter_on = false;
    pthread_mutex_unlock(&m->lock);
    if (h)
        tm_http_stop(h);
    if (join)
        pthread_join(m->reporter, NULL);
}

void tent_metrics_destroy(struct tent_metrics *m)
{
    if (!m)
        return;
    tent_metrics_stop(m);
    struct tm_shard *s = m->shards;
    while (s) {
        struct tm_shard *n = s->next;
        free(s);
        s = n;
    }
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

int tent_metrics_http_addr(struct tent_metrics *m, char *host, size_t len,
                           uint16_t *port)
{
    pthread_mutex_lock(&m->lock);
    int rc = TENT_OK;
    if (!m->http) {
        rc = tent_set_error(TENT_ENOTSUP,
                            "the metrics HTTP endpoint is not running "
                            "(metrics/http_port %d%s)",
                            m->cfg.http_port,
                            m->cfg.http_port < 0 ? " = not set"
                                                 : ": binding it failed, see "
                                                   "the log");
    } else {
        char h[256];
        tm_http_addr(m->http, h, sizeof(h), port);
        if (strlen(h) >= len)
            rc = tent_set_error(TENT_EOVERFLOW,
                                "buffer of %zu bytes is too small for '%s'",
                                len, h);
        else
            memcpy(host, h, strlen(h) + 1);
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

/* ---- reading --------------------------------------------------------------
 */

struct snap {
    uint64_t *cells;
    char xnames[TM_NXPORT][32];
};

static int snap_take(struct tent_metrics *m, struct snap *sn)
{
    sn->cells = calloc(TM_NCELLS ? TM_NCELLS : 1, sizeof(uint64_t));
    if (!sn->cells)
        return tent_set_error(TENT_ENOMEM, "metrics: out of memory");
    pthread_mutex_lock(&m->lock);
    memcpy(sn->xnames, m->xnames, sizeof(sn->xnames));
    for (struct tm_shard *s = m->shards; s; s = s->next)
        for (uint32_t i = 0; i < TM_NCELLS; i++)
            sn->cells[i] +=
                atomic_load_explicit(&s->cells[i], memory_order_relaxed);
    pthread_mutex_unlock(&m->lock);
    return TENT_OK;
}

static uint64_t cell(const struct snap *sn, enum tm_id id, unsigned l1,
                     unsigned l2, unsigned k)
{
    return sn->cells[tm_cell(id, l1, l2) + k];
}

static uint64_t hist_count(const struct snap *sn, enum tm_id id, unsigned l1,
                           unsigned l2)
{
    uint64_t n = 0;
    for (unsigned k = 0; k + 1 < tm_families[id].width; k++)
        n += cell(sn, id, l1, l2, k);
    return n;
}

static uint64_t hist_sum(const struct snap *sn, enum tm_id id, unsigned l1,
                         unsigned l2)
{
    return cell(sn, id, l1, l2, tm_families[id].width - 1);
}

/* Value of a counter or gauge series; a histogram's count. */
static int64_t value_of(const struct snap *sn, enum tm_id id, unsigned l1,
                        unsigned l2)
{
    switch (id) {
    case TM_READ_BYTES:
        return (int64_t)hist_sum(sn, TM_READ_SIZE, l1, 0);
    case TM_WRITE_BYTES:
        return (int64_t)hist_sum(sn, TM_WRITE_SIZE, l1, 0);
    case TM_READ_REQUESTS:
        return (int64_t)(hist_count(sn, TM_READ_SIZE, l1, 0) +
                         cell(sn, TM_READ_FAILURES, l1, 0, 0));
    case TM_WRITE_REQUESTS:
        return (int64_t)(hist_count(sn, TM_WRITE_SIZE, l1, 0) +
                         cell(sn, TM_WRITE_FAILURES, l1, 0, 0));
    case TM_TASKS_IN_FLIGHT:
        /* attempts that have not ended: completed ones are in the size
         * histograms, failed ones in the attempt failures */
        return (int64_t)(cell(sn, TM_ATTEMPTS, l1, 0, 0) +
                         cell(sn, TM_ATTEMPTS, l1, 1, 0) -
                         hist_count(sn, TM_READ_SIZE, l1, 0) -
                         hist_count(sn, TM_WRITE_SIZE, l1, 0) -
                         cell(sn, TM_ATTEMPT_FAILURES, l1, 0, 0) -
                         cell(sn, TM_ATTEMPT_FAILURES, l1, 1, 0));
    default:
        break;
    }
    if (tm_families[id].type == TM_HISTOGRAM)
        return (int64_t)hist_count(sn, id, l1, l2);
    return (int64_t)cell(sn, id, l1, l2, 0);
}

int64_t tent_metrics_value(struct tent_metrics *m, enum tm_id id, unsigned l1,
                           unsigned l2)
{
    struct snap sn;
    if (!m || snap_take(m, &sn))
        return 0;
    int64_t v = value_of(&sn, id, l1, l2);
    free(sn.cells);
    return v;
}

static int64_t total_of(const struct snap *sn, enum tm_id id)
{
    const struct tm_family *f = &tm_families[id];
    int64_t t = 0;
    for (unsigned a = 0; a < f->dim1; a++)
        for (unsigned b = 0; b < f->dim2; b++)
            t += value_of(sn, id, a, b);
    return t;
}

int64_t tent_metrics_total(struct tent_metrics *m, enum tm_id id)
{
    struct snap sn;
    if (!m || snap_take(m, &sn))
        return 0;
    int64_t v = total_of(&sn, id);
    free(sn.cells);
    return v;
}

/* ---- rendering ------------------------------------------------------------
 */

struct out {
    char *p;
    size_t len, cap;
    bool oom;
};

static void put(struct out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
    if (o->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = true;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t ncap = (o->cap + (size_t)n + 1) * 2;
        char *np = realloc(o->p, ncap);
        if (!np) {
            o->oom = true;
            return;
        }
        o->p = np;
        o->cap = ncap;
    }
}

/* Label value with \, " and newline escaped (text format 0.0.4). */
static void put_escaped(struct out *o, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            put(o, "\\\\");
        else if (*s == '"')
            put(o, "\\\"");
        else if (*s == '\n')
            put(o, "\\n");
        else
            put(o, "%c", *s);
    }
}

static const char *const op_names[TM_NOP] = {"read", "write"};
static const char *const state_names[TM_NSTATE] = {"up", "down"};

/* The label names of each shape, first and second dimension. */
static const char *const label_names_of[][2] = {
    [TM_L_NONE] = {NULL, NULL},
    [TM_L_XPORT] = {"transport", NULL},
    [TM_L_XPORT_OP] = {"transport", "operation"},
    [TM_L_FROM_TO] = {"from", "to"},
    [TM_L_XPORT_STATE] = {"transport", "state"},
};

static void label_names(enum tm_labels l, const char **n1, const char **n2)
{
    *n1 = label_names_of[l][0];
    *n2 = label_names_of[l][1];
}

static const char *label_value(const struct snap *sn, enum tm_labels l, int dim,
                               unsigned i)
{
    if (dim == 0 || l == TM_L_FROM_TO)
        return sn->xnames[i];
    return l == TM_L_XPORT_OP ? op_names[i] : state_names[i];
}

/* Which series a family shows: every installed transport (zeros included,
 * so dashboards see them), "unspec" and failover pairs only when non-zero. */
static bool series_shown(const struct snap *sn, enum tm_id id, unsigned a,
                         unsigned b)
{
    const struct tm_family *f = &tm_families[id];
    if (f->labels == TM_L_NONE)
        return true;
    bool named = a > 0 && sn->xnames[a][0];
    if (f->labels == TM_L_FROM_TO)
        named = false;
    return named || value_of(sn, id, a, b) != 0;
}

static void put_labels(struct out *o, const struct snap *sn, enum tm_id id,
                       unsigned a, unsigned b, const char *extra_le)
{
    const struct tm_family *f = &tm_families[id];
    const char *n1, *n2;
    label_names(f->labels, &n1, &n2);
    if (!n1 && !extra_le)
        return;
    put(o, "{");
    const char *sep = "";
    if (n1) {
        put(o, "%s=\"", n1);
        put_escaped(o, label_value(sn, f->labels, 0, a));
        put(o, "\"");
        sep = ",";
    }
    if (n2) {
        put(o, ",%s=\"", n2);
        put_escaped(o, label_value(sn, f->labels, 1, b));
        put(o, "\"");
    }
    if (extra_le)
        put(o, "%sle=\"%s\"", sep, extra_le);
    put(o, "}");
}

static void fmt_bound(char *buf, size_t len, enum tm_buckets b, unsigned i)
{
    snprintf(buf, len, "%.17g", bound(b, i));
}

/* ---- dynamic families ------------------------------------------------------
 * Collected as JSON ({name, type, help, series: [{labels, value}]}), which
 * both formats render from. */
struct tm_dyn_sink {
    cJSON *fams; /* array */
    cJSON *cur;  /* the family's series array */
    bool oom;
};

void tm_dyn_family(struct tm_dyn_sink *k, const char *name, enum tm_type type,
                   const char *help)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    cJSON *f = cJSON_CreateObject();
    if (!f || !cJSON_AddStringToObject(f, "name", name) ||
        !cJSON_AddStringToObject(f, "type", types[type]) ||
        !cJSON_AddStringToObject(f, "help", help) ||
        !(k->cur = cJSON_AddArrayToObject(f, "series"))) {
        cJSON_Delete(f);
        k->cur = NULL;
        k->oom = true;
        return;
    }
    cJSON_AddItemToArray(k->fams, f);
}

void tm_dyn_sample(struct tm_dyn_sink *k, const char *const *labels,
                   double value)
{
    if (!k->cur)
        return;
    cJSON *s = cJSON_CreateObject();
    cJSON *l = s ? cJSON_AddObjectToObject(s, "labels") : NULL;
    bool ok = l && cJSON_AddNumberToObject(s, "value", value);
    for (size_t i = 0; ok && labels && labels[i] && labels[i + 1]; i += 2)
        ok = cJSON_AddStringToObject(l, labels[i], labels[i + 1]) != NULL;
    if (!ok) {
        cJSON_Delete(s);
        k->oom = true;
        return;
    }
    cJSON_AddItemToArray(k->cur, s);
}

/* The dynamic families of m, NULL when there are none (or out of memory:
 * *oom). */
static cJSON *dyn_collect(struct tent_metrics *m, bool *oom)
{
    *oom = false;
    if (!m->dyn_fn)
        return NULL;
    struct tm_dyn_sink k = {.fams = cJSON_CreateArray()};
    if (!k.fams) {
        *oom = true;
        return NULL;
    }
    m->dyn_fn(m->dyn_arg, &k);
    if (k.oom) {
        cJSON_Delete(k.fams);
        *oom = true;
        return NULL;
    }
    return k.fams;
}

static void put_number(struct out *o, double v)
{
    if (v == (double)(int64_t)v && v > -9e18 && v < 9e18)
        put(o, "%" PRId64, (int64_t)v);
    else
        put(o, "%.17g", v);
}

static void render_dyn_text(const cJSON *fams, struct out *o)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, fams) {
        const char *name = cJSON_GetObjectItem(f, "name")->valuestring;
        put(o, "# HELP %s %s\n# TYPE %s %s\n", name,
            cJSON_GetObjectItem(f, "help")->valuestring, name,
            cJSON_GetObjectItem(f, "type")->valuestring);
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(f, "series")) {
            put(o, "%s", name);
            const cJSON *l = cJSON_GetObjectItem(s, "labels"), *kv;
            const char *sep = "{";
            cJSON_ArrayForEach(kv, l) {
                put(o, "%s%s=\"", sep, kv->string);
                put_escaped(o, kv->valuestring);
                put(o, "\"");
                sep = ",";
            }
            if (*sep == ',')
                put(o, "}");
            put(o, " ");
            put_number(o, cJSON_GetObjectItem(s, "value")->valuedouble);
            put(o, "\n");
        }
    }
}

static void render_text(const struct snap *sn, struct out *o)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    for (int id = 0; id < TM_NFAMILIES; id++) {
        const struct tm_family *f = &tm_families[id];
        if (!f->name)
            continue;
        put(o, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name,
            types[f->type]);
        for (unsigned a = 0; a < f->dim1; a++)
            for (unsigned b = 0; b < f->dim2; b++) {
                if (!series_shown(sn, id, a, b))
                    continue;
                if (f->type != TM_HISTOGRAM) {
                    put(o, "%s", f->name);
                    put_labels(o, sn, id, a, b, NULL);
                    put(o, " %" PRId64 "\n", value_of(sn, id, a, b));
                    continue;
                }
                unsigned nb = (f->width - 2);
                uint64_t cum = 0;
                for (unsigned k = 0; k <= nb; k++) {
                    char le[32];
                    if (k < nb)
                        fmt_bound(le, sizeof(le), f->buckets, k);
                    else
                        snprintf(le, sizeof(le), "+Inf");
                    cum += cell(sn, id, a, b, k);
                    put(o, "%s_bucket", f->name);
                    put_labels(o, sn, id, a, b, le);
                    put(o, " %" PRIu64 "\n", cum);
                }
                put(o, "%s_sum", f->name);
                put_labels(o, sn, id, a, b, NULL);
                put(o, " %" PRIu64 "\n", hist_sum(sn, id, a, b));
                put(o, "%s_count", f->name);
                put_labels(o, sn, id, a, b, NULL);
                put(o, " %" PRIu64 "\n", cum);
            }
    }
}

static cJSON *json_labels(const struct snap *sn, enum tm_id id, unsigned a,
                          unsigned b)
{
    const struct tm_family *f = &tm_families[id];
    const char *n1, *n2;
    label_names(f->labels, &n1, &n2);
    cJSON *l = cJSON_CreateObject();
    if (n1)
        cJSON_AddStringToObject(l, n1, label_value(sn, f->labels, 0, a));
    if (n2)
        cJSON_AddStringToObject(l, n2, label_value(sn, f->labels, 1, b));
    return l;
}

/* {"tent_read_bytes_total": <sum over labels>, ..., "families": [{"name",
 *  "type", "help", "series": [{"labels": {...}, "value"} or {"labels",
 *  "buckets": [[le, cumulative count]...], "sum", "count"}]}]} */
static int render_json(const struct snap *sn, cJSON *dyn, struct out *o)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    cJSON *root = cJSON_CreateObject();
    cJSON *fams = cJSON_CreateArray();
    if (!root || !fams) {
        cJSON_Delete(root);
        cJSON_Delete(fams);
        return tent_set_error(TENT_ENOMEM, "metrics: out of memory");
    }
    for (int id = 0; id < TM_NFAMILIES; id++) {
        const struct tm_family *f = &tm_families[id];
        if (!f->name)
            continue;
        if (f->type != TM_HISTOGRAM)
            cJSON_AddNumberToObject(root, f->name, (double)total_of(sn, id));
        cJSON *fam = cJSON_CreateObject();
        cJSON_AddStringToObject(fam, "name", f->name);
        cJSON_AddStringToObject(fam, "type", types[f->type]);
        cJSON_AddStringToObject(fam, "help", f->help);
        cJSON *series = cJSON_AddArrayToObject(fam, "series");
        for (unsigned a = 0; a < f->dim1; a++)
            for (unsigned b = 0; b < f->dim2; b++) {
                if (!series_shown(sn, id, a, b))
                    continue;
                cJSON *s = cJSON_CreateObject();
                cJSON_AddItemToObject(s, "labels", json_labels(sn, id, a, b));
                if (f->type != TM_HISTOGRAM) {
                    cJSON_AddNumberToObject(s, "value",
                                            (double)value_of(sn, id, a, b));
                } else {
                    cJSON *bk = cJSON_AddArrayToObject(s, "buckets");
                    unsigned nb = (f->width - 2);
                    uint64_t cum = 0;
                    for (unsigned k = 0; k <= nb; k++) {
                        cum += cell(sn, id, a, b, k);
                        cJSON *pair = cJSON_CreateArray();
                        if (k < nb)
                            cJSON_AddItemToArray(
                                pair, cJSON_CreateNumber(bound(f->buckets, k)));
                        else
                            cJSON_AddItemToArray(pair,
                                                 cJSON_CreateString("+Inf"));
                        cJSON_AddItemToArray(pair,
                                             cJSON_CreateNumber((double)cum));
                        cJSON_AddItemToArray(bk, pair);
                    }
                    cJSON_AddNumberToObject(s, "sum",
                                            (double)hist_sum(sn, id, a, b));
                    cJSON_AddNumberToObject(s, "count", (double)cum);
                }
                cJSON_AddItemToArray(series, s);
            }
        cJSON_AddItemToArray(fams, fam);
    }
    /* the dynamic families, with their totals as the others have */
    const cJSON *df;
    cJSON_ArrayForEach(df, dyn) {
        double total = 0;
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(df, "series"))
            total += cJSON_GetObjectItem(s, "value")->valuedouble;
        cJSON_AddNumberToObject(
            root, cJSON_GetObjectItem(df, "name")->valuestring, total);
        cJSON_AddItemToArray(fams, cJSON_Duplicate(df, true));
    }
    cJSON_AddItemToObject(root, "families", fams);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text)
        return tent_set_error(TENT_ENOMEM, "metrics: out of memory");
    put(o, "%s\n", text);
    cJSON_free(text);
    return TENT_OK;
}

int tent_metrics_render(struct tent_metrics *m, enum tm_format fmt, char **out,
                        size_t *len)
{
    struct snap sn;
    int rc = snap_take(m, &sn);
    if (rc)
        return rc;
    bool oom;
    cJSON *dyn = dyn_collect(m, &oom);
    struct out o = {.oom = oom};
    if (fmt == TM_FMT_JSON) {
        rc = render_json(&sn, dyn, &o);
    } else {
        render_text(&sn, &o);
        if (dyn)
            render_dyn_text(dyn, &o);
    }
    cJSON_Delete(dyn);
    free(sn.cells);
    if (!rc && (o.oom || !o.p))
        rc = tent_set_error(TENT_ENOMEM, "metrics: out of memory rendering");
    if (rc) {
        free(o.p);
        return rc;
    }
    *out = o.p;
    *len = o.len;
    return TENT_OK;
}

/* ---- the report line ------------------------------------------------------
 */

static void human_bytes(char *buf, size_t len, double v)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

int tent_metrics_summary(struct tent_metrics *m, char *buf, size_t len)
{
    struct snap sn;
    int rc = snap_take(m, &sn);
    if (rc)
        return rc;
    char rb[32], wb[32], reg[32];
    human_bytes(rb, sizeof(rb), (double)total_of(&sn, TM_READ_BYTES));
    human_bytes(wb, sizeof(wb), (double)total_of(&sn, TM_WRITE_BYTES));
    human_bytes(reg, sizeof(reg), (double)total_of(&sn, TM_REGISTERED_BYTES));
    snprintf(buf, len,
             "metrics: read %s in %" PRId64 " requests (%" PRId64
             " failed), write %s in %" PRId64 " requests (%" PRId64
             " failed), %" PRId64 " failovers, %" PRId64
             " tasks in flight, %" PRId64 " batches, %s registered",
             rb, total_of(&sn, TM_READ_REQUESTS),
             total_of(&sn, TM_READ_FAILURES), wb,
             total_of(&sn, TM_WRITE_REQUESTS), total_of(&sn, TM_WRITE_FAILURES),
             total_of(&sn, TM_FAILOVER), total_of(&sn, TM_TASKS_IN_FLIGHT),
             total_of(&sn, TM_BATCHES), reg);
    free(sn.cells);
    return TENT_OK;
}

static void *report_main(void *arg)
{
    struct tent_metrics *m = arg;
    pthread_mutex_lock(&m->lock);
    while (!m->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += m->cfg.report_interval_s;
        int rc = 0;
        while (!m->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&m->wake, &m->lock, &until);
        if (m->stopping)
            break;
        pthread_mutex_unlock(&m->lock);
        char line[512];
        if (tent_metrics_summary(m, line, sizeof(line)) == TENT_OK)
            LOG_INFO("[%s] %s", m->name, line);
        pthread_mutex_lock(&m->lock);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}
