/* Failover through the public API, as in TENT's failover design: a task
 * whose transport fails at completion moves to the next candidate
 * (max_failover_attempts, budget per task), enable_auto_failover_on_poll
 * = false only observes; and beyond TENT, requests a transport refuses at
 * submit move on without resubmitting the ones that started; a failover
 * keeps a WRITE's durability, and a device error on a file WRITE does not
 * fail over (docs/durability.md).  Faults come
 * from the fakes and from the "fault" decorator (wrapping fake_c). */
#include "test_util.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define LEN 16384

#define FAULT_FIRST                                                            \
    "[{\"segment_type\":\"memory\",\"transports\":[\"fault\",\"fake_b\"]}]"

/* Submits n writes of chunk bytes (task i at offset i*chunk) of the pair as
 * the batch under test. */
#define submit_n(f, n, chunk) submit_n_at(TU_HERE, f, n, chunk)
static void submit_n_at(struct tu_at at, struct tu_fx *f, size_t n,
                        size_t chunk)
{
    f->b = tent_allocate_batch(f->e, n);
    at_int_not_equal(at, f->b, TENT_INVALID_BATCH_ID);
    tent_request_t r[64];
    at_true(at, n <= 64);
    for (size_t i = 0; i < n; i++)
        r[i] = tu_write(&f->p, i * chunk, chunk);
    at_int_equal(at, tent_submit(f->e, f->b, r, n), TENT_OK);
}

/* submit_n, then waits (2 s at most) until task 0 leaves PENDING; *st is
 * its status. */
#define submit_wait(f, n, chunk, st) submit_wait_at(TU_HERE, f, n, chunk, st)
static void submit_wait_at(struct tu_at at, struct tu_fx *f, size_t n,
                           size_t chunk, tent_status_t *st)
{
    submit_n_at(at, f, n, chunk);
    at_int_equal(at, tu_wait_task(f->e, f->b, 0, st, 2000), TENT_OK);
}

/* submit_wait with stderr captured meanwhile; returns what was logged
 * (malloc'd, the caller frees it). */
#define submit_wait_logged(f, n, chunk, st)                                    \
    submit_wait_logged_at(TU_HERE, f, n, chunk, st)
static char *submit_wait_logged_at(struct tu_at at, struct tu_fx *f, size_t n,
                                   size_t chunk, tent_status_t *st)
{
    struct tu_capture cap;
    tu_capture_begin_at(at, &cap);
    submit_n_at(at, f, n, chunk);
    int rc = tu_wait_task(f->e, f->b, 0, st, 2000);
    char *log = tu_capture_end_at(at, &cap);
    at_int_equal(at, rc, TENT_OK);
    return log;
}

static void test_primary_fails_secondary_completes(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b"),
                                TU_LIST("log_level", "warning"), LEN);
    fake_behavior[0].fail_completion = true;
    fake_behavior[0].polls_before_done = 2;
    tent_status_t st;
    char *log = submit_wait_logged(&f, 1, LEN, &st);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, LEN);
    assert_memory_equal(f.p.src, f.p.dst, LEN);
    assert_int_equal(fake_stats[0].failed, 1);
    assert_int_equal(fake_stats[1].submitted, 1);
    assert_int_equal(fake_stats[1].completed, 1);
    assert_contains(log, "Transport failover: fake_a -> fake_b (attempt 1/3)");
    free(log);
    /* The transport actually used is the one the task failed over to. */
    char name[16];
    assert_int_equal(tent_task_transport(f.e, f.b, 0, name, sizeof(name)),
                     TENT_OK);
    assert_string_equal(name, "fake_b");
    assert_int_equal(tent_task_transport(f.e, f.b, 0, name, 3), TENT_EOVERFLOW);
    assert_int_equal(tent_task_transport(f.e, f.b, 1, name, sizeof(name)),
                     TENT_ENOTASK);
    tu_fx_close(&f);
}

static void test_budget_zero_disables_failover(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b"),
                                TU_LIST("max_failover_attempts", "0"), LEN);
    fake_behavior[0].fail_completion = true;
    tent_status_t st;
    submit_wait(&f, 1, LEN, &st);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(st.transferred_bytes, 0);
    assert_int_equal(fake_stats[1].submitted, 0);
    assert_int_equal(tent_overall_status(f.e, f.b, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_FAILED);
    tu_fx_close(&f);
}

static void test_budget_one(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(
        TU_LIST("fake_a", "fake_b", "fake_c"),
        TU_LIST("max_failover_attempts", "1", "log_level", "warning"), LEN);
    /* One failover is allowed: a -> b completes. */
    fake_behavior[0].fail_completion = true;
    tent_status_t st;
    char *log = submit_wait_logged(&f, 1, LEN, &st);
    assert_contains(log, "Transport failover: fake_a -> fake_b (attempt 1/1)");
    free(log);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(f.e, f.b), TENT_OK);
    /* a and b fail: the budget of one is spent, c is never tried. */
    fake_behavior[1].fail_completion = true;
    log = submit_wait_logged(&f, 1, LEN, &st);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(fake_stats[2].submitted, 0);
    assert_int_equal(fake_stats[0].submitted, 2);
    assert_int_equal(fake_stats[1].submitted, 2);
    assert_contains(log, "failover limit reached (1)");
    free(log);
    tu_fx_close(&f);
}

/* Budget larger than the candidates: each is tried once, then FAILED. */
static void test_candidates_exhausted(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b"),
                                TU_LIST("log_level", "warning"), LEN);
    fake_behavior[0].fail_completion = true;
    fake_behavior[1].fail_completion = true;
    tent_status_t st;
    char *log = submit_wait_logged(&f, 1, LEN, &st);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(fake_stats[0].submitted, 1);
    assert_int_equal(fake_stats[1].submitted, 1);
    assert_contains(log, "No more transports available after fake_b failed");
    free(log);
    tu_fx_close(&f);
}

/* Budget 2 with three failing transports: all three tried once each. */
static void test_budget_two_all_fail(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b", "fake_c"),
                                TU_LIST("max_failover_attempts", "2"), LEN);
    for (int i = 0; i < 3; i++)
        fake_behavior[i].fail_completion = true;
    tent_status_t st;
    submit_wait(&f, 1, LEN, &st);
    assert_int_equal(st.status, STATUS_FAILED);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fake_stats[i].submitted, 1);
        assert_int_equal(fake_stats[i].failed, 1);
    }
    tu_fx_close(&f);
}

/* The budget belongs to each task: eight tasks each fail over once under a
 * budget of one. */
static void test_budget_is_per_task(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b"),
                                TU_LIST("max_failover_attempts", "1"), LEN);
    fake_behavior[0].fail_completion = true;
    submit_n(&f, 8, LEN / 8);
    tent_status_t st;
    assert_int_equal(tu_wait_all(f.e, f.b, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, LEN);
    assert_int_equal(fake_stats[0].failed, 8);
    assert_int_equal(fake_stats[1].completed, 8);
    assert_memory_equal(f.p.src, f.p.dst, LEN);
    tu_fx_close(&f);
}

/* enable_auto_failover_on_poll = false: FAILED is reported, nothing is
 * resubmitted, however often it is polled. */
static void test_poll_observational(void **state)
{
    (void)state;
    struct tu_fx f =
        tu_fx_open(TU_LIST("fake_a", "fake_b"),
                   TU_LIST("enable_auto_failover_on_poll", "false"), LEN);
    fake_behavior[0].fail_completion = true;
    fake_behavior[0].polls_before_done = 1;
    tent_status_t st;
    submit_wait(&f, 2, LEN / 2, &st);
    assert_int_equal(st.status, STATUS_FAILED);
    tent_status_t list[2];
    size_t n = 2;
    for (int k = 0; k < 5; k++) {
        assert_int_equal(tent_task_status_list(f.e, f.b, list, &n), TENT_OK);
        assert_int_equal(n, 2);
    }
    assert_int_equal(list[0].status, STATUS_FAILED);
    assert_int_equal(list[1].status, STATUS_FAILED);
    assert_int_equal(tent_overall_status(f.e, f.b, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(fake_stats[0].submitted, 2);
    assert_int_equal(fake_stats[1].submitted, 0);
    tu_fx_close(&f);
}

/* Failover also happens when the batch is polled as a whole. */
static void test_failover_on_overall_and_list(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b"), NULL, LEN);
    fake_behavior[0].fail_completion = true;
    submit_n(&f, 4, LEN / 4);
    tent_status_t list[4];
    size_t n = 4;
    assert_int_equal(tent_task_status_list(f.e, f.b, list, &n), TENT_OK);
    assert_int_equal(n, 4);
    tent_status_t st;
    assert_int_equal(tu_wait_all(f.e, f.b, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, LEN);
    assert_int_equal(fake_stats[1].completed, 4);
    assert_memory_equal(f.p.src, f.p.dst, LEN);
    tu_fx_close(&f);
}

/* Submit stage: the decorator refuses tasks 1 and 4 of six; only those move
 * to fake_b, the four that started are not submitted again. */
static void test_submit_refusal_moves_only_refused(void **state)
{
    (void)state;
    struct tu_fx f =
        tu_fx_open(TU_LIST("fault", "fake_b"),
                   TU_LIST("policy", FAULT_FIRST, "log_level", "warning"), LEN);
    fault_cfg.fail_submit_slots = (1u << 1) | (1u << 4);
    fault_cfg.delay_polls = 2;
    struct tu_capture cap;
    tu_capture_begin(&cap);
    submit_n(&f, 6, LEN / 8);
    char *log = tu_capture_end(&cap);
    assert_int_equal(fault_stats.refused, 2);
    assert_int_equal(fault_stats.forwarded, 4);
    assert_int_equal(fake_stats[2].submitted, 4); /* fake_c inside fault */
    assert_int_equal(fake_stats[1].submitted, 2);
    assert_contains(log, "Transport failover: fault -> fake_b (attempt 1/3)");
    free(log);
    tent_status_t st;
    assert_int_equal(tu_wait_all(f.e, f.b, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, 6 * (LEN / 8));
    assert_int_equal(fake_stats[1].submitted, 2);
    assert_int_equal(fake_stats[2].submitted, 4);
    assert_int_equal(fault_stats.submit_calls, 1);
    assert_memory_equal(f.p.src, f.p.dst, 6 * (LEN / 8));
    tu_fx_close(&f);
}

/* The second submit call to the decorator is refused whole: only the
 * requests of that tent_submit move. */
static void test_nth_submit_refused(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fault", "fake_b"),
                                TU_LIST("policy", FAULT_FIRST), LEN);
    fault_cfg.fail_nth_submit = 2;
    f.b = tent_allocate_batch(f.e, 8);
    tent_request_t r[8];
    for (size_t i = 0; i < 8; i++)
        r[i] = tu_write(&f.p, i * 1024, 1024);
    assert_int_equal(tent_submit(f.e, f.b, r, 3), TENT_OK);
    assert_int_equal(tent_submit(f.e, f.b, r + 3, 3), TENT_OK);
    assert_int_equal(tent_submit(f.e, f.b, r + 6, 2), TENT_OK);
    assert_int_equal(fault_stats.submit_calls, 3);
    assert_int_equal(fault_stats.forwarded, 5);
    assert_int_equal(fake_stats[1].submitted, 3);
    tent_status_t st;
    assert_int_equal(tu_wait_all(f.e, f.b, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, 8 * 1024);
    assert_memory_equal(f.p.src, f.p.dst, 8 * 1024);
    tu_fx_close(&f);
}

/* Budget 0: a refused request fails at once; the others still complete. */
static void test_submit_refusal_budget_zero(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(
        TU_LIST("fault", "fake_b"),
        TU_LIST("policy", FAULT_FIRST, "max_failover_attempts", "0"), LEN);
    fault_cfg.fail_submit_slots = 1u << 0;
    submit_n(&f, 2, LEN / 2);
    tent_status_t st;
    assert_int_equal(tent_task_status(f.e, f.b, 0, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(tu_wait_task(f.e, f.b, 1, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_overall_status(f.e, f.b, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(st.transferred_bytes, LEN / 2);
    assert_int_equal(fake_stats[1].submitted, 0);
    tu_fx_close(&f);
}

/* Every candidate refuses at submit: FAILED, not stuck PENDING. */
static void test_submit_refused_everywhere(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fault", "fake_b"),
                                TU_LIST("policy", FAULT_FIRST), LEN);
    fault_cfg.fail_submit_slots = ~0ull;
    fake_behavior[1].fail_all_submits = true;
    submit_n(&f, 3, 1024);
    tent_status_t st;
    assert_int_equal(tent_overall_status(f.e, f.b, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(fake_stats[1].refused, 3);
    assert_int_equal(fake_stats[2].submitted, 0);
    tu_fx_close(&f);
}

/* The decorator turns completions into failures, for all or chosen tasks. */
static void test_completed_turned_failed(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fault", "fake_b"),
                                TU_LIST("policy", FAULT_FIRST), LEN);
    fault_cfg.fail_complete_slots = (1u << 2) | (1u << 3);
    submit_n(&f, 4, LEN / 4);
    tent_status_t st;
    assert_int_equal(tu_wait_all(f.e, f.b, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(fault_stats.converted, 2);
    assert_int_equal(fake_stats[1].submitted, 2);
    assert_int_equal(tent_free_batch(f.e, f.b), TENT_OK);

    fault_cfg.fail_complete_slots = 0;
    fault_cfg.completed_to_failed = true;
    fake_behavior[1].fail_completion = true;
    submit_wait(&f, 1, LEN, &st);
    assert_int_equal(st.status, STATUS_FAILED);
    tu_fx_close(&f);
}

/* A delayed completion is PENDING until the delay is over. */
static void test_delayed_completion(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fault"), NULL, LEN);
    fault_cfg.delay_ns = 30 * 1000000L;
    long t0 = tu_now_ms();
    submit_n(&f, 1, LEN);
    tent_status_t st;
    assert_int_equal(tent_task_status(f.e, f.b, 0, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_PENDING);
    assert_int_equal(tu_wait_task(f.e, f.b, 0, &st, 5000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_true(tu_now_ms() - t0 >= 30);
    tu_fx_close(&f);
}

/* A write of the whole pair pinned to the decorator (transport_hint) as the
 * batch under test. */
#define submit_to_fault(f) submit_to_fault_at(TU_HERE, f)
static void submit_to_fault_at(struct tu_at at, struct tu_fx *f)
{
    tent_request_t r = tu_write(&f->p, 0, LEN);
    r.transport_hint = FAULT_TYPE;
    f->b = tent_allocate_batch(f->e, 1);
    at_int_equal(at, tent_submit(f->e, f->b, &r, 1), TENT_OK);
}

/* A task that never completes keeps its batch and memory busy. */
static void test_never_complete_keeps_busy(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fault", "fake_b"), NULL, LEN);
    fault_cfg.never_complete = true;
    submit_to_fault(&f);
    tent_status_t st;
    for (int i = 0; i < 50; i++) {
        assert_int_equal(tent_task_status(f.e, f.b, 0, &st), TENT_OK);
        assert_int_equal(st.status, STATUS_PENDING);
    }
    assert_int_equal(tent_unregister_memory(f.e, f.p.src, f.p.len), TENT_EBUSY);
    assert_int_equal(tent_unregister_memory(f.e, f.p.dst, f.p.len), TENT_EBUSY);
    assert_int_equal(tent_cancel_task(f.e, f.b, 0), TENT_ERUNNING);
    assert_int_equal(fake_stats[1].submitted, 0);
    fault_cfg.never_complete = false;
    assert_int_equal(tu_wait_task(f.e, f.b, 0, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    tu_fx_close(&f);
}

/* A status query that fails says so and leaves the task in flight. */
static void test_status_query_error(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fault", "fake_b"), NULL, LEN);
    submit_to_fault(&f);
    fault_cfg.status_error = TENT_EIO;
    tent_status_t st;
    assert_int_equal(tent_task_status(f.e, f.b, 0, &st), TENT_EIO);
    assert_int_equal(st.status, STATUS_PENDING);
    assert_int_equal(tent_overall_status(f.e, f.b, &st), TENT_EIO);
    assert_int_equal(st.status, STATUS_PENDING);
    assert_int_equal(fake_stats[1].submitted, 0);
    fault_cfg.status_error = 0;
    assert_int_equal(tu_wait_task(f.e, f.b, 0, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    tu_fx_close(&f);
}

/* Durability (docs/durability.md): a WRITE is durable on the transport it
 * fails over to when a transport it was routed to before is; never raised
 * on its first transport by a later candidate; never asked of a READ. */
static void test_failover_keeps_durability(void **state)
{
    (void)state;
    fake_behavior[0].durable = true; /* read at install */
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b"), NULL, LEN);
    fake_behavior[0].fail_completion = true;
    tent_status_t st;
    submit_wait(&f, 1, LEN, &st);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(fake_stats[0].durable_writes, 1);
    assert_int_equal(fake_stats[1].submitted, 1);
    assert_int_equal(fake_stats[1].durable_writes, 1);
    assert_int_equal(tent_free_batch(f.e, f.b), TENT_OK);
    /* a READ is never durable, wherever it goes */
    f.b = tent_allocate_batch(f.e, 1);
    tent_request_t r = tu_write(&f.p, 0, LEN);
    r.opcode = OPCODE_READ;
    assert_int_equal(tent_submit(f.e, f.b, &r, 1), TENT_OK);
    assert_int_equal(tu_wait_task(f.e, f.b, 0, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(fake_stats[1].submitted, 2);
    assert_int_equal(fake_stats[1].durable_writes, 1);
    tu_fx_close(&f);
}

static void test_durability_not_raised_before_failover(void **state)
{
    (void)state;
    fake_behavior[1].durable = true; /* only the second candidate */
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b"), NULL, LEN);
    fake_behavior[0].fail_completion = true;
    tent_status_t st;
    submit_wait(&f, 1, LEN, &st);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(fake_stats[0].submitted, 1);
    assert_int_equal(fake_stats[0].durable_writes, 0);
    assert_int_equal(fake_stats[1].durable_writes, 1); /* its own */
    tu_fx_close(&f);
}

/* A WRITE to a file whose native cause is the device's (EIO, ENOSPC,
 * EDQUOT, EROFS) fails where it was met: no failover; a READ with the same
 * cause, or a WRITE to memory, fails over as before. */
static void test_device_error_on_file_write_is_permanent(void **state)
{
    (void)state;
    char path[] = "/tmp/tent_failover_file.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, LEN), 0);
    close(fd);
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b"), NULL, LEN);
    for (int i = 0; i < 2; i++) {
        fake_behavior[i].caps = TENT_CAP_FILE | TENT_CAP_DRAM_TO_DRAM;
        fake_behavior[i].copy_bytes = false; /* remote is a file offset */
    }
    char name[300];
    snprintf(name, sizeof(name), "file://%s", path);
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(f.e, &h, name), TENT_OK);
    fake_behavior[0].fail_completion = true;
    const int device[] = {EIO, ENOSPC, EDQUOT, EROFS};
    for (size_t k = 0; k < sizeof(device) / sizeof(device[0]); k++) {
        fake_behavior[0].fail_native = device[k];
        for (int op = OPCODE_READ; op <= OPCODE_WRITE; op++) {
            int before = fake_stats[1].submitted;
            tent_batch_id_t b = tent_allocate_batch(f.e, 1);
            tent_request_t r = {.opcode = op,
                                .source = f.p.src,
                                .target_id = h,
                                .target_offset = 0,
                                .length = LEN};
            assert_int_equal(tent_submit(f.e, b, &r, 1), TENT_OK);
            tent_status_t st;
            assert_int_equal(tu_wait_task(f.e, b, 0, &st, 2000), TENT_OK);
            if (op == OPCODE_READ) {
                assert_int_equal(st.status, STATUS_COMPLETED);
                assert_int_equal(fake_stats[1].submitted, before + 1);
            } else {
                assert_int_equal(st.status, STATUS_FAILED);
                assert_int_equal(fake_stats[1].submitted, before);
                int code = 0, native = 0;
                assert_int_equal(
                    tent_task_error(f.e, b, 0, &code, &native, NULL, 0),
                    TENT_OK);
                assert_int_equal(code, TENT_EIO);
                assert_int_equal(native, device[k]);
            }
            assert_int_equal(tent_free_batch(f.e, b), TENT_OK);
        }
    }
    assert_int_equal(tent_close_segment(f.e, h), TENT_OK);
    unlink(path);
    /* memory: the same native code is no device's */
    for (int i = 0; i < 2; i++) {
        fake_behavior[i].caps = TENT_CAP_ALL;
        fake_behavior[i].copy_bytes = true;
    }
    fake_behavior[0].fail_native = ENOSPC;
    tent_status_t st;
    submit_wait(&f, 1, LEN, &st);
    assert_int_equal(st.status, STATUS_COMPLETED);
    tu_fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TU_TEST(test_primary_fails_secondary_completes),
        TU_TEST(test_budget_zero_disables_failover),
        TU_TEST(test_budget_one),
        TU_TEST(test_candidates_exhausted),
        TU_TEST(test_budget_two_all_fail),
        TU_TEST(test_budget_is_per_task),
        TU_TEST(test_poll_observational),
        TU_TEST(test_failover_on_overall_and_list),
        TU_TEST(test_submit_refusal_moves_only_refused),
        TU_TEST(test_nth_submit_refused),
        TU_TEST(test_submit_refusal_budget_zero),
        TU_TEST(test_submit_refused_everywhere),
        TU_TEST(test_completed_turned_failed),
        TU_TEST(test_delayed_completion),
        TU_TEST(test_never_complete_keeps_busy),
        TU_TEST(test_status_query_error),
        TU_TEST(test_failover_keeps_durability),
        TU_TEST(test_durability_not_raised_before_failover),
        TU_TEST(test_device_error_on_file_write_is_permanent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
