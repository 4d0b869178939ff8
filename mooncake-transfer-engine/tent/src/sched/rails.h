/* Rails: the paths between this engine and a peer, and which one each slice
 * of a transfer takes.
 *
 * A transport that serves NICs builds one rail per usable (local NIC, peer
 * NIC) pair of a peer and asks its rail set, slice by slice, where to send.
 * The answer is TENT's slice spraying: the rail with the least predicted
 * completion time, (in-flight bytes + slice) / EWMA bandwidth, with one
 * pick in probe_every going round robin so every rail keeps a fresh
 * estimate.  A rail much slower than the best (below min_share, by the
 * busy-time meter of rails.c) gets probe slices only; a rail whose slice
 * failed is paused and probed back with exponential back-off.  The policy
 * lives here, below the runtime and the transports, so every transport
 * with more than one path inherits it; the engine owns one tent_sched,
 * which also keeps the per-NIC figures and per-rail metrics.
 *
 * Thread safety: every call may come from any thread; a rail set has one
 * lock, held briefly per pick and completion (a set of one rail skips it
 * when picking). */
#ifndef TENT_SCHED_RAILS_H
#define TENT_SCHED_RAILS_H

#include "net/nics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tent_config;

#define TENT_MAX_RAILS 16

/* Scheduling parameters, per transport (transports/<name>/<key>). */
struct tent_sched_params {
    bool smart;           /* enable_smart_scheduling (false: round robin) */
    double learning_rate; /* bandwidth_learning_rate */
    int probe_every;      /* rail_probe_every: picks per probe pick */
    double min_share;     /* rail_min_share */
    int backoff_min_ms;   /* rail_backoff_ms */
    int backoff_max_ms;   /* rail_backoff_max_ms */
    double default_bw;    /* bytes/s when the link speed is unknown */
    double ewma_min_mult; /* ewma_min_bandwidth_multiplier */
    double ewma_max_mult; /* ewma_max_bandwidth_multiplier */
    /* Set by a transport that holds the bytes of its yielding class (LOW)
     * on a rail's wire to at most this many (tcp: three low_slice_size
     * windows); 0: it does not, and they count in full for every pick. */
    uint64_t yield_wire_max;
    /* The smallest slice whose completion measures bandwidth (the EWMA,
     * the busy-time meter) and that may take a periodic probe:
     * TENT_RAIL_SAMPLE_MIN, or this when smaller (0: that).  A transport
     * that cuts bulk transfers into smaller slices (tcp: low_slice_size
     * or slice_size below 64 KiB) sets it to its smallest bulk slice, or
     * its rails would never learn their speed and would stay at the
     * initial estimate. */
    uint64_t sample_min;
    /* low_pacing_gain (0.9): while latency-critical slices go to a peer,
     * the yielding class is paced at this fraction of each rail's capacity
     * (tent_rail_yield_pace; 0: never paced). */
    double yield_pace_gain;
    /* shared_quota_shm_path ("": off) and slot_rotation_interval_ms (2):
     * TENT's priority slots shared by the engines of the host
     * (sched/slots.h); with them, the yielding class is paced also while
     * another process of the host sends latency-critical slices. */
    char quota_shm[128];
    int slot_interval_ms;
};

/* Reads the parameters under prefix ("transports/tcp"); defaults for the
 * keys that are absent, 0 for the fields a transport sets itself.  TENT_ECONFIG
 * (message naming the key) for a value out of range. */
int tent_sched_params_load(const struct tent_config *cfg, const char *prefix,
                           struct tent_sched_params *out);

/* One path: from a local NIC (its address bound, "" = the kernel's
 * choice) to a peer NIC's host:port. */
struct tent_rail {
    char local_nic[TENT_NIC_NAME_MAX]; /* "" = the kernel's choice */
    char local_addr[TENT_NIC_ADDR_MAX];
    char peer_nic[TENT_NIC_NAME_MAX];
    char peer_host[TENT_NIC_ADDR_MAX];
    uint16_t peer_port;
    double link_bw; /* bytes/s of the slower NIC when known, else 0 */
};

struct tent_sched;
struct tent_railset;

/* The engine's scheduler (NULL on allocation failure). */
struct tent_sched *tent_sched_new(void);
/* Frees s once every rail set is freed; with sets still open (an abandoned
 * transport's) it is kept, and says so. */
void tent_sched_free(struct tent_sched *s);

/* A rail set of n (1..TENT_MAX_RAILS) rails towards peer for transport
 * owner ("tcp"); p is copied. */
int tent_railset_new(struct tent_sched *s, const struct tent_sched_params *p,
                     const char *owner, const char *peer,
                     const struct tent_rail *rails, size_t n,
                     struct tent_railset **out);
void tent_railset_free(struct tent_railset *rs);

/* What a pick hands the slice, for its completion's sample. */
struct tent_rail_ticket {
    uint64_t start_ns;  /* when it was picked */
    uint64_t delivered; /* the rail's completed bytes then */
    uint64_t inflight;  /* the rail's bytes in flight then, its own included */
    bool yields;        /* of the yielding class (see tent_rail_pick) */
};

/* A slice smaller than this measures the path's delay, not its bandwidth:
 * its completion leaves the estimate alone (unless the transport's slices
 * are all smaller: sample_min). */
#define TENT_RAIL_SAMPLE_MIN (64u << 10)

/* Picks the rail for a slice of bytes, avoiding the rails of mask avoid
 * (bit i = rail i; a retry avoids the rails it failed on), and counts the
 * bytes in flight there.  The rail index, or -1 when every rail not avoided
 * is paused (nothing counted); with avoid 0 always a rail (when all are
 * paused, the one whose pause ends first).
 *
 * yields: the slice is of the class the transport serves last and holds
 * on the wire (LOW; see yield_wire_max).  Its predicted time counts
 * every byte in flight on a rail; that of any other slice counts the
 * rail's other bytes in full but its yielding bytes only up to what may
 * be on the wire (yield_wire_max): the rest waits behind it in the rail's
 * queues.  So a
 * latency-critical slice goes to the rail where it waits least, not to
 * the one with the least bulk queued per unit of bandwidth -- which, with
 * bulk spread in proportion to speed, is either rail at random. */
int tent_rail_pick(struct tent_railset *rs, uint64_t bytes, bool yields,
                   uint32_t avoid, struct tent_rail_ticket *tk);
/* The slice of bytes picked on rail i (with ticket tk) completed.
 *
 * Bandwidth is measured as delivery rate: when a slice completes, the
 * bytes the rail completed since the slice was picked (its own included)
 * over the time since then -- so slices that finish in a bunch on parallel
 * connections do not read as a burst of speed -- folded into the EWMA with
 * TENT's rule ewma = a * ewma + (1 - a) * sample, a =
 * bandwidth_learning_rate (0: the newest sample only; 1: never learn).
 * A slice smaller than TENT_RAIL_SAMPLE_MIN (or sample_min) says nothing about
 * bandwidth (a 4 KiB read takes its round trip, whatever the link's speed) and
 * would drag the estimate down -- with TENT's a = 0.01 one sample is nearly all
 * of it, and latency-critical small reads on an idle fast rail made it look
 * slower than a loaded slow one, so bulk work left it: such completions
 * leave the estimate alone and measure the rail's round trip instead.  A
 * slice that was alone on its rail has that round trip taken off its time
 * (the link idled during it). */
void tent_rail_complete(struct tent_railset *rs, int i, uint64_t bytes,
                        const struct tent_rail_ticket *tk);
/* It failed on rail i for a reason of the path (connection lost, no answer
 * in time): the rail is paused (a peer's refusal is not a rail failure:
 * complete it). */
void tent_rail_fail(struct tent_railset *rs, int i, uint64_t bytes,
                    const struct tent_rail_ticket *tk);
/* It leaves rail i without an outcome (moved to another rail unsent); a
 * probe left so is taken again by the next pick. */
void tent_rail_release(struct tent_railset *rs, int i, uint64_t bytes,
                       const struct tent_rail_ticket *tk);
/* Whether rail i takes slices now (not paused). */
bool tent_rail_usable(struct tent_railset *rs, int i);
/* Whether rail i may take more work than the picks gave it (a slice queued
 * on a busier rail): it is up and not too slow to get normal picks. */
bool tent_rail_may_take(struct tent_railset *rs, int i);
/* A slice of bytes moves from rail from, where it waited unsent, to rail
 * to: counted there with a fresh ticket. */
void tent_rail_move(struct tent_railset *rs, int from, int to, uint64_t bytes,
                    struct tent_rail_ticket *tk);
/* The rate (bytes/s, all its windows together) at which the yielding
 * class should go onto rail i's wire now; 0: unpaced.  While slices of
 * another class were picked in the set within the last second, it is
 * yield_pace_gain times the rail's capacity: so the yielding class never
 * fills the queues of a link -- a shaper's FIFO, a NIC's ring, where no
 * priority reaches a packet -- in front of a latency-critical request, yet
 * keeps nearly all of the link.  The capacity is what the busy-time meter
 * measured in spans in which nothing was paced (the highest of the last
 * eight such spans and those since, so one stalled span does not lower
 * it), at most the rail's link_bw when known.  Paced spans read the pace,
 * not the link, and are not learned from: following them would drag the
 * pace down with them.  So a rail is paced once eight spans of 100 ms busy
 * measured it unpaced; every 10 s of pacing one span goes unpaced to
 * measure it again (a capacity measured low, or a link that got faster, is
 * corrected under continuous latency-critical traffic); and a link that
 * slowed is learned when that traffic pauses for a second (meanwhile it is
 * no worse off than unpaced: its queue builds as it would have).  sending:
 * a window of the yielding class goes out at that pace now (the meter's
 * current span is marked paced). */
double tent_rail_yield_pace(struct tent_railset *rs, int i, bool sending);

/* The host-wide slots the set shares (shared_quota_shm_path), or NULL. */
struct tent_slots *tent_railset_slots(struct tent_railset *rs);

/* For tests: the clock of picks and completions (ns, monotonic; NULL: the
 * system's).  Set it before any rail set is used. */
void tent_sched_use_clock(uint64_t (*now)(void));

/* Lists a NIC a transport serves (bw: bytes/s, 0 = unknown), so that the
 * NIC stats show it before any rail uses it. */
void tent_sched_note_nic(struct tent_sched *s, const char *name, double bw);

/* Per NIC (local), what tent_get_nic_load_stats reports: the bytes in
 * flight on its rails and the EWMA bandwidth of its fastest rail (its
 * estimate before any rail was used). */
struct tent_nic_load {
    char name[64];
    uint64_t inflight_bytes;
    double ewma_bps; /* bytes per second */
};
/* Fills up to max entries; returns how many NICs there are. */
size_t tent_sched_nic_loads(struct tent_sched *s, struct tent_nic_load *out,
                            size_t max);

/* Per rail, for the metrics. */
struct tent_rail_load {
    char owner[16];
    char local_nic[TENT_NIC_NAME_MAX];
    /* "<peer segment>/<peer nic or address>" */
    char peer[256 + 1 + TENT_NIC_ADDR_MAX];
    uint64_t inflight_bytes;
    double ewma_bps;
    uint64_t bytes_total;
    uint64_t failures_total;
    uint64_t probes_total;
    /* the learned capacity that paces the yielding class, bytes/s; 0 until
     * CAP_MIN_SAMPLES unpaced samples measured it */
    double capacity_bps;
    bool paused;
};
/* Calls fn for every rail of every set, under the scheduler's lock (fn must
 * not call back into the scheduler). */
void tent_sched_foreach_rail(struct tent_sched *s,
                             void (*fn)(void *arg,
                                        const struct tent_rail_load *r),
                             void *arg);

#endif
