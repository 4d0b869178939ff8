/* Batches and tasks, shared by the id table (batch_table.c), the submit
 * pipeline (batch_submit.c) and polling / failover (batch_poll.c).
 *
 * Transport calls run with the batch lock released.  Before it lets go,
 * the batch code claims what it hands over (tent_slot_claim: the tasks of a
 * submitted group, followers merged into them included; the lead task of a
 * polled slot); a claimed task is left alone by every other thread (its
 * slot is never handed to a transport twice at once, a cancel answers
 * TENT_ERUNNING), and the claim is released once the outcome is recorded
 * under the lock again.  tent_free_batch and teardown wait until no claim
 * is held (nbusy == 0) before they free the transports' sub-batches. */
#ifndef TENT_RUNTIME_BATCH_H
#define TENT_RUNTIME_BATCH_H

#include "runtime/engine.h"
#include "runtime/metrics_hooks.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* batch_table.c */
/* Looks the batch up and returns it locked (and referenced), or NULL with
 * the error set (what names the caller).  Takes no table lock (the table is
 * read with atomic loads; batch memory is type-stable). */
struct tent_batch *tent_batch_lock(struct tent_engine *e, uint64_t id,
                                   const char *what);
/* tent_batch_lock that leaves the thread's last error alone (NULL when
 * the batch is gone): for the runtime queue's background moves. */
struct tent_batch *tent_batch_lock_quiet(struct tent_engine *e, uint64_t id);
/* The batch in id's slot of the table, unlocked and unreferenced, or NULL:
 * for tests that inspect a batch they own and nobody else touches. */
struct tent_batch *tent_batch_peek(struct tent_engine *e, uint64_t id);
/* Returns a batch to its engine's pool; called by the last reference
 * only. */
void tent_batch_recycle(struct tent_batch *b);

/* Unlocks a batch from tent_batch_lock and drops its reference (inline: it
 * ends every API call on a batch). */
static inline void tent_batch_unlock(struct tent_batch *b)
{
    pthread_mutex_unlock(&b->lock);
    if (atomic_fetch_sub(&b->refs, 1) == 1)
        tent_batch_recycle(b);
}

/* batch_submit.c */
/* Starts every WAITING task among [first, first+n) that no one has claimed.
 * Called with the batch lock held and returns with it held; releases it
 * around each transport submit (the tasks handed over are claimed). */
void tent_batch_dispatch(struct tent_engine *e, struct tent_batch *b,
                         size_t first, size_t n);

static inline void tent_slot_claim(struct tent_batch *b, struct tent_task *t)
{
    t->busy = true;
    b->nbusy++;
}

static inline void tent_slot_release(struct tent_batch *b, struct tent_task *t)
{
    t->busy = false;
    if (--b->nbusy == 0 && b->idle_waiters)
        pthread_cond_broadcast(&b->idle);
}

/* With b locked: waits until no thread is inside a transport call for it. */
static inline void tent_batch_wait_idle(struct tent_batch *b)
{
    b->idle_waiters++;
    while (b->nbusy > 0)
        pthread_cond_wait(&b->idle, &b->lock);
    b->idle_waiters--;
}

/* Records why the task failed (or why its attempt did): our code, the
 * native one, the message (copied; NULL keeps none). */
void tent_task_set_cause(struct tent_task *t, int code, int native,
                         const char *msg);

/* Releases the task's buffer pins (inflight). */
static inline void tent_task_unpin(struct tent_task *t)
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

/* Pin changes for a run of tasks on one buffer, applied in one atomic
 * operation: a lock-prefixed add at submit and a subtract at completion per
 * request were about a third of shm's per-request cost.  Adds are applied
 * before the tasks are dispatched, while a first real pin keeps the buffer
 * alive; subtracts after a pass over completions (an unregister then waits
 * a little longer, never less). */
struct tent_pin_run {
    struct tent_buffer *buf;
    int n;
};

static inline void tent_pin_run_flush(struct tent_pin_run *r)
{
    if (r->n > 0)
        atomic_fetch_add_explicit(&r->buf->inflight, r->n,
                                  memory_order_relaxed);
    else if (r->n < 0)
        atomic_fetch_sub_explicit(&r->buf->inflight, -r->n,
                                  memory_order_release);
    r->buf = NULL;
    r->n = 0;
}

static inline void tent_pin_run_add(struct tent_pin_run *r,
                                    struct tent_buffer *buf, int d)
{
    if (r->buf != buf)
        tent_pin_run_flush(r);
    r->buf = buf;
    r->n += d;
}

/* tent_task_unpin, the subtracts counted in runs (src, dst). */
static inline void tent_task_unpin_runs(struct tent_task *t,
                                        struct tent_pin_run runs[2])
{
    if (t->src_buf)
        tent_pin_run_add(&runs[0], t->src_buf, -1);
    if (t->dst_buf)
        tent_pin_run_add(&runs[1], t->dst_buf, -1);
    t->src_buf = t->dst_buf = NULL;
}

/* Makes PENDING task t, on transport xi, COMPLETED with bytes moved (at
 * most its length): its handle is released in peers and its pins in runs
 * (the caller applies both), or at once when NULL; counted in metrics;
 * its runtime queue entry ends.  Batch lock held. */
static inline void tent_task_complete(struct tent_engine *e,
                                      struct tent_task *t, int xi,
                                      uint64_t bytes, struct tent_pin_run *runs,
                                      struct tent_peer_run *peers)
{
    tent_task_unpeer_run(t, peers); /* it left its transport */
    t->state = STATUS_COMPLETED;
    t->bytes = bytes < t->req.length ? bytes : t->req.length;
    if (runs)
        tent_task_unpin_runs(t, runs);
    else
        tent_task_unpin(t);
    tmh_completed(e, t, xi, t->bytes);
    if (t->rqn)
        tent_rq_end(t, true, t->bytes);
}

/* Makes the task FAILED with its cause and unpins it. */
static inline void tent_task_fail(struct tent_task *t, int code, int native,
                                  const char *msg)
{
    t->state = STATUS_FAILED;
    t->bytes = 0;
    tent_task_set_cause(t, code, native, msg);
    tent_task_unpin(t);
    if (t->rqn)
        tent_rq_end(t, false, 0);
}

/* batch_poll.c */
/* Name of engine transport xi, "none" for -1. */
const char *tent_xport_name(struct tent_engine *e, int xi);
/* Moves a task whose current transport failed (code, native, msg: the
 * cause) to its next candidate: true when it was re-queued (WAITING),
 * false when it is now FAILED for good (no candidate left, the failover
 * limit, teardown, or a cause no transport can fix). */
bool tent_task_advance(struct tent_engine *e, struct tent_task *t, int code,
                       int native, const char *msg);
/* Records what transport xi said (rc, st) about PENDING task i's slot; may
 * fail the task over (re-dispatching it).  A completed task's unpins are
 * counted in runs and its handle in peers (the caller applies both), or
 * applied at once when NULL.  Batch lock held. */
int tent_task_apply_status(struct tent_engine *e, struct tent_batch *b,
                           size_t i, int xi, int rc,
                           const struct tent_xfer_status *st,
                           bool allow_failover, struct tent_pin_run *runs,
                           struct tent_peer_run *peers);
/* Polls every task of a locked batch (releasing the lock around the
 * transport calls); returns the first query error. */
int tent_batch_poll_all(struct tent_engine *e, struct tent_batch *b);

/* What the states of a batch's tasks add up to. */
struct tent_tally {
    bool in_flight; /* a task PENDING */
    bool failed, canceled;
    size_t busy;    /* tasks PENDING or WAITING */
    uint64_t bytes; /* moved by the COMPLETED tasks */
};
/* One walk over the tasks of a locked batch. */
void tent_batch_tally(const struct tent_batch *b, struct tent_tally *tl);

#endif
