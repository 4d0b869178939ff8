/* The one table of Mooncake's protocol names (installTransport's and
 * initialize()'s "protocol": tcp, shm, ascend, rdma, efa, nvlink, gds ...)
 * and the transport of transports.def each one is in TENT.  The classic C
 * API, mooncake.engine and tebench read protocol names through it;
 * tent_classic_settings_test checks every entry against transports.def. */
#ifndef TENT_CLASSIC_PROTOCOLS_H
#define TENT_CLASSIC_PROTOCOLS_H

#include <stddef.h>

/* The transports.def name of a Mooncake protocol name (case matters, as
 * in Mooncake), "unspec" for one TENT has no transport type for; NULL for
 * a name Mooncake does not have. */
const char *classic_protocol_xport(const char *proto);

/* The libfabric provider that runs a protocol's NICs ("verbs;ofi_rxm" for
 * rdma, "efa", "cxi"; the environment's MC_FABRIC_PROVIDER_RDMA, _EFA or
 * _CXI when set and not empty), or NULL: the libfabric transport with it
 * stands in for a transport this engine does not have, when it installs. */
const char *classic_protocol_fabric(const char *proto);

/* The table's i-th protocol name and (xport, may be NULL) its transport;
 * NULL past the end. */
const char *classic_protocol_at(size_t i, const char **xport);

/* The table's protocol names separated by ", " into buf (for messages). */
void classic_protocol_list(char *buf, size_t len);

#endif
