#include "common/error.h"
#include "common/log.h"
#include "runtime/control.h"
#include "runtime/engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

int tent_segment_new(uint64_t id, const char *name, bool local,
                     struct tent_segment **out)
{
    struct tent_segment *seg = calloc(1, sizeof(*seg));
    if (!seg)
        return tent_set_error(TENT_ENOMEM, "segment '%s': out of memory", name);
    seg->v.id = id;
    snprintf(seg->v.name, sizeof(seg->v.name), "%s", name);
    seg->v.local = local;
    seg->type = TYPE_MEMORY;
    /* A local segment is this engine's: its incarnation is drawn here,
     * before anything publishes it (remote ones take their descriptor's). */
    uint64_t inc = 0;
    while (local && inc == 0)
        if (getrandom(&inc, sizeof(inc), 0) != (ssize_t)sizeof(inc)) {
            free(seg);
            return tent_set_error(TENT_EIO,
                                  "segment '%s': getrandom for its "
                                  "incarnation failed: %s",
                                  name, strerror(errno));
        }
    atomic_init(&seg->incarnation, inc);
    pthread_rwlock_init(&seg->lock, NULL);
    pthread_mutex_init(&seg->peer_lock, NULL);
    *out = seg;
    return TENT_OK;
}

void tent_buffer_free(struct tent_buffer *buf)
{
    if (!buf)
        return;
    tent_attrs_free(buf->attrs);
    free(buf);
}

void tent_segment_free(struct tent_segment *seg)
{
    if (!seg)
        return;
    for (size_t i = 0; i < seg->nbufs; i++)
        tent_buffer_free(seg->bufs[i]);
    free(seg->bufs);
    pthread_rwlock_destroy(&seg->lock);
    pthread_mutex_destroy(&seg->peer_lock);
    free(seg);
}

/* Index of the last buffer with base <= addr, or -1. */
static long floor_index(const struct tent_segment *seg, uint64_t addr)
{
    long lo = 0, hi = (long)seg->nbufs - 1, ans = -1;
    while (lo <= hi) {
        long mid = lo + (hi - lo) / 2;
        if (seg->bufs[mid]->base <= addr) {
            ans = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return ans;
}

struct tent_buffer *tent_segment_find_locked(const struct tent_segment *seg,
                                             uint64_t addr, uint64_t len)
{
    /* Ranges may overlap (TENT accepts overlapping registrations), so the
     * buffer holding addr may start before the last one at or below it:
     * walk back.  With disjoint ranges the first candidate decides. */
    for (long i = floor_index(seg, addr); i >= 0; i--) {
        struct tent_buffer *b = seg->bufs[i];
        uint64_t off = addr - b->base;
        if (off < b->length && len <= b->length - off)
            return b;
    }
    return NULL;
}

static bool grants(const struct tent_buffer *b, bool write, bool remote)
{
    if (remote && b->perm == PERM_LOCAL_READ_WRITE)
        return false;
    return !(write && b->perm == PERM_GLOBAL_READ_ONLY);
}

struct tent_buffer *
tent_segment_find_access_locked(const struct tent_segment *seg, uint64_t addr,
                                uint64_t len, bool write, bool remote,
                                const uint8_t *key)
{
    struct tent_buffer *first = NULL;
    for (long i = floor_index(seg, addr); i >= 0; i--) {
        struct tent_buffer *b = seg->bufs[i];
        uint64_t off = addr - b->base;
        if (off >= b->length || len > b->length - off)
            continue;
        if (key && !tent_key_equal(b->key, key))
            continue;
        if (grants(b, write, remote))
            return b;
        if (!first)
            first = b;
    }
    return first;
}

bool tent_segment_overlaps_locked(const struct tent_segment *seg, uint64_t addr,
                                  uint64_t len)
{
    for (size_t i = 0; i < seg->nbufs && seg->bufs[i]->base < addr + len; i++)
        if (addr < seg->bufs[i]->base + seg->bufs[i]->length)
            return true;
    return false;
}

int tent_segment_insert_locked(struct tent_segment *seg,
                               struct tent_buffer *buf)
{
    if (seg->nbufs == seg->cap) {
        size_t ncap = seg->cap ? seg->cap * 2 : 16;
        struct tent_buffer **nb = realloc(seg->bufs, ncap * sizeof(*nb));
        if (!nb)
            return tent_set_error(TENT_ENOMEM, "segment '%s': out of memory",
                                  seg->v.name);
        seg->bufs = nb;
        seg->cap = ncap;
    }
    size_t pos = (size_t)(floor_index(seg, buf->base) + 1);
    memmove(&seg->bufs[pos + 1], &seg->bufs[pos],
            (seg->nbufs - pos) * sizeof(*seg->bufs));
    seg->bufs[pos] = buf;
    seg->nbufs++;
    return TENT_OK;
}

void tent_segment_remove_locked(struct tent_segment *seg,
                                struct tent_buffer *buf)
{
    for (size_t i = 0; i < seg->nbufs; i++) {
        if (seg->bufs[i] == buf) {
            memmove(&seg->bufs[i], &seg->bufs[i + 1],
                    (seg->nbufs - i - 1) * sizeof(*seg->bufs));
            seg->nbufs--;
            return;
        }
    }
}

int tent_segment_set_attr_locked(struct tent_segment *seg, const char *key,
                                 const char *value)
{
    if (!key || strlen(key) >= sizeof(seg->attrs[0].key) ||
        (value && strlen(value) >= sizeof(seg->attrs[0].value)))
        return tent_set_error(TENT_EINVAL,
                              "segment attribute '%s' or its value is too long",
                              key ? key : "(null)");
    for (int i = 0; i < seg->nattrs; i++) {
        if (strcmp(seg->attrs[i].key, key) != 0)
            continue;
        if (value) {
            snprintf(seg->attrs[i].value, sizeof(seg->attrs[i].value), "%s",
                     value);
        } else {
            seg->attrs[i] = seg->attrs[seg->nattrs - 1];
            seg->nattrs--;
        }
        return TENT_OK;
    }
    if (!value)
        return TENT_OK;
    if (seg->nattrs == TENT_MAX_ATTRS)
        return tent_set_error(TENT_ENOMEM,
                              "segment '%s': more than %d attributes",
                              seg->v.name, TENT_MAX_ATTRS);
    snprintf(seg->attrs[seg->nattrs].key, sizeof(seg->attrs[0].key), "%s", key);
    snprintf(seg->attrs[seg->nattrs].value, sizeof(seg->attrs[0].value), "%s",
             value);
    seg->nattrs++;
    return TENT_OK;
}

const char *tent_segment_attr(const struct tent_segment *seg, const char *key)
{
    if (!seg || !key)
        return NULL;
    const char *v = NULL;
    pthread_rwlock_rdlock((pthread_rwlock_t *)&seg->lock);
    for (int i = 0; i < seg->nattrs; i++)
        if (strcmp(seg->attrs[i].key, key) == 0) {
            v = seg->attrs[i].value;
            break;
        }
    pthread_rwlock_unlock((pthread_rwlock_t *)&seg->lock);
    return v;
}

bool tent_segment_attr_copy(const struct tent_segment *seg, const char *key,
                            char *buf, size_t len)
{
    bool ok = false;
    if (!buf || len == 0)
        return false;
    buf[0] = '\0';
    if (!seg || !key)
        return false;
    pthread_rwlock_rdlock((pthread_rwlock_t *)&seg->lock);
    for (int i = 0; i < seg->nattrs; i++) {
        if (strcmp(seg->attrs[i].key, key) != 0)
            continue;
        size_t n = strlen(seg->attrs[i].value);
        if (n < len) {
            memcpy(buf, seg->attrs[i].value, n + 1);
            ok = true;
        }
        break;
    }
    pthread_rwlock_unlock((pthread_rwlock_t *)&seg->lock);
    return ok;
}

int tent_engine_publish_attr(struct tent_engine *e, const char *key,
                             const char *value)
{
    pthread_rwlock_wrlock(&e->local->lock);
    int rc = tent_segment_set_attr_locked(e->local, key, value);
    pthread_rwlock_unlock(&e->local->lock);
    if (rc == TENT_OK)
        tent_ctrl_local_changed(e);
    return rc;
}

struct tent_segment *tent_engine_segment(struct tent_engine *e, uint64_t id)
{
    struct tent_segment *seg = NULL;
    pthread_mutex_lock(&e->seg_lock);
    if (id < e->nsegs)
        seg = e->segs[id];
    pthread_mutex_unlock(&e->seg_lock);
    return seg;
}

int tent_engine_add_segment(struct tent_engine *e, struct tent_segment *seg,
                            uint64_t *handle)
{
    pthread_mutex_lock(&e->seg_lock);
    /* A concurrent open of the same name may have won: one handle. */
    for (size_t i = 1; i < e->nsegs; i++) {
        if (e->segs[i] && strcmp(e->segs[i]->v.name, seg->v.name) == 0) {
            *handle = i;
            pthread_mutex_unlock(&e->seg_lock);
            return TENT_EEXIST;
        }
    }
    /* Slots of closed segments are never reused, so a stale handle (or a
     * task still naming one) finds nothing rather than another segment. */
    size_t slot = e->nsegs;
    struct tent_segment **ns = realloc(e->segs, (e->nsegs + 1) * sizeof(*ns));
    if (!ns) {
        pthread_mutex_unlock(&e->seg_lock);
        return tent_set_error(TENT_ENOMEM, "open segment: out of memory");
    }
    e->segs = ns;
    e->nsegs++;
    seg->v.id = slot;
    e->segs[slot] = seg;
    pthread_mutex_unlock(&e->seg_lock);
    *handle = slot;
    return TENT_OK;
}

int tent_open_segment(tent_engine_t engine, tent_segment_id_t *handle,
                      const char *segment_name)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_open_segment: engine is NULL");
    if (!handle)
        return tent_set_error(TENT_ENULL, "tent_open_segment: handle is NULL");
    if (!segment_name || !*segment_name)
        return tent_set_error(TENT_EINVAL,
                              "tent_open_segment: segment name is empty");
    if (strlen(segment_name) >= sizeof(e->local->v.name))
        return tent_set_error(TENT_EINVAL,
                              "tent_open_segment: segment name is too long");
    if (strcmp(segment_name, e->segment_name) == 0) {
        *handle = LOCAL_SEGMENT_ID;
        return TENT_OK;
    }
    tent_peers_reap(e);
    /* Reuse an open segment of the same name. */
    pthread_mutex_lock(&e->seg_lock);
    for (size_t i = 1; i < e->nsegs; i++) {
        if (e->segs[i] && strcmp(e->segs[i]->v.name, segment_name) == 0) {
            *handle = i;
            pthread_mutex_unlock(&e->seg_lock);
            return TENT_OK;
        }
    }
    pthread_mutex_unlock(&e->seg_lock);
    if (tent_file_segment_name(segment_name))
        return tent_file_segment_open(e, segment_name, handle);
    if (!e->seg_ops)
        return tent_set_error(TENT_ENOSEGMENT,
                              "segment '%s' not found: no metadata service in "
                              "this engine can resolve it",
                              segment_name);
    struct tent_segment *seg = NULL; /* gcc -O3 maybe-uninitialized */
    int rc = tent_segment_new(0, segment_name, false, &seg);
    if (rc)
        return rc;
    rc = e->seg_ops->fetch(e, segment_name, seg);
    if (rc) {
        tent_segment_free(seg);
        return rc;
    }
    rc = tent_engine_add_segment(e, seg, handle);
    if (rc != TENT_OK) {
        e->seg_ops->release(e, seg);
        tent_segment_free(seg);
    }
    return rc == TENT_EEXIST ? TENT_OK : rc;
}

int tent_close_segment(tent_engine_t engine, tent_segment_id_t handle)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_close_segment: engine is NULL");
    if (handle == LOCAL_SEGMENT_ID)
        return TENT_OK;
    pthread_mutex_lock(&e->seg_lock);
    if (handle >= e->nsegs || !e->segs[handle]) {
        pthread_mutex_unlock(&e->seg_lock);
        return tent_set_error(TENT_ENOSEGMENT,
                              "tent_close_segment: unknown segment id %llu",
                              (unsigned long long)handle);
    }
    /* The handle is invalid from now on and a reopen fetches a fresh
     * descriptor.  The record itself is parked until the engine goes: a
     * thread that looked it up just before may still be reading it. */
    struct tent_segment *seg = e->segs[handle];
    if (seg->type == TYPE_FILE) {
        pthread_mutex_unlock(&e->seg_lock);
        int rc = tent_file_segment_close(e, handle);
        if (rc == TENT_OK) {
            tent_segment_peers_retire(e, seg);
            tent_peers_reap(e);
        }
        return rc;
    }
    e->segs[handle] = NULL;
    seg->next_closed = e->closed_segs;
    e->closed_segs = seg;
    pthread_mutex_unlock(&e->seg_lock);
    /* What the transports keep for the peer goes with it (once no task
     * uses it). */
    tent_segment_peers_retire(e, seg);
    tent_peers_reap(e);
    LOG_DEBUG("closed segment '%s' (id %llu)", seg->v.name,
              (unsigned long long)handle);
    return TENT_OK;
}

int tent_get_segment_info(tent_engine_t engine, tent_segment_id_t handle,
                          tent_segment_info_t *info)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL,
                              "tent_get_segment_info: engine is NULL");
    if (!info)
        return tent_set_error(TENT_ENULL,
                              "tent_get_segment_info: info is NULL");
    struct tent_segment *seg = tent_engine_segment(e, handle);
    if (!seg)
        return tent_set_error(TENT_ENOSEGMENT,
                              "tent_get_segment_info: unknown segment id %llu",
                              (unsigned long long)handle);
    pthread_rwlock_rdlock(&seg->lock);
    size_t n = seg->nbufs;
    struct tent_buffer_info *bi = n ? calloc(n, sizeof(*bi)) : NULL;
    if (n && !bi) {
        pthread_rwlock_unlock(&seg->lock);
        return tent_set_error(TENT_ENOMEM,
                              "tent_get_segment_info: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        bi[i].base = seg->bufs[i]->base;
        bi[i].length = seg->bufs[i]->length;
        snprintf(bi[i].location, sizeof(bi[i].location), "%s",
                 seg->bufs[i]->location);
    }
    info->type = seg->type;
    info->num_buffers = (int)n;
    info->buffers = bi;
    pthread_rwlock_unlock(&seg->lock);
    return TENT_OK;
}

void tent_free_segment_info(tent_segment_info_t *info)
{
    if (!info)
        return;
    free(info->buffers);
    info->buffers = NULL;
    info->num_buffers = 0;
}
