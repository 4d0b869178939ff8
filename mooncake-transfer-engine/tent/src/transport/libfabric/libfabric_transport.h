/* The libfabric transport's hooks for tests. */
#ifndef TENT_TRANSPORT_LIBFABRIC_TRANSPORT_H
#define TENT_TRANSPORT_LIBFABRIC_TRANSPORT_H

/* For tests: the next count operations any libfabric transport of the
 * process posts on rail index rail (its local rails, in fi_getinfo's
 * order) are not handed to the provider but fail as if its CQ had
 * reported the connection reset (a path failure: the slice moves to
 * another rail when there is one).  count 0 disarms it. */
void tent_libfabric_fault_rail(int rail, unsigned count);
/* Faults armed and not yet taken. */
unsigned tent_libfabric_fault_left(void);
/* For tests: the next count posts of any libfabric transport of the
 * process (any rail) are answered FI_EAGAIN without reaching the provider,
 * as a provider whose queues are full does; the slice waits and is posted
 * again.  count 0 disarms it. */
void tent_libfabric_fault_eagain(unsigned count);
/* EAGAIN answers armed and not yet given. */
unsigned tent_libfabric_eagain_left(void);

#endif
