/* --baseline for the libfabric transport: the raw libfabric RMA ceiling of
 * the same provider, block size and window, measured by fabric_rma_bench
 * (tent_fabric_rma_bench, built beside tebench where libfabric's headers
 * are) in the same run, case by case. */
#include "tebench.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The benchmark program: TEBENCH_FABRIC_BENCH, else beside this tebench. */
static bool bench_path(char *out, size_t len)
{
    const char *env = getenv("TEBENCH_FABRIC_BENCH");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return access(out, X_OK) == 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return false;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return false;
    *slash = '\0';
    snprintf(out, len, "%s/tent_fabric_rma_bench", self);
    return access(out, X_OK) == 0;
}

/* Runs the program with argv; its JSON line in line.  The exit status (77:
 * the provider is not here), or -1. */
static int run_bench(char *const argv[], char *line, size_t len)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    line[0] = '\0';
    char buf[1024];
    while (f && fgets(buf, sizeof(buf), f))
        if (buf[0] == '{')
            snprintf(line, len, "%s", buf);
    if (f)
        fclose(f);
    else
        close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static double json_num(const char *line, const char *key)
{
    char k[64];
    snprintf(k, sizeof(k), "\"%s\":", key);
    const char *p = strstr(line, k);
    return p ? strtod(p + strlen(k), NULL) : 0;
}

int tb_fabric_ceiling(const char *provider, bool read, uint64_t block,
                      uint64_t window, double seconds, double *gbs,
                      double *lat_us, char *why, size_t wlen)
{
    static const char *const defaults[] = {"verbs;ofi_rxm", "efa", "cxi", NULL};
    char path[PATH_MAX + 32];
    *gbs = *lat_us = 0;
    if (!bench_path(path, sizeof(path))) {
        snprintf(why, wlen,
                 "tent_fabric_rma_bench not found beside tebench (set "
                 "TEBENCH_FABRIC_BENCH)");
        return -1;
    }
    const char *one[2] = {provider, NULL};
    const char *const *provs = provider && *provider ? one : defaults;
    char size[32], win[32], secs[32], line[1024];
    snprintf(size, sizeof(size), "%llu", (unsigned long long)block);
    snprintf(win, sizeof(win), "%llu",
             (unsigned long long)(window ? window : 1));
    snprintf(secs, sizeof(secs), "%.3f", seconds);
    for (size_t i = 0; provs[i]; i++) {
        char *bw[] = {path,
                      "--provider",
                      (char *)provs[i],
                      "--mode",
                      "bw",
                      "--op",
                      read ? "read" : "write",
                      "--size",
                      size,
                      "--window",
                      win,
                      "--seconds",
                      secs,
                      "--json",
                      NULL};
        int rc = run_bench(bw, line, sizeof(line));
        if (rc == 77)
            continue; /* this provider is not here: the next default */
        if (rc != 0 || !line[0]) {
            snprintf(why, wlen, "%s --provider %s failed (exit %d)", path,
                     provs[i], rc);
            return -1;
        }
        *gbs = json_num(line, "gb_per_s");
        /* one block at a time: the round trip a batch of one pays */
        char iters[32];
        snprintf(iters, sizeof(iters), "%d", block <= (1u << 20) ? 2000 : 200);
        char *lat[] = {path,
                       "--provider",
                       (char *)provs[i],
                       "--mode",
                       "lat",
                       "--op",
                       read ? "read" : "write",
                       "--size",
                       size,
                       "--iters",
                       iters,
                       "--json",
                       NULL};
        if (run_bench(lat, line, sizeof(line)) == 0 && line[0])
            *lat_us = json_num(line, "avg_us");
        snprintf(why, wlen, "%s", provs[i]);
        return 0;
    }
    snprintf(why, wlen,
             "no libfabric provider of %s has an RMA endpoint "
             "here",
             provider && *provider ? provider : "verbs;ofi_rxm, efa, cxi");
    return -1;
}
