/* Runtime events -> metrics.  One call per event on the submit and poll
 * paths; each is a few relaxed stores into the calling thread's shard (see
 * metrics/metrics.h), or nothing when metrics are disabled (e->metrics is
 * NULL).
 *
 * Request accounting follows TENT: a request is counted once, when it
 * becomes terminal, under its final transport; each hand-over to a
 * transport is an attempt, counted under the transport that ran it (a
 * refusal at submit is a failed attempt too).  Latency is timed for one
 * request in metrics/latency_sample (a clock read costs more than the rest
 * of the bookkeeping): t_submit != 0 marks a timed task. */
#ifndef TENT_RUNTIME_METRICS_HOOKS_H
#define TENT_RUNTIME_METRICS_HOOKS_H

#include "metrics/metrics.h"
#include "runtime/engine.h"

/* The transport a task is (or was last) with, for labels: -1 = none. */
static inline int tmh_xport(const struct tent_task *t)
{
    if (t->xport >= 0)
        return t->xport;
    return t->ncand ? t->cands[t->cand_pos] : -1;
}

/* Submit: picks the tasks to time among tasks[0..n) and stamps them (the
 * others keep the t_submit of 0 that resolving them gave). */
static inline void tmh_submit(struct tent_engine *e, struct tent_task *tasks,
                              size_t n)
{
    if (!e->metrics)
        return;
    unsigned first = tm_sample_pick(e->metrics, n);
    if (first >= n)
        return;
    unsigned every = tm_sample_every(e->metrics);
    uint64_t now = tm_now_ns();
    for (size_t i = first; i < n; i += every)
        tasks[i].t_submit = tasks[i].t_attempt = now;
}

/* A group handed to transport xi: nr reads and nw writes accepted. */
static inline void tmh_started(struct tent_engine *e, int xi, unsigned nr,
                               unsigned nw)
{
    struct tm_shard *s = tm_shard(e->metrics);
    if (!s)
        return;
    if (nr)
        tm_add(s, TM_ATTEMPTS, TM_X(xi), OPCODE_READ, nr);
    if (nw)
        tm_add(s, TM_ATTEMPTS, TM_X(xi), OPCODE_WRITE, nw);
}

/* Ends the task's attempt on transport xi (failed or not).  A completed
 * attempt is counted by the size histogram, a failed one here: tasks in
 * flight = attempts - both. */
static inline void tmh_attempt_end(struct tm_shard *s, struct tent_task *t,
                                   int xi, bool failed, uint64_t now)
{
    if (failed)
        tm_add(s, TM_ATTEMPT_FAILURES, TM_X(xi), t->req.opcode == OPCODE_WRITE,
               1);
    if (t->t_submit) {
        tm_observe(s, TM_ATTEMPT_LATENCY, TM_X(xi), 0,
                   (now - t->t_attempt) / 1000);
        t->t_attempt = now;
    }
}

/* Transport xi refused the task at submit: a failed attempt that started
 * and ended at once. */
static inline void tmh_refused(struct tent_engine *e, struct tent_task *t,
                               int xi)
{
    struct tm_shard *s = tm_shard(e->metrics);
    if (!s)
        return;
    tm_add(s, TM_ATTEMPTS, TM_X(xi), t->req.opcode == OPCODE_WRITE, 1);
    tmh_attempt_end(s, t, xi, true, t->t_submit ? tm_now_ns() : 0);
}

/* A request that carried a deadline ends (TENT's observability): one whose
 * deadline had passed at submit counts as infeasible, a completed one
 * gives its MLU, time taken / time it had, in permille. */
static inline void tmh_deadline_end(struct tm_shard *s,
                                    const struct tent_task *t, int xi,
                                    bool completed)
{
    if (!t->dl_window_us) {
        tm_add(s, TM_DEADLINE_INFEASIBLE, TM_X(xi), 0, 1);
        return;
    }
    if (completed) {
        uint64_t window = (uint64_t)t->dl_window_us * 1000;
        uint64_t t0 = t->req.deadline_ns - window, now = tm_now_ns();
        tm_observe(s, TM_DEADLINE_MLU, TM_X(xi), 0,
                   (now > t0 ? now - t0 : 0) * 1000 / window);
    }
}

/* The runtime queue dropped the request as unable to meet its deadline
 * (counted here unless tmh_failed counts it: passed at submit). */
static inline void tmh_deadline_infeasible(struct tent_engine *e,
                                           const struct tent_task *t)
{
    struct tm_shard *s = tm_shard(e->metrics);
    if (s && t->dl_window_us)
        tm_add(s, TM_DEADLINE_INFEASIBLE, TM_X(tmh_xport(t)), 0, 1);
}

/* The task's transport xi reported COMPLETED with bytes moved: the attempt
 * and the request end. */
static inline void tmh_completed(struct tent_engine *e, struct tent_task *t,
                                 int xi, uint64_t bytes)
{
    struct tm_shard *s = tm_shard(e->metrics);
    if (!s)
        return;
    bool w = t->req.opcode == OPCODE_WRITE;
    uint64_t now = t->t_submit ? tm_now_ns() : 0;
    tmh_attempt_end(s, t, xi, false, now);
    tm_observe_size(s, w ? TM_WRITE_SIZE : TM_READ_SIZE, TM_X(xi), bytes);
    if (t->req.deadline_ns)
        tmh_deadline_end(s, t, xi, true);
    if (now)
        tm_observe(s, w ? TM_WRITE_LATENCY : TM_READ_LATENCY, TM_X(xi), 0,
                   (now - t->t_submit) / 1000);
}

/* tmh_completed for m untimed tasks without deadline of one opcode, each
 * having moved its whole length len. */
static inline void tmh_completed_alike(struct tent_engine *e, int opcode,
                                       int xi, uint64_t len, size_t m)
{
    struct tm_shard *s = tm_shard(e->metrics);
    if (s)
        tm_observe_size_n(s,
                          opcode == OPCODE_WRITE ? TM_WRITE_SIZE : TM_READ_SIZE,
                          TM_X(xi), len, m);
}

/* The task's transport xi reported FAILED (a completion-stage failure). */
static inline void tmh_attempt_failed(struct tent_engine *e,
                                      struct tent_task *t, int xi)
{
    struct tm_shard *s = tm_shard(e->metrics);
    if (s)
        tmh_attempt_end(s, t, xi, true, t->t_submit ? tm_now_ns() : 0);
}

static inline void tmh_failover(struct tent_engine *e, int from, int to)
{
    tm_add(tm_shard(e->metrics), TM_FAILOVER, TM_X(from), TM_X(to), 1);
}

/* The request failed for good; its final transport is the last tried. */
static inline void tmh_failed(struct tent_engine *e, struct tent_task *t)
{
    struct tm_shard *s = tm_shard(e->metrics);
    if (!s)
        return;
    bool w = t->req.opcode == OPCODE_WRITE;
    int xi = tmh_xport(t);
    tm_add(s, w ? TM_WRITE_FAILURES : TM_READ_FAILURES, TM_X(xi), 0, 1);
    if (t->req.deadline_ns)
        tmh_deadline_end(s, t, xi, false);
    if (t->t_submit)
        tm_observe(s, w ? TM_WRITE_LATENCY : TM_READ_LATENCY, TM_X(xi), 0,
                   (tm_now_ns() - t->t_submit) / 1000);
}

/* Gauges of rare events: batches, registered bytes. */
static inline void tmh_gauge(struct tent_engine *e, enum tm_id id, int64_t v)
{
    tm_gauge_add(tm_shard(e->metrics), id, 0, 0, v);
}

#endif
