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
        tent_batch_recycle(b);
}

static tent_batch_slot *slot_ptr(struct tent_engine *e, size_t slot)
{
    if (slot >= (size_t)TENT_BATCH_CHUNK * TENT_BATCH_CHUNKS)
        return NULL;
    tent_batch_slot *chunk = atomic_load_explicit(
        &e->batch_chunks[slot / TENT_BATCH_CHUNK], memory_order_acquire);
    return chunk ? &chunk[slot % TENT_BATCH_CHUNK] : NULL;
}

/* The batch now in id's slot (whatever its id), or NULL. */
static struct tent_batch *slot_batch(struct tent_engine *e, uint64_t id)
{
    tent_batch_slot *sp =
        id != TENT_INVALID_BATCH_ID ? slot_ptr(e, SLOT_OF(id)) : NULL;
    return sp ? atomic_load_explicit(sp, memory_order_acquire) : NULL;
}

/* Looks the batch up and returns it locked (and referenced), or NULL with the
 * error set.  No table lock: the slot is read atomically and the batch found
 * there is locked and then checked, which is safe because batch memory is
 * never freed before its engine (a batch recycled meanwhile has another
 * id, or is dead). */
struct tent_batch *tent_batch_lock_quiet(struct tent_engine *e, uint64_t id)
{
    struct tent_batch *b = slot_batch(e, id);
    if (!b)
        return NULL;
    pthread_mutex_lock(&b->lock);
    if (atomic_load_explicit(&b->id, memory_order_relaxed) != id || b->dead) {
        pthread_mutex_unlock(&b->lock);
        return NULL;
    }
    atomic_fetch_add(&b->refs, 1);
    return b;
}

struct tent_batch *tent_batch_lock(struct tent_engine *e, uint64_t id,
                                   const char *what)
{
    struct tent_batch *b = slot_batch(e, id);
    if (b) {
        pthread_mutex_lock(&b->lock);
        if (atomic_load_explicit(&b->id, memory_order_relaxed) != id) {
            pthread_mutex_unlock(&b->lock);
            b = NULL;
        }
    }
    if (!b) {
        tent_set_error(TENT_ENOBATCH, "%s: unknown batch id %#llx", what,
                       (unsigned long long)id);
        return NULL;
    }
    if (b->dead) {
        pthread_mutex_unlock(&b->lock);
        tent_set_error(TENT_ENOBATCH, "%s: batch id %#llx was freed", what,
                       (unsigned long long)id);
        return NULL;
    }
    /* Not dead, so the table still holds its reference: refs >= 1. */
    atomic_fetch_add(&b->refs, 1);
    return b;
}

struct tent_batch *tent_batch_peek(struct tent_engine *e, uint64_t id)
{
    struct tent_batch *b = slot_batch(e, id);
    return b && atomic_load_explicit(&b->id, memory_order_relaxed) == id ? b
                                                                         : NULL;
}

/* A batch (from the pool, or new) and a slot for it, or NULL with the error
 * set.  Takes batch_lock. */
static struct tent_batch *take_batch(struct tent_engine *e, uint32_t *slot)
{
    pthread_mutex_lock(&e->batch_lock);
    if (e->nfree == 0) {
        if (e->nslots == TENT_BATCH_CHUNK * TENT_BATCH_CHUNKS) {
            pthread_mutex_unlock(&e->batch_lock);
            tent_set_error(TENT_ENOMEM,
                           "tent_allocate_batch: %u batches are allocated, "
                           "the limit; free some first",
                           TENT_BATCH_CHUNK * TENT_BATCH_CHUNKS);
            return NULL;
        }
        /* room to give every slot in use back later, without failing */
        if (e->free_cap <= e->nslots) {
            uint32_t ncap = e->free_cap ? e->free_cap * 2 : 64;
            uint32_t *nf = realloc(e->free_slots, ncap * sizeof(*nf));
            if (!nf)
                goto nomem;
            e->free_slots = nf;
            e->free_cap = ncap;
        }
        size_t ci = e->nslots / TENT_BATCH_CHUNK;
        if (!atomic_load_explicit(&e->batch_chunks[ci], memory_order_relaxed)) {
            tent_batch_slot *chunk = calloc(TENT_BATCH_CHUNK, sizeof(*chunk));
            if (!chunk)
                goto nomem;
            atomic_store_explicit(&e->batch_chunks[ci], chunk,
                                  memory_order_release);
        }
        e->free_slots[e->nfree++] = e->nslots++;
    }
    struct tent_batch *b = e->batch_pool;
    if (b)
        e->batch_pool = b->next_free;
    else if (!(b = calloc(1, sizeof(*b))))
        goto nomem;
    else {
        pthread_mutex_init(&b->lock, NULL);
        pthread_cond_init(&b->idle, NULL);
        b->engine = e;
    }
    *slot = e->free_slots[--e->nfree];
    pthread_mutex_unlock(&e->batch_lock);
    return b;
nomem:
    pthread_mutex_unlock(&e->batch_lock);
    tent_set_error(TENT_ENOMEM, "tent_allocate_batch: out of memory");
    return NULL;
}

#define NO_SLOT UINT32_MAX

/* Gives b to the engine's pool and slot (unless NO_SLOT) to its free
 * slots. */
static void give_back(struct tent_engine *e, uint32_t slot,
                      struct tent_batch *b)
{
    pthread_mutex_lock(&e->batch_lock);
    if (slot != NO_SLOT)
        e->free_slots[e->nfree++] = slot;
    b->next_free = e->batch_pool;
    e->batch_pool = b;
    pthread_mutex_unlock(&e->batch_lock);
}

/* Task arrays up to this many tasks stay with a recycled batch. */
#define KEEP_TASKS 1024

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
    uint32_t slot;
    struct tent_batch *b = take_batch(e, &slot);
    if (!b)
        return TENT_INVALID_BATCH_ID;
    /* b is unreachable but for stale lookups (an id it had before), which
     * lock it and read the id and dead: those change under the lock. */
    pthread_mutex_lock(&b->lock);
    if (!b->tasks || b->tasks_cap < batch_size) {
        struct tent_task *tasks = malloc(batch_size * sizeof(*tasks));
        if (!tasks) {
            pthread_mutex_unlock(&b->lock);
            give_back(e, slot, b);
            tent_set_error(TENT_ENOMEM,
                           "tent_allocate_batch: out of memory for %zu "
                           "tasks",
                           batch_size);
            return TENT_INVALID_BATCH_ID;
        }
        free(b->tasks);
        b->tasks = tasks;
        b->tasks_cap = batch_size;
    }
    b->dead = false;
    b->nbusy = b->idle_waiters = 0;
    b->capacity = batch_size;
    b->ntasks = 0;
    b->ndone = 0;
    b->done_bytes = 0;
    b->done_msgs = false;
    memset(b->subs, 0, sizeof(b->subs));
    b->next_deferred = b->next_free = NULL;
    b->notif_name = b->notif_msg = NULL;
    b->notif_target = 0;
    atomic_store_explicit(&b->refs, 1, memory_order_relaxed);
    uint64_t id = ((uint64_t)next_batch_seq() << 32) | (uint64_t)(slot + 1);
    atomic_store_explicit(&b->id, id, memory_order_relaxed);
    pthread_mutex_unlock(&b->lock);
    /* publishes everything above to the lookups that find it */
    atomic_store_explicit(slot_ptr(e, slot), b, memory_order_release);
    tmh_gauge(e, TM_BATCHES, 1);
    return id;
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

/* The last reference is gone: the batch returns to its engine's pool (its
 * slot was given back when it was unlinked). */
void tent_batch_recycle(struct tent_batch *b)
{
    free(b->notif_name);
    free(b->notif_msg);
    b->notif_name = b->notif_msg = NULL;
    if (b->ndone < b->ntasks || b->done_msgs)
        for (size_t i = 0; i < b->ntasks; i++)
            if (b->tasks[i].error_msg)
                free(b->tasks[i].error_msg);
    b->ntasks = 0;
    if (b->tasks_cap > KEEP_TASKS) {
        free(b->tasks);
        b->tasks = NULL;
        b->tasks_cap = 0;
    }
    give_back(b->engine, NO_SLOT, b);
}

/* Unlinks b (locked, dead) from its slot, giving the slot back; defer:
 * the table's reference goes to the deferred list.  Takes batch_lock. */
static void unlink_batch(struct tent_engine *e, struct tent_batch *b,
                         bool defer)
{
    size_t slot = SLOT_OF(atomic_load_explicit(&b->id, memory_order_relaxed));
    tent_batch_slot *sp = slot_ptr(e, slot);
    pthread_mutex_lock(&e->batch_lock);
    if (sp && atomic_load_explicit(sp, memory_order_relaxed) == b) {
        atomic_store_explicit(sp, NULL, memory_order_relaxed);
        e->free_slots[e->nfree++] = (uint32_t)slot;
    }
    if (defer) {
        b->next_deferred = e->deferred;
        e->deferred = b;
        atomic_fetch_add(&e->ndeferred, 1);
    }
    pthread_mutex_unlock(&e->batch_lock);
}

/* Tasks of b not yet terminal.  b locked. */
static size_t busy_tasks(const struct tent_batch *b)
{
    struct tent_tally tl;
    tent_batch_tally(b, &tl);
    return tl.busy;
}

/* With b locked: polls it, and when every task is terminal frees the
 * transports' sub-batches (once no thread is inside a transport call):
 * TENT_OK, else TENT_EBUSY (tasks in flight or a transport that still
 * holds its sub-batch). */
static int try_release(struct tent_engine *e, struct tent_batch *b)
{
    size_t busy = b->ndone == b->ntasks ? 0 : busy_tasks(b);
    /* a poll has work only then (tent_overall_status) */
    if (busy || b->notif_name) {
        (void)tent_batch_poll_all(e, b);
        busy = busy_tasks(b);
    }
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
    if (e->rq)
        tent_rq_batch_freed(e, b);
    int rc = try_release(e, b);
    /* Polling let the lock go: a concurrent free may have won. */
    if (b->dead) {
        tent_batch_unlock(b);
        return tent_set_error(TENT_ENOBATCH,
                              "tent_free_batch: batch id %#llx was freed",
                              (unsigned long long)batch_id);
    }
    b->dead = true; /* every use of the id fails from now on */
    unlink_batch(e, b, rc != TENT_OK);
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
    /* peer handles of closed segments whose last tasks ended since */
    tent_peers_reap(e);
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

/* Teardown's last round for one batch taken out of the table (it holds the
 * table's reference). */
static void teardown_one(struct tent_engine *e, struct tent_batch *b)
{
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
        return;
    }
    batch_put(b);
}

void tent_batches_teardown(struct tent_engine *e)
{
    tent_batches_reap(e);
    for (uint32_t s = 0; s < e->nslots; s++) {
        tent_batch_slot *sp = slot_ptr(e, s);
        pthread_mutex_lock(&e->batch_lock);
        struct tent_batch *b = atomic_load_explicit(sp, memory_order_relaxed);
        atomic_store_explicit(sp, NULL, memory_order_relaxed);
        pthread_mutex_unlock(&e->batch_lock);
        if (b)
            teardown_one(e, b);
    }
    /* the deferred ones go through the same last round */
    pthread_mutex_lock(&e->batch_lock);
    struct tent_batch *def = e->deferred;
    e->deferred = NULL;
    atomic_store(&e->ndeferred, 0);
    pthread_mutex_unlock(&e->batch_lock);
    while (def) {
        struct tent_batch *b = def;
        def = b->next_deferred;
        teardown_one(e, b);
    }
    /* Nothing can look a batch up any more: the pool and the table go. */
    while (e->batch_pool) {
        struct tent_batch *b = e->batch_pool;
        e->batch_pool = b->next_free;
        free(b->tasks);
        pthread_cond_destroy(&b->idle);
        pthread_mutex_destroy(&b->lock);
        free(b);
    }
    for (size_t c = 0; c < TENT_BATCH_CHUNKS; c++)
        free(atomic_load_explicit(&e->batch_chunks[c], memory_order_relaxed));
    free(e->free_slots);
    free(atomic_load_explicit(&e->spare_group, memory_order_relaxed));
}
