/*
 * The `tent` Python package: shared declarations of the C extension
 * (tent._tent).  Everything here sits on the public C API only
 * (tent/transfer_engine.h).
 */
#ifndef TENTPY_H
#define TENTPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <tent/transfer_engine.h>

/* A parameter a CPython slot or method signature requires but the function
 * does not read (we build with -Wunused-parameter). */
#define TENTPY_UNUSED __attribute__((unused))

/* ---- errors (module.c) -------------------------------------------------- */

/* The exception classes, created at module init. */
extern PyObject *tentpy_exc_base;     /* TentException */
extern PyObject *tentpy_exc_inval;    /* InvalidArgumentError */
extern PyObject *tentpy_exc_notreg;   /* AddressNotRegisteredError */
extern PyObject *tentpy_exc_nodev;    /* DeviceNotFoundError */
extern PyObject *tentpy_exc_entry;    /* InvalidEntryError */
extern PyObject *tentpy_exc_meta;     /* MetadataError */
extern PyObject *tentpy_exc_rpc;      /* RpcServiceError */
extern PyObject *tentpy_exc_internal; /* InternalError */
extern PyObject *tentpy_exc_notimpl;  /* NotImplementedError */

/* Raises the TentException subclass matching code with `what` and the
 * thread's tent_last_error() message; returns NULL. */
PyObject *tentpy_raise(int code, const char *what);
/* The same with the message given (captured where the call failed). */
PyObject *tentpy_raise_msg(int code, const char *what, const char *msg);

/* The struct-sequence types (module.c). */
extern PyTypeObject *tentpy_TransferStatus;
extern PyTypeObject *tentpy_SegmentInfoBuffer;
extern PyTypeObject *tentpy_SegmentInfo;
extern PyTypeObject *tentpy_NicLoadStats;
extern PyTypeObject *tentpy_TaskError;
/* Classes called with (name, msg) for received notifications; NULL: tuples */
extern PyObject *tentpy_Notification;
extern PyObject *tentpy_TransferNotify;

/* ---- arguments (buffer.c) ---------------------------------------------- */

/* A Python exception is pending (beyond the TENT_E* codes). */
#define TENTPY_PYERR (-1000)

/* PyErr_Format's conversions are not printf's (no %#llx, no %.3f): this
 * formats with vsnprintf, so the compiler checks the format, and raises
 * `type` with the text.  Returns NULL. */
PyObject *tentpy_errorf(PyObject *type, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Keeps the object behind an address alive: a held buffer view or a
 * reference to a data_ptr()/nbytes object.  NULL for a plain integer. */
struct tentpy_mem {
    uint64_t addr;
    uint64_t size;    /* the object's size in bytes; 0 for an integer */
    PyObject *holder; /* a new reference (capsule or object) or NULL */
};

/* Reads an address argument: an int, an object with the buffer protocol
 * (contiguous; writable when `writable`), or one with data_ptr()/nbytes.
 * Raises TypeError/ValueError/OverflowError and returns -1 on bad input. */
int tentpy_mem_from(PyObject *obj, bool writable, const char *what,
                    struct tentpy_mem *out);

/* Reads a length (>= 0, fits in size_t); -1 with an exception otherwise. */
int tentpy_len_from(PyObject *obj, const char *what, uint64_t *out);

/* Reads an int in [lo, hi] (a C int field): TypeError for a non-int,
 * ValueError naming `what` for a value outside the range (never
 * truncated). */
int tentpy_int_from(PyObject *obj, const char *what, long long lo, long long hi,
                    int *out);

/* Checks that [addr, addr+len) lies inside the object (when it is one). */
int tentpy_mem_check_len(const struct tentpy_mem *m, uint64_t len,
                         const char *what);

/* Checks that [addr, addr+len) is memory this process has mapped with
 * read access (/proc/self/maps): an integer address registered for host
 * memory must be real memory, not a range a later local copy would fault
 * on.  ValueError naming the range otherwise. */
int tentpy_check_mapped(uint64_t addr, uint64_t len, const char *what);

/* Whether a location string names host memory ("", "*", "cpu",
 * "cpu:<node>"); device memory is not mapped in this process. */
bool tentpy_host_location(const char *loc);

/* UTF-8 of a str with no NUL inside (a NUL would cut the name short in
 * C and name something else): TypeError for a non-str, ValueError naming
 * `what` for a NUL.  The pointer lives as long as the object. */
const char *tentpy_str(PyObject *obj, const char *what);

/* A snapshot of a sequence argument (a new tuple; str and bytes are not
 * sequences of items here): what the call reads, whatever Python code run
 * by the items' conversions does to the caller's list. */
PyObject *tentpy_seq(PyObject *obj, const char *what);

/* After the items were converted: a list the caller passed must not have
 * changed meanwhile (RuntimeError "... was modified during the call"). */
int tentpy_seq_unchanged(PyObject *orig, PyObject *snap, const char *what);

/* ---- the engine shared by both Python classes (core.c) ----------------- */

/*
 * State common to tent.TransferEngine and tent.mooncake.TransferEngine.
 * Python-object fields (segments, async_keep, holds) are guarded by the
 * GIL.  `active` counts calls inside the C engine; close() sets `closed`
 * and waits for `active` to drop to 0 before destroying the engine, so no
 * call ever sees a destroyed engine.  park_lock guards the parked batches
 * (batches abandoned by an interrupted or timed-out wait, freed once their
 * tasks end); it is never held across a call into Python.
 *
 * Registrations (regs, holds): the table mirrors the C engine's list of
 * registrations made through this object, one entry per (addr, len) with
 * its reference count, as C keeps them; holds are the Python objects whose
 * memory was registered by reference, each kept alive while any entry
 * overlaps its memory.  reg_lock makes a C (un)registration and its table
 * update one step for every thread; it is only ever taken with the GIL
 * released (then the GIL is taken again inside it), and no Python code
 * runs while it is held.
 */
struct tentpy_reg {
    uint64_t addr, len;
    long count;
};
struct tentpy_hold {
    uint64_t lo, hi; /* the object's memory */
    PyObject *obj;
};
struct tentpy_core {
    tent_engine_t eng;
    atomic_int active;
    atomic_bool closed;
    PyObject *segments;   /* str name -> int handle */
    PyObject *async_keep; /* int batch id -> (deadline, holders) */
    pthread_mutex_t reg_lock;
    struct tentpy_reg *regs;
    size_t nregs, regs_cap;
    struct tentpy_hold *holds;
    size_t nholds, holds_cap;
    pthread_mutex_t park_lock;
    tent_batch_id_t *parked;
    size_t nparked, park_cap;
    atomic_size_t nparked_hint;
};

int tentpy_core_init(struct tentpy_core *c);
/* Destroys the engine (waits for calls in flight) and drops every hold. */
void tentpy_core_close(struct tentpy_core *c);
void tentpy_core_clear(struct tentpy_core *c);
int tentpy_core_traverse(struct tentpy_core *c, visitproc visit, void *arg);

/* Marks a call as entered; raises (InvalidEntryError / RuntimeError) and
 * returns -1 when the engine is closed or was never created.  No Python
 * code of the caller's objects may run while entered (a data_ptr() that
 * calls close() would wait for its own call): arguments are converted
 * first, after tentpy_check(). */
int tentpy_enter(struct tentpy_core *c);
/* The same test without entering: -1 with RuntimeError when the engine is
 * closed or was never created. */
int tentpy_check(struct tentpy_core *c);
static inline void tentpy_leave(struct tentpy_core *c)
{
    atomic_fetch_sub_explicit(&c->active, 1, memory_order_release);
}

/* Engine creation under the module's config lock, GIL released.
 * config_path: a JSON file for this engine only (NULL: MC_TENT_CONF). */
tent_engine_t tentpy_create_engine(const char *config_path, int *err, char *msg,
                                   size_t msg_len);

/* Opens a segment by name with the GIL released, waiting on a helper
 * thread so that Ctrl-C (a signal handler that raises) interrupts the wait:
 * then TENTPY_PYERR is returned with the handler's exception, and the
 * helper closes the segment it opens later.  Otherwise the TENT_E* code
 * (0: *out is the handle); tent_last_error()'s text is in msg. */
int tentpy_open_segment(struct tentpy_core *c, const char *name,
                        tent_segment_id_t *out, char *msg, size_t msg_len);

/* Opens (and caches) a segment by name; -1 with an exception (*code is
 * the TENT_E* code, 0 for a Python error such as a bad type). */
int tentpy_segment(struct tentpy_core *c, PyObject *name,
                   tent_segment_id_t *out, int *code);

/* Registers [m->addr, +len) with tent_register_memory_ex and records it;
 * m->holder (when set) is kept alive from then on while any registration
 * overlaps [m->addr, +m->size).  Returns the TENT_E* code (the message is
 * tent_last_error()) or TENTPY_PYERR (no memory). */
int tentpy_reg_add(struct tentpy_core *c, const struct tentpy_mem *m,
                   uint64_t len, const tent_memory_options_t *o);
/* Drops one registration of [addr, +len); len 0 takes the one C takes
 * (the first registered at addr).  Returns the TENT_E* code. */
int tentpy_reg_remove(struct tentpy_core *c, uint64_t addr, uint64_t len);
/* tent_free_memory(addr) of an allocation of alloc_len bytes: C drops the
 * registrations overlapping it, and so does the table. */
int tentpy_reg_free(struct tentpy_core *c, uint64_t addr, uint64_t alloc_len);

/* Notification records as a list of cls(name, msg) (tuples if NULL). */
PyObject *tentpy_notifs_to_list(tent_notifi_info *info, PyObject *cls);

/* Why a batch failed, from tent_task_error: the first failed task's cause
 * as "task <i>[ (and <k> more)]: <message>[ (native error <n>)]", and its
 * TENT_E* code in *code.  false (msg untouched) when no task of the batch
 * has failed or the batch is unknown.  Calls C only: the GIL may be held
 * or released. */
bool tentpy_batch_cause(tent_engine_t eng, tent_batch_id_t bid, int *code,
                        char *msg, size_t msg_len);

/* Result of tentpy_run. */
enum {
    TENTPY_RUN_OK = 0,
    TENTPY_RUN_FAILED = 1,      /* a task failed (err holds the code) */
    TENTPY_RUN_TIMEOUT = 2,     /* deadline passed; batch parked */
    TENTPY_RUN_INTERRUPTED = 3, /* a Python signal handler raised */
    TENTPY_RUN_ERROR = 4,       /* allocate/submit failed (err) */
};

/* Allocates a batch, submits the requests and waits, with the GIL
 * released, until every task ends or timeout_s passes, checking for
 * signals every few milliseconds.  A batch whose tasks may still run when
 * this returns is parked and freed later.  Must be called with the GIL
 * held and the call entered; returns with the GIL held. `err` gets the
 * TENT_E* code and `msg` the message for RUN_FAILED/RUN_ERROR. */
int tentpy_run(struct tentpy_core *c, tent_request_t *reqs, size_t n,
               const char *notif_name, const char *notif_msg, double timeout_s,
               int *err, char *msg, size_t msg_len);

/* Waits for a batch submitted earlier (same contract as tentpy_run). Frees
 * it unless it is parked. */
int tentpy_wait(struct tentpy_core *c, tent_batch_id_t bid, double timeout_s,
                int *err, char *msg, size_t msg_len);

/* Frees a batch now if idle, else parks it. GIL may be held or not. */
void tentpy_release_batch(struct tentpy_core *c, tent_batch_id_t bid);
/* Frees parked batches whose tasks have ended. */
void tentpy_sweep(struct tentpy_core *c);

/* The engine's metrics as text (json: tent_metrics_json, else
 * tent_metrics_prometheus), fetched with the GIL released into a buffer
 * grown on TENT_EOVERFLOW.  Enters the call itself.  NULL with *code set
 * to the TENT_E* code (no exception set) when the engine refused, or NULL
 * with an exception and *code 0 (closed engine, no memory). */
PyObject *tentpy_metrics_text(struct tentpy_core *c, bool json, int *code);
/* tent_get_nic_load_stats as a list of NicLoadStats, fetched with the GIL
 * released.  Enters the call itself.  NULL with *code set (no exception)
 * when the engine refused, or NULL with an exception and *code 0. */
PyObject *tentpy_nic_load_stats(struct tentpy_core *c, int *code);

/* json.loads(text): a new reference or NULL with an exception. */
PyObject *tentpy_json_loads(PyObject *text);

/* Monotonic seconds. */
double tentpy_now(void);

/* ---- the two classes ---------------------------------------------------- */
extern PyTypeObject tentpy_EngineType;   /* tent.TransferEngine */
extern PyTypeObject tentpy_MooncakeType; /* tent.mooncake.TransferEngine */

#endif /* TENTPY_H */
