/* The batch id table: allocation, lookup (reference + dead flag, lock order
 * in engine.h), freeing and teardown.  An id is (sequence << 32) | slot+1,
 * the sequence drawn from one process-wide counter: a stale id never finds
 * the batch that reused its slot, and an id of one engine never names a
 * batch of another engine of the process (until 2^32 allocations wrap). */
#include "common/error.h"
#include "common/log.h"
#include "runtime/batch.h"
#include "runtime/engine.h"
#include "runtime/metrics_hooks.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_OF(id) ((size_t)((id)&0xffffffffu) - 1)

static atomic_uint batch_seq; /* process-wide: every engine draws from it */

static uint32_t next_batch_seq(void)
{
    return (uint32_t)atomic_fetch_add_explicit(&batch_seq, 1,
                                               memory_order_relaxed);
}

static void batch_put(struct tent_batch *b)
{
    if (atomic_fetch_sub(&b->refs, 1) == 1)
        tent_batch_destroy(b);
}

/* Looks the batch up and returns it locked (and referenced), or NULL with the
 * error set.  The table lock is released before waiting for b->lock. */
struct tent_batch *tent_batch_lock(struct tent_engine *e, uint64_t id,
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

tent_batch_id_t tent_allocate_batch(tent_engine_t engine, size_t batch_size)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e) {
        tent_set_error(TENT_ENULL, "tent_allocate_batch: engine is NULL");
        return TENT_INVALID_BATCH_ID;
    }
    tent_batches_reap(e);
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
    pthread_cond_init(&b->idle, NULL);
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
        if (!nb) {
            pthread_mutex_unlock(&e->batch_lock);
            pthread_cond_destroy(&b->idle);
            pthread_mutex_destroy(&b->lock);
            free(tasks);
            free(b);
            tent_set_error(TENT_ENOMEM, "tent_allocate_batch: out of memory");
            return TENT_INVALID_BATCH_ID;
        }
        e->batches = nb;
        for (size_t i = e->nbatches; i < ncap; i++)
            e->batches[i] = NULL;
        e->nbatches = ncap;
    }
    b->id = ((uint64_t)next_batch_seq() << 32) | (uint64_t)(slot + 1);
    e->batches[slot] = b;
    pthread_mutex_unlock(&e->batch_lock);
    tmh_gauge(e, TM_BATCHES, 1);
    return b->id;
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

void tent_batch_destroy(struct tent_batch *b)
{
    free(b->notif_name);
    free(b->notif_msg);
    for (size_t i = 0; i < b->ntasks; i++)
        free(b->tasks[i].error_msg);
    free(b->tasks);
    pthread_cond_destroy(&b->idle);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* Tasks of b not yet terminal.  b locked. */
static size_t busy_tasks(const struct tent_batch *b)
{
    size_t busy = 0;
    for (size_t i = 0; i < b->ntasks; i++)
        busy += b->tasks[i].state == STATUS_PENDING ||
                b->tasks[i].state == STATUS_WAITING;
    return busy;
}

/* With b locked: polls it, and when every task is terminal frees the
 * transports' sub-batches (once no thread is inside a transport call):
 * TENT_OK, else TENT_EBUSY (tasks in flight or a transport that still
 * holds its sub-batch). */
static int try_release(struct tent_engine *e, struct tent_batch *b)
{
    (void)tent_batch_poll_all(e, b);
    size_t busy = busy_tasks(b);
    if (busy)
        return tent_set_error(TENT_EBUSY,
                              "batch %#llx has %zu task(s) still in flight",
                              (unsigned long long)b->id, busy);
    /* Every task is terminal, so no claim is held for long: a claimed slot
     * stays PENDING until its outcome is recorded. */
    tent_batch_wait_idle(b);
    return free_subs(e, b);
}

/* TENT's freeBatch: the id is gone at once; the batch itself is freed now
 * when every task has ended, else deferred and reaped by a later call
 * (tent_batches_reap) once they have, so a caller that frees a batch still
 * in flight neither leaks it nor frees memory a transport still uses. */
int tent_free_batch(tent_engine_t engine, tent_batch_id_t batch_id)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_free_batch: engine is NULL");
    struct tent_batch *b = tent_batch_lock(e, batch_id, "tent_free_batch");
    if (!b)
        return TENT_ENOBATCH;
    int rc = try_release(e, b);
    /* Polling let the lock go: a concurrent free may have won. */
    if (b->dead) {
        tent_batch_unlock(b);
        return tent_set_error(TENT_ENOBATCH,
                              "tent_free_batch: batch id %#llx was freed",
                              (unsigned long long)batch_id);
    }
    b->dead = true; /* every use of the id fails from now on */
    pthread_mutex_lock(&e->batch_lock);
    size_t slot = SLOT_OF(batch_id);
    if (slot < e->nbatches && e->batches[slot] == b)
        e->batches[slot] = NULL;
    if (rc != TENT_OK) {
        /* the table's reference goes to the deferred list */
        b->next_deferred = e->deferred;
        e->deferred = b;
        atomic_fetch_add(&e->ndeferred, 1);
    }
    pthread_mutex_unlock(&e->batch_lock);
    if (rc == TENT_OK) {
        atomic_fetch_sub(&b->refs, 1); /* the table's; ours is still held */
        tmh_gauge(e, TM_BATCHES, -1);
    } else {
        LOG_DEBUG("tent_free_batch: %s; freed once they end",
                  tent_last_error());
    }
    tent_batch_unlock(b);
    tent_batches_reap(e);
    return TENT_OK;
}

void tent_batches_reap(struct tent_engine *e)
{
    if (atomic_load_explicit(&e->ndeferred, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&e->batch_lock);
    struct tent_batch *list = e->deferred;
    e->deferred = NULL;
    pthread_mutex_unlock(&e->batch_lock);
    struct tent_batch *keep = NULL;
    while (list) {
        struct tent_batch *b = list;
        list = b->next_deferred;
        pthread_mutex_lock(&b->lock);
        int rc = try_release(e, b);
        pthread_mutex_unlock(&b->lock);
        if (rc == TENT_OK) {
            atomic_fetch_sub(&e->ndeferred, 1);
            tmh_gauge(e, TM_BATCHES, -1);
            batch_put(b);
            continue;
        }
        b->next_deferred = keep;
        keep = b;
    }
    if (!keep)
        return;
    pthread_mutex_lock(&e->batch_lock);
    struct tent_batch *last = keep;
    while (last->next_deferred)
        last = last->next_deferred;
    last->next_deferred = e->deferred;
    e->deferred = keep;
    pthread_mutex_unlock(&e->batch_lock);
}

void tent_batches_teardown(struct tent_engine *e)
{
    tent_batches_reap(e);
    pthread_mutex_lock(&e->batch_lock);
    struct tent_batch **list = e->batches;
    size_t n = e->nbatches;
    e->batches = NULL;
    e->nbatches = 0;
    /* the deferred ones go through the same last round */
    size_t ndef = 0;
    for (struct tent_batch *b = e->deferred; b; b = b->next_deferred)
        ndef++;
    struct tent_batch **all = realloc(list, (n + ndef + 1) * sizeof(*all));
    if (all) {
        list = all;
        for (struct tent_batch *b = e->deferred; b; b = b->next_deferred)
            list[n++] = b;
        e->deferred = NULL;
        atomic_store(&e->ndeferred, 0);
    }
    pthread_mutex_unlock(&e->batch_lock);
    for (size_t s = 0; s < n; s++) {
        struct tent_batch *b = list[s];
        if (!b)
            continue;
        pthread_mutex_lock(&b->lock);
        (void)tent_batch_poll_all(e, b);
        tent_batch_wait_idle(b);
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
