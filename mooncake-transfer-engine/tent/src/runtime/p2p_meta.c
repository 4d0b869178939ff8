/* P2P metadata (TENT's metadata_type "p2p"): every engine runs an RPC server
 * and its segment name is "<host>:<port>" of that server; opening a segment
 * fetches the descriptor from the peer's server.
 *
 * Refetch and buffer lifetime: batch.c resolves a target buffer under the
 * segment's read lock and keeps the pointer after unlocking (prepare() reads
 * its permission, the selector and the transport's submit read it), so a
 * refetch must never free a buffer record another thread may be holding.
 * fetch therefore builds the new sorted array under the write lock, reuses
 * a record whose content is unchanged, and moves every record that left the
 * list to a per-segment "retired" list freed only when the segment is
 * released (engine destruction).  Growth is bounded by what the peer
 * actually changed between fetches, and a fetch happens only on a miss. */
#include "runtime/p2p_meta.h"

#include "common/error.h"
#include "common/log.h"
#include "net/net.h"
#include "rpc/rpc.h"
#include "runtime/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct p2p_ctrl {
    struct tent_rpc_server *srv;
    int timeout_ms;
};

/* seg->priv of a remote segment.  Guarded by seg->lock. */
struct p2p_seg {
    struct tent_buffer **retired;
    size_t nretired, cap;
};

static int peer_addr(const struct tent_segment *seg, const char *name,
                     char *host, size_t cap, uint16_t *port)
{
    char a[sizeof(((struct tent_attr *)0)->value)];
    bool have = seg && tent_segment_attr_copy(seg, "rpc_addr", a, sizeof(a));
    return tent_rpc_parse_addr(have && *a ? a : name, host, cap, port);
}

static bool same_buf(const struct tent_buffer *b, const struct tent_wire_buf *w)
{
    return b->base == w->base && b->length == w->length && b->perm == w->perm &&
           b->xport_mask == w->xport_mask && b->shm_offset == w->shm_offset &&
           strcmp(b->location, w->location) == 0 &&
           strcmp(b->shm_name, w->shm_name) == 0;
}

static int retire(struct p2p_seg *ps, struct tent_buffer *b)
{
    if (ps->nretired == ps->cap) {
        size_t ncap = ps->cap ? ps->cap * 2 : 16;
        struct tent_buffer **n = realloc(ps->retired, ncap * sizeof(*n));
        if (!n)
            return TENT_ENOMEM;
        ps->retired = n;
        ps->cap = ncap;
    }
    ps->retired[ps->nretired++] = b;
    return TENT_OK;
}

int tent_p2p_apply_desc(struct tent_segment *seg,
                        const struct tent_wire_desc *d)
{
    struct p2p_seg *ps = seg->priv;
    struct p2p_seg *fresh = NULL;
    if (!ps && !(ps = fresh = calloc(1, sizeof(*ps))))
        return tent_set_error(TENT_ENOMEM, "segment '%s': out of memory",
                              seg->name);
    size_t n = d->nbufs;
    struct tent_buffer **nb = calloc(n ? n : 1, sizeof(*nb));
    bool *kept = NULL;
    int rc = TENT_OK;
    if (!nb)
        goto nomem;
    pthread_rwlock_wrlock(&seg->lock);
    kept = calloc(seg->nbufs ? seg->nbufs : 1, sizeof(*kept));
    if (!kept)
        goto nomem_locked;
    /* Reserve room to retire every old record, so nothing fails later. */
    while (ps->cap - ps->nretired < seg->nbufs) {
        size_t ncap = ps->cap ? ps->cap * 2 : 16;
        struct tent_buffer **r = realloc(ps->retired, ncap * sizeof(*r));
        if (!r)
            goto nomem_locked;
        ps->retired = r;
        ps->cap = ncap;
    }
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tent_wire_buf *w = &d->bufs[i];
        while (j < seg->nbufs && seg->bufs[j]->base < w->base)
            j++;
        if (j < seg->nbufs && same_buf(seg->bufs[j], w)) {
            nb[i] = seg->bufs[j];
            kept[j] = true;
            continue;
        }
        struct tent_buffer *b = calloc(1, sizeof(*b));
        if (!b) {
            for (size_t k = 0; k < i; k++) {
                bool old = false;
                for (size_t m = 0; m < seg->nbufs; m++)
                    old |= seg->bufs[m] == nb[k];
                if (!old)
                    free(nb[k]);
            }
            goto nomem_locked;
        }
        b->base = w->base;
        b->length = w->length;
        snprintf(b->location, sizeof(b->location), "%s", w->location);
        b->perm = w->perm;
        b->xport_mask = w->xport_mask;
        b->alloc_fd = -1;
        b->is_device = tent_location_is_device(b->location);
        snprintf(b->shm_name, sizeof(b->shm_name), "%s", w->shm_name);
        b->shm_offset = w->shm_offset;
        nb[i] = b;
    }
    for (size_t k = 0; k < seg->nbufs; k++)
        if (!kept[k])
            (void)retire(ps, seg->bufs[k]); /* room reserved above */
    free(seg->bufs);
    seg->bufs = nb;
    seg->nbufs = seg->cap = n;
    snprintf(seg->host_id, sizeof(seg->host_id), "%s", d->host_id);
    /* Attribute strings are handed out by tent_segment_attr and read after
     * the lock is dropped, so they are rewritten only when they changed. */
    bool same = seg->nattrs == d->nattrs;
    for (int i = 0; same && i < d->nattrs; i++)
        same = strcmp(seg->attrs[i].key, d->attr_key[i]) == 0 &&
               strcmp(seg->attrs[i].value, d->attr_value[i]) == 0;
    for (int i = 0; !same && i < d->nattrs && i < TENT_MAX_ATTRS; i++) {
        snprintf(seg->attrs[i].key, sizeof(seg->attrs[i].key), "%s",
                 d->attr_key[i]);
        snprintf(seg->attrs[i].value, sizeof(seg->attrs[i].value), "%s",
                 d->attr_value[i]);
        seg->nattrs = i + 1;
    }
    if (!same && d->nattrs == 0)
        seg->nattrs = 0;
    seg->priv = ps;
    pthread_rwlock_unlock(&seg->lock);
    free(kept);
    return rc;

nomem_locked:
    pthread_rwlock_unlock(&seg->lock);
nomem:
    free(kept);
    free(nb);
    free(fresh);
    return tent_set_error(TENT_ENOMEM, "segment '%s': out of memory",
                          seg->name);
}

static int p2p_fetch(struct tent_engine *e, const char *name,
                     struct tent_segment *seg)
{
    struct p2p_ctrl *c = e->ctrl;
    char host[256];
    uint16_t port;
    int rc = peer_addr(seg->priv ? seg : NULL, name, host, sizeof(host), &port);
    if (rc)
        return tent_set_error(TENT_ENOSEGMENT, "segment '%s' not found: %s",
                              name, tent_last_error());
    struct tent_wire_desc *d = calloc(1, sizeof(*d));
    if (!d)
        return tent_set_error(TENT_ENOMEM, "fetch '%s': out of memory", name);
    rc = tent_rpc_fetch_desc(host, port, c->timeout_ms, d);
    if (rc) {
        free(d);
        return tent_set_error(TENT_ENOSEGMENT,
                              "segment '%s' not found: fetching its "
                              "descriptor failed: %s",
                              name, tent_last_error());
    }
    rc = tent_p2p_apply_desc(seg, d);
    LOG_DEBUG("fetched segment '%s': %zu buffer(s), host %s", name, d->nbufs,
              d->host_id);
    tent_wire_desc_free(d);
    free(d);
    return rc;
}

static void p2p_release(struct tent_engine *e, struct tent_segment *seg)
{
    (void)e;
    struct p2p_seg *ps = seg->priv;
    if (!ps)
        return;
    for (size_t i = 0; i < ps->nretired; i++)
        free(ps->retired[i]);
    free(ps->retired);
    free(ps);
    seg->priv = NULL;
}

static int p2p_notify(struct tent_engine *e, struct tent_segment *seg,
                      const char *name, const char *msg)
{
    struct p2p_ctrl *c = e->ctrl;
    char host[256];
    uint16_t port;
    int rc = peer_addr(seg, seg->name, host, sizeof(host), &port);
    if (!rc)
        rc = tent_rpc_notify(host, port, c->timeout_ms, name, msg,
                             e->segment_name);
    return rc;
}

const struct tent_segment_ops tent_p2p_segment_ops = {
    .fetch = p2p_fetch,
    .release = p2p_release,
    .notify = p2p_notify,
};

/* boot_id identifies this boot of this machine; with the hostname it tells
 * same-host peers apart from remote ones without trusting addresses. */
static void host_identity(char *out, size_t cap)
{
    char boot[64] = "", host[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof(boot), f))
            boot[0] = 0;
        fclose(f);
        boot[strcspn(boot, "\n")] = 0;
    }
    if (gethostname(host, sizeof(host)) != 0)
        host[0] = 0;
    host[sizeof(host) - 1] = 0;
    snprintf(out, cap, "%s/%s", boot, host);
}

int tent_p2p_start(struct tent_engine *e)
{
    struct p2p_ctrl *c = calloc(1, sizeof(*c));
    if (!c)
        return tent_set_error(TENT_ENOMEM, "rpc server: out of memory");
    int64_t to;
    int rc = tent_config_get_int_range(e->cfg, "rpc_timeout_ms", 3000, 1,
                                       600000, &to);
    const char *mtype = NULL, *lname = NULL;
    if (!rc)
        rc = tent_config_get_string(e->cfg, "metadata_type", "p2p", &mtype);
    if (!rc)
        rc = tent_config_get_string(e->cfg, "local_segment_name", NULL, &lname);
    if (rc) {
        free(c);
        return rc;
    }
    c->timeout_ms = (int)to;
    uint16_t port;
    rc = tent_rpc_server_start(e, e->hostname, e->rpc_port, &c->srv, &port);
    if (rc) {
        free(c);
        return rc;
    }
    e->ctrl = c;
    e->rpc_port = port;
    if (!lname || !*lname) {
        tent_net_format_hostport(e->segment_name, sizeof(e->segment_name),
                                 e->hostname, port);
    }
    char addr[320], pid[24];
    tent_net_format_hostport(addr, sizeof(addr), e->hostname, port);
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    pthread_rwlock_wrlock(&e->local->lock);
    size_t nl = strnlen(e->segment_name, sizeof(e->local->name) - 1);
    memcpy(e->local->name, e->segment_name, nl);
    e->local->name[nl] = 0;
    host_identity(e->local->host_id, sizeof(e->local->host_id));
    rc = tent_segment_set_attr_locked(e->local, "rpc_addr", addr);
    if (!rc)
        rc = tent_segment_set_attr_locked(e->local, "pid", pid);
    pthread_rwlock_unlock(&e->local->lock);
    if (rc) {
        tent_p2p_free(e);
        return rc;
    }
    if (strcmp(mtype, "p2p") == 0 && !e->seg_ops)
        e->seg_ops = &tent_p2p_segment_ops;
    return TENT_OK;
}

void tent_p2p_stop(struct tent_engine *e)
{
    struct p2p_ctrl *c = e->ctrl;
    if (!c)
        return;
    tent_rpc_server_stop(c->srv);
    c->srv = NULL;
}

void tent_p2p_free(struct tent_engine *e)
{
    tent_p2p_stop(e);
    free(e->ctrl);
    e->ctrl = NULL;
}
