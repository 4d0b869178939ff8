/* tent_get_nic_load_stats: the engine's rail scheduler (sched/rails.h)
 * seen per local NIC. */
#include "common/error.h"
#include "metrics/metrics.h"
#include "runtime/engine.h"
#include "sched/rails.h"

#include <stdio.h>
#include <stdlib.h>

int tent_get_nic_load_stats(tent_engine_t engine, tent_nic_load_stat_t *stats,
                            size_t *count)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL,
                              "tent_get_nic_load_stats: engine is NULL");
    if (!stats || !count)
        return tent_set_error(TENT_ENULL,
                              "tent_get_nic_load_stats: stats or count is "
                              "NULL");
    size_t cap = *count;
    struct tent_nic_load *l = cap ? calloc(cap, sizeof(*l)) : NULL;
    if (cap && !l)
        return tent_set_error(TENT_ENOMEM,
                              "tent_get_nic_load_stats: out of memory");
    size_t n = tent_sched_nic_loads(e->sched, l, cap);
    for (size_t i = 0; i < n && i < cap; i++) {
        snprintf(stats[i].device_name, sizeof(stats[i].device_name), "%s",
                 l[i].name);
        stats[i].inflight_bytes = l[i].inflight_bytes;
        stats[i].ewma_bandwidth_bps = l[i].ewma_bps;
    }
    free(l);
    *count = n;
    return TENT_OK;
}

/* ---- the rails in the metrics ----------------------------------------------
 * Per rail ({transport, nic, peer}: the local NIC, and the peer segment with
 * its NIC), read from the scheduler at every scrape. */

struct rail_list {
    struct tent_rail_load *v;
    size_t n, cap;
};

static void collect_rail(void *arg, const struct tent_rail_load *r)
{
    struct rail_list *l = arg;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        struct tent_rail_load *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *r;
}

void tent_rails_metrics(void *arg, struct tm_dyn_sink *k)
{
    struct rail_list l = {0};
    tent_sched_foreach_rail(arg, collect_rail, &l);
    static const struct {
        const char *name, *help;
        enum tm_type type;
    } fams[] = {
        {"tent_rail_inflight_bytes",
         "Bytes of slices picked for the rail and not yet finished", TM_GAUGE},
        {"tent_rail_bandwidth_bytes_per_second",
         "The rail's EWMA delivery rate, what slice spraying predicts with",
         TM_GAUGE},
        {"tent_rail_bytes_total", "Bytes of slices the rail completed",
         TM_COUNTER},
        {"tent_rail_failures_total",
         "Slices that failed on the rail for a reason of the path", TM_COUNTER},
        {"tent_rail_probes_total",
         "Probe picks of the rail (round robin, or a paused rail's probe)",
         TM_COUNTER},
        {"tent_rail_paused", "1 while the rail is paused after a failure",
         TM_GAUGE},
        {"tent_rail_capacity_bytes_per_second",
         "The capacity LOW is paced below (0 until learned)", TM_GAUGE},
    };
    for (size_t f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
        tm_dyn_family(k, fams[f].name, fams[f].type, fams[f].help);
        for (size_t i = 0; i < l.n; i++) {
            const struct tent_rail_load *r = &l.v[i];
            const char *labels[] = {"transport", r->owner, "nic", r->local_nic,
                                    "peer",      r->peer,  NULL};
            double v = f == 0   ? (double)r->inflight_bytes
                       : f == 1 ? r->ewma_bps
                       : f == 2 ? (double)r->bytes_total
                       : f == 3 ? (double)r->failures_total
                       : f == 4 ? (double)r->probes_total
                       : f == 5 ? (r->paused ? 1.0 : 0.0)
                                : r->capacity_bps;
            tm_dyn_sample(k, labels, v);
        }
    }
    free(l.v);
}
