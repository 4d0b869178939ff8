/* Transport selection through the public API: the registration order without
 * a policy, TENT's "policy" rules (segment_type, priority, min/max size,
 * transports in order), transport_hint, and which transports are candidates
 * at all (installed, enabled, capable, able to reach the target). */
#include "test_util.h"

#include <cmocka.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define LEN 8192

/* Submits one request and waits for it; returns its final status. */
#define run_one(e, r, st) run_one_at(TU_HERE, e, r, st)
static int run_one_at(struct tu_at at, tent_engine_t e, tent_request_t *r,
                      tent_status_t *st)
{
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    at_int_not_equal(at, b, TENT_INVALID_BATCH_ID);
    int rc = tent_submit(e, b, r, 1);
    if (rc == TENT_OK) {
        at_int_equal(at, tu_wait_task(e, b, 0, st, 2000), TENT_OK);
        at_int_not_equal(at, st->status, STATUS_PENDING);
    }
    at_int_equal(at, tent_free_batch(e, b), TENT_OK);
    return rc;
}

/* run_one of r, which must be accepted and end in status want. */
#define run_one_ends(e, r, want) run_one_ends_at(TU_HERE, e, r, want)
static void run_one_ends_at(struct tu_at at, tent_engine_t e, tent_request_t *r,
                            int want)
{
    tent_status_t st;
    at_int_equal(at, run_one_at(at, e, r, &st), TENT_OK);
    at_int_equal(at, st.status, want);
}

/* The fixture with the three fakes and this policy. */
#define open_with_policy(policy)                                               \
    tu_fx_open(TU_LIST("fake_a", "fake_b", "fake_c"),                          \
               TU_LIST("policy", policy), LEN)

static void test_no_policy_uses_registration_order(void **state)
{
    (void)state;
    struct tu_fx f =
        tu_fx_open(TU_LIST("fake_a", "fake_b", "fake_c"), NULL, LEN);
    tent_request_t r = tu_write(&f.p, 0, LEN);
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[0].submitted, 1);
    assert_int_equal(fake_stats[1].submitted, 0);
    assert_int_equal(fake_stats[2].submitted, 0);
    assert_memory_equal(f.p.src, f.p.dst, LEN);
    tu_fx_close(&f);

    /* Without fake_a the next one in registration order serves. */
    fake_transports_reset();
    f = tu_fx_open(TU_LIST("fake_c", "fake_b"), NULL, LEN);
    r = tu_write(&f.p, 0, LEN);
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[1].submitted, 1);
    assert_int_equal(fake_stats[2].submitted, 0);
    tu_fx_close(&f);
}

/* A buffer registered with one transport only is served by that one. */
static void test_buffer_registered_with_one_transport(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a", "fake_b");
    assert_non_null(e);
    struct tu_bufs p = {.src = aligned_alloc(4096, LEN),
                        .dst = aligned_alloc(4096, LEN),
                        .len = LEN};
    memset(p.src, 0x11, LEN);
    memset(p.dst, 0, LEN);
    tent_memory_options_t o;
    memset(&o, 0, sizeof(o));
    o.permission = PERM_GLOBAL_READ_WRITE;
    o.transport_type = FAKE_B_TYPE;
    assert_int_equal(tent_register_memory_ex(e, p.src, LEN, &o), TENT_OK);
    assert_int_equal(fake_stats[0].buffers, 0);
    assert_int_equal(fake_stats[1].buffers, 1);
    assert_int_equal(tent_register_memory(e, p.dst, LEN), TENT_OK);
    tent_request_t r = tu_write(&p, 0, LEN);
    run_one_ends(e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[0].submitted, 0);
    assert_int_equal(fake_stats[1].submitted, 1);
    /* And it has no failover target: fake_b failing is final. */
    fake_behavior[1].fail_completion = true;
    run_one_ends(e, &r, STATUS_FAILED);
    assert_int_equal(fake_stats[0].submitted, 0);
    tu_bufs_fini(e, &p);
    assert_int_equal(fake_stats[1].buffers, 0);
    tent_destroy_engine(e);
}

static void test_policy_by_size(void **state)
{
    (void)state;
    struct tu_fx f = open_with_policy(
        "[{\"name\":\"small\",\"segment_type\":\"memory\",\"max_size\":"
        "1024,\"transports\":[\"fake_b\",\"fake_a\"]},"
        "{\"name\":\"big\",\"segment_type\":\"memory\",\"min_size\":4096,"
        "\"transports\":[\"fake_c\",\"fake_a\"]}]");
    tent_status_t st;
    tent_request_t r = tu_write(&f.p, 0, 1024); /* max_size is inclusive */
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[1].submitted, 1);
    r = tu_write(&f.p, 0, 4096); /* min_size is inclusive */
    assert_int_equal(run_one(f.e, &r, &st), TENT_OK);
    assert_int_equal(fake_stats[2].submitted, 1);
    r = tu_write(&f.p, 0, 2048); /* no rule: registration order */
    assert_int_equal(run_one(f.e, &r, &st), TENT_OK);
    assert_int_equal(fake_stats[0].submitted, 1);
    assert_int_equal(fake_stats[1].submitted, 1);
    assert_int_equal(fake_stats[2].submitted, 1);
    assert_memory_equal(f.p.src, f.p.dst, 4096);
    tu_fx_close(&f);
}

static void test_policy_by_priority(void **state)
{
    (void)state;
    struct tu_fx f =
        open_with_policy("[{\"segment_type\":\"memory\",\"priority\":\"low\","
                         "\"transports\":[\"fake_c\"]},"
                         "{\"segment_type\":\"memory\",\"priority\":1,"
                         "\"transports\":[\"fake_b\"]}]");
    tent_status_t st;
    tent_request_t r = tu_write(&f.p, 0, 512);
    r.priority = 2;
    assert_int_equal(run_one(f.e, &r, &st), TENT_OK);
    assert_int_equal(fake_stats[2].submitted, 1);
    r.priority = 1;
    assert_int_equal(run_one(f.e, &r, &st), TENT_OK);
    assert_int_equal(fake_stats[1].submitted, 1);
    r.priority = 0;
    assert_int_equal(run_one(f.e, &r, &st), TENT_OK);
    assert_int_equal(fake_stats[0].submitted, 1);
    assert_int_equal(fake_stats[1].submitted, 1);
    assert_int_equal(fake_stats[2].submitted, 1);
    tu_fx_close(&f);
}

/* The first matching rule wins; a "file" rule never matches memory. */
static void test_policy_first_match_and_segment_type(void **state)
{
    (void)state;
    struct tu_fx f = open_with_policy(
        "[{\"segment_type\":\"file\",\"transports\":[\"fake_a\"]},"
        "{\"segment_type\":\"memory\",\"transports\":[\"fake_c\"]},"
        "{\"segment_type\":\"memory\",\"transports\":[\"fake_b\"]}]");
    tent_request_t r = tu_write(&f.p, 0, LEN);
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[0].submitted, 0);
    assert_int_equal(fake_stats[1].submitted, 0);
    assert_int_equal(fake_stats[2].submitted, 1);
    tu_fx_close(&f);
}

/* The rule's list is the failover order, and only its transports are
 * candidates. */
static void test_policy_order_is_failover_order(void **state)
{
    (void)state;
    struct tu_fx f =
        open_with_policy("[{\"segment_type\":\"memory\",\"transports\":["
                         "\"fake_c\",\"fake_a\"]}]");
    fake_behavior[2].fail_completion = true;
    tent_request_t r = tu_write(&f.p, 0, LEN);
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].failed, 1);
    assert_int_equal(fake_stats[0].completed, 1);
    assert_int_equal(fake_stats[1].submitted, 0);
    /* Both listed ones fail: fake_b, not in the rule, is never tried. */
    fake_behavior[0].fail_completion = true;
    run_one_ends(f.e, &r, STATUS_FAILED);
    assert_int_equal(fake_stats[1].submitted, 0);
    tu_fx_close(&f);
}

static void test_hint_pins_first_attempt(void **state)
{
    (void)state;
    struct tu_fx f =
        open_with_policy("[{\"segment_type\":\"memory\",\"transports\":["
                         "\"fake_a\",\"fake_b\"]}]");
    tent_request_t r = tu_write(&f.p, 0, LEN);
    r.transport_hint = FAKE_C_TYPE;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].submitted, 1);
    assert_int_equal(fake_stats[0].submitted, 0);
    /* The hinted one fails: failover continues with the policy order. */
    fake_behavior[2].fail_completion = true;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].submitted, 2);
    assert_int_equal(fake_stats[0].completed, 1);
    tu_fx_close(&f);
}

/* A hint naming a transport that is also in the rule: it goes first and is
 * not tried a second time by failover. */
static void test_hint_excluded_after_failure(void **state)
{
    (void)state;
    struct tu_fx f =
        open_with_policy("[{\"segment_type\":\"memory\",\"transports\":["
                         "\"fake_a\",\"fake_b\"]}]");
    fake_behavior[0].fail_completion = true;
    fake_behavior[1].fail_completion = true;
    tent_request_t r = tu_write(&f.p, 0, LEN);
    r.transport_hint = FAKE_B_TYPE;
    run_one_ends(f.e, &r, STATUS_FAILED);
    assert_int_equal(fake_stats[1].submitted, 1); /* first, once */
    assert_int_equal(fake_stats[0].submitted, 1); /* then the rule's next */
    assert_int_equal(fake_stats[2].submitted, 0);
    tu_fx_close(&f);
}

/* A hint for a transport that is not installed falls back to selection. */
static void test_hint_not_installed_falls_back(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b"), NULL, LEN);
    tent_request_t r = tu_write(&f.p, 0, LEN);
    r.transport_hint = FAKE_C_TYPE;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    r.transport_hint = TRANSPORT_RDMA;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[0].submitted, 2);
    assert_int_equal(fake_stats[2].submitted, 0);
    tu_fx_close(&f);
}

static void test_only_installed_transports(void **state)
{
    (void)state;
    fake_behavior[2].fail_install = true;
    struct tu_fx f =
        open_with_policy("[{\"segment_type\":\"memory\",\"transports\":["
                         "\"fake_c\",\"fake_b\"]}]");
    assert_int_equal(fake_stats[2].installs, 1);
    assert_int_equal(tent_available(f.e), 1);
    assert_int_equal(fake_stats[2].buffers, 0);
    tent_status_t st;
    tent_request_t r = tu_write(&f.p, 0, LEN);
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].submitted, 0);
    assert_int_equal(fake_stats[1].submitted, 1);
    /* A hint at the uninstalled one does not resurrect it. */
    r.transport_hint = FAKE_C_TYPE;
    assert_int_equal(run_one(f.e, &r, &st), TENT_OK);
    assert_int_equal(fake_stats[2].submitted, 0);
    assert_int_equal(fake_stats[1].submitted, 2);
    tu_fx_close(&f);
}

static void test_disabled_transport_is_no_candidate(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(
        TU_LIST("fake_b"),
        TU_LIST("policy", "[{\"segment_type\":\"memory\","
                          "\"transports\":[\"fake_a\",\"fake_b\"]}]"),
        LEN);
    assert_int_equal(fake_stats[0].installs, 0);
    tent_request_t r = tu_write(&f.p, 0, LEN);
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[1].submitted, 1);
    tu_fx_close(&f);
}

static void test_only_capable_transports(void **state)
{
    (void)state;
    struct tu_fx f = tu_fx_open(TU_LIST("fake_a", "fake_b"), NULL, LEN);
    /* fake_a moves device memory only: host-to-host goes to fake_b. */
    fake_behavior[0].caps = TENT_CAP_DEVICE_TO_DEVICE;
    tent_request_t r = tu_write(&f.p, 0, LEN);
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[0].submitted, 0);
    assert_int_equal(fake_stats[1].submitted, 1);
    /* fake_b cannot reach the target either: nobody can serve it. */
    fake_behavior[1].unreachable = true;
    tent_batch_id_t b = tent_allocate_batch(f.e, 1);
    assert_int_equal(tent_submit(f.e, b, &r, 1), TENT_ENOTRANSPORT);
    assert_contains(tent_last_error(), "no installed transport");
    size_t n = 1;
    tent_status_t sl[1];
    assert_int_equal(tent_task_status_list(f.e, b, sl, &n), TENT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tent_free_batch(f.e, b), TENT_OK);
    /* fake_b reachable again but fake_a has no caps at all. */
    fake_behavior[1].unreachable = false;
    fake_behavior[0].caps = 0;
    fake_behavior[1].fail_completion = true;
    run_one_ends(f.e, &r, STATUS_FAILED); /* no failover to fake_a */
    assert_int_equal(fake_stats[0].submitted, 0);
    tu_fx_close(&f);
}

/* intent_type: a rule with an intent matches only requests of that intent
 * (names or numbers); a rule without one matches every intent. */
static void test_policy_by_intent(void **state)
{
    (void)state;
    struct tu_fx f = open_with_policy(
        "[{\"name\":\"fg\",\"segment_type\":\"memory\",\"intent_type\":"
        "\"foreground_get\",\"transports\":[\"fake_c\"]},"
        "{\"name\":\"ckpt\",\"segment_type\":\"memory\",\"intent_type\":4,"
        "\"transports\":[\"fake_b\"]},"
        "{\"name\":\"rest\",\"segment_type\":\"memory\","
        "\"transports\":[\"fake_a\"]}]");
    tent_request_t r = tu_write(&f.p, 0, LEN);
    r.intent_type = TENT_INTENT_FOREGROUND_GET;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].submitted, 1);
    r.intent_type = TENT_INTENT_CHECKPOINT;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[1].submitted, 1);
    r.intent_type = TENT_INTENT_UNSPEC;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    r.intent_type = TENT_INTENT_MIGRATION;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[0].submitted, 2);
    /* not an intent: refused at submit, naming the field */
    r.intent_type = 7;
    tent_batch_id_t b = tent_allocate_batch(f.e, 1);
    assert_int_equal(tent_submit(f.e, b, &r, 1), TENT_EINVAL);
    assert_contains(tent_last_error(), "intent_type");
    assert_int_equal(tent_free_batch(f.e, b), TENT_OK);
    tu_fx_close(&f);
}

/* policy_name picks its rule ahead of every filter (here the size and
 * priority of the rule would not match); a name that no rule of the
 * segment's type has fails the request at submit. */
static void test_policy_name_overrides_filters(void **state)
{
    (void)state;
    struct tu_fx f = open_with_policy(
        "[{\"name\":\"tiny\",\"segment_type\":\"memory\",\"max_size\":16,"
        "\"priority\":\"low\",\"transports\":[\"fake_c\"]},"
        "{\"name\":\"files\",\"segment_type\":\"file\","
        "\"transports\":[\"fake_b\"]},"
        "{\"name\":\"rest\",\"segment_type\":\"memory\","
        "\"transports\":[\"fake_b\"]}]");
    tent_request_t r = tu_write(&f.p, 0, LEN);
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[1].submitted, 1);
    char name[8] = "tiny";
    r.policy_name = name;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].submitted, 1);
    r.policy_name = "files"; /* a file rule, not one for memory */
    tent_batch_id_t b = tent_allocate_batch(f.e, 1);
    assert_int_equal(tent_submit(f.e, b, &r, 1), TENT_EINVAL);
    assert_contains(tent_last_error(), "policy_name 'files'");
    r.policy_name = "nope";
    assert_int_equal(tent_submit(f.e, b, &r, 1), TENT_EINVAL);
    assert_int_equal(tent_free_batch(f.e, b), TENT_OK);
    r.policy_name = "";
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[1].submitted, 2);
    tu_fx_close(&f);
}

/* Rules TENT would not use are skipped, with the engine still created: the
 * rules after them apply.  An unknown transport is left out of its rule's
 * list, the rule stays. */
static void test_invalid_rules_skipped(void **state)
{
    (void)state;
    struct tu_fx f = open_with_policy(
        "[3,"
        "{\"name\":\"no_type\",\"transports\":[\"fake_c\"]},"
        "{\"name\":\"bad_intent\",\"segment_type\":\"memory\","
        "\"intent_type\":\"gossip\",\"transports\":[\"fake_c\"]},"
        "{\"name\":\"bad_prio\",\"segment_type\":\"memory\","
        "\"priority\":\"urgent\",\"transports\":[\"fake_c\"]},"
        "{\"name\":\"bad_size\",\"segment_type\":\"memory\",\"min_size\":4096,"
        "\"max_size\":1024,\"transports\":[\"fake_c\"]},"
        "{\"name\":\"good\",\"segment_type\":\"memory\","
        "\"transports\":[\"bogus\",\"fake_b\"]}]");
    tent_request_t r = tu_write(&f.p, 0, LEN);
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].submitted, 0);
    assert_int_equal(fake_stats[1].submitted, 1);
    tu_fx_close(&f);
}

/* local_memory / remote_memory match the memory type a buffer's location
 * names ("cpu" here), "*" any; same_machine: the local segment is on this
 * machine. */
static void test_policy_memory_type_and_machine(void **state)
{
    (void)state;
    struct tu_fx f = open_with_policy(
        "[{\"segment_type\":\"memory\",\"local_memory\":\"cuda\","
        "\"transports\":[\"fake_c\"]},"
        "{\"segment_type\":\"memory\",\"same_machine\":false,"
        "\"transports\":[\"fake_c\"]},"
        "{\"segment_type\":\"memory\",\"local_memory\":\"cpu\","
        "\"remote_memory\":\"*\",\"same_machine\":true,"
        "\"transports\":[\"fake_b\"]}]");
    tent_request_t r = tu_write(&f.p, 0, LEN);
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].submitted, 0);
    assert_int_equal(fake_stats[1].submitted, 1);
    tu_fx_close(&f);
}

/* The configurations of TENT's transport-selector document load as they
 * are (their transports, devices and QoS fields included), with the
 * selections the document gives; the fakes stand in for rdma and tcp
 * (unknown to this build's fakes, so a rule's list falls back to the
 * registration order). */
static void test_tent_doc_examples(void **state)
{
    (void)state;
    static const char intent_doc[] =
        "[{\"name\":\"foreground-kv\",\"segment_type\":\"memory\","
        "\"intent_type\":\"foreground_get\",\"qp_pool\":\"foreground\","
        "\"service_level\":3,\"traffic_class\":96,"
        "\"transports\":[\"fake_c\"]},"
        "{\"name\":\"memory-fallback\",\"segment_type\":\"memory\","
        "\"transports\":[\"fake_b\",\"tcp\"]}]";
    struct tu_fx f = open_with_policy(intent_doc);
    tent_request_t r = tu_write(&f.p, 0, LEN);
    r.intent_type = TENT_INTENT_FOREGROUND_GET;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].submitted, 1);
    r.intent_type = TENT_INTENT_UNSPEC; /* as before intents existed */
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[1].submitted, 1);
    /* policy_name bypasses the intent filter */
    r.policy_name = "foreground-kv";
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].submitted, 2);
    tu_fx_close(&f);

    static const char complete_doc[] =
        "[{\"name\":\"high_priority_local\",\"segment_type\":\"memory\","
        "\"same_machine\":true,\"priority\":\"high\","
        "\"transports\":[\"nvlink\",\"fake_c\"]},"
        "{\"name\":\"high_priority_remote\",\"segment_type\":\"memory\","
        "\"same_machine\":false,\"priority\":\"high\",\"local_memory\":"
        "\"cuda\",\"remote_memory\":\"cuda\",\"devices\":[\"mlx5_0\","
        "\"mlx5_1\",\"mlx5_2\"],\"transports\":[\"rdma\"]},"
        "{\"name\":\"medium_priority\",\"segment_type\":\"memory\","
        "\"priority\":\"medium\",\"transports\":[\"fake_b\"]},"
        "{\"name\":\"bulk_transfer\",\"segment_type\":\"memory\","
        "\"priority\":\"low\",\"min_size\":104857600,"
        "\"transports\":[\"rdma\",\"tcp\"]},"
        "{\"name\":\"file_ops\",\"segment_type\":\"file\","
        "\"transports\":[\"gds\",\"io_uring\"]}]";
    fake_transports_reset();
    f = open_with_policy(complete_doc);
    r = tu_write(&f.p, 0, LEN);
    r.priority = TENT_PRIO_HIGH; /* local: high_priority_local */
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[2].submitted, 1);
    r.priority = TENT_PRIO_MEDIUM;
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[1].submitted, 1);
    r.priority = TENT_PRIO_LOW; /* below bulk's min_size: no rule */
    run_one_ends(f.e, &r, STATUS_COMPLETED);
    assert_int_equal(fake_stats[0].submitted, 1);
    tu_fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TU_TEST(test_no_policy_uses_registration_order),
        TU_TEST(test_buffer_registered_with_one_transport),
        TU_TEST(test_policy_by_size),
        TU_TEST(test_policy_by_priority),
        TU_TEST(test_policy_first_match_and_segment_type),
        TU_TEST(test_policy_order_is_failover_order),
        TU_TEST(test_hint_pins_first_attempt),
        TU_TEST(test_hint_excluded_after_failure),
        TU_TEST(test_hint_not_installed_falls_back),
        TU_TEST(test_only_installed_transports),
        TU_TEST(test_disabled_transport_is_no_candidate),
        TU_TEST(test_only_capable_transports),
        TU_TEST(test_policy_by_intent),
        TU_TEST(test_policy_name_overrides_filters),
        TU_TEST(test_invalid_rules_skipped),
        TU_TEST(test_policy_memory_type_and_machine),
        TU_TEST(test_tent_doc_examples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
