/* tent.TransferEngine: TENT's own Python API.  Errors raise the matching
 * TentException subclass with tent_last_error()'s message. */
#include "tentpy.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    PyObject_HEAD struct tentpy_core core;
    PyObject *allocated; /* int addr -> int size, from allocate_local_memory */
} EngineObject;

/* Runs a tent_* call with the GIL released; `rc` receives its result. */
#define CALL_RELEASED(rc, expr)                                                \
    do {                                                                       \
        Py_BEGIN_ALLOW_THREADS;                                                \
        (rc) = (expr);                                                         \
        Py_END_ALLOW_THREADS;                                                  \
    } while (0)

#define ENTER(self)                                                            \
    do {                                                                       \
        if (tentpy_enter(&(self)->core) < 0)                                   \
            return NULL;                                                       \
    } while (0)
#define LEAVE(self) tentpy_leave(&(self)->core)

static int engine_init(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"config_path", NULL};
    PyObject *path_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:TransferEngine", kwlist,
                                     &path_obj))
        return -1;
    if (self->core.eng) {
        PyErr_SetString(PyExc_RuntimeError,
                        "TransferEngine is already initialized");
        return -1;
    }
    PyObject *path_bytes = NULL;
    const char *path = NULL;
    if (path_obj != Py_None) {
        if (!PyUnicode_FSConverter(path_obj, &path_bytes))
            return -1;
        path = PyBytes_AS_STRING(path_bytes);
    }
    int err;
    char msg[1024];
    tent_engine_t e = tentpy_create_engine(path, &err, msg, sizeof(msg));
    Py_XDECREF(path_bytes);
    if (!e) {
        PyErr_Format(tentpy_exc_internal, "TransferEngine(): %s", msg);
        return -1;
    }
    self->core.eng = e;
    return 0;
}

static PyObject *engine_new(PyTypeObject *type, PyObject *args TENTPY_UNUSED,
                            PyObject *kw TENTPY_UNUSED)
{
    EngineObject *self = (EngineObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->allocated = PyDict_New();
    if (!self->allocated || tentpy_core_init(&self->core) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int engine_traverse(EngineObject *self, visitproc visit, void *arg)
{
    return tentpy_core_traverse(&self->core, visit, arg);
}

static int engine_clear(EngineObject *self)
{
    tentpy_core_clear(&self->core);
    Py_CLEAR(self->allocated);
    return 0;
}

static void engine_dealloc(EngineObject *self)
{
    PyObject_GC_UnTrack(self);
    engine_clear(self);
    pthread_mutex_destroy(&self->core.park_lock);
    pthread_mutex_destroy(&self->core.reg_lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *engine_close(EngineObject *self,
                              PyObject *unused TENTPY_UNUSED)
{
    tentpy_core_close(&self->core);
    PyDict_Clear(self->allocated);
    Py_RETURN_NONE;
}

static PyObject *engine_enter_ctx(EngineObject *self,
                                  PyObject *unused TENTPY_UNUSED)
{
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *engine_exit_ctx(EngineObject *self,
                                 PyObject *args TENTPY_UNUSED)
{
    return engine_close(self, NULL);
}

static PyObject *engine_available(EngineObject *self,
                                  PyObject *unused TENTPY_UNUSED)
{
    ENTER(self);
    int ok = tent_available(self->core.eng);
    LEAVE(self);
    return PyBool_FromLong(ok);
}

static PyObject *engine_segment_name(EngineObject *self,
                                     PyObject *unused TENTPY_UNUSED)
{
    char buf[256];
    ENTER(self);
    int rc = tent_segment_name(self->core.eng, buf, sizeof(buf));
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, "get_segment_name");
    return PyUnicode_FromString(buf);
}

static int rpc_addr(EngineObject *self, char *addr, size_t len, uint16_t *port)
{
    if (tentpy_enter(&self->core) < 0)
        return -1;
    int rc = tent_rpc_server_addr_port(self->core.eng, addr, len, port);
    LEAVE(self);
    if (rc) {
        tentpy_raise(rc, "get_rpc_server_address");
        return -1;
    }
    return 0;
}

static PyObject *engine_rpc_address(EngineObject *self,
                                    PyObject *unused TENTPY_UNUSED)
{
    char addr[256];
    uint16_t port;
    if (rpc_addr(self, addr, sizeof(addr), &port) < 0)
        return NULL;
    return PyUnicode_FromString(addr);
}

static PyObject *engine_rpc_port(EngineObject *self,
                                 PyObject *unused TENTPY_UNUSED)
{
    char addr[256];
    uint16_t port;
    if (rpc_addr(self, addr, sizeof(addr), &port) < 0)
        return NULL;
    return PyLong_FromLong(port);
}

static int u64_arg(PyObject *o, const char *what, uint64_t *out)
{
    return tentpy_len_from(o, what, out);
}

static PyObject *engine_open_segment(EngineObject *self, PyObject *name)
{
    const char *s = tentpy_str(name, "open_segment: segment name");
    if (!s)
        return NULL;
    ENTER(self);
    tent_segment_id_t h = 0;
    char msg[512];
    int rc = tentpy_open_segment(&self->core, s, &h, msg, sizeof(msg));
    LEAVE(self);
    if (rc == TENTPY_PYERR)
        return NULL;
    if (rc == TENT_ENOSEGMENT || rc == TENT_EPEER || rc == TENT_EPROTO)
        return tentpy_errorf(tentpy_exc_meta, "open_segment('%s'): %s (%s)", s,
                             msg, tent_strerror(rc));
    if (rc)
        return tentpy_raise_msg(rc, "open_segment", msg);
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *engine_close_segment(EngineObject *self, PyObject *arg)
{
    uint64_t h;
    if (u64_arg(arg, "close_segment", &h) < 0)
        return NULL;
    ENTER(self);
    int rc = tent_close_segment(self->core.eng, h);
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, "close_segment");
    Py_RETURN_NONE;
}

static PyObject *engine_segment_info(EngineObject *self, PyObject *arg)
{
    uint64_t h;
    if (u64_arg(arg, "get_segment_info", &h) < 0)
        return NULL;
    ENTER(self);
    tent_segment_info_t info = {0};
    int rc = tent_get_segment_info(self->core.eng, h, &info);
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, "get_segment_info");
    PyObject *list = PyList_New(info.num_buffers);
    PyObject *res = NULL;
    if (!list)
        goto out;
    for (int i = 0; i < info.num_buffers; i++) {
        PyObject *b = PyStructSequence_New(tentpy_SegmentInfoBuffer);
        if (!b)
            goto out;
        PyStructSequence_SetItem(
            b, 0, PyLong_FromUnsignedLongLong(info.buffers[i].base));
        PyStructSequence_SetItem(
            b, 1, PyLong_FromUnsignedLongLong(info.buffers[i].length));
        PyStructSequence_SetItem(
            b, 2, PyUnicode_FromString(info.buffers[i].location));
        PyList_SET_ITEM(list, i, b);
        if (PyErr_Occurred())
            goto out;
    }
    res = PyStructSequence_New(tentpy_SegmentInfo);
    if (res) {
        PyStructSequence_SetItem(res, 0, PyLong_FromLong(info.type));
        PyStructSequence_SetItem(res, 1, list);
        list = NULL;
    }
out:
    Py_XDECREF(list);
    tent_free_segment_info(&info);
    return res;
}

/* An optional attribute of an options object: NULL (no exception) when
 * it has none. */
static PyObject *opt_attr(PyObject *src, const char *name)
{
    PyObject *v = PyObject_GetAttrString(src, name);
    if (!v && PyErr_ExceptionMatches(PyExc_AttributeError))
        PyErr_Clear();
    return v;
}

/* src: a location str ("*" = anywhere = "cpu" here) or a MemoryOptions
 * (location, perm, type, shm_path, shm_offset, internal; missing ones keep
 * their defaults).  Every value is checked, none truncated. */
static int fill_options(PyObject *src, tent_memory_options_t *o,
                        const char *what)
{
    char field[160];
    memset(o, 0, sizeof(*o));
    o->permission = PERM_GLOBAL_READ_WRITE;
    PyObject *loc = NULL;
    int rc = -1;
    if (PyUnicode_Check(src)) {
        loc = src;
        Py_INCREF(loc);
    } else {
        if (!PyObject_HasAttrString(src, "location")) {
            PyErr_Format(PyExc_TypeError,
                         "%s: location must be str or MemoryOptions, not %s",
                         what, Py_TYPE(src)->tp_name);
            return -1;
        }
        loc = opt_attr(src, "location");
        PyObject *v;
        if (!loc && PyErr_Occurred())
            return -1;
        if ((v = opt_attr(src, "perm"))) {
            snprintf(field, sizeof(field), "%s: MemoryOptions.perm", what);
            int bad =
                tentpy_int_from(v, field, INT_MIN, INT_MAX, &o->permission);
            Py_DECREF(v);
            if (bad)
                goto out;
        }
        if (!PyErr_Occurred() && (v = opt_attr(src, "type"))) {
            snprintf(field, sizeof(field), "%s: MemoryOptions.type", what);
            int bad =
                tentpy_int_from(v, field, INT_MIN, INT_MAX, &o->transport_type);
            Py_DECREF(v);
            if (bad)
                goto out;
        }
        if (!PyErr_Occurred() && (v = opt_attr(src, "shm_path"))) {
            snprintf(field, sizeof(field), "%s: MemoryOptions.shm_path", what);
            const char *p = tentpy_str(v, field);
            if (p && strlen(p) >= sizeof(o->shm_path))
                tentpy_errorf(PyExc_ValueError, "%s is too long (%zu bytes)",
                              field, strlen(p));
            else if (p)
                snprintf(o->shm_path, sizeof(o->shm_path), "%s", p);
            Py_DECREF(v);
            if (PyErr_Occurred())
                goto out;
        }
        if (!PyErr_Occurred() && (v = opt_attr(src, "shm_offset"))) {
            uint64_t off;
            snprintf(field, sizeof(field), "%s: MemoryOptions.shm_offset",
                     what);
            int bad = tentpy_len_from(v, field, &off);
            Py_DECREF(v);
            if (bad)
                goto out;
            o->shm_offset = (size_t)off;
        }
        if (!PyErr_Occurred() && (v = opt_attr(src, "internal"))) {
            int t = PyObject_IsTrue(v);
            Py_DECREF(v);
            if (t < 0)
                goto out;
            o->internal = t;
        }
        if (PyErr_Occurred())
            goto out;
    }
    const char *s = "cpu";
    if (loc) {
        snprintf(field, sizeof(field), "%s: location", what);
        s = tentpy_str(loc, field);
        if (!s)
            goto out;
    }
    if (strcmp(s, "*") == 0)
        s = "cpu";
    if (strlen(s) >= sizeof(o->location)) {
        PyErr_Format(PyExc_ValueError, "%s: location '%s' is too long", what,
                     s);
        goto out;
    }
    snprintf(o->location, sizeof(o->location), "%s", s);
    rc = 0;
out:
    Py_XDECREF(loc);
    return rc;
}

/* `perm`: absent (GlobalReadWrite), a Permission int, or a MemoryOptions. */
static int perm_options(PyObject *perm_o, tent_memory_options_t *o,
                        const char *what)
{
    if (perm_o && !PyLong_Check(perm_o))
        return fill_options(perm_o, o, what);
    memset(o, 0, sizeof(*o));
    snprintf(o->location, sizeof(o->location), "cpu");
    o->permission = PERM_GLOBAL_READ_WRITE;
    if (!perm_o)
        return 0;
    char field[128];
    snprintf(field, sizeof(field), "%s: permission", what);
    return tentpy_int_from(perm_o, field, INT_MIN, INT_MAX, &o->permission);
}

static PyObject *allocate_common(EngineObject *self, PyObject *size_o,
                                 PyObject *loc, const char *what)
{
    uint64_t size;
    if (tentpy_len_from(size_o, what, &size) < 0)
        return NULL;
    tent_memory_options_t o;
    if (loc && fill_options(loc, &o, what) < 0)
        return NULL;
    if (!loc) {
        memset(&o, 0, sizeof(o));
        o.permission = PERM_GLOBAL_READ_WRITE;
        snprintf(o.location, sizeof(o.location), "cpu");
    }
    ENTER(self);
    void *addr = NULL;
    int rc;
    CALL_RELEASED(
        rc, tent_allocate_memory_ex(self->core.eng, &addr, (size_t)size, &o));
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, what);
    PyObject *a = PyLong_FromUnsignedLongLong((uintptr_t)addr);
    PyObject *s = PyLong_FromUnsignedLongLong(size);
    if (!a || !s || PyDict_SetItem(self->allocated, a, s) < 0) {
        Py_XDECREF(a);
        Py_XDECREF(s);
        return NULL;
    }
    Py_DECREF(s);
    return a;
}

static PyObject *engine_allocate(EngineObject *self, PyObject *args,
                                 PyObject *kw)
{
    static char *kwlist[] = {"size", "location", NULL};
    PyObject *size_o, *loc = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:allocate_local_memory",
                                     kwlist, &size_o, &loc))
        return NULL;
    return allocate_common(self, size_o, loc, "allocate_local_memory");
}

static PyObject *engine_allocate_ex(EngineObject *self, PyObject *args,
                                    PyObject *kw)
{
    static char *kwlist[] = {"size", "options", NULL};
    PyObject *size_o, *opts;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:allocate_local_memory_ex",
                                     kwlist, &size_o, &opts))
        return NULL;
    return allocate_common(self, size_o, opts, "allocate_local_memory_ex");
}

static PyObject *engine_free(EngineObject *self, PyObject *arg)
{
    struct tentpy_mem m;
    if (tentpy_mem_from(arg, false, "free_local_memory", &m) < 0)
        return NULL;
    Py_XDECREF(m.holder);
    PyObject *a = PyLong_FromUnsignedLongLong(m.addr);
    if (!a)
        return NULL;
    PyObject *sz = PyDict_GetItemWithError(self->allocated, a);
    uint64_t size = sz ? PyLong_AsUnsignedLongLong(sz) : 0;
    if (PyErr_Occurred()) {
        Py_DECREF(a);
        return NULL;
    }
    if (tentpy_enter(&self->core) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    /* Freed memory is registered no more: C drops the registrations
     * inside the allocation, and so do the holds. */
    int rc = tentpy_reg_free(&self->core, m.addr, size);
    LEAVE(self);
    if (rc) {
        Py_DECREF(a);
        return tentpy_raise(rc, "free_local_memory");
    }
    if (PyDict_DelItem(self->allocated, a) < 0)
        PyErr_Clear();
    Py_DECREF(a);
    Py_RETURN_NONE;
}

/* One registration's arguments, read and checked before anything is
 * registered. */
struct reg_item {
    struct tentpy_mem m;
    uint64_t size;
};

static int reg_item_from(PyObject *addr_o, PyObject *size_o,
                         const tent_memory_options_t *o, const char *what,
                         struct reg_item *it)
{
    if (tentpy_mem_from(addr_o, true, what, &it->m) < 0)
        return -1;
    it->size = it->m.size;
    if (size_o && size_o != Py_None &&
        (tentpy_len_from(size_o, what, &it->size) < 0 ||
         tentpy_mem_check_len(&it->m, it->size, what) < 0))
        goto fail;
    /* An integer is only an address: it must name memory this process
     * has (an object vouches for its own). */
    if (!it->m.holder && tentpy_host_location(o->location) &&
        tentpy_check_mapped(it->m.addr, it->size, what) < 0)
        goto fail;
    return 0;
fail:
    Py_CLEAR(it->m.holder);
    return -1;
}

static int register_items(EngineObject *self, struct reg_item *it, Py_ssize_t n,
                          const tent_memory_options_t *o, const char *what)
{
    if (tentpy_enter(&self->core) < 0)
        return -1;
    Py_ssize_t i;
    int rc = 0;
    for (i = 0; i < n && rc == 0; i++)
        rc = tentpy_reg_add(&self->core, &it[i].m, it[i].size, o);
    if (rc) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", tent_last_error());
        /* No partial state: undo the ones done. */
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        for (Py_ssize_t j = 0; j < i - 1; j++)
            tentpy_reg_remove(&self->core, it[j].m.addr, it[j].size);
        PyErr_Restore(t, v, tb);
        if (rc != TENTPY_PYERR) {
            char where[160];
            if (n > 1)
                snprintf(where, sizeof(where), "%s: entry %zd", what, i - 1);
            else
                snprintf(where, sizeof(where), "%s", what);
            tentpy_raise_msg(rc, where, msg);
        }
    }
    LEAVE(self);
    return rc ? -1 : 0;
}

static void items_free(struct reg_item *it, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_CLEAR(it[i].m.holder);
    PyMem_Free(it);
}

static PyObject *register_common(EngineObject *self, PyObject *a, PyObject *s,
                                 PyObject *p, bool ex, const char *what)
{
    tent_memory_options_t o;
    if ((ex ? fill_options(p, &o, what) : perm_options(p, &o, what)) < 0)
        return NULL;
    struct reg_item it;
    if (reg_item_from(a, s, &o, what, &it) < 0)
        return NULL;
    int rc = register_items(self, &it, 1, &o, what);
    Py_CLEAR(it.m.holder);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *engine_register(EngineObject *self, PyObject *args,
                                 PyObject *kw)
{
    static char *kwlist[] = {"addr", "size", "permission", NULL};
    PyObject *a, *s = NULL, *p = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:register_local_memory",
                                     kwlist, &a, &s, &p))
        return NULL;
    return register_common(self, a, s, p, false, "register_local_memory");
}

static PyObject *engine_register_ex(EngineObject *self, PyObject *args,
                                    PyObject *kw)
{
    static char *kwlist[] = {"addr", "size", "options", NULL};
    PyObject *a, *s, *p;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:register_local_memory_ex",
                                     kwlist, &a, &s, &p))
        return NULL;
    return register_common(self, a, s, p, true, "register_local_memory_ex");
}

static PyObject *register_batch_common(EngineObject *self, PyObject *al,
                                       PyObject *sl, PyObject *p, bool ex,
                                       const char *what)
{
    tent_memory_options_t o;
    if ((ex ? fill_options(p, &o, what) : perm_options(p, &o, what)) < 0)
        return NULL;
    PyObject *fa = tentpy_seq(al, "addr_list");
    PyObject *fs = fa ? tentpy_seq(sl, "size_list") : NULL;
    PyObject *res = NULL;
    struct reg_item *it = NULL;
    Py_ssize_t n = 0, done = 0;
    if (!fs)
        goto out;
    n = PyTuple_GET_SIZE(fa);
    if (PyTuple_GET_SIZE(fs) != n) {
        PyErr_Format(PyExc_ValueError, "%s: %zd addresses but %zd sizes", what,
                     n, PyTuple_GET_SIZE(fs));
        goto out;
    }
    it = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*it));
    if (!it) {
        PyErr_NoMemory();
        goto out;
    }
    for (; done < n; done++)
        if (reg_item_from(PyTuple_GET_ITEM(fa, done),
                          PyTuple_GET_ITEM(fs, done), &o, what, &it[done]) < 0)
            goto out;
    if (tentpy_seq_unchanged(al, fa, what) < 0 ||
        tentpy_seq_unchanged(sl, fs, what) < 0)
        goto out;
    if (register_items(self, it, n, &o, what) == 0) {
        res = Py_None;
        Py_INCREF(res);
    }
out:
    if (it)
        items_free(it, done);
    Py_XDECREF(fa);
    Py_XDECREF(fs);
    return res;
}

static PyObject *engine_register_batch(EngineObject *self, PyObject *args,
                                       PyObject *kw)
{
    static char *kwlist[] = {"addr_list", "size_list", "permission", NULL};
    PyObject *al, *sl, *p = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "OO|O:register_local_memory_batch", kwlist, &al, &sl, &p))
        return NULL;
    return register_batch_common(self, al, sl, p, false,
                                 "register_local_memory_batch");
}

static PyObject *engine_register_batch_ex(EngineObject *self, PyObject *args,
                                          PyObject *kw)
{
    static char *kwlist[] = {"addr_list", "size_list", "options", NULL};
    PyObject *al, *sl, *p;
    if (!PyArg_ParseTupleAndKeywords(args, kw,
                                     "OOO:register_local_memory_batch_ex",
                                     kwlist, &al, &sl, &p))
        return NULL;
    return register_batch_common(self, al, sl, p, true,
                                 "register_local_memory_batch_ex");
}

/* Unregisters addrs[i] (sizes[i], 0 = the first registered there); goes
 * on past a failure and raises the first one. */
static int unregister_items(EngineObject *self, const uint64_t *addrs,
                            const uint64_t *sizes, Py_ssize_t n,
                            const char *what)
{
    if (tentpy_enter(&self->core) < 0)
        return -1;
    int first = 0;
    Py_ssize_t at = 0;
    char msg[1024] = "";
    for (Py_ssize_t i = 0; i < n; i++) {
        int rc = tentpy_reg_remove(&self->core, addrs[i], sizes[i]);
        if (rc && !first) {
            first = rc;
            at = i;
            snprintf(msg, sizeof(msg), "%s", tent_last_error());
        }
    }
    LEAVE(self);
    if (first) {
        char where[160];
        if (n > 1)
            snprintf(where, sizeof(where), "%s: entry %zd", what, at);
        else
            snprintf(where, sizeof(where), "%s", what);
        tentpy_raise_msg(first, where, msg);
        return -1;
    }
    return 0;
}

static int addr_of(PyObject *o, const char *what, uint64_t *out)
{
    struct tentpy_mem m;
    if (tentpy_mem_from(o, false, what, &m) < 0)
        return -1;
    Py_XDECREF(m.holder);
    *out = m.addr;
    return 0;
}

static PyObject *engine_unregister(EngineObject *self, PyObject *args,
                                   PyObject *kw)
{
    static char *kwlist[] = {"addr", "size", NULL};
    PyObject *a, *s = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:unregister_local_memory",
                                     kwlist, &a, &s))
        return NULL;
    const char *what = "unregister_local_memory";
    uint64_t addr, size = 0;
    if (addr_of(a, what, &addr) < 0 ||
        (s && s != Py_None && tentpy_len_from(s, what, &size) < 0) ||
        unregister_items(self, &addr, &size, 1, what) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *engine_unregister_batch(EngineObject *self, PyObject *args,
                                         PyObject *kw)
{
    static char *kwlist[] = {"addr_list", "size_list", NULL};
    const char *what = "unregister_local_memory_batch";
    PyObject *al, *sl = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "O|O:unregister_local_memory_batch", kwlist, &al, &sl))
        return NULL;
    PyObject *fa = tentpy_seq(al, "addr_list");
    if (!fa)
        return NULL;
    PyObject *fs = NULL;
    if (sl && sl != Py_None && !(fs = tentpy_seq(sl, "size_list"))) {
        Py_DECREF(fa);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(fa);
    Py_ssize_t ns = fs ? PyTuple_GET_SIZE(fs) : 0;
    PyObject *res = NULL;
    uint64_t *v = NULL;
    if (ns != 0 && ns != n) {
        PyErr_Format(PyExc_ValueError, "%s: %zd addresses but %zd sizes", what,
                     n, ns);
        goto out;
    }
    v = PyMem_Calloc(n ? 2 * (size_t)n : 1, sizeof(*v));
    if (!v) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (addr_of(PyTuple_GET_ITEM(fa, i), what, &v[i]) < 0 ||
            (ns &&
             tentpy_len_from(PyTuple_GET_ITEM(fs, i), what, &v[n + i]) < 0))
            goto out;
    if (tentpy_seq_unchanged(al, fa, what) < 0 ||
        (fs && tentpy_seq_unchanged(sl, fs, what) < 0))
        goto out;
    if (unregister_items(self, v, v + n, n, what) == 0) {
        res = Py_None;
        Py_INCREF(res);
    }
out:
    PyMem_Free(v);
    Py_DECREF(fa);
    Py_XDECREF(fs);
    return res;
}

static PyObject *engine_alloc_batch(EngineObject *self, PyObject *arg)
{
    uint64_t n;
    if (tentpy_len_from(arg, "allocate_transfer_batch", &n) < 0)
        return NULL;
    ENTER(self);
    tent_batch_id_t b = tent_allocate_batch(self->core.eng, (size_t)n);
    LEAVE(self);
    if (b == TENT_INVALID_BATCH_ID)
        return tentpy_raise(n == 0 || n > (1u << 24) ? TENT_EINVAL
                                                     : TENT_ENOMEM,
                            "allocate_transfer_batch");
    return PyLong_FromUnsignedLongLong(b);
}

static PyObject *engine_free_batch(EngineObject *self, PyObject *arg)
{
    uint64_t b;
    if (u64_arg(arg, "free_transfer_batch", &b) < 0)
        return NULL;
    ENTER(self);
    int rc;
    CALL_RELEASED(rc, tent_free_batch(self->core.eng, b));
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, "free_transfer_batch");
    Py_RETURN_NONE;
}

/* A field of request i: a new reference, or NULL with no exception when
 * the object has no such attribute and the field is optional. */
static PyObject *req_field(PyObject *q, const char *name, bool required)
{
    PyObject *v = PyObject_GetAttrString(q, name);
    if (!v && !required && PyErr_ExceptionMatches(PyExc_AttributeError))
        PyErr_Clear();
    return v;
}

static int req_int(PyObject *q, Py_ssize_t i, const char *name, long long lo,
                   long long hi, int dflt, bool required, int *out)
{
    PyObject *v = req_field(q, name, required);
    if (!v) {
        *out = dflt;
        return PyErr_Occurred() ? -1 : 0;
    }
    char what[96];
    snprintf(what, sizeof(what), "request %zd: %s", i, name);
    int rc = tentpy_int_from(v, what, lo, hi, out);
    Py_DECREF(v);
    return rc;
}

static int req_u64(PyObject *q, Py_ssize_t i, const char *name, bool required,
                   uint64_t *out)
{
    PyObject *v = req_field(q, name, required);
    if (!v) {
        *out = 0;
        return PyErr_Occurred() ? -1 : 0;
    }
    int rc = 0;
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        PyErr_Format(PyExc_TypeError, "request %zd: %s must be int, not %s", i,
                     name, Py_TYPE(v)->tp_name);
        rc = -1;
    } else {
        unsigned long long x = PyLong_AsUnsignedLongLong(v);
        if (x == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "request %zd: %s %R is not in 0..2**64-1", i, name, v);
            rc = -1;
        }
        *out = x;
    }
    Py_DECREF(v);
    return rc;
}

/* TENT's IntentType: INTENT_UNSPEC .. STAGING_INTERNAL. */
#define INTENT_MAX 6

/* Reads request i into *r; every field is checked, none truncated. */
/* Policy names are copied next to the requests (the call may release the
 * GIL while the engine reads them): at most this long. */
#define POLICY_NAME_MAX 64

static int read_request(PyObject *q, Py_ssize_t i, tent_request_t *r,
                        char name[POLICY_NAME_MAX])
{
    char what[64];
    snprintf(what, sizeof(what), "request %zd: source", i);
    PyObject *src = req_field(q, "source", true);
    if (!src)
        return -1;
    struct tentpy_mem m;
    int bad = tentpy_mem_from(src, false, what, &m);
    Py_DECREF(src);
    if (bad)
        return -1;
    Py_XDECREF(m.holder); /* registered memory is held by the registry */
    int op, prio, hint, intent;
    uint64_t tid, off, len, deadline;
    if (req_int(q, i, "opcode", OPCODE_READ, OPCODE_WRITE, 0, true, &op) ||
        req_u64(q, i, "target_id", true, &tid) ||
        req_u64(q, i, "target_offset", true, &off) ||
        req_u64(q, i, "length", true, &len) ||
        req_int(q, i, "priority", INT_MIN, INT_MAX, 0, false, &prio) ||
        req_int(q, i, "transport_hint", INT_MIN, INT_MAX, TRANSPORT_UNSPEC,
                false, &hint) ||
        req_int(q, i, "intent_type", 0, INTENT_MAX, 0, false, &intent) ||
        req_u64(q, i, "deadline_ns", false, &deadline))
        return -1;
    PyObject *pol = req_field(q, "policy_name", false);
    if (pol) {
        snprintf(what, sizeof(what), "request %zd: policy_name", i);
        const char *s = pol != Py_None ? tentpy_str(pol, what) : "";
        bad = !s;
        if (s && strlen(s) >= POLICY_NAME_MAX) {
            PyErr_Format(PyExc_ValueError,
                         "%s: longer than %d characters (no policy rule has "
                         "such a name)",
                         what, POLICY_NAME_MAX - 1);
            bad = 1;
        } else if (s) {
            snprintf(name, POLICY_NAME_MAX, "%s", s);
        }
        Py_DECREF(pol);
        if (bad)
            return -1;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    r->opcode = op;
    r->source = (void *)(uintptr_t)m.addr;
    r->target_id = tid;
    r->target_offset = off;
    r->length = len;
    r->priority = prio;
    r->transport_hint = hint;
    r->intent_type = intent;
    r->deadline_ns = deadline;
    r->policy_name = name[0] ? name : NULL;
    return 0;
}

/* Reads a list of Request objects into a new array (PyMem_Free it). */
static tent_request_t *read_requests(PyObject *list, Py_ssize_t *count)
{
    PyObject *f = tentpy_seq(list, "request_list");
    if (!f)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(f);
    /* the requests, then their policy names */
    tent_request_t *r = PyMem_Calloc(n ? n : 1, sizeof(*r) + POLICY_NAME_MAX);
    if (!r) {
        Py_DECREF(f);
        PyErr_NoMemory();
        return NULL;
    }
    char(*names)[POLICY_NAME_MAX] = (void *)(r + (n ? n : 1));
    for (Py_ssize_t i = 0; i < n; i++)
        if (read_request(PyTuple_GET_ITEM(f, i), i, &r[i], names[i]) < 0)
            goto fail;
    if (tentpy_seq_unchanged(list, f, "request_list") < 0)
        goto fail;
    Py_DECREF(f);
    *count = n;
    return r;
fail:
    Py_DECREF(f);
    PyMem_Free(r);
    return NULL;
}

/* A Notification(name, msg), an object with name/msg str attributes or a
 * (name, msg) tuple; keep[] holds the two strings while name/msg are
 * used. */
static int notif_parts(PyObject *n, const char **name, const char **msg,
                       PyObject **keep)
{
    PyObject *nm = NULL, *ms = NULL;
    if (PyTuple_Check(n) && PyTuple_GET_SIZE(n) == 2) {
        nm = PyTuple_GET_ITEM(n, 0);
        ms = PyTuple_GET_ITEM(n, 1);
        Py_INCREF(nm);
        Py_INCREF(ms);
    } else {
        nm = PyObject_GetAttrString(n, "name");
        ms = nm ? PyObject_GetAttrString(n, "msg") : NULL;
    }
    if (!nm || !ms || !PyUnicode_Check(nm) || !PyUnicode_Check(ms)) {
        Py_XDECREF(nm);
        Py_XDECREF(ms);
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError,
                        "notification must be Notification(name: str, msg: "
                        "str)");
        return -1;
    }
    *name = tentpy_str(nm, "notification name");
    *msg = *name ? tentpy_str(ms, "notification msg") : NULL;
    if (!*name || !*msg) {
        Py_DECREF(nm);
        Py_DECREF(ms);
        return -1;
    }
    keep[0] = nm;
    keep[1] = ms;
    return 0;
}

static PyObject *submit_common(EngineObject *self, PyObject *bid_o,
                               PyObject *list, const char *name,
                               const char *msg, const char *what)
{
    uint64_t bid;
    if (u64_arg(bid_o, what, &bid) < 0)
        return NULL;
    Py_ssize_t n;
    tent_request_t *r = read_requests(list, &n);
    if (!r)
        return NULL;
    if (tentpy_enter(&self->core) < 0) {
        PyMem_Free(r);
        return NULL;
    }
    int rc;
    CALL_RELEASED(rc, name ? tent_submit_notif(self->core.eng, bid, r,
                                               (size_t)n, name, msg)
                           : tent_submit(self->core.eng, bid, r, (size_t)n));
    LEAVE(self);
    PyMem_Free(r);
    if (rc)
        return tentpy_raise(rc, what);
    Py_RETURN_NONE;
}

static PyObject *engine_submit(EngineObject *self, PyObject *args)
{
    PyObject *b, *l, *n = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O:submit_transfer", &b, &l, &n))
        return NULL;
    if (n == Py_None)
        return submit_common(self, b, l, NULL, NULL, "submit_transfer");
    const char *name, *msg;
    PyObject *keep[2];
    if (notif_parts(n, &name, &msg, keep) < 0)
        return NULL;
    PyObject *r = submit_common(self, b, l, name, msg, "submit_transfer");
    Py_DECREF(keep[0]);
    Py_DECREF(keep[1]);
    return r;
}

static PyObject *engine_submit_notif(EngineObject *self, PyObject *args)
{
    PyObject *b, *l;
    const char *name, *msg;
    if (!PyArg_ParseTuple(args, "OOss:submit_transfer_notif", &b, &l, &name,
                          &msg))
        return NULL;
    return submit_common(self, b, l, name, msg, "submit_transfer_notif");
}

static PyObject *engine_cancel(EngineObject *self, PyObject *args)
{
    PyObject *b_o, *t_o;
    uint64_t b, t;
    if (!PyArg_ParseTuple(args, "OO:cancel_transfer", &b_o, &t_o) ||
        u64_arg(b_o, "cancel_transfer", &b) < 0 ||
        u64_arg(t_o, "cancel_transfer", &t) < 0)
        return NULL;
    ENTER(self);
    int rc = tent_cancel_task(self->core.eng, b, (size_t)t);
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, "cancel_transfer");
    Py_RETURN_NONE;
}

static PyObject *engine_send_notifi(EngineObject *self, PyObject *args)
{
    PyObject *t_o, *n;
    uint64_t t;
    if (!PyArg_ParseTuple(args, "OO:send_notifi", &t_o, &n) ||
        u64_arg(t_o, "send_notifi", &t) < 0)
        return NULL;
    const char *name, *msg;
    PyObject *keep[2];
    if (notif_parts(n, &name, &msg, keep) < 0)
        return NULL;
    if (tentpy_enter(&self->core) < 0) {
        Py_DECREF(keep[0]);
        Py_DECREF(keep[1]);
        return NULL;
    }
    int rc;
    CALL_RELEASED(rc, tent_send_notifs(self->core.eng, t, name, msg));
    LEAVE(self);
    Py_DECREF(keep[0]);
    Py_DECREF(keep[1]);
    if (rc)
        return tentpy_raise(rc, "send_notifi");
    Py_RETURN_NONE;
}

PyObject *tentpy_notifs_to_list(tent_notifi_info *info, PyObject *cls)
{
    PyObject *list = PyList_New(info->num_records);
    if (!list)
        return NULL;
    for (int i = 0; i < info->num_records; i++) {
        const char *n = info->records[i].name, *m = info->records[i].msg;
        PyObject *pair = Py_BuildValue("(s#s#)", n, (Py_ssize_t)strlen(n), m,
                                       (Py_ssize_t)strlen(m));
        if (pair && cls)
            Py_SETREF(pair, PyObject_Call(cls, pair, NULL));
        if (!pair) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, pair);
    }
    return list;
}

static PyObject *engine_recv_notifi(EngineObject *self,
                                    PyObject *unused TENTPY_UNUSED)
{
    ENTER(self);
    tent_notifi_info info = {0};
    int rc = tent_recv_notifs(self->core.eng, &info);
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, "recv_notifi");
    PyObject *l = tentpy_notifs_to_list(&info, tentpy_Notification);
    tent_free_notifs(&info);
    return l;
}

static PyObject *status_obj(const tent_status_t *s)
{
    PyObject *o = PyStructSequence_New(tentpy_TransferStatus);
    if (!o)
        return NULL;
    PyStructSequence_SetItem(o, 0, PyLong_FromLong(s->status));
    PyStructSequence_SetItem(o, 1,
                             PyLong_FromUnsignedLongLong(s->transferred_bytes));
    if (PyErr_Occurred()) {
        Py_DECREF(o);
        return NULL;
    }
    return o;
}

static PyObject *engine_status(EngineObject *self, PyObject *args)
{
    PyObject *b_o, *t_o;
    uint64_t b, t;
    if (!PyArg_ParseTuple(args, "OO:get_transfer_status", &b_o, &t_o) ||
        u64_arg(b_o, "get_transfer_status", &b) < 0 ||
        u64_arg(t_o, "get_transfer_status", &t) < 0)
        return NULL;
    ENTER(self);
    tent_status_t s = {0};
    int rc;
    CALL_RELEASED(rc, tent_task_status(self->core.eng, b, (size_t)t, &s));
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, "get_transfer_status");
    return status_obj(&s);
}

static PyObject *engine_status_overall(EngineObject *self, PyObject *arg)
{
    uint64_t b;
    if (u64_arg(arg, "get_transfer_status_overall", &b) < 0)
        return NULL;
    ENTER(self);
    tent_status_t s = {0};
    int rc;
    CALL_RELEASED(rc, tent_overall_status(self->core.eng, b, &s));
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, "get_transfer_status_overall");
    return status_obj(&s);
}

static PyObject *engine_status_list(EngineObject *self, PyObject *arg)
{
    uint64_t b;
    if (u64_arg(arg, "get_transfer_status_list", &b) < 0)
        return NULL;
    ENTER(self);
    size_t cap = 64, n;
    tent_status_t *s = NULL;
    int rc;
    for (;;) {
        tent_status_t *ns = PyMem_Realloc(s, cap * sizeof(*s));
        if (!ns) {
            LEAVE(self);
            PyMem_Free(s);
            return PyErr_NoMemory();
        }
        s = ns;
        n = cap;
        CALL_RELEASED(rc, tent_task_status_list(self->core.eng, b, s, &n));
        if (rc != TENT_EOVERFLOW)
            break;
        cap = n;
    }
    LEAVE(self);
    if (rc) {
        PyMem_Free(s);
        return tentpy_raise(rc, "get_transfer_status_list");
    }
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *o = status_obj(&s[i]);
        if (!o) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, o);
    }
    PyMem_Free(s);
    return list;
}

/* Why a task failed: TaskError(code, native, message), code 0 (and an
 * empty message) while it has not.  Not in TENT's module, which has no
 * task causes; TENT's C API has tent_task_error. */
static PyObject *engine_task_error(EngineObject *self, PyObject *args)
{
    PyObject *b_o, *t_o;
    uint64_t b, t;
    if (!PyArg_ParseTuple(args, "OO:task_error", &b_o, &t_o) ||
        u64_arg(b_o, "task_error", &b) < 0 ||
        u64_arg(t_o, "task_error", &t) < 0)
        return NULL;
    ENTER(self);
    int rc, code = TENT_OK, native = 0;
    char msg[1024];
    msg[0] = '\0';
    CALL_RELEASED(rc, tent_task_error(self->core.eng, b, (size_t)t, &code,
                                      &native, msg, sizeof(msg)));
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, "task_error");
    PyObject *o = PyStructSequence_New(tentpy_TaskError);
    if (!o)
        return NULL;
    PyStructSequence_SetItem(o, 0, PyLong_FromLong(code));
    PyStructSequence_SetItem(o, 1, PyLong_FromLong(native));
    PyStructSequence_SetItem(
        o, 2, PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace"));
    if (PyErr_Occurred()) {
        Py_DECREF(o);
        return NULL;
    }
    return o;
}

static PyObject *engine_nic_load_stats(EngineObject *self,
                                       PyObject *unused TENTPY_UNUSED)
{
    int code;
    PyObject *l = tentpy_nic_load_stats(&self->core, &code);
    if (!l && code)
        return tentpy_raise(code, "get_nic_load_stats");
    return l;
}

/* ---- metrics ------------------------------------------------------------ */

static PyObject *engine_metrics_prometheus(EngineObject *self,
                                           PyObject *unused TENTPY_UNUSED)
{
    int code;
    PyObject *t = tentpy_metrics_text(&self->core, false, &code);
    if (!t && code)
        return tentpy_raise(code, "metrics_prometheus");
    return t;
}

static PyObject *engine_metrics_json(EngineObject *self,
                                     PyObject *unused TENTPY_UNUSED)
{
    int code;
    PyObject *t = tentpy_metrics_text(&self->core, true, &code);
    if (!t)
        return code ? tentpy_raise(code, "metrics_json") : NULL;
    PyObject *d = tentpy_json_loads(t);
    Py_DECREF(t);
    return d;
}

static PyObject *engine_metrics_http_address(EngineObject *self,
                                             PyObject *unused TENTPY_UNUSED)
{
    char addr[256];
    uint16_t port = 0;
    int rc;
    ENTER(self);
    CALL_RELEASED(rc, tent_metrics_http_addr_port(self->core.eng, addr,
                                                  sizeof(addr), &port));
    LEAVE(self);
    if (rc == TENT_ENOTSUP)
        Py_RETURN_NONE;
    if (rc)
        return tentpy_raise(rc, "metrics_http_address");
    return Py_BuildValue("(si)", addr, (int)port);
}

static PyMethodDef engine_methods[] = {
    {"close", (PyCFunction)engine_close, METH_NOARGS,
     "close(): destroy the engine.  Safe while other threads use it: calls "
     "already inside the engine finish first, later calls raise "
     "RuntimeError (the C API's tent_destroy_engine has no such guard)."},
    {"__enter__", (PyCFunction)engine_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)engine_exit_ctx, METH_VARARGS, NULL},
    {"available", (PyCFunction)engine_available, METH_NOARGS,
     "True when at least one transport is installed."},
    {"get_segment_name", (PyCFunction)engine_segment_name, METH_NOARGS,
     "Name peers open this engine by."},
    {"get_rpc_server_address", (PyCFunction)engine_rpc_address, METH_NOARGS,
     "Host of the engine's RPC server."},
    {"get_rpc_server_port", (PyCFunction)engine_rpc_port, METH_NOARGS,
     "Port of the engine's RPC server."},
    {"open_segment", (PyCFunction)engine_open_segment, METH_O,
     "open_segment(name) -> segment handle"},
    {"close_segment", (PyCFunction)engine_close_segment, METH_O, NULL},
    {"get_segment_info", (PyCFunction)engine_segment_info, METH_O,
     "get_segment_info(handle) -> SegmentInfo"},
    {"allocate_local_memory", (PyCFunction)(void (*)(void))engine_allocate,
     METH_VARARGS | METH_KEYWORDS,
     "allocate_local_memory(size, location='*') -> address (allocates only; "
     "register it with register_local_memory)"},
    {"allocate_local_memory_ex",
     (PyCFunction)(void (*)(void))engine_allocate_ex,
     METH_VARARGS | METH_KEYWORDS,
     "allocate_local_memory_ex(size, options: MemoryOptions) -> address"},
    {"free_local_memory", (PyCFunction)engine_free, METH_O, NULL},
    {"register_local_memory", (PyCFunction)(void (*)(void))engine_register,
     METH_VARARGS | METH_KEYWORDS,
     "register_local_memory(addr, size=None, permission=GlobalReadWrite); "
     "addr: int, buffer or data_ptr()/nbytes object (kept alive)"},
    {"register_local_memory_ex",
     (PyCFunction)(void (*)(void))engine_register_ex,
     METH_VARARGS | METH_KEYWORDS,
     "register_local_memory_ex(addr, size, options: MemoryOptions)"},
    {"unregister_local_memory", (PyCFunction)(void (*)(void))engine_unregister,
     METH_VARARGS | METH_KEYWORDS, "unregister_local_memory(addr, size=0)"},
    {"register_local_memory_batch",
     (PyCFunction)(void (*)(void))engine_register_batch,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"register_local_memory_batch_ex",
     (PyCFunction)(void (*)(void))engine_register_batch_ex,
     METH_VARARGS | METH_KEYWORDS,
     "register_local_memory_batch_ex(addr_list, size_list, options)"},
    {"unregister_local_memory_batch",
     (PyCFunction)(void (*)(void))engine_unregister_batch,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"allocate_transfer_batch", (PyCFunction)engine_alloc_batch, METH_O,
     "allocate_transfer_batch(batch_size) -> batch id"},
    {"free_transfer_batch", (PyCFunction)engine_free_batch, METH_O,
     "free_transfer_batch(batch_id): free the id.  As TENT's lazy free it "
     "succeeds while tasks are still in flight, and those tasks may still "
     "read the sources and WRITE INTO the destination memory after it "
     "returns: wait until every task left PENDING before reusing or "
     "releasing that memory."},
    {"submit_transfer", (PyCFunction)engine_submit, METH_VARARGS,
     "submit_transfer(batch_id, request_list[, notifi])"},
    {"submit_transfer_notif", (PyCFunction)engine_submit_notif, METH_VARARGS,
     "submit_transfer_notif(batch_id, request_list, name, message)"},
    {"cancel_transfer", (PyCFunction)engine_cancel, METH_VARARGS, NULL},
    {"send_notifi", (PyCFunction)engine_send_notifi, METH_VARARGS,
     "send_notifi(target_id, Notification)"},
    {"recv_notifi", (PyCFunction)engine_recv_notifi, METH_NOARGS,
     "recv_notifi() -> list of Notification"},
    {"get_transfer_status", (PyCFunction)engine_status, METH_VARARGS,
     "get_transfer_status(batch_id, task_id) -> TransferStatus"},
    {"get_transfer_status_list", (PyCFunction)engine_status_list, METH_O, NULL},
    {"get_transfer_status_overall", (PyCFunction)engine_status_overall, METH_O,
     NULL},
    {"task_error", (PyCFunction)engine_task_error, METH_VARARGS,
     "task_error(batch_id, task_id) -> TaskError(code, native, message): "
     "why the task failed; code 0 while it has not (not in TENT's module)."},
    {"get_nic_load_stats", (PyCFunction)engine_nic_load_stats, METH_NOARGS,
     "get_nic_load_stats() -> list of NicLoadStats(device_name, "
     "inflight_bytes, ewma_bandwidth_bps), one per local NIC the transports "
     "send through (TENT's getNicLoadStats)."},
    {"metrics_prometheus", (PyCFunction)engine_metrics_prometheus, METH_NOARGS,
     "metrics_prometheus() -> str: the metrics in Prometheus text format "
     "(what /metrics serves). Raises NotImplementedError when metrics are "
     "disabled."},
    {"metrics_json", (PyCFunction)engine_metrics_json, METH_NOARGS,
     "metrics_json() -> dict: the metrics as /metrics/json serves them. "
     "Raises NotImplementedError when metrics are disabled."},
    {"metrics_http_address", (PyCFunction)engine_metrics_http_address,
     METH_NOARGS,
     "metrics_http_address() -> (host, port) of the metrics HTTP endpoint, "
     "or None when it is not running."},
    {NULL, NULL, 0, NULL}};

PyTypeObject tentpy_EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tent._tent.TransferEngine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "TransferEngine(config_path=None): TENT's transfer engine.",
    .tp_new = engine_new,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_traverse = (traverseproc)engine_traverse,
    .tp_clear = (inquiry)engine_clear,
    .tp_methods = engine_methods,
};
