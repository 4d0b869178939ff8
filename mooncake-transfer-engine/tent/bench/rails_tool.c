/* tent_rails_tool: the two ends of the rail tests and benchmark
 * (scripts/rails_bench.sh, tests/e2e/rails_netns_test.sh), public C API
 * only.
 *
 *   tent_rails_tool target --host H [--port P] [--mib M] [--set k=v]...
 *       an engine bound to H with M MiB registered; prints
 *       "segment <name> <buffer address>" and serves until stdin closes.
 *   tent_rails_tool run --host H --target NAME --addr A [options]
 *       an engine bound to H moves data to segment NAME at address A:
 *       --op write|read     the bulk stream (default write)
 *       --block B --batch K requests of B bytes, K per batch (1 MiB, 32)
 *       --threads N         bulk threads (1), each with its own range
 *       --prio P            the bulk stream's priority (0 high .. 2 low)
 *       --seconds S         how long (10)
 *       --lat-block B       also a latency stream: one request of B bytes
 *       --lat-op, --lat-prio, --lat-gap-us   (read, 0, 1000)
 *       --interval-ms T     a "tick" line every T ms (200)
 *       --after-ms T        the summary counts what completes after T ms
 *       --set k=v           a configuration key (tent_set_config)
 *       --mib M             local buffer (default: enough for the bulk)
 *     Lines: "tick t_ms=.. bytes=.. failed=.. nic=<name>:<inflight>:<bps>"
 *     (one nic= per NIC) and, at the end, "result gbps=.. tasks=.. failed=..
 *     p50_us=.. p99_us=.. lat_n=.. lat_p50_us=.. lat_p99_us=.." where
 *     gbps and the per-task latencies count bulk tasks completed after
 *     --after-ms and the lat_ figures the latency stream's requests.
 *     Exit 0 when no task failed, 1 otherwise. */
#define _GNU_SOURCE
#include "tent/transfer_engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (!strcasecmp(end, "k") || !strcasecmp(end, "kib"))
        v *= 1024;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib"))
        v *= 1024 * 1024;
    else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib"))
        v *= 1024.0 * 1024 * 1024;
    return (uint64_t)v;
}

struct opts {
    const char *mode, *host, *target;
    uint64_t addr;
    int port;
    uint64_t mib;
    int op, prio, batch, threads;
    uint64_t block;
    double seconds;
    uint64_t lat_block;
    int lat_op, lat_prio, lat_gap_us;
    int interval_ms, after_ms;
};

static void usage(void)
{
    fprintf(stderr, "usage: tent_rails_tool target --host H [--port P] "
                    "[--mib M] [--set k=v]...\n"
                    "       tent_rails_tool run --host H --target NAME "
                    "--addr A [options] (see the source)\n");
    exit(2);
}

static int opcode_of(const char *s)
{
    if (strcmp(s, "read") == 0)
        return OPCODE_READ;
    if (strcmp(s, "write") == 0)
        return OPCODE_WRITE;
    usage();
    return -1;
}

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.op = OPCODE_WRITE,
                       .prio = 0,
                       .batch = 32,
                       .threads = 1,
                       .block = 1u << 20,
                       .seconds = 10,
                       .lat_op = OPCODE_READ,
                       .lat_gap_us = 1000,
                       .interval_ms = 200};
    if (argc < 2)
        usage();
    o->mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *k = argv[i];
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (!strcmp(k, "--host"))
            o->host = v;
        else if (!strcmp(k, "--port"))
            o->port = atoi(v);
        else if (!strcmp(k, "--mib"))
            o->mib = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--target"))
            o->target = v;
        else if (!strcmp(k, "--addr"))
            o->addr = strtoull(v, NULL, 0);
        else if (!strcmp(k, "--op"))
            o->op = opcode_of(v);
        else if (!strcmp(k, "--prio"))
            o->prio = atoi(v);
        else if (!strcmp(k, "--block"))
            o->block = parse_size(v);
        else if (!strcmp(k, "--batch"))
            o->batch = atoi(v);
        else if (!strcmp(k, "--threads"))
            o->threads = atoi(v);
        else if (!strcmp(k, "--seconds"))
            o->seconds = atof(v);
        else if (!strcmp(k, "--lat-block"))
            o->lat_block = parse_size(v);
        else if (!strcmp(k, "--lat-op"))
            o->lat_op = opcode_of(v);
        else if (!strcmp(k, "--lat-prio"))
            o->lat_prio = atoi(v);
        else if (!strcmp(k, "--lat-gap-us"))
            o->lat_gap_us = atoi(v);
        else if (!strcmp(k, "--interval-ms"))
            o->interval_ms = atoi(v);
        else if (!strcmp(k, "--after-ms"))
            o->after_ms = atoi(v);
        else if (!strcmp(k, "--set")) {
            char key[256];
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || (size_t)(eq - v) >= sizeof(key))
                usage();
            snprintf(key, sizeof(key), "%.*s", (int)(eq - v), v);
            tent_set_config(key, eq + 1);
        } else
            usage();
    }
    if (!o->host || o->threads < 1 || o->threads > 16 || o->batch < 1 ||
        o->block == 0)
        usage();
}

static tent_engine_t make_engine(const struct opts *o)
{
    tent_set_config("rpc_server_hostname", o->host);
    if (o->port) {
        char p[16];
        snprintf(p, sizeof(p), "%d", o->port);
        tent_set_config("rpc_server_port", p);
    }
    tent_engine_t e = tent_create_engine();
    if (!e)
        fprintf(stderr, "tent_rails_tool: %s\n", tent_last_error());
    return e;
}

static int run_target(const struct opts *o)
{
    tent_engine_t e = make_engine(o);
    if (!e)
        return 1;
    size_t len = (size_t)(o->mib ? o->mib : 256) << 20;
    void *buf;
    char name[256];
    if (tent_allocate_memory(e, &buf, len, "cpu") ||
        tent_register_memory(e, buf, len) ||
        tent_segment_name(e, name, sizeof(name))) {
        fprintf(stderr, "tent_rails_tool: %s\n", tent_last_error());
        return 1;
    }
    printf("segment %s %llu\n", name, (unsigned long long)(uintptr_t)buf);
    fflush(stdout);
    char x;
    while (read(0, &x, 1) > 0)
        ;
    tent_destroy_engine(e);
    return 0;
}

/* ---- the initiator ----------------------------------------------------- */

struct lat_log {
    pthread_mutex_t lock;
    double *v;
    size_t n, cap;
};

static void lat_add(struct lat_log *l, double us)
{
    pthread_mutex_lock(&l->lock);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4096;
        double *v = realloc(l->v, cap * sizeof(*v));
        if (!v) {
            pthread_mutex_unlock(&l->lock);
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = us;
    pthread_mutex_unlock(&l->lock);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(struct lat_log *l, double p)
{
    if (!l->n)
        return 0;
    qsort(l->v, l->n, sizeof(double), cmp_double);
    size_t i = (size_t)(p * (double)(l->n - 1) + 0.5);
    return l->v[i];
}

struct shared {
    const struct opts *o;
    tent_engine_t e;
    tent_segment_id_t seg;
    char *local;
    double t0, end, after;
    atomic_ullong bytes_after; /* bulk bytes completed after --after-ms */
    atomic_ullong bytes_all;
    atomic_uint failed;
    atomic_uint tasks_after;
    struct lat_log bulk_lat, lat;
};

struct bulk_arg {
    struct shared *sh;
    int idx;
};

static void report_failure(struct shared *sh, tent_batch_id_t b, size_t i)
{
    int code = 0, native = 0;
    char msg[256] = "";
    tent_task_error(sh->e, b, i, &code, &native, msg, sizeof(msg));
    fprintf(stderr, "tent_rails_tool: task FAILED: %s\n", msg);
}

static void *bulk_main(void *arg)
{
    struct bulk_arg *ba = arg;
    struct shared *sh = ba->sh;
    const struct opts *o = sh->o;
    size_t n = (size_t)o->batch;
    uint64_t span = o->block * n;
    tent_request_t *r = calloc(n, sizeof(*r));
    double *start = calloc(n, sizeof(*start));
    bool *done = calloc(n, sizeof(*done));
    if (!r || !start || !done)
        return NULL;
    while (now_s() < sh->end) {
        tent_batch_id_t b = tent_allocate_batch(sh->e, n);
        for (size_t i = 0; i < n; i++)
            r[i] = (tent_request_t){
                .opcode = o->op,
                .source = sh->local + (uint64_t)ba->idx * span + i * o->block,
                .target_id = sh->seg,
                .target_offset =
                    o->addr + (uint64_t)ba->idx * span + i * o->block,
                .length = o->block,
                .priority = o->prio};
        double t = now_s();
        if (!b || tent_submit(sh->e, b, r, n) != 0) {
            fprintf(stderr, "tent_rails_tool: submit: %s\n", tent_last_error());
            atomic_fetch_add(&sh->failed, (unsigned)n);
            if (b)
                tent_free_batch(sh->e, b);
            return NULL;
        }
        for (size_t i = 0; i < n; i++) {
            start[i] = t;
            done[i] = false;
        }
        size_t left = n;
        while (left) {
            for (size_t i = 0; i < n; i++) {
                if (done[i])
                    continue;
                tent_status_t st;
                if (tent_task_status(sh->e, b, i, &st) != 0)
                    continue;
                if (st.status == STATUS_PENDING || st.status == STATUS_WAITING)
                    continue;
                done[i] = true;
                left--;
                double now = now_s();
                if (st.status != STATUS_COMPLETED) {
                    atomic_fetch_add(&sh->failed, 1);
                    report_failure(sh, b, i);
                    continue;
                }
                atomic_fetch_add(&sh->bytes_all, o->block);
                if (now >= sh->after) {
                    atomic_fetch_add(&sh->bytes_after, o->block);
                    atomic_fetch_add(&sh->tasks_after, 1);
                    lat_add(&sh->bulk_lat, (now - start[i]) * 1e6);
                }
            }
        }
        tent_free_batch(sh->e, b);
    }
    free(r);
    free(start);
    free(done);
    return NULL;
}

static void *lat_main(void *arg)
{
    struct shared *sh = arg;
    const struct opts *o = sh->o;
    uint64_t base = (uint64_t)o->threads * o->block * (uint64_t)o->batch;
    while (now_s() < sh->end) {
        tent_request_t r = {.opcode = o->lat_op,
                            .source = sh->local + base,
                            .target_id = sh->seg,
                            .target_offset = o->addr + base,
                            .length = o->lat_block,
                            .priority = o->lat_prio};
        tent_batch_id_t b = tent_allocate_batch(sh->e, 1);
        double t = now_s();
        if (!b || tent_submit(sh->e, b, &r, 1) != 0) {
            atomic_fetch_add(&sh->failed, 1);
            return NULL;
        }
        tent_status_t st;
        do {
            tent_task_status(sh->e, b, 0, &st);
        } while (st.status == STATUS_PENDING || st.status == STATUS_WAITING);
        double now = now_s();
        if (st.status != STATUS_COMPLETED) {
            atomic_fetch_add(&sh->failed, 1);
            report_failure(sh, b, 0);
        } else if (now >= sh->after) {
            lat_add(&sh->lat, (now - t) * 1e6);
        }
        tent_free_batch(sh->e, b);
        if (o->lat_gap_us > 0)
            usleep((useconds_t)o->lat_gap_us);
    }
    return NULL;
}

static void print_tick(struct shared *sh)
{
    tent_nic_load_stat_t s[16];
    size_t n = 16;
    printf("tick t_ms=%.0f bytes=%llu failed=%u", (now_s() - sh->t0) * 1e3,
           (unsigned long long)atomic_load(&sh->bytes_all),
           atomic_load(&sh->failed));
    if (tent_get_nic_load_stats(sh->e, s, &n) == 0)
        for (size_t i = 0; i < n && i < 16; i++)
            printf(" nic=%s:%llu:%.0f", s[i].device_name,
                   (unsigned long long)s[i].inflight_bytes,
                   s[i].ewma_bandwidth_bps);
    printf("\n");
    fflush(stdout);
}

static int run_initiator(const struct opts *o)
{
    if (!o->target || !o->addr)
        usage();
    struct shared sh = {.o = o};
    pthread_mutex_init(&sh.bulk_lat.lock, NULL);
    pthread_mutex_init(&sh.lat.lock, NULL);
    sh.e = make_engine(o);
    if (!sh.e)
        return 1;
    uint64_t need = (uint64_t)o->threads * o->block * (uint64_t)o->batch +
                    (o->lat_block ? o->lat_block : 0);
    size_t len = o->mib ? (size_t)o->mib << 20 : (size_t)need;
    void *buf;
    if (len < need || tent_allocate_memory(sh.e, &buf, len, "cpu") ||
        tent_register_memory(sh.e, buf, len) ||
        tent_open_segment(sh.e, &sh.seg, o->target)) {
        fprintf(stderr, "tent_rails_tool: %s\n",
                len < need ? "--mib is too small" : tent_last_error());
        return 1;
    }
    memset(buf, 0x5a, len);
    sh.local = buf;
    sh.t0 = now_s();
    sh.end = sh.t0 + o->seconds;
    sh.after = sh.t0 + o->after_ms / 1e3;
    pthread_t th[17];
    struct bulk_arg ba[16];
    int nth = 0;
    for (int i = 0; i < o->threads; i++) {
        ba[i] = (struct bulk_arg){.sh = &sh, .idx = i};
        if (pthread_create(&th[nth], NULL, bulk_main, &ba[i]) == 0)
            nth++;
    }
    bool lat = o->lat_block > 0;
    pthread_t lt;
    if (lat && pthread_create(&lt, NULL, lat_main, &sh) != 0)
        lat = false;
    while (now_s() < sh.end) {
        usleep((useconds_t)o->interval_ms * 1000);
        print_tick(&sh);
    }
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    if (lat)
        pthread_join(lt, NULL);
    double window = o->seconds - o->after_ms / 1e3;
    printf("result gbps=%.4f tasks=%u failed=%u p50_us=%.0f p99_us=%.0f "
           "lat_n=%zu lat_p50_us=%.0f lat_p99_us=%.0f\n",
           window > 0 ? (double)atomic_load(&sh.bytes_after) / window / 1e9 : 0,
           atomic_load(&sh.tasks_after), atomic_load(&sh.failed),
           pct(&sh.bulk_lat, 0.5), pct(&sh.bulk_lat, 0.99), sh.lat.n,
           pct(&sh.lat, 0.5), pct(&sh.lat, 0.99));
    fflush(stdout);
    unsigned failed = atomic_load(&sh.failed);
    tent_destroy_engine(sh.e);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    tent_set_config("log_level", "warning");
    parse(argc, argv, &o);
    if (!strcmp(o.mode, "target"))
        return run_target(&o);
    if (!strcmp(o.mode, "run"))
        return run_initiator(&o);
    usage();
    return 2;
}
