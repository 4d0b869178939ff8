/* Addresses (issue 20 item 5): the RPC server binds and publishes the
 * address the application names in local_segment_name when
 * rpc_server_hostname is not given; loopback stays the default only when
 * nothing is named; a bare IPv6 literal is accepted; rpc_server_port_range
 * picks a free port of a range as Mooncake's P2P handshake does, so two
 * engines given the same name both start.  Everything here is loopback
 * (127.0.0.0/8 and ::1). */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include "common/config.h"
#include "e2e_peer.h"
#include "tent/transfer_engine.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Whether this machine has an IPv6 loopback to bind (containers often do
 * not); without one the IPv6 case reports skipped to CTest. */
static int have_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
                              .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

static tent_engine_t engine_with(const char *segment_name, const char *range)
{
    tent_config_reset_global();
    tent_set_config("log_level", "error");
    if (segment_name)
        tent_set_config("local_segment_name", segment_name);
    if (range)
        tent_set_config("rpc_server_port_range", range);
    return tent_create_engine();
}

/* e writes 4 KiB into peer's registered buffer through tcp, opened by the
 * name peer reports, and reads it back. */
static void roundtrip(tent_engine_t e, tent_engine_t peer)
{
    char name[300];
    assert_int_equal(tent_segment_name(peer, name, sizeof(name)), 0);
    static char src[4096], back[4096], dst[4096];
    for (int i = 0; i < 4096; i++)
        src[i] = (char)(i * 7 + 1);
    memset(back, 0, sizeof(back));
    assert_int_equal(tent_register_memory(e, src, sizeof(src)), 0);
    assert_int_equal(tent_register_memory(e, back, sizeof(back)), 0);
    assert_int_equal(tent_register_memory(peer, dst, sizeof(dst)), 0);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, name), 0);
    tent_request_t r[2] = {
        {.opcode = OPCODE_WRITE,
         .source = src,
         .target_id = seg,
         .target_offset = (uintptr_t)dst,
         .length = 4096},
        {.opcode = OPCODE_READ,
         .source = back,
         .target_id = seg,
         .target_offset = (uintptr_t)dst,
         .length = 4096},
    };
    for (int i = 0; i < 2; i++) {
        tent_batch_id_t b = tent_allocate_batch(e, 1);
        assert_int_equal(tent_submit(e, b, &r[i], 1), 0);
        tent_status_t st;
        assert_int_equal(e2e_wait(e, b, 10000, &st), 0);
        assert_int_equal(st.status, STATUS_COMPLETED);
        assert_int_equal(tent_free_batch(e, b), 0);
    }
    assert_memory_equal(dst, src, 4096);
    assert_memory_equal(back, src, 4096);
    tent_unregister_memory(peer, dst, sizeof(dst));
    tent_unregister_memory(e, src, sizeof(src));
    tent_unregister_memory(e, back, sizeof(back));
}

static void expect_server(tent_engine_t e, const char *host,
                          const char *name_prefix)
{
    char addr[128], name[300];
    uint16_t port = 0;
    assert_int_equal(tent_rpc_server_addr_port(e, addr, sizeof(addr), &port),
                     0);
    assert_string_equal(addr, host);
    assert_true(port > 0);
    assert_int_equal(tent_segment_name(e, name, sizeof(name)), 0);
    char want[300];
    snprintf(want, sizeof(want), "%s%u", name_prefix, (unsigned)port);
    assert_string_equal(name, want);
}

/* Nothing named: loopback. */
static void test_default_is_loopback(void **state)
{
    (void)state;
    tent_engine_t e = engine_with(NULL, NULL);
    assert_non_null(e);
    expect_server(e, "127.0.0.1", "127.0.0.1:");
    tent_destroy_engine(e);
}

/* A named IPv4 address (here another loopback address): served and
 * published there, and a peer reaches it. */
static void test_named_ipv4_is_served(void **state)
{
    (void)state;
    tent_engine_t peer = engine_with("127.0.0.2", NULL);
    assert_non_null(peer);
    expect_server(peer, "127.0.0.2", "127.0.0.2:");
    tent_engine_t e = engine_with(NULL, NULL);
    assert_non_null(e);
    roundtrip(e, peer);
    tent_destroy_engine(e);
    tent_destroy_engine(peer);
}

/* A bare IPv6 literal, as SGLang passes it ("::1"). */
static void test_bare_ipv6_is_served(void **state)
{
    (void)state;
    tent_engine_t peer = engine_with("::1", NULL);
    assert_non_null(peer);
    expect_server(peer, "::1", "[::1]:");
    tent_engine_t e = engine_with(NULL, NULL);
    assert_non_null(e);
    roundtrip(e, peer);
    tent_destroy_engine(e);
    tent_destroy_engine(peer);
}

/* Mooncake's P2P handshake port choice: two engines named alike both come
 * up, on different ports of the range. */
static void test_port_range_lets_two_start(void **state)
{
    (void)state;
    tent_engine_t a = engine_with("127.0.0.1", "[15000, 17000]");
    tent_engine_t b = engine_with("127.0.0.1", "[15000, 17000]");
    assert_non_null(a);
    assert_non_null(b);
    char h[64];
    uint16_t pa, pb;
    assert_int_equal(tent_rpc_server_addr_port(a, h, sizeof(h), &pa), 0);
    assert_int_equal(tent_rpc_server_addr_port(b, h, sizeof(h), &pb), 0);
    assert_true(pa >= 15000 && pa <= 17000);
    assert_true(pb >= 15000 && pb <= 17000);
    assert_int_not_equal(pa, pb);
    roundtrip(a, b);
    tent_destroy_engine(a);
    tent_destroy_engine(b);
    /* a range that is not [min, max] is refused, naming the key */
    assert_null(engine_with(NULL, "[17000, 15000]"));
    assert_non_null(strstr(tent_last_error(), "rpc_server_port_range"));
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "ipv6") == 0) {
        if (!have_ipv6_loopback()) {
            fprintf(stderr, "no IPv6 loopback here: skipped\n");
            return 77;
        }
        const struct CMUnitTest v6[] = {
            cmocka_unit_test(test_bare_ipv6_is_served),
        };
        return cmocka_run_group_tests_name("e2e_addresses_ipv6", v6, NULL,
                                           NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_is_loopback),
        cmocka_unit_test(test_named_ipv4_is_served),
        cmocka_unit_test(test_port_range_lets_two_start),
    };
    return cmocka_run_group_tests_name("e2e_addresses", tests, NULL, NULL);
}
