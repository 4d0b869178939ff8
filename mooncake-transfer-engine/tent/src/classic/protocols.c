/* Mooncake's protocol names and the TENT transports they run as (see
 * protocols.h).  libc only: the classic library, the Python extension and
 * tebench compile it. */
#include "classic/protocols.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Mooncake's protocol names -> transports.def names: the one table.
 * Several of Mooncake's protocols are one TENT transport (efa and cxi are
 * rdma's NICs, ascend is memfabric); "unspec" is a protocol TENT has no
 * transport type for.  fabric: the libfabric provider that runs the
 * protocol's NICs, when the libfabric transport is installed (this engine
 * has no rdma transport of its own). */
static const struct {
    const char *proto, *xport, *fabric;
} g_protocols[] = {
    {"tcp", "tcp", NULL},
    {"shm", "shm", NULL},
    {"ascend", "memfabric", NULL},
    {"memfabric", "memfabric", NULL},
    {"rdma", "rdma", "verbs;ofi_rxm"},
    {"efa", "rdma", "efa"},
    {"cxi", "rdma", "cxi"},
    {"barex", "rdma", NULL},
    {"nvlink", "nvlink", NULL},
    {"nvlink_intra", "nvlink", NULL},
    {"hip", "nvlink", NULL},
    {"maca", "nvlink", NULL},
    {"musa", "nvlink", NULL},
    {"mnnvl", "mnnvl", NULL},
    {"ub", "ub", NULL},
    {"ubshmem", "ub", NULL},
    {"sunrise_link", "sunrise_link", NULL},
    {"tpu", "tpu", NULL},
    {"mpcomm", "mpcomm", NULL},
    {"gds", "gds", NULL},
    {"nvmeof", "gds", NULL},
    {"io_uring", "io_uring", NULL},
    {"cxl", "unspec", NULL},
    {"nccl", "unspec", NULL},
};

const char *classic_protocol_xport(const char *proto)
{
    for (size_t i = 0; proto && i < sizeof(g_protocols) / sizeof(*g_protocols);
         i++)
        if (strcmp(proto, g_protocols[i].proto) == 0)
            return g_protocols[i].xport;
    return NULL;
}

const char *classic_protocol_fabric(const char *proto)
{
    for (size_t i = 0; proto && i < sizeof(g_protocols) / sizeof(*g_protocols);
         i++) {
        if (strcmp(proto, g_protocols[i].proto) != 0)
            continue;
        if (!g_protocols[i].fabric)
            return NULL;
        /* MC_FABRIC_PROVIDER_<PROTO> names another provider for it (a
         * site's own, or tcp;ofi_rxm where there is no device) */
        char name[64];
        size_t k = 0;
        k += (size_t)snprintf(name, sizeof(name), "MC_FABRIC_PROVIDER_");
        for (const char *c = proto; *c && k + 1 < sizeof(name); c++)
            name[k++] = (*c >= 'a' && *c <= 'z') ? (char)(*c - 'a' + 'A') : *c;
        name[k] = '\0';
        const char *v = getenv(name);
        return v && *v ? v : g_protocols[i].fabric;
    }
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
