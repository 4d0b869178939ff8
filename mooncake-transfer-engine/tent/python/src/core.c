/* The engine state both Python classes share: lifetime, segment cache,
 * holders of registered Python buffers, and the blocking wait. */
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
    c->segments = PyDict_New();
    c->keep = PyDict_New();
    c->async_keep = PyDict_New();
    if (!c->segments || !c->keep || !c->async_keep)
        return -1;
    return 0;
}

int tentpy_enter(struct tentpy_core *c)
{
    atomic_fetch_add(&c->active, 1);
    if (atomic_load(&c->closed) || !c->eng) {
        atomic_fetch_sub(&c->active, 1);
        PyErr_SetString(PyExc_RuntimeError,
                        c->eng || atomic_load(&c->closed)
                            ? "the transfer engine is closed"
                            : "the transfer engine is not initialized");
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
    PyDict_Clear(c->keep);
    PyDict_Clear(c->async_keep);
    PyDict_Clear(c->segments);
}

void tentpy_core_clear(struct tentpy_core *c)
{
    tentpy_core_close(c);
    Py_CLEAR(c->segments);
    Py_CLEAR(c->keep);
    Py_CLEAR(c->async_keep);
    free(c->parked);
    c->parked = NULL;
    c->nparked = c->park_cap = 0;
}

int tentpy_core_traverse(struct tentpy_core *c, visitproc visit, void *arg)
{
    Py_VISIT(c->keep);
    Py_VISIT(c->async_keep);
    return 0;
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
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return -1;
    tent_segment_id_t handle = 0;
    int rc;
    char msg[512];
    Py_BEGIN_ALLOW_THREADS;
    rc = tent_open_segment(c->eng, &handle, s);
    if (rc)
        snprintf(msg, sizeof(msg), "%s", tent_last_error());
    Py_END_ALLOW_THREADS;
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

int tentpy_keep_add(struct tentpy_core *c, uint64_t addr, PyObject *holder)
{
    if (!holder)
        return 0;
    PyObject *key = PyLong_FromUnsignedLongLong(addr);
    if (!key)
        return -1;
    PyObject *list = PyDict_GetItemWithError(c->keep, key);
    int rc = -1;
    if (list) {
        rc = PyList_Append(list, holder);
    } else if (!PyErr_Occurred()) {
        list = PyList_New(1);
        if (list) {
            Py_INCREF(holder);
            PyList_SET_ITEM(list, 0, holder);
            rc = PyDict_SetItem(c->keep, key, list);
            Py_DECREF(list);
        }
    }
    Py_DECREF(key);
    return rc;
}

void tentpy_keep_drop(struct tentpy_core *c, uint64_t addr)
{
    PyObject *key = PyLong_FromUnsignedLongLong(addr);
    if (!key) {
        PyErr_Clear();
        return;
    }
    PyObject *list = PyDict_GetItemWithError(c->keep, key);
    if (list) {
        Py_ssize_t n = PyList_GET_SIZE(list);
        if (n <= 1)
            PyDict_DelItem(c->keep, key);
        else
            PyList_SetSlice(list, n - 1, n, NULL);
    }
    PyErr_Clear();
    Py_DECREF(key);
}

void tentpy_keep_drop_all(struct tentpy_core *c, uint64_t addr)
{
    PyObject *key = PyLong_FromUnsignedLongLong(addr);
    if (key && PyDict_DelItem(c->keep, key) < 0)
        PyErr_Clear();
    Py_XDECREF(key);
    PyErr_Clear();
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
            *err = rc ? rc : TENT_EIO;
            res = TENTPY_RUN_FAILED;
            snprintf(msg, msg_len, "%s",
                     rc ? tent_last_error()
                        : "a task of the batch failed (see the engine log)");
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

PyObject *tentpy_json_loads(PyObject *text)
{
    PyObject *mod = PyImport_ImportModule("json");
    if (!mod)
        return NULL;
    PyObject *r = PyObject_CallMethod(mod, "loads", "O", text);
    Py_DECREF(mod);
    return r;
}
