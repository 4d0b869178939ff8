/* Parsers of the shm fields a peer publishes in its descriptor: pure
 * functions, fuzzed by fuzz/fuzz_shm_handle.c. */
#ifndef TENT_TRANSPORT_SHM_HANDLE_H
#define TENT_TRANSPORT_SHM_HANDLE_H

#include <stddef.h>

/* The decimal at s (digits only, no sign or space, fitting in 64 bits):
 * 0 with *v and *end one past its last digit, else -1. */
int tent_shm_parse_u64(const char *s, const char **end, unsigned long long *v);
/* "memfd:<fd>:<inode>" -> fd >= 0 and inode; 0 or TENT_EPROTO. */
int tent_shm_parse_handle(const char *s, int *fd, unsigned long long *ino);
/* The "pid" attribute: a decimal in 1..2^30, else -1. */
long tent_shm_parse_pid(const char *s);

struct tent_transport;
/* Mappings of peer memory the shm transport t holds now (cached or kept
 * for copies awaiting their check): for tests and benchmarks. */
size_t tent_shm_mapping_count(struct tent_transport *t);
/* Peers' copies into t's engine's memory running now (odd slots of its
 * control page): for tests. */
int tent_shm_copies_in_progress(struct tent_transport *t);

#endif
