/* The rail scheduler (sched/rails.c) on its own: TENT's slice spraying by
 * least predicted completion time, probes, slow rails kept to probes,
 * paused rails and their back-off, the delivery-rate estimate, and the
 * per-NIC figures of tent_get_nic_load_stats.  No network: rails are
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
        int r = tent_rail_pick(rs, 1 << 20, 0, &tk);
        assert_true(r == 0 || r == 1);
        n[r]++;
    }
    print_message("    1 and 3 GB/s rails: %d and %d slices\n", n[0], n[1]);
    assert_in_range(n[0], 95, 105);
    assert_in_range(n[1], 295, 305);
    /* avoiding a rail sends everything to the other */
    for (int i = 0; i < 10; i++)
        assert_int_equal(tent_rail_pick(rs, 1 << 20, 1u << 1, &tk), 0);
    tent_railset_free(rs);
    tent_sched_free(s);
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
        int r = tent_rail_pick(rs, 1 << 20, 0, &tk);
        n[r]++;
        tent_rail_complete(rs, r, 1 << 20, &tk); /* keep in flight at 0 */
    }
    print_message("    0.2 and 1 GB/s rails: %d and %d slices\n", n[0], n[1]);
    assert_in_range(n[0], 4, 6); /* half the 10 probes */
    assert_false(tent_rail_may_take(rs, 0));
    assert_true(tent_rail_may_take(rs, 1));
    tent_railset_free(rs);
    tent_sched_free(s);
}

/* A failed rail is paused: picks avoid it; when its back-off runs out the
 * next pick probes it; a probe that fails doubles the back-off, one that
 * completes brings the rail back. */
static void test_pause_probe_and_back_off(void **state)
{
    (void)state;
    struct tent_sched *s = tent_sched_new();
    struct tent_sched_params p = params();
    p.probe_every = 0;
    p.backoff_min_ms = 30;
    p.backoff_max_ms = 200;
    struct tent_railset *rs = two_rails(s, &p, 1 * GB, 1 * GB);
    struct tent_rail_ticket tk;
    assert_int_equal(tent_rail_pick(rs, 4096, 1u << 1, &tk), 0);
    tent_rail_fail(rs, 0, 4096);
    assert_false(tent_rail_usable(rs, 0));
    uint64_t t0 = tent_now_ns();
    for (int i = 0; i < 50; i++) {
        int r = tent_rail_pick(rs, 4096, 0, &tk);
        if (tent_now_ns() - t0 < 25000000ull) /* well inside 30 ms */
            assert_int_equal(r, 1);
        tent_rail_complete(rs, r, 4096, &tk);
    }
    /* after the back-off: the first pick is the probe */
    while (tent_now_ns() - t0 < 35000000ull)
        poll(NULL, 0, 1);
    assert_int_equal(tent_rail_pick(rs, 4096, 0, &tk), 0);
    tent_rail_fail(rs, 0, 4096); /* the probe failed: 60 ms now */
    uint64_t t1 = tent_now_ns();
    for (;;) {
        int r = tent_rail_pick(rs, 4096, 0, &tk);
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
    assert_int_equal(tent_rail_pick(rs, 4096, 0, &tk), 0);
    tent_rail_complete(rs, 0, 4096, &tk); /* back */
    assert_true(tent_rail_usable(rs, 0));
    /* every rail paused: new work still goes somewhere, retries do not */
    tent_rail_fail(rs, 0, 0);
    tent_rail_fail(rs, 1, 0);
    assert_true(tent_rail_pick(rs, 4096, 0, &tk) >= 0);
    assert_int_equal(tent_rail_pick(rs, 4096, 1u << 0, &tk), -1);
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
        assert_int_equal(tent_rail_pick(rs, 1 << 20, 0, &tk[i]), 0);
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
        assert_int_equal(tent_rail_pick(rs, 4096, 0, &tk), 0);
        tk.start_ns -= 1000000; /* it took 1 ms */
        tent_rail_complete(rs, 0, 4096, &tk);
    }
    struct tent_nic_load l[4];
    assert_int_equal(tent_sched_nic_loads(s, l, 4), 1);
    print_message("    after 4 KiB reads: %.3f GB/s\n", l[0].ewma_bps / GB);
    assert_true(l[0].ewma_bps > 0.99 * GB && l[0].ewma_bps < 1.01 * GB);
    /* 1 MiB alone in 3 ms, 1 ms of it the round trip: 0.5 GiB/s, not 0.33 */
    assert_int_equal(tent_rail_pick(rs, 1 << 20, 0, &tk), 0);
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
    assert_int_equal(tent_rail_pick(a, 1000, 1u << 1, &tk), 0);
    assert_int_equal(tent_rail_pick(b, 2000, 1u << 1, &tk), 0);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spray_follows_bandwidth),
        cmocka_unit_test(test_slow_rail_gets_probes_only),
        cmocka_unit_test(test_pause_probe_and_back_off),
        cmocka_unit_test(test_delivery_rate),
        cmocka_unit_test(test_small_slices_keep_the_estimate),
        cmocka_unit_test(test_nic_loads),
        cmocka_unit_test(test_params),
    };
    return cmocka_run_group_tests_name("rails", tests, NULL, NULL);
}
