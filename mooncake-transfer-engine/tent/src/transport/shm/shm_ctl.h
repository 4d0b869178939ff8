/* The shm transport's control page: how an owner revokes what it
 * registered from peers that copy into its memory without asking it, and
 * how they learn what they may touch.
 *
 * One page per engine (a memfd, attribute "shm_ctl"), mapped read-write by
 * same-host peers: one entry per served buffer (generation, odd while
 * registered; range; permission; memfd inode and device; the
 * registration's access key) and one slot per
 * initiator process (pid, the entry it copies now, a sequence number odd
 * during the copy).  An initiator marks its slot, checks the entry's
 * generation, key, range and permission, copies and clears the slot; an owner
 * revoking an entry makes its generation even and waits for the slots that
 * show it (sequentially consistent on both sides).  The owner is the
 * process the kernel names behind its abstract control socket ("shm_sock",
 * SO_PEERCRED), never the descriptor's pid alone.  Everything read from a
 * peer's page is bounds-checked.  The owner's liveness is a robust mutex in
 * a second memfd that peers map read-only (the page names it).  More:
 * docs/transports/shm.md. */
#ifndef TENT_TRANSPORT_SHM_CTL_H
#define TENT_TRANSPORT_SHM_CTL_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_CTL_MAGIC   0x315443204d485354ull /* "TSHM CT1" */
#define SHM_CTL_VERSION 5
#define SHM_CTL_REGS    4096
#define SHM_CTL_PEERS   256

struct shm_ctl_reg {
    _Atomic uint64_t gen; /* odd: registered; even: revoked or free */
    _Atomic uint64_t base, length;
    /* The memfd behind the range (its offset 0 is base), 0 and 0 for
     * memory reached with process_vm_* only. */
    _Atomic uint64_t ino, dev;
    _Atomic uint32_t perm; /* PERM_* */
    uint32_t pad;
    /* The registration's access key (TENT_BUF_KEY_LEN bytes): a request
     * names the entry and must carry this key (shm_ctl_key_ok). */
    _Atomic uint64_t key[2];
};
_Static_assert(sizeof(struct shm_ctl_reg) == 64, "an entry is a cache line");

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
    /* The owner's memfd holding its liveness mutex (struct shm_ctl_alive):
     * its fd number in the owner and its inode. */
    int32_t alive_fd;
    uint32_t pad2;
    uint64_t alive_ino;
};

/* The liveness memfd: a robust, process-shared mutex the owner's control
 * thread holds for the engine's life.  Peers map it read-only, so none can
 * forge it or reach the robust-list pointers glibc keeps inside it. */
struct shm_ctl_alive {
    pthread_mutex_t mutex;
};

/* ---- the owner's side --------------------------------------------------- */

struct shm_ctl_owner {
    struct shm_ctl *ctl;
    int fd;
    unsigned long long ino;
    int sock;    /* the listening control socket, or -1 */
    int stop;    /* eventfd that stops its accept thread */
    bool thread; /* the accept thread runs (and holds alive->mutex) */
    sem_t ready; /* posted once the thread tried to lock alive->mutex */
    bool sem;    /* ready is initialised */
    bool holds;  /* it holds alive->mutex */
    long pid;    /* the creating process: a forked child stops nothing */
    struct shm_ctl_alive *alive; /* mapped read-write here */
    int alive_fd;
    pthread_t th;
    char sock_name[64];             /* its abstract name, without the NUL */
    uint64_t next_gen;              /* the next odd generation */
    uint8_t used[SHM_CTL_REGS / 8]; /* entries in use */
};

/* Creates the page and the liveness memfd (mapped) and the control socket,
 * whose thread only accepts and closes (a peer learns who listens from the
 * kernel on connect) and holds the liveness mutex until shm_ctl_destroy.
 * 0 or a TENT_E* code. */
int shm_ctl_create(struct shm_ctl_owner *o, uint64_t incarnation);
void shm_ctl_destroy(struct shm_ctl_owner *o);
/* "memfd:<fd>:<inode>": what the segment attribute "shm_ctl" carries. */
void shm_ctl_handle(const struct shm_ctl_owner *o, char *buf, size_t len);
/* Enters a registered range (ino and dev: its memfd's, or 0 and 0; key:
 * its access key, TENT_BUF_KEY_LEN bytes); *idx and *gen are what the
 * descriptor publishes.  TENT_ENOMEM when every entry is taken. */
int shm_ctl_enter(struct shm_ctl_owner *o, uint64_t base, uint64_t length,
                  int perm, uint64_t ino, uint64_t dev, const uint8_t *key,
                  uint32_t *idx, uint64_t *gen);
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
    const struct shm_ctl_alive *alive; /* mapped read-only */
    unsigned long long ino;
    struct shm_ctl_slot *slot;
    long pid;
};

/* Checks that desc_pid, the pid segment seg's descriptor publishes, is
 * the process behind the segment: connects to its control socket
 * sock_name and asks the kernel who listens there, which must be a
 * process of our user and desc_pid (TENT_EPERM, TENT_EPEER otherwise,
 * naming seg; TENT_ENOTSUP when nothing answers: another network
 * namespace, or a peer of an older layout).  *pidfd, unless pidfd is
 * NULL, gets a pidfd of it (-1 when the kernel has none). */
int shm_ctl_identify(const char *seg, const char *sock_name, long desc_pid,
                     int *pidfd);
/* Opens fd fdnum that process pid published (a memfd) with open flags
 * (O_CLOEXEC added) through /proc/<pid>/fd/<fdnum>, which path gets; when
 * pid is this process, returns fdnum itself: opening and later closing a
 * second fd of the file would drop this process's locks on it.  -1 with
 * errno on failure.  The caller closes the fd unless pid is its own. */
int shm_open_peer_fd(long pid, int fdnum, int flags, char *path, size_t len);
/* Maps the page published as handle by process pid (from
 * shm_ctl_identify; an engine of this process when it is ours) and takes a
 * slot.  0 or a TENT_E* code (TENT_ENOTSUP when every slot is held by a
 * live process: the request may go elsewhere; TENT_ESTALE when the page's
 * owner is not incarnation, unless 0). */
int shm_ctl_attach(struct shm_ctl_view *v, long pid, const char *handle,
                   uint64_t incarnation);
void shm_ctl_detach(struct shm_ctl_view *v);
/* An entry as shm_ctl_begin read it. */
struct shm_ctl_entry {
    uint64_t base, length, ino, dev;
    uint32_t perm;
    uint8_t key[16]; /* TENT_BUF_KEY_LEN */
};

/* Starts a copy into entry idx (write: the copy writes the owner's
 * memory): 0 when the entry still has generation gen and grants the
 * access, with the entry in *e (stable until shm_ctl_end: the owner waits
 * for the copy before it reuses the entry), else TENT_ERANGE (revoked, or
 * another registration now), TENT_EPERM or TENT_EPROTO; the copy may only
 * run after 0, only inside [e->base, +e->length) (shm_ctl_inside), and
 * every call is followed by shm_ctl_end. */
int shm_ctl_begin(struct shm_ctl_view *v, uint32_t idx, uint64_t gen,
                  bool write, struct shm_ctl_entry *e);
/* Whether [addr, +len) lies inside the entry (no wrap). */
static inline bool shm_ctl_inside(const struct shm_ctl_entry *e, uint64_t addr,
                                  uint64_t len)
{
    return addr >= e->base && len <= e->length &&
           addr - e->base <= e->length - len;
}
/* Whether key (TENT_BUF_KEY_LEN bytes, the descriptor's) is the entry's,
 * in time independent of where they differ.  A request whose key is not
 * is refused exactly as a range outside the entry. */
bool shm_ctl_key_ok(const struct shm_ctl_entry *e, const uint8_t *key);
/* Ends the copy; false when the owner gave up waiting for it (it revoked
 * the range while this copy stalled): the copy must be reported FAILED. */
bool shm_ctl_end(struct shm_ctl_view *v);
/* Whether the page's owner engine still runs, without a system call: the
 * kernel marks its alive mutex's word FUTEX_OWNER_DIED when the thread
 * holding it ends (its process exits, is killed or execs), and a destroyed
 * engine leaves it unlocked.  Ordered after the caller's earlier copies. */
bool shm_ctl_owner_alive(const struct shm_ctl_view *v);

/* "<idx>:<gen>" of attribute "shm_reg"; 0 or TENT_EPROTO. */
int shm_ctl_parse_reg(const char *s, uint32_t *idx, uint64_t *gen);

#endif
