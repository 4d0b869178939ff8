/* tent_rails_tool: the two ends of the rail tests and benchmark
 * (scripts/rails_bench.sh, tests/e2e/rails_netns_test.sh), public C API
 * only.
 *
 *   tent_rails_tool target --host H [--port P] [--mib M] [--set k=v]...
 *       an engine with M MiB registered; prints its segment and buffer
 *       address and serves until stdin closes;
 *   tent_rails_tool run --host H --target NAME --addr A [options]
 *       bulk threads (and optionally a latency stream) move data to
 *       segment NAME at address A, printing "tick" lines while they run and
 *       a "result" line at the end; exit 0 when no task failed and no
 *       checked byte differed, 1 otherwise.
 * Every option and every output field: docs/tebench.md (tent_rails_tool). */
#define _GNU_SOURCE
#include "tent/transfer_engine.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
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
    const char *lat_log;
    bool lat_spin;
    int poll_us;
    int interval_ms, after_ms;
    bool check;
    int nevents;
    struct {
        int at_ms;
        const char *cmd;
    } events[8];
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
                       .poll_us = 20,
                       .interval_ms = 200};
    if (argc < 2)
        usage();
    o->mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--check")) {
            o->check = true;
            continue;
        }
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
        else if (!strcmp(k, "--lat-log"))
            o->lat_log = v;
        else if (!strcmp(k, "--lat-spin"))
            o->lat_spin = atoi(v) != 0;
        else if (!strcmp(k, "--poll-us"))
            o->poll_us = atoi(v);
        else if (!strcmp(k, "--interval-ms"))
            o->interval_ms = atoi(v);
        else if (!strcmp(k, "--after-ms"))
            o->after_ms = atoi(v);
        else if (!strcmp(k, "--event")) {
            char *end;
            long at = strtol(v, &end, 10);
            if (*end != '=' || !end[1] || at < 0 || o->nevents == 8)
                usage();
            o->events[o->nevents].at_ms = (int)at;
            o->events[o->nevents++].cmd = end + 1;
        } else if (!strcmp(k, "--set")) {
            char key[256];
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || (size_t)(eq - v) >= sizeof(key))
                usage();
            snprintf(key, sizeof(key), "%.*s", (int)(eq - v), v);
            tent_set_config(key, eq + 1);
        } else
            usage();
    }
    if (!o->host || o->threads < (o->lat_block ? 0 : 1) || o->threads > 16 ||
        o->batch < 1 || o->block == 0)
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
    uint64_t span;      /* one bulk thread's bytes: block * batch */
    uint64_t check_off; /* where the check regions begin in local */
    double t0, end, after;
    atomic_ullong bytes_all;
    atomic_uint failed;
    atomic_uint tasks_after;
    atomic_ullong check_bytes, check_bad;
    struct lat_log bulk_lat, lat;
    pthread_mutex_t gap_lock;
    /* bulk completions after --after-ms: the first and last one's time,
     * the bytes completed after the first, the longest gap */
    double first_done, last_done, gap_max;
    uint64_t win_bytes;
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

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A pattern no other (seed, word) pair repeats. */
static void fill_pattern(char *p, uint64_t len, uint64_t seed)
{
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = mix64(seed ^ (i << 8));
        memcpy(p + i, &v, 8);
    }
    for (; i < len; i++)
        p[i] = (char)mix64(seed ^ (i << 8));
}

static void bulk_done(struct shared *sh, double now, uint64_t bytes)
{
    pthread_mutex_lock(&sh->gap_lock);
    if (!sh->first_done)
        sh->first_done = now;
    else
        sh->win_bytes += bytes;
    double from = sh->last_done > sh->after ? sh->last_done : sh->after;
    if (now - from > sh->gap_max)
        sh->gap_max = now - from;
    if (now > sh->last_done)
        sh->last_done = now;
    pthread_mutex_unlock(&sh->gap_lock);
}

/* Moves n blocks of op between local and remote (consecutive blocks) in
 * one batch and waits; ok[i] says whether block i completed.  With count,
 * the blocks are the bulk stream's: counted in the figures.  Returns the
 * number that failed, or -1 when the batch could not be submitted. */
static int move_blocks(struct shared *sh, int op, char *local, uint64_t remote,
                       size_t n, tent_request_t *r, double *start, bool *done,
                       bool *ok, bool count)
{
    const struct opts *o = sh->o;
    tent_batch_id_t b = tent_allocate_batch(sh->e, n);
    for (size_t i = 0; i < n; i++)
        r[i] = (tent_request_t){.opcode = op,
                                .source = local + i * o->block,
                                .target_id = sh->seg,
                                .target_offset = remote + i * o->block,
                                .length = o->block,
                                .priority = o->prio};
    double t = now_s();
    if (!b || tent_submit(sh->e, b, r, n) != 0) {
        fprintf(stderr, "tent_rails_tool: submit: %s\n", tent_last_error());
        atomic_fetch_add(&sh->failed, (unsigned)n);
        if (b)
            tent_free_batch(sh->e, b);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        start[i] = t;
        done[i] = false;
        ok[i] = false;
    }
    size_t left = n;
    int failed = 0;
    while (left) {
        size_t before = left;
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
                failed++;
                continue;
            }
            ok[i] = true;
            if (!count)
                continue;
            atomic_fetch_add(&sh->bytes_all, o->block);
            if (now >= sh->after) {
                atomic_fetch_add(&sh->tasks_after, 1);
                lat_add(&sh->bulk_lat, (now - start[i]) * 1e6);
                bulk_done(sh, now, o->block);
            }
        }
        /* Nothing finished in this pass: sleep --poll-us so that polling
         * does not take the CPU the engine's threads need. */
        if (left == before && left && o->poll_us > 0)
            usleep((useconds_t)o->poll_us);
    }
    tent_free_batch(sh->e, b);
    return failed;
}

/* Compares len bytes that arrived from remote with what was expected. */
static void check_region(struct shared *sh, const char *got, const char *want,
                         uint64_t len, uint64_t remote)
{
    uint64_t bad = 0, first = 0;
    if (memcmp(got, want, len) != 0)
        for (uint64_t k = 0; k < len; k++)
            if (got[k] != want[k] && !bad++)
                first = k;
    atomic_fetch_add(&sh->check_bytes, len);
    if (bad) {
        atomic_fetch_add(&sh->check_bad, bad);
        fprintf(stderr,
                "tent_rails_tool: check: %llu byte(s) of [%#llx, +%llu) "
                "differ, the first at +%llu\n",
                (unsigned long long)bad, (unsigned long long)remote,
                (unsigned long long)len, (unsigned long long)first);
    }
}

/* The same for the blocks of a batch that completed (ok). */
static void check_blocks(struct shared *sh, const char *got, const char *want,
                         size_t n, const bool *ok, uint64_t remote)
{
    uint64_t block = sh->o->block;
    for (size_t i = 0; i < n; i++)
        if (ok[i])
            check_region(sh, got + i * block, want + i * block, block,
                         remote + i * block);
}

static void *bulk_main(void *arg)
{
    struct bulk_arg *ba = arg;
    struct shared *sh = ba->sh;
    const struct opts *o = sh->o;
    size_t n = (size_t)o->batch;
    tent_request_t *r = calloc(n, sizeof(*r));
    double *start = calloc(n, sizeof(*start));
    bool *done = calloc(n, sizeof(*done));
    bool *ok = calloc(n, sizeof(*ok));
    bool *wrote = calloc(n, sizeof(*wrote));
    char *mine = sh->local + (uint64_t)ba->idx * sh->span;
    char *ref = sh->local + sh->check_off + (uint64_t)ba->idx * sh->span;
    uint64_t remote = sh->o->addr + (uint64_t)ba->idx * sh->span;
    uint64_t seed = (uint64_t)(ba->idx + 1) << 40;
    if (!r || !start || !done || !ok || !wrote)
        goto out;
    if (o->check && o->op == OPCODE_READ) {
        /* the pattern every read must find */
        fill_pattern(ref, sh->span, seed);
        if (move_blocks(sh, OPCODE_WRITE, ref, remote, n, r, start, done, ok,
                        false) != 0)
            goto out;
    }
    for (uint64_t round = 1; now_s() < sh->end; round++) {
        if (o->check && o->op == OPCODE_WRITE)
            fill_pattern(mine, sh->span, seed | round);
        else if (o->check)
            memset(mine, 0xa5, sh->span);
        if (move_blocks(sh, o->op, mine, remote, n, r, start, done, ok, true) <
            0)
            goto out;
        if (!o->check)
            continue;
        if (o->op == OPCODE_WRITE) {
            /* what landed, read back (the blocks written) */
            memcpy(wrote, ok, n * sizeof(*ok));
            memset(ref, 0xa5, sh->span);
            if (move_blocks(sh, OPCODE_READ, ref, remote, n, r, start, done, ok,
                            false) < 0)
                goto out;
            for (size_t i = 0; i < n; i++)
                ok[i] = ok[i] && wrote[i];
            check_blocks(sh, ref, mine, n, ok, remote);
        } else {
            check_blocks(sh, mine, ref, n, ok, remote);
        }
    }
out:
    free(r);
    free(start);
    free(done);
    free(ok);
    free(wrote);
    return NULL;
}

/* One request of the latency stream and its wait: 1 when it completed, 0
 * when it failed, -1 when it could not be submitted. */
static int lat_one(struct shared *sh, int op, char *local, uint64_t remote,
                   double *us)
{
    const struct opts *o = sh->o;
    tent_request_t r = {.opcode = op,
                        .source = local,
                        .target_id = sh->seg,
                        .target_offset = remote,
                        .length = o->lat_block,
                        .priority = o->lat_prio};
    tent_batch_id_t b = tent_allocate_batch(sh->e, 1);
    double t = now_s();
    if (!b || tent_submit(sh->e, b, &r, 1) != 0) {
        atomic_fetch_add(&sh->failed, 1);
        if (b)
            tent_free_batch(sh->e, b);
        return -1;
    }
    tent_status_t st;
    for (;;) {
        tent_task_status(sh->e, b, 0, &st);
        if (st.status != STATUS_PENDING && st.status != STATUS_WAITING)
            break;
        /* On a host with few cores a spinning poller holds the CPU the
         * engine's woken threads need, and the figure measures the
         * scheduler: yield unless --lat-spin 1 asks to spin. */
        if (!o->lat_spin)
            sched_yield();
    }
    *us = (now_s() - t) * 1e6;
    bool ok = st.status == STATUS_COMPLETED;
    if (!ok) {
        atomic_fetch_add(&sh->failed, 1);
        report_failure(sh, b, 0);
    }
    tent_free_batch(sh->e, b);
    return ok ? 1 : 0;
}

static void *lat_main(void *arg)
{
    struct shared *sh = arg;
    const struct opts *o = sh->o;
    uint64_t base = (uint64_t)o->threads * sh->span;
    char *local = sh->local + base;
    uint64_t remote = o->addr + base;
    bool check = o->check && o->lat_op == OPCODE_READ;
    char *want = check ? malloc(o->lat_block) : NULL;
    double us;
    if (check) {
        if (!want)
            return NULL;
        fill_pattern(local, o->lat_block, 0x1a7ull << 40);
        memcpy(want, local, o->lat_block);
        if (lat_one(sh, OPCODE_WRITE, local, remote, &us) != 1) {
            free(want);
            return NULL;
        }
    }
    FILE *log = o->lat_log ? fopen(o->lat_log, "w") : NULL;
    if (o->lat_log && !log)
        fprintf(stderr, "tent_rails_tool: --lat-log %s: %s\n", o->lat_log,
                strerror(errno));
    while (now_s() < sh->end) {
        if (check)
            memset(local, 0xa5, o->lat_block);
        double at = now_s();
        int rc = lat_one(sh, o->lat_op, local, remote, &us);
        if (rc < 0)
            break;
        if (rc && log)
            fprintf(log, "%.3f %.0f\n", (at - sh->t0) * 1e3, us);
        if (rc && now_s() >= sh->after)
            lat_add(&sh->lat, us);
        if (rc && check)
            check_region(sh, local, want, o->lat_block, remote);
        if (o->lat_gap_us > 0)
            usleep((useconds_t)o->lat_gap_us);
    }
    if (log)
        fclose(log);
    free(want);
    return NULL;
}

/* An interface's kernel counter (statistics/<what>), or -1. */
static long long link_counter(const char *dev, const char *what)
{
    char path[192];
    if (!dev[0] || strchr(dev, '/'))
        return -1;
    int n = snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/%s", dev,
                     what);
    if (n < 0 || (size_t)n >= sizeof(path))
        return -1; /* no interface has such a name */
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

static void print_tick(struct shared *sh)
{
    tent_nic_load_stat_t s[16];
    size_t n = 16;
    printf("tick t_ms=%.0f bytes=%llu failed=%u", (now_s() - sh->t0) * 1e3,
           (unsigned long long)atomic_load(&sh->bytes_all),
           atomic_load(&sh->failed));
    if (tent_get_nic_load_stats(sh->e, s, &n) != 0)
        n = 0;
    for (size_t i = 0; i < n && i < 16; i++)
        printf(" nic=%s:%llu:%.0f", s[i].device_name,
               (unsigned long long)s[i].inflight_bytes,
               s[i].ewma_bandwidth_bps);
    for (size_t i = 0; i < n && i < 16; i++) {
        long long tx = link_counter(s[i].device_name, "tx_bytes");
        long long rx = link_counter(s[i].device_name, "rx_bytes");
        if (tx >= 0 && rx >= 0)
            printf(" link=%s:%lld:%lld", s[i].device_name, tx, rx);
    }
    printf("\n");
    fflush(stdout);
}

/* Sleeps until t (now_s() time) or returns at once when it has passed. */
static void sleep_until(double t)
{
    double d = t - now_s();
    if (d > 0)
        usleep((useconds_t)(d * 1e6));
}

/* Ticks and events until the end of the run. */
static void tick_loop(struct shared *sh)
{
    const struct opts *o = sh->o;
    bool ran[8] = {false};
    double next = sh->t0 + o->interval_ms / 1e3;
    while (now_s() < sh->end) {
        double wake = next;
        for (int i = 0; i < o->nevents; i++)
            if (!ran[i] && sh->t0 + o->events[i].at_ms / 1e3 < wake)
                wake = sh->t0 + o->events[i].at_ms / 1e3;
        sleep_until(wake < sh->end ? wake : sh->end);
        for (int i = 0; i < o->nevents; i++) {
            if (ran[i] || now_s() < sh->t0 + o->events[i].at_ms / 1e3)
                continue;
            ran[i] = true;
            double at = now_s();
            fflush(stdout);
            int rc = system(o->events[i].cmd);
            printf("event t_ms=%.0f end_ms=%.0f rc=%d cmd=%s\n",
                   (at - sh->t0) * 1e3, (now_s() - sh->t0) * 1e3, rc,
                   o->events[i].cmd);
            fflush(stdout);
        }
        if (now_s() >= next) {
            print_tick(sh);
            next += o->interval_ms / 1e3;
            if (next < now_s())
                next = now_s() + o->interval_ms / 1e3;
        }
    }
}

static int run_initiator(const struct opts *o)
{
    if (!o->target || !o->addr)
        usage();
    struct shared sh = {.o = o};
    pthread_mutex_init(&sh.bulk_lat.lock, NULL);
    pthread_mutex_init(&sh.lat.lock, NULL);
    pthread_mutex_init(&sh.gap_lock, NULL);
    sh.span = o->block * (uint64_t)o->batch;
    sh.check_off = (uint64_t)o->threads * sh.span + o->lat_block;
    uint64_t need =
        sh.check_off + (o->check ? (uint64_t)o->threads * sh.span : 0);
    sh.e = make_engine(o);
    if (!sh.e)
        return 1;
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
    tick_loop(&sh);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    if (lat)
        pthread_join(lt, NULL);
    /* a stall at the end counts as a gap too */
    if (nth > 0 &&
        sh.end - (sh.last_done > sh.after ? sh.last_done : sh.after) >
            sh.gap_max)
        sh.gap_max =
            sh.end - (sh.last_done > sh.after ? sh.last_done : sh.after);
    double window = sh.last_done - sh.first_done;
    printf("result gbps=%.4f tasks=%u failed=%u p50_us=%.0f p99_us=%.0f "
           "gap_max_ms=%.0f lat_n=%zu lat_p50_us=%.0f lat_p99_us=%.0f "
           "check_bytes=%llu check_bad=%llu\n",
           window > 0 ? (double)sh.win_bytes / window / 1e9 : 0,
           atomic_load(&sh.tasks_after), atomic_load(&sh.failed),
           pct(&sh.bulk_lat, 0.5), pct(&sh.bulk_lat, 0.99), sh.gap_max * 1e3,
           sh.lat.n, pct(&sh.lat, 0.5), pct(&sh.lat, 0.99),
           (unsigned long long)atomic_load(&sh.check_bytes),
           (unsigned long long)atomic_load(&sh.check_bad));
    fflush(stdout);
    unsigned failed = atomic_load(&sh.failed);
    unsigned long long bad = atomic_load(&sh.check_bad);
    tent_destroy_engine(sh.e);
    free(sh.bulk_lat.v);
    free(sh.lat.v);
    pthread_mutex_destroy(&sh.bulk_lat.lock);
    pthread_mutex_destroy(&sh.lat.lock);
    pthread_mutex_destroy(&sh.gap_lock);
    return failed || bad ? 1 : 0;
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
