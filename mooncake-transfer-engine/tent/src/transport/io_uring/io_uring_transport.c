/* io_uring transport: file segments over io_uring (liburing).
 *
 * Rings belong to worker threads (transports/io_uring/workers), not to
 * batches: a sub-batch is bound to one ring when it is allocated, and
 * submit hands its tasks to that ring's worker (a queue and, when the worker
 * sleeps, one eventfd write that completes the read it keeps armed on its
 * ring).  The worker is the only thread that touches its ring: it turns
 * tasks into SQEs, submits and waits in one io_uring_enter, reaps
 * completions, continues short transfers, and publishes outcomes, so submit
 * and status never wait and a thread that submitted may exit at any time.
 * A task is COMPLETED with all its bytes or FAILED with its cause (file,
 * offset, length, errno), never partly COMPLETED.
 * The rules per request and per priority: docs/file-segments.md. */
#include "transport/io_uring/io_uring_transport.h"

#include "common/clock.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "transport/file_io.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define IOU         "io_uring"
#define MAX_RINGS   16
#define SLOT_BYTES  (1ull << 30) /* a registered buffer, at most */
#define SQE_BYTES   (1ull << 30) /* one SQE moves at most this */
#define NBUF_SLOTS  1024
#define NFILE_SLOTS 2048 /* two per file */
#define MAX_RETRIES 16

/* user_data tags: a task pointer (8-byte aligned) has none. */
#define TAG_SYNC 1u
#define TAG_WAKE 2u
#define TAG_MASK 3u

struct iou_ring;
struct iou_sub;

struct iou_task {
    _Atomic int state; /* enum tent_xfer_state */
    uint64_t bytes;
    struct tent_xerr *err;
    /* the request */
    int opcode;
    bool durable;    /* WRITE: fdatasync before COMPLETED (sync, or the
                        request's tent_xfer.durable) */
    int prio;        /* TENT_PRIO_* of the request */
    uint64_t enq_ns; /* when it was handed to the ring (promotion) */
    char *local;
    uint64_t off, len;
    struct tent_fio_file *file;
    struct iou_sub *sb;
    /* registered memory holding local, or slot -1 */
    int mslot;
    uint64_t mbase;
    /* progress: the worker's once submitted */
    uint64_t done;
    int retries;
    bool nodirect, nofixed;
    struct iou_task *next; /* hand-off queue, backlog, round and sync lists */
};

/* A task list (FIFO). */
struct tlist {
    struct iou_task *head, *tail;
};

static void tl_push(struct tlist *l, struct iou_task *k)
{
    k->next = NULL;
    if (l->tail)
        l->tail->next = k;
    else
        l->head = k;
    l->tail = k;
}

static struct iou_task *tl_pop(struct tlist *l)
{
    struct iou_task *k = l->head;
    if (k) {
        l->head = k->next;
        if (!l->head)
            l->tail = NULL;
    }
    return k;
}

static void tl_splice(struct tlist *dst, struct tlist *src)
{
    if (!src->head)
        return;
    if (dst->tail)
        dst->tail->next = src->head;
    else
        dst->head = src->head;
    dst->tail = src->tail;
    src->head = src->tail = NULL;
}

/* fdatasync bookkeeping of one file on one ring (its worker's only). */
struct iou_sync {
    struct tent_fio_file *file;
    struct tlist waiting; /* written, waiting for the next fdatasync */
    struct tlist flying;  /* covered by the fdatasync in flight */
    bool busy, dirty;
    struct iou_sync *next_dirty;
};

/* What the transport keeps per file (tent_fio_file.xport). */
struct iou_file {
    int fslot; /* registered files fslot (buffered) and fslot + 1 (direct),
                  or -1 */
    struct iou_sync sync[MAX_RINGS];
};

/* A registered memory range. */
struct iou_mem {
    uint64_t base, len;
    int slot, nslots; /* registered buffers [slot, slot + nslots), or 0 */
};

struct iou_transport;

/* qlock guards queue, sleeping and stop: the hand-off from submitters to
 * the worker (a leaf lock).  Everything else of the ring is its worker's. */
struct iou_ring {
    struct iou_transport *tp;
    int idx;
    struct io_uring ring;
    bool ring_ok;
    unsigned cap; /* SQEs in flight, at most (the CQ's size) */
    unsigned nsqe;
    int efd;
    uint64_t efd_val;
    bool wake_armed; /* the eventfd read is in flight */
    pthread_t thread;
    bool started;
    pthread_mutex_t qlock;
    struct tlist queue;
    bool sleeping, stop;
    /* worker state */
    struct tlist backlog[TENT_NPRIO]; /* tasks waiting for room, per class */
    uint64_t served_ns[TENT_NPRIO];   /* a class last drained (promotion) */
    unsigned low_sqes;                /* LOW I/O SQEs in flight */
    struct tlist ready; /* transfers done this round: check, publish */
    struct iou_sync *dirty;
};

/* reg_lock guards the memory table's writers and the slot bitmaps; mem_lock
 * (read by submit, write by add/remove_buffer) the memory table. */
struct iou_transport {
    struct tent_transport base;
    struct tent_fio_table files;
    int nworkers, nrings; /* rings configured, rings running */
    struct iou_ring rings[MAX_RINGS];
    unsigned depth, sqpoll_idle;
    unsigned low_depth;           /* LOW SQEs in flight per ring, at most */
    uint64_t low_slice, promo_ns; /* LOW SQE bytes, at most; promotion */
    bool sqpoll, sync, direct, fixed_bufs, fixed_files;
    _Atomic unsigned next_ring;
    pthread_mutex_t reg_lock;
    pthread_rwlock_t mem_lock;
    struct iou_mem *mems;
    size_t nmems, capmems;
    uint8_t buf_used[NBUF_SLOTS];
    uint8_t file_used[NFILE_SLOTS];
    /* quiesce */
    atomic_int inflight;
    atomic_bool quiescing;
    pthread_mutex_t idle_lock;
    pthread_cond_t idle;
    /* counters */
    atomic_ulong c_direct, c_buffered, c_fixed_bufs, c_fixed_files, c_resubmits,
        c_fsyncs;
};

struct iou_sub {
    struct tent_sub_batch base;
    struct iou_task *tasks;
    struct iou_ring *ring;
    atomic_int inflight;
};

static struct iou_transport *tp_of(struct tent_transport *t)
{
    return (struct iou_transport *)t;
}

static void count(atomic_ulong *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* ---- publishing -----------------------------------------------------------
 */

/* The state is the last thing written to the task: once the runtime sees it
 * terminal it may free the sub-batch. */
static void publish(struct iou_transport *tp, struct iou_task *k, bool ok,
                    struct tent_xerr *err)
{
    if (!ok && err)
        LOG_DEBUG("%s", err->msg);
    k->err = err;
    k->bytes = ok ? k->len : 0;
    atomic_fetch_sub(&k->sb->inflight, 1);
    atomic_store_explicit(&k->state,
                          ok ? TENT_XFER_COMPLETED : TENT_XFER_FAILED,
                          memory_order_release);
    if (atomic_fetch_sub(&tp->inflight, 1) == 1 &&
        atomic_load(&tp->quiescing)) {
        pthread_mutex_lock(&tp->idle_lock);
        pthread_cond_broadcast(&tp->idle);
        pthread_mutex_unlock(&tp->idle_lock);
    }
}

/* ---- the worker -----------------------------------------------------------
 */

static void arm_wake(struct iou_ring *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe) {
        io_uring_submit(&r->ring);
        sqe = io_uring_get_sqe(&r->ring);
    }
    if (!sqe)
        return; /* cannot happen with nsqe < cap; the timeout wait covers it */
    io_uring_prep_read(sqe, r->efd, &r->efd_val, sizeof(r->efd_val), 0);
    io_uring_sqe_set_data64(sqe, TAG_WAKE);
    r->nsqe++;
    r->wake_armed = true;
}

/* The bytes of task k's next SQE (that of its SQE in flight): a longer
 * request continues from where the last SQE stopped.  A LOW task's SQEs move
 * at most low_slice_size bytes, so that LOW builds no deep queue in the
 * kernel in front of a HIGH request. */
static uint64_t sqe_bytes(const struct iou_transport *tp,
                          const struct iou_task *k)
{
    uint64_t want = k->len - k->done;
    uint64_t cap = k->prio == TENT_PRIO_LOW ? tp->low_slice : SQE_BYTES;
    return want < cap ? want : cap;
}

/* Turns the next part of task k into an SQE; false when the ring is full,
 * or k is LOW and low_depth LOW SQEs are in flight (k goes to the backlog).
 * The O_DIRECT descriptor when memory, offset and length are aligned as the
 * filesystem asks (tent_fio_direct_ok), else the buffered one: the page
 * cache is the bounce buffer, so nothing is allocated or copied here, and
 * the kernel keeps the two views coherent.  Registered memory goes as a
 * registered buffer (READ_FIXED/WRITE_FIXED) when the piece lies in one
 * slot; the file's descriptors as registered files where the kernel took
 * them, the plain forms otherwise. */
static bool prep_io(struct iou_ring *r, struct iou_task *k)
{
    struct iou_transport *tp = r->tp;
    bool low = k->prio == TENT_PRIO_LOW;
    if (r->nsqe >= r->cap || (low && r->low_sqes >= tp->low_depth))
        return false;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe)
        return false;
    struct tent_fio_file *f = k->file;
    const struct iou_file *uf = f->xport;
    uint64_t want = sqe_bytes(tp, k);
    char *mem = k->local + k->done;
    uint64_t off = k->off + k->done;
    bool direct = !k->nodirect && tent_fio_direct_ok(f, mem, off, want);
    int fd = direct ? f->dfd : f->fd;
    bool fixed_file = uf->fslot >= 0;
    if (fixed_file)
        fd = uf->fslot + (direct ? 1 : 0);
    int bidx = -1;
    if (k->mslot >= 0 && !k->nofixed) {
        uint64_t rel = (uint64_t)(uintptr_t)mem - k->mbase;
        uint64_t slot_end = (rel / SLOT_BYTES + 1) * SLOT_BYTES;
        if (rel + want <= slot_end)
            bidx = k->mslot + (int)(rel / SLOT_BYTES);
    }
    if (k->opcode == OPCODE_READ) {
        if (bidx >= 0)
            io_uring_prep_read_fixed(sqe, fd, mem, (unsigned)want, off, bidx);
        else
            io_uring_prep_read(sqe, fd, mem, (unsigned)want, off);
    } else {
        if (bidx >= 0)
            io_uring_prep_write_fixed(sqe, fd, mem, (unsigned)want, off, bidx);
        else
            io_uring_prep_write(sqe, fd, mem, (unsigned)want, off);
    }
    if (fixed_file) {
        sqe->flags |= IOSQE_FIXED_FILE;
        count(&tp->c_fixed_files);
    }
    if (bidx >= 0)
        count(&tp->c_fixed_bufs);
    count(direct ? &tp->c_direct : &tp->c_buffered);
    io_uring_sqe_set_data(sqe, k);
    r->nsqe++;
    r->low_sqes += low;
    return true;
}

/* Task k (new, or continued) into the ring, unless a task of its class or
 * a higher one waits: then behind them. */
static void start_or_queue(struct iou_ring *r, struct iou_task *k)
{
    bool ahead = false;
    for (int c = 0; c <= k->prio && !ahead; c++)
        ahead = r->backlog[c].head != NULL;
    if (ahead || !prep_io(r, k))
        tl_push(&r->backlog[k->prio], k);
}

/* Into the ring from the backlog, the best class first (a class not served
 * for priority_promotion_timeout_us counts one class higher per timeout);
 * a LOW task held by low_depth lets the others pass. */
static void drain_backlog(struct iou_ring *r)
{
    const struct iou_transport *tp = r->tp;
    uint64_t now = tent_now_ns();
    for (;;) {
        uint64_t since[TENT_NPRIO];
        for (int c = 0; c < TENT_NPRIO; c++) {
            const struct iou_task *h = r->backlog[c].head;
            since[c] =
                !h || (c == TENT_PRIO_LOW && r->low_sqes >= tp->low_depth)
                    ? TENT_PRIO_IDLE
                    : tent_prio_since(h->enq_ns, r->served_ns[c]);
        }
        int best = tent_prio_pick(since, now, tp->promo_ns);
        if (best < 0 || !prep_io(r, r->backlog[best].head))
            return;
        tl_pop(&r->backlog[best]);
        r->served_ns[best] = now;
    }
}

static bool backlog_empty(const struct iou_ring *r)
{
    for (int c = 0; c < TENT_NPRIO; c++)
        if (r->backlog[c].head)
            return false;
    return true;
}

static void fail_task(struct iou_ring *r, struct iou_task *k,
                      struct tent_xerr *err)
{
    publish(r->tp, k, false, err);
}

/* One I/O CQE of task k.  A short transfer continues (on the buffered
 * descriptor if what is left is no longer aligned); a read of 0 bytes met
 * the end of the file (it shrank) and fails the task; EAGAIN/EINTR are
 * retried; a direct SQE refused with EINVAL/EOPNOTSUPP goes again through
 * the page cache.  A durable WRITE (transports/io_uring/sync, or the
 * request's tent_xfer.durable: a failover from a durable transport) waits
 * for an fdatasync of its file that begins after it finished. */
static void on_io(struct iou_ring *r, struct iou_task *k, int res)
{
    struct iou_transport *tp = r->tp;
    struct tent_fio_file *f = k->file;
    uint64_t want = sqe_bytes(tp, k);
    if (k->prio == TENT_PRIO_LOW)
        r->low_sqes--;
    int fe = tent_fio_fault_take(IOU, TENT_FIO_FAULT_ERRNO);
    if (fe)
        res = -fe;
    else if (res > 1 && tent_fio_fault_take(IOU, TENT_FIO_FAULT_SHORT))
        res /= 2;
    if (res < 0) {
        int err = -res;
        bool again = false;
        if ((err == EAGAIN || err == EINTR) && k->retries < MAX_RETRIES) {
            k->retries++;
            again = true;
        } else if ((err == EINVAL || err == EOPNOTSUPP) && !k->nodirect &&
                   tent_fio_direct_ok(f, k->local + k->done, k->off + k->done,
                                      want)) {
            /* the filesystem refused this direct I/O after all */
            LOG_DEBUG("io_uring: direct %s on '%s' refused (%s); through the "
                      "page cache",
                      k->opcode == OPCODE_READ ? "read" : "write", f->path,
                      strerror(err));
            k->nodirect = true;
            again = true;
        } else if (err == EFAULT && k->mslot >= 0 && !k->nofixed) {
            k->nofixed = true; /* the registered buffer went away */
            again = true;
        }
        if (again) {
            start_or_queue(r, k);
            return;
        }
        fail_task(
            r, k,
            tent_fio_io_error(IOU, f, k->opcode, k->off + k->done, want, err));
        return;
    }
    if (res == 0) {
        if (k->opcode == OPCODE_READ) {
            fail_task(r, k, tent_fio_eof_error(IOU, f, k->off + k->done));
            return;
        }
        if (k->retries++ < MAX_RETRIES) {
            start_or_queue(r, k);
            return;
        }
        fail_task(
            r, k,
            tent_fio_io_error(IOU, f, k->opcode, k->off + k->done, want, EIO));
        return;
    }
    k->done += (uint64_t)res;
    k->retries = 0;
    if (k->done < k->len) {
        if ((uint64_t)res < want)
            count(&tp->c_resubmits);
        start_or_queue(r, k);
        return;
    }
    if (k->durable) {
        struct iou_sync *s = &((struct iou_file *)f->xport)->sync[r->idx];
        s->file = f;
        tl_push(&s->waiting, k);
        if (!s->dirty) {
            s->dirty = true;
            s->next_dirty = r->dirty;
            r->dirty = s;
        }
        return;
    }
    tl_push(&r->ready, k);
}

static void on_sync(struct iou_ring *r, struct iou_sync *s, int res)
{
    s->busy = false;
    int fe = tent_fio_fault_take(IOU, TENT_FIO_FAULT_SYNC);
    if (fe)
        res = -fe;
    if (res < 0)
        tent_fio_sync_failed(s->file, -res);
    /* The failed tasks are published last: once a task of the file is
     * terminal its segment may be closed and s freed (remove_file), so
     * nothing of s or its file is read after the first publish. */
    struct tlist bad = {0};
    while (s->flying.head) {
        struct iou_task *k = tl_pop(&s->flying);
        struct tent_xerr *lost =
            res < 0 ? NULL : tent_fio_sync_check(IOU, s->file, k->off, k->len);
        if (lost)
            k->err = lost; /* an earlier fdatasync lost pages */
        else if (res < 0)
            k->err = tent_xerr_new(TENT_EIO, -res,
                                   "io_uring: fdatasync of file '%s' after "
                                   "a write of %llu bytes at offset %llu "
                                   "failed: %s",
                                   s->file->path, (unsigned long long)k->len,
                                   (unsigned long long)k->off, strerror(-res));
        if (k->err)
            tl_push(&bad, k);
        else
            tl_push(&r->ready, k);
    }
    if (s->waiting.head && !s->dirty) {
        s->dirty = true;
        s->next_dirty = r->dirty;
        r->dirty = s;
    }
    for (struct iou_task *k; (k = tl_pop(&bad));)
        fail_task(r, k, k->err);
}

/* Starts one fdatasync per file with writes waiting for one: one per file
 * per round of completions, shared by every write it covers. */
static void start_syncs(struct iou_ring *r)
{
    struct iou_sync **pp = &r->dirty;
    while (*pp) {
        struct iou_sync *s = *pp;
        struct io_uring_sqe *sqe =
            !s->busy && r->nsqe < r->cap ? io_uring_get_sqe(&r->ring) : NULL;
        if (s->busy || !sqe) {
            pp = &s->next_dirty; /* next round */
            continue;
        }
        io_uring_prep_fsync(sqe, s->file->fd, IORING_FSYNC_DATASYNC);
        io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)s | TAG_SYNC);
        r->nsqe++;
        count(&r->tp->c_fsyncs);
        tl_splice(&s->flying, &s->waiting);
        s->busy = true;
        s->dirty = false;
        *pp = s->next_dirty;
    }
}

/* Publishes the transfers done this round, after one fstat per file that
 * checks it is still linked and no shorter than at open (file_io.h). */
static void publish_ready(struct iou_ring *r)
{
    struct {
        struct tent_fio_file *f;
        struct tent_xerr *err;
    } seen[16];
    size_t nseen = 0;
    while (r->ready.head) {
        struct iou_task *k = tl_pop(&r->ready);
        struct tent_xerr *err = NULL;
        size_t i = 0;
        while (i < nseen && seen[i].f != k->file)
            i++;
        if (i == nseen) {
            if (nseen == sizeof(seen) / sizeof(seen[0])) {
                for (size_t j = 0; j < nseen; j++)
                    free(seen[j].err);
                nseen = i = 0;
            }
            seen[i].f = k->file;
            seen[i].err = tent_fio_check(IOU, k->file);
            nseen++;
        }
        if (seen[i].err)
            err = tent_xerr_new(seen[i].err->code, seen[i].err->native, "%s",
                                seen[i].err->msg);
        publish(r->tp, k, !seen[i].err, err);
    }
    for (size_t j = 0; j < nseen; j++)
        free(seen[j].err);
}

static void take_queue(struct iou_ring *r, bool *stop)
{
    pthread_mutex_lock(&r->qlock);
    struct tlist q = r->queue;
    r->queue.head = r->queue.tail = NULL;
    *stop = r->stop;
    pthread_mutex_unlock(&r->qlock);
    while (q.head)
        start_or_queue(r, tl_pop(&q));
}

/* Whether the hand-off queue is empty; then the worker is about to sleep,
 * and a submitter that comes later writes the eventfd. */
static bool may_sleep(struct iou_ring *r)
{
    pthread_mutex_lock(&r->qlock);
    bool empty = !r->queue.head;
    r->sleeping = empty;
    pthread_mutex_unlock(&r->qlock);
    return empty;
}

static void *worker_main(void *arg)
{
    struct iou_ring *r = arg;
    bool stop = false;
    arm_wake(r);
    for (;;) {
        take_queue(r, &stop);
        drain_backlog(r);
        start_syncs(r);
        unsigned io = r->nsqe - (r->wake_armed ? 1 : 0);
        if (stop && io == 0 && backlog_empty(r) && !r->dirty)
            break;
        int rc;
        if (may_sleep(r)) {
            struct __kernel_timespec ts = {.tv_sec = 1};
            struct io_uring_cqe *cqe;
            rc = io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &ts, NULL);
        } else {
            rc = io_uring_submit(&r->ring);
        }
        if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN &&
            rc != -EBUSY)
            LOG_WARN("io_uring: ring %d: io_uring_enter failed: %s", r->idx,
                     strerror(-rc));
        pthread_mutex_lock(&r->qlock);
        r->sleeping = false;
        pthread_mutex_unlock(&r->qlock);
        unsigned head, n = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(&r->ring, head, cqe)
        {
            n++;
            uint64_t ud = io_uring_cqe_get_data64(cqe);
            if (ud == LIBURING_UDATA_TIMEOUT)
                continue; /* liburing's own (kernels without EXT_ARG) */
            r->nsqe--;
            if (ud == TAG_WAKE) {
                r->wake_armed = false;
                if (!stop)
                    arm_wake(r);
            } else if (ud & TAG_SYNC) {
                on_sync(
                    r, (struct iou_sync *)(uintptr_t)(ud & ~(uint64_t)TAG_MASK),
                    cqe->res);
            } else {
                on_io(r, (struct iou_task *)(uintptr_t)ud, cqe->res);
            }
        }
        io_uring_cq_advance(&r->ring, n);
        publish_ready(r);
    }
    return NULL;
}

/* ---- install --------------------------------------------------------------
 */

static void wake(struct iou_ring *r)
{
    uint64_t one = 1;
    if (write(r->efd, &one, sizeof(one)) < 0)
        LOG_WARN("io_uring: waking ring %d failed: %s", r->idx,
                 strerror(errno));
}

static void ring_stop(struct iou_ring *r)
{
    if (r->started) {
        pthread_mutex_lock(&r->qlock);
        r->stop = true;
        pthread_mutex_unlock(&r->qlock);
        wake(r);
        pthread_join(r->thread, NULL);
        r->started = false;
    }
    if (r->ring_ok)
        io_uring_queue_exit(&r->ring);
    r->ring_ok = false;
    if (r->efd >= 0)
        close(r->efd);
    r->efd = -1;
    pthread_mutex_destroy(&r->qlock);
}

/* Creates ring r, trying the most useful flags this kernel accepts
 * (transports/io_uring/sqpoll: a kernel thread polls the SQ). */
static int ring_init(struct iou_transport *tp, struct iou_ring *r)
{
    static const unsigned extra[] = {
        IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL, 0};
    int rc = -EINVAL;
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
        struct io_uring_params p = {0};
        p.flags = IORING_SETUP_CLAMP | IORING_SETUP_CQSIZE;
        p.cq_entries = 2 * tp->depth;
        if (tp->sqpoll) {
            p.flags |= IORING_SETUP_SQPOLL;
            p.sq_thread_idle = tp->sqpoll_idle;
        } else {
            p.flags |= extra[i];
        }
        rc = io_uring_queue_init_params(tp->depth, &r->ring, &p);
        if (rc == 0) {
            r->cap = p.cq_entries;
            return 0;
        }
        if (rc != -EINVAL)
            break;
    }
    return rc;
}

static void mem_register(struct iou_transport *tp, struct iou_mem *m);
static void stop_rings(struct iou_transport *tp);

/* The rings and their workers, made when the first file arrives (an engine
 * that never opens a file segment pays for neither); reg_lock held. */
static int start_rings(struct iou_transport *tp)
{
    if (tp->nrings > 0)
        return TENT_OK;
    int rc = TENT_OK;
    int n = 0;
    for (; n < tp->nworkers; n++) {
        struct iou_ring *r = &tp->rings[n];
        memset(r, 0, sizeof(*r));
        r->tp = tp;
        r->idx = n;
        r->efd = -1;
        pthread_mutex_init(&r->qlock, NULL);
        int err = ring_init(tp, r);
        if (err < 0) {
            rc = tent_set_error(TENT_ENODEV,
                                "io_uring: io_uring_queue_init of ring %d "
                                "failed: %s",
                                n, strerror(-err));
            pthread_mutex_destroy(&r->qlock);
            break;
        }
        r->ring_ok = true;
        /* registered files and buffers; without them the plain forms */
        if (tp->fixed_files &&
            io_uring_register_files_sparse(&r->ring, NFILE_SLOTS) < 0)
            tp->fixed_files = false;
        if (tp->fixed_bufs &&
            io_uring_register_buffers_sparse(&r->ring, NBUF_SLOTS) < 0)
            tp->fixed_bufs = false;
        r->efd = eventfd(0, EFD_CLOEXEC);
        int perr = r->efd < 0 ? errno : 0;
        if (!perr)
            perr = pthread_create(&r->thread, NULL, worker_main, r);
        if (perr) {
            rc = tent_set_error(TENT_ENOMEM,
                                "io_uring: cannot start worker %d: %s", n,
                                strerror(perr));
            n++;
            tp->nrings = n;
            stop_rings(tp);
            return rc;
        }
        r->started = true;
    }
    tp->nrings = n;
    if (rc) {
        stop_rings(tp);
        return rc;
    }
    pthread_rwlock_wrlock(&tp->mem_lock);
    for (size_t i = 0; i < tp->nmems; i++)
        mem_register(tp, &tp->mems[i]);
    pthread_rwlock_unlock(&tp->mem_lock);
    LOG_DEBUG("io_uring: %d ring(s) of %u entries%s%s%s%s", tp->nrings,
              tp->depth, tp->sqpoll ? ", sqpoll" : "",
              tp->fixed_files ? ", registered files" : "",
              tp->fixed_bufs ? ", registered buffers" : "",
              tp->sync ? ", sync" : "");
    return TENT_OK;
}

static void stop_rings(struct iou_transport *tp)
{
    for (int i = 0; i < tp->nrings; i++)
        ring_stop(&tp->rings[i]);
    tp->nrings = 0;
}

static int iou_install(struct tent_transport *t)
{
    struct iou_transport *tp = tp_of(t);
    const struct tent_config *cfg = t->env->cfg;
    int64_t workers, depth, idle, lss, ldepth, promo;
    int rc = tent_config_get_int_range(cfg, "transports/io_uring/workers", 2, 1,
                                       MAX_RINGS, &workers);
    if (!rc)
        rc = tent_config_get_int_range(cfg, "transports/io_uring/queue_depth",
                                       128, 4, 4096, &depth);
    if (!rc)
        rc = tent_config_get_bool(cfg, "transports/io_uring/sqpoll", false,
                                  &tp->sqpoll);
    if (!rc)
        rc = tent_config_get_int_range(
            cfg, "transports/io_uring/sqpoll_idle_ms", 1000, 1, 60000, &idle);
    if (!rc)
        rc = tent_config_get_bool(cfg, "transports/io_uring/sync", false,
                                  &tp->sync);
    if (!rc)
        rc = tent_config_get_bool(cfg, "transports/io_uring/direct", true,
                                  &tp->direct);
    if (!rc)
        rc = tent_config_get_bool(cfg, "transports/io_uring/fixed_buffers",
                                  true, &tp->fixed_bufs);
    if (!rc)
        rc =
            tent_config_get_int_range(cfg, "transports/io_uring/low_slice_size",
                                      1 << 20, 4096, (int64_t)SQE_BYTES, &lss);
    if (!rc)
        rc = tent_config_get_int_range(cfg, "transports/io_uring/low_depth", 4,
                                       1, 4096, &ldepth);
    if (!rc)
        rc = tent_config_get_int_range(
            cfg, "transports/io_uring/priority_promotion_timeout_us", 10000, 0,
            60000000, &promo);
    if (rc)
        return rc;
    /* Is io_uring allowed here at all (kernel, sysctl io_uring_disabled,
     * seccomp)?  If not, the transport is not installed and bufio serves
     * the file segments. */
    int fe = tent_fio_fault_take(IOU, TENT_FIO_FAULT_SETUP);
    struct io_uring probe;
    int err = fe ? -fe : io_uring_queue_init(2, &probe, 0);
    if (err < 0)
        return tent_set_error(TENT_ENODEV,
                              "io_uring is not available here: "
                              "io_uring_queue_init failed: %s",
                              strerror(-err));
    io_uring_queue_exit(&probe);
    t->durable = tp->sync;
    tp->nworkers = (int)workers;
    tp->depth = (unsigned)depth;
    tp->low_slice = (uint64_t)lss;
    tp->low_depth = (unsigned)ldepth;
    tp->promo_ns = (uint64_t)promo * 1000u;
    tp->sqpoll_idle = (unsigned)idle;
    tp->fixed_files = true;
    tent_fio_table_init(&tp->files);
    pthread_mutex_init(&tp->reg_lock, NULL);
    pthread_rwlock_init(&tp->mem_lock, NULL);
    pthread_mutex_init(&tp->idle_lock, NULL);
    pthread_cond_init(&tp->idle, NULL);
    atomic_init(&tp->inflight, 0);
    atomic_init(&tp->quiescing, false);
    return TENT_OK;
}

static void iou_uninstall(struct tent_transport *t)
{
    struct iou_transport *tp = tp_of(t);
    stop_rings(tp);
    for (size_t i = 0; i < tp->files.n; i++)
        free(tp->files.v[i]->xport);
    tent_fio_table_fini(&tp->files);
    free(tp->mems);
    pthread_cond_destroy(&tp->idle);
    pthread_mutex_destroy(&tp->idle_lock);
    pthread_rwlock_destroy(&tp->mem_lock);
    pthread_mutex_destroy(&tp->reg_lock);
}

static uint32_t iou_caps(TENT_UNUSED struct tent_transport *t)
{
    return TENT_CAP_FILE | TENT_CAP_DRAM_TO_DRAM;
}

/* ---- sub-batches, submit, status ------------------------------------------
 */

static int iou_alloc_sub(struct tent_transport *t, size_t capacity,
                         struct tent_sub_batch **out)
{
    struct iou_transport *tp = tp_of(t);
    void *tasks;
    struct tent_sub_batch *base;
    int rc = tent_sub_batch_new(t, sizeof(struct iou_sub), capacity,
                                sizeof(struct iou_task), &tasks, &base);
    if (rc)
        return rc;
    struct iou_sub *sb = (struct iou_sub *)base;
    sb->tasks = tasks;
    unsigned n =
        atomic_fetch_add_explicit(&tp->next_ring, 1, memory_order_relaxed);
    sb->ring = &tp->rings[n % (unsigned)tp->nrings];
    atomic_init(&sb->inflight, 0);
    *out = base;
    return TENT_OK;
}

static int iou_free_sub(TENT_UNUSED struct tent_transport *t,
                        struct tent_sub_batch *base)
{
    struct iou_sub *sb = (struct iou_sub *)base;
    if (atomic_load(&sb->inflight) > 0)
        return tent_set_error(TENT_EBUSY,
                              "io_uring: %d task(s) of the sub-batch in flight",
                              atomic_load(&sb->inflight));
    for (size_t i = 0; i < base->capacity; i++)
        free(sb->tasks[i].err);
    tent_sub_batch_delete(base, sb->tasks);
    return TENT_OK;
}

/* The registered range holding [p, +len), or NULL; mem_lock held. */
static const struct iou_mem *mem_find(const struct iou_transport *tp,
                                      uintptr_t p, uint64_t len)
{
    size_t lo = 0, hi = tp->nmems;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (tp->mems[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* ranges may overlap: walk back from the last base <= p */
    for (size_t i = lo; i-- > 0;) {
        const struct iou_mem *m = &tp->mems[i];
        if (p - m->base < m->len && len <= m->len - (p - m->base) &&
            m->nslots > 0)
            return m;
    }
    return NULL;
}

static int iou_submit(struct tent_transport *t, struct tent_sub_batch *base,
                      const struct tent_xfer *reqs, size_t n,
                      struct tent_xfer_result *res)
{
    struct iou_transport *tp = tp_of(t);
    struct iou_sub *sb = (struct iou_sub *)base;
    struct tlist list = {0};
    int ret = TENT_OK;
    int started = 0;
    const struct tent_buffer *cached = NULL;
    struct tent_fio_file *f = NULL;
    pthread_rwlock_rdlock(&tp->files.lock);
    pthread_rwlock_rdlock(&tp->mem_lock);
    for (size_t i = 0; i < n; i++) {
        const struct tent_xfer *x = &reqs[i];
        res[i].code = TENT_OK;
        if (x->target_buf != cached) {
            cached = x->target_buf;
            f = tent_fio_table_find(&tp->files, cached);
        }
        int rc = tent_fio_admit(IOU, atomic_load(&tp->quiescing), f, x);
        if (rc) {
            tent_xres_fail(&res[i], rc, 0);
            if (ret == TENT_OK)
                ret = rc;
            continue;
        }
        struct iou_task *k = &sb->tasks[x->slot];
        free(k->err);
        k->err = NULL;
        k->bytes = 0;
        k->opcode = x->opcode;
        k->durable = x->opcode == OPCODE_WRITE && (tp->sync || x->durable);
        k->prio = tent_prio_class(x->priority);
        k->local = x->local;
        k->off = x->remote;
        k->len = x->length;
        k->file = f;
        k->sb = sb;
        k->done = 0;
        k->retries = 0;
        k->nodirect = !tp->direct;
        k->nofixed = false;
        const struct iou_mem *m = mem_find(tp, (uintptr_t)x->local, x->length);
        k->mslot = m ? m->slot : -1;
        k->mbase = m ? m->base : 0;
        atomic_store_explicit(&k->state, TENT_XFER_PENDING,
                              memory_order_relaxed);
        tl_push(&list, k);
        started++;
    }
    pthread_rwlock_unlock(&tp->mem_lock);
    pthread_rwlock_unlock(&tp->files.lock);
    if (!started)
        return ret;
    atomic_fetch_add(&sb->inflight, started);
    atomic_fetch_add(&tp->inflight, started);
    struct iou_ring *r = sb->ring;
    uint64_t now = tent_now_ns();
    for (struct iou_task *k = list.head; k; k = k->next)
        k->enq_ns = now;
    pthread_mutex_lock(&r->qlock);
    tl_splice(&r->queue, &list);
    bool sleeping = r->sleeping;
    r->sleeping = false;
    pthread_mutex_unlock(&r->qlock);
    if (sleeping)
        wake(r);
    return ret;
}

static int iou_status(TENT_UNUSED struct tent_transport *t,
                      struct tent_sub_batch *base, uint32_t slot,
                      struct tent_xfer_status *out)
{
    struct iou_task *k = &((struct iou_sub *)base)->tasks[slot];
    int s = atomic_load_explicit(&k->state, memory_order_acquire);
    tent_fio_status(s, &k->bytes, &k->err, out);
    return TENT_OK;
}

static int iou_quiesce(struct tent_transport *t)
{
    struct iou_transport *tp = tp_of(t);
    atomic_store(&tp->quiescing, true);
    return tent_fio_quiesce(IOU, &tp->inflight, &tp->idle_lock, &tp->idle);
}

/* ---- registration ---------------------------------------------------------
 */

/* n free slots in a row of used[0..cap), marked used; -1 when none. */
static int slots_take(uint8_t *used, int cap, int n)
{
    for (int i = 0; i + n <= cap; i++) {
        int j = 0;
        while (j < n && !used[i + j])
            j++;
        if (j == n) {
            memset(used + i, 1, (size_t)n);
            return i;
        }
        i += j;
    }
    return -1;
}

/* Sets (iov) or clears (iov NULL) buffer slot in every ring: the number of
 * rings done, all on success. */
static int set_buf_slot(struct iou_transport *tp, int slot,
                        const struct iovec *iov)
{
    struct iovec none = {0};
    int i = 0;
    for (; i < tp->nrings; i++)
        if (io_uring_register_buffers_update_tag(
                &tp->rings[i].ring, (unsigned)slot, iov ? iov : &none, NULL,
                1) < 0)
            break;
    return i;
}

/* Makes m registered buffers of every ring, in slots of at most 1 GiB;
 * where the kernel refuses (RLIMIT_MEMLOCK, memory it cannot pin) m keeps
 * slot -1 and is served by plain reads and writes. */
static void mem_register(struct iou_transport *tp, struct iou_mem *m)
{
    m->slot = -1;
    m->nslots = 0;
    if (!tp->fixed_bufs)
        return;
    int need = (int)((m->len + SLOT_BYTES - 1) / SLOT_BYTES);
    int slot = slots_take(tp->buf_used, NBUF_SLOTS, need);
    if (slot < 0)
        return;
    int done = 0, err = 0;
    for (; done < need; done++) {
        uint64_t o = (uint64_t)done * SLOT_BYTES;
        struct iovec iov = {(void *)(uintptr_t)(m->base + o),
                            m->len - o < SLOT_BYTES ? m->len - o : SLOT_BYTES};
        int rings = set_buf_slot(tp, slot + done, &iov);
        if (rings < tp->nrings) {
            /* undo this slot in the rings that took it */
            for (int i = 0; i < rings; i++) {
                struct iovec none = {0};
                io_uring_register_buffers_update_tag(&tp->rings[i].ring,
                                                     (unsigned)(slot + done),
                                                     &none, NULL, 1);
            }
            err = 1;
            break;
        }
    }
    if (err) {
        for (int i = 0; i < done; i++)
            set_buf_slot(tp, slot + i, NULL);
        memset(tp->buf_used + slot, 0, (size_t)need);
        LOG_DEBUG("io_uring: memory [%#llx, +%llu) is not a registered "
                  "buffer (the kernel refused to pin it); plain reads and "
                  "writes serve it",
                  (unsigned long long)m->base, (unsigned long long)m->len);
        return;
    }
    m->slot = slot;
    m->nslots = need;
}

static void mem_unregister(struct iou_transport *tp, struct iou_mem *m)
{
    for (int i = 0; i < m->nslots; i++)
        set_buf_slot(tp, m->slot + i, NULL);
    if (m->nslots > 0)
        memset(tp->buf_used + m->slot, 0, (size_t)m->nslots);
    m->nslots = 0;
}

static int add_memory(struct iou_transport *tp, struct tent_buffer *buf)
{
    /* Device memory is taken and left out by the capabilities (no
     * DEVICE_TO_DRAM): registering it is not a warning. */
    if (buf->is_device)
        return TENT_OK;
    struct iou_mem m = {.base = buf->base, .len = buf->length};
    pthread_mutex_lock(&tp->reg_lock);
    if (tp->nmems == tp->capmems) {
        size_t cap = tp->capmems ? 2 * tp->capmems : 16;
        struct iou_mem *v = realloc(tp->mems, cap * sizeof(*v));
        if (!v) {
            pthread_mutex_unlock(&tp->reg_lock);
            return tent_set_error(TENT_ENOMEM, "io_uring: out of memory");
        }
        pthread_rwlock_wrlock(&tp->mem_lock);
        tp->mems = v;
        tp->capmems = cap;
        pthread_rwlock_unlock(&tp->mem_lock);
    }
    if (tp->nrings > 0)
        mem_register(tp, &m);
    else
        m.slot = -1; /* registered with the rings when they start */
    pthread_rwlock_wrlock(&tp->mem_lock);
    size_t pos = 0;
    while (pos < tp->nmems && tp->mems[pos].base <= m.base)
        pos++;
    memmove(&tp->mems[pos + 1], &tp->mems[pos],
            (tp->nmems - pos) * sizeof(*tp->mems));
    tp->mems[pos] = m;
    tp->nmems++;
    pthread_rwlock_unlock(&tp->mem_lock);
    pthread_mutex_unlock(&tp->reg_lock);
    return TENT_OK;
}

static void remove_memory(struct iou_transport *tp,
                          const struct tent_buffer *buf)
{
    if (buf->is_device)
        return;
    pthread_mutex_lock(&tp->reg_lock);
    pthread_rwlock_wrlock(&tp->mem_lock);
    for (size_t i = 0; i < tp->nmems; i++) {
        struct iou_mem *m = &tp->mems[i];
        if (m->base != buf->base || m->len != buf->length)
            continue;
        struct iou_mem gone = *m;
        memmove(m, m + 1, (tp->nmems - i - 1) * sizeof(*m));
        tp->nmems--;
        pthread_rwlock_unlock(&tp->mem_lock);
        /* a task that still names the slot gets EFAULT and goes again
         * without it */
        mem_unregister(tp, &gone);
        pthread_mutex_unlock(&tp->reg_lock);
        return;
    }
    pthread_rwlock_unlock(&tp->mem_lock);
    pthread_mutex_unlock(&tp->reg_lock);
}

static int set_file_slots(struct iou_transport *tp, int slot, const int *fds)
{
    int i = 0;
    for (; i < tp->nrings; i++)
        if (io_uring_register_files_update(&tp->rings[i].ring, (unsigned)slot,
                                           fds, 2) < 0)
            break;
    return i;
}

/* Clears f's registered-file slots in every ring (if it has them), frees
 * its transport state and closes it: the end of remove_file and of a
 * failed add_file alike. */
static void release_file(struct iou_transport *tp, struct tent_fio_file *f)
{
    struct iou_file *uf = f->xport;
    pthread_mutex_lock(&tp->reg_lock);
    if (uf->fslot >= 0) {
        int none[2] = {-1, -1};
        set_file_slots(tp, uf->fslot, none);
        memset(tp->file_used + uf->fslot, 0, 2);
    }
    pthread_mutex_unlock(&tp->reg_lock);
    free(uf);
    tent_fio_close(f);
}

static int add_file(struct iou_transport *tp, struct tent_buffer *buf)
{
    struct tent_fio_file *f;
    int rc = tent_fio_open(IOU, buf, tp->direct, &f);
    if (rc)
        return rc;
    struct iou_file *uf = calloc(1, sizeof(*uf));
    if (!uf) {
        tent_fio_close(f);
        return tent_set_error(TENT_ENOMEM, "io_uring: out of memory");
    }
    uf->fslot = -1;
    f->xport = uf;
    pthread_mutex_lock(&tp->reg_lock);
    rc = start_rings(tp);
    if (rc) {
        pthread_mutex_unlock(&tp->reg_lock);
        free(uf);
        tent_fio_close(f);
        return rc;
    }
    int slot = tp->fixed_files ? slots_take(tp->file_used, NFILE_SLOTS, 2) : -1;
    if (slot >= 0) {
        int fds[2] = {f->fd, f->dfd};
        int rings = set_file_slots(tp, slot, fds);
        if (rings == tp->nrings) {
            uf->fslot = slot;
        } else {
            int none[2] = {-1, -1};
            for (int i = 0; i < rings; i++)
                io_uring_register_files_update(&tp->rings[i].ring,
                                               (unsigned)slot, none, 2);
            memset(tp->file_used + slot, 0, 2);
        }
    }
    pthread_mutex_unlock(&tp->reg_lock);
    rc = tent_fio_table_add(&tp->files, f);
    if (rc) {
        release_file(tp, f);
        return rc;
    }
    LOG_DEBUG("io_uring: file '%s': %s, alignment %u/%u%s", f->path,
              f->dfd >= 0 ? "O_DIRECT when aligned" : "page cache only",
              f->mem_align, f->off_align, uf->fslot >= 0 ? ", registered" : "");
    return TENT_OK;
}

static void remove_file(struct iou_transport *tp, struct tent_buffer *buf)
{
    struct tent_fio_file *f = tent_fio_table_take(&tp->files, buf);
    if (f)
        release_file(tp, f);
}

static int iou_add_buffer(struct tent_transport *t, struct tent_buffer *buf)
{
    struct iou_transport *tp = tp_of(t);
    return tent_fio_is_file(buf) ? add_file(tp, buf) : add_memory(tp, buf);
}

static int iou_remove_buffer(struct tent_transport *t, struct tent_buffer *buf)
{
    struct iou_transport *tp = tp_of(t);
    if (tent_fio_is_file(buf))
        remove_file(tp, buf);
    else
        remove_memory(tp, buf);
    return TENT_OK;
}

void tent_iouring_counters(struct tent_transport *t,
                           struct tent_iouring_counters *out)
{
    struct iou_transport *tp = tp_of(t);
    out->direct_ios = atomic_load(&tp->c_direct);
    out->buffered_ios = atomic_load(&tp->c_buffered);
    out->fixed_bufs = atomic_load(&tp->c_fixed_bufs);
    out->fixed_files = atomic_load(&tp->c_fixed_files);
    out->resubmits = atomic_load(&tp->c_resubmits);
    out->fsyncs = atomic_load(&tp->c_fsyncs);
    out->rings = tp->nrings;
    out->sqpoll = tp->sqpoll;
}

const struct tent_transport_ops tent_io_uring_transport_ops = {
    .name = "io_uring",
    .type = TRANSPORT_IOURING,
    .default_enabled = true,
    .instance_size = sizeof(struct iou_transport),
    .install = iou_install,
    .uninstall = iou_uninstall,
    .capabilities = iou_caps,
    .can_reach = tent_xport_reach_any,
    .alloc_sub_batch = iou_alloc_sub,
    .free_sub_batch = iou_free_sub,
    .submit = iou_submit,
    .status = iou_status,
    .quiesce = iou_quiesce,
    .peer_open = tent_xport_peer_open_plain,
    .peer_close = tent_xport_peer_close_plain,
    .add_buffer = iou_add_buffer,
    .remove_buffer = iou_remove_buffer,
};
