/* The segment descriptor module: the one place that turns the local segment
 * into a descriptor (export: what the RPC server answers and the metadata
 * services publish) and a fetched descriptor into a remote segment
 * (import), whichever control plane fetched it.
 *
 * Import and buffer lifetime: batch_submit.c resolves a target buffer under
 * the segment's read lock and keeps the pointer after unlocking (select_for
 * reads its permission, the selector and the transport's submit read it), so a
 * refetch must never free a buffer record another thread may be holding.
 * Import therefore builds the new sorted array under the write lock, reuses
 * a record whose content is unchanged, and moves every record that left the
 * list to a per-segment "retired" list freed only when the segment is
 * released (engine destruction).  Growth is bounded by what the peer
 * actually changed between fetches, and a fetch happens only on a miss. */
#include "runtime/seg_desc.h"

#include "common/error.h"
#include "rpc/wire.h"
#include "runtime/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(TENT_BUF_KEY_LEN == TENT_WIRE_KEY_LEN,
               "a buffer's key travels whole in the descriptor");

char *tent_desc_export(struct tent_engine *e, size_t *len)
{
    struct tent_segment *seg = e->local;
    struct tent_wire_desc *d = calloc(1, sizeof(*d));
    char *out = NULL;
    if (!d)
        return NULL;
    pthread_rwlock_rdlock(&seg->lock);
    snprintf(d->name, sizeof(d->name), "%s", seg->v.name);
    snprintf(d->host_id, sizeof(d->host_id), "%s", seg->host_id);
    d->incarnation = atomic_load(&seg->incarnation);
    d->bufs = seg->nbufs ? calloc(seg->nbufs, sizeof(*d->bufs)) : NULL;
    if (seg->nbufs && !d->bufs)
        goto unlock;
    d->nbufs = seg->nbufs;
    for (size_t i = 0; i < seg->nbufs; i++) {
        const struct tent_buffer *b = seg->bufs[i];
        struct tent_wire_buf *w = &d->bufs[i];
        w->base = b->base;
        w->length = b->length;
        snprintf(w->location, sizeof(w->location), "%s", b->location);
        w->perm = b->perm;
        w->xport_mask = b->xport_mask;
        memcpy(w->key, b->key, sizeof(w->key));
        size_t na = tent_attrs_count(b->attrs);
        w->attrs = na ? calloc(na, sizeof(*w->attrs)) : NULL;
        if (na && !w->attrs) {
            d->nbufs = i;
            goto unlock;
        }
        for (size_t k = 0; k < na; k++) {
            const char *key, *val;
            tent_attrs_at(b->attrs, k, &key, &val);
            snprintf(w->attrs[k].key, sizeof(w->attrs[k].key), "%s", key);
            snprintf(w->attrs[k].value, sizeof(w->attrs[k].value), "%s", val);
        }
        w->nattrs = (int)na;
    }
    for (int i = 0; i < seg->nattrs && i < TENT_WIRE_MAX_ATTRS; i++) {
        snprintf(d->attr_key[i], sizeof(d->attr_key[i]), "%s",
                 seg->attrs[i].key);
        snprintf(d->attr_value[i], sizeof(d->attr_value[i]), "%s",
                 seg->attrs[i].value);
        d->nattrs = i + 1;
    }
    pthread_rwlock_unlock(&seg->lock);
    out = tent_wire_encode_desc(d, len);
    tent_wire_desc_free(d);
    free(d);
    return out;
unlock:
    pthread_rwlock_unlock(&seg->lock);
    tent_wire_desc_free(d);
    free(d);
    return NULL;
}

/* seg->priv of a remote segment.  Guarded by seg->lock. */
struct desc_seg {
    struct tent_buffer **retired;
    size_t nretired, cap;
};

static bool same_attrs(const struct tent_attrs *a,
                       const struct tent_wire_buf *w)
{
    if (tent_attrs_count(a) != (size_t)w->nattrs)
        return false;
    for (int k = 0; k < w->nattrs; k++) {
        const char *v = tent_attrs_get(a, w->attrs[k].key);
        if (!v || strcmp(v, w->attrs[k].value) != 0)
            return false;
    }
    return true;
}

static bool same_buf(const struct tent_buffer *b, const struct tent_wire_buf *w)
{
    /* a new key is a new registration: never the old record */
    return b->base == w->base && b->length == w->length && b->perm == w->perm &&
           b->xport_mask == w->xport_mask &&
           memcmp(b->key, w->key, sizeof(b->key)) == 0 &&
           strcmp(b->location, w->location) == 0 && same_attrs(b->attrs, w);
}

static int retire(struct desc_seg *ps, struct tent_buffer *b)
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

/* A record for a buffer a peer published; NULL when out of memory. */
static struct tent_buffer *new_buf(const struct tent_wire_buf *w)
{
    struct tent_buffer *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->base = w->base;
    b->length = w->length;
    snprintf(b->location, sizeof(b->location), "%s", w->location);
    b->perm = w->perm;
    b->xport_mask = w->xport_mask;
    memcpy(b->key, w->key, sizeof(b->key));
    b->alloc_fd = -1;
    b->is_device = tent_location_is_device(b->location);
    for (int k = 0; k < w->nattrs; k++)
        if (tent_attrs_set(&b->attrs, w->attrs[k].key, w->attrs[k].value)) {
            tent_buffer_free(b);
            return NULL;
        }
    return b;
}

int tent_desc_import(struct tent_segment *seg, const struct tent_wire_desc *d)
{
    struct desc_seg *ps, *fresh = NULL;
    size_t n = d->nbufs;
    struct tent_buffer **nb = calloc(n ? n : 1, sizeof(*nb));
    bool *kept = NULL;
    int rc = TENT_OK;
    if (!nb)
        goto nomem;
    /* priv is read and set under the write lock: two imports of one
     * segment (concurrent refetches) must not each install their own. */
    pthread_rwlock_wrlock(&seg->lock);
    ps = seg->priv;
    if (!ps && !(ps = fresh = calloc(1, sizeof(*ps))))
        goto nomem_locked;
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
        nb[i] = new_buf(w);
        if (!nb[i]) {
            /* the records made so far are the ones not kept from before */
            for (size_t k = 0; k < i; k++) {
                bool old = false;
                for (size_t m = 0; m < seg->nbufs; m++)
                    old |= seg->bufs[m] == nb[k];
                if (!old)
                    tent_buffer_free(nb[k]);
            }
            goto nomem_locked;
        }
    }
    bool changed = n != seg->nbufs || strcmp(seg->host_id, d->host_id) != 0 ||
                   atomic_load(&seg->incarnation) != d->incarnation;
    for (size_t k = 0; k < seg->nbufs; k++)
        if (!kept[k]) {
            (void)retire(ps, seg->bufs[k]); /* room reserved above */
            changed = true;
        }
    free(seg->bufs);
    seg->bufs = nb;
    seg->nbufs = seg->cap = n;
    snprintf(seg->host_id, sizeof(seg->host_id), "%s", d->host_id);
    /* A new incarnation: the handles of the old one are retired by their
     * next use (peers.c), which finds it changed. */
    atomic_store(&seg->incarnation, d->incarnation);
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
    if (changed || !same)
        seg->desc_gen++;
    seg->priv = ps;
    pthread_rwlock_unlock(&seg->lock);
    free(kept);
    return rc;

nomem_locked:
    if (fresh && seg->priv != fresh)
        free(fresh);
    pthread_rwlock_unlock(&seg->lock);
nomem:
    free(kept);
    free(nb);
    return tent_set_error(TENT_ENOMEM, "segment '%s': out of memory",
                          seg->v.name);
}

void tent_desc_release(struct tent_segment *seg)
{
    struct desc_seg *ps = seg->priv;
    if (!ps)
        return;
    for (size_t i = 0; i < ps->nretired; i++)
        tent_buffer_free(ps->retired[i]);
    free(ps->retired);
    free(ps);
    seg->priv = NULL;
}
