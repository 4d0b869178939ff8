/* tent.mooncake.TransferEngine: the classic Mooncake engine API that SGLang
 * and vLLM call.  Integer results: 0 success, -1 failure (batch ids: 0 =
 * failure); the reason is in last_error().  Wrong argument types raise
 * TypeError/ValueError, as a pybind11 binding would. */
// clang-format off
#include "tentpy.h" /* Python.h before any system header */
#include "classic/settings.h"
// clang-format on

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* last_error(): per engine, and within it per thread (a thread pool
 * sharing one engine sees its own failures), for the last ERR_SLOTS
 * threads that failed on this engine. */
#define ERR_SLOTS 16
#define ERR_LEN   1024
struct err_slot {
    pthread_t tid;
    unsigned long stamp; /* 0: unused */
    char msg[ERR_LEN];
};

typedef struct {
    PyObject_HEAD struct tentpy_core core;
    PyObject *managed; /* int addr -> int length (allocate_managed_buffer) */
    char host[256];    /* the RPC server's address */
    int rpc_port;
    bool p2p;         /* P2PHANDSHAKE: a host:port name is an address */
    double timeout_s; /* MC_TRANSFER_TIMEOUT */
    pthread_mutex_t err_lock;
    unsigned long err_stamp;
    struct err_slot errs[ERR_SLOTS];
} MCObject;

/* Records the calling thread's message for its last failed call on this
 * engine (any thread, GIL held or not). */
static void set_last(MCObject *self, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_last(MCObject *self, const char *fmt, ...)
{
    char text[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    pthread_t me = pthread_self();
    pthread_mutex_lock(&self->err_lock);
    struct err_slot *slot = NULL, *oldest = &self->errs[0];
    for (int i = 0; i < ERR_SLOTS && !slot; i++) {
        struct err_slot *e = &self->errs[i];
        if (e->stamp && pthread_equal(e->tid, me))
            slot = e;
        else if (e->stamp < oldest->stamp)
            oldest = e;
    }
    if (!slot)
        slot = oldest;
    slot->tid = me;
    slot->stamp = ++self->err_stamp;
    memcpy(slot->msg, text, sizeof(text));
    pthread_mutex_unlock(&self->err_lock);
}

/* Copies the calling thread's last message on this engine ("" if none). */
static void get_last(MCObject *self, char *out, size_t len)
{
    pthread_t me = pthread_self();
    out[0] = '\0';
    pthread_mutex_lock(&self->err_lock);
    for (int i = 0; i < ERR_SLOTS; i++)
        if (self->errs[i].stamp && pthread_equal(self->errs[i].tid, me)) {
            snprintf(out, len, "%s", self->errs[i].msg);
            break;
        }
    pthread_mutex_unlock(&self->err_lock);
}

/* Moves the pending exception's message into last_error(). */
static void exc_to_last(MCObject *self)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *str = v ? PyObject_Str(v) : NULL;
    const char *m = str ? PyUnicode_AsUTF8(str) : NULL;
    set_last(self, "%s", m ? m : "unknown error");
    Py_XDECREF(str);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    PyErr_Clear();
}

static PyObject *fail_int(void)
{
    return PyLong_FromLong(-1);
}

/* ---- argument parsing for METH_FASTCALL | METH_KEYWORDS ---------------- */

/* Fills out[0..nnames) from positional and keyword arguments; the first
 * nreq are required, the others default to NULL. */
static int parse(const char *fn, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames, const char *const *names, int nnames,
                 int nreq, PyObject **out)
{
    if (nargs > nnames) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes at most %d arguments (%zd given)", fn, nnames,
                     nargs);
        return -1;
    }
    for (int i = 0; i < nnames; i++)
        out[i] = i < nargs ? args[i] : NULL;
    if (kwnames) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nk; k++) {
            const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
            if (!kn)
                return -1;
            int i = 0;
            while (i < nnames && strcmp(names[i], kn) != 0)
                i++;
            if (i == nnames) {
                PyErr_Format(PyExc_TypeError,
                             "%s() got an unexpected keyword argument '%s'", fn,
                             kn);
                return -1;
            }
            if (out[i]) {
                PyErr_Format(PyExc_TypeError,
                             "%s() got multiple values for argument '%s'", fn,
                             kn);
                return -1;
            }
            out[i] = args[nargs + k];
        }
    }
    for (int i = 0; i < nreq; i++)
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'",
                         fn, names[i]);
            return -1;
        }
    return 0;
}

#define PARSE(fn, names, nreq, out)                                            \
    parse(fn, args, nargs, kwnames, names,                                     \
          (int)(sizeof(names) / sizeof(names[0])), nreq, out)

/* Result of reading an argument: OK, a Python exception (a wrong type),
 * or REFUSED: a value the engine refuses (the call returns its failure
 * value; last_error() says why). */
enum { ARG_OK = 0, ARG_PYERR = -2, ARG_REFUSED = -1 };

/* A str argument (absent or None: ""); a NUL inside is refused (C would
 * read a shorter name, naming something else). */
static int str_in(MCObject *self, PyObject *o, const char *fn, const char *what,
                  const char **out)
{
    *out = "";
    if (!o || o == Py_None)
        return ARG_OK;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): %s must be str, not %s", fn, what,
                     Py_TYPE(o)->tp_name);
        return ARG_PYERR;
    }
    char field[128];
    snprintf(field, sizeof(field), "%s(): %s", fn, what);
    *out = tentpy_str(o, field);
    if (*out)
        return ARG_OK;
    if (!PyErr_ExceptionMatches(PyExc_ValueError))
        return ARG_PYERR;
    exc_to_last(self);
    return ARG_REFUSED;
}

/* transport_hint -> TRANSPORT_*; ValueError for an unknown name. */
static int hint_arg(MCObject *self, PyObject *o, const char *fn, int *out)
{
    const char *s;
    int a = str_in(self, o, fn, "transport_hint", &s);
    if (a)
        return a;
    static const struct {
        const char *name;
        int type;
    } hints[] = {
        {"", TRANSPORT_UNSPEC},
        /* Mooncake's Ascend protocol is the memfabric transport here */
        {"ascend", TRANSPORT_MEMFABRIC},
#define TENT_XPORT_TYPE(suffix, value, name, pyname) {name, value},
#include "transport/transports.def"
    };
    for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++)
        if (strcmp(s, hints[i].name) == 0) {
            *out = hints[i].type;
            return 0;
        }
    PyErr_Format(PyExc_ValueError,
                 "%s(): transport_hint '%s' is not one of rdma, mnnvl, shm, "
                 "nvlink, gds, io_uring, tcp, ascend, sunrise_link, unspec",
                 fn, s);
    return ARG_PYERR;
}

/* ---- lifetime ----------------------------------------------------------- */

static PyObject *mc_new(PyTypeObject *type, PyObject *args TENTPY_UNUSED,
                        PyObject *kw TENTPY_UNUSED)
{
    MCObject *self = (MCObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->managed = PyDict_New();
    if (!self->managed || tentpy_core_init(&self->core) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->timeout_s = 30.0;
    pthread_mutex_init(&self->err_lock, NULL);
    return (PyObject *)self;
}

static int mc_traverse(MCObject *self, visitproc visit, void *arg)
{
    return tentpy_core_traverse(&self->core, visit, arg);
}

static int mc_clear(MCObject *self)
{
    tentpy_core_clear(&self->core);
    Py_CLEAR(self->managed);
    return 0;
}

static void mc_dealloc(MCObject *self)
{
    PyObject_GC_UnTrack(self);
    mc_clear(self);
    pthread_mutex_destroy(&self->core.park_lock);
    pthread_mutex_destroy(&self->core.reg_lock);
    pthread_mutex_destroy(&self->err_lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *mc_close(MCObject *self, PyObject *unused TENTPY_UNUSED)
{
    tentpy_core_close(&self->core);
    if (self->managed)
        PyDict_Clear(self->managed);
    Py_RETURN_NONE;
}

static PyObject *mc_enter_ctx(MCObject *self, PyObject *unused TENTPY_UNUSED)
{
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *mc_exit_ctx(MCObject *self, PyObject *args TENTPY_UNUSED)
{
    return mc_close(self, NULL);
}

static PyObject *mc_last_error(MCObject *self, PyObject *unused TENTPY_UNUSED)
{
    char msg[ERR_LEN];
    get_last(self, msg, sizeof(msg));
    return PyUnicode_FromString(msg);
}

/* ---- initialize --------------------------------------------------------- */

/* The transport initialize() installs for `asked`: tcp, shm, memfabric
 * (ascend means memfabric) or, for rdma, efa and cxi, libfabric with the
 * protocol's provider (*fabric; do_initialize falls back to tcp when it
 * does not install).  MC_FORCE_TCP set (to anything, as Mooncake reads it)
 * means tcp whatever was asked.  A protocol with no device here runs tcp,
 * with one warning (note) naming both.  NULL: refused. */
static const char *choose_protocol(MCObject *self, const char *asked,
                                   char *note, size_t note_len, bool *warning,
                                   const char **fabric)
{
    *fabric = NULL;
    if (getenv("MC_FORCE_TCP")) {
        if (strcmp(asked, "tcp") != 0)
            snprintf(note, note_len,
                     "MC_FORCE_TCP is set: the engine runs tcp only "
                     "(protocol '%s' was asked)",
                     asked);
        return "tcp";
    }
    if (!asked[0])
        return "tcp"; /* nothing asked: what Mooncake discovers here */
    /* The classic API's table (classic/settings.c): one list of names. */
    struct classic_protocol pr;
    if (classic_protocol_find(asked, &pr) == 0) {
        if (pr.kind >= 0)
            return classic_kind_names[pr.kind];
        if (pr.fabric) {
            *fabric = pr.fabric;
            return classic_kind_names[CLASSIC_LIBFABRIC];
        }
        snprintf(note, note_len,
                 "protocol '%s' has no device on this host (this engine has "
                 "no %s transport); the engine runs tcp instead (it moves "
                 "host memory over tcp, shm and memfabric)",
                 asked, pr.xport);
        *warning = true;
        return "tcp";
    }
    if (strcmp(asked, "xgmi") == 0)
        set_last(self, "initialize: protocol 'xgmi' is not exposed in the "
                       "Python API; use 'hip'");
    else {
        char list[512];
        classic_protocol_list(list, sizeof(list));
        set_last(self,
                 "initialize: protocol '%s' is unknown (one of %s; those "
                 "without a transport here run tcp)",
                 asked, list);
    }
    return NULL;
}

/* One line through Python's logging (logger "tent.mooncake"), where the
 * application's own log configuration applies. */
static void log_to_python(const char *level, const char *text)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *logging = PyImport_ImportModule("logging");
    PyObject *logger = logging ? PyObject_CallMethod(logging, "getLogger", "s",
                                                     "tent.mooncake")
                               : NULL;
    PyObject *r =
        logger ? PyObject_CallMethod(logger, level, "ss", "%s", text) : NULL;
    if (!r)
        PyErr_Clear();
    Py_XDECREF(r);
    Py_XDECREF(logger);
    Py_XDECREF(logging);
    PyErr_Restore(t, v, tb);
}

static void warn_python(void *ctx, const char *msg)
{
    (void)ctx;
    log_to_python("warning", msg);
}

/* metadata_server (and initialize_ext's metadata_type) as Mooncake's
 * connection string: P2PHANDSHAKE, a URL, or "<type>://<servers>". */
static int conn_string(MCObject *self, const char *meta, const char *type,
                       char *out, size_t cap)
{
    int n;
    if (!type || !*type || strstr(meta, "://") ||
        strcmp(meta, "P2PHANDSHAKE") == 0)
        n = snprintf(out, cap, "%s", meta);
    else if (strcmp(type, "p2p") == 0 || strcmp(type, "P2PHANDSHAKE") == 0)
        n = snprintf(out, cap, "P2PHANDSHAKE");
    else
        n = snprintf(out, cap, "%s://%s", type, meta);
    if (n < 0 || (size_t)n >= cap) {
        set_last(self, "initialize: metadata_server is too long (%zu bytes)",
                 strlen(meta));
        return -1;
    }
    return 0;
}

static int do_initialize(MCObject *self, const char *local, const char *meta,
                         const char *proto_in, const char *device,
                         const char *meta_type_in)
{
    if (self->core.eng || atomic_load(&self->core.closed)) {
        set_last(self, "initialize: the engine is already initialized");
        return -1;
    }
    if (!local[0]) {
        set_last(self, "initialize: local_hostname is empty");
        return -1;
    }
    char note[1200] = "";
    bool note_is_warning = false;
    const char *fabric = NULL;
    const char *proto = choose_protocol(self, proto_in, note, sizeof(note),
                                        &note_is_warning, &fabric);
    if (!proto)
        return -1;
    char conn[1100];
    if (conn_string(self, meta, meta_type_in, conn, sizeof(conn)) < 0)
        return -1;
    const struct classic_args args = {
        .conn = conn,
        .local = local,
        .conn_label = "metadata_server",
        .local_label = "local_hostname",
    };
    struct classic_settings set;
    char msg[1024];
    if (classic_settings_parse(&args, &set, warn_python, NULL, msg,
                               sizeof(msg)) != 0) {
        set_last(self, "initialize: %s", msg);
        return -1;
    }
    tent_engine_t e = NULL;
    /* rdma, efa, cxi: libfabric alone with the protocol's provider; where
     * it does not install (no such device), tcp with the warning */
    if (fabric) {
        struct classic_settings fs = set;
        fs.xport[CLASSIC_LIBFABRIC] = CLASSIC_ON;
        fs.xport[CLASSIC_TCP] = CLASSIC_OFF;
        fs.quiet = true; /* its failure is the one warning below */
        int n = snprintf(fs.fabric_provider, sizeof(fs.fabric_provider), "%s",
                         fabric);
        char why[768];
        if (n < 0 || (size_t)n >= sizeof(fs.fabric_provider)) {
            snprintf(why, sizeof(why), "the provider name is too long");
        } else {
            /* libfabric alone first: with shm or memfabric also enabled
             * (MC_TENT_CONF) an engine would start without it */
            Py_BEGIN_ALLOW_THREADS;
            if (classic_settings_probe(&fs, CLASSIC_LIBFABRIC, why,
                                       sizeof(why)) == 0)
                e = classic_settings_start(&fs, why, sizeof(why));
            Py_END_ALLOW_THREADS;
        }
        if (e) {
            fs.quiet = false;
            set = fs;
        } else {
            snprintf(note, sizeof(note),
                     "protocol '%s' has no device on this host (libfabric "
                     "provider %s: %s); the engine runs tcp instead",
                     proto_in, fabric, why);
            note_is_warning = true;
            proto = "tcp";
        }
    }
    /* The protocol's transport, and only that one: tcp (on by default) is
     * turned off for another protocol; shm and memfabric stay as
     * MC_TENT_CONF says (off by default). */
    int kind = e                                 ? CLASSIC_LIBFABRIC
               : strcmp(proto, "shm") == 0       ? CLASSIC_SHM
               : strcmp(proto, "memfabric") == 0 ? CLASSIC_MEMFABRIC
                                                 : CLASSIC_TCP;
    set.xport[kind] = CLASSIC_ON;
    if (kind != CLASSIC_TCP)
        set.xport[CLASSIC_TCP] = CLASSIC_OFF;
    /* device_name: the NICs tcp serves; the other transports have none */
    if (kind == CLASSIC_TCP) {
        if (classic_settings_devices(&set, device, warn_python, NULL, msg,
                                     sizeof(msg)) != 0) {
            set_last(self, "initialize: %s", msg);
            return -1;
        }
    } else if (device[0]) {
        char w[1400];
        snprintf(w, sizeof(w),
                 "device_name '%.1024s' is not used: protocol '%s' runs "
                 "transport %s, which has no NICs to choose",
                 device, proto_in, proto);
        log_to_python("warning", w);
    }
    if (!e) {
        Py_BEGIN_ALLOW_THREADS;
        e = classic_settings_start(&set, msg, sizeof(msg));
        Py_END_ALLOW_THREADS;
    }
    if (!e) {
        /* the cause (for a broken Ascend setup, the seed's words) in
         * last_error() and in the application's log */
        set_last(self, "initialize: %s", msg);
        char line[1200];
        snprintf(line, sizeof(line), "initialize(protocol '%s') failed: %s",
                 proto_in, msg);
        log_to_python("error", line);
        return -1;
    }
    char addr[256];
    uint16_t rport = 0;
    if (tent_rpc_server_addr_port(e, addr, sizeof(addr), &rport) != TENT_OK) {
        set_last(self, "initialize: %s", tent_last_error());
        Py_BEGIN_ALLOW_THREADS;
        tent_destroy_engine(e);
        Py_END_ALLOW_THREADS;
        return -1;
    }
    if (!tent_available(e)) {
        set_last(self,
                 "initialize: transport '%s' could not be installed (see the "
                 "engine log)",
                 proto);
        Py_BEGIN_ALLOW_THREADS;
        tent_destroy_engine(e);
        Py_END_ALLOW_THREADS;
        return -1;
    }
    snprintf(self->host, sizeof(self->host), "%s", addr);
    self->rpc_port = rport;
    self->p2p = strcmp(set.meta_type, "p2p") == 0;
    const char *to = getenv("MC_TRANSFER_TIMEOUT");
    if (to && *to) {
        double v = strtod(to, NULL);
        if (v > 0)
            self->timeout_s = v;
    }
    self->core.eng = e;
    if (note[0])
        log_to_python(note_is_warning ? "warning" : "info", note);
    return 0;
}

static PyObject *mc_initialize(MCObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"local_hostname", "metadata_server",
                                        "protocol", "device_name"};
    PyObject *a[4];
    if (PARSE("initialize", names, 3, a) < 0)
        return NULL;
    const char *s[4];
    for (int i = 0; i < 4; i++) {
        int r = str_in(self, a[i], "initialize", names[i], &s[i]);
        if (r == ARG_PYERR)
            return NULL;
        if (r == ARG_REFUSED)
            return PyLong_FromLong(-1);
    }
    return PyLong_FromLong(do_initialize(self, s[0], s[1], s[2], s[3], NULL));
}

static PyObject *mc_initialize_ext(MCObject *self, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"local_hostname", "metadata_server",
                                        "protocol", "device_name",
                                        "metadata_type"};
    PyObject *a[5];
    if (PARSE("initialize_ext", names, 5, a) < 0)
        return NULL;
    const char *s[5];
    for (int i = 0; i < 5; i++) {
        int r = str_in(self, a[i], "initialize_ext", names[i], &s[i]);
        if (r == ARG_PYERR)
            return NULL;
        if (r == ARG_REFUSED)
            return PyLong_FromLong(-1);
    }
    return PyLong_FromLong(do_initialize(self, s[0], s[1], s[2], s[3], s[4]));
}

static PyObject *mc_rpc_port(MCObject *self, PyObject *unused TENTPY_UNUSED)
{
    if (tentpy_enter(&self->core) < 0)
        return NULL;
    tentpy_leave(&self->core);
    return PyLong_FromLong(self->rpc_port);
}

/* Mooncake's get_engine_ptr(): the address of the engine underneath (here
 * the tent_engine_t of the public C API), 0 before initialize(). */
static PyObject *mc_engine_ptr(MCObject *self, PyObject *unused TENTPY_UNUSED)
{
    if (atomic_load(&self->core.closed))
        return PyLong_FromLong(0);
    return PyLong_FromUnsignedLongLong((uintptr_t)self->core.eng);
}

static PyObject *mc_session_id(MCObject *self, PyObject *unused TENTPY_UNUSED)
{
    if (tentpy_enter(&self->core) < 0)
        return NULL;
    tentpy_leave(&self->core);
    char id[300];
    classic_format_hostport(id, sizeof(id), self->host,
                            (unsigned)self->rpc_port);
    return PyUnicode_FromString(id);
}

/* ---- memory ------------------------------------------------------------- */

/* The registration options of a location argument ("*" = "cpu"). */
static int mc_options(MCObject *self, const char *loc, const char *fn,
                      tent_memory_options_t *o)
{
    memset(o, 0, sizeof(*o));
    o->permission = PERM_GLOBAL_READ_WRITE;
    if (strlen(loc) >= sizeof(o->location)) {
        set_last(self, "%s: location '%s' is too long", fn, loc);
        return ARG_REFUSED;
    }
    snprintf(o->location, sizeof(o->location), "%s",
             strcmp(loc, "*") != 0 && *loc ? loc : "cpu");
    return ARG_OK;
}

/* One (buffer, capacity) of a registration, read and checked before
 * anything is registered. */
struct mc_item {
    struct tentpy_mem m;
    uint64_t cap;
};

static int mc_item_from(MCObject *self, PyObject *addr_o, PyObject *cap_o,
                        const tent_memory_options_t *o, const char *fn,
                        struct mc_item *it)
{
    if (tentpy_mem_from(addr_o, true, fn, &it->m) < 0)
        return ARG_PYERR;
    it->cap = it->m.size;
    if (cap_o && cap_o != Py_None &&
        (tentpy_len_from(cap_o, fn, &it->cap) < 0 ||
         tentpy_mem_check_len(&it->m, it->cap, fn) < 0)) {
        Py_CLEAR(it->m.holder);
        return ARG_PYERR;
    }
    /* An integer is only an address: it must name memory this process
     * has (an object vouches for its own). */
    if (!it->m.holder && tentpy_host_location(o->location) &&
        tentpy_check_mapped(it->m.addr, it->cap, fn) < 0) {
        exc_to_last(self);
        return ARG_REFUSED;
    }
    return ARG_OK;
}

/* Registers the items in order; on a failure undoes the ones done (no
 * partial state) and returns ARG_REFUSED or ARG_PYERR. */
static int mc_register_items(MCObject *self, struct mc_item *it, Py_ssize_t n,
                             const tent_memory_options_t *o, const char *fn)
{
    Py_ssize_t i;
    int rc = 0;
    for (i = 0; i < n && rc == 0; i++)
        rc = tentpy_reg_add(&self->core, &it[i].m, it[i].cap, o);
    if (!rc)
        return ARG_OK;
    char msg[ERR_LEN];
    snprintf(msg, sizeof(msg), "%s", tent_last_error());
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    for (Py_ssize_t j = 0; j < i - 1; j++)
        tentpy_reg_remove(&self->core, it[j].m.addr, it[j].cap);
    PyErr_Restore(t, v, tb);
    if (rc == TENTPY_PYERR)
        return ARG_PYERR;
    if (n > 1)
        set_last(self, "%s: entry %zd: %s", fn, i - 1, msg);
    else
        set_last(self, "%s: %s", fn, msg);
    return ARG_REFUSED;
}

static void mc_items_free(struct mc_item *it, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_CLEAR(it[i].m.holder);
    PyMem_Free(it);
}

static PyObject *mc_register(MCObject *self, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"buffer_addr", "capacity", "location"};
    const char *fn = "register_memory";
    PyObject *a[3];
    const char *loc;
    if (PARSE(fn, names, 2, a) < 0 || tentpy_check(&self->core) < 0)
        return NULL;
    int r = str_in(self, a[2], fn, "location", &loc);
    tent_memory_options_t o;
    if (r == ARG_OK)
        r = mc_options(self, loc, fn, &o);
    struct mc_item it = {{0, 0, NULL}, 0};
    if (r == ARG_OK)
        r = mc_item_from(self, a[0], a[1], &o, fn, &it);
    if (r == ARG_OK) {
        if (tentpy_enter(&self->core) < 0)
            r = ARG_PYERR;
        else {
            r = mc_register_items(self, &it, 1, &o, fn);
            tentpy_leave(&self->core);
        }
    }
    Py_CLEAR(it.m.holder);
    return r == ARG_PYERR ? NULL : PyLong_FromLong(r);
}

static int mc_addr(PyObject *o, const char *fn, uint64_t *out)
{
    struct tentpy_mem m;
    if (tentpy_mem_from(o, false, fn, &m) < 0)
        return -1;
    Py_XDECREF(m.holder);
    *out = m.addr;
    return 0;
}

/* Unregisters each address (the first registration there, as Mooncake);
 * goes on past a failure.  0 or -1 (last_error names the first). */
static int mc_unregister_addrs(MCObject *self, const uint64_t *addrs,
                               Py_ssize_t n, const char *fn)
{
    int res = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int rc = tentpy_reg_remove(&self->core, addrs[i], 0);
        if (rc && res == 0) {
            res = -1;
            if (n > 1)
                set_last(self, "%s: entry %zd: %s", fn, i, tent_last_error());
            else
                set_last(self, "%s: %s", fn, tent_last_error());
        }
    }
    return res;
}

static PyObject *mc_unregister(MCObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"buffer_addr"};
    PyObject *a[1];
    uint64_t addr;
    if (PARSE("unregister_memory", names, 1, a) < 0 ||
        mc_addr(a[0], "unregister_memory", &addr) < 0 ||
        tentpy_enter(&self->core) < 0)
        return NULL;
    int rc = mc_unregister_addrs(self, &addr, 1, "unregister_memory");
    tentpy_leave(&self->core);
    return PyLong_FromLong(rc);
}

static PyObject *mc_batch_register(MCObject *self, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"buffer_addresses", "capacities",
                                        "location"};
    const char *fn = "batch_register_memory";
    PyObject *a[3];
    const char *loc;
    if (PARSE(fn, names, 2, a) < 0 || tentpy_check(&self->core) < 0)
        return NULL;
    int r = str_in(self, a[2], fn, "location", &loc);
    if (r == ARG_PYERR)
        return NULL;
    tent_memory_options_t o;
    if (r == ARG_OK)
        r = mc_options(self, loc, fn, &o);
    if (r == ARG_REFUSED)
        return PyLong_FromLong(-1);
    PyObject *fa =
        tentpy_seq(a[0], "batch_register_memory(): buffer_addresses");
    PyObject *fc =
        fa ? tentpy_seq(a[1], "batch_register_memory(): capacities") : NULL;
    PyObject *res = NULL;
    struct mc_item *it = NULL;
    Py_ssize_t n = 0, done = 0;
    if (!fc)
        goto out;
    n = PyTuple_GET_SIZE(fa);
    if (PyTuple_GET_SIZE(fc) != n) {
        PyErr_Format(PyExc_ValueError,
                     "batch_register_memory(): %zd addresses but %zd "
                     "capacities",
                     n, PyTuple_GET_SIZE(fc));
        goto out;
    }
    it = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*it));
    if (!it) {
        PyErr_NoMemory();
        goto out;
    }
    r = ARG_OK;
    for (; done < n && r == ARG_OK; done++)
        r = mc_item_from(self, PyTuple_GET_ITEM(fa, done),
                         PyTuple_GET_ITEM(fc, done), &o, fn, &it[done]);
    if (r == ARG_PYERR ||
        tentpy_seq_unchanged(a[0], fa,
                             "batch_register_memory(): "
                             "buffer_addresses") < 0 ||
        tentpy_seq_unchanged(a[1], fc,
                             "batch_register_memory(): "
                             "capacities") < 0)
        goto out;
    if (r == ARG_OK) {
        if (tentpy_enter(&self->core) < 0)
            goto out;
        r = mc_register_items(self, it, n, &o, fn);
        tentpy_leave(&self->core);
    }
    if (r != ARG_PYERR)
        res = PyLong_FromLong(r);
out:
    if (it)
        mc_items_free(it, done);
    Py_XDECREF(fa);
    Py_XDECREF(fc);
    return res;
}

static PyObject *mc_batch_unregister(MCObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"buffer_addresses"};
    const char *fn = "batch_unregister_memory";
    PyObject *a[1];
    if (PARSE(fn, names, 1, a) < 0)
        return NULL;
    PyObject *fa =
        tentpy_seq(a[0], "batch_unregister_memory(): buffer_addresses");
    if (!fa)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(fa);
    PyObject *res = NULL;
    uint64_t *addrs = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*addrs));
    if (!addrs) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (mc_addr(PyTuple_GET_ITEM(fa, i), fn, &addrs[i]) < 0)
            goto out;
    if (tentpy_seq_unchanged(a[0], fa,
                             "batch_unregister_memory(): "
                             "buffer_addresses") < 0 ||
        tentpy_enter(&self->core) < 0)
        goto out;
    int rc = mc_unregister_addrs(self, addrs, n, fn);
    tentpy_leave(&self->core);
    res = PyLong_FromLong(rc);
out:
    PyMem_Free(addrs);
    Py_DECREF(fa);
    return res;
}

/* Whether [addr, addr+len) lies inside one buffer this engine registered. */
static int local_range_ok(MCObject *self, uint64_t addr, uint64_t len)
{
    tent_segment_info_t info = {0};
    if (tent_get_segment_info(self->core.eng, LOCAL_SEGMENT_ID, &info))
        return 0;
    int ok = 0;
    for (int i = 0; i < info.num_buffers && !ok; i++)
        ok = addr >= info.buffers[i].base && len <= info.buffers[i].length &&
             addr - info.buffers[i].base <= info.buffers[i].length - len;
    tent_free_segment_info(&info);
    return ok;
}

static PyObject *mc_alloc_managed(MCObject *self, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"length"};
    PyObject *a[1];
    uint64_t len;
    if (PARSE("allocate_managed_buffer", names, 1, a) < 0 ||
        tentpy_len_from(a[0], "allocate_managed_buffer", &len) < 0 ||
        tentpy_enter(&self->core) < 0)
        return NULL;
    void *p = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = tent_allocate_memory(self->core.eng, &p, (size_t)len, "cpu");
    if (rc)
        set_last(self, "allocate_managed_buffer: %s", tent_last_error());
    Py_END_ALLOW_THREADS;
    if (rc == TENT_OK) {
        tent_memory_options_t o;
        mc_options(self, "cpu", "allocate_managed_buffer", &o);
        struct tentpy_mem m = {(uintptr_t)p, 0, NULL};
        rc = tentpy_reg_add(&self->core, &m, len, &o);
        if (rc) {
            if (rc != TENTPY_PYERR)
                set_last(self, "allocate_managed_buffer: %s",
                         tent_last_error());
            Py_BEGIN_ALLOW_THREADS;
            tent_free_memory(self->core.eng, p);
            Py_END_ALLOW_THREADS;
        }
    }
    tentpy_leave(&self->core);
    if (rc == TENTPY_PYERR)
        return NULL;
    if (rc)
        return PyLong_FromLong(0);
    PyObject *k = PyLong_FromUnsignedLongLong((uintptr_t)p);
    PyObject *v = PyLong_FromUnsignedLongLong(len);
    if (!k || !v || PyDict_SetItem(self->managed, k, v) < 0) {
        Py_XDECREF(k);
        Py_XDECREF(v);
        return NULL;
    }
    Py_DECREF(v);
    return k;
}

static PyObject *mc_free_managed(MCObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"buffer_addr", "length"};
    PyObject *a[2];
    uint64_t addr, len;
    if (PARSE("free_managed_buffer", names, 2, a) < 0 ||
        tentpy_len_from(a[0], "free_managed_buffer", &addr) < 0 ||
        tentpy_len_from(a[1], "free_managed_buffer", &len) < 0 ||
        tentpy_enter(&self->core) < 0)
        return NULL;
    PyObject *k = PyLong_FromUnsignedLongLong(addr);
    PyObject *size_o = k ? PyDict_GetItemWithError(self->managed, k) : NULL;
    if (!size_o && PyErr_Occurred()) {
        Py_XDECREF(k);
        tentpy_leave(&self->core);
        return NULL;
    }
    int rc = -1;
    if (!size_o) {
        set_last(self,
                 "free_managed_buffer: %#llx is not a managed buffer of this "
                 "engine",
                 (unsigned long long)addr);
    } else {
        uint64_t size = PyLong_AsUnsignedLongLong(size_o);
        /* As Mooncake: unregister it, then free it (which also drops any
         * other registration inside it). */
        rc = tentpy_reg_remove(&self->core, addr, 0);
        if (rc == TENT_OK)
            rc = tentpy_reg_free(&self->core, addr, size);
        if (rc)
            set_last(self, "free_managed_buffer: %s", tent_last_error());
        else if (PyDict_DelItem(self->managed, k) < 0)
            PyErr_Clear();
        rc = rc ? -1 : 0;
    }
    (void)len;
    Py_DECREF(k);
    tentpy_leave(&self->core);
    return PyLong_FromLong(rc);
}

static PyObject *mc_write_bytes(MCObject *self, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"dest_address", "src", "length"};
    PyObject *a[3];
    uint64_t dst, len;
    if (PARSE("write_bytes_to_buffer", names, 3, a) < 0 ||
        tentpy_len_from(a[0], "write_bytes_to_buffer", &dst) < 0 ||
        tentpy_len_from(a[2], "write_bytes_to_buffer", &len) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(a[1], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *res = NULL;
    if (len > (uint64_t)view.len) {
        PyErr_Format(PyExc_ValueError,
                     "write_bytes_to_buffer(): length %llu is larger than the "
                     "%zd bytes given",
                     (unsigned long long)len, view.len);
        goto out;
    }
    if (tentpy_enter(&self->core) < 0)
        goto out;
    if (!local_range_ok(self, dst, len)) {
        set_last(self,
                 "write_bytes_to_buffer: [%#llx, +%llu) is not inside a "
                 "buffer registered with this engine",
                 (unsigned long long)dst, (unsigned long long)len);
        res = PyLong_FromLong(-1);
    } else {
        memcpy((void *)(uintptr_t)dst, view.buf, (size_t)len);
        res = PyLong_FromLong(0);
    }
    tentpy_leave(&self->core);
out:
    PyBuffer_Release(&view);
    return res;
}

static PyObject *mc_read_bytes(MCObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"source_address", "length"};
    PyObject *a[2];
    uint64_t src, len;
    if (PARSE("read_bytes_from_buffer", names, 2, a) < 0 ||
        tentpy_len_from(a[0], "read_bytes_from_buffer", &src) < 0 ||
        tentpy_len_from(a[1], "read_bytes_from_buffer", &len) < 0 ||
        tentpy_enter(&self->core) < 0)
        return NULL;
    PyObject *res;
    if (len > PY_SSIZE_T_MAX || !local_range_ok(self, src, len)) {
        tentpy_leave(&self->core);
        return tentpy_errorf(PyExc_ValueError,
                             "read_bytes_from_buffer(): [%#llx, +%llu) is not "
                             "inside a buffer registered with this engine",
                             (unsigned long long)src, (unsigned long long)len);
    }
    res = PyBytes_FromStringAndSize((const char *)(uintptr_t)src,
                                    (Py_ssize_t)len);
    tentpy_leave(&self->core);
    return res;
}

/* ---- transfers ---------------------------------------------------------- */

#define STACK_REQS 256

/* Requests of one call: the array and the holders of object buffers. */
struct reqs {
    tent_request_t *r;
    size_t n;
    tent_request_t stack[STACK_REQS];
    PyObject *holders; /* list or NULL */
};

static void reqs_free(struct reqs *q)
{
    if (q->r && q->r != q->stack)
        PyMem_Free(q->r);
    q->r = NULL;
    Py_CLEAR(q->holders);
}

static int mem_item(PyObject *o, struct reqs *q, const char *fn, uint64_t *addr,
                    uint64_t len)
{
    if (PyLong_CheckExact(o)) {
        *addr = PyLong_AsUnsignedLongLong(o);
        if (*addr == (uint64_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "%s(): address %R is not in 0..2**64-1", fn, o);
            return -1;
        }
        return 0;
    }
    struct tentpy_mem m;
    if (tentpy_mem_from(o, false, fn, &m) < 0)
        return -1;
    if (tentpy_mem_check_len(&m, len, fn) < 0) {
        Py_XDECREF(m.holder);
        return -1;
    }
    *addr = m.addr;
    if (m.holder) {
        if (!q->holders && !(q->holders = PyList_New(0))) {
            Py_DECREF(m.holder);
            return -1;
        }
        int rc = PyList_Append(q->holders, m.holder);
        Py_DECREF(m.holder);
        return rc;
    }
    return 0;
}

static int len_item(PyObject *o, const char *fn, uint64_t *out)
{
    if (PyLong_CheckExact(o)) {
        *out = PyLong_AsUnsignedLongLong(o);
        if (*out == (uint64_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "%s(): length %R is not in 0..2**64-1", fn, o);
            return -1;
        }
        return 0;
    }
    return tentpy_len_from(o, fn, out);
}

/* TENT's request fields a transfer call takes by keyword (beyond
 * Mooncake's module): absent or None leaves a field at its default. */
struct qos_in {
    uint64_t deadline_ns;
    int intent_type;
    const char *policy_name; /* NULL: none; the argument's UTF-8 */
};

#define QOS_NAMES "deadline_ns", "policy_name", "intent_type"

/* Reads a[0..2] = deadline_ns, policy_name, intent_type. */
static int qos_arg(MCObject *self, PyObject *const *a, const char *fn,
                   struct qos_in *out)
{
    memset(out, 0, sizeof(*out));
    PyObject *d = a[0];
    if (d && d != Py_None) {
        if (!PyLong_Check(d) || PyBool_Check(d)) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): deadline_ns must be int, not %s", fn,
                         Py_TYPE(d)->tp_name);
            return ARG_PYERR;
        }
        out->deadline_ns = PyLong_AsUnsignedLongLong(d);
        if (out->deadline_ns == (uint64_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "%s(): deadline_ns %R is not in 0..2**64-1 (an "
                         "absolute time.monotonic_ns() value, 0 for none)",
                         fn, d);
            return ARG_PYERR;
        }
    }
    if (a[2] && a[2] != Py_None) {
        char what[128];
        snprintf(what, sizeof(what), "%s(): intent_type", fn);
        if (tentpy_int_from(a[2], what, TENT_INTENT_UNSPEC,
                            TENT_INTENT_STAGING_INTERNAL,
                            &out->intent_type) < 0)
            return ARG_PYERR;
    }
    const char *pol;
    int r = str_in(self, a[1], fn, "policy_name", &pol);
    if (r != ARG_OK)
        return r;
    out->policy_name = pol[0] ? pol : NULL;
    return ARG_OK;
}

static void req_fill(tent_request_t *r, int opcode, uint64_t a, uint64_t p,
                     uint64_t l, tent_segment_id_t seg, int hint,
                     const struct qos_in *qos)
{
    memset(r, 0, sizeof(*r));
    r->opcode = opcode;
    r->source = (void *)(uintptr_t)a;
    r->target_id = seg;
    r->target_offset = p;
    r->length = l;
    r->transport_hint = hint;
    r->deadline_ns = qos->deadline_ns;
    r->intent_type = qos->intent_type;
    r->policy_name = qos->policy_name;
}

/* Builds the requests; single=1 takes scalars instead of lists. */
static int build_reqs(MCObject *self TENTPY_UNUSED, int single, PyObject *bufs,
                      PyObject *peers, PyObject *lens, int opcode,
                      tent_segment_id_t seg, int hint, const struct qos_in *qos,
                      const char *fn, struct reqs *q)
{
    PyObject *sb = NULL, *sp = NULL, *sl = NULL;
    q->r = NULL;
    q->n = 0;
    q->holders = NULL;
    if (single) {
        q->r = q->stack;
        q->n = 1;
        uint64_t a, p, l;
        if (len_item(lens, fn, &l) < 0 || mem_item(bufs, q, fn, &a, l) < 0 ||
            len_item(peers, fn, &p) < 0)
            goto fail;
        req_fill(&q->r[0], opcode, a, p, l, seg, hint, qos);
        return 0;
    }
    /* Snapshots: the conversions below may run Python code (data_ptr(),
     * nbytes) that changes the caller's lists; the call reads the
     * snapshots and refuses a list changed meanwhile. */
    char what[3][96];
    snprintf(what[0], sizeof(what[0]), "%s(): buffers", fn);
    snprintf(what[1], sizeof(what[1]), "%s(): peer_buffer_addresses", fn);
    snprintf(what[2], sizeof(what[2]), "%s(): lengths", fn);
    sb = tentpy_seq(bufs, what[0]);
    sp = sb ? tentpy_seq(peers, what[1]) : NULL;
    sl = sp ? tentpy_seq(lens, what[2]) : NULL;
    if (!sl)
        goto fail;
    Py_ssize_t n = PyTuple_GET_SIZE(sb);
    if (PyTuple_GET_SIZE(sp) != n || PyTuple_GET_SIZE(sl) != n) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): %zd buffers, %zd peer addresses and %zd lengths "
                     "differ",
                     fn, n, PyTuple_GET_SIZE(sp), PyTuple_GET_SIZE(sl));
        goto fail;
    }
    q->r = n <= STACK_REQS ? q->stack : PyMem_Calloc((size_t)n, sizeof(*q->r));
    if (!q->r) {
        PyErr_NoMemory();
        goto fail;
    }
    q->n = (size_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t a, p, l;
        if (len_item(PyTuple_GET_ITEM(sl, i), fn, &l) < 0 ||
            mem_item(PyTuple_GET_ITEM(sb, i), q, fn, &a, l) < 0 ||
            len_item(PyTuple_GET_ITEM(sp, i), fn, &p) < 0)
            goto fail;
        req_fill(&q->r[i], opcode, a, p, l, seg, hint, qos);
    }
    if (tentpy_seq_unchanged(bufs, sb, what[0]) < 0 ||
        tentpy_seq_unchanged(peers, sp, what[1]) < 0 ||
        tentpy_seq_unchanged(lens, sl, what[2]) < 0)
        goto fail;
    Py_DECREF(sb);
    Py_DECREF(sp);
    Py_DECREF(sl);
    return 0;
fail:
    Py_XDECREF(sb);
    Py_XDECREF(sp);
    Py_XDECREF(sl);
    reqs_free(q);
    return -1;
}

static int opcode_arg(PyObject *o, const char *fn, int *out)
{
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): opcode must be TransferOpcode, not %s", fn,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    long v = PyLong_AsLong(o);
    if (v != OPCODE_READ && v != OPCODE_WRITE) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "%s(): opcode %R is not TransferOpcode.Read or Write", fn,
                     o);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* notify: None, TransferNotify(name, msg) or a (name, msg) tuple; a NUL
 * in either is refused. */
static int notify_arg(MCObject *self, PyObject *o, const char *fn,
                      PyObject **name, PyObject **msg)
{
    *name = *msg = NULL;
    if (!o || o == Py_None)
        return ARG_OK;
    if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 2) {
        *name = PyTuple_GET_ITEM(o, 0);
        *msg = PyTuple_GET_ITEM(o, 1);
        Py_INCREF(*name);
        Py_INCREF(*msg);
    } else {
        *name = PyObject_GetAttrString(o, "name");
        *msg = *name ? PyObject_GetAttrString(o, "msg") : NULL;
    }
    if (!*name || !*msg || !PyUnicode_Check(*name) || !PyUnicode_Check(*msg)) {
        Py_CLEAR(*name);
        Py_CLEAR(*msg);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s(): notify must be TransferNotify(name, msg)", fn);
        return ARG_PYERR;
    }
    const char *unused;
    int r = str_in(self, *name, fn, "notify name", &unused);
    if (r == ARG_OK)
        r = str_in(self, *msg, fn, "notify msg", &unused);
    if (r != ARG_OK) {
        Py_CLEAR(*name);
        Py_CLEAR(*msg);
    }
    return r;
}

/*
 * One synchronous transfer call.  Returns a new int (0/-1) or NULL with an
 * exception (bad argument, KeyboardInterrupt).
 */
static PyObject *sync_common(MCObject *self, int single, PyObject *target,
                             PyObject *bufs, PyObject *peers, PyObject *lens,
                             int opcode, PyObject *notify, PyObject *hint_o,
                             PyObject *const *qos_o, const char *fn)
{
    int hint = TRANSPORT_UNSPEC;
    struct qos_in qos;
    if (!PyUnicode_Check(target)) {
        PyErr_Format(PyExc_TypeError, "%s(): target_hostname must be str", fn);
        return NULL;
    }
    PyObject *nname = NULL, *nmsg = NULL;
    int a = hint_arg(self, hint_o, fn, &hint);
    if (a == ARG_OK)
        a = qos_arg(self, qos_o, fn, &qos);
    if (a == ARG_OK)
        a = notify_arg(self, notify, fn, &nname, &nmsg);
    if (a == ARG_PYERR)
        return NULL;
    if (a == ARG_REFUSED)
        return fail_int();
    PyObject *res = NULL;
    struct reqs q;
    q.r = NULL;
    q.holders = NULL;
    /* The arguments are converted before the call is entered: their Python
     * code (data_ptr()) may even close this engine. */
    if (tentpy_check(&self->core) < 0 ||
        build_reqs(self, single, bufs, peers, lens, opcode, 0, hint, &qos, fn,
                   &q) < 0)
        goto out_notify;
    if (tentpy_enter(&self->core) < 0)
        goto out_free;
    tent_segment_id_t seg;
    int code;
    if (tentpy_segment(&self->core, target, &seg, &code) < 0) {
        if (!code) /* a Python error (type), not an engine one */
            goto out_leave;
        exc_to_last(self);
        res = fail_int();
        goto out_leave;
    }
    for (size_t i = 0; i < q.n; i++)
        q.r[i].target_id = seg;
    if (q.n == 0) {
        res = PyLong_FromLong(0);
        goto out_leave;
    }
    int err = 0;
    char msg[512];
    const char *nn = nname ? PyUnicode_AsUTF8(nname) : NULL;
    const char *nm = nmsg ? PyUnicode_AsUTF8(nmsg) : NULL;
    int r = tentpy_run(&self->core, q.r, q.n, nn, nm, self->timeout_s, &err,
                       msg, sizeof(msg));
    if (r == TENTPY_RUN_INTERRUPTED)
        goto out_leave; /* KeyboardInterrupt (or the handler's error) */
    if (r != TENTPY_RUN_OK) {
        set_last(self, "%s: %s (%s)", fn, msg, tent_strerror(err));
        res = fail_int();
    } else {
        res = PyLong_FromLong(0);
    }
out_leave:
    tentpy_leave(&self->core);
out_free:
    reqs_free(&q);
out_notify:
    Py_XDECREF(nname);
    Py_XDECREF(nmsg);
    return res;
}

static const char *const sync_names[] = {"target_hostname",     "buffer",
                                         "peer_buffer_address", "length",
                                         "transport_hint",      QOS_NAMES};
static const char *const bsync_names[] = {"target_hostname",       "buffers",
                                          "peer_buffer_addresses", "lengths",
                                          "transport_hint",        QOS_NAMES};

static PyObject *mc_sync_write(MCObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[8];
    if (PARSE("transfer_sync_write", sync_names, 4, a) < 0)
        return NULL;
    return sync_common(self, 1, a[0], a[1], a[2], a[3], OPCODE_WRITE, NULL,
                       a[4], a + 5, "transfer_sync_write");
}

static PyObject *mc_sync_read(MCObject *self, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[8];
    if (PARSE("transfer_sync_read", sync_names, 4, a) < 0)
        return NULL;
    return sync_common(self, 1, a[0], a[1], a[2], a[3], OPCODE_READ, NULL, a[4],
                       a + 5, "transfer_sync_read");
}

static PyObject *mc_bsync_write(MCObject *self, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[8];
    if (PARSE("batch_transfer_sync_write", bsync_names, 4, a) < 0)
        return NULL;
    return sync_common(self, 0, a[0], a[1], a[2], a[3], OPCODE_WRITE, NULL,
                       a[4], a + 5, "batch_transfer_sync_write");
}

static PyObject *mc_bsync_read(MCObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[8];
    if (PARSE("batch_transfer_sync_read", bsync_names, 4, a) < 0)
        return NULL;
    return sync_common(self, 0, a[0], a[1], a[2], a[3], OPCODE_READ, NULL, a[4],
                       a + 5, "batch_transfer_sync_read");
}

static PyObject *mc_sync(MCObject *self, PyObject *const *args,
                         Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {
        "target_hostname", "buffer", "peer_buffer_address", "length",
        "opcode",          "notify", "transport_hint",      QOS_NAMES};
    PyObject *a[10];
    int op;
    if (PARSE("transfer_sync", names, 5, a) < 0 ||
        opcode_arg(a[4], "transfer_sync", &op) < 0)
        return NULL;
    return sync_common(self, 1, a[0], a[1], a[2], a[3], op, a[5], a[6], a + 7,
                       "transfer_sync");
}

static PyObject *mc_bsync(MCObject *self, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {
        "target_hostname", "buffers", "peer_buffer_addresses", "lengths",
        "opcode",          "notify",  "transport_hint",        QOS_NAMES};
    PyObject *a[10];
    int op;
    if (PARSE("batch_transfer_sync", names, 5, a) < 0 ||
        opcode_arg(a[4], "batch_transfer_sync", &op) < 0)
        return NULL;
    return sync_common(self, 0, a[0], a[1], a[2], a[3], op, a[5], a[6], a + 7,
                       "batch_transfer_sync");
}

/* Submits without waiting; returns a new int: the batch id or 0. */
static PyObject *async_common(MCObject *self, int single, PyObject *target,
                              PyObject *bufs, PyObject *peers, PyObject *lens,
                              int opcode, PyObject *notify, PyObject *hint_o,
                              PyObject *const *qos_o, const char *fn)
{
    int hint = TRANSPORT_UNSPEC;
    struct qos_in qos;
    if (!PyUnicode_Check(target)) {
        PyErr_Format(PyExc_TypeError, "%s(): target_hostname must be str", fn);
        return NULL;
    }
    PyObject *nname = NULL, *nmsg = NULL;
    int a = hint_arg(self, hint_o, fn, &hint);
    if (a == ARG_OK)
        a = qos_arg(self, qos_o, fn, &qos);
    if (a == ARG_OK)
        a = notify_arg(self, notify, fn, &nname, &nmsg);
    if (a == ARG_PYERR)
        return NULL;
    if (a == ARG_REFUSED)
        return PyLong_FromLong(0);
    PyObject *res = NULL;
    struct reqs q;
    q.r = NULL;
    q.holders = NULL;
    /* converted before the call is entered, as in sync_common */
    if (tentpy_check(&self->core) < 0 ||
        build_reqs(self, single, bufs, peers, lens, opcode, 0, hint, &qos, fn,
                   &q) < 0)
        goto out_notify;
    if (tentpy_enter(&self->core) < 0)
        goto out_free;
    tent_segment_id_t seg;
    int code;
    if (tentpy_segment(&self->core, target, &seg, &code) < 0) {
        if (!code)
            goto out_leave;
        exc_to_last(self);
        res = PyLong_FromLong(0);
        goto out_leave;
    }
    for (size_t i = 0; i < q.n; i++)
        q.r[i].target_id = seg;
    if (q.n == 0) {
        set_last(self, "%s: no requests", fn);
        res = PyLong_FromLong(0);
        goto out_leave;
    }
    if (atomic_load_explicit(&self->core.nparked_hint, memory_order_relaxed))
        tentpy_sweep(&self->core);
    const char *nn = nname ? PyUnicode_AsUTF8(nname) : NULL;
    const char *nm = nmsg ? PyUnicode_AsUTF8(nmsg) : NULL;
    tent_batch_id_t bid;
    int rc = TENT_OK;
    Py_BEGIN_ALLOW_THREADS;
    bid = tent_allocate_batch(self->core.eng, q.n);
    if (bid == TENT_INVALID_BATCH_ID) {
        set_last(self, "%s: %s", fn, tent_last_error());
    } else {
        rc = nn ? tent_submit_notif(self->core.eng, bid, q.r, q.n, nn, nm)
                : tent_submit(self->core.eng, bid, q.r, q.n);
        if (rc) {
            set_last(self, "%s: %s", fn, tent_last_error());
            tentpy_release_batch(&self->core, bid);
            bid = TENT_INVALID_BATCH_ID;
        }
    }
    Py_END_ALLOW_THREADS;
    if (bid != TENT_INVALID_BATCH_ID) {
        PyObject *k = PyLong_FromUnsignedLongLong(bid);
        PyObject *v = Py_BuildValue("(dO)", tentpy_now() + self->timeout_s,
                                    q.holders ? q.holders : Py_None);
        if (!k || !v || PyDict_SetItem(self->core.async_keep, k, v) < 0) {
            /* no record to wait on it by: let it finish, then free it */
            Py_XDECREF(k);
            Py_XDECREF(v);
            tentpy_release_batch(&self->core, bid);
            goto out_leave;
        }
        Py_DECREF(v);
        res = k;
    } else {
        res = PyLong_FromLong(0);
    }
out_leave:
    tentpy_leave(&self->core);
out_free:
    reqs_free(&q);
out_notify:
    Py_XDECREF(nname);
    Py_XDECREF(nmsg);
    return res;
}

static PyObject *mc_async_write(MCObject *self, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[8];
    if (PARSE("batch_transfer_async_write", bsync_names, 4, a) < 0)
        return NULL;
    return async_common(self, 0, a[0], a[1], a[2], a[3], OPCODE_WRITE, NULL,
                        a[4], a + 5, "batch_transfer_async_write");
}

static PyObject *mc_async_read(MCObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[8];
    if (PARSE("batch_transfer_async_read", bsync_names, 4, a) < 0)
        return NULL;
    return async_common(self, 0, a[0], a[1], a[2], a[3], OPCODE_READ, NULL,
                        a[4], a + 5, "batch_transfer_async_read");
}

static PyObject *mc_async(MCObject *self, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {
        "target_hostname", "buffers", "peer_buffer_addresses", "lengths",
        "opcode",          "notify",  "transport_hint",        QOS_NAMES};
    PyObject *a[10];
    int op;
    if (PARSE("batch_transfer_async", names, 5, a) < 0 ||
        opcode_arg(a[4], "batch_transfer_async", &op) < 0)
        return NULL;
    return async_common(self, 0, a[0], a[1], a[2], a[3], op, a[5], a[6], a + 7,
                        "batch_transfer_async");
}

static PyObject *mc_submit_write(MCObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[8];
    if (PARSE("transfer_submit_write", sync_names, 4, a) < 0)
        return NULL;
    return async_common(self, 1, a[0], a[1], a[2], a[3], OPCODE_WRITE, NULL,
                        a[4], a + 5, "transfer_submit_write");
}

/* The deadline of an async batch, or -1 when this engine did not submit
 * it.  Removes the record when `take`. */
static double async_deadline(MCObject *self, uint64_t bid, int take)
{
    /* A plain int key: no Python code (an int subclass's __hash__) runs. */
    PyObject *k = PyLong_FromUnsignedLongLong(bid);
    PyObject *v = k ? PyDict_GetItemWithError(self->core.async_keep, k) : NULL;
    if (!v) {
        Py_XDECREF(k);
        PyErr_Clear();
        return -1;
    }
    double d = PyFloat_AsDouble(PyTuple_GET_ITEM(v, 0));
    if (take && PyDict_DelItem(self->core.async_keep, k) < 0)
        PyErr_Clear();
    Py_DECREF(k);
    return d;
}

static PyObject *mc_batch_status(MCObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"batch_ids"};
    PyObject *a[1];
    if (PARSE("get_batch_transfer_status", names, 1, a) < 0)
        return NULL;
    PyObject *f = tentpy_seq(a[0], "get_batch_transfer_status(): batch_ids");
    if (!f)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(f);
    uint64_t *ids = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*ids));
    if (!ids) {
        Py_DECREF(f);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (tentpy_len_from(PyTuple_GET_ITEM(f, i), "get_batch_transfer_status",
                            &ids[i]) < 0) {
            PyMem_Free(ids);
            Py_DECREF(f);
            return NULL;
        }
    if (tentpy_enter(&self->core) < 0) {
        PyMem_Free(ids);
        Py_DECREF(f);
        return NULL;
    }
    int result = 0;
    bool interrupted = false;
    for (Py_ssize_t i = 0; i < n; i++) {
        double deadline = async_deadline(self, ids[i], 1);
        if (deadline < 0) {
            set_last(self,
                     "get_batch_transfer_status: batch %llu is not an "
                     "unfinished batch of this engine",
                     (unsigned long long)ids[i]);
            result = -1;
            continue;
        }
        if (interrupted) {
            tentpy_release_batch(&self->core, ids[i]);
            continue;
        }
        double left = deadline - tentpy_now();
        int err = 0;
        char msg[512];
        int r = tentpy_wait(&self->core, ids[i], left > 0 ? left : 0.0, &err,
                            msg, sizeof(msg));
        if (r == TENTPY_RUN_INTERRUPTED) {
            interrupted = true; /* the rest are released, then raise */
            continue;
        }
        if (r != TENTPY_RUN_OK) {
            set_last(self, "get_batch_transfer_status: batch %llu: %s (%s)",
                     (unsigned long long)ids[i], msg, tent_strerror(err));
            result = -1;
        }
    }
    tentpy_leave(&self->core);
    PyMem_Free(ids);
    Py_DECREF(f);
    if (interrupted)
        return NULL;
    return PyLong_FromLong(result);
}

static PyObject *mc_check_status(MCObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"batch_id"};
    PyObject *a[1];
    uint64_t bid;
    if (PARSE("transfer_check_status", names, 1, a) < 0 ||
        tentpy_len_from(a[0], "transfer_check_status", &bid) < 0 ||
        tentpy_enter(&self->core) < 0)
        return NULL;
    long res;
    double deadline = async_deadline(self, bid, 0);
    if (deadline < 0) {
        set_last(self,
                 "transfer_check_status: batch %llu is not an unfinished "
                 "batch of this engine",
                 (unsigned long long)bid);
        res = -1;
    } else {
        tent_status_t st = {.status = -1};
        int rc, code = TENT_OK;
        char why[768] = "";
        Py_BEGIN_ALLOW_THREADS;
        rc = tent_overall_status(self->core.eng, bid, &st);
        if (st.status == STATUS_FAILED &&
            !tentpy_batch_cause(self->core.eng, bid, &code, why, sizeof(why)) &&
            rc) {
            snprintf(why, sizeof(why), "%s", tent_last_error());
            code = rc;
        }
        if (st.status == STATUS_COMPLETED || st.status == STATUS_FAILED)
            tentpy_release_batch(&self->core, bid);
        Py_END_ALLOW_THREADS;
        if (st.status == STATUS_COMPLETED) {
            res = 1;
        } else if (st.status == STATUS_FAILED) {
            if (why[0])
                set_last(self, "transfer_check_status: batch %llu: %s (%s)",
                         (unsigned long long)bid, why, tent_strerror(code));
            else
                set_last(self, "transfer_check_status: batch %llu failed",
                         (unsigned long long)bid);
            res = -1;
        } else if (tentpy_now() > deadline) {
            tentpy_release_batch(&self->core, bid);
            set_last(self, "transfer_check_status: batch %llu timed out",
                     (unsigned long long)bid);
            res = -2;
        } else {
            res = 0;
        }
        if (res != 0)
            async_deadline(self, bid, 1);
    }
    tentpy_leave(&self->core);
    return PyLong_FromLong(res);
}

/* ---- segments, notifications, probe, topology -------------------------- */

static PyObject *mc_first_buffer(MCObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"segment_name"};
    PyObject *a[1];
    if (PARSE("get_first_buffer_address", names, 1, a) < 0 ||
        tentpy_enter(&self->core) < 0)
        return NULL;
    tent_segment_id_t seg;
    int code;
    PyObject *res = NULL;
    if (tentpy_segment(&self->core, a[0], &seg, &code) < 0) {
        if (code) {
            exc_to_last(self);
            res = PyLong_FromLong(0);
        }
    } else {
        tent_segment_info_t info = {0};
        int rc = tent_get_segment_info(self->core.eng, seg, &info);
        uint64_t base = 0;
        if (rc)
            set_last(self, "get_first_buffer_address: %s", tent_last_error());
        else if (info.num_buffers > 0)
            base = info.buffers[0].base;
        tent_free_segment_info(&info);
        res = PyLong_FromUnsignedLongLong(base);
    }
    tentpy_leave(&self->core);
    return res;
}

static PyObject *mc_get_notifies(MCObject *self, PyObject *unused TENTPY_UNUSED)
{
    if (tentpy_enter(&self->core) < 0)
        return NULL;
    tent_notifi_info info = {0};
    int rc = tent_recv_notifs(self->core.eng, &info);
    tentpy_leave(&self->core);
    if (rc)
        return tentpy_raise(rc, "get_notifies");
    PyObject *l = tentpy_notifs_to_list(&info, tentpy_TransferNotify);
    tent_free_notifs(&info);
    return l;
}

/* A TCP connect to host:port within timeout_ms: the peer's RPC server is
 * alive. */
static int tcp_reachable(const char *name, int timeout_ms)
{
    struct classic_name n;
    if (classic_parse_name(name, &n) < 0 || !n.port || !n.host[0])
        return -2; /* not an address */
    char ps[16];
    snprintf(ps, sizeof(ps), "%u", n.port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(n.host, ps, &hints, &ai) != 0)
        return -1;
    int ok = -1;
    for (struct addrinfo *p = ai; p && ok; p = p->ai_next) {
        int fd =
            socket(p->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int rc = connect(fd, p->ai_addr, p->ai_addrlen);
        if (rc < 0 && errno == EINPROGRESS) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            if (poll(&pfd, 1, timeout_ms) == 1) {
                int e = 0;
                socklen_t l = sizeof(e);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
                rc = e ? -1 : 0;
            }
        }
        if (rc == 0)
            ok = 0;
        close(fd);
    }
    freeaddrinfo(ai);
    return ok;
}

static PyObject *mc_send_probe(MCObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"peer_server_name"};
    PyObject *a[1];
    const char *peer;
    if (PARSE("send_probe", names, 1, a) < 0)
        return NULL;
    if (!a[0] || a[0] == Py_None)
        return PyErr_Format(PyExc_TypeError,
                            "send_probe(): peer_server_name must be str");
    int r = str_in(self, a[0], "send_probe", "peer_server_name", &peer);
    if (r == ARG_PYERR)
        return NULL;
    if (r == ARG_REFUSED)
        return PyLong_FromLong(-1);
    if (tentpy_enter(&self->core) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    /* With a metadata service every name is a segment name, which the
     * service resolves (its port need not be the RPC port). */
    rc = self->p2p ? tcp_reachable(peer, 1000) : -2;
    if (rc == -1)
        set_last(self, "send_probe: peer '%s' does not answer", peer);
    Py_END_ALLOW_THREADS;
    long res = rc == 0 ? 0 : -1;
    if (rc == -2) { /* a segment name: it opens or it does not */
        tent_segment_id_t seg;
        int code;
        if (tentpy_segment(&self->core, a[0], &seg, &code) < 0)
            exc_to_last(self);
        else
            res = 0;
    }
    tentpy_leave(&self->core);
    return PyLong_FromLong(res);
}

static PyObject *mc_topology(MCObject *self, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"device_name"};
    PyObject *a[1];
    const char *dev;
    if (PARSE("get_local_topology", names, 0, a) < 0)
        return NULL;
    int r = str_in(self, a[0], "get_local_topology", "device_name", &dev);
    if (r == ARG_PYERR)
        return NULL;
    if (r == ARG_REFUSED)
        return tentpy_errorf(PyExc_ValueError,
                             "get_local_topology(): device_name contains a "
                             "NUL character");
    /* Host memory only: Mooncake's HCAs are RDMA devices, none here (the
     * tcp transport's NICs are in get_nic_load_stats()). */
    cJSON *root = cJSON_CreateObject();
    cJSON *cpu = root ? cJSON_AddObjectToObject(root, "cpu:0") : NULL;
    cJSON *pref = cpu ? cJSON_AddArrayToObject(cpu, "preferred_hca") : NULL;
    cJSON *avail = cpu ? cJSON_AddArrayToObject(cpu, "avail_hca") : NULL;
    if (!pref || !avail) {
        cJSON_Delete(root);
        return PyErr_NoMemory();
    }
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!out)
        return PyErr_NoMemory();
    PyObject *s = PyUnicode_FromString(out);
    free(out);
    return s;
}

/* Benchmark reference: `iters` batches of `batch` writes of `block` bytes
 * (src_base + i*block -> dst_base + i*block), the plain C API loop a C
 * program would run (allocate, submit, poll, free), GIL released once for
 * the whole loop.  Returns the seconds taken, or -1.0 (last_error()). */
static PyObject *mc_c_loop(MCObject *self, PyObject *args)
{
    PyObject *target, *o[5];
    uint64_t v[5];
    if (!PyArg_ParseTuple(args, "OOOOOO:_c_reference_loop", &target, &o[0],
                          &o[1], &o[2], &o[3], &o[4]))
        return NULL;
    for (int i = 0; i < 5; i++)
        if (tentpy_len_from(o[i], "_c_reference_loop", &v[i]) < 0)
            return NULL;
    uint64_t src = v[0], dst = v[1], block = v[2], batch = v[3], iters = v[4];
    if (batch == 0 || batch > STACK_REQS)
        return PyErr_Format(PyExc_ValueError, "batch must be 1..%d",
                            STACK_REQS);
    if (tentpy_enter(&self->core) < 0)
        return NULL;
    tent_segment_id_t seg;
    int code;
    if (tentpy_segment(&self->core, target, &seg, &code) < 0) {
        tentpy_leave(&self->core);
        return NULL;
    }
    tent_request_t r[STACK_REQS];
    memset(r, 0, sizeof(r));
    for (size_t i = 0; i < batch; i++) {
        r[i].opcode = OPCODE_WRITE;
        r[i].source = (void *)(uintptr_t)(src + i * block);
        r[i].target_id = seg;
        r[i].target_offset = dst + i * block;
        r[i].length = block;
    }
    double t0 = 0, dt = -1.0;
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS;
    t0 = tentpy_now();
    for (unsigned long long it = 0; it < iters && rc == 0; it++) {
        tent_batch_id_t b = tent_allocate_batch(self->core.eng, batch);
        rc = b ? tent_submit(self->core.eng, b, r, batch) : TENT_EINVAL;
        tent_status_t st = {.status = STATUS_PENDING};
        while (rc == 0 && st.status == STATUS_PENDING)
            rc = tent_overall_status(self->core.eng, b, &st);
        char why[768];
        if (rc == 0 && st.status != STATUS_COMPLETED) {
            rc = TENT_EIO;
            if (!tentpy_batch_cause(self->core.eng, b, &rc, why, sizeof(why)))
                snprintf(why, sizeof(why), "the batch did not complete");
        } else if (rc) {
            snprintf(why, sizeof(why), "%s", tent_last_error());
        }
        if (rc)
            set_last(self, "_c_reference_loop: %s (%s)", why,
                     tent_strerror(rc));
        if (b)
            tent_free_batch(self->core.eng, b);
    }
    if (rc == 0)
        dt = tentpy_now() - t0;
    Py_END_ALLOW_THREADS;
    tentpy_leave(&self->core);
    return PyFloat_FromDouble(dt);
}

/* ---- metrics and NIC load (not in Mooncake) ---------------------------- */

/* These calls are not Mooncake's, so they raise instead of returning -1:
 * RuntimeError with tent_last_error()'s message (also in last_error()). */
static PyObject *mc_ext_fail(MCObject *self, int code, const char *fn)
{
    char msg[ERR_LEN];
    snprintf(msg, sizeof(msg), "%s: %s (%s)", fn, tent_last_error(),
             tent_strerror(code));
    set_last(self, "%s", msg);
    PyErr_SetString(PyExc_RuntimeError, msg);
    return NULL;
}

static PyObject *mc_metrics_prometheus(MCObject *self,
                                       PyObject *unused TENTPY_UNUSED)
{
    int code;
    PyObject *t = tentpy_metrics_text(&self->core, false, &code);
    if (!t && code)
        return mc_ext_fail(self, code, "metrics_prometheus");
    return t;
}

static PyObject *mc_metrics_json(MCObject *self, PyObject *unused TENTPY_UNUSED)
{
    int code;
    PyObject *t = tentpy_metrics_text(&self->core, true, &code);
    if (!t)
        return code ? mc_ext_fail(self, code, "metrics_json") : NULL;
    PyObject *d = tentpy_json_loads(t);
    Py_DECREF(t);
    return d;
}

static PyObject *mc_nic_load_stats(MCObject *self,
                                   PyObject *unused TENTPY_UNUSED)
{
    int code;
    PyObject *l = tentpy_nic_load_stats(&self->core, &code);
    if (!l && code)
        return mc_ext_fail(self, code, "get_nic_load_stats");
    return l;
}

static PyObject *mc_metrics_http_address(MCObject *self,
                                         PyObject *unused TENTPY_UNUSED)
{
    char addr[256];
    uint16_t port = 0;
    int rc;
    if (tentpy_enter(&self->core) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    rc = tent_metrics_http_addr_port(self->core.eng, addr, sizeof(addr), &port);
    Py_END_ALLOW_THREADS;
    tentpy_leave(&self->core);
    if (rc == TENT_ENOTSUP)
        Py_RETURN_NONE;
    if (rc)
        return mc_ext_fail(self, rc, "metrics_http_address");
    return Py_BuildValue("(si)", addr, (int)port);
}

#define FASTKW(fn)                                                             \
    (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS

static PyMethodDef mc_methods[] = {
    {"initialize", FASTKW(mc_initialize),
     "initialize(local_hostname, metadata_server, protocol, device_name) -> "
     "0/-1"},
    {"initialize_ext", FASTKW(mc_initialize_ext),
     "initialize_ext(local_hostname, metadata_server, protocol, device_name, "
     "metadata_type) -> 0/-1"},
    {"get_rpc_port", (PyCFunction)mc_rpc_port, METH_NOARGS,
     "Port of the RPC server; the session id is f'{host}:{port}'."},
    {"get_engine_ptr", (PyCFunction)mc_engine_ptr, METH_NOARGS,
     "Address of the engine underneath (the C API's tent_engine_t), 0 "
     "before initialize()."},
    {"get_session_id", (PyCFunction)mc_session_id, METH_NOARGS,
     "f'{host}:{get_rpc_port()}'"},
    {"register_memory", FASTKW(mc_register),
     "register_memory(buffer_addr, capacity, location='*') -> 0/-1"},
    {"unregister_memory", FASTKW(mc_unregister), NULL},
    {"batch_register_memory", FASTKW(mc_batch_register), NULL},
    {"batch_unregister_memory", FASTKW(mc_batch_unregister), NULL},
    {"transfer_sync_write", FASTKW(mc_sync_write), NULL},
    {"transfer_sync_read", FASTKW(mc_sync_read), NULL},
    {"batch_transfer_sync_write", FASTKW(mc_bsync_write), NULL},
    {"batch_transfer_sync_read", FASTKW(mc_bsync_read), NULL},
    {"transfer_sync", FASTKW(mc_sync), NULL},
    {"batch_transfer_sync", FASTKW(mc_bsync), NULL},
    {"batch_transfer_async_write", FASTKW(mc_async_write), NULL},
    {"batch_transfer_async_read", FASTKW(mc_async_read), NULL},
    {"batch_transfer_async", FASTKW(mc_async), NULL},
    {"get_batch_transfer_status", FASTKW(mc_batch_status),
     "Blocks until every batch ends; 0 all completed, -1 otherwise; frees "
     "the ids."},
    {"transfer_submit_write", FASTKW(mc_submit_write), NULL},
    {"transfer_check_status", FASTKW(mc_check_status),
     "1 done, 0 pending, -1 failed, -2 timed out"},
    {"allocate_managed_buffer", FASTKW(mc_alloc_managed), NULL},
    {"free_managed_buffer", FASTKW(mc_free_managed), NULL},
    {"write_bytes_to_buffer", FASTKW(mc_write_bytes), NULL},
    {"read_bytes_from_buffer", FASTKW(mc_read_bytes), NULL},
    {"get_first_buffer_address", FASTKW(mc_first_buffer), NULL},
    {"get_notifies", (PyCFunction)mc_get_notifies, METH_NOARGS, NULL},
    {"send_probe", FASTKW(mc_send_probe), NULL},
    {"get_local_topology", FASTKW(mc_topology), NULL},
    {"_c_reference_loop", (PyCFunction)mc_c_loop, METH_VARARGS,
     "benchmark reference: the same batches from a C loop"},
    {"metrics_prometheus", (PyCFunction)mc_metrics_prometheus, METH_NOARGS,
     "metrics_prometheus() -> str (Prometheus text format); raises "
     "RuntimeError when metrics are disabled (not a Mooncake call)."},
    {"metrics_json", (PyCFunction)mc_metrics_json, METH_NOARGS,
     "metrics_json() -> dict; raises RuntimeError when metrics are "
     "disabled."},
    {"metrics_http_address", (PyCFunction)mc_metrics_http_address, METH_NOARGS,
     "metrics_http_address() -> (host, port) of the metrics endpoint, or "
     "None when it is not running."},
    {"get_nic_load_stats", (PyCFunction)mc_nic_load_stats, METH_NOARGS,
     "get_nic_load_stats() -> list of tent.NicLoadStats(device_name, "
     "inflight_bytes, ewma_bandwidth_bps) (Mooncake's C++ getNicLoadStats; "
     "not in its Python module)."},
    {"last_error", (PyCFunction)mc_last_error, METH_NOARGS,
     "Message of this thread's last failed call on this engine."},
    {"close", (PyCFunction)mc_close, METH_NOARGS,
     "close(): destroy the engine.  Safe while other threads use it: calls "
     "already inside the engine (transfer_sync_*, ...) finish first, later "
     "calls raise RuntimeError ('the transfer engine is closed')."},
    {"__enter__", (PyCFunction)mc_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)mc_exit_ctx, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

PyTypeObject tentpy_MooncakeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tent.mooncake.TransferEngine",
    .tp_basicsize = sizeof(MCObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Mooncake's classic TransferEngine API over TENT in C.",
    .tp_new = mc_new,
    .tp_dealloc = (destructor)mc_dealloc,
    .tp_traverse = (traverseproc)mc_traverse,
    .tp_clear = (inquiry)mc_clear,
    .tp_methods = mc_methods,
};
