/* A disk that runs out of space under a file segment, with both file
 * transports (failover on) and transports/io_uring/sync=true: no WRITE is
 * COMPLETED that did not land (docs/durability.md).
 *
 * The disk is a thin one, as a thin-provisioned volume or an overcommitted
 * image is: an ext4 filesystem of 64 MiB (journal of 1 MiB) on a loop
 * device whose backing file lies on a tmpfs of 4 MiB.  ext4 believes it has
 * room, so a buffered write lands in the page cache and only its writeback
 * (a later fsync) meets the full device, while an O_DIRECT write meets
 * ENOSPC at once: the case where a failover into the page cache hid the
 * loss.  (A full tmpfs, as in file_enospc_test.c, refuses buffered writes
 * at once too.)
 *
 * Everything is made by the test in a mount namespace of its own (the loop
 * device detaches itself when the filesystem goes).  Without the privilege
 * (not root, no loop device, no mkfs.ext4) it exits 77: skipped. */
#include "file_test_util.h"
#include "transport/file_io.h"

#include <errno.h>
#include <linux/loop.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>

#define MIB   (1u << 20)
#define NTASK 16

static char mnt[600];
static char dev[64]; /* the loop device */
static int lfd = -1; /* held open while the disk is up (autoclear) */

/* The engine of every case: both file transports, io_uring tried first and
 * durable, bufio as it is by default (not durable). */
static tent_engine_t engine(void)
{
    return ft_engine("io_uring,bufio", "transports/io_uring/sync", "true",
                     "policy",
                     "[{\"segment_type\": \"file\", \"transports\": "
                     "[\"io_uring\", \"bufio\"]}]",
                     NULL);
}

/* Writes NTASK x 1 MiB (aligned: O_DIRECT on io_uring) into a fresh file of
 * NTASK MiB on the thin disk, the first alone (it fits: COMPLETED), the
 * rest in one batch, and destroys the engine.  Every task is COMPLETED or
 * FAILED with a device error naming the file, on transport failed_on (no
 * failover from there): ENOSPC from an O_DIRECT write; EIO from an
 * fdatasync once ext4 could not write its journal to the full device (it
 * aborts the journal); EROFS after that (it made itself read-only).  At
 * most 4 COMPLETED, at least one FAILED; done[i] says which COMPLETED. */
static void write_past_capacity(tent_engine_t e, const char *name,
                                const char *failed_on, bool done[NTASK])
{
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", mnt, name);
    ft_make_file(path, (uint64_t)NTASK * MIB, 0); /* sparse */
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(e, &h, ft_seg(path)), TENT_OK);
    uint8_t *m = ft_mem(e, (size_t)NTASK * MIB);
    ft_fill(m, (uint64_t)NTASK * MIB, 43, 0);
    tent_request_t r[NTASK];
    for (int i = 0; i < NTASK; i++)
        r[i] = ft_req(OPCODE_WRITE, m + (size_t)i * MIB, h,
                      (uint64_t)i * MIB, MIB);
    /* the first alone: it fits, and must be COMPLETED */
    ft_run_ok(e, r, 1);
    done[0] = true;
    tent_batch_id_t b = ft_run(e, r + 1, NTASK - 1);
    int ndone = 1, nfailed = 0, nospace = 0;
    for (int i = 1; i < NTASK; i++) {
        tent_status_t st;
        assert_int_equal(tent_task_status(e, b, (size_t)i - 1, &st), TENT_OK);
        done[i] = st.status == STATUS_COMPLETED;
        if (done[i]) {
            assert_int_equal(st.transferred_bytes, MIB);
            ndone++;
            continue;
        }
        assert_int_equal(st.status, STATUS_FAILED);
        int code = 0, native = 0;
        char msg[512];
        assert_int_equal(tent_task_error(e, b, (size_t)i - 1, &code, &native,
                                         msg, sizeof(msg)),
                         TENT_OK);
        if (!(code == TENT_EIO && (native == ENOSPC || native == EIO)) &&
            !(code == TENT_EPERM && native == EROFS))
            fail_msg("task %d: %s (%s, native %d): not the device's cause", i,
                     msg, tent_strerror(code), native);
        ft_assert_contains(msg, path);
        /* where it met the cause: not failed over from there */
        char by[32];
        assert_int_equal(
            tent_task_transport(e, b, (size_t)i - 1, by, sizeof(by)), TENT_OK);
        assert_string_equal(by, failed_on);
        nfailed++;
        nospace += native == ENOSPC;
    }
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    print_message("%d of %d writes COMPLETED, %d FAILED (%d with ENOSPC)\n",
                  ndone, NTASK, nfailed, nospace);
    /* the disk holds 4 MiB, some of it ext4's own */
    assert_true(nfailed > 0);
    assert_true(ndone <= 4);
    /* an O_DIRECT write meets the device's ENOSPC itself */
    if (strcmp(failed_on, "io_uring") == 0)
        assert_true(nospace > 0);
    ft_mem_free(e, m, (size_t)NTASK * MIB);
    assert_int_equal(tent_close_segment(e, h), TENT_OK);
    tent_destroy_engine(e);
}

/* Nothing COMPLETED was lost: every COMPLETED write's bytes are on the
 * device, as O_DIRECT reads find them (a read first writes back the
 * range's dirty pages, so bytes that were only in the page cache fail it
 * or read back as zeros).  The answer of an fsync afterwards is printed,
 * not tested: once ext4 failed to write metadata of the failed writes it
 * answers EIO on every later fsync of the file.  Nor is the file read
 * after a remount: ext4 may then have lost even the first write, when the
 * extent tree that later failed writes split could not be written. */
static void expect_landed(const char *name, const bool done[NTASK])
{
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", mnt, name);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    if (fsync(fd) != 0)
        print_message("fsync after the batch: %s\n", strerror(errno));
    close(fd);
    fd = open(path, O_RDONLY | O_DIRECT);
    assert_true(fd >= 0);
    uint8_t *back = NULL, *want = malloc(MIB);
    assert_int_equal(posix_memalign((void **)&back, 4096, MIB), 0);
    assert_non_null(want);
    for (int i = 0; i < NTASK; i++) {
        if (!done[i])
            continue;
        ssize_t n = pread(fd, back, MIB, (off_t)i * MIB);
        int err = n < 0 ? errno : 0;
        ft_fill(want, MIB, 43, (uint64_t)i * MIB);
        if (n != (ssize_t)MIB || memcmp(back, want, MIB) != 0)
            fail_msg("task %d was COMPLETED, but its bytes are not on the "
                     "device (%zd bytes read back: %s)",
                     i, n, err ? strerror(err) : "other bytes");
    }
    free(back);
    free(want);
    close(fd);
}

/* O_DIRECT writes meet ENOSPC on io_uring: they fail with it, none goes on
 * to bufio's page cache. */
static void test_device_full(void **state)
{
    (void)state;
    bool done[NTASK];
    write_past_capacity(engine(), "direct", "io_uring", done);
    expect_landed("direct", done);
}

/* Every io_uring write fails with a transient cause (injected ECANCELED),
 * so each fails over to bufio: bufio must make it durable as io_uring
 * would have (fdatasync), and those beyond the disk's room fail with what
 * that fdatasync meets (ext4 aborts its journal: EIO, then EROFS) instead
 * of staying in the page cache. */
static void test_failover_keeps_durability(void **state)
{
    (void)state;
    bool done[NTASK];
    tent_engine_t e = engine();
    tent_fio_fault_set("io_uring", TENT_FIO_FAULT_ERRNO, ECANCELED, 0,
                       1000000);
    write_past_capacity(e, "failover", "bufio", done);
    tent_fio_fault_clear();
    expect_landed("failover", done);
}

static int skipped(const char *what)
{
    fprintf(stderr, "skipped: %s: %s\n", what, strerror(errno));
    return 77;
}

/* A loop device over image (LOOP_CONFIGURE, detached on its last close):
 * its path into path; the open descriptor, or -1 with errno set. */
static int loop_attach(const char *image, char *path, size_t len)
{
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return -1;
    int img = open(image, O_RDWR | O_CLOEXEC);
    if (img < 0) {
        close(ctl);
        return -1;
    }
    int fd = -1;
    for (int tries = 0; tries < 8 && fd < 0; tries++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0)
            break;
        snprintf(path, len, "/dev/loop%d", n);
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            break;
        struct loop_config cfg = {.fd = (uint32_t)img};
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        if (ioctl(fd, LOOP_CONFIGURE, &cfg) != 0) {
            int err = errno;
            close(fd);
            fd = -1;
            errno = err;
            if (err != EBUSY) /* EBUSY: another process took it first */
                break;
        }
    }
    close(img);
    close(ctl);
    return fd;
}

static char back[600];

/* Makes the thin disk at mnt: 0, or -1 with what failed in *what (errno
 * set). */
static int disk_up(const char **what)
{
    char image[700], cmd[256];
    snprintf(image, sizeof(image), "%s/disk.img", back);
    *what = "mounting a tmpfs";
    if (mount("tent_test", back, "tmpfs", 0, "size=4m") != 0)
        return -1;
    *what = "making the disk image";
    int fd = open(image, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, 64 << 20) != 0)
        return -1;
    close(fd);
    *what = "attaching a loop device";
    lfd = loop_attach(image, dev, sizeof(dev));
    if (lfd < 0)
        return -1;
    /* nodiscard and lazy init: mkfs must not fill the image; a journal of
     * 1 MiB: when its writes fail, ext4 stops accepting any (without one,
     * an unwritten extent whose conversion failed is only logged, and an
     * fdatasync may succeed over bytes that read back as zeros) */
    snprintf(cmd, sizeof(cmd),
             "mkfs.ext4 -q -F -J size=1 -E "
             "nodiscard,lazy_itable_init=1,lazy_journal_init=1 "
             "%s >/dev/null 2>&1",
             dev);
    *what = "mkfs.ext4";
    if (system(cmd) != 0) {
        errno = ENOENT;
        return -1;
    }
    *what = "mounting ext4 on the loop device";
    /* noinit_itable: no background zeroing of inode tables to fill it */
    return mount(dev, mnt, "ext4", 0, "noinit_itable");
}

static void disk_down(void)
{
    umount2(mnt, MNT_DETACH);
    if (lfd >= 0)
        close(lfd); /* the last user: autoclear detaches the device */
    lfd = -1;
    umount2(back, MNT_DETACH);
}

static int setup(void **state)
{
    (void)state;
    const char *what;
    if (disk_up(&what) != 0) {
        fprintf(stderr, "%s: %s\n", what, strerror(errno));
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    disk_down();
    return 0;
}

int main(void)
{
#ifndef TENT_HAVE_IO_URING
    fprintf(stderr, "skipped: io_uring transport not built\n");
    return 77;
#endif
    /* before any thread: the namespace is the whole process's */
    if (unshare(CLONE_NEWNS) != 0)
        return skipped("unshare(CLONE_NEWNS)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return skipped("making / private");
    ft_mkdir();
    snprintf(back, sizeof(back), "%s", ft_path("back"));
    snprintf(mnt, sizeof(mnt), "%s", ft_path("mnt"));
    if (mkdir(back, 0755) != 0 || mkdir(mnt, 0755) != 0)
        return skipped("mkdir");
    /* can this machine make one at all? */
    const char *what;
    if (disk_up(&what) != 0) {
        int rc = skipped(what);
        disk_down();
        return rc;
    }
    disk_down();
    /* a fresh disk per case: the first one fills its disk */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_device_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failover_keeps_durability, setup,
                                        teardown),
    };
    return cmocka_run_group_tests_name("full_disk", tests, NULL, NULL);
}
