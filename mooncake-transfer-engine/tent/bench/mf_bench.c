/* tent_mf_bench: the memfabric transport over mf_host against the built-in
 * transport it stands in for, between two processes on 127.0.0.1, both
 * measured by this program in the same run:
 *   memfabric (MF_PROTOCOL=host_tcp) vs the tcp transport,
 *   memfabric (MF_PROTOCOL=host_shm) vs the shm transport.
 * Each engine has both transports of a pair installed; a request's
 * transport_hint picks the one measured, and failover is off
 * (max_failover_attempts 0), so a failure stops the benchmark instead of
 * being measured as the other transport.
 *
 * Usage: tent_mf_bench [--seconds S] [--block BYTES] [--batch N]
 *                      [--pair tcp|shm|all] [--op write|read|all]
 * Defaults: 2 s per point, 1 MiB blocks, 32 per batch, both pairs, both
 * ops.  Each point alternates the two transports 5 times; medians shown.
 * MF_SMEM_LIBRARY defaults to the mf_host library of this build. */
#define _GNU_SOURCE
#include "bench_target.h"
#include "tent/transfer_engine.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REGION ((size_t)64 << 20)
#define REPS   5

struct opts {
    double secs;
    size_t block;
    int batch;
    const char *pair;
    const char *op;
};

/* Engine configuration for a pair: memfabric plus tcp or shm. */
static void configure(int shm)
{
    tent_set_config("log_level", "error");
    tent_set_config("transports/memfabric/enable", "true");
    tent_set_config("transports/tcp/enable", shm ? "false" : "true");
    tent_set_config("transports/shm/enable", shm ? "true" : "false");
    tent_set_config("max_failover_attempts", "0");
}

/* Bytes per second moving blocks of o->block bytes, o->batch per batch, one
 * batch at a time, through the transport of type hint. */
static double engine_rate(tent_engine_t e, tent_segment_id_t seg, char *local,
                          uint64_t remote, int opcode, int hint,
                          const struct opts *o, double secs)
{
    tent_request_t *r = calloc((size_t)o->batch, sizeof(*r));
    size_t per = REGION / o->block;
    uint64_t bytes = 0;
    size_t next = 0;
    double t0 = bench_now_s(), t;
    do {
        for (int i = 0; i < o->batch; i++, next++) {
            size_t off = (next % per) * o->block;
            r[i].opcode = opcode;
            r[i].source = local + off;
            r[i].target_id = seg;
            r[i].target_offset = remote + off;
            r[i].length = o->block;
            r[i].transport_hint = hint;
        }
        bench_run_batch(e, r, (size_t)o->batch);
        bytes += (uint64_t)o->block * (uint64_t)o->batch;
        t = bench_now_s();
    } while (t - t0 < secs);
    free(r);
    return (double)bytes / (t - t0);
}

/* One pair: memfabric over proto vs the tcp or shm transport. */
static int run_pair(int shm, const struct opts *o)
{
    const char *proto = shm ? "host_shm" : "host_tcp";
    const char *other = shm ? "shm" : "tcp";
    int other_type = shm ? TRANSPORT_SHM : TRANSPORT_TCP;
    setenv("MF_PROTOCOL", proto, 1); /* the target inherits it */
    char name[256];
    unsigned long long remote;
    int keep;
    pid_t pid = bench_target_up(configure, shm, REGION, name, &remote, &keep);
    if (pid < 0)
        return 1;
    configure(shm);
    tent_engine_t e = tent_create_engine();
    void *src;
    tent_segment_id_t seg;
    if (!e || tent_allocate_memory(e, &src, REGION, "cpu") ||
        tent_register_memory(e, src, REGION) ||
        tent_open_segment(e, &seg, name)) {
        fprintf(stderr, "setup failed: %s\n", tent_last_error());
        return 1;
    }
    memset(src, 3, REGION);
    for (int op = 0; op < 2; op++) {
        int opcode = op ? OPCODE_READ : OPCODE_WRITE;
        const char *opname = op ? "read" : "write";
        if (strcmp(o->op, "all") != 0 && strcmp(o->op, opname) != 0)
            continue;
        /* warm-up: connections, caches, page faults */
        engine_rate(e, seg, src, remote, opcode, TRANSPORT_MEMFABRIC, o, 0.2);
        engine_rate(e, seg, src, remote, opcode, other_type, o, 0.2);
        /* Interleaved repetitions, median of each: the machine may be busy
         * with other work, and this spreads its noise over both sides. */
        double mf_r[REPS], x_r[REPS];
        for (int k = 0; k < REPS; k++) {
            mf_r[k] = engine_rate(e, seg, src, remote, opcode,
                                  TRANSPORT_MEMFABRIC, o, o->secs / REPS);
            x_r[k] = engine_rate(e, seg, src, remote, opcode, other_type, o,
                                 o->secs / REPS);
        }
        double mf = bench_median(REPS, mf_r), x = bench_median(REPS, x_r);
        printf("memfabric/%-8s %-5s %8zu B x %3d   memfabric %7.2f GB/s   "
               "%-3s %7.2f GB/s   ratio %5.1f%%\n",
               proto, opname, o->block, o->batch, mf / 1e9, other, x / 1e9,
               100 * mf / x);
        fflush(stdout);
    }
    tent_destroy_engine(e);
    close(keep);
    waitpid(pid, NULL, 0);
    return 0;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--seconds S] [--block BYTES] [--batch N] "
            "[--pair tcp|shm|all] [--op write|read|all]\n",
            argv0);
    return 2;
}

int main(int argc, char **argv)
{
    struct opts o = {
        .secs = 2.0, .block = 1 << 20, .batch = 32, .pair = "all", .op = "all"};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage(argv[0]);
        if (strcmp(a, "--seconds") == 0)
            o.secs = atof(v);
        else if (strcmp(a, "--block") == 0)
            o.block = (size_t)strtoull(v, NULL, 0);
        else if (strcmp(a, "--batch") == 0)
            o.batch = atoi(v);
        else if (strcmp(a, "--pair") == 0)
            o.pair = v;
        else if (strcmp(a, "--op") == 0)
            o.op = v;
        else
            return usage(argv[0]);
    }
    if (o.secs <= 0 || o.block == 0 || o.block > REGION || o.batch < 1 ||
        o.batch > 4096 ||
        (strcmp(o.pair, "all") && strcmp(o.pair, "tcp") &&
         strcmp(o.pair, "shm")) ||
        (strcmp(o.op, "all") && strcmp(o.op, "write") && strcmp(o.op, "read")))
        return usage(argv[0]);
#ifdef MF_BENCH_LIB
    setenv("MF_SMEM_LIBRARY", MF_BENCH_LIB, 0); /* unless the user chose */
#endif
    signal(SIGPIPE, SIG_IGN);
    int rc = 0;
    if (strcmp(o.pair, "shm") != 0)
        rc = run_pair(0, &o);
    if (!rc && strcmp(o.pair, "tcp") != 0)
        rc = run_pair(1, &o);
    return rc;
}
