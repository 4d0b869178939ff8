/* For the cluster-secret tests (e2e_auth_test, mf_host_auth_test): a
 * scratch directory of secret files, and what a raw client reads before the
 * server closes its connection.  Header-only; it asserts, so include it
 * after cmocka.h, as "../common/secret_files.h". */
#ifndef TENT_TESTS_SECRET_FILES_H
#define TENT_TESTS_SECRET_FILES_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes text to path with mode (set again after open: the umask may have
 * narrowed it). */
static inline void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

/* A directory /tmp/<tag>_XXXXXX holding "good" and "wrong" (mode 0600, one
 * secret each) and "loose" (good's secret, but mode 0644: too open). */
struct secret_files {
    char dir[64], good[128], wrong[128], loose[128];
};

/* Each secret is written with a newline after it; 0, or -1 when the
 * directory cannot be made. */
static inline int secret_files_make(struct secret_files *f, const char *tag,
                                    const char *good, const char *wrong)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/%s_XXXXXX", tag);
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->good, sizeof(f->good), "%s/good", f->dir);
    snprintf(f->wrong, sizeof(f->wrong), "%s/wrong", f->dir);
    snprintf(f->loose, sizeof(f->loose), "%s/loose", f->dir);
    char g[256], w[256];
    snprintf(g, sizeof(g), "%s\n", good);
    snprintf(w, sizeof(w), "%s\n", wrong);
    write_file(f->good, g, 0600);
    write_file(f->wrong, w, 0600);
    write_file(f->loose, g, 0644);
    return 0;
}

/* Removes the directory and its files; 0 or -1. */
static inline int secret_files_remove(const struct secret_files *f)
{
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Bytes the server sends on fd before it closes it (waits for the close). */
static inline size_t bytes_until_close(int fd)
{
    size_t total = 0;
    uint8_t buf[4096];
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r > 0) {
            total += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        return total;
    }
}

#endif
