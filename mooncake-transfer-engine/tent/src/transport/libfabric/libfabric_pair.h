/* libfabric_pair.h: which of a peer's rails each of our rails talks to.
 *
 * A rail is one NIC (fi_getinfo domain); its fabric name says which network
 * it sits on (tcp: the subnet, "10.77.1.0/24"; verbs: the GID prefix; efa,
 * shm: the provider).  Two hosts need not list their NICs in the same order,
 * so a rail goes to a peer rail on the same fabric first; rails of a fabric
 * the peer lacks (routed subnets, a peer that published no fabric names)
 * pair in order with the peer rails nobody matched. */
#ifndef TENT_LIBFABRIC_PAIR_H
#define TENT_LIBFABRIC_PAIR_H

#include <stdbool.h>

#define LF_PAIR_NONE (-1)

/* Whether a fabric name is the host's loopback network. */
bool lf_fabric_loopback(const char *fabric);

/* mine[k] (k < nmine): our rail k's fabric name; usable[k]: whether it may
 * reach this peer at all.  theirs[j] (j < ntheirs): the peer's rail j's
 * fabric name, "" where it published none; its loopback rails count only
 * when same_host.  Sets peer_of[k] to the peer rail of our rail k, or
 * LF_PAIR_NONE, and returns how many of our rails got one.  Several of our
 * rails on one fabric spread over the peer's rails on it in turn. */
int lf_pair_rails(const char *const *mine, const bool *usable, int nmine,
                  const char *const *theirs, int ntheirs, bool same_host,
                  int *peer_of);

#endif
