/* settings.c, the one translation of Mooncake's arguments into a tent
 * engine's configuration that the classic C API and Python's
 * mooncake.engine share: local names, connection strings, Mooncake's
 * choice of address and port, its environment variables, and the engine
 * started from the settings (keys staged in a thread of their own, on top
 * of MC_TENT_CONF).  Engines listen on 127.0.0.1 only. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
// clang-format on

#include "classic/settings.h"

#include <arpa/inet.h>

static const char *const g_vars[] = {
    "MC_TCP_BIND_ADDRESS", "MC_LEGACY_RPC_PORT_BINDING",
    "MC_MIN_RPC_PORT",     "MC_MAX_RPC_PORT",
    "MC_MIN_PRC_PORT",     "MC_MAX_PRC_PORT",
    "MC_FORCE_TCP",        "MC_REDIS_PASSWORD",
    "MC_REDIS_DB_INDEX",   "MC_REDIS_USERNAME",
    "MC_TENT_CONF",
};

static int clean_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(g_vars) / sizeof(g_vars[0]); i++)
        unsetenv(g_vars[i]);
    return 0;
}

/* Warnings the parser gave, one per line. */
static char g_warned[4096];
static int g_nwarned;

static void collect(void *ctx, const char *msg)
{
    (void)ctx;
    size_t l = strlen(g_warned);
    snprintf(g_warned + l, sizeof(g_warned) - l, "%s\n", msg);
    g_nwarned++;
}

static char g_err[1024];

static int parse(const char *conn, const char *local, const char *ip,
                 struct classic_settings *set)
{
    const struct classic_args a = {.conn = conn,
                                   .local = local,
                                   .ip = ip,
                                   .conn_label = "conn",
                                   .local_label = "local",
                                   .ip_label = "ip"};
    g_warned[0] = '\0';
    g_nwarned = 0;
    g_err[0] = '\0';
    return classic_settings_parse(&a, set, collect, NULL, g_err, sizeof(g_err));
}

/* ---- names -------------------------------------------------------------- */

static void expect_name(const char *s, const char *host, int port, int npu)
{
    struct classic_name n;
    assert_int_equal(classic_parse_name(s, &n), 0);
    assert_string_equal(n.host, host);
    assert_int_equal(n.has_port, port >= 0);
    assert_int_equal(n.port, port >= 0 ? (unsigned)port : 0);
    assert_int_equal(n.npu, npu);
}

static void test_names(void **state)
{
    (void)state;
    expect_name("10.0.0.2", "10.0.0.2", -1, -1);
    expect_name("node-a:17001", "node-a", 17001, -1);
    expect_name("10.0.0.2:0", "10.0.0.2", 0, -1);
    expect_name("::1", "::1", -1, -1); /* bare IPv6, as SGLang passes */
    expect_name("fe80::1:2", "fe80::1:2", -1, -1);
    expect_name("[::1]", "::1", -1, -1);
    expect_name("[::1]:15001", "::1", 15001, -1);
    expect_name("127.0.0.1:12345:npu_2", "127.0.0.1", 12345, 2);
    expect_name("127.0.0.1:npu_0", "127.0.0.1", -1, 0);
    expect_name("::1:npu_3", "::1", -1, 3);
    expect_name("[::1]:80:npu_1", "::1", 80, 1);
    expect_name("", "", -1, -1);
    const char *bad[] = {"127.0.0.1:99999",
                         "127.0.0.1:1:gpu_0",
                         "h:1:npu_x",
                         "h:npu_",
                         "h:npu_70000",
                         "[]:80",
                         "[::1",
                         "[::1]x:80",
                         "h:",
                         ":80",
                         "a:b:c"};
    struct classic_name n;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (classic_parse_name(bad[i], &n) == 0)
            fail_msg("'%s' parsed (host '%s')", bad[i], n.host);
    }
    char longname[600];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(classic_parse_name(longname, &n), -1);
    assert_int_equal(classic_parse_name(NULL, &n), -1);

    char buf[64];
    classic_format_hostport(buf, sizeof(buf), "::1", 15001);
    assert_string_equal(buf, "[::1]:15001");
    classic_format_hostport(buf, sizeof(buf), "10.0.0.2", 80);
    assert_string_equal(buf, "10.0.0.2:80");
}

/* ---- connection strings ------------------------------------------------- */

static void expect_conn(const char *conn, const char *type, const char *servers)
{
    struct classic_settings s;
    assert_int_equal(parse(conn, "127.0.0.1", NULL, &s), 0);
    assert_string_equal(s.meta_type, type);
    assert_string_equal(s.meta_servers, servers);
}

static void test_connection_strings(void **state)
{
    (void)state;
    expect_conn("P2PHANDSHAKE", "p2p", "");
    expect_conn("etcd://10.0.0.1:2379", "etcd", "10.0.0.1:2379");
    expect_conn("etcd://a:2379;b:2379,c:2379", "etcd", "a:2379,b:2379,c:2379");
    expect_conn("10.0.0.1:2379", "etcd", "10.0.0.1:2379"); /* the default */
    expect_conn("redis://r:6379", "redis", "r:6379");
    expect_conn("http://h:8080/metadata", "http", "http://h:8080/metadata");
    expect_conn("https://h/m", "http", "https://h/m");
    /* no scheme is an etcd endpoint, as in Mooncake, whatever it says */
    expect_conn("p2phandshake", "etcd", "p2phandshake");
    const char *bad[] = {"", "zookeeper://z:2181", "etcd://", "redis://",
                         "http://"};
    struct classic_settings s;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse(bad[i], "127.0.0.1", NULL, &s), -1);
        assert_non_null(strstr(g_err, "conn '"));
    }
    assert_int_equal(parse(NULL, "127.0.0.1", NULL, &s), -1);
    assert_non_null(strstr(g_err, "conn is NULL"));
    assert_int_equal(parse("P2PHANDSHAKE", NULL, NULL, &s), -1);
    assert_non_null(strstr(g_err, "local is NULL"));
    assert_int_equal(parse("P2PHANDSHAKE", "h:99999", NULL, &s), -1);
    assert_non_null(strstr(g_err, "local 'h:99999'"));
    assert_int_equal(parse("P2PHANDSHAKE", "h", "x:99999", &s), -1);
    assert_non_null(strstr(g_err, "ip 'x:99999'"));
}

/* ---- address and port --------------------------------------------------- */

static void test_p2p(void **state)
{
    (void)state;
    struct classic_settings s;
    /* the host is the name's; the port is Mooncake's range */
    assert_int_equal(parse("P2PHANDSHAKE", "127.0.0.1:12345", NULL, &s), 0);
    assert_string_equal(s.host, "127.0.0.1");
    assert_int_equal(s.port, 0);
    assert_int_equal(s.port_min, 15000);
    assert_int_equal(s.port_max, 17000);
    assert_string_equal(s.segment_name, ""); /* peers dial <host>:<port> */
    for (int k = 0; k < CLASSIC_NKINDS; k++)
        assert_int_equal(s.xport[k], CLASSIC_KEEP);
    assert_int_equal(s.npu, -1);
    assert_int_equal(g_nwarned, 0);
    /* the bind address and legacy binding do not apply to P2P */
    setenv("MC_TCP_BIND_ADDRESS", "10.9.9.9", 1);
    setenv("MC_LEGACY_RPC_PORT_BINDING", "1", 1);
    assert_int_equal(parse("P2PHANDSHAKE", "::1", NULL, &s), 0);
    assert_string_equal(s.host, "::1");
    assert_int_equal(s.port, 0);
    assert_int_equal(s.port_min, 15000);
    unsetenv("MC_TCP_BIND_ADDRESS");
    unsetenv("MC_LEGACY_RPC_PORT_BINDING");
    /* no host in the name: ip_or_host_name's, else loopback */
    assert_int_equal(parse("P2PHANDSHAKE", "", "10.1.2.3:99", &s), 0);
    assert_string_equal(s.host, "10.1.2.3");
    assert_int_equal(parse("P2PHANDSHAKE", "", NULL, &s), 0);
    assert_string_equal(s.host, "127.0.0.1");
    assert_int_equal(parse("P2PHANDSHAKE", "10.0.0.5:1:npu_7", NULL, &s), 0);
    assert_int_equal(s.npu, 7);
}

static void test_metadata_service_address(void **state)
{
    (void)state;
    struct classic_settings s;
    const char *etcd = "etcd://127.0.0.1:2379";
    /* the named IP address, a port of the range; the segment is named as
     * given, without Ascend's :npu_<id> */
    assert_int_equal(parse(etcd, "127.0.0.1:12345:npu_1", NULL, &s), 0);
    assert_string_equal(s.host, "127.0.0.1");
    assert_int_equal(s.port, 0);
    assert_int_equal(s.port_min, 15000);
    assert_string_equal(s.segment_name, "127.0.0.1:12345");
    assert_int_equal(s.npu, 1);
    assert_int_equal(parse(etcd, "[::1]:80", NULL, &s), 0);
    assert_string_equal(s.host, "::1");
    assert_string_equal(s.segment_name, "[::1]:80");
    assert_int_equal(parse(etcd, "localhost", NULL, &s), 0);
    assert_string_equal(s.host, "localhost");
    /* ip_or_host_name before the name's host */
    assert_int_equal(parse(etcd, "127.0.0.1", "127.0.0.2", &s), 0);
    assert_string_equal(s.host, "127.0.0.2");
    /* a name that is not an address: Mooncake's first LAN address (an
     * IPv4 address of this machine, or loopback when it has none) */
    assert_int_equal(parse(etcd, "prefill-0", NULL, &s), 0);
    struct in_addr a4;
    assert_int_equal(inet_pton(AF_INET, s.host, &a4), 1);
    assert_string_equal(s.segment_name, "prefill-0");
    /* MC_TCP_BIND_ADDRESS wins over all of them */
    setenv("MC_TCP_BIND_ADDRESS", "127.0.0.3", 1);
    assert_int_equal(parse(etcd, "127.0.0.1", "127.0.0.2", &s), 0);
    assert_string_equal(s.host, "127.0.0.3");
    /* ... but MC_LEGACY_RPC_PORT_BINDING comes first, as in Mooncake:
     * the name's host and port (12001 without one) */
    setenv("MC_LEGACY_RPC_PORT_BINDING", "", 1); /* set is enough */
    assert_int_equal(parse(etcd, "127.0.0.4:17777", NULL, &s), 0);
    assert_string_equal(s.host, "127.0.0.4");
    assert_int_equal(s.port, 17777);
    assert_int_equal(parse(etcd, "127.0.0.4", NULL, &s), 0);
    assert_int_equal(s.port, 12001);
    assert_int_equal(parse(etcd, "", NULL, &s), 0); /* no host: not legacy */
    assert_string_equal(s.host, "127.0.0.3");
    assert_int_equal(s.port, 0);
    unsetenv("MC_TCP_BIND_ADDRESS");
    unsetenv("MC_LEGACY_RPC_PORT_BINDING");
}

static void test_port_range_variables(void **state)
{
    (void)state;
    struct classic_settings s;
    setenv("MC_MIN_RPC_PORT", "16100", 1);
    setenv("MC_MAX_RPC_PORT", "16199", 1);
    assert_int_equal(parse("P2PHANDSHAKE", "127.0.0.1", NULL, &s), 0);
    assert_int_equal(s.port_min, 16100);
    assert_int_equal(s.port_max, 16199);
    assert_int_equal(g_nwarned, 0);
    unsetenv("MC_MAX_RPC_PORT"); /* the other bound stays Mooncake's */
    assert_int_equal(parse("P2PHANDSHAKE", "127.0.0.1", NULL, &s), 0);
    assert_int_equal(s.port_min, 16100);
    assert_int_equal(s.port_max, 17000);
    unsetenv("MC_MIN_RPC_PORT");
    setenv("MC_MIN_PRC_PORT", "16500", 1); /* Mooncake's misspelling */
    assert_int_equal(parse("P2PHANDSHAKE", "127.0.0.1", NULL, &s), 0);
    assert_int_equal(s.port_min, 16500);
    setenv("MC_MIN_RPC_PORT", "16600", 1); /* the right name first */
    assert_int_equal(parse("P2PHANDSHAKE", "127.0.0.1", NULL, &s), 0);
    assert_int_equal(s.port_min, 16600);
    unsetenv("MC_MIN_PRC_PORT");
    /* not a range by Mooncake's rule: one warning, the default range */
    const char *bad[][2] = {{"16600", "16500"}, /* min > max */
                            {"1000", "2000"},   /* privileged */
                            {"40000", "40100"}, /* kernel's ephemeral */
                            {"16000", "70000"}, {"abc", "17000"},
                            {"", "17000"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("MC_MIN_RPC_PORT", bad[i][0], 1);
        setenv("MC_MAX_RPC_PORT", bad[i][1], 1);
        assert_int_equal(parse("P2PHANDSHAKE", "127.0.0.1", NULL, &s), 0);
        assert_int_equal(s.port_min, 15000);
        assert_int_equal(s.port_max, 17000);
        assert_int_equal(g_nwarned, 1);
        assert_non_null(strstr(g_warned, "MC_MIN_RPC_PORT"));
    }
    /* the range applies with a metadata service too */
    setenv("MC_MIN_RPC_PORT", "16100", 1);
    setenv("MC_MAX_RPC_PORT", "16109", 1);
    assert_int_equal(parse("etcd://127.0.0.1:2379", "127.0.0.1", NULL, &s), 0);
    assert_int_equal(s.port_min, 16100);
    assert_int_equal(s.port_max, 16109);
    unsetenv("MC_MIN_RPC_PORT");
    unsetenv("MC_MAX_RPC_PORT");
}

static void test_other_variables(void **state)
{
    (void)state;
    struct classic_settings s;
    setenv("MC_FORCE_TCP", "0", 1); /* set is enough, as in Mooncake */
    assert_int_equal(parse("P2PHANDSHAKE", "127.0.0.1", NULL, &s), 0);
    assert_true(s.force_tcp);
    assert_int_equal(s.xport[CLASSIC_TCP], CLASSIC_ON);
    assert_int_equal(s.xport[CLASSIC_SHM], CLASSIC_OFF);
    assert_int_equal(s.xport[CLASSIC_MEMFABRIC], CLASSIC_OFF);
    unsetenv("MC_FORCE_TCP");

    setenv("MC_REDIS_PASSWORD", "s3cret", 1);
    setenv("MC_REDIS_DB_INDEX", "7", 1);
    assert_int_equal(parse("redis://127.0.0.1:6379", "n", NULL, &s), 0);
    assert_string_equal(s.redis_password, "s3cret");
    assert_int_equal(s.redis_db, 7);
    assert_int_equal(g_nwarned, 0);
    /* only for redis */
    assert_int_equal(parse("etcd://127.0.0.1:2379", "n", NULL, &s), 0);
    assert_string_equal(s.redis_password, "");
    assert_int_equal(s.redis_db, -1);
    setenv("MC_REDIS_DB_INDEX", "300", 1);
    setenv("MC_REDIS_USERNAME", "u", 1);
    assert_int_equal(parse("redis://127.0.0.1:6379", "n", NULL, &s), 0);
    assert_int_equal(s.redis_db, 0);
    assert_int_equal(g_nwarned, 2);
    assert_non_null(strstr(g_warned, "MC_REDIS_DB_INDEX '300'"));
    assert_non_null(strstr(g_warned, "MC_REDIS_USERNAME"));
    char longpw[400];
    memset(longpw, 'p', sizeof(longpw) - 1);
    longpw[sizeof(longpw) - 1] = '\0';
    setenv("MC_REDIS_PASSWORD", longpw, 1);
    assert_int_equal(parse("redis://127.0.0.1:6379", "n", NULL, &s), -1);
    assert_non_null(strstr(g_err, "MC_REDIS_PASSWORD"));
    unsetenv("MC_REDIS_PASSWORD");
    unsetenv("MC_REDIS_DB_INDEX");
    unsetenv("MC_REDIS_USERNAME");
}

/* ---- the engine --------------------------------------------------------- */

static bool runs(tent_engine_t e, const char *transport)
{
    static char text[1 << 16];
    size_t len = sizeof(text);
    assert_int_equal(tent_metrics_prometheus(e, text, &len), TENT_OK);
    char series[96];
    snprintf(series, sizeof(series), "tent_tasks_in_flight{transport=\"%s\"}",
             transport);
    return strstr(text, series) != NULL;
}

static void test_start(void **state)
{
    (void)state;
    setenv("MC_TENT_CONF",
           "{\"log_level\": \"warning\", "
           "\"transports\": {\"shm\": {\"enable\": true}}}",
           1);
    setenv("MC_MIN_RPC_PORT", "16300", 1);
    setenv("MC_MAX_RPC_PORT", "16309", 1);
    struct classic_settings s;
    assert_int_equal(parse("P2PHANDSHAKE", "127.0.0.1:12345", NULL, &s), 0);
    char why[512];
    tent_engine_t a = classic_settings_start(&s, why, sizeof(why));
    assert_non_null(a);
    tent_engine_t b = classic_settings_start(&s, why, sizeof(why));
    assert_non_null(b);
    char host[64];
    uint16_t pa = 0, pb = 0;
    assert_int_equal(tent_rpc_server_addr_port(a, host, sizeof(host), &pa), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(tent_rpc_server_addr_port(b, host, sizeof(host), &pb), 0);
    assert_true(pa >= 16300 && pa <= 16309);
    assert_true(pb >= 16300 && pb <= 16309);
    assert_int_not_equal(pa, pb);
    char name[64], want[64];
    assert_int_equal(tent_segment_name(a, name, sizeof(name)), 0);
    snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)pa);
    assert_string_equal(name, want);
    /* what was not staged is MC_TENT_CONF's: shm on, tcp by default */
    assert_true(runs(a, "shm"));
    assert_true(runs(a, "tcp"));
    tent_destroy_engine(b);
    /* staged on/off wins over MC_TENT_CONF */
    s.xport[CLASSIC_SHM] = CLASSIC_OFF;
    b = classic_settings_start(&s, why, sizeof(why));
    assert_non_null(b);
    assert_false(runs(b, "shm"));
    tent_destroy_engine(b);
    /* the keys stayed in the start thread: an engine this thread creates
     * has neither the range nor the p2p settings' name */
    tent_engine_t c = tent_create_engine();
    assert_non_null(c);
    uint16_t pc = 0;
    assert_int_equal(tent_rpc_server_addr_port(c, host, sizeof(host), &pc), 0);
    assert_false(pc >= 16300 && pc <= 16309);
    tent_destroy_engine(c);
    tent_destroy_engine(a);
    /* a failure says why */
    setenv("MC_TENT_CONF", "{\"log_level\": }", 1);
    why[0] = '\0';
    assert_null(classic_settings_start(&s, why, sizeof(why)));
    assert_non_null(strstr(why, "MC_TENT_CONF (inline JSON)"));
    unsetenv("MC_TENT_CONF");
    unsetenv("MC_MIN_RPC_PORT");
    unsetenv("MC_MAX_RPC_PORT");
}

/* Every Mooncake protocol name maps to a transport of transports.def, and
 * a transport this engine implements is what the classic API and
 * mooncake.engine run for it; the others run tcp (kind -1). */
static void test_protocol_table_names_transports_def(void **state)
{
    (void)state;
    static const char *const types[] = {
#define TENT_XPORT_TYPE(suffix, value, name, pyname) name,
#include "transport/transports.def"
    };
    size_t n = 0;
    const char *xport;
    for (const char *p; (p = classic_protocol_at(n, &xport)) != NULL; n++) {
        bool known = false;
        for (size_t t = 0; t < sizeof(types) / sizeof(*types); t++)
            known |= strcmp(xport, types[t]) == 0;
        if (!known)
            fail_msg("protocol '%s' maps to '%s', not in transports.def", p,
                     xport);
        struct classic_protocol pr;
        assert_int_equal(classic_protocol_find(p, &pr), 0);
        assert_string_equal(pr.xport, xport);
        if (pr.kind >= 0)
            assert_string_equal(classic_kind_names[pr.kind], xport);
    }
    assert_true(n >= 20);
    /* Mooncake's names, both APIs alike (the lists used to differ) */
    const struct {
        const char *proto;
        int kind;
    } want[] = {{"tcp", CLASSIC_TCP},     {"shm", CLASSIC_SHM},
                {"ascend", CLASSIC_MEMFABRIC}, {"memfabric", CLASSIC_MEMFABRIC},
                {"rdma", -1},             {"efa", -1},
                {"nvlink", -1},           {"gds", -1},
                {"io_uring", -1},         {"nvmeof", -1},
                {"nccl", -1},             {"tpu", -1},
                {"mpcomm", -1}};
    for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++) {
        struct classic_protocol pr;
        assert_int_equal(classic_protocol_find(want[i].proto, &pr), 0);
        assert_int_equal(pr.kind, want[i].kind);
    }
    struct classic_protocol pr;
    assert_int_equal(classic_protocol_find("carrier-pigeon", &pr), -1);
    assert_int_equal(classic_protocol_find("RDMA", &pr), -1);
    assert_int_equal(classic_protocol_find(NULL, &pr), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_names, clean_env),
        cmocka_unit_test_setup(test_connection_strings, clean_env),
        cmocka_unit_test_setup(test_p2p, clean_env),
        cmocka_unit_test_setup(test_metadata_service_address, clean_env),
        cmocka_unit_test_setup(test_port_range_variables, clean_env),
        cmocka_unit_test_setup(test_other_variables, clean_env),
        cmocka_unit_test_setup(test_start, clean_env),
        cmocka_unit_test(test_protocol_table_names_transports_def),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
