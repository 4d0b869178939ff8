/* Segments, batches, transfers and their status, notifications and the NIC
 * load figures of the classic API. */
#include "classic/classic.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- segments ----------------------------------------------------------- */

/* Caller holds ce->lock. */
static bool seg_known(const struct classic_engine *ce, int32_t id)
{
    for (size_t i = 0; i < ce->nsegs; i++)
        if (ce->segs[i] == id)
            return true;
    return false;
}

static void seg_forget(struct classic_engine *ce, int32_t id)
{
    for (size_t i = 0; i < ce->nsegs; i++)
        if (ce->segs[i] == id) {
            ce->segs[i] = ce->segs[--ce->nsegs];
            return;
        }
}

static int seg_remember(struct classic_engine *ce, int32_t id)
{
    if (seg_known(ce, id))
        return 0;
    if (ce->nsegs == ce->segs_cap) {
        size_t cap = ce->segs_cap ? ce->segs_cap * 2 : 8;
        int32_t *s = realloc(ce->segs, cap * sizeof(*s));
        if (!s)
            return -1;
        ce->segs = s;
        ce->segs_cap = cap;
    }
    ce->segs[ce->nsegs++] = id;
    return 0;
}

/* Opens name; with fresh, an id already open for it is closed first so
 * that the descriptor is fetched again.  Caller holds ce->lock. */
static int32_t open_locked(struct classic_engine *ce, const char *name,
                           bool fresh, const char *fn)
{
    tent_segment_id_t h;
    int rc = tent_open_segment(ce->te, &h, name);
    if (rc == TENT_OK && fresh && h != TENT_LOCAL_SEGMENT_ID &&
        seg_known(ce, (int32_t)h)) {
        seg_forget(ce, (int32_t)h);
        (void)tent_close_segment(ce->te, h);
        rc = tent_open_segment(ce->te, &h, name);
    }
    if (rc != TENT_OK) {
        CLASSIC_WARN("%s('%s'): %s", fn, name, tent_last_error());
        return classic_err_of(rc);
    }
    if (h > INT32_MAX) {
        (void)tent_close_segment(ce->te, h);
        CLASSIC_WARN("%s('%s'): segment id %llu does not fit segment_id_t", fn,
                     name, (unsigned long long)h);
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    if (seg_remember(ce, (int32_t)h) != 0) {
        if (h != TENT_LOCAL_SEGMENT_ID)
            (void)tent_close_segment(ce->te, h);
        CLASSIC_WARN("%s('%s'): out of memory", fn, name);
        return CLASSIC_ERR_MEMORY;
    }
    classic_seal(ce);
    return (int32_t)h;
}

static segment_id_t open_segment(transfer_engine_t engine, const char *name,
                                 bool fresh, const char *fn)
{
    struct classic_engine *ce = classic_engine_of(engine, fn);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    /* Mooncake drops leading slashes of a segment name. */
    while (name && *name == '/')
        name++;
    if (!name || !*name) {
        CLASSIC_WARN("%s: segment name is empty", fn);
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return CLASSIC_ERR_CONTEXT;
    pthread_mutex_lock(&ce->lock);
    int32_t id =
        ce->te ? open_locked(ce, name, fresh, fn) : CLASSIC_ERR_CONTEXT;
    pthread_mutex_unlock(&ce->lock);
    classic_leave(ce, counted);
    return id;
}

CLASSIC_API segment_id_t openSegment(transfer_engine_t engine,
                                     const char *segment_name)
{
    return open_segment(engine, segment_name, false, __func__);
}

CLASSIC_API segment_id_t openSegmentNoCache(transfer_engine_t engine,
                                            const char *segment_name)
{
    return open_segment(engine, segment_name, true, __func__);
}

CLASSIC_API int closeSegment(transfer_engine_t engine, segment_id_t segment_id)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    if (segment_id < 0) {
        CLASSIC_WARN("closeSegment: segment id %d is not valid", segment_id);
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return CLASSIC_ERR_CONTEXT;
    int rc = 0;
    pthread_mutex_lock(&ce->lock);
    if (!ce->te) {
        rc = CLASSIC_ERR_CONTEXT;
    } else if (segment_id != LOCAL_SEGMENT) {
        int trc = tent_close_segment(ce->te, (tent_segment_id_t)segment_id);
        if (trc == TENT_OK) {
            seg_forget(ce, segment_id);
        } else {
            CLASSIC_WARN("closeSegment: %s", tent_last_error());
            rc = trc == TENT_ENOSEGMENT ? CLASSIC_ERR_INVALID_ARGUMENT
                                        : classic_err_of(trc);
        }
    }
    pthread_mutex_unlock(&ce->lock);
    classic_leave(ce, counted);
    return rc;
}

/* ---- batches ------------------------------------------------------------ */

/* The data path runs only on a sealed engine: one that has allocated a
 * batch.  Before that no batch id can be valid, and `te` may still be
 * replaced by installTransport. */
static tent_engine_t data_engine(struct classic_engine *ce, const char *fn)
{
    if (!atomic_load_explicit(&ce->sealed, memory_order_acquire) || !ce->te) {
        CLASSIC_WARN("%s: no batch has been allocated on this engine", fn);
        return NULL;
    }
    return ce->te;
}

/* Enters ce (classic_enter) and takes its data engine into *te: OK, or the
 * status to return (CONTEXT, or INVALID_ARGUMENT with ce left again). */
static int enter_data(struct classic_engine *ce, const char *fn, bool *counted,
                      tent_engine_t *te)
{
    if (!classic_enter(ce, counted))
        return CLASSIC_ST_CONTEXT;
    *te = data_engine(ce, fn);
    if (!*te) {
        classic_leave(ce, *counted);
        return CLASSIC_ST_INVALID_ARGUMENT;
    }
    return CLASSIC_ST_OK;
}

CLASSIC_API batch_id_t allocateBatchID(transfer_engine_t engine,
                                       size_t batch_size)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return INVALID_BATCH;
    if (batch_size == 0) {
        CLASSIC_WARN("allocateBatchID: batch size is 0");
        return INVALID_BATCH;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return INVALID_BATCH;
    bool locked;
    tent_engine_t te = classic_te_lock(ce, &locked);
    tent_batch_id_t id =
        te ? tent_allocate_batch(te, batch_size) : TENT_INVALID_BATCH_ID;
    if (id == TENT_INVALID_BATCH_ID || id == INVALID_BATCH) {
        CLASSIC_WARN("allocateBatchID(%zu): %s", batch_size,
                     te ? tent_last_error() : "the engine is stopped");
        if (id != TENT_INVALID_BATCH_ID)
            (void)tent_free_batch(te, id);
        classic_te_unlock(ce, locked);
        classic_leave(ce, counted);
        return INVALID_BATCH;
    }
    classic_seal(ce);
    classic_te_unlock(ce, locked);
    classic_leave(ce, counted);
    return id;
}

#define STACK_REQUESTS 32

/* The requests of a submit: Mooncake's struct or the _ex one. */
struct entries {
    const struct transfer_request *plain;
    const struct transfer_request_ex *ex;
};

static int32_t entry_target(const struct entries *in, size_t i)
{
    return in->ex ? in->ex[i].target_id : in->plain[i].target_id;
}

static tent_request_t entry_request(const struct entries *in, size_t i)
{
    if (!in->ex)
        return (tent_request_t){
            .opcode = in->plain[i].opcode,
            .source = in->plain[i].source,
            .target_id = (tent_segment_id_t)in->plain[i].target_id,
            .target_offset = in->plain[i].target_offset,
            .length = in->plain[i].length,
        };
    const struct transfer_request_ex *x = &in->ex[i];
    return (tent_request_t){
        .opcode = x->opcode,
        .source = x->source,
        .target_id = (tent_segment_id_t)x->target_id,
        .target_offset = x->target_offset,
        .length = x->length,
        .priority = x->priority,
        .intent_type = x->intent_type,
        .deadline_ns = x->deadline_ns,
        .policy_name = x->policy_name,
    };
}

static int submit(transfer_engine_t engine, batch_id_t batch_id,
                  const struct entries *in, size_t count,
                  const notify_msg_t *notify, const char *fn)
{
    struct classic_engine *ce = classic_engine_of(engine, fn);
    if (!ce)
        return CLASSIC_ST_INVALID_ARGUMENT;
    if (count == 0 && !notify)
        return CLASSIC_ST_OK; /* nothing to do, as Mooncake */
    if (count == 0 || (!in->plain && !in->ex)) {
        CLASSIC_WARN("%s: %s", fn,
                     count == 0 ? "entries must not be empty"
                                : "entries is NULL");
        return CLASSIC_ST_INVALID_ARGUMENT;
    }
    if (notify && (!notify->name || !notify->msg)) {
        CLASSIC_WARN("%s: notify_msg name or msg is NULL", fn);
        return CLASSIC_ST_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < count; i++)
        if (entry_target(in, i) < 0) {
            CLASSIC_WARN("%s: request %zu: target_id %d is not a segment id",
                         fn, i, entry_target(in, i));
            return CLASSIC_ST_INVALID_ARGUMENT;
        }
    bool counted;
    tent_engine_t te;
    int est = enter_data(ce, fn, &counted, &te);
    if (est != CLASSIC_ST_OK)
        return est;
    tent_request_t stack[STACK_REQUESTS];
    tent_request_t *reqs =
        count <= STACK_REQUESTS ? stack : malloc(count * sizeof(*reqs));
    if (!reqs) {
        CLASSIC_WARN("%s: out of memory for %zu requests", fn, count);
        classic_leave(ce, counted);
        return CLASSIC_ST_MEMORY;
    }
    for (size_t i = 0; i < count; i++)
        reqs[i] = entry_request(in, i);
    int rc = notify ? tent_submit_notif(te, batch_id, reqs, count, notify->name,
                                        notify->msg)
                    : tent_submit(te, batch_id, reqs, count);
    if (reqs != stack)
        free(reqs);
    if (rc != TENT_OK)
        CLASSIC_WARN("%s: %s", fn, tent_last_error());
    classic_leave(ce, counted);
    return classic_status_of(rc);
}

CLASSIC_API int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
                               struct transfer_request *entries, size_t count)
{
    struct entries in = {.plain = entries};
    return submit(engine, batch_id, &in, count, NULL, __func__);
}

CLASSIC_API int submitTransferWithNotify(transfer_engine_t engine,
                                         batch_id_t batch_id,
                                         struct transfer_request *entries,
                                         size_t count, notify_msg_t notify_msg)
{
    struct entries in = {.plain = entries};
    return submit(engine, batch_id, &in, count, &notify_msg, __func__);
}

CLASSIC_API int submitTransferEx(transfer_engine_t engine, batch_id_t batch_id,
                                 const struct transfer_request_ex *entries,
                                 size_t count, const notify_msg_t *notify_msg)
{
    struct entries in = {.ex = entries};
    return submit(engine, batch_id, &in, count, notify_msg, __func__);
}

CLASSIC_API int getTransferError(transfer_engine_t engine, batch_id_t batch_id,
                                 size_t task_id, int *cause, char *msg,
                                 size_t len)
{
    if (msg && len)
        msg[0] = '\0';
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ST_INVALID_ARGUMENT;
    if (!cause) {
        CLASSIC_WARN("getTransferError: cause is NULL");
        return CLASSIC_ST_INVALID_ARGUMENT;
    }
    bool counted;
    tent_engine_t te;
    int est = enter_data(ce, __func__, &counted, &te);
    if (est != CLASSIC_ST_OK)
        return est;
    int code = TENT_OK, native = 0;
    int rc = tent_task_error(te, batch_id, task_id, &code, &native,
                             msg && len ? msg : NULL, msg ? len : 0);
    if (rc != TENT_OK)
        CLASSIC_WARN("getTransferError: %s", tent_last_error());
    classic_leave(ce, counted);
    if (rc != TENT_OK)
        return classic_status_of(rc);
    *cause = code == TENT_OK          ? 0
             : code == TENT_ETIMEDOUT ? STATUS_TIMEOUT
                                      : STATUS_FAILED;
    return CLASSIC_ST_OK;
}

CLASSIC_API int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id,
                                  size_t task_id,
                                  struct transfer_status *status)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ST_INVALID_ARGUMENT;
    if (!status) {
        CLASSIC_WARN("getTransferStatus: status is NULL");
        return CLASSIC_ST_INVALID_ARGUMENT;
    }
    bool counted;
    tent_engine_t te;
    int est = enter_data(ce, __func__, &counted, &te);
    if (est != CLASSIC_ST_OK)
        return est;
    tent_status_t st = {.status = -1};
    int rc = tent_task_status(te, batch_id, task_id, &st);
    classic_leave(ce, counted);
    if (rc != TENT_OK && st.status == STATUS_PENDING) {
        /* The transport could not tell this time; the task is still
         * moving (Mooncake's status query cannot fail). */
        static struct tent_log_ratelimit rl;
        unsigned long held;
        if (tent_log_ratelimit_ok(&rl, 5000, &held))
            CLASSIC_WARN("getTransferStatus: task %zu of batch %#llx: %s; "
                         "reported as still moving (%lu such lines held "
                         "back)",
                         task_id, (unsigned long long)batch_id,
                         tent_last_error(), held);
        st.transferred_bytes = 0;
        rc = TENT_OK;
    }
    if (rc != TENT_OK) {
        CLASSIC_WARN("getTransferStatus: %s", tent_last_error());
        return classic_status_of(rc);
    }
    /* Mooncake reports a task in progress as WAITING. */
    status->status = st.status == STATUS_PENDING ? STATUS_WAITING : st.status;
    status->transferred_bytes = st.transferred_bytes;
    return CLASSIC_ST_OK;
}

CLASSIC_API int freeBatchID(transfer_engine_t engine, batch_id_t batch_id)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ST_INVALID_ARGUMENT;
    bool counted;
    tent_engine_t te;
    int est = enter_data(ce, __func__, &counted, &te);
    if (est != CLASSIC_ST_OK)
        return est;
    /* Mooncake's classic engine refuses to free a batch still moving
     * (batch busy); tent_free_batch would take it and defer the free, as
     * TENT does. */
    tent_status_t st;
    int rc = tent_overall_status(te, batch_id, &st);
    if (rc == TENT_OK && st.status == STATUS_PENDING) {
        CLASSIC_WARN("freeBatchID: batch %#llx has tasks still in flight",
                     (unsigned long long)batch_id);
        classic_leave(ce, counted);
        return classic_status_of(TENT_EBUSY);
    }
    rc = tent_free_batch(te, batch_id);
    if (rc != TENT_OK)
        CLASSIC_WARN("freeBatchID: %s", tent_last_error());
    classic_leave(ce, counted);
    return classic_status_of(rc);
}

/* ---- notifications ------------------------------------------------------ */

static void free_msgs(notify_msg_t *m, int n)
{
    for (int i = 0; i < n; i++) {
        free(m[i].name);
        free(m[i].msg);
    }
    free(m);
}

int classic_stash_append(struct classic_engine *ce,
                         const tent_notifi_record_t *records, int n)
{
    if (n <= 0)
        return 0;
    size_t total = (size_t)ce->stash.num_records + (size_t)n;
    tent_notifi_record_t *r = realloc(ce->stash.records, total * sizeof(*r));
    if (!r)
        return -1;
    memcpy(r + ce->stash.num_records, records, (size_t)n * sizeof(*r));
    ce->stash.records = r;
    ce->stash.num_records = (int)total;
    return 0;
}

/* The received notifications as Mooncake hands them out: an array and
 * each string malloc'ed.  NULL when out of memory. */
static notify_msg_t *to_msgs(const tent_notifi_info *a,
                             const tent_notifi_info *b)
{
    int n = a->num_records + b->num_records;
    notify_msg_t *out = calloc((size_t)n, sizeof(*out));
    for (int i = 0; out && i < n; i++) {
        const tent_notifi_record_t *r = i < a->num_records
                                            ? &a->records[i]
                                            : &b->records[i - a->num_records];
        out[i].name = strdup(r->name);
        out[i].msg = strdup(r->msg);
        if (!out[i].name || !out[i].msg) {
            free_msgs(out, i + 1);
            out = NULL;
        }
    }
    return out;
}

CLASSIC_API notify_msg_t *getNotifsFromEngine(transfer_engine_t engine,
                                              int *size)
{
    if (size)
        *size = 0;
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return NULL;
    if (!size) {
        CLASSIC_WARN("getNotifsFromEngine: size is NULL");
        return NULL;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return NULL;
    tent_notifi_info info = {0};
    bool locked;
    tent_engine_t te = classic_te_lock(ce, &locked);
    int rc = te ? tent_recv_notifs(te, &info) : TENT_ESHUTDOWN;
    if (rc != TENT_OK) {
        CLASSIC_WARN("getNotifsFromEngine: %s",
                     te ? tent_last_error() : "the engine is stopped");
        info = (tent_notifi_info){0};
    }
    classic_te_unlock(ce, locked);
    pthread_mutex_lock(&ce->lock);
    tent_notifi_info stash = ce->stash;
    ce->stash = (tent_notifi_info){0};
    pthread_mutex_unlock(&ce->lock);
    int n = stash.num_records + info.num_records;
    notify_msg_t *out = n ? to_msgs(&stash, &info) : NULL;
    if (n && !out) {
        /* Kept for the next call rather than lost. */
        pthread_mutex_lock(&ce->lock);
        tent_notifi_info later = ce->stash; /* arrived meanwhile */
        ce->stash = (tent_notifi_info){0};
        int lost = classic_stash_append(ce, stash.records, stash.num_records) |
                   classic_stash_append(ce, info.records, info.num_records) |
                   classic_stash_append(ce, later.records, later.num_records);
        pthread_mutex_unlock(&ce->lock);
        tent_free_notifs(&later);
        CLASSIC_WARN("getNotifsFromEngine: out of memory for %d "
                     "notification(s); %s",
                     n, lost ? "some are lost" : "kept for the next call");
        n = 0;
    }
    classic_leave(ce, counted);
    tent_free_notifs(&stash);
    tent_free_notifs(&info);
    *size = n;
    return out;
}

CLASSIC_API int freeNotifsMsgBuf(notify_msg_t *msg, int size)
{
    if (!msg)
        return 0;
    if (size < 0) {
        CLASSIC_WARN("freeNotifsMsgBuf: size %d is negative; nothing freed",
                     size);
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    free_msgs(msg, size);
    return 0;
}

CLASSIC_API int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id,
                                  notify_msg_t notify_msg)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    if (!notify_msg.name || !notify_msg.msg) {
        CLASSIC_WARN("genNotifyInEngine: notify_msg name or msg is NULL");
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return CLASSIC_ERR_CONTEXT;
    bool locked;
    tent_engine_t te = classic_te_lock(ce, &locked);
    int rc = te ? tent_send_notifs(te, (tent_segment_id_t)target_id,
                                   notify_msg.name, notify_msg.msg)
                : TENT_ESHUTDOWN;
    if (rc != TENT_OK)
        CLASSIC_WARN("genNotifyInEngine: %s",
                     te ? tent_last_error() : "the engine is stopped");
    classic_te_unlock(ce, locked);
    classic_leave(ce, counted);
    return classic_err_of(rc);
}

/* ---- NIC load ----------------------------------------------------------- */

/* The engine's figures per NIC (tent_get_nic_load_stats): the bytes in
 * flight on each NIC's rails and its EWMA bandwidth. */
CLASSIC_API int getNicLoadStats(transfer_engine_t engine,
                                nic_load_stat_t *stats, size_t *count)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    if (!stats || !count) {
        CLASSIC_WARN("getNicLoadStats: stats or count is NULL");
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return CLASSIC_ERR_CONTEXT;
    _Static_assert(sizeof(nic_load_stat_t) == sizeof(tent_nic_load_stat_t),
                   "Mooncake's and TENT's NIC load records are one layout");
    /* until the engine is sealed, installTransport may replace te */
    pthread_mutex_lock(&ce->lock);
    int rc = ce->te ? tent_get_nic_load_stats(
                          ce->te, (tent_nic_load_stat_t *)stats, count)
                    : TENT_OK;
    if (!ce->te)
        *count = 0;
    pthread_mutex_unlock(&ce->lock);
    if (rc)
        CLASSIC_WARN("getNicLoadStats: %s", tent_last_error());
    classic_leave(ce, counted);
    return rc ? CLASSIC_ERR_INVALID_ARGUMENT : 0;
}
