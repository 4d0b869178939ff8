/* Key-value backends of the metadata service (etcd, redis, http).
 *
 * The service layer (meta_service.c) serialises every call on one backend
 * instance with its own mutex, so a backend needs no locking of its own.
 * Each call tries the configured endpoints in turn, starting with the one
 * that answered last, and fails only when none answers; the error then names
 * the endpoint(s) tried.  A key that does not exist is TENT_ENOSEGMENT, any
 * failure to reach the service is TENT_EPEER (so the caller can tell "gone"
 * from "unreachable"). */
#ifndef TENT_META_META_KV_H
#define TENT_META_META_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#define TENT_META_MAX_ENDPOINTS 16

struct tent_meta_kv_conf {
    char *endpoints[TENT_META_MAX_ENDPOINTS];
    int nendpoints;
    int ttl_s;            /* lease / expiry of put keys */
    int timeout_ms;       /* per request */
    const char *username; /* etcd user / redis ACL user, or NULL */
    const char *password; /* etcd user's / redis AUTH password, or NULL */
    int db;               /* redis SELECT */
    /* PEM files for https endpoints (etcd, http), or NULL: the CA that
     * signed the server's certificate, and this client's certificate and
     * key (both or neither). */
    const char *tls_ca_file;
    const char *tls_cert_file;
    const char *tls_key_file;
};

struct tent_meta_kv_ops {
    const char *name;
    /* Builds the backend state; does not contact the service. */
    int (*create)(const struct tent_meta_kv_conf *conf, void **out);
    /* Writes key = val, attached to the backend's lease / expiry. */
    int (*put)(void *st, const char *key, const char *val, size_t len);
    /* Reads key into a malloc'd, NUL-terminated *val. */
    int (*get)(void *st, const char *key, char **val, size_t *len);
    int (*del)(void *st, const char *key);
    /* Extends the lease / expiry of key; *lost is set when the key (or its
     * lease) is gone on the server and must be put again. */
    int (*keepalive)(void *st, const char *key, bool *lost);
    /* Every key that starts with prefix, into a malloc'd array of *n
     * malloc'd strings (free with tent_meta_kv_keys_free); NULL when the
     * service has no way to enumerate keys (TENT's HTTP protocol). */
    int (*list)(void *st, const char *prefix, char ***keys, size_t *n);
    void (*destroy)(void *st);
};

static inline void tent_meta_kv_keys_free(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
}

#ifdef TENT_WITH_CURL
extern const struct tent_meta_kv_ops tent_meta_etcd_ops;
extern const struct tent_meta_kv_ops tent_meta_http_ops;
#endif
#ifdef TENT_WITH_HIREDIS
extern const struct tent_meta_kv_ops tent_meta_redis_ops;
#endif

#endif
