/* Engine teardown with work still in flight.  By design the engine then
 * keeps (leaks) the batch, its sub-batches and the pinned buffers' records
 * instead of freeing memory a backend may still touch, so CTest runs this
 * binary with LeakSanitizer off (see CMakeLists.txt). */
#include "test_util.h"

/* Destroying an engine with a never-completing task keeps that memory
 * registered and logs it; the engine still goes away. */
static void test_destroy_with_inflight_task(void **state)
{
    (void)state;
    TU_CONFIG("fake_a");
    tent_set_config("log_level", "warning");
    tent_engine_t e = tent_create_engine();
    char *src = aligned_alloc(4096, 4096), *dst = aligned_alloc(4096, 4096);
    assert_int_equal(tent_register_memory(e, src, 4096), TENT_OK);
    assert_int_equal(tent_register_memory(e, dst, 4096), TENT_OK);
    fake_behavior[0].never_complete = true;
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = src,
                        .target_offset = (uintptr_t)dst,
                        .length = 4096};
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    struct tu_capture cap;
    tu_capture_begin(&cap);
    tent_destroy_engine(e);
    char *log = tu_capture_end(&cap);
    assert_contains(log, "still in flight");
    assert_contains(log, "keeping buffer");
    free(log);
    /* The test's own memory is still ours to free: the engine never frees
     * memory it did not allocate. */
    free(src);
    free(dst);
}

/* Without in-flight work teardown releases everything, including batches
 * the application never freed and memory it never unregistered. */
static void test_destroy_releases_idle_state(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    void *a = NULL;
    assert_int_equal(tent_allocate_memory(e, &a, 4096, "cpu"), TENT_OK);
    assert_int_equal(tent_register_memory(e, a, 4096), TENT_OK);
    char *reg = aligned_alloc(4096, 4096);
    assert_int_equal(tent_register_memory(e, reg, 4096), TENT_OK);
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = a,
                        .target_offset = (uintptr_t)reg,
                        .length = 4096};
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    tent_status_t st;
    assert_int_equal(tu_wait_task(e, b, 0, &st, 2000), TENT_OK);
    assert_int_equal(fake_stats[0].buffers, 2);
    tent_destroy_engine(e);
    assert_int_equal(fake_stats[0].buffers, 0);
    free(reg);
}

/* A transport that fails to quiesce is abandoned: its memory stays
 * registered and mapped, and the log says which transport and why. */
static void test_quiesce_failure_keeps_memory(void **state)
{
    (void)state;
    TU_CONFIG("fault");
    tent_set_config("log_level", "warning");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    void *a = NULL;
    assert_int_equal(tent_allocate_memory(e, &a, 4096, "cpu"), TENT_OK);
    assert_int_equal(tent_register_memory(e, a, 4096), TENT_OK);
    fault_cfg.quiesce_error = TENT_ETIMEDOUT;
    struct tu_capture cap;
    tu_capture_begin(&cap);
    tent_destroy_engine(e);
    char *log = tu_capture_end(&cap);
    assert_contains(log, "quiesce of transport 'fault' failed");
    assert_contains(log, "a transport failed to quiesce");
    free(log);
    /* Still mapped: writing to it must not fault. */
    memset(a, 0x42, 4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TU_TEST(test_destroy_with_inflight_task),
        TU_TEST(test_destroy_releases_idle_state),
        TU_TEST(test_quiesce_failure_keeps_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
