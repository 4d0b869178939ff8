/* mf_host registered memory: the ranges a handle serves (h->mem_lock),
 * whether a range is covered by them, and their deregistration, which
 * revokes the range from every copier (mf_host_ctl.h). */
#include "mf_host.h"

#include <stdlib.h>
#include <string.h>

static bool admits(const struct mfh_range *r, const uint8_t *key)
{
    if (!key || !r->keyed)
        return true;
    volatile uint8_t d = 0;
    for (int i = 0; i < MFH_KEY_LEN; i++)
        d |= (uint8_t)(r->key[i] ^ key[i]);
    return d == 0;
}

/* True if [addr, addr+len) is covered by the union of the ranges r that
 * admit key. */
bool mfh_ranges_cover(const struct mfh_range *r, size_t n, uint64_t addr,
                      uint64_t len, const uint8_t *key)
{
    if (len == 0 || addr + len < addr)
        return false;
    uint64_t cur = addr, end = addr + len;
    while (cur < end) {
        uint64_t best = cur;
        for (size_t i = 0; i < n; i++) {
            uint64_t b = r[i].base, e = b + r[i].len;
            if (b <= cur && cur < e && e > best && admits(&r[i], key))
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
    bool ok = mfh_ranges_cover(h->ranges, h->n_ranges, addr, len, NULL);
    pthread_rwlock_unlock(&h->mem_lock);
    return ok;
}

int32_t mfh_ranges_add(struct mfh_handle *h, void *const *addrs,
                       const size_t *caps, const uint8_t *keys, uint32_t count)
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
    pthread_mutex_lock(&h->reg_lock);
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
        for (uint32_t i = 0; i < count; i++) {
            struct mfh_range *r = &h->ranges[h->n_ranges++];
            *r = (struct mfh_range){.base = (uintptr_t)addrs[i],
                                    .len = caps[i],
                                    .keyed = keys != NULL};
            if (keys)
                memcpy(r->key, keys + (size_t)i * MFH_KEY_LEN, MFH_KEY_LEN);
        }
        atomic_fetch_add(&h->ctl->mem_gen, 1);
    }
    pthread_rwlock_unlock(&h->mem_lock);
    pthread_mutex_unlock(&h->reg_lock);
    return rc;
}

int32_t mfh_ranges_revoke(struct mfh_handle *h, void *address)
{
    pthread_mutex_lock(&h->reg_lock);
    pthread_rwlock_wrlock(&h->mem_lock);
    size_t i = 0;
    while (i < h->n_ranges && h->ranges[i].base != (uintptr_t)address)
        i++;
    if (i == h->n_ranges) {
        pthread_rwlock_unlock(&h->mem_lock);
        pthread_mutex_unlock(&h->reg_lock);
        MFH_ERROR("deregister_mem: %p is not registered", address);
        return SM_OBJECT_NOT_EXISTS;
    }
    struct mfh_range r = h->ranges[i];
    h->ranges[i] = h->ranges[--h->n_ranges];
    mfh_ctl_log_removal(h, r.base, r.len);
    pthread_rwlock_unlock(&h->mem_lock);

    /* Removed and logged: no copy can start on it.  Wait for the ones
     * inside it now. */
    char who[160] = "";
    int32_t rc = SM_OK;
    if (mfh_ctl_wait(h, r.base, r.len, h->io_timeout_ms, who, sizeof(who)) !=
        0) {
        /* The reg_lock kept everyone else out: its slot is still free. */
        pthread_rwlock_wrlock(&h->mem_lock);
        h->ranges[h->n_ranges++] = r;
        atomic_fetch_add(&h->ctl->mem_gen, 1);
        pthread_rwlock_unlock(&h->mem_lock);
        MFH_ERROR("%s: deregister_mem([0x%llx, +%zu)): %s is still copying "
                  "into or out of it after %d ms (MF_TRANSFER_TIMEOUT); the "
                  "range stays registered, and that copy is reported failed "
                  "to it when it ends",
                  h->uid, (unsigned long long)r.base, r.len, who,
                  h->io_timeout_ms);
        rc = SM_RESOURCE_IN_USE;
    }
    pthread_mutex_unlock(&h->reg_lock);
    return rc;
}
