/* Transport selection: TENT's "policy" list (first matching rule gives the
 * transport order), else the order from buffer registration; only installed
 * transports able to serve the request are candidates; a transport_hint pins
 * the first attempt. */
#include "common/error.h"
#include "common/log.h"
#include "runtime/engine.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int parse_priority(const cJSON *n, int *out)
{
    if (cJSON_IsNumber(n) && n->valuedouble >= 0 && n->valuedouble <= 2 &&
        n->valuedouble == (int)n->valuedouble) {
        *out = (int)n->valuedouble;
        return 0;
    }
    if (cJSON_IsString(n)) {
        const char *names[] = {"high", "medium", "low"};
        for (int i = 0; i < 3; i++)
            if (strcasecmp(n->valuestring, names[i]) == 0) {
                *out = i;
                return 0;
            }
    }
    return -1;
}

static int parse_kind(const cJSON *n, int *out)
{
    if (!cJSON_IsString(n))
        return -1;
    const char *s = n->valuestring;
    if (strcmp(s, "*") == 0)
        *out = -1;
    else if (strcasecmp(s, "cpu") == 0 || strcasecmp(s, "dram") == 0)
        *out = 0;
    else
        *out = 1; /* npu, cuda, hip...: accelerator memory */
    return 0;
}

static int parse_size(const cJSON *n, uint64_t *out)
{
    if (!cJSON_IsNumber(n) ||
        !(n->valuedouble >= 0 && n->valuedouble <= 1.8e19))
        return -1;
    *out = (uint64_t)n->valuedouble;
    return 0;
}

int tent_policies_load(struct tent_engine *e)
{
    const cJSON *list = tent_config_node(e->cfg, "policy");
    e->npolicies = 0;
    if (!list || cJSON_IsNull(list))
        return TENT_OK;
    if (!cJSON_IsArray(list))
        return tent_config_wrong_kind("policy", list, "an array of rules");
    int idx = 0;
    const cJSON *rule;
    cJSON_ArrayForEach(rule, list) {
        if (e->npolicies == TENT_MAX_POLICIES)
            return tent_set_error(TENT_ECONFIG,
                                  "config key 'policy' has more than %d rules",
                                  TENT_MAX_POLICIES);
        struct tent_policy *p = &e->policies[e->npolicies];
        memset(p, 0, sizeof(*p));
        p->priority = -1;
        p->local_kind = p->remote_kind = -1;
        p->max_size = UINT64_MAX;
        if (!cJSON_IsObject(rule))
            return tent_set_error(
                TENT_ECONFIG, "config key 'policy[%d]' must be an object", idx);
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(rule, "name");
        if (n && !cJSON_IsString(n))
            return tent_set_error(
                TENT_ECONFIG, "config key 'policy[%d]/name' must be a string",
                idx);
        snprintf(p->name, sizeof(p->name), "%s",
                 n ? n->valuestring : "(unnamed)");
        n = cJSON_GetObjectItemCaseSensitive(rule, "segment_type");
        if (!n || !cJSON_IsString(n) ||
            (strcmp(n->valuestring, "memory") != 0 &&
             strcmp(n->valuestring, "file") != 0))
            return tent_set_error(
                TENT_ECONFIG,
                "config key 'policy[%d]/segment_type' must be "
                "\"memory\" or \"file\"",
                idx);
        p->segment_type =
            strcmp(n->valuestring, "file") == 0 ? TYPE_FILE : TYPE_MEMORY;
        if ((n = cJSON_GetObjectItemCaseSensitive(rule, "priority")) &&
            parse_priority(n, &p->priority))
            return tent_set_error(TENT_ECONFIG,
                                  "config key 'policy[%d]/priority' must be "
                                  "high/medium/low or 0..2",
                                  idx);
        if ((n = cJSON_GetObjectItemCaseSensitive(rule, "min_size")) &&
            parse_size(n, &p->min_size))
            return tent_set_error(TENT_ECONFIG,
                                  "config key 'policy[%d]/min_size' must be a "
                                  "non-negative number",
                                  idx);
        if ((n = cJSON_GetObjectItemCaseSensitive(rule, "max_size")) &&
            parse_size(n, &p->max_size))
            return tent_set_error(TENT_ECONFIG,
                                  "config key 'policy[%d]/max_size' must be a "
                                  "non-negative number",
                                  idx);
        if (p->min_size > p->max_size)
            return tent_set_error(TENT_ECONFIG,
                                  "config key 'policy[%d]/min_size' (%llu) is "
                                  "larger than its max_size (%llu)",
                                  idx, (unsigned long long)p->min_size,
                                  (unsigned long long)p->max_size);
        if ((n = cJSON_GetObjectItemCaseSensitive(rule, "local_memory")) &&
            parse_kind(n, &p->local_kind))
            return tent_set_error(
                TENT_ECONFIG,
                "config key 'policy[%d]/local_memory' must be "
                "a string",
                idx);
        if ((n = cJSON_GetObjectItemCaseSensitive(rule, "remote_memory")) &&
            parse_kind(n, &p->remote_kind))
            return tent_set_error(
                TENT_ECONFIG,
                "config key 'policy[%d]/remote_memory' must be "
                "a string",
                idx);
        n = cJSON_GetObjectItemCaseSensitive(rule, "transports");
        if (n && !cJSON_IsArray(n))
            return tent_set_error(
                TENT_ECONFIG,
                "config key 'policy[%d]/transports' must be an "
                "array of transport names",
                idx);
        const cJSON *t;
        cJSON_ArrayForEach(t, n) {
            int type = cJSON_IsString(t)
                           ? tent_transport_type_from_name(t->valuestring)
                           : -1;
            if (type <= 0)
                return tent_set_error(
                    TENT_ECONFIG,
                    "config key 'policy[%d]/transports' names "
                    "an unknown transport '%s'",
                    idx, cJSON_IsString(t) ? t->valuestring : "?");
            if (p->ntransports < TENT_MAX_TRANSPORTS)
                p->transports[p->ntransports++] = type;
        }
        e->npolicies++;
        idx++;
    }
    return TENT_OK;
}

static bool kind_matches(int want, bool is_device)
{
    return want < 0 || want == (is_device ? 1 : 0);
}

static bool usable(struct tent_engine *e, int xi, const struct tent_task *task,
                   const struct tent_segment *target,
                   const struct tent_buffer *target_buf)
{
    struct tent_transport *t = e->xports[xi];
    uint32_t bit = 1u << t->ops->type;
    if (!(task->src_buf->xport_mask & bit) || !(target_buf->xport_mask & bit))
        return false;
    uint32_t caps = t->ops->capabilities(t);
    /* File segments go to file transports only; memory segments never do. */
    if (!(caps & TENT_CAP_FILE) != (target->type != TYPE_FILE))
        return false;
    uint32_t need;
    if (task->src_buf->is_device)
        need = target_buf->is_device ? TENT_CAP_DEVICE_TO_DEVICE
                                     : TENT_CAP_DEVICE_TO_DRAM;
    else
        need = target_buf->is_device ? TENT_CAP_DRAM_TO_DEVICE
                                     : TENT_CAP_DRAM_TO_DRAM;
    if (!(caps & need))
        return false;
    return t->ops->can_reach(t, &target->v);
}

static int index_of_type(struct tent_engine *e, int type)
{
    for (int i = 0; i < e->nxports; i++)
        if (e->xports[i]->ops->type == type)
            return i;
    return -1;
}

static void add_cand(struct tent_task *task, int xi)
{
    for (int i = 0; i < task->ncand; i++)
        if (task->cands[i] == xi)
            return;
    if (task->ncand < TENT_MAX_TRANSPORTS)
        task->cands[task->ncand++] = (uint8_t)xi;
}

void tent_select_candidates(struct tent_engine *e, struct tent_task *task,
                            const struct tent_segment *target,
                            const struct tent_buffer *target_buf)
{
    task->ncand = 0;
    task->cand_pos = 0;
    const tent_request_t *r = &task->req;
    if (r->transport_hint != TRANSPORT_UNSPEC) {
        int xi = index_of_type(e, r->transport_hint);
        if (xi >= 0 && usable(e, xi, task, target, target_buf))
            add_cand(task, xi);
    }
    const struct tent_policy *match = NULL;
    for (int i = 0; i < e->npolicies && !match; i++) {
        const struct tent_policy *p = &e->policies[i];
        if (p->segment_type != target->type)
            continue;
        if (p->priority >= 0 && p->priority != r->priority)
            continue;
        if (r->length < p->min_size || r->length > p->max_size)
            continue;
        if (!kind_matches(p->local_kind, task->src_buf->is_device) ||
            !kind_matches(p->remote_kind, target_buf->is_device))
            continue;
        match = p;
    }
    if (match) {
        for (int i = 0; i < match->ntransports; i++) {
            int xi = index_of_type(e, match->transports[i]);
            if (xi >= 0 && usable(e, xi, task, target, target_buf))
                add_cand(task, xi);
        }
        return;
    }
    for (int xi = 0; xi < e->nxports; xi++)
        if (usable(e, xi, task, target, target_buf))
            add_cand(task, xi);
}
