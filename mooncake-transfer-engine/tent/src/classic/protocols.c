/* Mooncake's protocol names and the TENT transports they run as (see
 * protocols.h).  libc only: the classic library, the Python extension and
 * tebench compile it. */
#include "classic/protocols.h"

#include <stdio.h>
#include <string.h>

/* Mooncake's protocol names -> transports.def names: the one table.
 * Several of Mooncake's protocols are one TENT transport (efa and cxi are
 * rdma's NICs, ascend is memfabric); "unspec" is a protocol TENT has no
 * transport type for. */
static const struct {
    const char *proto, *xport;
} g_protocols[] = {
    {"tcp", "tcp"},
    {"shm", "shm"},
    {"ascend", "memfabric"},
    {"memfabric", "memfabric"},
    {"rdma", "rdma"},
    {"efa", "rdma"},
    {"cxi", "rdma"},
    {"barex", "rdma"},
    {"nvlink", "nvlink"},
    {"nvlink_intra", "nvlink"},
    {"hip", "nvlink"},
    {"maca", "nvlink"},
    {"musa", "nvlink"},
    {"mnnvl", "mnnvl"},
    {"ub", "ub"},
    {"ubshmem", "ub"},
    {"sunrise_link", "sunrise_link"},
    {"tpu", "tpu"},
    {"mpcomm", "mpcomm"},
    {"gds", "gds"},
    {"nvmeof", "gds"},
    {"io_uring", "io_uring"},
    {"cxl", "unspec"},
    {"nccl", "unspec"},
};

const char *classic_protocol_xport(const char *proto)
{
    for (size_t i = 0; proto && i < sizeof(g_protocols) / sizeof(*g_protocols);
         i++)
        if (strcmp(proto, g_protocols[i].proto) == 0)
            return g_protocols[i].xport;
    return NULL;
}

const char *classic_protocol_at(size_t i, const char **xport)
{
    if (i >= sizeof(g_protocols) / sizeof(*g_protocols))
        return NULL;
    if (xport)
        *xport = g_protocols[i].xport;
    return g_protocols[i].proto;
}

void classic_protocol_list(char *buf, size_t len)
{
    size_t l = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(g_protocols) / sizeof(*g_protocols); i++) {
        int n = snprintf(buf + l, len - l, "%s%s", i ? ", " : "",
                         g_protocols[i].proto);
        if (n < 0 || (size_t)n >= len - l)
            break;
        l += (size_t)n;
    }
}
