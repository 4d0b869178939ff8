/* P2P metadata (TENT's metadata_type "p2p"): every engine runs an RPC server
 * and its segment name is "<host>:<port>" of that server; resolving a
 * segment fetches the descriptor from the peer's server.  Nothing is
 * published: the server answers from the live local segment. */
#include "common/compiler.h"
#include "common/error.h"
#include "meta/meta.h"
#include "rpc/rpc.h"

#include <stdio.h>
#include <stdlib.h>

struct tent_meta {
    struct tent_meta_env env;
};

int tent_meta_p2p_fetch(const struct tent_meta_env *env, const char *name,
                        const char *addr, struct tent_wire_desc *out)
{
    char host[256];
    uint16_t port;
    int rc = tent_rpc_parse_addr(addr ? addr : name, host, sizeof(host), &port);
    if (rc)
        return tent_set_error(TENT_ENOSEGMENT, "segment '%s' not found: %s",
                              name, tent_last_error());
    rc = tent_rpc_fetch_desc(env->auth, env->segment_name, host, port,
                             env->rpc_timeout_ms, out);
    if (rc)
        return tent_set_error(TENT_ENOSEGMENT,
                              "segment '%s' not found: fetching its "
                              "descriptor failed: %s",
                              name, tent_last_error());
    return TENT_OK;
}

static void p2p_default_name(const char *rpc_addr, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", rpc_addr);
}

static int p2p_start(const struct tent_meta_env *env, struct tent_meta **out)
{
    struct tent_meta *m = calloc(1, sizeof(*m));
    if (!m)
        return tent_set_error(TENT_ENOMEM, "metadata: out of memory");
    m->env = *env;
    *out = m;
    return TENT_OK;
}

static int p2p_fetch(struct tent_meta *m, const char *name, const char *addr,
                     struct tent_wire_desc *out)
{
    return tent_meta_p2p_fetch(&m->env, name, addr, out);
}

int tent_meta_p2p_notify(const struct tent_meta_env *env, const char *addr,
                         const char *name, const char *msg, const char *from)
{
    char host[256];
    uint16_t port;
    int rc = tent_rpc_parse_addr(addr, host, sizeof(host), &port);
    if (!rc)
        rc = tent_rpc_notify(env->auth, host, port, env->rpc_timeout_ms, name,
                             msg, from);
    return rc;
}

static int p2p_notify(struct tent_meta *m, const char *addr, const char *name,
                      const char *msg, const char *from)
{
    return tent_meta_p2p_notify(&m->env, addr, name, msg, from);
}

static void p2p_local_changed(TENT_UNUSED struct tent_meta *m)
{
    /* peers fetch from the live segment */
}

static void p2p_stop(struct tent_meta *m)
{
    free(m);
}

const struct tent_meta_ops tent_meta_p2p_ops = {
    .name = "p2p",
    .default_name = p2p_default_name,
    .start = p2p_start,
    .fetch = p2p_fetch,
    .notify = p2p_notify,
    .local_changed = p2p_local_changed,
    .stop = p2p_stop,
};
