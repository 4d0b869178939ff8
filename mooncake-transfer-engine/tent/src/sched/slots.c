/* Host-wide priority slots (slots.h): the shared region and its updates. */
#include "sched/slots.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "tent/transfer_engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SLOTS_MAGIC   0x54454e54534c4f54ull /* "TENTSLOT" */
#define SLOTS_VERSION 1u
/* a class's time in the region is rewritten at most this often */
#define SLOT_NOTE_GRAIN_NS (1000000ull)
/* how long an opener waits for another one's initialisation */
#define INIT_WAIT_MS 1000

enum { ST_EMPTY, ST_INIT, ST_READY };

/* The region's layout; a fresh one is all zeroes (ftruncate). */
struct slots_shm {
    _Atomic uint32_t state;
    uint32_t version;
    uint64_t magic;
    uint32_t interval_ms;
    _Atomic int32_t current_slot;
    _Alignas(64) _Atomic uint64_t active_ns[TENT_SLOTS_NCLASS];
};

struct tent_slots {
    struct slots_shm *shm;
    char name[256];
};

int tent_slots_open(const char *name, int interval_ms, struct tent_slots **out)
{
    if (!name || !*name || strlen(name) > 200 || strchr(name + 1, '/'))
        return tent_set_error(TENT_EINVAL,
                              "shared_quota_shm_path '%s' is not a shared "
                              "memory name (\"/name\", no other '/')",
                              name ? name : "(null)");
    if (interval_ms < 1)
        return tent_set_error(TENT_EINVAL,
                              "slot_rotation_interval_ms %d is below 1",
                              interval_ms);
    struct tent_slots *s = calloc(1, sizeof(*s));
    if (!s)
        return tent_set_error(TENT_ENOMEM, "shared slots: out of memory");
    snprintf(s->name, sizeof(s->name), "%s%s", name[0] == '/' ? "" : "/", name);
    int fd = shm_open(s->name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        int err = errno;
        free(s);
        return tent_set_error(TENT_EIO, "shared slots: shm_open('%s'): %s",
                              name, strerror(err));
    }
    struct stat st;
    int rc = fstat(fd, &st);
    if (rc == 0 && st.st_size < (off_t)sizeof(struct slots_shm))
        rc = ftruncate(fd, sizeof(struct slots_shm)); /* grows with zeroes */
    void *p = rc == 0 ? mmap(NULL, sizeof(struct slots_shm),
                             PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) {
        free(s);
        return tent_set_error(TENT_EIO, "shared slots: mapping '%s' (%s): %s",
                              name, rc ? "ftruncate" : "mmap", strerror(err));
    }
    s->shm = p;
    uint32_t want = ST_EMPTY;
    if (atomic_compare_exchange_strong(&s->shm->state, &want, ST_INIT)) {
        s->shm->magic = SLOTS_MAGIC;
        s->shm->version = SLOTS_VERSION;
        s->shm->interval_ms = (uint32_t)interval_ms;
        atomic_store(&s->shm->state, ST_READY);
    } else {
        /* another engine creates it now: wait for it */
        uint64_t end = tent_now_ns() + INIT_WAIT_MS * 1000000ull;
        while (atomic_load(&s->shm->state) != ST_READY && tent_now_ns() < end)
            usleep(100);
    }
    if (atomic_load(&s->shm->state) != ST_READY ||
        s->shm->magic != SLOTS_MAGIC || s->shm->version != SLOTS_VERSION) {
        rc = tent_set_error(TENT_EIO,
                            "shared slots: '%s' holds something else than "
                            "TENT's slots of version %u (remove /dev/shm%s, "
                            "or name another)",
                            name, SLOTS_VERSION, s->name);
        munmap(s->shm, sizeof(struct slots_shm));
        free(s);
        return rc;
    }
    if (s->shm->interval_ms != (uint32_t)interval_ms)
        LOG_WARN("shared slots '%s': slot_rotation_interval_ms %d differs from "
                 "the %u ms of the engine that created it; using %u ms",
                 name, interval_ms, s->shm->interval_ms, s->shm->interval_ms);
    *out = s;
    return TENT_OK;
}

void tent_slots_close(struct tent_slots *s)
{
    if (!s)
        return;
    munmap(s->shm, sizeof(struct slots_shm));
    free(s);
}

int tent_slots_interval_ms(const struct tent_slots *s)
{
    return (int)s->shm->interval_ms;
}

int tent_slots_current(struct tent_slots *s, uint64_t now)
{
    uint64_t iv = (uint64_t)s->shm->interval_ms * 1000000ull;
    int slot = (int)((now / iv) % TENT_SLOTS_NCLASS);
    if (atomic_load_explicit(&s->shm->current_slot, memory_order_relaxed) !=
        slot)
        atomic_store_explicit(&s->shm->current_slot, slot,
                              memory_order_relaxed);
    return slot;
}

bool tent_slots_allows(struct tent_slots *s, int prio, uint64_t now)
{
    return prio <= tent_slots_current(s, now);
}

void tent_slots_note(struct tent_slots *s, int prio, uint64_t now)
{
    if (prio < 0 || prio >= TENT_SLOTS_NCLASS)
        return;
    _Atomic uint64_t *a = &s->shm->active_ns[prio];
    if (now >
        atomic_load_explicit(a, memory_order_relaxed) + SLOT_NOTE_GRAIN_NS)
        atomic_store_explicit(a, now, memory_order_relaxed);
}

uint64_t tent_slots_last_above(const struct tent_slots *s, int prio)
{
    uint64_t last = 0;
    for (int k = 0; k < prio && k < TENT_SLOTS_NCLASS; k++) {
        uint64_t t =
            atomic_load_explicit(&s->shm->active_ns[k], memory_order_relaxed);
        if (t > last)
            last = t;
    }
    return last;
}

bool tent_slots_busy(const struct tent_slots *s, int prio, uint64_t now,
                     uint64_t window_ns)
{
    uint64_t last = tent_slots_last_above(s, prio);
    return last && (now < last || now - last <= window_ns);
}

bool tent_slots_holds(struct tent_slots *s, int prio, uint64_t now)
{
    if (tent_slots_allows(s, prio, now))
        return false;
    uint64_t cycle =
        (uint64_t)s->shm->interval_ms * 1000000ull * TENT_SLOTS_NCLASS;
    return tent_slots_busy(s, prio, now, cycle);
}

uint64_t tent_slots_next_ns(const struct tent_slots *s, uint64_t now)
{
    uint64_t iv = (uint64_t)s->shm->interval_ms * 1000000ull;
    return (now / iv + 1) * iv;
}

uint64_t tent_slots_wait(struct tent_slots *s, int prio, uint64_t max_ns)
{
    uint64_t start = tent_now_ns(), now = start;
    while (now - start < max_ns && tent_slots_holds(s, prio, now)) {
        uint64_t until = tent_slots_next_ns(s, now);
        if (until - start > max_ns)
            until = start + max_ns;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                              .tv_nsec = (long)(until % 1000000000ull)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        now = tent_now_ns();
    }
    return now - start;
}
