/* Task status, polling and cross-transport failover: a task that fails at
 * the completion stage moves to its next candidate transport. */
#include "common/error.h"
#include "common/log.h"
#include "runtime/batch.h"
#include "runtime/engine.h"
#include "runtime/metrics_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tent_xport_name(struct tent_engine *e, int xi)
{
    return xi >= 0 ? e->xports[xi]->ops->name : "none";
}

void tent_task_set_cause(struct tent_task *t, int code, int native,
                         const char *msg)
{
    char *copy = msg && *msg ? strdup(msg) : NULL; /* msg may be t's own */
    free(t->error_msg);
    t->error_msg = copy;
    t->last_error = code;
    t->native_error = native;
}

/* A cause that says, or may mean, that the target no longer has the range
 * as its descriptor published it (unregistered, re-registered, restarted):
 * worth fetching the descriptor once more before giving up.  A vendor's or
 * fabric's refusal (TENT_EVENDOR, TENT_EIO) does not say why; the fresh
 * descriptor does, when that is the reason, so every transport reports a
 * range gone or made LOCAL since the same way.  Files have no descriptor to
 * fetch again. */
static bool stale_descriptor_cause(int code, bool file)
{
    return code == TENT_ERANGE || code == TENT_ENOTREG || code == TENT_EPERM ||
           code == TENT_EPEER || code == TENT_ESTALE ||
           (!file && (code == TENT_EVENDOR || code == TENT_EIO));
}

/* Requeues t for a descriptor refetch, once: the dispatcher fetches it with
 * no lock held and resolves the request again (batch_submit.c). */
static bool try_refetch(struct tent_engine *e, struct tent_task *t, int code,
                        int from, bool file)
{
    if (t->refetched || !e->seg_ops || t->req.target_id == LOCAL_SEGMENT_ID ||
        !stale_descriptor_cause(code, file))
        return false;
    LOG_DEBUG("task failed on %s with %s; fetching the target's descriptor "
              "again",
              tent_xport_name(e, from), tent_strerror(code));
    t->refetched = t->needs_refetch = true;
    t->state = STATUS_WAITING;
    t->xport = -1;
    return true;
}

bool tent_task_advance(struct tent_engine *e, struct tent_task *t, int code,
                       int native, const char *msg)
{
    int from = t->cands[t->cand_pos];
    t->follows = false; /* its transport, buffers or selection may change */
    tent_task_set_cause(t, code, native, msg);
    if (atomic_load(&e->stopping)) {
        /* Teardown starts nothing new, not even a failover copy. */
        LOG_WARN("task failed on %s during engine teardown; not failing it "
                 "over",
                 tent_xport_name(e, from));
        tent_task_fail(t, code, native, t->error_msg);
        return false;
    }
    /* a file's buffer carries its descriptor (transport.h, file segments) */
    bool file = t->dst_buf &&
                tent_attrs_get(t->dst_buf->attrs, TENT_FILE_ATTR_FD) != NULL;
    bool transient =
        tent_attempt_is_transient(code, native, t->req.opcode, file);
    if (!transient && try_refetch(e, t, code, from, file))
        return true;
    if (!transient) {
        /* Another transport would meet the same refusal: fail at once. */
        LOG_DEBUG("task failed on %s with %s; no failover for this cause",
                  tent_xport_name(e, from), tent_strerror(code));
        tmh_failed(e, t);
        tent_task_fail(t, code, native, t->error_msg);
        return false;
    }
    if ((t->attempts >= e->max_failover_attempts ||
         t->cand_pos + 1 >= t->ncand) &&
        try_refetch(e, t, code, from, file))
        return true;
    if (t->attempts >= e->max_failover_attempts) {
        if (e->max_failover_attempts > 0)
            LOG_WARN("Task failover limit reached (%d), last transport=%s",
                     e->max_failover_attempts, tent_xport_name(e, from));
        tmh_failed(e, t);
        tent_task_fail(t, code, native, t->error_msg);
        return false;
    }
    if (t->cand_pos + 1 >= t->ncand) {
        LOG_WARN("No more transports available after %s failed (%s)",
                 tent_xport_name(e, from), tent_strerror(code));
        tmh_failed(e, t);
        tent_task_fail(t, code, native, t->error_msg);
        return false;
    }
    tmh_failover(e, from, t->cands[t->cand_pos + 1]);
    t->attempts++;
    t->cand_pos++;
    /* TENT's line, word for word; the cause is the task's (and was logged
     * where it was seen). */
    LOG_WARN("Transport failover: %s -> %s (attempt %d/%d)",
             tent_xport_name(e, from),
             tent_xport_name(e, t->cands[t->cand_pos]), t->attempts,
             e->max_failover_attempts);
    t->state = STATUS_WAITING;
    t->xport = -1;
    return true;
}

int tent_task_apply_status(struct tent_engine *e, struct tent_batch *b,
                           size_t i, int xi, int rc,
                           const struct tent_xfer_status *st,
                           bool allow_failover, struct tent_pin_run *runs,
                           struct tent_peer_run *peers)
{
    struct tent_task *t = &b->tasks[i];
    if (t->state != STATUS_PENDING || t->xport != xi)
        return TENT_OK; /* settled by another thread meanwhile */
    if (rc < 0)
        return rc; /* unknown outcome: the task stays in flight */
    if (st->state == TENT_XFER_PENDING)
        return TENT_OK;
    if (st->state == TENT_XFER_COMPLETED) {
        tent_task_complete(e, t, xi, st->bytes, runs, peers);
        return TENT_OK;
    }
    tent_task_unpeer(t);
    int code = st->code ? st->code : TENT_EIO;
    tmh_attempt_failed(e, t, xi);
    if (!allow_failover) {
        tmh_failed(e, t);
        tent_task_fail(t, code, st->native, st->msg);
        return TENT_OK;
    }
    if (tent_task_advance(e, t, code, st->native, st->msg))
        tent_batch_dispatch(e, b, i, 1);
    return TENT_OK;
}

/* Polls one PENDING task through its slot's transport with the batch lock
 * released around the call; may fail it over.  Batch lock held. */
static int poll_task(struct tent_engine *e, struct tent_batch *b, size_t i,
                     bool allow_failover)
{
    struct tent_task *t = &b->tasks[i];
    /* a task merged into another's request reads that one's slot */
    struct tent_task *lead = &b->tasks[t->lead];
    if (t->state != STATUS_PENDING || lead->busy)
        return TENT_OK;     /* another thread is asking about that slot now */
    int xi = (int)t->xport; /* >= 0: PENDING has a transport */
    struct tent_transport *tr = e->xports[xi];
    struct tent_sub_batch *sb = b->subs[xi];
    struct tent_xfer_status st = {0};
    tent_slot_claim(b, lead);
    pthread_mutex_unlock(&b->lock);
    int rc = tr->ops->status(tr, sb, t->lead, &st);
    pthread_mutex_lock(&b->lock);
    tent_slot_release(b, lead);
    return tent_task_apply_status(e, b, i, xi, rc, &st, allow_failover, NULL,
                                  NULL);
}

/* Sends the batch's notification once every task has completed (the send
 * is a network call: the batch lock is released around it). */
static void maybe_notify(struct tent_engine *e, struct tent_batch *b)
{
    if (!b->notif_name)
        return;
    bool send = true;
    for (size_t i = 0; i < b->ntasks && send; i++)
        if (b->tasks[i].state != STATUS_COMPLETED) {
            if (b->tasks[i].state != STATUS_FAILED &&
                b->tasks[i].state != STATUS_CANCELED)
                return;
            send = false;
        }
    char *name = b->notif_name, *msg = b->notif_msg;
    uint64_t target = b->notif_target;
    b->notif_name = b->notif_msg = NULL;
    if (!send) {
        LOG_WARN("notification '%s' of batch %#llx dropped: a task failed or "
                 "was cancelled",
                 name, (unsigned long long)b->id);
    } else {
        pthread_mutex_unlock(&b->lock);
        if (tent_engine_send_notif(e, target, name, msg) != TENT_OK)
            LOG_WARN("notification '%s' of batch %#llx not delivered: %s", name,
                     (unsigned long long)b->id, tent_last_error());
        pthread_mutex_lock(&b->lock);
    }
    free(name);
    free(msg);
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
    struct tent_batch *b = tent_batch_lock(e, batch_id, "tent_task_status");
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
    tent_batch_unlock(b);
    if (e->rq && rc == TENT_OK) /* a failed call keeps its error */
        tent_rq_pump(e);
    return rc;
}

/* Slots polled per round of tent_batch_poll_all: the lock is released
 * once per round, not once per task. */
#define POLL_CHUNK 64

struct poll_ent {
    uint32_t task, lead;
    int xi;
    bool owner; /* claimed the lead's slot; else shares the entry before */
    int rc;
    struct tent_xfer_status st;
};

int tent_batch_poll_all(struct tent_engine *e, struct tent_batch *b)
{
    int first_err = TENT_OK;
    struct poll_ent ents[POLL_CHUNK];
    size_t i = 0;
    while (i < b->ntasks) {
        size_t n = 0;
        for (; i < b->ntasks && n < POLL_CHUNK; i++) {
            struct tent_task *t = &b->tasks[i];
            if (t->state != STATUS_PENDING)
                continue;
            struct tent_task *lead = &b->tasks[t->lead];
            bool owner = !lead->busy;
            /* followers come right after their lead: one call for all */
            if (!owner && !(n > 0 && ents[n - 1].lead == t->lead &&
                            ents[n - 1].xi == t->xport))
                continue; /* another thread is asking about that slot */
            if (owner)
                tent_slot_claim(b, lead);
            ents[n++] = (struct poll_ent){.task = (uint32_t)i,
                                          .lead = t->lead,
                                          .xi = t->xport,
                                          .owner = owner};
        }
        if (n == 0)
            break;
        pthread_mutex_unlock(&b->lock);
        for (size_t k = 0; k < n; k++) {
            struct poll_ent *p = &ents[k];
            if (!p->owner) {
                p->rc = ents[k - 1].rc;
                p->st = ents[k - 1].st;
                continue;
            }
            struct tent_transport *tr = e->xports[p->xi];
            p->st = (struct tent_xfer_status){0};
            p->rc = tr->ops->status(tr, b->subs[p->xi], p->lead, &p->st);
        }
        pthread_mutex_lock(&b->lock);
        for (size_t k = 0; k < n; k++)
            if (ents[k].owner)
                tent_slot_release(b, &b->tasks[ents[k].lead]);
        struct tent_pin_run runs[2] = {{0}};
        struct tent_peer_run peers = {0};
        for (size_t k = 0; k < n; k++) {
            int rc = tent_task_apply_status(
                e, b, ents[k].task, ents[k].xi, ents[k].rc, &ents[k].st,
                e->auto_failover_on_poll, runs, &peers);
            if (rc && !first_err)
                first_err = rc;
        }
        tent_pin_run_flush(&runs[0]);
        tent_pin_run_flush(&runs[1]);
        tent_peer_run_flush(&peers);
    }
    maybe_notify(e, b);
    return first_err;
}

void tent_batch_tally(const struct tent_batch *b, struct tent_tally *tl)
{
    unsigned seen = 0; /* bit s: a task in state s */
    size_t busy = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < b->ntasks; i++) {
        unsigned s = b->tasks[i].state;
        seen |= 1u << s;
        busy += s == STATUS_PENDING || s == STATUS_WAITING;
        bytes += s == STATUS_COMPLETED ? b->tasks[i].bytes : 0;
    }
    *tl = (struct tent_tally){.in_flight = seen & 1u << STATUS_PENDING,
                              .failed = seen & 1u << STATUS_FAILED,
                              .canceled = seen & 1u << STATUS_CANCELED,
                              .busy = busy,
                              .bytes = bytes};
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
    struct tent_batch *b = tent_batch_lock(e, batch_id, "tent_overall_status");
    if (!b)
        return TENT_ENOBATCH;
    struct tent_tally tl = {.bytes = b->done_bytes};
    /* all completed in submit: nothing to count */
    if (b->ndone < b->ntasks)
        tent_batch_tally(b, &tl);
    int rc = TENT_OK;
    /* Nothing in flight and no notification to send: a poll would do
     * nothing (a WAITING task is the dispatcher's, not the poll's). */
    if (tl.in_flight || b->notif_name) {
        rc = tent_batch_poll_all(e, b);
        tent_batch_tally(b, &tl);
    }
    bool pending = tl.busy > 0, failed = tl.failed, canceled = tl.canceled;
    uint64_t bytes = tl.bytes;
    if (b->ntasks == 0)
        status->status = STATUS_WAITING;
    else if (pending)
        status->status = STATUS_PENDING;
    else if (failed)
        status->status = STATUS_FAILED;
    else if (canceled)
        status->status = STATUS_CANCELED;
    else
        status->status = STATUS_COMPLETED;
    status->transferred_bytes = bytes;
    tent_batch_unlock(b);
    if (e->rq && rc == TENT_OK) /* a failed call keeps its error */
        tent_rq_pump(e);
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
    struct tent_batch *b =
        tent_batch_lock(e, batch_id, "tent_task_status_list");
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
        rc = tent_batch_poll_all(e, b);
        for (size_t i = 0; i < b->ntasks; i++)
            to_status(&b->tasks[i], &statuses[i]);
        *count = b->ntasks;
    }
    tent_batch_unlock(b);
    if (e->rq && rc == TENT_OK) /* a failed call keeps its error */
        tent_rq_pump(e);
    return rc;
}

int tent_cancel_task(tent_engine_t engine, tent_batch_id_t batch_id,
                     size_t task_id)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_cancel_task: engine is NULL");
    struct tent_batch *b = tent_batch_lock(e, batch_id, "tent_cancel_task");
    if (!b)
        return TENT_ENOBATCH;
    int rc = TENT_OK;
    if (task_id >= b->ntasks)
        rc =
            tent_set_error(TENT_ENOTASK,
                           "tent_cancel_task: task %zu of batch %#llx does not "
                           "exist",
                           task_id, (unsigned long long)batch_id);
    else if (b->tasks[task_id].state == STATUS_WAITING &&
             !b->tasks[task_id].busy) {
        /* Not on the wire yet: it never runs. */
        struct tent_task *t = &b->tasks[task_id];
        tent_task_unpin(t);
        t->state = STATUS_CANCELED;
        t->bytes = 0;
        tent_task_set_cause(t, TENT_OK, 0, NULL);
        if (t->rqn)
            tent_rq_end(t, false, 0);
    } else if (b->tasks[task_id].state == STATUS_PENDING ||
               b->tasks[task_id].state == STATUS_WAITING)
        /* No transport can take back work it has handed to the wire or to
         * a vendor library (memfabric cannot preempt smem_trans). */
        rc = tent_set_error(TENT_ERUNNING,
                            "tent_cancel_task: task %zu is already running on "
                            "transport '%s', which cannot stop it; poll it "
                            "until it is terminal",
                            task_id,
                            tent_xport_name(e, b->tasks[task_id].xport));
    tent_batch_unlock(b);
    if (e->rq && rc == TENT_OK) /* a failed call keeps its error */
        tent_rq_pump(e);
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
    struct tent_batch *b = tent_batch_lock(e, batch_id, "tent_task_transport");
    if (!b)
        return TENT_ENOBATCH;
    int rc = TENT_OK;
    if (task_id >= b->ntasks) {
        rc = tent_set_error(TENT_ENOTASK,
                            "tent_task_transport: task %zu of batch %#llx does "
                            "not exist",
                            task_id, (unsigned long long)batch_id);
    } else {
        const struct tent_task *t = &b->tasks[task_id];
        int xi = t->xport >= 0 ? t->xport : t->last_xport;
        const char *n = xi >= 0 ? e->xports[xi]->ops->name : "";
        if (strlen(n) >= name_len)
            rc = tent_set_error(TENT_EOVERFLOW,
                                "tent_task_transport: buffer of %zu bytes is "
                                "too small for '%s'",
                                name_len, n);
        else
            memcpy(name, n, strlen(n) + 1);
    }
    tent_batch_unlock(b);
    return rc;
}

int tent_task_error(tent_engine_t engine, tent_batch_id_t batch_id,
                    size_t task_id, int *code, int *native, char *msg,
                    size_t len)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_task_error: engine is NULL");
    if (!code || !native)
        return tent_set_error(TENT_ENULL,
                              "tent_task_error: code or native is NULL");
    struct tent_batch *b = tent_batch_lock(e, batch_id, "tent_task_error");
    if (!b)
        return TENT_ENOBATCH;
    int rc = TENT_OK;
    if (task_id >= b->ntasks) {
        rc = tent_set_error(TENT_ENOTASK,
                            "tent_task_error: task %zu of batch %#llx does "
                            "not exist (%zu submitted)",
                            task_id, (unsigned long long)batch_id, b->ntasks);
    } else {
        const struct tent_task *t = &b->tasks[task_id];
        bool failed = t->state == STATUS_FAILED;
        *code = failed ? t->last_error : TENT_OK;
        *native = failed ? t->native_error : 0;
        if (msg && len)
            snprintf(msg, len, "%s",
                     failed && t->error_msg ? t->error_msg : "");
    }
    tent_batch_unlock(b);
    return rc;
}
