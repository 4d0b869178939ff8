/* Metadata stores that demand credentials: argv[1] = etcd | redis | http
 * (argv[2] = the http test server script).  The test makes its own
 * certificates with the openssl command (a CA, a server certificate for
 * 127.0.0.1, a client certificate, and an unrelated "rogue" CA) and starts
 * its own server on free loopback ports:
 *  - etcd over https with --client-cert-auth and etcd auth enabled (user
 *    "tent" whose role may touch only the test's key prefix);
 *  - redis-server with an ACL user and the default user off;
 *  - http_meta_server.py over https requiring a client certificate.
 * With the right credentials one engine publishes and another opens its
 * segment by name through the store and moves bytes, every byte checked.
 * Without them (wrong password, no client certificate, unknown CA, a key
 * file others can read) tent_create_engine fails with an error naming the
 * store and what was refused.  A missing server binary or openssl fails the
 * test (CI installs them). */
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

#include "../common/meta_server.h"
#include "common/config.h"
#include "e2e_peer.h"
#include "meta/meta_kv.h"
#include "tent/transfer_engine.h"

#include <curl/curl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUF_LEN ((size_t)4 << 20)
#define PREFIX  "tsec/"

static const char *g_kind;
static const char *g_script;
static char g_tmp[128];
static char g_ca[192], g_cert[192], g_key[192], g_rogue[192], g_open_key[192];
static char g_url[128]; /* metadata_servers */
static int g_port, g_port2;
static pid_t g_srv = -1;

/* ---- helpers -------------------------------------------------------------- */

static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void make_certs(void)
{
    if (!ms_in_path("openssl"))
        fail_msg("openssl not in PATH (Debian package openssl)");
    const char *ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    int rc = sh("cd %s && exec >openssl.log 2>&1 && "
                "openssl req -x509 %s -keyout ca.key -out ca.crt -days 2 "
                "-subj /CN=tent-test-ca && "
                "openssl req -x509 %s -keyout rogue.key -out rogue.crt -days 2 "
                "-subj /CN=tent-test-ca && "
                "openssl req %s -keyout server.key -out server.csr "
                "-subj /CN=127.0.0.1 && "
                "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
                "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key "
                "-CAcreateserial -out server.crt -days 2 -extfile san.ext && "
                "openssl req %s -keyout client.key -out client.csr "
                "-subj /O=tent-client && "
                "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key "
                "-CAcreateserial -out client.crt -days 2 && "
                "chmod 600 *.key && cp client.key open.key && "
                "chmod 644 open.key",
                g_tmp, ec, ec, ec, ec);
    if (rc != 0)
        fail_msg("making certificates failed; see %s/openssl.log", g_tmp);
    snprintf(g_ca, sizeof(g_ca), "%s/ca.crt", g_tmp);
    snprintf(g_cert, sizeof(g_cert), "%s/client.crt", g_tmp);
    snprintf(g_key, sizeof(g_key), "%s/client.key", g_tmp);
    snprintf(g_rogue, sizeof(g_rogue), "%s/rogue.crt", g_tmp);
    snprintf(g_open_key, sizeof(g_open_key), "%s/open.key", g_tmp);
}

static size_t sink(char *p, size_t sz, size_t nm, void *ud)
{
    char *buf = ud;
    size_t have = strlen(buf), add = sz * nm;
    if (have + add < 4096) {
        memcpy(buf + have, p, add);
        buf[have + add] = 0;
    }
    return sz * nm;
}

/* POSTs json to the etcd gateway with the client certificate (and token);
 * the HTTP status, or -1 when the server could not be reached. */
static long gw(const char *path, const char *json, const char *token,
               char *ans)
{
    char url[256], auth[600];
    snprintf(url, sizeof(url), "https://127.0.0.1:%d%s", g_port, path);
    CURL *h = curl_easy_init();
    struct curl_slist *hd = curl_slist_append(NULL, "Expect:");
    if (token) {
        snprintf(auth, sizeof(auth), "Authorization: %s", token);
        hd = curl_slist_append(hd, auth);
    }
    ans[0] = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_CAINFO, g_ca);
    curl_easy_setopt(h, CURLOPT_SSLCERT, g_cert);
    curl_easy_setopt(h, CURLOPT_SSLKEY, g_key);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, ans);
    long st = -1;
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return st;
}

static void gw_ok(const char *path, const char *json, const char *token)
{
    char ans[4096];
    long st = gw(path, json, token, ans);
    if (st != 200)
        fail_msg("etcd %s %s: %ld %s", path, json, st, ans);
}

static void spawn(char *const argv[])
{
    char log[256];
    snprintf(log, sizeof(log), "%s/server.log", g_tmp);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    g_srv = pid;
}

/* Waits until ready() is true; fails when the server exits or 30 s pass. */
static void wait_ready(bool (*ready)(void))
{
    long t0 = ms_now_ms();
    while (!ready()) {
        int st;
        if (waitpid(g_srv, &st, WNOHANG) == g_srv) {
            g_srv = -1;
            fail_msg("%s server exited during start-up; see %s/server.log",
                     g_kind, g_tmp);
        }
        if (ms_now_ms() - t0 > 30000)
            fail_msg("%s server not ready after 30 s; see %s/server.log",
                     g_kind, g_tmp);
        usleep(50000);
    }
}

static bool etcd_ready(void)
{
    char ans[4096];
    return gw("/v3/kv/range", "{\"key\":\"AA==\"}", NULL, ans) == 200;
}

static bool redis_ready(void)
{
    struct tent_meta_kv_conf c = {.nendpoints = 1,
                                  .ttl_s = 30,
                                  .timeout_ms = 1000,
                                  .username = "tent",
                                  .password = "tentpw"};
    c.endpoints[0] = g_url;
    void *kv = NULL;
    if (tent_meta_redis_ops.create(&c, &kv))
        return false;
    int rc = tent_meta_redis_ops.put(kv, "ready", "1", 1);
    tent_meta_redis_ops.destroy(kv);
    return rc == 0;
}

static bool http_ready(void)
{
    struct tent_meta_kv_conf c = {.nendpoints = 1,
                                  .ttl_s = 30,
                                  .timeout_ms = 1000,
                                  .tls_ca_file = g_ca,
                                  .tls_cert_file = g_cert,
                                  .tls_key_file = g_key};
    c.endpoints[0] = g_url;
    void *kv = NULL;
    if (tent_meta_http_ops.create(&c, &kv))
        return false;
    int rc = tent_meta_http_ops.put(kv, "ready", "1", 1);
    tent_meta_http_ops.destroy(kv);
    return rc == 0;
}

static bool g_etcd_started;

/* Any answer at all (auth may be on: a range without a token is refused). */
static bool etcd_answers(void)
{
    char ans[4096];
    return gw("/v3/kv/range", "{\"key\":\"AA==\"}", NULL, ans) > 0;
}

static void start_etcd(void)
{
    char client[64], peer[64], cluster[96], dir[192];
    snprintf(client, sizeof(client), "https://127.0.0.1:%d", g_port);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", g_port2);
    snprintf(cluster, sizeof(cluster), "sec=%s", peer);
    snprintf(dir, sizeof(dir), "%s/data", g_tmp);
    char scrt[192], skey[192];
    snprintf(scrt, sizeof(scrt), "%s/server.crt", g_tmp);
    snprintf(skey, sizeof(skey), "%s/server.key", g_tmp);
    char *argv[] = {"etcd",
                    "--name",
                    "sec",
                    "--data-dir",
                    dir,
                    "--listen-client-urls",
                    client,
                    "--advertise-client-urls",
                    client,
                    "--listen-peer-urls",
                    peer,
                    "--initial-advertise-peer-urls",
                    peer,
                    "--initial-cluster",
                    cluster,
                    "--cert-file",
                    scrt,
                    "--key-file",
                    skey,
                    "--trusted-ca-file",
                    g_ca,
                    "--client-cert-auth",
                    NULL};
    bool again = g_etcd_started;
    spawn(argv);
    wait_ready(again ? etcd_answers : etcd_ready);
    if (again)
        return; /* the data directory keeps the users and auth on */
    g_etcd_started = true;
    /* root (needed to enable auth) and "tent", whose role covers PREFIX */
    gw_ok("/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"rootpw\"}",
          NULL);
    gw_ok("/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}", NULL);
    gw_ok("/v3/auth/role/add", "{\"name\":\"tent\"}", NULL);
    gw_ok("/v3/auth/role/grant",
          "{\"name\":\"tent\",\"perm\":{\"permType\":\"READWRITE\","
          "\"key\":\"dHNlYy8=\",\"range_end\":\"dHNlYzA=\"}}",
          NULL);
    gw_ok("/v3/auth/user/add", "{\"name\":\"tent\",\"password\":\"tentpw\"}",
          NULL);
    gw_ok("/v3/auth/user/grant", "{\"user\":\"tent\",\"role\":\"tent\"}", NULL);
    gw_ok("/v3/auth/enable", "{}", NULL);
    /* auth is on: a request without a token is refused now */
    char ans[4096];
    long st = gw("/v3/kv/put", "{\"key\":\"dHNlYy8=\",\"value\":\"AA==\"}",
                 NULL, ans);
    if (st == 200)
        fail_msg("etcd accepted a put without a token after auth/enable: %s",
                 ans);
}

static void start_redis(void)
{
    char port[16], dir[192];
    snprintf(port, sizeof(port), "%d", g_port);
    snprintf(dir, sizeof(dir), "%s/data", g_tmp);
    mkdir(dir, 0700);
    char *argv[] = {"redis-server", "--port", port, "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--dir", dir,
                    "--protected-mode", "no", "--daemonize", "no", "--user",
                    "tent", "on", ">tentpw", "~*", "&*", "+@all", "--user",
                    "default", "off", NULL};
    spawn(argv);
    wait_ready(redis_ready);
}

static void start_http(void)
{
    char port[16], scrt[192], skey[192];
    snprintf(port, sizeof(port), "%d", g_port);
    snprintf(scrt, sizeof(scrt), "%s/server.crt", g_tmp);
    snprintf(skey, sizeof(skey), "%s/server.key", g_tmp);
    char *argv[] = {"python3", (char *)g_script, port, scrt, skey, g_ca, NULL};
    spawn(argv);
    wait_ready(http_ready);
}

/* The whole configuration; NULL leaves a key unset. */
struct creds {
    const char *user, *password, *ca, *cert, *key;
};

static struct creds good(void)
{
    struct creds c = {0};
    if (strcmp(g_kind, "etcd") == 0)
        c = (struct creds){"tent", "tentpw", g_ca, g_cert, g_key};
    else if (strcmp(g_kind, "redis") == 0)
        c = (struct creds){"tent", "tentpw", NULL, NULL, NULL};
    else
        c = (struct creds){NULL, NULL, g_ca, g_cert, g_key};
    return c;
}

static tent_engine_t engine(const char *name, struct creds c)
{
    tent_config_reset_global();
    tent_set_config("log_level",
                    getenv("META_LOG") ? getenv("META_LOG") : "off");
    tent_set_config("transports/shm/enable", "false");
    tent_set_config("transports/tcp/enable", "true");
    tent_set_config("metadata_type", g_kind);
    tent_set_config("metadata_servers", g_url);
    tent_set_config("metadata_key_prefix", PREFIX);
    tent_set_config("metadata_timeout_ms", "2000");
    tent_set_config("local_segment_name", name);
    if (c.user)
        tent_set_config("metadata_username", c.user);
    if (c.password)
        tent_set_config("metadata_password", c.password);
    if (c.ca)
        tent_set_config("metadata_tls_ca_file", c.ca);
    if (c.cert)
        tent_set_config("metadata_tls_cert_file", c.cert);
    if (c.key)
        tent_set_config("metadata_tls_key_file", c.key);
    return tent_create_engine();
}

/* Creating an engine with c fails, naming the store and each of want. */
static void refused(struct creds c, const char *what, const char *want1,
                    const char *want2)
{
    tent_engine_t e = engine("refused", c);
    if (e) {
        tent_destroy_engine(e);
        fail_msg("%s: an engine was created", what);
    }
    const char *err = tent_last_error();
    print_message("%s: %s\n", what, err);
    if (want1 && !strstr(err, want1))
        fail_msg("%s: the error does not name '%s': %s", what, want1, err);
    if (want2 && !strstr(err, want2))
        fail_msg("%s: the error does not say '%s': %s", what, want2, err);
}

/* ---- tests ------------------------------------------------------------------
 */

static int setup(void **state)
{
    (void)state;
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/tent_meta_sec_XXXXXX");
    if (!mkdtemp(g_tmp))
        return -1;
    g_port = ms_free_port();
    g_port2 = ms_free_port();
    if (strcmp(g_kind, "etcd") == 0)
        snprintf(g_url, sizeof(g_url), "etcds://127.0.0.1:%d", g_port);
    else if (strcmp(g_kind, "redis") == 0)
        snprintf(g_url, sizeof(g_url), "redis://127.0.0.1:%d", g_port);
    else
        snprintf(g_url, sizeof(g_url), "https://127.0.0.1:%d/metadata", g_port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ms_stop(g_srv);
    if (!getenv("META_KEEP"))
        sh("rm -rf %s", g_tmp);
    return 0;
}

static void start(void)
{
    if (!ms_in_path(ms_server_bin(g_kind)))
        fail_msg("%s not in PATH (Debian package %s)", ms_server_bin(g_kind),
                 ms_server_package(g_kind));
    make_certs();
    if (strcmp(g_kind, "etcd") == 0)
        start_etcd();
    else if (strcmp(g_kind, "redis") == 0)
        start_redis();
    else
        start_http();
}

/* A publishes, B opens A's segment by name through the store and writes
 * then reads random bytes; A's memory and B's read-back are checked. */
static void test_secured_store_moves_bytes(void **state)
{
    (void)state;
    start();
    tent_engine_t a = engine("secA", good());
    if (!a)
        fail_msg("engine A: %s", tent_last_error());
    uint8_t *abuf = NULL, *src = NULL, *dst = NULL;
    assert_int_equal(tent_allocate_memory(a, (void **)&abuf, BUF_LEN, "cpu"),
                     0);
    assert_int_equal(tent_register_memory(a, abuf, BUF_LEN), 0);
    memset(abuf, 0, BUF_LEN);
    tent_engine_t b = engine("secB", good());
    if (!b)
        fail_msg("engine B: %s", tent_last_error());
    assert_int_equal(tent_allocate_memory(b, (void **)&src, BUF_LEN, "cpu"), 0);
    assert_int_equal(tent_allocate_memory(b, (void **)&dst, BUF_LEN, "cpu"), 0);
    assert_int_equal(tent_register_memory(b, src, BUF_LEN), 0);
    assert_int_equal(tent_register_memory(b, dst, BUF_LEN), 0);
    e2e_pattern_fill(src, BUF_LEN, 11);
    tent_segment_id_t seg;
    if (tent_open_segment(b, &seg, "secA"))
        fail_msg("open 'secA' through %s: %s", g_kind, tent_last_error());
    tent_request_t r = {.opcode = OPCODE_WRITE,
                        .source = src,
                        .target_id = seg,
                        .target_offset = (uintptr_t)abuf,
                        .length = BUF_LEN};
    tent_status_t st;
    tent_batch_id_t bt = tent_allocate_batch(b, 1);
    assert_int_equal(tent_submit(b, bt, &r, 1), 0);
    assert_int_equal(e2e_wait(b, bt, 20000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(b, bt), 0);
    assert_memory_equal(abuf, src, BUF_LEN);
    r.opcode = OPCODE_READ;
    r.source = dst;
    bt = tent_allocate_batch(b, 1);
    assert_int_equal(tent_submit(b, bt, &r, 1), 0);
    assert_int_equal(e2e_wait(b, bt, 20000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(b, bt), 0);
    assert_memory_equal(dst, src, BUF_LEN);
    tent_destroy_engine(b);
    tent_destroy_engine(a);
}

static void test_without_credentials_refused(void **state)
{
    (void)state;
    struct creds c = good();
    char where[160];
    snprintf(where, sizeof(where), "127.0.0.1:%d", g_port);
    if (strcmp(g_kind, "redis") == 0) {
        c.password = "wrong";
        refused(c, "wrong password", where, "WRONGPASS");
        c = good();
        c.user = c.password = NULL;
        refused(c, "no credentials", where, "NOAUTH");
        c = good();
        c.ca = g_ca;
        refused(c, "TLS asked of redis", "metadata_tls_ca_file",
                "not supported");
        char url[sizeof(g_url)];
        memcpy(url, g_url, sizeof(url));
        snprintf(g_url, sizeof(g_url), "rediss://127.0.0.1:%d", g_port);
        refused(good(), "rediss:// endpoint", "rediss://", "not supported");
        memcpy(g_url, url, sizeof(url));
        return;
    }
    if (strcmp(g_kind, "etcd") == 0) {
        c.password = "wrong";
        refused(c, "wrong password", where, "authentication failed");
        c = good();
        c.user = c.password = NULL;
        refused(c, "no user", where, NULL);
        c = good();
        c.user = NULL;
        refused(c, "password without user", "metadata_username", NULL);
    }
    c = good();
    c.cert = c.key = NULL;
    refused(c, "no client certificate", where, NULL);
    c = good();
    c.ca = g_rogue;
    refused(c, "unknown CA", where, "certificate");
    c = good();
    c.ca = NULL;
    refused(c, "no CA file (system store)", where, "certificate");
    c = good();
    c.key = NULL;
    refused(c, "certificate without key", "metadata_tls_key_file", NULL);
    c = good();
    c.key = g_open_key;
    refused(c, "key file readable by others", "metadata_tls_key_file",
            g_open_key);
}

static int etcd_kv_get(const char *key)
{
    struct tent_meta_kv_conf c = {.nendpoints = 1,
                                  .ttl_s = 30,
                                  .timeout_ms = 2000,
                                  .username = "tent",
                                  .password = "tentpw",
                                  .tls_ca_file = g_ca,
                                  .tls_cert_file = g_cert,
                                  .tls_key_file = g_key};
    c.endpoints[0] = g_url;
    void *kv = NULL;
    char *val = NULL;
    size_t len = 0;
    assert_int_equal(tent_meta_etcd_ops.create(&c, &kv), 0);
    int rc = tent_meta_etcd_ops.get(kv, key, &val, &len);
    free(val);
    tent_meta_etcd_ops.destroy(kv);
    return rc;
}

/* etcd's simple tokens live in the server's memory: after a restart the
 * token an engine got before is rejected ("invalid auth token").  The
 * engine authenticates again: its segment is still opened and read through
 * the store, and destroying it deletes its key at once (without the second
 * authentication the delete fails and the key stays until its lease ends). */
static void test_etcd_token_rejected_reauthenticates(void **state)
{
    (void)state;
    if (strcmp(g_kind, "etcd") != 0)
        skip();
    tent_engine_t a = engine("secR", good());
    if (!a)
        fail_msg("engine: %s", tent_last_error());
    uint8_t *abuf = NULL, *dst = NULL;
    assert_int_equal(tent_allocate_memory(a, (void **)&abuf, BUF_LEN, "cpu"),
                     0);
    assert_int_equal(tent_register_memory(a, abuf, BUF_LEN), 0);
    e2e_pattern_fill(abuf, BUF_LEN, 5);
    ms_stop(g_srv);
    start_etcd();
    assert_int_equal(etcd_kv_get(PREFIX "secR"), 0);
    tent_engine_t b = engine("secS", good());
    if (!b)
        fail_msg("engine B: %s", tent_last_error());
    assert_int_equal(tent_allocate_memory(b, (void **)&dst, BUF_LEN, "cpu"), 0);
    assert_int_equal(tent_register_memory(b, dst, BUF_LEN), 0);
    tent_segment_id_t seg;
    if (tent_open_segment(b, &seg, "secR"))
        fail_msg("open 'secR' after the restart: %s", tent_last_error());
    tent_request_t r = {.opcode = OPCODE_READ,
                        .source = dst,
                        .target_id = seg,
                        .target_offset = (uintptr_t)abuf,
                        .length = BUF_LEN};
    tent_status_t st;
    tent_batch_id_t bt = tent_allocate_batch(b, 1);
    assert_int_equal(tent_submit(b, bt, &r, 1), 0);
    assert_int_equal(e2e_wait(b, bt, 20000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    assert_int_equal(tent_free_batch(b, bt), 0);
    assert_memory_equal(dst, abuf, BUF_LEN);
    tent_destroy_engine(b);
    tent_destroy_engine(a);
    int rc = etcd_kv_get(PREFIX "secR");
    if (rc != TENT_ENOSEGMENT)
        fail_msg("key of the destroyed engine: %d %s", rc,
                 rc ? tent_last_error() : "still there");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    g_kind = argv[1];
    g_script = argc > 2 ? argv[2] : "";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secured_store_moves_bytes),
        cmocka_unit_test(test_without_credentials_refused),
        cmocka_unit_test(test_etcd_token_rejected_reauthenticates),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
