/* mf_host host_shm: shared mappings of a same-host peer's memory.
 *
 * Cross-memory attach pins the peer's pages on every call and copies page
 * by page; a peer range backed by a shared file mapping (a memfd or a
 * shm_open file, as TENT's tent_allocate_memory makes) can instead be
 * mapped here once and copied with memcpy.  Nothing on the wire changes:
 * the backing file is found from this side through /proc/<pid>/maps, and
 * opened through /proc/<pid>/fd/<n> (the peer holds it open), which needs
 * the same permission as reading the peer's memory.  Any step that fails
 * leaves the range unmapped and its copies go through cross-memory attach
 * as before.  The rules that keep this as safe as the attach path are on
 * mfh_shm_copy, mfh_shm_invalidate and mfh_shm_peer_alive. */
#include "mf_host.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

struct mfh_map {
    uint64_t base; /* the peer's registered range */
    size_t len;
    void *mem; /* our mapping of its page-aligned cover; NULL = not mappable */
    size_t mem_len;
    size_t delta; /* base - start of the cover */
};

struct backing {
    unsigned maj, min;
    unsigned long long ino;
    uint64_t off; /* file offset of the range's first byte */
};

/* The file behind [base, base+len) of pid's address space: read-write
 * shared mappings of one file, contiguous in address and file offset. */
static int find_backing(pid_t pid, uint64_t base, size_t len,
                        struct backing *out)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    uint64_t want = base, end = base + len;
    int rc = -1;
    while (getline(&line, &cap, f) > 0) {
        unsigned long long s, e, o, ino;
        unsigned maj, min;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &s, &e, perms, &o,
                   &maj, &min, &ino) != 7)
            continue;
        if (e <= want)
            continue;
        if (s > want || strlen(perms) < 4 || perms[0] != 'r' ||
            perms[1] != 'w' || perms[3] != 's' || ino == 0)
            break;
        uint64_t foff = o + (want - s);
        if (want == base) {
            *out = (struct backing){
                .maj = maj, .min = min, .ino = ino, .off = foff};
        } else if (maj != out->maj || min != out->min || ino != out->ino ||
                   foff != out->off + (want - base)) {
            break;
        }
        want = e;
        if (want >= end) {
            rc = 0;
            break;
        }
    }
    free(line);
    fclose(f);
    return rc;
}

/* Opens the file of b through one of pid's descriptors; -1 if none. */
static int open_backing(pid_t pid, const struct backing *b, uint64_t need)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int fd = -1;
    struct dirent *de;
    while (fd < 0 && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char p[64 + sizeof(de->d_name)];
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode) ||
            (unsigned long long)st.st_ino != b->ino ||
            major(st.st_dev) != b->maj || minor(st.st_dev) != b->min)
            continue;
        int f = open(p, O_RDWR | O_CLOEXEC);
        if (f < 0)
            continue;
        /* the descriptor may have been reused since stat() */
        struct stat st2;
        if (fstat(f, &st2) != 0 || st2.st_ino != st.st_ino ||
            st2.st_dev != st.st_dev || (uint64_t)st2.st_size < need) {
            close(f);
            continue;
        }
        fd = f;
    }
    closedir(d);
    return fd;
}

/* Maps the registered range [base, base+len) of peer p, or records that it
 * cannot be mapped.  Caller holds p->map_lock for writing. */
static void map_range_locked(struct mfh_peer *p, uint64_t base, size_t len)
{
    for (size_t i = 0; i < p->n_maps; i++)
        if (p->maps[i].base == base && p->maps[i].len == len)
            return; /* another worker got here first */
    if (p->n_maps == p->cap_maps) {
        size_t cap = p->cap_maps ? 2 * p->cap_maps : 8;
        struct mfh_map *m = realloc(p->maps, cap * sizeof(*m));
        if (!m)
            return;
        p->maps = m;
        p->cap_maps = cap;
    }
    struct mfh_map *m = &p->maps[p->n_maps];
    *m = (struct mfh_map){.base = base, .len = len};
    struct backing b;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg > 0 && find_backing(p->pid, base, len, &b) == 0) {
        uint64_t aoff = b.off & ~((uint64_t)pg - 1);
        size_t delta = (size_t)(b.off - aoff);
        size_t mlen = (len + delta + (size_t)pg - 1) & ~((size_t)pg - 1);
        int fd = open_backing(p->pid, &b, b.off + len);
        if (fd >= 0) {
            void *mem = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                             (off_t)aoff);
            close(fd);
            if (mem != MAP_FAILED) {
                m->mem = mem;
                m->mem_len = mlen;
                m->delta = delta;
            } else {
                MFH_DEBUG("%s: mmap of %s's range [0x%llx, +%zu): %s",
                          p->h->uid, p->uid, (unsigned long long)base, len,
                          strerror(errno));
            }
        }
    }
    MFH_DEBUG("%s: range [0x%llx, +%zu) of %s: %s", p->h->uid,
              (unsigned long long)base, len, p->uid,
              m->mem ? "shared mapping" : "cross-memory attach");
    p->n_maps++;
}

static const struct mfh_map *find_map_locked(struct mfh_peer *p, uint64_t addr,
                                             size_t len)
{
    for (size_t i = 0; i < p->n_maps; i++) {
        const struct mfh_map *m = &p->maps[i];
        if (addr >= m->base && addr - m->base <= m->len &&
            len <= m->len - (addr - m->base))
            return m;
    }
    return NULL;
}

/* The registered range of p (cached) wholly containing [addr, +len). */
static bool peer_range_of(struct mfh_peer *p, uint64_t addr, size_t len,
                          uint64_t *base, size_t *rlen)
{
    bool found = false;
    pthread_mutex_lock(&p->cache_lock);
    for (size_t i = 0; p->cache_valid && i < p->n_cache && !found; i++) {
        const struct mfh_range *r = &p->cache[i];
        if (addr >= r->base && addr - r->base <= r->len &&
            len <= r->len - (addr - r->base)) {
            *base = r->base;
            *rlen = r->len;
            found = true;
        }
    }
    pthread_mutex_unlock(&p->cache_lock);
    return found;
}

/* Copies slice s through a mapping, or MFH_SHM_NOMAP (then cross-memory
 * attach).  Only when its remote range lies in one range the peer
 * registered (the batch was checked against those before any byte moved)
 * and its local range in memory registered with this instance, so that a
 * bad local buffer still fails with an error rather than a fault. */
int32_t mfh_shm_copy(struct mfh_peer *p, smem_trans_opcode_t op,
                     const struct mfh_slice *s)
{
    if (!mfh_range_registered(p->h, s->local, s->len))
        return MFH_SHM_NOMAP;
    pthread_rwlock_rdlock(&p->map_lock);
    const struct mfh_map *m = find_map_locked(p, s->remote, s->len);
    if (!m) {
        pthread_rwlock_unlock(&p->map_lock);
        uint64_t base = 0;
        size_t len = 0;
        if (!peer_range_of(p, s->remote, s->len, &base, &len))
            return MFH_SHM_NOMAP;
        pthread_rwlock_wrlock(&p->map_lock);
        map_range_locked(p, base, len);
        pthread_rwlock_unlock(&p->map_lock);
        pthread_rwlock_rdlock(&p->map_lock);
        m = find_map_locked(p, s->remote, s->len);
    }
    if (!m || !m->mem) {
        pthread_rwlock_unlock(&p->map_lock);
        return MFH_SHM_NOMAP;
    }
    char *r = (char *)m->mem + m->delta + (size_t)(s->remote - m->base);
    /* The peer writes or reads these bytes only after the batch's result,
     * in another process: hidden from TSan like the kernel's copies. */
    TENT_USER_IO_BEGIN();
    if (op == SMEM_TRANS_OP_WRITE)
        memcpy(r, (const void *)s->local, s->len);
    else
        memcpy((void *)s->local, r, s->len);
    TENT_USER_IO_END();
    pthread_rwlock_unlock(&p->map_lock);
    return SM_OK;
}

/* A mapping keeps the file alive after the peer dies, so a batch that
 * copied through one completes only if this is true after its last byte. */
bool mfh_shm_peer_alive(struct mfh_peer *p)
{
    uint64_t gen = 0;
    struct iovec l = {.iov_base = &gen, .iov_len = sizeof(gen)};
    struct iovec r = {.iov_base = (void *)(uintptr_t)p->gen_addr,
                      .iov_len = sizeof(gen)};
    return !atomic_load(&p->down) &&
           process_vm_readv(p->pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof(gen);
}

static void unmap_all_locked(struct mfh_peer *p)
{
    for (size_t i = 0; i < p->n_maps; i++)
        if (p->maps[i].mem)
            munmap(p->maps[i].mem, p->maps[i].mem_len);
    p->n_maps = 0;
}

/* Drops p's mappings; called whenever its registrations change (the range
 * cache is refreshed). */
void mfh_shm_invalidate(struct mfh_peer *p)
{
    pthread_rwlock_wrlock(&p->map_lock);
    unmap_all_locked(p);
    pthread_rwlock_unlock(&p->map_lock);
}

void mfh_shm_release(struct mfh_peer *p)
{
    unmap_all_locked(p);
    free(p->maps);
    p->maps = NULL;
    p->cap_maps = 0;
    pthread_rwlock_destroy(&p->map_lock);
}
