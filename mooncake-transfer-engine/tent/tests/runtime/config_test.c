/* Configuration (MC_TENT_CONF, tent_load_config_from_file, tent_set_config,
 * malformed and mistyped files, unknown keys, log_level) and notifications to
 * the local segment. */
#include "common/log.h"
#include "runtime/engine.h"
#include "test_util.h"

#include <sys/stat.h>

#define LEN 8192

static char conf_path[64];

static int setup(void **state)
{
    tu_setup(state);
    unsetenv("MC_TENT_CONF");
    conf_path[0] = '\0';
    return 0;
}

static int teardown(void **state)
{
    tu_teardown(state);
    unsetenv("MC_TENT_CONF");
    if (conf_path[0])
        unlink(conf_path);
    tent_log_set_level(TENT_LOG_ERROR);
    return 0;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

/* Writes text to a fresh temporary file; returns its path. */
static const char *write_conf(const char *text)
{
    if (conf_path[0])
        unlink(conf_path);
    snprintf(conf_path, sizeof(conf_path), "/tmp/tent_conf_XXXXXX");
    int fd = mkstemp(conf_path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return conf_path;
}

static struct tent_engine *internal(tent_engine_t e)
{
    return tent_engine_cast(e);
}

static void test_file_from_env(void **state)
{
    (void)state;
    setenv("MC_TENT_CONF",
           write_conf("{\"max_failover_attempts\": 0,\n"
                      " \"enable_auto_failover_on_poll\": false,\n"
                      " \"log_level\": \"error\",\n"
                      " \"transports\": {\"fake_a\": {\"enable\": true},\n"
                      "                  \"fake_b\": {\"enable\": true},\n"
                      "                  \"tcp\": {\"enable\": false}}}\n"),
           1);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    assert_int_equal(internal(e)->max_failover_attempts, 0);
    assert_false(internal(e)->auto_failover_on_poll);
    assert_int_equal(fake_stats[0].installs, 1);
    assert_int_equal(fake_stats[1].installs, 1);
    /* And the file's budget 0 governs failover. */
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    fake_behavior[0].fail_completion = true;
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    tent_request_t r = tu_write(&p, 0, LEN);
    assert_int_equal(tent_submit(e, b, &r, 1), TENT_OK);
    tent_status_t st;
    assert_int_equal(tu_wait_task(e, b, 0, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(fake_stats[1].submitted, 0);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* tent_load_config_from_file wins over MC_TENT_CONF; tent_set_config wins
 * over both, with typed values. */
static void test_precedence_and_typed_overrides(void **state)
{
    (void)state;
    char env_path[64];
    snprintf(env_path, sizeof(env_path), "%s",
             write_conf("{\"max_failover_attempts\": 7}"));
    setenv("MC_TENT_CONF", env_path, 1);
    conf_path[0] = '\0'; /* keep env_path; a new file for the explicit one */
    const char *explicit_path = write_conf(
        "{\"max_failover_attempts\": 5, \"rpc_server_port\": 1234,\n"
        " \"local_segment_name\": \"from-file\", \"log_level\": \"error\"}");
    tent_load_config_from_file(explicit_path);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    assert_int_equal(internal(e)->max_failover_attempts, 5);
    assert_int_equal(internal(e)->rpc_port, 1234);
    char name[64];
    assert_int_equal(tent_segment_name(e, name, sizeof(name)), TENT_OK);
    assert_string_equal(name, "from-file");
    tent_destroy_engine(e);

    tent_set_config("max_failover_attempts", "2");
    tent_set_config("enable_auto_failover_on_poll", "false");
    tent_set_config("local_segment_name", "from-override");
    tent_set_config("transports/fake_a/enable", "true");
    tent_set_config("transports/tcp/enable", "false");
    tent_set_config("transports/io_uring/enable", "false");
    tent_set_config("transports/bufio/enable", "false");
    tent_set_config("policy", "[{\"segment_type\":\"memory\","
                              "\"transports\":[\"fake_a\"]}]");
    e = tent_create_engine();
    assert_non_null(e);
    assert_int_equal(internal(e)->max_failover_attempts, 2);
    assert_false(internal(e)->auto_failover_on_poll);
    assert_int_equal(internal(e)->rpc_port, 1234); /* file value kept */
    assert_int_equal(internal(e)->npolicies, 1);
    assert_int_equal(internal(e)->nxports, 1);
    assert_int_equal(tent_segment_name(e, name, sizeof(name)), TENT_OK);
    assert_string_equal(name, "from-override");
    tent_destroy_engine(e);

    /* A later override of the same key wins. */
    tent_set_config("max_failover_attempts", "4");
    e = tent_create_engine();
    assert_int_equal(internal(e)->max_failover_attempts, 4);
    tent_destroy_engine(e);

    /* Reset forgets the explicit file and the overrides: MC_TENT_CONF. */
    tent_config_reset_global();
    tent_set_config("log_level", "error");
    e = tent_create_engine();
    assert_non_null(e);
    assert_int_equal(internal(e)->max_failover_attempts, 7);
    tent_destroy_engine(e);
    unlink(env_path);
}

/* Defaults when nothing is configured. */
static void test_defaults(void **state)
{
    (void)state;
    tent_set_config("log_level", "error");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    assert_int_equal(internal(e)->max_failover_attempts, 3);
    assert_true(internal(e)->auto_failover_on_poll);
    assert_int_equal(internal(e)->npolicies, 0);
    char host[64];
    uint16_t port = 1;
    assert_int_equal(tent_rpc_server_addr_port(e, host, sizeof(host), &port),
                     TENT_OK);
    assert_string_equal(host, "127.0.0.1");
    tent_destroy_engine(e);
}

/* tent_create_engine with the failure's log line captured (and checked). */
static tent_engine_t create_quietly(void)
{
    struct tu_capture cap;
    tu_capture_begin(&cap);
    tent_engine_t e = tent_create_engine();
    char *log = tu_capture_end(&cap);
    if (!e)
        assert_contains(log, tent_last_error());
    free(log);
    return e;
}

static void expect_create_fails(const char *fragment1, const char *fragment2)
{
    tent_engine_t e = create_quietly();
    if (e) {
        tent_destroy_engine(e);
        fail_msg("tent_create_engine succeeded; expected \"%s\"", fragment1);
    }
    assert_contains(tent_last_error(), fragment1);
    if (fragment2)
        assert_contains(tent_last_error(), fragment2);
}

static void test_malformed_file(void **state)
{
    (void)state;
    const char *path = write_conf("{\n  \"log_level\": \"error\",\n"
                                  "  \"max_failover_attempts\": ,\n}\n");
    tent_load_config_from_file(path);
    expect_create_fails(path, "line 3, column 28");

    path = write_conf("{\"a\": [1, 2}");
    tent_load_config_from_file(path);
    expect_create_fails(path, "line 1, column 12");

    path = write_conf("");
    tent_load_config_from_file(path);
    expect_create_fails(path, "line 1, column 1");

    path = write_conf("[1, 2]");
    tent_load_config_from_file(path);
    expect_create_fails(path, "top level must be a JSON object");

    /* The same through MC_TENT_CONF. */
    tent_config_reset_global();
    setenv("MC_TENT_CONF", write_conf("{\"x\": tru}"), 1);
    expect_create_fails(conf_path, "line 1, column");

    /* A file that is not there: a warning and the defaults, as in TENT. */
    tent_load_config_from_file("/nonexistent/tent.json");
    tent_set_config("log_level", "warning");
    tent_log_set_level(TENT_LOG_WARNING); /* logged before log_level applies */
    struct tu_capture cap;
    tu_capture_begin(&cap);
    tent_engine_t e = tent_create_engine();
    char *log = tu_capture_end(&cap);
    assert_non_null(e);
    assert_contains(log, "'/nonexistent/tent.json' cannot be opened");
    assert_contains(log, "using the defaults");
    free(log);
    assert_int_equal(internal(e)->max_failover_attempts, 3);
    tent_destroy_engine(e);
    /* MC_TENT_CONF may also be inline JSON, as in TENT. */
    tent_config_reset_global();
    setenv("MC_TENT_CONF", "{\"max_failover_attempts\": 5}", 1);
    e = tent_create_engine();
    assert_non_null(e);
    assert_int_equal(internal(e)->max_failover_attempts, 5);
    tent_destroy_engine(e);
    setenv("MC_TENT_CONF", "{\"max_failover_attempts\": }", 1);
    expect_create_fails("MC_TENT_CONF (inline JSON)", "line 1, column");
    unsetenv("MC_TENT_CONF");
}

/* tent_create_engine on a thread of its own, so that a test can bound how
 * long it takes. */
struct timed_create {
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    bool done;
    tent_engine_t e;
    char err[512];
};

static void *timed_create_main(void *arg)
{
    struct timed_create *tc = arg;
    tent_engine_t e = tent_create_engine();
    pthread_mutex_lock(&tc->lock);
    tc->e = e;
    snprintf(tc->err, sizeof(tc->err), "%s", tent_last_error());
    tc->done = true;
    pthread_cond_signal(&tc->done_cv);
    pthread_mutex_unlock(&tc->lock);
    return NULL;
}

/* Creates an engine from the configuration file path on another thread;
 * fails unless it returns within a second, NULL, naming path and fragment.
 * A FIFO left blocking is released by opening its writing end. */
static void expect_file_refused_fast(const char *path, const char *fragment,
                                     bool fifo)
{
    static struct timed_create tc;
    memset(&tc, 0, sizeof(tc));
    pthread_mutex_init(&tc.lock, NULL);
    pthread_cond_init(&tc.done_cv, NULL);
    setenv("MC_TENT_CONF", path, 1);
    struct tu_capture cap;
    tu_capture_begin(&cap);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, timed_create_main, &tc), 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    pthread_mutex_lock(&tc.lock);
    while (!tc.done)
        if (pthread_cond_timedwait(&tc.done_cv, &tc.lock, &until) != 0)
            break;
    bool done = tc.done;
    pthread_mutex_unlock(&tc.lock);
    if (!done && fifo) {
        /* unblock the reader, then let it finish before failing */
        int wfd = open(path, O_WRONLY | O_NONBLOCK);
        if (wfd >= 0)
            close(wfd);
    }
    pthread_join(th, NULL);
    free(tu_capture_end(&cap));
    unsetenv("MC_TENT_CONF");
    if (!done) {
        if (tc.e)
            tent_destroy_engine(tc.e);
        fail_msg("tent_create_engine on %s did not return within a second",
                 path);
    }
    if (tc.e) {
        tent_destroy_engine(tc.e);
        fail_msg("tent_create_engine on %s succeeded", path);
    }
    if (!strstr(tc.err, path) || !strstr(tc.err, fragment))
        fail_msg("\"%s\" lacks %s or %s", tc.err, path, fragment);
}

/* A configuration path that is not a regular file, or is huge, is refused
 * at once naming it: a FIFO hung create, a device would be read forever. */
static void test_config_not_a_regular_file(void **state)
{
    (void)state;
    char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/tent_conf_dir_XXXXXX");
    assert_non_null(mkdtemp(dir));
    char fifo[96];
    snprintf(fifo, sizeof(fifo), "%s/fifo.json", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    expect_file_refused_fast(fifo, "not a regular file (a FIFO)", true);
    expect_file_refused_fast(dir, "not a regular file (a directory)", false);
    expect_file_refused_fast("/dev/zero", "not a regular file", false);
    /* Just over 16 MiB: refused from its size, before reading. */
    char big[96];
    snprintf(big, sizeof(big), "%s/big.json", dir);
    int fd = open(big, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (16 << 20) + 1), 0);
    close(fd);
    expect_file_refused_fast(big, "larger than the 16777216", false);
    /* Exactly 16 MiB is still read: an object, then blanks. */
    fd = open(big, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "{\"max_failover_attempts\": 6}", 28), 28);
    char blanks[65536];
    memset(blanks, ' ', sizeof(blanks));
    for (off_t off = 28; off < (16 << 20); off += (off_t)sizeof(blanks)) {
        size_t n = sizeof(blanks);
        if (off + (off_t)n > (16 << 20))
            n = (size_t)((16 << 20) - off);
        assert_int_equal(pwrite(fd, blanks, n, off), (ssize_t)n);
    }
    close(fd);
    tent_load_config_from_file(big);
    tent_set_config("log_level", "error");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    assert_int_equal(internal(e)->max_failover_attempts, 6);
    tent_destroy_engine(e);
    tent_config_reset_global();
    unlink(big);
    unlink(fifo);
    rmdir(dir);
}

/* A key given twice, at any depth, is an error naming it and the file
 * (cJSON would keep both and lookups take the first). */
static void test_duplicate_key(void **state)
{
    (void)state;
    static const struct {
        const char *json, *key;
    } rows[] = {
        {"{\"max_failover_attempts\": 1, \"max_failover_attempts\": 2}",
         "'max_failover_attempts' is given more than once"},
        {"{\"transports\": {\"tcp\": {\"connections\": 2, \"timeout_ms\": "
         "5, \"connections\": 8}}}",
         "'transports/tcp/connections' is given more than once"},
        {"{\"transports\": {\"tcp\": {}}, \"transports\": {\"shm\": {}}}",
         "'transports' is given more than once"},
        {"{\"policy\": [{\"segment_type\": \"memory\"}, {\"segment_type\": "
         "\"memory\", \"max_size\": 1, \"max_size\": 2}]}",
         "'policy[1]/max_size' is given more than once"},
        {"{\"x\": [[{\"b\": {\"c\": 1, \"d\": 0, \"c\": 2}}]]}",
         "'x[0][0]/b/c' is given more than once"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        tent_config_reset_global();
        const char *path = write_conf(rows[i].json);
        tent_load_config_from_file(path);
        tent_engine_t e = create_quietly();
        if (e) {
            tent_destroy_engine(e);
            fail_msg("%s: engine created", rows[i].json);
        }
        if (!strstr(tent_last_error(), rows[i].key) ||
            !strstr(tent_last_error(), path))
            fail_msg("%s: \"%s\" lacks %s or the path", rows[i].json,
                     tent_last_error(), rows[i].key);
    }
    /* Inline JSON in MC_TENT_CONF too; the same name in different objects
     * is fine. */
    tent_config_reset_global();
    setenv("MC_TENT_CONF", "{\"log_level\": \"error\", \"log_level\": \"info\"}",
           1);
    expect_create_fails("MC_TENT_CONF (inline JSON)", "'log_level'");
    setenv("MC_TENT_CONF",
           "{\"log_level\": \"error\", \"metrics\": {\"enabled\": true}, "
           "\"transports\": {\"tcp\": {\"enabled\": true}}}",
           1);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    tent_destroy_engine(e);
    unsetenv("MC_TENT_CONF");
}

/* A transport whose install fails on a bad value fails the engine naming
 * key and value (it used to come up without the transport); one that is
 * not available here is left out as before. */
static void test_misconfigured_transport_fails_create(void **state)
{
    (void)state;
    tent_set_config("log_level", "error");
    tent_set_config("transports/tcp/connections", "1000000");
    expect_create_fails("transport 'tcp' is misconfigured",
                        "'transports/tcp/connections' = 1000000");
    tent_config_reset_global();
    tent_set_config("log_level", "error");
    tent_set_config("transports/memfabric/enable", "true");
    setenv("MF_PROTOCOL", "host_tcp", 1);
    setenv("MF_TRANSFER_TIMEOUT", "-1", 1);
    expect_create_fails("transport 'memfabric' is misconfigured",
                        "MF_TRANSFER_TIMEOUT='-1'");
    /* A good value, and no libmf_smem.so here: memfabric is left out. */
    setenv("MF_TRANSFER_TIMEOUT", "1000", 1);
    setenv("MF_SMEM_LIBRARY", "/nonexistent/libmf_smem.so", 1);
    tent_engine_t e = create_quietly();
    unsetenv("MF_PROTOCOL");
    unsetenv("MF_TRANSFER_TIMEOUT");
    unsetenv("MF_SMEM_LIBRARY");
    assert_non_null(e);
    assert_true(tent_available(e));
    tent_destroy_engine(e);
    /* The seed's hugepage variables. */
    tent_config_reset_global();
    tent_set_config("log_level", "error");
    setenv("MC_STORE_USE_HUGEPAGE", "yes", 1);
    expect_create_fails("MC_STORE_USE_HUGEPAGE='yes'", "accepted");
    setenv("MC_STORE_USE_HUGEPAGE", "1", 1);
    setenv("MC_STORE_HUGEPAGE_SIZE", "4MB", 1);
    expect_create_fails("MC_STORE_HUGEPAGE_SIZE='4MB'", "accepted");
    unsetenv("MC_STORE_USE_HUGEPAGE");
    unsetenv("MC_STORE_HUGEPAGE_SIZE");
}

/* A value that is wrong (out of range, not an integer, a policy list that
 * is not a list) fails the engine, naming the key: stricter than TENT,
 * which would ignore it.  A bad policy rule is skipped as TENT skips it
 * (selection_test). */
static void test_wrong_values_name_the_key(void **state)
{
    (void)state;
    static const struct {
        const char *json, *key;
    } rows[] = {
        {"{\"max_failover_attempts\": 1.5}", "'max_failover_attempts'"},
        {"{\"max_failover_attempts\": 300}", "'max_failover_attempts'"},
        {"{\"max_failover_attempts\": 1e300}", "'max_failover_attempts'"},
        {"{\"rpc_server_port\": -1e300}", "'rpc_server_port'"},
        {"{\"rpc_server_port\": 70000}", "'rpc_server_port'"},
        {"{\"log_level\": \"loud\"}", "'log_level'"},
        {"{\"rpc_frame_min_rate\": -1}", "'rpc_frame_min_rate'"},
        {"{\"rpc_max_connections\": 0}", "'rpc_max_connections'"},
        {"{\"tcp_loopback_congestion\": \"no way\"}",
         "'tcp_loopback_congestion'"},
        {"{\"tcp_loopback_congestion\": \"longer_than_sixteen\"}",
         "'tcp_loopback_congestion'"},
        {"{\"metrics\": {\"http_max_connections\": 0}}",
         "'metrics/http_max_connections'"},
        {"{\"metrics\": {\"http_max_connections_per_address\": 0}}",
         "'metrics/http_max_connections_per_address'"},
        {"{\"metrics\": {\"http_timeout_seconds\": 0}}",
         "'metrics/http_timeout_seconds'"},
        {"{\"policy\": {}}", "'policy'"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        tent_config_reset_global();
        tent_load_config_from_file(write_conf(rows[i].json));
        tent_engine_t e = create_quietly();
        if (e) {
            tent_destroy_engine(e);
            fail_msg("%s: engine created", rows[i].json);
        }
        if (!strstr(tent_last_error(), rows[i].key))
            fail_msg("%s: \"%s\" lacks %s", rows[i].json, tent_last_error(),
                     rows[i].key);
    }
}

/* A value of the wrong kind fails the engine naming the key and the value
 * (TENT would take the default): in the file, and through tent_set_config,
 * where "abc" is a string, while "10" is a number that a key wanting a
 * string also takes as its text. */
static void test_wrong_types_fail(void **state)
{
    (void)state;
    static const struct {
        const char *json, *key, *value;
    } rows[] = {
        {"{\"max_failover_attempts\": \"three\"}", "'max_failover_attempts'",
         "\"three\""},
        {"{\"enable_auto_failover_on_poll\": 1}",
         "'enable_auto_failover_on_poll'", "= 1"},
        {"{\"log_level\": 3}", "'log_level'", "= 3"},
        {"{\"rpc_server_hostname\": false}", "'rpc_server_hostname'",
         "= false"},
        {"{\"local_segment_name\": []}", "'local_segment_name'", "= []"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        tent_config_reset_global();
        tent_load_config_from_file(write_conf(rows[i].json));
        tent_engine_t e = create_quietly();
        if (e) {
            tent_destroy_engine(e);
            fail_msg("%s: engine created", rows[i].json);
        }
        if (!strstr(tent_last_error(), rows[i].key) ||
            !strstr(tent_last_error(), rows[i].value))
            fail_msg("%s: \"%s\" lacks %s or %s", rows[i].json,
                     tent_last_error(), rows[i].key, rows[i].value);
    }
    tent_config_reset_global();
    tent_set_config("max_failover_attempts", "abc");
    expect_create_fails("'max_failover_attempts' = \"abc\"", "not an integer");
    tent_config_reset_global();
    tent_set_config("log_level", "error");
    tent_set_config("local_segment_name", "10");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    char name[64];
    assert_int_equal(tent_segment_name(e, name, sizeof(name)), 0);
    assert_string_equal(name, "10");
    tent_destroy_engine(e);
}

/* tent_set_config and tent_load_config_from_file stage for the calling
 * thread, as in TENT: another thread's engines do not see them. */
static void *create_elsewhere(void *arg)
{
    (void)arg;
    tent_engine_t e = tent_create_engine();
    int v = e ? internal(e)->max_failover_attempts : -1;
    if (e)
        tent_destroy_engine(e);
    return (void *)(intptr_t)v;
}

static void test_config_staged_per_thread(void **state)
{
    (void)state;
    tent_set_config("max_failover_attempts", "7");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    assert_int_equal(internal(e)->max_failover_attempts, 7);
    tent_destroy_engine(e);
    pthread_t th;
    void *ret;
    assert_int_equal(pthread_create(&th, NULL, create_elsewhere, NULL), 0);
    assert_int_equal(pthread_join(th, &ret), 0);
    assert_int_equal((int)(intptr_t)ret, 3);
}

/* A transport enable flag of the wrong kind fails the engine naming the
 * key. */
static void test_wrong_typed_enable_flag(void **state)
{
    (void)state;
    tu_config((const char *const[]){"fake_b", NULL});
    tent_set_config("transports/fake_a/enable", "yes");
    expect_create_fails("'transports/fake_a/enable' = \"yes\"", "boolean");
    assert_int_equal(fake_stats[0].installs, 0);
}

/* A key that can never be applied is refused by tent_set_config itself
 * instead of failing every later tent_create_engine. */
static void test_set_config_bad_key(void **state)
{
    (void)state;
    tent_set_config("log_level", "error");
    tent_set_config("", "1");
    assert_contains(tent_last_error(), "is empty or too long");
    tent_set_config("//", "1");
    assert_contains(tent_last_error(), "'//'");
    tent_set_config(NULL, "1");
    assert_contains(tent_last_error(), "NULL");
    tent_set_config("max_failover_attempts", NULL);
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    assert_int_equal(internal(e)->max_failover_attempts, 3);
    tent_destroy_engine(e);
}

static void test_unknown_keys_ignored(void **state)
{
    (void)state;
    tent_load_config_from_file(
        write_conf("{\"no_such_key\": 5, \"log_level\": \"error\",\n"
                   " \"transports\": {\"nonexistent\": {\"enable\": true,"
                   " \"x\": [1]}},\n"
                   " \"metadata\": {\"nested\": {\"deep\": null}}}"));
    tent_set_config("another/unknown/key", "17");
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    tent_destroy_engine(e);
}

static void test_log_levels(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int level;
    } ok[] = {{"trace", TENT_LOG_TRACE}, {"debug", TENT_LOG_DEBUG},
              {"info", TENT_LOG_INFO},   {"warning", TENT_LOG_WARNING},
              {"error", TENT_LOG_ERROR}, {"WARNING", TENT_LOG_WARNING}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        tent_config_reset_global();
        tent_set_config("log_level", ok[i].name);
        struct tu_capture cap;
        tu_capture_begin(&cap);
        tent_engine_t e = tent_create_engine();
        char *log = tu_capture_end(&cap);
        assert_non_null(e);
        assert_int_equal(atomic_load(&tent_log_threshold), ok[i].level);
        /* Creation logs at INFO: visible exactly when the level allows. */
        if (ok[i].level <= TENT_LOG_INFO)
            assert_contains(log, "INFO engine.c");
        else
            assert_null(strstr(log, "INFO"));
        free(log);
        tent_destroy_engine(e);
    }
    tent_config_reset_global();
    tent_set_config("log_level", "verbose");
    expect_create_fails("'verbose'", "trace, debug, info, warning, error");
}

/* Log lines carry time, level and source. */
static void test_log_prefix(void **state)
{
    (void)state;
    tent_log_set_level(TENT_LOG_INFO);
    struct tu_capture cap;
    tu_capture_begin(&cap);
    LOG_INFO("hello %d", 42);
    LOG_DEBUG("not shown");
    char *log = tu_capture_end(&cap);
    int hh, mm, ss, us, line;
    char lvl[16], file[64];
    assert_int_equal(sscanf(log, "%d:%d:%d.%d %15s %63[^:]:%d] hello 42", &hh,
                            &mm, &ss, &us, lvl, file, &line),
                     7);
    assert_string_equal(lvl, "INFO");
    assert_string_equal(file, "config_test.c");
    assert_null(strstr(log, "not shown"));
    free(log);
}

static void test_config_getters(void **state)
{
    (void)state;
    struct tent_config *cfg;
    assert_int_equal(tent_config_new_empty(&cfg), TENT_OK);
    assert_int_equal(
        tent_config_set(cfg, "transports/memfabric/enable", "true"), TENT_OK);
    assert_int_equal(tent_config_set(cfg, "a/b/n", "12"), TENT_OK);
    assert_int_equal(tent_config_set(cfg, "a/b/s", "hello world"), TENT_OK);
    assert_int_equal(tent_config_set(cfg, "a/b/v", "1.2.3"), TENT_OK);
    bool bv = false;
    int64_t iv = 0;
    const char *sv = NULL;
    assert_int_equal(
        tent_config_get_bool(cfg, "transports/memfabric/enable", false, &bv),
        TENT_OK);
    assert_true(bv);
    assert_int_equal(tent_config_get_int(cfg, "a/b/n", 0, &iv), TENT_OK);
    assert_int_equal(iv, 12);
    assert_int_equal(tent_config_get_string(cfg, "a/b/s", NULL, &sv), TENT_OK);
    assert_string_equal(sv, "hello world");
    assert_int_equal(tent_config_get_string(cfg, "a/b/v", NULL, &sv), TENT_OK);
    assert_string_equal(sv, "1.2.3");
    /* Missing: the default. */
    assert_int_equal(tent_config_get_int(cfg, "a/x", 99, &iv), TENT_OK);
    assert_int_equal(iv, 99);
    assert_int_equal(
        tent_config_get_bool(cfg, "transports/tcp/enable", true, &bv), TENT_OK);
    assert_true(bv);
    /* Wrong kind: an error naming the key and the value. */
    iv = 5;
    assert_int_equal(tent_config_get_int(cfg, "a/b/s", 42, &iv), TENT_ECONFIG);
    assert_contains(tent_last_error(), "'a/b/s' = \"hello world\"");
    assert_int_equal(iv, 5);
    assert_int_equal(tent_config_get_bool(cfg, "a/b/n", false, &bv),
                     TENT_ECONFIG);
    assert_contains(tent_last_error(), "'a/b/n' = 12");
    assert_int_equal(tent_config_get_string(cfg, "a/b", "dflt", &sv),
                     TENT_ECONFIG);
    assert_contains(tent_last_error(), "'a/b'");
    /* A number set through tent_config_set is also its text, for a key that
     * wants a string (a segment name or password of digits). */
    assert_int_equal(tent_config_get_string(cfg, "a/b/n", NULL, &sv), TENT_OK);
    assert_string_equal(sv, "12");
    /* A number that is not an integer is an error naming the key. */
    assert_int_equal(tent_config_set(cfg, "a/b/f", "1.5"), TENT_OK);
    assert_int_equal(tent_config_get_int(cfg, "a/b/f", 0, &iv), TENT_ECONFIG);
    assert_contains(tent_last_error(), "'a/b/f'");
    /* Replacing a scalar by an object on the way down. */
    assert_int_equal(tent_config_set(cfg, "a/b/n/deeper", "false"), TENT_OK);
    assert_int_equal(tent_config_get_bool(cfg, "a/b/n/deeper", true, &bv),
                     TENT_OK);
    assert_false(bv);
    tent_config_free(cfg);
}

/* ---- notifications to the local segment ---- */

static void test_send_notif_local(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    assert_int_equal(
        tent_send_notifs(e, LOCAL_SEGMENT_ID, "greeting", "hello there"),
        TENT_OK);
    assert_int_equal(tent_send_notifs(e, LOCAL_SEGMENT_ID, "second", ""),
                     TENT_OK);
    tent_notifi_info info;
    assert_int_equal(tent_recv_notifs(e, &info), TENT_OK);
    assert_int_equal(info.num_records, 2);
    assert_int_equal(info.records[0].handle, LOCAL_SEGMENT_ID);
    assert_string_equal(info.records[0].name, "greeting");
    assert_string_equal(info.records[0].msg, "hello there");
    assert_string_equal(info.records[1].name, "second");
    tent_free_notifs(&info);
    assert_int_equal(tent_recv_notifs(e, &info), TENT_OK);
    assert_int_equal(info.num_records, 0);
    tent_free_notifs(&info);
    tent_destroy_engine(e);
}

static int recv_count(tent_engine_t e, const char *name, const char *msg)
{
    tent_notifi_info info;
    assert_int_equal(tent_recv_notifs(e, &info), TENT_OK);
    int n = info.num_records;
    for (int i = 0; i < n; i++) {
        assert_string_equal(info.records[i].name, name);
        assert_string_equal(info.records[i].msg, msg);
    }
    tent_free_notifs(&info);
    return n;
}

/* tent_submit_notif: the notification arrives after the data, once. */
static void test_submit_notif_after_data_once(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a", "fake_b");
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    fake_behavior[0].polls_before_done = 3;
    fake_behavior[0].copy_bytes = false; /* bytes land only via failover */
    fake_behavior[0].fail_completion = true;
    tent_batch_id_t b = tent_allocate_batch(e, 3);
    tent_request_t r[2] = {tu_write(&p, 0, LEN / 2),
                           tu_write(&p, LEN / 2, LEN / 2)};
    assert_int_equal(tent_submit_notif(e, b, r, 2, "kv-done", "layer=3"),
                     TENT_OK);
    /* A second notification on the same batch is refused, and its request
     * is not submitted. */
    assert_int_equal(tent_submit_notif(e, b, r, 1, "again", "x"), TENT_EINVAL);
    assert_contains(tent_last_error(), "already carries a notification");
    size_t ntasks = 3;
    tent_status_t list[3];
    assert_int_equal(tent_task_status_list(e, b, list, &ntasks), TENT_OK);
    assert_int_equal(ntasks, 2);
    assert_int_equal(recv_count(e, "kv-done", "layer=3"), 0);
    tent_status_t st;
    assert_int_equal(tent_task_status(e, b, 0, &st), TENT_OK);
    assert_int_equal(st.status, STATUS_PENDING);
    assert_int_equal(recv_count(e, "kv-done", "layer=3"), 0);
    int seen = 0;
    long end = tu_now_ms() + 2000;
    do {
        assert_int_equal(tent_overall_status(e, b, &st), TENT_OK);
        int n = recv_count(e, "kv-done", "layer=3");
        if (n) {
            /* By the time it is visible, all the data is there. */
            assert_int_equal(st.status, STATUS_COMPLETED);
            assert_memory_equal(p.src, p.dst, LEN);
        }
        seen += n;
    } while (st.status == STATUS_PENDING && tu_now_ms() < end);
    assert_int_equal(st.status, STATUS_COMPLETED);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(tent_overall_status(e, b, &st), TENT_OK);
        assert_int_equal(tent_task_status(e, b, 1, &st), TENT_OK);
        seen += recv_count(e, "kv-done", "layer=3");
    }
    assert_int_equal(seen, 1);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    assert_int_equal(recv_count(e, "kv-done", "layer=3"), 0);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* A failed task means the data did not all land: no notification. */
static void test_submit_notif_dropped_on_failure(void **state)
{
    (void)state;
    tent_engine_t e = TU_ENGINE("fake_a");
    struct tu_bufs p;
    tu_bufs_init(e, &p, LEN);
    fake_behavior[0].fail_completion = true;
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    tent_request_t r = tu_write(&p, 0, LEN);
    assert_int_equal(tent_submit_notif(e, b, &r, 1, "n", "m"), TENT_OK);
    tent_status_t st;
    assert_int_equal(tu_wait_all(e, b, &st, 2000), TENT_OK);
    assert_int_equal(st.status, STATUS_FAILED);
    assert_int_equal(recv_count(e, "n", "m"), 0);
    assert_int_equal(tent_free_batch(e, b), TENT_OK);
    tu_bufs_fini(e, &p);
    tent_destroy_engine(e);
}

/* The library logs warnings and errors by default; Mooncake's MC_LOG_LEVEL
 * sets the threshold when the configuration has no log_level, which wins
 * over it. */
static void test_log_level_default_and_mc_log_level(void **state)
{
    (void)state;
    static const struct {
        const char *conf_level, *mc;
        int want;
    } rows[] = {
        {NULL, NULL, TENT_LOG_WARNING},
        {NULL, "INFO", TENT_LOG_INFO},
        {NULL, "TRACE", TENT_LOG_TRACE},
        {NULL, "ERROR", TENT_LOG_ERROR},
        {"error", "INFO", TENT_LOG_ERROR},
        {"info", NULL, TENT_LOG_INFO},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        tent_config_reset_global();
        tent_log_set_level(TENT_LOG_WARNING); /* the process's default */
        if (rows[i].conf_level)
            tent_set_config("log_level", rows[i].conf_level);
        if (rows[i].mc)
            setenv("MC_LOG_LEVEL", rows[i].mc, 1);
        tent_engine_t e = tent_create_engine();
        unsetenv("MC_LOG_LEVEL");
        assert_non_null(e);
        if (atomic_load(&tent_log_threshold) != rows[i].want)
            fail_msg("log_level %s, MC_LOG_LEVEL %s: threshold %d, want %d",
                     rows[i].conf_level ? rows[i].conf_level : "unset",
                     rows[i].mc ? rows[i].mc : "unset",
                     atomic_load(&tent_log_threshold), rows[i].want);
        tent_destroy_engine(e);
    }
    tent_log_set_level(TENT_LOG_WARNING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_log_level_default_and_mc_log_level),
        T(test_file_from_env),
        T(test_precedence_and_typed_overrides),
        T(test_defaults),
        T(test_malformed_file),
        T(test_wrong_values_name_the_key),
        T(test_wrong_types_fail),
        T(test_config_not_a_regular_file),
        T(test_duplicate_key),
        T(test_misconfigured_transport_fails_create),
        T(test_config_staged_per_thread),
        T(test_wrong_typed_enable_flag),
        T(test_set_config_bad_key),
        T(test_unknown_keys_ignored),
        T(test_log_levels),
        T(test_log_prefix),
        T(test_config_getters),
        T(test_send_notif_local),
        T(test_submit_notif_after_data_once),
        T(test_submit_notif_dropped_on_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
