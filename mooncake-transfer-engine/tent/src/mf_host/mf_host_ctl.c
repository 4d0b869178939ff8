/* mf_host's control page (mf_host_ctl.h): the owner's page, its removal
 * log and the wait for open windows; a peer's page as an initiator maps
 * it, and the window slots it takes there. */
#include "mf_host.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool alive(int64_t pid)
{
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the owner ------------------------------------------------------------
 */

static void ctl_init(struct mfh_ctl *c)
{
    uint64_t token = 0;
    if (getrandom(&token, sizeof(token), GRND_NONBLOCK) != sizeof(token))
        token = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    c->self_addr = (uint64_t)(uintptr_t)c;
    c->probe = token | 1;
    c->version = MFH_CTL_VERSION;
    c->nslots = MFH_CTL_SLOTS;
    c->nlog = MFH_CTL_LOG;
    atomic_store(&c->mem_gen, 0);
    atomic_store(&c->rev_gen, 1); /* 0 means "no check" on the wire */
    /* peers learn of the page only later, from a HELLO answered after this */
    c->magic = MFH_CTL_MAGIC;
}

int32_t mfh_ctl_create(struct mfh_handle *h)
{
    h->ctl_fd = -1;
    int fd = memfd_create("mf_host-ctl", MFD_CLOEXEC);
    struct stat st;
    void *p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)sizeof(struct mfh_ctl)) == 0 &&
        fstat(fd, &st) == 0)
        p = mmap(NULL, sizeof(struct mfh_ctl), PROT_READ | PROT_WRITE,
                 MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
        h->ctl = p;
        h->ctl_fd = fd;
        h->ctl_ino = (uint64_t)st.st_ino;
    } else {
        MFH_WARN("cannot make the control page (%s): host_shm peers will "
                 "copy to and from this instance over tcp",
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        h->ctl = calloc(1, sizeof(struct mfh_ctl));
        if (!h->ctl) {
            MFH_ERROR("create: out of memory");
            return SM_MALLOC_FAILED;
        }
    }
    ctl_init(h->ctl);
    return SM_OK;
}

void mfh_ctl_destroy(struct mfh_handle *h)
{
    if (!h->ctl)
        return;
    if (h->ctl_fd >= 0) {
        munmap(h->ctl, sizeof(struct mfh_ctl));
        close(h->ctl_fd);
    } else {
        free(h->ctl);
    }
    h->ctl = NULL;
    h->ctl_fd = -1;
}

void mfh_ctl_log_removal(struct mfh_handle *h, uint64_t base, uint64_t len)
{
    struct mfh_ctl *c = h->ctl;
    uint64_t g = atomic_load(&c->rev_gen) + 1;
    struct mfh_ctl_removal *e = &c->log[g % MFH_CTL_LOG];
    atomic_store(&e->gen, 0); /* being rewritten */
    atomic_store(&e->base, base);
    atomic_store(&e->len, len);
    atomic_store(&e->gen, g);
    atomic_store(&c->rev_gen, g); /* published last */
    atomic_fetch_add(&c->mem_gen, 1);
}

/* Waits for window w while it is open over a range overlapping [base,
 * +len).  check_pid: a page slot, whose holder may have died.  Returns 0,
 * or -1 at the deadline (the window marked broken; *pid its holder). */
static int wait_window(struct mfh_win *w, uint64_t base, uint64_t len,
                       double deadline, bool check_pid, int64_t *pid)
{
    for (int spins = 0;; spins++) {
        uint64_t q = atomic_load(&w->seq);
        if (!(q & 1))
            return 0;
        uint64_t a = atomic_load(&w->addr), l = atomic_load(&w->len);
        if (atomic_load(&w->seq) != q)
            continue; /* it moved on meanwhile: look again */
        if (!mfh_overlap(a, l, base, len))
            return 0;
        if (check_pid) {
            int64_t holder = atomic_load(&w->pid);
            if (!alive(holder)) {
                /* died inside a copy: nothing touches the range there */
                atomic_compare_exchange_strong(&w->seq, &q, q + 1);
                return 0;
            }
            *pid = holder;
        }
        if (now_s() > deadline) {
            atomic_store(&w->broken, q);
            return -1;
        }
        /* a copy of a slice takes well under a millisecond: spin a
         * little, then sleep */
        if (spins < 1000)
            sched_yield();
        else
            nanosleep(&(struct timespec){0, 200000}, NULL);
    }
}

/* Names the peer whose process is pid (it said HELLO on one of our
 * connections), else the process. */
static void name_process(struct mfh_handle *h, int64_t pid, char *who,
                         size_t who_len)
{
    snprintf(who, who_len, "peer process %lld", (long long)pid);
    pthread_mutex_lock(&h->srv_lock);
    for (struct mfh_srv_conn *c = h->srv_conns; c; c = c->next)
        if (c->peer_pid == (pid_t)pid && c->peer_uid[0]) {
            snprintf(who, who_len, "peer %s (pid %lld)", c->peer_uid,
                     (long long)pid);
            break;
        }
    pthread_mutex_unlock(&h->srv_lock);
}

int mfh_ctl_wait(struct mfh_handle *h, uint64_t base, uint64_t len,
                 int timeout_ms, char *who, size_t who_len)
{
    double deadline = now_s() + timeout_ms / 1000.0;
    if (h->ctl_fd >= 0) {
        for (uint32_t s = 0; s < MFH_CTL_SLOTS; s++) {
            int64_t pid = 0;
            if (wait_window(&h->ctl->slots[s], base, len, deadline, true,
                            &pid) != 0) {
                name_process(h, pid, who, who_len);
                return -1;
            }
        }
    }
    /* Our server threads copy without blocking inside a window: these
     * waits are short.  srv_lock keeps the connections in place; none of
     * their threads takes it inside a window. */
    int rc = 0;
    pthread_mutex_lock(&h->srv_lock);
    for (struct mfh_srv_conn *c = h->srv_conns; c && rc == 0; c = c->next) {
        int64_t unused;
        if (wait_window(&c->win, base, len, deadline, false, &unused) != 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof(ss);
            char host[64] = "?", port[16] = "?";
            if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) == 0)
                getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host),
                            port, sizeof(port),
                            NI_NUMERICHOST | NI_NUMERICSERV);
            snprintf(who, who_len, "our server thread copying for %s:%s", host,
                     port);
            rc = -1;
        }
    }
    pthread_mutex_unlock(&h->srv_lock);
    return rc;
}

/* ---- the initiator --------------------------------------------------------
 */

int mfh_ctl_attach(struct mfh_peer *p, int fd, uint64_t ino, const char **why)
{
    if (fd < 0) {
        *why = "it has no control page";
        return -1;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)p->pid, fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0) {
        *why = strerror(errno);
        return -1;
    }
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(f, &st) != 0 || (uint64_t)st.st_ino != ino ||
        (size_t)st.st_size < sizeof(struct mfh_ctl))
        *why = "its control page is not where it said";
    else if ((m = mmap(NULL, sizeof(struct mfh_ctl), PROT_READ | PROT_WRITE,
                       MAP_SHARED, f, 0)) == MAP_FAILED)
        *why = strerror(errno);
    close(f);
    if (m == MAP_FAILED)
        return -1;
    struct mfh_ctl *c = m;
    if (c->magic != MFH_CTL_MAGIC || c->version != MFH_CTL_VERSION ||
        c->nslots != MFH_CTL_SLOTS || c->nlog != MFH_CTL_LOG) {
        munmap(m, sizeof(*c));
        *why = "its control page has another layout";
        return -1;
    }
    int64_t me = (int64_t)getpid();
    int got = 0;
    /* free slots first, then ones left by processes that exited */
    for (int pass = 0; pass < 2 && got < MFH_WORKERS; pass++)
        for (uint32_t s = 0; s < MFH_CTL_SLOTS && got < MFH_WORKERS; s++) {
            struct mfh_win *w = &c->slots[s];
            int64_t q = atomic_load(&w->pid);
            if ((pass == 0 ? q != 0 : q == 0 || alive(q)) ||
                !atomic_compare_exchange_strong(&w->pid, &q, me))
                continue;
            uint64_t seq = atomic_load(&w->seq);
            if (seq & 1) /* its last holder died inside a copy */
                atomic_store(&w->seq, seq + 1);
            p->slots[got++] = w;
        }
    if (got < MFH_WORKERS) {
        for (int i = 0; i < got; i++) {
            atomic_store(&p->slots[i]->pid, 0);
            p->slots[i] = NULL;
        }
        munmap(m, sizeof(*c));
        *why = "every window slot of its control page is taken";
        return -1;
    }
    p->ctl = c;
    return 0;
}

void mfh_ctl_detach(struct mfh_peer *p)
{
    if (!p->ctl)
        return;
    for (int i = 0; i < MFH_WORKERS; i++) {
        if (p->slots[i])
            atomic_store(&p->slots[i]->pid, 0);
        p->slots[i] = NULL;
    }
    munmap(p->ctl, sizeof(*p->ctl));
    p->ctl = NULL;
}
