/* Arguments: memory (integer addresses, buffer-protocol objects such as
 * numpy arrays, bytearray, memoryview, mmap, and data_ptr()/nbytes objects
 * such as torch tensors), lengths, C ints, strings and sequences, each
 * checked so that nothing reaches C truncated or changed under it. */
#include "tentpy.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define VIEW_CAPSULE "tent.buffer_view"

static void view_capsule_free(PyObject *cap)
{
    Py_buffer *view = PyCapsule_GetPointer(cap, VIEW_CAPSULE);
    if (view) {
        PyBuffer_Release(view);
        PyMem_Free(view);
    }
}

static int from_buffer(PyObject *obj, bool writable, const char *what,
                       struct tentpy_mem *out)
{
    Py_buffer *view = PyMem_Malloc(sizeof(*view));
    if (!view) {
        PyErr_NoMemory();
        return -1;
    }
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyMem_Free(view);
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_Format(PyExc_ValueError, "%s: %s buffer is not usable (%s): %S",
                     what, Py_TYPE(obj)->tp_name,
                     writable ? "it must be C-contiguous and writable"
                              : "it must be C-contiguous",
                     value ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return -1;
    }
    PyObject *cap = PyCapsule_New(view, VIEW_CAPSULE, view_capsule_free);
    if (!cap) {
        PyBuffer_Release(view);
        PyMem_Free(view);
        return -1;
    }
    out->addr = (uint64_t)(uintptr_t)view->buf;
    out->size = (uint64_t)view->len;
    out->holder = cap;
    return 0;
}

/* torch.Tensor and friends: data_ptr() and nbytes, contiguous. */
static int from_data_ptr(PyObject *obj, const char *what,
                         struct tentpy_mem *out)
{
    PyObject *contig = PyObject_GetAttrString(obj, "is_contiguous");
    if (contig) {
        PyObject *r = PyObject_CallNoArgs(contig);
        Py_DECREF(contig);
        if (!r)
            return -1;
        int ok = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (ok < 0)
            return -1;
        if (!ok) {
            PyErr_Format(PyExc_ValueError,
                         "%s: %s is not contiguous; pass .contiguous()", what,
                         Py_TYPE(obj)->tp_name);
            return -1;
        }
    } else {
        PyErr_Clear();
    }
    PyObject *p = PyObject_CallMethod(obj, "data_ptr", NULL);
    if (!p)
        return -1;
    /* nbytes, or element_size() * numel() (torch before 2.1). */
    PyObject *n = PyObject_GetAttrString(obj, "nbytes");
    if (!n && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyObject *es = PyObject_CallMethod(obj, "element_size", NULL);
        PyObject *ne = es ? PyObject_CallMethod(obj, "numel", NULL) : NULL;
        n = ne ? PyNumber_Multiply(es, ne) : NULL;
        Py_XDECREF(es);
        Py_XDECREF(ne);
    }
    if (!n) {
        Py_DECREF(p);
        return -1;
    }
    unsigned long long addr =
        PyLong_Check(p) ? PyLong_AsUnsignedLongLong(p) : (unsigned long long)-1;
    unsigned long long size =
        PyLong_Check(n) ? PyLong_AsUnsignedLongLong(n) : (unsigned long long)-1;
    Py_DECREF(p);
    Py_DECREF(n);
    if (PyErr_Occurred() || addr == (unsigned long long)-1 ||
        size == (unsigned long long)-1) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s: %s.data_ptr() / .nbytes are not non-negative "
                     "integers",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    Py_INCREF(obj);
    out->addr = addr;
    out->size = size;
    out->holder = obj;
    return 0;
}

int tentpy_mem_from(PyObject *obj, bool writable, const char *what,
                    struct tentpy_mem *out)
{
    out->addr = 0;
    out->size = 0;
    out->holder = NULL;
    if (PyLong_Check(obj)) {
        if (PyBool_Check(obj)) {
            PyErr_Format(PyExc_TypeError, "%s: expected an address, got bool",
                         what);
            return -1;
        }
        unsigned long long a = PyLong_AsUnsignedLongLong(obj);
        if (a == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "%s: address %R is not in 0..2**64-1", what, obj);
            return -1;
        }
        out->addr = a;
        return 0;
    }
    if (PyObject_CheckBuffer(obj))
        return from_buffer(obj, writable, what, out);
    if (PyObject_HasAttrString(obj, "data_ptr") &&
        (PyObject_HasAttrString(obj, "nbytes") ||
         (PyObject_HasAttrString(obj, "element_size") &&
          PyObject_HasAttrString(obj, "numel"))))
        return from_data_ptr(obj, what, out);
    PyErr_Format(PyExc_TypeError,
                 "%s: expected an integer address, a buffer (numpy array, "
                 "bytearray, memoryview) or an object with data_ptr() and "
                 "nbytes (torch.Tensor), got %s",
                 what, Py_TYPE(obj)->tp_name);
    return -1;
}

int tentpy_len_from(PyObject *obj, const char *what, uint64_t *out)
{
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected an integer length, got %s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if ((v == (unsigned long long)-1 && PyErr_Occurred()) || v > SIZE_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: length %R is not in 0..2**64-1",
                     what, obj);
        return -1;
    }
    *out = v;
    return 0;
}

int tentpy_mem_check_len(const struct tentpy_mem *m, uint64_t len,
                         const char *what)
{
    if (m->holder && len > m->size) {
        PyErr_Format(PyExc_ValueError,
                     "%s: length %llu is larger than the object's %llu bytes",
                     what, (unsigned long long)len,
                     (unsigned long long)m->size);
        return -1;
    }
    return 0;
}

PyObject *tentpy_errorf(PyObject *type, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    PyErr_SetString(type, text);
    return NULL;
}

int tentpy_int_from(PyObject *obj, const char *what, long long lo, long long hi,
                    int *out)
{
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be int, not %s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "%s %R is not in %lld..%lld", what, obj,
                     lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Whether every byte of [addr, end) lies in readable mappings of this
 * process (/proc/self/maps, sorted by address).  A reserved PROT_NONE
 * region (a guard, a sanitizer's shadow) counts as not readable: a local
 * copy would fault there just the same. */
static bool range_readable(uint64_t addr, uint64_t end)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return false;
    char line[512];
    uint64_t cur = addr;
    bool ok = false;
    while (!ok && fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3)
            continue;
        /* a line longer than the buffer: skip its tail */
        while (!strchr(line, '\n') && fgets(line, sizeof(line), f))
            ;
        if (hi <= cur)
            continue;
        if (lo > cur || perms[0] != 'r')
            break; /* a hole, or memory without read access */
        cur = hi;
        ok = cur >= end;
    }
    fclose(f);
    return ok;
}

int tentpy_check_mapped(uint64_t addr, uint64_t len, const char *what)
{
    if (len == 0 || addr == 0)
        return 0; /* the engine names these itself */
    if (addr + len < addr || !range_readable(addr, addr + len)) {
        tentpy_errorf(PyExc_ValueError,
                      "%s: [%#llx, +%llu) is not mapped, readable memory of "
                      "this process",
                      what, (unsigned long long)addr, (unsigned long long)len);
        return -1;
    }
    return 0;
}

bool tentpy_host_location(const char *loc)
{
    return !loc[0] || strcmp(loc, "*") == 0 || strcmp(loc, "cpu") == 0 ||
           strncmp(loc, "cpu:", 4) == 0;
}

const char *tentpy_str(PyObject *obj, const char *what)
{
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be str, not %s", what,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(obj, &n);
    if (!s)
        return NULL;
    if ((Py_ssize_t)strlen(s) != n) {
        PyErr_Format(PyExc_ValueError, "%s %R contains a NUL character", what,
                     obj);
        return NULL;
    }
    return s;
}

PyObject *tentpy_seq(PyObject *obj, const char *what)
{
    if (PyUnicode_Check(obj) || PyBytes_Check(obj) || PyByteArray_Check(obj) ||
        !PySequence_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list, not %s", what,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return PySequence_Tuple(obj);
}

int tentpy_seq_unchanged(PyObject *orig, PyObject *snap, const char *what)
{
    if (!PyList_Check(orig))
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(snap);
    bool same = PyList_GET_SIZE(orig) == n;
    for (Py_ssize_t i = 0; same && i < n; i++)
        same = PyList_GET_ITEM(orig, i) == PyTuple_GET_ITEM(snap, i);
    if (!same) {
        PyErr_Format(PyExc_RuntimeError,
                     "%s was modified during the call (by code its items "
                     "ran); nothing was done",
                     what);
        return -1;
    }
    return 0;
}
