/* tent._tent: exceptions, record types, constants and the two engine
 * classes.  The `tent` package (tent/__init__.py) re-exports them and adds
 * the enums and the small argument classes. */
#include "tentpy.h"

#include <stdio.h>

PyObject *tentpy_exc_base, *tentpy_exc_inval, *tentpy_exc_notreg,
    *tentpy_exc_nodev, *tentpy_exc_entry, *tentpy_exc_meta, *tentpy_exc_rpc,
    *tentpy_exc_internal, *tentpy_exc_notimpl;
static PyObject *exc_rdma, *exc_cuda;

PyTypeObject *tentpy_TransferStatus, *tentpy_SegmentInfoBuffer,
    *tentpy_SegmentInfo, *tentpy_NicLoadStats, *tentpy_TaskError;
PyObject *tentpy_Notification, *tentpy_TransferNotify;

static PyObject *exc_for(int code)
{
    switch (code) {
    case TENT_EINVAL:
    case TENT_ENULL:
    case TENT_ERANGE:
    case TENT_EPERM:
    case TENT_ECAPACITY:
    case TENT_EEXIST:
    case TENT_ECONFIG:
    case TENT_EOVERFLOW:
        return tentpy_exc_inval;
    case TENT_ENOTREG:
        return tentpy_exc_notreg;
    case TENT_ENODEV:
    case TENT_ENOTRANSPORT:
        return tentpy_exc_nodev;
    case TENT_ENOSEGMENT:
    case TENT_ENOBATCH:
    case TENT_ENOTASK:
        return tentpy_exc_entry;
    case TENT_EPEER:
    case TENT_EPROTO:
        return tentpy_exc_rpc;
    case TENT_ENOTSUP:
        return tentpy_exc_notimpl;
    default:
        return tentpy_exc_internal;
    }
}

PyObject *tentpy_raise_msg(int code, const char *what, const char *msg)
{
    return tentpy_errorf(exc_for(code), "%s: %s (%s)", what, msg,
                         tent_strerror(code));
}

PyObject *tentpy_raise(int code, const char *what)
{
    return tentpy_raise_msg(code, what, tent_last_error());
}

/* ---- record types ------------------------------------------------------- */

static PyStructSequence_Field status_fields[] = {
    {"state", "TransferStatusEnum value"},
    {"bytes", "bytes transferred (successful execution only)"},
    {NULL, NULL}};
static PyStructSequence_Desc status_desc = {
    "tent.TransferStatus", "State of a task or batch.", status_fields, 2};

static PyStructSequence_Field buf_fields[] = {{"base", "start address"},
                                              {"length", "bytes"},
                                              {"location", "memory location"},
                                              {NULL, NULL}};
static PyStructSequence_Desc buf_desc = {"tent.SegmentInfoBuffer",
                                         "A buffer registered in a segment.",
                                         buf_fields, 3};

static PyStructSequence_Field seg_fields[] = {
    {"type", "0 memory, 1 file"},
    {"buffers", "list of SegmentInfoBuffer"},
    {NULL, NULL}};
static PyStructSequence_Desc seg_desc = {
    "tent.SegmentInfo", "A segment's registered buffers.", seg_fields, 2};

static PyStructSequence_Field nic_fields[] = {
    {"device_name", "the local NIC (interface name)"},
    {"inflight_bytes", "bytes of slices in flight on its rails"},
    {"ewma_bandwidth_bps",
     "its EWMA bandwidth estimate, bytes per second (its link speed, or the "
     "transport's default, before any transfer)"},
    {NULL, NULL}};
static PyStructSequence_Desc nic_desc = {
    "tent.NicLoadStats", "Load of one local NIC (TENT's NicLoadStats).",
    nic_fields, 3};

static PyStructSequence_Field task_error_fields[] = {
    {"code", "TENT_E* cause (negative; 0 when the task has not failed)"},
    {"native", "the code it carried from below (errno, vendor code), or 0"},
    {"message", "what failed, where it was first seen"},
    {NULL, NULL}};
static PyStructSequence_Desc task_error_desc = {
    "tent.TaskError", "Why a task failed (tent_task_error).", task_error_fields,
    3};

static int add_exc(PyObject *m, PyObject **slot, const char *name,
                   PyObject *base)
{
    char full[96];
    snprintf(full, sizeof(full), "tent.%s", name);
    *slot = PyErr_NewException(full, base, NULL);
    if (!*slot)
        return -1;
    Py_INCREF(*slot);
    return PyModule_AddObject(m, name, *slot);
}

static int add_type(PyObject *m, PyTypeObject **slot, PyStructSequence_Desc *d,
                    const char *name)
{
    *slot = PyStructSequence_NewType(d);
    if (!*slot)
        return -1;
    Py_INCREF(*slot);
    return PyModule_AddObject(m, name, (PyObject *)*slot);
}

static PyObject *py_strerror(PyObject *self TENTPY_UNUSED, PyObject *arg)
{
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(tent_strerror((int)code));
}

/* The package's Notification and TransferNotify classes (called with
 * name, msg) for received notifications; plain tuples until then. */
static PyObject *py_set_notification_types(PyObject *self TENTPY_UNUSED,
                                           PyObject *args)
{
    PyObject *n, *t;
    if (!PyArg_ParseTuple(args, "OO", &n, &t))
        return NULL;
    Py_INCREF(n);
    Py_INCREF(t);
    Py_XSETREF(tentpy_Notification, n);
    Py_XSETREF(tentpy_TransferNotify, t);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"strerror", py_strerror, METH_O, "Name of a TENT_E* code."},
    {"_set_notification_types", py_set_notification_types, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef tent_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tent._tent",
    .m_doc = "C extension of the tent package (TENT in C).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__tent(void); /* the interpreter's entry point */
PyMODINIT_FUNC PyInit__tent(void)
{
    PyObject *m = PyModule_Create(&tent_module);
    if (!m)
        return NULL;
    PyObject *notimpl_bases = NULL;
    if (add_exc(m, &tentpy_exc_base, "TentException", PyExc_RuntimeError) ||
        add_exc(m, &tentpy_exc_inval, "InvalidArgumentError",
                tentpy_exc_base) ||
        add_exc(m, &tentpy_exc_notreg, "AddressNotRegisteredError",
                tentpy_exc_base) ||
        add_exc(m, &tentpy_exc_nodev, "DeviceNotFoundError", tentpy_exc_base) ||
        add_exc(m, &tentpy_exc_entry, "InvalidEntryError", tentpy_exc_base) ||
        add_exc(m, &tentpy_exc_meta, "MetadataError", tentpy_exc_base) ||
        add_exc(m, &tentpy_exc_rpc, "RpcServiceError", tentpy_exc_base) ||
        add_exc(m, &tentpy_exc_internal, "InternalError", tentpy_exc_base) ||
        add_exc(m, &exc_rdma, "RdmaError", tentpy_exc_base) ||
        add_exc(m, &exc_cuda, "CudaError", tentpy_exc_base))
        goto fail;
    notimpl_bases = PyTuple_Pack(2, tentpy_exc_base, PyExc_NotImplementedError);
    if (!notimpl_bases ||
        add_exc(m, &tentpy_exc_notimpl, "NotImplementedError", notimpl_bases))
        goto fail;
    Py_CLEAR(notimpl_bases);
    if (add_type(m, &tentpy_TransferStatus, &status_desc, "TransferStatus") ||
        add_type(m, &tentpy_SegmentInfoBuffer, &buf_desc,
                 "SegmentInfoBuffer") ||
        add_type(m, &tentpy_SegmentInfo, &seg_desc, "SegmentInfo") ||
        add_type(m, &tentpy_NicLoadStats, &nic_desc, "NicLoadStats") ||
        add_type(m, &tentpy_TaskError, &task_error_desc, "TaskError"))
        goto fail;
    if (PyType_Ready(&tentpy_EngineType) < 0 ||
        PyType_Ready(&tentpy_MooncakeType) < 0)
        goto fail;
    Py_INCREF(&tentpy_EngineType);
    if (PyModule_AddObject(m, "TransferEngine",
                           (PyObject *)&tentpy_EngineType) < 0)
        goto fail;
    Py_INCREF(&tentpy_MooncakeType);
    if (PyModule_AddObject(m, "MooncakeTransferEngine",
                           (PyObject *)&tentpy_MooncakeType) < 0)
        goto fail;
    /* Transport numbers: the one list (transports.def), as the C header
     * defines them (registry.c checks that they agree).  TRANSPORT_<X> for
     * each, and _transport_types, ((PyName, value, name), ...), which the
     * package's TransportType is built from. */
    static const struct {
        const char *constant, *pyname, *name;
        int value;
    } types[] = {
#define TENT_XPORT_TYPE(suffix, value, name, pyname)                           \
    {"TRANSPORT_" #suffix, #pyname, name, value},
#include "transport/transports.def"
    };
    PyObject *tt = PyTuple_New(sizeof(types) / sizeof(types[0]));
    if (!tt)
        goto fail;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        PyObject *row = Py_BuildValue("(sis)", types[i].pyname, types[i].value,
                                      types[i].name);
        if (!row ||
            PyModule_AddIntConstant(m, types[i].constant, types[i].value) < 0) {
            Py_XDECREF(row);
            Py_DECREF(tt);
            goto fail;
        }
        PyTuple_SET_ITEM(tt, (Py_ssize_t)i, row);
    }
    if (PyModule_AddObject(m, "_transport_types", tt) < 0) {
        Py_DECREF(tt);
        goto fail;
    }
    if (PyModule_AddIntConstant(m, "LOCAL_SEGMENT_ID", 0) ||
        PyModule_AddStringConstant(m, "kWildcardLocation", "*") ||
        PyModule_AddIntConstant(m, "PRIO_HIGH", 0) ||
        PyModule_AddIntConstant(m, "PRIO_MEDIUM", 1) ||
        PyModule_AddIntConstant(m, "PRIO_LOW", 2))
        goto fail;
    return m;
fail:
    Py_XDECREF(notimpl_bases);
    Py_DECREF(m);
    return NULL;
}
