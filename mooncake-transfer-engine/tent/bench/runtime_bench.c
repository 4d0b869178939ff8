/* tent_runtime_bench: the runtime's own cost per request.  A cycle
 * allocates a batch, submits N requests, polls every task until it is
 * complete and frees the batch, through the public API, with an in-bench
 * transport that completes each request at submit and copies nothing:
 * what remains is validation, selection, task records, dispatch, status
 * and the batch lifecycle.  Two engines, metrics on and off, run in
 * alternating rounds, so that the "overhead" column is what the metrics
 * cost.  Then the same figure for 8-byte writes through tcp and shm to a
 * target in a second process, so that the runtime's headline cannot hide
 * transport cost.
 *
 * Usage: tent_runtime_bench [seconds per size and engine (default 1)]
 *        tent_runtime_bench --cycles N BATCH
 * The second form runs exactly N cycles of BATCH requests on the metrics-on
 * engine and nothing else: under `valgrind --tool=callgrind` (or perf stat)
 * two runs with different N give instructions per request, a figure that
 * the machine's load does not move. */
#include "bench_target.h"
#include "common/compiler.h"
#include "common/config.h"
#include "tent/transfer_engine.h"
#include "transport/transport.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define INSTANT_TYPE 30

struct instant_sub {
    struct tent_sub_batch base;
    uint64_t len[]; /* bytes of the task in each slot */
};

static int instant_install(TENT_UNUSED struct tent_transport *t)
{
    return TENT_OK;
}

static void instant_uninstall(TENT_UNUSED struct tent_transport *t) {}

static uint32_t instant_caps(TENT_UNUSED struct tent_transport *t)
{
    return TENT_CAP_ALL;
}

static int instant_alloc_sub(struct tent_transport *t, size_t cap,
                             struct tent_sub_batch **out)
{
    struct instant_sub *s = malloc(sizeof(*s) + cap * sizeof(s->len[0]));
    if (!s)
        return TENT_ENOMEM;
    s->base.owner = t;
    s->base.capacity = cap;
    *out = &s->base;
    return TENT_OK;
}

static int instant_free_sub(TENT_UNUSED struct tent_transport *t,
                            struct tent_sub_batch *sb)
{
    free(sb);
    return TENT_OK;
}

static int instant_submit(TENT_UNUSED struct tent_transport *t,
                          struct tent_sub_batch *sb,
                          const struct tent_xfer *reqs, size_t n,
                          struct tent_xfer_result *res)
{
    struct instant_sub *s = (struct instant_sub *)sb;
    for (size_t i = 0; i < n; i++) {
        s->len[reqs[i].slot] = reqs[i].length;
        res[i].code = TENT_OK;
        res[i].done = true;
    }
    return TENT_OK;
}

static int instant_status(TENT_UNUSED struct tent_transport *t,
                          struct tent_sub_batch *sb, uint32_t slot,
                          struct tent_xfer_status *out)
{
    out->state = TENT_XFER_COMPLETED;
    out->bytes = ((struct instant_sub *)sb)->len[slot];
    return TENT_OK;
}

static const struct tent_transport_ops instant_ops = {
    .name = "instant",
    .type = INSTANT_TYPE,
    .default_enabled = false,
    .instance_size = sizeof(struct tent_transport),
    .install = instant_install,
    .uninstall = instant_uninstall,
    .capabilities = instant_caps,
    .can_reach = tent_xport_reach_any,
    .alloc_sub_batch = instant_alloc_sub,
    .free_sub_batch = instant_free_sub,
    .submit = instant_submit,
    .status = instant_status,
    .quiesce = tent_xport_noop_quiesce,
    .peer_open = tent_xport_peer_open_plain,
    .peer_close = tent_xport_peer_close_plain,
    .add_buffer = tent_xport_noop_buffer,
    .remove_buffer = tent_xport_noop_buffer,
};

/* CPU time of this thread: on a loaded machine, time spent descheduled is
 * not the runtime's cost and would swamp a few-percent difference. */
static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

#define BUF_SIZE (1u << 20)
#define REQ_LEN  4096

/* One cycle: allocate, submit, poll every task until COMPLETED, free. */
static int cycle(tent_engine_t e, tent_request_t *reqs, size_t n)
{
    tent_batch_id_t b = tent_allocate_batch(e, n);
    if (b == TENT_INVALID_BATCH_ID)
        return -1;
    if (tent_submit(e, b, reqs, n) != TENT_OK)
        return -1;
    for (size_t i = 0; i < n; i++) {
        tent_status_t st;
        do {
            if (tent_task_status(e, b, i, &st) != TENT_OK)
                return -1;
        } while (st.status == STATUS_PENDING);
        if (st.status != STATUS_COMPLETED || st.transferred_bytes != REQ_LEN)
            return -1;
    }
    return tent_free_batch(e, b);
}

/* Best ns/request over rounds of secs/rounds each, alternating between the
 * two engines (metrics on and off) so that both see the same machine. */
struct side {
    tent_engine_t e;
    char *src, *dst;
    tent_request_t reqs[128];
    double best, last; /* ns/request: best round, last round */
    long total;
};

static int side_init(struct side *sd, bool metrics)
{
    tent_set_config("metrics/enabled", metrics ? "true" : "false");
    sd->e = tent_create_engine();
    if (!sd->e) {
        fprintf(stderr, "tent_create_engine: %s\n", tent_last_error());
        return -1;
    }
    sd->src = aligned_alloc(4096, BUF_SIZE);
    sd->dst = aligned_alloc(4096, BUF_SIZE);
    if (!sd->src || !sd->dst ||
        tent_register_memory(sd->e, sd->src, BUF_SIZE) ||
        tent_register_memory(sd->e, sd->dst, BUF_SIZE)) {
        fprintf(stderr, "setup failed: %s\n", tent_last_error());
        return -1;
    }
    for (size_t i = 0; i < 128; i++) {
        memset(&sd->reqs[i], 0, sizeof(sd->reqs[i]));
        sd->reqs[i].opcode = i % 2 ? OPCODE_READ : OPCODE_WRITE;
        sd->reqs[i].source = sd->src + (i * REQ_LEN) % BUF_SIZE;
        sd->reqs[i].target_id = LOCAL_SEGMENT_ID;
        sd->reqs[i].target_offset =
            (uintptr_t)(sd->dst + (i * REQ_LEN) % BUF_SIZE);
        sd->reqs[i].length = REQ_LEN;
    }
    return 0;
}

static void side_fini(struct side *sd)
{
    tent_unregister_memory(sd->e, sd->src, BUF_SIZE);
    tent_unregister_memory(sd->e, sd->dst, BUF_SIZE);
    tent_destroy_engine(sd->e);
    free(sd->src);
    free(sd->dst);
}

static int round_of(struct side *sd, size_t n, double secs)
{
    double t0 = now_ns(), t1;
    long iters = 0;
    do {
        for (int k = 0; k < 64; k++)
            if (cycle(sd->e, sd->reqs, n)) {
                fprintf(stderr, "cycle failed: %s\n", tent_last_error());
                return -1;
            }
        iters += 64;
        t1 = now_ns();
    } while (t1 - t0 < secs * 1e9);
    double per = (t1 - t0) / ((double)iters * (double)n);
    sd->last = per;
    if (per < sd->best)
        sd->best = per;
    sd->total += iters * (long)n;
    return 0;
}

#define ROUNDS 30

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Through the real transports: a target engine in a second process
 * (bench_target.h), each batch through bench_batch.h's shared loop.  These
 * are wall-clock times (the transports' workers and the peer do part of the
 * work), printed with their ratio to the in-bench figure (metrics on). */
#define XP_REGION ((size_t)1 << 20)
#define XP_LEN    8
#define XP_ROUNDS 5

static void xp_configure(int shm)
{
    tent_set_config("log_level", "error");
    tent_set_config("metrics/enabled", "true");
    tent_set_config("transports/instant/enable", "false");
    tent_set_config("transports/tcp/enable", shm ? "false" : "true");
    tent_set_config("transports/shm/enable", shm ? "true" : "false");
}

struct xp_target {
    pid_t pid;
    int keep;
    char name[256];
    unsigned long long remote;
};

/* Wall ns/request of 8-byte writes through one transport at each of the n
 * batch sizes into ns[], the median of XP_ROUNDS rounds.  Returns 0, or 1
 * after saying why on stderr. */
static int xp_measure(int shm, const struct xp_target *tg, const size_t *sizes,
                      size_t n, double secs, double *ns)
{
    xp_configure(shm);
    tent_engine_t e = tent_create_engine();
    void *src = NULL;
    tent_segment_id_t seg;
    if (!e || tent_allocate_memory(e, &src, XP_REGION, "cpu") ||
        tent_register_memory(e, src, XP_REGION) ||
        tent_open_segment(e, &seg, tg->name)) {
        fprintf(stderr, "%s setup failed: %s\n", shm ? "shm" : "tcp",
                tent_last_error());
        if (e)
            tent_destroy_engine(e);
        return 1;
    }
    memset(src, 5, XP_REGION);
    tent_request_t r[128];
    memset(r, 0, sizeof(r));
    for (size_t i = 0; i < 128; i++) {
        r[i].opcode = OPCODE_WRITE;
        r[i].source = (char *)src + i * 64;
        r[i].target_id = seg;
        r[i].target_offset = tg->remote + i * 64;
        r[i].length = XP_LEN;
    }
    for (size_t s = 0; s < n; s++) {
        size_t b = sizes[s];
        for (int w = 0; w < 100; w++) /* warm-up: connections, mappings */
            bench_run_batch(e, r, b);
        double v[XP_ROUNDS];
        for (int k = 0; k < XP_ROUNDS; k++) {
            long reqs = 0;
            double t0 = bench_now_s(), t;
            do {
                bench_run_batch(e, r, b);
                reqs += (long)b;
                t = bench_now_s();
            } while (t - t0 < secs / XP_ROUNDS);
            v[k] = (t - t0) * 1e9 / (double)reqs;
        }
        ns[s] = bench_median(XP_ROUNDS, v);
    }
    tent_unregister_memory(e, src, XP_REGION);
    tent_free_memory(e, src);
    tent_destroy_engine(e);
    return 0;
}

/* --cycles N BATCH: a fixed amount of work, for instruction counts. */
static int fixed_cycles(long cycles, size_t n)
{
    tent_transport_register(&instant_ops);
    tent_set_config("log_level", "error");
    const struct tent_transport_ops *ops[16];
    size_t nops = tent_transport_registry_snapshot(ops, 16);
    for (size_t i = 0; i < nops; i++) {
        char key[128];
        snprintf(key, sizeof(key), "transports/%s/enable", ops[i]->name);
        tent_set_config(key, ops[i] == &instant_ops ? "true" : "false");
    }
    struct side on = {0};
    if (n < 1 || n > 128 || side_init(&on, true))
        return 1;
    for (long k = 0; k < cycles; k++)
        if (cycle(on.e, on.reqs, n)) {
            fprintf(stderr, "cycle failed: %s\n", tent_last_error());
            return 1;
        }
    side_fini(&on);
    printf("%ld cycles of %zu requests\n", cycles, n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--cycles") == 0)
        return fixed_cycles(atol(argv[2]), (size_t)atol(argv[3]));
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    if (secs <= 0)
        secs = 1.0;
    /* The targets first, while this process has no threads to fork. */
    struct xp_target tg[2]; /* [0] tcp, [1] shm */
    for (int i = 0; i < 2; i++) {
        tg[i].pid = bench_target_up(xp_configure, i, XP_REGION, tg[i].name,
                                    &tg[i].remote, &tg[i].keep);
        if (tg[i].pid < 0)
            return 1;
    }
    tent_transport_register(&instant_ops);
    tent_set_config("log_level", "error");
    const struct tent_transport_ops *ops[16];
    size_t nops = tent_transport_registry_snapshot(ops, 16);
    for (size_t i = 0; i < nops; i++) {
        char key[128];
        snprintf(key, sizeof(key), "transports/%s/enable", ops[i]->name);
        tent_set_config(key, ops[i] == &instant_ops ? "true" : "false");
    }
    /* Both engines in one run: metrics on (the default) and off. */
    struct side on = {0}, off = {0};
    if (side_init(&on, true) || side_init(&off, false))
        return 1;
    static const size_t sizes[] = {1, 32, 128};
    double inbench[3];
    printf("%-8s %12s %16s %16s %10s\n", "batch", "requests", "ns/req metrics",
           "ns/req no-metr.", "overhead");
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        for (int w = 0; w < 1000; w++) /* warm-up */
            if (cycle(on.e, on.reqs, n) || cycle(off.e, off.reqs, n)) {
                fprintf(stderr, "cycle failed: %s\n", tent_last_error());
                return 1;
            }
        on.best = off.best = 1e30;
        on.total = off.total = 0;
        /* ROUNDS back-to-back pairs (order alternating): each pair sees the
         * same machine, so the overhead is the median of the pairs' ratios;
         * ns/request is each engine's best round. */
        double ratio[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            if (round_of(r % 2 ? &on : &off, n, secs / ROUNDS) ||
                round_of(r % 2 ? &off : &on, n, secs / ROUNDS))
                return 1;
            ratio[r] = on.last / off.last;
        }
        qsort(ratio, ROUNDS, sizeof(ratio[0]), cmp_double);
        double med = (ratio[ROUNDS / 2 - 1] + ratio[ROUNDS / 2]) / 2;
        printf("%-8zu %12ld %16.1f %16.1f %+9.1f%%\n", n, on.total + off.total,
               on.best, off.best, (med - 1.0) * 100.0);
        inbench[s] = on.best;
    }
    side_fini(&on);
    side_fini(&off);

    /* The same figure through the real transports. */
    double xp[2][3];
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++)
        rc = xp_measure(i, &tg[i], sizes, 3, secs, xp[i]);
    /* The shm target inherited the tcp target's pipe: close both first. */
    for (int i = 0; i < 2; i++)
        close(tg[i].keep);
    for (int i = 0; i < 2; i++)
        waitpid(tg[i].pid, NULL, 0);
    if (rc)
        return rc;
    printf("\nthrough the transports: %d B writes to a second process, wall "
           "ns/request (median of %d rounds)\n",
           XP_LEN, XP_ROUNDS);
    printf("%-8s %16s %12s %13s %12s %13s\n", "batch", "ns/req in-bench",
           "ns/req tcp", "tcp/in-bench", "ns/req shm", "shm/in-bench");
    for (size_t s = 0; s < 3; s++)
        printf("%-8zu %16.1f %12.1f %12.1fx %12.1f %12.1fx\n", sizes[s],
               inbench[s], xp[0][s], xp[0][s] / inbench[s], xp[1][s],
               xp[1][s] / inbench[s]);
    return 0;
}
