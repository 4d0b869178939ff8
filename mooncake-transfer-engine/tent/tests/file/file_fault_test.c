/* What goes wrong with file segments, through one file transport
 * (argv[1]: io_uring or bufio): each case a clear error naming the file,
 * a task FAILED with its cause (never COMPLETED with part of its bytes), or
 * an open that fails before any task exists.
 *   - a request past the end of the file (refused at submit);
 *   - a file truncated while open (the read meets the end, or the check
 *     after the I/O sees it), or deleted while open;
 *   - EIO from the device: by the transports' fault-injection hook
 *     (file_io.h), since this machine offers no failing device (no
 *     device-mapper error target); with both transports the runtime fails
 *     a READ over and the data still lands, and a WRITE fails at once
 *     (a device error on a WRITE is permanent: docs/durability.md);
 *   - a failed fdatasync (the hook) with transports/<x>/sync: that write
 *     and every later durable one fail until the segment is reopened;
 *   - io_uring refused (the hook makes its install fail): bufio serves;
 *   - a path outside file_desc_basepath through ".." or a symlink;
 *   - a read-only file and a write;
 *   - a directory, a device, a FIFO, a missing file as the path.
 * ENOSPC is file_enospc_test.c (it needs a filesystem of its own). */
#include "file_test_util.h"
#include "transport/file_io.h"

#include <errno.h>
#include <sys/stat.h>

static const char *X;

static tent_engine_t engine(void)
{
    return ft_engine(X, NULL);
}

static tent_segment_id_t open_file(tent_engine_t e, const char *name,
                                   uint64_t size)
{
    ft_make_file(ft_path(name), size, 3);
    tent_segment_id_t h = 0;
    int rc = tent_open_segment(e, &h, ft_seg(ft_path(name)));
    if (rc)
        fail_msg("open: %s", tent_last_error());
    return h;
}

static void test_past_eof(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    tent_segment_id_t h = open_file(e, "eof", 64 << 10);
    uint8_t *m = ft_mem(e, 1 << 20);
    tent_request_t r = ft_req(OPCODE_READ, m, h, (64 << 10) - 4096, 8192);
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_ERANGE);
    ft_assert_contains(tent_last_error(), ft_path("eof"));
    r.opcode = OPCODE_WRITE;
    r.target_offset = 64 << 10;
    r.length = 1;
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_ERANGE);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    ft_mem_free(e, m, 1 << 20);
    tent_destroy_engine(e);
}

static void test_truncated(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    tent_segment_id_t h = open_file(e, "trunc", 1 << 20);
    uint8_t *m = ft_mem(e, 1 << 20);
    assert_int_equal(truncate(ft_path("trunc"), 256 << 10), 0);
    char msg[512];
    int native = 0;
    /* beyond the new end: the read meets it */
    int code = ft_run_fail(e, ft_req(OPCODE_READ, m, h, 512 << 10, 4096),
                           &native, msg, sizeof(msg));
    assert_int_equal(code, TENT_ERANGE);
    ft_assert_contains(msg, ft_path("trunc"));
    ft_assert_contains(msg, "trunc");
    /* inside it: the check after the read sees the shorter file */
    code = ft_run_fail(e, ft_req(OPCODE_READ, m, h, 0, 4096), &native, msg,
                       sizeof(msg));
    assert_int_equal(code, TENT_ERANGE);
    ft_assert_contains(msg, "truncated to 262144 bytes");
    /* a write is refused too (it would grow the file back) */
    code = ft_run_fail(e, ft_req(OPCODE_WRITE, m, h, 0, 4096), &native, msg,
                       sizeof(msg));
    assert_int_equal(code, TENT_ERANGE);
    ft_mem_free(e, m, 1 << 20);
    tent_destroy_engine(e);
}

static void test_deleted(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    tent_segment_id_t h = open_file(e, "deleted", 1 << 20);
    uint8_t *m = ft_mem(e, 1 << 20);
    ft_run_ok(
        e,
        &(tent_request_t){
            .opcode = OPCODE_READ, .source = m, .target_id = h, .length = 4096},
        1);
    assert_int_equal(unlink(ft_path("deleted")), 0);
    char msg[512];
    int native = 0;
    for (int op = OPCODE_READ; op <= OPCODE_WRITE; op++) {
        int code = ft_run_fail(e, ft_req(op, m, h, 4096, 4096), &native, msg,
                               sizeof(msg));
        assert_int_equal(code, TENT_ENOSEGMENT);
        assert_int_equal(native, ENOENT);
        ft_assert_contains(msg, ft_path("deleted"));
        ft_assert_contains(msg, "deleted while its segment was open");
    }
    ft_mem_free(e, m, 1 << 20);
    tent_destroy_engine(e);
}

/* EIO from below (injected: see the top of the file). */
static void test_eio(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    tent_segment_id_t h = open_file(e, "eio", 1 << 20);
    uint8_t *m = ft_mem(e, 1 << 20);
    char msg[512];
    int native = 0;
    for (int op = OPCODE_READ; op <= OPCODE_WRITE; op++) {
        tent_fio_fault_set(X, TENT_FIO_FAULT_ERRNO, EIO, 0, 1);
        int code = ft_run_fail(e, ft_req(op, m, h, 8192, 65536), &native, msg,
                               sizeof(msg));
        assert_int_equal(code, TENT_EIO);
        assert_int_equal(native, EIO);
        ft_assert_contains(msg, ft_path("eio"));
        ft_assert_contains(msg, "offset 8192");
        ft_assert_contains(msg, "Input/output error");
    }
    /* the next one works again */
    ft_run_ok(
        e,
        &(tent_request_t){
            .opcode = OPCODE_READ, .source = m, .target_id = h, .length = 4096},
        1);
    tent_fio_fault_clear();
    ft_mem_free(e, m, 1 << 20);
    tent_destroy_engine(e);
}

/* With both file transports the runtime moves a task that failed with a
 * transient cause to the other one, and the bytes land: a READ that met
 * EIO, a WRITE that met ECANCELED.  A WRITE the device refused (EIO,
 * ENOSPC, EDQUOT) fails at once with that cause, on the transport that met
 * it: the other one writes to the same device (docs/durability.md). */
static void test_failover(void **state)
{
    (void)state;
#ifndef TENT_HAVE_IO_URING
    skip();
#endif
    const char *other = strcmp(X, "io_uring") == 0 ? "bufio" : "io_uring";
    char list[64], pol[160];
    snprintf(list, sizeof(list), "%s,%s", X, other);
    snprintf(pol, sizeof(pol),
             "[{\"segment_type\": \"file\", \"transports\": [\"%s\", \"%s\"]}]",
             X, other);
    tent_engine_t e = ft_engine(list, "policy", pol, NULL);
    tent_segment_id_t h = open_file(e, "failover", 1 << 20);
    uint8_t *m = ft_mem(e, 1 << 20);
    char name[32];
    /* a READ after EIO */
    tent_fio_fault_set(X, TENT_FIO_FAULT_ERRNO, EIO, 0, 1);
    ft_run_by(e, ft_req(OPCODE_READ, m, h, 4096, 65536), name, sizeof(name));
    tent_fio_fault_clear();
    assert_string_equal(name, other);
    uint8_t want[65536];
    ft_fill(want, sizeof(want), 3, 4096);
    assert_memory_equal(m, want, sizeof(want));
    /* a WRITE after a cause that is not the device's */
    ft_fill(m, 65536, 77, 0);
    tent_fio_fault_set(X, TENT_FIO_FAULT_ERRNO, ECANCELED, 0, 1);
    ft_run_by(e, ft_req(OPCODE_WRITE, m, h, 4096, 65536), name, sizeof(name));
    tent_fio_fault_clear();
    assert_string_equal(name, other);
    uint8_t *file = ft_read_file(ft_path("failover"), 4096, 65536);
    assert_memory_equal(file, m, 65536);
    free(file);
    /* a WRITE the device refused: no failover */
    const int device[] = {EIO, ENOSPC, EDQUOT};
    for (size_t i = 0; i < sizeof(device) / sizeof(device[0]); i++) {
        tent_fio_fault_set(X, TENT_FIO_FAULT_ERRNO, device[i], 0, 1);
        tent_request_t r = ft_req(OPCODE_WRITE, m, h, 8192, 65536);
        tent_batch_id_t b = ft_run(e, &r, 1);
        tent_fio_fault_clear();
        tent_status_t st;
        assert_int_equal(tent_task_status(e, b, 0, &st), TENT_OK);
        assert_int_equal(st.status, STATUS_FAILED);
        int code = 0, native = 0;
        char msg[512];
        assert_int_equal(
            tent_task_error(e, b, 0, &code, &native, msg, sizeof(msg)),
            TENT_OK);
        assert_int_equal(code, TENT_EIO);
        assert_int_equal(native, device[i]);
        ft_assert_contains(msg, ft_path("failover"));
        assert_int_equal(tent_task_transport(e, b, 0, name, sizeof(name)),
                         TENT_OK);
        assert_string_equal(name, X);
        assert_int_equal(tent_free_batch(e, b), TENT_OK);
    }
    ft_mem_free(e, m, 1 << 20);
    tent_destroy_engine(e);
}

/* transports/<x>/sync and a failed fdatasync (injected): the write FAILED
 * with its cause; the next one is not COMPLETED either, though its own
 * fdatasync succeeds (the failed one may have dropped pages the next one
 * cannot see); once the segment is closed and opened again, writes are. */
static void test_sync_failure_sticks(void **state)
{
    (void)state;
    char key[64];
    snprintf(key, sizeof(key), "transports/%s/sync", X);
    tent_engine_t e = ft_engine(X, key, "true", NULL);
    tent_segment_id_t h = open_file(e, "syncfail", 1 << 20);
    uint8_t *m = ft_mem(e, 1 << 20);
    char msg[512];
    int native = 0;
    tent_fio_fault_set(X, TENT_FIO_FAULT_SYNC, EIO, 0, 1);
    int code = ft_run_fail(e, ft_req(OPCODE_WRITE, m, h, 0, 65536), &native,
                           msg, sizeof(msg));
    tent_fio_fault_clear();
    assert_int_equal(code, TENT_EIO);
    assert_int_equal(native, EIO);
    ft_assert_contains(msg, "fdatasync");
    ft_assert_contains(msg, ft_path("syncfail"));
    code = ft_run_fail(e, ft_req(OPCODE_WRITE, m, h, 65536, 4096), &native,
                       msg, sizeof(msg));
    assert_int_equal(code, TENT_EIO);
    assert_int_equal(native, EIO);
    ft_assert_contains(msg, "not known to be on storage");
    ft_assert_contains(msg, "offset 65536");
    /* reads are not affected */
    ft_run_ok(e, &(tent_request_t){.opcode = OPCODE_READ,
                                   .source = m,
                                   .target_id = h,
                                   .length = 4096},
              1);
    assert_int_equal(tent_close_segment(e, h), TENT_OK);
    assert_int_equal(tent_open_segment(e, &h, ft_seg(ft_path("syncfail"))),
                     TENT_OK);
    ft_run_ok(e, &(tent_request_t){.opcode = OPCODE_WRITE,
                                   .source = m,
                                   .target_id = h,
                                   .length = 4096},
              1);
    ft_mem_free(e, m, 1 << 20);
    tent_destroy_engine(e);
}

/* A kernel or sandbox that refuses io_uring: the transport is not
 * installed, bufio serves the file. */
static void test_uring_refused(void **state)
{
    (void)state;
#ifndef TENT_HAVE_IO_URING
    skip();
#endif
    tent_fio_fault_set("io_uring", TENT_FIO_FAULT_SETUP, EPERM, 0, 1);
    tent_engine_t e = ft_engine("io_uring,bufio", "log_level", "error", NULL);
    tent_fio_fault_clear();
    tent_segment_id_t h = open_file(e, "refused", 1 << 20);
    uint8_t *m = ft_mem(e, 1 << 20);
    char name[32];
    ft_run_by(e, ft_req(OPCODE_WRITE, m, h, 0, 4096), name, sizeof(name));
    assert_string_equal(name, "bufio");
    ft_mem_free(e, m, 1 << 20);
    tent_destroy_engine(e);
}

static void expect_open_fails(tent_engine_t e, const char *name, int code,
                              const char *says)
{
    tent_segment_id_t h = 12345;
    int rc = tent_open_segment(e, &h, name);
    if (rc != code)
        fail_msg("open '%s': %d (%s), expected %d", name, rc, tent_last_error(),
                 code);
    assert_int_equal(h, 12345); /* untouched */
    ft_assert_contains(tent_last_error(), says);
}

/* file_desc_basepath: names are below it; ".." and symlinks that leave it
 * are refused, symlinks that stay inside are followed. */
static void test_basepath(void **state)
{
    (void)state;
    char base[512];
    snprintf(base, sizeof(base), "%s", ft_path("base"));
    assert_int_equal(mkdir(base, 0755), 0);
    char sub[600];
    snprintf(sub, sizeof(sub), "%s/sub", base);
    assert_int_equal(mkdir(sub, 0755), 0);
    char p[700];
    snprintf(p, sizeof(p), "%s/f", sub);
    ft_make_file(p, 8192, 9);
    ft_make_file(ft_path("outside"), 8192, 9);
    snprintf(p, sizeof(p), "%s/inside_link", base);
    assert_int_equal(symlink("sub/f", p), 0);
    snprintf(p, sizeof(p), "%s/out_link", base);
    assert_int_equal(symlink(ft_path("outside"), p), 0);
    snprintf(p, sizeof(p), "%s/up_link", base);
    assert_int_equal(symlink("../outside", p), 0);

    tent_engine_t e = ft_engine(X, "file_desc_basepath", base, NULL);
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(e, &h, "file://sub/f"), TENT_OK);
    /* TENT joins base + "/" + path: an absolute path is below the base */
    tent_segment_id_t h2;
    assert_int_equal(tent_open_segment(e, &h2, "file:///sub/f"), TENT_OK);
    assert_int_equal(tent_open_segment(e, &h2, "file://inside_link"), TENT_OK);
    expect_open_fails(e, "file://../outside", TENT_EPERM,
                      "leaves file_desc_basepath");
    expect_open_fails(e, "file://sub/../../outside", TENT_EPERM,
                      "leaves file_desc_basepath");
    expect_open_fails(e, "file://out_link", TENT_EPERM,
                      "leaves file_desc_basepath");
    expect_open_fails(e, "file://up_link", TENT_EPERM,
                      "leaves file_desc_basepath");
    expect_open_fails(e, "file://nothing", TENT_ENOSEGMENT, "nothing");
    expect_open_fails(e, "file://", TENT_EINVAL, "no path");
    uint8_t *m = ft_mem(e, 8192);
    ft_run_ok(
        e,
        &(tent_request_t){
            .opcode = OPCODE_READ, .source = m, .target_id = h, .length = 8192},
        1);
    uint8_t want[8192];
    ft_fill(want, 8192, 9, 0);
    assert_memory_equal(m, want, 8192);
    ft_mem_free(e, m, 8192);
    tent_destroy_engine(e);
}

/* A file without write permission opens read-only: reads work, a write is
 * refused at submit naming the file. */
static void test_read_only(void **state)
{
    (void)state;
    ft_make_file(ft_path("ro"), 65536, 13);
    assert_int_equal(chmod(ft_path("ro"), 0444), 0);
    tent_engine_t e = engine();
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(e, &h, ft_seg(ft_path("ro"))), TENT_OK);
    uint8_t *m = ft_mem(e, 65536);
    ft_run_ok(e,
              &(tent_request_t){.opcode = OPCODE_READ,
                                .source = m,
                                .target_id = h,
                                .length = 65536},
              1);
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    tent_request_t r = ft_req(OPCODE_WRITE, m, h, 0, 4096);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_EPERM);
    ft_assert_contains(tent_last_error(), ft_path("ro"));
    ft_assert_contains(tent_last_error(), "read-only");
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    uint8_t *file = ft_read_file(ft_path("ro"), 0, 65536);
    assert_memory_equal(file, m, 65536); /* and nothing was written */
    free(file);
    ft_mem_free(e, m, 65536);
    tent_destroy_engine(e);
}

static void test_not_regular(void **state)
{
    (void)state;
    tent_engine_t e = engine();
    assert_int_equal(mkdir(ft_path("dir"), 0755), 0);
    expect_open_fails(e, ft_seg(ft_path("dir")), TENT_EINVAL,
                      "is a directory, not a regular file");
    expect_open_fails(e, "file:///dev/null", TENT_EINVAL,
                      "is a character device");
    assert_int_equal(mkfifo(ft_path("fifo"), 0644), 0);
    /* looked at, never opened: no reader needed, no hang */
    expect_open_fails(e, ft_seg(ft_path("fifo")), TENT_EINVAL, "is a FIFO");
    expect_open_fails(e, ft_seg(ft_path("missing")), TENT_ENOSEGMENT,
                      "No such file");
    struct stat st;
    if (stat("/dev/loop0", &st) == 0 && S_ISBLK(st.st_mode))
        expect_open_fails(e, "file:///dev/loop0", TENT_EINVAL,
                          "is a block device");
    tent_destroy_engine(e);
}

int main(int argc, char **argv)
{
    X = argc > 1 ? argv[1] : "bufio";
#ifndef TENT_HAVE_IO_URING
    if (strcmp(X, "io_uring") == 0)
        return 77;
#endif
    ft_mkdir();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_past_eof),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_deleted),
        cmocka_unit_test(test_eio),
        cmocka_unit_test(test_failover),
        cmocka_unit_test(test_sync_failure_sticks),
        cmocka_unit_test(test_uring_refused),
        cmocka_unit_test(test_basepath),
        cmocka_unit_test(test_read_only),
        cmocka_unit_test(test_not_regular),
    };
    return cmocka_run_group_tests_name(X, tests, NULL, NULL);
}
