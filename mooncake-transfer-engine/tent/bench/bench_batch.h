/* The one submit / poll / free loop of the benchmarks (tebench,
 * tent_net_bench, tent_mf_bench) and their clock.  Public C API only;
 * header-only so each benchmark stays one link line. */
#ifndef TENT_BENCH_BATCH_H
#define TENT_BENCH_BATCH_H

#include "tent/transfer_engine.h"

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* How bench_batch_run waits for a batch. */
struct bench_batch_wait {
    /* > 0: a batch still not terminal after this many seconds is reported
     * and left allocated (its memory may still be in use); 0: no limit. */
    double deadline_s;
    /* status polls before each sched_yield (0: yield after every poll). */
    unsigned spins;
    /* true: an error from tent_overall_status ends the batch at once;
     * false: the status it fills in is what counts (a query error during
     * failover is not the end of the task). */
    bool status_error_fails;
    /* called with the completed batch before it is freed (may be NULL) */
    void (*completed)(tent_engine_t e, tent_batch_id_t bid);
};

static inline const char *bench_status_name(int s)
{
    static const char *names[] = {"WAITING",   "PENDING", "INVALID", "CANCELED",
                                  "COMPLETED", "TIMEOUT", "FAILED"};
    return s >= 0 && s <= STATUS_FAILED ? names[s] : "UNKNOWN";
}

static inline bool bench_status_terminal(int s)
{
    return s == STATUS_COMPLETED || s == STATUS_FAILED ||
           s == STATUS_CANCELED || s == STATUS_TIMEOUT || s == STATUS_INVALID;
}

/* Names the first task of a batch that did not complete in msg. */
static inline void bench_batch_blame(tent_engine_t e, tent_batch_id_t bid,
                                     const tent_request_t *reqs, size_t n,
                                     char *msg, size_t msglen)
{
    for (size_t i = 0; i < n; i++) {
        tent_status_t ts = {0};
        int trc = tent_task_status(e, bid, i, &ts);
        if (trc != TENT_OK || ts.status != STATUS_COMPLETED) {
            snprintf(msg, msglen,
                     "task %zu (%s of %llu bytes at target %#llx) ended "
                     "%s%s%s (the engine log above says why)",
                     i, reqs[i].opcode == OPCODE_READ ? "read" : "write",
                     (unsigned long long)reqs[i].length,
                     (unsigned long long)reqs[i].target_offset,
                     bench_status_name(ts.status), trc != TENT_OK ? ": " : "",
                     trc != TENT_OK ? tent_last_error() : "");
            return;
        }
    }
}

/* Allocates a batch, submits the n requests, polls until every task is
 * terminal (as w says) and frees the batch.  *tx_us (may be NULL) is the
 * submit-to-completion time.  Returns 0, or -1 with the reason in msg. */
static inline int bench_batch_run(tent_engine_t e, tent_request_t *reqs,
                                  size_t n, const struct bench_batch_wait *w,
                                  double *tx_us, char *msg, size_t msglen)
{
    tent_batch_id_t bid = tent_allocate_batch(e, n);
    if (bid == TENT_INVALID_BATCH_ID) {
        snprintf(msg, msglen, "tent_allocate_batch(%zu) failed: %s", n,
                 tent_last_error());
        return -1;
    }
    int ret = -1;
    double t0 = bench_now_s();
    int rc = tent_submit(e, bid, reqs, n);
    if (rc != TENT_OK) {
        snprintf(msg, msglen, "tent_submit of %zu requests failed: %s (%s)", n,
                 tent_last_error(), tent_strerror(rc));
        goto free_batch;
    }
    tent_status_t st = {0};
    double deadline = t0 + w->deadline_s;
    unsigned spins = 0;
    for (;;) {
        rc = tent_overall_status(e, bid, &st);
        if (rc != TENT_OK && w->status_error_fails) {
            snprintf(msg, msglen, "tent_overall_status failed: %s",
                     tent_last_error());
            goto free_batch;
        }
        if (bench_status_terminal(st.status))
            break;
        if (w->deadline_s > 0 && bench_now_s() > deadline) {
            snprintf(msg, msglen,
                     "batch of %zu requests not complete after %.0f s "
                     "(%s%s%s)",
                     n, w->deadline_s, bench_status_name(st.status),
                     rc ? ", last error: " : "", rc ? tent_last_error() : "");
            /* Its memory may still be in use: do not free the batch. */
            return -1;
        }
        if (++spins > w->spins)
            sched_yield(); /* 2-core machines: let the workers run */
    }
    if (tx_us)
        *tx_us = (bench_now_s() - t0) * 1e6;
    if (st.status != STATUS_COMPLETED) {
        snprintf(msg, msglen, "batch of %zu requests ended %s", n,
                 bench_status_name(st.status));
        bench_batch_blame(e, bid, reqs, n, msg, msglen);
        goto free_batch;
    }
    ret = 0;
    if (w->completed)
        w->completed(e, bid);
free_batch:
    /* Every task is terminal here, so the batch is free at once: no
     * transport keeps a terminal task's sub-batch busy. */
    rc = tent_free_batch(e, bid);
    if (rc != TENT_OK && ret == 0) {
        snprintf(msg, msglen, "tent_free_batch failed: %s", tent_last_error());
        ret = -1;
    }
    return ret;
}

/* bench_batch_run for the two-process benchmarks: no deadline, yield after
 * every poll, any failure ends the benchmark (exit 1) with the reason. */
static inline void bench_run_batch(tent_engine_t e, tent_request_t *r, size_t n)
{
    static const struct bench_batch_wait w = {.status_error_fails = true};
    char msg[512];
    if (bench_batch_run(e, r, n, &w, NULL, msg, sizeof(msg))) {
        fprintf(stderr, "%s\n", msg);
        exit(1);
    }
}

#endif
