/* registerLocalMemory[Batch] / unregisterLocalMemory[Batch].  Mooncake
 * refuses a range that overlaps a registered one (the same range twice
 * included) and unregisters by start address; TENT counts references of an
 * identical range and allows overlaps.  The classic rules are kept here, in
 * a sorted list of the ranges this engine registered. */
#include "classic/classic.h"

#include <stdlib.h>
#include <string.h>

/* Index of the first range that ends after addr.  Caller holds ce->lock. */
static size_t lower_bound(const struct classic_engine *ce, uintptr_t addr)
{
    size_t lo = 0, hi = ce->nregions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ce->regions[mid].addr + ce->regions[mid].length <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool overlaps(const struct classic_engine *ce, uintptr_t addr,
                     size_t length)
{
    size_t i = lower_bound(ce, addr);
    return i < ce->nregions && ce->regions[i].addr < addr + length;
}

/* Index of the range that starts at addr, or -1. */
static long find_start(const struct classic_engine *ce, uintptr_t addr)
{
    size_t i = lower_bound(ce, addr);
    return i < ce->nregions && ce->regions[i].addr == addr ? (long)i : -1;
}

static int reserve(struct classic_engine *ce, size_t more)
{
    if (ce->nregions + more <= ce->regions_cap)
        return 0;
    size_t cap = ce->regions_cap ? ce->regions_cap : 16;
    while (cap < ce->nregions + more)
        cap *= 2;
    struct classic_region *r = realloc(ce->regions, cap * sizeof(*r));
    if (!r)
        return -1;
    ce->regions = r;
    ce->regions_cap = cap;
    return 0;
}

/* Inserts a range known not to overlap; room was reserved. */
static void insert(struct classic_engine *ce, uintptr_t addr, size_t length)
{
    size_t i = lower_bound(ce, addr);
    memmove(&ce->regions[i + 1], &ce->regions[i],
            (ce->nregions - i) * sizeof(ce->regions[0]));
    ce->regions[i] = (struct classic_region){.addr = addr, .length = length};
    ce->nregions++;
}

static void erase(struct classic_engine *ce, size_t i)
{
    memmove(&ce->regions[i], &ce->regions[i + 1],
            (ce->nregions - i - 1) * sizeof(ce->regions[0]));
    ce->nregions--;
}

/* "*" (or none) lets the engine tell; anything else is passed on. */
static int location_option(const char *location, tent_memory_options_t *o,
                           const char *fn)
{
    if (!location || !*location || strcmp(location, "*") == 0)
        return 0;
    if (strlen(location) >= sizeof(o->location)) {
        CLASSIC_WARN("%s: location '%.64s...' is too long", fn, location);
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    strcpy(o->location, location);
    return 0;
}

static int check_range(void *addr, size_t length, const char *fn)
{
    if (!addr) {
        CLASSIC_WARN("%s: address is NULL", fn);
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    if (length == 0) {
        CLASSIC_WARN("%s: zero-length memory region at %p", fn, addr);
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    if ((uintptr_t)addr + length < (uintptr_t)addr) {
        CLASSIC_WARN("%s: region at %p of %zu bytes wraps around", fn, addr,
                     length);
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    return 0;
}

CLASSIC_API int registerLocalMemory(transfer_engine_t engine, void *addr,
                                    size_t length, const char *location,
                                    int remote_accessible)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    int rc = check_range(addr, length, __func__);
    tent_memory_options_t o = {.permission = remote_accessible
                                                 ? PERM_GLOBAL_READ_WRITE
                                                 : PERM_LOCAL_READ_WRITE};
    if (!rc)
        rc = location_option(location, &o, __func__);
    if (rc)
        return rc;
    bool counted;
    if (!classic_enter(ce, &counted))
        return CLASSIC_ERR_CONTEXT;
    pthread_mutex_lock(&ce->lock);
    if (!ce->te) {
        rc = CLASSIC_ERR_CONTEXT;
        CLASSIC_WARN("registerLocalMemory: the engine is stopped");
    } else if (overlaps(ce, (uintptr_t)addr, length)) {
        rc = CLASSIC_ERR_ADDRESS_OVERLAPPED;
        CLASSIC_WARN("registerLocalMemory: [%p, +%zu) overlaps a registered "
                     "memory region",
                     addr, length);
    } else if (reserve(ce, 1) != 0) {
        rc = CLASSIC_ERR_MEMORY;
        CLASSIC_WARN("registerLocalMemory: out of memory");
    } else {
        int trc = tent_register_memory_ex(ce->te, addr, length, &o);
        if (trc == TENT_OK) {
            insert(ce, (uintptr_t)addr, length);
            classic_seal(ce);
        } else {
            rc = classic_err_of(trc);
            CLASSIC_WARN("registerLocalMemory: %s", tent_last_error());
        }
    }
    pthread_mutex_unlock(&ce->lock);
    classic_leave(ce, counted);
    return rc;
}

/* Unregisters the range at addr; caller holds ce->lock. */
static int unregister_one(struct classic_engine *ce, void *addr, const char *fn)
{
    long i = addr ? find_start(ce, (uintptr_t)addr) : -1;
    if (i < 0) {
        CLASSIC_WARN("%s: no memory region is registered at %p", fn, addr);
        return CLASSIC_ERR_ADDRESS_NOT_REGISTERED;
    }
    int trc = tent_unregister_memory(ce->te, addr, ce->regions[i].length);
    if (trc != TENT_OK) {
        CLASSIC_WARN("%s: %s", fn, tent_last_error());
        return classic_err_of(trc);
    }
    erase(ce, (size_t)i);
    return 0;
}

CLASSIC_API int unregisterLocalMemory(transfer_engine_t engine, void *addr)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    if (!addr) {
        CLASSIC_WARN("unregisterLocalMemory: address is NULL");
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return CLASSIC_ERR_CONTEXT;
    pthread_mutex_lock(&ce->lock);
    int rc = ce->te ? unregister_one(ce, addr, __func__) : CLASSIC_ERR_CONTEXT;
    pthread_mutex_unlock(&ce->lock);
    classic_leave(ce, counted);
    return rc;
}

static int by_addr(const void *a, const void *b)
{
    const buffer_entry_t *x = a, *y = b;
    uintptr_t u = (uintptr_t)x->addr, v = (uintptr_t)y->addr;
    return u < v ? -1 : u > v;
}

CLASSIC_API int registerLocalMemoryBatch(transfer_engine_t engine,
                                         buffer_entry_t *buffer_list,
                                         size_t buffer_len,
                                         const char *location)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    if (buffer_len == 0)
        return 0;
    if (!buffer_list) {
        CLASSIC_WARN("registerLocalMemoryBatch: buffer_list is NULL");
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    tent_memory_options_t o = {.permission = PERM_GLOBAL_READ_WRITE};
    int rc = location_option(location, &o, __func__);
    for (size_t i = 0; i < buffer_len && !rc; i++)
        rc = check_range(buffer_list[i].addr, buffer_list[i].length, __func__);
    if (rc)
        return rc;
    buffer_entry_t *sorted = malloc(buffer_len * sizeof(*sorted));
    void **addrs = malloc(buffer_len * sizeof(*addrs));
    size_t *sizes = malloc(buffer_len * sizeof(*sizes));
    if (!sorted || !addrs || !sizes) {
        CLASSIC_WARN("registerLocalMemoryBatch: out of memory");
        rc = CLASSIC_ERR_MEMORY;
        goto out;
    }
    memcpy(sorted, buffer_list, buffer_len * sizeof(*sorted));
    qsort(sorted, buffer_len, sizeof(*sorted), by_addr);
    for (size_t i = 1; i < buffer_len; i++)
        if ((uintptr_t)sorted[i].addr - (uintptr_t)sorted[i - 1].addr <
            sorted[i - 1].length) {
            CLASSIC_WARN("registerLocalMemoryBatch: entries at %p and %p "
                         "overlap",
                         sorted[i - 1].addr, sorted[i].addr);
            rc = CLASSIC_ERR_ADDRESS_OVERLAPPED;
            goto out;
        }
    for (size_t i = 0; i < buffer_len; i++) {
        addrs[i] = sorted[i].addr;
        sizes[i] = sorted[i].length;
    }
    bool counted;
    if (!classic_enter(ce, &counted)) {
        rc = CLASSIC_ERR_CONTEXT;
        goto out;
    }
    pthread_mutex_lock(&ce->lock);
    for (size_t i = 0; i < buffer_len && !rc; i++)
        if (overlaps(ce, (uintptr_t)addrs[i], sizes[i])) {
            CLASSIC_WARN("registerLocalMemoryBatch: [%p, +%zu) overlaps a "
                         "registered memory region",
                         addrs[i], sizes[i]);
            rc = CLASSIC_ERR_ADDRESS_OVERLAPPED;
        }
    if (!rc && !ce->te) {
        CLASSIC_WARN("registerLocalMemoryBatch: the engine is stopped");
        rc = CLASSIC_ERR_CONTEXT;
    }
    if (!rc && reserve(ce, buffer_len) != 0) {
        CLASSIC_WARN("registerLocalMemoryBatch: out of memory");
        rc = CLASSIC_ERR_MEMORY;
    }
    if (!rc) {
        /* All or nothing, as Mooncake's batch. */
        int trc =
            tent_register_memory_batch_ex(ce->te, addrs, sizes, buffer_len, &o);
        if (trc == TENT_OK) {
            for (size_t i = 0; i < buffer_len; i++)
                insert(ce, (uintptr_t)addrs[i], sizes[i]);
            classic_seal(ce);
        } else {
            CLASSIC_WARN("registerLocalMemoryBatch: %s", tent_last_error());
            rc = classic_err_of(trc);
        }
    }
    pthread_mutex_unlock(&ce->lock);
    classic_leave(ce, counted);
out:
    free(sorted);
    free(addrs);
    free(sizes);
    return rc;
}

CLASSIC_API int unregisterLocalMemoryBatch(transfer_engine_t engine,
                                           void **addr_list, size_t addr_len)
{
    struct classic_engine *ce = classic_engine_of(engine, __func__);
    if (!ce)
        return CLASSIC_ERR_INVALID_ARGUMENT;
    if (addr_len == 0)
        return 0;
    if (!addr_list) {
        CLASSIC_WARN("unregisterLocalMemoryBatch: addr_list is NULL");
        return CLASSIC_ERR_INVALID_ARGUMENT;
    }
    bool counted;
    if (!classic_enter(ce, &counted))
        return CLASSIC_ERR_CONTEXT;
    /* Best effort, as Mooncake: every address that can go goes, and the
     * first error is returned. */
    int first = 0;
    pthread_mutex_lock(&ce->lock);
    for (size_t i = 0; i < addr_len; i++) {
        int rc = ce->te ? unregister_one(ce, addr_list[i], __func__)
                        : CLASSIC_ERR_CONTEXT;
        if (rc && !first)
            first = rc;
    }
    pthread_mutex_unlock(&ce->lock);
    classic_leave(ce, counted);
    return first;
}
