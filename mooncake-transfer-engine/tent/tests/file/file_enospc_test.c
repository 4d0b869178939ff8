/* A full filesystem under a file segment (argv[1]: io_uring or bufio).
 *
 * The test makes its own: in a mount namespace of its own (so nothing leaks
 * to the machine), a tmpfs of 1 MiB holding a sparse file of 8 MiB; writing
 * 4 MiB into it fails with ENOSPC.  The task is FAILED with TENT_EIO and
 * native ENOSPC, the message names the file; never COMPLETED.  With both
 * file transports it fails on the first one, not failed over (a device
 * error on a WRITE is permanent: docs/durability.md).  (A full tmpfs
 * refuses a buffered write at once too; file_full_disk_test.c has a disk
 * whose page cache takes what the device then refuses.)  Without the
 * privilege to
 * mount (not root, no CAP_SYS_ADMIN, a sandbox) the test exits 77:
 * skipped. */
#include "file_test_util.h"

#include <errno.h>
#include <sched.h>
#include <sys/mount.h>

static const char *X;
static char mnt[600];

static void expect_enospc(const char *xports, const char *fails_on)
{
    tent_engine_t e = ft_engine(xports, NULL);
    char path[700];
    snprintf(path, sizeof(path), "%s/big", mnt);
    ft_make_file(path, 8 << 20, 0); /* sparse: fits in 1 MiB until written */
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(e, &h, ft_seg(path)), TENT_OK);
    uint8_t *m = ft_mem(e, 4 << 20);
    ft_fill(m, 4 << 20, 1, 0);
    char msg[512];
    int native = 0, code = 0;
    tent_request_t r = ft_req(OPCODE_WRITE, m, h, 0, 4 << 20);
    tent_batch_id_t b = ft_run(e, &r, 1);
    tent_status_t st;
    assert_int_equal(tent_task_status(e, b, 0, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(
        tent_task_error(e, b, 0, &code, &native, msg, sizeof(msg)), TENT_OK);
    char by[32];
    assert_int_equal(tent_task_transport(e, b, 0, by, sizeof(by)), TENT_OK);
    assert_string_equal(by, fails_on);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    assert_int_equal(code, TENT_EIO);
    assert_int_equal(native, ENOSPC);
    ft_assert_contains(msg, path);
    ft_assert_contains(msg, "No space left on device");
    /* reads still work */
    ft_run_ok(
        e,
        &(tent_request_t){
            .opcode = OPCODE_READ, .source = m, .target_id = h, .length = 4096},
        1);
    ft_mem_free(e, m, 4 << 20);
    tent_destroy_engine(e);
    unlink(path);
}

static void test_enospc(void **state)
{
    (void)state;
    expect_enospc(X, X);
}

static void test_enospc_both(void **state)
{
    (void)state;
#ifndef TENT_HAVE_IO_URING
    skip();
#endif
    expect_enospc("io_uring,bufio", "io_uring");
}

int main(int argc, char **argv)
{
    X = argc > 1 ? argv[1] : "bufio";
#ifndef TENT_HAVE_IO_URING
    if (strcmp(X, "io_uring") == 0)
        return 77;
#endif
    /* before any thread: the namespace is the whole process's */
    if (unshare(CLONE_NEWNS) != 0) {
        fprintf(stderr, "skipped: unshare(CLONE_NEWNS): %s\n", strerror(errno));
        return 77;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        fprintf(stderr, "skipped: making / private: %s\n", strerror(errno));
        return 77;
    }
    ft_mkdir();
    snprintf(mnt, sizeof(mnt), "%s", ft_path("mnt"));
    if (mkdir(mnt, 0755) != 0 ||
        mount("tent_test", mnt, "tmpfs", 0, "size=1m") != 0) {
        fprintf(stderr, "skipped: mounting a tmpfs: %s\n", strerror(errno));
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enospc),
        cmocka_unit_test(test_enospc_both),
    };
    int rc = cmocka_run_group_tests_name(X, tests, NULL, NULL);
    umount2(mnt, MNT_DETACH);
    return rc;
}
