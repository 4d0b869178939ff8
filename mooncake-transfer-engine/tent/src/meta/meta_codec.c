#include "meta/meta_codec.h"

#include "common/error.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- base64 and percent-encoding ---- */

static const char B64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *tent_b64_encode(const void *in, size_t n)
{
    const uint8_t *p = in;
    char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
    if (!out)
        return NULL;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = B64[v >> 18];
        *o++ = B64[(v >> 12) & 63];
        *o++ = B64[(v >> 6) & 63];
        *o++ = B64[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        *o++ = B64[v >> 18];
        *o++ = B64[(v >> 12) & 63];
        *o++ = i + 1 < n ? B64[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o = 0;
    return out;
}

static int b64_val(char c)
{
    const char *p = c ? strchr(B64, c) : NULL;
    return p ? (int)(p - B64) : -1;
}

/* Decodes NUL-terminated base64 into a malloc'd NUL-terminated buffer. */
int tent_b64_decode(const char *in, char **out, size_t *outlen)
{
    size_t n = strlen(in);
    if (n % 4)
        return TENT_EPROTO;
    char *o = malloc(n / 4 * 3 + 1);
    if (!o)
        return TENT_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int j = 0; j < 4; j++) {
            v[j] = b64_val(in[i + j]);
            bool pad = in[i + j] == '=' && i + 4 == n && j >= 2 &&
                       (j == 3 || in[i + 3] == '=');
            if (v[j] < 0 && !pad) {
                free(o);
                return TENT_EPROTO;
            }
        }
        o[k++] = (char)(v[0] << 2 | v[1] >> 4);
        if (v[2] >= 0)
            o[k++] = (char)((v[1] & 15) << 4 | v[2] >> 2);
        if (v[2] >= 0 && v[3] >= 0)
            o[k++] = (char)((v[2] & 3) << 6 | v[3]);
    }
    o[k] = 0;
    *out = o;
    *outlen = k;
    return TENT_OK;
}

char *tent_pct_encode(const char *s)
{
    char *out = malloc(3 * strlen(s) + 1), *o = out;
    if (!out)
        return NULL;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
            (c >= '0' && c <= '9') || strchr("-_.~/", c))
            *o++ = (char)c;
        else
            o += sprintf(o, "%%%02X", c);
    }
    *o = 0;
    return out;
}

/* ---- etcd gateway answers ---- */

int tent_meta_etcd_range_value(const cJSON *ans, const char *key, char **val,
                               size_t *len)
{
    const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(ans, "kvs");
    const cJSON *kv = cJSON_IsArray(kvs) ? cJSON_GetArrayItem(kvs, 0) : NULL;
    const cJSON *v = cJSON_IsObject(kv)
                         ? cJSON_GetObjectItemCaseSensitive(kv, "value")
                         : NULL;
    if (!cJSON_IsObject(kv))
        return tent_set_error(TENT_ENOSEGMENT, "etcd: no key '%s'", key);
    if (!v) {
        /* an empty value is omitted by the gateway */
        *val = calloc(1, 1);
        *len = 0;
        return *val ? TENT_OK
                    : tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    }
    if (!cJSON_IsString(v) || tent_b64_decode(v->valuestring, val, len))
        return tent_set_error(TENT_EPROTO, "etcd: value of '%s' is not base64",
                              key);
    return TENT_OK;
}

int tent_meta_etcd_lease_id(const cJSON *ans, char *out, size_t cap)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(ans, "ID");
    if (!cJSON_IsString(id) || !id->valuestring[0] ||
        strspn(id->valuestring, "0123456789") != strlen(id->valuestring) ||
        strlen(id->valuestring) >= cap)
        return TENT_EPROTO;
    memcpy(out, id->valuestring, strlen(id->valuestring) + 1);
    return TENT_OK;
}

long tent_meta_etcd_keepalive_ttl(const cJSON *ans)
{
    /* {"result":{"ID":"..","TTL":"10"}}; an expired lease has no TTL. */
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(ans, "result");
    const cJSON *ttl = cJSON_IsObject(res)
                           ? cJSON_GetObjectItemCaseSensitive(res, "TTL")
                           : NULL;
    if (cJSON_IsString(ttl)) {
        char *end = NULL;
        long t = strtol(ttl->valuestring, &end, 10);
        return end && *end == 0 ? t : 0;
    }
    if (cJSON_IsNumber(ttl) && ttl->valuedouble > 0 && ttl->valuedouble < 1e9)
        return (long)ttl->valuedouble;
    return 0;
}

int tent_meta_etcd_range_keys(const cJSON *ans, char ***keys, size_t *n)
{
    const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(ans, "kvs");
    int cnt = cJSON_IsArray(kvs) ? cJSON_GetArraySize(kvs) : 0;
    *keys = NULL;
    *n = 0;
    if (cnt == 0)
        return TENT_OK;
    char **out = calloc((size_t)cnt, sizeof(*out));
    if (!out)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    size_t k = 0;
    const cJSON *kv;
    cJSON_ArrayForEach(kv, kvs) {
        const cJSON *key = cJSON_IsObject(kv)
                               ? cJSON_GetObjectItemCaseSensitive(kv, "key")
                               : NULL;
        size_t len;
        if (!cJSON_IsString(key) ||
            tent_b64_decode(key->valuestring, &out[k], &len)) {
            for (size_t i = 0; i < k; i++)
                free(out[i]);
            free(out);
            return tent_set_error(TENT_EPROTO,
                                  "etcd: key %zu of the range answer is not "
                                  "base64",
                                  k);
        }
        k++;
    }
    *keys = out;
    *n = k;
    return TENT_OK;
}

char *tent_meta_etcd_prefix_end(const char *prefix)
{
    size_t l = strlen(prefix);
    while (l && (unsigned char)prefix[l - 1] == 0xff)
        l--;
    if (l == 0)
        return tent_b64_encode("", 1);
    char *end = strndup(prefix, l);
    if (!end)
        return NULL;
    end[l - 1] = (char)((unsigned char)end[l - 1] + 1);
    char *b = tent_b64_encode(end, l);
    free(end);
    return b;
}
