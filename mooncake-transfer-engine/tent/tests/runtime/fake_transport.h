/* Test-only transports driven through the real engine.
 *
 * fake: copies bytes with memcpy at submit and reports the task after a
 * programmable number of polls; can fail chosen submits, fail at completion,
 * fail the status query, never complete, complete only after a delay,
 * report reduced capabilities or an unreachable target.  Two instances
 * ("fake_a", "fake_b", "fake_c") let tests exercise selection and failover. */
#ifndef TENT_TEST_FAKE_TRANSPORT_H
#define TENT_TEST_FAKE_TRANSPORT_H

#include "transport/transport.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define FAKE_A_TYPE 20
#define FAKE_B_TYPE 21
#define FAKE_C_TYPE 22

struct fake_behavior {
    int polls_before_done; /* PENDING for this many status calls */
    bool fail_completion;  /* terminal FAILED instead of COMPLETED */
    int fail_code;         /* its code (TENT_EIO via reset) */
    int refuse_code;       /* code of a refused submit (TENT_EIO via reset) */
    int fail_submit_every; /* refuse request k when k % n == n-1 (0 off) */
    bool fail_all_submits;
    int status_error; /* status returns this (<0) instead */
    bool never_complete;
    bool fail_install;
    bool copy_bytes;              /* really memcpy (default true via reset) */
    uint64_t fail_submit_slots;   /* refuse the requests of these slots (bit) */
    long complete_after_ns;       /* PENDING until this long after submit */
    uint32_t caps;                /* capabilities (TENT_CAP_ALL via reset) */
    bool unreachable;             /* can_reach answers false */
    uintptr_t refuse_buffer_base; /* add_buffer of a buffer here: TENT_EIO */
    int fail_native;              /* native of a failed completion (-1) */
    bool durable; /* read at install: the instance's tent_transport.durable */
    bool done_at_submit; /* tent_xfer_result.done: COMPLETED in submit */
};

struct fake_stats {
    atomic_int submitted; /* requests accepted */
    atomic_int refused;   /* requests refused at submit */
    atomic_int status_calls;
    atomic_int completed;
    atomic_int failed;
    atomic_int installs;
    atomic_int buffers; /* add_buffer - remove_buffer */
    atomic_int durable_writes; /* accepted WRITEs with tent_xfer.durable */
};

extern struct fake_behavior fake_behavior[3];
extern struct fake_stats fake_stats[3];
extern const struct tent_transport_ops fake_a_ops, fake_b_ops, fake_c_ops;

/* Registers the three fakes (idempotent) and resets behaviour and stats. */
void fake_transports_setup(void);
void fake_transports_reset(void);

#endif
