/* What the file transports (io_uring, bufio) share: the files they serve,
 * opened from a file segment's buffer (transport.h, "file segments"), the
 * check that a file is still the one the segment opened, the causes of
 * failed I/O, and a fault-injection hook for tests. */
#ifndef TENT_TRANSPORT_FILE_IO_H
#define TENT_TRANSPORT_FILE_IO_H

#include "transport/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tent_fio_inode;

/* One file segment as a transport serves it. */
struct tent_fio_file {
    const struct tent_buffer *buf; /* the segment's buffer: the lookup key */
    char path[512];                /* resolved path, for messages */
    int fd;                        /* buffered descriptor (a dup) */
    int dfd;                       /* O_DIRECT descriptor, -1 when not opened */
    uint32_t mem_align;            /* O_DIRECT: memory alignment */
    uint32_t off_align;            /* O_DIRECT: offset and length alignment */
    uint64_t size;                 /* the segment's length: the size at open */
    bool writable;
    void *xport; /* the transport's own per-file state */
    /* what every file transport of the process knows of this file (by
     * device and inode): tent_fio_sync_failed */
    struct tent_fio_inode *inode;
};

/* Whether buf is a file segment's buffer. */
bool tent_fio_is_file(const struct tent_buffer *buf);

/* Opens what transport xport needs for file buffer buf: a buffered
 * descriptor and, when direct, an O_DIRECT one (left at -1 when the
 * filesystem refuses O_DIRECT, which is not an error). */
int tent_fio_open(const char *xport, const struct tent_buffer *buf, bool direct,
                  struct tent_fio_file **out);
void tent_fio_close(struct tent_fio_file *f);

/* Whether an I/O of len bytes at file offset off into/from mem may use the
 * O_DIRECT descriptor. */
static inline bool tent_fio_direct_ok(const struct tent_fio_file *f,
                                      const void *mem, uint64_t off,
                                      uint64_t len)
{
    return f->dfd >= 0 && ((uintptr_t)mem & (f->mem_align - 1)) == 0 &&
           (off & (f->off_align - 1)) == 0 && (len & (f->off_align - 1)) == 0;
}

/* After I/O on f: NULL when the file is still linked and at least as long
 * as when the segment was opened, else the cause (heap; the task fails):
 * TENT_ENOSEGMENT for a file deleted while open, TENT_ERANGE for one
 * truncated.  One fstat. */
struct tent_xerr *tent_fio_check(const char *xport,
                                 const struct tent_fio_file *f);

/* Cause of a failed read or write of len bytes at off: errno err. */
struct tent_xerr *tent_fio_io_error(const char *xport,
                                    const struct tent_fio_file *f, int opcode,
                                    uint64_t off, uint64_t len, int err);
/* Cause of a read that found the end of file at off (the file shrank). */
struct tent_xerr *tent_fio_eof_error(const char *xport,
                                     const struct tent_fio_file *f,
                                     uint64_t off);

/* ---- durable writes ---------------------------------------------------------
 * Linux reports a failed writeback of a file once, to one fdatasync (of
 * whichever descriptor, transport or worker asks first; ext4 reports a
 * failed metadata write once per filesystem), and drops the pages it could
 * not write: a later fdatasync that succeeds says nothing about them.  So
 * the first failed fdatasync of a file marks it, for every file transport
 * of the process, until every segment of the file is closed: from then on
 * no durable WRITE to it is COMPLETED (docs/durability.md). */

/* Records that an fdatasync of f failed with errno err. */
void tent_fio_sync_failed(struct tent_fio_file *f, int err);
/* NULL when a durable WRITE of len bytes at off whose fdatasync succeeded
 * may be COMPLETED; else its cause (heap): the file is marked. */
struct tent_xerr *tent_fio_sync_check(const char *xport,
                                      const struct tent_fio_file *f,
                                      uint64_t off, uint64_t len);

/* ---- what both transports' ops share --------------------------------------
 * A task's outcome as each keeps it (state: enum tent_xfer_state, loaded
 * with acquire by the caller; *bytes and *err are read only when it says
 * they are set), into the status op's answer. */
void tent_fio_status(int state, const uint64_t *bytes,
                     struct tent_xerr *const *err,
                     struct tent_xfer_status *out);
/* Whether transport xport takes request x to file f (NULL: the target is
 * no file it serves), stopping saying whether it is being quiesced:
 * TENT_OK, or the error (set, naming the file) the request fails with. */
int tent_fio_admit(const char *xport, bool stopping,
                   const struct tent_fio_file *f, const struct tent_xfer *x);
/* The quiesce op: waits (lock, idle) until *inflight is 0, at most
 * TENT_FIO_QUIESCE_S seconds; TENT_ETIMEDOUT naming xport and the count
 * otherwise.  Whoever lowers *inflight to 0 signals idle under lock. */
#define TENT_FIO_QUIESCE_S 60
int tent_fio_quiesce(const char *xport, atomic_int *inflight,
                     pthread_mutex_t *lock, pthread_cond_t *idle);

/* ---- the files a transport serves ---------------------------------------
 * Looked up by buffer pointer at submit; changed by add/remove_buffer. */
struct tent_fio_table {
    pthread_rwlock_t lock;
    struct tent_fio_file **v;
    size_t n, cap;
};
void tent_fio_table_init(struct tent_fio_table *t);
/* Closes what is still in it. */
void tent_fio_table_fini(struct tent_fio_table *t);
int tent_fio_table_add(struct tent_fio_table *t, struct tent_fio_file *f);
/* Removes and returns the file of buf (NULL when absent). */
struct tent_fio_file *tent_fio_table_take(struct tent_fio_table *t,
                                          const struct tent_buffer *buf);
/* Caller holds t->lock (read). */
struct tent_fio_file *tent_fio_table_find(const struct tent_fio_table *t,
                                          const struct tent_buffer *buf);

/* ---- fault injection (tests) ----------------------------------------------
 * Process-wide and off unless a test arms it: the transports ask at each
 * completed I/O and fdatasync (and io_uring at install) whether to turn it
 * into a fault.
 * A fault applies to transport xport ("io_uring", "bufio") after skip
 * matching events, to count of them. */
enum tent_fio_fault_kind {
    TENT_FIO_FAULT_ERRNO = 1, /* the I/O fails with errno err */
    TENT_FIO_FAULT_SHORT = 2, /* the I/O moves half its bytes (short) */
    TENT_FIO_FAULT_SETUP = 3, /* install fails with errno err */
    TENT_FIO_FAULT_SYNC = 4,  /* an fdatasync fails with errno err */
};
void tent_fio_fault_set(const char *xport, int kind, int err, unsigned skip,
                        unsigned count);
void tent_fio_fault_clear(void);
/* 0: no fault; else the errno to inject (ERRNO, SETUP) or 1 (SHORT). */
int tent_fio_fault_take(const char *xport, int kind);

#endif
