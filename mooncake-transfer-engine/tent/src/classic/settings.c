/* Mooncake's arguments -> a tent engine's tent_set_config keys (see
 * settings.h).  Public API and libc only. */
#include "classic/settings.h"

#include "net/nics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Mooncake's handshake port when MC_LEGACY_RPC_PORT_BINDING names none. */
#define LEGACY_DEFAULT_PORT 12001

const char *const classic_kind_names[CLASSIC_NKINDS] = {
    "tcp", "shm", "memfabric", "libfabric"};

int classic_protocol_find(const char *proto, struct classic_protocol *out)
{
    const char *xport = classic_protocol_xport(proto);
    if (!xport)
        return -1;
    out->xport = xport;
    out->fabric = classic_protocol_fabric(proto);
    out->kind = -1;
    for (int k = 0; k < CLASSIC_NKINDS; k++)
        if (strcmp(xport, classic_kind_names[k]) == 0)
            out->kind = k;
    return 0;
}

static int fail(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

static void warnf(classic_warn_fn warn, void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void warnf(classic_warn_fn warn, void *ctx, const char *fmt, ...)
{
    if (!warn)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    warn(ctx, msg);
}

static bool copy(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap)
        return false;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return true;
}

/* ---- names -------------------------------------------------------------- */

/* "host:port" or "[v6]:port": the port is the digits after the last ':'. */
static int split_hostport(const char *s, struct classic_name *out)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || !colon[1])
        return -1;
    unsigned long p = 0;
    for (const char *d = colon + 1; *d; d++) {
        if (*d < '0' || *d > '9' || p > 65535)
            return -1;
        p = p * 10 + (unsigned long)(*d - '0');
    }
    if (p > 65535)
        return -1;
    const char *h = s;
    size_t n = (size_t)(colon - s);
    if (h[0] == '[') {
        if (n < 3 || h[n - 1] != ']')
            return -1;
        h++;
        n -= 2;
    }
    if (!copy(out->host, sizeof(out->host), h, n))
        return -1;
    out->port = (unsigned)p;
    out->has_port = true;
    return 0;
}

int classic_parse_name(const char *s, struct classic_name *out)
{
    char buf[512];
    memset(out, 0, sizeof(*out));
    out->npu = -1;
    if (!s || !copy(buf, sizeof(buf), s, strlen(s)))
        return -1;
    char *tag = strstr(buf, ":npu_");
    if (tag) {
        char *end;
        long id = strtol(tag + 5, &end, 10);
        if (end == tag + 5 || *end || id < 0 || id > 65535)
            return -1;
        out->npu = (int)id;
        *tag = '\0';
    }
    size_t n = strlen(buf);
    struct in6_addr a6;
    if (n == 0)
        return 0;
    if (inet_pton(AF_INET6, buf, &a6) == 1) /* bare IPv6, no port */
        return copy(out->host, sizeof(out->host), buf, n) ? 0 : -1;
    if (buf[0] == '[' && buf[n - 1] == ']')
        return n > 2 && copy(out->host, sizeof(out->host), buf + 1, n - 2) ? 0
                                                                           : -1;
    if (!strchr(buf, ':'))
        return copy(out->host, sizeof(out->host), buf, n) ? 0 : -1;
    return split_hostport(buf, out);
}

int classic_format_hostport(char *buf, size_t len, const char *host,
                            unsigned port)
{
    if (strchr(host, ':'))
        return snprintf(buf, len, "[%s]:%u", host, port);
    return snprintf(buf, len, "%s:%u", host, port);
}

/* ---- the metadata connection string ------------------------------------- */

/* "P2PHANDSHAKE", "etcd://a:2379[,b:2379]", "redis://a:6379",
 * "http(s)://a:8080/path", or "a:2379" (etcd, Mooncake's default). */
static int parse_conn(const char *conn, struct classic_settings *set)
{
    if (strcmp(conn, "P2PHANDSHAKE") == 0) {
        strcpy(set->meta_type, "p2p");
        set->meta_servers[0] = '\0';
        return 0;
    }
    const char *sep = strstr(conn, "://");
    const char *servers = conn;
    if (!sep) {
        strcpy(set->meta_type, "etcd");
    } else {
        size_t n = (size_t)(sep - conn);
        if (n == 4 && strncmp(conn, "etcd", 4) == 0) {
            strcpy(set->meta_type, "etcd");
            servers = sep + 3;
        } else if (n == 5 && strncmp(conn, "redis", 5) == 0) {
            strcpy(set->meta_type, "redis");
            servers = sep + 3;
        } else if ((n == 4 && strncmp(conn, "http", 4) == 0) ||
                   (n == 5 && strncmp(conn, "https", 5) == 0)) {
            strcpy(set->meta_type, "http"); /* the whole URL, as Mooncake */
            if (!sep[3])
                return -1;
        } else {
            return -1;
        }
    }
    if (!*servers || strlen(servers) >= sizeof(set->meta_servers))
        return -1;
    /* Mooncake separates etcd endpoints with ';' too. */
    size_t i = 0;
    for (; servers[i]; i++)
        set->meta_servers[i] = servers[i] == ';' ? ',' : servers[i];
    set->meta_servers[i] = '\0';
    return 0;
}

/* ---- address and port --------------------------------------------------- */

static bool is_numeric_host(const char *h)
{
    unsigned char a[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, h, a) == 1 || inet_pton(AF_INET6, h, a) == 1;
}

/* Mooncake's choice for a metadata-service engine that names no address:
 * the first IPv4 address of an interface that is up, loopback excluded. */
static bool first_lan_ipv4(char *out, size_t cap)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return false;
    bool found = false;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
            (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP) ||
            !(i->ifa_flags & IFF_RUNNING))
            continue;
        const struct sockaddr_in *sa = (const void *)i->ifa_addr;
        found = inet_ntop(AF_INET, &sa->sin_addr, out, (socklen_t)cap) != NULL;
    }
    freeifaddrs(ifs);
    return found;
}

/* The text of an environment variable (or of the misspelling Mooncake
 * also reads), NULL when neither is set. */
static const char *env_either(const char *name, const char *alias)
{
    const char *v = getenv(name);
    return v ? v : getenv(alias);
}

/* text as a port of a range; -1 when it is not one by Mooncake's rule:
 * above the privileged ports, outside Linux's ephemeral range (where the
 * kernel's own choices would collide). */
static long range_port(const char *text)
{
    char *end;
    long p = strtol(text, &end, 10);
    if (end == text || *end || p < 1024 || p > 65535 ||
        (p >= 32768 && p <= 60999))
        return -1;
    return p;
}

/* MC_MIN_RPC_PORT..MC_MAX_RPC_PORT, Mooncake's 15000..17000 by default and
 * when the variables do not make a valid range. */
static void rpc_port_range(struct classic_settings *set, classic_warn_fn warn,
                           void *ctx)
{
    const char *lo_s = env_either("MC_MIN_RPC_PORT", "MC_MIN_PRC_PORT");
    const char *hi_s = env_either("MC_MAX_RPC_PORT", "MC_MAX_PRC_PORT");
    long lo = lo_s ? range_port(lo_s) : CLASSIC_RPC_PORT_MIN;
    long hi = hi_s ? range_port(hi_s) : CLASSIC_RPC_PORT_MAX;
    if (lo < 0 || hi < 0 || lo > hi) {
        warnf(warn, ctx,
              "MC_MIN_RPC_PORT=%s, MC_MAX_RPC_PORT=%s is not a port range "
              "inside 1024..65535 and outside 32768..60999; using %d..%d",
              lo_s ? lo_s : "(unset)", hi_s ? hi_s : "(unset)",
              CLASSIC_RPC_PORT_MIN, CLASSIC_RPC_PORT_MAX);
        lo = CLASSIC_RPC_PORT_MIN;
        hi = CLASSIC_RPC_PORT_MAX;
    }
    set->port = 0;
    set->port_min = (unsigned)lo;
    set->port_max = (unsigned)hi;
}

/* ---- the settings ------------------------------------------------------- */

static bool env_set(const char *name)
{
    return getenv(name) != NULL; /* Mooncake tests presence, not the value */
}

/* MC_REDIS_PASSWORD and MC_REDIS_DB_INDEX, read as Mooncake's redis
 * plugin reads them. */
static int redis_env(struct classic_settings *set, classic_warn_fn warn,
                     void *ctx, char *err, size_t err_len)
{
    const char *pw = getenv("MC_REDIS_PASSWORD");
    if (pw && *pw &&
        !copy(set->redis_password, sizeof(set->redis_password), pw, strlen(pw)))
        return fail(err, err_len, "MC_REDIS_PASSWORD is longer than %zu bytes",
                    sizeof(set->redis_password) - 1);
    const char *db = getenv("MC_REDIS_DB_INDEX");
    if (db && *db) {
        char *end;
        long n = strtol(db, &end, 10);
        if (*end || n < 0 || n > 255) {
            warnf(warn, ctx, "MC_REDIS_DB_INDEX '%s' is not 0..255; using 0",
                  db);
            n = 0;
        }
        set->redis_db = (int)n;
    }
    if (getenv("MC_REDIS_USERNAME"))
        warnf(warn, ctx,
              "MC_REDIS_USERNAME is not supported (redis AUTH with a "
              "password only); ignored");
    return 0;
}

int classic_settings_parse(const struct classic_args *a,
                           struct classic_settings *out, classic_warn_fn warn,
                           void *warn_ctx, char *err, size_t err_len)
{
    struct classic_settings tmp, *set = &tmp; /* *out only on success */
    memset(set, 0, sizeof(*set));
    set->npu = -1;
    set->redis_db = -1;
    if (!a->conn || !a->local)
        return fail(err, err_len, "%s is NULL",
                    !a->conn ? a->conn_label : a->local_label);
    /* Mooncake does not use ip_or_host_name; its Rust binding passes
     * local_server_name there, port included: only the host counts. */
    struct classic_name ip = {.npu = -1};
    if (a->ip && classic_parse_name(a->ip, &ip) != 0)
        return fail(err, err_len, "%s '%s' is not a host or host:port",
                    a->ip_label, a->ip);
    if (parse_conn(a->conn, set) != 0)
        return fail(err, err_len,
                    "%s '%s' is not P2PHANDSHAKE, etcd://, redis://, "
                    "http(s):// or host:port",
                    a->conn_label, a->conn);
    struct classic_name name;
    if (classic_parse_name(a->local, &name) != 0)
        return fail(err, err_len,
                    "%s '%s' is not host, host:port, [ipv6]:port or "
                    "host:port:npu_<id>",
                    a->local_label, a->local);
    set->npu = name.npu;

    bool p2p = strcmp(set->meta_type, "p2p") == 0;
    const char *bind = getenv("MC_TCP_BIND_ADDRESS");
    const char *chosen;
    char lan[INET_ADDRSTRLEN];
    if (p2p) {
        /* The name's host is the address peers dial; the port comes from
         * Mooncake's range, so two engines given one host:port both
         * start. */
        chosen = name.host[0] ? name.host : ip.host[0] ? ip.host : "127.0.0.1";
        rpc_port_range(set, warn, warn_ctx);
    } else if (env_set("MC_LEGACY_RPC_PORT_BINDING") && name.host[0]) {
        chosen = name.host;
        set->port = name.has_port ? name.port : LEGACY_DEFAULT_PORT;
    } else {
        /* Mooncake's "new RPC mapping": the bind address, else (where
         * Mooncake takes the first LAN address whatever was named) the
         * address the application names, else the LAN address. */
        if (bind && *bind)
            chosen = bind;
        else if (ip.host[0])
            chosen = ip.host;
        else if (name.host[0] && (is_numeric_host(name.host) ||
                                  strcmp(name.host, "localhost") == 0))
            chosen = name.host;
        else
            chosen = first_lan_ipv4(lan, sizeof(lan)) ? lan : "127.0.0.1";
        rpc_port_range(set, warn, warn_ctx);
    }
    if (!copy(set->host, sizeof(set->host), chosen, strlen(chosen)))
        return fail(err, err_len, "host '%s' is too long", chosen);
    if (!p2p) {
        /* The segment is known by the name the application gives (without
         * Ascend's ":npu_<id>"). */
        const char *tag = strstr(a->local, ":npu_");
        size_t n = tag ? (size_t)(tag - a->local) : strlen(a->local);
        if (!copy(set->segment_name, sizeof(set->segment_name), a->local, n))
            return fail(err, err_len, "%s '%s' is longer than %zu characters",
                        a->local_label, a->local,
                        sizeof(set->segment_name) - 1);
        if (strcmp(set->meta_type, "redis") == 0 &&
            redis_env(set, warn, warn_ctx, err, err_len) != 0)
            return -1;
    }
    set->force_tcp = env_set("MC_FORCE_TCP");
    if (set->force_tcp)
        for (int k = 0; k < CLASSIC_NKINDS; k++)
            set->xport[k] = k == CLASSIC_TCP ? CLASSIC_ON : CLASSIC_OFF;
    *out = tmp;
    return 0;
}

/* ---- device names -------------------------------------------------------- */

/* The numeric address of an interface entry the tcp transport can serve
 * (IPv4, or IPv6 that is neither link-local nor multicast); false for
 * any other entry. */
static bool servable_addr(const struct ifaddrs *i, char *out, size_t cap)
{
    if (!i->ifa_addr)
        return false;
    if (i->ifa_addr->sa_family == AF_INET) {
        const struct sockaddr_in *sa = (const void *)i->ifa_addr;
        return inet_ntop(AF_INET, &sa->sin_addr, out, (socklen_t)cap) != NULL;
    }
    if (i->ifa_addr->sa_family != AF_INET6)
        return false;
    const struct sockaddr_in6 *sa = (const void *)i->ifa_addr;
    if (IN6_IS_ADDR_LINKLOCAL(&sa->sin6_addr) ||
        IN6_IS_ADDR_MULTICAST(&sa->sin6_addr))
        return false;
    return inet_ntop(AF_INET6, &sa->sin6_addr, out, (socklen_t)cap) != NULL;
}

/* What this host has under a device name or numeric address. */
enum dev_state {
    DEV_NONE,     /* no interface of that name or address */
    DEV_DOWN,     /* an interface, not up or without a usable address */
    DEV_NIC,      /* an interface that is up, with an address */
    DEV_LOOPBACK, /* the same, a loopback one */
};

static enum dev_state device_state(const struct ifaddrs *ifs, const char *dev)
{
    enum dev_state st = DEV_NONE;
    for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        char a[INET6_ADDRSTRLEN];
        bool has = servable_addr(i, a, sizeof(a));
        if (strcmp(i->ifa_name, dev) != 0 && !(has && strcmp(a, dev) == 0))
            continue;
        if (!has || !(i->ifa_flags & IFF_UP)) {
            st = DEV_DOWN;
            continue;
        }
        return (i->ifa_flags & IFF_LOOPBACK) ? DEV_LOOPBACK : DEV_NIC;
    }
    return st;
}

/* Appends item to a list separated by sep; false when it does not fit. */
static bool list_add(char *list, size_t cap, const char *sep, const char *item)
{
    size_t used = strlen(list);
    int n = snprintf(list + used, cap - used, "%s%s", used ? sep : "", item);
    if (n < 0 || (size_t)n >= cap - used) {
        list[used] = '\0';
        return false;
    }
    return true;
}

/* Whether item is one of the entries of a ','-separated list. */
static bool list_has(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, item, n) == 0)
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

/* s without leading and trailing blanks, in place. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* A numeric address in the form the interfaces list gives it (IPv6
 * compressed, lower case); other names unchanged. */
static void canonical(const char *dev, char *out, size_t cap)
{
    unsigned char a[sizeof(struct in6_addr)];
    int fam = strchr(dev, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(fam, dev, a) != 1 || !inet_ntop(fam, a, out, (socklen_t)cap))
        snprintf(out, cap, "%s", dev);
}

int classic_settings_devices(struct classic_settings *set, const char *devices,
                             classic_warn_fn warn, void *warn_ctx, char *err,
                             size_t err_len)
{
    char buf[sizeof(set->nics)];
    if (!devices)
        devices = "";
    if (!copy(buf, sizeof(buf), devices, strlen(devices)))
        return fail(err, err_len, "device_name is longer than %zu bytes",
                    sizeof(buf) - 1);
    char *all = trim(buf);
    if (!*all || strcmp(all, "auto-discovery") == 0 ||
        strcmp(all, "auto_discovery") == 0) {
        set->nics[0] = '\0';
        return 0;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) {
        warnf(warn, warn_ctx,
              "device_name '%s' is not used: the interfaces of this host "
              "cannot be listed (%s); every interface serves",
              devices, strerror(errno));
        set->nics[0] = '\0';
        return 0;
    }
    bool host_lo = tent_addr_is_loopback(set->host);
    char kept[sizeof(set->nics)] = "", none[512] = "", down[512] = "",
         unserved[512] = "";
    char *save = NULL;
    for (char *tok = strtok_r(all, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char dev[sizeof(buf)];
        canonical(trim(tok), dev, sizeof(dev));
        if (!dev[0] || list_has(kept, dev))
            continue;
        enum dev_state st = device_state(ifs, dev);
        if (st == DEV_NONE)
            list_add(none, sizeof(none), ", ", dev);
        else if (st == DEV_DOWN)
            list_add(down, sizeof(down), ", ", dev);
        else if ((st == DEV_LOOPBACK) != host_lo)
            list_add(unserved, sizeof(unserved), ", ", dev);
        else
            list_add(kept, sizeof(kept), ",", dev);
    }
    freeifaddrs(ifs);
    char why[1600] = "";
    if (none[0])
        snprintf(why, sizeof(why),
                 "no such network interface on this host: %s (tcp runs "
                 "here, over the host's interfaces)",
                 none);
    if (down[0])
        snprintf(why + strlen(why), sizeof(why) - strlen(why),
                 "%sdown or without an address: %s", why[0] ? "; " : "", down);
    if (unserved[0])
        snprintf(why + strlen(why), sizeof(why) - strlen(why),
                 host_lo ? "%snot served by an engine bound to loopback "
                           "address %s, which serves loopback only: %s"
                         : "%snot served by an engine bound to %s (loopback "
                           "serves only an engine bound to loopback): %s",
                 why[0] ? "; " : "", set->host, unserved);
    if (why[0])
        warnf(warn, warn_ctx, "device_name '%s': %s; %s", devices, why,
              kept[0] ? "using the others"
                      : "using the default NICs, as with device_name \"\"");
    memcpy(set->nics, kept, sizeof(kept));
    return 0;
}

/* ---- starting the engine ------------------------------------------------ */

/* s as a JSON string literal (tent_set_config then keeps it a string even
 * when it looks like a number). */
static int json_string(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    if (cap < 3)
        return -1;
    out[o++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        size_t n;
        if (*p == '"' || *p == '\\')
            n = (size_t)snprintf(esc, sizeof(esc), "\\%c", *p);
        else if (*p < 0x20)
            n = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", *p);
        else
            esc[0] = (char)*p, n = 1;
        if (o + n + 2 > cap)
            return -1;
        memcpy(out + o, esc, n);
        o += n;
    }
    out[o++] = '"';
    out[o] = '\0';
    return 0;
}

/* key = value as a JSON string, or null (the engine's default: Mooncake's
 * arguments say there is none) when value is empty.  -1 when the value
 * cannot be encoded. */
static int stage_string(const char *key, const char *value)
{
    char v[6 * 1024 + 3]; /* every byte of the longest value escaped */
    if (!*value) {
        tent_set_config(key, "null");
        return 0;
    }
    if (json_string(value, v, sizeof(v)) != 0)
        return -1;
    tent_set_config(key, v);
    return 0;
}

static void stage_number(const char *key, long value)
{
    char v[32];
    snprintf(v, sizeof(v), "%ld", value);
    tent_set_config(key, v);
}

/* key = the entries of a ','-separated list as a JSON array of strings.
 * -1 when the array cannot be encoded. */
static int stage_list(const char *key, const char *list)
{
    char v[6 * 1024 + 3], item[6 * 256 + 3], one[256];
    size_t o = 0;
    v[o++] = '[';
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (!copy(one, sizeof(one), p, len) ||
            json_string(one, item, sizeof(item)) != 0 ||
            o + strlen(item) + 3 > sizeof(v))
            return -1;
        o += (size_t)sprintf(v + o, "%s%s", o > 1 ? "," : "", item);
        p = end ? end + 1 : p + len;
    }
    v[o++] = ']';
    v[o] = '\0';
    tent_set_config(key, v);
    return 0;
}

struct start_job {
    const struct classic_settings *set;
    tent_engine_t te;
    char why[768];
};

/* Runs in a thread of its own: tent_set_config stages per thread, so the
 * keys set here reach this engine only, and what this thread did not stage
 * is MC_TENT_CONF's (or the engine's default). */
static void *start_thread(void *arg)
{
    struct start_job *job = arg;
    const struct classic_settings *set = job->set;
    int bad = stage_string("metadata_type", set->meta_type);
    bad |= stage_string("metadata_servers", set->meta_servers);
    bad |= stage_string("rpc_server_hostname", set->host);
    stage_number("rpc_server_port", (long)set->port);
    if (set->port == 0 && set->port_min) {
        char range[32];
        snprintf(range, sizeof(range), "[%u, %u]", set->port_min,
                 set->port_max);
        tent_set_config("rpc_server_port_range", range);
    } else {
        tent_set_config("rpc_server_port_range", "null");
    }
    bad |= stage_string("local_segment_name", set->segment_name);
    for (int k = 0; k < CLASSIC_NKINDS; k++) {
        if (set->xport[k] == CLASSIC_KEEP)
            continue;
        char key[64];
        snprintf(key, sizeof(key), "transports/%s/enable",
                 classic_kind_names[k]);
        tent_set_config(key, set->xport[k] == CLASSIC_ON ? "true" : "false");
    }
    if (set->npu >= 0)
        stage_number("transports/memfabric/device_id", set->npu);
    if (set->fabric_provider[0])
        bad |=
            stage_string("transports/libfabric/provider", set->fabric_provider);
    if (set->quiet)
        tent_set_config("log_quiet", "true");
    if (set->redis_password[0])
        bad |= stage_string("metadata_password", set->redis_password);
    if (set->redis_db >= 0)
        stage_number("metadata_db", set->redis_db);
    if (set->nics[0])
        bad |= stage_list("transports/tcp/nics", set->nics);
    if (bad) {
        snprintf(job->why, sizeof(job->why),
                 "a configuration value is too long to pass on");
        return NULL;
    }
    /* The engine's threads inherit this mask: SIGINT and SIGTERM go to the
     * application's threads, never to one of the engine's that may hold an
     * engine lock (a handler that never returns would keep it). */
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, NULL);
    job->te = tent_create_engine();
    if (!job->te)
        snprintf(job->why, sizeof(job->why), "%s", tent_last_error());
    return NULL;
}

tent_engine_t classic_settings_start(const struct classic_settings *set,
                                     char *why, size_t why_len)
{
    struct start_job job = {.set = set};
    pthread_t thr;
    int rc = pthread_create(&thr, NULL, start_thread, &job);
    if (rc != 0) {
        snprintf(why, why_len, "pthread_create: %s", strerror(rc));
        return NULL;
    }
    pthread_join(thr, NULL);
    if (!job.te)
        snprintf(why, why_len, "%s", job.why);
    return job.te;
}

int classic_settings_probe(const struct classic_settings *set, int kind,
                           char *why, size_t why_len)
{
    struct classic_settings p = *set;
    snprintf(p.meta_type, sizeof(p.meta_type), "p2p");
    p.meta_servers[0] = '\0';
    p.port = p.port_min = p.port_max = 0;
    p.segment_name[0] = '\0';
    p.redis_password[0] = '\0';
    p.redis_db = -1;
    p.nics[0] = '\0';
    for (int k = 0; k < CLASSIC_NKINDS; k++)
        p.xport[k] = k == kind ? CLASSIC_ON : CLASSIC_OFF;
    tent_engine_t te = classic_settings_start(&p, why, why_len);
    if (!te)
        return -1;
    tent_destroy_engine(te);
    return 0;
}
