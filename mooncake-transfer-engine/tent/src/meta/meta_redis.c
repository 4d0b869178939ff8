/* Redis backend of the metadata service (hiredis): SET key value EX ttl,
 * GET, DEL, and EXPIRE to refresh (0 = the key is gone: put it again).
 * Optional AUTH ([user] password) and SELECT db from the configuration.
 * Endpoints are "host[:port]" (default port 6379), "redis://" accepted;
 * "rediss://" is refused: the hiredis in Debian (0.14) has no TLS. */
#include "common/error.h"
#include "common/log.h"
#include "meta/meta_kv.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

struct rkv {
    char host[TENT_META_MAX_ENDPOINTS][256];
    int port[TENT_META_MAX_ENDPOINTS];
    int n, cur;
    int ttl_s, timeout_ms, db;
    char *username, *password;
    redisContext *ctx; /* NULL = not connected */
};

static int parse_ep(const char *ep, char *host, size_t cap, int *port)
{
    if (strncmp(ep, "rediss://", 9) == 0)
        return TENT_ENOTSUP; /* TLS: hiredis 0.14 has none */
    if (strncmp(ep, "redis://", 8) == 0)
        ep += 8;
    const char *colon = strrchr(ep, ':');
    const char *end = ep + strlen(ep);
    *port = 6379;
    if (ep[0] == '[') { /* [v6]:port */
        const char *rb = strchr(ep, ']');
        if (!rb)
            return TENT_ECONFIG;
        colon = rb[1] == ':' ? rb + 1 : NULL;
        end = rb;
        ep++;
    } else if (colon && strchr(ep, ':') != colon) {
        colon = NULL; /* bare IPv6 address */
    }
    if (colon) {
        char *e = NULL;
        long p = strtol(colon + 1, &e, 10);
        if (!*(colon + 1) || *e || p < 1 || p > 65535)
            return TENT_ECONFIG;
        *port = (int)p;
        if (end > colon)
            end = colon;
    }
    size_t len = (size_t)(end - ep);
    if (len == 0 || len >= cap)
        return TENT_ECONFIG;
    memcpy(host, ep, len);
    host[len] = 0;
    return TENT_OK;
}

static int rkv_create(const struct tent_meta_kv_conf *c, void **out)
{
    struct rkv *s = calloc(1, sizeof(*s));
    if (!s)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    for (int i = 0; i < c->nendpoints; i++) {
        int prc = parse_ep(c->endpoints[i], s->host[i], sizeof(s->host[i]),
                           &s->port[i]);
        if (prc == TENT_ENOTSUP) {
            free(s);
            return tent_set_error(TENT_ENOTSUP,
                                  "config key 'metadata_servers': '%s': redis "
                                  "over TLS is not supported (the hiredis this "
                                  "library is built with has no TLS)",
                                  c->endpoints[i]);
        }
        if (prc) {
            free(s);
            return tent_set_error(TENT_ECONFIG,
                                  "config key 'metadata_servers': '%s' is not "
                                  "a redis endpoint (host[:port])",
                                  c->endpoints[i]);
        }
        s->n++;
    }
    s->ttl_s = c->ttl_s;
    s->timeout_ms = c->timeout_ms;
    s->db = c->db;
    if ((c->password && *c->password && !(s->password = strdup(c->password))) ||
        (c->username && *c->username && !(s->username = strdup(c->username)))) {
        free(s->password);
        free(s);
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    }
    *out = s;
    return TENT_OK;
}

static void rkv_disconnect(struct rkv *s)
{
    if (s->ctx)
        redisFree(s->ctx);
    s->ctx = NULL;
}

static void rkv_destroy(void *st)
{
    struct rkv *s = st;
    if (!s)
        return;
    rkv_disconnect(s);
    if (s->password)
        explicit_bzero(s->password, strlen(s->password));
    free(s->password);
    free(s->username);
    free(s);
}

/* Runs a command on the current connection; a failed connection is dropped
 * (TENT_EPEER), an error reply is TENT_EIO. */
static int raw_cmd(struct rkv *s, int argc, const char **argv,
                   const size_t *lens, redisReply **out)
{
    redisReply *r = redisCommandArgv(s->ctx, argc, argv, lens);
    if (!r) {
        int rc = tent_set_error(
            TENT_EPEER, "redis %s:%d: %s", s->host[s->cur], s->port[s->cur],
            s->ctx->errstr[0] ? s->ctx->errstr : "connection lost");
        rkv_disconnect(s);
        return rc;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        int rc = tent_set_error(TENT_EIO, "redis %s:%d: %s %s", s->host[s->cur],
                                s->port[s->cur], argv[0], r->str);
        freeReplyObject(r);
        return rc;
    }
    *out = r;
    return TENT_OK;
}

static int connect_one(struct rkv *s, int i)
{
    struct timeval tv = {s->timeout_ms / 1000,
                         (suseconds_t)(s->timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(s->host[i], s->port[i], tv);
    if (!c || c->err) {
        int rc = tent_set_error(TENT_EPEER, "redis %s:%d: %s", s->host[i],
                                s->port[i], c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return rc;
    }
    redisSetTimeout(c, tv);
    s->ctx = c;
    s->cur = i;
    redisReply *r = NULL;
    int rc = TENT_OK;
    if (s->password) {
        /* Redis 6 ACL form "AUTH user pass", or the requirepass form */
        const char *argv[] = {"AUTH", s->username, s->password};
        if (!s->username)
            argv[1] = s->password;
        rc = raw_cmd(s, s->username ? 3 : 2, argv, NULL, &r);
        freeReplyObject(r);
        r = NULL;
    }
    if (!rc && s->db) {
        char db[16];
        snprintf(db, sizeof(db), "%d", s->db);
        const char *argv[] = {"SELECT", db};
        rc = raw_cmd(s, 2, argv, NULL, &r);
        freeReplyObject(r);
    }
    if (rc) {
        /* AUTH / SELECT refused: a configuration problem, not an outage */
        rkv_disconnect(s);
        return rc == TENT_EIO ? TENT_ECONFIG : rc;
    }
    return TENT_OK;
}

/* Runs a command, connecting (and failing over between endpoints) first
 * when needed; a command whose connection broke is retried once on a fresh
 * connection. */
static int cmd(struct rkv *s, int argc, const char **argv, const size_t *lens,
               redisReply **out)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!s->ctx) {
            char errs[1024] = "";
            size_t el = 0;
            int rc = TENT_EPEER;
            for (int k = 0; k < s->n && !s->ctx; k++) {
                int i = (s->cur + k) % s->n;
                rc = connect_one(s, i);
                if (rc == TENT_ECONFIG)
                    return rc;
                if (rc && el < sizeof(errs))
                    el += (size_t)snprintf(errs + el, sizeof(errs) - el, "%s%s",
                                           el ? "; " : "", tent_last_error());
            }
            if (!s->ctx)
                return tent_set_error(TENT_EPEER,
                                      "metadata service unreachable: %s", errs);
        }
        int rc = raw_cmd(s, argc, argv, lens, out);
        if (rc != TENT_EPEER)
            return rc;
    }
    return TENT_EPEER;
}

static int rkv_put(void *st, const char *key, const char *val, size_t len)
{
    struct rkv *s = st;
    char ttl[16];
    snprintf(ttl, sizeof(ttl), "%d", s->ttl_s);
    const char *argv[] = {"SET", key, val, "EX", ttl};
    size_t lens[] = {3, strlen(key), len, 2, strlen(ttl)};
    redisReply *r = NULL;
    int rc = cmd(s, 5, argv, lens, &r);
    freeReplyObject(r);
    return rc;
}

static int rkv_get(void *st, const char *key, char **val, size_t *len)
{
    struct rkv *s = st;
    const char *argv[] = {"GET", key};
    redisReply *r = NULL;
    int rc = cmd(s, 2, argv, NULL, &r);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_NIL) {
        rc = tent_set_error(TENT_ENOSEGMENT, "redis: no key '%s'", key);
    } else if (r->type != REDIS_REPLY_STRING) {
        rc = tent_set_error(TENT_EPROTO, "redis: GET '%s' answered type %d",
                            key, r->type);
    } else if (!(*val = malloc(r->len + 1))) {
        rc = tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    } else {
        memcpy(*val, r->str, r->len);
        (*val)[r->len] = 0;
        *len = r->len;
    }
    freeReplyObject(r);
    return rc;
}

static int rkv_del(void *st, const char *key)
{
    const char *argv[] = {"DEL", key};
    redisReply *r = NULL;
    int rc = cmd(st, 2, argv, NULL, &r);
    freeReplyObject(r);
    return rc;
}

static int rkv_keepalive(void *st, const char *key, bool *lost)
{
    struct rkv *s = st;
    char ttl[16];
    snprintf(ttl, sizeof(ttl), "%d", s->ttl_s);
    const char *argv[] = {"EXPIRE", key, ttl};
    redisReply *r = NULL;
    int rc = cmd(s, 3, argv, NULL, &r);
    if (rc)
        return rc;
    *lost = r->type != REDIS_REPLY_INTEGER || r->integer != 1;
    freeReplyObject(r);
    return TENT_OK;
}

static int keys_add(char ***keys, size_t *n, size_t *cap, const char *k,
                    size_t len)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        char **v = realloc(*keys, nc * sizeof(*v));
        if (!v)
            return TENT_ENOMEM;
        *keys = v;
        *cap = nc;
    }
    if (!((*keys)[*n] = strndup(k, len)))
        return TENT_ENOMEM;
    (*n)++;
    return TENT_OK;
}

/* SCAN with a MATCH pattern of the prefix (glob characters escaped) until
 * the cursor comes back to 0; a key SCAN returns twice is kept twice. */
static int rkv_list(void *st, const char *prefix, char ***keys, size_t *n)
{
    char *pat = malloc(2 * strlen(prefix) + 2);
    if (!pat)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    size_t pl = 0;
    for (const char *p = prefix; *p; p++) {
        if (strchr("*?[]\\", *p))
            pat[pl++] = '\\';
        pat[pl++] = *p;
    }
    pat[pl++] = '*';
    pat[pl] = 0;
    char cursor[32] = "0";
    char **out = NULL;
    size_t cnt = 0, cap = 0;
    int rc = TENT_OK;
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", pat, "COUNT", "256"};
        redisReply *r = NULL;
        rc = cmd(st, 6, argv, NULL, &r);
        if (rc)
            break;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[0]->len >= sizeof(cursor) ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            rc = tent_set_error(TENT_EPROTO, "redis: SCAN answered type %d",
                                r->type);
        } else {
            snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
            const redisReply *ks = r->element[1];
            for (size_t i = 0; !rc && i < ks->elements; i++)
                if (ks->element[i]->type == REDIS_REPLY_STRING &&
                    keys_add(&out, &cnt, &cap, ks->element[i]->str,
                             ks->element[i]->len))
                    rc = tent_set_error(TENT_ENOMEM, "metadata: out of memory");
        }
        freeReplyObject(r);
    } while (!rc && strcmp(cursor, "0") != 0);
    free(pat);
    if (rc) {
        tent_meta_kv_keys_free(out, cnt);
        return rc;
    }
    *keys = out;
    *n = cnt;
    return TENT_OK;
}

const struct tent_meta_kv_ops tent_meta_redis_ops = {
    .list = rkv_list,
    .name = "redis",
    .create = rkv_create,
    .put = rkv_put,
    .get = rkv_get,
    .del = rkv_del,
    .keepalive = rkv_keepalive,
    .destroy = rkv_destroy,
};
