/* The runtime suites' test fixture (tu_setup / tu_teardown, TU_TEST) and
 * their helpers: engines with a chosen set of transports, registered buffer
 * pairs, polling with a deadline, and stderr capture (to check log lines).
 * Header-only; includes <cmocka.h>. */
#ifndef TENT_TEST_UTIL_H
#define TENT_TEST_UTIL_H

#include "common/config.h"
#include "fake_transport.h"
#include "fault_transport.h"
#include "tent/transfer_engine.h"
#include "transport/transport.h"

/* cmocka needs these first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

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

#define TU_CONFIG(...) tu_config((const char *const[]){__VA_ARGS__, NULL})
#define TU_ENGINE(...) tu_engine((const char *const[]){__VA_ARGS__, NULL})

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

static inline void tu_bufs_init(tent_engine_t e, struct tu_bufs *b, size_t len)
{
    b->len = len;
    b->src = aligned_alloc(4096, len);
    b->dst = aligned_alloc(4096, len);
    assert_non_null(b->src);
    assert_non_null(b->dst);
    for (size_t i = 0; i < len; i++)
        b->src[i] = (char)(i * 7 + 3);
    memset(b->dst, 0, len);
    assert_int_equal(tent_register_memory(e, b->src, len), 0);
    assert_int_equal(tent_register_memory(e, b->dst, len), 0);
}

static inline void tu_bufs_fini(tent_engine_t e, struct tu_bufs *b)
{
    assert_int_equal(tent_unregister_memory(e, b->src, b->len), 0);
    assert_int_equal(tent_unregister_memory(e, b->dst, b->len), 0);
    free(b->src);
    free(b->dst);
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
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
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

/* stderr capture: everything written to fd 2 between begin and end. */
struct tu_capture {
    int saved_fd;
    char path[64];
};

static inline void tu_capture_begin(struct tu_capture *c)
{
    fflush(stderr);
    snprintf(c->path, sizeof(c->path), "/tmp/tent_test_stderr_XXXXXX");
    int fd = mkstemp(c->path);
    assert_true(fd >= 0);
    c->saved_fd = dup(2);
    assert_true(c->saved_fd >= 0);
    assert_true(dup2(fd, 2) >= 0);
    close(fd);
}

/* Returns the captured text (malloc'd; caller frees). */
static inline char *tu_capture_end(struct tu_capture *c)
{
    fflush(stderr);
    dup2(c->saved_fd, 2);
    close(c->saved_fd);
    FILE *f = fopen(c->path, "rb");
    assert_non_null(f);
    char *text = calloc(1, 1 << 16);
    assert_non_null(text);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(c->path);
    return text;
}

#define assert_contains(hay, needle)                                           \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        if (!strstr(h_, n_))                                                   \
            fail_msg("expected \"%s\" in \"%s\"", n_, h_);                     \
    } while (0)

#endif
