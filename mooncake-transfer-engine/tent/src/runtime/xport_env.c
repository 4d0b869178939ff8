/* The environment every transport of an engine is handed at install
 * (transport.h struct tent_xport_env): the runtime's side of the contract.
 * Transports reach the engine through these callbacks only. */
#include "common/error.h"
#include "common/log.h"
#include "runtime/engine.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int env_publish_attr(void *ctx, const char *key, const char *value)
{
    return tent_engine_publish_attr(ctx, key, value);
}

static bool env_seg_attr(void *ctx, const struct tent_seg_view *seg,
                         const char *key, char *buf, size_t len)
{
    (void)ctx;
    return tent_segment_attr_copy(tent_seg_of(seg), key, buf, len);
}

static bool env_seg_on_host(void *ctx, const struct tent_seg_view *v)
{
    struct tent_engine *e = ctx;
    const struct tent_segment *seg = tent_seg_of(v);
    if (!e->host_id[0])
        return false;
    pthread_rwlock_rdlock((pthread_rwlock_t *)&seg->lock);
    bool same = strcmp(seg->host_id, e->host_id) == 0;
    pthread_rwlock_unlock((pthread_rwlock_t *)&seg->lock);
    return same;
}

/* A peer's access through transport type: the buffer wholly holding the
 * range with the access key the peer named that grants it, served by type;
 * pinned until env_unpin_local.  A wrong key is answered as an unregistered
 * range (TENT_ERANGE), before the permission is looked at: a peer without
 * the key learns nothing about what is registered. */
static int env_pin_local(void *ctx, int type, uint64_t addr, uint64_t len,
                         bool write, const uint8_t *key, struct tent_pin *pin)
{
    struct tent_engine *e = ctx;
    struct tent_segment *seg = e->local;
    int rc = TENT_OK;
    pthread_rwlock_rdlock(&seg->lock);
    /* no key (NULL) is no match, never "any" */
    struct tent_buffer *b =
        key ? tent_segment_find_access_locked(seg, addr, len, write, true, key)
            : NULL;
    if (!b)
        rc = TENT_ERANGE;
    else if (b->perm == PERM_LOCAL_READ_WRITE ||
             (write && b->perm == PERM_GLOBAL_READ_ONLY))
        rc = TENT_EPERM;
    else if (b->is_device || !(b->xport_mask & (1u << type)))
        rc = TENT_ENOTSUP;
    if (rc == TENT_OK) {
        /* Listed while the segment still holds the buffer: an unregister
         * takes it out first, then finds every use here. */
        pthread_mutex_lock(&e->pin_lock);
        pin->buf = b;
        pin->aborted = false;
        pin->prev = NULL;
        pin->next = b->pins;
        if (b->pins)
            b->pins->prev = pin;
        b->pins = pin;
        pthread_mutex_unlock(&e->pin_lock);
    }
    pthread_rwlock_unlock(&seg->lock);
    if (rc)
        LOG_DEBUG("%s of [%#llx, +%llu) by %s through %s refused: %s",
                  write ? "write" : "read", (unsigned long long)addr,
                  (unsigned long long)len, pin->peer,
                  tent_transport_type_name(type), tent_strerror(rc));
    return rc;
}

static void env_unpin_local(void *ctx, struct tent_pin *pin)
{
    struct tent_engine *e = ctx;
    struct tent_buffer *b = (struct tent_buffer *)pin->buf;
    pthread_mutex_lock(&e->pin_lock);
    if (pin->prev)
        pin->prev->next = pin->next;
    else
        b->pins = pin->next;
    if (pin->next)
        pin->next->prev = pin->prev;
    pthread_cond_broadcast(&e->pin_cond);
    pthread_mutex_unlock(&e->pin_lock);
}

static int env_reclaim_pages(void *ctx, const struct tent_buffer *buf)
{
    return tent_memory_reclaim_pages(ctx, buf);
}

static int env_serve_frames(void *ctx, uint8_t type,
                            const struct tent_rpc_frame_ops *ops)
{
    struct tent_engine *e = ctx;
    if (!e->rpc)
        return ops ? tent_set_error(TENT_ENOTSUP,
                                    "this engine runs no RPC server")
                   : TENT_OK;
    return tent_rpc_server_handle(e->rpc, type, ops);
}

static int env_listen(void *ctx, const char *host, uint16_t port,
                      uint16_t *bound)
{
    struct tent_engine *e = ctx;
    if (!e->rpc)
        return tent_set_error(TENT_ENOTSUP, "this engine runs no RPC server");
    return tent_rpc_server_listen(e->rpc, host, port, bound);
}

void tent_xport_env_init(struct tent_engine *e)
{
    pthread_rwlock_rdlock(&e->local->lock);
    snprintf(e->host_id, sizeof(e->host_id), "%s", e->local->host_id);
    pthread_rwlock_unlock(&e->local->lock);
    e->incarnation = atomic_load(&e->local->incarnation);
    pthread_mutex_init(&e->peers_lock, NULL);
    e->xenv = (struct tent_xport_env){
        .ctx = e,
        .cfg = e->cfg,
        .metrics = e->metrics,
        .hostname = e->hostname,
        .host_id = e->host_id,
        .pid = (long)getpid(),
        .incarnation = e->incarnation,
        .auth = e->auth,
        .segment_name = e->segment_name,
        .publish_attr = env_publish_attr,
        .seg_attr = env_seg_attr,
        .seg_on_host = env_seg_on_host,
        .pin_local = env_pin_local,
        .unpin_local = env_unpin_local,
        .revoke_timeout_ms = e->revoke_timeout_ms,
        .loopback_cc = e->loopback_cc,
        .reclaim_pages = env_reclaim_pages,
        .serve_frames = env_serve_frames,
        .rpc_port = e->rpc ? e->rpc_port : 0,
        .listen = env_listen,
        .sched = e->sched,
    };
}
