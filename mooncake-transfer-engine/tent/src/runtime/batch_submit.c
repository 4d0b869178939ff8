/* The submit pipeline: validate every request, resolve and pin its buffers,
 * select transports, then hand the tasks to their transports in groups
 * (a request whose submit failed moves to the next transport at once). */
#include "common/error.h"
#include "common/log.h"
#include "runtime/batch.h"
#include "runtime/engine.h"
#include "runtime/metrics_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROUP 64 /* requests handed to a transport per submit call */

/* Remembers the last segment looked up: the requests of one call mostly
 * share a target, and a segment record (even a closed one) is never freed
 * before the engine. */
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
    unsigned started = 0, writes = 0;
    for (size_t j = 0; j < k; j++) {
        struct tent_task *t = &b->tasks[x[j].slot];
        if (res[j] == TENT_OK) {
            t->state = STATUS_PENDING;
            t->xport = (int8_t)xi;
            started++;
            writes += t->req.opcode == OPCODE_WRITE;
            continue;
        }
        LOG_WARN("transport '%s' refused task %u: %s (%s)", tr->ops->name,
                 x[j].slot, tent_last_error(), tent_strerror(res[j]));
        tmh_refused(e, t, xi);
        again |= tent_task_advance(e, t, res[j]);
    }
    tmh_started(e, xi, started - writes, writes);
    return again;
}

/* Can task t (index i) ride on xfer x, whose last task is i - 1? */
static bool mergeable(const struct tent_engine *e, const struct tent_batch *b,
                      size_t i, const struct tent_task *t,
                      const struct tent_xfer *x)
{
    const struct tent_task *prev = &b->tasks[i - 1];
    return prev->lead == x->slot && prev->state == STATUS_WAITING &&
           t->req.opcode == x->opcode &&
           t->req.target_id == prev->req.target_id &&
           t->dst_buf == x->target_buf && t->src_buf == prev->src_buf &&
           (char *)x->local + x->length == (char *)t->req.source &&
           x->remote + x->length == t->req.target_offset &&
           x->length + t->req.length <= e->merge_max_bytes;
}

/* After transport xi took its groups: a task merged into another's request
 * follows it (in flight with it, or on to its own next transport). */
static bool settle_followers(struct tent_engine *e, struct tent_batch *b,
                             int xi, size_t first, size_t n)
{
    bool again = false;
    unsigned started = 0, writes = 0; /* metrics count attempts per task */
    for (size_t i = first; i < first + n; i++) {
        struct tent_task *t = &b->tasks[i];
        if (t->lead == i || t->state != STATUS_WAITING ||
            t->cands[t->cand_pos] != xi)
            continue;
        const struct tent_task *lead = &b->tasks[t->lead];
        if (lead->state == STATUS_PENDING && lead->xport == xi) {
            t->state = STATUS_PENDING;
            t->xport = (int8_t)xi;
            started++;
            writes += t->req.opcode == OPCODE_WRITE;
            continue;
        }
        t->lead = (uint32_t)i;
        tmh_refused(e, t, xi);
        again |= tent_task_advance(
            e, t, lead->last_error ? lead->last_error : TENT_EIO);
    }
    tmh_started(e, xi, started - writes, writes);
    return again;
}

/* Starts every WAITING task among [first, first+n). */
void tent_batch_dispatch(struct tent_engine *e, struct tent_batch *b,
                         size_t first, size_t n)
{
    struct seg_cache c = {0};
    if (atomic_load(&e->stopping)) {
        for (size_t i = first; i < first + n; i++)
            if (b->tasks[i].state == STATUS_WAITING)
                tent_task_fail(&b->tasks[i], TENT_ESHUTDOWN);
        return;
    }
    bool again = true;
    while (again) {
        again = false;
        for (int xi = 0; xi < e->nxports; xi++) {
            struct tent_xfer x[GROUP];
            size_t k = 0;
            bool merged = false;
            for (size_t i = first; i < first + n; i++) {
                struct tent_task *t = &b->tasks[i];
                if (t->state != STATUS_WAITING || t->cands[t->cand_pos] != xi)
                    continue;
                if (!seg_lookup(e, &c, t->req.target_id)) {
                    /* Closed since the task was accepted: it cannot start. */
                    LOG_WARN("task %zu not started: its target segment %llu "
                             "was closed",
                             i, (unsigned long long)t->req.target_id);
                    tent_task_fail(t, TENT_ENOSEGMENT);
                    continue;
                }
                if (e->merge_requests && k > 0 && i > first &&
                    mergeable(e, b, i, t, &x[k - 1])) {
                    x[k - 1].length += t->req.length;
                    t->lead = x[k - 1].slot;
                    merged = true;
                    continue;
                }
                if (k == GROUP) {
                    again |= flush_group(e, b, xi, x, k);
                    k = 0;
                }
                t->lead = (uint32_t)i;
                fill_xfer(e, &c, t, (uint32_t)i, &x[k++]);
            }
            again |= flush_group(e, b, xi, x, k);
            if (merged)
                again |= settle_followers(e, b, xi, first, n);
        }
    }
}

/* Finds the buffer of seg holding [addr, +len) and pins it (inflight), so
 * that neither unregister nor a descriptor refresh frees it under a task.
 * Caller holds seg->lock (read). */
static struct tent_buffer *find_pin_locked(struct tent_segment *seg,
                                           uint64_t addr, uint64_t len,
                                           bool write)
{
    struct tent_buffer *buf =
        tent_segment_find_access_locked(seg, addr, len, write, !seg->local);
    if (buf)
        atomic_fetch_add_explicit(&buf->inflight, 1, memory_order_relaxed);
    return buf;
}

static struct tent_buffer *find_pinned(struct tent_segment *seg, uint64_t addr,
                                       uint64_t len, bool write)
{
    pthread_rwlock_rdlock(&seg->lock);
    struct tent_buffer *buf = find_pin_locked(seg, addr, len, write);
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
/* buf (pinned by an earlier task of this call, so alive) if it wholly holds
 * [addr, +len), pinned once more; else NULL. */
static struct tent_buffer *repin(struct tent_buffer *buf, uint64_t addr,
                                 uint64_t len)
{
    if (!buf || addr < buf->base || len > buf->length ||
        addr - buf->base > buf->length - len)
        return NULL;
    atomic_fetch_add_explicit(&buf->inflight, 1, memory_order_relaxed);
    return buf;
}

static int resolve(struct tent_engine *e, struct seg_cache *c,
                   const tent_request_t *r, size_t i, struct tent_task *t,
                   const struct tent_task *prev)
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
    bool write = r->opcode == OPCODE_WRITE;
    /* the request before, same direction, found the range granting it */
    bool same = prev && prev->req.opcode == r->opcode;
    t->src_buf =
        same ? repin(prev->src_buf, (uintptr_t)r->source, r->length) : NULL;
    if (!t->src_buf)
        t->src_buf =
            find_pin_locked(e->local, (uintptr_t)r->source, r->length, !write);
    if (!t->src_buf)
        return tent_set_error(TENT_ENOTREG,
                              "tent_submit: request %zu: source [%p, +%llu) is "
                              "not inside registered local memory",
                              i, r->source, (unsigned long long)r->length);
    if (same && prev->req.target_id == r->target_id)
        t->dst_buf = repin(prev->dst_buf, r->target_offset, r->length);
    if (t->dst_buf) {
        /* the buffer the request before found */
    } else if (seg->local) {
        t->dst_buf = find_pin_locked(seg, r->target_offset, r->length, write);
    } else {
        t->dst_buf = find_pinned(seg, r->target_offset, r->length, write);
        if (!t->dst_buf && e->seg_ops) {
            /* The peer may have registered more memory since we fetched its
             * descriptor: refetch once, without holding our own lock. */
            pthread_rwlock_unlock(&e->local->lock);
            if (e->seg_ops->fetch(e, seg->name, seg) == TENT_OK)
                t->dst_buf =
                    find_pinned(seg, r->target_offset, r->length, write);
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
                      struct tent_task *t, const struct tent_task *prev)
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
    /* The candidates depend on the target, both buffers, the hint, the
     * priority and (through policies) the length: a request like the one
     * before it reuses that one's choice without asking the transports. */
    if (prev && prev->dst_buf == dst && prev->src_buf == t->src_buf &&
        prev->req.target_id == t->req.target_id &&
        prev->req.transport_hint == t->req.transport_hint &&
        prev->req.priority == t->req.priority &&
        (e->npolicies == 0 || prev->req.length == t->req.length)) {
        memcpy(t->cands, prev->cands, sizeof(t->cands));
        t->ncand = prev->ncand;
        t->cand_pos = 0;
    } else {
        tent_select_candidates(e, t, seg, dst);
    }
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
        rc = resolve(e, &c, &entries[pinned], pinned, &tasks[pinned],
                     pinned ? &tasks[pinned - 1] : NULL);
    pthread_rwlock_unlock(&e->local->lock);
    for (size_t i = 0; i < count && rc == TENT_OK; i++)
        rc = select_for(e, &c, i, &tasks[i], i ? &tasks[i - 1] : NULL);
    if (rc != TENT_OK)
        for (size_t i = 0; i < pinned; i++)
            tent_task_unpin(&tasks[i]);
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
    struct tent_batch *b = tent_batch_lock(e, batch_id, what);
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
                tent_task_unpin(&b->tasks[first + j]);
            rc = tent_set_error(TENT_ENOMEM, "%s: out of memory", what);
            goto out;
        }
    }
    b->ntasks += count;
    tmh_submit(e, &b->tasks[first], count);
    tent_batch_dispatch(e, b, first, count);
out:
    tent_batch_unlock(b);
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
