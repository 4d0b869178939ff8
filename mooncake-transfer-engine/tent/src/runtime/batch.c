/* Batches, tasks, submission, status and cross-transport failover. */
#include "common/error.h"
#include "common/log.h"
#include "runtime/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_OF(id) ((size_t)((id)&0xffffffffu) - 1)
#define GEN_OF(id)  ((uint32_t)((id) >> 32))
#define GROUP       64 /* requests handed to a transport per submit call */

static void destroy_batch(struct tent_batch *b);

static void batch_put(struct tent_batch *b)
{
    if (atomic_fetch_sub(&b->refs, 1) == 1)
        destroy_batch(b);
}

/* Looks the batch up and returns it locked (and referenced), or NULL with the
 * error set.  The table lock is released before waiting for b->lock. */
static struct tent_batch *batch_lock(struct tent_engine *e, uint64_t id,
                                     const char *what)
{
    struct tent_batch *b = NULL;
    pthread_mutex_lock(&e->batch_lock);
    size_t slot = SLOT_OF(id);
    if (id != TENT_INVALID_BATCH_ID && slot < e->nbatches && e->batches[slot] &&
        e->batches[slot]->id == id) {
        b = e->batches[slot];
        atomic_fetch_add(&b->refs, 1);
    }
    pthread_mutex_unlock(&e->batch_lock);
    if (!b) {
        tent_set_error(TENT_ENOBATCH, "%s: unknown batch id %#llx", what,
                       (unsigned long long)id);
        return NULL;
    }
    pthread_mutex_lock(&b->lock);
    if (b->dead) {
        pthread_mutex_unlock(&b->lock);
        batch_put(b);
        tent_set_error(TENT_ENOBATCH, "%s: batch id %#llx was freed", what,
                       (unsigned long long)id);
        return NULL;
    }
    return b;
}

static void batch_unlock(struct tent_batch *b)
{
    pthread_mutex_unlock(&b->lock);
    batch_put(b);
}

tent_batch_id_t tent_allocate_batch(tent_engine_t engine, size_t batch_size)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e) {
        tent_set_error(TENT_ENULL, "tent_allocate_batch: engine is NULL");
        return TENT_INVALID_BATCH_ID;
    }
    if (batch_size == 0 || batch_size > (1u << 24)) {
        tent_set_error(TENT_EINVAL,
                       "tent_allocate_batch: batch size %zu is outside 1..%u",
                       batch_size, 1u << 24);
        return TENT_INVALID_BATCH_ID;
    }
    struct tent_batch *b = calloc(1, sizeof(*b));
    struct tent_task *tasks = malloc(batch_size * sizeof(*tasks));
    if (!b || !tasks) {
        free(b);
        free(tasks);
        tent_set_error(TENT_ENOMEM,
                       "tent_allocate_batch: out of memory for %zu "
                       "tasks",
                       batch_size);
        return TENT_INVALID_BATCH_ID;
    }
    pthread_mutex_init(&b->lock, NULL);
    atomic_init(&b->refs, 1);
    b->capacity = batch_size;
    b->tasks = tasks;

    pthread_mutex_lock(&e->batch_lock);
    size_t slot = e->nbatches;
    for (size_t i = 0; i < e->nbatches; i++)
        if (!e->batches[i]) {
            slot = i;
            break;
        }
    if (slot == e->nbatches) {
        size_t ncap = e->nbatches ? e->nbatches * 2 : 64;
        struct tent_batch **nb = realloc(e->batches, ncap * sizeof(*nb));
        uint32_t *ng = nb ? realloc(e->batch_gen, ncap * sizeof(*ng)) : NULL;
        if (nb)
            e->batches = nb;
        if (!ng) {
            pthread_mutex_unlock(&e->batch_lock);
            pthread_mutex_destroy(&b->lock);
            free(tasks);
            free(b);
            tent_set_error(TENT_ENOMEM, "tent_allocate_batch: out of memory");
            return TENT_INVALID_BATCH_ID;
        }
        e->batch_gen = ng;
        for (size_t i = e->nbatches; i < ncap; i++) {
            e->batches[i] = NULL;
            e->batch_gen[i] = 0;
        }
        e->nbatches = ncap;
    }
    uint32_t gen = ++e->batch_gen[slot];
    if (gen == 0)
        gen = e->batch_gen[slot] = 1;
    b->id = ((uint64_t)gen << 32) | (uint64_t)(slot + 1);
    e->batches[slot] = b;
    pthread_mutex_unlock(&e->batch_lock);
    return b->id;
}

static void unpin(struct tent_task *t)
{
    if (t->src_buf) {
        atomic_fetch_sub(&t->src_buf->inflight, 1);
        t->src_buf = NULL;
    }
    if (t->dst_buf) {
        atomic_fetch_sub(&t->dst_buf->inflight, 1);
        t->dst_buf = NULL;
    }
}

static void task_fail(struct tent_task *t, int code)
{
    t->state = STATUS_FAILED;
    t->bytes = 0;
    t->last_error = code;
    unpin(t);
}

static const char *xname(struct tent_engine *e, int xi)
{
    return xi >= 0 ? e->xports[xi]->ops->name : "none";
}

/* Moves a task whose current transport failed to its next candidate.
 * Returns true when it was re-queued (state WAITING), false when it is now
 * FAILED for good. */
static bool advance(struct tent_engine *e, struct tent_task *t, int code)
{
    int from = t->cands[t->cand_pos];
    if (t->attempts >= e->max_failover_attempts) {
        if (e->max_failover_attempts > 0)
            LOG_WARN("Task failover limit reached (%d), last transport=%s",
                     e->max_failover_attempts, xname(e, from));
        task_fail(t, code);
        return false;
    }
    if (t->cand_pos + 1 >= t->ncand) {
        LOG_WARN("No more transports available after %s failed",
                 xname(e, from));
        task_fail(t, code);
        return false;
    }
    t->attempts++;
    t->cand_pos++;
    LOG_WARN("Transport failover: %s -> %s (attempt %d/%d)", xname(e, from),
             xname(e, t->cands[t->cand_pos]), t->attempts,
             e->max_failover_attempts);
    t->state = STATUS_WAITING;
    t->xport = -1;
    return true;
}

/* Remembers the last segment looked up: the requests of one call mostly
 * share a target, and an open segment is never freed before the engine. */
struct seg_cache {
    uint64_t id;
    struct tent_segment *seg;
};

static struct tent_segment *seg_lookup(struct tent_engine *e,
                                       struct seg_cache *c, uint64_t id)
{
    if (!c->seg || c->id != id) {
        c->seg = tent_engine_segment(e, id);
        c->id = id;
    }
    return c->seg;
}

static void fill_xfer(struct tent_engine *e, struct seg_cache *c,
                      struct tent_task *t, uint32_t slot, struct tent_xfer *x)
{
    x->slot = slot;
    x->opcode = t->req.opcode;
    x->local = t->req.source;
    x->remote = t->req.target_offset;
    x->length = t->req.length;
    x->target = seg_lookup(e, c, t->req.target_id);
    x->target_buf = t->dst_buf; /* pinned by resolve() until terminal */
}

/* Hands one group to transport xi; returns whether any task needs another
 * round (submit-stage failover). */
static bool flush_group(struct tent_engine *e, struct tent_batch *b, int xi,
                        struct tent_xfer *x, size_t k)
{
    if (k == 0)
        return false;
    struct tent_transport *tr = e->xports[xi];
    int res[GROUP];
    int rc = TENT_OK;
    if (!b->subs[xi])
        rc = tr->ops->alloc_sub_batch(tr, b->capacity, &b->subs[xi]);
    if (rc == TENT_OK) {
        tr->ops->submit(tr, b->subs[xi], x, k, res);
    } else {
        for (size_t j = 0; j < k; j++)
            res[j] = rc;
    }
    bool again = false;
    for (size_t j = 0; j < k; j++) {
        struct tent_task *t = &b->tasks[x[j].slot];
        if (res[j] == TENT_OK) {
            t->state = STATUS_PENDING;
            t->xport = (int8_t)xi;
            continue;
        }
        LOG_WARN("transport '%s' refused task %u: %s (%s)", tr->ops->name,
                 x[j].slot, tent_last_error(), tent_strerror(res[j]));
        again |= advance(e, t, res[j]);
    }
    return again;
}

/* Starts every WAITING task among [first, first+n). */
static void dispatch(struct tent_engine *e, struct tent_batch *b, size_t first,
                     size_t n)
{
    struct seg_cache c = {0};
    bool again = true;
    while (again) {
        again = false;
        for (int xi = 0; xi < e->nxports; xi++) {
            struct tent_xfer x[GROUP];
            size_t k = 0;
            for (size_t i = first; i < first + n; i++) {
                struct tent_task *t = &b->tasks[i];
                if (t->state != STATUS_WAITING || t->cands[t->cand_pos] != xi)
                    continue;
                fill_xfer(e, &c, t, (uint32_t)i, &x[k++]);
                if (k == GROUP) {
                    again |= flush_group(e, b, xi, x, k);
                    k = 0;
                }
            }
            again |= flush_group(e, b, xi, x, k);
        }
    }
}

/* Finds the buffer of seg holding [addr, +len) and pins it (inflight), so
 * that neither unregister nor a descriptor refresh frees it under a task.
 * Caller holds seg->lock (read). */
static struct tent_buffer *find_pin_locked(struct tent_segment *seg,
                                           uint64_t addr, uint64_t len)
{
    struct tent_buffer *buf = tent_segment_find_locked(seg, addr, len);
    if (buf)
        atomic_fetch_add_explicit(&buf->inflight, 1, memory_order_relaxed);
    return buf;
}

static struct tent_buffer *find_pinned(struct tent_segment *seg, uint64_t addr,
                                       uint64_t len)
{
    pthread_rwlock_rdlock(&seg->lock);
    struct tent_buffer *buf = find_pin_locked(seg, addr, len);
    pthread_rwlock_unlock(&seg->lock);
    return buf;
}

/* Checks the fields of request i that need no lookup. */
static int check_request(const tent_request_t *r, size_t i)
{
    if (r->opcode != OPCODE_READ && r->opcode != OPCODE_WRITE)
        return tent_set_error(TENT_EINVAL,
                              "tent_submit: request %zu: opcode %d is neither "
                              "OPCODE_READ nor OPCODE_WRITE",
                              i, r->opcode);
    if (r->length == 0)
        return tent_set_error(TENT_EINVAL,
                              "tent_submit: request %zu: length is 0", i);
    if (!r->source)
        return tent_set_error(TENT_ENULL,
                              "tent_submit: request %zu: source is NULL", i);
    if (r->priority < 0 || r->priority > 2)
        return tent_set_error(
            TENT_EINVAL,
            "tent_submit: request %zu: priority %d is outside "
            "0..2",
            i, r->priority);
    if (r->transport_hint != TRANSPORT_UNSPEC &&
        strcmp(tent_transport_type_name(r->transport_hint), "unknown") == 0)
        return tent_set_error(TENT_EINVAL,
                              "tent_submit: request %zu: transport_hint %d is "
                              "not a TRANSPORT_* value",
                              i, r->transport_hint);
    if ((uintptr_t)r->source + r->length < (uintptr_t)r->source ||
        r->target_offset + r->length < r->target_offset)
        return tent_set_error(TENT_EINVAL,
                              "tent_submit: request %zu: length %llu wraps the "
                              "address space",
                              i, (unsigned long long)r->length);
    return TENT_OK;
}

/* Resolves request i into task t and pins its source and target buffers.
 * Caller holds e->local->lock (read) for the whole submit call; it is let go
 * only around a remote descriptor refetch.  On failure t holds only its own
 * pins (the caller unpins). */
static int resolve(struct tent_engine *e, struct seg_cache *c,
                   const tent_request_t *r, size_t i, struct tent_task *t)
{
    t->req = *r;
    t->src_buf = t->dst_buf = NULL;
    t->bytes = 0;
    t->last_error = 0;
    t->xport = -1;
    t->attempts = 0;
    struct tent_segment *seg = seg_lookup(e, c, r->target_id);
    if (!seg)
        return tent_set_error(
            TENT_ENOSEGMENT,
            "tent_submit: request %zu: unknown segment id %llu", i,
            (unsigned long long)r->target_id);
    t->src_buf = find_pin_locked(e->local, (uintptr_t)r->source, r->length);
    if (!t->src_buf)
        return tent_set_error(TENT_ENOTREG,
                              "tent_submit: request %zu: source [%p, +%llu) is "
                              "not inside registered local memory",
                              i, r->source, (unsigned long long)r->length);
    if (seg->local) {
        t->dst_buf = find_pin_locked(seg, r->target_offset, r->length);
    } else {
        t->dst_buf = find_pinned(seg, r->target_offset, r->length);
        if (!t->dst_buf && e->seg_ops) {
            /* The peer may have registered more memory since we fetched its
             * descriptor: refetch once, without holding our own lock. */
            pthread_rwlock_unlock(&e->local->lock);
            if (e->seg_ops->fetch(e, seg->name, seg) == TENT_OK)
                t->dst_buf = find_pinned(seg, r->target_offset, r->length);
            pthread_rwlock_rdlock(&e->local->lock);
        }
    }
    if (!t->dst_buf)
        return tent_set_error(TENT_ERANGE,
                              "tent_submit: request %zu: target [%#llx, +%llu) "
                              "is outside the buffers of segment '%s'",
                              i, (unsigned long long)r->target_offset,
                              (unsigned long long)r->length, seg->name);
    return TENT_OK;
}

/* Permission and transport selection for a resolved task (no lock held:
 * transports' capability and reachability ops may take segment locks). */
static int select_for(struct tent_engine *e, struct seg_cache *c, size_t i,
                      struct tent_task *t)
{
    struct tent_segment *seg = seg_lookup(e, c, t->req.target_id);
    const struct tent_buffer *dst = t->dst_buf;
    if (t->req.opcode == OPCODE_WRITE && dst->perm == PERM_GLOBAL_READ_ONLY)
        return tent_set_error(TENT_EPERM,
                              "tent_submit: request %zu: target buffer at "
                              "%#llx of segment '%s' is read-only",
                              i, (unsigned long long)dst->base, seg->name);
    if (!seg->local && dst->perm == PERM_LOCAL_READ_WRITE)
        return tent_set_error(
            TENT_EPERM,
            "tent_submit: request %zu: target buffer at "
            "%#llx of segment '%s' is not remotely accessible",
            i, (unsigned long long)dst->base, seg->name);
    tent_select_candidates(e, t, seg, dst);
    if (t->ncand == 0)
        return tent_set_error(
            TENT_ENOTRANSPORT,
            "tent_submit: request %zu: no installed transport "
            "can move %s memory to %s memory of segment '%s'",
            i, t->src_buf->location, dst->location, seg->name);
    t->state = STATUS_WAITING;
    return TENT_OK;
}

/* Validates, resolves and selects every request into tasks[0..count); on
 * failure nothing stays pinned and the error names the request. */
static int prepare_all(struct tent_engine *e, const tent_request_t *entries,
                       size_t count, struct tent_task *tasks)
{
    for (size_t i = 0; i < count; i++) {
        int rc = check_request(&entries[i], i);
        if (rc)
            return rc;
    }
    struct seg_cache c = {0};
    size_t pinned = 0;
    int rc = TENT_OK;
    pthread_rwlock_rdlock(&e->local->lock);
    for (; pinned < count && rc == TENT_OK; pinned++)
        rc = resolve(e, &c, &entries[pinned], pinned, &tasks[pinned]);
    pthread_rwlock_unlock(&e->local->lock);
    for (size_t i = 0; i < count && rc == TENT_OK; i++)
        rc = select_for(e, &c, i, &tasks[i]);
    if (rc != TENT_OK)
        for (size_t i = 0; i < pinned; i++)
            unpin(&tasks[i]);
    return rc;
}

static int submit_common(struct tent_engine *e, tent_batch_id_t batch_id,
                         tent_request_t *entries, size_t count,
                         const char *name, const char *message)
{
    const char *what = name ? "tent_submit_notif" : "tent_submit";
    if (!e)
        return tent_set_error(TENT_ENULL, "%s: engine is NULL", what);
    if (!entries)
        return tent_set_error(TENT_ENULL, "%s: entries is NULL", what);
    if (count == 0)
        return tent_set_error(TENT_EINVAL, "%s: count is 0", what);
    if (name) {
        int rc = tent_notif_validate(name, message, what);
        if (rc)
            return rc;
    }
    struct tent_batch *b = batch_lock(e, batch_id, what);
    if (!b)
        return TENT_ENOBATCH;
    int rc = TENT_OK;
    if (count > b->capacity - b->ntasks) {
        rc = tent_set_error(TENT_ECAPACITY,
                            "%s: %zu request(s) exceed the %zu free of batch "
                            "%#llx's capacity %zu",
                            what, count, b->capacity - b->ntasks,
                            (unsigned long long)batch_id, b->capacity);
        goto out;
    }
    if (name && b->notif_name) {
        rc = tent_set_error(TENT_EINVAL,
                            "%s: batch %#llx already carries a notification",
                            what, (unsigned long long)batch_id);
        goto out;
    }
    size_t first = b->ntasks;
    rc = prepare_all(e, entries, count, &b->tasks[first]);
    if (rc != TENT_OK)
        goto out;
    if (name) {
        b->notif_name = strdup(name);
        b->notif_msg = strdup(message);
        b->notif_target = entries[0].target_id;
        if (!b->notif_name || !b->notif_msg) {
            free(b->notif_name);
            free(b->notif_msg);
            b->notif_name = b->notif_msg = NULL;
            for (size_t j = 0; j < count; j++)
                unpin(&b->tasks[first + j]);
            rc = tent_set_error(TENT_ENOMEM, "%s: out of memory", what);
            goto out;
        }
    }
    b->ntasks += count;
    dispatch(e, b, first, count);
out:
    batch_unlock(b);
    return rc;
}

int tent_submit(tent_engine_t engine, tent_batch_id_t batch_id,
                tent_request_t *entries, size_t count)
{
    return submit_common(tent_engine_cast(engine), batch_id, entries, count,
                         NULL, NULL);
}

int tent_submit_notif(tent_engine_t engine, tent_batch_id_t batch_id,
                      tent_request_t *entries, size_t count, const char *name,
                      const char *message)
{
    if (!name || !message)
        return tent_set_error(TENT_ENULL,
                              "tent_submit_notif: name or message is NULL");
    return submit_common(tent_engine_cast(engine), batch_id, entries, count,
                         name, message);
}

/* Polls one PENDING task; may fail it over. Batch lock held. */
static int poll_task(struct tent_engine *e, struct tent_batch *b, size_t i,
                     bool allow_failover)
{
    struct tent_task *t = &b->tasks[i];
    if (t->state != STATUS_PENDING)
        return TENT_OK;
    int xi = t->xport;
    struct tent_transport *tr = e->xports[xi];
    struct tent_xfer_status st = {0};
    int rc = tr->ops->status(tr, b->subs[xi], (uint32_t)i, &st);
    if (rc < 0)
        return rc; /* unknown outcome: the task stays in flight */
    if (st.state == TENT_XFER_PENDING)
        return TENT_OK;
    if (st.state == TENT_XFER_COMPLETED) {
        t->state = STATUS_COMPLETED;
        t->bytes = st.bytes;
        unpin(t);
        return TENT_OK;
    }
    LOG_DEBUG("task %zu failed on transport '%s' (native code %d)", i,
              tr->ops->name, st.native_code);
    if (!allow_failover) {
        task_fail(t, TENT_EIO);
        return TENT_OK;
    }
    if (advance(e, t, TENT_EIO))
        dispatch(e, b, i, 1);
    return TENT_OK;
}

/* Sends the batch's notification once every task has completed. */
static void maybe_notify(struct tent_engine *e, struct tent_batch *b)
{
    if (!b->notif_name)
        return;
    for (size_t i = 0; i < b->ntasks; i++)
        if (b->tasks[i].state != STATUS_COMPLETED) {
            if (b->tasks[i].state == STATUS_FAILED)
                goto drop;
            return;
        }
    if (tent_engine_send_notif(e, b->notif_target, b->notif_name,
                               b->notif_msg) != TENT_OK)
        LOG_WARN("notification '%s' of batch %#llx not delivered: %s",
                 b->notif_name, (unsigned long long)b->id, tent_last_error());
    goto done;
drop:
    LOG_WARN("notification '%s' of batch %#llx dropped: a task failed",
             b->notif_name, (unsigned long long)b->id);
done:
    free(b->notif_name);
    free(b->notif_msg);
    b->notif_name = b->notif_msg = NULL;
}

static void to_status(const struct tent_task *t, tent_status_t *out)
{
    out->status = t->state == STATUS_WAITING ? STATUS_PENDING : t->state;
    out->transferred_bytes = t->state == STATUS_COMPLETED ? t->bytes : 0;
}

int tent_task_status(tent_engine_t engine, tent_batch_id_t batch_id,
                     size_t task_id, tent_status_t *status)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_task_status: engine is NULL");
    if (!status)
        return tent_set_error(TENT_ENULL, "tent_task_status: status is NULL");
    struct tent_batch *b = batch_lock(e, batch_id, "tent_task_status");
    if (!b)
        return TENT_ENOBATCH;
    int rc = TENT_OK;
    if (task_id >= b->ntasks) {
        rc =
            tent_set_error(TENT_ENOTASK,
                           "tent_task_status: task %zu of batch %#llx does not "
                           "exist (%zu submitted)",
                           task_id, (unsigned long long)batch_id, b->ntasks);
        status->status = STATUS_INVALID;
        status->transferred_bytes = 0;
    } else {
        rc = poll_task(e, b, task_id, e->auto_failover_on_poll);
        to_status(&b->tasks[task_id], status);
        maybe_notify(e, b);
    }
    batch_unlock(b);
    return rc;
}

/* Polls every task; returns the first query error, if any. */
static int poll_all(struct tent_engine *e, struct tent_batch *b)
{
    int first_err = TENT_OK;
    for (size_t i = 0; i < b->ntasks; i++) {
        int rc = poll_task(e, b, i, e->auto_failover_on_poll);
        if (rc && !first_err)
            first_err = rc;
    }
    maybe_notify(e, b);
    return first_err;
}

int tent_overall_status(tent_engine_t engine, tent_batch_id_t batch_id,
                        tent_status_t *status)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL,
                              "tent_overall_status: engine is NULL");
    if (!status)
        return tent_set_error(TENT_ENULL,
                              "tent_overall_status: status is NULL");
    struct tent_batch *b = batch_lock(e, batch_id, "tent_overall_status");
    if (!b)
        return TENT_ENOBATCH;
    int rc = poll_all(e, b);
    bool pending = false, failed = false;
    uint64_t bytes = 0;
    for (size_t i = 0; i < b->ntasks; i++) {
        int s = b->tasks[i].state;
        pending |= s == STATUS_PENDING || s == STATUS_WAITING;
        failed |= s == STATUS_FAILED;
        if (s == STATUS_COMPLETED)
            bytes += b->tasks[i].bytes;
    }
    if (b->ntasks == 0)
        status->status = STATUS_WAITING;
    else if (pending)
        status->status = STATUS_PENDING;
    else if (failed)
        status->status = STATUS_FAILED;
    else
        status->status = STATUS_COMPLETED;
    status->transferred_bytes = bytes;
    batch_unlock(b);
    return rc;
}

int tent_task_status_list(tent_engine_t engine, tent_batch_id_t batch_id,
                          tent_status_t *statuses, size_t *count)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL,
                              "tent_task_status_list: engine is NULL");
    if (!statuses || !count)
        return tent_set_error(
            TENT_ENULL, "tent_task_status_list: statuses or count is NULL");
    struct tent_batch *b = batch_lock(e, batch_id, "tent_task_status_list");
    if (!b)
        return TENT_ENOBATCH;
    int rc;
    if (*count < b->ntasks) {
        rc = tent_set_error(TENT_EOVERFLOW,
                            "tent_task_status_list: room for %zu statuses, "
                            "batch %#llx has %zu tasks",
                            *count, (unsigned long long)batch_id, b->ntasks);
        *count = b->ntasks;
    } else {
        rc = poll_all(e, b);
        for (size_t i = 0; i < b->ntasks; i++)
            to_status(&b->tasks[i], &statuses[i]);
        *count = b->ntasks;
    }
    batch_unlock(b);
    return rc;
}

int tent_cancel_task(tent_engine_t engine, tent_batch_id_t batch_id,
                     size_t task_id)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_cancel_task: engine is NULL");
    struct tent_batch *b = batch_lock(e, batch_id, "tent_cancel_task");
    if (!b)
        return TENT_ENOBATCH;
    int rc = TENT_OK;
    if (task_id >= b->ntasks)
        rc =
            tent_set_error(TENT_ENOTASK,
                           "tent_cancel_task: task %zu of batch %#llx does not "
                           "exist",
                           task_id, (unsigned long long)batch_id);
    else if (b->tasks[task_id].state == STATUS_PENDING)
        rc = tent_set_error(TENT_ENOTSUP,
                            "tent_cancel_task: task %zu is already running on "
                            "transport '%s' and cannot be cancelled; poll it "
                            "until it is terminal",
                            task_id, xname(e, b->tasks[task_id].xport));
    batch_unlock(b);
    return rc;
}

int tent_task_transport(tent_engine_t engine, tent_batch_id_t batch_id,
                        size_t task_id, char *name, size_t name_len)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL,
                              "tent_task_transport: engine is NULL");
    if (!name || name_len == 0)
        return tent_set_error(
            TENT_ENULL, "tent_task_transport: name buffer is NULL or empty");
    struct tent_batch *b = batch_lock(e, batch_id, "tent_task_transport");
    if (!b)
        return TENT_ENOBATCH;
    int rc = TENT_OK;
    if (task_id >= b->ntasks) {
        rc = tent_set_error(TENT_ENOTASK,
                            "tent_task_transport: task %zu of batch %#llx does "
                            "not exist",
                            task_id, (unsigned long long)batch_id);
    } else {
        int xi = b->tasks[task_id].xport;
        const char *n = xi >= 0 ? e->xports[xi]->ops->name : "";
        if (strlen(n) >= name_len)
            rc = tent_set_error(TENT_EOVERFLOW,
                                "tent_task_transport: buffer of %zu bytes is "
                                "too small for '%s'",
                                name_len, n);
        else
            memcpy(name, n, strlen(n) + 1);
    }
    batch_unlock(b);
    return rc;
}

/* Frees the transports' sub-batches; stops at the first that refuses. */
static int free_subs(struct tent_engine *e, struct tent_batch *b)
{
    for (int xi = 0; xi < e->nxports; xi++) {
        if (!b->subs[xi] || e->xport_abandoned[xi])
            continue;
        struct tent_transport *tr = e->xports[xi];
        int rc = tr->ops->free_sub_batch(tr, b->subs[xi]);
        if (rc != TENT_OK)
            return rc;
        b->subs[xi] = NULL;
    }
    return TENT_OK;
}

static void destroy_batch(struct tent_batch *b)
{
    free(b->notif_name);
    free(b->notif_msg);
    free(b->tasks);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* With b locked: EBUSY while a task is in flight, else frees the
 * transports' sub-batches. */
static int release_idle(struct tent_engine *e, struct tent_batch *b)
{
    size_t busy = 0;
    for (size_t i = 0; i < b->ntasks; i++)
        busy += b->tasks[i].state == STATUS_PENDING ||
                b->tasks[i].state == STATUS_WAITING;
    if (busy)
        return tent_set_error(TENT_EBUSY,
                              "tent_free_batch: batch %#llx has %zu task(s) "
                              "still in flight",
                              (unsigned long long)b->id, busy);
    return free_subs(e, b);
}

int tent_free_batch(tent_engine_t engine, tent_batch_id_t batch_id)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_free_batch: engine is NULL");
    struct tent_batch *b = batch_lock(e, batch_id, "tent_free_batch");
    if (!b)
        return TENT_ENOBATCH;
    (void)poll_all(e, b);
    int rc = release_idle(e, b);
    if (rc == TENT_OK) {
        /* Unlink; threads already holding a reference see dead and fail,
         * and the last reference frees the memory. */
        b->dead = true;
        pthread_mutex_lock(&e->batch_lock);
        size_t slot = SLOT_OF(batch_id);
        if (slot < e->nbatches && e->batches[slot] == b)
            e->batches[slot] = NULL;
        pthread_mutex_unlock(&e->batch_lock);
        atomic_fetch_sub(&b->refs, 1); /* the table's; ours is still held */
    }
    batch_unlock(b);
    return rc;
}

void tent_batches_teardown(struct tent_engine *e)
{
    pthread_mutex_lock(&e->batch_lock);
    struct tent_batch **list = e->batches;
    size_t n = e->nbatches;
    e->batches = NULL;
    e->nbatches = 0;
    free(e->batch_gen);
    e->batch_gen = NULL;
    pthread_mutex_unlock(&e->batch_lock);
    for (size_t s = 0; s < n; s++) {
        struct tent_batch *b = list[s];
        if (!b)
            continue;
        pthread_mutex_lock(&b->lock);
        (void)poll_all(e, b);
        size_t busy = 0;
        for (size_t i = 0; i < b->ntasks; i++)
            busy += b->tasks[i].state == STATUS_PENDING;
        int rc = busy ? TENT_EBUSY : free_subs(e, b);
        b->dead = true;
        pthread_mutex_unlock(&b->lock);
        if (rc != TENT_OK) {
            /* Leave the batch, its sub-batches and its pinned buffers alone:
             * a backend may still be working on them. */
            if (busy)
                LOG_WARN("batch %#llx left allocated at teardown: %zu "
                         "task(s) still in flight",
                         (unsigned long long)b->id, busy);
            else
                LOG_WARN("batch %#llx left allocated at teardown: a "
                         "transport refused to free its sub-batch: %s",
                         (unsigned long long)b->id, tent_last_error());
            continue;
        }
        batch_put(b);
    }
    free(list);
}
