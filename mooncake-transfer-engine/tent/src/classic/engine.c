/* createTransferEngine, installTransport and the other engine-level calls:
 * Mooncake's arguments become tent_set_config keys of one tent engine. */
#include "classic/classic.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

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
    /* Every call counts itself, so that destroyTransferEngine and graceful
     * shutdown can wait for the calls inside.  Pairs with their store of
     * closing and load of active: either they see this call or this call
     * sees closing. */
    atomic_fetch_add(&ce->active, 1);
    if (atomic_load(&ce->closing)) {
        atomic_fetch_sub(&ce->active, 1);
        *counted = false;
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

static void warn_classic(void *ctx, const char *msg)
{
    (void)ctx;
    CLASSIC_WARN("createTransferEngine: %s", msg);
}

static int settings_from_args(const char *conn, const char *local,
                              const char *ip_arg, int auto_discover,
                              struct classic_settings *set)
{
    const struct classic_args args = {
        .conn = conn,
        .local = local,
        .ip = ip_arg,
        .conn_label = "metadata_conn_string",
        .local_label = "local_server_name",
        .ip_label = "ip_or_host_name",
    };
    char err[768];
    if (classic_settings_parse(&args, set, warn_classic, NULL, err,
                               sizeof(err)) != 0) {
        CLASSIC_ERROR("createTransferEngine: %s", err);
        return -1;
    }
    if (auto_discover)
        set->xport[CLASSIC_TCP] = CLASSIC_ON;
    return 0;
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
                     "tent_tasks_in_flight{transport=\"%s\"}",
                     classic_kind_names[k]);
            ce->have[k] = strstr(text, series) != NULL;
            continue;
        }
        static _Alignas(4096) unsigned char probe[4096];
        static const int types[CLASSIC_NKINDS] = {TRANSPORT_TCP, TRANSPORT_SHM,
                                                  TRANSPORT_MEMFABRIC,
                                                  TRANSPORT_LIBFABRIC};
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
    ce->te = classic_settings_start(&set, why, sizeof(why));
    if (!ce->te) {
        CLASSIC_ERROR("createTransferEngine('%s', '%s'): %s",
                      metadata_conn_string, local_server_name, why);
        free(ce);
        return NULL;
    }
    ce->magic = CLASSIC_MAGIC;
    pthread_mutex_init(&ce->lock, NULL);
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
    if (set.xport[CLASSIC_TCP] == CLASSIC_ON && !ce->have[CLASSIC_TCP]) {
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
    /* Calls already inside finish first; calls that begin from now on
     * fail.  A call that begins after this returns uses freed memory: the
     * caller must not make one (transfer_engine_c.h). */
    atomic_store(&ce->closing, true);
    while (atomic_load(&ce->active) > 0) {
        struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&ms, NULL);
    }
    classic_engine_stop(ce);
    tent_free_notifs(&ce->stash);
    free(ce->regions);
    free(ce->segs);
    ce->magic = 0;
    pthread_mutex_destroy(&ce->lock);
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
    next.xport[kind] = CLASSIC_ON;
    stash_notifs(ce);
    tent_destroy_engine(ce->te);
    char why[768];
    ce->te = classic_settings_start(&next, why, sizeof(why));
    if (ce->te) {
        detect_transports(ce);
        /* kept only when it runs: a transport left out (its library is
         * missing) would otherwise be asked for again at every restart */
        if (ce->have[kind])
            ce->set = next;
        return 0;
    }
    CLASSIC_ERROR("installTransport('%s'): the %s transport could not be "
                  "installed: %s",
                  proto, classic_kind_names[kind], why);
    ce->te = classic_settings_start(&ce->set, why, sizeof(why));
    if (ce->te)
        detect_transports(ce);
    else
        CLASSIC_ERROR("installTransport('%s'): the engine could not be "
                      "restarted as it was either (%s); it is unusable",
                      proto, why);
    return -1;
}

/* Why transport `kind` does not run in the engine: an engine with that
 * transport alone (p2p, an ephemeral port, so nothing is published or
 * taken from the running engine) fails with the transport's install error
 * (tent_create_engine fails when no memory transport installs).  0 if it
 * runs there after all. */
static int probe_transport(const struct classic_engine *ce, int kind, char *why,
                           size_t len)
{
    return classic_settings_probe(&ce->set, kind, why, len);
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

/* rdma, efa, cxi: the libfabric transport with the protocol's provider,
 * when it runs here (a probe engine installs it); CLASSIC_LIBFABRIC, or
 * -1 with the reason in why (tcp stands in, with the usual warning).
 * Caller holds ce->lock. */
static int fabric_stand_in(struct classic_engine *ce, const char *provider,
                           char *why, size_t len)
{
    if (ce->have[CLASSIC_LIBFABRIC] &&
        strcmp(ce->set.fabric_provider, provider) == 0)
        return CLASSIC_LIBFABRIC;
    if (ce->have[CLASSIC_LIBFABRIC]) {
        snprintf(why, len, "libfabric runs provider %s here already",
                 ce->set.fabric_provider);
        return -1; /* one provider per engine */
    }
    if (strlen(provider) >= sizeof(ce->set.fabric_provider)) {
        snprintf(why, len, "provider name '%.40s...' is longer than %zu bytes",
                 provider, sizeof(ce->set.fabric_provider) - 1);
        return -1;
    }
    char saved[sizeof(ce->set.fabric_provider)];
    snprintf(saved, sizeof(saved), "%s", ce->set.fabric_provider);
    snprintf(ce->set.fabric_provider, sizeof(ce->set.fabric_provider), "%s",
             provider);
    if (probe_transport(ce, CLASSIC_LIBFABRIC, why, len) == 0)
        return CLASSIC_LIBFABRIC;
    snprintf(ce->set.fabric_provider, sizeof(ce->set.fabric_provider), "%s",
             saved);
    return -1;
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
    struct classic_protocol pr;
    if (classic_protocol_find(proto, &pr) != 0) {
        char list[512];
        classic_protocol_list(list, sizeof(list));
        CLASSIC_WARN("installTransport: unsupported transport '%s' (one of "
                     "%s; those without a transport here run as tcp)",
                     proto, list);
        return NULL;
    }
    int kind = pr.kind;
    bool counted;
    if (!classic_enter(ce, &counted))
        return NULL;
    pthread_mutex_lock(&ce->lock);
    int target = kind;
    char fwhy[768] = "";
    if (kind < 0 && pr.fabric && !ce->set.force_tcp && ce->te)
        kind = target = fabric_stand_in(ce, pr.fabric, fwhy, sizeof(fwhy));
    if (kind < 0) {
        target = CLASSIC_TCP;
        bool first = first_warning(ce, proto);
        if (first && fwhy[0])
            CLASSIC_WARN("installTransport: protocol '%s' has no device "
                         "here (libfabric provider %s: %s); installing tcp "
                         "instead",
                         proto, pr.fabric, fwhy);
        else if (first)
            CLASSIC_WARN("installTransport: protocol '%s' has no device "
                         "here (this engine has no %s transport); installing "
                         "tcp instead",
                         proto, pr.xport);
    } else if (ce->set.force_tcp && kind != CLASSIC_TCP) {
        target = CLASSIC_TCP;
        if (first_warning(ce, proto))
            CLASSIC_WARN("installTransport: MC_FORCE_TCP is set; protocol "
                         "'%s' runs as tcp",
                         proto);
    }
    /* A transport asked for by name that cannot be installed fails the
     * call with its cause (add_transport logs it); tcp does not quietly
     * stand in for it. */
    transport_t out = NULL;
    if (ce->te && !ce->have[target] && add_transport(ce, target, proto) != 0)
        goto done;
    if (ce->te && !ce->have[target] && target != CLASSIC_TCP) {
        char why[768];
        if (probe_transport(ce, target, why, sizeof(why)) != 0)
            CLASSIC_ERROR("installTransport('%s'): the %s transport could "
                          "not be installed: %s",
                          proto, classic_kind_names[target], why);
        else
            CLASSIC_ERROR("installTransport('%s'): the %s transport could "
                          "not be installed (see the engine's log above)",
                          proto, classic_kind_names[target]);
        goto done;
    }
    if (!ce->te || !ce->have[target]) {
        CLASSIC_WARN("installTransport('%s'): the %s transport is not "
                     "available",
                     proto, classic_kind_names[target]);
        goto done;
    }
    ce->set.xport[target] = CLASSIC_ON;
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
    int n = classic_format_hostport(out, cap, host, port);
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
                 l ? (json ? "," : ", ") : "", classic_kind_names[k]);
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
