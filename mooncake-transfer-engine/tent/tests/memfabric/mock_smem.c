/* Test-only libmf_smem.so: see mock_smem.h.
 *
 * Built with MOCK_STATUS_QUERY_3ARG, smem_trans_batch_status_query has the
 * fork's three-argument shape (handle, batchId, flags) and answers 0 done,
 * 1 pending, else the failed batch's result (or the query error): the
 * four-argument query below is renamed and wrapped. */
#ifdef MOCK_STATUS_QUERY_3ARG
#define smem_trans_batch_status_query mock_status_query4
#endif
#include "mock_smem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HANDLES 32
#define MAX_REGIONS 4096
#define MAX_QUEUED  64
#define BASE_PORT   40000

struct region {
    uintptr_t base;
    size_t len;
};

struct handle {
    bool live;
    char unique_id[96];
    uint16_t port;
    smem_trans_peer_down_callback_t cb;
    void *user;
    struct region regions[MAX_REGIONS];
    int nregions;
};

struct batch {
    struct batch *next;
    uint64_t id;
    struct handle *owner;
    int opcode;
    uint32_t n;
    void **src, **dst;
    size_t *sizes;
    int polls_left;
    bool never;
    int32_t result;
};

/* Everything below is guarded by g_lock; g_cond wakes blocked queries. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static struct handle g_handles[MAX_HANDLES];
static int g_nports;
static int g_init_refs;
static struct batch *g_batches;
static uint64_t g_next_id = 1;
static int g_live_batches;

static int k_pending_polls;
static bool k_never;
static int32_t k_result;
static int32_t k_queue[MAX_QUEUED];
static int k_nqueue;
static bool k_partial;
static int32_t k_query_err;
static int k_query_err_n;
static int32_t k_copy_err;
static int k_copy_err_n;
static char k_fail_sym[64];
static int32_t k_fail_code;
static bool k_block;
static int g_blocked;

static struct {
    const char *name;
    int count;
} g_calls[] = {
#define MOCK_CALL_ENTRY(ret, name, params) {#name, 0},
    SMEM_TRANS_SYMBOLS(MOCK_CALL_ENTRY)
#undef MOCK_CALL_ENTRY
};
static int g_stale, g_bad_params, g_bad_queries, g_log_level = -1;
static uint64_t g_copied;
static bool g_have_config, g_have_last;
static smem_trans_config_t g_last_config;
static struct mock_batch_info g_last;

/* Counts a call of name and says whether it should fail (one-shot). */
static bool enter_locked(const char *name)
{
    for (size_t i = 0; i < sizeof(g_calls) / sizeof(g_calls[0]); i++)
        if (strcmp(g_calls[i].name, name) == 0)
            g_calls[i].count++;
    if (k_fail_sym[0] && strcmp(k_fail_sym, name) == 0) {
        k_fail_sym[0] = '\0';
        return true;
    }
    return false;
}

static struct handle *handle_of(smem_trans_t h)
{
    struct handle *p = h;
    if (p < g_handles || p >= g_handles + MAX_HANDLES || !p->live)
        return NULL;
    return p;
}

static bool registered_in(const struct handle *h, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    for (int i = 0; i < h->nregions; i++)
        if (a >= h->regions[i].base &&
            a - h->regions[i].base <= h->regions[i].len &&
            len <= h->regions[i].len - (a - h->regions[i].base))
            return true;
    return false;
}

static void free_batch(struct batch *b)
{
    free(b->src);
    free(b->dst);
    free(b->sizes);
    free(b);
}

/* ---- the ABI ------------------------------------------------------------ */

int32_t smem_trans_init(uint32_t deviceId, uint32_t flags)
{
    (void)deviceId;
    (void)flags;
    pthread_mutex_lock(&g_lock);
    int32_t rc = enter_locked(__func__) ? k_fail_code : SM_OK;
    if (rc == SM_OK)
        g_init_refs++;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

void smem_trans_uninit(uint32_t flags)
{
    (void)flags;
    pthread_mutex_lock(&g_lock);
    enter_locked(__func__);
    if (g_init_refs > 0)
        g_init_refs--;
    pthread_mutex_unlock(&g_lock);
}

int32_t smem_trans_config_init(smem_trans_config_t *config)
{
    pthread_mutex_lock(&g_lock);
    int32_t rc = enter_locked(__func__) ? k_fail_code : SM_OK;
    pthread_mutex_unlock(&g_lock);
    if (rc != SM_OK)
        return rc;
    if (!config)
        return SM_INVALID_PARAM;
    memset(config, 0, sizeof(*config));
    config->role = SMEM_TRANS_NONE;
    config->initTimeout = 30;
    return SM_OK;
}

smem_trans_t smem_trans_create(const smem_trans_config_t *config,
                               uint32_t flags)
{
    (void)flags;
    pthread_mutex_lock(&g_lock);
    struct handle *h = NULL;
    if (enter_locked(__func__) || !config || g_init_refs == 0)
        goto out;
    g_last_config = *config;
    g_have_config = true;
    const char *colon = strrchr(config->url, ':');
    if (!colon || strcmp(colon, ":0") != 0)
        goto out;
    for (int i = 0; i < MAX_HANDLES && !h; i++)
        if (!g_handles[i].live)
            h = &g_handles[i];
    if (!h)
        goto out;
    memset(h, 0, sizeof(*h));
    h->live = true;
    h->port = (uint16_t)(BASE_PORT + ++g_nports);
    snprintf(h->unique_id, sizeof(h->unique_id), "%.*s:%u",
             (int)(colon - config->url), config->url, (unsigned)h->port);
out:
    pthread_mutex_unlock(&g_lock);
    return h;
}

void smem_trans_destroy(smem_trans_t handle, uint32_t flags)
{
    (void)flags;
    pthread_mutex_lock(&g_lock);
    enter_locked(__func__);
    struct handle *h = handle_of(handle);
    if (h) {
        /* Batches of a destroyed handle are gone: unknown ids from now on. */
        for (struct batch **pp = &g_batches; *pp;) {
            struct batch *b = *pp;
            if (b->owner == h) {
                *pp = b->next;
                free_batch(b);
                g_live_batches--;
            } else {
                pp = &b->next;
            }
        }
        h->live = false;
    }
    pthread_mutex_unlock(&g_lock);
}

int32_t smem_trans_get_rpc_port(smem_trans_t handle, uint16_t *port)
{
    pthread_mutex_lock(&g_lock);
    int32_t rc = enter_locked(__func__) ? k_fail_code : SM_OK;
    struct handle *h = handle_of(handle);
    if (rc == SM_OK && (!h || !port))
        rc = SM_INVALID_PARAM;
    if (rc == SM_OK)
        *port = h->port;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int32_t smem_trans_register_mem(smem_trans_t handle, void *address,
                                size_t capacity, uint32_t flags)
{
    (void)flags;
    pthread_mutex_lock(&g_lock);
    int32_t rc = enter_locked(__func__) ? k_fail_code : SM_OK;
    struct handle *h = handle_of(handle);
    if (rc == SM_OK && (!h || !address || !capacity))
        rc = SM_INVALID_PARAM;
    if (rc == SM_OK && h->nregions == MAX_REGIONS)
        rc = SM_MALLOC_FAILED;
    if (rc == SM_OK)
        h->regions[h->nregions++] =
            (struct region){(uintptr_t)address, capacity};
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int32_t smem_trans_batch_register_mem(smem_trans_t handle, void *addresses[],
                                      size_t capacities[], uint32_t count,
                                      uint32_t flags)
{
    for (uint32_t i = 0; i < count; i++) {
        int32_t rc =
            smem_trans_register_mem(handle, addresses[i], capacities[i], flags);
        if (rc != SM_OK)
            return rc;
    }
    return SM_OK;
}

int32_t smem_trans_deregister_mem(smem_trans_t handle, void *address)
{
    pthread_mutex_lock(&g_lock);
    int32_t rc = enter_locked(__func__) ? k_fail_code : SM_OBJECT_NOT_EXISTS;
    struct handle *h = handle_of(handle);
    if (rc == SM_OBJECT_NOT_EXISTS && h) {
        for (int i = 0; i < h->nregions; i++)
            if (h->regions[i].base == (uintptr_t)address) {
                h->regions[i] = h->regions[--h->nregions];
                rc = SM_OK;
                break;
            }
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static struct handle *peer_of_locked(const char *url)
{
    for (int i = 0; url && i < MAX_HANDLES; i++)
        if (g_handles[i].live && strcmp(g_handles[i].unique_id, url) == 0)
            return &g_handles[i];
    return NULL;
}

int32_t smem_trans_batch_copy(smem_trans_t handle,
                              smem_trans_batch_params_t *params,
                              uint64_t *batchId)
{
    pthread_mutex_lock(&g_lock);
    int32_t rc = enter_locked(__func__) ? k_fail_code : SM_OK;
    if (rc == SM_OK && k_copy_err_n != 0) {
        rc = k_copy_err;
        if (k_copy_err_n > 0)
            k_copy_err_n--;
    }
    bool injected = rc != SM_OK;
    struct handle *h = handle_of(handle);
    if (rc == SM_OK &&
        (!h || !params || !batchId || !params->batchSize || !params->srcList ||
         !params->destList || !params->sizeList ||
         (params->opcode != SMEM_TRANS_OP_READ &&
          params->opcode != SMEM_TRANS_OP_WRITE)))
        rc = SM_INVALID_PARAM;
    struct handle *peer = rc == SM_OK ? peer_of_locked(params->destUrl) : NULL;
    if (rc == SM_OK && !peer)
        rc = SM_NOT_CONNECTED;
    for (uint32_t i = 0; rc == SM_OK && i < params->batchSize; i++)
        if (!registered_in(h, params->srcList[i], params->sizeList[i]) ||
            !registered_in(peer, params->destList[i], params->sizeList[i]))
            rc = SM_INVALID_PARAM;
    if (rc != SM_OK && !injected)
        g_bad_params++;
    struct batch *b = NULL;
    if (rc == SM_OK) {
        uint32_t n = params->batchSize;
        b = calloc(1, sizeof(*b));
        if (b) {
            b->src = malloc(n * sizeof(void *));
            b->dst = malloc(n * sizeof(void *));
            b->sizes = malloc(n * sizeof(size_t));
        }
        if (!b || !b->src || !b->dst || !b->sizes) {
            if (b)
                free_batch(b);
            rc = SM_MALLOC_FAILED;
        }
    }
    if (rc == SM_OK) {
        uint32_t n = params->batchSize;
        memcpy(b->src, params->srcList, n * sizeof(void *));
        memcpy(b->dst, params->destList, n * sizeof(void *));
        memcpy(b->sizes, params->sizeList, n * sizeof(size_t));
        b->n = n;
        b->owner = h;
        b->opcode = params->opcode;
        b->id = g_next_id++;
        b->polls_left = k_pending_polls;
        b->never = k_never;
        b->result = k_result;
        if (k_nqueue > 0) {
            b->result = k_queue[0];
            memmove(k_queue, k_queue + 1, (size_t)--k_nqueue * sizeof(int32_t));
        }
        b->next = g_batches;
        g_batches = b;
        g_live_batches++;
        *batchId = b->id;

        memset(&g_last, 0, sizeof(g_last));
        snprintf(g_last.dest_url, sizeof(g_last.dest_url), "%s",
                 params->destUrl);
        g_last.batch_size = n;
        g_last.opcode = params->opcode;
        g_last.stream = params->stream;
        g_last.flags = params->flags;
        uint32_t m = n < MOCK_MAX_LIST ? n : MOCK_MAX_LIST;
        memcpy(g_last.src, params->srcList, m * sizeof(void *));
        memcpy(g_last.dst, params->destList, m * sizeof(void *));
        memcpy(g_last.sizes, params->sizeList, m * sizeof(size_t));
        g_have_last = true;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

#ifndef MOCK_OMIT_STATUS_QUERY
/* Executes b: every entry on success, half of the first on a failure that
 * writes partially (a failed batch is not rolled back). */
static void execute_locked(struct batch *b)
{
    for (uint32_t i = 0; i < b->n; i++) {
        size_t len = b->sizes[i];
        if (b->result != 0) {
            if (!k_partial || i > 0)
                return;
            len /= 2;
        }
        if (b->opcode == SMEM_TRANS_OP_WRITE)
            memmove(b->dst[i], b->src[i], len);
        else
            memmove(b->src[i], b->dst[i], len);
        g_copied += len;
    }
}

int32_t smem_trans_batch_status_query(smem_trans_t handle, uint64_t batchId,
                                      int32_t *result, uint32_t flags)
{
    pthread_mutex_lock(&g_lock);
    int32_t rc =
        enter_locked("smem_trans_batch_status_query") ? k_fail_code : SM_OK;
    if (!result || flags != 0)
        g_bad_queries++;
    g_blocked++;
    while (k_block)
        pthread_cond_wait(&g_cond, &g_lock);
    g_blocked--;
    if (rc == SM_OK && k_query_err_n != 0) {
        rc = k_query_err;
        if (k_query_err_n > 0)
            k_query_err_n--;
    }
    struct handle *h = handle_of(handle);
    struct batch **pp = &g_batches;
    while (rc == SM_OK && *pp && ((*pp)->id != batchId || (*pp)->owner != h))
        pp = &(*pp)->next;
    if (rc == SM_OK && (!h || !*pp || !result)) {
        g_stale++;
        rc = SM_OBJECT_NOT_EXISTS;
    }
    if (rc == SM_OK) {
        struct batch *b = *pp;
        if (b->never || b->polls_left > 0) {
            if (b->polls_left > 0)
                b->polls_left--;
            rc = SM_NEED_RETRY;
        } else {
            /* The consuming answer: execute, report, forget. */
            execute_locked(b);
            *result = b->result;
            *pp = b->next;
            free_batch(b);
            g_live_batches--;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

#ifdef MOCK_STATUS_QUERY_3ARG
#undef smem_trans_batch_status_query
int32_t smem_trans_batch_status_query(smem_trans_t handle, uint64_t batchId,
                                      uint32_t flags);
int32_t smem_trans_batch_status_query(smem_trans_t handle, uint64_t batchId,
                                      uint32_t flags)
{
    int32_t result = 0;
    int32_t rc = mock_status_query4(handle, batchId, &result, flags);
    if (rc != SM_OK)
        return rc; /* SM_NEED_RETRY is 1, pending; errors stay errors */
    /* a failure result of 1 would read as pending in this form */
    return result == SM_NEED_RETRY ? SM_ERROR : result;
}
#endif
#endif

int32_t smem_trans_set_peer_down_callback(smem_trans_t handle,
                                          smem_trans_peer_down_callback_t cb,
                                          void *userData)
{
    pthread_mutex_lock(&g_lock);
    int32_t rc = enter_locked(__func__) ? k_fail_code : SM_OK;
    struct handle *h = handle_of(handle);
    if (rc == SM_OK && !h)
        rc = SM_INVALID_PARAM;
    if (rc == SM_OK) {
        h->cb = cb;
        h->user = userData;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int32_t smem_set_log_level(int level)
{
    pthread_mutex_lock(&g_lock);
    int32_t rc = enter_locked(__func__) ? k_fail_code : SM_OK;
    if (rc == SM_OK)
        g_log_level = level;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ---- controls ----------------------------------------------------------- */

void mock_reset(void)
{
    pthread_mutex_lock(&g_lock);
    while (g_batches) {
        struct batch *b = g_batches;
        g_batches = b->next;
        free_batch(b);
    }
    g_live_batches = 0;
    k_pending_polls = 0;
    k_never = false;
    k_result = 0;
    k_nqueue = 0;
    k_partial = false;
    k_query_err_n = 0;
    k_copy_err_n = 0;
    k_fail_sym[0] = '\0';
    k_block = false;
    pthread_cond_broadcast(&g_cond);
    for (size_t i = 0; i < sizeof(g_calls) / sizeof(g_calls[0]); i++)
        g_calls[i].count = 0;
    g_stale = g_bad_params = g_bad_queries = 0;
    g_log_level = -1;
    g_copied = 0;
    g_have_config = g_have_last = false;
    pthread_mutex_unlock(&g_lock);
}

#define MOCK_SETTER(name, body)                                                \
    void name                                                                  \
    {                                                                          \
        pthread_mutex_lock(&g_lock);                                           \
        body;                                                                  \
        pthread_mutex_unlock(&g_lock);                                         \
    }

MOCK_SETTER(mock_set_pending_polls(int n), k_pending_polls = n)
MOCK_SETTER(mock_set_never_complete(int on), k_never = on != 0)
MOCK_SETTER(mock_set_result(int32_t result), k_result = result)
MOCK_SETTER(mock_set_partial_on_failure(int on), k_partial = on != 0)

void mock_push_result(int32_t result)
{
    pthread_mutex_lock(&g_lock);
    if (k_nqueue < MAX_QUEUED)
        k_queue[k_nqueue++] = result;
    pthread_mutex_unlock(&g_lock);
}

void mock_set_query_error(int32_t code, int n)
{
    pthread_mutex_lock(&g_lock);
    k_query_err = code;
    k_query_err_n = n;
    pthread_mutex_unlock(&g_lock);
}

void mock_set_batch_copy_error(int32_t code, int n)
{
    pthread_mutex_lock(&g_lock);
    k_copy_err = code;
    k_copy_err_n = n;
    pthread_mutex_unlock(&g_lock);
}

void mock_fail_next(const char *sym, int32_t code)
{
    pthread_mutex_lock(&g_lock);
    snprintf(k_fail_sym, sizeof(k_fail_sym), "%s", sym ? sym : "");
    k_fail_code = code;
    pthread_mutex_unlock(&g_lock);
}

void mock_block_queries(int on)
{
    pthread_mutex_lock(&g_lock);
    k_block = on != 0;
    pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
}

#define MOCK_GETTER(type, name, expr)                                          \
    type name(void)                                                            \
    {                                                                          \
        pthread_mutex_lock(&g_lock);                                           \
        type v = (expr);                                                       \
        pthread_mutex_unlock(&g_lock);                                         \
        return v;                                                              \
    }

MOCK_GETTER(int, mock_blocked_queries, g_blocked)
MOCK_GETTER(int, mock_live_batches, g_live_batches)
MOCK_GETTER(int, mock_stale_queries, g_stale)
MOCK_GETTER(int, mock_bad_params, g_bad_params)
MOCK_GETTER(int, mock_bad_queries, g_bad_queries)
MOCK_GETTER(int, mock_init_refs, g_init_refs)
MOCK_GETTER(int, mock_last_log_level, g_log_level)
MOCK_GETTER(uint64_t, mock_copied_bytes, g_copied)

void mock_complete_all(void)
{
    pthread_mutex_lock(&g_lock);
    for (struct batch *b = g_batches; b; b = b->next) {
        b->never = false;
        b->polls_left = 0;
    }
    k_never = false;
    k_pending_polls = 0;
    pthread_mutex_unlock(&g_lock);
}

int mock_call_count(const char *sym)
{
    int n = -1;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < sizeof(g_calls) / sizeof(g_calls[0]); i++)
        if (strcmp(g_calls[i].name, sym) == 0)
            n = g_calls[i].count;
    pthread_mutex_unlock(&g_lock);
    return n;
}

int mock_last_batch(struct mock_batch_info *out)
{
    pthread_mutex_lock(&g_lock);
    int have = g_have_last;
    if (have)
        *out = g_last;
    pthread_mutex_unlock(&g_lock);
    return have;
}

int mock_is_registered(void *addr)
{
    int found = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < MAX_HANDLES; i++)
        if (g_handles[i].live && registered_in(&g_handles[i], addr, 1))
            found = 1;
    pthread_mutex_unlock(&g_lock);
    return found;
}

int mock_registered_regions(void)
{
    int n = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < MAX_HANDLES; i++)
        if (g_handles[i].live)
            n += g_handles[i].nregions;
    pthread_mutex_unlock(&g_lock);
    return n;
}

int mock_live_handles(void)
{
    int n = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < MAX_HANDLES; i++)
        n += g_handles[i].live;
    pthread_mutex_unlock(&g_lock);
    return n;
}

int mock_last_config(smem_trans_config_t *out)
{
    pthread_mutex_lock(&g_lock);
    int have = g_have_config;
    if (have)
        *out = g_last_config;
    pthread_mutex_unlock(&g_lock);
    return have;
}

int mock_fire_peer_down(const char *peer)
{
    struct {
        smem_trans_peer_down_callback_t cb;
        void *user;
    } calls[MAX_HANDLES];
    int n = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < MAX_HANDLES; i++)
        if (g_handles[i].live && g_handles[i].cb) {
            calls[n].cb = g_handles[i].cb;
            calls[n].user = g_handles[i].user;
            n++;
        }
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < n; i++)
        calls[i].cb(peer, calls[i].user);
    return n;
}
