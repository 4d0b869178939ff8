/* Local memory: allocation and registration, as TENT does them.
 *
 * tent_allocate_memory only allocates (memfd-backed host memory so that a
 * same-host peer can map it, or ACL device memory for "npu:N"); nothing is
 * visible to peers until the program registers it.  Registering the same
 * (address, length) again raises a reference count and the last
 * unregister removes it; overlapping but different ranges are separate
 * entries.  tent_free_memory unregisters what still lies in the allocation
 * (refusing while tasks use it) before giving the memory back, so no
 * registration ever points at freed memory.  A transport that fails to
 * release a range keeps the whole registration in place: the error goes to
 * the caller, who must not free the memory. */
#include "common/error.h"
#include "common/log.h"
#include "platform/acl.h"
#include "runtime/control.h"
#include "runtime/engine.h"
#include "runtime/metrics_hooks.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

bool tent_location_is_device(const char *location)
{
    if (!location || !*location || *location == '*')
        return false;
    return strncmp(location, "cpu", 3) != 0;
}

/* Registers buf with every installed transport (or only the one asked for).
 * A transport that cannot take the range (a vendor library may refuse an
 * overlap) leaves it to the others, with a warning.  On failure of an
 * explicitly requested transport, undoes and fails. */
static int attach_transports(struct tent_engine *e, struct tent_buffer *buf,
                             int only_type)
{
    for (int i = 0; i < e->nxports; i++) {
        struct tent_transport *t = e->xports[i];
        if (only_type != TRANSPORT_UNSPEC && t->ops->type != only_type)
            continue;
        int rc = t->ops->add_buffer(t, buf);
        if (rc == TENT_OK) {
            buf->xport_mask |= 1u << t->ops->type;
            continue;
        }
        if (only_type != TRANSPORT_UNSPEC)
            return rc;
        LOG_WARN("transport '%s' cannot serve buffer [%#llx, +%llu): %s",
                 t->ops->name, (unsigned long long)buf->base,
                 (unsigned long long)buf->length, tent_last_error());
    }
    if (only_type != TRANSPORT_UNSPEC && !buf->xport_mask)
        return tent_set_error(
            TENT_ENOTRANSPORT,
            "register memory: transport '%s' is not installed",
            tent_transport_type_name(only_type));
    return TENT_OK;
}

/* Releases buf from every transport serving it.  When one refuses, the
 * ones already released take it back, so the buffer stays registered as
 * before, and the refusal is returned (memory a peer can still reach must
 * not be freed). */
static int detach_transports(struct tent_engine *e, struct tent_buffer *buf)
{
    uint32_t released = 0;
    for (int i = 0; i < e->nxports; i++) {
        struct tent_transport *t = e->xports[i];
        uint32_t bit = 1u << t->ops->type;
        if (!(buf->xport_mask & bit) || e->xport_abandoned[i])
            continue;
        int rc = t->ops->remove_buffer(t, buf);
        if (rc == TENT_OK) {
            released |= bit;
            continue;
        }
        char why[512];
        snprintf(why, sizeof(why), "%s", tent_last_error());
        for (int j = 0; j < i; j++) {
            struct tent_transport *u = e->xports[j];
            uint32_t ubit = 1u << u->ops->type;
            if (!(released & ubit))
                continue;
            if (u->ops->add_buffer(u, buf) != TENT_OK) {
                /* Unreachable through u now; still registered elsewhere. */
                LOG_WARN("transport '%s' could not take buffer [%#llx, "
                         "+%llu) back: %s",
                         u->ops->name, (unsigned long long)buf->base,
                         (unsigned long long)buf->length, tent_last_error());
                buf->xport_mask &= ~ubit;
            }
        }
        LOG_ERROR("transport '%s' failed to release buffer [%#llx, +%llu): "
                  "%s; the buffer stays registered",
                  t->ops->name, (unsigned long long)buf->base,
                  (unsigned long long)buf->length, why);
        return tent_set_error(rc,
                              "unregister memory: transport '%s' failed to "
                              "release [%#llx, +%llu), which stays "
                              "registered: %s",
                              t->ops->name, (unsigned long long)buf->base,
                              (unsigned long long)buf->length, why);
    }
    buf->xport_mask &= ~released;
    return TENT_OK;
}

static int check_region(void *addr, size_t size, const char *what)
{
    if (!addr)
        return tent_set_error(TENT_ENULL, "%s: address is NULL", what);
    if (size == 0)
        return tent_set_error(TENT_EINVAL, "%s: size of memory at %p is 0",
                              what, addr);
    if ((uintptr_t)addr + size < (uintptr_t)addr)
        return tent_set_error(TENT_EINVAL,
                              "%s: region at %p of %zu bytes wraps around",
                              what, addr, size);
    return TENT_OK;
}

static int check_options(const tent_memory_options_t *o, const char *what)
{
    if (o->permission < PERM_LOCAL_READ_WRITE ||
        o->permission > PERM_GLOBAL_READ_WRITE)
        return tent_set_error(TENT_EINVAL,
                              "%s: permission %d is not a PERM_* value", what,
                              o->permission);
    if (!memchr(o->location, '\0', sizeof(o->location)))
        return tent_set_error(TENT_EINVAL, "%s: location is not NUL-terminated",
                              what);
    if (o->transport_type != TRANSPORT_UNSPEC &&
        strcmp(tent_transport_type_name(o->transport_type), "unknown") == 0)
        return tent_set_error(
            TENT_EINVAL, "%s: transport_type %d is not a TRANSPORT_* value",
            what, o->transport_type);
    return TENT_OK;
}

/* The allocation whose memory holds [addr, +size), or NULL.  reg_lock. */
static struct tent_alloc *alloc_holding(struct tent_engine *e, uintptr_t addr,
                                        size_t size)
{
    for (size_t i = 0; i < e->nallocs; i++) {
        struct tent_alloc *a = &e->allocs[i];
        if (addr >= a->base && addr - a->base < a->size &&
            size <= a->size - (addr - a->base))
            return a;
    }
    return NULL;
}

/* The local buffer registered as exactly [addr, +size) (size 0: the first
 * one starting at addr).  Caller holds the segment lock. */
static struct tent_buffer *find_exact_locked(struct tent_segment *seg,
                                             uintptr_t addr, size_t size)
{
    for (size_t i = 0; i < seg->nbufs && seg->bufs[i]->base <= addr; i++) {
        struct tent_buffer *b = seg->bufs[i];
        if (b->base == addr && (size == 0 || b->length == size))
            return b;
    }
    return NULL;
}

/* Registers [addr, +size), or raises the count of that exact range.
 * Caller holds e->reg_lock. */
static int register_locked(struct tent_engine *e, void *addr, size_t size,
                           const tent_memory_options_t *o)
{
    struct tent_segment *seg = e->local;
    pthread_rwlock_wrlock(&seg->lock);
    struct tent_buffer *same = find_exact_locked(seg, (uintptr_t)addr, size);
    if (same)
        same->refs++;
    pthread_rwlock_unlock(&seg->lock);
    if (same) {
        LOG_DEBUG("registered [%p, +%zu) again (%d references)", addr, size,
                  same->refs);
        return TENT_OK;
    }
    struct tent_buffer *buf = calloc(1, sizeof(*buf));
    if (!buf)
        return tent_set_error(TENT_ENOMEM, "register memory: out of memory");
    buf->base = (uintptr_t)addr;
    buf->length = size;
    snprintf(buf->location, sizeof(buf->location), "%s",
             o->location[0] ? o->location : "cpu");
    buf->perm = o->permission;
    buf->refs = 1;
    buf->alloc_fd = -1;
    const struct tent_alloc *a = alloc_holding(e, (uintptr_t)addr, size);
    if (a && a->base == (uintptr_t)addr && a->fd >= 0 && !a->split)
        buf->alloc_fd = a->fd;
    if (a && !o->location[0])
        memcpy(buf->location, a->location, sizeof(buf->location));
    buf->is_device = tent_location_is_device(buf->location);
    atomic_init(&buf->inflight, 0);
    /* A fresh key for every registration (a range registered again after
     * an unregister, or by a new process at the same address, gets
     * another): a peer holding an older descriptor is refused. */
    if (getrandom(buf->key, sizeof(buf->key), 0) != (ssize_t)sizeof(buf->key)) {
        int err = errno;
        tent_buffer_free(buf);
        return tent_set_error(TENT_EIO,
                              "register memory: getrandom for the key of "
                              "[%p, +%zu) failed: %s",
                              addr, size, strerror(err));
    }
    int rc = attach_transports(e, buf, o->transport_type);
    if (rc != TENT_OK)
        goto fail_attach;
    pthread_rwlock_wrlock(&seg->lock);
    rc = tent_segment_insert_locked(seg, buf);
    pthread_rwlock_unlock(&seg->lock);
    if (rc != TENT_OK)
        goto fail_attach;
    LOG_DEBUG("registered [%p, +%zu) location %s perm %d", addr, size,
              buf->location, buf->perm);
    tmh_gauge(e, TM_REGISTERED_BYTES, (int64_t)size);
    tent_ctrl_local_changed(e);
    return TENT_OK;

fail_attach:
    if (detach_transports(e, buf) != TENT_OK) {
        /* A transport keeps exposing it: keep the record (leak) rather
         * than lose track of it. */
        LOG_ERROR("register memory: [%p, +%zu) could not be rolled back", addr,
                  size);
        return rc;
    }
    tent_buffer_free(buf);
    return rc;
}

/* Waits until no peer uses buf through a transport's target half (it is
 * out of the segment, so no new use starts): each use is asked to end (its
 * abort), then waited for, up to revoke_timeout_ms.  Caller holds
 * e->reg_lock. */
static int wait_unpinned(struct tent_engine *e, struct tent_buffer *buf)
{
    pthread_mutex_lock(&e->pin_lock);
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += e->revoke_timeout_ms / 1000;
    dl.tv_nsec += (long)(e->revoke_timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = TENT_OK;
    while (buf->pins) {
        for (struct tent_pin *p = buf->pins; p; p = p->next)
            if (!p->aborted) {
                p->aborted = true;
                p->abort(p->arg);
            }
        if (pthread_cond_timedwait(&e->pin_cond, &e->pin_lock, &dl) ==
                ETIMEDOUT &&
            buf->pins) {
            rc = tent_set_error(TENT_EBUSY,
                                "peer %s still uses [%#llx, +%llu) after %d "
                                "ms (revoke_timeout_ms)",
                                buf->pins->peer, (unsigned long long)buf->base,
                                (unsigned long long)buf->length,
                                e->revoke_timeout_ms);
            break;
        }
    }
    pthread_mutex_unlock(&e->pin_lock);
    return rc;
}

/* Takes buf (already out of the segment) away from peers and transports:
 * peers' uses end (wait_unpinned), then every transport revokes it (shm
 * makes sure no peer copy runs into it any more).  On failure it goes back
 * into the segment, registered as before, and the error says who still
 * uses it.  Caller holds e->reg_lock. */
static int drop_buffer_locked(struct tent_engine *e, struct tent_buffer *buf)
{
    int rc = wait_unpinned(e, buf);
    if (rc == TENT_OK)
        rc = detach_transports(e, buf);
    if (rc != TENT_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", tent_last_error());
        pthread_rwlock_wrlock(&e->local->lock);
        int irc = tent_segment_insert_locked(e->local, buf);
        pthread_rwlock_unlock(&e->local->lock);
        if (irc != TENT_OK)
            LOG_ERROR("buffer [%#llx, +%llu) is still exposed by a transport "
                      "but could not be re-listed: %s",
                      (unsigned long long)buf->base,
                      (unsigned long long)buf->length, tent_last_error());
        tent_set_error(rc, "%s", why);
        return rc;
    }
    return TENT_OK;
}

/* Drops one reference of the range at addr (size 0: any length); the last
 * one unregisters it.  Caller holds e->reg_lock. */
static int unregister_locked(struct tent_engine *e, void *addr, size_t size)
{
    const char *what = "unregister memory";
    struct tent_segment *seg = e->local;
    pthread_rwlock_wrlock(&seg->lock);
    struct tent_buffer *buf = find_exact_locked(seg, (uintptr_t)addr, size);
    int rc = TENT_OK;
    if (!buf) {
        struct tent_buffer *at = find_exact_locked(seg, (uintptr_t)addr, 0);
        if (at)
            rc = tent_set_error(TENT_EINVAL,
                                "%s: no registration of %zu bytes at %p (one "
                                "of %llu bytes is)",
                                what, size, addr,
                                (unsigned long long)at->length);
        else
            rc = tent_set_error(TENT_ENOTREG, "%s: no buffer registered at %p",
                                what, addr);
    } else if (buf->refs > 1) {
        buf->refs--;
        pthread_rwlock_unlock(&seg->lock);
        return TENT_OK;
    } else if (atomic_load(&buf->inflight) > 0) {
        rc = tent_set_error(TENT_EBUSY,
                            "%s: %d task(s) in flight use the buffer at %p",
                            what, atomic_load(&buf->inflight), addr);
    }
    if (rc == TENT_OK)
        tent_segment_remove_locked(seg, buf);
    pthread_rwlock_unlock(&seg->lock);
    if (rc != TENT_OK)
        return rc;
    rc = drop_buffer_locked(e, buf);
    if (rc != TENT_OK)
        return rc;
    tent_ctrl_local_changed(e);
    tmh_gauge(e, TM_REGISTERED_BYTES, -(int64_t)buf->length);
    tent_buffer_free(buf);
    return TENT_OK;
}

int tent_register_memory_ex(tent_engine_t engine, void *addr, size_t size,
                            tent_memory_options_t *opts)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "register memory: engine is NULL");
    if (!opts)
        return tent_set_error(TENT_ENULL, "register memory: options are NULL");
    int rc = check_region(addr, size, "register memory");
    if (rc == TENT_OK)
        rc = check_options(opts, "register memory");
    if (rc != TENT_OK)
        return rc;
    pthread_mutex_lock(&e->reg_lock);
    rc = register_locked(e, addr, size, opts);
    pthread_mutex_unlock(&e->reg_lock);
    return rc;
}

int tent_register_memory_with_perm(tent_engine_t engine, void *addr,
                                   size_t size, int permission)
{
    tent_memory_options_t o = {.permission = permission};
    return tent_register_memory_ex(engine, addr, size, &o);
}

int tent_register_memory(tent_engine_t engine, void *addr, size_t size)
{
    return tent_register_memory_with_perm(engine, addr, size,
                                          PERM_GLOBAL_READ_WRITE);
}

int tent_register_memory_batch_ex(tent_engine_t engine, void **addrs,
                                  size_t *sizes, size_t count,
                                  tent_memory_options_t *opts)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL,
                              "register memory batch: engine is NULL");
    if (!addrs || !sizes || !opts)
        return tent_set_error(TENT_ENULL,
                              "register memory batch: addrs, sizes or options "
                              "is NULL");
    if (count == 0)
        return tent_set_error(TENT_EINVAL, "register memory batch: count is 0");
    int rc = check_options(opts, "register memory batch");
    if (rc)
        return rc;
    for (size_t i = 0; i < count; i++) {
        rc = check_region(addrs[i], sizes[i], "register memory batch");
        if (rc)
            return rc;
    }
    pthread_mutex_lock(&e->reg_lock);
    size_t done = 0;
    for (; done < count; done++) {
        rc = register_locked(e, addrs[done], sizes[done], opts);
        if (rc)
            break;
    }
    if (rc) {
        /* All or nothing: every entry that went in (a new range or a count
         * raised on an existing one) gives its reference back. */
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", tent_last_error());
        for (size_t i = done; i-- > 0;)
            if (unregister_locked(e, addrs[i], sizes[i]) != TENT_OK)
                LOG_ERROR("register memory batch: entry %zu could not be "
                          "rolled back: %s",
                          i, tent_last_error());
        tent_set_error(rc, "register memory batch: entry %zu: %s", done, saved);
    }
    pthread_mutex_unlock(&e->reg_lock);
    return rc;
}

int tent_register_memory_batch(tent_engine_t engine, void **addrs,
                               size_t *sizes, size_t count, int permission)
{
    tent_memory_options_t o = {.permission = permission};
    return tent_register_memory_batch_ex(engine, addrs, sizes, count, &o);
}

int tent_unregister_memory(tent_engine_t engine, void *addr, size_t size)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "unregister memory: engine is NULL");
    if (!addr)
        return tent_set_error(TENT_ENULL, "unregister memory: address is NULL");
    tent_batches_reap(e); /* batches freed in flight may have ended */
    pthread_mutex_lock(&e->reg_lock);
    int rc = unregister_locked(e, addr, size);
    pthread_mutex_unlock(&e->reg_lock);
    return rc;
}

int tent_unregister_memory_batch(tent_engine_t engine, void **addrs,
                                 size_t *sizes, size_t count)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL,
                              "unregister memory batch: engine is NULL");
    if (!addrs)
        return tent_set_error(TENT_ENULL,
                              "unregister memory batch: addrs is NULL");
    if (count == 0)
        return tent_set_error(TENT_EINVAL,
                              "unregister memory batch: count is 0");
    tent_batches_reap(e); /* batches freed in flight may have ended */
    /* Check every entry first so that a bad one changes nothing. */
    pthread_mutex_lock(&e->reg_lock);
    pthread_rwlock_rdlock(&e->local->lock);
    int rc = TENT_OK;
    for (size_t i = 0; i < count && rc == TENT_OK; i++) {
        size_t sz = sizes ? sizes[i] : 0;
        struct tent_buffer *b =
            addrs[i] ? find_exact_locked(e->local, (uintptr_t)addrs[i], sz)
                     : NULL;
        if (!b)
            rc = tent_set_error(TENT_ENOTREG,
                                "unregister memory batch: entry %zu: no "
                                "registration of %zu bytes at %p",
                                i, sz, addrs[i]);
        else if (b->refs == 1 && atomic_load(&b->inflight) > 0)
            rc = tent_set_error(TENT_EBUSY,
                                "unregister memory batch: entry %zu: tasks in "
                                "flight use %p",
                                i, addrs[i]);
        /* A repeated entry would pass this check yet fail halfway below. */
        for (size_t j = 0; j < i && rc == TENT_OK; j++)
            if (addrs[j] == addrs[i])
                rc = tent_set_error(TENT_EINVAL,
                                    "unregister memory batch: entries %zu and "
                                    "%zu both name %p",
                                    j, i, addrs[i]);
    }
    pthread_rwlock_unlock(&e->local->lock);
    for (size_t i = 0; i < count && rc == TENT_OK; i++) {
        rc = unregister_locked(e, addrs[i], sizes ? sizes[i] : 0);
        if (rc != TENT_OK)
            tent_set_error(rc,
                           "unregister memory batch: entry %zu: %s (entries "
                           "before it are unregistered)",
                           i, tent_last_error());
    }
    pthread_mutex_unlock(&e->reg_lock);
    return rc;
}

static int numa_node_of(const char *location, int *node)
{
    *node = -1;
    if (!location[0] || strcmp(location, "cpu") == 0 ||
        strcmp(location, "*") == 0)
        return TENT_OK;
    if (strncmp(location, "cpu:", 4) != 0)
        return tent_set_error(TENT_ENOTSUP,
                              "tent_allocate_memory: location '%s' is neither "
                              "host memory ('cpu', 'cpu:<numa node>') nor an "
                              "accelerator ('npu:<device>')",
                              location);
    char *end;
    long n = strtol(location + 4, &end, 10);
    if (end == location + 4 || *end || n < 0 || n > 1023)
        return tent_set_error(
            TENT_EINVAL,
            "tent_allocate_memory: location '%s' has no valid "
            "NUMA node number",
            location);
    char path[96];
    snprintf(path, sizeof(path), "/sys/devices/system/node/node%ld", n);
    if (access(path, F_OK) != 0)
        return tent_set_error(TENT_EINVAL,
                              "tent_allocate_memory: NUMA node %ld of location "
                              "'%s' does not exist",
                              n, location);
    *node = (int)n;
    return TENT_OK;
}

/* "npu:N" -> N; -1 for any other location.  A malformed "npu:" is an
 * error. */
static int npu_device_of(const char *location, int *device)
{
    *device = -1;
    if (strncmp(location, "npu:", 4) != 0)
        return TENT_OK;
    char *end;
    long n = strtol(location + 4, &end, 10);
    if (end == location + 4 || *end || n < 0 || n > 65535)
        return tent_set_error(TENT_EINVAL,
                              "tent_allocate_memory: location '%s' has no "
                              "valid device number",
                              location);
    *device = (int)n;
    return TENT_OK;
}

static int remember_alloc_locked(struct tent_engine *e,
                                 const struct tent_alloc *a)
{
    if (e->nallocs == e->alloc_cap) {
        size_t ncap = e->alloc_cap ? e->alloc_cap * 2 : 16;
        struct tent_alloc *n = realloc(e->allocs, ncap * sizeof(*n));
        if (!n)
            return tent_set_error(TENT_ENOMEM,
                                  "tent_allocate_memory: out of memory");
        e->allocs = n;
        e->alloc_cap = ncap;
    }
    e->allocs[e->nallocs++] = *a;
    return TENT_OK;
}

static void release_alloc(const struct tent_alloc *a)
{
    if (a->device >= 0) {
        if (tent_acl_free(a->device, (void *)a->base) != TENT_OK)
            LOG_WARN("%s", tent_last_error());
        return;
    }
    munmap((void *)a->base, a->map_len);
    close(a->fd);
}

/* memfd-backed host memory, page-rounded, optionally on a NUMA node. */
static int alloc_host(struct tent_engine *e, size_t size, int node,
                      struct tent_alloc *out)
{
    size_t page =
        e->use_hugepage ? e->hugepage_size : (size_t)sysconf(_SC_PAGESIZE);
    if (size > SIZE_MAX - page)
        return tent_set_error(
            TENT_EINVAL, "tent_allocate_memory: size %zu is too large", size);
    size_t len = (size + page - 1) / page * page;
    unsigned flags = MFD_CLOEXEC;
    if (e->use_hugepage) {
        unsigned shift = (unsigned)__builtin_ctzl(e->hugepage_size);
        flags |=
            MFD_HUGETLB |
            (shift << MAP_HUGE_SHIFT); /* MFD_HUGE_SHIFT == MAP_HUGE_SHIFT */
    }
    /* memfd backing lets a same-host peer map the memory (shm transport). */
    int fd = memfd_create("tent-buffer", flags);
    if (fd < 0) {
        LOG_ERROR("memfd_create failed, errno=%d (%s)", errno, strerror(errno));
        return tent_set_error(TENT_ENOMEM,
                              "tent_allocate_memory: memfd_create failed, "
                              "errno=%d (%s)",
                              errno, strerror(errno));
    }
    if (ftruncate(fd, (off_t)len) != 0) {
        int err = errno;
        close(fd);
        LOG_ERROR("ftruncate failed, errno=%d (%s)", err, strerror(err));
        return tent_set_error(TENT_ENOMEM,
                              "tent_allocate_memory: ftruncate(%zu) failed, "
                              "errno=%d (%s)",
                              len, err, strerror(err));
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                   fd, 0);
    if (p == MAP_FAILED) {
        int err = errno;
        close(fd);
        /* The seed's Troubleshooting text, with the real errno. */
        LOG_ERROR("mmap failed, errno=%d (%s)", err, strerror(err));
        return tent_set_error(
            TENT_ENOMEM, "tent_allocate_memory: mmap failed, errno=%d (%s)%s",
            err, strerror(err),
            e->use_hugepage ? "; check the reserved hugepages "
                              "(/sys/kernel/mm/hugepages)"
                            : "");
    }
    if (node >= 0) {
        unsigned long mask[16] = {0};
        mask[node / (8 * sizeof(long))] |= 1ul << (node % (8 * sizeof(long)));
        /* MPOL_BIND = 2; MPOL_MF_MOVE = 2: MAP_POPULATE already placed the
         * pages, so they must be moved, not only future ones bound. */
        if (syscall(SYS_mbind, p, len, 2, mask, 1024ul, 2u) != 0)
            LOG_WARN("mbind of %zu bytes to NUMA node %d failed: %s", len, node,
                     strerror(errno));
    }
    *out = (struct tent_alloc){.base = (uintptr_t)p,
                               .size = size,
                               .map_len = len,
                               .fd = fd,
                               .device = -1};
    return TENT_OK;
}

int tent_allocate_memory_ex(tent_engine_t engine, void **addr, size_t size,
                            tent_memory_options_t *opts)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL,
                              "tent_allocate_memory: engine is NULL");
    if (!addr || !opts)
        return tent_set_error(TENT_ENULL,
                              "tent_allocate_memory: addr or options is NULL");
    if (size == 0)
        return tent_set_error(TENT_EINVAL, "tent_allocate_memory: size is 0");
    int rc = check_options(opts, "tent_allocate_memory");
    if (rc)
        return rc;
    int device;
    rc = npu_device_of(opts->location, &device);
    if (rc)
        return rc;
    struct tent_alloc a;
    if (device >= 0) {
        void *p;
        rc = tent_acl_malloc(device, size, &p);
        if (rc)
            return rc;
        a = (struct tent_alloc){
            .base = (uintptr_t)p, .size = size, .fd = -1, .device = device};
    } else {
        int node;
        rc = numa_node_of(opts->location, &node);
        if (rc)
            return rc;
        rc = alloc_host(e, size, node, &a);
        if (rc)
            return rc;
    }
    snprintf(a.location, sizeof(a.location), "%s",
             opts->location[0] ? opts->location : "cpu");
    pthread_mutex_lock(&e->reg_lock);
    rc = remember_alloc_locked(e, &a);
    pthread_mutex_unlock(&e->reg_lock);
    if (rc) {
        release_alloc(&a);
        return rc;
    }
    LOG_DEBUG("allocated %zu bytes at %#llx (%s)", size,
              (unsigned long long)a.base,
              opts->location[0] ? opts->location : "cpu");
    *addr = (void *)a.base;
    return TENT_OK;
}

int tent_allocate_memory(tent_engine_t engine, void **addr, size_t size,
                         const char *location)
{
    tent_memory_options_t o = {.permission = PERM_GLOBAL_READ_WRITE};
    if (location) {
        if (strlen(location) >= sizeof(o.location))
            return tent_set_error(TENT_EINVAL,
                                  "tent_allocate_memory: location is too long");
        snprintf(o.location, sizeof(o.location), "%s", location);
    }
    return tent_allocate_memory_ex(engine, addr, size, &o);
}

int tent_memory_reclaim_pages(struct tent_engine *e,
                              const struct tent_buffer *buf)
{
    const char *what = "moving it to fresh pages";
    struct tent_alloc *a = alloc_holding(e, buf->base, buf->length);
    if (!a || a->fd < 0)
        return tent_set_error(TENT_ENOTSUP,
                              "%s: it is not memory tent_allocate_memory gave "
                              "out",
                              what);
    size_t page =
        e->use_hugepage ? e->hugepage_size : (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t pb = buf->base & ~(uintptr_t)(page - 1);
    uintptr_t pe =
        (buf->base + buf->length + page - 1) & ~(uintptr_t)(page - 1);
    if (pe > a->base + a->map_len)
        pe = a->base + a->map_len;
    int rc = TENT_OK;
    /* Every other registration keeps the memfd: none may share these
     * pages (buf itself is out of the segment already). */
    pthread_rwlock_rdlock(&e->local->lock);
    for (size_t i = 0; i < e->local->nbufs && rc == TENT_OK; i++) {
        const struct tent_buffer *o = e->local->bufs[i];
        if (o->base < pe && pb < o->base + o->length)
            rc = tent_set_error(TENT_ENOTSUP,
                                "%s: it shares pages with the registration "
                                "[%#llx, +%llu)",
                                what, (unsigned long long)o->base,
                                (unsigned long long)o->length);
    }
    pthread_rwlock_unlock(&e->local->lock);
    if (rc)
        return rc;
    size_t len = pe - pb;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
    if (e->use_hugepage)
        flags |= MAP_HUGETLB |
                 ((int)__builtin_ctzl(e->hugepage_size) << MAP_HUGE_SHIFT);
    void *fresh = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (fresh == MAP_FAILED)
        return tent_set_error(TENT_ENOMEM, "%s: mmap of %zu bytes failed: %s",
                              what, len, strerror(errno));
    memcpy(fresh, (void *)pb, len);
    /* One step: the range is the fresh pages from here on, never absent. */
    if (mremap(fresh, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)pb) ==
        MAP_FAILED) {
        int err = errno;
        munmap(fresh, len);
        return tent_set_error(TENT_ENOMEM, "%s: mremap onto %#llx failed: %s",
                              what, (unsigned long long)pb, strerror(err));
    }
    a->split = true;
    LOG_WARN("moved [%#llx, +%zu) of the allocation at %#llx to fresh pages: "
             "a peer that still maps the old ones writes nobody's memory",
             (unsigned long long)pb, len, (unsigned long long)a->base);
    return TENT_OK;
}

/* Whether registration b touches allocation a's memory at all. */
static bool within(const struct tent_buffer *b, const struct tent_alloc *a)
{
    return b->base < a->base + a->size && a->base < b->base + b->length;
}

int tent_free_memory(tent_engine_t engine, void *addr)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_free_memory: engine is NULL");
    tent_batches_reap(e); /* batches freed in flight may have ended */
    if (!addr)
        return tent_set_error(TENT_ENULL, "tent_free_memory: address is NULL");
    pthread_mutex_lock(&e->reg_lock);
    size_t ai = 0;
    while (ai < e->nallocs && e->allocs[ai].base != (uintptr_t)addr)
        ai++;
    if (ai == e->nallocs) {
        pthread_mutex_unlock(&e->reg_lock);
        return tent_set_error(TENT_EINVAL,
                              "tent_free_memory: %p was not allocated by "
                              "tent_allocate_memory of this engine",
                              addr);
    }
    struct tent_alloc a = e->allocs[ai];
    /* Registrations inside the allocation go first; none may be in use. */
    struct tent_segment *seg = e->local;
    int rc = TENT_OK;
    pthread_rwlock_rdlock(&seg->lock);
    for (size_t i = 0; i < seg->nbufs && rc == TENT_OK; i++)
        if (within(seg->bufs[i], &a) &&
            atomic_load(&seg->bufs[i]->inflight) > 0)
            rc = tent_set_error(TENT_EBUSY,
                                "tent_free_memory: %d task(s) in flight use "
                                "the registered range at %#llx",
                                atomic_load(&seg->bufs[i]->inflight),
                                (unsigned long long)seg->bufs[i]->base);
    pthread_rwlock_unlock(&seg->lock);
    while (rc == TENT_OK) {
        pthread_rwlock_wrlock(&seg->lock);
        struct tent_buffer *buf = NULL;
        for (size_t i = 0; i < seg->nbufs && !buf; i++)
            if (within(seg->bufs[i], &a))
                buf = seg->bufs[i];
        if (buf)
            tent_segment_remove_locked(seg, buf);
        pthread_rwlock_unlock(&seg->lock);
        if (!buf)
            break;
        rc = drop_buffer_locked(e, buf);
        if (rc == TENT_OK) {
            tmh_gauge(e, TM_REGISTERED_BYTES, -(int64_t)buf->length);
            LOG_DEBUG("tent_free_memory: unregistered [%#llx, +%llu) first",
                      (unsigned long long)buf->base,
                      (unsigned long long)buf->length);
            tent_buffer_free(buf);
        } else {
            tent_set_error(rc, "tent_free_memory: %p not freed: %s", addr,
                           tent_last_error());
        }
        tent_ctrl_local_changed(e);
    }
    if (rc == TENT_OK)
        e->allocs[ai] = e->allocs[--e->nallocs];
    pthread_mutex_unlock(&e->reg_lock);
    if (rc == TENT_OK)
        release_alloc(&a);
    return rc;
}

void tent_memory_release_all(struct tent_engine *e)
{
    bool any_abandoned = false;
    for (int i = 0; i < e->nxports; i++)
        any_abandoned |= e->xport_abandoned[i];
    pthread_mutex_lock(&e->reg_lock);
    struct tent_segment *seg = e->local;
    pthread_rwlock_wrlock(&seg->lock);
    size_t kept = 0;
    for (size_t i = 0; i < seg->nbufs; i++) {
        struct tent_buffer *buf = seg->bufs[i];
        int inflight = atomic_load(&buf->inflight);
        const char *why = inflight > 0    ? "tasks are still in flight on it"
                          : any_abandoned ? "a transport failed to quiesce"
                                          : NULL;
        if (!why && detach_transports(e, buf) != TENT_OK)
            why = "a transport failed to release it";
        if (why) {
            LOG_WARN("keeping buffer [%#llx, +%llu) registered and mapped: %s",
                     (unsigned long long)buf->base,
                     (unsigned long long)buf->length, why);
            seg->bufs[kept++] = buf;
            continue;
        }
        tent_buffer_free(buf);
    }
    seg->nbufs = kept;
    /* Allocations holding a kept buffer stay mapped (deliberately leaked);
     * the rest go back. */
    for (size_t ai = 0; ai < e->nallocs; ai++) {
        bool keep = false;
        for (size_t i = 0; i < kept && !keep; i++)
            keep = within(seg->bufs[i], &e->allocs[ai]);
        if (!keep)
            release_alloc(&e->allocs[ai]);
    }
    free(e->allocs);
    e->allocs = NULL;
    e->nallocs = e->alloc_cap = 0;
    pthread_rwlock_unlock(&seg->lock);
    pthread_mutex_unlock(&e->reg_lock);
}
