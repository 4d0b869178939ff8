/* The submit pipeline: validate every request, resolve and pin its buffers,
 * select transports, then hand the tasks to their transports in groups
 * (a request whose submit failed moves to the next transport at once). */
#include "common/clock.h"
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
    /* A target range missed a remote segment's cached descriptor: refetch
     * it (with the batch lock released) and prepare again, once per call. */
    struct tent_segment *refetch;
    bool refetched;
    /* repins of this call not yet applied (source, target), and the like
     * tasks just before the one being resolved, which take one more pin
     * of both its predecessor's buffers each */
    struct tent_pin_run runs[2];
    int likes;
    /* the last task of this call resolved for a read [0] and a write [1],
     * and the first of the chain of like tasks it ends (resolve) */
    const struct tent_task *last[2], *head[2];
    /* The last peer handle taken, with one count of its own so that it
     * stays open while cached (peer_put by cache_drop). */
    struct tent_peer_ref *pref;
    const struct tent_segment *pseg;
    uint64_t pinc;
    /* Tasks given pref since its count was last brought up to date: added
     * in one atomic operation before they are handed to a transport (the
     * cache's own count keeps pref open meanwhile). */
    int pending;
};

static void cache_flush(struct seg_cache *c)
{
    if (c->pending) {
        atomic_fetch_add_explicit(&c->pref->tasks, c->pending,
                                  memory_order_relaxed);
        c->pending = 0;
    }
}

static void cache_drop(struct seg_cache *c)
{
    cache_flush(c);
    if (c->pref)
        tent_peer_put(c->pref);
    c->pref = NULL;
}

/* The handle of transport xi for task t's target (seg), counted for t. */
static int task_peer(struct tent_engine *e, struct seg_cache *c,
                     const struct tent_segment *seg, int xi,
                     const struct tent_task *t, struct tent_peer_ref **out)
{
    if (c->pref && c->pseg == seg && c->pref->xi == xi &&
        c->pinc == t->incarnation) {
        c->pending++;
        *out = c->pref;
        return TENT_OK;
    }
    /* one count for the task, one for the cache */
    struct tent_peer_ref *r;
    int rc =
        tent_peer_get(e, (struct tent_segment *)seg, xi, t->incarnation, 2, &r);
    if (rc)
        return rc;
    cache_drop(c);
    c->pref = r;
    c->pseg = seg;
    c->pinc = t->incarnation;
    *out = r;
    return TENT_OK;
}

/* prepare_all's answer when a descriptor must be refetched first. */
#define NEED_REFETCH 1

static struct tent_segment *seg_lookup(struct tent_engine *e,
                                       struct seg_cache *c, uint64_t id)
{
    if (!c->seg || c->id != id) {
        c->seg = tent_engine_segment(e, id);
        c->id = id;
    }
    return c->seg;
}

/* Whether WRITE t must reach stable storage: a transport it was routed to
 * so far (the one now, or one it failed over from) is durable.  The
 * stricter durability applies; a failover never lowers it. */
static bool task_durable(const struct tent_engine *e, const struct tent_task *t)
{
    if (t->req.opcode != OPCODE_WRITE)
        return false;
    for (int i = 0; i <= t->cand_pos && i < t->ncand; i++)
        if (e->xports[t->cands[i]]->durable)
            return true;
    return false;
}

static void fill_xfer(struct tent_engine *e, struct seg_cache *c,
                      struct tent_task *t, uint32_t slot, struct tent_xfer *x,
                      struct tent_peer_ref *peer)
{
    t->peer = peer;
    x->peer = peer->h;
    x->slot = slot;
    x->opcode = t->req.opcode;
    x->priority = t->req.priority;
    x->local = t->req.source;
    x->remote = t->req.target_offset;
    x->length = t->req.length;
    x->target = &seg_lookup(e, c, t->req.target_id)->v;
    x->target_buf = t->dst_buf; /* pinned by resolve() until terminal */
    x->durable = task_durable(e, t);
}

/* One group for one transport: the requests handed over in one submit call
 * and the tasks each carries, claimed: request j is task x[j].slot (its
 * lead) and the ntasks[j] - 1 followers merged into it, the tasks right
 * after it. */
struct group {
    struct tent_xfer x[GROUP];
    struct tent_xfer_result res[GROUP];
    uint32_t ntasks[GROUP];
    size_t k; /* requests */
    /* The tasks of the call being dispatched are as submit left them, but
     * for those merged in order into this group: the batch lock has been
     * held since and none failed or moved on (set by submit_common;
     * cleared by a handover, which unlocks, a failure, an advance, and
     * after the first round of passes). */
    bool fresh;
};

/* Records the m tasks of one request, lead and the followers merged into
 * it, COMPLETED on transport xi as tent_task_complete would one by one:
 * merged tasks share the lead's buffers and opcode (mergeable), so their
 * pins are released in one step.  Releases their claims. */
static void complete_merged(struct tent_engine *e, struct tent_batch *b,
                            struct tent_task *lead, uint32_t m, int xi,
                            struct tent_pin_run runs[2],
                            struct tent_peer_run *peers)
{
    if (m == 1) { /* one task: the per-task path costs less */
        bool msg = lead->error_msg != NULL;
        tent_slot_release(b, lead);
        tent_task_complete(e, lead, xi, lead->req.length, runs, peers);
        b->ndone++;
        b->done_bytes += lead->bytes;
        b->done_msgs |= msg;
        return;
    }
    tent_task_unpeer_run(lead, peers); /* followers hold none */
    if (lead->src_buf)
        tent_pin_run_add(&runs[0], lead->src_buf, -(int)m);
    if (lead->dst_buf)
        tent_pin_run_add(&runs[1], lead->dst_buf, -(int)m);
    /* rq: one is in the runtime queue; msgs: one keeps a message.  The
     * metrics count the untimed ones of the lead's length in one update
     * (alike), the others one by one. */
    bool rq = false, msgs = false;
    const uint64_t len0 = lead->req.length;
    uint64_t bytes = 0;
    uint32_t alike = 0;
    for (uint32_t k = 0; k < m; k++) {
        struct tent_task *t = &lead[k];
        uint64_t len = t->req.length;
        t->busy = false;
        t->state = STATUS_COMPLETED;
        t->xport = t->last_xport = (int8_t)xi;
        t->bytes = len;
        bytes += len;
        t->src_buf = t->dst_buf = NULL;
        rq |= t->rqn != NULL;
        msgs |= t->error_msg != NULL;
        if (t->t_submit || t->req.deadline_ns)
            tmh_completed(e, t, xi, len);
        else if (len == len0)
            alike++;
        else
            tmh_completed_alike(e, t->req.opcode, xi, len, 1);
    }
    b->ndone += m;
    b->done_bytes += bytes;
    b->done_msgs |= msgs;
    tmh_completed_alike(e, lead->req.opcode, xi, len0, alike);
    if (rq)
        for (uint32_t k = 0; k < m; k++)
            if (lead[k].rqn)
                tent_rq_end(&lead[k], true, lead[k].bytes);
    b->nbusy -= (int)m;
    if (b->nbusy == 0 && b->idle_waiters)
        pthread_cond_broadcast(&b->idle);
}

/* Hands group g to transport xi with the batch lock released; the tasks in
 * it are claimed.  Returns whether any task needs another round
 * (submit-stage failover). */
static bool flush_group(struct tent_engine *e, struct tent_batch *b, int xi,
                        struct group *g)
{
    if (g->k == 0)
        return false;
    struct tent_transport *tr = e->xports[xi];
    int rc = TENT_OK;
    if (!b->subs[xi])
        rc = tr->ops->alloc_sub_batch(tr, b->capacity, &b->subs[xi]);
    if (rc == TENT_OK) {
        struct tent_sub_batch *sb = b->subs[xi];
        for (size_t j = 0; j < g->k; j++)
            g->res[j].done = false;
        g->fresh = false;
        pthread_mutex_unlock(&b->lock);
        tr->ops->submit(tr, sb, g->x, g->k, g->res);
        pthread_mutex_lock(&b->lock);
    } else {
        for (size_t j = 0; j < g->k; j++)
            tent_xres_fail(&g->res[j], rc, 0);
    }
    bool again = false;
    unsigned started = 0, writes = 0;
    for (size_t j = 0; j < g->k; j++) {
        struct tent_task *t = &b->tasks[g->x[j].slot];
        const struct tent_xfer_result *r = &g->res[j];
        if (r->code == TENT_OK) {
            t->state = STATUS_PENDING;
            t->xport = t->last_xport = (int8_t)xi;
            started++;
            writes += t->req.opcode == OPCODE_WRITE;
            continue;
        }
        LOG_DEBUG("transport '%s' refused task %u: %s (%s, native %d)",
                  tr->ops->name, g->x[j].slot, r->msg, tent_strerror(r->code),
                  r->native);
        tent_task_unpeer(t);
        tmh_refused(e, t, xi);
        again |= tent_task_advance(e, t, r->code, r->native, r->msg);
    }
    tmh_started(e, xi, started - writes, writes);
    /* Followers merged into a request follow its lead: in flight with it,
     * or on to their own next transport with its cause.  A request the
     * transport completed in submit is recorded now, lead and followers,
     * as a status poll would have. */
    started = writes = 0;
    struct tent_pin_run runs[2] = {{0}};
    struct tent_peer_run peers = {0};
    bool any_done = false;
    for (size_t j = 0; j < g->k; j++) {
        struct tent_task *lead = &b->tasks[g->x[j].slot];
        bool ok = lead->state == STATUS_PENDING && lead->xport == xi;
        bool done = ok && g->res[j].done;
        any_done |= done;
        if (done) {
            uint32_t m = g->ntasks[j];
            started += m - 1;
            writes += lead->req.opcode == OPCODE_WRITE ? m - 1 : 0;
            complete_merged(e, b, lead, m, xi, runs, &peers);
            continue;
        }
        for (size_t i = g->x[j].slot; i < g->x[j].slot + g->ntasks[j]; i++) {
            struct tent_task *t = &b->tasks[i];
            tent_slot_release(b, t);
            if (t != lead && ok) {
                t->state = STATUS_PENDING;
                t->xport = t->last_xport = (int8_t)xi;
                started++;
                writes += t->req.opcode == OPCODE_WRITE;
            }
            if (done) {
                tent_task_complete(e, t, xi, t->req.length, runs, &peers);
                continue;
            }
            if (t == lead || ok)
                continue;
            t->lead = (uint32_t)i;
            tmh_refused(e, t, xi);
            again |= tent_task_advance(
                e, t, lead->last_error ? lead->last_error : TENT_EIO,
                lead->native_error, lead->error_msg);
        }
    }
    tmh_started(e, xi, started - writes, writes);
    if (any_done) {
        tent_pin_run_flush(&runs[0]);
        tent_pin_run_flush(&runs[1]);
        tent_peer_run_flush(&peers);
    }
    g->k = 0;
    return again;
}

/* Whether [a, +al) and [b, +bl) share a byte. */
static bool overlap(uint64_t a, uint64_t al, uint64_t b, uint64_t bl)
{
    return a < b + bl && b < a + al;
}

/* Can task t (index i) ride on xfer x, whose last task is i - 1?  A copy
 * within this process whose merged source would overlap its merged target
 * is not merged: one large copy does not do what the chain of small ones
 * does when one reads what the one before wrote. */
static bool mergeable(const struct tent_engine *e, const struct tent_batch *b,
                      size_t i, const struct tent_task *t,
                      const struct tent_xfer *x)
{
    const struct tent_task *prev = &b->tasks[i - 1];
    if (x->target->local &&
        overlap((uintptr_t)x->local, x->length + t->req.length, x->remote,
                x->length + t->req.length))
        return false;
    /* Following prev since submit (never moved since): the same opcode,
     * target, priority, source buffer and incarnation, and contiguous. */
    if (t->follows)
        return prev->lead == x->slot && prev->busy &&
               t->dst_buf == x->target_buf &&
               x->length + t->req.length <= e->merge_max_bytes;
    return prev->lead == x->slot && prev->busy && t->req.opcode == x->opcode &&
           t->req.target_id == prev->req.target_id &&
           t->req.priority == prev->req.priority &&
           t->dst_buf == x->target_buf && t->src_buf == prev->src_buf &&
           t->incarnation == prev->incarnation &&
           (char *)x->local + x->length == (char *)t->req.source &&
           x->remote + x->length == t->req.target_offset &&
           x->length + t->req.length <= e->merge_max_bytes;
}

static bool refetch_waiting(struct tent_engine *e, struct tent_batch *b,
                            size_t first, size_t n);

/* Merges into g's last request, whose last task is i, the tasks after i
 * (before end) that follow their predecessor since submit and wait for
 * transport xi, while mergeable would take them; claims them.  Returns the
 * index of the last task merged (i when none). */
static size_t absorb(const struct tent_engine *e, struct tent_batch *b,
                     struct group *g, size_t i, size_t end, int xi)
{
    struct tent_xfer *x = &g->x[g->k - 1];
    /* what the loop compares, in locals: its stores to tasks may alias */
    const bool local = x->target->local;
    const struct tent_buffer *tbuf = x->target_buf;
    const uint32_t slot = x->slot;
    const uintptr_t xl = (uintptr_t)x->local;
    const uint64_t xr = x->remote, max = e->merge_max_bytes;
    uint64_t len = x->length;
    /* Fresh (g->fresh: as submit left them), a task that follows is like
     * the one before it, so in x's target buffer with x's selection,
     * waiting and unclaimed: only the size and the overlap are asked. */
    const bool fresh = g->fresh;
    struct tent_task *t = &b->tasks[i + 1], *stop = &b->tasks[end];
    for (; t < stop; t++) {
        /* follows: on its first transport (cands[0]), same target, source
         * buffer, opcode, priority and incarnation as the task before (in
         * x), contiguous with it, and needing no refetch */
        uint64_t nlen = len + t->req.length;
        if (!t->follows || nlen > max ||
            (local && overlap(xl, nlen, xr, nlen)) ||
            (!fresh && (t->state != STATUS_WAITING || t->busy ||
                        t->cands[0] != xi || t->dst_buf != tbuf)))
            break;
        len = nlen;
        t->lead = slot;
        t->busy = true;
    }
    size_t j = (size_t)(t - b->tasks);
    uint32_t m = (uint32_t)(j - 1 - i);
    x->length = len;
    g->ntasks[g->k - 1] += m;
    b->nbusy += (int)m;
    return j - 1;
}

/* Fails the tasks of [first, first + n) still waiting to start. */
static void fail_waiting(struct tent_batch *b, size_t first, size_t n, int code,
                         const char *why)
{
    for (size_t i = first; i < first + n; i++) {
        struct tent_task *t = &b->tasks[i];
        if (t->state == STATUS_WAITING && !t->busy)
            tent_task_fail(t, code, 0, why);
    }
}

/* One pass of dispatch over transport xi: groups the waiting tasks whose
 * current candidate it is (merging like ones) and hands them over.
 * *refetch is set when a task waits for its descriptor.  Returns whether
 * any task needs another round. */
static bool dispatch_pass(struct tent_engine *e, struct tent_batch *b,
                          struct seg_cache *c, struct group *g, int xi,
                          size_t first, size_t n, bool *refetch)
{
    bool again = false;
    g->k = 0;
    for (size_t i = first; i < first + n; i++) {
        struct tent_task *t = &b->tasks[i];
        if (t->state != STATUS_WAITING || t->busy)
            continue;
        if (t->needs_refetch) {
            *refetch = true;
            continue;
        }
        if (t->cands[t->cand_pos] != xi)
            continue;
        if (!seg_lookup(e, c, t->req.target_id)) {
            /* Closed since the task was accepted: it cannot start. */
            LOG_WARN("task %zu not started: its target segment %llu "
                     "was closed",
                     i, (unsigned long long)t->req.target_id);
            tent_task_fail(t, TENT_ENOSEGMENT, 0,
                           "the target segment was closed before the "
                           "task started");
            g->fresh = false;
            continue;
        }
        /* Requests over an overlapping source and target keep their
         * order: never merged (each is its own copy). */
        if (e->merge_requests && g->k > 0 && i > first &&
            mergeable(e, b, i, t, &g->x[g->k - 1])) {
            g->x[g->k - 1].length += t->req.length;
            /* one that follows is on its first transport, the lead's
             * now: nothing to add */
            if (!t->follows)
                g->x[g->k - 1].durable |= task_durable(e, t);
            g->ntasks[g->k - 1]++;
            t->lead = g->x[g->k - 1].slot;
            tent_slot_claim(b, t);
            i = absorb(e, b, g, i, first + n, xi);
            continue;
        }
        struct tent_peer_ref *pr = NULL;
        int prc = task_peer(e, c, c->seg, xi, t, &pr);
        if (prc == TENT_ESTALE) {
            /* resolved in a descriptor of a process gone since */
            tmh_failed(e, t);
            tent_task_fail(t, prc, 0, tent_last_error());
            g->fresh = false;
            continue;
        }
        if (prc) {
            again |= tent_task_advance(e, t, prc, 0, tent_last_error());
            g->fresh = false;
            continue;
        }
        if (g->k == GROUP) {
            cache_flush(c);
            again |= flush_group(e, b, xi, g);
        }
        t->lead = (uint32_t)i;
        tent_slot_claim(b, t);
        g->ntasks[g->k] = 1;
        fill_xfer(e, c, t, (uint32_t)i, &g->x[g->k++], pr);
        if (e->merge_requests)
            i = absorb(e, b, g, i, first + n, xi);
    }
    cache_flush(c);
    again |= flush_group(e, b, xi, g);
    return again;
}

/* tent_batch_dispatch; fresh: called by submit for the tasks it just
 * prepared, with the batch lock held since (struct group). */
static void batch_dispatch(struct tent_engine *e, struct tent_batch *b,
                           size_t first, size_t n, bool fresh)
{
    struct seg_cache c = {0};
    if (atomic_load(&e->stopping)) {
        fail_waiting(b, first, n, TENT_ESHUTDOWN,
                     "the engine is being destroyed");
        return;
    }
    /* the engine's spare group, unless another dispatch holds it */
    struct group *g = atomic_exchange(&e->spare_group, NULL);
    if (!g)
        g = malloc(sizeof(*g));
    if (!g) {
        fail_waiting(b, first, n, TENT_ENOMEM,
                     "out of memory starting the task");
        return;
    }
    bool again = true;
    g->fresh = fresh;
    while (again) {
        again = false;
        /* a task waiting for its descriptor: refetch_waiting has work */
        bool refetch = false;
        for (int xi = 0; xi < e->nxports; xi++)
            again |= dispatch_pass(e, b, &c, g, xi, first, n, &refetch);
        g->fresh = false; /* a task may have moved on; refetch unlocks */
        if (!again && (refetch || e->nxports == 0)) {
            cache_drop(&c);
            again = refetch_waiting(e, b, first, n);
        }
    }
    cache_drop(&c);
    free(atomic_exchange(&e->spare_group, g));
}

void tent_batch_dispatch(struct tent_engine *e, struct tent_batch *b,
                         size_t first, size_t n)
{
    batch_dispatch(e, b, first, n, false);
}

/* Finds the buffer of seg holding [addr, +len) and pins it (inflight), so
 * that neither unregister nor a descriptor refresh frees it under a task.
 * Caller holds seg->lock (read). */
static struct tent_buffer *find_pin_locked(struct tent_segment *seg,
                                           uint64_t addr, uint64_t len,
                                           bool write)
{
    struct tent_buffer *buf = tent_segment_find_access_locked(
        seg, addr, len, write, !seg->v.local, NULL);
    if (buf)
        atomic_fetch_add_explicit(&buf->inflight, 1, memory_order_relaxed);
    return buf;
}

/* find_pin_locked taking the lock; *inc gets the incarnation of the
 * descriptor the buffer was found in. */
static struct tent_buffer *find_pinned(struct tent_segment *seg, uint64_t addr,
                                       uint64_t len, bool write, uint64_t *inc)
{
    pthread_rwlock_rdlock(&seg->lock);
    struct tent_buffer *buf = find_pin_locked(seg, addr, len, write);
    *inc = atomic_load_explicit(&seg->incarnation, memory_order_relaxed);
    pthread_rwlock_unlock(&seg->lock);
    return buf;
}

/* Checks the fields of request i that need no lookup.  *hint_ok is a
 * transport_hint already found valid in this call: the requests of a call
 * mostly share one, and naming it means a registry walk. */
static int check_request(const tent_request_t *r, size_t i, int *hint_ok)
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
        r->transport_hint != *hint_ok &&
        strcmp(tent_transport_type_name(r->transport_hint), "unknown") == 0)
        return tent_set_error(TENT_EINVAL,
                              "tent_submit: request %zu: transport_hint %d is "
                              "not a TRANSPORT_* value",
                              i, r->transport_hint);
    *hint_ok = r->transport_hint;
    if ((uintptr_t)r->source + r->length < (uintptr_t)r->source ||
        r->target_offset + r->length < r->target_offset)
        return tent_set_error(TENT_EINVAL,
                              "tent_submit: request %zu: length %llu wraps the "
                              "address space",
                              i, (unsigned long long)r->length);
    return TENT_OK;
}

/* buf (pinned by an earlier task of this call, so alive) if it wholly holds
 * [addr, +len), pinned once more (counted in run, applied by prepare_all
 * before any task leaves it); else NULL. */
static struct tent_buffer *repin(struct tent_pin_run *run,
                                 struct tent_buffer *buf, uint64_t addr,
                                 uint64_t len)
{
    if (!buf || addr < buf->base || len > buf->length ||
        addr - buf->base > buf->length - len)
        return NULL;
    tent_pin_run_add(run, buf, 1);
    return buf;
}

/* Whether [addr, +len) lies wholly inside buf. */
static inline bool inside(const struct tent_buffer *buf, uint64_t addr,
                          uint64_t len)
{
    return addr >= buf->base && len <= buf->length &&
           addr - buf->base <= buf->length - len;
}

/* Whether request r has the options of task prev (the head of the chain
 * it would continue, in its direction): same target, priority, hint and
 * intent, no deadline or policy name (length too when policies may look
 * at it).  With its range inside prev's two buffers (resolve), the same
 * lookups and checks give the same answers. */
static inline bool like_prev(const struct tent_engine *e,
                             const struct tent_task *prev,
                             const tent_request_t *r)
{
    return prev->req.target_id == r->target_id &&
           prev->req.priority == r->priority &&
           prev->req.transport_hint == r->transport_hint &&
           prev->req.intent_type == r->intent_type && !r->deadline_ns &&
           !prev->req.deadline_ns && prev->policy == -1 &&
           !(r->policy_name && r->policy_name[0]) &&
           (e->npolicies == 0 || prev->req.length == r->length);
}

/* Applies the pins of the chain of like tasks before t (see resolve). */
static inline void flush_likes(struct seg_cache *c, const struct tent_task *t)
{
    if (c->likes) {
        tent_pin_run_add(&c->runs[0], t[-1].src_buf, c->likes);
        tent_pin_run_add(&c->runs[1], t[-1].dst_buf, c->likes);
        c->likes = 0;
    }
}

_Static_assert(offsetof(struct tent_task, needs_refetch) ==
                       offsetof(struct tent_task, busy) + 1 &&
                   offsetof(struct tent_task, refetched) ==
                       offsetof(struct tent_task, busy) + 2 &&
                   offsetof(struct tent_task, xport) ==
                       offsetof(struct tent_task, busy) + 3 &&
                   offsetof(struct tent_task, last_xport) ==
                       offsetof(struct tent_task, busy) + 4 &&
                   offsetof(struct tent_task, attempts) ==
                       offsetof(struct tent_task, busy) + 5 &&
                   offsetof(struct tent_task, policy) ==
                       offsetof(struct tent_task, busy) + 6 &&
                   offsetof(struct tent_task, like) ==
                       offsetof(struct tent_task, busy) + 7,
               "task_init's flags are in this order");

/* The fields of task t that resolve sets alike for every request r;
 * like is the caller's (the flags are one word: engine.h). */
static inline void task_init(struct tent_task *t, const tent_request_t *r,
                             bool like)
{
    t->req = *r;
    t->req.policy_name = NULL; /* the caller's string: resolved below */
    /* bytes, the error (a fresh slot: task slots are never reused), peer,
     * rqn, t_submit (untimed unless tmh_submit picks it) */
    memset((char *)t + offsetof(struct tent_task, bytes), 0,
           offsetof(struct tent_task, t_attempt) -
               offsetof(struct tent_task, bytes));
    /* busy, needs_refetch, refetched false; xport, last_xport -1;
     * attempts 0; policy -1; like: one store */
    const uint8_t flags[8] = {0, 0, 0, 0xff, 0xff, 0, 0xff, like};
    memcpy((char *)t + offsetof(struct tent_task, busy), flags, sizeof(flags));
}

/* Checks request i (check_request, or, for one like the head of the chain
 * it continues, only what may differ from the head's checked fields),
 * then resolves it into task t and pins its source and target buffers.
 * Caller holds e->local->lock (read).  A request that fails its check
 * sets *invalid and leaves t alone; on any other failure (or NEED_REFETCH)
 * t holds only its own pins (the caller unpins). */
static int resolve(struct tent_engine *e, struct seg_cache *c,
                   const tent_request_t *r, size_t i, struct tent_task *t,
                   int *hint_ok, bool *invalid)
{
    bool write = r->opcode == OPCODE_WRITE;
    const struct tent_task *last = c->last[write];
    /* The task before is the last one in this direction: it is like the
     * chain's head (equal in everything like_prev compares, in the same
     * buffers), so this one is compared with the head, whose fields no
     * iteration writes, and with the caller's request before (r[-1]).
     * Its opcode, priority and hint are the head's, which passed
     * check_request; inside its source buffer it has a source and does
     * not wrap; its target's end is checked here. */
    const struct tent_task *head = c->head[write];
    bool like = last && last + 1 == t && r->opcode == head->req.opcode &&
                like_prev(e, head, r) && r->length &&
                r->target_offset + r->length > r->target_offset &&
                inside(head->src_buf, (uintptr_t)r->source, r->length) &&
                inside(head->dst_buf, r->target_offset, r->length);
    if (!like) {
        int rc = check_request(r, i, hint_ok);
        if (rc) {
            *invalid = true;
            return rc;
        }
    }
    task_init(t, r, like);
    if (like) {
        /* The request before, in the same direction: its buffers hold
         * this one too (pinned once more, counted in likes until the
         * chain ends) and its selection applies. */
        t->src_buf = head->src_buf;
        t->dst_buf = head->dst_buf;
        c->likes++;
        t->incarnation = head->incarnation;
        t->follows =
            (uintptr_t)r[-1].source + r[-1].length == (uintptr_t)r->source &&
            r[-1].target_offset + r[-1].length == r->target_offset;
        c->last[write] = t;
        return TENT_OK;
    }
    flush_likes(c, t);
    t->follows = false;
    t->src_buf = t->dst_buf = NULL;
    if (r->deadline_ns) { /* read only when there is a deadline */
        uint64_t now = tent_now_ns();
        uint64_t us =
            r->deadline_ns > now ? (r->deadline_ns - now + 999) / 1000 : 0;
        t->dl_window_us = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    }
    struct tent_segment *seg = seg_lookup(e, c, r->target_id);
    if (!seg)
        return tent_set_error(
            TENT_ENOSEGMENT,
            "tent_submit: request %zu: unknown segment id %llu", i,
            (unsigned long long)r->target_id);
    if (r->policy_name && r->policy_name[0]) {
        int k = tent_policy_named(e, r->policy_name, seg->type);
        if (k < 0)
            return tent_set_error(TENT_EINVAL,
                                  "tent_submit: request %zu: policy_name "
                                  "'%.64s' names no policy rule for %s "
                                  "segments",
                                  i, r->policy_name,
                                  seg->type == TYPE_FILE ? "file" : "memory");
        t->policy = (int8_t)k;
    }
    if (r->intent_type < TENT_INTENT_UNSPEC ||
        r->intent_type > TENT_INTENT_STAGING_INTERNAL)
        return tent_set_error(TENT_EINVAL,
                              "tent_submit: request %zu: intent_type %d is "
                              "not a TENT_INTENT_* value",
                              i, r->intent_type);
    /* the last request of this call in the same direction found the range
     * granting it (reads and writes may alternate) */
    const struct tent_task *prev = last;
    bool same = prev != NULL;
    t->src_buf = same ? repin(&c->runs[0], prev->src_buf, (uintptr_t)r->source,
                              r->length)
                      : NULL;
    if (!t->src_buf)
        t->src_buf =
            find_pin_locked(e->local, (uintptr_t)r->source, r->length, !write);
    if (!t->src_buf)
        return tent_set_error(TENT_ENOTREG,
                              "tent_submit: request %zu: source [%p, +%llu) is "
                              "not inside registered local memory",
                              i, r->source, (unsigned long long)r->length);
    if (same && prev->req.target_id == r->target_id)
        t->dst_buf =
            repin(&c->runs[1], prev->dst_buf, r->target_offset, r->length);
    if (t->dst_buf) {
        /* the buffer the request before found */
        t->incarnation = prev->incarnation;
    } else if (seg->v.local) {
        t->dst_buf = find_pin_locked(seg, r->target_offset, r->length, write);
        t->incarnation =
            atomic_load_explicit(&seg->incarnation, memory_order_relaxed);
    } else {
        t->dst_buf = find_pinned(seg, r->target_offset, r->length, write,
                                 &t->incarnation);
        if (!t->dst_buf && e->seg_ops && !c->refetched) {
            /* The peer may have registered more memory since we fetched its
             * descriptor: the caller refetches it, once, with no lock held
             * (a network round trip), and prepares the call again. */
            c->refetch = seg;
            return NEED_REFETCH;
        }
    }
    if (!t->dst_buf)
        return tent_set_error(TENT_ERANGE,
                              "tent_submit: request %zu: target [%#llx, +%llu) "
                              "is outside the buffers of segment '%s'",
                              i, (unsigned long long)r->target_offset,
                              (unsigned long long)r->length, seg->v.name);
    c->last[write] = c->head[write] = t;
    return TENT_OK;
}

/* A buffer's end, saturated at the top of the address space. */
static inline uint64_t end_of(const struct tent_buffer *buf)
{
    return buf->length > UINT64_MAX - buf->base ? UINT64_MAX
                                                : buf->base + buf->length;
}

/* A request's priority and transport hint, compared as one word. */
_Static_assert(offsetof(tent_request_t, transport_hint) ==
                       offsetof(tent_request_t, priority) + sizeof(int) &&
                   sizeof(int) == 4,
               "priority and transport_hint are adjacent ints");
static inline uint64_t prio_hint(const tent_request_t *r)
{
    uint64_t v;
    memcpy(&v, (const char *)r + offsetof(tent_request_t, priority), sizeof(v));
    return v;
}

/* Requests r[0..n) after the one just resolved (task t[-1], which ended
 * resolve in its direction): resolves the leading ones that resolve would
 * find like the head of t[-1]'s chain into t[0..), exactly as its like
 * branch does, with what the chain shares kept in locals rather than read
 * again from the head after every store to a task.  Returns how many. */
static size_t resolve_likes(const struct tent_engine *e, struct seg_cache *c,
                            const tent_request_t *r, size_t n,
                            struct tent_task *t)
{
    bool write = t[-1].req.opcode == OPCODE_WRITE;
    const struct tent_task *head = c->head[write];
    if (c->last[write] != &t[-1] || head->req.deadline_ns || head->policy != -1)
        return 0;
    const tent_request_t h = head->req;
    struct tent_buffer *sb = head->src_buf, *db = head->dst_buf;
    /* a range is inside a buffer when it starts at or after its base and
     * ends at or before its end (saturated: a peer's descriptor may give
     * a buffer that wraps), and does not wrap itself */
    const uint64_t sbase = sb->base, send_max = end_of(sb);
    const uint64_t dbase = db->base, dend_max = end_of(db);
    const uint64_t inc = head->incarnation;
    const bool any_len = e->npolicies == 0;
    const uint64_t ph = prio_hint(&h);
    uintptr_t send = (uintptr_t)r[-1].source + r[-1].length;
    uint64_t dend = r[-1].target_offset + r[-1].length;
    const tent_request_t *q = r, *qend = r + n;
    struct tent_task *u = t;
    for (; q < qend; q++, u++) {
        uintptr_t src = (uintptr_t)q->source;
        uint64_t off = q->target_offset, len = q->length;
        uint64_t se = src + len, de = off + len;
        /* de <= off: a length of 0, or a target range that wraps; any
         * policy_name pointer ends the run here (resolve then takes q, an
         * empty name included) */
        if (q->opcode != h.opcode || q->target_id != h.target_id ||
            prio_hint(q) != ph || q->intent_type != h.intent_type ||
            q->deadline_ns || q->policy_name || !(any_len || len == h.length) ||
            de <= off || se < src || src < sbase || se > send_max ||
            off < dbase || de > dend_max)
            break;
        task_init(u, q, true);
        u->src_buf = sb;
        u->dst_buf = db;
        u->incarnation = inc;
        u->follows = send == src && dend == off;
        send = se;
        dend = de;
    }
    size_t k = (size_t)(q - r);
    if (k) {
        c->likes += (int)k;
        c->last[write] = &t[k - 1];
    }
    return k;
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
                              i, (unsigned long long)dst->base, seg->v.name);
    if (!seg->v.local && dst->perm == PERM_LOCAL_READ_WRITE)
        return tent_set_error(
            TENT_EPERM,
            "tent_submit: request %zu: target buffer at "
            "%#llx of segment '%s' is not remotely accessible",
            i, (unsigned long long)dst->base, seg->v.name);
    /* The candidates depend on the target, both buffers, the hint, the
     * priority and (through policies) the length: a request like the one
     * before it reuses that one's choice without asking the transports. */
    if (prev && prev->dst_buf == dst && prev->src_buf == t->src_buf &&
        prev->req.target_id == t->req.target_id &&
        prev->req.transport_hint == t->req.transport_hint &&
        prev->req.priority == t->req.priority && prev->policy == t->policy &&
        (e->npolicies == 0 || (prev->req.length == t->req.length &&
                               prev->req.intent_type == t->req.intent_type))) {
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
            i, t->src_buf->location, dst->location, seg->v.name);
    t->state = STATUS_WAITING;
    return TENT_OK;
}

/* Fails task t, which refetch_waiting found nothing new to retry against,
 * with the cause it met; a stale incarnation says whether seg's name now
 * resolves to nothing (fetch_failed) or to another process. */
static void fail_as_met(struct tent_engine *e, struct tent_task *t,
                        const struct tent_segment *seg, bool fetch_failed)
{
    tmh_failed(e, t);
    if (t->last_error != TENT_ESTALE) {
        tent_task_fail(t, t->last_error, t->native_error, t->error_msg);
        return;
    }
    char msg[384];
    tent_peer_restarted_msg(msg, sizeof(msg), seg->v.name, t->incarnation, 0);
    char full[768];
    snprintf(full, sizeof(full), "%s (%s): %s", msg,
             fetch_failed ? "its name resolves to nothing"
                          : "another process answers at its address",
             t->error_msg ? t->error_msg : "");
    tent_task_fail(t, TENT_ESTALE, t->native_error, full);
}

/* The tasks among [first, first+n) that met a range their target no longer
 * has as published (needs_refetch, tent_task_advance): each target's
 * descriptor is fetched again (with the batch lock released, the tasks
 * claimed), then every such task is resolved against it and selected
 * again, or fails with the cause.  Returns whether any task is WAITING to
 * be dispatched again. */
static bool refetch_waiting(struct tent_engine *e, struct tent_batch *b,
                            size_t first, size_t n)
{
    struct tent_segment *segs[8];
    uint64_t gens[8], incs[8];
    size_t nsegs = 0;
    bool any = false;
    for (size_t i = first; i < first + n; i++) {
        struct tent_task *t = &b->tasks[i];
        if (!t->needs_refetch || t->busy || t->state != STATUS_WAITING)
            continue;
        struct tent_segment *seg = tent_engine_segment(e, t->req.target_id);
        size_t k = 0;
        while (k < nsegs && segs[k] != seg)
            k++;
        if (seg && k == nsegs && nsegs < sizeof(segs) / sizeof(segs[0])) {
            pthread_rwlock_rdlock(&seg->lock);
            gens[nsegs] = seg->desc_gen;
            incs[nsegs] = atomic_load(&seg->incarnation);
            pthread_rwlock_unlock(&seg->lock);
            segs[nsegs++] = seg;
        }
        tent_slot_claim(b, t);
        any = true;
    }
    if (!any)
        return false;
    pthread_mutex_unlock(&b->lock);
    bool changed[8] = {false}, fetch_failed[8] = {false};
    for (size_t k = 0; k < nsegs; k++) {
        if (e->seg_ops->fetch(e, segs[k]->v.name, segs[k]) != TENT_OK) {
            fetch_failed[k] = true;
            LOG_DEBUG("refetch of segment '%s' failed: %s", segs[k]->v.name,
                      tent_last_error());
        }
        pthread_rwlock_rdlock(&segs[k]->lock);
        changed[k] = segs[k]->desc_gen != gens[k];
        pthread_rwlock_unlock(&segs[k]->lock);
        if (atomic_load(&segs[k]->incarnation) != incs[k]) {
            /* the handles were the old process's */
            tent_segment_peers_retire(e, segs[k]);
            tent_peers_reap(e);
        }
    }
    pthread_mutex_lock(&b->lock);
    bool again = false;
    struct seg_cache c = {0};
    for (size_t i = first; i < first + n; i++) {
        struct tent_task *t = &b->tasks[i];
        if (!t->needs_refetch || !t->busy)
            continue;
        tent_slot_release(b, t);
        t->needs_refetch = false;
        struct tent_segment *seg = seg_lookup(e, &c, t->req.target_id);
        size_t k = 0;
        while (k < nsegs && segs[k] != seg)
            k++;
        bool write = t->req.opcode == OPCODE_WRITE, moved = false;
        if (k < nsegs && !changed[k] && !fetch_failed[k] && t->dst_buf) {
            /* Unchanged by this fetch, but perhaps by one made for another
             * task after this one was resolved (its buffer was replaced:
             * a new registration, with a new key): resolve it again. */
            pthread_rwlock_rdlock(&seg->lock);
            moved = tent_segment_find_access_locked(seg, t->req.target_offset,
                                                    t->req.length, write, true,
                                                    NULL) != t->dst_buf;
            pthread_rwlock_unlock(&seg->lock);
        }
        if (k < nsegs && !changed[k] && !moved) {
            /* The descriptor says what it said: nothing to retry against;
             * the task fails with the cause it met.  A target that answered
             * as another incarnation while the name still resolves to
             * ours (or to nothing): the process addressed is gone. */
            fail_as_met(e, t, seg, fetch_failed[k]);
            continue;
        }
        if (t->dst_buf) {
            atomic_fetch_sub(&t->dst_buf->inflight, 1);
            t->dst_buf = NULL;
        }
        uint64_t inc = 0;
        t->dst_buf = seg ? find_pinned(seg, t->req.target_offset, t->req.length,
                                       write, &inc)
                         : NULL;
        int rc = TENT_OK;
        if (!seg) {
            rc = tent_set_error(TENT_ENOSEGMENT,
                                "task %zu: its target segment was closed", i);
        } else if (t->incarnation && inc != t->incarnation) {
            /* Another process now answers to the name: what the task was
             * addressed to is gone with the old one. */
            char msg[384];
            tent_peer_restarted_msg(msg, sizeof(msg), seg->v.name,
                                    t->incarnation, inc);
            rc = tent_set_error(TENT_ESTALE, "%s%s%s", msg,
                                t->error_msg ? "; before that: " : "",
                                t->error_msg ? t->error_msg : "");
        } else if (!t->dst_buf)
            rc = tent_set_error(TENT_ERANGE,
                                "target [%#llx, +%llu) is not registered in "
                                "segment '%s' any more (its descriptor was "
                                "fetched again); before that: %s",
                                (unsigned long long)t->req.target_offset,
                                (unsigned long long)t->req.length, seg->v.name,
                                t->error_msg ? t->error_msg : "");
        else
            rc = select_for(e, &c, i, t, NULL);
        if (rc) {
            tmh_failed(e, t);
            tent_task_fail(t, rc, 0, tent_last_error());
            continue;
        }
        again = true; /* WAITING with fresh candidates */
    }
    return again;
}

/* The like tasks right after head (at most n; resolve found each like the
 * one before it in everything select_for reads, so like head) get head's
 * answer.  Returns how many. */
static size_t share_selection(struct tent_task *head, size_t n)
{
    /* cands, ncand, cand_pos (0) and state (WAITING), as select_for set
     * them in head */
    enum { off = offsetof(struct tent_task, cands) };
    uint8_t sel[TENT_TASK_SEL_BYTES];
    memcpy(sel, (const char *)head + off, sizeof(sel));
    size_t k = 0;
    for (struct tent_task *t = head + 1; k < n && t->like; k++, t++)
        memcpy((char *)t + off, sel, sizeof(sel));
    return k;
}

/* Validates, resolves and selects every request into tasks[0..count); on
 * failure (or NEED_REFETCH, c->refetch naming the segment) nothing stays
 * pinned and the error names the request. */
static int prepare_all(struct tent_engine *e, const tent_request_t *entries,
                       size_t count, struct tent_task *tasks,
                       struct seg_cache *c)
{
    int hint_ok = TRANSPORT_UNSPEC;
    size_t pinned = 0;
    int rc = TENT_OK;
    bool invalid = false;
    pthread_rwlock_rdlock(&e->local->lock);
    for (; pinned < count; pinned++) {
        rc = resolve(e, c, &entries[pinned], pinned, &tasks[pinned], &hint_ok,
                     &invalid);
        if (rc) {
            pinned += !invalid; /* a task that failed resolving holds pins */
            break;
        }
        pinned += resolve_likes(e, c, &entries[pinned + 1], count - pinned - 1,
                                &tasks[pinned + 1]);
    }
    flush_likes(c, &tasks[pinned]);
    tent_pin_run_flush(&c->runs[0]);
    tent_pin_run_flush(&c->runs[1]);
    pthread_rwlock_unlock(&e->local->lock);
    /* Every request is checked before any is resolved, as far as the
     * caller can tell: a request after the one that failed to resolve
     * (or needs a refetch) that fails its check is the error. */
    for (size_t i = pinned; rc != TENT_OK && !invalid && i < count; i++) {
        int vrc = check_request(&entries[i], i, &hint_ok);
        if (vrc)
            rc = vrc;
        invalid = vrc != TENT_OK;
    }
    for (size_t i = 0; i < count && rc == TENT_OK; i++) {
        rc = select_for(e, c, i, &tasks[i], i ? &tasks[i - 1] : NULL);
        if (rc == TENT_OK)
            i += share_selection(&tasks[i], count - i - 1);
    }
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
    struct seg_cache c = {0};
again:
    if (b->dead) {
        rc = tent_set_error(TENT_ENOBATCH, "%s: batch %#llx was freed", what,
                            (unsigned long long)batch_id);
        goto out;
    }
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
    rc = prepare_all(e, entries, count, &b->tasks[first], &c);
    if (rc == NEED_REFETCH) {
        /* Nothing of this call is in the batch yet; another thread may
         * submit meanwhile, so everything is checked again. */
        struct tent_segment *seg = c.refetch;
        c = (struct seg_cache){.refetched = true};
        pthread_mutex_unlock(&b->lock);
        uint64_t inc = atomic_load(&seg->incarnation);
        if (e->seg_ops->fetch(e, seg->v.name, seg) != TENT_OK)
            LOG_DEBUG("refetch of segment '%s' failed: %s", seg->v.name,
                      tent_last_error());
        if (atomic_load(&seg->incarnation) != inc) {
            tent_segment_peers_retire(e, seg);
            tent_peers_reap(e);
        }
        pthread_mutex_lock(&b->lock);
        goto again;
    }
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
    tmh_submit(e, &b->tasks[first], count);
    if (e->rq) {
        /* TENT's runtime queue: admitted now, dispatched by the pump */
        rc = tent_rq_admit(e, b, first, count);
        if (rc) {
            for (size_t j = 0; j < count; j++)
                tent_task_unpin(&b->tasks[first + j]);
            if (name) {
                free(b->notif_name);
                free(b->notif_msg);
                b->notif_name = b->notif_msg = NULL;
            }
            goto out;
        }
        b->ntasks += count;
        tent_batch_unlock(b);
        tent_rq_pump(e);
        return TENT_OK;
    }
    b->ntasks += count;
    batch_dispatch(e, b, first, count, true);
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
