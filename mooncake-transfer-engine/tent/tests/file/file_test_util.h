/* Helpers of the file-segment suites: engines with a chosen set of file
 * transports, scratch files in a directory of the test's own, batches run
 * to their end with a deadline, and the cause of a failed task.
 * Header-only; includes <cmocka.h>. */
#ifndef TENT_FILE_TEST_UTIL_H
#define TENT_FILE_TEST_UTIL_H

#include "common/config.h"
#include "tent/transfer_engine.h"

/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A scratch directory, removed (with what the test left in it) at exit. */
static char ft_dir[256];

static inline void ft_rmdir(void)
{
    if (!ft_dir[0])
        return;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ft_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", ft_dir);
}

/* Under TMPDIR (/var/tmp otherwise: a disk, where O_DIRECT works; /tmp may
 * be a tmpfs). */
static inline void ft_mkdir(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(ft_dir, sizeof(ft_dir), "%s/tent_file_test.XXXXXX",
             base && *base ? base : "/var/tmp");
    if (!mkdtemp(ft_dir)) {
        perror("mkdtemp");
        exit(1);
    }
    atexit(ft_rmdir);
}

/* Path of name inside the scratch directory. */
static inline const char *ft_path(const char *name)
{
    static char buf[4][512];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof(buf[0]), "%s/%s", ft_dir, name);
    return p;
}

/* "file://" + path */
static inline const char *ft_seg(const char *path)
{
    static char buf[4][800];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof(buf[0]), "file://%s", path);
    return p;
}

static inline uint8_t ft_byte(uint64_t seed, uint64_t i)
{
    uint64_t x = (seed + i) * 0x9e3779b97f4a7c15ull;
    return (uint8_t)(x >> 56);
}

static inline void ft_fill(void *p, uint64_t len, uint64_t seed, uint64_t off)
{
    for (uint64_t i = 0; i < len; i++)
        ((uint8_t *)p)[i] = ft_byte(seed, off + i);
}

/* Creates path with size bytes of pattern seed (0: zeros, sparse). */
static inline void ft_make_file(const char *path, uint64_t size, uint64_t seed)
{
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    if (seed) {
        char *b = malloc(1 << 20);
        assert_non_null(b);
        for (uint64_t o = 0; o < size; o += 1 << 20) {
            uint64_t n = size - o < (1 << 20) ? size - o : 1 << 20;
            ft_fill(b, n, seed, o);
            assert_int_equal(pwrite(fd, b, n, (off_t)o), (ssize_t)n);
        }
        free(b);
    }
    close(fd);
}

/* Reads len bytes of path at off into a new buffer. */
static inline uint8_t *ft_read_file(const char *path, uint64_t off,
                                    uint64_t len)
{
    uint8_t *b = malloc(len ? len : 1);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, b, len, (off_t)off), (ssize_t)len);
    close(fd);
    return b;
}

/* Fresh configuration: only the named transports (a comma list) enabled,
 * quiet logs, then key/value pairs (NULL-terminated). */
static inline tent_engine_t ft_engine(const char *xports, ...)
{
    tent_config_reset_global();
    static const char *const all[] = {"tcp", "shm", "memfabric", "io_uring",
                                      "bufio"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        char key[64], want[80];
        snprintf(key, sizeof(key), "transports/%s/enable", all[i]);
        snprintf(want, sizeof(want), ",%s,", all[i]);
        char list[128];
        snprintf(list, sizeof(list), ",%s,", xports);
        tent_set_config(key, strstr(list, want) ? "true" : "false");
    }
    tent_set_config("log_level", "error");
    va_list ap;
    va_start(ap, xports);
    for (;;) {
        const char *k = va_arg(ap, const char *);
        if (!k)
            break;
        tent_set_config(k, va_arg(ap, const char *));
    }
    va_end(ap);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    return e;
}

/* Host memory from the engine, registered. */
static inline void *ft_mem(tent_engine_t e, size_t len)
{
    void *p = NULL;
    assert_int_equal(tent_allocate_memory(e, &p, len, "cpu"), TENT_OK);
    assert_int_equal(tent_register_memory(e, p, len), TENT_OK);
    return p;
}

static inline void ft_mem_free(tent_engine_t e, void *p, size_t len)
{
    assert_int_equal(tent_unregister_memory(e, p, len), TENT_OK);
    assert_int_equal(tent_free_memory(e, p), TENT_OK);
}

static inline double ft_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline tent_request_t ft_req(int op, void *src, tent_segment_id_t seg,
                                    uint64_t off, uint64_t len)
{
    tent_request_t r = {0};
    r.opcode = op;
    r.source = src;
    r.target_id = seg;
    r.target_offset = off;
    r.length = len;
    return r;
}

/* Polls the batch until every task is terminal (30 s at most). */
static inline void ft_wait(tent_engine_t e, tent_batch_id_t b, size_t n)
{
    double end = ft_now() + 30;
    for (size_t i = 0; i < n; i++) {
        tent_status_t st;
        for (;;) {
            assert_int_equal(tent_task_status(e, b, i, &st), TENT_OK);
            if (st.status != STATUS_PENDING && st.status != STATUS_WAITING)
                break;
            assert_true(ft_now() < end);
            usleep(100);
        }
    }
}

/* Submits n requests in one batch and waits for them; returns the batch
 * (free it with tent_free_batch). */
static inline tent_batch_id_t ft_run(tent_engine_t e, tent_request_t *r,
                                     size_t n)
{
    tent_batch_id_t b = tent_allocate_batch(e, n);
    assert_true(b != TENT_INVALID_BATCH_ID);
    int rc = tent_submit(e, b, r, n);
    if (rc != TENT_OK)
        fail_msg("tent_submit: %s (%s)", tent_last_error(), tent_strerror(rc));
    ft_wait(e, b, n);
    return b;
}

/* ft_run, and every task must be COMPLETED with all its bytes. */
static inline void ft_run_ok(tent_engine_t e, tent_request_t *r, size_t n)
{
    tent_batch_id_t b = ft_run(e, r, n);
    for (size_t i = 0; i < n; i++) {
        tent_status_t st;
        assert_int_equal(tent_task_status(e, b, i, &st), TENT_OK);
        if (st.status != STATUS_COMPLETED) {
            int code = 0, native = 0;
            char msg[512] = "";
            tent_task_error(e, b, i, &code, &native, msg, sizeof(msg));
            fail_msg("task %zu ended %d: %s (%s, native %d)", i, st.status, msg,
                     tent_strerror(code), native);
        }
        assert_int_equal(st.transferred_bytes, r[i].length);
    }
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
}

/* One request that must fail: returns its cause (msg gets the message). */
static inline int ft_run_fail(tent_engine_t e, tent_request_t r, int *native,
                              char *msg, size_t len)
{
    tent_batch_id_t b = ft_run(e, &r, 1);
    tent_status_t st;
    assert_int_equal(tent_task_status(e, b, 0, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(st.transferred_bytes, 0);
    int code = 0;
    assert_int_equal(tent_task_error(e, b, 0, &code, native, msg, len),
                     TENT_OK);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    return code;
}

/* The transport that ran task 0 of a one-request batch. */
static inline void ft_run_by(tent_engine_t e, tent_request_t r, char *name,
                             size_t len)
{
    tent_batch_id_t b = ft_run(e, &r, 1);
    tent_status_t st;
    assert_int_equal(tent_task_status(e, b, 0, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_task_transport(e, b, 0, name, len), TENT_OK);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
}

static inline void ft_assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("'%s' does not contain '%s'", hay, needle);
}

#endif
