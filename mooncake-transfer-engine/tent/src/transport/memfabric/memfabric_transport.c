/* MemFabric transport: TENT transport over libmf_smem.so's smem_trans API.
 *
 * Completion contract (the seed's, word for word in behaviour):
 *  - the four-argument smem_trans_batch_status_query; SM_NEED_RETRY means
 *    pending; SM_OK means the result is in *result and the vendor batch no
 *    longer accesses memory, even when *result reports failure;
 *  - only a successful execution counts bytes; a failed batch is FAILED with
 *    0 bytes and may have modified memory (nothing is rolled back);
 *  - a query consumes the vendor's result: it is cached per vendor batch
 *    for all of that batch's tasks, and pending_batch_count counts the vendor
 *    batches still without a result;
 *  - a query error is returned to the caller and changes nothing: the tasks
 *    stay pending, the count stays;
 *  - quiesce() stops submissions for good and polls through the same path
 *    until every vendor batch has a result or MF_TRANSFER_TIMEOUT expires;
 *    a timeout completes nothing and cancels nothing.
 * (transports/memfabric/status_query_abi = 3: the fork's three-argument
 * query, at poll_vendor_batch_locked.) */
#include "transport/memfabric/memfabric_transport.h"

#include "common/clock.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "platform/acl.h"
#include "transport/memfabric/memfabric_api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUIESCE_POLL_NS                                                        \
    500000L                       /* between polling iterations, lock released \
                                   */
#define MAX_TIMEOUT_MS 86400000LL /* one day */

/* ", device_sdma, device_rdma, ..." from the ABI header's table. */
#define PROTOCOL_LIST_ITEM(bit, name) ", " name
static const char protocol_list[] = SMEM_DATA_OPS(PROTOCOL_LIST_ITEM);
#undef PROTOCOL_LIST_ITEM

smem_bm_data_op_type memfabric_protocol_bit(const char *name)
{
#define PROTOCOL_MATCH(bit, pname)                                             \
    if (strcmp(name, pname) == 0)                                              \
        return bit;
    if (name) {
        SMEM_DATA_OPS(PROTOCOL_MATCH)
    }
#undef PROTOCOL_MATCH
    return (smem_bm_data_op_type)0;
}

/* The vendor's scale: 0 debug, 1 info, 2 warn, 3 error (its most quiet). */
int memfabric_vendor_log_level(int tent_level)
{
    switch (tent_level) {
    case TENT_LOG_TRACE:
    case TENT_LOG_DEBUG:
        return 0;
    case TENT_LOG_INFO:
        return 1;
    case TENT_LOG_WARNING:
        return 2;
    default:
        return 3;
    }
}

static struct memfabric_transport *mf_of(struct tent_transport *t)
{
    return (struct memfabric_transport *)t;
}

static struct memfabric_sub_batch *sub_of(struct tent_sub_batch *sb)
{
    return (struct memfabric_sub_batch *)sb;
}

/* ---- process-wide smem_trans_init, reference-counted ------------------- */

/* Guards trans_refs and trans_device and is held across the vendor's
 * smem_trans_init / uninit.  Taken only by install / uninstall, with no
 * other lock of ours held. */
static pthread_mutex_t trans_lock = PTHREAD_MUTEX_INITIALIZER;
static int trans_refs;
static uint32_t trans_device;

static int trans_init_ref(uint32_t device_id)
{
    pthread_mutex_lock(&trans_lock);
    if (trans_refs == 0) {
        int32_t rc = memfabric_smem_trans_init(device_id, 0);
        if (rc != SM_OK) {
            pthread_mutex_unlock(&trans_lock);
            return tent_set_error(TENT_EVENDOR,
                                  "smem_trans_init(device %u) failed: vendor "
                                  "code %d",
                                  device_id, rc);
        }
        trans_device = device_id;
    } else if (trans_device != device_id) {
        LOG_WARN("memfabric: smem_trans_init already done for device %u; "
                 "this instance asked for device %u",
                 trans_device, device_id);
    }
    trans_refs++;
    pthread_mutex_unlock(&trans_lock);
    return TENT_OK;
}

static void trans_uninit_ref(void)
{
    pthread_mutex_lock(&trans_lock);
    if (trans_refs > 0 && --trans_refs == 0)
        memfabric_smem_trans_uninit(0);
    pthread_mutex_unlock(&trans_lock);
}

/* ---- settings ----------------------------------------------------------- */

/* The protocol: MF_PROTOCOL (the seed's name), else MF_DATA_OP_TYPE (the
 * fork's); MF_PROTOCOL wins when both are set. */
static int parse_protocol(struct memfabric_settings *s)
{
    const char *proto = getenv("MF_PROTOCOL");
    const char *alt = getenv("MF_DATA_OP_TYPE");
    const char *var = "MF_PROTOCOL";
    if (!proto || !*proto) {
        proto = alt;
        var = "MF_DATA_OP_TYPE";
    } else if (alt && *alt && strcmp(alt, proto) != 0) {
        LOG_WARN("memfabric: MF_PROTOCOL=%s and MF_DATA_OP_TYPE=%s are both "
                 "set; MF_PROTOCOL is used",
                 proto, alt);
    }
    if (!proto || !*proto)
        return tent_set_error(TENT_EINVAL,
                              "%s (one of %s; MF_DATA_OP_TYPE is read when it "
                              "is unset)",
                              MEMFABRIC_MSG_NO_PROTOCOL, protocol_list + 2);
    s->op_type = memfabric_protocol_bit(proto);
    if (!s->op_type)
        return tent_set_error(TENT_EINVAL,
                              "InvalidArgument: %s='%s' is not supported "
                              "(accepted: %s)",
                              var, proto, protocol_list + 2);
    s->protocol = smem_data_op_name(s->op_type);
    s->protocol_var = var;
    return TENT_OK;
}

/* transports/memfabric/status_query_abi: 4 (default) or 3, a number. */
static int parse_query_abi(struct tent_transport *t,
                           struct memfabric_settings *s)
{
    s->status_query_abi = 4;
    const cJSON *n = tent_config_node(t->env->cfg, MEMFABRIC_STATUS_QUERY_ABI);
    if (!n || cJSON_IsNull(n))
        return TENT_OK;
    if (!cJSON_IsNumber(n) || (n->valuedouble != 3 && n->valuedouble != 4)) {
        char *text = cJSON_PrintUnformatted(n);
        int rc = tent_set_error(TENT_EINVAL,
                                "config key '%s' = %s: accepted values are 4 "
                                "(smem_trans_batch_status_query with a result "
                                "output, the default) and 3 (the three-"
                                "argument form)",
                                MEMFABRIC_STATUS_QUERY_ABI, text ? text : "?");
        cJSON_free(text);
        return rc;
    }
    s->status_query_abi = (int)n->valuedouble;
    return TENT_OK;
}

static int parse_settings(struct tent_transport *t,
                          struct memfabric_settings *s)
{
    int rc = parse_protocol(s);
    if (rc)
        return rc;
    rc = parse_query_abi(t, s);
    if (rc)
        return rc;

    s->timeout_ms = MEMFABRIC_DEFAULT_TIMEOUT_MS;
    const char *to = getenv("MF_TRANSFER_TIMEOUT");
    if (to) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(to, &end, 10);
        if (!*to || end == to || *end || errno || v <= 0 || v > MAX_TIMEOUT_MS)
            return tent_set_error(TENT_EINVAL,
                                  "MF_TRANSFER_TIMEOUT='%s' is not a positive "
                                  "number of milliseconds (1..%lld)",
                                  to, MAX_TIMEOUT_MS);
        s->timeout_ms = (uint32_t)v;
    }

    int64_t dev;
    rc = tent_config_get_int_range(
        t->env->cfg, "transports/memfabric/device_id", 0, 0, INT32_MAX, &dev);
    if (rc)
        return rc;
    s->device_id = (uint32_t)dev;
    s->vendor_log_level = memfabric_vendor_log_level(
        atomic_load_explicit(&tent_log_threshold, memory_order_relaxed));
    return TENT_OK;
}

/* The calling thread's metrics shard (NULL: metrics off). */
static struct tm_shard *mf_metrics(struct memfabric_transport *mf)
{
    return tm_shard(mf->metrics);
}

/* ---- peers -------------------------------------------------------------- */

/* Runs on a vendor thread: every open handle of that peer is marked, and
 * new transfers through it are refused.  A peer's unique id carries the
 * port the vendor bound at create ("<host>:0"), so a restarted peer comes
 * back under a new id; a peer that only stalled and runs again gets a new
 * handle from the runtime once it answers for its descriptor. */
static void on_peer_down(const char *peer, void *user)
{
    struct memfabric_transport *mf = user;
    if (!peer)
        return;
    atomic_fetch_add(&mf->peer_down_events, 1);
    int marked = 0;
    pthread_mutex_lock(&mf->peer_lock);
    for (struct mf_peer *p = mf->peers; p; p = p->next)
        if (strcmp(p->unique_id, peer) == 0 && !atomic_exchange(&p->down, true))
            marked++;
    pthread_mutex_unlock(&mf->peer_lock);
    if (marked)
        tm_gauge_add(mf_metrics(mf), TM_PEERS, TM_X(mf->base.index),
                     TM_PEER_DOWN, marked);
    LOG_WARN("memfabric: peer %s went down; new transfers to it are refused, "
             "its in-flight batches finish with the vendor's result",
             peer);
}

/* Frees a sub-batch and what its vendor batches kept. */
static void sub_delete(struct memfabric_sub_batch *s)
{
    for (size_t v = 0; v < s->nvb; v++)
        free(s->batch_status_cache[v].err);
    free(s->batch_status_cache);
    tent_sub_batch_delete(&s->base, s->task_list);
}

/* ---- install / uninstall ------------------------------------------------ */

/* Runs once, after a successful install (the registry's rule).  An
 * instance the engine abandoned has no engine left to unpublish from. */
static void mf_uninstall(struct tent_transport *t)
{
    struct memfabric_transport *mf = mf_of(t);
    if (t->env)
        t->env->publish_attr(t->env->ctx, MEMFABRIC_UNIQUE_ID_ATTR, NULL);
    /* After destroy the vendor calls on_peer_down no more. */
    memfabric_smem_trans_destroy(mf->handle, 0);
    mf->handle = NULL;
    trans_uninit_ref();
    memfabric_api_unload();
    /* Sub-batches the runtime left behind hold no vendor batch (quiesce
     * succeeded, or uninstall would not run). */
    while (mf->subs) {
        struct memfabric_sub_batch *s = mf->subs;
        mf->subs = s->next;
        sub_delete(s);
    }
    pthread_mutex_destroy(&mf->lock);
    pthread_mutex_destroy(&mf->peer_lock);
    mf->unique_id[0] = '\0';
    mf->accepting = false;
}

static int mf_install(struct tent_transport *t)
{
    struct memfabric_transport *mf = mf_of(t);
    struct memfabric_settings set = {0};
    int rc = parse_settings(t, &set);
    if (rc) {
        LOG_ERROR("memfabric install failed: %s", tent_last_error());
        return rc;
    }
    mf->metrics = t->env->metrics;

    pthread_mutex_init(&mf->lock, NULL);
    pthread_mutex_init(&mf->peer_lock, NULL);

    rc = memfabric_api_load();
    if (rc)
        goto fail_load;

    uint32_t acl_dev;
    if (tent_acl_get_device(&acl_dev))
        set.device_id = acl_dev;
    else
        LOG_DEBUG("memfabric: no device id from ACL; "
                  "transports/memfabric/device_id gives %u",
                  set.device_id);

    int32_t vrc = memfabric_smem_set_log_level(set.vendor_log_level);
    if (vrc != SM_OK)
        LOG_WARN("memfabric: smem_set_log_level(%d) failed: vendor code %d",
                 set.vendor_log_level, vrc);

    rc = trans_init_ref(set.device_id);
    if (rc)
        goto fail_init;

    smem_trans_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    vrc = memfabric_smem_trans_config_init(&cfg);
    if (vrc != SM_OK) {
        rc = tent_set_error(
            TENT_EVENDOR, "smem_trans_config_init failed: vendor code %d", vrc);
        goto fail_config;
    }
    cfg.role = SMEM_TRANS_BOTH;
    cfg.deviceId = set.device_id;
    cfg.dataOpType = set.op_type;
    const char *host = t->env->hostname;
    int len = tent_net_format_hostport(cfg.url, sizeof(cfg.url), host, 0);
    if (len < 0 || (size_t)len >= sizeof(cfg.url)) {
        rc = tent_set_error(TENT_EINVAL,
                            "memfabric: host '%s' is too long for the vendor's "
                            "url (%zu bytes)",
                            host, sizeof(cfg.url));
        goto fail_config;
    }
    smem_trans_t handle = memfabric_smem_trans_create(&cfg, 0);
    if (!handle) {
        rc = tent_set_error(TENT_EVENDOR,
                            "smem_trans_create(url %s, protocol %s, device %u) "
                            "failed",
                            cfg.url, set.protocol, set.device_id);
        goto fail_config;
    }
    uint16_t port = 0;
    vrc = memfabric_smem_trans_get_rpc_port(handle, &port);
    if (vrc != SM_OK || port == 0) {
        rc = tent_set_error(TENT_EVENDOR,
                            "smem_trans_get_rpc_port failed: vendor code %d, "
                            "port %u",
                            vrc, (unsigned)port);
        goto fail_create;
    }
    char id[sizeof(mf->unique_id)];
    /* The same form the vendor reports in peer-down callbacks. */
    tent_net_format_hostport(id, sizeof(id), host, port);
    rc = t->env->publish_attr(t->env->ctx, MEMFABRIC_UNIQUE_ID_ATTR, id);
    if (rc)
        goto fail_create;
    vrc = memfabric_smem_trans_set_peer_down_callback(handle, on_peer_down, mf);
    if (vrc != SM_OK) {
        rc = tent_set_error(TENT_EVENDOR,
                            "smem_trans_set_peer_down_callback failed: vendor "
                            "code %d",
                            vrc);
        goto fail_publish;
    }

    /* Outputs only now that everything succeeded. */
    mf->set = set;
    mf->handle = handle;
    memcpy(mf->unique_id, id, sizeof(id));
    mf->accepting = true;
    LOG_INFO("memfabric: unique id %s, protocol %s (from %s), device %u, "
             "timeout %u ms, %d-argument status query",
             mf->unique_id, set.protocol, set.protocol_var, set.device_id,
             set.timeout_ms, set.status_query_abi);
    return TENT_OK;

fail_publish:
    t->env->publish_attr(t->env->ctx, MEMFABRIC_UNIQUE_ID_ATTR, NULL);
fail_create:
    memfabric_smem_trans_destroy(handle, 0);
fail_config:
    trans_uninit_ref();
fail_init:
    memfabric_api_unload();
fail_load:
    pthread_mutex_destroy(&mf->lock);
    pthread_mutex_destroy(&mf->peer_lock);
    LOG_ERROR("memfabric install failed: %s", tent_last_error());
    return rc;
}

static uint32_t mf_capabilities(TENT_UNUSED struct tent_transport *t)
{
    return TENT_CAP_DRAM_TO_DRAM | TENT_CAP_DRAM_TO_DEVICE |
           TENT_CAP_DEVICE_TO_DRAM | TENT_CAP_DEVICE_TO_DEVICE;
}

static bool mf_can_reach(struct tent_transport *t,
                         const struct tent_seg_view *target)
{
    struct memfabric_transport *mf = mf_of(t);
    if (target->local)
        return mf->unique_id[0] != '\0';
    char id[256];
    return t->env->seg_attr(t->env->ctx, target, MEMFABRIC_UNIQUE_ID_ATTR, id,
                            sizeof(id)) &&
           *id;
}

/* ---- sub-batches -------------------------------------------------------- */

static int mf_alloc_sub_batch(struct tent_transport *t, size_t capacity,
                              struct tent_sub_batch **out)
{
    struct memfabric_transport *mf = mf_of(t);
    struct memfabric_task *tl;
    struct tent_sub_batch *sb;
    int rc = tent_sub_batch_new(t, sizeof(struct memfabric_sub_batch), capacity,
                                sizeof(*tl), (void **)&tl, &sb);
    if (rc)
        return rc;
    struct memfabric_sub_batch *s = sub_of(sb);
    s->task_list = tl;
    pthread_mutex_lock(&mf->lock);
    s->next = mf->subs;
    if (mf->subs)
        mf->subs->prev = s;
    mf->subs = s;
    pthread_mutex_unlock(&mf->lock);
    *out = &s->base;
    return TENT_OK;
}

static int mf_free_sub_batch(struct tent_transport *t,
                             struct tent_sub_batch *sb)
{
    struct memfabric_transport *mf = mf_of(t);
    struct memfabric_sub_batch *s = sub_of(sb);
    pthread_mutex_lock(&mf->lock);
    if (s->pending_batch_count > 0) {
        size_t n = s->pending_batch_count;
        pthread_mutex_unlock(&mf->lock);
        return tent_set_error(TENT_EBUSY,
                              "memfabric: sub-batch has %zu vendor batch(es) "
                              "without a result; the vendor may still access "
                              "their memory",
                              n);
    }
    if (s->prev)
        s->prev->next = s->next;
    else
        mf->subs = s->next;
    if (s->next)
        s->next->prev = s->prev;
    pthread_mutex_unlock(&mf->lock);
    sub_delete(s);
    return TENT_OK;
}

/* ---- the status path ---------------------------------------------------- */

/* Queries one vendor batch unless its result is cached.  Caller holds
 * mf->lock.  Returns TENT_OK (vb->state tells pending or done) or
 * TENT_EVENDOR for a query error, which changes nothing. */
static int poll_vendor_batch_locked(struct memfabric_transport *mf,
                                    struct memfabric_sub_batch *s,
                                    struct memfabric_vendor_batch *vb)
{
    if (vb->state == MEMFABRIC_VB_DONE)
        return TENT_OK;
    int32_t result = 0;
    int32_t rc;
    if (mf->set.status_query_abi == 3) {
        /* The fork's three-argument query: 0 done, 1 pending, else failed,
         * the code being the batch's result (this form cannot tell a query
         * error from a failed batch: both fail its tasks). */
        rc = memfabric_smem_trans_batch_status_query3(mf->handle, vb->batch_id,
                                                      0);
        if (rc != SM_QUERY3_DONE && rc != SM_QUERY3_PENDING) {
            result = rc;
            rc = SM_OK;
        }
    } else {
        rc = memfabric_smem_trans_batch_status_query(mf->handle, vb->batch_id,
                                                     &result, 0);
    }
    if (rc == SM_NEED_RETRY)
        return TENT_OK;
    if (rc != SM_OK) {
        tm_add(mf_metrics(mf), TM_MF_QUERY_ERRORS, 0, 0, 1);
        return tent_set_error(TENT_EVENDOR,
                              "smem_trans_batch_status_query(batch %llu) "
                              "failed: vendor code %d; its tasks stay in "
                              "flight",
                              (unsigned long long)vb->batch_id, rc);
    }
    /* The one consuming answer: cache it for every task of the batch. */
    vb->result = result;
    vb->state = MEMFABRIC_VB_DONE;
    s->pending_batch_count--;
    tm_gauge_add(mf_metrics(mf), TM_MF_BATCHES_PENDING, 0, 0, -1);
    if (result != 0) {
        vb->err =
            tent_xerr_new(TENT_EVENDOR, result,
                          "memfabric: vendor batch %llu to %s failed: "
                          "smem_trans result %d",
                          (unsigned long long)vb->batch_id, vb->peer, result);
        LOG_WARN("memfabric: vendor batch %llu to %s failed with result %d",
                 (unsigned long long)vb->batch_id, vb->peer, result);
    }
    return TENT_OK;
}

static int mf_status(struct tent_transport *t, struct tent_sub_batch *sb,
                     uint32_t slot, struct tent_xfer_status *out)
{
    struct memfabric_transport *mf = mf_of(t);
    struct memfabric_sub_batch *s = sub_of(sb);
    if (slot >= s->base.capacity)
        return tent_set_error(TENT_EINVAL,
                              "memfabric status: slot %u is beyond the "
                              "sub-batch's %zu",
                              slot, s->base.capacity);
    pthread_mutex_lock(&mf->lock);
    struct memfabric_task *task = &s->task_list[slot];
    if (!task->used) {
        pthread_mutex_unlock(&mf->lock);
        return tent_set_error(
            TENT_EINVAL, "memfabric status: slot %u was never submitted", slot);
    }
    struct memfabric_vendor_batch *vb = &s->batch_status_cache[task->vb];
    int rc = poll_vendor_batch_locked(mf, s, vb);
    if (rc == TENT_OK) {
        memset(out, 0, sizeof(*out));
        if (vb->state == MEMFABRIC_VB_PENDING) {
            out->state = TENT_XFER_PENDING;
        } else if (vb->result == 0) {
            out->state = TENT_XFER_COMPLETED;
            out->bytes = task->length;
        } else {
            tent_xstatus_failed(out, vb->err, TENT_EVENDOR, vb->result);
        }
    }
    pthread_mutex_unlock(&mf->lock);
    return rc;
}

/* ---- submit ------------------------------------------------------------- */

struct mf_group {
    char peer[256];
    int opcode;
    size_t n;
};

static int mf_peer_open(struct tent_transport *t,
                        const struct tent_seg_view *seg, uint64_t incarnation,
                        struct tent_peer **out)
{
    struct memfabric_transport *mf = mf_of(t);
    struct mf_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return tent_set_error(TENT_ENOMEM, "memfabric: out of memory");
    bool have;
    if (seg->local) {
        have = strlen(mf->unique_id) < sizeof(p->unique_id);
        if (have)
            memcpy(p->unique_id, mf->unique_id, strlen(mf->unique_id) + 1);
    } else {
        have = t->env->seg_attr(t->env->ctx, seg, MEMFABRIC_UNIQUE_ID_ATTR,
                                p->unique_id, sizeof(p->unique_id));
    }
    if (!have || !p->unique_id[0]) {
        free(p);
        return tent_set_error(TENT_EPEER,
                              "memfabric: segment '%s' publishes no usable %s; "
                              "its owner runs no memfabric transport",
                              seg->name, MEMFABRIC_UNIQUE_ID_ATTR);
    }
    p->base.owner = t;
    p->base.incarnation = incarnation;
    atomic_init(&p->down, false);
    pthread_mutex_lock(&mf->peer_lock);
    p->next = mf->peers;
    mf->peers = p;
    pthread_mutex_unlock(&mf->peer_lock);
    *out = &p->base;
    return TENT_OK;
}

static void mf_peer_close(struct tent_transport *t, struct tent_peer *h)
{
    struct memfabric_transport *mf = mf_of(t);
    struct mf_peer *p = (struct mf_peer *)h;
    pthread_mutex_lock(&mf->peer_lock);
    for (struct mf_peer **pp = &mf->peers; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    pthread_mutex_unlock(&mf->peer_lock);
    if (atomic_load(&p->down))
        tm_gauge_add(mf_metrics(mf), TM_PEERS, TM_X(mf->base.index),
                     TM_PEER_DOWN, -1);
    free(p);
}

/* The peer unique id of request r (its handle's) into peer; 0 or a
 * TENT_E*. */
static int resolve_peer(struct memfabric_transport *mf,
                        const struct tent_xfer *r, char *peer, size_t len)
{
    const char *name = r->target->name;
    const struct mf_peer *p = (const struct mf_peer *)r->peer;
    if (!p || p->base.owner != &mf->base)
        return tent_set_error(TENT_EINVAL,
                              "memfabric: request to segment '%s' without its "
                              "memfabric peer handle",
                              name);
    if (strlen(p->unique_id) >= len)
        return tent_set_error(TENT_EINVAL,
                              "memfabric: unique id of segment '%s' is too "
                              "long",
                              name);
    memcpy(peer, p->unique_id, strlen(p->unique_id) + 1);
    if (atomic_load(&p->down))
        return tent_set_error(TENT_EPEER,
                              "memfabric: peer %s (segment '%s') went down",
                              peer, name);
    return TENT_OK;
}

static int reserve_vb_locked(struct memfabric_sub_batch *s)
{
    if (s->nvb < s->vb_cap)
        return TENT_OK;
    size_t ncap = s->vb_cap ? s->vb_cap * 2 : 8;
    struct memfabric_vendor_batch *n =
        realloc(s->batch_status_cache, ncap * sizeof(*n));
    if (!n)
        return tent_set_error(TENT_ENOMEM,
                              "memfabric: out of memory for %zu vendor batches",
                              ncap);
    s->batch_status_cache = n;
    s->vb_cap = ncap;
    return TENT_OK;
}

/* Issues one smem_trans_batch_copy for the requests of group g (those i with
 * gidx[i] == g); sets their results.  Direction (smem_trans_abi.h): srcList
 * always holds local addresses and destList remote addresses of the peer
 * named by destUrl; WRITE copies srcList[i] -> destList[i], READ copies
 * destList[i] -> srcList[i]. */
static void issue_group_locked(struct memfabric_transport *mf,
                               struct memfabric_sub_batch *s,
                               const struct tent_xfer *reqs, size_t n,
                               const size_t *gidx, size_t g,
                               const struct mf_group *grp, void **src,
                               void **dst, size_t *sizes, uint8_t *keys,
                               struct tent_xfer_result *res)
{
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (res[i].code != TENT_OK || gidx[i] != g)
            continue;
        src[k] = reqs[i].local;
        dst[k] = (void *)(uintptr_t)reqs[i].remote;
        sizes[k] = (size_t)reqs[i].length;
        uint8_t *key = keys + (size_t)k * SMEM_TRANS_EXT_KEY_LEN;
        if (reqs[i].target_buf) /* else zeros: a keyed range refuses it */
            memcpy(key, reqs[i].target_buf->key, SMEM_TRANS_EXT_KEY_LEN);
        else
            memset(key, 0, SMEM_TRANS_EXT_KEY_LEN);
        k++;
    }
    int rc = reserve_vb_locked(s);
    int32_t vrc = SM_OK;
    uint64_t batch_id = 0;
    if (rc == TENT_OK) {
        smem_trans_batch_params_t p = {
            .destUrl = grp->peer,
            .srcList = src,
            .destList = dst,
            .sizeList = sizes,
            .batchSize = k,
            .opcode = grp->opcode == OPCODE_READ ? SMEM_TRANS_OP_READ
                                                 : SMEM_TRANS_OP_WRITE,
            .stream = NULL,
            .flags = 0,
        };
        /* with mf_host, every request names its target registration's
         * key; the vendor's library has no way to carry one */
        vrc = memfabric_api_ext.smem_trans_ext_batch_copy_keyed
                  ? memfabric_api_ext.smem_trans_ext_batch_copy_keyed(
                        mf->handle, &p, keys, &batch_id)
                  : memfabric_smem_trans_batch_copy(mf->handle, &p, &batch_id);
        if (vrc != SM_OK)
            rc =
                tent_set_error(TENT_EVENDOR,
                               "smem_trans_batch_copy of %u %s request(s) to "
                               "%s failed: vendor code %d",
                               k, grp->opcode == OPCODE_READ ? "read" : "write",
                               grp->peer, vrc);
    }
    if (rc != TENT_OK) {
        for (size_t i = 0; i < n; i++)
            if (res[i].code == TENT_OK && gidx[i] == g)
                tent_xres_fail(&res[i], rc, vrc);
        return;
    }
    uint32_t vbi = (uint32_t)s->nvb++;
    s->batch_status_cache[vbi] = (struct memfabric_vendor_batch){
        .batch_id = batch_id, .state = MEMFABRIC_VB_PENDING, .result = 0};
    snprintf(s->batch_status_cache[vbi].peer,
             sizeof(s->batch_status_cache[vbi].peer), "%s", grp->peer);
    s->pending_batch_count++;
    struct tm_shard *ms = mf_metrics(mf);
    tm_add(ms, TM_MF_BATCHES_SUBMITTED, 0, 0, 1);
    tm_gauge_add(ms, TM_MF_BATCHES_PENDING, 0, 0, 1);
    for (size_t i = 0; i < n; i++) {
        if (res[i].code != TENT_OK || gidx[i] != g)
            continue;
        struct memfabric_task *task = &s->task_list[reqs[i].slot];
        task->used = true;
        task->vb = vbi;
        task->length = reqs[i].length;
    }
}

static int mf_submit(struct tent_transport *t, struct tent_sub_batch *sb,
                     const struct tent_xfer *reqs, size_t n,
                     struct tent_xfer_result *res)
{
    struct memfabric_transport *mf = mf_of(t);
    struct memfabric_sub_batch *s = sub_of(sb);
    size_t *gidx = calloc(n ? n : 1, sizeof(*gidx));
    struct mf_group *groups = calloc(n ? n : 1, sizeof(*groups));
    void **src = calloc(n ? n : 1, sizeof(*src));
    void **dst = calloc(n ? n : 1, sizeof(*dst));
    size_t *sizes = calloc(n ? n : 1, sizeof(*sizes));
    uint8_t *keys = calloc(n ? n : 1, SMEM_TRANS_EXT_KEY_LEN);
    int rc = TENT_OK;
    if (!gidx || !groups || !src || !dst || !sizes || !keys) {
        rc = tent_set_error(
            TENT_ENOMEM, "memfabric: out of memory submitting %zu requests", n);
        for (size_t i = 0; i < n; i++)
            tent_xres_fail(&res[i], rc, 0);
        goto out;
    }

    pthread_mutex_lock(&mf->lock);
    if (!mf->accepting) {
        rc = tent_set_error(TENT_ESHUTDOWN,
                            "memfabric: transport is quiesced; no new "
                            "submissions");
        for (size_t i = 0; i < n; i++)
            tent_xres_fail(&res[i], rc, 0);
        pthread_mutex_unlock(&mf->lock);
        goto out;
    }
    /* Group by (peer, opcode): a vendor batch never mixes reads and writes
     * or peers. */
    size_t ngroups = 0;
    char peer[256];
    for (size_t i = 0; i < n; i++) {
        const struct tent_xfer *r = &reqs[i];
        res[i].code = TENT_OK;
        if (r->slot >= s->base.capacity) {
            tent_xres_fail(&res[i],
                           tent_set_error(TENT_EINVAL,
                                          "memfabric submit: slot %u is "
                                          "beyond the sub-batch's %zu",
                                          r->slot, s->base.capacity),
                           0);
            continue;
        }
        struct memfabric_task *task = &s->task_list[r->slot];
        if (task->used &&
            s->batch_status_cache[task->vb].state == MEMFABRIC_VB_PENDING) {
            tent_xres_fail(&res[i],
                           tent_set_error(TENT_EBUSY,
                                          "memfabric submit: slot %u is still "
                                          "in flight",
                                          r->slot),
                           0);
            continue;
        }
        if (r->length > SIZE_MAX) {
            tent_xres_fail(&res[i],
                           tent_set_error(TENT_EINVAL,
                                          "memfabric submit: length %llu is "
                                          "too large",
                                          (unsigned long long)r->length),
                           0);
            continue;
        }
        int prc = resolve_peer(mf, r, peer, sizeof(peer));
        if (prc != TENT_OK) {
            tent_xres_fail(&res[i], prc, 0);
            continue;
        }
        size_t g = 0;
        while (g < ngroups && (groups[g].opcode != r->opcode ||
                               strcmp(groups[g].peer, peer) != 0))
            g++;
        if (g == ngroups) {
            memcpy(groups[g].peer, peer, strlen(peer) + 1);
            groups[g].opcode = r->opcode;
            ngroups++;
        }
        groups[g].n++;
        gidx[i] = g;
    }
    for (size_t g = 0; g < ngroups; g++)
        issue_group_locked(mf, s, reqs, n, gidx, g, &groups[g], src, dst, sizes,
                           keys, res);
    pthread_mutex_unlock(&mf->lock);
    for (size_t i = 0; i < n && rc == TENT_OK; i++)
        rc = res[i].code;

out:
    free(gidx);
    free(groups);
    free(src);
    free(dst);
    free(sizes);
    free(keys);
    return rc;
}

/* ---- quiesce ------------------------------------------------------------ */

static int mf_quiesce(struct tent_transport *t)
{
    struct memfabric_transport *mf = mf_of(t);
    pthread_mutex_lock(&mf->lock);
    mf->accepting = false; /* for good, timeout included */
    pthread_mutex_unlock(&mf->lock);

    uint64_t deadline = (uint64_t)tent_now_ms() + mf->set.timeout_ms;
    char last_err[512] = "";
    for (;;) {
        size_t outstanding = 0;
        /* One polling iteration under the lock, through the status path. */
        pthread_mutex_lock(&mf->lock);
        for (struct memfabric_sub_batch *s = mf->subs; s; s = s->next) {
            for (size_t v = 0; v < s->nvb && s->pending_batch_count; v++) {
                struct memfabric_vendor_batch *vb = &s->batch_status_cache[v];
                if (vb->state == MEMFABRIC_VB_DONE)
                    continue;
                if (poll_vendor_batch_locked(mf, s, vb) != TENT_OK)
                    snprintf(last_err, sizeof(last_err),
                             "; last query error: "
                             "%s",
                             tent_last_error());
                if (vb->state != MEMFABRIC_VB_DONE)
                    outstanding++;
            }
        }
        pthread_mutex_unlock(&mf->lock);
        if (outstanding == 0)
            return TENT_OK;
        uint64_t now = (uint64_t)tent_now_ms();
        if (now >= deadline) {
            tm_add(mf_metrics(mf), TM_MF_QUIESCE_TIMEOUTS, 0, 0, 1);
            return tent_set_error(TENT_ETIMEDOUT,
                                  "memfabric quiesce: %zu vendor batch(es) "
                                  "still without a result after "
                                  "MF_TRANSFER_TIMEOUT=%u ms; nothing was "
                                  "cancelled, their memory must stay "
                                  "registered%s",
                                  outstanding, mf->set.timeout_ms, last_err);
        }
        struct timespec pause = {0, QUIESCE_POLL_NS};
        if ((deadline - now) * 1000000u < (uint64_t)QUIESCE_POLL_NS)
            pause.tv_nsec = (long)((deadline - now) * 1000000u);
        nanosleep(&pause, NULL);
    }
}

/* ---- memory ------------------------------------------------------------- */

static int mf_add_buffer(struct tent_transport *t, struct tent_buffer *buf)
{
    struct memfabric_transport *mf = mf_of(t);
    void *addr = (void *)(uintptr_t)buf->base;
    size_t len = (size_t)buf->length;
    /* Registering memory with the vendor opens it to every smem peer for
     * reading and writing: the smem_trans ABI has no read-only flag.  Only
     * globally read-write buffers may be exposed that way; the others are
     * served by transports that enforce the permission per request. */
    if (buf->perm != PERM_GLOBAL_READ_WRITE)
        return tent_set_error(TENT_ENOTSUP,
                              "memfabric: buffer [%p, +%zu) has permission %s; "
                              "the vendor library can only expose "
                              "PERM_GLOBAL_READ_WRITE memory",
                              addr, len,
                              buf->perm == PERM_GLOBAL_READ_ONLY
                                  ? "PERM_GLOBAL_READ_ONLY"
                                  : "PERM_LOCAL_READ_WRITE");
    pthread_mutex_lock(&mf->lock);
    /* with mf_host, registered with the registration's key (requests
     * must carry it); the vendor's library takes none */
    _Static_assert(SMEM_TRANS_EXT_KEY_LEN == TENT_BUF_KEY_LEN,
                   "mf_host takes a registration's key whole");
    int32_t vrc =
        memfabric_api_ext.smem_trans_ext_register_mem_keyed
            ? memfabric_api_ext.smem_trans_ext_register_mem_keyed(
                  mf->handle, addr, len, buf->key, 0)
            : memfabric_smem_trans_register_mem(mf->handle, addr, len, 0);
    pthread_mutex_unlock(&mf->lock);
    if (vrc != SM_OK)
        return tent_set_error(TENT_EVENDOR,
                              "smem_trans_register_mem([%p, +%zu)) failed: "
                              "vendor code %d",
                              addr, len, vrc);
    return TENT_OK;
}

static int mf_remove_buffer(struct tent_transport *t, struct tent_buffer *buf)
{
    struct memfabric_transport *mf = mf_of(t);
    void *addr = (void *)(uintptr_t)buf->base;
    pthread_mutex_lock(&mf->lock);
    int32_t vrc = memfabric_smem_trans_deregister_mem(mf->handle, addr);
    pthread_mutex_unlock(&mf->lock);
    /* The vendor could not make a peer stop touching the buffer (one
     * stalled inside a copy): it keeps the buffer registered.  Its code
     * carries no name; the vendor's log names the peer. */
    if (vrc == SM_RESOURCE_IN_USE)
        return tent_set_error(TENT_EBUSY,
                              "smem_trans_deregister_mem(%p) failed: a peer "
                              "is still copying into or out of the buffer "
                              "after MF_TRANSFER_TIMEOUT (%u ms); the vendor "
                              "keeps it registered (vendor code %d; its log "
                              "names the peer)",
                              addr, mf->set.timeout_ms, vrc);
    if (vrc != SM_OK)
        return tent_set_error(TENT_EVENDOR,
                              "smem_trans_deregister_mem(%p) failed: vendor "
                              "code %d",
                              addr, vrc);
    return TENT_OK;
}

const struct tent_transport_ops tent_memfabric_transport_ops = {
    .name = "memfabric",
    .type = TRANSPORT_MEMFABRIC,
    .default_enabled = false, /* transports/memfabric/enable: true */
    .instance_size = sizeof(struct memfabric_transport),
    .install = mf_install,
    .uninstall = mf_uninstall,
    .capabilities = mf_capabilities,
    .can_reach = mf_can_reach,
    .alloc_sub_batch = mf_alloc_sub_batch,
    .free_sub_batch = mf_free_sub_batch,
    .submit = mf_submit,
    .status = mf_status,
    .quiesce = mf_quiesce,
    .peer_open = mf_peer_open,
    .peer_close = mf_peer_close,
    .add_buffer = mf_add_buffer,
    .remove_buffer = mf_remove_buffer,
};
