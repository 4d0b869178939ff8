/* tebench and file segments: a missing target file is created with data,
 * and --baseline measures fio on the same file with the same block size,
 * queue depth (the batch) and threads. */
#include "tebench.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PREFIX "file://"

bool tb_is_file_target(const char *name)
{
    return strncmp(name, PREFIX, strlen(PREFIX)) == 0;
}

int tb_prepare_file(const char *name, uint64_t size)
{
    const char *path = name + strlen(PREFIX);
    struct stat st;
    if (*path != '/' || stat(path, &st) == 0)
        return 0; /* there, or relative to file_desc_basepath: as it is */
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "tebench: cannot create target file '%s': %s\n", path,
                strerror(errno));
        return -1;
    }
    fprintf(stderr,
            "tebench: creating target file '%s' with %llu bytes of data\n",
            path, (unsigned long long)size);
    /* real data (not a hole): reads must reach the device */
    const size_t chunk = 4u << 20;
    uint64_t *buf = malloc(chunk);
    int ret = buf ? 0 : -1;
    for (uint64_t off = 0; ret == 0 && off < size; off += chunk) {
        size_t n = size - off < chunk ? (size_t)(size - off) : chunk;
        for (size_t i = 0; i < chunk / 8; i++)
            buf[i] = tb_splitmix64(off + i);
        if (pwrite(fd, buf, n, (off_t)off) != (ssize_t)n)
            ret = -1;
    }
    if (ret == 0 && fdatasync(fd) != 0)
        ret = -1;
    if (ret != 0) {
        fprintf(stderr, "tebench: writing target file '%s' failed: %s\n", path,
                buf ? strerror(errno) : "out of memory");
        unlink(path);
    }
    free(buf);
    close(fd);
    return ret;
}

/* Runs argv, returns its standard output (malloc'd) or NULL. */
static char *run_capture(char *const argv[], int *status)
{
    int p[2];
    if (pipe(p) != 0)
        return NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return NULL;
    }
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    for (;;) {
        if (out && len + 1 == cap) {
            char *g = realloc(out, cap * 2);
            if (!g) {
                free(out);
                out = NULL;
            } else {
                out = g;
                cap *= 2;
            }
        }
        char sink[4096];
        ssize_t r = out ? read(p[0], out + len, cap - len - 1)
                        : read(p[0], sink, sizeof(sink));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (out)
            len += (size_t)r;
    }
    close(p[0]);
    while (waitpid(pid, status, 0) < 0 && errno == EINTR)
        ;
    if (out)
        out[len] = '\0';
    return out;
}

static double job_bytes_per_s(const cJSON *job, const char *dir)
{
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(job, dir);
    const cJSON *bw = cJSON_GetObjectItemCaseSensitive(d, "bw_bytes");
    return cJSON_IsNumber(bw) ? bw->valuedouble : 0;
}

double tb_fio_ceiling(const char *name, int op, uint64_t threads,
                      uint64_t block, uint64_t batch, uint64_t off,
                      uint64_t len, double seconds, char *why, size_t wlen)
{
    const char *path = name + strlen(PREFIX);
    uint64_t slice = len / threads / block * block;
    if (slice == 0) {
        snprintf(why, wlen,
                 "%llu thread(s) x block %llu B do not fit the "
                 "file range of %llu B",
                 (unsigned long long)threads, (unsigned long long)block,
                 (unsigned long long)len);
        return 0;
    }
    const char *rw = op == TB_OP_WRITE || op == TB_OP_WRITE_SEED ? "write"
                     : op == TB_OP_MIX                           ? "rw"
                                                                 : "read";
    double warm = seconds / 5 > 1 ? 1 : seconds / 5;
    char a_file[1100], a_rw[32], a_bs[48], a_depth[48], a_jobs[48], a_size[64],
        a_off[64], a_inc[64], a_run[48], a_ramp[48];
    snprintf(a_file, sizeof(a_file), "--filename=%s", path);
    snprintf(a_rw, sizeof(a_rw), "--rw=%s", rw);
    snprintf(a_bs, sizeof(a_bs), "--bs=%llu", (unsigned long long)block);
    snprintf(a_depth, sizeof(a_depth), "--iodepth=%llu",
             (unsigned long long)batch);
    snprintf(a_jobs, sizeof(a_jobs), "--numjobs=%llu",
             (unsigned long long)threads);
    snprintf(a_size, sizeof(a_size), "--size=%llu", (unsigned long long)slice);
    snprintf(a_off, sizeof(a_off), "--offset=%llu", (unsigned long long)off);
    snprintf(a_inc, sizeof(a_inc), "--offset_increment=%llu",
             (unsigned long long)slice);
    snprintf(a_run, sizeof(a_run), "--runtime=%lldms",
             (long long)(seconds * 1000));
    snprintf(a_ramp, sizeof(a_ramp), "--ramp_time=%lldms",
             (long long)(warm * 1000));
    const char *fio = getenv("FIO");
    char *argv[] = {(char *)(fio && *fio ? fio : "fio"),
                    "--name=tebench",
                    a_file,
                    "--ioengine=io_uring",
                    "--direct=1",
                    a_rw,
                    "--rwmixread=50",
                    a_bs,
                    a_depth,
                    a_jobs,
                    a_size,
                    a_off,
                    a_inc,
                    "--time_based=1",
                    a_run,
                    a_ramp,
                    "--group_reporting=1",
                    "--allow_file_create=0",
                    "--fallocate=none",
                    "--thread=1",
                    "--output-format=json",
                    NULL};
    fprintf(stderr,
            "tebench: baseline: fio %s %s bs=%llu iodepth=%llu numjobs=%llu "
            "(%.1f s)\n",
            rw, path, (unsigned long long)block, (unsigned long long)batch,
            (unsigned long long)threads, seconds);
    int status = 0;
    char *out = run_capture(argv, &status);
    if (!out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, wlen,
                 "'%s' failed (%s); install Debian's fio, or set "
                 "FIO",
                 argv[0],
                 !out ? "could not run it"
                 : WIFEXITED(status) && WEXITSTATUS(status) == 127
                     ? "not found"
                     : "non-zero exit");
        free(out);
        return 0;
    }
    const char *j = strchr(out, '{');
    cJSON *doc = j ? cJSON_Parse(j) : NULL;
    const cJSON *jobs = cJSON_GetObjectItemCaseSensitive(doc, "jobs");
    const cJSON *job = cJSON_GetArrayItem(jobs, 0);
    double bps =
        job ? job_bytes_per_s(job, "read") + job_bytes_per_s(job, "write") : 0;
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(job, "error");
    if (!job || bps <= 0 || (cJSON_IsNumber(err) && err->valueint != 0))
        snprintf(why, wlen, "no bandwidth in fio's output (error %d)",
                 cJSON_IsNumber(err) ? err->valueint : -1);
    cJSON_Delete(doc);
    free(out);
    return bps / 1e9;
}
