/* mf_host: the 13 exported smem_* functions and the registry of live
 * handles.
 *
 * Every handle passed in is looked up in the registry (g_lock) and pinned by
 * api_refs for the call, so a stale or foreign handle gets an error instead
 * of a crash, and smem_trans_destroy waits for calls still using it. */
#include "common/auth.h"
#include "common/compiler.h"
#include "mf_host.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static struct mfh_handle *g_handles; /* g_lock */
static unsigned g_init_count;        /* g_lock */

/* The protocol's name from the ABI header's table. */
static const char *proto_name(uint32_t op)
{
    const char *name = smem_data_op_name(op);
    return name ? name : "unknown";
}

/* ---- handle registry ---------------------------------------------------- */

static struct mfh_handle *handle_get(smem_trans_t handle)
{
    if (!handle)
        return NULL;
    pthread_mutex_lock(&g_lock);
    struct mfh_handle *h = g_handles;
    while (h && h != handle)
        h = h->next;
    if (h)
        h->api_refs++;
    pthread_mutex_unlock(&g_lock);
    return h;
}

static void handle_put(struct mfh_handle *h)
{
    pthread_mutex_lock(&g_lock);
    if (--h->api_refs == 0)
        pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
}

/* Stops every thread of h and frees it.  h is already out of the registry
 * and no API call uses it. */
static void handle_free(struct mfh_handle *h)
{
    atomic_store(&h->stopping, true);
    /* Close the server first so peers learn at once that we are gone. */
    mfh_server_stop(h);
    mfh_peers_shutdown(h);
    mfh_workers_stop(h);
    mfh_monitor_stop(h);
    mfh_batches_free(h);
    mfh_peers_release(h);
    mfh_ctl_destroy(h);
    tent_auth_free(h->auth);
    pthread_mutex_destroy(&h->reg_lock);
    pthread_rwlock_destroy(&h->mem_lock);
    pthread_mutex_destroy(&h->cb_lock);
    pthread_mutex_destroy(&h->srv_lock);
    pthread_mutex_destroy(&h->connect_lock);
    pthread_mutex_destroy(&h->peer_lock);
    pthread_mutex_destroy(&h->batch_lock);
    pthread_mutex_destroy(&h->q_lock);
    pthread_cond_destroy(&h->q_cond);
    free(h->ranges);
    free(h);
}

/* Removes h from the registry and waits for API calls still using it.
 * Caller holds g_lock. */
static void handle_unlink_locked(struct mfh_handle *h)
{
    for (struct mfh_handle **pp = &g_handles; *pp; pp = &(*pp)->next) {
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    }
    atomic_store(&h->stopping, true);
    while (h->api_refs > 0)
        pthread_cond_wait(&g_cond, &g_lock);
}

/* Unloading the library (dlclose) or leaving the process with instances
 * alive would leave their threads running code that is gone: stop them. */
__attribute__((destructor)) static void mfh_unload(void)
{
    struct mfh_handle *doomed = NULL;
    pthread_mutex_lock(&g_lock);
    while (g_handles) {
        struct mfh_handle *h = g_handles;
        MFH_WARN("unload: destroying instance %s still alive", h->uid);
        handle_unlink_locked(h);
        h->next = doomed;
        doomed = h;
    }
    g_init_count = 0;
    pthread_mutex_unlock(&g_lock);
    while (doomed) {
        struct mfh_handle *next = doomed->next;
        handle_free(doomed);
        doomed = next;
    }
}

/* ---- the ABI ------------------------------------------------------------ */

MFH_EXPORT int32_t smem_trans_init(uint32_t deviceId,
                                   TENT_UNUSED uint32_t flags)
{
    pthread_mutex_lock(&g_lock);
    g_init_count++;
    pthread_mutex_unlock(&g_lock);
    MFH_INFO("initialized (device %u ignored: host memory only)", deviceId);
    return SM_OK;
}

MFH_EXPORT void smem_trans_uninit(TENT_UNUSED uint32_t flags)
{
    struct mfh_handle *doomed = NULL;
    pthread_mutex_lock(&g_lock);
    if (g_init_count == 0) {
        pthread_mutex_unlock(&g_lock);
        MFH_WARN("smem_trans_uninit without smem_trans_init");
        return;
    }
    if (--g_init_count == 0) {
        while (g_handles) {
            struct mfh_handle *h = g_handles;
            MFH_WARN("uninit: destroying instance %s still alive", h->uid);
            handle_unlink_locked(h);
            h->next = doomed;
            doomed = h;
        }
    }
    pthread_mutex_unlock(&g_lock);
    while (doomed) {
        struct mfh_handle *next = doomed->next;
        handle_free(doomed);
        doomed = next;
    }
}

MFH_EXPORT int32_t smem_trans_config_init(smem_trans_config_t *config)
{
    if (!config) {
        MFH_ERROR("config_init: config is NULL");
        return SM_INVALID_PARAM;
    }
    memset(config, 0, sizeof(*config));
    config->role = SMEM_TRANS_BOTH;
    config->initTimeout = 120;
    config->dataOpType = SMEMB_DATA_OP_HOST_TCP;
    snprintf(config->url, sizeof(config->url), "127.0.0.1:0");
    return SM_OK;
}

/* An integer environment variable in [lo, hi], def when unset; false (logged)
 * when malformed.  Read once, at create. */
static bool int_from_env(const char *name, long long def, long long lo,
                         long long hi, int *out)
{
    const char *s = getenv(name);
    if (!s) {
        *out = (int)def;
        return true;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        MFH_ERROR("create: %s='%s' is not a number in %lld..%lld", name, s, lo,
                  hi);
        return false;
    }
    *out = (int)v;
    return true;
}

/* The server's cap by default: a quarter of the descriptors this process
 * may open, leaving the rest to the engine around it. */
static long long default_max_conns(void)
{
    struct rlimit rl;
    long long n =
        getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
            ? (long long)rl.rlim_cur / 4
            : MFH_MAX_CONNS_DEFAULT;
    return n < MFH_MAX_CONNS_MIN       ? MFH_MAX_CONNS_MIN
           : n > MFH_MAX_CONNS_DEFAULT ? MFH_MAX_CONNS_DEFAULT
                                       : n;
}

/* MF_TRANSFER_TIMEOUT, the seed's transfer timeout in milliseconds, also
 * bounds this instance's socket calls, so a stalled peer fails a batch
 * after the configured time.  MF_HOST_MAX_CONNECTIONS and
 * MF_HOST_IDLE_TIMEOUT_MS are the server's limits (mf_host_server.c). */
static bool limits_from_env(int *io_timeout_ms, int *max_conns,
                            int *idle_timeout_ms)
{
    return int_from_env("MF_TRANSFER_TIMEOUT", MFH_IO_TIMEOUT_MS, 1,
                        MFH_IO_TIMEOUT_MAX_MS, io_timeout_ms) &&
           int_from_env("MF_HOST_MAX_CONNECTIONS", default_max_conns(), 1,
                        MFH_MAX_CONNS_MAX, max_conns) &&
           int_from_env("MF_HOST_IDLE_TIMEOUT_MS", MFH_IDLE_TIMEOUT_MS, 0,
                        MFH_IO_TIMEOUT_MAX_MS, idle_timeout_ms);
}

MFH_EXPORT smem_trans_t smem_trans_create(const smem_trans_config_t *config,
                                          TENT_UNUSED uint32_t flags)
{
    if (!config) {
        MFH_ERROR("create: config is NULL");
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    unsigned inited = g_init_count;
    pthread_mutex_unlock(&g_lock);
    if (!inited) {
        MFH_ERROR("create: smem_trans_init has not been called");
        return NULL;
    }
    uint32_t op = (uint32_t)config->dataOpType;
    if (op != SMEMB_DATA_OP_HOST_TCP && op != SMEMB_DATA_OP_HOST_SHM) {
        MFH_ERROR("create: this is mf_host, the host-memory implementation of "
                  "libmf_smem.so; it supports host_tcp and host_shm only. "
                  "Protocol %s (dataOpType 0x%x) needs the vendor's "
                  "libmf_smem.so (memfabric_hybrid)",
                  proto_name(op), op);
        return NULL;
    }
    if (config->hcomTlsConfig.tlsEnable) {
        MFH_ERROR("create: tls is not supported by mf_host");
        return NULL;
    }
    if (config->role >= SMEM_TRANS_BUTT) {
        MFH_ERROR("create: bad role %d", (int)config->role);
        return NULL;
    }
    int io_timeout_ms, max_conns, idle_timeout_ms;
    if (!limits_from_env(&io_timeout_ms, &max_conns, &idle_timeout_ms))
        return NULL;
    char url[sizeof(config->url) + 1];
    memcpy(url, config->url, sizeof(config->url));
    url[sizeof(config->url)] = '\0';
    if (!url[0])
        snprintf(url, sizeof(url), "127.0.0.1:0");

    struct mfh_handle *h = calloc(1, sizeof(*h));
    if (!h) {
        MFH_ERROR("create: out of memory");
        return NULL;
    }
    if (tent_net_split_hostport(url, h->host, sizeof(h->host), &h->port) != 0) {
        MFH_ERROR("create: bad url '%s' (want <host>:<port>, e.g. "
                  "127.0.0.1:0)",
                  url);
        free(h);
        return NULL;
    }
    const char *secret = getenv(TENT_AUTH_ENV);
    char err[768];
    if (secret && *secret &&
        tent_auth_read(TENT_AUTH_ENV, secret, &h->auth, err, sizeof(err))) {
        MFH_ERROR("create: %s", err);
        free(h);
        return NULL;
    }
    h->proto = op;
    h->io_timeout_ms = io_timeout_ms;
    h->listen_fd = -1;
    h->monitor_efd = -1;
    h->ctl_fd = -1;
    atomic_init(&h->stopping, false);
    h->reserve_fd = -1;
    h->max_conns = max_conns;
    h->idle_timeout_ms = idle_timeout_ms;
    pthread_mutex_init(&h->reg_lock, NULL);
    pthread_rwlock_init(&h->mem_lock, NULL);
    pthread_mutex_init(&h->cb_lock, NULL);
    pthread_mutex_init(&h->srv_lock, NULL);
    pthread_mutex_init(&h->connect_lock, NULL);
    pthread_mutex_init(&h->peer_lock, NULL);
    pthread_mutex_init(&h->batch_lock, NULL);
    pthread_mutex_init(&h->q_lock, NULL);
    pthread_cond_init(&h->q_cond, NULL);

    if (mfh_ctl_create(h) != SM_OK || mfh_server_start(h) != SM_OK ||
        mfh_monitor_start(h) != SM_OK || mfh_workers_start(h) != SM_OK) {
        handle_free(h);
        return NULL;
    }

    pthread_mutex_lock(&g_lock);
    h->next = g_handles;
    g_handles = h;
    pthread_mutex_unlock(&g_lock);
    MFH_INFO("created instance %s (%s, socket timeout %d ms, at most %d "
             "connections, idle timeout %d ms)",
             h->uid, proto_name(op), io_timeout_ms, max_conns, idle_timeout_ms);
    return h;
}

MFH_EXPORT void smem_trans_destroy(smem_trans_t handle,
                                   TENT_UNUSED uint32_t flags)
{
    pthread_mutex_lock(&g_lock);
    struct mfh_handle *h = g_handles;
    while (h && h != handle)
        h = h->next;
    if (!h) {
        pthread_mutex_unlock(&g_lock);
        MFH_WARN("destroy: %p is not a live instance", handle);
        return;
    }
    handle_unlink_locked(h);
    pthread_mutex_unlock(&g_lock);
    MFH_INFO("destroying instance %s", h->uid);
    handle_free(h);
}

MFH_EXPORT int32_t smem_trans_get_rpc_port(smem_trans_t handle, uint16_t *port)
{
    struct mfh_handle *h = handle_get(handle);
    if (!h || !port) {
        MFH_ERROR("get_rpc_port: %s", !h ? "bad handle" : "port is NULL");
        if (h)
            handle_put(h);
        return SM_INVALID_PARAM;
    }
    *port = h->port;
    handle_put(h);
    return SM_OK;
}

MFH_EXPORT int32_t smem_trans_register_mem(smem_trans_t handle, void *address,
                                           size_t capacity,
                                           TENT_UNUSED uint32_t flags)
{
    struct mfh_handle *h = handle_get(handle);
    if (!h) {
        MFH_ERROR("register_mem: bad handle %p", handle);
        return SM_INVALID_PARAM;
    }
    int32_t rc = mfh_ranges_add(h, &address, &capacity, NULL, 1);
    handle_put(h);
    return rc;
}

MFH_EXPORT int32_t smem_trans_ext_register_mem_keyed(smem_trans_t handle,
                                                     void *address,
                                                     size_t capacity,
                                                     const uint8_t *key,
                                                     TENT_UNUSED uint32_t flags)
{
    if (!key) {
        MFH_ERROR("register_mem_keyed: key is NULL");
        return SM_INVALID_PARAM;
    }
    struct mfh_handle *h = handle_get(handle);
    if (!h) {
        MFH_ERROR("register_mem_keyed: bad handle %p", handle);
        return SM_INVALID_PARAM;
    }
    int32_t rc = mfh_ranges_add(h, &address, &capacity, key, 1);
    handle_put(h);
    return rc;
}

MFH_EXPORT int32_t smem_trans_batch_register_mem(smem_trans_t handle,
                                                 void *addresses[],
                                                 size_t capacities[],
                                                 uint32_t count,
                                                 TENT_UNUSED uint32_t flags)
{
    if (!addresses || !capacities || count == 0) {
        MFH_ERROR("batch_register_mem: addresses %p, capacities %p, count %u",
                  (void *)addresses, (void *)capacities, count);
        return SM_INVALID_PARAM;
    }
    struct mfh_handle *h = handle_get(handle);
    if (!h) {
        MFH_ERROR("batch_register_mem: bad handle %p", handle);
        return SM_INVALID_PARAM;
    }
    int32_t rc = mfh_ranges_add(h, addresses, capacities, NULL, count);
    handle_put(h);
    return rc;
}

MFH_EXPORT int32_t smem_trans_deregister_mem(smem_trans_t handle, void *address)
{
    struct mfh_handle *h = handle_get(handle);
    if (!h || !address) {
        MFH_ERROR("deregister_mem: %s", !h ? "bad handle" : "address is NULL");
        if (h)
            handle_put(h);
        return SM_INVALID_PARAM;
    }
    int32_t rc = mfh_ranges_revoke(h, address);
    handle_put(h);
    return rc;
}

static int32_t check_params(const smem_trans_batch_params_t *pr)
{
    if (!pr->destUrl || !pr->destUrl[0] || !pr->srcList || !pr->destList ||
        !pr->sizeList || pr->batchSize == 0 || pr->batchSize > MFH_MAX_BATCH) {
        MFH_ERROR("batch_copy: bad parameters: destUrl %s, srcList %p, "
                  "destList %p, sizeList %p, batchSize %u",
                  pr->destUrl ? pr->destUrl : "(null)", (void *)pr->srcList,
                  (void *)pr->destList, (void *)pr->sizeList, pr->batchSize);
        return SM_INVALID_PARAM;
    }
    if (pr->opcode != SMEM_TRANS_OP_READ && pr->opcode != SMEM_TRANS_OP_WRITE) {
        MFH_ERROR("batch_copy: unknown opcode %d", (int)pr->opcode);
        return SM_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < pr->batchSize; i++) {
        uintptr_t l = (uintptr_t)pr->srcList[i];
        uintptr_t r = (uintptr_t)pr->destList[i];
        size_t n = pr->sizeList[i];
        if (!l || !r || n == 0 || l + n < l || r + n < r) {
            MFH_ERROR("batch_copy: bad entry %u: src %p, dest %p, size %zu", i,
                      pr->srcList[i], pr->destList[i], n);
            return SM_INVALID_PARAM;
        }
    }
    return SM_OK;
}

static int32_t batch_copy(smem_trans_t handle,
                          const smem_trans_batch_params_t *params,
                          const uint8_t *keys, uint64_t *batchId)
{
    if (!params || !batchId) {
        MFH_ERROR("batch_copy: %s is NULL", !params ? "params" : "batchId");
        return SM_INVALID_PARAM;
    }
    int32_t rc = check_params(params);
    if (rc != SM_OK)
        return rc;
    struct mfh_handle *h = handle_get(handle);
    if (!h) {
        MFH_ERROR("batch_copy: bad handle %p", handle);
        return SM_INVALID_PARAM;
    }
    struct mfh_peer *p = mfh_peer_get(h, params->destUrl);
    if (!p) {
        MFH_ERROR("batch_copy: unknown peer '%s'", params->destUrl);
        handle_put(h);
        return SM_INVALID_PARAM;
    }
    rc = mfh_batch_submit(h, p, params, keys, batchId);
    if (rc != SM_OK)
        mfh_peer_put(p);
    handle_put(h);
    return rc;
}

MFH_EXPORT int32_t smem_trans_batch_copy(smem_trans_t handle,
                                         smem_trans_batch_params_t *params,
                                         uint64_t *batchId)
{
    return batch_copy(handle, params, NULL, batchId);
}

MFH_EXPORT int32_t smem_trans_ext_batch_copy_keyed(
    smem_trans_t handle, smem_trans_batch_params_t *params, const uint8_t *keys,
    uint64_t *batchId)
{
    if (!keys) {
        MFH_ERROR("batch_copy_keyed: keys is NULL");
        return SM_INVALID_PARAM;
    }
    return batch_copy(handle, params, keys, batchId);
}

MFH_EXPORT int32_t smem_trans_batch_status_query(smem_trans_t handle,
                                                 uint64_t batchId,
                                                 int32_t *result,
                                                 TENT_UNUSED uint32_t flags)
{
    if (!result) {
        MFH_ERROR("batch_status_query: result is NULL");
        return SM_INVALID_PARAM;
    }
    struct mfh_handle *h = handle_get(handle);
    if (!h) {
        MFH_ERROR("batch_status_query: bad handle %p", handle);
        return SM_INVALID_PARAM;
    }
    int32_t rc = mfh_batch_query(h, batchId, result);
    if (rc == SM_OBJECT_NOT_EXISTS)
        MFH_ERROR("batch_status_query: batch %llu is unknown or its result "
                  "was already consumed",
                  (unsigned long long)batchId);
    handle_put(h);
    return rc;
}

MFH_EXPORT int32_t smem_trans_set_peer_down_callback(
    smem_trans_t handle, smem_trans_peer_down_callback_t callback,
    void *userData)
{
    struct mfh_handle *h = handle_get(handle);
    if (!h) {
        MFH_ERROR("set_peer_down_callback: bad handle %p", handle);
        return SM_INVALID_PARAM;
    }
    mfh_peer_down_callback_set(h, callback, userData);
    handle_put(h);
    return SM_OK;
}

MFH_EXPORT int32_t smem_set_log_level(int level)
{
    if (level < MFH_LOG_DEBUG || level > MFH_LOG_ERROR) {
        MFH_ERROR("set_log_level: level %d out of range 0 (debug) .. 3 "
                  "(error)",
                  level);
        return SM_INVALID_PARAM;
    }
    atomic_store(&mfh_log_level, level);
    return SM_OK;
}
