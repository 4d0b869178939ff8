/* Priority slots shared by the engines of one host (TENT's qos.md: global
 * slot coordination, transports/<name>/shared_quota_shm_path and
 * slot_rotation_interval_ms).
 *
 * A small POSIX shared-memory region, named by shared_quota_shm_path, that
 * every engine of the host configured with the same name maps.  It holds
 * TENT's rotating slot -- slot = (now / interval) mod 3; slot 0 admits HIGH
 * only, slot 1 HIGH and MEDIUM, slot 2 every class (tent_slots_allows) --
 * and, per class, when that class last sent on this host
 * (tent_slots_note), so an engine that sends bulk (LOW) sees the
 * latency-critical traffic of another process (tent_slots_busy) and yields
 * to it as it yields to its own (sched/rails.h, tent_rail_yield_pace).
 *
 * Times are CLOCK_MONOTONIC nanoseconds (tent_now_ns), which every process
 * of the host shares.  The interval is the first engine's to create the
 * region; later ones with another interval use it and say so.  Updates are
 * relaxed atomic stores, at most one per class per SLOT_NOTE_GRAIN_NS, so
 * the hot path writes the shared line rarely. */
#ifndef TENT_SCHED_SLOTS_H
#define TENT_SCHED_SLOTS_H

#include <stdbool.h>
#include <stdint.h>

#define TENT_SLOTS_NCLASS 3 /* TENT's PRIO_HIGH, PRIO_MEDIUM, PRIO_LOW */

struct tent_slots;

/* Maps (creating if needed) the region name ("/name" or "name"), with TENT's
 * rotation interval_ms (>= 1) when it creates it.  TENT_EINVAL for a bad
 * name, TENT_EIO naming the call and the name when it cannot be opened or
 * holds something else. */
int tent_slots_open(const char *name, int interval_ms, struct tent_slots **out);
void tent_slots_close(struct tent_slots *s);
/* The rotation interval in force (the creator's), ms. */
int tent_slots_interval_ms(const struct tent_slots *s);
/* TENT's current slot at now (0..2), also stored in the region. */
int tent_slots_current(struct tent_slots *s, uint64_t now);
/* TENT's canSend: whether class prio may send in the slot of now. */
bool tent_slots_allows(struct tent_slots *s, int prio, uint64_t now);
/* Class prio (0..2) sent on this host at now. */
void tent_slots_note(struct tent_slots *s, int prio, uint64_t now);
/* When a class more urgent than prio last sent on this host (0: never). */
uint64_t tent_slots_last_above(const struct tent_slots *s, int prio);
/* Whether a class more urgent than prio sent within window_ns of now. */
bool tent_slots_busy(const struct tent_slots *s, int prio, uint64_t now,
                     uint64_t window_ns);

/* TENT's hold of class prio at now, on a busy host: prio's slot has not
 * come (tent_slots_allows is false) while a more urgent class sent on the
 * host within the last rotation (3 intervals).  So LOW waits for slot 2
 * only while HIGH or MEDIUM traffic runs; on a quiet host it goes on. */
bool tent_slots_holds(struct tent_slots *s, int prio, uint64_t now);
/* The start of the next slot after now (CLOCK_MONOTONIC ns). */
uint64_t tent_slots_next_ns(const struct tent_slots *s, uint64_t now);
/* Waits (sleeps) while tent_slots_holds(s, prio, now), at most max_ns;
 * returns the ns waited. */
uint64_t tent_slots_wait(struct tent_slots *s, int prio, uint64_t max_ns);

#endif
