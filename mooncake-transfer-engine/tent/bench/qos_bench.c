/* Two processes on one host, one target: the latency of one process's HIGH
 * 4 KiB reads while another process writes LOW bulk, with or without TENT's
 * priority slots shared between them (shared_quota_shm_path, docs/qos.md).
 *
 *   tent_qos_bench [--xport=tcp|shm] [--slots] [--secs=N] [--warmup=N]
 *                  [--host=ADDR] [--target | --seg=NAME --base=ADDR]
 *
 * --target runs the target alone (prints "<segment> <address>", serves
 * until killed); --seg/--base run the two clients against such a target,
 * e.g. in another network namespace; --host is the address the engines
 * bind to (rpc_server_hostname).  --slots names the region by
 * --region=NAME when given (both sides' clients share it).
 *
 * Forks a target (an engine with a registered 256 MiB buffer), a LOW
 * process (batches of 4 x 1 MiB LOW writes, back to back) and a HIGH
 * process (one 4 KiB HIGH read at a time, each timed after the warm-up, in
 * which the LOW stream lets the rails learn their capacity); prints the
 * HIGH latency percentiles and the LOW throughput of the same span. */
#define _GNU_SOURCE
#include "tent/transfer_engine.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TARGET_BYTES (256u << 20)
#define LOW_BLOCK    (1u << 20)
#define LOW_BATCH    4
#define HIGH_BLOCK   4096

static const char *xport = "tcp";
static const char *host, *region;
static bool slots;
static double secs = 5, warmup = 2;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void configure(void)
{
    static const char *all[] = {"tcp",      "shm",   "memfabric",
                                "io_uring", "bufio", "libfabric"};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        char key[64];
        snprintf(key, sizeof(key), "transports/%s/enable", all[i]);
        tent_set_config(key, strcmp(all[i], xport) == 0 ? "true" : "false");
    }
    tent_set_config("log_level", "error");
    if (host)
        tent_set_config("rpc_server_hostname", host);
    if (slots) {
        char key[96], name[64];
        snprintf(key, sizeof(key), "transports/%s/shared_quota_shm_path",
                 xport);
        if (region)
            snprintf(name, sizeof(name), "%s", region);
        else
            snprintf(name, sizeof(name), "/tent_qos_bench_%d", (int)getppid());
        tent_set_config(key, name);
    }
}

static tent_engine_t engine_or_die(void)
{
    configure();
    tent_engine_t e = tent_create_engine();
    if (!e) {
        fprintf(stderr, "engine: %s\n", tent_last_error());
        exit(1);
    }
    return e;
}

static char *buffer_or_die(tent_engine_t e, size_t len)
{
    char *p = aligned_alloc(4096, len);
    if (!p || tent_register_memory(e, p, len) != TENT_OK) {
        fprintf(stderr, "buffer: %s\n", tent_last_error());
        exit(1);
    }
    memset(p, 1, len);
    return p;
}

static void run_target(int fd)
{
    tent_engine_t e = engine_or_die();
    char *buf = buffer_or_die(e, TARGET_BYTES);
    char name[320];
    tent_segment_name(e, name, sizeof(name));
    dprintf(fd, "%s %llu\n", name, (unsigned long long)(uintptr_t)buf);
    close(fd);
    pause(); /* until SIGTERM */
}

/* Waits for every task of b; false on a failure. */
static bool wait_batch(tent_engine_t e, tent_batch_id_t b)
{
    tent_status_t st;
    do {
        if (tent_overall_status(e, b, &st) != TENT_OK)
            return false;
    } while (st.status == STATUS_PENDING);
    return st.status == STATUS_COMPLETED;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* high: HIGH 4 KiB reads, timed; else LOW 1 MiB writes.  Writes its
 * figures to fd. */
static void run_client(const char *seg, uint64_t base, bool high, int fd)
{
    tent_engine_t e = engine_or_die();
    size_t len = high ? HIGH_BLOCK : (size_t)LOW_BLOCK * LOW_BATCH;
    char *buf = buffer_or_die(e, len);
    tent_segment_id_t h;
    if (tent_open_segment(e, &h, seg) != TENT_OK) {
        fprintf(stderr, "open %s: %s\n", seg, tent_last_error());
        exit(1);
    }
    size_t cap = 1u << 22, n = 0;
    uint64_t *lat = high ? malloc(cap * sizeof(*lat)) : NULL;
    uint64_t bytes = 0;
    double start = now_s(), t0 = start + warmup, end = t0 + secs;
    /* LOW runs on past the HIGH process's window, so that it never reads
     * alone */
    if (!high)
        end += 1;
    tent_batch_id_t b = tent_allocate_batch(e, LOW_BATCH);
    uint64_t off = high ? 0 : TARGET_BYTES / 2;
    for (double t = now_s(); t < end; t = now_s()) {
        tent_request_t r[LOW_BATCH];
        size_t k = high ? 1 : LOW_BATCH;
        memset(r, 0, sizeof(r));
        for (size_t i = 0; i < k; i++) {
            r[i].opcode = high ? OPCODE_READ : OPCODE_WRITE;
            r[i].source = buf + i * (high ? 0 : LOW_BLOCK);
            r[i].target_id = h;
            r[i].target_offset = base + off + i * (high ? 0 : LOW_BLOCK);
            r[i].length = high ? HIGH_BLOCK : LOW_BLOCK;
            r[i].priority = high ? 0 : 2;
        }
        double s = now_s();
        if (tent_submit(e, b, r, k) != TENT_OK || !wait_batch(e, b)) {
            fprintf(stderr, "transfer: %s\n", tent_last_error());
            exit(1);
        }
        double d = now_s() - s;
        tent_free_batch(e, b);
        b = tent_allocate_batch(e, LOW_BATCH);
        if (s >= t0 && s < t0 + secs) {
            if (high && n < cap)
                lat[n++] = (uint64_t)(d * 1e9);
            bytes += k * r[0].length;
        }
    }
    if (high) {
        qsort(lat, n, sizeof(*lat), cmp_u64);
        dprintf(fd,
                "HIGH 4 KiB reads: %zu, p50 %.1f us, p99 %.1f us, p99.9 "
                "%.1f us\n",
                n, n ? lat[n / 2] / 1e3 : 0, n ? lat[n * 99 / 100] / 1e3 : 0,
                n ? lat[n * 999 / 1000] / 1e3 : 0);
    } else {
        dprintf(fd, "LOW 1 MiB writes: %.3f GB/s\n",
                (double)bytes / secs / 1e9);
    }
    close(fd);
    tent_free_batch(e, b);
    tent_destroy_engine(e);
    exit(0);
}

int main(int argc, char **argv)
{
    bool target_only = false;
    const char *seg_arg = NULL;
    unsigned long long base_arg = 0;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--xport=", 8) == 0)
            xport = argv[i] + 8;
        else if (strcmp(argv[i], "--slots") == 0)
            slots = true;
        else if (strncmp(argv[i], "--secs=", 7) == 0)
            secs = atof(argv[i] + 7);
        else if (strncmp(argv[i], "--warmup=", 9) == 0)
            warmup = atof(argv[i] + 9);
        else if (strncmp(argv[i], "--host=", 7) == 0)
            host = argv[i] + 7;
        else if (strncmp(argv[i], "--region=", 9) == 0)
            region = argv[i] + 9;
        else if (strcmp(argv[i], "--target") == 0)
            target_only = true;
        else if (strncmp(argv[i], "--seg=", 6) == 0)
            seg_arg = argv[i] + 6;
        else if (strncmp(argv[i], "--base=", 7) == 0)
            base_arg = strtoull(argv[i] + 7, NULL, 0);
        else {
            fprintf(stderr,
                    "usage: %s [--xport=tcp|shm] [--slots] [--secs=N] "
                    "[--warmup=N] [--host=ADDR] [--region=NAME] "
                    "[--target | --seg=NAME --base=ADDR]\n",
                    argv[0]);
            return 2;
        }
    }
    if (target_only) {
        setvbuf(stdout, NULL, _IONBF, 0);
        run_target(STDOUT_FILENO);
        return 0;
    }
    int tp[2], out[2];
    char seg[320];
    unsigned long long base;
    pid_t target = -1;
    if (seg_arg) {
        snprintf(seg, sizeof(seg), "%s", seg_arg);
        base = base_arg;
        goto clients;
    }
    if (pipe(tp))
        return 1;
    fflush(NULL);
    target = fork();
    if (target == 0) {
        close(tp[0]);
        run_target(tp[1]);
        _exit(0);
    }
    close(tp[1]);
    char line[512] = {0};
    ssize_t got = read(tp[0], line, sizeof(line) - 1);
    close(tp[0]);
    if (got <= 0 || sscanf(line, "%319s %llu", seg, &base) != 2) {
        fprintf(stderr, "the target did not start\n");
        kill(target, SIGTERM);
        return 1;
    }
clients:
    if (pipe(out)) { /* after the target's fork: it must not hold it */
        if (target > 0)
            kill(target, SIGTERM);
        return 1;
    }
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            close(out[0]);
            run_client(seg, base, k == 1, out[1]);
        }
    }
    close(out[1]);
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        int st;
        waitpid(kids[k], &st, 0);
        rc |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    char buf[1024];
    ssize_t n;
    printf("%s, slots %s:\n", xport, slots ? "shared" : "off");
    while ((n = read(out[0], buf, sizeof(buf))) > 0)
        fwrite(buf, 1, (size_t)n, stdout);
    if (target > 0) {
        kill(target, SIGTERM);
        waitpid(target, NULL, 0);
    }
    if (slots && !region) {
        char name[64];
        snprintf(name, sizeof(name), "/dev/shm/tent_qos_bench_%d",
                 (int)getpid());
        unlink(name);
    }
    return rc;
}
