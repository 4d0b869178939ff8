/* The engine state both Python classes share: lifetime, segment cache
 * (opened interruptibly), the registrations and the Python objects they
 * keep alive, and the blocking wait. */
#include "tentpy.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* tent_load_config_from_file() sets a process-wide path: engine creation
 * with a per-engine config file is serialised here. */
static pthread_mutex_t g_create_lock = PTHREAD_MUTEX_INITIALIZER;

double tentpy_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

tent_engine_t tentpy_create_engine(const char *config_path, int *err, char *msg,
                                   size_t msg_len)
{
    tent_engine_t e;
    Py_BEGIN_ALLOW_THREADS;
    pthread_mutex_lock(&g_create_lock);
    if (config_path)
        tent_load_config_from_file(config_path);
    e = tent_create_engine();
    if (!e)
        snprintf(msg, msg_len, "%s", tent_last_error());
    if (config_path)
        tent_load_config_from_file(NULL); /* back to MC_TENT_CONF */
    pthread_mutex_unlock(&g_create_lock);
    Py_END_ALLOW_THREADS;
    *err = e ? TENT_OK : TENT_EINVAL;
    return e;
}

int tentpy_core_init(struct tentpy_core *c)
{
    c->eng = NULL;
    atomic_init(&c->active, 0);
    atomic_init(&c->closed, false);
    atomic_init(&c->nparked_hint, 0);
    c->parked = NULL;
    c->nparked = c->park_cap = 0;
    pthread_mutex_init(&c->park_lock, NULL);
    pthread_mutex_init(&c->reg_lock, NULL);
    c->regs = NULL;
    c->nregs = c->regs_cap = 0;
    c->holds = NULL;
    c->nholds = c->holds_cap = 0;
    c->segments = PyDict_New();
    c->async_keep = PyDict_New();
    if (!c->segments || !c->async_keep)
        return -1;
    return 0;
}

int tentpy_check(struct tentpy_core *c)
{
    if (atomic_load(&c->closed) || !c->eng) {
        PyErr_SetString(PyExc_RuntimeError,
                        c->eng || atomic_load(&c->closed)
                            ? "the transfer engine is closed"
                            : "the transfer engine is not initialized");
        return -1;
    }
    return 0;
}

int tentpy_enter(struct tentpy_core *c)
{
    atomic_fetch_add(&c->active, 1);
    if (tentpy_check(c) < 0) {
        atomic_fetch_sub(&c->active, 1);
        return -1;
    }
    return 0;
}

void tentpy_sweep(struct tentpy_core *c)
{
    pthread_mutex_lock(&c->park_lock);
    size_t j = 0;
    for (size_t i = 0; i < c->nparked; i++) {
        int rc = tent_free_batch(c->eng, c->parked[i]);
        if (rc == TENT_EBUSY)
            c->parked[j++] = c->parked[i];
    }
    c->nparked = j;
    atomic_store(&c->nparked_hint, j);
    pthread_mutex_unlock(&c->park_lock);
}

static void park(struct tentpy_core *c, tent_batch_id_t bid)
{
    pthread_mutex_lock(&c->park_lock);
    if (c->nparked == c->park_cap) {
        size_t cap = c->park_cap ? c->park_cap * 2 : 8;
        tent_batch_id_t *p = realloc(c->parked, cap * sizeof(*p));
        if (!p) {
            /* Cannot remember it: the engine's teardown still frees it. */
            pthread_mutex_unlock(&c->park_lock);
            return;
        }
        c->parked = p;
        c->park_cap = cap;
    }
    c->parked[c->nparked++] = bid;
    atomic_store(&c->nparked_hint, c->nparked);
    pthread_mutex_unlock(&c->park_lock);
}

void tentpy_release_batch(struct tentpy_core *c, tent_batch_id_t bid)
{
    if (tent_free_batch(c->eng, bid) == TENT_EBUSY)
        park(c, bid);
}

/* ---- registrations ------------------------------------------------------ */

/* Drops every hold and forgets the registrations (the engine is gone).
 * The table is emptied before any object is released: a finalizer that
 * runs then sees a consistent, empty table. */
static void release_all(struct tentpy_core *c)
{
    struct tentpy_hold *h = c->holds;
    size_t n = c->nholds;
    c->holds = NULL;
    c->nholds = c->holds_cap = 0;
    c->nregs = 0;
    for (size_t i = 0; i < n; i++)
        Py_DECREF(h[i].obj);
    free(h);
}

void tentpy_core_close(struct tentpy_core *c)
{
    if (atomic_exchange(&c->closed, true) || !c->eng)
        return;
    tent_engine_t e = c->eng;
    Py_BEGIN_ALLOW_THREADS;
    /* Calls that entered before `closed` was set finish first. */
    while (atomic_load(&c->active) > 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    /* Abandoned batches: give their tasks a bounded time to end; the
     * engine's teardown copes with any still running. */
    double until = tentpy_now() + 5.0;
    while (atomic_load(&c->nparked_hint) > 0 && tentpy_now() < until) {
        tentpy_sweep(c);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    tent_destroy_engine(e);
    Py_END_ALLOW_THREADS;
    c->eng = NULL;
    /* Only now may the Python buffers behind registrations go away. */
    release_all(c);
    PyDict_Clear(c->async_keep);
    PyDict_Clear(c->segments);
}

void tentpy_core_clear(struct tentpy_core *c)
{
    tentpy_core_close(c);
    Py_CLEAR(c->segments);
    Py_CLEAR(c->async_keep);
    release_all(c);
    free(c->regs);
    free(c->holds);
    c->regs = NULL;
    c->holds = NULL;
    c->regs_cap = c->holds_cap = 0;
    free(c->parked);
    c->parked = NULL;
    c->nparked = c->park_cap = 0;
}

int tentpy_core_traverse(struct tentpy_core *c, visitproc visit, void *arg)
{
    for (size_t i = 0; i < c->nholds; i++)
        Py_VISIT(c->holds[i].obj);
    Py_VISIT(c->async_keep);
    return 0;
}

/* Takes reg_lock: waits for it with the GIL released, returns holding
 * both (see struct tentpy_core). */
static void reg_lock(struct tentpy_core *c)
{
    if (pthread_mutex_trylock(&c->reg_lock) == 0)
        return;
    Py_BEGIN_ALLOW_THREADS;
    pthread_mutex_lock(&c->reg_lock);
    Py_END_ALLOW_THREADS;
}

static bool overlap(uint64_t lo1, uint64_t hi1, uint64_t lo2, uint64_t hi2)
{
    return lo1 < hi2 && lo2 < hi1;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *np = realloc(*p, ncap * elem);
    if (!np)
        return -1;
    *p = np;
    *cap = ncap;
    return 0;
}

/* Removes the registrations at indices marked (count 0) and moves the
 * holds that no registration overlaps any more into dead[] (capacity
 * c->nholds), returning how many.  GIL and reg_lock held; no Python code
 * runs here (the caller releases dead[] after unlocking). */
static size_t prune(struct tentpy_core *c, PyObject **dead)
{
    size_t j = 0;
    for (size_t i = 0; i < c->nregs; i++)
        if (c->regs[i].count > 0)
            c->regs[j++] = c->regs[i];
    c->nregs = j;
    size_t ndead = 0, k = 0;
    for (size_t i = 0; i < c->nholds; i++) {
        const struct tentpy_hold *h = &c->holds[i];
        bool held = false;
        for (size_t r = 0; r < c->nregs && !held; r++)
            held = overlap(h->lo, h->hi, c->regs[r].addr,
                           c->regs[r].addr + c->regs[r].len);
        if (held)
            c->holds[k++] = *h;
        else if (dead)
            dead[ndead++] = h->obj;
        else
            c->holds[k++] = *h; /* no room to release it: keep it */
    }
    c->nholds = k;
    return ndead;
}

/* Unlocks reg_lock, then releases the objects (their finalizers may call
 * back into this engine). */
static void unlock_release(struct tentpy_core *c, PyObject **dead, size_t ndead)
{
    pthread_mutex_unlock(&c->reg_lock);
    for (size_t i = 0; i < ndead; i++)
        Py_DECREF(dead[i]);
    free(dead);
}

int tentpy_reg_add(struct tentpy_core *c, const struct tentpy_mem *m,
                   uint64_t len, const tent_memory_options_t *o)
{
    reg_lock(c);
    if (grow((void **)&c->regs, &c->regs_cap, c->nregs + 1, sizeof(*c->regs)) <
            0 ||
        (m->holder && grow((void **)&c->holds, &c->holds_cap, c->nholds + 1,
                           sizeof(*c->holds)) < 0)) {
        pthread_mutex_unlock(&c->reg_lock);
        PyErr_NoMemory();
        return TENTPY_PYERR;
    }
    tent_memory_options_t opts = *o;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = tent_register_memory_ex(c->eng, (void *)(uintptr_t)m->addr,
                                 (size_t)len, &opts);
    Py_END_ALLOW_THREADS;
    if (rc == TENT_OK) {
        size_t i = 0;
        while (i < c->nregs &&
               !(c->regs[i].addr == m->addr && c->regs[i].len == len))
            i++;
        if (i < c->nregs)
            c->regs[i].count++;
        else
            c->regs[c->nregs++] = (struct tentpy_reg){m->addr, len, 1};
        if (m->holder) {
            Py_INCREF(m->holder);
            c->holds[c->nholds++] =
                (struct tentpy_hold){m->addr, m->addr + m->size, m->holder};
        }
    }
    pthread_mutex_unlock(&c->reg_lock);
    return rc;
}

int tentpy_reg_remove(struct tentpy_core *c, uint64_t addr, uint64_t len)
{
    reg_lock(c);
    uint64_t exact = len;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    if (!exact) {
        /* C takes the first registration at addr in its own order; find
         * which one, so that the table drops the same one. */
        tent_segment_info_t info = {0};
        if (tent_get_segment_info(c->eng, LOCAL_SEGMENT_ID, &info) == 0) {
            for (int i = 0; i < info.num_buffers && !exact; i++)
                if (info.buffers[i].base == addr)
                    exact = info.buffers[i].length;
            tent_free_segment_info(&info);
        }
    }
    rc = tent_unregister_memory(c->eng, (void *)(uintptr_t)addr, (size_t)exact);
    Py_END_ALLOW_THREADS;
    PyObject **dead = NULL;
    size_t ndead = 0;
    if (rc == TENT_OK && exact) {
        for (size_t i = 0; i < c->nregs; i++)
            if (c->regs[i].addr == addr && c->regs[i].len == exact) {
                c->regs[i].count--;
                if (c->regs[i].count == 0) {
                    dead = malloc((c->nholds ? c->nholds : 1) * sizeof(*dead));
                    ndead = prune(c, dead);
                }
                break;
            }
    }
    unlock_release(c, dead, ndead);
    return rc;
}

int tentpy_reg_free(struct tentpy_core *c, uint64_t addr, uint64_t alloc_len)
{
    reg_lock(c);
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = tent_free_memory(c->eng, (void *)(uintptr_t)addr);
    Py_END_ALLOW_THREADS;
    PyObject **dead = NULL;
    size_t ndead = 0;
    if (rc == TENT_OK) {
        bool any = false;
        for (size_t i = 0; i < c->nregs; i++)
            if (overlap(c->regs[i].addr, c->regs[i].addr + c->regs[i].len, addr,
                        addr + alloc_len)) {
                c->regs[i].count = 0;
                any = true;
            }
        if (any) {
            dead = malloc((c->nholds ? c->nholds : 1) * sizeof(*dead));
            ndead = prune(c, dead);
        }
    }
    unlock_release(c, dead, ndead);
    return rc;
}

/* ---- segments ----------------------------------------------------------- */

/* One tent_open_segment on a helper thread.  The waiter and the helper
 * each hold a reference; the helper also holds an `active` count of the
 * engine, so close() waits for it. */
struct open_job {
    atomic_int refs;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    struct tentpy_core *core;
    int rc;
    tent_segment_id_t handle;
    char msg[512];
    char name[];
};

static void job_put(struct open_job *j)
{
    if (atomic_fetch_sub(&j->refs, 1) == 1) {
        pthread_mutex_destroy(&j->lock);
        pthread_cond_destroy(&j->cond);
        free(j);
    }
}

static void *open_main(void *arg)
{
    struct open_job *j = arg;
    struct tentpy_core *c = j->core;
    tent_segment_id_t h = 0;
    int rc = tent_open_segment(c->eng, &h, j->name);
    pthread_mutex_lock(&j->lock);
    j->rc = rc;
    j->handle = h;
    if (rc)
        snprintf(j->msg, sizeof(j->msg), "%s", tent_last_error());
    j->done = true;
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->lock);
    /* An abandoned open stays open in C: the next open of the name finds
     * it there (closing it could close a handle another thread was given
     * meanwhile, since C hands out one handle per name). */
    job_put(j);
    tentpy_leave(c);
    return NULL;
}

int tentpy_open_segment(struct tentpy_core *c, const char *name,
                        tent_segment_id_t *out, char *msg, size_t msg_len)
{
    size_t nl = strlen(name);
    struct open_job *j = calloc(1, sizeof(*j) + nl + 1);
    if (!j) {
        PyErr_NoMemory();
        return TENTPY_PYERR;
    }
    memcpy(j->name, name, nl + 1);
    j->core = c;
    atomic_init(&j->refs, 2);
    pthread_mutex_init(&j->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cond, &ca);
    pthread_condattr_destroy(&ca);
    atomic_fetch_add(&c->active, 1); /* the helper's; dropped by it */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int trc = pthread_create(&t, &attr, open_main, j);
    pthread_attr_destroy(&attr);
    if (trc != 0) {
        /* No thread to spare: open here (not interruptible). */
        atomic_fetch_sub(&c->active, 1);
        tent_segment_id_t h = 0;
        int rc;
        Py_BEGIN_ALLOW_THREADS;
        rc = tent_open_segment(c->eng, &h, name);
        if (rc)
            snprintf(msg, msg_len, "%s", tent_last_error());
        Py_END_ALLOW_THREADS;
        *out = h;
        atomic_store(&j->refs, 1);
        job_put(j);
        return rc;
    }
    for (;;) {
        bool done;
        Py_BEGIN_ALLOW_THREADS;
        pthread_mutex_lock(&j->lock);
        if (!j->done) {
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_nsec += 5000000; /* signals are looked at every 5 ms */
            if (until.tv_nsec >= 1000000000) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&j->cond, &j->lock, &until);
        }
        done = j->done;
        pthread_mutex_unlock(&j->lock);
        Py_END_ALLOW_THREADS;
        if (done)
            break;
        if (PyErr_CheckSignals() < 0) {
            job_put(j); /* the helper finishes the open on its own */
            return TENTPY_PYERR;
        }
    }
    int rc = j->rc;
    *out = j->handle;
    if (rc)
        snprintf(msg, msg_len, "%s", j->msg);
    job_put(j);
    return rc;
}

int tentpy_segment(struct tentpy_core *c, PyObject *name,
                   tent_segment_id_t *out, int *code)
{
    *code = TENT_OK;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "segment name must be str, not %s",
                     Py_TYPE(name)->tp_name);
        return -1;
    }
    PyObject *h = PyDict_GetItemWithError(c->segments, name);
    if (h) {
        *out = PyLong_AsUnsignedLongLong(h);
        return 0;
    }
    if (PyErr_Occurred())
        return -1;
    const char *s = tentpy_str(name, "segment name");
    if (!s) {
        if (PyErr_ExceptionMatches(PyExc_ValueError))
            *code = TENT_EINVAL; /* refused by the engine's rules */
        return -1;
    }
    tent_segment_id_t handle = 0;
    char msg[512];
    int rc = tentpy_open_segment(c, s, &handle, msg, sizeof(msg));
    if (rc == TENTPY_PYERR)
        return -1;
    if (rc) {
        *code = rc;
        PyErr_Format(rc == TENT_EINVAL ? tentpy_exc_inval : tentpy_exc_meta,
                     "open_segment('%s'): %s (%s)", s, msg, tent_strerror(rc));
        return -1;
    }
    PyObject *v = PyLong_FromUnsignedLongLong(handle);
    if (!v || PyDict_SetItem(c->segments, name, v) < 0) {
        Py_XDECREF(v);
        return -1;
    }
    Py_DECREF(v);
    *out = handle;
    return 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Polls bid until its tasks end.  Entered with the GIL released (*ts is
 * the saved thread state); returns with the GIL held. */
static int wait_released(struct tentpy_core *c, tent_batch_id_t bid,
                         double timeout_s, PyThreadState *ts, int *err,
                         char *msg, size_t msg_len)
{
    double start = 0, next_signal = 0, deadline = 0;
    unsigned spins = 0;
    int res;
    for (;;) {
        tent_status_t st = {.status = -1};
        int rc = tent_overall_status(c->eng, bid, &st);
        if (st.status == STATUS_COMPLETED) {
            res = TENTPY_RUN_OK;
            break;
        }
        if (st.status == STATUS_FAILED || st.status == STATUS_CANCELED ||
            st.status == STATUS_TIMEOUT || st.status == STATUS_INVALID) {
            /* The first failed task names the cause. */
            res = TENTPY_RUN_FAILED;
            if (!tentpy_batch_cause(c->eng, bid, err, msg, msg_len)) {
                *err = rc ? rc : TENT_EIO;
                if (rc)
                    snprintf(msg, msg_len, "%s", tent_last_error());
                else
                    snprintf(msg, msg_len, "the batch ended %s",
                             st.status == STATUS_FAILED
                                 ? "failed (no cause recorded)"
                             : st.status == STATUS_CANCELED ? "cancelled"
                             : st.status == STATUS_TIMEOUT
                                 ? "in a timeout"
                                 : "with an invalid task");
            }
            break;
        }
        if (rc == TENT_ENOBATCH || rc == TENT_ENULL) {
            *err = rc;
            snprintf(msg, msg_len, "%s", tent_last_error());
            PyEval_RestoreThread(ts);
            return TENTPY_RUN_ERROR;
        }
        if (spins < 200) {
            spins++;
            for (int i = 0; i < 16; i++)
                cpu_relax();
            if (spins == 1) {
                start = tentpy_now();
                next_signal = start + 0.005;
                deadline = start + timeout_s;
            }
            continue;
        }
        double now = tentpy_now();
        if (now >= deadline) {
            *err = TENT_ETIMEDOUT;
            snprintf(msg, msg_len, "transfer did not end within %.3f s",
                     timeout_s);
            PyEval_RestoreThread(ts);
            park(c, bid);
            return TENTPY_RUN_TIMEOUT;
        }
        if (now >= next_signal) {
            PyEval_RestoreThread(ts);
            if (PyErr_CheckSignals() < 0) {
                park(c, bid);
                return TENTPY_RUN_INTERRUPTED;
            }
            ts = PyEval_SaveThread();
            next_signal = now + 0.005;
        }
        if (spins < 400) {
            spins++;
            sched_yield();
        } else {
            double left = now - start;
            long ns = left < 0.001 ? 20000 : left < 0.05 ? 100000 : 500000;
            struct timespec d = {0, ns};
            nanosleep(&d, NULL);
        }
    }
    int frc = tent_free_batch(c->eng, bid);
    PyEval_RestoreThread(ts);
    if (frc == TENT_EBUSY)
        park(c, bid);
    return res;
}

bool tentpy_batch_cause(tent_engine_t eng, tent_batch_id_t bid, int *code,
                        char *msg, size_t msg_len)
{
    char first[768];
    size_t first_task = 0, failed = 0;
    int first_code = TENT_OK, first_native = 0;
    for (size_t i = 0;; i++) {
        int c = TENT_OK, native = 0;
        char m[768];
        if (tent_task_error(eng, bid, i, &c, &native, m, sizeof(m)) != TENT_OK)
            break; /* past the last task (or the batch is gone) */
        if (c == TENT_OK)
            continue;
        if (failed++ == 0) {
            first_task = i;
            first_code = c;
            first_native = native;
            memcpy(first, m, sizeof(m));
        }
    }
    if (!failed)
        return false;
    char more[48] = "", nat[40] = "";
    if (failed > 1)
        snprintf(more, sizeof(more), " (and %zu more)", failed - 1);
    if (first_native)
        snprintf(nat, sizeof(nat), " (native error %d)", first_native);
    snprintf(msg, msg_len, "task %zu%s: %s%s", first_task, more,
             first[0] ? first : "failed", nat);
    *code = first_code;
    return true;
}

int tentpy_run(struct tentpy_core *c, tent_request_t *reqs, size_t n,
               const char *notif_name, const char *notif_msg, double timeout_s,
               int *err, char *msg, size_t msg_len)
{
    if (atomic_load_explicit(&c->nparked_hint, memory_order_relaxed))
        tentpy_sweep(c);
    PyThreadState *ts = PyEval_SaveThread();
    tent_batch_id_t bid = tent_allocate_batch(c->eng, n);
    if (bid == TENT_INVALID_BATCH_ID) {
        *err = TENT_EINVAL;
        snprintf(msg, msg_len, "%s", tent_last_error());
        PyEval_RestoreThread(ts);
        return TENTPY_RUN_ERROR;
    }
    int rc = notif_name ? tent_submit_notif(c->eng, bid, reqs, n, notif_name,
                                            notif_msg)
                        : tent_submit(c->eng, bid, reqs, n);
    if (rc) {
        *err = rc;
        snprintf(msg, msg_len, "%s", tent_last_error());
        int frc = tent_free_batch(c->eng, bid);
        PyEval_RestoreThread(ts);
        if (frc == TENT_EBUSY)
            park(c, bid);
        return TENTPY_RUN_ERROR;
    }
    return wait_released(c, bid, timeout_s, ts, err, msg, msg_len);
}

int tentpy_wait(struct tentpy_core *c, tent_batch_id_t bid, double timeout_s,
                int *err, char *msg, size_t msg_len)
{
    PyThreadState *ts = PyEval_SaveThread();
    return wait_released(c, bid, timeout_s, ts, err, msg, msg_len);
}

/* ---- metrics ------------------------------------------------------------ */

PyObject *tentpy_metrics_text(struct tentpy_core *c, bool json, int *code)
{
    *code = 0;
    if (tentpy_enter(c) < 0)
        return NULL;
    /* The text may grow between two calls (a new peer, a new series), so
     * the size the engine asks for gets some room, and a few rounds. */
    size_t cap = 4 << 10;
    char *buf = NULL;
    PyObject *out = NULL;
    for (int round = 0; round < 8; round++) {
        char *nb = realloc(buf, cap);
        if (!nb) {
            PyErr_NoMemory();
            break;
        }
        buf = nb;
        size_t len = cap;
        int rc;
        Py_BEGIN_ALLOW_THREADS;
        rc = json ? tent_metrics_json(c->eng, buf, &len)
                  : tent_metrics_prometheus(c->eng, buf, &len);
        Py_END_ALLOW_THREADS;
        if (rc == TENT_EOVERFLOW && len > cap && len < SIZE_MAX / 2) {
            cap = len + len / 4;
            continue;
        }
        if (rc == 0)
            out = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "strict");
        else
            *code = rc;
        break;
    }
    if (!out && !*code && !PyErr_Occurred())
        *code = TENT_EOVERFLOW; /* still growing after every round */
    free(buf);
    tentpy_leave(c);
    return out;
}

PyObject *tentpy_nic_load_stats(struct tentpy_core *c, int *code)
{
    *code = 0;
    if (tentpy_enter(c) < 0)
        return NULL;
    size_t cap = 16, n = 0;
    tent_nic_load_stat_t *st = NULL;
    int rc = TENT_OK;
    for (int round = 0; round < 8; round++) {
        tent_nic_load_stat_t *ns = PyMem_Realloc(st, cap * sizeof(*st));
        if (!ns) {
            PyMem_Free(st);
            tentpy_leave(c);
            return PyErr_NoMemory();
        }
        st = ns;
        n = cap;
        Py_BEGIN_ALLOW_THREADS;
        rc = tent_get_nic_load_stats(c->eng, st, &n);
        Py_END_ALLOW_THREADS;
        if (rc || n <= cap)
            break;
        cap = n + 4; /* NICs were added meanwhile: room for all, again */
    }
    tentpy_leave(c);
    if (rc || n > cap) {
        PyMem_Free(st);
        *code = rc ? rc : TENT_EOVERFLOW;
        return NULL;
    }
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *o = PyStructSequence_New(tentpy_NicLoadStats);
        if (o) {
            const char *name = st[i].device_name;
            size_t len = strnlen(name, sizeof(st[i].device_name));
            PyStructSequence_SetItem(
                o, 0, PyUnicode_DecodeUTF8(name, (Py_ssize_t)len, "replace"));
            PyStructSequence_SetItem(
                o, 1, PyLong_FromUnsignedLongLong(st[i].inflight_bytes));
            PyStructSequence_SetItem(
                o, 2, PyFloat_FromDouble(st[i].ewma_bandwidth_bps));
        }
        if (!o || PyErr_Occurred()) {
            Py_XDECREF(o);
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, o);
    }
    PyMem_Free(st);
    return list;
}

PyObject *tentpy_json_loads(PyObject *text)
{
    PyObject *mod = PyImport_ImportModule("json");
    if (!mod)
        return NULL;
    PyObject *r = PyObject_CallMethod(mod, "loads", "O", text);
    Py_DECREF(mod);
    return r;
}
