/* Shared by the file transports: see file_io.h. */
#include "transport/file_io.h"

#include "common/error.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

bool tent_fio_is_file(const struct tent_buffer *buf)
{
    return buf && tent_attrs_get(buf->attrs, TENT_FILE_ATTR_FD) != NULL;
}

/* The O_DIRECT alignment of fd: what statx reports (Linux 6.1 and later),
 * else the logical block size we assume (4096 covers every device). */
static void dio_align(int fd, uint32_t *mem, uint32_t *off)
{
    *mem = *off = 4096;
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
        (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_mem_align &&
        sx.stx_dio_offset_align) {
        *mem = sx.stx_dio_mem_align;
        *off = sx.stx_dio_offset_align;
    }
}

/* ---- files by inode
 * ---------------------------------------------------------- One record per
 * (device, inode) open in any file transport of the process, counted by the
 * tent_fio_file records that share it. */
struct tent_fio_inode {
    dev_t dev;
    ino_t ino;
    int refs;            /* under inode_lock */
    atomic_int sync_err; /* errno of the first failed fdatasync, or 0 */
    struct tent_fio_inode *next;
};

static pthread_mutex_t inode_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tent_fio_inode *inodes;

static struct tent_fio_inode *inode_get(dev_t dev, ino_t ino)
{
    pthread_mutex_lock(&inode_lock);
    struct tent_fio_inode *n = inodes;
    while (n && (n->dev != dev || n->ino != ino))
        n = n->next;
    if (!n && (n = calloc(1, sizeof(*n)))) {
        n->dev = dev;
        n->ino = ino;
        atomic_init(&n->sync_err, 0);
        n->next = inodes;
        inodes = n;
    }
    if (n)
        n->refs++;
    pthread_mutex_unlock(&inode_lock);
    return n;
}

static void inode_put(struct tent_fio_inode *n)
{
    if (!n)
        return;
    pthread_mutex_lock(&inode_lock);
    if (--n->refs == 0) {
        struct tent_fio_inode **pp = &inodes;
        while (*pp != n)
            pp = &(*pp)->next;
        *pp = n->next;
        free(n);
    }
    pthread_mutex_unlock(&inode_lock);
}

void tent_fio_sync_failed(struct tent_fio_file *f, int err)
{
    int none = 0;
    atomic_compare_exchange_strong(&f->inode->sync_err, &none,
                                   err > 0 ? err : EIO);
}

struct tent_xerr *tent_fio_sync_check(const char *xport,
                                      const struct tent_fio_file *f,
                                      uint64_t off, uint64_t len)
{
    int err = atomic_load(&f->inode->sync_err);
    if (!err)
        return NULL;
    return tent_xerr_new(TENT_EIO, err,
                         "%s: write of %llu bytes at offset %llu of file '%s' "
                         "is not known to be on storage: an fdatasync of the "
                         "file failed (%s), and writes to it are not durable "
                         "until its segment is closed and opened again",
                         xport, (unsigned long long)len,
                         (unsigned long long)off, f->path, strerror(err));
}

int tent_fio_open(const char *xport, const struct tent_buffer *buf, bool direct,
                  struct tent_fio_file **out)
{
    const char *num = tent_attrs_get(buf->attrs, TENT_FILE_ATTR_FD);
    const char *wr = tent_attrs_get(buf->attrs, TENT_FILE_ATTR_WRITABLE);
    char *end = NULL;
    long src = num ? strtol(num, &end, 10) : -1;
    if (!num || *end || src < 0)
        return tent_set_error(TENT_EINVAL,
                              "%s: buffer [%#llx, +%llu) is not a file "
                              "segment's (no valid '%s' attribute)",
                              xport, (unsigned long long)buf->base,
                              (unsigned long long)buf->length,
                              TENT_FILE_ATTR_FD);
    struct tent_fio_file *f = calloc(1, sizeof(*f));
    if (!f)
        return tent_set_error(TENT_ENOMEM, "%s: out of memory", xport);
    f->buf = buf;
    f->size = buf->length;
    f->writable = wr && strcmp(wr, "1") == 0;
    f->dfd = -1;
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%ld", src);
    ssize_t n = readlink(proc, f->path, sizeof(f->path) - 1);
    if (n > 0)
        f->path[n] = '\0';
    else
        snprintf(f->path, sizeof(f->path), "(fd %ld)", src);
    f->fd = fcntl((int)src, F_DUPFD_CLOEXEC, 0);
    if (f->fd < 0) {
        int err = errno;
        tent_set_error(TENT_EIO,
                       "%s: cannot duplicate the descriptor of file "
                       "'%s': %s",
                       xport, f->path, strerror(err));
        free(f);
        return TENT_EIO;
    }
    struct stat st;
    int err = fstat(f->fd, &st) != 0 ? errno : 0;
    if (!err && !(f->inode = inode_get(st.st_dev, st.st_ino)))
        err = ENOMEM;
    if (err) {
        int code = err == ENOMEM ? TENT_ENOMEM : TENT_EIO;
        tent_set_error(code, "%s: cannot record file '%s': %s", xport, f->path,
                       strerror(err));
        close(f->fd);
        free(f);
        return code;
    }
    if (direct) {
        /* A new open file description of the same inode, with O_DIRECT:
         * never a path walk, so it is the file the runtime checked. */
        int flags = (f->writable ? O_RDWR : O_RDONLY) | O_DIRECT | O_CLOEXEC;
        f->dfd = open(proc, flags);
        if (f->dfd < 0)
            LOG_INFO("%s: file '%s' without O_DIRECT (%s): every request "
                     "goes through the page cache",
                     xport, f->path, strerror(errno));
        else
            dio_align(f->dfd, &f->mem_align, &f->off_align);
    }
    *out = f;
    return TENT_OK;
}

void tent_fio_close(struct tent_fio_file *f)
{
    if (!f)
        return;
    if (f->dfd >= 0)
        close(f->dfd);
    close(f->fd);
    inode_put(f->inode);
    free(f);
}

struct tent_xerr *tent_fio_check(const char *xport,
                                 const struct tent_fio_file *f)
{
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return tent_xerr_new(TENT_EIO, errno, "%s: fstat of file '%s': %s",
                             xport, f->path, strerror(errno));
    if (st.st_nlink == 0)
        return tent_xerr_new(TENT_ENOSEGMENT, ENOENT,
                             "%s: file '%s' was deleted while its segment was "
                             "open",
                             xport, f->path);
    if ((uint64_t)st.st_size < f->size)
        return tent_xerr_new(TENT_ERANGE, 0,
                             "%s: file '%s' was truncated to %llu bytes while "
                             "its segment (of %llu bytes) was open",
                             xport, f->path, (unsigned long long)st.st_size,
                             (unsigned long long)f->size);
    return NULL;
}

/* Our code for an errno of read/write: a full disk or a failed device is
 * TENT_EIO (another transport may try; it meets the same file), a refused
 * write TENT_EPERM, a write beyond the filesystem's file size TENT_ERANGE. */
static int io_code(int err)
{
    switch (err) {
    case EROFS:
    case EPERM:
    case EACCES:
        return TENT_EPERM;
    case EFBIG:
        return TENT_ERANGE;
    case ENOMEM:
        return TENT_ENOMEM;
    default:
        return TENT_EIO;
    }
}

struct tent_xerr *tent_fio_io_error(const char *xport,
                                    const struct tent_fio_file *f, int opcode,
                                    uint64_t off, uint64_t len, int err)
{
    return tent_xerr_new(io_code(err), err,
                         "%s: %s of %llu bytes at offset %llu of file '%s' "
                         "failed: %s",
                         xport, opcode == OPCODE_READ ? "read" : "write",
                         (unsigned long long)len, (unsigned long long)off,
                         f->path, strerror(err));
}

struct tent_xerr *tent_fio_eof_error(const char *xport,
                                     const struct tent_fio_file *f,
                                     uint64_t off)
{
    struct stat st;
    long long now = fstat(f->fd, &st) == 0 ? (long long)st.st_size : -1;
    return tent_xerr_new(TENT_ERANGE, 0,
                         "%s: read at offset %llu of file '%s' reached the end "
                         "of the file: it is %lld bytes now, %llu when its "
                         "segment was opened (truncated while open?)",
                         xport, (unsigned long long)off, f->path, now,
                         (unsigned long long)f->size);
}

/* ---- table ----------------------------------------------------------------
 */

void tent_fio_table_init(struct tent_fio_table *t)
{
    memset(t, 0, sizeof(*t));
    pthread_rwlock_init(&t->lock, NULL);
}

void tent_fio_table_fini(struct tent_fio_table *t)
{
    for (size_t i = 0; i < t->n; i++)
        tent_fio_close(t->v[i]);
    free(t->v);
    pthread_rwlock_destroy(&t->lock);
}

int tent_fio_table_add(struct tent_fio_table *t, struct tent_fio_file *f)
{
    pthread_rwlock_wrlock(&t->lock);
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 8;
        struct tent_fio_file **v = realloc(t->v, cap * sizeof(*v));
        if (!v) {
            pthread_rwlock_unlock(&t->lock);
            return tent_set_error(
                TENT_ENOMEM, "file table: out of memory for '%s'", f->path);
        }
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = f;
    pthread_rwlock_unlock(&t->lock);
    return TENT_OK;
}

struct tent_fio_file *tent_fio_table_take(struct tent_fio_table *t,
                                          const struct tent_buffer *buf)
{
    struct tent_fio_file *f = NULL;
    pthread_rwlock_wrlock(&t->lock);
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i]->buf == buf) {
            f = t->v[i];
            t->v[i] = t->v[--t->n];
            break;
        }
    pthread_rwlock_unlock(&t->lock);
    return f;
}

struct tent_fio_file *tent_fio_table_find(const struct tent_fio_table *t,
                                          const struct tent_buffer *buf)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i]->buf == buf)
            return t->v[i];
    return NULL;
}

/* ---- fault injection ------------------------------------------------------
 */

static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool fault_armed;
static struct {
    char xport[32];
    int kind, err;
    unsigned skip, count;
} fault;

void tent_fio_fault_set(const char *xport, int kind, int err, unsigned skip,
                        unsigned count)
{
    pthread_mutex_lock(&fault_lock);
    snprintf(fault.xport, sizeof(fault.xport), "%s", xport);
    fault.kind = kind;
    fault.err = err;
    fault.skip = skip;
    fault.count = count;
    atomic_store(&fault_armed, count > 0);
    pthread_mutex_unlock(&fault_lock);
}

void tent_fio_fault_clear(void)
{
    tent_fio_fault_set("", 0, 0, 0, 0);
}

int tent_fio_fault_take(const char *xport, int kind)
{
    if (!atomic_load_explicit(&fault_armed, memory_order_relaxed))
        return 0;
    int ret = 0;
    pthread_mutex_lock(&fault_lock);
    if (fault.count > 0 && fault.kind == kind &&
        strcmp(fault.xport, xport) == 0) {
        if (fault.skip > 0) {
            fault.skip--;
        } else {
            fault.count--;
            ret = kind == TENT_FIO_FAULT_SHORT ? 1 : fault.err;
            if (fault.count == 0)
                atomic_store(&fault_armed, false);
        }
    }
    pthread_mutex_unlock(&fault_lock);
    return ret;
}

void tent_fio_status(int state, const uint64_t *bytes,
                     struct tent_xerr *const *err, struct tent_xfer_status *out)
{
    memset(out, 0, sizeof(*out));
    out->state = state;
    if (state == TENT_XFER_COMPLETED)
        out->bytes = *bytes;
    else if (state == TENT_XFER_FAILED)
        tent_xstatus_failed(out, *err, TENT_EIO, 0);
}

int tent_fio_quiesce(const char *xport, atomic_int *inflight,
                     pthread_mutex_t *lock, pthread_cond_t *idle)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += TENT_FIO_QUIESCE_S;
    pthread_mutex_lock(lock);
    while (atomic_load(inflight) > 0)
        if (pthread_cond_timedwait(idle, lock, &dl) == ETIMEDOUT)
            break;
    int left = atomic_load(inflight);
    pthread_mutex_unlock(lock);
    if (left > 0)
        return tent_set_error(TENT_ETIMEDOUT,
                              "%s: %d task(s) still in flight after %d s",
                              xport, left, TENT_FIO_QUIESCE_S);
    return TENT_OK;
}

int tent_fio_admit(const char *xport, bool stopping,
                   const struct tent_fio_file *f, const struct tent_xfer *x)
{
    if (stopping)
        return tent_set_error(TENT_ESHUTDOWN, "%s: transport is stopping",
                              xport);
    if (!f)
        return tent_set_error(TENT_ENOTSUP,
                              "%s: segment '%s' is not a file segment this "
                              "transport serves",
                              xport, x->target->name);
    if (x->opcode == OPCODE_WRITE && !f->writable)
        return tent_set_error(TENT_EPERM, "%s: file '%s' is open read-only",
                              xport, f->path);
    if (x->remote > f->size || x->length > f->size - x->remote)
        return tent_set_error(TENT_ERANGE,
                              "%s: [%llu, +%llu) lies beyond file '%s' of "
                              "%llu bytes",
                              xport, (unsigned long long)x->remote,
                              (unsigned long long)x->length, f->path,
                              (unsigned long long)f->size);
    return TENT_OK;
}
