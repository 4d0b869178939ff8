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

/* Moves a task whose current transport failed to its next candidate.
 * Returns true when it was re-queued (state WAITING), false when it is now
 * FAILED for good. */
bool tent_task_advance(struct tent_engine *e, struct tent_task *t, int code)
{
    int from = t->cands[t->cand_pos];
    if (atomic_load(&e->stopping)) {
        /* Teardown starts nothing new, not even a failover copy. */
        LOG_WARN("task failed on %s during engine teardown; not failing it "
                 "over",
                 tent_xport_name(e, from));
        tent_task_fail(t, code);
        return false;
    }
    if (t->attempts >= e->max_failover_attempts) {
        if (e->max_failover_attempts > 0)
            LOG_WARN("Task failover limit reached (%d), last transport=%s",
                     e->max_failover_attempts, tent_xport_name(e, from));
        tmh_failed(e, t);
        tent_task_fail(t, code);
        return false;
    }
    if (t->cand_pos + 1 >= t->ncand) {
        LOG_WARN("No more transports available after %s failed",
                 tent_xport_name(e, from));
        tmh_failed(e, t);
        tent_task_fail(t, code);
        return false;
    }
    tmh_failover(e, from, t->cands[t->cand_pos + 1]);
    t->attempts++;
    t->cand_pos++;
    LOG_WARN("Transport failover: %s -> %s (attempt %d/%d)",
             tent_xport_name(e, from),
             tent_xport_name(e, t->cands[t->cand_pos]), t->attempts,
             e->max_failover_attempts);
    t->state = STATUS_WAITING;
    t->xport = -1;
    return true;
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
    /* a task merged into another's request reads that one's slot */
    int rc = tr->ops->status(tr, b->subs[xi], t->lead, &st);
    if (rc < 0)
        return rc; /* unknown outcome: the task stays in flight */
    if (st.state == TENT_XFER_PENDING)
        return TENT_OK;
    if (st.state == TENT_XFER_COMPLETED) {
        t->state = STATUS_COMPLETED;
        t->bytes = st.bytes < t->req.length ? st.bytes : t->req.length;
        tent_task_unpin(t);
        tmh_completed(e, t, xi, t->bytes);
        return TENT_OK;
    }
    LOG_DEBUG("task %zu failed on transport '%s' (native code %d)", i,
              tr->ops->name, st.native_code);
    tmh_attempt_failed(e, t, xi);
    if (!allow_failover) {
        tmh_failed(e, t);
        tent_task_fail(t, TENT_EIO);
        return TENT_OK;
    }
    if (tent_task_advance(e, t, TENT_EIO))
        tent_batch_dispatch(e, b, i, 1);
    return TENT_OK;
}

/* Sends the batch's notification once every task has completed. */
static void maybe_notify(struct tent_engine *e, struct tent_batch *b)
{
    if (!b->notif_name)
        return;
    for (size_t i = 0; i < b->ntasks; i++)
        if (b->tasks[i].state != STATUS_COMPLETED) {
            if (b->tasks[i].state == STATUS_FAILED ||
                b->tasks[i].state == STATUS_CANCELED)
                goto drop;
            return;
        }
    if (tent_engine_send_notif(e, b->notif_target, b->notif_name,
                               b->notif_msg) != TENT_OK)
        LOG_WARN("notification '%s' of batch %#llx not delivered: %s",
                 b->notif_name, (unsigned long long)b->id, tent_last_error());
    goto done;
drop:
    LOG_WARN("notification '%s' of batch %#llx dropped: a task failed or "
             "was cancelled",
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
    return rc;
}

/* Polls every task; returns the first query error, if any. */
int tent_batch_poll_all(struct tent_engine *e, struct tent_batch *b)
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
    struct tent_batch *b = tent_batch_lock(e, batch_id, "tent_overall_status");
    if (!b)
        return TENT_ENOBATCH;
    int rc = tent_batch_poll_all(e, b);
    bool pending = false, failed = false, canceled = false;
    uint64_t bytes = 0;
    for (size_t i = 0; i < b->ntasks; i++) {
        int s = b->tasks[i].state;
        pending |= s == STATUS_PENDING || s == STATUS_WAITING;
        failed |= s == STATUS_FAILED;
        canceled |= s == STATUS_CANCELED;
        if (s == STATUS_COMPLETED)
            bytes += b->tasks[i].bytes;
    }
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
    else if (b->tasks[task_id].state == STATUS_WAITING) {
        /* Not on the wire yet: it never runs. */
        struct tent_task *t = &b->tasks[task_id];
        tent_task_unpin(t);
        t->state = STATUS_CANCELED;
        t->bytes = 0;
        t->last_error = TENT_OK;
    } else if (b->tasks[task_id].state == STATUS_PENDING)
        /* No transport can take back work it has handed to the wire or to
         * a vendor library (memfabric cannot preempt smem_trans). */
        rc = tent_set_error(TENT_ERUNNING,
                            "tent_cancel_task: task %zu is already running on "
                            "transport '%s', which cannot stop it; poll it "
                            "until it is terminal",
                            task_id,
                            tent_xport_name(e, b->tasks[task_id].xport));
    tent_batch_unlock(b);
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
    tent_batch_unlock(b);
    return rc;
}
