/* TENT's runtime admission queue (enable_runtime_queue): off by default,
 * EDF dispatch under a full window, deadline-proximity promotion, the
 * admission limits, and the infeasible drop with its cause and metrics. */
#include "metrics/metrics.h"
#include "runtime/batch.h"
#include "test_util.h"

#include <cmocka.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#define BLK 4096
#define LEN (8 * BLK)

static int state_of(tent_engine_t e, tent_batch_id_t b, size_t i)
{
    return tent_batch_peek(tent_engine_cast(e), b)->tasks[i].state;
}

/* The fixture: fake_a only, the queue's keys of kv (NULL-terminated pairs). */
static struct tu_fx open_q(const char *const *kv)
{
    return tu_fx_open(TU_LIST("fake_a"), kv, LEN);
}

/* Occupies the one-request window with a request that completes once
 * expect_order lets the fake complete; returns its batch. */
static tent_batch_id_t block_window(struct tu_fx *f)
{
    fake_behavior[0].never_complete = true;
    tent_batch_id_t b = tent_allocate_batch(f->e, 1);
    tent_request_t r = tu_write(&f->p, 0, BLK);
    assert_int_equal(tent_submit(f->e, b, &r, 1), TENT_OK);
    assert_int_equal(state_of(f->e, b, 0), STATUS_PENDING);
    return b;
}

/* Submits n requests (block i + 1 each) with these deadlines (ns from now;
 * 0 none, negative: already passed) into a new batch. */
static tent_batch_id_t submit_deadlines(struct tu_fx *f, const long long *rel,
                                        size_t n)
{
    tent_batch_id_t b = tent_allocate_batch(f->e, n);
    tent_request_t r[8];
    uint64_t now = tent_now_ns();
    for (size_t i = 0; i < n; i++) {
        r[i] = tu_write(&f->p, (i + 1) * BLK, BLK);
        r[i].deadline_ns = rel[i] ? (uint64_t)((long long)now + rel[i]) : 0;
    }
    assert_int_equal(tent_submit(f->e, b, r, n), TENT_OK);
    return b;
}

/* Completes what holds the window (task 0 of hold), then checks that the
 * queue sends the tasks of b in the order want, one at a time. */
static void expect_order(struct tu_fx *f, tent_batch_id_t hold,
                         tent_batch_id_t b, const size_t *want, size_t n)
{
    tent_status_t st;
    size_t prev_b = hold, prev_i = 0;
    fake_behavior[0].never_complete = false;
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(tent_task_status(f->e, prev_b, prev_i, &st), TENT_OK);
        assert_int_equal(st.status, STATUS_COMPLETED);
        for (size_t i = 0; i < n; i++) {
            bool sent = false;
            for (size_t j = 0; j <= k; j++)
                sent |= want[j] == i;
            int s = state_of(f->e, b, i);
            if (!sent && s != STATUS_WAITING)
                fail_msg("step %zu: task %zu left the queue before task %zu", k,
                         i, want[k]);
            if (i == want[k] && s != STATUS_PENDING)
                fail_msg("step %zu: task %zu was not sent (state %d)", k, i,
                         s);
        }
        prev_b = b;
        prev_i = want[k];
    }
    assert_int_equal(tent_task_status(f->e, prev_b, prev_i, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
}

static void test_off_by_default_sends_at_once(void **state)
{
    (void)state;
    fake_behavior[0].polls_before_done = 1000;
    struct tu_fx f = open_q(NULL);
    assert_null(tent_engine_cast(f.e)->rq);
    long long rel[4] = {40000000000ll, 1000000ll, 0, -1000000ll};
    f.b = submit_deadlines(&f, rel, 4);
    /* every one handed over by the submit, in submit order */
    assert_int_equal(fake_stats[0].submitted, 4);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(state_of(f.e, f.b, i), STATUS_PENDING);
    fake_behavior[0].polls_before_done = 0;
    tent_status_t st;
    assert_int_equal(tu_wait_all(f.e, f.b, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    tu_fx_close(&f);
}

static void test_fifo_without_deadline_aware(void **state)
{
    (void)state;
    struct tu_fx f = open_q(TU_LIST("enable_runtime_queue", "true",
                                    "runtime_queue/max_dispatch_owners", "1"));
    tent_batch_id_t hold = block_window(&f);
    long long rel[4] = {40000000000ll, 10000000000ll, 0, 20000000000ll};
    f.b = submit_deadlines(&f, rel, 4);
    assert_int_equal(fake_stats[0].submitted, 1);
    expect_order(&f, hold, f.b, (const size_t[]){0, 1, 2, 3}, 4);
    assert_int_equal(tent_free_batch(f.e, hold), TENT_OK);
    tu_fx_close(&f);
}

static void test_edf_under_full_window(void **state)
{
    (void)state;
    struct tu_fx f = open_q(TU_LIST("enable_runtime_queue", "true",
                                    "runtime_queue/max_dispatch_owners", "1",
                                    "runtime_queue/deadline_aware", "true"));
    tent_batch_id_t hold = block_window(&f);
    long long rel[4] = {40000000000ll, 10000000000ll, 0, 20000000000ll};
    f.b = submit_deadlines(&f, rel, 4);
    /* a later submit with an earlier deadline goes ahead of them all */
    long long rel2[1] = {5000000000ll};
    tent_batch_id_t b2 = submit_deadlines(&f, rel2, 1);
    assert_int_equal(fake_stats[0].submitted, 1);
    fake_behavior[0].never_complete = false;
    tent_status_t st;
    assert_int_equal(tent_task_status(f.e, hold, 0, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(state_of(f.e, b2, 0), STATUS_PENDING);
    assert_int_equal(state_of(f.e, f.b, 1), STATUS_WAITING);
    /* then by deadline, the one without last */
    expect_order(&f, b2, f.b, (const size_t[]){1, 3, 0, 2}, 4);
    assert_memory_equal(f.p.src + BLK, f.p.dst + BLK, 4 * BLK);
    assert_int_equal(tent_free_batch(f.e, b2), TENT_OK);
    assert_int_equal(tent_free_batch(f.e, hold), TENT_OK);
    tu_fx_close(&f);
}

/* A request past its deadline goes after those that can still make theirs
 * when promotion is on; without it, EDF sends it first. */
static void run_promotion(const char *slack, const size_t *want)
{
    struct tu_fx f = open_q(TU_LIST("enable_runtime_queue", "true",
                                    "runtime_queue/max_dispatch_owners", "1",
                                    "runtime_queue/deadline_aware", "true",
                                    "runtime_queue/promotion_slack_ns", slack));
    tent_batch_id_t hold = block_window(&f);
    long long rel[3] = {-1000000ll, 0, 500000000ll};
    f.b = submit_deadlines(&f, rel, 3);
    expect_order(&f, hold, f.b, want, 3);
    assert_int_equal(tent_free_batch(f.e, hold), TENT_OK);
    tu_fx_close(&f);
}

static void test_promotion(void **state)
{
    (void)state;
    run_promotion("0", (const size_t[]){0, 2, 1});
    fake_transports_reset();
    run_promotion("2000000000", (const size_t[]){2, 0, 1});
}

static void test_admission_limits(void **state)
{
    (void)state;
    fake_behavior[0].polls_before_done = 1000;
    struct tu_fx f =
        open_q(TU_LIST("enable_runtime_queue", "true",
                       "runtime_queue/max_outstanding_owners", "3",
                       "runtime_queue/max_dispatch_owners", "1"));
    long long rel[2] = {0, 0};
    f.b = submit_deadlines(&f, rel, 2);
    tent_batch_id_t b2 = tent_allocate_batch(f.e, 2);
    tent_request_t r[2] = {tu_write(&f.p, 0, BLK), tu_write(&f.p, BLK, BLK)};
    assert_int_equal(tent_submit(f.e, b2, r, 2), TENT_ECAPACITY);
    assert_non_null(strstr(tent_last_error(), "max_outstanding_owners 3"));
    /* nothing of the refused submit stayed */
    assert_int_equal(tent_batch_peek(tent_engine_cast(f.e), b2)->ntasks, 0);
    assert_int_equal(tent_submit(f.e, b2, r, 1), TENT_OK);
    /* a freed batch gives its queued requests back */
    assert_int_equal(tent_free_batch(f.e, b2), TENT_OK);
    fake_behavior[0].polls_before_done = 0;
    tent_status_t st;
    assert_int_equal(tu_wait_all(f.e, f.b, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    b2 = tent_allocate_batch(f.e, 3);
    tent_request_t r3[3] = {tu_write(&f.p, 0, BLK), tu_write(&f.p, BLK, BLK),
                            tu_write(&f.p, 2 * BLK, BLK)};
    assert_int_equal(tent_submit(f.e, b2, r3, 3), TENT_OK);
    assert_int_equal(tu_wait_all(f.e, b2, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(f.e, b2), TENT_OK);
    tu_fx_close(&f);
}

#define BIG (1u << 20)

static void test_infeasible_drop(void **state)
{
    (void)state;
    /* each request takes at least 20 ms: the rate measured is at most
     * 50 MB/s */
    fake_behavior[0].complete_after_ns = 20000000;
    tu_config(TU_LIST("fake_a"));
    tent_set_config("enable_runtime_queue", "true");
    tent_set_config("runtime_queue/deadline_aware", "true");
    tent_set_config("runtime_queue/mlu_local_threshold", "1.0");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    struct tent_metrics *m = tent_engine_cast(e)->metrics;
    struct tu_bufs p;
    tu_bufs_init(e, &p, 4 * BIG);
    tent_batch_id_t b = tent_allocate_batch(e, 8);
    tent_request_t r = tu_write(&p, 0, BIG);
    /* no measurement yet: a tight deadline is not judged, only a past one */
    r.deadline_ns = tent_now_ns() + 1000000;
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    tent_status_t st;
    assert_int_equal(tu_wait_task(e, b, 0, &st, 5000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_metrics_total(m, TM_DEADLINE_INFEASIBLE), 0);
    /* missed, so the MLU observed is above 1000 permille */
    assert_int_equal(tent_metrics_total(m, TM_DEADLINE_MLU), 1);

    /* measured now: 1 MiB in 2 ms cannot be met, fails at once */
    r = tu_write(&p, BIG, BIG);
    r.deadline_ns = tent_now_ns() + 2000000;
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    assert_int_equal(state_of(e, b, 1), STATUS_FAILED);
    int code, native;
    char msg[512];
    assert_int_equal(tent_task_error(e, b, 1, &code, &native, msg, sizeof(msg)),
                     TENT_OK);
    assert_int_equal(code, TENT_ETIMEDOUT);
    assert_non_null(strstr(msg, "deadline infeasible"));
    assert_non_null(strstr(msg, "measured"));
    assert_non_null(strstr(msg, "mlu_local_threshold"));
    assert_int_equal(tent_metrics_total(m, TM_DEADLINE_INFEASIBLE), 1);
    assert_int_equal(p.dst[BIG], 0); /* never sent */

    /* a deadline already past fails too, whatever the rate */
    r = tu_write(&p, 2 * BIG, BLK);
    r.deadline_ns = tent_now_ns() - 1000;
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    assert_int_equal(state_of(e, b, 2), STATUS_FAILED);
    assert_int_equal(tent_task_error(e, b, 2, &code, &native, msg, sizeof(msg)),
                     TENT_OK);
    assert_non_null(strstr(msg, "deadline passed"));
    assert_int_equal(tent_metrics_total(m, TM_DEADLINE_INFEASIBLE), 2);

    /* a generous deadline is met, its MLU below 1000 permille */
    r = tu_write(&p, 3 * BIG, BIG);
    r.deadline_ns = tent_now_ns() + 20000000000ull;
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    assert_int_equal(tu_wait_task(e, b, 3, &st, 5000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_metrics_total(m, TM_DEADLINE_MLU), 2);
    char *text;
    size_t len;
    assert_int_equal(tent_metrics_render(m, TM_FMT_PROMETHEUS, &text, &len),
                     TENT_OK);
    assert_non_null(strstr(text, "tent_deadline_infeasible_total{transport="));
    assert_non_null(strstr(text, "tent_deadline_mlu_permille_bucket{"));
    assert_non_null(strstr(text, "le=\"100\"} 1\n"));
    free(text);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

struct stress_arg {
    tent_engine_t e;
    struct tu_bufs *p;
    int id, fails;
};

#define STRESS_BATCHES 150
/* Every stress request writes a block of its own: requests in flight at
 * once (a batch freed in flight, other threads' batches) are dispatched
 * by whichever thread pumps the queue, and the fake transport copies at
 * dispatch, so two of them on one block would race in this process. */
#define STRESS_BLK 512
#define STRESS_LEN /* whole pages, as aligned_alloc wants */                \
    ((3 * STRESS_BATCHES * 3 * STRESS_BLK + 4095) / 4096 * 4096)

/* Submits STRESS_BATCHES batches of 1..3 requests with deadlines or none,
 * waiting on some and freeing others in flight. */
static void *stress_thread(void *arg)
{
    struct stress_arg *a = arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(a->id + 1);
    for (int k = 0; k < STRESS_BATCHES; k++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t n = 1 + rng % 3;
        tent_batch_id_t b = tent_allocate_batch(a->e, n);
        tent_request_t r[3];
        for (size_t i = 0; i < n; i++) {
            size_t blk = ((size_t)a->id * STRESS_BATCHES + (size_t)k) * 3 + i;
            r[i] = tu_write(a->p, blk * STRESS_BLK, STRESS_BLK);
            r[i].deadline_ns =
                (rng >> 8) % 3 ? tent_now_ns() + (rng >> 16) % 50000000 : 0;
        }
        int rc = tent_submit(a->e, b, r, n);
        if (rc == TENT_OK && (rng >> 4) % 4) {
            tent_status_t st;
            int wrc = tu_wait_all(a->e, b, &st, 5000);
            if (wrc != TENT_OK || st.status != STATUS_COMPLETED) {
                if (!a->fails++)
                    print_error("thread %d: batch %d: rc %d status %d: %s\n",
                                a->id, k, wrc, st.status, tent_last_error());
            }
        } else if (rc != TENT_OK && rc != TENT_ECAPACITY) {
            if (!a->fails++)
                print_error("thread %d: batch %d: submit %d: %s\n", a->id, k,
                            rc, tent_last_error());
        }
        tent_free_batch(a->e, b);
    }
    return NULL;
}

/* Threads submitting, polling and freeing batches through a small window:
 * every request ends, and the queue's accounting comes back to empty (a
 * submit of max_outstanding_owners requests is admitted again). */
static void test_threads_share_the_queue(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(
        TU_LIST("fake_a"),
        TU_LIST("enable_runtime_queue", "true",
                "runtime_queue/max_outstanding_owners", "8",
                "runtime_queue/max_dispatch_owners", "2",
                "runtime_queue/deadline_aware", "true",
                "runtime_queue/promotion_slack_ns", "1000000"),
        STRESS_LEN);
    pthread_t th[3];
    struct stress_arg a[3];
    for (int i = 0; i < 3; i++) {
        a[i] = (struct stress_arg){.e = f.e, .p = &f.p, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, stress_thread, &a[i]),
                         0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(a[i].fails, 0);
    }
    /* batches freed in flight end as they are reaped: poll them out */
    f.b = tent_allocate_batch(f.e, 8);
    tent_request_t r[8];
    for (size_t i = 0; i < 8; i++)
        r[i] = tu_write(&f.p, i * BLK / 2, BLK / 2);
    long end = tu_now_ms() + 5000;
    int rc;
    while ((rc = tent_submit(f.e, f.b, r, 8)) == TENT_ECAPACITY &&
           tu_now_ms() < end) {
        tent_batch_id_t x = tent_allocate_batch(f.e, 1);
        tent_free_batch(f.e, x); /* reaps the deferred batches */
    }
    assert_int_equal(rc, TENT_OK);
    tent_status_t st;
    assert_int_equal(tu_wait_all(f.e, f.b, &st, 5000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    tu_fx_close(&f);
}

static void test_bad_keys(void **state)
{
    (void)state;
    tu_config(TU_LIST("fake_a"));
    tent_set_config("enable_runtime_queue", "true");
    tent_set_config("runtime_queue/max_dispatch_owners", "0");
    assert_null(tent_create_engine());
    assert_non_null(strstr(tent_last_error(), "max_dispatch_owners"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TU_TEST(test_off_by_default_sends_at_once),
        TU_TEST(test_fifo_without_deadline_aware),
        TU_TEST(test_edf_under_full_window),
        TU_TEST(test_promotion),
        TU_TEST(test_admission_limits),
        TU_TEST(test_infeasible_drop),
        TU_TEST(test_threads_share_the_queue),
        TU_TEST(test_bad_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
