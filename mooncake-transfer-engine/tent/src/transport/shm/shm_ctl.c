/* The shm control page (shm_ctl.h). */
#include "transport/shm/shm_ctl.h"

#include "common/clock.h"
#include "common/error.h"
#include "tent/transfer_engine.h"
#include "transport/shm/shm_handle.h"
#include "transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
/* glibc keeps a mutex's futex word first (__data.__lock): the word the
 * kernel's robust-list walk marks at the holder's exit. */
#ifndef __GLIBC__
#error "shm_ctl_owner_alive reads glibc's pthread_mutex_t futex word"
#endif
_Static_assert(offsetof(pthread_mutex_t, __data.__lock) == 0,
               "glibc's mutex word comes first");
#define ALIVE_LEN 4096

/* m's futex word, as the kernel's robust-list walk leaves it. */
static unsigned mutex_word(const pthread_mutex_t *m)
{
    return (unsigned)__atomic_load_n(&m->__data.__lock, __ATOMIC_ACQUIRE);
}
_Static_assert(sizeof(struct shm_ctl_alive) <= ALIVE_LEN,
               "the liveness mutex fits its page");

_Static_assert(sizeof(((struct shm_ctl_entry *)0)->key) == TENT_BUF_KEY_LEN &&
                   sizeof(((struct shm_ctl_reg *)0)->key) == TENT_BUF_KEY_LEN,
               "an entry holds one access key");

static bool alive(long pid)
{
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* ---- owner -----------------------------------------------------------------
 */

/* The abstract address of name (no NUL: the kernel takes the length). */
static socklen_t sock_addr(struct sockaddr_un *sa, const char *name)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    size_t n = strlen(name);
    memcpy(sa->sun_path + 1, name, n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Accepts and closes: connecting is all a peer needs (the kernel tells it
 * who listens); accepting keeps the backlog from filling.  Holds the
 * liveness mutex until told to stop (shm_ctl_owner_alive): it must store
 * this thread's id, which the kernel's robust-list walk looks for. */
static void *accept_main(void *arg)
{
    struct shm_ctl_owner *o = arg;
    pthread_mutex_t *m = &o->alive->mutex;
    bool held = pthread_mutex_lock(m) == 0;
    if (held &&
        (mutex_word(m) & FUTEX_TID_MASK) != (unsigned)syscall(SYS_gettid)) {
        pthread_mutex_unlock(m);
        held = false;
    }
    o->holds = held;
    sem_post(&o->ready);
    if (!held)
        return NULL;
    for (;;) {
        struct pollfd pf[2] = {{.fd = o->sock, .events = POLLIN},
                               {.fd = o->stop, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0) {
            /* only a stop ends the thread: its end reads as ours */
            if (errno != EINTR)
                nanosleep(&(struct timespec){0, 1000000}, NULL);
            continue;
        }
        if (pf[1].revents)
            break;
        int c;
        while ((c = accept4(o->sock, NULL, NULL, SOCK_CLOEXEC)) >= 0)
            close(c);
    }
    pthread_mutex_unlock(m);
    return NULL;
}

static void sock_close(struct shm_ctl_owner *o)
{
    /* A forked child that tears down an inherited engine has no such
     * thread; the eventfd it shares would stop its parent's. */
    if (o->thread && o->pid != (long)getpid())
        o->thread = false;
    if (o->thread) {
        uint64_t one = 1;
        ssize_t w = write(o->stop, &one, sizeof(one));
        (void)w;
        pthread_join(o->th, NULL);
        o->thread = false;
    }
    if (o->sem)
        sem_destroy(&o->ready);
    o->sem = false;
    if (o->sock >= 0)
        close(o->sock);
    if (o->stop >= 0)
        close(o->stop);
    o->sock = o->stop = -1;
}

static int sock_open(struct shm_ctl_owner *o, uint64_t incarnation)
{
    snprintf(o->sock_name, sizeof(o->sock_name), "tent-shm/%ld/%016llx",
             (long)getpid(), (unsigned long long)incarnation);
    struct sockaddr_un sa;
    socklen_t sl = sock_addr(&sa, o->sock_name);
    o->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    o->stop = eventfd(0, EFD_CLOEXEC);
    int rc = TENT_OK;
    if (o->sock < 0 || o->stop < 0 ||
        bind(o->sock, (struct sockaddr *)&sa, sl) != 0 ||
        listen(o->sock, 128) != 0)
        rc = tent_set_error(TENT_EIO,
                            "shm: cannot listen on the control socket "
                            "'@%s': %s",
                            o->sock_name, strerror(errno));
    else if (!(o->sem = sem_init(&o->ready, 0, 0) == 0) ||
             pthread_create(&o->th, NULL, accept_main, o) != 0)
        rc = tent_set_error(TENT_ENOMEM,
                            "shm: cannot start the control socket's thread");
    else {
        o->thread = true;
        while (sem_wait(&o->ready) != 0 && errno == EINTR)
            ;
        if (!o->holds) {
            pthread_join(o->th, NULL);
            o->thread = false;
            rc = tent_set_error(TENT_EIO, "shm: the control thread cannot "
                                          "hold the liveness mutex");
        }
    }
    if (rc)
        sock_close(o);
    return rc;
}

/* The liveness memfd: one page holding a robust, process-shared mutex. */
static int alive_create(struct shm_ctl_owner *o, unsigned long long *ino)
{
    int fd = memfd_create("tent-shm-alive", MFD_CLOEXEC);
    struct stat st;
    void *p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, ALIVE_LEN) == 0 && fstat(fd, &st) == 0)
        p = mmap(NULL, ALIVE_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return tent_set_error(TENT_ENOMEM,
                              "shm: cannot set up the liveness page: %s",
                              strerror(err));
    }
    o->alive = p;
    o->alive_fd = fd;
    *ino = (unsigned long long)st.st_ino;
    pthread_mutexattr_t ma;
    int e = pthread_mutexattr_init(&ma);
    if (!e) {
        e = pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
        if (!e)
            e = pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
        if (!e)
            e = pthread_mutex_init(&o->alive->mutex, &ma);
        pthread_mutexattr_destroy(&ma);
    }
    if (e)
        return tent_set_error(TENT_ENOTSUP,
                              "shm: no robust process-shared mutex here "
                              "(the owner's liveness needs one): %s",
                              strerror(e));
    return TENT_OK;
}

int shm_ctl_create(struct shm_ctl_owner *o, uint64_t incarnation)
{
    memset(o, 0, sizeof(*o));
    o->fd = o->alive_fd = -1;
    o->sock = o->stop = -1;
    int fd = memfd_create("tent-shm-ctl", MFD_CLOEXEC);
    if (fd < 0)
        return tent_set_error(TENT_ENOMEM,
                              "shm: memfd_create of the control page failed: "
                              "%s",
                              strerror(errno));
    struct stat st;
    int rc = TENT_OK;
    if (ftruncate(fd, (off_t)sizeof(struct shm_ctl)) != 0 ||
        fstat(fd, &st) != 0)
        rc = tent_set_error(TENT_ENOMEM,
                            "shm: cannot set up the control page: %s",
                            strerror(errno));
    void *p = rc ? MAP_FAILED
                 : mmap(NULL, sizeof(struct shm_ctl), PROT_READ | PROT_WRITE,
                        MAP_SHARED, fd, 0);
    if (!rc && p == MAP_FAILED)
        rc = tent_set_error(TENT_ENOMEM,
                            "shm: mmap of the control page failed: %s",
                            strerror(errno));
    if (rc) {
        close(fd);
        return rc;
    }
    struct shm_ctl *c = p;
    o->ctl = c;
    o->fd = fd;
    o->pid = (long)getpid();
    unsigned long long alive_ino = 0;
    rc = alive_create(o, &alive_ino);
    if (rc) {
        shm_ctl_destroy(o);
        return rc;
    }
    c->alive_fd = o->alive_fd;
    c->alive_ino = alive_ino;
    c->version = SHM_CTL_VERSION;
    c->incarnation = incarnation;
    c->nregs = SHM_CTL_REGS;
    c->nslots = SHM_CTL_PEERS;
    atomic_thread_fence(memory_order_seq_cst);
    c->magic = SHM_CTL_MAGIC;
    o->ino = (unsigned long long)st.st_ino;
    o->next_gen = 1;
    rc = sock_open(o, incarnation);
    if (rc)
        shm_ctl_destroy(o);
    return rc;
}

void shm_ctl_destroy(struct shm_ctl_owner *o)
{
    sock_close(o);
    if (o->ctl)
        munmap(o->ctl, sizeof(struct shm_ctl));
    if (o->fd >= 0)
        close(o->fd);
    if (o->alive)
        munmap(o->alive, ALIVE_LEN);
    if (o->alive_fd >= 0)
        close(o->alive_fd);
    o->ctl = NULL;
    o->alive = NULL;
    o->fd = o->alive_fd = -1;
}

void shm_ctl_handle(const struct shm_ctl_owner *o, char *buf, size_t len)
{
    snprintf(buf, len, "memfd:%d:%llu", o->fd, o->ino);
}

int shm_ctl_enter(struct shm_ctl_owner *o, uint64_t base, uint64_t length,
                  int perm, uint64_t ino, uint64_t dev, const uint8_t *key,
                  uint32_t *idx, uint64_t *gen)
{
    uint32_t i = 0;
    while (i < SHM_CTL_REGS && (o->used[i / 8] >> (i % 8) & 1))
        i++;
    if (i == SHM_CTL_REGS)
        return tent_set_error(TENT_ENOMEM,
                              "shm: all %d control entries are in use (at "
                              "most that many buffers are served by shm)",
                              SHM_CTL_REGS);
    o->used[i / 8] |= (uint8_t)(1u << (i % 8));
    struct shm_ctl_reg *r = &o->ctl->regs[i];
    atomic_store(&r->base, base);
    atomic_store(&r->length, length);
    atomic_store(&r->ino, ino);
    atomic_store(&r->dev, dev);
    atomic_store(&r->perm, (uint32_t)perm);
    uint64_t k[2];
    memcpy(k, key, sizeof(k));
    atomic_store(&r->key[0], k[0]);
    atomic_store(&r->key[1], k[1]);
    uint64_t g = o->next_gen;
    o->next_gen += 2;
    atomic_store(&r->gen, g); /* odd: registered, published last */
    *idx = i;
    *gen = g;
    return TENT_OK;
}

int shm_ctl_revoke(struct shm_ctl_owner *o, uint32_t idx, int timeout_ms,
                   long *who_pid)
{
    struct shm_ctl *c = o->ctl;
    struct shm_ctl_reg *r = &c->regs[idx];
    uint64_t g = atomic_load(&r->gen);
    if (g & 1)
        atomic_store(&r->gen, g + 1);
    long long deadline = tent_now_ms() + timeout_ms;
    for (uint32_t s = 0; s < SHM_CTL_PEERS; s++) {
        struct shm_ctl_slot *sl = &c->slots[s];
        for (int spins = 0;; spins++) {
            int64_t pid = atomic_load(&sl->pid);
            uint64_t q = atomic_load(&sl->seq);
            if (pid == 0 || !(q & 1) || atomic_load(&sl->reg) != idx)
                break;
            if (!alive(pid)) {
                /* died inside a copy: its slot is free again */
                if (atomic_compare_exchange_strong(&sl->seq, &q, q + 1))
                    atomic_compare_exchange_strong(&sl->pid, &pid, 0);
                break;
            }
            if (tent_now_ms() > deadline) {
                atomic_store(&sl->broken, q);
                *who_pid = (long)pid;
                return tent_set_error(TENT_EBUSY,
                                      "shm: peer process %lld is still "
                                      "copying into the range after %d ms",
                                      (long long)pid, timeout_ms);
            }
            /* a copy takes microseconds: spin a little, then sleep */
            if (spins < 1000)
                sched_yield();
            else
                nanosleep(&(struct timespec){0, 200000}, NULL);
        }
    }
    return TENT_OK;
}

void shm_ctl_restore(struct shm_ctl_owner *o, uint32_t idx, uint64_t gen)
{
    atomic_store(&o->ctl->regs[idx].gen, gen);
}

void shm_ctl_free(struct shm_ctl_owner *o, uint32_t idx)
{
    struct shm_ctl_reg *r = &o->ctl->regs[idx];
    uint64_t g = atomic_load(&r->gen);
    if (g & 1)
        atomic_store(&r->gen, g + 1);
    o->used[idx / 8] &= (uint8_t) ~(1u << (idx % 8));
}

/* ---- initiator
 * ---------------------------------------------------------------- */

int shm_ctl_identify(const char *seg, const char *sock_name, long desc_pid,
                     int *pidfd)
{
    if (pidfd)
        *pidfd = -1;
    if (!sock_name || !*sock_name || strlen(sock_name) > 100)
        return tent_set_error(TENT_ENOTSUP,
                              "shm: segment '%s' publishes no control "
                              "socket",
                              seg);
    struct sockaddr_un sa;
    socklen_t sl = sock_addr(&sa, sock_name);
    /* Non-blocking: a full backlog is a refusal, never a wait. */
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sl) != 0) {
        int err = errno;
        if (s >= 0)
            close(s);
        return tent_set_error(TENT_ENOTSUP,
                              "shm: segment '%s': its control socket '@%s' "
                              "does not answer: %s",
                              seg, sock_name, strerror(err));
    }
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    int rc = TENT_OK;
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || cr.pid <= 0)
        rc = tent_set_error(TENT_EPEER,
                            "shm: segment '%s': the kernel names no process "
                            "behind '@%s'",
                            seg, sock_name);
    else if (cr.uid != geteuid())
        rc = tent_set_error(TENT_EPERM,
                            "shm: segment '%s': the process behind its "
                            "control socket (pid %ld) is uid %ld, not ours",
                            seg, (long)cr.pid, (long)cr.uid);
    else if ((long)cr.pid != desc_pid)
        rc = tent_set_error(TENT_EPEER,
                            "shm: segment '%s' names pid %ld, but the process "
                            "behind its control socket is pid %ld: refused",
                            seg, desc_pid, (long)cr.pid);
    if (!rc) {
        /* The kernel's pidfd of the listener where it has one (no window
         * for the pid to be reused), else one opened by pid now. */
        int pf = -1;
        socklen_t pl = sizeof(pf);
        if (getsockopt(s, SOL_SOCKET, SO_PEERPIDFD, &pf, &pl) != 0) {
            pf = -1;
            if (errno == ESRCH)
                rc = tent_set_error(TENT_EPEER,
                                    "shm: segment '%s': pid %ld behind its "
                                    "control socket has exited",
                                    seg, (long)cr.pid);
            else if (pidfd)
                pf = (int)syscall(SYS_pidfd_open, (pid_t)cr.pid, 0);
        }
        if (pidfd)
            *pidfd = pf;
        else if (pf >= 0)
            close(pf);
    }
    close(s);
    return rc;
}

int shm_open_peer_fd(long pid, int fdnum, int flags, char *path, size_t len)
{
    snprintf(path, len, "/proc/%ld/fd/%d", pid, fdnum);
    return pid == (long)getpid() ? fdnum : open(path, flags | O_CLOEXEC);
}

/* Maps the owner's liveness memfd, which page c names, read-only. */
static int alive_map(struct shm_ctl_view *v, const struct shm_ctl *c, long pid,
                     bool self)
{
    int fdnum = c->alive_fd;
    unsigned long long ino = c->alive_ino;
    char path[64];
    int fd = shm_open_peer_fd(pid, fdnum, O_RDONLY, path, sizeof(path));
    struct stat st;
    void *p = MAP_FAILED;
    const char *why = NULL;
    bool opened = fd >= 0 && fstat(fd, &st) == 0;
    if (opened &&
        ((unsigned long long)st.st_ino != ino || st.st_size < ALIVE_LEN))
        why = "another file";
    else if (!opened || (p = mmap(NULL, ALIVE_LEN, PROT_READ, MAP_SHARED, fd,
                                  0)) == MAP_FAILED)
        why = strerror(errno);
    if (fd >= 0 && !self)
        close(fd);
    if (why)
        return tent_set_error(TENT_EPEER,
                              "shm: the liveness page pid %ld names (%s, "
                              "inode %llu) cannot be mapped: %s",
                              pid, path, ino, why);
    v->alive = p;
    return TENT_OK;
}

int shm_ctl_attach(struct shm_ctl_view *v, long pid, const char *handle,
                   uint64_t incarnation)
{
    memset(v, 0, sizeof(*v));
    bool self = pid == (long)getpid();
    int fdnum;
    unsigned long long ino;
    int rc = tent_shm_parse_handle(handle, &fdnum, &ino);
    if (rc)
        return rc;
    char path[64];
    int fd = shm_open_peer_fd(pid, fdnum, O_RDWR, path, sizeof(path));
    if (fd < 0)
        return tent_set_error(TENT_ENOTSUP, "shm: open %s failed: %s", path,
                              strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || (unsigned long long)st.st_ino != ino ||
        (size_t)st.st_size < sizeof(struct shm_ctl))
        rc = tent_set_error(TENT_EPEER,
                            "shm: %s is not the control page pid %ld "
                            "published",
                            path, pid);
    void *p = rc ? MAP_FAILED
                 : mmap(NULL, sizeof(struct shm_ctl), PROT_READ | PROT_WRITE,
                        MAP_SHARED, fd, 0);
    if (!rc && p == MAP_FAILED)
        rc = tent_set_error(TENT_EPEER, "shm: mmap of %s failed: %s", path,
                            strerror(errno));
    if (!self)
        close(fd);
    if (rc)
        return rc;
    struct shm_ctl *c = p;
    if (c->magic != SHM_CTL_MAGIC || c->version != SHM_CTL_VERSION ||
        c->nregs != SHM_CTL_REGS || c->nslots != SHM_CTL_PEERS) {
        munmap(p, sizeof(*c));
        return tent_set_error(TENT_EPROTO,
                              "shm: the control page of pid %ld has an "
                              "unknown layout",
                              pid);
    }
    if (incarnation && c->incarnation != incarnation) {
        uint64_t theirs = c->incarnation;
        munmap(p, sizeof(*c));
        return tent_set_error(TENT_ESTALE,
                              "shm: pid %ld is incarnation %016llx, not the "
                              "%016llx the request was addressed to",
                              pid, (unsigned long long)theirs,
                              (unsigned long long)incarnation);
    }
    rc = alive_map(v, c, pid, self);
    if (rc) {
        munmap(p, sizeof(*c));
        return rc;
    }
    int64_t me = (int64_t)getpid();
    struct shm_ctl_slot *got = NULL;
    for (uint32_t s = 0; s < SHM_CTL_PEERS && !got; s++) {
        int64_t zero = 0;
        if (atomic_compare_exchange_strong(&c->slots[s].pid, &zero, me))
            got = &c->slots[s];
    }
    for (uint32_t s = 0; s < SHM_CTL_PEERS && !got; s++) {
        /* a slot left by a process that exited */
        int64_t q = atomic_load(&c->slots[s].pid);
        if (q && !alive(q) &&
            atomic_compare_exchange_strong(&c->slots[s].pid, &q, me))
            got = &c->slots[s];
    }
    if (!got) {
        munmap(p, sizeof(*c));
        munmap((void *)v->alive, ALIVE_LEN);
        v->alive = NULL;
        return tent_set_error(TENT_ENOTSUP,
                              "shm: all %d peer slots of pid %ld's control "
                              "page are held by live processes",
                              SHM_CTL_PEERS, pid);
    }
    uint64_t q = atomic_load(&got->seq);
    if (q & 1) /* the previous holder died inside a copy */
        atomic_store(&got->seq, q + 1);
    v->ctl = c;
    v->ino = ino;
    v->slot = got;
    v->pid = pid;
    return TENT_OK;
}

void shm_ctl_detach(struct shm_ctl_view *v)
{
    if (!v->ctl)
        return;
    atomic_store(&v->slot->pid, 0);
    munmap(v->ctl, sizeof(*v->ctl));
    munmap((void *)v->alive, ALIVE_LEN);
    v->ctl = NULL;
    v->alive = NULL;
    v->slot = NULL;
}

int shm_ctl_begin(struct shm_ctl_view *v, uint32_t idx, uint64_t gen,
                  bool write, struct shm_ctl_entry *e)
{
    struct shm_ctl_slot *sl = v->slot;
    atomic_store(&sl->reg, idx < SHM_CTL_REGS ? idx : 0);
    atomic_fetch_add(&sl->seq, 1); /* odd: copying */
    if (idx >= SHM_CTL_REGS)
        return tent_set_error(TENT_EPROTO,
                              "shm: control entry %u of pid %ld is out of "
                              "range",
                              idx, v->pid);
    const struct shm_ctl_reg *r = &v->ctl->regs[idx];
    if (atomic_load(&r->gen) != gen)
        return tent_set_error(TENT_ERANGE,
                              "shm: the buffer of pid %ld (control entry %u, "
                              "generation %llu) is no longer registered",
                              v->pid, idx, (unsigned long long)gen);
    uint32_t perm = atomic_load(&r->perm);
    if (perm == PERM_LOCAL_READ_WRITE ||
        (write && perm != PERM_GLOBAL_READ_WRITE))
        return tent_set_error(TENT_EPERM,
                              "shm: pid %ld's buffer (control entry %u) does "
                              "not grant the %s",
                              v->pid, idx, write ? "write" : "read");
    /* Read after the generation: the owner cannot rewrite the entry before
     * our mark ends. */
    e->base = atomic_load(&r->base);
    e->length = atomic_load(&r->length);
    e->ino = atomic_load(&r->ino);
    e->dev = atomic_load(&r->dev);
    e->perm = perm;
    uint64_t k[2] = {atomic_load(&r->key[0]), atomic_load(&r->key[1])};
    memcpy(e->key, k, sizeof(e->key));
    if (e->length == 0 || e->base + e->length < e->base)
        return tent_set_error(TENT_EPROTO,
                              "shm: control entry %u of pid %ld holds no "
                              "valid range",
                              idx, v->pid);
    return TENT_OK;
}

bool shm_ctl_owner_alive(const struct shm_ctl_view *v)
{
    atomic_thread_fence(memory_order_seq_cst); /* after the copies */
    unsigned w = mutex_word(&v->alive->mutex);
    return (w & FUTEX_TID_MASK) != 0 && !(w & FUTEX_OWNER_DIED);
}

bool shm_ctl_key_ok(const struct shm_ctl_entry *e, const uint8_t *key)
{
    return tent_key_equal(e->key, key);
}

bool shm_ctl_end(struct shm_ctl_view *v)
{
    struct shm_ctl_slot *sl = v->slot;
    uint64_t q = atomic_load(&sl->seq);
    bool ok = atomic_load(&sl->broken) != q;
    atomic_store(&sl->seq, q + 1); /* even: done */
    return ok;
}

int shm_ctl_parse_reg(const char *s, uint32_t *idx, uint64_t *gen)
{
    const char *end;
    unsigned long long i, g;
    if (!s || tent_shm_parse_u64(s, &end, &i) || *end != ':' ||
        i >= SHM_CTL_REGS || tent_shm_parse_u64(end + 1, &end, &g) || *end ||
        !(g & 1))
        goto bad;
    *idx = (uint32_t)i;
    *gen = g;
    return TENT_OK;
bad:
    return tent_set_error(TENT_EPROTO, "shm: 'shm_reg' value '%s' is malformed",
                          s ? s : "(null)");
}
