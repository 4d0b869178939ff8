/* Test-only fault-injecting decorator: a transport named "fault" whose ops
 * wrap another transport's ops (the "inner" one, e.g. fake_c) and inject
 * failures on the way: refuse the Nth submit call, refuse chosen requests,
 * turn a COMPLETED into FAILED, delay completion, never complete, fail the
 * status query.  fault_reset() (call it in every setup/teardown) clears the
 * faults and the counters. */
#ifndef TENT_TEST_FAULT_TRANSPORT_H
#define TENT_TEST_FAULT_TRANSPORT_H

#include "transport/transport.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define FAULT_TYPE 23

struct fault_config {
    int fail_nth_submit;        /* 1-based submit call refused whole (0 off) */
    uint64_t fail_submit_slots; /* requests of these slots (bit) refused */
    int refuse_code;            /* code of a refusal (TENT_EIO via reset) */
    uint64_t fail_complete_slots; /* these slots end FAILED, not COMPLETED */
    int complete_code;        /* code of such a FAILED (TENT_EIO via reset) */
    bool completed_to_failed; /* every inner COMPLETED becomes FAILED */
    int delay_polls;          /* extra PENDING polls before asking inner */
    long delay_ns;            /* PENDING until this long after submit */
    bool never_complete;
    int status_error;          /* status returns this (<0) instead */
    int quiesce_error;         /* quiesce returns this (<0) instead */
    atomic_bool *block_status; /* while *it is true, status calls wait */
};

struct fault_stats {
    atomic_int submit_calls;
    atomic_int forwarded; /* requests handed to the inner transport */
    atomic_int refused;   /* requests refused by the decorator */
    atomic_int converted; /* COMPLETED turned into FAILED */
    atomic_int installs;
    atomic_int blocked; /* status calls that waited on block_status */
};

extern struct fault_config fault_cfg;
extern struct fault_stats fault_stats;
extern const struct tent_transport_ops fault_ops;

/* Makes "fault" wrap inner and registers it (idempotent); resets. */
void fault_wrap(const struct tent_transport_ops *inner);
void fault_reset(void);

#endif
