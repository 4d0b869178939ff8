/* The runtime suites' test fixture (tu_setup / tu_teardown, TU_TEST) and
 * their helpers: engines with a chosen set of transports, registered buffer
 * pairs (alone or with their engine: struct tu_fx), polling with a deadline,
 * and stderr capture (tu_capture.h, to check log lines).  The helpers that
 * check report a failure at their caller's line (tu_assert.h).  Header-only;
 * includes <cmocka.h>. */
#ifndef TENT_TEST_UTIL_H
#define TENT_TEST_UTIL_H

#include "common/clock.h"
#include "common/config.h"
#include "fake_transport.h"
#include "fault_transport.h"
#include "tent/transfer_engine.h"
#include "transport/transport.h"
#include "tu_assert.h"
#include "tu_capture.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Resets the process-wide configuration and enables exactly the transports
 * named in the NULL-terminated list (every other registered one is disabled,
 * built-ins included), with quiet logging. */
static inline void tu_config(const char *const *enable)
{
    tent_config_reset_global();
    const struct tent_transport_ops *ops[16];
    size_t n = tent_transport_registry_snapshot(ops, 16);
    for (size_t i = 0; i < n; i++) {
        bool on = false;
        for (const char *const *p = enable; *p; p++)
            on |= strcmp(*p, ops[i]->name) == 0;
        char key[128];
        snprintf(key, sizeof(key), "transports/%s/enable", ops[i]->name);
        tent_set_config(key, on ? "true" : "false");
    }
    tent_set_config("log_level", "error");
    /* these tests count the requests each transport sees: one per task
     * (batch_test.c turns merging on where it tests it) */
    tent_set_config("merge_requests", "false");
}

/* Registers the fakes and the decorator (wrapping fake_c) and resets them. */
static inline void tu_reset_all(void)
{
    fake_transports_setup();
    fault_wrap(&fake_c_ops);
    tent_config_reset_global();
}

/* The fixture of the runtime suites: the fakes and the decorator registered
 * and reset before each test; fakes, decorator and configuration reset
 * after it.  A suite with more state calls these from its own pair. */
static inline int tu_setup(void **state)
{
    (void)state;
    tu_reset_all();
    return 0;
}

static inline int tu_teardown(void **state)
{
    (void)state;
    fake_transports_reset();
    fault_reset();
    tent_config_reset_global();
    return 0;
}

/* A test run between tu_setup and tu_teardown. */
#define TU_TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

/* A NULL-terminated list of strings, e.g. the transports to enable. */
#define TU_LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

#define TU_CONFIG(...) tu_config(TU_LIST(__VA_ARGS__))
#define TU_ENGINE(...) tu_engine(TU_LIST(__VA_ARGS__))

static inline tent_engine_t tu_engine(const char *const *enable)
{
    tu_config(enable);
    return tent_create_engine();
}

/* Two registered host buffers, src filled with a pattern, dst zeroed. */
struct tu_bufs {
    char *src, *dst;
    size_t len;
};

#define tu_bufs_init(e, b, len) tu_bufs_init_at(TU_HERE, e, b, len)
static inline void tu_bufs_init_at(struct tu_at at, tent_engine_t e,
                                   struct tu_bufs *b, size_t len)
{
    b->len = len;
    b->src = aligned_alloc(4096, len);
    b->dst = aligned_alloc(4096, len);
    at_non_null(at, b->src);
    at_non_null(at, b->dst);
    for (size_t i = 0; i < len; i++)
        b->src[i] = (char)(i * 7 + 3);
    memset(b->dst, 0, len);
    at_int_equal(at, tent_register_memory(e, b->src, len), 0);
    at_int_equal(at, tent_register_memory(e, b->dst, len), 0);
}

#define tu_bufs_fini(e, b) tu_bufs_fini_at(TU_HERE, e, b)
static inline void tu_bufs_fini_at(struct tu_at at, tent_engine_t e,
                                   struct tu_bufs *b)
{
    at_int_equal(at, tent_unregister_memory(e, b->src, b->len), 0);
    at_int_equal(at, tent_unregister_memory(e, b->dst, b->len), 0);
    free(b->src);
    free(b->dst);
}

/* What most runtime tests start from: an engine with exactly the transports
 * of enable and then the configuration pairs of kv (key, value, ...; NULL or
 * NULL-terminated), a registered pair of len-byte buffers, and the batch
 * under test (TENT_INVALID_BATCH_ID until the test sets it). */
struct tu_fx {
    tent_engine_t e;
    struct tu_bufs p;
    tent_batch_id_t b;
};

#define tu_fx_open(enable, kv, len) tu_fx_open_at(TU_HERE, enable, kv, len)
static inline struct tu_fx tu_fx_open_at(struct tu_at at,
                                         const char *const *enable,
                                         const char *const *kv, size_t len)
{
    tu_config(enable);
    for (const char *const *p = kv; p && *p; p += 2)
        tent_set_config(p[0], p[1]);
    struct tu_fx f = {.e = tent_create_engine(), .b = TENT_INVALID_BATCH_ID};
    if (!f.e)
        at_fail_msg(at, "engine: %s", tent_last_error());
    tu_bufs_init_at(at, f.e, &f.p, len);
    return f;
}

/* Frees the batch under test (if set; it must be done), the buffer pair and
 * the engine, checking each step as the tests did. */
#define tu_fx_close(f) tu_fx_close_at(TU_HERE, f)
static inline void tu_fx_close_at(struct tu_at at, struct tu_fx *f)
{
    if (f->b != TENT_INVALID_BATCH_ID)
        at_int_equal(at, tent_free_batch(f->e, f->b), TENT_OK);
    tu_bufs_fini_at(at, f->e, &f->p);
    tent_destroy_engine(f->e);
}

/* A local write of len bytes at offset off of the pair. */
static inline tent_request_t tu_write(struct tu_bufs *b, size_t off, size_t len)
{
    tent_request_t r;
    memset(&r, 0, sizeof(r));
    r.opcode = OPCODE_WRITE;
    r.source = b->src + off;
    r.target_id = LOCAL_SEGMENT_ID;
    r.target_offset = (uint64_t)(uintptr_t)(b->dst + off);
    r.length = len;
    return r;
}

static inline long tu_now_ms(void)
{
    return (long)tent_now_ms();
}

/* Polls task i until it leaves PENDING or the deadline passes; returns the
 * last tent_task_status code. */
static inline int tu_wait_task(tent_engine_t e, tent_batch_id_t b, size_t i,
                               tent_status_t *st, long max_ms)
{
    long end = tu_now_ms() + max_ms;
    int rc;
    do {
        rc = tent_task_status(e, b, i, st);
        if (rc != TENT_OK || st->status != STATUS_PENDING)
            return rc;
    } while (tu_now_ms() < end);
    return rc;
}

static inline int tu_wait_all(tent_engine_t e, tent_batch_id_t b,
                              tent_status_t *st, long max_ms)
{
    long end = tu_now_ms() + max_ms;
    int rc;
    do {
        rc = tent_overall_status(e, b, st);
        if (rc != TENT_OK || st->status != STATUS_PENDING)
            return rc;
    } while (tu_now_ms() < end);
    return rc;
}

#endif
