/* bufio: the buffered file transport, for kernels or sandboxes that refuse
 * io_uring.  Beyond TENT (whose buf-io transport calls pread/pwrite inside
 * submit, and is not loaded by its runtime).
 *
 * Submit puts the requests on their class's queue (the request's priority)
 * and wakes a worker (transports/bufio/workers); workers move them with
 * pread/pwrite through the page cache, then, for the tasks they took
 * together, fdatasync (when a write must be durable) and fstat each file
 * once before any task becomes COMPLETED.  No task is ever COMPLETED with
 * fewer bytes than asked, and status reads an atomic word: it never waits.
 * A LOW request moves in pieces with the HIGH and MEDIUM requests queued
 * meanwhile served between two, so a HIGH request waits behind at most one
 * piece of a LOW one.  More: docs/file-segments.md. */
#include "common/clock.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "transport/file_io.h"
#include "transport/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUFIO       "bufio"
#define MAX_WORKERS 64
#define TAKE_MAX    16 /* tasks a worker takes from the queue at once */

struct bufio_sub;

struct bufio_task {
    _Atomic int state; /* enum tent_xfer_state */
    uint64_t bytes;
    struct tent_xerr *err;
    int opcode;
    bool durable;    /* WRITE: fdatasync before COMPLETED (sync, or the
                        request's tent_xfer.durable) */
    int prio;        /* TENT_PRIO_* of the request */
    uint64_t enq_ns; /* when it was queued (promotion) */
    char *local;
    uint64_t off, len;
    struct tent_fio_file *file;
    struct bufio_sub *sb;
    struct bufio_task *next; /* queue link */
};

struct bufio_sub {
    struct tent_sub_batch base;
    struct bufio_task *tasks;
    atomic_int inflight;
};

/* lock guards the queues and stop; workers wait on more, quiesce on idle.
 * It is a leaf: nothing is taken while it is held.  urgent (HIGH and
 * MEDIUM tasks queued) is also read without it, between a LOW task's
 * pieces. */
struct bufio_transport {
    struct tent_transport base;
    struct tent_fio_table files;
    bool sync;
    int nworkers, nstarted; /* configured, running */
    pthread_t workers[MAX_WORKERS];
    pthread_mutex_t lock;
    pthread_cond_t more, idle;
    struct bufio_task *head[TENT_NPRIO], *tail[TENT_NPRIO];
    uint64_t served_ns[TENT_NPRIO]; /* a class last taken from (promotion) */
    size_t queued;                  /* every class */
    atomic_size_t urgent;
    uint64_t low_slice, promo_ns;
    bool stop;
    atomic_int inflight; /* tasks submitted and not yet terminal */
    atomic_bool quiescing;
};

static struct bufio_transport *bt_of(struct tent_transport *t)
{
    return (struct bufio_transport *)t;
}

static void serve_urgent(struct bufio_transport *bt);

/* Moves one task's bytes; false, with its cause in *err (NULL when even
 * that could not be allocated), when it failed.  A short transfer continues
 * from where it stopped; a read that meets the end of the file fails (the
 * file shrank).  A LOW task goes in pieces
 * of low_slice bytes, with the HIGH and MEDIUM tasks queued meanwhile
 * served between two. */
static bool move(struct bufio_transport *bt, struct bufio_task *k,
                 struct tent_xerr **err)
{
    struct tent_fio_file *f = k->file;
    uint64_t done = 0;
    bool pieces = k->prio == TENT_PRIO_LOW;
    *err = NULL;
    while (done < k->len) {
        if (pieces && done &&
            atomic_load_explicit(&bt->urgent, memory_order_relaxed))
            serve_urgent(bt);
        uint64_t want = k->len - done;
        if (pieces && want > bt->low_slice)
            want = bt->low_slice;
        int fe = tent_fio_fault_take(BUFIO, TENT_FIO_FAULT_ERRNO);
        if (fe) {
            *err =
                tent_fio_io_error(BUFIO, f, k->opcode, k->off + done, want, fe);
            return false;
        }
        if (want > 1 && tent_fio_fault_take(BUFIO, TENT_FIO_FAULT_SHORT))
            want /= 2;
        ssize_t r =
            k->opcode == OPCODE_READ
                ? pread(f->fd, k->local + done, want, (off_t)(k->off + done))
                : pwrite(f->fd, k->local + done, want, (off_t)(k->off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0 && k->opcode == OPCODE_READ)
                *err = tent_fio_eof_error(BUFIO, f, k->off + done);
            else
                *err = tent_fio_io_error(BUFIO, f, k->opcode, k->off + done,
                                         want, r < 0 ? errno : EIO);
            return false;
        }
        done += (uint64_t)r;
    }
    return true;
}

/* Publishes a task's outcome.  The state is the last thing written to the
 * task: once the runtime sees it terminal it may free the sub-batch. */
static void finish(struct bufio_transport *bt, struct bufio_task *k, bool ok,
                   struct tent_xerr *err)
{
    k->err = err;
    k->bytes = ok ? k->len : 0;
    if (!ok && err)
        LOG_DEBUG("%s", err->msg);
    atomic_fetch_sub(&k->sb->inflight, 1);
    atomic_store_explicit(&k->state,
                          ok ? TENT_XFER_COMPLETED : TENT_XFER_FAILED,
                          memory_order_release);
    if (atomic_fetch_sub(&bt->inflight, 1) == 1) {
        pthread_mutex_lock(&bt->lock);
        pthread_cond_broadcast(&bt->idle);
        pthread_mutex_unlock(&bt->lock);
    }
}

/* The tasks taken together: move each, then per file one fdatasync (when
 * a durable write went to it: transports/bufio/sync, or the request's
 * tent_xfer.durable, docs/durability.md) and one fstat that it was neither
 * deleted nor truncated, then publish.  A failed
 * fdatasync fails every write to that file among them (which bytes it
 * lost is not known) and marks the file (tent_fio_sync_failed): a durable
 * write is not COMPLETED on a marked file. */
static void run_taken(struct bufio_transport *bt, struct bufio_task **v,
                      size_t n)
{
    struct tent_xerr *errs[TAKE_MAX];
    bool ok[TAKE_MAX];
    for (size_t i = 0; i < n; i++)
        ok[i] = move(bt, v[i], &errs[i]);
    for (size_t i = 0; i < n; i++) {
        struct tent_fio_file *f = v[i]->file;
        bool seen = false, wrote = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = v[j]->file == f;
        if (seen)
            continue;
        for (size_t j = i; j < n; j++)
            wrote |= v[j]->file == f && ok[j] && v[j]->durable;
        struct tent_xerr *serr = NULL;
        bool synced = true;
        int fe = wrote ? tent_fio_fault_take(BUFIO, TENT_FIO_FAULT_SYNC) : 0;
        if (wrote && (fe || fdatasync(f->fd) != 0)) {
            int err = fe ? fe : errno;
            synced = false;
            tent_fio_sync_failed(f, err);
            serr = tent_xerr_new(TENT_EIO, err,
                                 "bufio: fdatasync of file '%s' failed: %s",
                                 f->path, strerror(err));
        }
        struct tent_xerr *cerr = tent_fio_check(BUFIO, f);
        for (size_t j = i; j < n; j++) {
            if (v[j]->file != f || !ok[j])
                continue;
            const struct tent_xerr *why = cerr;
            if (!why && !synced && v[j]->opcode == OPCODE_WRITE)
                why = serr;
            if (!why && !(!synced && v[j]->opcode == OPCODE_WRITE)) {
                /* synced: unless an earlier fdatasync lost pages */
                if (v[j]->durable && (errs[j] = tent_fio_sync_check(
                                          BUFIO, f, v[j]->off, v[j]->len)))
                    ok[j] = false;
                continue;
            }
            ok[j] = false;
            errs[j] =
                why ? tent_xerr_new(why->code, why->native, "%s", why->msg)
                    : NULL;
        }
        free(serr);
        free(cerr);
    }
    for (size_t i = 0; i < n; i++)
        finish(bt, v[i], ok[i], errs[i]);
}

/* The class a worker serves next: the best effective one queued (a class
 * not served for priority_promotion_timeout_us counts one class higher per
 * timeout, so LOW is never starved), or -1.  urgent_only: HIGH and MEDIUM only
 * (a LOW task's worker between two pieces).  Caller holds lock. */
static int next_class_locked(struct bufio_transport *bt, bool urgent_only)
{
    uint64_t since[TENT_NPRIO];
    for (int c = 0; c < TENT_NPRIO; c++) {
        const struct bufio_task *h = bt->head[c];
        since[c] = !h || (urgent_only && c == TENT_PRIO_LOW)
                       ? TENT_PRIO_IDLE
                       : tent_prio_since(h->enq_ns, bt->served_ns[c]);
    }
    return tent_prio_pick(since, tent_now_ns(), bt->promo_ns);
}

/* Takes a fair share of class c's queue into v (so that the other workers
 * get some of a burst); returns how many.  Caller holds lock. */
static size_t take_locked(struct bufio_transport *bt, int c,
                          struct bufio_task **v)
{
    size_t share = bt->queued / (size_t)bt->nworkers;
    if (share < 1)
        share = 1;
    if (share > TAKE_MAX)
        share = TAKE_MAX;
    size_t n = 0;
    bt->served_ns[c] = tent_now_ns();
    while (bt->head[c] && n < share) {
        v[n++] = bt->head[c];
        bt->head[c] = bt->head[c]->next;
        bt->queued--;
    }
    if (!bt->head[c])
        bt->tail[c] = NULL;
    if (c != TENT_PRIO_LOW)
        atomic_fetch_sub_explicit(&bt->urgent, n, memory_order_relaxed);
    if (bt->queued)
        pthread_cond_signal(&bt->more);
    return n;
}

/* Between two pieces of a LOW task: one share of the HIGH and MEDIUM
 * tasks queued (then the LOW task's next piece, so that a stream of them
 * does not stop it). */
static void serve_urgent(struct bufio_transport *bt)
{
    struct bufio_task *v[TAKE_MAX];
    pthread_mutex_lock(&bt->lock);
    int c = next_class_locked(bt, true);
    size_t n = c < 0 ? 0 : take_locked(bt, c, v);
    pthread_mutex_unlock(&bt->lock);
    if (n)
        run_taken(bt, v, n); /* not LOW: no pieces, no recursion */
}

static void *worker_main(void *arg)
{
    struct bufio_transport *bt = arg;
    struct bufio_task *v[TAKE_MAX];
    pthread_mutex_lock(&bt->lock);
    for (;;) {
        while (!bt->queued && !bt->stop)
            pthread_cond_wait(&bt->more, &bt->lock);
        int c = next_class_locked(bt, false);
        if (c < 0)
            break; /* stopping, nothing left */
        size_t n = take_locked(bt, c, v);
        pthread_mutex_unlock(&bt->lock);
        run_taken(bt, v, n);
        pthread_mutex_lock(&bt->lock);
    }
    pthread_mutex_unlock(&bt->lock);
    return NULL;
}

static void stop_workers(struct bufio_transport *bt, int n)
{
    pthread_mutex_lock(&bt->lock);
    bt->stop = true;
    pthread_cond_broadcast(&bt->more);
    pthread_mutex_unlock(&bt->lock);
    for (int i = 0; i < n; i++)
        pthread_join(bt->workers[i], NULL);
}

static int bufio_install(struct tent_transport *t)
{
    struct bufio_transport *bt = bt_of(t);
    const struct tent_xport_env *env = t->env;
    int64_t workers, lss, promo;
    int rc = tent_config_get_int_range(env->cfg, "transports/bufio/workers", 2,
                                       1, MAX_WORKERS, &workers);
    if (!rc)
        rc = tent_config_get_bool(env->cfg, "transports/bufio/sync", false,
                                  &bt->sync);
    if (!rc)
        rc = tent_config_get_int_range(env->cfg,
                                       "transports/bufio/low_slice_size",
                                       1 << 20, 4096, INT64_MAX, &lss);
    if (!rc)
        rc = tent_config_get_int_range(
            env->cfg, "transports/bufio/priority_promotion_timeout_us", 10000,
            0, 60000000, &promo);
    if (rc)
        return rc;
    t->durable = bt->sync;
    bt->nworkers = (int)workers;
    bt->low_slice = (uint64_t)lss;
    bt->promo_ns = (uint64_t)promo * 1000u;
    atomic_init(&bt->urgent, 0);
    tent_fio_table_init(&bt->files);
    pthread_mutex_init(&bt->lock, NULL);
    pthread_cond_init(&bt->more, NULL);
    pthread_cond_init(&bt->idle, NULL);
    atomic_init(&bt->inflight, 0);
    atomic_init(&bt->quiescing, false);
    return TENT_OK;
}

/* The workers, started with the first file (add_buffer calls come one at a
 * time): an engine that never opens a file segment runs none. */
static int start_workers(struct bufio_transport *bt)
{
    for (; bt->nstarted < bt->nworkers; bt->nstarted++) {
        int err =
            pthread_create(&bt->workers[bt->nstarted], NULL, worker_main, bt);
        if (err)
            return tent_set_error(TENT_ENOMEM,
                                  "bufio: cannot start worker %d: %s",
                                  bt->nstarted, strerror(err));
    }
    LOG_DEBUG("bufio: %d worker(s), sync %s", bt->nworkers,
              bt->sync ? "on" : "off");
    return TENT_OK;
}

static void bufio_uninstall(struct tent_transport *t)
{
    struct bufio_transport *bt = bt_of(t);
    stop_workers(bt, bt->nstarted);
    pthread_cond_destroy(&bt->idle);
    pthread_cond_destroy(&bt->more);
    pthread_mutex_destroy(&bt->lock);
    tent_fio_table_fini(&bt->files);
}

static uint32_t bufio_caps(TENT_UNUSED struct tent_transport *t)
{
    return TENT_CAP_FILE | TENT_CAP_DRAM_TO_DRAM;
}

static int bufio_alloc_sub(struct tent_transport *t, size_t capacity,
                           struct tent_sub_batch **out)
{
    void *tasks;
    struct tent_sub_batch *base;
    int rc = tent_sub_batch_new(t, sizeof(struct bufio_sub), capacity,
                                sizeof(struct bufio_task), &tasks, &base);
    if (rc)
        return rc;
    struct bufio_sub *sb = (struct bufio_sub *)base;
    sb->tasks = tasks;
    atomic_init(&sb->inflight, 0);
    *out = base;
    return TENT_OK;
}

static int bufio_free_sub(TENT_UNUSED struct tent_transport *t,
                          struct tent_sub_batch *base)
{
    struct bufio_sub *sb = (struct bufio_sub *)base;
    if (atomic_load(&sb->inflight) > 0)
        return tent_set_error(TENT_EBUSY,
                              "bufio: %d task(s) of the sub-batch in flight",
                              atomic_load(&sb->inflight));
    for (size_t i = 0; i < base->capacity; i++)
        free(sb->tasks[i].err);
    tent_sub_batch_delete(base, sb->tasks);
    return TENT_OK;
}

static int bufio_submit(struct tent_transport *t, struct tent_sub_batch *base,
                        const struct tent_xfer *reqs, size_t n,
                        struct tent_xfer_result *res)
{
    struct bufio_transport *bt = bt_of(t);
    struct bufio_sub *sb = (struct bufio_sub *)base;
    struct bufio_task *first[TENT_NPRIO] = {0}, *last[TENT_NPRIO] = {0};
    int ret = TENT_OK;
    size_t started = 0;
    const struct tent_buffer *cached = NULL;
    struct tent_fio_file *f = NULL;
    pthread_rwlock_rdlock(&bt->files.lock);
    for (size_t i = 0; i < n; i++) {
        const struct tent_xfer *x = &reqs[i];
        res[i].code = TENT_OK;
        if (x->target_buf != cached) {
            cached = x->target_buf;
            f = tent_fio_table_find(&bt->files, cached);
        }
        int rc = tent_fio_admit(BUFIO, atomic_load(&bt->quiescing), f, x);
        if (rc) {
            tent_xres_fail(&res[i], rc, 0);
            if (ret == TENT_OK)
                ret = rc;
            continue;
        }
        struct bufio_task *k = &sb->tasks[x->slot];
        free(k->err);
        k->err = NULL;
        k->bytes = 0;
        k->opcode = x->opcode;
        k->durable = x->opcode == OPCODE_WRITE && (bt->sync || x->durable);
        k->prio = tent_prio_class(x->priority);
        k->local = x->local;
        k->off = x->remote;
        k->len = x->length;
        k->file = f;
        k->sb = sb;
        k->next = NULL;
        atomic_store_explicit(&k->state, TENT_XFER_PENDING,
                              memory_order_relaxed);
        if (last[k->prio])
            last[k->prio]->next = k;
        else
            first[k->prio] = k;
        last[k->prio] = k;
        started++;
    }
    pthread_rwlock_unlock(&bt->files.lock);
    if (!started)
        return ret;
    atomic_fetch_add(&sb->inflight, (int)started);
    atomic_fetch_add(&bt->inflight, (int)started);
    uint64_t now = tent_now_ns();
    pthread_mutex_lock(&bt->lock);
    for (int c = 0; c < TENT_NPRIO; c++) {
        if (!first[c])
            continue;
        size_t m = 0;
        for (struct bufio_task *k = first[c]; k; k = k->next, m++)
            k->enq_ns = now;
        if (bt->tail[c])
            bt->tail[c]->next = first[c];
        else
            bt->head[c] = first[c];
        bt->tail[c] = last[c];
        if (c != TENT_PRIO_LOW)
            atomic_fetch_add_explicit(&bt->urgent, m, memory_order_relaxed);
    }
    bt->queued += started;
    if (started > 1)
        pthread_cond_broadcast(&bt->more);
    else
        pthread_cond_signal(&bt->more);
    pthread_mutex_unlock(&bt->lock);
    return ret;
}

static int bufio_status(TENT_UNUSED struct tent_transport *t,
                        struct tent_sub_batch *base, uint32_t slot,
                        struct tent_xfer_status *out)
{
    struct bufio_task *k = &((struct bufio_sub *)base)->tasks[slot];
    int s = atomic_load_explicit(&k->state, memory_order_acquire);
    tent_fio_status(s, &k->bytes, &k->err, out);
    return TENT_OK;
}

static int bufio_quiesce(struct tent_transport *t)
{
    struct bufio_transport *bt = bt_of(t);
    atomic_store(&bt->quiescing, true);
    return tent_fio_quiesce(BUFIO, &bt->inflight, &bt->lock, &bt->idle);
}

static int bufio_add_buffer(struct tent_transport *t, struct tent_buffer *buf)
{
    struct bufio_transport *bt = bt_of(t);
    /* Memory: nothing to prepare.  Device memory is taken too, and left
     * out by the capabilities (no DEVICE_TO_DRAM), so that registering it
     * is not a warning. */
    if (!tent_fio_is_file(buf))
        return TENT_OK;
    struct tent_fio_file *f;
    int rc = start_workers(bt);
    if (!rc)
        rc = tent_fio_open(BUFIO, buf, false, &f);
    if (rc)
        return rc;
    rc = tent_fio_table_add(&bt->files, f);
    if (rc)
        tent_fio_close(f);
    return rc;
}

static int bufio_remove_buffer(struct tent_transport *t,
                               struct tent_buffer *buf)
{
    if (tent_fio_is_file(buf))
        tent_fio_close(tent_fio_table_take(&bt_of(t)->files, buf));
    return TENT_OK;
}

const struct tent_transport_ops tent_bufio_transport_ops = {
    .name = "bufio",
    .type = TRANSPORT_BUFIO,
    .default_enabled = true,
    .instance_size = sizeof(struct bufio_transport),
    .install = bufio_install,
    .uninstall = bufio_uninstall,
    .capabilities = bufio_caps,
    .can_reach = tent_xport_reach_any,
    .alloc_sub_batch = bufio_alloc_sub,
    .free_sub_batch = bufio_free_sub,
    .submit = bufio_submit,
    .status = bufio_status,
    .quiesce = bufio_quiesce,
    .peer_open = tent_xport_peer_open_plain,
    .peer_close = tent_xport_peer_close_plain,
    .add_buffer = bufio_add_buffer,
    .remove_buffer = bufio_remove_buffer,
};
