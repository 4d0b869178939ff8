#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/config.h"
#include "fake_transport.h"
#include "tent/transfer_engine.h"
#include "transport/transport.h"

static int setup(void **state)
{
    (void)state;
    fake_transports_setup();
    tent_config_reset_global();
    tent_set_config("transports/fake_a/enable", "true");
    tent_set_config("transports/fake_b/enable", "true");
    tent_set_config("transports/tcp/enable", "false"); /* fakes only */
    tent_set_config("log_level", "error");
    return 0;
}

static void test_local_write_completes_and_failover(void **state)
{
    (void)state;
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    char *src = malloc(4096), *dst = malloc(4096);
    memset(src, 0x5a, 4096);
    memset(dst, 0, 4096);
    assert_int_equal(tent_register_memory(e, src, 4096), 0);
    assert_int_equal(tent_register_memory(e, dst, 4096), 0);
    fake_behavior[0].fail_completion = true; /* fake_a fails, fake_b completes */
    tent_batch_id_t b = tent_allocate_batch(e, 4);
    assert_int_not_equal(b, 0);
    tent_request_t r = {0};
    r.opcode = OPCODE_WRITE;
    r.source = src;
    r.target_id = LOCAL_SEGMENT_ID;
    r.target_offset = (uintptr_t)dst;
    r.length = 4096;
    assert_int_equal(tent_submit(e, b, &r, 1), 0);
    tent_status_t st;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(tent_task_status(e, b, 0, &st), 0);
        if (st.status != STATUS_PENDING)
            break;
    }
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(st.transferred_bytes, 4096);
    assert_memory_equal(src, dst, 4096);
    assert_int_equal(fake_stats[0].failed, 1);
    assert_int_equal(fake_stats[1].completed, 1);
    assert_int_equal(tent_free_batch(e, b), 0);
    assert_int_equal(tent_unregister_memory(e, src, 0), 0);
    assert_int_equal(tent_unregister_memory(e, dst, 0), 0);
    tent_destroy_engine(e);
    free(src);
    free(dst);
}

/* Every transport this build has fills every op of the contract: the
 * runtime calls them without testing for NULL (transport.h). */
static void test_every_builtin_fills_every_op(void **state)
{
    (void)state;
    const struct tent_transport_ops *ops[TENT_MAX_TRANSPORTS];
    size_t n = tent_transport_registry_snapshot(ops, TENT_MAX_TRANSPORTS);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++) {
        const struct tent_transport_ops *o = ops[i];
        const void *fns[] = {
            (const void *)o->install,         (const void *)o->uninstall,
            (const void *)o->capabilities,    (const void *)o->can_reach,
            (const void *)o->alloc_sub_batch, (const void *)o->free_sub_batch,
            (const void *)o->submit,          (const void *)o->status,
            (const void *)o->quiesce,         (const void *)o->peer_open,
            (const void *)o->peer_close,      (const void *)o->add_buffer,
            (const void *)o->remove_buffer};
        for (size_t k = 0; k < sizeof(fns) / sizeof(fns[0]); k++)
            if (!fns[k])
                fail_msg("transport '%s' leaves op %zu of the contract NULL",
                         o->name, k);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_builtin_fills_every_op),
        cmocka_unit_test(test_local_write_completes_and_failover),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
