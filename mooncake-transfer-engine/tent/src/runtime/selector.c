/* Transport selection as TENT's TransportSelector does it: the "policy" list
 * of rules, evaluated in order, the first that matches a request giving the
 * transport order (the first tried first, the rest its failover order); a
 * request's policy_name picks a rule by name ahead of every filter.  With
 * no rule matching (or none configured, or a rule without a transports
 * list) the order is that of buffer registration.  Only installed
 * transports able to serve the request are candidates.  A transport_hint
 * that can serve the request goes first; one that cannot is passed over
 * (TENT fails such a request, and one that no rule matches: README's
 * differences say so).  A rule TENT would skip (bad segment_type,
 * intent_type, priority ...) is skipped with a warning naming it. */
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
            if (strcasecmp(n->valuestring, names[i]) == 0 ||
                (n->valuestring[0] == '0' + i && !n->valuestring[1])) {
                *out = i;
                return 0;
            }
    }
    return -1;
}

/* TENT's IntentType names (and "unspec"), or their numbers. */
static int parse_intent(const cJSON *n, int *out)
{
    static const char *const names[] = {
        "intent_unspec", "foreground_get", "background_prefetch", "migration",
        "checkpoint",    "weight_loading", "staging_internal"};
    if (cJSON_IsNumber(n) && n->valuedouble >= 0 && n->valuedouble <= 6 &&
        n->valuedouble == (int)n->valuedouble) {
        *out = (int)n->valuedouble;
        return 0;
    }
    if (!cJSON_IsString(n))
        return -1;
    if (strcasecmp(n->valuestring, "unspec") == 0) {
        *out = TENT_INTENT_UNSPEC;
        return 0;
    }
    for (int i = 0; i < 7; i++)
        if (strcasecmp(n->valuestring, names[i]) == 0) {
            *out = i;
            return 0;
        }
    return -1;
}

/* A memory-type pattern: "*" or a type a buffer's location starts with
 * (cpu, cuda, npu, rocm ...); "dram" is cpu and "hip" rocm. */
static int parse_mem(const cJSON *n, char out[16])
{
    if (!cJSON_IsString(n) || !n->valuestring[0] ||
        strlen(n->valuestring) >= 16)
        return -1;
    const char *s = n->valuestring;
    if (strcasecmp(s, "dram") == 0)
        s = "cpu";
    else if (strcasecmp(s, "hip") == 0)
        s = "rocm";
    snprintf(out, 16, "%s", s);
    for (char *p = out; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
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

/* Parses rule into p; on a rule TENT would not use, the reason (why) and
 * -1. */
static int parse_rule(const cJSON *rule, struct tent_policy *p,
                      const char **why)
{
    memset(p, 0, sizeof(*p));
    p->priority = p->intent = p->same_machine = -1;
    p->max_size = UINT64_MAX;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(rule, "name");
    snprintf(p->name, sizeof(p->name), "%s",
             cJSON_IsString(n) ? n->valuestring : "unnamed");
    n = cJSON_GetObjectItemCaseSensitive(rule, "segment_type");
    if (!cJSON_IsString(n) || (strcmp(n->valuestring, "memory") != 0 &&
                               strcmp(n->valuestring, "file") != 0))
        return *why = "segment_type must be \"memory\" or \"file\"", -1;
    p->segment_type =
        strcmp(n->valuestring, "file") == 0 ? TYPE_FILE : TYPE_MEMORY;
    if ((n = cJSON_GetObjectItemCaseSensitive(rule, "same_machine"))) {
        if (!cJSON_IsBool(n))
            return *why = "same_machine must be true or false", -1;
        p->same_machine = cJSON_IsTrue(n);
    }
    if ((n = cJSON_GetObjectItemCaseSensitive(rule, "priority")) &&
        parse_priority(n, &p->priority))
        return *why = "priority must be high/medium/low or 0..2", -1;
    if ((n = cJSON_GetObjectItemCaseSensitive(rule, "intent_type")) &&
        parse_intent(n, &p->intent))
        return *why = "intent_type is not one of TENT's intents", -1;
    if ((n = cJSON_GetObjectItemCaseSensitive(rule, "min_size")) &&
        parse_size(n, &p->min_size))
        return *why = "min_size must be a non-negative number", -1;
    if ((n = cJSON_GetObjectItemCaseSensitive(rule, "max_size")) &&
        parse_size(n, &p->max_size))
        return *why = "max_size must be a non-negative number", -1;
    if (p->min_size > p->max_size)
        return *why = "min_size is larger than max_size", -1;
    if ((n = cJSON_GetObjectItemCaseSensitive(rule, "local_memory")) &&
        parse_mem(n, p->local_mem))
        return *why = "local_memory must be a memory type or \"*\"", -1;
    if ((n = cJSON_GetObjectItemCaseSensitive(rule, "remote_memory")) &&
        parse_mem(n, p->remote_mem))
        return *why = "remote_memory must be a memory type or \"*\"", -1;
    if ((n = cJSON_GetObjectItemCaseSensitive(rule, "devices"))) {
        if (!cJSON_IsArray(n))
            return *why = "devices must be an array of NIC names", -1;
        const cJSON *d;
        cJSON_ArrayForEach(d, n) {
            if (!cJSON_IsString(d) || !d->valuestring[0] ||
                strlen(d->valuestring) >= sizeof(p->devices[0]))
                return *why = "devices must name NICs (1-31 characters)", -1;
            if (p->ndevices == TENT_POLICY_DEVICES)
                return *why = "devices names more than 8 NICs", -1;
            snprintf(p->devices[p->ndevices++], sizeof(p->devices[0]), "%s",
                     d->valuestring);
        }
    }
    n = cJSON_GetObjectItemCaseSensitive(rule, "transports");
    if (n && !cJSON_IsArray(n))
        return *why = "transports must be an array of transport names", -1;
    const cJSON *t;
    cJSON_ArrayForEach(t, n) {
        /* as TENT: an unknown name is left out of the list, with a
         * warning; the rule stays */
        int type = cJSON_IsString(t)
                       ? tent_transport_type_from_name(t->valuestring)
                       : -1;
        if (type <= 0) {
            LOG_WARN("policy rule '%s': unknown transport '%s' left out",
                     p->name, cJSON_IsString(t) ? t->valuestring : "?");
            continue;
        }
        if (p->ntransports < TENT_MAX_TRANSPORTS)
            p->transports[p->ntransports++] = type;
    }
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
        const char *why = "a rule must be an object";
        if (cJSON_IsObject(rule) && parse_rule(rule, p, &why) == 0)
            e->npolicies++;
        else
            LOG_WARN("policy[%d] ('%s') skipped: %s", idx,
                     cJSON_IsObject(rule) ? p->name : "?", why);
        idx++;
    }
    return TENT_OK;
}

int tent_policy_named(const struct tent_engine *e, const char *name,
                      int seg_type)
{
    for (int i = 0; i < e->npolicies; i++)
        if (e->policies[i].segment_type == seg_type &&
            strcmp(e->policies[i].name, name) == 0)
            return i;
    return -1;
}

/* Whether a buffer at location (e.g. "cuda:0", "cpu") is of type pat. */
static bool mem_matches(const char *pat, const char *location)
{
    if (!pat[0] || strcmp(pat, "*") == 0)
        return true;
    size_t n = strcspn(location, ":");
    const char *loc = location;
    if (n == 0 || strcmp(location, "*") == 0) {
        loc = "cpu";
        n = 3;
    }
    if (strncasecmp(loc, "hip", n) == 0 && n == 3)
        loc = "rocm", n = 4;
    return strlen(pat) == n && strncasecmp(pat, loc, n) == 0;
}

static bool same_machine(struct tent_engine *e,
                         const struct tent_segment *target)
{
    if (target->v.local || target->type == TYPE_FILE)
        return true;
    return e->xenv.seg_on_host(e->xenv.ctx, &target->v);
}

static bool rule_matches(struct tent_engine *e, const struct tent_policy *p,
                         const struct tent_task *task,
                         const struct tent_segment *target,
                         const struct tent_buffer *target_buf)
{
    const tent_request_t *r = &task->req;
    if (p->segment_type != target->type)
        return false;
    if (p->priority >= 0 && p->priority != r->priority)
        return false;
    if (p->intent >= 0 && p->intent != r->intent_type)
        return false;
    if (r->length < p->min_size || r->length > p->max_size)
        return false;
    if (!mem_matches(p->local_mem, task->src_buf->location) ||
        !mem_matches(p->remote_mem, target_buf->location))
        return false;
    if (p->same_machine >= 0 && p->same_machine != same_machine(e, target))
        return false;
    return true;
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
    /* This engine has no rdma transport of its own: TRANSPORT_RDMA (a hint,
     * a policy) names the libfabric transport, which drives RDMA NICs
     * (verbs, efa, cxi), when it is installed. */
    if (type == TRANSPORT_RDMA)
        return index_of_type(e, TRANSPORT_LIBFABRIC);
    return -1;
}

static bool has_cand(const struct tent_task *task, int xi)
{
    for (int i = 0; i < task->ncand; i++)
        if (task->cands[i] == xi)
            return true;
    return false;
}

static void add_cand(struct tent_task *task, int xi)
{
    if (!has_cand(task, xi) && task->ncand < TENT_MAX_TRANSPORTS)
        task->cands[task->ncand++] = (uint8_t)xi;
}

void tent_select_candidates(struct tent_engine *e, struct tent_task *task,
                            const struct tent_segment *target,
                            const struct tent_buffer *target_buf)
{
    task->ncand = 0;
    task->cand_pos = 0;
    int hint = task->req.transport_hint;
    if (hint != TRANSPORT_UNSPEC) {
        int xi = index_of_type(e, hint);
        if (xi >= 0 && usable(e, xi, task, target, target_buf))
            add_cand(task, xi);
    }
    const struct tent_policy *match = NULL;
    if (task->policy >= 0 && task->policy < e->npolicies)
        match = &e->policies[task->policy];
    for (int i = 0; i < e->npolicies && !match; i++)
        if (rule_matches(e, &e->policies[i], task, target, target_buf))
            match = &e->policies[i];
    if (match && match->ntransports) {
        for (int i = 0; i < match->ntransports; i++) {
            int xi = index_of_type(e, match->transports[i]);
            if (xi >= 0 && !has_cand(task, xi) &&
                usable(e, xi, task, target, target_buf))
                add_cand(task, xi);
        }
        return;
    }
    /* the hinted transport, already asked, is not asked again */
    for (int xi = 0; xi < e->nxports; xi++)
        if (!has_cand(task, xi) && usable(e, xi, task, target, target_buf))
            add_cand(task, xi);
}
