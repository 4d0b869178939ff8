/* Metadata service: publishes the local descriptor to etcd / redis / an
 * HTTP metadata server and resolves peers' segment names there.
 *
 * The descriptor is the RPC server's DESC_RESP JSON (the runtime's describe
 * callback) and is decoded with tent_wire_decode_desc; the runtime installs
 * it as it installs one fetched in p2p mode, so that there is one encoding
 * and one set of buffer-lifetime rules.  Only discovery differs from p2p: the
 * data path and notifications still go to the rpc_addr in the descriptor.
 *
 * Locking: m->lock serialises every backend call and guards the fields
 * below it; the keepalive thread waits on m->cv with it.  Order: the
 * runtime's reg_lock -> m->lock -> segment locks (describe takes the local
 * segment's lock under m->lock).  A fetch holds m->lock only for the backend
 * call.
 *
 * Outages: a failed publish or keepalive marks the service down; while it
 * is down registration does not wait for it (the descriptor is marked dirty)
 * and the thread retries every period, re-publishing (with a new lease for
 * etcd) as soon as an endpoint answers.  Open segments keep working: their
 * data path never touches the service, and a refresh on a miss falls back
 * to the peer's RPC server. */
#include "common/auth.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "meta/meta.h"
#include "meta/meta_kv.h"
#include "metrics/metrics.h"
#include "rpc/rpc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct tent_meta {
    struct tent_meta_env env;
    char segment_name[320];
    const struct tent_meta_kv_ops *ops;
    void *kv;
    struct tent_meta_kv_conf conf;
    char type[16];
    char servers[512]; /* for messages */
    char prefix[256];
    char key[640];
    int period_ms;
    pthread_t thr;
    bool thr_started;

    /* Serialises every backend call; guards stop/up/dirty (and thr_started
     * against the thread's first read).  Taken before segment locks. */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool stop;
    bool up;    /* the last call to the service succeeded */
    bool dirty; /* the published descriptor is stale */
    /* what was last put under key (the keepalive puts it back when the
     * service holds something else) */
    char *published;
    size_t published_len;
};

static const struct {
    const char *type;
    const struct tent_meta_kv_ops *ops;
    const char *lib;
} g_backends[] = {
#ifdef TENT_WITH_CURL
    {"etcd", &tent_meta_etcd_ops, "libcurl"},
    {"http", &tent_meta_http_ops, "libcurl"},
#else
    {"etcd", NULL, "libcurl"},
    {"http", NULL, "libcurl"},
#endif
#ifdef TENT_WITH_HIREDIS
    {"redis", &tent_meta_redis_ops, "libhiredis"},
#else
    {"redis", NULL, "libhiredis"},
#endif
};

static void conf_free(struct tent_meta_kv_conf *c)
{
    for (int i = 0; i < c->nendpoints; i++)
        free(c->endpoints[i]);
    c->nendpoints = 0;
}

static int add_endpoint(struct tent_meta_kv_conf *c, const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t')) {
        s++;
        n--;
    }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0)
        return TENT_OK;
    if (c->nendpoints == TENT_META_MAX_ENDPOINTS)
        return tent_set_error(TENT_ECONFIG,
                              "config key 'metadata_servers' lists more than "
                              "%d endpoints",
                              TENT_META_MAX_ENDPOINTS);
    if (n > 400)
        return tent_set_error(TENT_ECONFIG,
                              "config key 'metadata_servers': an endpoint is "
                              "longer than 400 characters");
    char *e = strndup(s, n);
    if (!e)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    c->endpoints[c->nendpoints++] = e;
    return TENT_OK;
}

/* metadata_servers: "a,b" or ["a", "b"]. */
static int read_endpoints(const struct tent_config *cfg, const char *type,
                          struct tent_meta_kv_conf *c)
{
    const cJSON *n = tent_config_node(cfg, "metadata_servers");
    int rc = TENT_OK;
    if (cJSON_IsString(n)) {
        const char *p = n->valuestring;
        while (!rc && *p) {
            size_t len = strcspn(p, ",");
            rc = add_endpoint(c, p, len);
            p += len + (p[len] == ',');
        }
    } else if (cJSON_IsArray(n)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, n) {
            if (!cJSON_IsString(it)) {
                rc = tent_set_error(TENT_ECONFIG,
                                    "config key 'metadata_servers': every "
                                    "element must be a string");
                break;
            }
            rc = add_endpoint(c, it->valuestring, strlen(it->valuestring));
            if (rc)
                break;
        }
    } else if (n) {
        rc = tent_config_wrong_kind("metadata_servers", n,
                                    "a string (comma list) or an array of "
                                    "strings");
    }
    if (!rc && c->nendpoints == 0)
        rc = tent_set_error(TENT_ECONFIG,
                            "metadata_type '%s' needs config key "
                            "'metadata_servers' (endpoint list)",
                            type);
    if (rc)
        conf_free(c);
    return rc;
}

static int get_int(const struct tent_config *cfg, const char *key, int64_t def,
                   int64_t lo, int64_t hi, int *out)
{
    int64_t v;
    int rc = tent_config_get_int_range(cfg, key, def, lo, hi, &v);
    if (rc)
        return rc;
    *out = (int)v;
    return TENT_OK;
}

/* A PEM file named by config key `key`: it must be a readable regular file;
 * a private key must not be readable by group or others (a key that others
 * can read is no longer a credential, so it is refused rather than used). */
static int check_file(const char *key, const char *path, bool secret)
{
    struct stat st;
    if (!*path)
        return tent_set_error(TENT_ECONFIG, "config key '%s' is empty", key);
    if (stat(path, &st) != 0 || access(path, R_OK) != 0)
        return tent_set_error(TENT_ECONFIG,
                              "config key '%s': cannot read '%s': %s", key,
                              path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return tent_set_error(TENT_ECONFIG,
                              "config key '%s': '%s' is not a regular file",
                              key, path);
    if (secret && (st.st_mode & 077))
        return tent_set_error(
            TENT_ECONFIG,
            "config key '%s': private key '%s' is readable or "
            "writable by group or others (mode %04o); "
            "chmod 600 it",
            key, path, (unsigned)(st.st_mode & 07777));
    return TENT_OK;
}

/* metadata_username / metadata_tls_*_file.  The TLS files apply to https
 * endpoints of etcd and http; hiredis as Debian ships it (0.14) has no TLS,
 * so redis refuses them instead of silently talking in clear. */
static int read_credentials(struct tent_meta *m)
{
    const struct tent_config *cfg = m->env.cfg;
    struct tent_meta_kv_conf *c = &m->conf;
    int rc =
        tent_config_get_string(cfg, "metadata_username", NULL, &c->username);
    if (!rc)
        rc = tent_config_get_string(cfg, "metadata_tls_ca_file", NULL,
                                    &c->tls_ca_file);
    if (!rc)
        rc = tent_config_get_string(cfg, "metadata_tls_cert_file", NULL,
                                    &c->tls_cert_file);
    if (!rc)
        rc = tent_config_get_string(cfg, "metadata_tls_key_file", NULL,
                                    &c->tls_key_file);
    if (rc)
        return rc;
    if (c->username && !*c->username)
        return tent_set_error(TENT_ECONFIG, "config key 'metadata_username' is "
                                            "empty");
    if (c->username && (!c->password || !*c->password))
        return tent_set_error(TENT_ECONFIG,
                              "config key 'metadata_username' needs "
                              "'metadata_password'");
    if (strcmp(m->type, "etcd") == 0 && c->password && !c->username)
        return tent_set_error(TENT_ECONFIG,
                              "config key 'metadata_password': etcd needs "
                              "'metadata_username' too");
    if (!c->tls_cert_file != !c->tls_key_file)
        return tent_set_error(TENT_ECONFIG, "config key '%s' needs '%s' too",
                              c->tls_cert_file ? "metadata_tls_cert_file"
                                               : "metadata_tls_key_file",
                              c->tls_cert_file ? "metadata_tls_key_file"
                                               : "metadata_tls_cert_file");
    bool tls = c->tls_ca_file || c->tls_cert_file;
    if (tls && strcmp(m->type, "redis") == 0)
        return tent_set_error(TENT_ENOTSUP,
                              "config key '%s': redis over TLS is not "
                              "supported (the hiredis this library is built "
                              "with has no TLS)",
                              c->tls_ca_file ? "metadata_tls_ca_file"
                                             : "metadata_tls_cert_file");
    if (c->tls_ca_file)
        rc = check_file("metadata_tls_ca_file", c->tls_ca_file, false);
    if (!rc && c->tls_cert_file)
        rc = check_file("metadata_tls_cert_file", c->tls_cert_file, false);
    if (!rc && c->tls_key_file)
        rc = check_file("metadata_tls_key_file", c->tls_key_file, true);
    return rc;
}

static int read_conf(struct tent_meta *m)
{
    const struct tent_config *cfg = m->env.cfg;
    const char *prefix = NULL, *pw = NULL;
    int rc = get_int(cfg, "metadata_ttl_s", 10, 1, 3600, &m->conf.ttl_s);
    if (!rc)
        rc = get_int(cfg, "metadata_timeout_ms", 2000, 1, 600000,
                     &m->conf.timeout_ms);
    if (!rc)
        rc = get_int(cfg, "metadata_db", 0, 0, 1 << 20, &m->conf.db);
    if (!rc)
        rc = tent_config_get_string(cfg, "metadata_password", NULL, &pw);
    if (!rc)
        rc = tent_config_get_string(cfg, "metadata_key_prefix",
                                    "mooncake/tent/", &prefix);
    if (rc)
        return rc;
    if (strlen(prefix) >= sizeof(m->prefix))
        return tent_set_error(TENT_ECONFIG,
                              "config key 'metadata_key_prefix' is longer "
                              "than %zu characters",
                              sizeof(m->prefix) - 1);
    snprintf(m->prefix, sizeof(m->prefix), "%s", prefix);
    m->conf.password = pw; /* lives in the config, used during create only */
    rc = read_credentials(m);
    if (!rc)
        rc = read_endpoints(cfg, m->type, &m->conf);
    if (rc)
        return rc;
    size_t l = 0;
    for (int i = 0; i < m->conf.nendpoints && l < sizeof(m->servers); i++)
        l += (size_t)snprintf(m->servers + l, sizeof(m->servers) - l, "%s%s",
                              i ? "," : "", m->conf.endpoints[i]);
    m->period_ms = m->conf.ttl_s * 1000 / 3;
    if (m->period_ms < 100)
        m->period_ms = 100;
    return TENT_OK;
}

/* Publishes the local descriptor; caller holds m->lock. */
static int publish_locked(struct tent_meta *m)
{
    size_t len = 0;
    char *json = m->env.describe(m->env.ctx, &len);
    if (!json)
        return tent_set_error(TENT_ENOMEM, "metadata: cannot encode the local "
                                           "segment descriptor");
    if (m->env.auth) {
        size_t sl = 0;
        char *signed_json = tent_auth_sign_desc(m->env.auth, json, len, &sl);
        free(json);
        if (!signed_json)
            return tent_set_error(TENT_ENOMEM, "metadata: cannot sign the "
                                               "local segment descriptor");
        json = signed_json;
        len = sl;
    }
    m->dirty = false;
    int rc = m->ops->put(m->kv, m->key, json, len);
    if (rc) {
        free(json);
    } else {
        free(m->published);
        m->published = json;
        m->published_len = len;
    }
    if (rc) {
        m->dirty = true;
        tm_add(tm_shard(m->env.metrics), TM_META_PUBLISH_FAILURES, 0, 0, 1);
        if (m->up)
            LOG_WARN("metadata (%s): publishing '%s' failed: %s; retrying "
                     "every %d ms",
                     m->type, m->key, tent_last_error(), m->period_ms);
        m->up = false;
        return rc;
    }
    if (!m->up && m->thr_started)
        LOG_INFO("metadata (%s): service reachable again; segment '%s' "
                 "re-published under '%s'",
                 m->type, m->segment_name, m->key);
    m->up = true;
    return TENT_OK;
}

/* Whether the service holds another value under our key than the one we
 * put: a keepalive refreshes the TTL of whatever is there. */
static bool overwritten_locked(struct tent_meta *m)
{
    char *val = NULL;
    size_t len = 0;
    if (!m->published || m->ops->get(m->kv, m->key, &val, &len))
        return false; /* unknown: the next period asks again */
    bool other = len != m->published_len || memcmp(val, m->published, len) != 0;
    /* With the secret, a value another member signed is that member's (two
     * engines configured with one name): putting ours back every period
     * would flap peers between the two; say so instead.  Without it, a
     * rogue's value and a twin's cannot be told apart: ours goes back. */
    if (other && m->env.auth &&
        tent_auth_verify_desc(m->env.auth, m->segment_name, val, len, &len) ==
            TENT_OK) {
        LOG_WARN("metadata (%s): another engine with the cluster secret "
                 "publishes under '%s' (the same segment name twice?); "
                 "leaving its descriptor",
                 m->type, m->key);
        other = false;
    }
    free(val);
    return other;
}

static void *keeper(void *arg)
{
    struct tent_meta *m = arg;
    pthread_mutex_lock(&m->lock);
    while (!m->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += m->period_ms / 1000;
        ts.tv_nsec += (long)(m->period_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        int w = 0;
        while (!m->stop && w != ETIMEDOUT)
            w = pthread_cond_timedwait(&m->cv, &m->lock, &ts);
        if (m->stop)
            break;
        if (!m->up || m->dirty) {
            (void)publish_locked(m);
            continue;
        }
        bool lost = false;
        int rc = m->ops->keepalive(m->kv, m->key, &lost);
        if (rc) {
            tm_add(tm_shard(m->env.metrics), TM_META_PUBLISH_FAILURES, 0, 0, 1);
            LOG_WARN("metadata (%s): keepalive of '%s' failed: %s; the "
                     "segment stays usable by peers that have it open",
                     m->type, m->key, tent_last_error());
            m->up = false;
            m->dirty = true;
        } else if (lost) {
            (void)publish_locked(m);
        } else if (overwritten_locked(m)) {
            LOG_WARN("metadata (%s): the value under '%s' is not what this "
                     "engine published (overwritten by someone else); "
                     "publishing it again",
                     m->type, m->key);
            (void)publish_locked(m);
        }
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

static void service_default_name(TENT_UNUSED const char *rpc_addr, char *buf,
                                 size_t cap)
{
    /* names are unique, not addresses */
    char host[64] = "";
    if (gethostname(host, sizeof(host)) != 0 || !host[0])
        snprintf(host, sizeof(host), "tent");
    host[sizeof(host) - 1] = 0;
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (uint32_t)time(NULL) ^ (uint32_t)clock();
    snprintf(buf, cap, "%s-%ld-%08x", host, (long)getpid(), r);
}

static void meta_free(struct tent_meta *m)
{
    if (m->kv)
        m->ops->destroy(m->kv);
    conf_free(&m->conf);
    free(m->published);
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cv);
    free(m);
}

/* ---- segment ops -----------------------------------------------------------
 */

static int meta_fetch(struct tent_meta *m, const char *name, const char *addr,
                      struct tent_wire_desc *d)
{
    char key[640];
    if ((size_t)snprintf(key, sizeof(key), "%s%s", m->prefix, name) >=
        sizeof(key))
        return tent_set_error(TENT_EINVAL, "segment name '%s' is too long",
                              name);
    char *val = NULL;
    size_t len = 0;
    pthread_mutex_lock(&m->lock);
    int rc = m->ops->get(m->kv, key, &val, &len);
    pthread_mutex_unlock(&m->lock);
    char host[256];
    uint16_t port;
    if (rc == TENT_ENOSEGMENT &&
        tent_rpc_parse_addr(name, host, sizeof(host), &port) == TENT_OK) {
        /* "<host>:<port>" that nobody published: dial it as in p2p mode */
        LOG_DEBUG("segment '%s' is not in the %s service; trying it as an "
                  "RPC address",
                  name, m->type);
        return tent_meta_p2p_fetch(&m->env, name, addr, d);
    }
    if (rc == TENT_EPEER && addr) {
        LOG_WARN("segment '%s': %s; refreshing its descriptor from the peer's "
                 "RPC server instead",
                 name, tent_last_error());
        return tent_meta_p2p_fetch(&m->env, name, addr, d);
    }
    if (rc == TENT_ENOSEGMENT)
        return tent_set_error(TENT_ENOSEGMENT,
                              "segment '%s' not found: no key '%s' in the %s "
                              "metadata service (%s)",
                              name, key, m->type, m->servers);
    if (rc)
        return tent_set_error(TENT_ENOSEGMENT,
                              "segment '%s' not found: metadata lookup of "
                              "'%s' failed: %s",
                              name, key, tent_last_error());
    if (m->env.auth) {
        rc = tent_auth_verify_desc(m->env.auth, name, val, len, &len);
        if (rc) {
            free(val);
            LOG_ERROR("%s (key '%s' in the %s service)", tent_last_error(), key,
                      m->type);
            return rc;
        }
    }
    rc = tent_wire_decode_desc(val, len, d);
    free(val);
    if (rc)
        return tent_set_error(TENT_EPROTO,
                              "segment '%s': the descriptor under '%s' is "
                              "malformed: %s",
                              name, key, tent_last_error());
    if (strcmp(d->name, name) != 0) {
        rc = tent_set_error(TENT_EPROTO,
                            "segment '%s': the descriptor under '%s' names "
                            "segment '%s'",
                            name, key, d->name);
        tent_wire_desc_free(d);
        return rc;
    }
    LOG_DEBUG("resolved segment '%s' through %s: %zu buffer(s)", name, m->type,
              d->nbufs);
    return TENT_OK;
}

static int meta_notify(struct tent_meta *m, const char *addr, const char *name,
                       const char *msg, const char *from)
{
    return tent_meta_p2p_notify(&m->env, addr, name, msg, from);
}

/* ---- lifecycle
 * --------------------------------------------------------------- */

int tent_meta_find(const char *type, const struct tent_meta_ops **out)
{
    if (strcmp(type, "p2p") == 0) {
        *out = &tent_meta_p2p_ops;
        return TENT_OK;
    }
    size_t i = 0;
    for (; i < sizeof(g_backends) / sizeof(g_backends[0]); i++)
        if (strcmp(type, g_backends[i].type) == 0)
            break;
    if (i == sizeof(g_backends) / sizeof(g_backends[0]))
        return tent_set_error(TENT_ECONFIG,
                              "config key 'metadata_type' has unknown value "
                              "'%s' (accepted: p2p, etcd, redis, http)",
                              type);
    if (!g_backends[i].ops)
        return tent_set_error(TENT_ENOTSUP,
                              "metadata_type '%s' is not built in: %s was "
                              "missing when the library was configured",
                              type, g_backends[i].lib);
    *out = &tent_meta_service_ops;
    return TENT_OK;
}

static int meta_start(const struct tent_meta_env *env, struct tent_meta **out)
{
    const char *type = NULL;
    int rc = tent_config_get_string(env->cfg, "metadata_type", "p2p", &type);
    if (rc)
        return rc;
    const struct tent_meta_kv_ops *ops = NULL;
    for (size_t i = 0; i < sizeof(g_backends) / sizeof(g_backends[0]); i++)
        if (strcmp(type, g_backends[i].type) == 0)
            ops = g_backends[i].ops;
    if (!ops) /* tent_meta_find chose this backend */
        return tent_set_error(
            TENT_ECONFIG, "metadata_type '%s' has no service backend", type);
    struct tent_meta *m = calloc(1, sizeof(*m));
    if (!m)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    pthread_mutex_init(&m->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    m->env = *env;
    snprintf(m->segment_name, sizeof(m->segment_name), "%s", env->segment_name);
    m->env.segment_name = m->segment_name;
    m->ops = ops;
    snprintf(m->type, sizeof(m->type), "%s", type);
    rc = read_conf(m);
    if (rc)
        goto fail;
    if ((size_t)snprintf(m->key, sizeof(m->key), "%s%s", m->prefix,
                         m->segment_name) >= sizeof(m->key)) {
        rc = tent_set_error(TENT_ECONFIG, "metadata key '%s%s' is too long",
                            m->prefix, m->segment_name);
        goto fail;
    }
    rc = ops->create(&m->conf, &m->kv);
    if (rc)
        goto fail;
    m->conf.password = NULL;
    rc = publish_locked(m);
    if (rc) {
        rc = tent_set_error(rc,
                            "metadata service '%s' at %s: cannot publish "
                            "segment '%s': %s",
                            type, m->servers, m->segment_name,
                            tent_last_error());
        goto fail;
    }
    pthread_mutex_lock(&m->lock); /* the thread reads thr_started */
    m->thr_started = pthread_create(&m->thr, NULL, keeper, m) == 0;
    pthread_mutex_unlock(&m->lock);
    if (!m->thr_started) {
        (void)ops->del(m->kv, m->key);
        rc = tent_set_error(TENT_ENOMEM,
                            "metadata: cannot start the keepalive thread");
        goto fail;
    }
    LOG_INFO("metadata (%s at %s): segment '%s' under key '%s', TTL %d s", type,
             m->servers, m->segment_name, m->key, m->conf.ttl_s);
    *out = m;
    return TENT_OK;

fail:
    meta_free(m);
    return rc;
}

static void meta_local_changed(struct tent_meta *m)
{
    pthread_mutex_lock(&m->lock);
    if (m->up)
        (void)publish_locked(m);
    else
        m->dirty = true; /* the keepalive thread publishes on reconnect */
    pthread_mutex_unlock(&m->lock);
}

static void meta_stop(struct tent_meta *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    m->stop = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->lock);
    if (m->thr_started)
        pthread_join(m->thr, NULL);
    /* Peers must not find a segment that is going away; when the service is
     * down the key expires by itself (etcd, redis). */
    if (m->up && m->ops->del(m->kv, m->key) != TENT_OK)
        LOG_WARN("metadata (%s): deleting '%s' failed: %s", m->type, m->key,
                 tent_last_error());
    meta_free(m);
}

const struct tent_meta_ops tent_meta_service_ops = {
    .name = "metadata service",
    .default_name = service_default_name,
    .start = meta_start,
    .fetch = meta_fetch,
    .notify = meta_notify,
    .local_changed = meta_local_changed,
    .stop = meta_stop,
};
