/* mf_host's control page: how an owner revokes a range it deregisters from
 * every peer copying into or out of it, including peers that copy with
 * their own memcpy or process_vm_writev and never ask the owner.
 *
 * Every instance keeps one page (a memfd; its descriptor number and inode
 * travel in the HELLO answer) that same-host peers map read-write.  A copier
 * opens a window over each piece before touching it and checks the log of
 * removals; the owner removes and logs a range, then waits until no open
 * window overlaps it (mfh_win_open says why that is enough).  The owner's
 * own server threads keep the same kind of window in their connection.
 *
 * Peers can write this page, but they can write the memory it guards too:
 * the trust boundary is the same user on the same host, as for
 * cross-memory attach.  Everything read from a peer's page is
 * bounds-checked; a page that makes no sense revokes rather than admits.
 * The whole protocol: docs/mf_host.md (Internals). */
#ifndef TENT_MF_HOST_CTL_H
#define TENT_MF_HOST_CTL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define MFH_CTL_MAGIC   0x314c5443484d464dull /* "MFHMCTL1" */
#define MFH_CTL_VERSION 2u
#define MFH_CTL_SLOTS   1024u /* initiator workers that can map the page */
#define MFH_CTL_LOG     256u  /* removals remembered */

/* A copier's window: [addr, addr+len) is being touched while seq is odd.
 * The page holds one per initiator worker (MFH_WORKERS slots per peer
 * instance that maps it).  A window whose holder has died is closed by the
 * owner; one still open after the owner's timeout (its holder stalled
 * inside the copy) is marked broken, and that copy fails when it ends. */
struct mfh_win {
    _Atomic int64_t pid;     /* page slots: the holder (0: free) */
    _Atomic uint64_t seq;    /* odd while the holder copies */
    _Atomic uint64_t broken; /* the odd seq of a copy the owner gave up on */
    _Atomic uint64_t addr, len;
    uint8_t pad[24]; /* one cache line each */
};
_Static_assert(sizeof(struct mfh_win) == 64, "a window is a cache line");

struct mfh_ctl_removal {
    _Atomic uint64_t gen; /* the removal's number; 0 while being written */
    _Atomic uint64_t base, len;
    uint64_t pad;
};

struct mfh_ctl {
    uint64_t magic;
    uint32_t version, nslots, nlog, pad0;
    /* bumped on every change of the registered ranges: a host_shm peer's
     * range cache is current while it is unchanged */
    _Atomic uint64_t mem_gen;
    /* removals so far (it starts at 1); removal g is log[g % MFH_CTL_LOG] */
    _Atomic uint64_t rev_gen;
    /* Where the owner maps this page, and a random token in it: a peer
     * that can read the token at self_addr + offsetof(probe) with
     * process_vm_readv may copy with cross-memory attach.  Only processes
     * that may open the owner's /proc/<pid>/fd see them (its HELLO answer
     * carries no address). */
    uint64_t self_addr;
    uint64_t probe;
    uint8_t pad1[8];
    struct mfh_ctl_removal log[MFH_CTL_LOG];
    struct mfh_win slots[MFH_CTL_SLOTS];
};

static inline bool mfh_overlap(uint64_t a, uint64_t alen, uint64_t b,
                               uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

/* Whether a removal numbered (since, now] overlaps [addr, addr+len), or
 * the ring no longer tells (too many since, or an entry rewritten). */
static inline bool mfh_ctl_revoked(const struct mfh_ctl *c, uint64_t since,
                                   uint64_t now, uint64_t addr, uint64_t len)
{
    if (now < since || now - since > MFH_CTL_LOG)
        return true;
    for (uint64_t g = since + 1; g <= now; g++) {
        const struct mfh_ctl_removal *e = &c->log[g % MFH_CTL_LOG];
        uint64_t g1 = atomic_load(&e->gen);
        uint64_t b = atomic_load(&e->base), l = atomic_load(&e->len);
        if (g1 != g || atomic_load(&e->gen) != g ||
            mfh_overlap(b, l, addr, len))
            return true;
    }
    return false;
}

/* Opens window w over [addr, addr+len) for a copy admitted as of rev_gen
 * snap: true when it may run (the caller copies, then calls
 * mfh_win_close), false when the owner has removed an overlapping range
 * since (the window is closed again: touch nothing).
 * The owner removes a range and logs it (rev_gen last), then waits for
 * every odd window over it; the copier opens its window (range, then an
 * odd seq), then reads rev_gen.  All are sequentially consistent, so either
 * the copier sees the removal or the owner sees the window: once a
 * deregistration returns no copy of the range runs or can start, and one
 * in flight across it fails even if the range is registered again. */
static inline bool mfh_win_open(struct mfh_win *w, const struct mfh_ctl *c,
                                uint64_t snap, uint64_t addr, uint64_t len)
{
    atomic_store(&w->addr, addr);
    atomic_store(&w->len, len);
    atomic_fetch_add(&w->seq, 1); /* odd: copying */
    uint64_t now = atomic_load(&c->rev_gen);
    if (now == snap || !mfh_ctl_revoked(c, snap, now, addr, len))
        return true;
    atomic_fetch_add(&w->seq, 1);
    return false;
}

/* Closes w; false when the owner gave up waiting for this copy (the copy
 * must be reported failed). */
static inline bool mfh_win_close(struct mfh_win *w)
{
    uint64_t q = atomic_load(&w->seq);
    bool ok = atomic_load(&w->broken) != q;
    atomic_store(&w->seq, q + 1); /* even: done */
    return ok;
}

#endif
