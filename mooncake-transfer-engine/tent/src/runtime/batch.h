/* Batches and tasks, shared by the id table (batch_table.c), the submit
 * pipeline (batch_submit.c) and polling / failover (batch_poll.c). */
#ifndef TENT_RUNTIME_BATCH_H
#define TENT_RUNTIME_BATCH_H

#include "runtime/engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* batch_table.c */
/* Looks the batch up and returns it locked (and referenced), or NULL with
 * the error set (what names the caller).  The table lock is released before
 * waiting for b->lock. */
struct tent_batch *tent_batch_lock(struct tent_engine *e, uint64_t id,
                                   const char *what);
/* Frees a batch; called by the last reference only. */
void tent_batch_destroy(struct tent_batch *b);

/* Unlocks a batch from tent_batch_lock and drops its reference (inline: it
 * ends every API call on a batch). */
static inline void tent_batch_unlock(struct tent_batch *b)
{
    pthread_mutex_unlock(&b->lock);
    if (atomic_fetch_sub(&b->refs, 1) == 1)
        tent_batch_destroy(b);
}

/* batch_submit.c */
/* Starts every WAITING task among [first, first+n).  Batch lock held. */
void tent_batch_dispatch(struct tent_engine *e, struct tent_batch *b,
                         size_t first, size_t n);

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

/* Makes the task FAILED with code and unpins it. */
static inline void tent_task_fail(struct tent_task *t, int code)
{
    t->state = STATUS_FAILED;
    t->bytes = 0;
    t->last_error = code;
    tent_task_unpin(t);
}

/* batch_poll.c */
/* Name of engine transport xi, "none" for -1. */
const char *tent_xport_name(struct tent_engine *e, int xi);
/* Moves a task whose current transport failed to its next candidate: true
 * when it was re-queued (WAITING), false when it is now FAILED for good. */
bool tent_task_advance(struct tent_engine *e, struct tent_task *t, int code);
/* Polls every task of a locked batch; returns the first query error. */
int tent_batch_poll_all(struct tent_engine *e, struct tent_batch *b);

#endif
