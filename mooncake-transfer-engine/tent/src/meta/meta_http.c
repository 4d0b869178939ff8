/* HTTP backends of the metadata service, over libcurl:
 *  - "etcd": the etcd v3 JSON gateway (POST /v3/kv/put, /v3/kv/range,
 *    /v3/kv/deleterange, /v3/lease/grant, /v3/lease/keepalive), keys and
 *    values base64-encoded; every key is attached to one lease of ttl_s
 *    seconds that the engine keeps alive.
 *  - "http": TENT's HTTP metadata server protocol: GET / PUT / DELETE on
 *    <endpoint>?key=<percent-encoded key>; 404 means absent.  The protocol
 *    has no expiry, so keepalive reports the key lost and the service layer
 *    puts it again every period (a restarted server gets it back). */
#include "common/compiler.h"
#include "common/error.h"
#include "common/log.h"
#include "meta/meta_codec.h"
#include "meta/meta_kv.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RESPONSE (64u << 20)

/* ---- one HTTP request ---------------------------------------------------- */

struct resp_buf {
    char *p;
    size_t n;
    bool overflow;
};

static size_t on_data(char *ptr, size_t sz, size_t nm, void *ud)
{
    struct resp_buf *b = ud;
    size_t add = sz * nm;
    if (b->n + add > MAX_RESPONSE) {
        b->overflow = true;
        return 0;
    }
    char *np = realloc(b->p, b->n + add + 1);
    if (!np)
        return 0;
    memcpy(np + b->n, ptr, add);
    b->p = np;
    b->n += add;
    b->p[b->n] = 0;
    return add;
}

struct endpoints {
    char *url[TENT_META_MAX_ENDPOINTS]; /* without a trailing '/' */
    int n, cur, timeout_ms;
    char *ca, *cert, *key; /* PEM files for https, or NULL */
    char auth[1024];       /* "Authorization: <etcd token>", or "" */
};

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_init_rc;

static void curl_init_once(void)
{
    g_curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* One request.  TENT_EPEER (message names url) when the server could not be
 * reached or did not answer in time; otherwise *status is the HTTP status
 * and *resp the NUL-terminated body (malloc'd, maybe empty). */
static int http_call(const struct endpoints *s, const char *method,
                     const char *url, const char *body, size_t blen, bool json,
                     long *status, char **resp)
{
    pthread_once(&g_curl_once, curl_init_once);
    if (g_curl_init_rc != CURLE_OK)
        return tent_set_error(TENT_ENODEV, "libcurl initialisation failed: %s",
                              curl_easy_strerror(g_curl_init_rc));
    CURL *h = curl_easy_init();
    if (!h)
        return tent_set_error(TENT_ENOMEM, "metadata: curl_easy_init failed");
    struct resp_buf rb = {0};
    struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");
    if (json && hdrs)
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    if (s->auth[0] && hdrs)
        hdrs = curl_slist_append(hdrs, s->auth);
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)s->timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)s->timeout_ms);
    /* a redirect must not carry the token or the client certificate
     * elsewhere, nor downgrade https to http */
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    if (s->ca)
        curl_easy_setopt(h, CURLOPT_CAINFO, s->ca);
    if (s->cert) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, s->cert);
        curl_easy_setopt(h, CURLOPT_SSLKEY, s->key);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &rb);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (strcmp(method, "GET") != 0)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
    }
    CURLcode cc = curl_easy_perform(h);
    int rc = TENT_OK;
    if (cc != CURLE_OK) {
        rc = tent_set_error(TENT_EPEER, "metadata server %s: %s%s%s%s", url,
                            curl_easy_strerror(cc), ebuf[0] ? " (" : "", ebuf,
                            rb.overflow ? " (response too large)"
                            : ebuf[0]   ? ")"
                                        : "");
    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
        if (!rb.p && !(rb.p = calloc(1, 1)))
            rc = tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    if (rc) {
        free(rb.p);
        return rc;
    }
    *resp = rb.p;
    return TENT_OK;
}

/* ---- endpoints ----------------------------------------------------------- */

static void endpoints_free(struct endpoints *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->url[i]);
    s->n = 0;
    free(s->ca);
    free(s->cert);
    free(s->key);
    s->ca = s->cert = s->key = NULL;
}

static int endpoints_init(struct endpoints *s,
                          const struct tent_meta_kv_conf *c)
{
    memset(s, 0, sizeof(*s));
    s->timeout_ms = c->timeout_ms;
    if ((c->tls_ca_file && !(s->ca = strdup(c->tls_ca_file))) ||
        (c->tls_cert_file && !(s->cert = strdup(c->tls_cert_file))) ||
        (c->tls_key_file && !(s->key = strdup(c->tls_key_file)))) {
        endpoints_free(s);
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    }
    for (int i = 0; i < c->nendpoints; i++) {
        const char *ep = c->endpoints[i], *scheme = "";
        /* etcd:// and etcds:// are spellings of http:// and https:// */
        if (strncmp(ep, "etcd://", 7) == 0) {
            scheme = "http://";
            ep += 7;
        } else if (strncmp(ep, "etcds://", 8) == 0) {
            scheme = "https://";
            ep += 8;
        } else if (!strstr(ep, "://")) {
            scheme = "http://";
        } else if (strncmp(ep, "http://", 7) != 0 &&
                   strncmp(ep, "https://", 8) != 0) {
            int rc = tent_set_error(TENT_ECONFIG,
                                    "config key 'metadata_servers': '%s' is "
                                    "not an http:// or https:// URL",
                                    ep);
            endpoints_free(s);
            return rc;
        }
        size_t len = strlen(ep) + strlen(scheme) + 1;
        char *u = malloc(len);
        if (!u) {
            endpoints_free(s);
            return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
        }
        snprintf(u, len, "%s%s", scheme, ep);
        size_t l = strlen(u);
        while (l > 0 && u[l - 1] == '/')
            u[--l] = 0;
        s->url[s->n++] = u;
    }
    return TENT_OK;
}

/* Sends the request to the current endpoint, then to each other one while
 * they are unreachable or answer 5xx.  suffix is appended to the endpoint
 * URL.  On failure the error lists every endpoint tried. */
static int endpoints_call(struct endpoints *s, const char *method,
                          const char *suffix, const char *body, size_t blen,
                          bool json, long *status, char **resp)
{
    char errs[1024] = "";
    size_t el = 0;
    for (int k = 0; k < s->n; k++) {
        int i = (s->cur + k) % s->n;
        size_t ulen = strlen(s->url[i]) + strlen(suffix) + 1;
        char *url = malloc(ulen);
        if (!url)
            return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
        snprintf(url, ulen, "%s%s", s->url[i], suffix);
        char *r = NULL;
        long st = 0;
        int rc = http_call(s, method, url, body, blen, json, &st, &r);
        free(url);
        if (rc == TENT_OK && st >= 500) {
            rc = tent_set_error(TENT_EPEER, "metadata server %s answered %ld",
                                s->url[i], st);
            free(r);
        }
        if (rc == TENT_OK) {
            if (i != s->cur)
                LOG_INFO("metadata: using endpoint %s", s->url[i]);
            s->cur = i;
            *status = st;
            *resp = r;
            return TENT_OK;
        }
        if (rc != TENT_EPEER)
            return rc;
        if (el < sizeof(errs))
            el += (size_t)snprintf(errs + el, sizeof(errs) - el, "%s%s",
                                   el ? "; " : "", tent_last_error());
    }
    return tent_set_error(TENT_EPEER, "metadata service unreachable: %s", errs);
}

/* ---- etcd ---------------------------------------------------------------- */

struct etcd {
    struct endpoints ep;
    int ttl_s;
    char lease[32];    /* decimal lease ID, "" = none granted */
    char *user, *pass; /* etcd auth, or NULL */
};

static int etcd_create(const struct tent_meta_kv_conf *c, void **out)
{
    struct etcd *s = calloc(1, sizeof(*s));
    if (!s)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    int rc = endpoints_init(&s->ep, c);
    if (rc) {
        free(s);
        return rc;
    }
    s->ttl_s = c->ttl_s;
    if (c->username && (!(s->user = strdup(c->username)) ||
                        !(s->pass = strdup(c->password ? c->password : "")))) {
        free(s->user);
        endpoints_free(&s->ep);
        free(s);
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    }
    *out = s;
    return TENT_OK;
}

static void etcd_destroy(void *st)
{
    struct etcd *s = st;
    if (!s)
        return;
    endpoints_free(&s->ep);
    free(s->user);
    if (s->pass) /* do not leave the password in freed memory */
        explicit_bzero(s->pass, strlen(s->pass));
    free(s->pass);
    explicit_bzero(s->ep.auth, sizeof(s->ep.auth));
    free(s);
}

/* POSTs a JSON body to an etcd gateway path and parses the JSON answer.
 * An answer with an "error" member (or a non-2xx status) is TENT_EIO with
 * the server's message. */
static int etcd_post_once(struct etcd *s, const char *path, cJSON *req,
                          cJSON **out)
{
    char *body = cJSON_PrintUnformatted(req);
    if (!body)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    long status = 0;
    char *resp = NULL;
    int rc = endpoints_call(&s->ep, "POST", path, body, strlen(body), true,
                            &status, &resp);
    free(body);
    if (rc)
        return rc;
    cJSON *j = cJSON_Parse(resp);
    if (!j || !cJSON_IsObject(j)) {
        rc = tent_set_error(
            TENT_EPROTO, "etcd %s%s: answer %ld is not a JSON object: %.200s",
            s->ep.url[s->ep.cur], path, status, resp);
        cJSON_Delete(j);
        free(resp);
        return rc;
    }
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (err || status < 200 || status > 299) {
        rc = tent_set_error(TENT_EIO, "etcd %s%s: %ld %s", s->ep.url[s->ep.cur],
                            path, status,
                            cJSON_IsString(err) ? err->valuestring : resp);
        cJSON_Delete(j);
        free(resp);
        return rc;
    }
    free(resp);
    *out = j;
    return TENT_OK;
}

/* POST /v3/auth/authenticate; the token goes into every later request's
 * Authorization header.  A refusal is TENT_ECONFIG (wrong credentials do not
 * heal by retrying). */
static int etcd_authenticate(struct etcd *s)
{
    s->ep.auth[0] = 0;
    cJSON *req = cJSON_CreateObject(), *ans = NULL;
    if (!req || !cJSON_AddStringToObject(req, "name", s->user) ||
        !cJSON_AddStringToObject(req, "password", s->pass)) {
        cJSON_Delete(req);
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    }
    int rc = etcd_post_once(s, "/v3/auth/authenticate", req, &ans);
    cJSON_Delete(req);
    if (rc == TENT_EIO)
        return tent_set_error(TENT_ECONFIG,
                              "etcd refused user '%s' (config keys "
                              "'metadata_username', 'metadata_password'): %s",
                              s->user, tent_last_error());
    if (rc)
        return rc;
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(ans, "token");
    if (!cJSON_IsString(tok) || !tok->valuestring[0] ||
        strlen(tok->valuestring) + 16 > sizeof(s->ep.auth)) {
        cJSON_Delete(ans);
        return tent_set_error(TENT_EPROTO,
                              "etcd %s: authentication of user '%s' answered "
                              "no usable token",
                              s->ep.url[s->ep.cur], s->user);
    }
    snprintf(s->ep.auth, sizeof(s->ep.auth), "Authorization: %s",
             tok->valuestring);
    cJSON_Delete(ans);
    return TENT_OK;
}

/* etcd_post_once with a token when auth is configured: authenticates first
 * when there is no token, and once more when the server rejects the token
 * (it expired, or the server restarted). */
static int etcd_post(struct etcd *s, const char *path, cJSON *req, cJSON **out)
{
    if (!s->user)
        return etcd_post_once(s, path, req, out);
    for (int attempt = 0; attempt < 2; attempt++) {
        int rc = s->ep.auth[0] ? TENT_OK : etcd_authenticate(s);
        if (rc)
            return rc;
        rc = etcd_post_once(s, path, req, out);
        if (rc == TENT_EIO && attempt == 0 &&
            (strstr(tent_last_error(), "invalid auth token") ||
             strstr(tent_last_error(), "auth store is old"))) {
            s->ep.auth[0] = 0;
            continue;
        }
        return rc;
    }
    return TENT_EIO;
}

static int etcd_grant(struct etcd *s)
{
    cJSON *req = cJSON_CreateObject(), *ans = NULL;
    if (!req || !cJSON_AddNumberToObject(req, "TTL", s->ttl_s)) {
        cJSON_Delete(req);
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    }
    int rc = etcd_post(s, "/v3/lease/grant", req, &ans);
    cJSON_Delete(req);
    if (rc)
        return rc;
    if (tent_meta_etcd_lease_id(ans, s->lease, sizeof(s->lease)) == TENT_OK)
        LOG_DEBUG("etcd: lease %s granted, TTL %d s", s->lease, s->ttl_s);
    else
        rc = tent_set_error(TENT_EPROTO,
                            "etcd lease grant: no lease ID in the answer");
    cJSON_Delete(ans);
    return rc;
}

static cJSON *key_req(const char *key)
{
    char *k = tent_b64_encode(key, strlen(key));
    cJSON *req = cJSON_CreateObject();
    if (!k || !req || !cJSON_AddStringToObject(req, "key", k)) {
        free(k);
        cJSON_Delete(req);
        return NULL;
    }
    free(k);
    return req;
}

static int etcd_put(void *st, const char *key, const char *val, size_t len)
{
    struct etcd *s = st;
    for (int attempt = 0; attempt < 2; attempt++) {
        int rc = s->lease[0] ? TENT_OK : etcd_grant(s);
        if (rc)
            return rc;
        cJSON *req = key_req(key), *ans = NULL;
        char *v = tent_b64_encode(val, len);
        if (!req || !v || !cJSON_AddStringToObject(req, "value", v) ||
            !cJSON_AddStringToObject(req, "lease", s->lease)) {
            free(v);
            cJSON_Delete(req);
            return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
        }
        free(v);
        rc = etcd_post(s, "/v3/kv/put", req, &ans);
        cJSON_Delete(req);
        cJSON_Delete(ans);
        if (rc == TENT_EIO && strstr(tent_last_error(), "lease not found")) {
            s->lease[0] = 0; /* expired (or the cluster was rebuilt) */
            continue;
        }
        return rc;
    }
    return tent_set_error(TENT_EIO, "etcd put '%s': the lease keeps vanishing",
                          key);
}

static int etcd_get(void *st, const char *key, char **val, size_t *len)
{
    struct etcd *s = st;
    cJSON *req = key_req(key), *ans = NULL;
    if (!req)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    int rc = etcd_post(s, "/v3/kv/range", req, &ans);
    cJSON_Delete(req);
    if (rc)
        return rc;
    rc = tent_meta_etcd_range_value(ans, key, val, len);
    cJSON_Delete(ans);
    return rc;
}

static int etcd_del(void *st, const char *key)
{
    struct etcd *s = st;
    cJSON *req = key_req(key), *ans = NULL;
    if (!req)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    int rc = etcd_post(s, "/v3/kv/deleterange", req, &ans);
    cJSON_Delete(req);
    cJSON_Delete(ans);
    return rc;
}

static int etcd_keepalive(void *st, TENT_UNUSED const char *key, bool *lost)
{
    struct etcd *s = st;
    *lost = false;
    if (!s->lease[0]) {
        *lost = true;
        return TENT_OK;
    }
    cJSON *req = cJSON_CreateObject(), *ans = NULL;
    if (!req || !cJSON_AddStringToObject(req, "ID", s->lease)) {
        cJSON_Delete(req);
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    }
    int rc = etcd_post(s, "/v3/lease/keepalive", req, &ans);
    cJSON_Delete(req);
    if (rc)
        return rc;
    long t = tent_meta_etcd_keepalive_ttl(ans);
    if (t <= 0) {
        LOG_WARN("etcd: lease %s expired; granting a new one", s->lease);
        s->lease[0] = 0;
        *lost = true;
    }
    cJSON_Delete(ans);
    return TENT_OK;
}

/* A keys_only range over [prefix, prefix_end). */
static int etcd_list(void *st, const char *prefix, char ***keys, size_t *n)
{
    struct etcd *s = st;
    cJSON *req = prefix[0] ? key_req(prefix) : cJSON_CreateObject(),
          *ans = NULL;
    char *end = tent_meta_etcd_prefix_end(prefix);
    if (!req || !end || !cJSON_AddStringToObject(req, "range_end", end) ||
        (!prefix[0] && !cJSON_AddStringToObject(req, "key", end)) ||
        !cJSON_AddBoolToObject(req, "keys_only", true)) {
        free(end);
        cJSON_Delete(req);
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    }
    free(end);
    int rc = etcd_post(s, "/v3/kv/range", req, &ans);
    cJSON_Delete(req);
    if (rc)
        return rc;
    rc = tent_meta_etcd_range_keys(ans, keys, n);
    cJSON_Delete(ans);
    return rc;
}

const struct tent_meta_kv_ops tent_meta_etcd_ops = {
    .name = "etcd",
    .create = etcd_create,
    .put = etcd_put,
    .get = etcd_get,
    .del = etcd_del,
    .keepalive = etcd_keepalive,
    .list = etcd_list,
    .destroy = etcd_destroy,
};

/* ---- TENT's HTTP metadata server ------------------------------------------
 */

struct httpkv {
    struct endpoints ep;
};

static int httpkv_create(const struct tent_meta_kv_conf *c, void **out)
{
    struct httpkv *s = calloc(1, sizeof(*s));
    if (!s)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    int rc = endpoints_init(&s->ep, c);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return TENT_OK;
}

static void httpkv_destroy(void *st)
{
    struct httpkv *s = st;
    if (!s)
        return;
    endpoints_free(&s->ep);
    free(s);
}

static int httpkv_call(struct httpkv *s, const char *method, const char *key,
                       const char *body, size_t blen, long *status, char **resp)
{
    char *k = tent_pct_encode(key);
    if (!k)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    const char *u = s->ep.n ? s->ep.url[s->ep.cur] : "";
    size_t qlen = strlen(k) + 8;
    char *q = malloc(qlen);
    if (!q) {
        free(k);
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    }
    /* every endpoint gets the same query; '&' when the URL has one */
    snprintf(q, qlen, "%ckey=%s", strchr(u, '?') ? '&' : '?', k);
    free(k);
    int rc = endpoints_call(&s->ep, method, q, body, blen, false, status, resp);
    free(q);
    return rc;
}

static int httpkv_put(void *st, const char *key, const char *val, size_t len)
{
    long status = 0;
    char *resp = NULL;
    int rc = httpkv_call(st, "PUT", key, val, len, &status, &resp);
    if (rc)
        return rc;
    if (status < 200 || status > 299)
        rc = tent_set_error(TENT_EIO,
                            "http metadata PUT '%s': status %ld: %.200s", key,
                            status, resp);
    free(resp);
    return rc;
}

static int httpkv_get(void *st, const char *key, char **val, size_t *len)
{
    long status = 0;
    char *resp = NULL;
    int rc = httpkv_call(st, "GET", key, NULL, 0, &status, &resp);
    if (rc)
        return rc;
    if (status == 404) {
        free(resp);
        return tent_set_error(TENT_ENOSEGMENT, "http metadata: no key '%s'",
                              key);
    }
    if (status < 200 || status > 299) {
        rc = tent_set_error(TENT_EIO, "http metadata GET '%s': status %ld", key,
                            status);
        free(resp);
        return rc;
    }
    *val = resp;
    *len = strlen(resp);
    return TENT_OK;
}

static int httpkv_del(void *st, const char *key)
{
    long status = 0;
    char *resp = NULL;
    int rc = httpkv_call(st, "DELETE", key, NULL, 0, &status, &resp);
    if (rc)
        return rc;
    if ((status < 200 || status > 299) && status != 404)
        rc = tent_set_error(TENT_EIO, "http metadata DELETE '%s': status %ld",
                            key, status);
    free(resp);
    return rc;
}

static int httpkv_keepalive(TENT_UNUSED void *st, TENT_UNUSED const char *key,
                            bool *lost)
{
    *lost = true; /* no expiry in this protocol: put again every period */
    return TENT_OK;
}

const struct tent_meta_kv_ops tent_meta_http_ops = {
    .name = "http",
    .create = httpkv_create,
    .put = httpkv_put,
    .get = httpkv_get,
    .del = httpkv_del,
    .keepalive = httpkv_keepalive,
    .destroy = httpkv_destroy,
};
