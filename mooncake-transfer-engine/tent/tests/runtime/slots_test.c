/* TENT's priority slots shared between the processes of a host
 * (sched/slots.h): two real processes map one region; the slot and the
 * classes' activity one publishes the other reads; and a LOW stream's
 * pacing on the rails honours HIGH traffic another process sends, which
 * without the shared region it never sees. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "sched/rails.h"
#include "sched/slots.h"
#include "tent/transfer_engine.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static char shm_name[64];

static int setup(void **state)
{
    (void)state;
    snprintf(shm_name, sizeof(shm_name), "/tent_slots_test_%d", (int)getpid());
    shm_unlink(shm_name);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    shm_unlink(shm_name);
    tent_sched_use_clock(NULL);
    return 0;
}

/* What the other process saw and did. */
struct child_report {
    int rc;
    int interval_ms;
    uint64_t noted_ns;
    int slot_at[6];
};

/* Runs fn in a forked process (its own address space: it maps the region
 * by name itself) and returns its report. */
static struct child_report in_other_process(void (*fn)(struct child_report *))
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        struct child_report r = {0};
        fn(&r);
        ssize_t w = write(fds[1], &r, sizeof(r));
        _exit(w == (ssize_t)sizeof(r) ? 0 : 1);
    }
    close(fds[1]);
    struct child_report r;
    assert_int_equal(read(fds[0], &r, sizeof(r)), (ssize_t)sizeof(r));
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return r;
}

/* The other process: opens the region with another interval, sends HIGH. */
static void child_sends_high(struct child_report *r)
{
    struct tent_slots *s = NULL;
    r->rc = tent_slots_open(shm_name, 50, &s);
    if (r->rc)
        return;
    r->interval_ms = tent_slots_interval_ms(s);
    r->noted_ns = tent_now_ns();
    tent_slots_note(s, 0, r->noted_ns);
    for (int k = 0; k < 6; k++)
        r->slot_at[k] = tent_slots_current(s, (uint64_t)k * 2000000ull + 1);
    tent_slots_close(s);
}

static void test_two_processes_share_the_slot(void **state)
{
    (void)state;
    struct tent_slots *s = NULL;
    assert_int_equal(tent_slots_open(shm_name + 1, 2, &s), TENT_OK);
    uint64_t now = tent_now_ns();
    /* nobody sent HIGH yet */
    assert_false(tent_slots_busy(s, 2, now, 1000000000ull));
    struct child_report r = in_other_process(child_sends_high);
    assert_int_equal(r.rc, TENT_OK);
    /* the creator's interval is the host's */
    assert_int_equal(r.interval_ms, 2);
    /* TENT's rotation: HIGH only, then HIGH + MEDIUM, then all */
    const int want[6] = {0, 1, 2, 0, 1, 2};
    for (int k = 0; k < 6; k++) {
        assert_int_equal(r.slot_at[k], want[k]);
        uint64_t t = (uint64_t)k * 2000000ull + 1;
        assert_int_equal(tent_slots_current(s, t), want[k]);
        assert_true(tent_slots_allows(s, 0, t));
        assert_int_equal(tent_slots_allows(s, 2, t), want[k] == 2);
    }
    /* its HIGH is what this process sees */
    now = tent_now_ns();
    assert_true(tent_slots_last_above(s, 2) == r.noted_ns);
    assert_true(tent_slots_busy(s, 2, now, 1000000000ull));
    assert_true(tent_slots_busy(s, 1, now, 1000000000ull));
    assert_false(tent_slots_busy(s, 0, now, 1000000000ull));
    assert_false(tent_slots_busy(s, 2, r.noted_ns + 2000000000ull,
                                 1000000000ull));
    tent_slots_close(s);
}

static void test_bad_names(void **state)
{
    (void)state;
    struct tent_slots *s = NULL;
    assert_int_equal(tent_slots_open("/a/b", 2, &s), TENT_EINVAL);
    assert_non_null(strstr(tent_last_error(), "shared_quota_shm_path"));
    assert_int_equal(tent_slots_open(shm_name, 0, &s), TENT_EINVAL);
    assert_non_null(strstr(tent_last_error(), "slot_rotation_interval_ms"));
    /* a region holding something else is refused, naming it */
    int fd = shm_open(shm_name, O_RDWR | O_CREAT, 0600);
    assert_true(fd >= 0);
    char junk[256];
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    close(fd);
    assert_int_equal(tent_slots_open(shm_name, 2, &s), TENT_EIO);
    assert_non_null(strstr(tent_last_error(), shm_name));
}

/* ---- LOW pacing on the rails ------------------------------------------ */

static uint64_t sim_ns;
static uint64_t sim_clock(void)
{
    return sim_ns;
}

#define LOW_SLICE (64u << 10)

/* A LOW stream on rail 0: eight 64 KiB slices in flight, served at link
 * bytes/s, for ms simulated milliseconds; no HIGH of this process. */
static void low_alone(struct tent_railset *rs, int ms, double link)
{
    struct tent_rail_ticket tk[8];
    int n = 0;
    double served = 0;
    for (int t = 0; t < ms; t++) {
        sim_ns += 1000000ull;
        served += link * 1e-3;
        while (n > 0 && served >= LOW_SLICE) {
            served -= LOW_SLICE;
            tent_rail_complete(rs, 0, LOW_SLICE, &tk[0]);
            memmove(tk, tk + 1, (size_t)(n - 1) * sizeof(tk[0]));
            n--;
        }
        while (n < 8) {
            (void)tent_rail_yield_pace(rs, 0, true);
            assert_int_equal(tent_rail_pick(rs, LOW_SLICE, true, 0, &tk[n]),
                             0);
            n++;
        }
    }
    for (int k = 0; k < n; k++)
        tent_rail_release(rs, 0, LOW_SLICE, &tk[k]);
}

/* The pace of a LOW stream that measured its link, after another process
 * sent HIGH (with the shared region: shm set) or not. */
static double pace_after_other_high(bool shm)
{
    struct tent_config *cfg;
    assert_int_equal(tent_config_new_empty(&cfg), 0);
    if (shm)
        assert_int_equal(tent_config_set(cfg,
                                         "transports/tcp/shared_quota_shm_path",
                                         shm_name),
                         TENT_OK);
    struct tent_sched_params p;
    assert_int_equal(tent_sched_params_load(cfg, "transports/tcp", &p), 0);
    tent_config_free(cfg);
    assert_int_equal(p.slot_interval_ms, 2); /* TENT's default */
    p.probe_every = 0;
    p.sample_min = LOW_SLICE;
    sim_ns = 1000000000ull;
    tent_sched_use_clock(sim_clock);
    struct tent_sched *s = tent_sched_new();
    struct tent_rail r;
    memset(&r, 0, sizeof(r));
    snprintf(r.peer_host, sizeof(r.peer_host), "10.0.0.1");
    r.peer_port = 1000;
    struct tent_railset *rs;
    assert_int_equal(tent_railset_new(s, &p, "tcp", "peer", &r, 1, &rs), 0);
    assert_true((tent_railset_slots(rs) != NULL) == shm);
    double link = 0.2e9;
    low_alone(rs, 1500, link); /* the capacity is learned */
    /* no HIGH on the host: LOW unpaced */
    assert_true(tent_rail_yield_pace(rs, 0, false) == 0);
    struct child_report c = in_other_process(child_sends_high);
    assert_int_equal(c.rc, TENT_OK);
    double pace = tent_rail_yield_pace(rs, 0, false);
    tent_railset_free(rs);
    tent_sched_free(s);
    tent_sched_use_clock(NULL);
    return pace;
}

static void test_low_pacing_sees_another_process(void **state)
{
    (void)state;
    double g = 0.9, link = 0.2e9; /* low_pacing_gain's default */
    double pace = pace_after_other_high(true);
    print_message("    with the shared slots: LOW paced at %.4f GB/s\n",
                  pace / 1e9);
    assert_true(pace > g * 0.97 * link && pace < g * 1.03 * link);
    shm_unlink(shm_name);
    /* without them the other process's HIGH goes unseen */
    assert_true(pace_after_other_high(false) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_processes_share_the_slot,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_low_pacing_sees_another_process,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
