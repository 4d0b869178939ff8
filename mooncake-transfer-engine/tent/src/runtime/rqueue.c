/* TENT's runtime admission queue (enable_runtime_queue, off by default).
 *
 * When on, tent_submit admits a request into an engine-wide queue instead
 * of handing it to its transport: at most runtime_queue/max_outstanding_*
 * requests and bytes are admitted at once (a submit beyond them fails
 * whole), and a dispatch window of runtime_queue/max_dispatch_* requests and
 * bytes is in the transports' hands.  As the window frees, queued requests
 * go in FIFO order, or, with deadline_aware, earliest deadline first
 * (requests without a deadline after them, FIFO among themselves).  With
 * promotion_slack_ns, requests whose deadline is less than that ahead go
 * before the rest, so an already-missed deadline does not take the window
 * from one that can still be met.  With mlu_local_threshold > 0 a request
 * whose predicted MLU (transfer time at the measured rate of its transport
 * / time left) reaches it, or whose deadline has passed, fails at once
 * (TENT_ETIMEDOUT, the cause gives the figures) instead of being sent.
 *
 * The rate is this queue's own EWMA per transport, from requests of at
 * least 64 KiB (none yet: only a past deadline is dropped).  Nothing runs
 * in the background: submit, status and cancel refill the window, and one
 * that finds it full polls the batches holding it.  docs/qos.md. */
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "runtime/batch.h"
#include "runtime/engine.h"
#include "runtime/metrics_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RQ_FREE, RQ_QUEUED, RQ_PICKED, RQ_WINDOW };

struct tent_rq_node {
    struct tent_rq *rq;
    uint64_t batch_id;
    uint32_t task;
    uint32_t gen; /* bumped when freed: a stale pick is recognised */
    uint64_t deadline, len, t_dispatch, seq;
    int xi; /* the transport that measures its rate: first candidate */
    uint8_t state;
    bool drop; /* picked to be failed as infeasible, not dispatched */
    int32_t prev, next;
};

struct tent_rq {
    pthread_mutex_t lock; /* guards all below; a leaf */
    size_t max_owners, disp_owners;
    uint64_t max_bytes, disp_bytes, slack_ns;
    bool deadline_aware;
    double mlu;
    struct tent_rq_node *nodes;
    int32_t free_head, head, tail; /* -1: none */
    size_t outstanding, win;
    uint64_t out_bytes, win_bytes, seq;
    atomic_size_t queued; /* read without the lock by tent_rq_pump */
    double rate[TENT_MAX_TRANSPORTS]; /* bytes/s, 0 unknown */
};

#define RATE_SAMPLE_MIN (64u << 10)
#define RATE_KEEP       0.75 /* EWMA weight of the estimate so far */

int tent_rq_load(struct tent_engine *e)
{
    bool on = false;
    int rc = tent_config_get_bool(e->cfg, "enable_runtime_queue", false, &on);
    if (rc)
        return rc;
    int64_t mo, mb, dow, db, slack;
    bool aware;
    double mlu;
    if ((rc = tent_config_get_int_range(e->cfg,
                                        "runtime_queue/max_outstanding_owners",
                                        1024, 1, 1 << 20, &mo)) ||
        (rc = tent_config_get_int_range(e->cfg,
                                        "runtime_queue/max_outstanding_bytes",
                                        1ll << 30, 1, INT64_MAX, &mb)) ||
        (rc = tent_config_get_int_range(e->cfg,
                                        "runtime_queue/max_dispatch_owners", 64,
                                        1, 1 << 20, &dow)) ||
        (rc = tent_config_get_int_range(e->cfg,
                                        "runtime_queue/max_dispatch_bytes",
                                        64ll << 20, 1, INT64_MAX, &db)) ||
        (rc = tent_config_get_bool(e->cfg, "runtime_queue/deadline_aware",
                                   false, &aware)) ||
        (rc = tent_config_get_double_range(e->cfg,
                                           "runtime_queue/mlu_local_threshold",
                                           0.0, 0.0, 1e9, &mlu)) ||
        (rc = tent_config_get_int_range(e->cfg,
                                        "runtime_queue/promotion_slack_ns", 0,
                                        0, INT64_MAX, &slack)))
        return rc;
    if (!on)
        return TENT_OK; /* the keys are checked all the same */
    struct tent_rq *q = calloc(1, sizeof(*q));
    struct tent_rq_node *nodes = calloc((size_t)mo, sizeof(*nodes));
    if (!q || !nodes) {
        free(q);
        free(nodes);
        return tent_set_error(TENT_ENOMEM,
                              "runtime queue: out of memory for %lld entries "
                              "(runtime_queue/max_outstanding_owners)",
                              (long long)mo);
    }
    pthread_mutex_init(&q->lock, NULL);
    q->max_owners = (size_t)mo;
    q->max_bytes = (uint64_t)mb;
    q->disp_owners = (size_t)dow;
    q->disp_bytes = (uint64_t)db;
    q->deadline_aware = aware;
    q->mlu = aware ? mlu : 0.0; /* TENT: the drop needs deadline_aware */
    q->slack_ns = aware ? (uint64_t)slack : 0;
    if ((mlu > 0 || slack > 0) && !aware)
        LOG_WARN("runtime_queue: mlu_local_threshold and promotion_slack_ns "
                 "take effect only with runtime_queue/deadline_aware");
    q->nodes = nodes;
    for (int32_t i = 0; i < (int32_t)mo; i++) {
        nodes[i].rq = q;
        nodes[i].next = i + 1 < (int32_t)mo ? i + 1 : -1;
    }
    q->free_head = 0;
    q->head = q->tail = -1;
    atomic_init(&q->queued, 0);
    e->rq = q;
    return TENT_OK;
}

void tent_rq_free(struct tent_engine *e)
{
    if (!e->rq)
        return;
    pthread_mutex_destroy(&e->rq->lock);
    free(e->rq->nodes);
    free(e->rq);
    e->rq = NULL;
}

static int32_t idx_of(struct tent_rq *q, struct tent_rq_node *n)
{
    return (int32_t)(n - q->nodes);
}

/* The ordering key: no deadline sorts last. */
static uint64_t key_of(const struct tent_rq_node *n)
{
    return n->deadline ? n->deadline : UINT64_MAX;
}

static void unlink_node(struct tent_rq *q, struct tent_rq_node *n)
{
    if (n->prev >= 0)
        q->nodes[n->prev].next = n->next;
    else
        q->head = n->next;
    if (n->next >= 0)
        q->nodes[n->next].prev = n->prev;
    else
        q->tail = n->prev;
    n->prev = n->next = -1;
    atomic_fetch_sub_explicit(&q->queued, 1, memory_order_relaxed);
}

/* Inserts n: at the tail (FIFO), or after the last one with a key not
 * greater (EDF, FIFO among equal keys); scanned from the tail, where new
 * deadlines mostly land. */
static void insert_node(struct tent_rq *q, struct tent_rq_node *n)
{
    int32_t at = q->tail;
    if (q->deadline_aware)
        while (at >= 0 && key_of(&q->nodes[at]) > key_of(n))
            at = q->nodes[at].prev;
    int32_t me = idx_of(q, n);
    n->prev = at;
    n->next = at >= 0 ? q->nodes[at].next : q->head;
    if (n->next >= 0)
        q->nodes[n->next].prev = me;
    else
        q->tail = me;
    if (at >= 0)
        q->nodes[at].next = me;
    else
        q->head = me;
    atomic_fetch_add_explicit(&q->queued, 1, memory_order_relaxed);
}

/* Why n cannot meet its deadline now (msg filled), or false. */
static bool infeasible(struct tent_engine *e, const struct tent_rq_node *n,
                       uint64_t now, char *msg, size_t len)
{
    struct tent_rq *q = e->rq;
    if (q->mlu <= 0 || !n->deadline)
        return false;
    const char *xname = n->xi >= 0 ? e->xports[n->xi]->ops->name : "none";
    if (n->deadline <= now) {
        snprintf(msg, len,
                 "deadline infeasible: the deadline passed %.3f ms before "
                 "the request could be sent (%llu bytes on '%s')",
                 (double)(now - n->deadline) / 1e6, (unsigned long long)n->len,
                 xname);
        return true;
    }
    double rate = n->xi >= 0 ? q->rate[n->xi] : 0;
    if (rate <= 0)
        return false;
    double need = (double)n->len / rate,
           left = (double)(n->deadline - now) / 1e9;
    double mlu = need / left;
    if (mlu < q->mlu)
        return false;
    snprintf(msg, len,
             "deadline infeasible: %llu bytes at the measured %.1f MB/s of "
             "transport '%s' need %.3f ms, %.3f ms remain (MLU %.2f >= "
             "runtime_queue/mlu_local_threshold %.2f)",
             (unsigned long long)n->len, rate / 1e6, xname, need * 1e3,
             left * 1e3, mlu, q->mlu);
    return true;
}

static void free_node(struct tent_rq *q, struct tent_rq_node *n)
{
    if (n->state == RQ_QUEUED)
        unlink_node(q, n);
    if (n->state == RQ_WINDOW || (n->state == RQ_PICKED && !n->drop)) {
        q->win--;
        q->win_bytes -= n->len;
    }
    q->outstanding--;
    q->out_bytes -= n->len;
    n->state = RQ_FREE;
    n->drop = false;
    n->gen++;
    n->next = q->free_head;
    q->free_head = idx_of(q, n);
}

/* Fails task t (its batch locked) as infeasible with msg. */
static void drop_task(struct tent_engine *e, struct tent_task *t,
                      const char *msg)
{
    LOG_DEBUG("runtime queue: %s", msg);
    tmh_deadline_infeasible(e, t);
    tmh_failed(e, t);
    tent_task_fail(t, TENT_ETIMEDOUT, 0, msg); /* frees its entry */
}

int tent_rq_admit(struct tent_engine *e, struct tent_batch *b, size_t first,
                  size_t n)
{
    struct tent_rq *q = e->rq;
    uint64_t bytes = 0;
    for (size_t i = first; i < first + n; i++) {
        uint64_t len = b->tasks[i].req.length;
        if (len > q->disp_bytes)
            return tent_set_error(TENT_ECAPACITY,
                                  "tent_submit: request %zu: %llu bytes exceed "
                                  "runtime_queue/max_dispatch_bytes %llu",
                                  i - first, (unsigned long long)len,
                                  (unsigned long long)q->disp_bytes);
        bytes += len;
    }
    pthread_mutex_lock(&q->lock);
    if (q->outstanding + n > q->max_owners) {
        size_t out = q->outstanding;
        pthread_mutex_unlock(&q->lock);
        return tent_set_error(TENT_ECAPACITY,
                              "tent_submit: %zu request(s) with %zu admitted "
                              "exceed runtime_queue/max_outstanding_owners %zu",
                              n, out, q->max_owners);
    }
    if (bytes > q->max_bytes - q->out_bytes) {
        uint64_t out = q->out_bytes;
        pthread_mutex_unlock(&q->lock);
        return tent_set_error(TENT_ECAPACITY,
                              "tent_submit: %llu bytes with %llu admitted "
                              "exceed runtime_queue/max_outstanding_bytes %llu",
                              (unsigned long long)bytes,
                              (unsigned long long)out,
                              (unsigned long long)q->max_bytes);
    }
    /* reserved for all n now: a drop below lets the lock go */
    q->outstanding += n;
    q->out_bytes += bytes;
    bool check = q->mlu > 0;
    uint64_t now = check ? tent_now_ns() : 0;
    for (size_t i = first; i < first + n; i++) {
        struct tent_task *t = &b->tasks[i];
        struct tent_rq_node *nd = &q->nodes[q->free_head];
        q->free_head = nd->next;
        nd->batch_id = atomic_load_explicit(&b->id, memory_order_relaxed);
        nd->task = (uint32_t)i;
        nd->deadline = t->req.deadline_ns;
        nd->len = t->req.length;
        nd->xi = t->ncand ? t->cands[0] : -1;
        nd->seq = q->seq++;
        nd->drop = false;
        t->rqn = nd;
        char msg[320];
        if (check && infeasible(e, nd, now, msg, sizeof(msg))) {
            nd->state = RQ_PICKED; /* not in the list, not in the window */
            nd->drop = true;
            pthread_mutex_unlock(&q->lock);
            drop_task(e, t, msg);
            pthread_mutex_lock(&q->lock);
            continue;
        }
        nd->state = RQ_QUEUED;
        insert_node(q, nd);
    }
    pthread_mutex_unlock(&q->lock);
    return TENT_OK;
}

void tent_rq_end(struct tent_task *t, bool completed, uint64_t bytes)
{
    struct tent_rq_node *n = t->rqn;
    struct tent_rq *q = n->rq;
    t->rqn = NULL;
    pthread_mutex_lock(&q->lock);
    if (completed && n->state == RQ_WINDOW && bytes >= RATE_SAMPLE_MIN &&
        n->xi >= 0) {
        uint64_t dt = tent_now_ns() - n->t_dispatch;
        double sample = (double)bytes * 1e9 / (double)(dt ? dt : 1);
        double *r = &q->rate[n->xi];
        *r = *r > 0 ? RATE_KEEP * *r + (1 - RATE_KEEP) * sample : sample;
    }
    free_node(q, n);
    pthread_mutex_unlock(&q->lock);
}

void tent_rq_batch_freed(struct tent_engine *e, struct tent_batch *b)
{
    (void)e;
    for (size_t i = 0; i < b->ntasks; i++) {
        struct tent_task *t = &b->tasks[i];
        if (!t->rqn || t->state != STATUS_WAITING || t->busy)
            continue;
        struct tent_rq *q = t->rqn->rq;
        pthread_mutex_lock(&q->lock);
        bool waiting = t->rqn->state != RQ_WINDOW;
        pthread_mutex_unlock(&q->lock);
        if (!waiting)
            continue;
        tent_task_unpin(t);
        t->state = STATUS_CANCELED;
        t->bytes = 0;
        tent_task_set_cause(t, TENT_OK, 0, NULL);
        tent_rq_end(t, false, 0);
    }
}

struct pick {
    uint64_t batch_id;
    uint32_t task, gen;
    int32_t node;
    bool drop;
    char msg[320];
};

#define PICK_MAX 64

/* Takes n (queued) for the window, or to be dropped. */
static bool take(struct tent_engine *e, struct tent_rq_node *n, uint64_t now,
                 struct pick *p)
{
    struct tent_rq *q = e->rq;
    p->drop = infeasible(e, n, now, p->msg, sizeof(p->msg));
    if (!p->drop &&
        (q->win >= q->disp_owners || n->len > q->disp_bytes - q->win_bytes))
        return false;
    unlink_node(q, n);
    n->state = RQ_PICKED;
    n->drop = p->drop;
    if (!p->drop) {
        q->win++;
        q->win_bytes += n->len;
    }
    p->batch_id = n->batch_id;
    p->task = n->task;
    p->gen = n->gen;
    p->node = idx_of(q, n);
    return true;
}

/* Picks what goes next, in order, under the lock: first the requests whose
 * deadline is less than promotion_slack_ns ahead (the list is in deadline
 * order, so they are one run after the missed ones), then from the head.
 * Stops at the first that does not fit (TENT's head-of-line rule). */
static size_t pick(struct tent_engine *e, struct pick *out, size_t max)
{
    struct tent_rq *q = e->rq;
    size_t k = 0;
    uint64_t now = q->mlu > 0 || q->slack_ns ? tent_now_ns() : 0;
    if (q->slack_ns) {
        int32_t i = q->head;
        while (i >= 0 && q->nodes[i].deadline && q->nodes[i].deadline <= now)
            i = q->nodes[i].next;
        while (i >= 0 && k < max && q->nodes[i].deadline &&
               q->nodes[i].deadline - now < q->slack_ns) {
            int32_t next = q->nodes[i].next;
            if (!take(e, &q->nodes[i], now, &out[k]))
                return k;
            k++;
            i = next;
        }
    }
    while (q->head >= 0 && k < max) {
        if (!take(e, &q->nodes[q->head], now, &out[k]))
            break;
        k++;
    }
    return k;
}

/* Claims pick p for its batch b (locked): false when it went meanwhile
 * (cancelled, the batch freed). */
static bool claim(struct tent_rq *q, struct tent_batch *b, const struct pick *p)
{
    struct tent_rq_node *n = &q->nodes[p->node];
    if (p->task >= b->ntasks || b->tasks[p->task].rqn != n)
        return false;
    pthread_mutex_lock(&q->lock);
    bool ok = n->gen == p->gen && n->state == RQ_PICKED;
    if (ok && !p->drop) {
        n->state = RQ_WINDOW;
        n->t_dispatch = tent_now_ns();
    }
    pthread_mutex_unlock(&q->lock);
    return ok;
}

/* Polls the batches holding the window (at most a few), so completions
 * nobody asked about free it.  Batches freed while in flight cannot be
 * locked by id any more: the reaper polls those (else their requests
 * would hold the window while every submitter waits for it). */
static void poll_window(struct tent_engine *e)
{
    tent_batches_reap(e);
    struct tent_rq *q = e->rq;
    uint64_t ids[4];
    size_t nid = 0;
    pthread_mutex_lock(&q->lock);
    for (size_t i = 0; i < q->max_owners && nid < 4; i++) {
        const struct tent_rq_node *n = &q->nodes[i];
        if (n->state != RQ_WINDOW)
            continue;
        size_t k = 0;
        while (k < nid && ids[k] != n->batch_id)
            k++;
        if (k == nid)
            ids[nid++] = n->batch_id;
    }
    pthread_mutex_unlock(&q->lock);
    for (size_t k = 0; k < nid; k++) {
        struct tent_batch *b = tent_batch_lock_quiet(e, ids[k]);
        if (!b)
            continue;
        (void)tent_batch_poll_all(e, b);
        tent_batch_unlock(b);
    }
}

void tent_rq_pump(struct tent_engine *e)
{
    struct tent_rq *q = e->rq;
    struct pick *picks = NULL;
    for (int round = 0; round < 1024; round++) {
        if (atomic_load_explicit(&q->queued, memory_order_relaxed) == 0 ||
            atomic_load(&e->stopping))
            break;
        pthread_mutex_lock(&q->lock);
        bool full = q->win >= q->disp_owners;
        pthread_mutex_unlock(&q->lock);
        if (full && round == 0)
            poll_window(e);
        if (!picks && !(picks = malloc(PICK_MAX * sizeof(*picks))))
            return; /* retried by the next call */
        pthread_mutex_lock(&q->lock);
        size_t np = pick(e, picks, PICK_MAX);
        pthread_mutex_unlock(&q->lock);
        if (np == 0)
            break;
        /* Runs of consecutive tasks of one batch go in one dispatch (so
         * merge_requests still joins them), in the order picked. */
        for (size_t s = 0; s < np;) {
            size_t end = s + 1;
            while (end < np && !picks[end].drop && !picks[s].drop &&
                   picks[end].batch_id == picks[s].batch_id &&
                   picks[end].task == picks[end - 1].task + 1)
                end++;
            struct tent_batch *b = tent_batch_lock_quiet(e, picks[s].batch_id);
            if (b) {
                size_t first = picks[s].task, n = 0;
                for (size_t k = s; k < end; k++) {
                    if (!claim(q, b, &picks[k]))
                        continue;
                    struct tent_task *t = &b->tasks[picks[k].task];
                    if (picks[k].drop)
                        drop_task(e, t, picks[k].msg);
                    else
                        n = picks[k].task - first + 1;
                }
                if (n)
                    tent_batch_dispatch(e, b, first, n);
                tent_batch_unlock(b);
            }
            s = end;
        }
    }
    free(picks);
}
