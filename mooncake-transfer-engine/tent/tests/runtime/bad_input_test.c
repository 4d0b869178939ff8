/* A table of bad inputs to the public API.  Each row runs against a fresh
 * engine (fake_a installed, two registered buffers, an empty batch of
 * capacity 4, a freed batch id) and asserts:
 *   - the exact TENT_E* code;
 *   - that tent_last_error() names the bad value;
 *   - that nothing was half-applied: the batch is still empty, the local
 *     segment still has exactly its two buffers, the transport saw no
 *     request and no notification was queued. */
#include "common/error.h"
#include "test_util.h"

#include <limits.h>

#define LEN 8192

struct fx {
    tent_engine_t e;
    struct tu_bufs p;
    tent_batch_id_t b;     /* capacity 4, empty */
    tent_batch_id_t freed; /* allocated then freed */
    char expect[256];      /* message fragment computed by the case */
};

static tent_request_t good(struct fx *f)
{
    return tu_write(&f->p, 0, 1024);
}

/* Each case is a function running one bad call and returning its code. */
#define CASE(fn) static int fn(struct fx *f)

/* ---- NULL engine ---- */
CASE(null_engine_submit)
{
    tent_request_t r = good(f);
    return tent_submit(NULL, f->b, &r, 1);
}
CASE(null_engine_allocate_batch)
{
    (void)f;
    return tent_allocate_batch(NULL, 4) == TENT_INVALID_BATCH_ID ? TENT_ENULL
                                                                 : 0;
}
CASE(null_engine_free_batch)
{
    return tent_free_batch(NULL, f->b);
}
CASE(null_engine_task_status)
{
    tent_status_t st;
    return tent_task_status(NULL, f->b, 0, &st);
}
CASE(null_engine_register)
{
    return tent_register_memory(NULL, f->p.src, 16);
}
CASE(null_engine_open_segment)
{
    (void)f;
    tent_segment_id_t h;
    return tent_open_segment(NULL, &h, "x");
}
CASE(null_engine_allocate_memory)
{
    (void)f;
    void *a;
    return tent_allocate_memory(NULL, &a, 4096, "cpu");
}
CASE(null_engine_send_notifs)
{
    (void)f;
    return tent_send_notifs(NULL, LOCAL_SEGMENT_ID, "n", "m");
}

/* ---- NULL pointers ---- */
CASE(null_entries)
{
    return tent_submit(f->e, f->b, NULL, 1);
}
CASE(null_status)
{
    return tent_task_status(f->e, f->b, 0, NULL);
}
CASE(null_overall_status)
{
    return tent_overall_status(f->e, f->b, NULL);
}
CASE(null_status_list)
{
    size_t n = 4;
    return tent_task_status_list(f->e, f->b, NULL, &n);
}
CASE(null_status_list_count)
{
    tent_status_t st[4];
    return tent_task_status_list(f->e, f->b, st, NULL);
}
CASE(null_register_addr)
{
    return tent_register_memory(f->e, NULL, 4096);
}
CASE(null_register_options)
{
    return tent_register_memory_ex(f->e, f->p.src, 16, NULL);
}
CASE(null_register_batch_addrs)
{
    size_t s = 16;
    return tent_register_memory_batch(f->e, NULL, &s, 1,
                                      PERM_GLOBAL_READ_WRITE);
}
CASE(null_allocate_out)
{
    return tent_allocate_memory(f->e, NULL, 4096, "cpu");
}
CASE(null_open_segment_handle)
{
    return tent_open_segment(f->e, NULL, "peer:1");
}
CASE(null_segment_name_buf)
{
    return tent_segment_name(f->e, NULL, 64);
}
CASE(null_segment_info)
{
    return tent_get_segment_info(f->e, LOCAL_SEGMENT_ID, NULL);
}
CASE(null_request_source)
{
    tent_request_t r = good(f);
    r.source = NULL;
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(null_notif_name)
{
    tent_request_t r = good(f);
    return tent_submit_notif(f->e, f->b, &r, 1, NULL, "m");
}
CASE(null_send_notif_message)
{
    return tent_send_notifs(f->e, LOCAL_SEGMENT_ID, "n", NULL);
}
CASE(null_recv_notifs)
{
    return tent_recv_notifs(f->e, NULL);
}
CASE(null_rpc_port)
{
    char buf[64];
    return tent_rpc_server_addr_port(f->e, buf, sizeof(buf), NULL);
}

/* ---- unknown ids ---- */
CASE(unknown_target_segment)
{
    tent_request_t r = good(f);
    r.target_id = 99;
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(unknown_segment_info)
{
    tent_segment_info_t info;
    return tent_get_segment_info(f->e, 42, &info);
}
CASE(unknown_close_segment)
{
    return tent_close_segment(f->e, 77);
}
CASE(unknown_send_notif_segment)
{
    return tent_send_notifs(f->e, 55, "n", "m");
}
CASE(unknown_segment_name)
{
    tent_segment_id_t h;
    return tent_open_segment(f->e, &h, "nosuch-host:4242");
}
CASE(unknown_batch_submit)
{
    tent_request_t r = good(f);
    return tent_submit(f->e, 0xdead, &r, 1);
}
CASE(invalid_batch_id_zero)
{
    tent_status_t st;
    return tent_overall_status(f->e, TENT_INVALID_BATCH_ID, &st);
}
CASE(freed_batch_submit)
{
    tent_request_t r = good(f);
    snprintf(f->expect, sizeof(f->expect), "%#llx",
             (unsigned long long)f->freed);
    return tent_submit(f->e, f->freed, &r, 1);
}
CASE(freed_batch_status)
{
    tent_status_t st;
    snprintf(f->expect, sizeof(f->expect), "%#llx",
             (unsigned long long)f->freed);
    return tent_task_status(f->e, f->freed, 0, &st);
}
CASE(freed_batch_free)
{
    snprintf(f->expect, sizeof(f->expect), "%#llx",
             (unsigned long long)f->freed);
    return tent_free_batch(f->e, f->freed);
}
CASE(freed_batch_cancel)
{
    return tent_cancel_task(f->e, f->freed, 0);
}
CASE(unknown_task_id)
{
    tent_status_t st;
    return tent_task_status(f->e, f->b, 9, &st);
}

/* ---- zero lengths and counts ---- */
CASE(zero_length_request)
{
    tent_request_t r = good(f);
    r.length = 0;
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(zero_count_submit)
{
    tent_request_t r = good(f);
    return tent_submit(f->e, f->b, &r, 0);
}
CASE(zero_batch_size)
{
    return tent_allocate_batch(f->e, 0) == TENT_INVALID_BATCH_ID ? TENT_EINVAL
                                                                 : 0;
}
CASE(huge_batch_size)
{
    return tent_allocate_batch(f->e, (size_t)1 << 40) == TENT_INVALID_BATCH_ID
               ? TENT_EINVAL
               : 0;
}
CASE(zero_register_size)
{
    return tent_register_memory(f->e, f->p.src + LEN, 0);
}
CASE(zero_allocate_size)
{
    void *a;
    return tent_allocate_memory(f->e, &a, 0, "cpu");
}
CASE(zero_register_batch_count)
{
    void *a = f->p.src;
    size_t s = 16;
    return tent_register_memory_batch(f->e, &a, &s, 0, PERM_GLOBAL_READ_WRITE);
}

/* ---- memory that is not registered, ranges outside buffers ---- */
CASE(unregistered_source)
{
    static char stack_like[4096];
    tent_request_t r = good(f);
    r.source = stack_like;
    snprintf(f->expect, sizeof(f->expect), "%p", (void *)stack_like);
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(source_runs_past_buffer)
{
    tent_request_t r = good(f);
    r.source = f->p.src + LEN - 10;
    r.length = 100;
    snprintf(f->expect, sizeof(f->expect), "%p", (void *)(f->p.src + LEN - 10));
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(target_outside_buffers)
{
    tent_request_t r = good(f);
    r.target_offset = 0x1000;
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(target_runs_past_buffer)
{
    tent_request_t r = good(f);
    r.target_offset = (uintptr_t)(f->p.dst + LEN - 100);
    r.length = 200;
    snprintf(f->expect, sizeof(f->expect), "%#llx",
             (unsigned long long)r.target_offset);
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(length_wraps)
{
    tent_request_t r = good(f);
    r.length = UINT64_MAX - 10;
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(more_than_capacity)
{
    tent_request_t r[5];
    for (int i = 0; i < 5; i++)
        r[i] = good(f);
    return tent_submit(f->e, f->b, r, 5);
}
CASE(read_only_target_write)
{
    char *ro = aligned_alloc(4096, 4096);
    assert_int_equal(
        tent_register_memory_with_perm(f->e, ro, 4096, PERM_GLOBAL_READ_ONLY),
        TENT_OK);
    tent_request_t r = good(f);
    r.target_offset = (uintptr_t)ro;
    int rc = tent_submit(f->e, f->b, &r, 1);
    assert_int_equal(tent_unregister_memory(f->e, ro, 4096), TENT_OK);
    free(ro);
    return rc;
}

/* ---- bad enumerations ---- */
CASE(bad_opcode)
{
    tent_request_t r = good(f);
    r.opcode = 7;
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(bad_priority_high)
{
    tent_request_t r = good(f);
    r.priority = 3;
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(bad_priority_negative)
{
    tent_request_t r = good(f);
    r.priority = -1;
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(bad_hint)
{
    tent_request_t r = good(f);
    r.transport_hint = 99;
    return tent_submit(f->e, f->b, &r, 1);
}
CASE(bad_permission)
{
    return tent_register_memory_with_perm(f->e, f->p.src + LEN, 16, 5);
}
CASE(bad_register_transport_type)
{
    tent_memory_options_t o;
    memset(&o, 0, sizeof(o));
    o.transport_type = 99;
    return tent_register_memory_ex(f->e, f->p.src + LEN, 16, &o);
}
CASE(register_with_uninstalled_transport)
{
    static char area[64];
    tent_memory_options_t o;
    memset(&o, 0, sizeof(o));
    o.permission = PERM_GLOBAL_READ_WRITE;
    o.transport_type = TRANSPORT_RDMA;
    return tent_register_memory_ex(f->e, area, sizeof(area), &o);
}
CASE(bad_allocate_location)
{
    void *a;
    return tent_allocate_memory(f->e, &a, 4096, "gpu:0");
}
/* Device memory needs ACL; this test runs without libascendcl.so. */
CASE(allocate_npu_without_acl)
{
    void *a;
    return tent_allocate_memory(f->e, &a, 4096, "npu:0");
}
CASE(bad_numa_node)
{
    void *a;
    return tent_allocate_memory(f->e, &a, 4096, "cpu:4000");
}

/* ---- one bad request among good ones: nothing submitted ---- */
CASE(bad_among_good_opcode)
{
    tent_request_t r[3] = {good(f), good(f), good(f)};
    r[1].opcode = -3;
    return tent_submit(f->e, f->b, r, 3);
}
CASE(bad_among_good_range)
{
    tent_request_t r[3] = {good(f), good(f), good(f)};
    r[2].target_offset = 64; /* no buffer there */
    return tent_submit(f->e, f->b, r, 3);
}
CASE(bad_among_good_notif)
{
    tent_request_t r[2] = {good(f), good(f)};
    r[1].target_id = 12;
    return tent_submit_notif(f->e, f->b, r, 2, "done", "payload");
}

/* ---- unregistration (duplicate and overlapping registrations are
 * accepted, as in TENT: memory_test covers them) ---- */
CASE(unregister_unknown)
{
    snprintf(f->expect, sizeof(f->expect), "%p", (void *)(f->p.src + 64));
    return tent_unregister_memory(f->e, f->p.src + 64, 0);
}
CASE(unregister_wrong_size)
{
    return tent_unregister_memory(f->e, f->p.src, 5);
}
CASE(free_memory_not_allocated)
{
    return tent_free_memory(f->e, f->p.src);
}

/* ---- sizes of outputs and messages ---- */
CASE(segment_name_buffer_too_small)
{
    char buf[2];
    return tent_segment_name(f->e, buf, sizeof(buf));
}
CASE(notif_name_too_long)
{
    char name[300];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    return tent_send_notifs(f->e, LOCAL_SEGMENT_ID, name, "m");
}
CASE(notif_message_too_long_on_submit)
{
    char *msg = malloc(5000);
    memset(msg, 'm', 4999);
    msg[4999] = '\0';
    tent_request_t r = good(f);
    int rc = tent_submit_notif(f->e, f->b, &r, 1, "n", msg);
    free(msg);
    return rc;
}
CASE(empty_segment_name)
{
    tent_segment_id_t h;
    return tent_open_segment(f->e, &h, "");
}

struct bad_case {
    const char *name;
    int (*call)(struct fx *f);
    int code;
    const char *msg; /* must appear in tent_last_error() */
};

#define ROW(fn, code, msg)                                                     \
    {                                                                          \
#fn, fn, code, msg                                                     \
    }

static const struct bad_case cases[] = {
    ROW(null_engine_submit, TENT_ENULL, "tent_submit: engine is NULL"),
    ROW(null_engine_allocate_batch, TENT_ENULL,
        "tent_allocate_batch: engine is NULL"),
    ROW(null_engine_free_batch, TENT_ENULL, "tent_free_batch: engine is NULL"),
    ROW(null_engine_task_status, TENT_ENULL,
        "tent_task_status: engine is NULL"),
    ROW(null_engine_register, TENT_ENULL, "engine is NULL"),
    ROW(null_engine_open_segment, TENT_ENULL,
        "tent_open_segment: engine is NULL"),
    ROW(null_engine_allocate_memory, TENT_ENULL,
        "tent_allocate_memory: engine is NULL"),
    ROW(null_engine_send_notifs, TENT_ENULL,
        "tent_send_notifs: engine is NULL"),
    ROW(null_entries, TENT_ENULL, "entries is NULL"),
    ROW(null_status, TENT_ENULL, "status is NULL"),
    ROW(null_overall_status, TENT_ENULL, "tent_overall_status: status is NULL"),
    ROW(null_status_list, TENT_ENULL, "statuses or count is NULL"),
    ROW(null_status_list_count, TENT_ENULL, "statuses or count is NULL"),
    ROW(null_register_addr, TENT_ENULL, "address is NULL"),
    ROW(null_register_options, TENT_ENULL, "options are NULL"),
    ROW(null_register_batch_addrs, TENT_ENULL, "addrs, sizes or options"),
    ROW(null_allocate_out, TENT_ENULL, "addr or options is NULL"),
    ROW(null_open_segment_handle, TENT_ENULL, "handle is NULL"),
    ROW(null_segment_name_buf, TENT_ENULL, "buffer is NULL"),
    ROW(null_segment_info, TENT_ENULL, "info is NULL"),
    ROW(null_request_source, TENT_ENULL, "request 0: source is NULL"),
    ROW(null_notif_name, TENT_ENULL, "name or message is NULL"),
    ROW(null_send_notif_message, TENT_ENULL, "name or message is NULL"),
    ROW(null_recv_notifs, TENT_ENULL, "info is NULL"),
    ROW(null_rpc_port, TENT_ENULL, "port is NULL"),
    ROW(unknown_target_segment, TENT_ENOSEGMENT, "unknown segment id 99"),
    ROW(unknown_segment_info, TENT_ENOSEGMENT, "unknown segment id 42"),
    ROW(unknown_close_segment, TENT_ENOSEGMENT, "unknown segment id 77"),
    ROW(unknown_send_notif_segment, TENT_ENOSEGMENT, "unknown segment id 55"),
    ROW(unknown_segment_name, TENT_ENOSEGMENT, "'nosuch-host:4242'"),
    ROW(unknown_batch_submit, TENT_ENOBATCH, "unknown batch id 0xdead"),
    ROW(invalid_batch_id_zero, TENT_ENOBATCH, "unknown batch id 0"),
    ROW(freed_batch_submit, TENT_ENOBATCH, "unknown batch id"),
    ROW(freed_batch_status, TENT_ENOBATCH, "unknown batch id"),
    ROW(freed_batch_free, TENT_ENOBATCH, "unknown batch id"),
    ROW(freed_batch_cancel, TENT_ENOBATCH, "tent_cancel_task: unknown batch"),
    ROW(unknown_task_id, TENT_ENOTASK, "task 9"),
    ROW(zero_length_request, TENT_EINVAL, "request 0: length is 0"),
    ROW(zero_count_submit, TENT_EINVAL, "count is 0"),
    ROW(zero_batch_size, TENT_EINVAL, "batch size 0"),
    ROW(huge_batch_size, TENT_EINVAL, "batch size 1099511627776"),
    ROW(zero_register_size, TENT_EINVAL, "is 0"),
    ROW(zero_allocate_size, TENT_EINVAL, "size is 0"),
    ROW(zero_register_batch_count, TENT_EINVAL, "count is 0"),
    ROW(unregistered_source, TENT_ENOTREG, "not inside registered local"),
    ROW(source_runs_past_buffer, TENT_ENOTREG, "+100)"),
    ROW(target_outside_buffers, TENT_ERANGE, "target [0x1000, +1024)"),
    ROW(target_runs_past_buffer, TENT_ERANGE, "outside the buffers"),
    ROW(length_wraps, TENT_EINVAL, "length 18446744073709551605 wraps"),
    ROW(more_than_capacity, TENT_ECAPACITY, "5 request(s) exceed"),
    ROW(read_only_target_write, TENT_EPERM, "read-only"),
    ROW(bad_opcode, TENT_EINVAL, "opcode 7"),
    ROW(bad_priority_high, TENT_EINVAL, "priority 3"),
    ROW(bad_priority_negative, TENT_EINVAL, "priority -1"),
    ROW(bad_hint, TENT_EINVAL, "transport_hint 99"),
    ROW(bad_permission, TENT_EINVAL, "permission 5"),
    ROW(bad_register_transport_type, TENT_EINVAL, "transport_type 99"),
    ROW(register_with_uninstalled_transport, TENT_ENOTRANSPORT,
        "'rdma' is not installed"),
    ROW(bad_allocate_location, TENT_ENOTSUP, "'gpu:0'"),
    ROW(allocate_npu_without_acl, TENT_ENODEV,
        "Ascend runtime libascendcl.so, which cannot be loaded"),
    ROW(bad_numa_node, TENT_EINVAL, "'cpu:4000'"),
    ROW(bad_among_good_opcode, TENT_EINVAL, "request 1: opcode -3"),
    ROW(bad_among_good_range, TENT_ERANGE, "request 2: target"),
    ROW(bad_among_good_notif, TENT_ENOSEGMENT,
        "request 1: unknown segment "
        "id 12"),
    ROW(unregister_unknown, TENT_ENOTREG, "no buffer registered at"),
    ROW(unregister_wrong_size, TENT_EINVAL, "no registration of 5 bytes"),
    ROW(free_memory_not_allocated, TENT_EINVAL,
        "was not allocated by tent_allocate_memory"),
    ROW(segment_name_buffer_too_small, TENT_EOVERFLOW,
        "buffer of 2 bytes is too small"),
    ROW(notif_name_too_long, TENT_EINVAL, "name longer than 255 bytes"),
    ROW(notif_message_too_long_on_submit, TENT_EINVAL,
        "message longer than 4095 bytes"),
    ROW(empty_segment_name, TENT_EINVAL, "segment name is empty"),
};

static void fx_init(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    f->e = TU_ENGINE("fake_a");
    assert_non_null(f->e);
    tu_bufs_init(f->e, &f->p, LEN);
    f->b = tent_allocate_batch(f->e, 4);
    f->freed = tent_allocate_batch(f->e, 4);
    assert_int_not_equal(f->b, TENT_INVALID_BATCH_ID);
    assert_int_equal(tent_free_batch(f->e, f->freed), TENT_OK);
    fake_transports_reset();
}

/* Nothing half-applied: the fixture is as it was built. */
static void fx_check_untouched(struct fx *f, const char *name)
{
    tent_status_t st[4];
    size_t n = 4;
    if (tent_task_status_list(f->e, f->b, st, &n) != TENT_OK || n != 0)
        fail_msg("%s: batch has %zu task(s) after a failed call", name, n);
    tent_segment_info_t info;
    assert_int_equal(tent_get_segment_info(f->e, LOCAL_SEGMENT_ID, &info),
                     TENT_OK);
    if (info.num_buffers != 2)
        fail_msg("%s: %d buffers registered, expected 2", name,
                 info.num_buffers);
    tent_free_segment_info(&info);
    if (fake_stats[0].submitted || fake_stats[0].refused)
        fail_msg("%s: the transport saw a request", name);
    if (fake_stats[0].buffers != 0)
        fail_msg("%s: transport buffer count changed by %d", name,
                 (int)fake_stats[0].buffers);
    tent_notifi_info ni;
    assert_int_equal(tent_recv_notifs(f->e, &ni), TENT_OK);
    if (ni.num_records != 0)
        fail_msg("%s: a notification was queued", name);
    tent_free_notifs(&ni);
    /* Still fully usable: a good request goes through. */
    tent_request_t r = good(f);
    assert_int_equal(tent_submit(f->e, f->b, &r, 1), TENT_OK);
    tent_status_t s;
    assert_int_equal(tu_wait_task(f->e, f->b, 0, &s, 2000), TENT_OK);
    assert_int_equal(s.status, STATUS_COMPLETED);
}

static void fx_fini(struct fx *f)
{
    assert_int_equal(tent_free_batch(f->e, f->b), TENT_OK);
    tu_bufs_fini(f->e, &f->p);
    tent_destroy_engine(f->e);
}

static void test_bad_input_table(void **state)
{
    (void)state;
    size_t n = sizeof(cases) / sizeof(cases[0]);
    assert_true(n >= 40);
    for (size_t i = 0; i < n; i++) {
        const struct bad_case *c = &cases[i];
        struct fx f;
        fx_init(&f);
        tent_clear_error();
        int rc = c->call(&f);
        if (rc != c->code)
            fail_msg("%s: returned %d (%s), expected %d (%s); last error: %s",
                     c->name, rc, tent_strerror(rc), c->code,
                     tent_strerror(c->code), tent_last_error());
        if (!strstr(tent_last_error(), c->msg))
            fail_msg("%s: last error \"%s\" lacks \"%s\"", c->name,
                     tent_last_error(), c->msg);
        if (f.expect[0] && !strstr(tent_last_error(), f.expect))
            fail_msg("%s: last error \"%s\" lacks \"%s\"", c->name,
                     tent_last_error(), f.expect);
        fx_check_untouched(&f, c->name);
        fx_fini(&f);
    }
    print_message("%zu bad inputs checked\n", n);
}

/* tent_strerror names every code and never returns NULL. */
static void test_strerror(void **state)
{
    (void)state;
    for (int c = 0; c >= TENT_ESTALE; c--) {
        const char *s = tent_strerror(c);
        assert_non_null(s);
        assert_true(strncmp(s, "TENT_E", 6) == 0 || c == 0);
    }
    assert_string_equal(tent_strerror(TENT_ENODEV),
                        "TENT_ENODEV: DeviceNotFound");
    assert_non_null(tent_strerror(-1000));
    assert_non_null(tent_strerror(5));
    /* Codes out of range, including the ones whose negation overflows (the
     * UBSan build aborts if the code negates INT_MIN). */
    const int outside[] = {INT_MIN, INT_MIN + 1, -INT_MAX,
                           INT_MAX, 1,           TENT_ESTALE - 1};
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++)
        assert_string_equal(tent_strerror(outside[i]),
                            "unknown TENT error code");
}

/* Calls without a return code tolerate NULL and leave no error behind. */
static void test_null_tolerant_calls(void **state)
{
    (void)state;
    tent_destroy_engine(NULL);
    tent_free_segment_info(NULL);
    tent_free_notifs(NULL);
    assert_int_equal(tent_available(NULL), 0);
    tent_set_config(NULL, "1");
    assert_contains(tent_last_error(), "key or value is NULL");
    tent_set_config("log_level", NULL);
    assert_contains(tent_last_error(), "key or value is NULL");
    tent_load_config_from_file(NULL); /* forgets an explicit file */
    tent_segment_info_t info = {0};
    tent_free_segment_info(&info);
    tent_notifi_info ni = {0};
    tent_free_notifs(&ni);
    tent_config_reset_global();
}

/* A message may quote the previous one (e.g. "segment 'x' not found: %s"
 * with tent_last_error()); the quoted text must arrive intact. */
static void test_error_quoting_previous_error(void **state)
{
    (void)state;
    tent_set_error(TENT_EPEER, "connect to 10.0.0.1:5000 failed: refused");
    assert_int_equal(tent_set_error(TENT_ENOSEGMENT,
                                    "segment '10.0.0.1:5000' not found: %s",
                                    tent_last_error()),
                     TENT_ENOSEGMENT);
    assert_string_equal(tent_last_error(),
                        "segment '10.0.0.1:5000' not found: connect to "
                        "10.0.0.1:5000 failed: refused");
}

int main(void)
{
    tu_reset_all();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input_table),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_error_quoting_previous_error),
        cmocka_unit_test(test_null_tolerant_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
