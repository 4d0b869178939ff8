/* For tests that drive a forked child over two pipes (commands in, answers
 * out): whole reads and writes, and the fork with each side's pipe ends in
 * place.  Header-only and without TENT dependencies (the mf_host tests use
 * it too); include it as "../common/test_child.h". */
#ifndef TENT_TESTS_TEST_CHILD_H
#define TENT_TESTS_TEST_CHILD_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

/* Reads exactly n bytes; -1 on end of file or error. */
static inline int tc_read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Writes n bytes in one call (pipe messages are small); -1 otherwise. */
static inline int tc_write_all(int fd, const void *buf, size_t n)
{
    return write(fd, buf, n) == (ssize_t)n ? 0 : -1;
}

/* Forks a child running child_main(cmd_rd, ans_wr, arg), which must not
 * return (it ends with _exit).  The parent gets the write end of the
 * command pipe in *cmd_fd and the read end of the answer pipe in *ans_fd.
 * Returns the child's pid, or -1 with no descriptor left open. */
static inline pid_t tc_fork_child(void (*child_main)(int cmd_rd, int ans_wr,
                                                     void *arg),
                                  void *arg, int *cmd_fd, int *ans_fd)
{
    int cmd[2], ans[2];
    if (pipe(cmd) != 0)
        return -1;
    if (pipe(ans) != 0) {
        close(cmd[0]);
        close(cmd[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(cmd[0]);
        close(cmd[1]);
        close(ans[0]);
        close(ans[1]);
        return -1;
    }
    if (pid == 0) {
        close(cmd[1]);
        close(ans[0]);
        child_main(cmd[0], ans[1], arg);
        _exit(1); /* not reached */
    }
    close(cmd[0]);
    close(ans[1]);
    *cmd_fd = cmd[1];
    *ans_fd = ans[0];
    return pid;
}

#endif
