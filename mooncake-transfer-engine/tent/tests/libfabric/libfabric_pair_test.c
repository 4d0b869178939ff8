/* Rail pairing of the libfabric transport (libfabric_pair.h): our rails go
 * to the peer's rails on the same fabric whatever order either host lists
 * its NICs in; the rest pair in order; loopback only on one host. */
#include "transport/libfabric/libfabric_pair.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const bool all[8] = {true, true, true, true, true, true, true, true};

/* Two hosts listing the same two subnets in opposite orders. */
static void test_same_fabric_whatever_the_order(void **state)
{
    (void)state;
    const char *mine[] = {"10.77.2.0/24", "10.77.1.0/24"};
    const char *theirs[] = {"10.77.1.0/24", "10.77.2.0/24"};
    int peer_of[2];
    assert_int_equal(lf_pair_rails(mine, all, 2, theirs, 2, false, peer_of), 2);
    assert_int_equal(peer_of[0], 1);
    assert_int_equal(peer_of[1], 0);
}

/* Routed subnets (no name in common) and a peer that published no
 * fabric names: in order, as many as both have. */
static void test_no_common_fabric_pairs_in_order(void **state)
{
    (void)state;
    const char *mine[] = {"10.1.1.0/24", "10.1.2.0/24", "10.1.3.0/24"};
    const char *routed[] = {"10.2.1.0/24", "10.2.2.0/24"};
    const char *unnamed[] = {"", "", ""};
    int peer_of[3];
    assert_int_equal(lf_pair_rails(mine, all, 3, routed, 2, false, peer_of), 2);
    assert_int_equal(peer_of[0], 0);
    assert_int_equal(peer_of[1], 1);
    assert_int_equal(peer_of[2], LF_PAIR_NONE);
    assert_int_equal(lf_pair_rails(mine, all, 3, unnamed, 3, false, peer_of),
                     3);
    for (int k = 0; k < 3; k++)
        assert_int_equal(peer_of[k], k);
}

/* A matched rail keeps its peer rail; the unmatched ones take the peer
 * rails nobody matched, in order. */
static void test_matched_first_then_the_rest(void **state)
{
    (void)state;
    const char *mine[] = {"net3", "net1", "net4"};
    const char *theirs[] = {"net1", "net2", "net5"};
    int peer_of[3];
    assert_int_equal(lf_pair_rails(mine, all, 3, theirs, 3, false, peer_of), 3);
    assert_int_equal(peer_of[0], 1);
    assert_int_equal(peer_of[1], 0);
    assert_int_equal(peer_of[2], 2);
}

/* One fabric for every NIC (efa, an IB subnet): in order; more rails of
 * ours than the peer's spread over its rails in turn. */
static void test_one_fabric_spreads(void **state)
{
    (void)state;
    const char *mine[] = {"efa", "efa", "efa", "efa"};
    const char *theirs[] = {"efa", "efa"};
    int peer_of[4];
    assert_int_equal(lf_pair_rails(mine, all, 4, theirs, 2, false, peer_of), 4);
    assert_int_equal(peer_of[0], 0);
    assert_int_equal(peer_of[1], 1);
    assert_int_equal(peer_of[2], 0);
    assert_int_equal(peer_of[3], 1);
}

/* Loopback rails: ours only where usable says so, the peer's only on one
 * host, and never by order to a rail on another network. */
static void test_loopback_stays_on_the_host(void **state)
{
    (void)state;
    const char *mine[] = {"192.0.2.0/24", "127.0.0.1/32"};
    const char *theirs[] = {"127.0.0.1/32", "192.0.2.0/24"};
    const char *other[] = {"::1/128", "198.51.100.0/24"};
    const bool remote[] = {true, false};
    int peer_of[2];
    assert_int_equal(lf_pair_rails(mine, all, 2, theirs, 2, true, peer_of), 2);
    assert_int_equal(peer_of[0], 1);
    assert_int_equal(peer_of[1], 0);
    assert_int_equal(lf_pair_rails(mine, remote, 2, theirs, 2, false, peer_of),
                     1);
    assert_int_equal(peer_of[0], 1);
    assert_int_equal(peer_of[1], LF_PAIR_NONE);
    /* no common name: the peer's loopback rail is skipped by order too */
    assert_int_equal(lf_pair_rails(mine, remote, 2, other, 2, false, peer_of),
                     1);
    assert_int_equal(peer_of[0], 1);
    assert_true(lf_fabric_loopback("127.0.0.1/32"));
    assert_true(lf_fabric_loopback("::1/128"));
    assert_false(lf_fabric_loopback("10.127.0.0/16"));
}

/* Nothing in common and nothing left: no pair. */
static void test_nothing_reaches(void **state)
{
    (void)state;
    const char *mine[] = {"127.0.0.1/32"};
    const char *theirs[] = {"127.0.0.1/32"};
    const bool remote[] = {false};
    int peer_of[1];
    assert_int_equal(lf_pair_rails(mine, remote, 1, theirs, 1, false, peer_of),
                     0);
    assert_int_equal(peer_of[0], LF_PAIR_NONE);
    assert_int_equal(lf_pair_rails(mine, all, 1, theirs, 0, true, peer_of), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_fabric_whatever_the_order),
        cmocka_unit_test(test_no_common_fabric_pairs_in_order),
        cmocka_unit_test(test_matched_first_then_the_rest),
        cmocka_unit_test(test_one_fabric_spreads),
        cmocka_unit_test(test_loopback_stays_on_the_host),
        cmocka_unit_test(test_nothing_reaches),
    };
    (void)N(all);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
