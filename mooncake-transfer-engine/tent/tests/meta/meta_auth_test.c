/* Signed descriptors (issue 42 item 2), argv[1] = redis | http | etcd
 * (argv[2] = the http test server script): with a cluster secret an engine
 * publishes its descriptor signed.  A writer of the store who replaces it
 * with the descriptor unsigned, or signed with another key, gets it refused
 * by every engine that resolves the name, with an error naming the
 * segment; and the engine whose key was overwritten puts its own back (its
 * keepalive compares the value), after which the segment opens and moves
 * bytes again.  The server is started by the test on a free loopback
 * port. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include "../common/meta_server.h"
#include "common/auth.h"
#include "common/config.h"
#include "e2e_peer.h"
#include "meta/meta_kv.h"
#include "tent/transfer_engine.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF_LEN ((size_t)1 << 20)
#define SECRET  "the cluster's shared secret for this test"
#define OTHER   "somebody else's secret, same length or so"

static const char *g_kind, *g_script;
static char g_tmp[128], g_good[192], g_other[192];
static char g_servers[128], g_prefix[64];
static int g_port, g_port2;
static pid_t g_srv = -1;

static const struct tent_meta_kv_ops *kv_ops(void)
{
#ifdef TENT_WITH_CURL
    if (strcmp(g_kind, "etcd") == 0)
        return &tent_meta_etcd_ops;
    if (strcmp(g_kind, "http") == 0)
        return &tent_meta_http_ops;
#endif
#ifdef TENT_WITH_HIREDIS
    if (strcmp(g_kind, "redis") == 0)
        return &tent_meta_redis_ops;
#endif
    return NULL;
}

static void *kv_open(void)
{
    struct tent_meta_kv_conf c = {.nendpoints = 1, .ttl_s = 60,
                                  .timeout_ms = 1000};
    c.endpoints[0] = g_servers;
    void *kv = NULL;
    return kv_ops()->create(&c, &kv) == 0 ? kv : NULL;
}

static int kv_get(const char *key, char **val, size_t *len)
{
    void *kv = kv_open();
    if (!kv)
        return -1;
    int rc = kv_ops()->get(kv, key, val, len);
    kv_ops()->destroy(kv);
    return rc;
}

static int kv_put(const char *key, const char *val, size_t len)
{
    void *kv = kv_open();
    if (!kv)
        return -1;
    int rc = kv_ops()->put(kv, key, val, len);
    kv_ops()->destroy(kv);
    return rc;
}

static void write_secret(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, 0600), 0);
}

static tent_engine_t engine(const char *name, const char *ttl)
{
    tent_config_reset_global();
    tent_set_config("log_level", getenv("META_LOG") ? getenv("META_LOG")
                                                    : "error");
    tent_set_config("transports/shm/enable", "false");
    tent_set_config("transports/tcp/enable", "true");
    tent_set_config("metadata_type", g_kind);
    tent_set_config("metadata_servers", g_servers);
    tent_set_config("metadata_key_prefix", g_prefix);
    tent_set_config("metadata_ttl_s", ttl);
    tent_set_config("metadata_timeout_ms", "1000");
    tent_set_config("local_segment_name", name);
    tent_set_config("security/secret_file", g_good);
    return tent_create_engine();
}

/* Opens the victim from a fresh engine: its result, the error in err. */
static int open_victim(char *err, size_t cap)
{
    tent_engine_t e = engine("reader", "30");
    assert_non_null(e);
    tent_segment_id_t h;
    int rc = tent_open_segment(e, &h, "victim");
    snprintf(err, cap, "%s", rc ? tent_last_error() : "");
    tent_destroy_engine(e);
    return rc;
}

/* Puts poison under the victim's key and opens the victim: refused, with
 * an error that names the segment and says why.  When the victim repaired
 * its key between the two steps (its keepalive), the round is done again. */
static void poisoned_is_refused(const char *key, const char *poison,
                                const char *why)
{
    for (int round = 0; round < 5; round++) {
        assert_int_equal(kv_put(key, poison, strlen(poison)), 0);
        char err[1024];
        int rc = open_victim(err, sizeof(err));
        if (rc) {
            assert_non_null(strstr(err, "'victim'"));
            assert_non_null(strstr(err, why));
            return;
        }
        char *now = NULL;
        size_t len = 0;
        assert_int_equal(kv_get(key, &now, &len), 0);
        bool repaired = strcmp(now, poison) != 0;
        free(now);
        assert_true(repaired); /* else the poison was accepted */
    }
    fail_msg("the victim repaired its key before every open");
}

static void test_poisoned_descriptors(void **state)
{
    (void)state;
    /* the victim's keepalive runs every 2 s (a third of the TTL) */
    tent_engine_t victim = engine("victim", "6");
    assert_non_null(victim);
    uint8_t *buf = malloc(BUF_LEN);
    assert_non_null(buf);
    e2e_pattern_fill(buf, BUF_LEN, 7);
    assert_int_equal(tent_register_memory(victim, buf, BUF_LEN), 0);

    char key[256];
    snprintf(key, sizeof(key), "%svictim", g_prefix);
    char *orig = NULL;
    size_t olen = 0;
    long t0 = e2e_now_ms();
    /* registration republishes; wait for the value that holds the buffer */
    for (;;) {
        free(orig);
        orig = NULL;
        assert_int_equal(kv_get(key, &orig, &olen), 0);
        if (strstr(orig, "\"tent_sig\":\"") && strstr(orig, "buffers") &&
            strlen(orig) > 200)
            break;
        assert_true(e2e_now_ms() - t0 < 10000);
        usleep(20000);
    }
    struct tent_auth *good, *other;
    assert_int_equal(tent_auth_load(g_good, &good), 0);
    assert_int_equal(tent_auth_load(g_other, &other), 0);
    char *copy = strdup(orig);
    size_t blen = 0;
    assert_int_equal(tent_auth_verify_desc(good, "victim", copy, olen, &blen),
                     0);
    /* copy is now the unsigned descriptor; another key signs it too */
    size_t rlen = 0;
    char *resigned = tent_auth_sign_desc(other, copy, blen, &rlen);
    assert_non_null(resigned);

    poisoned_is_refused(key, copy, "not signed");
    poisoned_is_refused(key, resigned, "signature");

    /* the victim puts its own descriptor back */
    t0 = e2e_now_ms();
    for (;;) {
        char *now = NULL;
        size_t len = 0;
        assert_int_equal(kv_get(key, &now, &len), 0);
        bool ok = tent_auth_verify_desc(good, "victim", now, len, &len) == 0;
        free(now);
        if (ok)
            break;
        assert_true(e2e_now_ms() - t0 < 15000);
        usleep(50000);
    }
    printf("# %s: the victim republished %ld ms after the last poison\n",
           g_kind, e2e_now_ms() - t0);

    /* and the segment opens and reads through it again */
    tent_engine_t e = engine("reader", "30");
    assert_non_null(e);
    tent_segment_id_t h;
    assert_int_equal(tent_open_segment(e, &h, "victim"), 0);
    uint8_t *back = calloc(1, BUF_LEN);
    assert_non_null(back);
    assert_int_equal(tent_register_memory(e, back, BUF_LEN), 0);
    tent_request_t r = {.opcode = OPCODE_READ,
                        .source = back,
                        .target_id = h,
                        .target_offset = (uint64_t)(uintptr_t)buf,
                        .length = BUF_LEN};
    tent_status_t st;
    assert_int_equal(e2e_run_one(e, &r, 10000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_memory_equal(back, buf, BUF_LEN);
    tent_unregister_memory(e, back, BUF_LEN);
    tent_destroy_engine(e);
    free(back);

    free(resigned);
    free(copy);
    free(orig);
    tent_auth_free(good);
    tent_auth_free(other);
    tent_unregister_memory(victim, buf, BUF_LEN);
    tent_destroy_engine(victim);
    free(buf);
}

static int group_setup(void **state)
{
    (void)state;
    g_port = ms_free_port();
    g_port2 = ms_free_port();
    ms_endpoint(g_kind, g_port, g_servers, sizeof(g_servers));
    snprintf(g_prefix, sizeof(g_prefix), "tent-auth/%d/", (int)getpid());
    snprintf(g_good, sizeof(g_good), "%s/good", g_tmp);
    snprintf(g_other, sizeof(g_other), "%s/other", g_tmp);
    write_secret(g_good, SECRET);
    write_secret(g_other, OTHER);
    char dir[300], log[300];
    snprintf(dir, sizeof(dir), "%s/data", g_tmp);
    snprintf(log, sizeof(log), "%s/server.log", g_tmp);
    g_srv = ms_spawn(g_kind, g_port, g_port2, dir, log, g_script, NULL);
    if (g_srv <= 0)
        return -1;
    long t0 = e2e_now_ms();
    while (kv_put("tent-auth-ready", "1", 1) != 0) {
        if (e2e_now_ms() - t0 > 30000) {
            fprintf(stderr, "%s server not ready after 30 s; see %s\n", g_kind,
                    log);
            return -1;
        }
        usleep(50000);
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    ms_stop(g_srv);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        fprintf(stderr, "usage: %s redis|http|etcd [http_meta_server.py]\n",
                argv[0]);
        return 2;
    }
    g_kind = argv[1];
    g_script = argc > 2 ? argv[2] : NULL;
    if (!kv_ops() || !ms_in_path(ms_server_bin(g_kind))) {
        fprintf(stderr, "FAIL: backend '%s' not built or '%s' not in PATH "
                        "(apt-get install %s)\n",
                g_kind, ms_server_bin(g_kind), ms_server_package(g_kind));
        return 1;
    }
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/tent-auth-%s-XXXXXX", g_kind);
    if (!mkdtemp(g_tmp))
        return 1;
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_poisoned_descriptors),
    };
    return cmocka_run_group_tests_name(g_kind, tests, group_setup,
                                       group_teardown);
}
