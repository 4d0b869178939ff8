/* File segments: tent_open_segment(e, &h, "file://<path>").
 *
 * As in TENT, the name after "file://" is a path, joined to the config key
 * file_desc_basepath when that is set; the segment has type TYPE_FILE and
 * one buffer [0, file size) whose addresses are file offsets (location "*").
 * Beyond TENT, the file is checked and opened here, at open, so that a bad
 * name is an error of tent_open_segment naming the file rather than of every
 * later request (the rules: open_file, and docs/file-segments.md).
 * The runtime keeps one descriptor for the segment's lifetime; the file
 * transports (io_uring, bufio) get the buffer through add_buffer, with the
 * descriptor's number in its attributes, and open descriptors of their own
 * from it (transport.h, "file segments").  The segment record is local
 * (no descriptor to fetch, nothing published) and never changes after open:
 * its length is the size the file had then. */
#include "common/error.h"
#include "common/log.h"
#include "runtime/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FILE_PREFIX "file://"

struct tent_file_seg {
    int fd;
    bool detached; /* the transports let it go and fd is closed */
    char path[PATH_MAX];
};

bool tent_file_segment_name(const char *name)
{
    return name && strncmp(name, FILE_PREFIX, strlen(FILE_PREFIX)) == 0;
}

static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

/* TENT_* code for an errno of resolving or opening the path. */
static int open_code(int err)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR:
        return TENT_ENOSEGMENT;
    case EACCES:
    case EPERM:
    case EXDEV:
        return TENT_EPERM;
    case ENOMEM:
        return TENT_ENOMEM;
    default:
        return TENT_EINVAL;
    }
}

/* open_beneath on a kernel without openat2 (before 5.6): resolves the
 * whole path and compares it with the resolved base. */
static int open_beneath_realpath(const char *base, const char *rel)
{
    char full[PATH_MAX], real[PATH_MAX], rbase[PATH_MAX];
    if (snprintf(full, sizeof(full), "%s/%s", base, rel) >= (int)sizeof(full)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (!realpath(base, rbase) || !realpath(full, real))
        return -1;
    size_t n = strlen(rbase);
    bool under = strncmp(real, rbase, n) == 0 &&
                 (real[n] == '/' || real[n] == '\0' || n == 1);
    if (!under) {
        errno = EXDEV;
        return -1;
    }
    return open(real, O_PATH | O_CLOEXEC | O_NOFOLLOW);
}

/* O_PATH descriptor of rel beneath the directory base, or -1 with errno
 * (EXDEV: the path leaves base). */
static int open_beneath(const char *base, const char *rel)
{
    int dir = open(base, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    struct open_how how = {
        .flags = O_PATH | O_CLOEXEC,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    int fd = (int)syscall(SYS_openat2, dir, rel, &how, sizeof(how));
    int err = errno;
    close(dir);
    if (fd < 0 && (err == ENOSYS || err == E2BIG))
        return open_beneath_realpath(base, rel);
    errno = err;
    return fd;
}

/* Opens the file of name into *fd (read-write when it can be written, else
 * read-only: *writable says which) and *st:
 *   - with file_desc_basepath the path is resolved beneath it
 *     (open_beneath): "..", an absolute symlink or one whose target leaves
 *     the base is refused (TENT_EPERM);
 *   - it must be a regular file (else TENT_EINVAL); it is looked at through
 *     an O_PATH descriptor, so a device or FIFO is never opened;
 *   - a file with no write bit in its mode, or one the kernel refuses to
 *     open for writing (EACCES, EROFS ...), is opened read-only and its
 *     buffer is PERM_GLOBAL_READ_ONLY, so a WRITE fails at tent_submit
 *     (root would otherwise write to a 0444 file without a word). */
static int open_file(struct tent_engine *e, const char *name, int *fd,
                     bool *writable, struct stat *st, char *path,
                     size_t pathlen)
{
    const char *rest = name + strlen(FILE_PREFIX);
    const char *base = NULL;
    int rc = tent_config_get_string(e->cfg, "file_desc_basepath", "", &base);
    if (rc)
        return rc;
    if (!*rest)
        return tent_set_error(TENT_EINVAL,
                              "file segment '%s': the name has no path after "
                              "'file://'",
                              name);
    int pfd;
    if (*base) {
        /* TENT joins base + "/" + path: an absolute path lies under it */
        while (*rest == '/')
            rest++;
        if (!*rest)
            return tent_set_error(TENT_EINVAL,
                                  "file segment '%s': the name has no path "
                                  "below file_desc_basepath '%s'",
                                  name, base);
        snprintf(path, pathlen, "%s%s%s", base,
                 base[strlen(base) - 1] == '/' ? "" : "/", rest);
        pfd = open_beneath(base, rest);
        if (pfd < 0 && errno == EXDEV)
            return tent_set_error(TENT_EPERM,
                                  "file segment '%s': path '%s' leaves "
                                  "file_desc_basepath '%s' (through '..' or a "
                                  "symlink)",
                                  name, rest, base);
    } else {
        snprintf(path, pathlen, "%s", rest);
        pfd = open(rest, O_PATH | O_CLOEXEC);
    }
    if (pfd < 0) {
        int err = errno;
        return tent_set_error(open_code(err),
                              "file segment '%s': cannot open '%s': %s", name,
                              path, strerror(err));
    }
    if (fstat(pfd, st) != 0) {
        int err = errno;
        close(pfd);
        return tent_set_error(TENT_EIO, "file segment '%s': fstat of '%s': %s",
                              name, path, strerror(err));
    }
    if (!S_ISREG(st->st_mode)) {
        close(pfd);
        return tent_set_error(TENT_EINVAL,
                              "file segment '%s': '%s' is %s, not a regular "
                              "file",
                              name, path, kind_of(st->st_mode));
    }
    /* Reopen the very inode we checked (no second path walk). */
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
    *writable = (st->st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) != 0;
    int f = *writable ? open(proc, O_RDWR | O_CLOEXEC | O_NOCTTY) : -1;
    if (f < 0 && *writable &&
        (errno == EACCES || errno == EPERM || errno == EROFS ||
         errno == ETXTBSY)) {
        LOG_INFO("file segment '%s': '%s' cannot be opened for writing (%s); "
                 "opened read-only",
                 name, path, strerror(errno));
        *writable = false;
    }
    if (f < 0 && !*writable)
        f = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    int err = errno;
    close(pfd);
    if (f < 0)
        return tent_set_error(open_code(err),
                              "file segment '%s': cannot open '%s': %s", name,
                              path, strerror(err));
    /* the resolved path names the file in every later message */
    char real[PATH_MAX];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", f);
    ssize_t n = readlink(proc, real, sizeof(real) - 1);
    if (n > 0) {
        real[n] = '\0';
        snprintf(path, pathlen, "%s", real);
    }
    *fd = f;
    return TENT_OK;
}

/* Hands the file buffer to the installed file transports (reg_lock held).
 * At least one must take it when any is installed. */
static int attach_locked(struct tent_engine *e, struct tent_segment *seg,
                         struct tent_buffer *buf)
{
    int first = TENT_OK, nfile = 0;
    char why[512] = "";
    for (int i = 0; i < e->nxports; i++) {
        struct tent_transport *t = e->xports[i];
        if (!(t->ops->capabilities(t) & TENT_CAP_FILE))
            continue;
        nfile++;
        int rc = t->ops->add_buffer(t, buf);
        if (rc == TENT_OK) {
            buf->xport_mask |= 1u << t->ops->type;
            continue;
        }
        LOG_WARN("file segment '%s': transport '%s' cannot serve it: %s",
                 seg->v.name, t->ops->name, tent_last_error());
        if (first == TENT_OK) {
            first = rc;
            snprintf(why, sizeof(why), "%s", tent_last_error());
        }
    }
    if (nfile == 0)
        LOG_WARN("file segment '%s': no file transport (io_uring, bufio) is "
                 "installed; requests to it will find no transport",
                 seg->v.name);
    if (nfile > 0 && buf->xport_mask == 0)
        return tent_set_error(first, "file segment '%s': %s", seg->v.name, why);
    return TENT_OK;
}

/* Takes the buffer back from the transports and closes the file (reg_lock
 * held; no task uses the buffer). */
static void detach_locked(struct tent_engine *e, struct tent_segment *seg)
{
    struct tent_file_seg *fs = seg->file;
    if (!fs || fs->detached)
        return;
    struct tent_buffer *buf = seg->bufs[0];
    for (int i = 0; i < e->nxports; i++) {
        struct tent_transport *t = e->xports[i];
        uint32_t bit = 1u << t->ops->type;
        if (!(buf->xport_mask & bit) || e->xport_abandoned[i])
            continue;
        if (t->ops->remove_buffer(t, buf) != TENT_OK)
            LOG_WARN("file segment '%s': transport '%s' failed to release "
                     "it: %s",
                     seg->v.name, t->ops->name, tent_last_error());
        buf->xport_mask &= ~bit;
    }
    close(fs->fd);
    fs->detached = true;
}

int tent_file_segment_open(struct tent_engine *e, const char *name,
                           uint64_t *handle)
{
    struct tent_file_seg *fs = calloc(1, sizeof(*fs));
    if (!fs)
        return tent_set_error(TENT_ENOMEM, "file segment '%s': out of memory",
                              name);
    struct stat st;
    bool writable = false;
    int rc =
        open_file(e, name, &fs->fd, &writable, &st, fs->path, sizeof(fs->path));
    if (rc) {
        free(fs);
        return rc;
    }
    struct tent_segment *seg = NULL;
    struct tent_buffer *buf = calloc(1, sizeof(*buf));
    rc = buf ? tent_segment_new(0, name, true, &seg)
             : tent_set_error(TENT_ENOMEM, "file segment '%s': out of memory",
                              name);
    if (rc)
        goto fail_buf;
    seg->type = TYPE_FILE;
    seg->file = fs;
    pthread_rwlock_rdlock(&e->local->lock);
    snprintf(seg->host_id, sizeof(seg->host_id), "%s", e->local->host_id);
    pthread_rwlock_unlock(&e->local->lock);
    buf->base = 0;
    buf->length = (uint64_t)st.st_size;
    snprintf(buf->location, sizeof(buf->location), "*");
    buf->perm = writable ? PERM_GLOBAL_READ_WRITE : PERM_GLOBAL_READ_ONLY;
    buf->alloc_fd = -1;
    atomic_init(&buf->inflight, 0);
    char num[16];
    snprintf(num, sizeof(num), "%d", fs->fd);
    rc = tent_attrs_set(&buf->attrs, TENT_FILE_ATTR_FD, num);
    if (!rc)
        rc = tent_attrs_set(&buf->attrs, TENT_FILE_ATTR_WRITABLE,
                            writable ? "1" : "0");
    if (!rc)
        rc = tent_segment_insert_locked(seg, buf);
    if (rc)
        goto fail_seg;
    buf = NULL; /* the segment's now */
    pthread_mutex_lock(&e->reg_lock);
    rc = attach_locked(e, seg, seg->bufs[0]);
    if (rc) {
        detach_locked(e, seg);
        pthread_mutex_unlock(&e->reg_lock);
        goto fail_seg;
    }
    pthread_mutex_unlock(&e->reg_lock);
    rc = tent_engine_add_segment(e, seg, handle);
    if (rc != TENT_OK) {
        /* TENT_EEXIST: a concurrent open of the name won */
        pthread_mutex_lock(&e->reg_lock);
        detach_locked(e, seg);
        pthread_mutex_unlock(&e->reg_lock);
        free(fs);
        tent_segment_free(seg);
        return rc == TENT_EEXIST ? TENT_OK : rc;
    }
    LOG_INFO("opened file segment '%s' (id %llu): '%s', %llu bytes, %s", name,
             (unsigned long long)*handle, fs->path,
             (unsigned long long)st.st_size,
             writable ? "read-write" : "read-only");
    return TENT_OK;

fail_seg:
    if (!fs->detached)
        close(fs->fd);
    free(fs);
    tent_segment_free(seg);
    tent_buffer_free(buf);
    return rc;
fail_buf:
    close(fs->fd);
    free(fs);
    free(buf);
    return rc;
}

int tent_file_segment_close(struct tent_engine *e, uint64_t handle)
{
    /* reg_lock orders the transports' remove_buffer; the local segment's
     * lock (write) keeps every submit out while the buffer's pins are
     * checked: a submit resolves and pins its target under that lock (read),
     * so either it pinned the buffer before (busy) or it finds no segment. */
    pthread_mutex_lock(&e->reg_lock);
    pthread_rwlock_wrlock(&e->local->lock);
    pthread_mutex_lock(&e->seg_lock);
    struct tent_segment *seg = handle < e->nsegs ? e->segs[handle] : NULL;
    int rc = TENT_OK;
    if (!seg || seg->type != TYPE_FILE) {
        rc = tent_set_error(TENT_ENOSEGMENT,
                            "tent_close_segment: unknown segment id %llu",
                            (unsigned long long)handle);
    } else if (seg->nbufs && atomic_load(&seg->bufs[0]->inflight) > 0) {
        rc = tent_set_error(TENT_EBUSY,
                            "tent_close_segment: %d task(s) still use file "
                            "segment '%s'",
                            atomic_load(&seg->bufs[0]->inflight), seg->v.name);
    } else {
        e->segs[handle] = NULL;
        seg->next_closed = e->closed_segs;
        e->closed_segs = seg;
    }
    pthread_mutex_unlock(&e->seg_lock);
    pthread_rwlock_unlock(&e->local->lock);
    if (rc == TENT_OK) {
        detach_locked(e, seg);
        LOG_DEBUG("closed file segment '%s' (id %llu)", seg->v.name,
                  (unsigned long long)handle);
    }
    pthread_mutex_unlock(&e->reg_lock);
    return rc;
}

static void teardown_one(struct tent_engine *e, struct tent_segment *seg)
{
    if (!seg || seg->type != TYPE_FILE || !seg->file)
        return;
    if (seg->nbufs && atomic_load(&seg->bufs[0]->inflight) > 0)
        LOG_WARN("file segment '%s' closed at teardown with %d task(s) on it",
                 seg->v.name, atomic_load(&seg->bufs[0]->inflight));
    detach_locked(e, seg);
    free(seg->file);
    seg->file = NULL;
}

void tent_file_segments_teardown(struct tent_engine *e)
{
    pthread_mutex_lock(&e->reg_lock);
    for (size_t i = 1; i < e->nsegs; i++)
        teardown_one(e, e->segs[i]);
    for (struct tent_segment *s = e->closed_segs; s; s = s->next_closed)
        teardown_one(e, s);
    pthread_mutex_unlock(&e->reg_lock);
}
