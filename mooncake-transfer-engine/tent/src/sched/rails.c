#include "sched/rails.h"

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "sched/slots.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NICS 64
/* The shortest small slice's time (the round trip) is forgotten after this
 * long (a path's delay changes). */
#define MIN_LAT_WINDOW_NS (10ull * 1000000000ull)
/* share_bw, the estimate that decides whether a rail is slow, is metered
 * from the rail's busy time: the bytes of slices >= the set's sample_min it
 * completed over the time it had >= sample_min in flight, a
 * sample per SHARE_METER_NS of busy time, the estimate so far weighing as
 * much as that span.
 * The EWMA that ranks picks follows single slices (TENT's rate) and swings
 * both ways -- a slice that finds a shaped link idle passes in its token
 * bucket's burst, one that shared a bunch of completions reads their sum --
 * and deciding slowness on it flipped the slower rail of an uneven pair to
 * probes only every few hundred milliseconds (docs/performance.md "Design
 * figures"); busy time does not depend on how slices overlap or
 * complete. */
#define SHARE_METER_NS (100ull * 1000000ull)
/* A slow rail rejoins above this multiple of the line: hysteresis against
 * what noise the meter keeps.  It stays below 1 / (3 * min_share's default
 * 0.25) = 1.33, so a rail with a third of the best one's bandwidth is never
 * held out by it. */
#define SHARE_REJOIN 1.3
/* An idle rail of the last pick keeps the next slice while its expected
 * time is within this multiple of the best rail's (tent_rail_pick). */
#define RAIL_STICKY 1.25
/* Pacing of the yielding class (tent_rail_yield_pace): it is paced while
 * another class's slice was picked within PACE_HOLD_NS (so a HIGH request
 * now and then finds no queue either), once CAP_MIN_SAMPLES unpaced meter
 * samples measured the rail's capacity (0.8 s of busy time: the first few,
 * with the connections and the application starting, read well below the
 * link); the capacity is the highest sample of a
 * group of CAP_GROUP; and every RELEARN_NS of pacing one span goes unpaced
 * to measure the link again (one or two tenths of a second in ten: the
 * latency traffic meets the old queues 1-2% of the time). */
#define PACE_HOLD_NS    (1000ull * 1000000ull)
#define CAP_MIN_SAMPLES 8
#define CAP_GROUP       8
#define RELEARN_NS      (10000ull * 1000000ull)

enum { RAIL_UP, RAIL_PAUSED, RAIL_PROBING };

/* The clock of every pick and completion (a test may set its own). */
static uint64_t (*rails_clock)(void) = tent_now_ns;

void tent_sched_use_clock(uint64_t (*now)(void))
{
    rails_clock = now ? now : tent_now_ns;
}

struct rail_state {
    struct tent_rail r;
    uint64_t inflight;
    uint64_t inflight_yield; /* of it, the yielding class's */
    double ewma;             /* bytes/s */
    double lo, hi;           /* clamp of ewma */
    double share_bw;  /* busy-time meter (SHARE_METER_NS): decides slow */
    uint64_t busy_ns; /* busy time (set_inflight), ever, to busy_since */
    uint64_t busy_since_ns;
    uint64_t bulk_delivered;                 /* of slices >= sample_min, ever */
    uint64_t meter_busy_ns, meter_delivered; /* at the last sample */
    uint64_t meter_at_ns;                    /* when it was */
    uint64_t delivered;                      /* bytes completed, ever */
    uint64_t rtt_ns, rtt_at_ns; /* shortest small slice: the round trip */
    bool slow;                  /* below min_share: probes only */
    int state;
    uint64_t paused_until_ns;
    int backoff_ms;
    uint64_t bytes_total, failures, probes;
    double cap;       /* capacity, bytes/s (see cap_learn) */
    double cap_group; /* the highest sample of the group under way */
    uint64_t cap_n;   /* unpaced samples, ever */
    bool span_paced;  /* the meter's current span had paced windows */
    /* when pacing started after the last unpaced sample (0: not since);
     * RELEARN_NS after it the rail goes unpaced until the next one */
    uint64_t paced_since_ns;
};

struct tent_railset {
    struct tent_sched *s;
    struct tent_railset *next, *prev;
    char owner[16];
    char peer[256];
    struct tent_sched_params p;
    /* the smallest slice that measures bandwidth: p.sample_min, at most
     * TENT_RAIL_SAMPLE_MIN */
    uint64_t sample_min;
    pthread_mutex_t lock;
    size_t n;
    uint64_t picks;
    uint64_t fg_ns; /* a slice not of the yielding class was last picked */
    struct tent_slots *slots; /* host-wide slots (the sched's), or NULL */
    bool probe_due; /* the next slice that can measure bandwidth probes */
    unsigned rr;
    int last; /* the rail of the last pick, -1 before the first */
    uint64_t rng;
    struct rail_state rails[TENT_MAX_RAILS];
};

struct nic_entry {
    char name[TENT_NIC_NAME_MAX];
    double bw; /* the initial estimate, for a NIC without rails */
};

#define MAX_SLOT_REGIONS 4

struct tent_sched {
    pthread_mutex_t lock; /* guards sets and nics; before any set's lock */
    struct tent_railset *sets;
    /* host-wide slot regions the sets share, by name (opened once) */
    struct tent_slots *slots[MAX_SLOT_REGIONS];
    char slot_names[MAX_SLOT_REGIONS][128];
    size_t nslots;
    struct nic_entry nics[MAX_NICS];
    size_t nnics;
};

int tent_sched_params_load(const struct tent_config *cfg, const char *prefix,
                           struct tent_sched_params *out)
{
    char k[160];
    int64_t v;
    int rc;
    /* what a transport sets itself (yield_wire_max, sample_min) is 0 */
    *out = (struct tent_sched_params){0};
#define KEY(name) (snprintf(k, sizeof(k), "%s/%s", prefix, name), k)
    rc = tent_config_get_bool(cfg, KEY("enable_smart_scheduling"), true,
                              &out->smart);
    if (!rc)
        rc = tent_config_get_double_range(cfg, KEY("bandwidth_learning_rate"),
                                          0.01, 0.0, 1.0, &out->learning_rate);
    if (!rc && !(rc = tent_config_get_int_range(cfg, KEY("rail_probe_every"),
                                                100, 0, 1000000, &v)))
        out->probe_every = (int)v;
    if (!rc)
        rc = tent_config_get_double_range(cfg, KEY("rail_min_share"), 0.25, 0.0,
                                          1.0, &out->min_share);
    if (!rc && !(rc = tent_config_get_int_range(cfg, KEY("rail_backoff_ms"),
                                                100, 1, 600000, &v)))
        out->backoff_min_ms = (int)v;
    if (!rc && !(rc = tent_config_get_int_range(cfg, KEY("rail_backoff_max_ms"),
                                                1000, 1, 3600000, &v)))
        out->backoff_max_ms = (int)v;
    double gbps = 10.0;
    if (!rc)
        rc = tent_config_get_double_range(cfg, KEY("default_bandwidth_gbps"),
                                          10.0, 0.001, 100000.0, &gbps);
    out->default_bw = gbps * 1e9 / 8;
    if (!rc)
        rc = tent_config_get_double_range(cfg,
                                          KEY("ewma_min_bandwidth_multiplier"),
                                          0.001, 0.0, 1.0, &out->ewma_min_mult);
    if (!rc)
        rc = tent_config_get_double_range(cfg,
                                          KEY("ewma_max_bandwidth_multiplier"),
                                          10.0, 1.0, 1e6, &out->ewma_max_mult);
    if (!rc)
        rc = tent_config_get_double_range(cfg, KEY("low_pacing_gain"), 0.9, 0.0,
                                          1.0, &out->yield_pace_gain);
    const char *shm = NULL;
    if (!rc)
        rc =
            tent_config_get_string(cfg, KEY("shared_quota_shm_path"), "", &shm);
    if (!rc && strlen(shm) >= sizeof(out->quota_shm))
        rc = tent_set_error(TENT_ECONFIG,
                            "config key '%s' = \"%s\" is longer than %zu "
                            "characters",
                            k, shm, sizeof(out->quota_shm) - 1);
    if (!rc)
        snprintf(out->quota_shm, sizeof(out->quota_shm), "%s", shm);
    if (!rc && !(rc = tent_config_get_int_range(
                     cfg, KEY("slot_rotation_interval_ms"), 2, 1, 60000, &v)))
        out->slot_interval_ms = (int)v;
#undef KEY
    if (!rc && out->backoff_max_ms < out->backoff_min_ms)
        rc = tent_set_error(TENT_ECONFIG,
                            "config key '%s/rail_backoff_max_ms' (%d) is "
                            "below rail_backoff_ms (%d)",
                            prefix, out->backoff_max_ms, out->backoff_min_ms);
    return rc;
}

struct tent_sched *tent_sched_new(void)
{
    struct tent_sched *s = calloc(1, sizeof(*s));
    if (s)
        pthread_mutex_init(&s->lock, NULL);
    return s;
}

void tent_sched_free(struct tent_sched *s)
{
    if (!s)
        return;
    if (s->sets) {
        /* an abandoned transport's threads may still use them */
        LOG_WARN("sched: rail sets still open: the scheduler is kept");
        return;
    }
    for (size_t i = 0; i < s->nslots; i++)
        tent_slots_close(s->slots[i]);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* The region named name, opened on first use; NULL (said once) when it
 * cannot be: TENT then goes on without global coordination.  Caller holds
 * s->lock. */
static struct tent_slots *slots_get_locked(struct tent_sched *s,
                                           const char *name, int interval_ms)
{
    for (size_t i = 0; i < s->nslots; i++)
        if (strcmp(s->slot_names[i], name) == 0)
            return s->slots[i];
    if (s->nslots == MAX_SLOT_REGIONS)
        return NULL;
    struct tent_slots *sl = NULL;
    if (tent_slots_open(name, interval_ms, &sl) != TENT_OK)
        LOG_WARN("sched: no priority slots shared with other processes: %s",
                 tent_last_error());
    /* remembered even when it failed: tried once */
    snprintf(s->slot_names[s->nslots], sizeof(s->slot_names[0]), "%s", name);
    s->slots[s->nslots++] = sl;
    return sl;
}

/* Caller holds s->lock. */
static void nic_note(struct tent_sched *s, const char *name, double bw)
{
    for (size_t i = 0; i < s->nnics; i++)
        if (strcmp(s->nics[i].name, name) == 0)
            return;
    if (s->nnics == MAX_NICS)
        return;
    snprintf(s->nics[s->nnics].name, sizeof(s->nics[0].name), "%s", name);
    s->nics[s->nnics++].bw = bw;
}

static const char *nic_label(const struct tent_rail *r)
{
    return r->local_nic[0] ? r->local_nic : "default";
}

int tent_railset_new(struct tent_sched *s, const struct tent_sched_params *p,
                     const char *owner, const char *peer,
                     const struct tent_rail *rails, size_t n,
                     struct tent_railset **out)
{
    if (!s || !p || !rails || n == 0 || n > TENT_MAX_RAILS)
        return tent_set_error(TENT_EINVAL,
                              "sched: a rail set needs 1..%d rails (got %zu)",
                              TENT_MAX_RAILS, n);
    struct tent_railset *rs = calloc(1, sizeof(*rs));
    if (!rs)
        return tent_set_error(TENT_ENOMEM, "sched: out of memory");
    rs->s = s;
    rs->p = *p;
    rs->sample_min = p->sample_min && p->sample_min < TENT_RAIL_SAMPLE_MIN
                         ? p->sample_min
                         : TENT_RAIL_SAMPLE_MIN;
    snprintf(rs->owner, sizeof(rs->owner), "%s", owner ? owner : "");
    snprintf(rs->peer, sizeof(rs->peer), "%s", peer ? peer : "");
    rs->n = n;
    uint64_t now = rails_clock();
    rs->rng = (uint64_t)(uintptr_t)rs ^ now ^ 0x9e3779b97f4a7c15ull;
    rs->last = -1;
    for (size_t i = 0; i < n; i++) {
        struct rail_state *x = &rs->rails[i];
        x->r = rails[i];
        double bw = rails[i].link_bw > 0 ? rails[i].link_bw : p->default_bw;
        x->ewma = bw;
        x->share_bw = bw;
        x->meter_at_ns = now;
        x->lo = bw * p->ewma_min_mult;
        x->hi = bw * p->ewma_max_mult;
        x->backoff_ms = p->backoff_min_ms;
        x->state = RAIL_UP;
    }
    pthread_mutex_init(&rs->lock, NULL);
    pthread_mutex_lock(&s->lock);
    if (p->quota_shm[0])
        rs->slots = slots_get_locked(s, p->quota_shm, p->slot_interval_ms);
    for (size_t i = 0; i < n; i++)
        nic_note(s, nic_label(&rails[i]),
                 rails[i].link_bw > 0 ? rails[i].link_bw : p->default_bw);
    rs->next = s->sets;
    if (s->sets)
        s->sets->prev = rs;
    s->sets = rs;
    pthread_mutex_unlock(&s->lock);
    *out = rs;
    return TENT_OK;
}

void tent_railset_free(struct tent_railset *rs)
{
    if (!rs)
        return;
    struct tent_sched *s = rs->s;
    pthread_mutex_lock(&s->lock);
    if (rs->prev)
        rs->prev->next = rs->next;
    else
        s->sets = rs->next;
    if (rs->next)
        rs->next->prev = rs->prev;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_destroy(&rs->lock);
    free(rs);
}

/* The best share_bw among the rails that are up and not avoided. Caller
 * holds rs->lock. */
static double best_share_locked(const struct tent_railset *rs, uint32_t avoid)
{
    double best = 0;
    for (size_t i = 0; i < rs->n; i++)
        if (!(avoid & (1u << i)) && rs->rails[i].state == RAIL_UP &&
            rs->rails[i].share_bw > best)
            best = rs->rails[i].share_bw;
    return best;
}

/* Whether x gets probe slices only, best being best_share_locked(). A rail
 * turns slow below min_share of it and back only above SHARE_REJOIN times
 * that, so a rail whose share sits near the line does not flip at every
 * sample.  Caller holds rs->lock. */
static bool slow_locked(const struct tent_railset *rs, struct rail_state *x,
                        double best)
{
    double line = rs->p.min_share * best;
    if (x->slow && x->share_bw >= SHARE_REJOIN * line)
        x->slow = false;
    else if (!x->slow && x->share_bw < line)
        x->slow = true;
    return x->slow;
}

static uint64_t next_rand(struct tent_railset *rs)
{
    uint64_t x = rs->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rs->rng = x;
    return x;
}

static uint64_t less(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

/* Sets x's in-flight bytes, keeping its busy time: the time it had at least
 * rs->sample_min in flight (small slices alone measure a round trip, not
 * the link, and the meter leaves them out as the EWMA does).  Caller holds
 * rs->lock. */
static void set_inflight(const struct tent_railset *rs, struct rail_state *x,
                         uint64_t v, uint64_t now)
{
    bool was = x->inflight >= rs->sample_min;
    bool is = v >= rs->sample_min;
    if (!was && is)
        x->busy_since_ns = now;
    else if (was && !is && now > x->busy_since_ns)
        x->busy_ns += now - x->busy_since_ns;
    x->inflight = v;
}

/* Counts bytes in (add) or out of x's in flight, for a slice of ticket
 * tk.  Caller holds rs->lock. */
static void count_locked(const struct tent_railset *rs, struct rail_state *x,
                         uint64_t bytes, bool add,
                         const struct tent_rail_ticket *tk, uint64_t now)
{
    set_inflight(rs, x, add ? x->inflight + bytes : less(x->inflight, bytes),
                 now);
    if (tk && tk->yields)
        x->inflight_yield =
            add ? x->inflight_yield + bytes : less(x->inflight_yield, bytes);
}

/* The bytes on x a slice waits behind (see tent_rail_pick).  Caller holds
 * rs->lock. */
static uint64_t ahead_locked(const struct tent_railset *rs,
                             const struct rail_state *x, bool yields)
{
    if (yields || !rs->p.yield_wire_max)
        return x->inflight;
    uint64_t y =
        x->inflight_yield < x->inflight ? x->inflight_yield : x->inflight;
    uint64_t wire = rs->p.yield_wire_max;
    return x->inflight - y + (y < wire ? y : wire);
}

/* v within x's bounds for a bandwidth, [lo, hi]. */
static double clamp_bw(const struct rail_state *x, double v)
{
    return v < x->lo ? x->lo : v > x->hi ? x->hi : v;
}

/* x's busy time, ever, to now.  Caller holds rs->lock. */
static uint64_t busy_to(const struct tent_railset *rs,
                        const struct rail_state *x, uint64_t now)
{
    uint64_t busy = x->busy_ns;
    if (x->inflight >= rs->sample_min && now > x->busy_since_ns)
        busy += now - x->busy_since_ns;
    return busy;
}

/* A busy-time meter sample of x's delivery rate, for its capacity (see
 * tent_rail_yield_pace).  The capacity is the highest unpaced sample of
 * the last complete group of CAP_GROUP and of the group under way: one
 * span that stalled (a retransmission timeout) does not lower it, a group
 * of slower ones does.  An unpaced sample also ends a relearn and starts
 * the next RELEARN_NS of pacing.  Caller holds the set's lock. */
static void cap_learn(struct rail_state *x, double sample)
{
    if (!x->span_paced) {
        if (sample > x->cap)
            x->cap = sample;
        if (sample > x->cap_group)
            x->cap_group = sample;
        if (++x->cap_n % CAP_GROUP == 0) {
            x->cap = x->cap_group;
            x->cap_group = 0;
        }
        x->paced_since_ns = 0;
    }
    x->span_paced = false;
}

/* Folds the bytes x completed into share_bw once it was busy for
 * SHARE_METER_NS since the last sample -- or, for a slow rail, whenever it
 * has nothing in flight: it carries one probe at a time, a probe in a
 * hundred picks, and would otherwise wait seconds for a sample that lets
 * it rejoin.  Caller holds rs->lock. */
static void share_meter(const struct tent_railset *rs, struct rail_state *x,
                        uint64_t now)
{
    uint64_t busy = busy_to(rs, x, now);
    uint64_t span = busy - x->meter_busy_ns;
    bool probed = x->slow && x->inflight < rs->sample_min && span > 0;
    if (span < SHARE_METER_NS && !probed)
        return;
    double sample =
        (double)(x->bulk_delivered - x->meter_delivered) * 1e9 / (double)span;
    sample = clamp_bw(x, sample);
    if (!probed)
        cap_learn(x, sample);
    /* The old estimate weighs as much as SHARE_METER_NS of busy time --
     * for a probed rail, of the time since its last sample: its probes
     * are all it gets, milliseconds of busy time a second, and a rail
     * that got its speed back waited dozens of them (7.6 s in
     * rails_test) to climb back over the line. */
    uint64_t age =
        probed && now - x->meter_at_ns > span ? now - x->meter_at_ns : span;
    double keep = (double)SHARE_METER_NS / (double)(SHARE_METER_NS + age);
    x->share_bw = keep * x->share_bw + (1.0 - keep) * sample;
    x->meter_busy_ns = busy;
    x->meter_delivered = x->bulk_delivered;
    x->meter_at_ns = now;
}

int tent_rail_pick(struct tent_railset *rs, uint64_t bytes, bool yields,
                   uint32_t avoid, struct tent_rail_ticket *tk)
{
    uint64_t now = rails_clock();
    pthread_mutex_lock(&rs->lock);
    int pick = -1;
    rs->picks++;
    /* A paused rail whose back-off ran out gets this slice as its probe. */
    for (size_t i = 0; i < rs->n && pick < 0; i++) {
        struct rail_state *x = &rs->rails[i];
        if (!(avoid & (1u << i)) && x->state == RAIL_PAUSED &&
            now >= x->paused_until_ns) {
            x->state = RAIL_PROBING;
            x->probes++;
            pick = (int)i;
        }
    }
    /* The periodic probe is taken by the first slice from the due pick on
     * that can measure bandwidth (rs->sample_min): a
     * smaller one would learn nothing there, and a 4 KiB latency-critical
     * read sent round robin waits behind a bulk window on the slowest rail
     * -- one pick in probe_every is just where a p99 lies. */
    if (rs->p.probe_every > 0 && rs->n > 1 &&
        rs->picks % (uint64_t)rs->p.probe_every == 0)
        rs->probe_due = true;
    bool probe = rs->probe_due && bytes >= rs->sample_min;
    if (pick < 0 && (probe || !rs->p.smart)) {
        /* round robin over the rails that are up */
        for (size_t k = 0; k < rs->n && pick < 0; k++) {
            size_t i = (rs->rr + k) % rs->n;
            if (!(avoid & (1u << i)) && rs->rails[i].state == RAIL_UP)
                pick = (int)i;
        }
        if (pick >= 0) {
            rs->rr = (unsigned)(pick + 1);
            if (probe) {
                rs->rails[pick].probes++;
                rs->probe_due = false; /* else the next large slice */
            }
        }
    }
    if (pick < 0) {
        double best_bw = best_share_locked(rs, avoid);
        double best = 0, t_last = -1;
        for (size_t i = 0; i < rs->n; i++) {
            struct rail_state *x = &rs->rails[i];
            if ((avoid & (1u << i)) || x->state != RAIL_UP ||
                slow_locked(rs, x, best_bw))
                continue;
            /* a jitter far below any real difference breaks ties */
            double t =
                ((double)(ahead_locked(rs, x, yields) + bytes) / x->ewma) *
                (1.0 + (double)(next_rand(rs) & 0xffff) * 1e-12);
            if ((int)i == rs->last && x->inflight == 0)
                t_last = t;
            if (pick < 0 || t < best) {
                best = t;
                pick = (int)i;
            }
        }
        /* A slice that finds the rail of the last pick idle stays there
         * unless another is clearly faster: requests sent one at a time
         * gain nothing from alternating over idle rails but more
         * connections and completion queues to poll on both sides.  A
         * window in flight makes the rail busy, and slices spread. */
        if (t_last >= 0 && t_last <= best * RAIL_STICKY)
            pick = rs->last;
    }
    if (pick < 0 && avoid == 0) {
        /* every rail paused: new work still goes somewhere, to the one
         * whose pause ends first (it stays paused until a slice works) */
        for (size_t i = 0; i < rs->n; i++)
            if (pick < 0 ||
                rs->rails[i].paused_until_ns < rs->rails[pick].paused_until_ns)
                pick = (int)i;
    }
    if (pick >= 0) {
        rs->last = pick;
        if (!yields) {
            rs->fg_ns = now;
            if (rs->slots) /* the host's clock, whatever rails_clock is */
                tent_slots_note(rs->slots, 0 /* HIGH */, tent_now_ns());
        }
        tk->yields = yields;
        count_locked(rs, &rs->rails[pick], bytes, true, tk, now);
        tk->start_ns = now;
        tk->delivered = rs->rails[pick].delivered;
        tk->inflight = rs->rails[pick].inflight;
    }
    pthread_mutex_unlock(&rs->lock);
    return pick;
}

void tent_rail_complete(struct tent_railset *rs, int i, uint64_t bytes,
                        const struct tent_rail_ticket *tk)
{
    if (i < 0 || (size_t)i >= rs->n)
        return;
    uint64_t now = rails_clock();
    pthread_mutex_lock(&rs->lock);
    struct rail_state *x = &rs->rails[i];
    count_locked(rs, x, bytes, false, tk, now);
    x->bytes_total += bytes;
    if (x->state != RAIL_UP) {
        if (x->state == RAIL_PROBING)
            LOG_INFO("sched: %s rail %s -> %s/%s:%u is back", rs->owner,
                     nic_label(&x->r), rs->peer, x->r.peer_host,
                     (unsigned)x->r.peer_port);
        x->state = RAIL_UP;
        x->backoff_ms = rs->p.backoff_min_ms;
    }
    x->delivered += bytes;
    if (bytes >= rs->sample_min) {
        x->bulk_delivered += bytes;
        share_meter(rs, x, now);
    }
    uint64_t lat = now > tk->start_ns ? now - tk->start_ns : 1;
    /* delivery rate over the slice's life: everything the rail completed
     * since it was picked */
    if (bytes >= rs->sample_min) {
        uint64_t moved = x->delivered - tk->delivered;
        /* alone on the rail, its time includes a round trip in which the
         * link idled: without it, when small slices told what it is */
        uint64_t span = lat;
        if (tk->inflight <= bytes && x->rtt_ns && x->rtt_ns <= lat / 2)
            span = lat - x->rtt_ns;
        double sample = (double)moved * 1e9 / (double)span;
        double a = rs->p.learning_rate;
        double e = a * x->ewma + (1.0 - a) * sample;
        x->ewma = clamp_bw(x, e);
    } else if (!x->rtt_ns || lat < x->rtt_ns ||
               now - x->rtt_at_ns > MIN_LAT_WINDOW_NS) {
        x->rtt_ns = lat;
        x->rtt_at_ns = now;
    }
    pthread_mutex_unlock(&rs->lock);
}

void tent_rail_fail(struct tent_railset *rs, int i, uint64_t bytes,
                    const struct tent_rail_ticket *tk)
{
    if (i < 0 || (size_t)i >= rs->n)
        return;
    uint64_t now = rails_clock();
    pthread_mutex_lock(&rs->lock);
    struct rail_state *x = &rs->rails[i];
    count_locked(rs, x, bytes, false, tk, now);
    x->failures++;
    /* The time its slices waited on a dead path measured no bandwidth:
     * the meter's next span starts here.  Folded in, an outage of seconds
     * read as a rail near zero, which then took seconds of probes to
     * rejoin once the path was back. */
    x->meter_busy_ns = busy_to(rs, x, now);
    x->meter_delivered = x->bulk_delivered;
    x->meter_at_ns = now;
    if (x->state != RAIL_PAUSED) {
        /* a failed probe doubles the back-off; a rail that was up starts
         * at the shortest one */
        if (x->state == RAIL_PROBING) {
            x->backoff_ms *= 2;
            if (x->backoff_ms > rs->p.backoff_max_ms)
                x->backoff_ms = rs->p.backoff_max_ms;
        } else {
            LOG_WARN("sched: %s rail %s -> %s/%s:%u failed; paused, probed "
                     "again in %d ms",
                     rs->owner, nic_label(&x->r), rs->peer, x->r.peer_host,
                     (unsigned)x->r.peer_port, x->backoff_ms);
        }
        x->state = RAIL_PAUSED;
        x->paused_until_ns = now + (uint64_t)x->backoff_ms * 1000000ull;
    }
    pthread_mutex_unlock(&rs->lock);
}

void tent_rail_release(struct tent_railset *rs, int i, uint64_t bytes,
                       const struct tent_rail_ticket *tk)
{
    if (i < 0 || (size_t)i >= rs->n)
        return;
    uint64_t now = rails_clock();
    pthread_mutex_lock(&rs->lock);
    struct rail_state *x = &rs->rails[i];
    count_locked(rs, x, bytes, false, tk, now);
    /* a probe that never went out tested nothing: paused as before, its
     * back-off spent, so the next pick probes again (else the rail would
     * stay probing with nothing in flight, never picked again) */
    if (x->state == RAIL_PROBING)
        x->state = RAIL_PAUSED;
    pthread_mutex_unlock(&rs->lock);
}

bool tent_rail_usable(struct tent_railset *rs, int i)
{
    if (i < 0 || (size_t)i >= rs->n)
        return false;
    pthread_mutex_lock(&rs->lock);
    bool up = rs->rails[i].state != RAIL_PAUSED;
    pthread_mutex_unlock(&rs->lock);
    return up;
}

bool tent_rail_may_take(struct tent_railset *rs, int i)
{
    if (i < 0 || (size_t)i >= rs->n)
        return false;
    pthread_mutex_lock(&rs->lock);
    double best = best_share_locked(rs, 0);
    const struct rail_state *x = &rs->rails[i];
    bool ok = x->state == RAIL_UP && !slow_locked(rs, &rs->rails[i], best);
    pthread_mutex_unlock(&rs->lock);
    return ok;
}

void tent_rail_move(struct tent_railset *rs, int from, int to, uint64_t bytes,
                    struct tent_rail_ticket *tk)
{
    if (from < 0 || (size_t)from >= rs->n || to < 0 || (size_t)to >= rs->n)
        return;
    uint64_t now = rails_clock();
    pthread_mutex_lock(&rs->lock);
    struct rail_state *a = &rs->rails[from], *b = &rs->rails[to];
    count_locked(rs, a, bytes, false, tk, now);
    count_locked(rs, b, bytes, true, tk, now);
    tk->start_ns = now;
    tk->delivered = b->delivered;
    tk->inflight = b->inflight;
    pthread_mutex_unlock(&rs->lock);
}

struct tent_slots *tent_railset_slots(struct tent_railset *rs)
{
    return rs ? rs->slots : NULL;
}

double tent_rail_yield_pace(struct tent_railset *rs, int i, bool sending)
{
    if (i < 0 || (size_t)i >= rs->n || rs->p.yield_pace_gain <= 0)
        return 0;
    uint64_t now = rails_clock();
    pthread_mutex_lock(&rs->lock);
    struct rail_state *x = &rs->rails[i];
    double cap = x->cap_n >= CAP_MIN_SAMPLES ? x->cap : 0;
    if (x->r.link_bw > 0 && x->r.link_bw < cap)
        cap = x->r.link_bw;
    double pace = 0;
    /* latency-critical slices of this set, or of any engine of the host */
    bool fg = rs->fg_ns && now - rs->fg_ns <= PACE_HOLD_NS;
    if (!fg && rs->slots)
        fg = tent_slots_busy(rs->slots, 2 /* LOW */, tent_now_ns(),
                             PACE_HOLD_NS);
    if (fg && cap > 0) {
        if (!x->paced_since_ns)
            x->paced_since_ns = now;
        if (now - x->paced_since_ns <= RELEARN_NS) {
            pace = rs->p.yield_pace_gain * cap;
            x->span_paced |= sending;
        }
    }
    pthread_mutex_unlock(&rs->lock);
    return pace;
}

size_t tent_sched_nic_loads(struct tent_sched *s, struct tent_nic_load *out,
                            size_t max)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    size_t n = s->nnics;
    for (size_t k = 0; k < n && k < max; k++) {
        snprintf(out[k].name, sizeof(out[k].name), "%s", s->nics[k].name);
        out[k].inflight_bytes = 0;
        out[k].ewma_bps = 0;
        bool any = false;
        for (struct tent_railset *rs = s->sets; rs; rs = rs->next) {
            pthread_mutex_lock(&rs->lock);
            for (size_t i = 0; i < rs->n; i++) {
                const struct rail_state *x = &rs->rails[i];
                if (strcmp(nic_label(&x->r), s->nics[k].name) != 0)
                    continue;
                out[k].inflight_bytes += x->inflight;
                /* one NIC's rails to several peers share it: the NIC
                 * delivers as much as its fastest rail does */
                if (x->ewma > out[k].ewma_bps)
                    out[k].ewma_bps = x->ewma;
                any = true;
            }
            pthread_mutex_unlock(&rs->lock);
        }
        if (!any)
            out[k].ewma_bps = s->nics[k].bw;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

void tent_sched_note_nic(struct tent_sched *s, const char *name, double bw)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    nic_note(s, name, bw);
    pthread_mutex_unlock(&s->lock);
}

void tent_sched_foreach_rail(struct tent_sched *s,
                             void (*fn)(void *arg,
                                        const struct tent_rail_load *r),
                             void *arg)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    for (struct tent_railset *rs = s->sets; rs; rs = rs->next) {
        pthread_mutex_lock(&rs->lock);
        for (size_t i = 0; i < rs->n; i++) {
            const struct rail_state *x = &rs->rails[i];
            struct tent_rail_load l;
            snprintf(l.owner, sizeof(l.owner), "%s", rs->owner);
            snprintf(l.local_nic, sizeof(l.local_nic), "%s", nic_label(&x->r));
            snprintf(l.peer, sizeof(l.peer), "%s/%s", rs->peer,
                     x->r.peer_nic[0] ? x->r.peer_nic : x->r.peer_host);
            l.inflight_bytes = x->inflight;
            l.ewma_bps = x->ewma;
            l.bytes_total = x->bytes_total;
            l.failures_total = x->failures;
            l.probes_total = x->probes;
            l.capacity_bps = x->cap_n >= CAP_MIN_SAMPLES ? x->cap : 0;
            l.paused = x->state == RAIL_PAUSED;
            fn(arg, &l);
        }
        pthread_mutex_unlock(&rs->lock);
    }
    pthread_mutex_unlock(&s->lock);
}
