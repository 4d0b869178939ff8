/* shm transport: same-host copies without a socket.
 *
 * Owner side (add_buffer): memory from tent_allocate_memory is a memfd
 * mapping published as "memfd:<fd>:<inode>" (attribute "shm"), with a POSIX
 * read lock held while the memory is allocated; other host memory is
 * published as "cma" (process_vm_readv/writev).  Initiator side: a target
 * on the same host is identified by the kernel behind its control socket
 * (shm_ctl.h), every copy must lie inside the entry its owner wrote, and a
 * memfd is mapped only when it is the entry's inode; mappings are cached in
 * the peer handle.  Copies run in submit; a copy is COMPLETED once a check
 * that began after it found the owner engine still running (its control
 * page's robust mutex, read without a system call), and a failed check is
 * sticky.  The whole design: docs/transports/shm.md. */
#include "common/clock.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "sched/slots.h"
#include "transport/shm/shm_ctl.h"
#include "transport/shm/shm_handle.h"
#include "transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* Verification state of a mapping (or, for cma, of a peer): copies take
 * a generation after they finish; a good check that began at generation g
 * vouches for every copy with a smaller one. */
struct shm_check {
    _Atomic uint64_t gen;
    _Atomic uint64_t ok_upto;
    atomic_bool bad; /* sticky: the peer died or dropped the memory */
};

/* A peer process we copy to/from. */
struct shm_proc {
    long pid;
    struct shm_check chk; /* cma copies */
    /* Its control page (shm_ctl.h), mapped on first use. */
    struct shm_ctl_view ctl;
};

struct shm_map;

/* The peer handle (transport.h): the peer process, its control page and
 * the mappings of its memory, read from the descriptor once (peer_open)
 * and all gone with peer_close.  A handle for this engine's own segment
 * holds nothing (pid -1). */
struct shm_peer {
    struct tent_peer base;
    long pid;            /* the descriptor's; used once identified */
    bool identified;     /* the kernel named pid behind the control socket */
    char ctl_handle[64]; /* "" when the segment publishes none */
    char sock_name[128]; /* "" when the segment publishes none */
    struct shm_proc proc;
    struct shm_map *maps; /* guarded by the transport's lock */
};

struct shm_map {
    struct shm_check chk;
    atomic_uint refs; /* the cache's (while listed) + one per unchecked copy */
    bool listed;      /* in its peer's maps; guarded by t->lock */
    struct shm_peer *peer;
    long pid;
    unsigned long long ino, dev;
    int fd;     /* ours, for F_GETLK; -1 when pid is this process */
    int peerfd; /* the owner's fd number (checked when pid is ours) */
    void *addr;
    size_t len;    /* the buffer's length */
    size_t maplen; /* mapped: rounded to the file's block (huge page) size */
    bool writable;
    struct shm_map *next;
};

struct shm_task {
    int state;      /* enum tent_xfer_state */
    bool unchecked; /* copied; COMPLETED once a later check vouches for it */
    uint64_t gen;
    struct shm_map *map;   /* memfd copy awaiting its check (holds a ref) */
    struct shm_proc *proc; /* cma copy awaiting its check */
    uint64_t bytes;
    struct tent_xerr *err; /* FAILED: its cause (NULL: out of memory) */
    int code;              /* FAILED: its code */
};

struct shm_sub {
    struct tent_sub_batch base;
    struct shm_task *tasks;
    size_t room; /* tasks allocated (>= base.capacity when reused) */
    /* One past the highest slot submitted since allocation: slots above it
     * are as allocated (zero), so freeing need not look at them.  Submits
     * of one batch may run at once (on different slots). */
    atomic_size_t used;
};

/* lock guards the peers' maps and control pages; it is taken under no
 * other lock of the transport and no runtime lock is taken while it is
 * held. */
struct shm_transport {
    struct tent_transport base;
    char host_id[128];
    int revoke_timeout_ms; /* the engine's revoke_timeout_ms */
    /* Ours: peers check every copy into our memory against it.  Entries
     * change under the engine's registration lock only (add_buffer,
     * remove_buffer), so they need no lock of ours. */
    struct shm_ctl_owner own;
    pthread_mutex_t lock;
    atomic_size_t nmaps; /* mappings alive, listed or awaiting checks */
    /* The last sub-batch freed, its tasks released: the next batch takes
     * it instead of allocating and zeroing one. */
    _Atomic(struct shm_sub *) spare;
    /* TENT's slots shared by the host's engines (shared_quota_shm_path),
     * or NULL: LOW copies wait for their slot while other classes run. */
    struct tent_slots *slots;
};

/* A LOW copy checks its slot before each piece of this size. */
#define SLOT_PIECE (256u << 10)

size_t tent_shm_mapping_count(struct tent_transport *t)
{
    return atomic_load(&((struct shm_transport *)t)->nmaps);
}

int tent_shm_copies_in_progress(struct tent_transport *base)
{
    struct shm_transport *t = (struct shm_transport *)base;
    int n = 0;
    for (int i = 0; i < SHM_CTL_PEERS; i++)
        n += atomic_load(&t->own.ctl->slots[i].pid) != 0 &&
             (atomic_load(&t->own.ctl->slots[i].seq) & 1);
    return n;
}

static void map_unref(struct shm_transport *t, struct shm_map *m)
{
    if (atomic_fetch_sub(&m->refs, 1) != 1)
        return;
    munmap(m->addr, m->maplen);
    if (m->fd >= 0)
        close(m->fd);
    free(m);
    atomic_fetch_sub(&t->nmaps, 1);
}

/* Drops m from the cache; caller holds t->lock. */
static void map_unlist_locked(struct shm_transport *t, struct shm_map *m)
{
    if (!m->listed)
        return;
    for (struct shm_map **pp = &m->peer->maps; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    m->listed = false;
    map_unref(t, m);
}

static struct shm_transport *shm_of(struct tent_transport *t)
{
    return (struct shm_transport *)t;
}

/* The attributes shm publishes: the control page (segment), and per
 * buffer its mapping handle and its control entry. */
#define SHM_CTL_ATTR  "shm_ctl"
#define SHM_ATTR      "shm"
#define SHM_REG_ATTR  "shm_reg"
#define SHM_SOCK_ATTR "shm_sock"

static int shm_install(struct tent_transport *base)
{
    struct shm_transport *t = shm_of(base);
    const struct tent_xport_env *env = base->env;
    const char *id = env->host_id;
    if (!id || !*id || strlen(id) >= sizeof(t->host_id))
        return tent_set_error(TENT_ENODEV,
                              "shm: this engine publishes no host identity");
    snprintf(t->host_id, sizeof(t->host_id), "%s", id);
    t->revoke_timeout_ms = env->revoke_timeout_ms;
    const char *qname = "";
    int64_t iv = 2;
    int rc = env->cfg ? tent_config_get_string(
                            env->cfg, "transports/shm/shared_quota_shm_path",
                            "", &qname)
                      : TENT_OK;
    if (!rc && strlen(qname) > 127)
        rc = tent_set_error(TENT_ECONFIG,
                            "config key 'transports/shm/shared_quota_shm_path' "
                            "= \"%s\" is longer than 127 characters",
                            qname);
    if (!rc && env->cfg)
        rc = tent_config_get_int_range(
            env->cfg, "transports/shm/slot_rotation_interval_ms", 2, 1, 60000,
            &iv);
    if (rc)
        return rc;
    t->slots = NULL;
    if (qname[0] && tent_slots_open(qname, (int)iv, &t->slots) != TENT_OK)
        LOG_WARN("shm: no priority slots shared with other processes: %s",
                 tent_last_error());
    rc = shm_ctl_create(&t->own, env->incarnation);
    if (rc)
        return rc;
    char h[64];
    shm_ctl_handle(&t->own, h, sizeof(h));
    rc = env->publish_attr(env->ctx, SHM_CTL_ATTR, h);
    if (!rc)
        rc = env->publish_attr(env->ctx, SHM_SOCK_ATTR, t->own.sock_name);
    if (rc) {
        env->publish_attr(env->ctx, SHM_CTL_ATTR, NULL);
        shm_ctl_destroy(&t->own);
        tent_slots_close(t->slots);
        t->slots = NULL;
        return rc;
    }
    pthread_mutex_init(&t->lock, NULL);
    return TENT_OK;
}

static void shm_uninstall(struct tent_transport *base)
{
    struct shm_transport *t = shm_of(base);
    struct shm_sub *sp = atomic_exchange(&t->spare, NULL);
    if (sp)
        tent_sub_batch_delete(&sp->base, sp->tasks);
    pthread_mutex_destroy(&t->lock);
    if (base->env) {
        base->env->publish_attr(base->env->ctx, SHM_CTL_ATTR, NULL);
        base->env->publish_attr(base->env->ctx, SHM_SOCK_ATTR, NULL);
    }
    shm_ctl_destroy(&t->own);
    tent_slots_close(t->slots);
    t->slots = NULL;
}

static uint32_t shm_caps(TENT_UNUSED struct tent_transport *t)
{
    return TENT_CAP_DRAM_TO_DRAM;
}

static long peer_pid(struct tent_transport *t, const struct tent_seg_view *seg)
{
    char pid[32];
    return tent_shm_parse_pid(
        t->env->seg_attr(t->env->ctx, seg, "pid", pid, sizeof(pid)) ? pid
                                                                    : NULL);
}

static bool shm_can_reach(struct tent_transport *t,
                          const struct tent_seg_view *target)
{
    if (target->local)
        return true;
    if (peer_pid(t, target) < 0)
        return false;
    return t->env->seg_on_host(t->env->ctx, target);
}

/* peer_open: the peer's pid, control socket and control page as its
 * descriptor publishes them; on first use the kernel names the process
 * behind the socket, then the page is attached and memory mapped. */
static int shm_peer_open(struct tent_transport *t,
                         const struct tent_seg_view *seg, uint64_t incarnation,
                         struct tent_peer **out)
{
    long pid = seg->local ? -1 : peer_pid(t, seg);
    if (!seg->local && pid < 0)
        return tent_set_error(TENT_EPEER, "shm: segment '%s' publishes no pid",
                              seg->name);
    struct shm_peer *sp = calloc(1, sizeof(*sp));
    if (!sp)
        return tent_set_error(TENT_ENOMEM, "shm: out of memory");
    sp->base.owner = t;
    sp->base.incarnation = incarnation;
    sp->pid = pid;
    sp->proc.pid = pid;
    if (pid >= 0) {
        if (!t->env->seg_attr(t->env->ctx, seg, SHM_CTL_ATTR, sp->ctl_handle,
                              sizeof(sp->ctl_handle)))
            sp->ctl_handle[0] = '\0';
        if (!t->env->seg_attr(t->env->ctx, seg, SHM_SOCK_ATTR, sp->sock_name,
                              sizeof(sp->sock_name)))
            sp->sock_name[0] = '\0';
    }
    *out = &sp->base;
    return TENT_OK;
}

/* peer_close: no copy of the peer awaits its check any more; its mappings
 * and control page go. */
static void shm_peer_close(struct tent_transport *base, struct tent_peer *h)
{
    struct shm_transport *t = shm_of(base);
    struct shm_peer *sp = (struct shm_peer *)h;
    pthread_mutex_lock(&t->lock);
    while (sp->maps)
        map_unlist_locked(t, sp->maps);
    if (sp->proc.ctl.ctl)
        shm_ctl_detach(&sp->proc.ctl);
    pthread_mutex_unlock(&t->lock);
    free(sp);
}

static int shm_add_buffer(struct tent_transport *base, struct tent_buffer *buf)
{
    struct shm_transport *t = shm_of(base);
    if (buf->is_device)
        return tent_set_error(TENT_ENOTSUP,
                              "shm: location '%s' is not host memory",
                              buf->location);
    if (buf->perm == PERM_LOCAL_READ_WRITE)
        return tent_set_error(TENT_ENOTSUP,
                              "shm: buffer is PERM_LOCAL_READ_WRITE, not "
                              "shared with peers");
    struct stat st;
    char handle[64] = "cma";
    uint64_t ino = 0, dev = 0;
    if (buf->alloc_fd >= 0 && fstat(buf->alloc_fd, &st) == 0) {
        /* A second lock of this process on the file is a no-op; the lock
         * lasts until the memory's fd is closed (tent_free_memory). */
        struct flock lk = {.l_type = F_RDLCK, .l_whence = SEEK_SET};
        if (fcntl(buf->alloc_fd, F_SETLK, &lk) != 0)
            return tent_set_error(TENT_EIO,
                                  "shm: cannot lock the memfd of [%#llx, "
                                  "+%llu): %s",
                                  (unsigned long long)buf->base,
                                  (unsigned long long)buf->length,
                                  strerror(errno));
        snprintf(handle, sizeof(handle), "memfd:%d:%llu", buf->alloc_fd,
                 (unsigned long long)st.st_ino);
        ino = (uint64_t)st.st_ino;
        dev = (uint64_t)st.st_dev;
    }
    uint32_t idx;
    uint64_t gen;
    int rc = shm_ctl_enter(&t->own, buf->base, buf->length, buf->perm, ino, dev,
                           buf->key, &idx, &gen);
    if (rc)
        return rc;
    char reg[48];
    snprintf(reg, sizeof(reg), "%u:%llu", idx, (unsigned long long)gen);
    rc = tent_attrs_set(&buf->attrs, SHM_ATTR, handle);
    if (!rc)
        rc = tent_attrs_set(&buf->attrs, SHM_REG_ATTR, reg);
    if (rc) {
        shm_ctl_free(&t->own, idx);
        tent_attrs_set(&buf->attrs, SHM_ATTR, NULL);
    }
    return rc;
}

/* Revokes the buffer from every peer (shm_ctl.h): no peer copy into it runs
 * once this returns 0.  A peer stalled mid-copy for revoke_timeout_ms: the
 * engine moves its own mapping of engine-allocated memory away from the
 * pages that peer maps (env->reclaim_pages) and the revocation stands;
 * other memory stays registered and the error names the peer. */
static int shm_remove_buffer(struct tent_transport *base,
                             struct tent_buffer *buf)
{
    struct shm_transport *t = shm_of(base);
    const struct tent_xport_env *env = base->env;
    uint32_t idx;
    uint64_t gen;
    if (shm_ctl_parse_reg(tent_attrs_get(buf->attrs, SHM_REG_ATTR), &idx,
                          &gen) != TENT_OK)
        return tent_set_error(TENT_EINVAL,
                              "shm: buffer [%#llx, +%llu) carries no control "
                              "entry",
                              (unsigned long long)buf->base,
                              (unsigned long long)buf->length);
    long who = 0;
    int rc = shm_ctl_revoke(&t->own, idx, t->revoke_timeout_ms, &who);
    if (rc == TENT_EBUSY) {
        int rrc = env ? env->reclaim_pages(env->ctx, buf) : TENT_ENOTSUP;
        if (rrc == TENT_OK) {
            LOG_WARN("shm: peer process %ld stalled copying into [%#llx, "
                     "+%llu) for %d ms; the range now lives in fresh pages "
                     "and that copy is reported FAILED to it",
                     who, (unsigned long long)buf->base,
                     (unsigned long long)buf->length, t->revoke_timeout_ms);
            rc = TENT_OK;
        } else {
            char why[256];
            snprintf(why, sizeof(why), "%s", tent_last_error());
            shm_ctl_restore(&t->own, idx, gen);
            return tent_set_error(TENT_EBUSY,
                                  "shm: peer process %ld still copies into "
                                  "it after %d ms (revoke_timeout_ms), and "
                                  "it cannot be taken back (%s)",
                                  who, t->revoke_timeout_ms, why);
        }
    }
    if (rc)
        return rc;
    shm_ctl_free(&t->own, idx);
    tent_attrs_set(&buf->attrs, SHM_REG_ATTR, NULL);
    tent_attrs_set(&buf->attrs, SHM_ATTR, NULL);
    return TENT_OK;
}

static int shm_alloc_sub(struct tent_transport *t, size_t capacity,
                         struct tent_sub_batch **out)
{
    struct shm_sub *sp = atomic_exchange(&shm_of(t)->spare, NULL);
    if (sp && sp->room >= capacity) {
        sp->base.capacity = capacity;
        atomic_store_explicit(&sp->used, 0, memory_order_relaxed);
        *out = &sp->base;
        return TENT_OK;
    }
    if (sp)
        tent_sub_batch_delete(&sp->base, sp->tasks);
    struct shm_task *tasks;
    int rc = tent_sub_batch_new(t, sizeof(struct shm_sub), capacity,
                                sizeof(*tasks), (void **)&tasks, out);
    if (!rc) {
        ((struct shm_sub *)*out)->tasks = tasks;
        ((struct shm_sub *)*out)->room = capacity;
    }
    return rc;
}

/* Forgets a task's pending check (its mapping reference). */
static void task_release(struct shm_transport *t, struct shm_task *k)
{
    if (k->map)
        map_unref(t, k->map);
    k->map = NULL;
    k->proc = NULL;
    k->unchecked = false;
}

/* Makes the task FAILED with its cause. */
__attribute__((format(printf, 4, 5))) static void
task_fail(struct shm_task *k, int code, int native, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    free(k->err);
    k->err = tent_xerr_new(code, native, "%s", msg);
    k->code = code;
    k->state = TENT_XFER_FAILED;
    k->bytes = 0;
}

static int shm_free_sub(struct tent_transport *t, struct tent_sub_batch *base)
{
    struct shm_sub *sb = (struct shm_sub *)base;
    size_t used = atomic_load_explicit(&sb->used, memory_order_relaxed);
    for (size_t i = 0; i < used; i++) {
        struct shm_task *k = &sb->tasks[i];
        if (k->map || k->proc || k->unchecked)
            task_release(shm_of(t), k);
        if (k->err) {
            free(k->err);
            k->err = NULL;
        }
    }
    /* kept as the spare, as released as a fresh one is zeroed */
    sb = atomic_exchange(&shm_of(t)->spare, sb);
    if (sb)
        tent_sub_batch_delete(&sb->base, sb->tasks);
    return TENT_OK;
}

/* Does the peer still hold m's memory?  Its read lock on the memfd is
 * still there (an exited process holds no locks, so this also proves it
 * alive); in this process, the owner's fd still names the inode.  Used
 * when mapping anew, to drop the cached mappings of freed memory. */
static bool map_held(const struct shm_map *m)
{
    if (m->fd < 0) {
        struct stat st;
        return fstat(m->peerfd, &st) == 0 &&
               (unsigned long long)st.st_ino == m->ino;
    }
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    return fcntl(m->fd, F_GETLK, &lk) == 0 && lk.l_type != F_UNLCK &&
           (long)lk.l_pid == m->pid;
}

/* Drops the peer's cached mappings whose memory it no longer holds;
 * caller holds t->lock. */
static void sweep_locked(struct shm_transport *t, struct shm_peer *sp)
{
    for (struct shm_map *m = sp->maps, *n; m; m = n) {
        n = m->next;
        if (atomic_load(&m->chk.bad) || !map_held(m)) {
            atomic_store(&m->chk.bad, true);
            map_unlist_locked(t, m);
        }
    }
}

/* Maps (or finds) the memfd that entry e of process sp names: handle
 * (the descriptor's) says which of the owner's fds holds it, and that fd
 * must be the inode the owner wrote in the entry.  The mapping starts at
 * the file's offset 0, which is e->base. */
static int map_get_locked(struct shm_transport *t, struct shm_peer *sp,
                          const char *handle, const struct shm_ctl_entry *e,
                          bool write, struct shm_map **out)
{
    long pid = sp->pid;
    int fdnum;
    unsigned long long ino;
    int rc = tent_shm_parse_handle(handle, &fdnum, &ino);
    if (rc)
        return rc;
    if (e->ino == 0 || ino != e->ino)
        return tent_set_error(TENT_EPEER,
                              "shm: memfd inode %llu is not the memory pid "
                              "%ld registered at %#" PRIx64,
                              ino, pid, e->base);
    for (struct shm_map *m = sp->maps; m; m = m->next)
        if (m->ino == e->ino && m->dev == e->dev && m->len >= e->length &&
            (m->writable || !write) && !atomic_load(&m->chk.bad)) {
            *out = m;
            return TENT_OK;
        }
    sweep_locked(t, sp);
    bool rw = e->perm == PERM_GLOBAL_READ_WRITE;
    /* Another engine of this process: its fd as it is, which other peers'
     * checks rely on (shm_open_peer_fd). */
    bool self = pid == (long)getpid();
    char path[64];
    int fd = shm_open_peer_fd(pid, fdnum, rw ? O_RDWR : O_RDONLY, path,
                              sizeof(path));
    if (fd < 0)
        return tent_set_error(TENT_EPEER, "shm: open %s failed: %s", path,
                              strerror(errno));
    struct stat st;
    rc = TENT_OK;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != e->ino ||
        (uint64_t)st.st_dev != e->dev)
        rc = tent_set_error(TENT_EPEER,
                            "shm: %s is not the memory pid %ld registered at "
                            "%#" PRIx64 " (inode %llu)",
                            path, pid, e->base, ino);
    else if ((uint64_t)st.st_size < e->length)
        rc = tent_set_error(TENT_EPEER,
                            "shm: %s holds %lld bytes, less than the buffer",
                            path, (long long)st.st_size);
    struct shm_map *m = rc ? NULL : calloc(1, sizeof(*m));
    if (!rc && !m)
        rc = tent_set_error(TENT_ENOMEM, "shm: out of memory");
    if (rc) {
        if (!self)
            close(fd);
        return rc;
    }
    /* hugetlbfs wants whole huge pages; st_blksize is that size there. */
    uint64_t blk = st.st_blksize > 0 ? (uint64_t)st.st_blksize : 4096;
    uint64_t maplen = (e->length + blk - 1) / blk * blk;
    if (maplen > (uint64_t)st.st_size)
        maplen = e->length;
    void *a = mmap(NULL, maplen, PROT_READ | (rw ? PROT_WRITE : 0), MAP_SHARED,
                   fd, 0);
    if (a == MAP_FAILED) {
        int err = errno;
        if (!self)
            close(fd);
        free(m);
        return tent_set_error(TENT_EPEER, "shm: mmap of %s failed: %s", path,
                              strerror(err));
    }
    atomic_init(&m->refs, 1);
    m->listed = true;
    atomic_fetch_add(&t->nmaps, 1);
    m->pid = pid;
    m->ino = e->ino;
    m->dev = e->dev;
    m->fd = self ? -1 : fd;
    m->peerfd = fdnum;
    m->addr = a;
    m->len = e->length;
    m->maplen = maplen;
    m->writable = rw;
    m->peer = sp;
    m->next = sp->maps;
    sp->maps = m;
    *out = m;
    return TENT_OK;
}

/* process_vm_* copy; a refusal before any byte moved is a submit error
 * (*native its errno). */
static int cma_copy(long pid, const struct tent_xfer *x, int *state,
                    int *native)
{
    uint64_t done = 0;
    while (done < x->length) {
        struct iovec l = {(char *)x->local + done, x->length - done};
        struct iovec r = {(void *)(uintptr_t)(x->remote + done),
                          x->length - done};
        ssize_t n = x->opcode == OPCODE_WRITE
                        ? process_vm_writev((pid_t)pid, &l, 1, &r, 1, 0)
                        : process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
        if (n <= 0) {
            int err = n < 0 ? errno : EIO;
            *native = err;
            if (done == 0)
                return tent_set_error(TENT_ENOTSUP,
                                      "shm: process_vm_%s of pid %ld refused: "
                                      "%s",
                                      x->opcode == OPCODE_WRITE ? "writev"
                                                                : "readv",
                                      pid, strerror(err));
            *state = TENT_XFER_FAILED;
            return TENT_OK;
        }
        done += (uint64_t)n;
    }
    *state = TENT_XFER_COMPLETED;
    return TENT_OK;
}

/* A run: consecutive requests of one submit call to the same target buffer.
 * It is looked up once and its copies run under one mark of our slot in the
 * owner's control page (shm_ctl.h): begun before the first copy, ended after
 * the last.  map holds a reference for the call. */
struct shm_run {
    const struct tent_seg_view *target;
    const struct tent_buffer *tb;
    bool write;
    bool marked; /* our slot is marked: shm_ctl_end is due */
    long pid;
    struct shm_proc *proc;
    struct shm_map *map; /* NULL for cma */
    size_t first;        /* the run's first request */
    /* The owner's entry: every copy of the run must lie inside it. */
    struct shm_ctl_entry ent;
};

/* The refusal of a request outside the owner's entry, and of one whose
 * descriptor key is not the entry's: one code, one message, so the answer
 * does not tell a wrong key from a wrong range. */
static int refuse_range(const struct tent_xfer *x, long pid)
{
    return tent_set_error(TENT_ERANGE,
                          "shm: [%#" PRIx64 ", +%" PRIu64 ") of segment '%s' "
                          "is outside what pid %ld registered there under the "
                          "descriptor's access key",
                          x->remote, x->length, x->target->name, pid);
}

/* On first use: the process behind the peer's control socket (which must
 * be the pid its descriptor names), then its control page (checked to be
 * the incarnation the handle was opened for).  Caller holds t->lock. */
static int proc_ctl_locked(struct shm_peer *sp, const char *name)
{
    if (sp->proc.ctl.ctl)
        return TENT_OK;
    if (!sp->ctl_handle[0])
        return tent_set_error(
            TENT_ENOTSUP, "shm: segment '%s' publishes no control page", name);
    if (!sp->identified) {
        int rc = shm_ctl_identify(name, sp->sock_name, sp->pid, NULL);
        if (rc)
            return rc;
        sp->identified = true;
    }
    return shm_ctl_attach(&sp->proc.ctl, sp->pid, sp->ctl_handle,
                          sp->base.incarnation);
}

/* Ends run r: our mark in the owner's page goes, and when the owner gave up
 * waiting for these copies (it revoked the buffer while we stalled) they
 * are FAILED rather than vouched for later. */
static void run_end(struct shm_transport *t, struct shm_run *r,
                    struct shm_sub *sb, const struct tent_xfer *reqs, size_t to)
{
    if (r->marked && !shm_ctl_end(&r->proc->ctl))
        for (size_t j = r->first; j < to; j++) {
            const struct tent_xfer *x = &reqs[j];
            if (x->target_buf != r->tb || x->target->local ||
                x->slot >= sb->base.capacity)
                continue;
            struct shm_task *k = &sb->tasks[x->slot];
            if (k->state == TENT_XFER_FAILED)
                continue;
            task_release(t, k);
            task_fail(k, TENT_EPEER, 0,
                      "shm: pid %ld revoked [%#llx, +%llu) while this copy "
                      "stalled in it",
                      r->pid, (unsigned long long)r->tb->base,
                      (unsigned long long)r->tb->length);
        }
    if (r->map)
        map_unref(t, r->map);
    memset(r, 0, sizeof(*r));
}

/* Starts the run of request i: lookup, then the mark.  A refusal touches
 * nothing. */
static int run_begin(struct shm_transport *t, const struct tent_xfer *x,
                     size_t i, struct shm_run *r)
{
    const struct tent_buffer *tb = x->target_buf;
    bool write = x->opcode == OPCODE_WRITE;
    struct shm_peer *sp = (struct shm_peer *)x->peer;
    if (!sp || sp->base.owner != &t->base || sp->pid < 0)
        return tent_set_error(TENT_EINVAL,
                              "shm: request to segment '%s' without its shm "
                              "peer handle",
                              x->target->name);
    uint32_t idx;
    uint64_t gen;
    int rc =
        shm_ctl_parse_reg(tent_attrs_get(tb->attrs, SHM_REG_ATTR), &idx, &gen);
    if (rc)
        return rc;
    const char *handle = tent_attrs_get(tb->attrs, SHM_ATTR);
    bool memfd = handle && strncmp(handle, "memfd:", 6) == 0;
    if (!memfd && (!handle || strcmp(handle, "cma") != 0))
        return tent_set_error(TENT_ENOTSUP,
                              "shm: buffer at %#" PRIx64 " has no shm handle",
                              tb->base);
    pthread_mutex_lock(&t->lock);
    struct shm_proc *p = &sp->proc;
    rc = proc_ctl_locked(sp, x->target->name);
    if (!rc && !shm_ctl_owner_alive(&p->ctl))
        rc = tent_set_error(TENT_EPEER,
                            "shm: the engine of pid %ld behind segment '%s' "
                            "has ended: nothing copied",
                            sp->pid, x->target->name);
    if (rc) {
        pthread_mutex_unlock(&t->lock);
        return rc;
    }
    long pid = sp->pid;
    /* Marked before the check, so the owner either sees this run or we see
     * its revocation; the entry it reads stays until the mark ends. */
    struct shm_ctl_entry ent;
    rc = shm_ctl_begin(&p->ctl, idx, gen, write, &ent);
    /* The descriptor's key must open the entry before anything is mapped
     * or copied (memfd and cma alike): a descriptor naming another's entry
     * without its key reaches nothing. */
    if (!rc && !shm_ctl_key_ok(&ent, tb->key))
        rc = refuse_range(x, pid);
    struct shm_map *m = NULL;
    if (!rc && memfd) {
        rc = map_get_locked(t, sp, handle, &ent, write, &m);
        if (!rc)
            atomic_fetch_add(&m->refs, 1);
    }
    pthread_mutex_unlock(&t->lock);
    if (rc) {
        shm_ctl_end(&p->ctl);
        return rc;
    }
    *r = (struct shm_run){.target = x->target,
                          .tb = tb,
                          .write = write,
                          .marked = true,
                          .pid = pid,
                          .proc = p,
                          .map = m,
                          .first = i,
                          .ent = ent};
    return TENT_OK;
}

static int submit_one(struct shm_transport *t, const struct tent_xfer *x,
                      struct shm_task *k, struct shm_run *c, int *native)
{
    const struct tent_buffer *tb = x->target_buf;
    task_release(t, k);
    free(k->err);
    k->err = NULL;
    k->code = 0;
    if (!tb)
        return tent_set_error(TENT_ERANGE, "shm: request has no target buffer");
    if (x->target->local) {
        void *r = (void *)(uintptr_t)x->remote;
        /* Both ends are in this process and may overlap. */
        if (x->opcode == OPCODE_WRITE)
            memmove(r, x->local, x->length);
        else
            memmove(x->local, r, x->length);
        k->state = TENT_XFER_COMPLETED;
        k->bytes = x->length;
        return TENT_OK;
    }
    struct shm_map *m = c->map;
    struct shm_check *chk = m ? &m->chk : &c->proc->chk;
    /* A check already found the peer gone: refuse, touching nothing. */
    if (atomic_load(&chk->bad)) {
        if (m)
            return tent_set_error(TENT_EPEER,
                                  "shm: buffer at %#" PRIx64 " of pid %ld is "
                                  "no longer registered",
                                  tb->base, c->pid);
        return tent_set_error(TENT_EPEER, "shm: peer process %ld has exited",
                              c->pid);
    }
    /* The descriptor's buffer proves nothing: the owner's entry must hold
     * the range (m maps the whole entry). */
    if (!shm_ctl_inside(&c->ent, x->remote, x->length))
        return refuse_range(x, c->pid);
    bool low = tent_prio_class(x->priority) == TENT_PRIO_LOW;
    if (t->slots && !low)
        tent_slots_note(t->slots, tent_prio_class(x->priority), tent_now_ns());
    uint64_t slot_max =
        t->slots
            ? 3ull * 1000000ull * (uint64_t)tent_slots_interval_ms(t->slots)
            : 0;
    if (m) {
        char *r = (char *)m->addr + (x->remote - c->ent.base);
        char *l = x->local;
        for (uint64_t off = 0; off < x->length; off += SLOT_PIECE) {
            uint64_t len =
                x->length - off < SLOT_PIECE ? x->length - off : SLOT_PIECE;
            if (low && t->slots)
                tent_slots_wait(t->slots, TENT_PRIO_LOW, slot_max);
            if (x->opcode == OPCODE_WRITE)
                memcpy(r + off, l + off, len);
            else
                memcpy(l + off, r + off, len);
        }
    } else {
        if (low && t->slots)
            tent_slots_wait(t->slots, TENT_PRIO_LOW, slot_max);
        int state = TENT_XFER_COMPLETED;
        int rc = cma_copy(c->pid, x, &state, native);
        if (rc)
            return rc;
        if (state != TENT_XFER_COMPLETED) {
            task_fail(k, TENT_EPEER, *native,
                      "shm: process_vm_%s of pid %ld failed part-way: %s",
                      x->opcode == OPCODE_WRITE ? "writev" : "readv", c->pid,
                      strerror(*native));
            return TENT_OK;
        }
    }
    /* Finished: its generation is taken after the copy, so only a check
     * that begins later can vouch for it. */
    k->gen = atomic_load(&chk->gen);
    k->state = TENT_XFER_PENDING;
    k->unchecked = true;
    k->bytes = x->length; /* reported once the check vouches for it */
    k->proc = c->proc;
    if (m) {
        atomic_fetch_add(&m->refs, 1);
        k->map = m;
    }
    return TENT_OK;
}

static void task_settle(struct shm_transport *t, struct shm_task *k);

static int shm_submit(struct tent_transport *base, struct tent_sub_batch *sbb,
                      const struct tent_xfer *reqs, size_t n,
                      struct tent_xfer_result *res)
{
    struct shm_transport *t = shm_of(base);
    struct shm_sub *sb = (struct shm_sub *)sbb;
    struct shm_run c = {0};
    int first = TENT_OK;
    size_t top = 0; /* one past the highest slot taken */
    for (size_t i = 0; i < n; i++) {
        const struct tent_xfer *x = &reqs[i];
        int native = 0;
        int rc = TENT_OK;
        if (x->slot >= sb->base.capacity)
            rc = tent_set_error(TENT_EINVAL, "shm: slot %u beyond capacity",
                                x->slot);
        else if (x->slot >= top)
            top = x->slot + 1;
        bool remote = x->target_buf && !x->target->local;
        if (!rc && remote &&
            !(c.tb == x->target_buf && c.target == x->target &&
              (c.write || x->opcode != OPCODE_WRITE) && c.proc)) {
            run_end(t, &c, sb, reqs, i);
            rc = run_begin(t, x, i, &c);
        }
        if (!rc)
            rc = submit_one(t, x, &sb->tasks[x->slot], &c, &native);
        res[i].code = rc;
        if (rc) {
            tent_xres_fail(&res[i], rc, native);
            if (!first)
                first = rc;
        }
    }
    run_end(t, &c, sb, reqs, n);
    size_t used = atomic_load_explicit(&sb->used, memory_order_relaxed);
    while (top > used && !atomic_compare_exchange_weak_explicit(
                             &sb->used, &used, top, memory_order_relaxed,
                             memory_order_relaxed))
        ;
    /* Every copy of this call has finished: one check now (per mapping,
     * as a status round would make) vouches for them all, so the runtime
     * need not ask again.  A copy the check does not vouch for stays as
     * it is and is settled by status. */
    for (size_t i = 0; i < n; i++) {
        if (res[i].code != TENT_OK)
            continue;
        struct shm_task *k = &sb->tasks[reqs[i].slot];
        if (k->unchecked)
            task_settle(t, k);
        res[i].done = k->state == TENT_XFER_COMPLETED;
    }
    return first;
}

/* Settles a copy awaiting its check: COMPLETED when a check that began
 * after the copy found the owner engine still running, else FAILED.  The
 * owner cannot have freed the memory under a finished copy: freeing
 * revokes the entry first and waits for copies marked in it. */
static void task_settle(struct shm_transport *t, struct shm_task *k)
{
    struct shm_map *m = k->map;
    struct shm_check *chk = m ? &m->chk : &k->proc->chk;
    bool good = k->gen < atomic_load(&chk->ok_upto);
    if (!good && !atomic_load(&chk->bad)) {
        uint64_t g = atomic_fetch_add(&chk->gen, 1) + 1;
        good = shm_ctl_owner_alive(m ? &m->peer->proc.ctl : &k->proc->ctl);
        if (good) {
            uint64_t cur = atomic_load(&chk->ok_upto);
            while (cur < g &&
                   !atomic_compare_exchange_weak(&chk->ok_upto, &cur, g))
                ;
        } else {
            atomic_store(&chk->bad, true);
            if (m) { /* the peer dropped it: out of the cache */
                pthread_mutex_lock(&t->lock);
                map_unlist_locked(t, m);
                pthread_mutex_unlock(&t->lock);
            }
        }
    }
    if (good)
        k->state = TENT_XFER_COMPLETED;
    else if (m)
        task_fail(k, TENT_EPEER, 0,
                  "shm: the engine of pid %ld that holds the memory (inode "
                  "%llu) the copy went to has ended: the process exited or "
                  "destroyed it",
                  m->pid, m->ino);
    else
        task_fail(k, TENT_EPEER, 0,
                  "shm: the engine of peer process %ld ended before its copy "
                  "was confirmed",
                  k->proc->pid);
    task_release(t, k);
}

static int shm_status(struct tent_transport *t, struct tent_sub_batch *sbb,
                      uint32_t slot, struct tent_xfer_status *out)
{
    struct shm_sub *sb = (struct shm_sub *)sbb;
    if (slot >= sb->base.capacity)
        return tent_set_error(TENT_EINVAL, "shm: slot %u beyond capacity",
                              slot);
    struct shm_task *k = &sb->tasks[slot];
    if (k->unchecked)
        task_settle(shm_of(t), k);
    if (k->state == TENT_XFER_FAILED) {
        tent_xstatus_failed(out, k->err, k->code, 0);
        return TENT_OK;
    }
    out->state = k->state;
    out->bytes = k->bytes;
    return TENT_OK;
}

const struct tent_transport_ops tent_shm_transport_ops = {
    .name = "shm",
    .type = TRANSPORT_SHM,
    .default_enabled = false,
    .instance_size = sizeof(struct shm_transport),
    .install = shm_install,
    .uninstall = shm_uninstall,
    .capabilities = shm_caps,
    .can_reach = shm_can_reach,
    .alloc_sub_batch = shm_alloc_sub,
    .free_sub_batch = shm_free_sub,
    .submit = shm_submit,
    .status = shm_status,
    .quiesce = tent_xport_noop_quiesce,
    .peer_open = shm_peer_open,
    .peer_close = shm_peer_close,
    .add_buffer = shm_add_buffer,
    .remove_buffer = shm_remove_buffer,
};
