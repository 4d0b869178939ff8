#include "common/error.h"
#include "common/log.h"
#include "runtime/control.h"
#include "runtime/engine.h"
#include "runtime/metrics_hooks.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { ALLOC_NONE = 0, ALLOC_MEMFD = 1 };

bool tent_location_is_device(const char *location)
{
    if (!location || !*location || *location == '*')
        return false;
    return strncmp(location, "cpu", 3) != 0;
}

/* Registers buf with every installed transport (or only the one asked for).
 * On failure of an explicitly requested transport, undoes and fails. */
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

static void detach_transports(struct tent_engine *e, struct tent_buffer *buf)
{
    for (int i = 0; i < e->nxports; i++) {
        struct tent_transport *t = e->xports[i];
        if (!(buf->xport_mask & (1u << t->ops->type)) || e->xport_abandoned[i])
            continue;
        int rc = t->ops->remove_buffer(t, buf);
        if (rc != TENT_OK)
            LOG_WARN("transport '%s' failed to release buffer [%#llx, +%llu): "
                     "%s",
                     t->ops->name, (unsigned long long)buf->base,
                     (unsigned long long)buf->length, tent_last_error());
        buf->xport_mask &= ~(1u << t->ops->type);
    }
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

/* Caller holds e->reg_lock. Takes ownership of nothing on failure. */
static int register_locked(struct tent_engine *e, void *addr, size_t size,
                           const tent_memory_options_t *o, int alloc_kind,
                           size_t alloc_size, int alloc_fd)
{
    struct tent_segment *seg = e->local;
    pthread_rwlock_rdlock(&seg->lock);
    bool overlap = tent_segment_overlaps_locked(seg, (uintptr_t)addr, size);
    pthread_rwlock_unlock(&seg->lock);
    if (overlap)
        return tent_set_error(TENT_EEXIST,
                              "register memory: [%p, +%zu) overlaps a "
                              "registered buffer",
                              addr, size);
    struct tent_buffer *buf = calloc(1, sizeof(*buf));
    if (!buf)
        return tent_set_error(TENT_ENOMEM, "register memory: out of memory");
    buf->base = (uintptr_t)addr;
    buf->length = size;
    snprintf(buf->location, sizeof(buf->location), "%s",
             o->location[0] ? o->location : "cpu");
    buf->perm = o->permission;
    buf->is_device = tent_location_is_device(buf->location);
    buf->alloc_kind = alloc_kind;
    buf->alloc_size = alloc_size;
    buf->alloc_fd = alloc_fd;
    atomic_init(&buf->inflight, 0);
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
    detach_transports(e, buf);
    free(buf);
    return rc;
}

/* Removes the buffer that starts at addr; caller holds e->reg_lock. */
static int unregister_locked(struct tent_engine *e, void *addr, size_t size,
                             bool allocated, struct tent_buffer **out)
{
    const char *what = allocated ? "tent_free_memory" : "unregister memory";
    struct tent_segment *seg = e->local;
    pthread_rwlock_wrlock(&seg->lock);
    struct tent_buffer *buf = tent_segment_find_locked(seg, (uintptr_t)addr, 1);
    int rc = TENT_OK;
    if (!buf || buf->base != (uintptr_t)addr)
        rc = tent_set_error(TENT_ENOTREG, "%s: no buffer registered at %p",
                            what, addr);
    else if (size && size != buf->length)
        rc = tent_set_error(TENT_EINVAL,
                            "%s: size %zu does not match the %llu bytes "
                            "registered at %p",
                            what, size, (unsigned long long)buf->length, addr);
    else if (allocated && buf->alloc_kind == ALLOC_NONE)
        rc = tent_set_error(TENT_EINVAL,
                            "%s: memory at %p was not allocated by "
                            "tent_allocate_memory",
                            what, addr);
    else if (!allocated && buf->alloc_kind != ALLOC_NONE)
        rc = tent_set_error(TENT_EINVAL,
                            "%s: memory at %p came from tent_allocate_memory; "
                            "release it with tent_free_memory",
                            what, addr);
    else if (atomic_load(&buf->inflight) > 0)
        rc = tent_set_error(TENT_EBUSY,
                            "%s: %d task(s) in flight use the buffer at %p",
                            what, atomic_load(&buf->inflight), addr);
    if (rc == TENT_OK)
        tent_segment_remove_locked(seg, buf);
    pthread_rwlock_unlock(&seg->lock);
    if (rc != TENT_OK)
        return rc;
    detach_transports(e, buf);
    tent_ctrl_local_changed(e);
    tmh_gauge(e, TM_REGISTERED_BYTES, -(int64_t)buf->length);
    *out = buf;
    return TENT_OK;
}

static void release_buffer_memory(struct tent_buffer *buf)
{
    if (buf->alloc_kind == ALLOC_MEMFD) {
        munmap((void *)(uintptr_t)buf->base, buf->alloc_size);
        close(buf->alloc_fd);
    }
    free(buf);
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
    rc = register_locked(e, addr, size, opts, ALLOC_NONE, 0, -1);
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
        for (size_t j = 0; j < i; j++) {
            uintptr_t a = (uintptr_t)addrs[i], b = (uintptr_t)addrs[j];
            if (a < b + sizes[j] && b < a + sizes[i])
                return tent_set_error(TENT_EEXIST,
                                      "register memory batch: entries %zu and "
                                      "%zu overlap",
                                      j, i);
        }
    }
    pthread_mutex_lock(&e->reg_lock);
    size_t done = 0;
    for (; done < count; done++) {
        rc = register_locked(e, addrs[done], sizes[done], opts, ALLOC_NONE, 0,
                             -1);
        if (rc)
            break;
    }
    if (rc) {
        /* All or nothing: undo the entries that went in. */
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", tent_last_error());
        for (size_t i = 0; i < done; i++) {
            struct tent_buffer *buf;
            if (unregister_locked(e, addrs[i], sizes[i], false, &buf) ==
                TENT_OK)
                free(buf);
        }
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
    pthread_mutex_lock(&e->reg_lock);
    struct tent_buffer *buf;
    int rc = unregister_locked(e, addr, size, false, &buf);
    pthread_mutex_unlock(&e->reg_lock);
    if (rc == TENT_OK)
        free(buf);
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
    /* Check every entry first so that nothing is half-applied. */
    pthread_mutex_lock(&e->reg_lock);
    pthread_rwlock_rdlock(&e->local->lock);
    int rc = TENT_OK;
    for (size_t i = 0; i < count && rc == TENT_OK; i++) {
        struct tent_buffer *b =
            addrs[i]
                ? tent_segment_find_locked(e->local, (uintptr_t)addrs[i], 1)
                : NULL;
        if (!b || b->base != (uintptr_t)addrs[i])
            rc = tent_set_error(TENT_ENOTREG,
                                "unregister memory batch: entry %zu: no buffer "
                                "registered at %p",
                                i, addrs[i]);
        else if (sizes && sizes[i] && sizes[i] != b->length)
            rc = tent_set_error(TENT_EINVAL,
                                "unregister memory batch: entry %zu: size %zu "
                                "does not match %llu",
                                i, sizes[i], (unsigned long long)b->length);
        else if (b->alloc_kind != ALLOC_NONE)
            rc = tent_set_error(TENT_EINVAL,
                                "unregister memory batch: entry %zu: %p came "
                                "from tent_allocate_memory",
                                i, addrs[i]);
        else if (atomic_load(&b->inflight) > 0)
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
        struct tent_buffer *buf;
        rc = unregister_locked(e, addrs[i], sizes ? sizes[i] : 0, false, &buf);
        if (rc == TENT_OK)
            free(buf);
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
                              "tent_allocate_memory: location '%s' is not host "
                              "memory; this build allocates 'cpu' or "
                              "'cpu:<numa node>' only",
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
    int node;
    rc = numa_node_of(opts->location, &node);
    if (rc)
        return rc;

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
    tent_memory_options_t o = *opts;
    if (!o.location[0])
        snprintf(o.location, sizeof(o.location), "cpu");
    pthread_mutex_lock(&e->reg_lock);
    rc = register_locked(e, p, size, &o, ALLOC_MEMFD, len, fd);
    pthread_mutex_unlock(&e->reg_lock);
    if (rc) {
        munmap(p, len);
        close(fd);
        return rc;
    }
    *addr = p;
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

int tent_free_memory(tent_engine_t engine, void *addr)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_free_memory: engine is NULL");
    if (!addr)
        return tent_set_error(TENT_ENULL, "tent_free_memory: address is NULL");
    pthread_mutex_lock(&e->reg_lock);
    struct tent_buffer *buf;
    int rc = unregister_locked(e, addr, 0, true, &buf);
    pthread_mutex_unlock(&e->reg_lock);
    if (rc == TENT_OK)
        release_buffer_memory(buf);
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
        if (inflight > 0 || any_abandoned) {
            LOG_WARN("keeping buffer [%#llx, +%llu) registered and mapped: %s",
                     (unsigned long long)buf->base,
                     (unsigned long long)buf->length,
                     inflight > 0 ? "tasks are still in flight on it"
                                  : "a transport failed to quiesce");
            seg->bufs[kept++] = buf;
            continue;
        }
        detach_transports(e, buf);
        release_buffer_memory(buf);
    }
    seg->nbufs = kept;
    pthread_rwlock_unlock(&seg->lock);
    pthread_mutex_unlock(&e->reg_lock);
}
