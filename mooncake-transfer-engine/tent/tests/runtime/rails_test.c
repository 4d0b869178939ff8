/* The rail scheduler (sched/rails.c) on its own: TENT's slice spraying by
 * least predicted completion time, probes, slow rails kept to probes,
 * paused rails and their back-off, the delivery-rate estimate, and the
 * per-NIC figures of tent_get_nic_load_stats, and an idle rail keeping
 * requests sent one at a time.  No network: rails are
 * descriptions, completions are reported by the test. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include "common/clock.h"
#include "common/config.h"
#include "sched/rails.h"
#include "tent/transfer_engine.h"
#include "transport/transport.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>

#define GB 1e9

static struct tent_sched_params params(void)
{
    struct tent_config *cfg;
    assert_int_equal(tent_config_new_empty(&cfg), 0);
    struct tent_sched_params p;
    assert_int_equal(tent_sched_params_load(cfg, "transports/tcp", &p), 0);
    tent_config_free(cfg);
    return p;
}

static struct tent_rail rail(const char *nic, double bw)
{
    struct tent_rail r;
    memset(&r, 0, sizeof(r));
    snprintf(r.local_nic, sizeof(r.local_nic), "%s", nic);
    snprintf(r.peer_host, sizeof(r.peer_host), "10.0.0.%d", nic[3] - '0');
    r.peer_port = 1000;
    r.link_bw = bw;
    return r;
}

static struct tent_railset *two_rails(struct tent_sched *s,
                                      const struct tent_sched_params *p,
                                      double bw0, double bw1)
{
    struct tent_rail r[2] = {rail("eth0", bw0), rail("eth1", bw1)};
    struct tent_railset *rs;
    assert_int_equal(tent_railset_new(s, p, "tcp", "peer", r, 2, &rs), 0);
    return rs;
}

/* With nothing completing, in-flight bytes grow where slices go: least
 * predicted completion time shares them by bandwidth (1:3 here). */
static void test_spray_follows_bandwidth(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct tent_sched_params p = params();
    p.probe_every = 0;
    struct tent_railset *rs = two_rails(s, &p, 1 * GB, 3 * GB);
    int n[2] = {0, 0};
    struct tent_rail_ticket tk;
    for (int i = 0; i < 400; i++) {
        int r = tent_rail_pick(rs, 1 << 20, false, 0, &tk);
        assert_true(r == 0 || r == 1);
        n[r]++;
    }
    print_message("    1 and 3 GB/s rails: %d and %d slices\n", n[0], n[1]);
    assert_in_range(n[0], 95, 105);
    assert_in_range(n[1], 295, 305);
    /* avoiding a rail sends everything to the other */
    for (int i = 0; i < 10; i++)
        assert_int_equal(tent_rail_pick(rs, 1 << 20, false, 1u << 1, &tk), 0);
    tent_railset_free(rs);
    tent_sched_free(s);
}

/* A slice of another class waits behind a rail's yielding (LOW) bytes
 * only as far as they may be on the wire (yield_wire_max here), the rest
 * waiting behind it in the queues: with LOW spread over both rails in
 * proportion to their speed, a HIGH slice goes to the faster rail, where
 * one LOW window ahead takes a third of the time -- not to either rail at
 * random, as a count of every byte in flight would send it.  LOW slices
 * themselves still count every byte. */
static void test_high_counts_low_on_the_wire_only(void **state)
{
    (void)state;
    for (int hold = 0; hold < 2; hold++) {
        struct tent_sched *s = tent_sched_new();
        struct tent_sched_params p = params();
        p.probe_every = 0;
        p.yield_wire_max = hold ? 128u << 10 : 0;
        struct tent_railset *rs = two_rails(s, &p, 1 * GB, 3 * GB);
        struct tent_rail_ticket low[400], tk;
        int n[2] = {0, 0}, at[400];
        for (int i = 0; i < 400; i++) {
            at[i] = tent_rail_pick(rs, 1 << 20, true, 0, &low[i]);
            assert_true(low[i].yields);
            n[at[i]]++;
        }
        assert_in_range(n[0], 95, 105); /* LOW: every byte counts */
        int high[2] = {0, 0};
        for (int i = 0; i < 40; i++) {
            int r = tent_rail_pick(rs, 4096, false, 0, &tk);
            assert_false(tk.yields);
            high[r]++;
        }
        print_message("    %s: 40 HIGH picks, %d and %d on the 1 and 3 GB/s "
                      "rails\n",
                      hold ? "LOW held to the wire" : "LOW counted in full",
                      high[0], high[1]);
        if (hold)
            assert_int_equal(high[1], 40);
        else
            assert_true(high[0] > 0 && high[1] > 0);
        /* the LOW slices leave: the yielding count goes with them (a
         * release, a failure or a completion alike) */
        for (int i = 0; i < 400; i++) {
            if (i % 3 == 0)
                tent_rail_release(rs, at[i], 1 << 20, &low[i]);
            else
                tent_rail_complete(rs, at[i], 1 << 20, &low[i]);
        }
        struct tent_nic_load ld[4];
        size_t k = tent_sched_nic_loads(s, ld, 4);
        assert_int_equal(k, 2);
        for (size_t j = 0; j < k; j++)
            assert_int_equal(ld[j].inflight_bytes,
                             (uint64_t)high[ld[j].name[3] - '0'] * 4096);
        /* nothing yields now: 1 MiB on the 3 GB/s rail waits longer than
         * 256 KiB on the 1 GB/s one (a yielding count left behind would
         * cap rail 1's at the floor) */
        assert_int_equal(tent_rail_pick(rs, 1 << 20, false, 1u << 0, &tk), 1);
        assert_int_equal(tent_rail_pick(rs, 256 << 10, false, 1u << 1, &tk),
                         0);
        if (hold)
            assert_int_equal(tent_rail_pick(rs, 4096, false, 0, &tk), 0);
        tent_railset_free(rs);
        tent_sched_free(s);
    }
}

/* One pick in probe_every goes round robin, so a rail too slow for
 * normal picks (below min_share of the best) still gets probes, and only
 * those. */
static void test_slow_rail_gets_probes_only(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct tent_sched_params p = params(); /* probe_every 100, share 0.25 */
    struct tent_railset *rs = two_rails(s, &p, 0.2 * GB, 1 * GB);
    int n[2] = {0, 0};
    struct tent_rail_ticket tk;
    for (int i = 0; i < 1000; i++) {
        int r = tent_rail_pick(rs, 1 << 20, false, 0, &tk);
        n[r]++;
        /* keep in flight at 0 without learning: a completion measured on
         * the clock (instant here, or slow under a sanitizer) would move
         * the rates this test sets */
        tent_rail_release(rs, r, 1 << 20, &tk);
    }
    print_message("    0.2 and 1 GB/s rails: %d and %d slices\n", n[0], n[1]);
    assert_in_range(n[0], 4, 6); /* half the 10 probes */
    assert_false(tent_rail_may_take(rs, 0));
    assert_true(tent_rail_may_take(rs, 1));
    tent_railset_free(rs);
    tent_sched_free(s);
}

/* The periodic probe waits for a slice that can measure bandwidth: 4 KiB
 * reads never go round robin to the slow rail (there one would wait behind
 * a bulk window, and learn nothing), and the next large slice takes the
 * probe that came due meanwhile. */
static void test_small_slices_do_not_probe(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct tent_sched_params p = params(); /* probe_every 100 */
    struct tent_railset *rs = two_rails(s, &p, 0.2 * GB, 1 * GB);
    int n[2] = {0, 0};
    struct tent_rail_ticket tk;
    for (int i = 0; i < 1000; i++) {
        int r = tent_rail_pick(rs, 4096, false, 0, &tk);
        n[r]++;
        tent_rail_complete(rs, r, 4096, &tk);
    }
    assert_int_equal(n[0], 0);
    int big[2] = {0, 0}, first = -1;
    for (int i = 0; i < 200; i++) {
        int r = tent_rail_pick(rs, 1 << 20, false, 0, &tk);
        if (first < 0)
            first = r;
        big[r]++;
        tent_rail_complete(rs, r, 1 << 20, &tk);
    }
    print_message("    4 KiB: %d on the slow rail; then 1 MiB: %d and %d\n",
                  n[0], big[0], big[1]);
    /* the probe due since pick 100 goes round robin (rail 0 first), then
     * those of picks 1100 (rail 1) and 1200 (rail 0) */
    assert_int_equal(first, 0);
    assert_int_equal(big[0], 2);
    tent_railset_free(rs);
    tent_sched_free(s);
}

/* Requests sent one at a time stay on the rail of the last pick while it
 * is idle and not clearly slower; a window in flight spreads over the
 * rails, and a rail several times faster takes over at once. */
static void test_idle_rail_keeps_requests(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct tent_sched_params p = params();
    p.probe_every = 0;
    struct tent_railset *rs = two_rails(s, &p, 1 * GB, 1 * GB);
    struct tent_rail_ticket tk, w[2];
    int n[2] = {0, 0};
    for (int i = 0; i < 200; i++) {
        int r = tent_rail_pick(rs, 4096, false, 0, &tk);
        n[r]++;
        tent_rail_complete(rs, r, 4096, &tk);
    }
    print_message("    one at a time: %d and %d\n", n[0], n[1]);
    assert_true(n[0] == 200 || n[1] == 200);
    int a = tent_rail_pick(rs, 1 << 20, false, 0, &w[0]);
    int b = tent_rail_pick(rs, 1 << 20, false, 0, &w[1]);
    assert_int_not_equal(a, b); /* the first is in flight */
    tent_rail_complete(rs, a, 1 << 20, &w[0]);
    tent_rail_complete(rs, b, 1 << 20, &w[1]);
    tent_railset_free(rs);

    rs = two_rails(s, &p, 0.2 * GB, 1 * GB);
    assert_int_equal(tent_rail_pick(rs, 4096, false, 1u << 1, &tk), 0);
    tent_rail_complete(rs, 0, 4096, &tk);
    assert_int_equal(tent_rail_pick(rs, 4096, false, 0, &tk), 1);
    tent_rail_complete(rs, 1, 4096, &tk);
    tent_railset_free(rs);
    tent_sched_free(s);
}

/* Two equal rails with a 30..200 ms back-off, rail 0 failed once (now,
 * by the scheduler's clock): paused for 30 ms. */
static struct tent_railset *rail0_paused(struct tent_sched *s)
{
    struct tent_sched_params p = params();
    p.probe_every = 0;
    p.backoff_min_ms = 30;
    p.backoff_max_ms = 200;
    struct tent_railset *rs = two_rails(s, &p, 1 * GB, 1 * GB);
    struct tent_rail_ticket tk;
    assert_int_equal(tent_rail_pick(rs, 4096, false, 1u << 1, &tk), 0);
    tent_rail_fail(rs, 0, 4096, NULL);
    return rs;
}

/* A failed rail is paused: picks avoid it; when its back-off runs out the
 * next pick probes it; a probe that fails doubles the back-off, one that
 * completes brings the rail back. */
static void test_pause_probe_and_back_off(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct tent_railset *rs = rail0_paused(s);
    struct tent_rail_ticket tk;
    assert_false(tent_rail_usable(rs, 0));
    uint64_t t0 = tent_now_ns();
    for (int i = 0; i < 50; i++) {
        int r = tent_rail_pick(rs, 4096, false, 0, &tk);
        if (tent_now_ns() - t0 < 25000000ull) /* well inside 30 ms */
            assert_int_equal(r, 1);
        tent_rail_complete(rs, r, 4096, &tk);
    }
    /* after the back-off: the first pick is the probe */
    while (tent_now_ns() - t0 < 35000000ull)
        poll(NULL, 0, 1);
    assert_int_equal(tent_rail_pick(rs, 4096, false, 0, &tk), 0);
    tent_rail_fail(rs, 0, 4096, NULL); /* the probe failed: 60 ms now */
    uint64_t t1 = tent_now_ns();
    for (;;) {
        int r = tent_rail_pick(rs, 4096, false, 0, &tk);
        /* the clock read after the pick: a pick known to be inside the
         * 60 ms back-off (this thread may be descheduled anywhere) */
        uint64_t at = tent_now_ns() - t1;
        if (at < 55000000ull)
            assert_int_equal(r, 1); /* still paused past 30 ms */
        tent_rail_complete(rs, r, 4096, &tk);
        if (at >= 45000000ull)
            break;
        poll(NULL, 0, 1);
    }
    while (tent_now_ns() - t1 < 65000000ull)
        poll(NULL, 0, 1);
    assert_int_equal(tent_rail_pick(rs, 4096, false, 0, &tk), 0);
    tent_rail_complete(rs, 0, 4096, &tk); /* back */
    assert_true(tent_rail_usable(rs, 0));
    /* every rail paused: new work still goes somewhere, retries do not */
    tent_rail_fail(rs, 0, 0, NULL);
    tent_rail_fail(rs, 1, 0, NULL);
    assert_true(tent_rail_pick(rs, 4096, false, 0, &tk) >= 0);
    assert_int_equal(tent_rail_pick(rs, 4096, false, 1u << 0, &tk), -1);
    tent_railset_free(rs);
    tent_sched_free(s);
}

static uint64_t g_clock;
static uint64_t test_clock(void)
{
    return g_clock;
}

static int real_clock(void **state)
{
    (void)state;
    tent_sched_use_clock(NULL);
    return 0;
}

/* A probe that was never posted (the transport released its pick: the
 * provider said FI_EAGAIN) tested nothing: the rail is probed again at
 * the next pick, not left probing forever with nothing in flight. */
static void test_released_probe_probes_again(void **state)
{
    (void)state;
    g_clock = 1000000000ull;
    tent_sched_use_clock(test_clock);
    struct tent_sched *s = tent_sched_new();
    struct tent_railset *rs = rail0_paused(s);
    struct tent_rail_ticket tk;
    g_clock += 40000000ull; /* past the 30 ms back-off */
    assert_int_equal(tent_rail_pick(rs, 4096, false, 0, &tk), 0); /* probe */
    tent_rail_release(rs, 0, 4096, &tk); /* never posted */
    assert_int_equal(tent_rail_pick(rs, 4096, false, 0, &tk), 0); /* again */
    tent_rail_complete(rs, 0, 4096, &tk);
    assert_true(tent_rail_usable(rs, 0));
    tent_railset_free(rs);
    tent_sched_free(s);
}

/* The estimate is the delivery rate: bytes the rail completed over a
 * slice's life.  Eight slices of 1 MiB picked together and completing
 * 10 ms apart read as 100 MiB/s, not as eight bursts. */
static void test_delivery_rate(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct tent_sched_params p = params(); /* learning rate 0.01 */
    struct tent_rail r0 = rail("eth0", 1 * GB);
    struct tent_railset *rs;
    assert_int_equal(tent_railset_new(s, &p, "tcp", "peer", &r0, 1, &rs), 0);
    struct tent_rail_ticket tk[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(tent_rail_pick(rs, 1 << 20, false, 0, &tk[i]), 0);
    uint64_t t0 = tent_now_ns(), t_end = t0;
    for (int i = 0; i < 8; i++) {
        while (tent_now_ns() - t0 < (uint64_t)(i + 1) * 10000000ull)
            poll(NULL, 0, 1);
        tent_rail_complete(rs, 0, 1 << 20, &tk[i]);
        t_end = tent_now_ns();
    }
    struct tent_nic_load l[4];
    assert_int_equal(tent_sched_nic_loads(s, l, 4), 1);
    double mibs = l[0].ewma_bps / (1 << 20);
    /* the true rate of this run: 8 MiB over the time they really took (a
     * loaded machine stretches the 80 ms) */
    double truth = 8.0 / ((double)(t_end - t0) / 1e9);
    print_message("    estimate %.0f MiB/s (true %.0f)\n", mibs, truth);
    assert_in_range((long)(100 * mibs / truth), 75, 105);
    assert_int_equal(l[0].inflight_bytes, 0);
    tent_railset_free(rs);
    tent_sched_free(s);
}

/* Small slices measure the round trip, not the link: a thousand 4 KiB
 * reads of 1 ms each (4 MB/s if they counted) leave a 1 GB/s estimate
 * where it is, so that latency traffic on an idle fast rail does not push
 * bulk work off it.  A 1 MiB slice alone on the rail then counts without
 * that round trip. */
static void test_small_slices_keep_the_estimate(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct tent_sched_params p = params();
    struct tent_rail r0 = rail("eth0", 1 * GB);
    struct tent_railset *rs;
    assert_int_equal(tent_railset_new(s, &p, "tcp", "peer", &r0, 1, &rs), 0);
    struct tent_rail_ticket tk;
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(tent_rail_pick(rs, 4096, false, 0, &tk), 0);
        tk.start_ns -= 1000000; /* it took 1 ms */
        tent_rail_complete(rs, 0, 4096, &tk);
    }
    struct tent_nic_load l[4];
    assert_int_equal(tent_sched_nic_loads(s, l, 4), 1);
    print_message("    after 4 KiB reads: %.3f GB/s\n", l[0].ewma_bps / GB);
    assert_true(l[0].ewma_bps > 0.99 * GB && l[0].ewma_bps < 1.01 * GB);
    /* 1 MiB alone in 3 ms, 1 ms of it the round trip: 0.5 GiB/s, not 0.33 */
    assert_int_equal(tent_rail_pick(rs, 1 << 20, false, 0, &tk), 0);
    tk.start_ns = tent_now_ns() - 3000000; /* 3 ms before now, however
                                              long the pick was ago */
    tent_rail_complete(rs, 0, 1 << 20, &tk);
    assert_int_equal(tent_sched_nic_loads(s, l, 4), 1);
    double gibs = l[0].ewma_bps / (1 << 30);
    print_message("    after 1 MiB alone in 3 ms: %.2f GiB/s\n", gibs);
    assert_true(gibs > 0.45 && gibs < 0.52);
    tent_railset_free(rs);
    tent_sched_free(s);
}

/* A transport whose bulk slices are below 64 KiB (tcp with low_slice_size
 * 32 KiB) says so with sample_min, and its rails learn from them: 32 KiB
 * slices of 1 ms each move a 1 GB/s estimate to about 33 MB/s.  Without
 * it the same slices leave the estimate where it started, as 4 KiB reads
 * do (this was tcp's rails with slices below 64 KiB: they never learned
 * their speed). */
static void test_sample_min_learns_from_small_bulk(void **state)
{
    (void)state;
    for (int with = 0; with < 2; with++) {
        struct tent_sched *s = tent_sched_new();
        struct tent_sched_params p = params();
        p.sample_min = with ? 32 << 10 : 0;
        struct tent_rail r0 = rail("eth0", 1 * GB);
        struct tent_railset *rs;
        assert_int_equal(tent_railset_new(s, &p, "tcp", "peer", &r0, 1, &rs),
                         0);
        struct tent_rail_ticket tk;
        for (int i = 0; i < 1000; i++) {
            assert_int_equal(tent_rail_pick(rs, 32 << 10, false, 0, &tk), 0);
            tk.start_ns = tent_now_ns() - 1000000; /* it took 1 ms */
            tent_rail_complete(rs, 0, 32 << 10, &tk);
        }
        struct tent_nic_load l[4];
        assert_int_equal(tent_sched_nic_loads(s, l, 4), 1);
        double mbs = l[0].ewma_bps / 1e6;
        print_message("    sample_min %s: %.1f MB/s\n",
                      with ? "32 KiB" : "unset", mbs);
        if (with)
            assert_true(mbs > 30 && mbs < 36);
        else
            assert_true(mbs > 990 && mbs < 1010);
        tent_railset_free(rs);
        tent_sched_free(s);
    }
}

/* Per NIC: in-flight bytes summed over its rails; a NIC noted by a
 * transport but without rails shows its starting estimate. */
static void test_nic_loads(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct tent_sched_params p = params();
    p.probe_every = 0;
    tent_sched_note_nic(s, "eth9", 5 * GB);
    struct tent_railset *a = two_rails(s, &p, 1 * GB, 1 * GB);
    struct tent_railset *b = two_rails(s, &p, 1 * GB, 1 * GB);
    struct tent_rail_ticket tk;
    assert_int_equal(tent_rail_pick(a, 1000, false, 1u << 1, &tk), 0);
    assert_int_equal(tent_rail_pick(b, 2000, false, 1u << 1, &tk), 0);
    struct tent_nic_load l[8];
    size_t n = tent_sched_nic_loads(s, l, 8);
    assert_int_equal(n, 3);
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(l[i].name, "eth0")) {
            assert_int_equal(l[i].inflight_bytes, 3000);
            seen |= 1;
        } else if (!strcmp(l[i].name, "eth1")) {
            assert_int_equal(l[i].inflight_bytes, 0);
            seen |= 2;
        } else if (!strcmp(l[i].name, "eth9")) {
            assert_true(l[i].ewma_bps == 5 * GB);
            seen |= 4;
        }
    }
    assert_int_equal(seen, 7);
    assert_int_equal(tent_sched_nic_loads(s, l, 1), 3); /* count beyond room */
    tent_railset_free(a);
    tent_railset_free(b);
    tent_sched_free(s);
}

/* ---- the share meter, on a simulated clock ------------------------------
 *
 * A sender keeps DEPTH slices of 1 MiB in flight, every one picked by the
 * scheduler (avoid 0, as the tcp transport picks); each rail serves its
 * slices in order at its own rate, and hands completions back in bunches
 * of `bunch` (a token bucket's burst, acknowledgements that come
 * together) -- what made the per-slice EWMA swing. */

#define DEPTH 8
#define MIB (1u << 20)

static uint64_t sim_ns;
static uint64_t sim_clock(void)
{
    return sim_ns;
}

struct sim_rail {
    double bps; /* 0: the path is dead, slices wait */
    int bunch;
    double served; /* bytes of the head slices served */
    int done;      /* served, not yet handed back */
    int n;
    struct tent_rail_ticket tk[DEPTH];
};

struct sim {
    struct tent_railset *rs;
    struct sim_rail r[2];
    uint64_t bytes[2];
    int failed; /* rails' slices that failed (picked again) */
};

static void sim_fill(struct sim *m)
{
    while (m->r[0].n + m->r[1].n < DEPTH) {
        struct tent_rail_ticket tk;
        int i = tent_rail_pick(m->rs, MIB, false, 0, &tk);
        assert_true(i == 0 || i == 1);
        m->r[i].tk[m->r[i].n++] = tk;
    }
}

static void sim_pop(struct sim_rail *x, int k)
{
    memmove(x->tk, x->tk + k, (size_t)(x->n - k) * sizeof(x->tk[0]));
    x->n -= k;
}

/* Runs ms milliseconds; each ms, check (when set) sees the set. */
static void sim_run(struct sim *m, int ms,
                    void (*check)(struct sim *m, int ms, void *arg), void *arg)
{
    for (int t = 0; t < ms; t++) {
        sim_ns += 1000000ull;
        for (int i = 0; i < 2; i++) {
            struct sim_rail *x = &m->r[i];
            if (x->n > x->done)
                x->served += x->bps * 1e-3;
            while (x->n > x->done && x->served >= MIB) {
                x->served -= MIB;
                x->done++;
            }
            if (x->n == x->done)
                x->served = 0;
            if (x->done >= x->bunch || (x->done > 0 && x->done == x->n)) {
                for (int k = 0; k < x->done; k++)
                    tent_rail_complete(m->rs, i, MIB, &x->tk[k]);
                m->bytes[i] += (uint64_t)x->done * MIB;
                sim_pop(x, x->done);
                x->done = 0;
            }
        }
        sim_fill(m);
        if (check)
            check(m, t, arg);
    }
}

static void sim_start(struct sim *m, struct tent_sched *s, double bw0,
                      double bw1)
{
    memset(m, 0, sizeof(*m));
    sim_ns = 1000000000ull;
    tent_sched_use_clock(sim_clock);
    struct tent_sched_params p = params();
    m->rs = two_rails(s, &p, bw0, bw1);
    m->r[0].bps = bw0;
    m->r[1].bps = bw1;
    m->r[0].bunch = m->r[1].bunch = 1;
    sim_fill(m);
}

static void sim_end(struct sim *m, struct tent_sched *s)
{
    tent_railset_free(m->rs);
    tent_sched_free(s);
    tent_sched_use_clock(NULL);
}

static void count_slow(struct sim *m, int ms, void *arg)
{
    (void)ms;
    if (!tent_rail_may_take(m->rs, 0))
        (*(int *)arg)++;
}

struct first_slow {
    bool want; /* the state waited for: slow (true) or back (false) */
    int at;    /* the first ms it held, -1 before */
};

static void note_first(struct sim *m, int ms, void *arg)
{
    struct first_slow *f = arg;
    if (f->at < 0 && tent_rail_may_take(m->rs, 0) != f->want)
        f->at = ms;
}

/* A 1 Gbit/s rail beside a 3 Gbit/s one, its completions in bunches of 4
 * and the other's single: the meter keeps it in the picks (it has a third
 * of the other's bandwidth, min_share is a quarter) for 3 s, and it
 * carries its quarter of the bytes.  Throttled to a twentieth, it is
 * slow within a second; given its speed back, it is back in the picks
 * within seconds of probes. */
static void test_meter_holds_a_third(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct sim m;
    sim_start(&m, s, 0.125 * GB, 0.375 * GB);
    m.r[0].bunch = 4;
    int slow_ms = 0;
    sim_run(&m, 3000, count_slow, &slow_ms);
    double share =
        (double)m.bytes[0] / (double)(m.bytes[0] + m.bytes[1]);
    print_message("    1+3 Gbit/s: slow for %d of 3000 ms, share %.3f\n",
                  slow_ms, share);
    assert_int_equal(slow_ms, 0);
    assert_true(share > 0.22 && share < 0.28);

    m.r[0].bps = 0.125 * GB / 20;
    struct first_slow f = {true, -1};
    sim_run(&m, 2000, note_first, &f);
    print_message("    throttled to 1/20: probes only after %d ms\n", f.at);
    assert_true(f.at >= 0 && f.at < 1000);

    m.r[0].bps = 0.375 * GB;
    struct first_slow b = {false, -1};
    sim_run(&m, 10000, note_first, &b);
    print_message("    full speed again: back in the picks after %d ms\n",
                  b.at);
    assert_true(b.at >= 0 && b.at < 6000);
    sim_end(&m, s);
}

/* A path that dies with slices in flight and, seconds later, fails them:
 * its time waiting measured no bandwidth.  Once its probe works, the rail
 * is back in the picks at once, not after seconds of probes (the outage
 * used to be folded into the meter as a rail near zero). */
static void test_meter_skips_an_outage(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct sim m;
    sim_start(&m, s, 0.125 * GB, 0.125 * GB);
    sim_run(&m, 1000, NULL, NULL);
    assert_true(tent_rail_may_take(m.rs, 0));
    m.r[0].bps = 0; /* dead: its slices wait */
    sim_run(&m, 2000, NULL, NULL);
    assert_true(m.r[0].n > 0);
    while (m.r[0].n > 0) { /* the deadline: they fail */
        tent_rail_fail(m.rs, 0, MIB, NULL);
        sim_pop(&m.r[0], 1);
        m.failed++;
    }
    assert_false(tent_rail_usable(m.rs, 0));
    m.r[0].bps = 0.125 * GB; /* the path is back */
    uint64_t before = m.bytes[0];
    struct first_slow b = {false, -1};
    sim_run(&m, 2000, note_first, &b);
    print_message("    %d slices failed; back in the picks %d ms after the "
                  "path, %.0f MiB on it in 2 s\n",
                  m.failed, b.at, (double)(m.bytes[0] - before) / MIB);
    assert_true(tent_rail_usable(m.rs, 0));
    assert_true(b.at >= 0 && b.at < 500); /* back-off 100 ms, one probe */
    /* and it carries its half again */
    assert_true(m.bytes[0] - before > 100 * (uint64_t)MIB);
    sim_end(&m, s);
}

/* ---- pacing the yielding class, on the simulated clock ------------------
 *
 * A LOW stream on rail 0 of a set: 64 KiB slices, eight in flight, served
 * at rate bps (the link's, or what a pace lets through); each ms, a HIGH
 * 4 KiB pick when `high` (latency-critical traffic to the peer). */
struct low_stream {
    struct tent_railset *rs;
    double served;
    int n;
    struct tent_rail_ticket tk[8];
    /* each ms: how often the pace was 0, and how often neither 0 nor
     * within 3% of want (when want is set) */
    double want;
    int zero, other;
};

#define LOW_SLICE (64u << 10)

static void low_run(struct low_stream *ls, int ms, bool high,
                    double (*rate)(double pace, void *arg), void *arg)
{
    for (int t = 0; t < ms; t++) {
        /* what the link served in the last ms */
        sim_ns += 1000000ull;
        double pace = tent_rail_yield_pace(ls->rs, 0, false);
        ls->zero += pace == 0;
        ls->other += ls->want > 0 && pace != 0 &&
                     (pace < 0.97 * ls->want || pace > 1.03 * ls->want);
        ls->served += rate(pace, arg) * 1e-3;
        while (ls->n > 0 && ls->served >= LOW_SLICE) {
            ls->served -= LOW_SLICE;
            tent_rail_complete(ls->rs, 0, LOW_SLICE, &ls->tk[0]);
            memmove(ls->tk, ls->tk + 1,
                    (size_t)(ls->n - 1) * sizeof(ls->tk[0]));
            ls->n--;
        }
        if (ls->n == 0)
            ls->served = 0; /* an idle link saves nothing up */
        if (high) {
            struct tent_rail_ticket tk;
            int i = tent_rail_pick(ls->rs, 4096, false, 2u, &tk);
            assert_int_equal(i, 0);
            tent_rail_complete(ls->rs, 0, 4096, &tk);
        }
        while (ls->n < 8) {
            /* a window goes out: at the pace the rail gives it */
            (void)tent_rail_yield_pace(ls->rs, 0, true);
            int i = tent_rail_pick(ls->rs, LOW_SLICE, true, 2u,
                                   &ls->tk[ls->n]);
            assert_int_equal(i, 0);
            ls->n++;
        }
    }
}

/* What the link delivers: its rate, or 0.85 of the pace when paced below
 * it (the windows' answers leave gaps). */
static double link_rate(double pace, void *arg)
{
    double link = *(double *)arg;
    return pace > 0 && 0.85 * pace < link ? 0.85 * pace : link;
}

/* LOW is paced only while other classes go to the peer, at low_pacing_gain
 * times the capacity measured while it was not: once 0.8 s of LOW alone
 * measured it (a stall among those spans is not the link), and never
 * learned from paced spans, which read the pace (a stream that delivers
 * 0.85 of the pace for 30 s does not drag it down); every 10 s of pacing
 * one span goes unpaced, so a capacity measured too low (or a link that
 * got faster) is corrected under continuous HIGH traffic.  LOW is unpaced
 * a second after the last HIGH pick, and a slower link is learned then.  A
 * known link speed bounds the capacity; a gain of 0 turns pacing off. */
static void test_yield_pace(void **state)
{
    (void)state;
    sim_ns = 1000000000ull;
    tent_sched_use_clock(sim_clock);
    struct tent_sched *s = tent_sched_new();
    struct tent_sched_params p = params();
    p.probe_every = 0;
    p.sample_min = LOW_SLICE;
    double g = p.yield_pace_gain;
    assert_true(g > 0.5 && g < 1);
    struct tent_railset *rs = two_rails(s, &p, 0, 0); /* speeds unknown */
    struct low_stream ls = {.rs = rs};
    /* nothing learned: unpaced, HIGH or not */
    double link = 0.2 * GB;
    low_run(&ls, 500, true, link_rate, &link);
    assert_true(tent_rail_yield_pace(rs, 0, false) == 0);
    /* a stall of 150 ms (a retransmission timeout) is not the link */
    link = 0;
    low_run(&ls, 150, false, link_rate, &link);
    link = 0.2 * GB;
    low_run(&ls, 500, false, link_rate, &link);
    /* HIGH: paced just under the link */
    low_run(&ls, 1, true, link_rate, &link);
    double pace = tent_rail_yield_pace(rs, 0, false);
    print_message("    link 0.2 GB/s: paced at %.4f GB/s\n", pace / GB);
    assert_true(pace > g * 0.97 * link && pace < g * 1.03 * link);
    /* the link was faster all along (the start measured it low): under
     * continuous HIGH the pace holds, not learning from its own spans,
     * until the unpaced span after 10 s measures it */
    link = 0.375 * GB;
    ls.want = pace;
    ls.zero = ls.other = 0;
    low_run(&ls, 9000, true, link_rate, &link);
    assert_int_equal(ls.zero + ls.other, 0);
    ls.want = 0;
    low_run(&ls, 1500, true, link_rate, &link);
    pace = tent_rail_yield_pace(rs, 0, false);
    print_message("    link 0.375 GB/s, relearned under HIGH: paced at %.4f "
                  "GB/s\n",
                  pace / GB);
    assert_true(pace > g * 0.97 * link && pace < g * 1.03 * link);
    /* 30 s paced, delivering 0.85 of the pace: it holds, unpaced for a
     * span of 100 ms busy once in 10 s */
    ls.want = pace;
    ls.zero = ls.other = 0;
    low_run(&ls, 30000, true, link_rate, &link);
    print_message("    30 s paced: %d ms unpaced (relearning), %d ms at "
                  "another pace\n",
                  ls.zero, ls.other);
    assert_int_equal(ls.other, 0);
    assert_true(ls.zero > 0 && ls.zero <= 600);
    ls.want = 0;
    /* the link slows to 0.1 GB/s under HIGH: the pace is not dragged down
     * by its own spans; no HIGH for a second: unpaced, and within 1.7 s of
     * LOW alone the capacity is the new one */
    link = 0.1 * GB;
    low_run(&ls, 1000, true, link_rate, &link);
    double held = tent_rail_yield_pace(rs, 0, false);
    assert_true(held == 0 || (held > 0.97 * pace && held < 1.03 * pace));
    low_run(&ls, 1001, false, link_rate, &link);
    assert_true(tent_rail_yield_pace(rs, 0, false) == 0);
    low_run(&ls, 1700, false, link_rate, &link);
    low_run(&ls, 1, true, link_rate, &link);
    double slow = tent_rail_yield_pace(rs, 0, false);
    print_message("    link down to 0.1 GB/s, HIGH again: paced at %.4f "
                  "GB/s\n",
                  slow / GB);
    assert_true(slow > g * 0.97 * link && slow < g * 1.03 * link);
    tent_railset_free(rs);

    /* a known link speed does not pace what was never measured (pacing
     * from the first window on, the first paced span was all it learned:
     * 0.58 of the link in rails_bench's (d), whose veths say 10 Gbit/s),
     * and it bounds what is learned */
    rs = two_rails(s, &p, 0.25 * GB, 0.25 * GB);
    ls = (struct low_stream){.rs = rs};
    link = 0.375 * GB;
    low_run(&ls, 5, true, link_rate, &link);
    assert_true(tent_rail_yield_pace(rs, 0, false) == 0);
    low_run(&ls, 1500, false, link_rate, &link);
    low_run(&ls, 1, true, link_rate, &link);
    pace = tent_rail_yield_pace(rs, 0, false);
    assert_true(pace > g * 0.25 * GB * 0.999 && pace < g * 0.25 * GB * 1.001);
    tent_railset_free(rs);
    /* gain 0: never paced */
    p.yield_pace_gain = 0;
    rs = two_rails(s, &p, 1.25 * GB, 1.25 * GB);
    ls = (struct low_stream){.rs = rs};
    low_run(&ls, 1500, false, link_rate, &link);
    low_run(&ls, 1, true, link_rate, &link);
    assert_true(tent_rail_yield_pace(rs, 0, false) == 0);
    tent_railset_free(rs);
    tent_sched_free(s);
}

/* Out-of-range keys are refused naming the key. */
static void test_params(void **state)
{
    (void)state;
    struct tent_config *cfg;
    assert_int_equal(tent_config_new_empty(&cfg), 0);
    assert_int_equal(
        tent_config_set(cfg, "transports/tcp/bandwidth_learning_rate", "1.5"),
        0);
    struct tent_sched_params p;
    assert_int_equal(tent_sched_params_load(cfg, "transports/tcp", &p),
                     TENT_ECONFIG);
    assert_non_null(strstr(tent_last_error(), "bandwidth_learning_rate"));
    tent_config_free(cfg);
}

/* Promotion, as every transport's queues apply it: one class higher per
 * timeout a queue waited, never above HIGH, none with a timeout of 0; a
 * queue waits since the later of its head's arrival and its last service;
 * between equal classes the one that waited longer goes first, so a
 * promoted LOW queue is not held back by newer HIGH requests. */
static void test_promotion(void **state)
{
    (void)state;
    const uint64_t ms = 1000000;
    assert_int_equal(tent_prio_effective(TENT_PRIO_LOW, 100 * ms, 100 * ms, 10 * ms), TENT_PRIO_LOW);
    assert_int_equal(tent_prio_effective(TENT_PRIO_LOW, 100 * ms, 109 * ms, 10 * ms), TENT_PRIO_LOW);
    assert_int_equal(tent_prio_effective(TENT_PRIO_LOW, 100 * ms, 110 * ms, 10 * ms), TENT_PRIO_MEDIUM);
    assert_int_equal(tent_prio_effective(TENT_PRIO_LOW, 100 * ms, 120 * ms, 10 * ms), TENT_PRIO_HIGH);
    assert_int_equal(tent_prio_effective(TENT_PRIO_LOW, 100 * ms, 900 * ms, 10 * ms), TENT_PRIO_HIGH);
    assert_int_equal(tent_prio_effective(TENT_PRIO_MEDIUM, 100 * ms, 115 * ms, 10 * ms), TENT_PRIO_HIGH);
    assert_int_equal(tent_prio_effective(TENT_PRIO_LOW, 100 * ms, 900 * ms, 0), TENT_PRIO_LOW);
    /* a clock that went back: no promotion */
    assert_int_equal(tent_prio_effective(TENT_PRIO_LOW, 100 * ms, 50 * ms, 10 * ms), TENT_PRIO_LOW);
    assert_int_equal(tent_prio_since(100 * ms, 0), 100 * ms);
    assert_int_equal(tent_prio_since(100 * ms, 130 * ms), 130 * ms);
    /* a LOW queue served 5 ms ago is not promoted, whatever its head's age */
    assert_int_equal(tent_prio_effective(TENT_PRIO_LOW, tent_prio_since(0, 135 * ms), 140 * ms, 10 * ms), TENT_PRIO_LOW);
    const uint64_t I = TENT_PRIO_IDLE;
    uint64_t none[3] = {I, I, I}, low_only[3] = {I, I, 100 * ms};
    assert_int_equal(tent_prio_pick(none, 200 * ms, 10 * ms), -1);
    assert_int_equal(tent_prio_pick(low_only, 101 * ms, 10 * ms), TENT_PRIO_LOW);
    /* HIGH before LOW that waited less than two timeouts */
    uint64_t both[3] = {150 * ms, I, 100 * ms};
    assert_int_equal(tent_prio_pick(both, 115 * ms, 10 * ms), TENT_PRIO_HIGH);
    /* LOW waited two timeouts: HIGH too, and LOW has waited longer */
    assert_int_equal(tent_prio_pick(both, 160 * ms, 10 * ms), TENT_PRIO_LOW);
    /* no promotion: HIGH always */
    assert_int_equal(tent_prio_pick(both, 900 * ms, 0), TENT_PRIO_HIGH);
    /* MEDIUM promoted to HIGH ties HIGH; the one that waited longer wins */
    uint64_t hm[3] = {130 * ms, 100 * ms, I}, mh[3] = {100 * ms, 105 * ms, I};
    assert_int_equal(tent_prio_pick(hm, 131 * ms, 10 * ms), TENT_PRIO_MEDIUM);
    assert_int_equal(tent_prio_pick(mh, 131 * ms, 10 * ms), TENT_PRIO_HIGH);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spray_follows_bandwidth),
        cmocka_unit_test(test_high_counts_low_on_the_wire_only),
        cmocka_unit_test(test_promotion),
        cmocka_unit_test(test_slow_rail_gets_probes_only),
        cmocka_unit_test(test_small_slices_do_not_probe),
        cmocka_unit_test(test_idle_rail_keeps_requests),
        cmocka_unit_test(test_pause_probe_and_back_off),
        cmocka_unit_test_teardown(test_released_probe_probes_again,
                                  real_clock),
        cmocka_unit_test(test_delivery_rate),
        cmocka_unit_test(test_small_slices_keep_the_estimate),
        cmocka_unit_test(test_sample_min_learns_from_small_bulk),
        cmocka_unit_test(test_nic_loads),
        cmocka_unit_test(test_meter_holds_a_third),
        cmocka_unit_test(test_meter_skips_an_outage),
        cmocka_unit_test(test_yield_pace),
        cmocka_unit_test(test_params),
    };
    return cmocka_run_group_tests_name("rails", tests, NULL, NULL);
}
