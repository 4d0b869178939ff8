/* tent_net_bench: throughput of the tcp and shm transports between two
 * processes on 127.0.0.1, each printed next to a baseline measured by this
 * same program in the same run:
 *   tcp  vs a plain one-connection send/recv stream (same block size),
 *   shm  vs single-thread memcpy of the same blocks.
 * Usage: tent_net_bench [seconds-per-point, default 2.0]
 * Each point alternates baseline and engine runs 5 times; medians shown.
 * Only TENT's public C API is used. */
#define _GNU_SOURCE
#include "bench_target.h"
#include "tent/transfer_engine.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REGION ((size_t)64 << 20)
#define BATCH  32

static void configure(int shm)
{
    tent_set_config("log_level", "error");
    tent_set_config("transports/tcp/enable", shm ? "false" : "true");
    tent_set_config("transports/shm/enable", shm ? "true" : "false");
}

static void stop_target(pid_t pid, int keep)
{
    close(keep);
    waitpid(pid, NULL, 0);
}

/* Bytes per second writing blocks of `block` bytes, BATCH per batch. */
static double engine_rate(tent_engine_t e, tent_segment_id_t seg, char *src,
                          uint64_t remote, size_t block, double secs)
{
    tent_request_t r[BATCH];
    memset(r, 0, sizeof(r));
    size_t per = REGION / block;
    uint64_t bytes = 0;
    size_t next = 0;
    double t0 = bench_now_s(), t;
    do {
        for (int i = 0; i < BATCH; i++, next++) {
            size_t off = (next % per) * block;
            r[i].opcode = OPCODE_WRITE;
            r[i].source = src + off;
            r[i].target_id = seg;
            r[i].target_offset = remote + off;
            r[i].length = block;
        }
        bench_run_batch(e, r, BATCH);
        bytes += (uint64_t)block * BATCH;
        t = bench_now_s();
    } while (t - t0 < secs);
    return (double)bytes / (t - t0);
}

/* Plain stream: one TCP connection over loopback to a child that recv()s
 * into a buffer; blocks of `block` bytes; the child acknowledges the total. */
static double stream_rate(size_t block, double secs)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&a, &al))
        return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char *buf = malloc(REGION);
        memset(buf, 0, REGION); /* pre-faulted, like the engine's target */
        int fd = accept(ls, NULL, NULL);
        size_t off = 0;
        for (;;) {
            size_t want = REGION - off < block ? REGION - off : block;
            ssize_t n = recv(fd, buf + off, want, 0);
            if (n <= 0)
                break;
            off = (off + (size_t)n) % REGION;
        }
        _exit(0);
    }
    close(ls);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
        return 0;
    char *src = malloc(REGION);
    memset(src, 2, REGION);
    uint64_t bytes = 0;
    size_t off = 0;
    double t0 = bench_now_s(), t;
    do {
        for (int i = 0; i < BATCH; i++) {
            size_t left = block;
            while (left) {
                ssize_t n = send(fd, src + off + (block - left), left, 0);
                if (n <= 0)
                    exit(1);
                left -= (size_t)n;
            }
            off = (off + block) % (REGION - block + 1);
            bytes += block;
        }
        t = bench_now_s();
    } while (t - t0 < secs);
    shutdown(fd, SHUT_WR);
    char x;
    while (recv(fd, &x, 1, 0) > 0) /* the receiver has drained everything */
        ;
    t = bench_now_s();
    close(fd);
    waitpid(pid, NULL, 0);
    free(src);
    return (double)bytes / (t - t0);
}

static double memcpy_rate(char *src, char *dst, size_t block, double secs)
{
    size_t per = REGION / block, next = 0;
    uint64_t bytes = 0;
    double t0 = bench_now_s(), t;
    do {
        for (int i = 0; i < BATCH; i++, next++) {
            size_t off = (next % per) * block;
            memcpy(dst + off, src + off, block);
        }
        bytes += (uint64_t)block * BATCH;
        t = bench_now_s();
    } while (t - t0 < secs);
    return (double)bytes / (t - t0);
}

#define REPS 5

static int run(int shm, double secs)
{
    char name[256];
    unsigned long long remote;
    int keep;
    pid_t pid = bench_target_up(configure, shm, REGION, name, &remote, &keep);
    if (pid < 0)
        return 1;
    configure(shm);
    tent_engine_t e = tent_create_engine();
    void *src, *dst;
    tent_segment_id_t seg;
    if (!e || tent_allocate_memory(e, &src, REGION, "cpu") ||
        tent_register_memory(e, src, REGION) ||
        tent_allocate_memory(e, &dst, REGION, "cpu") ||
        tent_register_memory(e, dst, REGION) ||
        tent_open_segment(e, &seg, name)) {
        fprintf(stderr, "setup failed: %s\n", tent_last_error());
        return 1;
    }
    memset(src, 3, REGION);
    memset(dst, 4, REGION);
    static const size_t blocks[] = {4096, 65536, 1 << 20};
    for (size_t i = 0; i < 3; i++) {
        size_t bs = blocks[i];
        if (shm && bs != (1 << 20))
            continue;
        /* Interleaved repetitions, median of each: the machine may be busy
         * with other work, and this spreads its noise over both sides. */
        double base_r[REPS], got_r[REPS];
        for (int k = 0; k < REPS; k++) {
            base_r[k] = shm ? memcpy_rate(src, dst, bs, secs / REPS)
                            : stream_rate(bs, secs / REPS);
            got_r[k] = engine_rate(e, seg, src, remote, bs, secs / REPS);
        }
        double base = bench_median(REPS, base_r),
               got = bench_median(REPS, got_r);
        printf("%-4s %8zu B x %d  engine %8.2f GB/s   %-12s %8.2f GB/s   "
               "ratio %5.1f%%\n",
               shm ? "shm" : "tcp", bs, BATCH, got / 1e9,
               shm ? "memcpy" : "plain-stream", base / 1e9, 100 * got / base);
    }
    tent_destroy_engine(e);
    stop_target(pid, keep);
    return 0;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    if (secs <= 0)
        secs = 2.0;
    signal(SIGPIPE, SIG_IGN);
    int rc = run(0, secs);
    if (!rc)
        rc = run(1, secs);
    return rc;
}
