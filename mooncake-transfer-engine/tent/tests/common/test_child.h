/* For tests that drive a child process over two pipes (commands in,
 * answers out): whole reads and writes, and the start of the child with
 * each side's pipe ends in place.  Header-only and without TENT
 * dependencies (the mf_host tests use it too); include it as
 * "../common/test_child.h".
 *
 * The child of a fork made while other threads run may inherit a lock one
 * of them held at that moment (the dynamic loader's, OpenSSL's, a TENT
 * mutex) and hang on it; until it execs it may only make async-signal-safe
 * calls.  So tc_fork_child refuses to fork while this process has more
 * than one thread, and a child that must start after threads exist (a
 * target engine beside this process's engine) is started by
 * tc_spawn_child instead: a fork and an exec of this test binary, in
 * which a constructor (TC_CHILD_ROLE) runs the child's function before
 * main. */
#ifndef TENT_TESTS_TEST_CHILD_H
#define TENT_TESTS_TEST_CHILD_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* The threads a process has before its own first pthread_create: one, and
 * under ThreadSanitizer its background thread too (it starts with the
 * first thread and stays; TSan's fork handling takes its locks). */
#if defined(__SANITIZE_THREAD__)
#define TC_OWN_THREADS 2
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TC_OWN_THREADS 2
#endif
#endif
#ifndef TC_OWN_THREADS
#define TC_OWN_THREADS 1
#endif

/* The threads of this process (entries of /proc/self/task); -1 when they
 * cannot be counted. */
static inline int tc_thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Both pipes of a child (commands, answers); -1 with neither open. */
static inline int tc_pipes_open(int cmd[2], int ans[2])
{
    if (pipe(cmd) != 0)
        return -1;
    if (pipe(ans) != 0) {
        close(cmd[0]);
        close(cmd[1]);
        return -1;
    }
    return 0;
}

/* Closes all four ends tc_pipes_open opened. */
static inline void tc_pipes_close(int cmd[2], int ans[2])
{
    for (int i = 0; i < 2; i++) {
        close(cmd[i]);
        close(ans[i]);
    }
}

/* Forks a child running child_main(cmd_rd, ans_wr, arg), which must not
 * return (it ends with _exit).  The parent gets the write end of the
 * command pipe in *cmd_fd and the read end of the answer pipe in *ans_fd.
 * Returns the child's pid, or -1 with no descriptor left open; -1 also,
 * with a message on stderr, when this process runs more than one thread
 * (use tc_spawn_child then). */
static inline pid_t tc_fork_child(void (*child_main)(int cmd_rd, int ans_wr,
                                                     void *arg),
                                  void *arg, int *cmd_fd, int *ans_fd)
{
    int nthreads = tc_thread_count();
    if (nthreads < 1 || nthreads > TC_OWN_THREADS) {
        fprintf(stderr,
                "tc_fork_child: refused: this process runs %d threads (a "
                "child forked now may inherit a held lock); fork before "
                "the first thread starts, or use tc_spawn_child\n",
                nthreads);
        return -1;
    }
    int cmd[2], ans[2];
    if (tc_pipes_open(cmd, ans))
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        tc_pipes_close(cmd, ans);
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

/* The argument tc_spawn_child's exec selects a role with. */
#define TC_ROLE_FLAG "--tc-child-role"

/* Starts role (a name TC_CHILD_ROLE gave a child function in this binary)
 * in a new process: fork, then in the child only async-signal-safe calls
 * up to the exec of this binary (/proc/self/exe) with arguments
 * {path, TC_ROLE_FLAG, role, cmd_rd, ans_wr} and this environment.  The
 * len bytes at arg go first on the command pipe; the child's function gets
 * a copy of them as its arg, so they must hold no pointer.  Descriptors
 * are returned as tc_fork_child returns them, and the parent's ends are
 * close-on-exec.  Returns the child's pid, or -1 with no descriptor left
 * open (a child whose exec fails exits 127: its answer pipe reads end of
 * file). */
static inline pid_t tc_spawn_child(const char *role, const void *arg,
                                   size_t len, int *cmd_fd, int *ans_fd)
{
    extern char **environ;
    char path[PATH_MAX], rd[16], wr[16];
    ssize_t pl = readlink("/proc/self/exe", path, sizeof(path) - 1);
    uint32_t n32 = (uint32_t)len;
    if (pl <= 0 || (size_t)pl >= sizeof(path) - 1 || len > 60000)
        return -1; /* the argument must fit in the pipe (64 KiB) */
    path[pl] = 0;
    int cmd[2], ans[2];
    if (tc_pipes_open(cmd, ans))
        return -1;
    for (int i = 0; i < 2; i++) {
        fcntl(cmd[i], F_SETFD, FD_CLOEXEC);
        fcntl(ans[i], F_SETFD, FD_CLOEXEC);
    }
    /* the argument goes in while this process holds both ends: no
     * SIGPIPE if the child dies early, and the pipe keeps it for the
     * child */
    if (tc_write_all(cmd[1], &n32, sizeof(n32)) ||
        (len && tc_write_all(cmd[1], arg, len))) {
        tc_pipes_close(cmd, ans);
        return -1;
    }
    snprintf(rd, sizeof(rd), "%d", cmd[0]);
    snprintf(wr, sizeof(wr), "%d", ans[1]);
    char *argv[] = {path, TC_ROLE_FLAG, (char *)role, rd, wr, NULL};
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* async-signal-safe calls only: the child's ends stay open */
        if (fcntl(cmd[0], F_SETFD, 0) == 0 && fcntl(ans[1], F_SETFD, 0) == 0)
            execve(path, argv, environ);
        _exit(127);
    }
    close(cmd[0]);
    close(ans[1]);
    if (pid < 0) {
        close(cmd[1]);
        close(ans[0]);
        return -1;
    }
    *cmd_fd = cmd[1];
    *ans_fd = ans[0];
    return pid;
}

/* In a process tc_spawn_child started for role name: reads the argument
 * and runs child_main(cmd_rd, ans_wr, arg), which must not return. */
static inline void tc_role_run(int argc, char **argv, const char *name,
                               void (*child_main)(int cmd_rd, int ans_wr,
                                                  void *arg))
{
    if (argc != 5 || strcmp(argv[1], TC_ROLE_FLAG) != 0 ||
        strcmp(argv[2], name) != 0)
        return;
    int cfd = atoi(argv[3]), afd = atoi(argv[4]);
    uint32_t n = 0;
    void *arg = NULL;
    if (tc_read_all(cfd, &n, sizeof(n)) || !(arg = calloc(1, n ? n : 1)) ||
        (n && tc_read_all(cfd, arg, n)))
        _exit(126);
    fcntl(cfd, F_SETFD, FD_CLOEXEC);
    fcntl(afd, F_SETFD, FD_CLOEXEC);
    child_main(cfd, afd, arg);
    _exit(1); /* not reached */
}

/* Gives child_main the role name in this binary: a constructor, run
 * before main with the program's arguments (glibc passes them to ELF
 * constructors), hands a process tc_spawn_child started for name to it. */
#define TC_CHILD_ROLE(name, child_main)                                        \
    __attribute__((constructor)) static void tc_role_##child_main(             \
        int argc, char **argv, char **envp)                                    \
    {                                                                          \
        (void)envp;                                                            \
        tc_role_run(argc, argv, name, child_main);                             \
    }

#endif
