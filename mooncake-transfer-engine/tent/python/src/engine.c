/* tent.TransferEngine: TENT's own Python API.  Errors raise the matching
 * TentException subclass with tent_last_error()'s message. */
#include "tentpy.h"

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
    if (!PyUnicode_Check(name))
        return PyErr_Format(PyExc_TypeError,
                            "open_segment: name must be str, not %s",
                            Py_TYPE(name)->tp_name);
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return NULL;
    ENTER(self);
    tent_segment_id_t h = 0;
    int rc;
    CALL_RELEASED(rc, tent_open_segment(self->core.eng, &h, s));
    LEAVE(self);
    if (rc == TENT_ENOSEGMENT || rc == TENT_EPEER || rc == TENT_EPROTO) {
        PyErr_Format(tentpy_exc_meta, "open_segment('%s'): %s (%s)", s,
                     tent_last_error(), tent_strerror(rc));
        return NULL;
    }
    if (rc)
        return tentpy_raise(rc, "open_segment");
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

/* location: a str ("*" = anywhere = "cpu" here) or a MemoryOptions. */
static int fill_options(PyObject *src, tent_memory_options_t *o,
                        const char *what)
{
    memset(o, 0, sizeof(*o));
    o->permission = PERM_GLOBAL_READ_WRITE;
    PyObject *loc = src;
    if (!PyUnicode_Check(src)) {
        loc = PyObject_GetAttrString(src, "location");
        if (!loc) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "%s: location must be str or MemoryOptions, not %s",
                         what, Py_TYPE(src)->tp_name);
            return -1;
        }
        PyObject *perm = PyObject_GetAttrString(src, "perm");
        PyObject *type = PyObject_GetAttrString(src, "type");
        long p = perm ? PyLong_AsLong(perm) : -1;
        long t = type ? PyLong_AsLong(type) : -1;
        Py_XDECREF(perm);
        Py_XDECREF(type);
        if (PyErr_Occurred()) {
            Py_DECREF(loc);
            return -1;
        }
        o->permission = (int)p;
        o->transport_type = (int)t;
        Py_DECREF(loc);
        loc = PyObject_GetAttrString(src, "location");
        if (!loc)
            return -1;
        Py_DECREF(loc); /* still owned by src */
    }
    if (!PyUnicode_Check(loc)) {
        PyErr_Format(PyExc_TypeError, "%s: location must be str", what);
        return -1;
    }
    const char *s = PyUnicode_AsUTF8(loc);
    if (!s)
        return -1;
    if (strcmp(s, "*") == 0)
        s = "cpu";
    if (strlen(s) >= sizeof(o->location)) {
        PyErr_Format(PyExc_ValueError, "%s: location '%s' is too long", what,
                     s);
        return -1;
    }
    snprintf(o->location, sizeof(o->location), "%s", s);
    return 0;
}

static PyObject *engine_allocate(EngineObject *self, PyObject *args,
                                 PyObject *kw)
{
    static char *kwlist[] = {"size", "location", NULL};
    PyObject *size_o, *loc = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:allocate_local_memory",
                                     kwlist, &size_o, &loc))
        return NULL;
    uint64_t size;
    if (tentpy_len_from(size_o, "allocate_local_memory", &size) < 0)
        return NULL;
    tent_memory_options_t o;
    if (loc && fill_options(loc, &o, "allocate_local_memory") < 0)
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
        return tentpy_raise(rc, "allocate_local_memory");
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

static PyObject *engine_free(EngineObject *self, PyObject *arg)
{
    struct tentpy_mem m;
    if (tentpy_mem_from(arg, false, "free_local_memory", &m) < 0)
        return NULL;
    Py_XDECREF(m.holder);
    ENTER(self);
    int rc;
    CALL_RELEASED(rc,
                  tent_free_memory(self->core.eng, (void *)(uintptr_t)m.addr));
    LEAVE(self);
    if (rc)
        return tentpy_raise(rc, "free_local_memory");
    PyObject *a = PyLong_FromUnsignedLongLong(m.addr);
    if (a) {
        if (PyDict_DelItem(self->allocated, a) < 0)
            PyErr_Clear();
        Py_DECREF(a);
    }
    /* Freed memory is registered no more. */
    tentpy_keep_drop_all(&self->core, m.addr);
    Py_RETURN_NONE;
}

/* One registration; `perm` is a permission int or a MemoryOptions. */
static int register_one(EngineObject *self, PyObject *addr_o, PyObject *size_o,
                        PyObject *perm_o, const char *what)
{
    struct tentpy_mem m;
    if (tentpy_mem_from(addr_o, true, what, &m) < 0)
        return -1;
    uint64_t size = m.size;
    if (size_o && size_o != Py_None &&
        (tentpy_len_from(size_o, what, &size) < 0 ||
         tentpy_mem_check_len(&m, size, what) < 0))
        goto fail;
    tent_memory_options_t o;
    memset(&o, 0, sizeof(o));
    o.permission = PERM_GLOBAL_READ_WRITE;
    if (perm_o && PyLong_Check(perm_o)) {
        long p = PyLong_AsLong(perm_o);
        if (p == -1 && PyErr_Occurred())
            goto fail;
        o.permission = (int)p;
    } else if (perm_o && fill_options(perm_o, &o, what) < 0) {
        goto fail;
    }
    if (tentpy_enter(&self->core) < 0)
        goto fail;
    int rc;
    CALL_RELEASED(rc, tent_register_memory_ex(self->core.eng,
                                              (void *)(uintptr_t)m.addr,
                                              (size_t)size, &o));
    LEAVE(self);
    if (rc) {
        tentpy_raise(rc, what);
        goto fail;
    }
    if (tentpy_keep_add(&self->core, m.addr, m.holder) < 0)
        goto fail;
    Py_XDECREF(m.holder);
    return 0;
fail:
    Py_XDECREF(m.holder);
    return -1;
}

static int unregister_one(EngineObject *self, PyObject *addr_o,
                          PyObject *size_o, const char *what)
{
    struct tentpy_mem m;
    if (tentpy_mem_from(addr_o, false, what, &m) < 0)
        return -1;
    Py_XDECREF(m.holder);
    uint64_t size = 0;
    if (size_o && size_o != Py_None && tentpy_len_from(size_o, what, &size) < 0)
        return -1;
    if (tentpy_enter(&self->core) < 0)
        return -1;
    int rc;
    CALL_RELEASED(rc, tent_unregister_memory(self->core.eng,
                                             (void *)(uintptr_t)m.addr, size));
    LEAVE(self);
    if (rc) {
        tentpy_raise(rc, what);
        return -1;
    }
    tentpy_keep_drop(&self->core, m.addr);
    return 0;
}

static PyObject *engine_register(EngineObject *self, PyObject *args,
                                 PyObject *kw)
{
    static char *kwlist[] = {"addr", "size", "permission", NULL};
    PyObject *a, *s = NULL, *p = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:register_local_memory",
                                     kwlist, &a, &s, &p))
        return NULL;
    if (register_one(self, a, s, p, "register_local_memory") < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *engine_unregister(EngineObject *self, PyObject *args,
                                   PyObject *kw)
{
    static char *kwlist[] = {"addr", "size", NULL};
    PyObject *a, *s = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:unregister_local_memory",
                                     kwlist, &a, &s))
        return NULL;
    if (unregister_one(self, a, s, "unregister_local_memory") < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *engine_register_batch(EngineObject *self, PyObject *args,
                                       PyObject *kw)
{
    static char *kwlist[] = {"addr_list", "size_list", "permission", NULL};
    PyObject *al, *sl, *p = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "OO|O:register_local_memory_batch", kwlist, &al, &sl, &p))
        return NULL;
    PyObject *fa = PySequence_Fast(al, "addr_list must be a sequence");
    if (!fa)
        return NULL;
    PyObject *fs = PySequence_Fast(sl, "size_list must be a sequence");
    if (!fs) {
        Py_DECREF(fa);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fa);
    if (PySequence_Fast_GET_SIZE(fs) != n) {
        PyErr_Format(PyExc_ValueError,
                     "register_local_memory_batch: %zd addresses but %zd sizes",
                     n, PySequence_Fast_GET_SIZE(fs));
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (register_one(self, PySequence_Fast_GET_ITEM(fa, i),
                         PySequence_Fast_GET_ITEM(fs, i), p,
                         "register_local_memory_batch") < 0) {
            /* No partial state: undo the ones done. */
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            for (Py_ssize_t j = 0; j < i; j++)
                if (unregister_one(self, PySequence_Fast_GET_ITEM(fa, j),
                                   PySequence_Fast_GET_ITEM(fs, j),
                                   "register_local_memory_batch") < 0)
                    PyErr_Clear();
            PyErr_Restore(t, v, tb);
            goto fail;
        }
    }
    Py_DECREF(fa);
    Py_DECREF(fs);
    Py_RETURN_NONE;
fail:
    Py_DECREF(fa);
    Py_DECREF(fs);
    return NULL;
}

static PyObject *engine_unregister_batch(EngineObject *self, PyObject *args,
                                         PyObject *kw)
{
    static char *kwlist[] = {"addr_list", "size_list", NULL};
    PyObject *al, *sl = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "O|O:unregister_local_memory_batch", kwlist, &al, &sl))
        return NULL;
    PyObject *fa = PySequence_Fast(al, "addr_list must be a sequence");
    if (!fa)
        return NULL;
    PyObject *fs = NULL;
    if (sl && sl != Py_None) {
        fs = PySequence_Fast(sl, "size_list must be a sequence");
        if (!fs) {
            Py_DECREF(fa);
            return NULL;
        }
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fa);
    Py_ssize_t ns = fs ? PySequence_Fast_GET_SIZE(fs) : 0;
    PyObject *res = NULL;
    if (ns != 0 && ns != n) {
        PyErr_Format(PyExc_ValueError,
                     "unregister_local_memory_batch: %zd addresses but %zd "
                     "sizes",
                     n, ns);
        goto out;
    }
    int failed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (unregister_one(self, PySequence_Fast_GET_ITEM(fa, i),
                           ns ? PySequence_Fast_GET_ITEM(fs, i) : NULL,
                           "unregister_local_memory_batch") < 0) {
            if (failed) /* keep the first error, go on with the rest */
                PyErr_Clear();
            failed = 1;
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            for (Py_ssize_t j = i + 1; j < n; j++)
                if (unregister_one(self, PySequence_Fast_GET_ITEM(fa, j),
                                   ns ? PySequence_Fast_GET_ITEM(fs, j) : NULL,
                                   "unregister_local_memory_batch") < 0)
                    PyErr_Clear();
            PyErr_Restore(t, v, tb);
            goto out;
        }
    }
    res = Py_None;
    Py_INCREF(res);
out:
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

static int int_attr(PyObject *o, const char *name, long dflt, long *out)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (!v) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        *out = dflt;
        return 0;
    }
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "Request.%s must be int, not %s", name,
                     Py_TYPE(v)->tp_name);
        Py_DECREF(v);
        return -1;
    }
    *out = PyLong_AsLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int u64_attr(PyObject *o, const char *name, uint64_t *out)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (!v)
        return -1;
    int rc = tentpy_len_from(v, name, out);
    Py_DECREF(v);
    return rc;
}

/* Reads a list of Request objects into a new array (PyMem_Free it). */
static tent_request_t *read_requests(PyObject *list, Py_ssize_t *count)
{
    PyObject *f = PySequence_Fast(list, "request_list must be a sequence");
    if (!f)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(f);
    tent_request_t *r = PyMem_Calloc(n ? n : 1, sizeof(*r));
    if (!r) {
        Py_DECREF(f);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *q = PySequence_Fast_GET_ITEM(f, i);
        long op, prio, hint;
        uint64_t tid, off, len;
        PyObject *src = PyObject_GetAttrString(q, "source");
        if (!src)
            goto fail;
        struct tentpy_mem m;
        int bad = tentpy_mem_from(src, false, "Request.source", &m);
        Py_DECREF(src);
        if (bad)
            goto fail;
        Py_XDECREF(m.holder); /* registered memory is held by the registry */
        if (int_attr(q, "opcode", -1, &op) < 0 ||
            u64_attr(q, "target_id", &tid) < 0 ||
            u64_attr(q, "target_offset", &off) < 0 ||
            u64_attr(q, "length", &len) < 0 ||
            int_attr(q, "priority", 0, &prio) < 0 ||
            int_attr(q, "transport_hint", 0, &hint) < 0)
            goto fail;
        if (op != OPCODE_READ && op != OPCODE_WRITE) {
            PyErr_Format(PyExc_ValueError,
                         "Request.opcode %ld is not OpCode.READ or WRITE", op);
            goto fail;
        }
        r[i].opcode = (int)op;
        r[i].source = (void *)(uintptr_t)m.addr;
        r[i].target_id = tid;
        r[i].target_offset = off;
        r[i].length = len;
        r[i].priority = (int)prio;
        r[i].transport_hint = (int)hint;
    }
    Py_DECREF(f);
    *count = n;
    return r;
fail:
    Py_DECREF(f);
    PyMem_Free(r);
    return NULL;
}

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
    *name = PyUnicode_AsUTF8(nm);
    *msg = PyUnicode_AsUTF8(ms);
    keep[0] = nm;
    keep[1] = ms;
    return (*name && *msg) ? 0 : -1;
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
     "Destroy the engine (after calls in flight end); later calls raise."},
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
    {"free_local_memory", (PyCFunction)engine_free, METH_O, NULL},
    {"register_local_memory", (PyCFunction)(void (*)(void))engine_register,
     METH_VARARGS | METH_KEYWORDS,
     "register_local_memory(addr, size=None, permission=GlobalReadWrite); "
     "addr: int, buffer or data_ptr()/nbytes object (kept alive)"},
    {"unregister_local_memory", (PyCFunction)(void (*)(void))engine_unregister,
     METH_VARARGS | METH_KEYWORDS, "unregister_local_memory(addr, size=0)"},
    {"register_local_memory_batch",
     (PyCFunction)(void (*)(void))engine_register_batch,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"unregister_local_memory_batch",
     (PyCFunction)(void (*)(void))engine_unregister_batch,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"allocate_transfer_batch", (PyCFunction)engine_alloc_batch, METH_O,
     "allocate_transfer_batch(batch_size) -> batch id"},
    {"free_transfer_batch", (PyCFunction)engine_free_batch, METH_O, NULL},
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
