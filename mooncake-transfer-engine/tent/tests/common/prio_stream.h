/* The starvation check the transports' priority tests share (tcp in
 * tests/e2e, bufio and io_uring in tests/file): a LOW request under a
 * stream of HIGH ones that keeps the queue full completes while the stream
 * runs when promotion is on, and is still not done after a second of the
 * same stream when it is off -- so what the first run shows is promotion,
 * not gaps in the stream.  Header-only, cmocka and the public API; include
 * it as "../common/prio_stream.h". */
#ifndef TENT_TESTS_PRIO_STREAM_H
#define TENT_TESTS_PRIO_STREAM_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <cmocka.h>

#include "tent/transfer_engine.h"

static inline double ps_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline bool ps_pending(int status)
{
    return status == STATUS_PENDING || status == STATUS_WAITING;
}

/* Waits (30 s at most) for the one task of batch b to end COMPLETED, with
 * len bytes, and frees the batch. */
static inline void ps_finish(tent_engine_t e, tent_batch_id_t b, uint64_t len)
{
    double end = ps_now() + 30;
    tent_status_t st;
    for (;;) {
        assert_int_equal(tent_task_status(e, b, 0, &st), TENT_OK);
        if (!ps_pending(st.status))
            break;
        assert_true(ps_now() < end);
        struct timespec nap = {0, 100000};
        nanosleep(&nap, NULL);
    }
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, len);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
}

static inline tent_batch_id_t ps_submit(tent_engine_t e, tent_request_t *r)
{
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    assert_true(b != TENT_INVALID_BATCH_ID);
    assert_int_equal(tent_submit(e, b, r, 1), TENT_OK);
    return b;
}

/* The n HIGH requests hr, each in a batch of its own and submitted again
 * as soon as it completes, for up to secs seconds, and the LOW request lr
 * submitted after them.  Returns the seconds after which lr completed
 * while the stream still ran, or -1 when it had not when the stream
 * stopped; then waits for every request to complete with all its bytes
 * (nothing is lost either way) and frees the batches.  *nhigh: the HIGH
 * requests completed during the stream. */
static inline double ps_low_under_high(tent_engine_t e, tent_request_t *hr,
                                       int n, tent_request_t *lr, double secs,
                                       int *nhigh)
{
    tent_batch_id_t *hb = calloc((size_t)n, sizeof(*hb));
    assert_non_null(hb);
    for (int i = 0; i < n; i++)
        hb[i] = ps_submit(e, &hr[i]);
    tent_batch_id_t lb = ps_submit(e, lr);
    double t0 = ps_now(), done_at = -1;
    *nhigh = 0;
    while (ps_now() - t0 < secs) {
        tent_status_t st;
        for (int i = 0; i < n; i++) {
            assert_int_equal(tent_task_status(e, hb[i], 0, &st), TENT_OK);
            if (ps_pending(st.status))
                continue;
            assert_int_equal(st.status, STATUS_COMPLETED);
            assert_int_equal(tent_free_batch(e, hb[i]), TENT_OK);
            ++*nhigh;
            hb[i] = ps_submit(e, &hr[i]);
        }
        assert_int_equal(tent_task_status(e, lb, 0, &st), TENT_OK);
        if (!ps_pending(st.status)) {
            assert_int_equal(st.status, STATUS_COMPLETED);
            done_at = ps_now() - t0;
            break;
        }
    }
    ps_finish(e, lb, lr->length);
    for (int i = 0; i < n; i++)
        ps_finish(e, hb[i], hr[i].length);
    free(hb);
    return done_at;
}

/* One run of a test's stream: an engine with priority promotion promo_us
 * (its transport's priority_promotion_timeout_us), ps_low_under_high for
 * secs seconds, the bytes checked, the engine gone. */
typedef double (*ps_run_fn)(void *ctx, const char *promo_us, double secs,
                            int *nhigh);

/* The check: with promotion (10 ms) the LOW request completes within 20 s
 * of the stream; with promotion off it is still not done after 1 s.  what
 * names the transport and the LOW request in the messages. */
static inline void ps_check_promotion(ps_run_fn run, void *ctx,
                                      const char *what)
{
    int nhigh = 0;
    double at = run(ctx, "10000", 20, &nhigh);
    print_message("%s, promotion on: LOW completed after %.3f s of the HIGH "
                  "stream (%d HIGH requests)\n",
                  what, at, nhigh);
    if (at < 0)
        fail_msg("%s: the LOW request did not complete within 20 s of HIGH "
                 "requests (%d of them completed): starved",
                 what, nhigh);
    assert_true(nhigh > 0);
    /* The control: without promotion the stream starves LOW for a second.
     * On a loaded machine the feeder thread may be held back long enough
     * to leave a gap that lets LOW through, which says nothing about the
     * engine: up to three tries, one starved run is the proof. */
    double off = 0;
    for (int attempt = 1; attempt <= 3; attempt++) {
        off = run(ctx, "0", 1, &nhigh);
        print_message("%s, promotion off (try %d): LOW %s within 1 s of the "
                      "HIGH stream (%d HIGH requests)\n",
                      what, attempt, off < 0 ? "not completed" : "completed",
                      nhigh);
        if (off < 0)
            break;
    }
    if (off >= 0)
        fail_msg("%s: with promotion off the LOW request completed after "
                 "%.3f s of HIGH requests in each of 3 tries: the stream "
                 "left gaps, so the run with promotion proves nothing",
                 what, off);
}

#endif
