/* tent_get_nic_load_stats: the engine's rail scheduler (sched/rails.h)
 * seen per local NIC. */
#include "common/error.h"
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
