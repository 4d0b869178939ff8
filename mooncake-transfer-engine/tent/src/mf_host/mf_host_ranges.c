/* mf_host registered memory: the ranges a handle serves (h->mem_lock) and
 * whether a range is covered by them. */
#include "mf_host.h"

#include <stdlib.h>

/* True if [addr, addr+len) is covered by the union of the ranges r. */
bool mfh_ranges_cover(const struct mfh_range *r, size_t n, uint64_t addr,
                      uint64_t len)
{
    if (len == 0 || addr + len < addr)
        return false;
    uint64_t cur = addr, end = addr + len;
    while (cur < end) {
        uint64_t best = cur;
        for (size_t i = 0; i < n; i++) {
            uint64_t b = r[i].base, e = b + r[i].len;
            if (b <= cur && cur < e && e > best)
                best = e;
        }
        if (best == cur)
            break;
        cur = best;
    }
    return cur >= end;
}

bool mfh_range_registered(struct mfh_handle *h, uint64_t addr, uint64_t len)
{
    pthread_rwlock_rdlock(&h->mem_lock);
    bool ok = mfh_ranges_cover(h->ranges, h->n_ranges, addr, len);
    pthread_rwlock_unlock(&h->mem_lock);
    return ok;
}

int32_t mfh_ranges_add(struct mfh_handle *h, void *const *addrs,
                       const size_t *caps, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++) {
        if (!addrs[i] || caps[i] == 0 ||
            (uintptr_t)addrs[i] + caps[i] < (uintptr_t)addrs[i]) {
            MFH_ERROR("register_mem: bad range %u: address %p, capacity %zu", i,
                      addrs[i], caps[i]);
            return SM_INVALID_PARAM;
        }
        for (uint32_t j = 0; j < i; j++) {
            if (addrs[j] == addrs[i]) {
                MFH_ERROR("register_mem: address %p given twice", addrs[i]);
                return SM_DUPLICATED;
            }
        }
    }
    int32_t rc = SM_OK;
    pthread_rwlock_wrlock(&h->mem_lock);
    for (uint32_t i = 0; i < count && rc == SM_OK; i++) {
        for (size_t k = 0; k < h->n_ranges; k++) {
            if (h->ranges[k].base == (uintptr_t)addrs[i]) {
                MFH_ERROR("register_mem: address %p is already registered",
                          addrs[i]);
                rc = SM_DUPLICATED;
                break;
            }
        }
    }
    if (rc == SM_OK && h->n_ranges + count > h->cap_ranges) {
        size_t cap = (h->n_ranges + count) * 2;
        struct mfh_range *r = realloc(h->ranges, cap * sizeof(*r));
        if (r) {
            h->ranges = r;
            h->cap_ranges = cap;
        } else {
            rc = SM_MALLOC_FAILED;
        }
    }
    if (rc == SM_OK) {
        for (uint32_t i = 0; i < count; i++)
            h->ranges[h->n_ranges++] =
                (struct mfh_range){.base = (uintptr_t)addrs[i], .len = caps[i]};
        atomic_fetch_add(&h->mem_gen, 1);
    }
    pthread_rwlock_unlock(&h->mem_lock);
    return rc;
}

int32_t mfh_ranges_remove(struct mfh_handle *h, void *address)
{
    int32_t rc = SM_OBJECT_NOT_EXISTS;
    pthread_rwlock_wrlock(&h->mem_lock);
    for (size_t i = 0; i < h->n_ranges; i++) {
        if (h->ranges[i].base == (uintptr_t)address) {
            h->ranges[i] = h->ranges[--h->n_ranges];
            atomic_fetch_add(&h->mem_gen, 1);
            rc = SM_OK;
            break;
        }
    }
    pthread_rwlock_unlock(&h->mem_lock);
    return rc;
}
