/* tebench cases: worker threads, batches, statistics and the consistency
 * check.  Only the public TENT C API is used. */
#include "bench_batch.h"
#include "tebench.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* A batch that has not finished after this long is reported as stuck. */
#define TB_BATCH_DEADLINE_S 30.0

double tb_now(void)
{
    return bench_now_s();
}

/* ---- one batch ---------------------------------------------------------- */

/* When the engine chooses the transport (--xport_type=auto or a hint that
 * may fail over), the Transport column shows what it actually used, as
 * tent_task_transport() reports it: one name, or "mixed(a,b)". */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static bool seen_track;
static char seen_name[48];

static void note_transport(tent_engine_t e, tent_batch_id_t bid)
{
    char name[16];
    if (!seen_track || tent_task_transport(e, bid, 0, name, sizeof(name)) ||
        !name[0])
        return;
    pthread_mutex_lock(&seen_lock);
    if (!seen_name[0])
        snprintf(seen_name, sizeof(seen_name), "%s", name);
    else if (strcmp(seen_name, name) != 0 && strncmp(seen_name, "mixed", 5)) {
        char first[16];
        snprintf(first, sizeof(first), "%s", seen_name);
        snprintf(seen_name, sizeof(seen_name), "mixed(%s,%s)", first, name);
    }
    pthread_mutex_unlock(&seen_lock);
}

/* One batch through the shared loop: a stuck batch is reported after
 * TB_BATCH_DEADLINE_S, the status the engine fills in is what counts. */
static int run_batch(tent_engine_t e, tent_request_t *reqs, size_t n,
                     double *tx_us, char *msg, size_t msglen)
{
    static const struct bench_batch_wait w = {
        .deadline_s = TB_BATCH_DEADLINE_S,
        .spins = 16,
        .completed = note_transport,
    };
    return bench_batch_run(e, reqs, n, &w, tx_us, msg, msglen);
}

/* ---- workers ------------------------------------------------------------ */

enum { PH_WARMUP, PH_MEASURE, PH_STOP };

struct case_state {
    struct tb_ctx *c;
    int case_idx;
    uint64_t threads, block, batch;
    atomic_int phase;
    double t_measure;
};

struct worker {
    struct case_state *cs;
    pthread_t tid;
    int idx;
    struct tb_target *tgt;
    uint64_t slice_off; /* offset of this thread's slice in the range */
    uint64_t nblocks;   /* blocks in the slice */
    char *lsrc, *lver;  /* local slice and its read-back scratch */
    uint64_t lslots;    /* blocks in the local slice */
    uint32_t *gen;      /* per block: generation last written */
    uint64_t next_gen;
    uint64_t seeded; /* blocks [0, seeded) hold generation 0 (check mode) */
    uint64_t rng;
    tent_request_t *reqs;
    uint64_t *blk; /* per request: block index in the slice */

    double *tx;
    size_t ntx, captx;
    uint64_t ops, bytes;
    double inst_sum, last_done;

    int rc; /* TB_EXIT_* */
    char msg[1024];
};

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void stop_all(struct case_state *cs)
{
    atomic_store(&cs->phase, PH_STOP);
}

static void report_mismatch(struct worker *w, const char *what,
                            uint64_t range_off, const uint8_t *got,
                            uint64_t key, uint64_t avail)
{
    struct case_state *cs = w->cs;
    uint64_t tgt_off = w->tgt->base - w->tgt->buf_base + range_off;
    uint8_t exp[8];
    uint64_t show = avail < 8 ? avail : 8;
    tb_pattern_fill(exp, show, key, range_off);
    char where[160];
    if (cs->case_idx < 0)
        snprintf(where, sizeof(where), "%s", what);
    else
        snprintf(where, sizeof(where),
                 "case %d (threads=%llu block=%llu batch=%llu op=%s, %s)",
                 cs->case_idx + 1, (unsigned long long)cs->threads,
                 (unsigned long long)cs->block, (unsigned long long)cs->batch,
                 tb_op_name(cs->c->o->op), what);
    int n = snprintf(
        w->msg, sizeof(w->msg),
        "consistency mismatch: %s, target '%s' buffer offset %llu (%#llx): "
        "expected 0x%02x, got 0x%02x; expected bytes",
        where, w->tgt->name, (unsigned long long)tgt_off,
        (unsigned long long)tgt_off, exp[0], got[0]);
    for (uint64_t i = 0; i < show && n > 0 && (size_t)n < sizeof(w->msg); i++)
        n += snprintf(w->msg + n, sizeof(w->msg) - (size_t)n, " %02x", exp[i]);
    if (n > 0 && (size_t)n < sizeof(w->msg))
        n += snprintf(w->msg + n, sizeof(w->msg) - (size_t)n, ", got bytes");
    for (uint64_t i = 0; i < show && n > 0 && (size_t)n < sizeof(w->msg); i++)
        n += snprintf(w->msg + n, sizeof(w->msg) - (size_t)n, " %02x", got[i]);
    w->rc = TB_EXIT_MISMATCH;
}

/* Checks len bytes read from range offset off against key. */
static bool verify(struct worker *w, const char *what, const char *buf,
                   uint64_t len, uint64_t key, uint64_t off)
{
    uint64_t bad = tb_pattern_check(buf, len, key, off, NULL);
    if (bad == len)
        return true;
    report_mismatch(w, what, off + bad, (const uint8_t *)buf + bad, key,
                    len - bad);
    return false;
}

static uint64_t block_key(struct worker *w, uint64_t gen)
{
    const struct tb_opts *o = w->cs->c->o;
    /* generation 0 is the run's seed pattern (the seed pass wrote it) */
    bool fixed =
        gen == 0 || o->op == TB_OP_WRITE_SEED || o->op == TB_OP_READ_VERIFY;
    return tb_pattern_key(o->seed, w->cs->case_idx, gen, fixed);
}

static int fail_worker(struct worker *w, const char *ctx, const char *msg)
{
    char tmp[sizeof(w->msg)];
    snprintf(tmp, sizeof(tmp), "%s", msg);
    snprintf(w->msg, sizeof(w->msg), "case %d, thread %d, %s: %s",
             w->cs->case_idx + 1, w->idx, ctx, tmp);
    w->rc = TB_EXIT_ERROR;
    return -1;
}

/* One request covering [off, off+len) of the range. */
static tent_request_t make_req(struct worker *w, int opcode, void *local,
                               uint64_t range_off, uint64_t len)
{
    tent_request_t r = {0};
    r.opcode = opcode;
    r.source = local;
    r.target_id = w->tgt->handle;
    r.target_offset = w->tgt->base + range_off;
    r.length = len;
    r.transport_hint = w->cs->c->hint;
    return r;
}

/* Check mode, read/mix: gives blocks [w->seeded, upto) of the slice the
 * seed pattern (generation 0), written and read back, ahead of the first
 * read of them in this case.  Seeding lazily, in chunks of about 4 MiB,
 * keeps a large buffer from costing a full pass per case. */
static int seed_ahead(struct worker *w, uint64_t upto)
{
    uint64_t block = w->cs->block, key = block_key(w, 0);
    uint64_t chunk = (4ull << 20) / block;
    if (chunk < w->cs->batch)
        chunk = w->cs->batch;
    if (chunk > w->lslots)
        chunk = w->lslots;
    char err[768];
    double tx;
    while (w->seeded < upto) {
        uint64_t n =
            w->nblocks - w->seeded < chunk ? w->nblocks - w->seeded : chunk;
        uint64_t off = w->slice_off + w->seeded * block, len = n * block;
        tb_pattern_fill(w->lsrc, len, key, off);
        tent_request_t r = make_req(w, OPCODE_WRITE, w->lsrc, off, len);
        if (run_batch(w->cs->c->engine, &r, 1, &tx, err, sizeof(err)))
            return fail_worker(w, "seeding the pattern", err);
        memset(w->lver, 0, len);
        r = make_req(w, OPCODE_READ, w->lver, off, len);
        if (run_batch(w->cs->c->engine, &r, 1, &tx, err, sizeof(err)))
            return fail_worker(w, "seed read-back", err);
        if (!verify(w, "seed read-back", w->lver, len, key, off))
            return -1;
        for (uint64_t k = w->seeded; k < w->seeded + n; k++)
            w->gen[k] = 0;
        w->seeded += n;
    }
    return 0;
}

static void record(struct worker *w, double tx_us, uint64_t bytes)
{
    if (w->ntx == w->captx) {
        size_t cap = w->captx ? w->captx * 2 : 4096;
        double *p = realloc(w->tx, cap * sizeof(*p));
        if (!p)
            return; /* percentiles from the samples kept so far */
        w->tx = p;
        w->captx = cap;
    }
    w->tx[w->ntx++] = tx_us;
    w->ops++;
    w->bytes += bytes;
    if (tx_us > 0)
        w->inst_sum += (double)bytes / (tx_us * 1e3); /* GB/s */
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct case_state *cs = w->cs;
    struct tb_ctx *c = cs->c;
    const struct tb_opts *o = c->o;
    uint64_t block = cs->block, batch = cs->batch;
    uint64_t cursor = 0, liter = 0, lgroups = w->lslots / batch;
    bool measuring = false;
    bool need_seed =
        c->verify_reads && (o->op == TB_OP_READ || o->op == TB_OP_MIX);
    char err[768];
    const int fixed_op = o->op == TB_OP_WRITE || o->op == TB_OP_WRITE_SEED
                             ? OPCODE_WRITE
                             : OPCODE_READ;
    const bool fill_writes = c->readback_writes || o->op == TB_OP_WRITE_SEED;
    for (uint64_t i = 0; i < batch; i++)
        w->reqs[i] = make_req(w, fixed_op, w->lsrc, 0, block);

    for (;;) {
        int ph = atomic_load(&cs->phase);
        if (ph == PH_STOP)
            break;
        if (ph == PH_MEASURE && !measuring) {
            measuring = true;
            w->ntx = 0;
            w->ops = w->bytes = 0;
            w->inst_sum = 0;
        }
        if (o->request_interval_us) {
            struct timespec ts = {
                .tv_sec = (time_t)(o->request_interval_us / 1000000),
                .tv_nsec = (long)(o->request_interval_us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
        if (need_seed && w->seeded < w->nblocks) {
            uint64_t upto = cursor + batch;
            if (seed_ahead(w, upto < w->nblocks ? upto : w->nblocks)) {
                stop_all(cs);
                break;
            }
        }
        /* generations are 32-bit per block; 0 is the seed pattern */
        uint32_t gen = (uint32_t)++w->next_gen;
        if (gen == 0)
            gen = (uint32_t)++w->next_gen;
        uint64_t wkey = block_key(w, gen);
        char *lbase = w->lsrc + (liter % lgroups) * batch * block;
        bool any_write = false;
        /* Only the opcode, source and target offset differ between requests
         * and rounds (the rest is set once above): this loop is tebench's
         * cost, not the engine's, so it stays small.  k = (cursor + i) %
         * nblocks, without a division per request. */
        uint64_t toff = w->tgt->base + w->slice_off + cursor * block;
        const uint64_t tbase = w->tgt->base + w->slice_off;
        if (o->op == TB_OP_MIX || fill_writes) {
            /* opcodes and patterns first (a read-back rewrote the opcodes) */
            for (uint64_t i = 0, k = cursor; i < batch;
                 i++, k = k + 1 == w->nblocks ? 0 : k + 1) {
                int opc = fixed_op;
                if (o->op == TB_OP_MIX)
                    opc = (xorshift(&w->rng) >> 17) & 1 ? OPCODE_WRITE
                                                        : OPCODE_READ;
                if (opc == OPCODE_WRITE && fill_writes)
                    tb_pattern_fill(lbase + i * block, block, wkey,
                                    w->slice_off + k * block);
                any_write |= opc == OPCODE_WRITE;
                w->reqs[i].opcode = opc;
            }
        } else {
            any_write = fixed_op == OPCODE_WRITE;
        }
        for (uint64_t i = 0, k = cursor; i < batch; i++) {
            w->reqs[i].source = lbase + i * block;
            w->reqs[i].target_offset = toff;
            w->blk[i] = k;
            toff += block;
            if (++k == w->nblocks) {
                k = 0;
                toff = tbase;
            }
        }
        double tx;
        if (run_batch(c->engine, w->reqs, batch, &tx, err, sizeof(err))) {
            fail_worker(w, "transfer", err);
            stop_all(cs);
            break;
        }
        if (measuring) {
            record(w, tx, batch * block);
            w->last_done = tb_now();
        }
        if (c->verify_reads || c->readback_writes) {
            bool ok = true;
            for (uint64_t i = 0; i < batch && ok; i++) {
                uint64_t k = w->blk[i], off = w->slice_off + k * block;
                if (w->reqs[i].opcode == OPCODE_READ && c->verify_reads)
                    ok = verify(w, "read", w->reqs[i].source, block,
                                block_key(w, w->gen[k]), off);
            }
            if (ok && any_write && c->readback_writes) {
                /* read the written blocks back into the scratch slots */
                size_t n = 0;
                for (uint64_t i = 0; i < batch; i++) {
                    if (w->reqs[i].opcode != OPCODE_WRITE)
                        continue;
                    tent_request_t rb = w->reqs[i];
                    rb.opcode = OPCODE_READ;
                    rb.source = w->lver + ((char *)w->reqs[i].source - w->lsrc);
                    memset(rb.source, 0, block);
                    w->blk[n] = w->blk[i];
                    w->reqs[n++] = rb;
                }
                if (run_batch(c->engine, w->reqs, n, &tx, err, sizeof(err))) {
                    fail_worker(w, "write read-back", err);
                    stop_all(cs);
                    break;
                }
                for (size_t i = 0; i < n && ok; i++) {
                    uint64_t k = w->blk[i];
                    ok = verify(w, "write read-back", w->reqs[i].source, block,
                                wkey, w->slice_off + k * block);
                    w->gen[k] = gen;
                }
            }
            if (!ok) {
                stop_all(cs);
                break;
            }
        }
        cursor = (cursor + batch) % w->nblocks;
        liter++;
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(const double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)ceil(p * (double)n);
    if (i == 0)
        i = 1;
    return v[i - 1 < n ? i - 1 : n - 1];
}

static double case_warmup(const struct tb_opts *o)
{
    if (o->warmup >= 0)
        return o->warmup;
    double w = o->duration / 5;
    return w > 1 ? 1 : w;
}

/* Sleeps up to seconds, returning early once the case stopped; on long
 * cases says every 10 s how far it is. */
static void wait_phase(struct case_state *cs, double seconds)
{
    double start = tb_now(), end = start + seconds, tick = start + 10;
    while (atomic_load(&cs->phase) != PH_STOP) {
        double now = tb_now(), left = end - now;
        if (left <= 0)
            return;
        if (now >= tick) {
            fprintf(stderr, "tebench: case %d: %.0f of %.0f s\n",
                    cs->case_idx + 1, now - start, seconds);
            tick += 10;
        }
        if (left > 0.01)
            left = 0.01;
        struct timespec ts = {0, (long)(left * 1e9)};
        nanosleep(&ts, NULL);
    }
}

double tb_cpu_seconds(int pid)
{
    if (pid <= 0) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru))
            return -1;
        return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    }
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    /* after the command's ')': state is field 3, utime 14, stime 15 */
    const char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (!p ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
               &ut, &st) != 2)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? (double)(ut + st) / (double)hz : -1;
}

int tb_run_case(struct tb_ctx *c, int case_idx, uint64_t threads,
                uint64_t block, uint64_t batch, struct tb_result *res)
{
    const struct tb_opts *o = c->o;
    memset(res, 0, sizeof(*res));
    res->threads = threads;
    res->block = block;
    res->batch = batch;
    res->transport = c->transport;
    pthread_mutex_lock(&seen_lock);
    seen_track = strcmp(c->transport, "auto") == 0 ||
                 strncmp(c->transport, "hint:", 5) == 0;
    seen_name[0] = '\0';
    pthread_mutex_unlock(&seen_lock);

    struct case_state cs = {.c = c,
                            .case_idx = case_idx,
                            .threads = threads,
                            .block = block,
                            .batch = batch};
    atomic_init(&cs.phase, PH_WARMUP);
    struct worker *ws = calloc(threads, sizeof(*ws));
    if (!ws) {
        fprintf(stderr, "tebench: out of memory for %llu workers\n",
                (unsigned long long)threads);
        return TB_EXIT_ERROR;
    }
    int ret = TB_EXIT_OK;
    uint64_t nt = (uint64_t)c->ntargets;
    uint64_t lslice = c->local_len / threads;
    for (uint64_t t = 0; t < threads; t++) {
        struct worker *w = &ws[t];
        w->cs = &cs;
        w->idx = (int)t;
        w->rng = tb_splitmix64(o->seed + t + 1) | 1;
        w->tgt = &c->targets[t % nt];
        uint64_t on_tgt = threads / nt + ((t % nt) < threads % nt);
        uint64_t slice = w->tgt->len / on_tgt;
        w->slice_off = (t / nt) * slice;
        w->nblocks = slice / block;
        w->lsrc = c->local + t * lslice;
        w->lver = c->verify ? c->verify + t * lslice : NULL;
        w->lslots = lslice / block;
        if (w->nblocks < batch || w->lslots < batch) {
            fprintf(stderr,
                    "tebench: case %d skipped: %llu thread(s) x batch %llu x "
                    "block %llu B does not fit (local buffer %llu B, target "
                    "range %llu B); raise --total_buffer_size or "
                    "--target_range_size\n",
                    case_idx + 1, (unsigned long long)threads,
                    (unsigned long long)batch, (unsigned long long)block,
                    (unsigned long long)c->local_len,
                    (unsigned long long)w->tgt->len);
            res->skipped = true;
            goto out;
        }
        w->reqs = calloc(batch, sizeof(*w->reqs));
        w->blk = calloc(batch, sizeof(*w->blk));
        w->gen = calloc(w->nblocks, sizeof(*w->gen));
        if (!w->reqs || !w->blk || !w->gen) {
            fprintf(stderr, "tebench: out of memory for case %d\n",
                    case_idx + 1);
            ret = TB_EXIT_ERROR;
            goto out;
        }
    }

    uint64_t started = 0;
    for (; started < threads; started++)
        if (pthread_create(&ws[started].tid, NULL, worker_main, &ws[started]) !=
            0) {
            fprintf(stderr, "tebench: pthread_create failed for thread %llu\n",
                    (unsigned long long)started);
            stop_all(&cs);
            ret = TB_EXIT_ERROR;
            break;
        }
    wait_phase(&cs, case_warmup(o));
    double cpu_i0 = tb_cpu_seconds(0);
    double cpu_t0 = o->target_pid > 0 ? tb_cpu_seconds(o->target_pid) : -1;
    cs.t_measure = tb_now();
    int expect = PH_WARMUP;
    atomic_compare_exchange_strong(&cs.phase, &expect, PH_MEASURE);
    wait_phase(&cs, o->duration);
    double t_stop = tb_now();
    double cpu_i1 = tb_cpu_seconds(0);
    double cpu_t1 = o->target_pid > 0 ? tb_cpu_seconds(o->target_pid) : -1;
    res->cpu_init_s = cpu_i0 >= 0 && cpu_i1 >= 0 ? cpu_i1 - cpu_i0 : -1;
    res->cpu_tgt_s = cpu_t0 >= 0 && cpu_t1 >= 0 ? cpu_t1 - cpu_t0 : -1;
    stop_all(&cs);
    for (uint64_t t = 0; t < started; t++)
        pthread_join(ws[t].tid, NULL);
    pthread_mutex_lock(&seen_lock);
    if (seen_track && seen_name[0]) {
        snprintf(res->transport_used, sizeof(res->transport_used), "%s",
                 seen_name);
        res->transport = res->transport_used;
    }
    pthread_mutex_unlock(&seen_lock);

    for (uint64_t t = 0; t < threads; t++)
        if (ws[t].rc != TB_EXIT_OK) {
            fprintf(stderr, "tebench: %s\n", ws[t].msg);
            if (ret == TB_EXIT_OK || ws[t].rc == TB_EXIT_MISMATCH)
                ret = ws[t].rc;
        }
    if (ret != TB_EXIT_OK)
        goto out;

    size_t nsamples = 0;
    double end = t_stop, inst = 0;
    for (uint64_t t = 0; t < threads; t++) {
        res->ops += ws[t].ops;
        res->bytes += ws[t].bytes;
        inst += ws[t].inst_sum;
        nsamples += ws[t].ntx;
        if (ws[t].last_done > end)
            end = ws[t].last_done;
    }
    res->seconds = end - cs.t_measure;
    double *all = malloc((nsamples ? nsamples : 1) * sizeof(*all));
    if (!all) {
        fprintf(stderr, "tebench: out of memory for %zu samples\n", nsamples);
        ret = TB_EXIT_ERROR;
        goto out;
    }
    size_t k = 0;
    double sum = 0;
    for (uint64_t t = 0; t < threads; t++)
        for (size_t i = 0; i < ws[t].ntx; i++) {
            all[k++] = ws[t].tx[i];
            sum += ws[t].tx[i];
        }
    qsort(all, k, sizeof(*all), cmp_double);
    if (res->seconds > 0)
        res->bw_gbs = (double)res->bytes / res->seconds / 1e9;
    if (res->ops) {
        res->avg_lat_us =
            res->seconds * 1e6 * (double)threads / (double)res->ops;
        res->inst_gbs = inst / (double)res->ops;
    }
    if (k) {
        res->avg_tx_us = sum / (double)k;
        res->p99_tx_us = percentile(all, k, 0.99);
        res->p999_tx_us = percentile(all, k, 0.999);
    }
    free(all);
out:
    for (uint64_t t = 0; t < threads; t++) {
        free(ws[t].reqs);
        free(ws[t].blk);
        free(ws[t].gen);
        free(ws[t].tx);
    }
    free(ws);
    return ret;
}

/* write_seed / read_verify: one pass over every target range with the fixed
 * pattern, in chunks of the local buffer. */
int tb_full_pass(struct tb_ctx *c, bool write)
{
    const struct tb_opts *o = c->o;
    uint64_t key = tb_pattern_key(o->seed, 0, 0, true);
    uint64_t chunk = c->local_len < (16ull << 20) ? c->local_len : 16ull << 20;
    struct case_state cs = {.c = c, .case_idx = -1};
    struct worker w = {.cs = &cs};
    char err[768];
    for (int t = 0; t < c->ntargets; t++) {
        w.tgt = &c->targets[t];
        for (uint64_t done = 0; done < w.tgt->len; done += chunk) {
            uint64_t len =
                w.tgt->len - done < chunk ? w.tgt->len - done : chunk;
            double tx;
            if (write)
                tb_pattern_fill(c->local, len, key, done);
            else
                memset(c->local, 0, len);
            tent_request_t r = make_req(&w, write ? OPCODE_WRITE : OPCODE_READ,
                                        c->local, done, len);
            if (run_batch(c->engine, &r, 1, &tx, err, sizeof(err))) {
                fprintf(stderr, "tebench: %s pass: %s\n",
                        write ? "write_seed" : "read_verify", err);
                return TB_EXIT_ERROR;
            }
            if (write && !c->readback_writes)
                continue;
            if (write) {
                memset(c->verify, 0, len);
                r = make_req(&w, OPCODE_READ, c->verify, done, len);
                if (run_batch(c->engine, &r, 1, &tx, err, sizeof(err))) {
                    fprintf(stderr, "tebench: write_seed read-back: %s\n", err);
                    return TB_EXIT_ERROR;
                }
            }
            if (!verify(&w, write ? "write_seed read-back" : "read_verify pass",
                        write ? c->verify : c->local, len, key, done)) {
                fprintf(stderr, "tebench: %s\n", w.msg);
                return TB_EXIT_MISMATCH;
            }
        }
        fprintf(stderr, "tebench: %s pass over '%s' (%llu bytes) done\n",
                write ? "write_seed" : "read_verify", w.tgt->name,
                (unsigned long long)w.tgt->len);
    }
    return TB_EXIT_OK;
}
