/* tent-admin: an operator's view of TENT engines (docs/tent-admin.md,
 * man/tent-admin.1).
 *
 *   list      the segments published in a metadata store (etcd, redis)
 *   describe  one segment's descriptor, from its RPC server or the store
 *   ping      round trips and a double read of a peer's buffer through a
 *             real engine (public API)
 *   rails     the rails of a running engine, from its metrics endpoint
 *
 * It links the library's internals for the metadata backends, the RPC
 * client and the descriptor codec, so that it decodes exactly what the
 * engine decodes.  Exit codes: 0 ok, 1 the operation failed, 2 bad usage,
 * 3 not supported here, 4 ping's double read differed. */
#include "meta/meta_kv.h"
#include "rpc/rpc.h"
#include "rpc/wire.h"
#include "tent/transfer_engine.h"
#include "transport/tcp/tcp_wire.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { EX_OK = 0, EX_FAIL = 1, EX_USAGE = 2, EX_NOTSUP = 3, EX_MISMATCH = 4 };

struct opts {
    const char *cmd, *segment;
    const char *metadata, *meta_type, *meta_servers, *prefix, *password;
    const char *metrics, *host;
    const char *sets[16];
    int nsets;
    int db, timeout_ms, count;
    uint64_t size;
    bool json;
};

/* The metadata store to talk to, resolved from the options. */
struct store {
    char type[16];
    struct tent_meta_kv_conf conf;
    char servers[1024];
};

__attribute__((format(printf, 2, 3))) static int fail(int code, const char *fmt,
                                                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tent-admin: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

static void usage(FILE *f)
{
    fputs("usage: tent-admin [--json] [--timeout-ms MS] COMMAND [ARGS]\n"
          "  list      [--metadata TYPE://EP[,EP]] [--prefix P]\n"
          "  describe  SEGMENT [--metadata TYPE://EP]\n"
          "  ping      SEGMENT [--count N] [--size BYTES] [--host H] "
          "[--set KEY=VALUE]...\n"
          "  rails     --metrics http://HOST:PORT\n"
          "metadata: --metadata etcd://H:P | redis://H:P | http://H:P/PATH | "
          "p2p,\n"
          "  or --metadata_type T --metadata_servers EPS, or "
          "MC_METADATA_SERVER;\n"
          "  --password PW and --db N for redis.\n"
          "exit: 0 ok, 1 failed, 2 bad usage, 3 not supported, 4 ping's reads "
          "differed\n",
          f);
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    uint64_t mul = 1;
    if (!strcasecmp(end, "k") || !strcasecmp(end, "kib"))
        mul = 1024;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib"))
        mul = (uint64_t)1024 * 1024;
    else if (*end)
        return false;
    if (v > UINT64_MAX / mul)
        return false;
    *out = v * mul;
    return true;
}

static int int_arg(const char *name, const char *v, int lo, int hi, int *out)
{
    uint64_t x;
    if (!parse_u64(v, &x) || x < (uint64_t)lo || x > (uint64_t)hi)
        return fail(EX_USAGE, "bad value '%s' for %s (an integer %d..%d)",
                    v ? v : "", name, lo, hi);
    *out = (int)x;
    return EX_OK;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const char *const with_value[] = {"--metadata",
                                             "--metadata_type",
                                             "--metadata_servers",
                                             "--prefix",
                                             "--password",
                                             "--db",
                                             "--timeout-ms",
                                             "--count",
                                             "--size",
                                             "--metrics",
                                             "--host",
                                             "--set",
                                             "--metadata_key_prefix",
                                             "--metadata_url_list"};
    *o = (struct opts){.timeout_ms = 3000, .count = 20, .size = 64};
    const char *vals[14] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(EX_OK);
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (!o->cmd)
                o->cmd = a;
            else if (!o->segment)
                o->segment = a;
            else
                return fail(EX_USAGE, "unexpected argument '%s'", a);
            continue;
        }
        size_t nl = strcspn(a, "=");
        int k = -1;
        for (int j = 0; j < 14; j++)
            if (strlen(with_value[j]) == nl && !strncmp(a, with_value[j], nl))
                k = j;
        if (k < 0)
            return fail(EX_USAGE, "unknown option '%.*s' (see --help)", (int)nl,
                        a);
        const char *v = a[nl] == '=' ? a + nl + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc)
                return fail(EX_USAGE, "option %s needs a value", a);
            v = argv[++i];
        }
        if (k == 11) {
            if (o->nsets == 16 || !strchr(v, '='))
                return fail(EX_USAGE, "bad --set '%s' (KEY=VALUE, at most 16)",
                            v);
            o->sets[o->nsets++] = v;
        } else {
            vals[k == 12 ? 3 : k == 13 ? 2 : k] = v;
        }
    }
    o->metadata = vals[0];
    o->meta_type = vals[1];
    o->meta_servers = vals[2];
    o->prefix = vals[3] ? vals[3] : "mooncake/tent/";
    o->password = vals[4];
    o->metrics = vals[9];
    o->host = vals[10] ? vals[10] : "127.0.0.1";
    int rc = EX_OK;
    if (vals[5])
        rc = int_arg("--db", vals[5], 0, 1 << 20, &o->db);
    if (!rc && vals[6])
        rc = int_arg("--timeout-ms", vals[6], 1, 600000, &o->timeout_ms);
    if (!rc && vals[7])
        rc = int_arg("--count", vals[7], 1, 1000000, &o->count);
    if (!rc && vals[8] &&
        (!parse_u64(vals[8], &o->size) || o->size == 0 ||
         o->size > TCP_WIRE_MAX_DATA))
        rc = fail(EX_USAGE, "bad value '%s' for --size (1..%u bytes)", vals[8],
                  TCP_WIRE_MAX_DATA);
    if (!rc && !o->cmd) {
        usage(stderr);
        rc = fail(EX_USAGE, "no command given");
    }
    return rc;
}

/* ---- metadata store ------------------------------------------------------
 */

static int add_ep(struct store *s, const char *scheme, const char *ep, size_t n)
{
    if (n == 0)
        return EX_OK;
    if (s->conf.nendpoints == TENT_META_MAX_ENDPOINTS)
        return fail(EX_USAGE, "more than %d metadata endpoints",
                    TENT_META_MAX_ENDPOINTS);
    char buf[512];
    bool has_scheme = memmem(ep, n, "://", 3) != NULL;
    int l = snprintf(buf, sizeof(buf), "%s%.*s",
                     has_scheme || !scheme ? "" : scheme, (int)n, ep);
    if (l < 0 || (size_t)l >= sizeof(buf))
        return fail(EX_USAGE, "metadata endpoint '%.*s' is too long", (int)n,
                    ep);
    if (!(s->conf.endpoints[s->conf.nendpoints] = strdup(buf)))
        return fail(EX_FAIL, "out of memory");
    s->conf.nendpoints++;
    size_t sl = strlen(s->servers);
    snprintf(s->servers + sl, sizeof(s->servers) - sl, "%s%s", sl ? "," : "",
             buf);
    return EX_OK;
}

static void store_free(struct store *s)
{
    for (int i = 0; i < s->conf.nendpoints; i++)
        free(s->conf.endpoints[i]);
    s->conf.nendpoints = 0;
}

/* --metadata TYPE://EPS, else --metadata_type/--metadata_servers, else
 * MC_METADATA_SERVER (Mooncake's form: etcd://, redis://, http://, or
 * P2PHANDSHAKE).  *have is false when nothing names a store. */
static int store_resolve(const struct opts *o, struct store *s, bool *have)
{
    memset(s, 0, sizeof(*s));
    *have = false;
    const char *url = o->metadata, *what = "--metadata";
    if (!url && !o->meta_type) {
        url = getenv("MC_METADATA_SERVER");
        what = "MC_METADATA_SERVER";
    }
    const char *eps = NULL;
    if (url) {
        if (!strcasecmp(url, "p2p") || !strcasecmp(url, "P2PHANDSHAKE")) {
            snprintf(s->type, sizeof(s->type), "p2p");
            *have = true;
            return EX_OK;
        }
        const char *sep = strstr(url, "://");
        if (!sep || sep == url || sep - url >= (long)sizeof(s->type))
            return fail(EX_USAGE,
                        "bad %s '%s' (etcd://HOST:PORT, redis://HOST:PORT, "
                        "http://HOST:PORT/PATH or p2p)",
                        what, url);
        snprintf(s->type, sizeof(s->type), "%.*s", (int)(sep - url), url);
        eps = !strcmp(s->type, "http") ? url : sep + 3;
    } else if (o->meta_type) {
        snprintf(s->type, sizeof(s->type), "%s", o->meta_type);
        eps = o->meta_servers;
        what = "--metadata_type";
        if (strcmp(s->type, "p2p") != 0 && !eps)
            return fail(EX_USAGE, "--metadata_type %s needs --metadata_servers",
                        s->type);
    } else {
        return EX_OK;
    }
    *have = true;
    if (!strcmp(s->type, "p2p"))
        return EX_OK;
    const char *scheme = !strcmp(s->type, "etcd") ? "http://" : NULL;
    if (strcmp(s->type, "etcd") != 0 && strcmp(s->type, "redis") != 0 &&
        strcmp(s->type, "http") != 0)
        return fail(EX_USAGE,
                    "bad %s: unknown metadata type '%s' (etcd, redis, http, "
                    "p2p)",
                    what, s->type);
    for (const char *p = eps; *p;) {
        size_t n = strcspn(p, ",");
        int rc = add_ep(s, scheme, p, n);
        if (rc)
            return rc;
        p += n + (p[n] == ',');
    }
    if (s->conf.nendpoints == 0)
        return fail(EX_USAGE, "bad %s: no endpoint given", what);
    s->conf.ttl_s = 10;
    s->conf.timeout_ms = o->timeout_ms;
    s->conf.password = o->password;
    s->conf.db = o->db;
    return EX_OK;
}

static int store_ops(const struct store *s, const struct tent_meta_kv_ops **ops)
{
    *ops = NULL;
#ifdef TENT_WITH_CURL
    if (!strcmp(s->type, "etcd"))
        *ops = &tent_meta_etcd_ops;
    if (!strcmp(s->type, "http"))
        *ops = &tent_meta_http_ops;
#endif
#ifdef TENT_WITH_HIREDIS
    if (!strcmp(s->type, "redis"))
        *ops = &tent_meta_redis_ops;
#endif
    if (!*ops)
        return fail(EX_NOTSUP,
                    "metadata type '%s' is not built into this tent-admin "
                    "(its library, %s, was missing at configure time)",
                    s->type, strcmp(s->type, "redis") ? "libcurl" : "hiredis");
    return EX_OK;
}

/* ---- descriptors ---------------------------------------------------------
 */

/* The raw DESC_RESP JSON of the RPC server at addr ("<host>:<port>"). */
static int fetch_p2p_raw(const char *addr, int timeout_ms, char **out,
                         size_t *len)
{
    char host[256];
    uint16_t port;
    int fd = -1, rc = tent_rpc_parse_addr(addr, host, sizeof(host), &port);
    if (rc)
        return fail(EX_USAGE,
                    "segment '%s' is not <host>:<port> and no "
                    "metadata store was given: %s",
                    addr, tent_last_error());
    uint8_t hdr[TENT_WIRE_HDR_LEN];
    struct tent_wire_hdr h;
    char *body = NULL;
    tent_wire_encode_hdr(hdr, TENT_WIRE_DESC_REQ, 1, 0);
    rc = tent_rpc_connect(host, port, timeout_ms, &fd);
    if (!rc)
        rc = tent_rpc_send_all(fd, hdr, sizeof(hdr));
    if (!rc)
        rc = tent_rpc_recv_all(fd, hdr, sizeof(hdr));
    if (!rc)
        rc = tent_wire_decode_hdr(hdr, sizeof(hdr), &h);
    if (!rc && h.type != TENT_WIRE_DESC_RESP)
        rc = TENT_EPROTO;
    if (!rc && !(body = malloc((size_t)h.len + 1)))
        rc = TENT_ENOMEM;
    if (!rc)
        rc = tent_rpc_recv_all(fd, body, h.len);
    if (fd >= 0)
        close(fd);
    if (rc) {
        free(body);
        return fail(EX_FAIL,
                    "segment '%s': fetching its descriptor from its "
                    "RPC server failed: %s (%s)",
                    addr, tent_last_error(), tent_strerror(rc));
    }
    body[h.len] = 0;
    *out = body;
    *len = h.len;
    return EX_OK;
}

static int fetch_store_raw(const struct store *s, const char *prefix,
                           const char *name, char **out, size_t *len)
{
    const struct tent_meta_kv_ops *ops;
    int rc = store_ops(s, &ops);
    if (rc)
        return rc;
    void *kv = NULL;
    char key[1024];
    snprintf(key, sizeof(key), "%s%s", prefix, name);
    int trc = ops->create(&s->conf, &kv);
    if (!trc)
        trc = ops->get(kv, key, out, len);
    if (kv)
        ops->destroy(kv);
    if (trc == TENT_ENOSEGMENT)
        return fail(EX_FAIL, "segment '%s' not found: no key '%s' in %s at %s",
                    name, key, s->type, s->servers);
    if (trc)
        return fail(EX_FAIL, "%s at %s: %s", s->type, s->servers,
                    tent_last_error());
    return EX_OK;
}

static const char *xport_name(int bit)
{
    static const char *const names[] = {
        "unspec", "rdma",    "mnnvl",  "shm",           "nvlink",
        "gds",    "iouring", "tcp",    "ascend_direct", "sunrise_link",
        "tpu",    "ub",      "mpcomm", "memfabric",     "bufio"};
    return bit >= 0 && bit < (int)(sizeof(names) / sizeof(names[0]))
               ? names[bit]
               : NULL;
}

static void mask_names(uint32_t mask, char *buf, size_t cap)
{
    size_t l = 0;
    buf[0] = 0;
    for (int b = 0; b < 32 && l < cap; b++)
        if (mask & (1u << b)) {
            const char *n = xport_name(b);
            l += n ? (size_t)snprintf(buf + l, cap - l, "%s%s", l ? "," : "", n)
                   : (size_t)snprintf(buf + l, cap - l, "%sbit%d", l ? "," : "",
                                      b);
        }
    if (!buf[0])
        snprintf(buf, cap, "-");
}

static const char *perm_name(int p)
{
    return p == PERM_LOCAL_READ_WRITE    ? "local-rw"
           : p == PERM_GLOBAL_READ_ONLY  ? "global-ro"
           : p == PERM_GLOBAL_READ_WRITE ? "global-rw"
                                         : "?";
}

/* Any JSON value as one line (strings bare). */
static char *scalar(const cJSON *v)
{
    if (cJSON_IsString(v))
        return strdup(v->valuestring);
    return cJSON_PrintUnformatted(v);
}

static bool known_top(const char *k)
{
    return !strcmp(k, "name") || !strcmp(k, "host_id") ||
           !strcmp(k, "buffers") || !strcmp(k, "attrs");
}

/* A transport publishes its NICs as "<transport>_nics" = "name=addr,...";
 * the transport's name length, or 0 for another attribute. */
static size_t nic_key(const char *k)
{
    size_t l = strlen(k);
    return l > 5 && !strcmp(k + l - 5, "_nics") ? l - 5 : 0;
}

/* Calls fn for each "name=addr" entry of a NIC attribute. */
static void each_nic(const char *key, const char *val,
                     void (*fn)(void *, const char *, const char *, size_t,
                                const char *, size_t),
                     void *arg)
{
    char xp[64];
    snprintf(xp, sizeof(xp), "%.*s", (int)nic_key(key), key);
    for (const char *p = val; *p;) {
        size_t n = strcspn(p, ","), eq = strcspn(p, "=");
        if (eq > n)
            eq = n;
        fn(arg, xp, p, eq, eq < n ? p + eq + 1 : "", eq < n ? n - eq - 1 : 0);
        p += n + (p[n] == ',');
    }
}

static void nic_json(void *arg, const char *xp, const char *nic, size_t nl,
                     const char *addr, size_t al)
{
    char b[256];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "transport", xp);
    snprintf(b, sizeof(b), "%.*s", (int)nl, nic);
    cJSON_AddStringToObject(o, "nic", b);
    snprintf(b, sizeof(b), "%.*s", (int)al, addr);
    cJSON_AddStringToObject(o, "addr", b);
    cJSON_AddItemToArray(arg, o);
}

static void nic_text(void *arg, const char *xp, const char *nic, size_t nl,
                     const char *addr, size_t al)
{
    int *n = arg;
    printf("%s%s %.*s %.*s", (*n)++ ? ", " : " ", xp, (int)nl, nic, (int)al,
           addr);
}

static int describe_print(const char *source, const char *raw, size_t len,
                          bool json)
{
    struct tent_wire_desc d;
    if (tent_wire_decode_desc(raw, len, &d))
        return fail(EX_FAIL, "the descriptor from %s does not decode: %s",
                    source, tent_last_error());
    cJSON *root = cJSON_ParseWithLength(raw, len);
    uint32_t all = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < d.nbufs; i++) {
        all |= d.bufs[i].xport_mask;
        bytes += d.bufs[i].length;
    }
    char xp[256];
    mask_names(all, xp, sizeof(xp));
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "segment", d.name);
        cJSON_AddStringToObject(o, "source", source);
        cJSON_AddStringToObject(o, "host_id", d.host_id);
        cJSON *fields = cJSON_AddObjectToObject(o, "fields");
        const cJSON *it;
        cJSON_ArrayForEach(it, root) {
            if (!known_top(it->string))
                cJSON_AddItemToObject(fields, it->string,
                                      cJSON_Duplicate(it, true));
        }
        cJSON *attrs = cJSON_AddObjectToObject(o, "attrs");
        cJSON *nics = cJSON_AddArrayToObject(o, "nics");
        for (int i = 0; i < d.nattrs; i++) {
            cJSON_AddStringToObject(attrs, d.attr_key[i], d.attr_value[i]);
            if (nic_key(d.attr_key[i]))
                each_nic(d.attr_key[i], d.attr_value[i], nic_json, nics);
        }
        cJSON *xa = cJSON_AddArrayToObject(o, "transports");
        for (int b = 0; b < 32; b++)
            if (all & (1u << b))
                cJSON_AddItemToArray(xa, cJSON_CreateString(xport_name(b)
                                                                ? xport_name(b)
                                                                : "unknown"));
        cJSON *bufs = cJSON_AddArrayToObject(o, "buffers");
        for (size_t i = 0; i < d.nbufs; i++) {
            const struct tent_wire_buf *b = &d.bufs[i];
            cJSON *jb = cJSON_CreateObject();
            cJSON_AddNumberToObject(jb, "base", (double)b->base);
            cJSON_AddNumberToObject(jb, "length", (double)b->length);
            cJSON_AddStringToObject(jb, "permission", perm_name(b->perm));
            cJSON_AddStringToObject(jb, "location", b->location);
            cJSON *bx = cJSON_AddArrayToObject(jb, "transports");
            for (int k = 0; k < 32; k++)
                if (b->xport_mask & (1u << k))
                    cJSON_AddItemToArray(
                        bx, cJSON_CreateString(xport_name(k) ? xport_name(k)
                                                             : "unknown"));
            cJSON *ba = cJSON_AddObjectToObject(jb, "attrs");
            for (int k = 0; k < b->nattrs; k++)
                cJSON_AddStringToObject(ba, b->attrs[k].key, b->attrs[k].value);
            cJSON_AddItemToArray(bufs, jb);
        }
        char *s = cJSON_Print(o);
        puts(s ? s : "null");
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        printf("segment     %s\n", d.name);
        printf("source      %s\n", source);
        printf("host_id     %s\n", d.host_id);
        const cJSON *it;
        cJSON_ArrayForEach(it, root) {
            if (known_top(it->string))
                continue;
            char *v = scalar(it);
            printf("%-11s %s\n", it->string, v ? v : "?");
            free(v);
        }
        printf("transports  %s\n", xp);
        printf("nics       ");
        int nn = 0;
        for (int i = 0; i < d.nattrs; i++)
            if (nic_key(d.attr_key[i]))
                each_nic(d.attr_key[i], d.attr_value[i], nic_text, &nn);
        printf("%s\n", nn ? "" : " - (no NIC attribute published)");
        printf("\nattributes (%d)\n", d.nattrs);
        for (int i = 0; i < d.nattrs; i++)
            printf("  %-24s %s\n", d.attr_key[i], d.attr_value[i]);
        printf("\nbuffers (%zu, %" PRIu64 " bytes)\n", d.nbufs, bytes);
        printf("  %-18s %14s  %-9s  %-10s  %-16s %s\n", "BASE", "LENGTH",
               "PERM", "LOCATION", "TRANSPORTS", "ATTRS");
        for (size_t i = 0; i < d.nbufs; i++) {
            const struct tent_wire_buf *b = &d.bufs[i];
            char bx[256];
            mask_names(b->xport_mask, bx, sizeof(bx));
            printf("  0x%016" PRIx64 " %14" PRIu64 "  %-9s  %-10s  %-16s",
                   b->base, b->length, perm_name(b->perm), b->location, bx);
            for (int k = 0; k < b->nattrs; k++)
                printf(" %s=%s", b->attrs[k].key, b->attrs[k].value);
            printf("%s\n", b->nattrs ? "" : " -");
        }
    }
    cJSON_Delete(root);
    tent_wire_desc_free(&d);
    return EX_OK;
}

static int cmd_describe(const struct opts *o)
{
    if (!o->segment)
        return fail(EX_USAGE, "describe needs a SEGMENT (a name, or "
                              "<host>:<port> of its RPC server)");
    struct store s;
    bool have;
    int rc = store_resolve(o, &s, &have);
    if (rc)
        return rc;
    char *raw = NULL, source[1100];
    size_t len = 0;
    if (!have || !strcmp(s.type, "p2p")) {
        snprintf(source, sizeof(source), "p2p %s", o->segment);
        rc = fetch_p2p_raw(o->segment, o->timeout_ms, &raw, &len);
    } else {
        snprintf(source, sizeof(source), "%s %s", s.type, s.servers);
        rc = fetch_store_raw(&s, o->prefix, o->segment, &raw, &len);
    }
    if (!rc)
        rc = describe_print(source, raw, len, o->json);
    free(raw);
    store_free(&s);
    return rc;
}

/* ---- list ----------------------------------------------------------------
 */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static const char *attr_of(const struct tent_wire_desc *d, const char *k)
{
    for (int i = 0; i < d->nattrs; i++)
        if (!strcmp(d->attr_key[i], k))
            return d->attr_value[i];
    return "-";
}

static int cmd_list(const struct opts *o)
{
    struct store s;
    bool have;
    int rc = store_resolve(o, &s, &have);
    if (rc)
        return rc;
    if (!have)
        return fail(EX_USAGE, "list needs a metadata store: --metadata "
                              "etcd://HOST:PORT (or redis://, http://), "
                              "--metadata_type/--metadata_servers, or "
                              "MC_METADATA_SERVER");
    if (!strcmp(s.type, "p2p"))
        return fail(EX_NOTSUP,
                    "metadata type p2p has no store to list: each engine "
                    "answers for its own segment (tent-admin describe "
                    "<host>:<port>)");
    const struct tent_meta_kv_ops *ops;
    rc = store_ops(&s, &ops);
    if (!rc && !ops->list)
        rc = fail(EX_NOTSUP,
                  "metadata type %s cannot list segments: its protocol only "
                  "gets, puts and deletes one key (name the segment: "
                  "tent-admin describe NAME --metadata ...)",
                  s.type);
    if (rc) {
        store_free(&s);
        return rc;
    }
    void *kv = NULL;
    char **keys = NULL;
    size_t n = 0;
    int trc = ops->create(&s.conf, &kv);
    if (!trc)
        trc = ops->list(kv, o->prefix, &keys, &n);
    if (trc) {
        rc =
            fail(EX_FAIL, "%s at %s: %s", s.type, s.servers, tent_last_error());
        if (kv)
            ops->destroy(kv);
        store_free(&s);
        return rc;
    }
    if (n > 1)
        qsort(keys, n, sizeof(*keys), cmp_str);
    size_t pl = strlen(o->prefix);
    cJSON *arr = o->json ? cJSON_CreateArray() : NULL;
    if (!o->json)
        printf("%-40s %-22s %8s %16s  %s\n", "SEGMENT", "RPC_ADDR", "BUFFERS",
               "BYTES", "HOST_ID");
    for (size_t i = 0; i < n; i++) {
        if (strncmp(keys[i], o->prefix, pl) != 0)
            continue; /* a server that matched more than the prefix */
        const char *name = keys[i] + pl;
        char *val = NULL;
        size_t vl = 0;
        struct tent_wire_desc d;
        int grc = ops->get(kv, keys[i], &val, &vl);
        if (grc == TENT_ENOSEGMENT) { /* expired since the listing */
            continue;
        }
        char err[300] = "";
        if (grc)
            snprintf(err, sizeof(err), "%s", tent_last_error());
        else if (tent_wire_decode_desc(val, vl, &d))
            snprintf(err, sizeof(err), "does not decode: %s",
                     tent_last_error());
        free(val);
        uint64_t bytes = 0;
        if (!err[0])
            for (size_t k = 0; k < d.nbufs; k++)
                bytes += d.bufs[k].length;
        if (o->json) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "segment", name);
            cJSON_AddStringToObject(e, "key", keys[i]);
            if (err[0]) {
                cJSON_AddStringToObject(e, "error", err);
            } else {
                cJSON_AddStringToObject(e, "rpc_addr", attr_of(&d, "rpc_addr"));
                cJSON_AddStringToObject(e, "host_id", d.host_id);
                cJSON_AddNumberToObject(e, "buffers", (double)d.nbufs);
                cJSON_AddNumberToObject(e, "bytes", (double)bytes);
            }
            cJSON_AddItemToArray(arr, e);
        } else if (err[0]) {
            printf("%-40s (%s)\n", name, err);
        } else {
            printf("%-40s %-22s %8zu %16" PRIu64 "  %s\n", name,
                   attr_of(&d, "rpc_addr"), d.nbufs, bytes, d.host_id);
        }
        if (!err[0])
            tent_wire_desc_free(&d);
    }
    if (o->json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "metadata_type", s.type);
        cJSON_AddStringToObject(root, "servers", s.servers);
        cJSON_AddStringToObject(root, "prefix", o->prefix);
        cJSON_AddItemToObject(root, "segments", arr);
        char *txt = cJSON_Print(root);
        puts(txt ? txt : "null");
        cJSON_free(txt);
        cJSON_Delete(root);
    } else if (n == 0) {
        printf("(no segment under prefix '%s' in %s at %s)\n", o->prefix,
               s.type, s.servers);
    }
    tent_meta_kv_keys_free(keys, n);
    ops->destroy(kv);
    store_free(&s);
    return EX_OK;
}

/* ---- ping ----------------------------------------------------------------
 */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* One read of len bytes at addr of the peer into dst; its time in *us. */
static int read_once(tent_engine_t e, tent_segment_id_t seg, void *dst,
                     uint64_t addr, uint64_t len, int timeout_ms, double *us,
                     char *xport, size_t xcap)
{
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    if (b == TENT_INVALID_BATCH_ID)
        return TENT_ENOMEM; /* tent_last_error() says why */
    tent_request_t r = {.opcode = OPCODE_READ,
                        .source = dst,
                        .target_id = seg,
                        .target_offset = addr,
                        .length = len};
    double t0 = now_us();
    int rc = tent_submit(e, b, &r, 1);
    tent_status_t st = {0};
    while (!rc) {
        rc = tent_task_status(e, b, 0, &st);
        if (rc || (st.status != STATUS_WAITING && st.status != STATUS_PENDING))
            break;
        if (now_us() - t0 > timeout_ms * 1e3) {
            rc = TENT_ETIMEDOUT;
            break;
        }
    }
    *us = now_us() - t0;
    if (xport)
        tent_task_transport(e, b, 0, xport, xcap);
    if (!rc && st.status != STATUS_COMPLETED) {
        int code = 0, native = 0;
        char msg[256] = "";
        tent_task_error(e, b, 0, &code, &native, msg, sizeof(msg));
        rc = code ? code : TENT_EIO;
        fprintf(stderr,
                "tent-admin: read of %" PRIu64 " bytes at 0x%" PRIx64
                " ended with status %d: %s\n",
                len, addr, st.status, msg);
    } else if (rc == TENT_ETIMEDOUT) {
        fprintf(stderr,
                "tent-admin: read of %" PRIu64 " bytes not done in %d ms\n",
                len, timeout_ms);
    }
    tent_free_batch(e, b);
    return rc;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmd_ping(const struct opts *o)
{
    if (!o->segment)
        return fail(EX_USAGE, "ping needs a SEGMENT (a name, or <host>:<port> "
                              "of its RPC server)");
    struct store s;
    bool have;
    int rc = store_resolve(o, &s, &have);
    if (rc)
        return rc;
    tent_set_config("log_level", "error");
    tent_set_config("rpc_server_hostname", o->host);
    if (have && strcmp(s.type, "p2p") != 0) {
        char name[64];
        snprintf(name, sizeof(name), "tent-admin-%d", (int)getpid());
        tent_set_config("metadata_type", s.type);
        tent_set_config("metadata_servers", s.servers);
        tent_set_config("metadata_key_prefix", o->prefix);
        tent_set_config("local_segment_name", name);
        if (o->password)
            tent_set_config("metadata_password", o->password);
    }
    for (int i = 0; i < o->nsets; i++) {
        char k[256];
        const char *eq = strchr(o->sets[i], '=');
        snprintf(k, sizeof(k), "%.*s", (int)(eq - o->sets[i]), o->sets[i]);
        tent_set_config(k, eq + 1);
    }
    store_free(&s);
    tent_engine_t e = tent_create_engine();
    if (!e)
        return fail(EX_FAIL, "cannot create the local engine: %s",
                    tent_last_error());
    tent_segment_id_t seg;
    tent_segment_info_t info = {0};
    void *buf = NULL;
    double *lat = calloc((size_t)o->count, sizeof(double));
    char xport[32] = "";
    int code = EX_FAIL;
    uint64_t vlen = 0, base = 0, blen = 0;
    size_t need = 0;
    if ((rc = tent_open_segment(e, &seg, o->segment))) {
        fail(EX_FAIL, "cannot open segment '%s': %s", o->segment,
             tent_last_error());
        goto out;
    }
    if ((rc = tent_get_segment_info(e, seg, &info)) || info.num_buffers == 0) {
        fail(EX_FAIL, "segment '%s' %s", o->segment,
             rc ? tent_last_error() : "has no registered buffer to read");
        goto out;
    }
    base = info.buffers[0].base;
    blen = info.buffers[0].length;
    if (blen < o->size) {
        fail(EX_USAGE,
             "--size %" PRIu64 " is larger than the peer's first "
             "buffer (%" PRIu64 " bytes)",
             o->size, blen);
        code = EX_USAGE;
        goto out;
    }
    vlen = blen < (64u << 10) ? blen : (64u << 10);
    need = 2 * (vlen > o->size ? vlen : o->size);
    if (!lat || (rc = tent_allocate_memory(e, &buf, need, "cpu")) ||
        (rc = tent_register_memory(e, buf, need))) {
        fail(EX_FAIL, "local buffer: %s",
             lat ? tent_last_error() : "no memory");
        goto out;
    }
    for (int i = 0; i < o->count; i++)
        if ((rc = read_once(e, seg, buf, base, o->size, o->timeout_ms, &lat[i],
                            xport, sizeof(xport)))) {
            fail(EX_FAIL, "round trip %d to '%s' failed: %s (%s)", i + 1,
                 o->segment, tent_last_error(), tent_strerror(rc));
            goto out;
        }
    double t;
    uint8_t *a = buf, *b2 = a + need / 2;
    memset(a, 0xa5, vlen);
    memset(b2, 0x5a, vlen);
    if ((rc = read_once(e, seg, a, base, vlen, o->timeout_ms, &t, NULL, 0)) ||
        (rc = read_once(e, seg, b2, base, vlen, o->timeout_ms, &t, NULL, 0))) {
        fail(EX_FAIL, "verification read of '%s' failed: %s", o->segment,
             tent_last_error());
        goto out;
    }
    uint64_t diff = 0, first = UINT64_MAX;
    for (uint64_t i = 0; i < vlen; i++)
        if (a[i] != b2[i]) {
            diff++;
            if (first == UINT64_MAX)
                first = i;
        }
    double sum = 0;
    for (int i = 0; i < o->count; i++)
        sum += lat[i];
    qsort(lat, (size_t)o->count, sizeof(double), cmp_dbl);
    size_t p99 = (size_t)((o->count - 1) * 0.99 + 0.5);
    double avg = sum / o->count;
    code = diff ? EX_MISMATCH : EX_OK;
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "segment", o->segment);
        cJSON_AddStringToObject(j, "transport", xport);
        cJSON_AddNumberToObject(j, "count", o->count);
        cJSON_AddNumberToObject(j, "size", (double)o->size);
        cJSON_AddNumberToObject(j, "min_us", lat[0]);
        cJSON_AddNumberToObject(j, "avg_us", avg);
        cJSON_AddNumberToObject(j, "p99_us", lat[p99]);
        cJSON_AddNumberToObject(j, "max_us", lat[o->count - 1]);
        cJSON_AddNumberToObject(j, "buffer_base", (double)base);
        cJSON_AddNumberToObject(j, "verify_bytes", (double)vlen);
        cJSON_AddNumberToObject(j, "verify_differing", (double)diff);
        cJSON_AddBoolToObject(j, "verified", diff == 0);
        char *txt = cJSON_PrintUnformatted(j);
        puts(txt ? txt : "null");
        cJSON_free(txt);
        cJSON_Delete(j);
    } else {
        printf("segment    %s (buffer 0x%" PRIx64 ", %" PRIu64 " bytes)\n",
               o->segment, base, blen);
        printf("transport  %s\n", xport[0] ? xport : "?");
        printf("round trip %d reads of %" PRIu64
               " B: min %.1f us  avg %.1f us  p99 %.1f us  max %.1f us\n",
               o->count, o->size, lat[0], avg, lat[p99], lat[o->count - 1]);
        if (diff)
            printf("verify     FAILED: two reads of the first %" PRIu64
                   " bytes differ in %" PRIu64 " bytes (first at +%" PRIu64
                   ")\n",
                   vlen, diff, first);
        else
            printf("verify     ok: two reads of the first %" PRIu64
                   " bytes completed and were equal\n",
                   vlen);
    }
out:
    if (buf) {
        tent_unregister_memory(e, buf, need);
        tent_free_memory(e, buf);
    }
    if (info.buffers)
        tent_free_segment_info(&info);
    free(lat);
    tent_destroy_engine(e);
    return code;
}

/* ---- rails ---------------------------------------------------------------
 */

/* GET path from host:port over HTTP/1.0; the body of a 200 answer. */
static int http_get(const char *url, int timeout_ms, char **body)
{
    char host[256], path[256] = "/metrics/json";
    unsigned port = 0;
    const char *p = url;
    if (!strncmp(p, "http://", 7))
        p += 7;
    else if (strstr(p, "://"))
        return fail(EX_USAGE, "bad --metrics '%s': only http:// is served",
                    url);
    size_t hl = strcspn(p, "/");
    char hp[300];
    snprintf(hp, sizeof(hp), "%.*s", (int)hl, p);
    const char *colon = strrchr(hp, ':');
    if (!colon || hl >= sizeof(hp) || sscanf(colon + 1, "%u", &port) != 1 ||
        port == 0 || port > 65535 || colon == hp)
        return fail(EX_USAGE, "bad --metrics '%s' (http://HOST:PORT[/PATH])",
                    url);
    snprintf(host, sizeof(host), "%.*s", (int)(colon - hp), hp);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = 0;
    }
    if (p[hl] == '/' && p[hl + 1])
        snprintf(path, sizeof(path), "%s", p + hl);
    int fd;
    if (tent_rpc_connect(host, (uint16_t)port, timeout_ms, &fd))
        return fail(EX_FAIL, "metrics endpoint %s: %s", url, tent_last_error());
    char req[700];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.0\r\nHost: %s\r\nAccept: */*\r\n\r\n", path,
                     hp);
    if (tent_rpc_send_all(fd, req, (size_t)n)) {
        close(fd);
        return fail(EX_FAIL, "metrics endpoint %s: %s", url, tent_last_error());
    }
    size_t cap = 1 << 16, len = 0;
    char *r = malloc(cap);
    for (;;) {
        if (!r) {
            close(fd);
            return fail(EX_FAIL, "out of memory");
        }
        if (len + 1 == cap) {
            char *nr = cap < (64u << 20) ? realloc(r, cap * 2) : NULL;
            if (!nr) {
                free(r);
                close(fd);
                return fail(EX_FAIL, "metrics endpoint %s: answer too large",
                            url);
            }
            r = nr;
            cap *= 2;
        }
        ssize_t k = recv(fd, r + len, cap - 1 - len, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int err = errno;
            free(r);
            close(fd);
            return fail(EX_FAIL, "metrics endpoint %s: %s", url,
                        err == EAGAIN ? "timed out" : strerror(err));
        }
        if (k == 0)
            break;
        len += (size_t)k;
    }
    close(fd);
    r[len] = 0;
    char *sep = strstr(r, "\r\n\r\n");
    int status = 0;
    if (!sep || sscanf(r, "HTTP/%*d.%*d %d", &status) != 1 || status != 200) {
        int rc = fail(EX_FAIL, "metrics endpoint %s%s answered %d%s", url,
                      strcmp(p + hl, path) ? path : "", status,
                      sep ? "" : " (no HTTP answer)");
        free(r);
        return rc;
    }
    memmove(r, sep + 4, strlen(sep + 4) + 1);
    *body = r;
    return EX_OK;
}

struct rail {
    char transport[64], nic[64], peer[256];
    cJSON *values; /* family -> value */
};

static const char *label(const cJSON *labels, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(labels, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double rail_val(const struct rail *r, const char *fam)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->values, fam);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void human_rate(double bps, char *buf, size_t cap)
{
    if (bps < 0)
        snprintf(buf, cap, "-");
    else if (bps >= 1e9)
        snprintf(buf, cap, "%.2f GB/s", bps / 1e9);
    else if (bps >= 1e6)
        snprintf(buf, cap, "%.2f MB/s", bps / 1e6);
    else
        snprintf(buf, cap, "%.0f B/s", bps);
}

static int cmd_rails(const struct opts *o)
{
    if (!o->metrics)
        return fail(EX_USAGE, "rails needs --metrics http://HOST:PORT (the "
                              "engine's metrics/http_host and http_port)");
    char *body = NULL;
    int rc = http_get(o->metrics, o->timeout_ms, &body);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(body);
    free(body);
    const cJSON *fams = cJSON_GetObjectItemCaseSensitive(root, "families");
    if (!cJSON_IsArray(fams)) {
        cJSON_Delete(root);
        return fail(EX_FAIL,
                    "metrics endpoint %s: the answer is not the "
                    "/metrics/json document (no \"families\")",
                    o->metrics);
    }
    struct rail *rails = NULL;
    size_t n = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, fams) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(name) ||
            strncmp(name->valuestring, "tent_rail_", 10) != 0)
            continue;
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(f, "series")) {
            const cJSON *l = cJSON_GetObjectItemCaseSensitive(s, "labels");
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "value");
            if (!cJSON_IsNumber(v))
                continue;
            size_t i = 0;
            for (; i < n; i++)
                if (!strcmp(rails[i].transport, label(l, "transport")) &&
                    !strcmp(rails[i].nic, label(l, "nic")) &&
                    !strcmp(rails[i].peer, label(l, "peer")))
                    break;
            if (i == n) {
                struct rail *nr = realloc(rails, (n + 1) * sizeof(*nr));
                if (!nr)
                    break;
                rails = nr;
                memset(&rails[n], 0, sizeof(rails[n]));
                snprintf(rails[n].transport, sizeof(rails[n].transport), "%s",
                         label(l, "transport"));
                snprintf(rails[n].nic, sizeof(rails[n].nic), "%s",
                         label(l, "nic"));
                snprintf(rails[n].peer, sizeof(rails[n].peer), "%s",
                         label(l, "peer"));
                rails[n].values = cJSON_CreateObject();
                n++;
            }
            cJSON_AddNumberToObject(rails[i].values,
                                    name->valuestring + strlen("tent_rail_"),
                                    v->valuedouble);
        }
    }
    if (o->json) {
        cJSON *out = cJSON_CreateObject();
        cJSON_AddStringToObject(out, "metrics", o->metrics);
        cJSON *arr = cJSON_AddArrayToObject(out, "rails");
        for (size_t i = 0; i < n; i++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "transport", rails[i].transport);
            cJSON_AddStringToObject(r, "nic", rails[i].nic);
            cJSON_AddStringToObject(r, "peer", rails[i].peer);
            cJSON_AddStringToObject(r, "state",
                                    rail_val(&rails[i], "paused") > 0 ? "paused"
                                                                      : "up");
            cJSON_AddItemToObject(r, "values", rails[i].values);
            rails[i].values = NULL;
            cJSON_AddItemToArray(arr, r);
        }
        char *t = cJSON_Print(out);
        puts(t ? t : "null");
        cJSON_free(t);
        cJSON_Delete(out);
    } else if (n == 0) {
        printf("(no rails at %s: the engine has no railed transport, or has "
               "not moved data yet)\n",
               o->metrics);
    } else {
        printf("%-9s %-10s %-28s %-7s %12s %12s %12s %14s %6s %6s\n",
               "TRANSPORT", "NIC", "PEER", "STATE", "EWMA", "CAPACITY",
               "INFLIGHT", "BYTES", "FAILS", "PROBES");
        for (size_t i = 0; i < n; i++) {
            const struct rail *r = &rails[i];
            char ew[32], cap[32];
            human_rate(rail_val(r, "bandwidth_bytes_per_second"), ew,
                       sizeof(ew));
            double c = rail_val(r, "capacity_bytes_per_second");
            if (c == 0)
                snprintf(cap, sizeof(cap), "unlearned");
            else
                human_rate(c, cap, sizeof(cap));
            printf("%-9s %-10s %-28s %-7s %12s %12s %12.0f %14.0f %6.0f "
                   "%6.0f\n",
                   r->transport, r->nic, r->peer[0] ? r->peer : "-",
                   rail_val(r, "paused") > 0 ? "paused" : "up", ew, cap,
                   rail_val(r, "inflight_bytes"), rail_val(r, "bytes_total"),
                   rail_val(r, "failures_total"), rail_val(r, "probes_total"));
        }
    }
    for (size_t i = 0; i < n; i++)
        cJSON_Delete(rails[i].values);
    free(rails);
    cJSON_Delete(root);
    return EX_OK;
}

int main(int argc, char **argv)
{
    struct opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (!strcmp(o.cmd, "list"))
        return cmd_list(&o);
    if (!strcmp(o.cmd, "describe"))
        return cmd_describe(&o);
    if (!strcmp(o.cmd, "ping"))
        return cmd_ping(&o);
    if (!strcmp(o.cmd, "rails"))
        return cmd_rails(&o);
    return fail(
        EX_USAGE,
        "unknown command '%s' (list, describe, ping, rails; see --help)",
        o.cmd);
}
