/* The shm transport's control page: how an owner revokes what it
 * registered from peers that copy into its memory without asking it.
 *
 * Every engine with shm installed keeps one page (a memfd, published as the
 * segment attribute "shm_ctl") that same-host peers map read-write:
 *  - one entry per registered buffer: its generation (odd while it is
 *    registered, even once revoked or free), range and permission; the
 *    descriptor publishes each buffer's entry index and generation
 *    (attribute "shm_reg");
 *  - one slot per initiator process: its pid, the entry it is copying into
 *    or out of now, and a sequence number that is odd during the copy.
 *
 * An initiator marks its slot (entry, then an odd sequence), checks that
 * the entry still has the generation its descriptor published and grants
 * the access, copies, and makes the sequence even again.  An owner revoking
 * an entry first makes its generation even, then waits until no slot shows
 * an odd sequence for that entry.  Both sides use sequentially consistent
 * operations, so either the initiator sees the revocation and touches
 * nothing, or the owner sees the copy and waits for its end: once the
 * revocation returns, no copy into the range is running or can start.  A
 * slot whose process has exited is cleared by whoever meets it (the owner
 * waiting, an initiator looking for a free slot).  A copy the owner stops
 * waiting for (its process stalled mid-copy) is marked broken in the slot
 * before the owner takes the memory away; the initiator reports it FAILED
 * when it finally ends.
 *
 * The page lives in shared memory a peer can write, but so does the memory
 * it guards: the trust boundary is the same user on the same host, as for
 * shm itself.  Everything read from a peer's page is bounds-checked. */
#ifndef TENT_TRANSPORT_SHM_CTL_H
#define TENT_TRANSPORT_SHM_CTL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_CTL_MAGIC   0x315443204d485354ull /* "TSHM CT1" */
#define SHM_CTL_VERSION 2
#define SHM_CTL_REGS    4096
#define SHM_CTL_PEERS   256

struct shm_ctl_reg {
    _Atomic uint64_t gen; /* odd: registered; even: revoked or free */
    _Atomic uint64_t base, length;
    _Atomic uint32_t perm; /* PERM_* */
    uint32_t pad;
};

struct shm_ctl_slot {
    _Atomic int64_t pid;     /* 0: free */
    _Atomic uint64_t seq;    /* odd while its process copies */
    _Atomic uint64_t broken; /* the odd seq of a copy the owner gave up on */
    _Atomic uint32_t reg;    /* the entry that copy touches */
    uint8_t pad[36];         /* one cache line per slot */
};
_Static_assert(sizeof(struct shm_ctl_slot) == 64, "a slot is a cache line");

struct shm_ctl {
    uint64_t magic;
    uint32_t version, nregs, nslots, pad;
    uint64_t incarnation; /* the owner engine's (transport.h) */
    struct shm_ctl_reg regs[SHM_CTL_REGS];
    struct shm_ctl_slot slots[SHM_CTL_PEERS];
};

/* ---- the owner's side --------------------------------------------------- */

struct shm_ctl_owner {
    struct shm_ctl *ctl;
    int fd;
    unsigned long long ino;
    uint64_t next_gen;              /* the next odd generation */
    uint8_t used[SHM_CTL_REGS / 8]; /* entries in use */
};

/* Creates the page (memfd, mapped, read-locked for as long as it lives:
 * peers' liveness checks look for that lock).  0 or a TENT_E* code. */
int shm_ctl_create(struct shm_ctl_owner *o, uint64_t incarnation);
void shm_ctl_destroy(struct shm_ctl_owner *o);
/* "memfd:<fd>:<inode>": what the segment attribute "shm_ctl" carries. */
void shm_ctl_handle(const struct shm_ctl_owner *o, char *buf, size_t len);
/* Enters a registered range; *idx and *gen are what the descriptor
 * publishes.  TENT_ENOMEM when every entry is taken. */
int shm_ctl_enter(struct shm_ctl_owner *o, uint64_t base, uint64_t length,
                  int perm, uint32_t *idx, uint64_t *gen);
/* Revokes entry idx: after it returns 0 no peer copy into the range runs.
 * A peer still copying after timeout_ms is named in *who_pid, its copy
 * marked broken, and TENT_EBUSY returned with the entry still revoked: the
 * caller either takes the memory away from that peer (and calls
 * shm_ctl_free) or gives the entry its generation back
 * (shm_ctl_restore). */
int shm_ctl_revoke(struct shm_ctl_owner *o, uint32_t idx, int timeout_ms,
                   long *who_pid);
void shm_ctl_restore(struct shm_ctl_owner *o, uint32_t idx, uint64_t gen);
void shm_ctl_free(struct shm_ctl_owner *o, uint32_t idx);

/* ---- the initiator's side ------------------------------------------------ */

/* A peer's page as an initiator maps it, and the slot it holds there. */
struct shm_ctl_view {
    struct shm_ctl *ctl;
    int fd; /* ours, for the peer's liveness (F_GETLK); -1 for this process */
    unsigned long long ino;
    struct shm_ctl_slot *slot;
    long pid;
};

/* Maps the page published as handle by process pid (self: an engine of
 * this process) and takes a slot.  0 or a TENT_E* code (TENT_ENOTSUP when
 * every slot is held by a live process: the request may go elsewhere;
 * TENT_ESTALE when the page's owner is not incarnation, unless 0). */
int shm_ctl_attach(struct shm_ctl_view *v, long pid, const char *handle,
                   bool self, uint64_t incarnation);
void shm_ctl_detach(struct shm_ctl_view *v);
/* Starts a copy into entry idx (write: the copy writes the owner's
 * memory): 0 when the entry still has generation gen and grants the
 * access, else TENT_ERANGE (revoked, or another registration now) or
 * TENT_EPERM; the copy may only run after 0, and every call is followed by
 * shm_ctl_end. */
int shm_ctl_begin(struct shm_ctl_view *v, uint32_t idx, uint64_t gen,
                  bool write);
/* Ends the copy; false when the owner gave up waiting for it (it revoked
 * the range while this copy stalled): the copy must be reported FAILED. */
bool shm_ctl_end(struct shm_ctl_view *v);

/* "<idx>:<gen>" of attribute "shm_reg"; 0 or TENT_EPROTO. */
int shm_ctl_parse_reg(const char *s, uint32_t *idx, uint64_t *gen);

#endif
