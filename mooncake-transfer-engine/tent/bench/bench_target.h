/* Shared by the two-process benchmarks (tent_net_bench, tent_mf_bench):
 * a target engine in a child process (and, through bench_batch.h, the clock
 * and the batch loop).  Public C API only. */
#ifndef TENT_BENCH_TARGET_H
#define TENT_BENCH_TARGET_H

#include "bench_batch.h"
#include "tent/transfer_engine.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Starts a target engine in a child process: configure(arg) sets its
 * configuration, then it allocates region bytes (filled with 1s) and
 * reports "<segment name> <buffer address>\n" into line.  It lives until
 * *keep, the write end of a pipe to it, is closed.  Returns its pid, or -1
 * (with nothing left behind). */
static inline pid_t bench_start_target(void (*configure)(int), int arg,
                                       size_t region, char *line, size_t cap,
                                       int *keep)
{
    int a[2], c[2];
    if (pipe(a))
        return -1;
    if (pipe(c)) {
        close(a[0]);
        close(a[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(a[0]);
        close(c[1]);
        configure(arg);
        tent_engine_t e = tent_create_engine();
        void *buf;
        char n[256] = "";
        if (!e || tent_allocate_memory(e, &buf, region, "cpu") ||
            tent_register_memory(e, buf, region) ||
            tent_segment_name(e, n, sizeof(n)))
            _exit(1);
        memset(buf, 1, region);
        char out[300];
        int len = snprintf(out, sizeof(out), "%s %llu\n", n,
                           (unsigned long long)(uintptr_t)buf);
        if (write(a[1], out, (size_t)len) != len)
            _exit(1);
        char x;
        while (read(c[0], &x, 1) > 0)
            ;
        tent_destroy_engine(e);
        _exit(0);
    }
    close(a[1]);
    close(c[0]);
    FILE *f = pid > 0 ? fdopen(a[0], "r") : NULL;
    if (!f || !fgets(line, (int)cap, f)) {
        if (f)
            fclose(f);
        else
            close(a[0]);
        close(c[1]);
        if (pid > 0)
            waitpid(pid, NULL, 0);
        return -1;
    }
    fclose(f);
    *keep = c[1];
    return pid;
}

/* bench_start_target, and its line parsed: the segment name into name (256
 * bytes) and the buffer address into *remote.  Returns the pid, or -1 after
 * saying so on stderr (with nothing left behind). */
static inline pid_t bench_target_up(void (*configure)(int), int arg,
                                    size_t region, char *name,
                                    unsigned long long *remote, int *keep)
{
    char line[300];
    pid_t pid =
        bench_start_target(configure, arg, region, line, sizeof(line), keep);
    if (pid >= 0 && sscanf(line, "%255s %llu", name, remote) != 2) {
        close(*keep);
        waitpid(pid, NULL, 0);
        pid = -1;
    }
    if (pid < 0)
        fprintf(stderr, "target did not start\n");
    return pid;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of the n runs in v (sorts v). */
static inline double bench_median(size_t n, double *v)
{
    qsort(v, n, sizeof(*v), bench_cmp_double);
    return v[n / 2];
}

#endif
