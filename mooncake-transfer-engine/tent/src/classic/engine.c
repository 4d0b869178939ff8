/* createTransferEngine, installTransport and the other engine-level calls:
 * Mooncake's arguments become tent_set_config keys of one tent engine. */
#include "classic/classic.h"
#include "net/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Mooncake's handshake port when MC_LEGACY_RPC_PORT_BINDING names none. */
#define LEGACY_DEFAULT_PORT 12001

/* ---- handles and call brackets ------------------------------------------ */

struct classic_engine *classic_engine_of(transfer_engine_t engine,
                                         const char *fn)
{
    struct classic_engine *ce = engine;
    if (!ce) {
        CLASSIC_WARN("%s: engine is NULL", fn);
        return NULL;
    }
    if (ce->magic != CLASSIC_MAGIC) {
        CLASSIC_WARN("%s: %p is not a transfer engine", fn, engine);
        return NULL;
    }
    return ce;
}

bool classic_enter(struct classic_engine *ce, bool *counted)
{
    *counted = false;
    if (!atomic_load_explicit(&ce->guarded, memory_order_relaxed))
        return true;
    /* Pairs with the shutdown's store of closing and load of active: either
     * it sees this call or this call sees closing. */
    atomic_fetch_add(&ce->active, 1);
    if (atomic_load(&ce->closing)) {
        atomic_fetch_sub(&ce->active, 1);
        CLASSIC_WARN("transfer engine %p is shutting down", (void *)ce);
        return false;
    }
    *counted = true;
    return true;
}

void classic_leave(struct classic_engine *ce, bool counted)
{
    if (counted)
        atomic_fetch_sub(&ce->active, 1);
}

tent_engine_t classic_te_lock(struct classic_engine *ce, bool *locked)
{
    if (atomic_load_explicit(&ce->sealed, memory_order_acquire)) {
        *locked = false;
        return ce->te;
    }
    pthread_mutex_lock(&ce->lock);
    *locked = true;
    return ce->te;
}

void classic_te_unlock(struct classic_engine *ce, bool locked)
{
    if (locked)
        pthread_mutex_unlock(&ce->lock);
}

void classic_seal(struct classic_engine *ce)
{
    atomic_store_explicit(&ce->sealed, true, memory_order_release);
}

tent_engine_t classic_tent_engine(transfer_engine_t engine)
{
    struct classic_engine *ce = engine;
    return ce && ce->magic == CLASSIC_MAGIC ? ce->te : NULL;
}

/* ---- arguments ---------------------------------------------------------- */

/* Mooncake's local_server_name: "host", "host:port", "[v6]", "[v6]:port", a
 * bare IPv6 address, each optionally followed by ":npu_<id>" (Ascend). */
static int parse_local(const char *s, char *host, size_t cap, unsigned *port,
                       bool *has_port, int *npu)
{
    char buf[512];
    *port = 0;
    *has_port = false;
    *npu = -1;
    if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
        return -1;
    char *tag = strstr(buf, ":npu_");
    if (tag) {
        char *end;
        long id = strtol(tag + 5, &end, 10);
        if (end == tag + 5 || *end || id < 0 || id > 65535)
            return -1;
        *npu = (int)id;
        *tag = '\0';
    }
    struct in6_addr a6;
    if (!buf[0]) {
        host[0] = '\0';
        return 0;
    }
    if (inet_pton(AF_INET6, buf, &a6) == 1) { /* bare IPv6, no port */
        if (strlen(buf) >= cap)
            return -1;
        strcpy(host, buf);
        return 0;
    }
    if (buf[0] == '[' && buf[strlen(buf) - 1] == ']') {
        size_t n = strlen(buf) - 2;
        if (n == 0 || n >= cap)
            return -1;
        memcpy(host, buf + 1, n);
        host[n] = '\0';
        return 0;
    }
    if (!strchr(buf, ':')) {
        if (strlen(buf) >= cap)
            return -1;
        strcpy(host, buf);
        return 0;
    }
    uint16_t p;
    if (tent_net_split_hostport(buf, host, cap, &p) != 0)
        return -1;
    *port = p;
    *has_port = true;
    return 0;
}

/* metadata_conn_string -> metadata_type and metadata_servers. */
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
        strcpy(set->meta_type, "etcd"); /* Mooncake's default scheme */
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

static bool env_set(const char *name)
{
    return getenv(name) != NULL; /* Mooncake tests presence, not the value */
}

static int settings_from_args(const char *conn, const char *local,
                              const char *ip_arg, int auto_discover,
                              struct classic_settings *set)
{
    memset(set, 0, sizeof(*set));
    set->npu = -1;
    if (!conn || !local) {
        CLASSIC_ERROR("createTransferEngine: %s is NULL",
                      !conn ? "metadata_conn_string" : "local_server_name");
        return -1;
    }
    /* Mooncake does not use ip_or_host_name; its Rust binding passes
     * local_server_name there, port included: only the host counts. */
    char ip[256] = "";
    unsigned ip_port;
    bool ip_has_port;
    int ip_npu;
    if (ip_arg && parse_local(ip_arg, ip, sizeof(ip), &ip_port, &ip_has_port,
                              &ip_npu) != 0) {
        CLASSIC_ERROR("createTransferEngine: ip_or_host_name '%s' is not a "
                      "host or host:port",
                      ip_arg);
        return -1;
    }
    if (parse_conn(conn, set) != 0) {
        CLASSIC_ERROR("createTransferEngine: metadata_conn_string '%s' is "
                      "not P2PHANDSHAKE, etcd://, redis://, http(s):// or "
                      "host:port",
                      conn);
        return -1;
    }
    char host[256];
    unsigned port;
    bool has_port;
    if (parse_local(local, host, sizeof(host), &port, &has_port, &set->npu) !=
        0) {
        CLASSIC_ERROR("createTransferEngine: local_server_name '%s' is not "
                      "host, host:port or host:port:npu_<id>",
                      local);
        return -1;
    }
    const char *bind = getenv("MC_TCP_BIND_ADDRESS");
    bool p2p = strcmp(set->meta_type, "p2p") == 0;
    bool legacy = env_set("MC_LEGACY_RPC_PORT_BINDING");
    const char *chosen = NULL;
    char lan[INET_ADDRSTRLEN];
    if (p2p) {
        /* The name's host is the address peers dial; the port is chosen
         * at start, so two engines given one host:port both start. */
        chosen = host[0] ? host : (ip[0] ? ip : "127.0.0.1");
    } else if (bind && *bind) {
        chosen = bind;
    } else if (legacy && host[0]) {
        chosen = host;
        set->port = has_port ? port : LEGACY_DEFAULT_PORT;
    } else if (ip[0]) {
        chosen = ip;
    } else if (host[0] &&
               (is_numeric_host(host) || strcmp(host, "localhost") == 0)) {
        chosen = host;
    } else {
        chosen = first_lan_ipv4(lan, sizeof(lan)) ? lan : "127.0.0.1";
    }
    if (snprintf(set->host, sizeof(set->host), "%s", chosen) >=
        (int)sizeof(set->host)) {
        CLASSIC_ERROR("createTransferEngine: host '%s' is too long", chosen);
        return -1;
    }
    if (!p2p) {
        /* The segment is known by the name the application gives
         * (without Ascend's ":npu_<id>"). */
        char name[512];
        snprintf(name, sizeof(name), "%s", local);
        char *tag = strstr(name, ":npu_");
        if (tag)
            *tag = '\0';
        if (strlen(name) >= sizeof(set->segment_name)) {
            CLASSIC_ERROR("createTransferEngine: local_server_name '%s' is "
                          "longer than %zu characters",
                          local, sizeof(set->segment_name) - 1);
            return -1;
        }
        strcpy(set->segment_name, name);
    }
    set->force_tcp = env_set("MC_FORCE_TCP");
    if (auto_discover || set->force_tcp)
        set->want[CLASSIC_TCP] = true;
    return 0;
}

/* ---- starting a tent engine --------------------------------------------- */

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

struct start_job {
    const struct classic_settings *set;
    tent_engine_t te;
    char why[768];
};

static const char *const g_kind_names[CLASSIC_NKINDS] = {"tcp", "shm",
                                                         "memfabric"};

/* Stages key = value as a JSON string ("null", the default, when value is
 * empty).  Returns -1 when the value cannot be encoded. */
static int stage_string(const char *key, const char *value)
{
    char v[6 * 1024 + 3]; /* every byte of the longest value escaped */
    if (!value || !*value) {
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

/* Runs in a thread of its own: TENT stages tent_set_config per thread, so
 * the keys set here reach this engine only (with process-wide staging the
 * last engine's keys stay staged; every key is set each time, "null" for a
 * default, so one classic engine never inherits another's). */
static void *start_thread(void *arg)
{
    struct start_job *job = arg;
    const struct classic_settings *set = job->set;
    int bad = stage_string("metadata_type", set->meta_type);
    bad |= stage_string("metadata_servers", set->meta_servers);
    bad |= stage_string("rpc_server_hostname", set->host);
    stage_number("rpc_server_port", (long)set->port);
    bad |= stage_string("local_segment_name", set->segment_name);
    for (int k = 0; k < CLASSIC_NKINDS; k++) {
        char key[64];
        snprintf(key, sizeof(key), "transports/%s/enable", g_kind_names[k]);
        /* Unasked transports stay as MC_TENT_CONF says (tcp defaults to
         * on); MC_FORCE_TCP turns the others off. */
        const char *val = set->want[k]                         ? "true"
                          : set->force_tcp && k != CLASSIC_TCP ? "false"
                                                               : "null";
        tent_set_config(key, val);
    }
    if (set->npu >= 0)
        stage_number("transports/memfabric/device_id", set->npu);
    else
        tent_set_config("transports/memfabric/device_id", "null");
    if (strcmp(set->meta_type, "redis") == 0) {
        const char *pw = getenv("MC_REDIS_PASSWORD");
        if (pw && *pw)
            bad |= stage_string("metadata_password", pw);
        const char *db = getenv("MC_REDIS_DB_INDEX");
        if (db && *db) {
            char *end;
            long n = strtol(db, &end, 10);
            if (*end || n < 0 || n > 255) {
                CLASSIC_WARN("MC_REDIS_DB_INDEX '%s' is not 0..255; using 0",
                             db);
                n = 0;
            }
            stage_number("metadata_db", n);
        }
        if (getenv("MC_REDIS_USERNAME"))
            CLASSIC_WARN("MC_REDIS_USERNAME is not supported (redis AUTH "
                         "with a password only); ignored");
    }
    if (bad) {
        snprintf(job->why, sizeof(job->why),
                 "a configuration value is too long to pass on");
        return NULL;
    }
    /* The engine's threads inherit this mask: SIGINT and SIGTERM go to the
     * application's threads, never to one of the engine's that may hold an
     * engine lock (enableGracefulShutdown's handler never returns). */
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

/* With process-wide staging, two creations must not interleave their keys. */
static pthread_mutex_t g_start_lock = PTHREAD_MUTEX_INITIALIZER;

static tent_engine_t start_tent(const struct classic_settings *set, char *why,
                                size_t why_len)
{
    struct start_job job = {.set = set};
    pthread_t thr;
    pthread_mutex_lock(&g_start_lock);
    int rc = pthread_create(&thr, NULL, start_thread, &job);
    if (rc == 0)
        pthread_join(thr, NULL);
    pthread_mutex_unlock(&g_start_lock);
    if (rc != 0) {
        snprintf(why, why_len, "pthread_create: %s", strerror(rc));
        return NULL;
    }
    if (!job.te)
        snprintf(why, why_len, "%s", job.why);
    return job.te;
}

/* Which transports the tent engine runs: every installed transport has a
 * tent_tasks_in_flight series in the metrics, zeros included.  With the
 * metrics off, a registration pinned to the transport tells. */
static void detect_transports(struct classic_engine *ce)
{
    char one[1];
    size_t len = sizeof(one);
    char *text = NULL;
    int rc = tent_metrics_prometheus(ce->te, one, &len);
    if (rc == TENT_EOVERFLOW && (text = malloc(len)) != NULL)
        rc = tent_metrics_prometheus(ce->te, text, &len);
    for (int k = 0; k < CLASSIC_NKINDS; k++) {
        if (rc == TENT_OK && text) {
            char series[96];
            snprintf(series, sizeof(series),
                     "tent_tasks_in_flight{transport=\"%s\"}", g_kind_names[k]);
            ce->have[k] = strstr(text, series) != NULL;
            continue;
        }
        static _Alignas(4096) unsigned char probe[4096];
        static const int types[CLASSIC_NKINDS] = {TRANSPORT_TCP, TRANSPORT_SHM,
                                                  TRANSPORT_MEMFABRIC};
        tent_memory_options_t o = {.permission = PERM_GLOBAL_READ_WRITE,
                                   .transport_type = types[k]};
        ce->have[k] = tent_register_memory_ex(ce->te, probe, sizeof(probe),
                                              &o) == TENT_OK;
        if (ce->have[k])
            (void)tent_unregister_memory(ce->te, probe, sizeof(probe));
    }
    free(text);
}

/* The network device that carries the RPC address ("lo" for 127.0.0.1);
 * the address itself when no interface has it (a wildcard, a name). */
static void find_nic(struct classic_engine *ce, const char *host)
{
    snprintf(ce->nic, sizeof(ce->nic), "%.63s", host);
    unsigned char want[sizeof(struct in6_addr)];
    int family = inet_pton(AF_INET, host, want) == 1    ? AF_INET
                 : inet_pton(AF_INET6, host, want) == 1 ? AF_INET6
                                                        : 0;
    struct ifaddrs *ifs;
    if (!family || getifaddrs(&ifs) != 0)
        return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != family)
            continue;
        const void *a =
            family == AF_INET
                ? (const void *)&(
                      (const struct sockaddr_in *)(const void *)i->ifa_addr)
                      ->sin_addr
                : (const void *)&(
                      (const struct sockaddr_in6 *)(const void *)i->ifa_addr)
                      ->sin6_addr;
        if (memcmp(a, want, family == AF_INET ? 4 : 16) == 0) {
            snprintf(ce->nic, sizeof(ce->nic), "%s", i->ifa_name);
            break;
        }
    }
    freeifaddrs(ifs);
}

static unsigned bound_port(struct classic_engine *ce)
{
    char addr[256];
    uint16_t port = 0;
    if (tent_rpc_server_addr_port(ce->te, addr, sizeof(addr), &port) != 0)
        return 0;
    return port;
}

/* ---- the API ------------------------------------------------------------ */

CLASSIC_API transfer_engine_t createTransferEngine(
    const char *metadata_conn_string, const char *local_server_name,
    const char *ip_or_host_name, uint64_t rpc_port, int auto_discover)
{
    (void)rpc_port; /* Mooncake chooses the port itself, in every mode */
    struct classic_settings set;
    if (settings_from_args(metadata_conn_string, local_server_name,
                           ip_or_host_name, auto_discover, &set) != 0)
        return NULL;
    struct classic_engine *ce = calloc(1, sizeof(*ce));
    if (!ce) {
        CLASSIC_ERROR("createTransferEngine: out of memory");
        return NULL;
    }
    char why[768];
    ce->te = start_tent(&set, why, sizeof(why));
    if (!ce->te) {
        CLASSIC_ERROR("createTransferEngine('%s', '%s'): %s",
                      metadata_conn_string, local_server_name, why);
        free(ce);
        return NULL;
    }
    ce->magic = CLASSIC_MAGIC;
    pthread_mutex_init(&ce->lock, NULL);
    pthread_mutex_init(&ce->batch_lock, NULL);
    atomic_init(&ce->sealed, false);
    atomic_init(&ce->guarded, false);
    atomic_init(&ce->closing, false);
    atomic_init(&ce->active, 0);
    for (int k = 0; k < CLASSIC_NKINDS; k++)
        ce->xport[k] = (struct classic_transport){.owner = ce, .kind = k};
    ce->set = set;
    ce->set.port = bound_port(ce); /* a replacement keeps the address */
    detect_transports(ce);
    find_nic(ce, set.host);
    if (set.want[CLASSIC_TCP] && !ce->have[CLASSIC_TCP]) {
        CLASSIC_ERROR("createTransferEngine: the tcp transport could not be "
                      "installed (see the engine's warning above)");
        destroyTransferEngine(ce);
        return NULL;
    }
    return ce;
}

void classic_engine_stop(struct classic_engine *ce)
{
    pthread_mutex_lock(&ce->lock);
    tent_engine_t te = ce->te;
    ce->te = NULL;
    pthread_mutex_unlock(&ce->lock);
    tent_destroy_engine(te);
}

CLASSIC_API void destroyTransferEngine(transfer_engine_t engine)
{
    if (!engine)
        return;
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return;
    classic_shutdown_forget(ce);
    classic_engine_stop(ce);
    classic_batches_free(ce);
    tent_free_notifs(&ce->stash);
    free(ce->regions);
    free(ce->segs);
    ce->magic = 0;
    pthread_mutex_destroy(&ce->lock);
    pthread_mutex_destroy(&ce->batch_lock);
    free(ce);
}

/* Notifications queued in the tent engine that is about to be replaced. */
static void stash_notifs(struct classic_engine *ce)
{
    tent_notifi_info info = {0};
    if (tent_recv_notifs(ce->te, &info) == TENT_OK &&
        classic_stash_append(ce, info.records, info.num_records) != 0)
        CLASSIC_WARN("installTransport: out of memory; %d received "
                     "notification(s) dropped",
                     info.num_records);
    tent_free_notifs(&info);
}

/* Replaces the tent engine by one that also runs transport `kind`, on the
 * same address and port (so its name stays valid).  Only before the engine
 * is sealed: nothing registered, opened or allocated is lost.  Caller holds
 * ce->lock. */
static int add_transport(struct classic_engine *ce, int kind, const char *proto)
{
    if (atomic_load(&ce->sealed)) {
        CLASSIC_WARN("installTransport('%s'): the engine is already in use "
                     "(memory registered, a segment opened or a batch "
                     "allocated); install transports before that",
                     proto);
        return -1;
    }
    struct classic_settings next = ce->set;
    next.want[kind] = true;
    stash_notifs(ce);
    tent_destroy_engine(ce->te);
    char why[768];
    ce->te = start_tent(&next, why, sizeof(why));
    if (ce->te) {
        ce->set = next;
        detect_transports(ce);
        return 0;
    }
    CLASSIC_ERROR("installTransport('%s'): the engine could not be restarted "
                  "with it: %s",
                  proto, why);
    ce->te = start_tent(&ce->set, why, sizeof(why));
    if (ce->te)
        detect_transports(ce);
    else
        CLASSIC_ERROR("installTransport('%s'): the engine could not be "
                      "restarted as it was either (%s); it is unusable",
                      proto, why);
    return -1;
}

/* proto_kind() of a protocol whose devices (RDMA NICs, GPUs, EFA, CXL ...)
 * are not available here (tcp runs instead), and of an unknown name. */
#define KIND_NO_DEVICE (-1)
#define KIND_UNKNOWN   (-2)

/* The transport kind of a protocol name Mooncake or TENT knows. */
static int proto_kind(const char *proto)
{
    static const struct {
        const char *name;
        int kind;
    } table[] = {
        {"tcp", CLASSIC_TCP},
        {"shm", CLASSIC_SHM},
        {"memfabric", CLASSIC_MEMFABRIC},
        {"ascend", CLASSIC_MEMFABRIC},
        {"rdma", KIND_NO_DEVICE},
        {"efa", KIND_NO_DEVICE},
        {"cxi", KIND_NO_DEVICE},
        {"barex", KIND_NO_DEVICE},
        {"ub", KIND_NO_DEVICE},
        {"ubshmem", KIND_NO_DEVICE},
        {"nvlink", KIND_NO_DEVICE},
        {"nvlink_intra", KIND_NO_DEVICE},
        {"mnnvl", KIND_NO_DEVICE},
        {"hip", KIND_NO_DEVICE},
        {"maca", KIND_NO_DEVICE},
        {"musa", KIND_NO_DEVICE},
        {"cxl", KIND_NO_DEVICE},
        {"nvmeof", KIND_NO_DEVICE},
        {"nccl", KIND_NO_DEVICE},
        {"sunrise_link", KIND_NO_DEVICE},
        {"gds", KIND_NO_DEVICE},
        {"io_uring", KIND_NO_DEVICE},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcmp(proto, table[i].name) == 0)
            return table[i].kind;
    return KIND_UNKNOWN;
}

/* One warning per protocol and engine.  Caller holds ce->lock. */
static bool first_warning(struct classic_engine *ce, const char *proto)
{
    char key[80];
    snprintf(key, sizeof(key), ",%s,", proto);
    if (strstr(ce->warned, key))
        return false;
    size_t l = strlen(ce->warned);
    if (l + strlen(key) < sizeof(ce->warned))
        snprintf(ce->warned + l, sizeof(ce->warned) - l, "%s",
                 l ? key + 1 : key);
    return true;
}

CLASSIC_API transport_t installTransport(transfer_engine_t engine,
                                         const char *proto, void **args)
{
    (void)args; /* a NIC priority matrix: there are no NICs to order here */
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return NULL;
    if (!proto) {
        CLASSIC_WARN("installTransport: proto is NULL");
        return NULL;
    }
    int kind = proto_kind(proto);
    if (kind == KIND_UNKNOWN) {
        CLASSIC_WARN("installTransport: unsupported transport '%s' (tcp, "
                     "shm, ascend/memfabric; device protocols such as rdma "
                     "run as tcp)",
                     proto);
        return NULL;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return NULL;
    pthread_mutex_lock(&ce->lock);
    int target = kind;
    if (kind == KIND_NO_DEVICE) {
        target = CLASSIC_TCP;
        if (first_warning(ce, proto))
            CLASSIC_WARN("installTransport: protocol '%s' has no device "
                         "here; installing tcp instead",
                         proto);
    } else if (ce->set.force_tcp && kind != CLASSIC_TCP) {
        target = CLASSIC_TCP;
        if (first_warning(ce, proto))
            CLASSIC_WARN("installTransport: MC_FORCE_TCP is set; protocol "
                         "'%s' runs as tcp",
                         proto);
    }
    transport_t out = NULL;
    if (ce->te && !ce->have[target] && add_transport(ce, target, proto) != 0)
        goto done;
    if (ce->te && !ce->have[target] && target != CLASSIC_TCP &&
        ce->have[CLASSIC_TCP]) {
        if (first_warning(ce, proto))
            CLASSIC_WARN("installTransport: the %s transport for protocol "
                         "'%s' could not be installed here (see the engine's "
                         "warning above); installing tcp instead",
                         g_kind_names[target], proto);
        target = CLASSIC_TCP;
    }
    if (!ce->te || !ce->have[target]) {
        CLASSIC_WARN("installTransport('%s'): the %s transport is not "
                     "available",
                     proto, g_kind_names[target]);
        goto done;
    }
    ce->set.want[target] = true;
    out = &ce->xport[target];
done:
    pthread_mutex_unlock(&ce->lock);
    classic_leave(ce, counted);
    return out;
}

CLASSIC_API int uninstallTransport(transfer_engine_t engine, const char *proto)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    if (!proto) {
        CLASSIC_WARN("uninstallTransport: proto is NULL");
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    return 0; /* as Mooncake: transports stay until the engine goes */
}

CLASSIC_API int discoverTopology(transfer_engine_t engine)
{
    return classic_engine_of(engine, __func__) ? 0
                                               : CLASSIC_ERR_INVALID_ARGUMENT;
}

CLASSIC_API int warmupEfaSegment(transfer_engine_t engine,
                                 const char *segment_name)
{
    (void)segment_name; /* no EFA endpoints to connect */
    return classic_engine_of(engine, __func__) ? 0
                                               : CLASSIC_ERR_INVALID_ARGUMENT;
}

CLASSIC_API int syncSegmentCache(transfer_engine_t engine)
{
    /* A descriptor that misses a buffer is fetched again by the engine. */
    return classic_engine_of(engine, __func__) ? 0
                                               : CLASSIC_ERR_INVALID_ARGUMENT;
}

CLASSIC_API int removeLocalSegment(transfer_engine_t engine,
                                   const char *segment_name)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    while (segment_name && *segment_name == '/')
        segment_name++;
    if (!segment_name || !*segment_name) {
        CLASSIC_WARN("removeLocalSegment: segment name is empty");
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    CLASSIC_WARN("removeLocalSegment('%s'): not supported; the engine's "
                 "metadata entry is removed by destroyTransferEngine",
                 segment_name);
    return CLASSIC_ERR_NOT_IMPLEMENTED;
}

/* "<host>:<port>" of the RPC server ("[v6]:port" for IPv6). */
static int local_address(struct classic_engine *ce, char *out, size_t cap,
                         const char *fn)
{
    bool locked;
    tent_engine_t te = classic_te_lock(ce, &locked);
    char host[256];
    uint16_t port = 0;
    int rc = te ? tent_rpc_server_addr_port(te, host, sizeof(host), &port)
                : TENT_ESHUTDOWN;
    classic_te_unlock(ce, locked);
    if (rc != TENT_OK) {
        CLASSIC_WARN("%s: %s", fn,
                     te ? tent_last_error() : "the engine is stopped");
        return classic_err_of(rc);
    }
    int n = tent_net_format_hostport(out, cap, host, port);
    if (n < 0 || (size_t)n >= cap) {
        CLASSIC_WARN("%s: a buffer of %zu bytes cannot hold '%s:%u'", fn, cap,
                     host, (unsigned)port);
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    return 0;
}

CLASSIC_API int getLocalIpAndPort(transfer_engine_t engine, char *buf_out,
                                  size_t buf_len)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    if (!buf_out || buf_len == 0) {
        CLASSIC_WARN("getLocalIpAndPort: buf_out is NULL or buf_len is 0");
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return CLASSIC_ERR_CONTEXT;
    int rc = local_address(ce, buf_out, buf_len, __func__);
    classic_leave(ce, counted);
    return rc;
}

CLASSIC_API int showLinks(transfer_engine_t engine, char *buf_out,
                          size_t buf_len, int json)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    if (!buf_out || buf_len == 0) {
        CLASSIC_WARN("showLinks: buf_out is NULL or buf_len is 0");
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return CLASSIC_ERR_CONTEXT;
    char addr[300];
    int rc = local_address(ce, addr, sizeof(addr), __func__);
    if (rc) {
        classic_leave(ce, counted);
        return rc;
    }
    char names[64] = "";
    pthread_mutex_lock(&ce->lock);
    for (int k = 0; k < CLASSIC_NKINDS; k++) {
        if (!ce->have[k])
            continue;
        size_t l = strlen(names);
        snprintf(names + l, sizeof(names) - l, json ? "%s\"%s\"" : "%s%s",
                 l ? (json ? "," : ", ") : "", g_kind_names[k]);
    }
    pthread_mutex_unlock(&ce->lock);
    /* Mooncake's shape (RDMA NICs and the NIC priority matrix: none here),
     * with what does run. */
    int n;
    if (json)
        n = snprintf(buf_out, buf_len,
                     "{\"local_nics\": [], \"topology\": {}, \"transports\": "
                     "[%s], \"rpc_address\": \"%s\", \"nic\": \"%s\"}",
                     names, addr, ce->nic);
    else
        n = snprintf(buf_out, buf_len,
                     "=== Local NICs ===\n  (no RDMA devices found)\n\n"
                     "=== Transports ===\n  %s (rpc %s on %s)\n",
                     names[0] ? names : "(none)", addr, ce->nic);
    classic_leave(ce, counted);
    if (n < 0 || (size_t)n >= buf_len) {
        CLASSIC_WARN("showLinks: a buffer of %zu bytes is too small (%d "
                     "needed); the text is cut short",
                     buf_len, n + 1);
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    return 0;
}
