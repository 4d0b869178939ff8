/* io_uring transport: what tests and benchmarks may read of it. */
#ifndef TENT_TRANSPORT_IO_URING_H
#define TENT_TRANSPORT_IO_URING_H

#include "transport/transport.h"

#include <stdint.h>

/* Counts since install (relaxed atomics, read without a lock). */
struct tent_iouring_counters {
    uint64_t direct_ios;   /* SQEs on the O_DIRECT descriptor */
    uint64_t buffered_ios; /* SQEs through the page cache (unaligned) */
    uint64_t fixed_bufs;   /* SQEs on a registered buffer */
    uint64_t fixed_files;  /* SQEs on a registered file */
    uint64_t resubmits;    /* short transfers continued */
    uint64_t fsyncs;       /* fdatasync SQEs (transports/io_uring/sync) */
    int rings;             /* worker rings */
    bool sqpoll;           /* the rings poll their submission queue */
};

/* t must be an installed io_uring transport (ops->type TRANSPORT_IOURING). */
void tent_iouring_counters(struct tent_transport *t,
                           struct tent_iouring_counters *out);

#endif
