/* Codec of the RPC wire format (see wire.h).  Pure functions only: every
 * byte that comes from a socket passes through one of the decoders here
 * before anything else looks at it. */
#include "rpc/wire.h"

#include "common/error.h"
#include "tent/transfer_engine.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void tent_wire_encode_hdr(uint8_t out[TENT_WIRE_HDR_LEN], uint8_t type,
                          uint32_t seq, uint32_t len)
{
    put32(out, TENT_WIRE_MAGIC);
    out[4] = TENT_WIRE_VERSION;
    out[5] = type;
    put16(out + 6, 0);
    put32(out + 8, seq);
    put32(out + 12, len);
}

int tent_wire_decode_hdr(const uint8_t *in, size_t n, struct tent_wire_hdr *out)
{
    if (!in || n < TENT_WIRE_HDR_LEN)
        return tent_set_error(TENT_EPROTO, "frame header truncated: %zu bytes",
                              n);
    if (get32(in) != TENT_WIRE_MAGIC)
        return tent_set_error(TENT_EPROTO, "frame magic %#x is wrong",
                              get32(in));
    if (in[4] != TENT_WIRE_VERSION)
        return tent_set_error(TENT_EPROTO,
                              "frame version %u is not supported (want %u)",
                              in[4], TENT_WIRE_VERSION);
    if (get16(in + 6) != 0)
        return tent_set_error(TENT_EPROTO, "frame flags %#x are not 0",
                              get16(in + 6));
    uint8_t type = in[5];
    uint32_t len = get32(in + 12);
    uint32_t max;
    switch (type) {
    case TENT_WIRE_DESC_REQ:
        max = 0;
        break;
    case TENT_WIRE_NOTIFY:
        max = TENT_WIRE_MAX_NOTIFY;
        break;
    case 0:
        return tent_set_error(TENT_EPROTO, "frame type 0 is unknown");
    default: /* DESC_RESP, RESP, or a transport's */
        max = TENT_WIRE_MAX_BODY;
    }
    if (len > max)
        return tent_set_error(TENT_EPROTO,
                              "frame of type %u has body length %u > %u", type,
                              len, max);
    out->type = type;
    out->seq = get32(in + 8);
    out->len = len;
    return TENT_OK;
}

void tent_wire_encode_resp(uint8_t out[TENT_WIRE_RESP_LEN], int32_t status)
{
    put32(out, (uint32_t)status);
    put32(out + 4, 0);
}

int tent_wire_decode_resp(const uint8_t *in, size_t n, int32_t *status)
{
    if (!in || n < TENT_WIRE_RESP_LEN)
        return tent_set_error(TENT_EPROTO, "response truncated: %zu bytes", n);
    int32_t s = (int32_t)get32(in);
    if (s > 0 || s < -1000 || get32(in + 4) != 0)
        return tent_set_error(TENT_EPROTO, "response status %d is invalid", s);
    *status = s;
    return TENT_OK;
}

int tent_wire_encode_notify(uint8_t *out, const char *name, const char *msg,
                            const char *from)
{
    size_t nl = strlen(name), ml = strlen(msg), fl = strlen(from);
    if (nl > TENT_WIRE_MAX_NAME || ml > TENT_WIRE_MAX_MSG ||
        fl > TENT_WIRE_MAX_NAME)
        return tent_set_error(TENT_EINVAL,
                              "notification name, message or sender too long");
    put16(out, (uint16_t)nl);
    put16(out + 2, (uint16_t)ml);
    put16(out + 4, (uint16_t)fl);
    put16(out + 6, 0);
    /* length-prefixed strings: no NUL goes on the wire */
    // NOLINTBEGIN(bugprone-not-null-terminated-result)
    memcpy(out + 8, name, nl);
    memcpy(out + 8 + nl, msg, ml);
    memcpy(out + 8 + nl + ml, from, fl);
    // NOLINTEND(bugprone-not-null-terminated-result)
    return (int)(8 + nl + ml + fl);
}

int tent_wire_decode_notify(const uint8_t *in, size_t n,
                            struct tent_wire_notify *out)
{
    if (!in || n < 8)
        return tent_set_error(TENT_EPROTO, "notification truncated: %zu bytes",
                              n);
    size_t nl = get16(in), ml = get16(in + 2), fl = get16(in + 4);
    if (get16(in + 6) != 0)
        return tent_set_error(TENT_EPROTO, "notification padding is not 0");
    if (nl > TENT_WIRE_MAX_NAME || ml > TENT_WIRE_MAX_MSG ||
        fl > TENT_WIRE_MAX_NAME)
        return tent_set_error(TENT_EPROTO,
                              "notification field lengths %zu/%zu/%zu exceed "
                              "limits",
                              nl, ml, fl);
    if (8 + nl + ml + fl != n)
        return tent_set_error(TENT_EPROTO,
                              "notification lengths %zu+%zu+%zu do not match "
                              "body of %zu bytes",
                              nl, ml, fl, n);
    const uint8_t *p = in + 8;
    if (memchr(p, 0, nl + ml + fl))
        return tent_set_error(TENT_EPROTO, "notification contains a NUL byte");
    memcpy(out->name, p, nl);
    out->name[nl] = 0;
    memcpy(out->msg, p + nl, ml);
    out->msg[ml] = 0;
    memcpy(out->from, p + nl + ml, fl);
    out->from[fl] = 0;
    return TENT_OK;
}

/* ---- descriptor (JSON) -------------------------------------------------- */

static int add_u64(cJSON *o, const char *key, uint64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%" PRIu64, v);
    return cJSON_AddStringToObject(o, key, s) ? 0 : -1;
}

static int add_key(cJSON *o, const uint8_t key[TENT_WIRE_KEY_LEN])
{
    static const char hex[] = "0123456789abcdef";
    char s[2 * TENT_WIRE_KEY_LEN + 1];
    for (size_t i = 0; i < TENT_WIRE_KEY_LEN; i++) {
        s[2 * i] = hex[key[i] >> 4];
        s[2 * i + 1] = hex[key[i] & 15];
    }
    s[2 * (size_t)TENT_WIRE_KEY_LEN] = 0;
    return cJSON_AddStringToObject(o, "key", s) ? 0 : -1;
}

char *tent_wire_encode_desc(const struct tent_wire_desc *d, size_t *len)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    char *out = NULL;
    if (!cJSON_AddNumberToObject(root, "version", TENT_WIRE_DESC_VERSION) ||
        !cJSON_AddStringToObject(root, "name", d->name) ||
        !cJSON_AddStringToObject(root, "host_id", d->host_id) ||
        (d->incarnation && add_u64(root, "incarnation", d->incarnation)))
        goto done;
    cJSON *arr = cJSON_AddArrayToObject(root, "buffers");
    if (!arr)
        goto done;
    for (size_t i = 0; i < d->nbufs; i++) {
        const struct tent_wire_buf *b = &d->bufs[i];
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o))
            goto done;
        if (add_u64(o, "base", b->base) || add_u64(o, "length", b->length) ||
            !cJSON_AddStringToObject(o, "location", b->location) ||
            !cJSON_AddNumberToObject(o, "perm", b->perm) ||
            !cJSON_AddNumberToObject(o, "xport_mask", b->xport_mask) ||
            add_key(o, b->key))
            goto done;
        cJSON *ba = cJSON_AddObjectToObject(o, "attrs");
        if (!ba)
            goto done;
        for (int k = 0; k < b->nattrs; k++)
            if (!cJSON_AddStringToObject(ba, b->attrs[k].key,
                                         b->attrs[k].value))
                goto done;
    }
    cJSON *attrs = cJSON_AddObjectToObject(root, "attrs");
    if (!attrs)
        goto done;
    for (int i = 0; i < d->nattrs; i++)
        if (!cJSON_AddStringToObject(attrs, d->attr_key[i], d->attr_value[i]))
            goto done;
    out = cJSON_PrintUnformatted(root);
    if (out)
        *len = strlen(out);
done:
    cJSON_Delete(root);
    return out;
}

static int get_str(const cJSON *o, const char *key, char *dst, size_t cap,
                   const char *where)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(n) || !n->valuestring)
        return tent_set_error(TENT_EPROTO,
                              "descriptor %s: '%s' is missing or not a string",
                              where, key);
    size_t l = strlen(n->valuestring);
    if (l >= cap)
        return tent_set_error(TENT_EPROTO,
                              "descriptor %s: '%s' is %zu bytes, limit %zu",
                              where, key, l, cap - 1);
    memcpy(dst, n->valuestring, l + 1);
    return TENT_OK;
}

static int get_u64(const cJSON *o, const char *key, uint64_t *v,
                   const char *where)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, key);
    const char *s = cJSON_IsString(n) ? n->valuestring : NULL;
    if (!s || !*s || *s < '0' || *s > '9' || strlen(s) > 20)
        return tent_set_error(TENT_EPROTO,
                              "descriptor %s: '%s' is not a decimal string",
                              where, key);
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (*end || errno)
        return tent_set_error(TENT_EPROTO,
                              "descriptor %s: '%s' = '%s' is not a u64", where,
                              key, s);
    *v = x;
    return TENT_OK;
}

static int get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi,
                   int64_t *v, const char *where)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(n) || n->valuedouble < (double)lo ||
        n->valuedouble > (double)hi ||
        n->valuedouble != (double)(int64_t)n->valuedouble)
        return tent_set_error(TENT_EPROTO,
                              "descriptor %s: '%s' is missing or outside "
                              "%lld..%lld",
                              where, key, (long long)lo, (long long)hi);
    *v = (int64_t)n->valuedouble;
    return TENT_OK;
}

static int hex_val(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
}

/* A buffer's "key": 32 lower-case hex digits; absent leaves zeros. */
static int get_key(const cJSON *o, uint8_t key[TENT_WIRE_KEY_LEN],
                   const char *where)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "key");
    if (!n)
        return TENT_OK;
    const char *s = cJSON_IsString(n) ? n->valuestring : NULL;
    if (!s || strlen(s) != 2 * (size_t)TENT_WIRE_KEY_LEN)
        return tent_set_error(TENT_EPROTO,
                              "descriptor %s: 'key' is not %d hex digits",
                              where, 2 * TENT_WIRE_KEY_LEN);
    for (size_t i = 0; i < TENT_WIRE_KEY_LEN; i++) {
        int hi = hex_val(s[2 * i]), lo = hex_val(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return tent_set_error(TENT_EPROTO,
                                  "descriptor %s: 'key' is not %d hex digits",
                                  where, 2 * TENT_WIRE_KEY_LEN);
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return TENT_OK;
}

/* A buffer's "attrs": an object of at most TENT_WIRE_MAX_BUF_ATTRS short
 * strings; absent is none. */
static int decode_buf_attrs(const cJSON *o, struct tent_wire_buf *b,
                            const char *where)
{
    const cJSON *ba = cJSON_GetObjectItemCaseSensitive(o, "attrs");
    if (!ba)
        return TENT_OK;
    if (!cJSON_IsObject(ba))
        return tent_set_error(TENT_EPROTO,
                              "descriptor %s: 'attrs' is not an object", where);
    int n = cJSON_GetArraySize(ba);
    if (n > TENT_WIRE_MAX_BUF_ATTRS)
        return tent_set_error(TENT_EPROTO,
                              "descriptor %s has %d attributes, limit %d",
                              where, n, TENT_WIRE_MAX_BUF_ATTRS);
    if (n == 0)
        return TENT_OK;
    b->attrs = calloc((size_t)n, sizeof(*b->attrs));
    if (!b->attrs)
        return tent_set_error(TENT_ENOMEM, "descriptor: out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, ba) {
        struct tent_wire_kv *kv = &b->attrs[b->nattrs];
        if (!it->string || !*it->string ||
            strlen(it->string) >= sizeof(kv->key))
            return tent_set_error(TENT_EPROTO,
                                  "descriptor %s: an attribute key is empty or "
                                  "longer than %zu bytes",
                                  where, sizeof(kv->key) - 1);
        for (int k = 0; k < b->nattrs; k++)
            if (!strcmp(b->attrs[k].key, it->string))
                return tent_set_error(TENT_EPROTO,
                                      "descriptor %s: attribute '%s' appears "
                                      "twice",
                                      where, it->string);
        int rc = get_str(ba, it->string, kv->value, sizeof(kv->value), where);
        if (rc)
            return rc;
        memcpy(kv->key, it->string, strlen(it->string) + 1);
        b->nattrs++;
    }
    return TENT_OK;
}

static int decode_buf(const cJSON *o, size_t i, struct tent_wire_buf *b)
{
    char where[32];
    snprintf(where, sizeof(where), "buffer %zu", i);
    if (!cJSON_IsObject(o))
        return tent_set_error(TENT_EPROTO, "descriptor %s is not an object",
                              where);
    int64_t v = 0;
    int rc = get_u64(o, "base", &b->base, where);
    if (!rc)
        rc = get_u64(o, "length", &b->length, where);
    if (!rc)
        rc = get_str(o, "location", b->location, sizeof(b->location), where);
    if (!rc && !(rc = get_int(o, "perm", PERM_LOCAL_READ_WRITE,
                              PERM_GLOBAL_READ_WRITE, &v, where)))
        b->perm = (int)v;
    if (!rc && !(rc = get_int(o, "xport_mask", 0, UINT32_MAX, &v, where)))
        b->xport_mask = (uint32_t)v;
    if (!rc)
        rc = get_key(o, b->key, where);
    if (!rc)
        rc = decode_buf_attrs(o, b, where);
    if (rc)
        return rc;
    if (b->length == 0 || b->base + b->length < b->base)
        return tent_set_error(TENT_EPROTO,
                              "descriptor %s: [%" PRIu64 ", +%" PRIu64
                              ") is empty or wraps",
                              where, b->base, b->length);
    return TENT_OK;
}

int tent_wire_decode_desc(const char *in, size_t n, struct tent_wire_desc *out)
{
    if (!in || n == 0 || n > TENT_WIRE_MAX_BODY)
        return tent_set_error(TENT_EPROTO, "descriptor of %zu bytes refused",
                              n);
    cJSON *root = cJSON_ParseWithLength(in, n);
    if (!root)
        return tent_set_error(TENT_EPROTO, "descriptor is not valid JSON");
    struct tent_wire_desc d;
    memset(&d, 0, sizeof(d));
    int64_t ver = 0;
    int rc = cJSON_IsObject(root)
                 ? TENT_OK
                 : tent_set_error(TENT_EPROTO, "descriptor is not an object");
    if (!rc)
        rc = get_int(root, "version", 0, 255, &ver, "root");
    if (!rc && ver != TENT_WIRE_DESC_VERSION)
        rc = tent_set_error(TENT_EPROTO, "descriptor version %lld unsupported",
                            (long long)ver);
    if (!rc)
        rc = get_str(root, "name", d.name, sizeof(d.name), "root");
    if (!rc)
        rc = get_str(root, "host_id", d.host_id, sizeof(d.host_id), "root");
    if (!rc && cJSON_GetObjectItemCaseSensitive(root, "incarnation"))
        rc = get_u64(root, "incarnation", &d.incarnation, "root");
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "buffers");
    if (!rc && !cJSON_IsArray(arr))
        rc = tent_set_error(TENT_EPROTO,
                            "descriptor: 'buffers' is not an array");
    size_t nb = rc ? 0 : (size_t)cJSON_GetArraySize(arr);
    if (!rc && nb > TENT_WIRE_MAX_BUFS)
        rc = tent_set_error(TENT_EPROTO, "descriptor has %zu buffers, limit %u",
                            nb, TENT_WIRE_MAX_BUFS);
    if (!rc && nb) {
        d.bufs = calloc(nb, sizeof(*d.bufs));
        if (!d.bufs)
            rc = tent_set_error(TENT_ENOMEM, "descriptor: out of memory");
    }
    const cJSON *it;
    if (!rc) {
        cJSON_ArrayForEach(it, arr) {
            rc = decode_buf(it, d.nbufs, &d.bufs[d.nbufs]);
            d.nbufs++; /* its attrs are freed with it, even on failure */
            if (rc)
                break;
            /* Sorted and disjoint: what the segment's lookup relies on. */
            if (d.nbufs > 1) {
                const struct tent_wire_buf *p = &d.bufs[d.nbufs - 2];
                if (d.bufs[d.nbufs - 1].base < p->base + p->length) {
                    rc = tent_set_error(TENT_EPROTO,
                                        "descriptor buffer %zu overlaps or is "
                                        "out of order",
                                        d.nbufs - 1);
                    break;
                }
            }
        }
    }
    const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(root, "attrs");
    if (!rc && !cJSON_IsObject(attrs))
        rc =
            tent_set_error(TENT_EPROTO, "descriptor: 'attrs' is not an object");
    if (!rc) {
        cJSON_ArrayForEach(it, attrs) {
            if (d.nattrs == TENT_WIRE_MAX_ATTRS) {
                rc = tent_set_error(TENT_EPROTO,
                                    "descriptor has more than %d attributes",
                                    TENT_WIRE_MAX_ATTRS);
                break;
            }
            if (!it->string || strlen(it->string) >= sizeof(d.attr_key[0]) ||
                !*it->string) {
                rc = tent_set_error(TENT_EPROTO,
                                    "descriptor attribute key is empty or too "
                                    "long");
                break;
            }
            for (int k = 0; k < d.nattrs && !rc; k++)
                if (!strcmp(d.attr_key[k], it->string))
                    rc = tent_set_error(TENT_EPROTO,
                                        "descriptor attribute '%s' appears "
                                        "twice",
                                        it->string);
            if (rc)
                break;
            rc = get_str(attrs, it->string, d.attr_value[d.nattrs],
                         sizeof(d.attr_value[0]), "attrs");
            if (rc)
                break;
            snprintf(d.attr_key[d.nattrs], sizeof(d.attr_key[0]), "%s",
                     it->string);
            d.nattrs++;
        }
    }
    cJSON_Delete(root);
    if (rc) {
        tent_wire_desc_free(&d);
        return rc;
    }
    *out = d;
    return TENT_OK;
}

void tent_wire_desc_free(struct tent_wire_desc *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->nbufs; i++)
        free(d->bufs[i].attrs);
    free(d->bufs);
    d->bufs = NULL;
    d->nbufs = 0;
}
