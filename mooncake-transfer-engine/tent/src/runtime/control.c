/* The runtime's side of the control plane: it starts the RPC server with a
 * handler table (describe, notify; transports add their data frames through
 * their env, xport_env.c), names the
 * local segment, starts the metadata backend chosen by metadata_type and
 * adapts the backend's ops to the runtime's segment ops.  The layers below
 * (rpc/, meta/) see only those tables, never the engine. */
#include "runtime/control.h"

#include "common/auth.h"
#include "common/compiler.h"
#include "common/error.h"
#include "common/log.h"
#include "meta/meta.h"
#include "net/net.h"
#include "net/nics.h"
#include "rpc/rpc.h"
#include "runtime/engine.h"
#include "runtime/seg_desc.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- RPC server handlers --------------------------------------------------
 */

static char *rpc_describe(void *ctx, size_t *len)
{
    return tent_desc_export(ctx, len);
}

static int rpc_notify(void *ctx, const char *peer, const char *from_name,
                      const char *name, const char *msg)
{
    struct tent_engine *e = ctx;
    uint64_t from = 0; /* the sender's segment id here, if it is open */
    pthread_mutex_lock(&e->seg_lock);
    for (size_t i = 1; i < e->nsegs; i++)
        if (e->segs[i] && strcmp(e->segs[i]->v.name, from_name) == 0) {
            from = i;
            break;
        }
    pthread_mutex_unlock(&e->seg_lock);
    return tent_engine_deliver_notif(e, from, peer, from_name, name, msg);
}

/* ---- segment ops over the metadata backend --------------------------------
 */

/* The RPC address a segment published, else its name ("<host>:<port>"). */
static const char *peer_addr(const struct tent_segment *seg, const char *name,
                             char *buf, size_t cap)
{
    bool have = tent_segment_attr_copy(seg, "rpc_addr", buf, cap);
    return have && *buf ? buf : name;
}

static int ctrl_fetch(struct tent_engine *e, const char *name,
                      struct tent_segment *seg)
{
    char a[sizeof(((struct tent_attr *)0)->value)];
    /* a refresh goes to the address the segment published */
    const char *addr = seg->priv ? peer_addr(seg, name, a, sizeof(a)) : NULL;
    struct tent_wire_desc *d = calloc(1, sizeof(*d));
    if (!d)
        return tent_set_error(TENT_ENOMEM, "fetch '%s': out of memory", name);
    int rc = e->meta_ops->fetch(e->meta, name, addr, d);
    if (!rc) {
        rc = tent_desc_import(seg, d);
        LOG_DEBUG("fetched segment '%s': %zu buffer(s), host %s", name,
                  d->nbufs, d->host_id);
        tent_wire_desc_free(d);
    }
    free(d);
    return rc;
}

static void ctrl_release(TENT_UNUSED struct tent_engine *e,
                         struct tent_segment *seg)
{
    tent_desc_release(seg);
}

static int ctrl_notify(struct tent_engine *e, struct tent_segment *seg,
                       const char *name, const char *msg)
{
    char a[sizeof(((struct tent_attr *)0)->value)];
    return e->meta_ops->notify(e->meta,
                               peer_addr(seg, seg->v.name, a, sizeof(a)), name,
                               msg, e->segment_name);
}

static const struct tent_segment_ops ctrl_segment_ops = {
    .fetch = ctrl_fetch,
    .release = ctrl_release,
    .notify = ctrl_notify,
};

/* ---- lifecycle ------------------------------------------------------------
 */

/* boot_id identifies this boot of this machine; with the hostname it tells
 * same-host peers apart from remote ones without trusting addresses. */
static void host_identity(char *out, size_t cap)
{
    char boot[64] = "", host[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof(boot), f))
            boot[0] = 0;
        fclose(f);
        boot[strcspn(boot, "\n")] = 0;
    }
    if (gethostname(host, sizeof(host)) != 0)
        host[0] = 0;
    host[sizeof(host) - 1] = 0;
    snprintf(out, cap, "%s/%s", boot, host);
}

/* rpc_server_port_range: [min, max], ports the server may take when
 * rpc_server_port is 0 (Mooncake's 15000..17000 for a P2P handshake); both
 * 0 when not configured. */
static int port_range(struct tent_engine *e, int *min, int *max)
{
    const cJSON *n = tent_config_node(e->cfg, "rpc_server_port_range");
    *min = *max = 0;
    if (!n || cJSON_IsNull(n))
        return TENT_OK;
    if (!cJSON_IsArray(n))
        return tent_config_wrong_kind("rpc_server_port_range", n,
                                      "an array [min, max]");
    const cJSON *a = cJSON_GetArrayItem(n, 0), *b = cJSON_GetArrayItem(n, 1);
    if (cJSON_GetArraySize(n) != 2 || !cJSON_IsNumber(a) ||
        !cJSON_IsNumber(b) || a->valuedouble < 1 || b->valuedouble > 65535 ||
        a->valuedouble > b->valuedouble)
        return tent_set_error(TENT_ECONFIG,
                              "config key 'rpc_server_port_range' must be "
                              "[min, max] with 1 <= min <= max <= 65535");
    *min = (int)a->valuedouble;
    *max = (int)b->valuedouble;
    return TENT_OK;
}

int tent_ctrl_start(struct tent_engine *e)
{
    int64_t to, maxc, idle, frame, rate, spin;
    int rc = tent_config_get_int_range(e->cfg, "rpc_timeout_ms", 3000, 1,
                                       600000, &to);
    if (!rc)
        rc = tent_config_get_int_range(e->cfg, "rpc_max_connections",
                                       TENT_RPC_DEFAULT_MAX_CONNS, 1, 65536,
                                       &maxc);
    if (!rc)
        rc = tent_config_get_int_range(e->cfg, "rpc_idle_timeout_ms",
                                       TENT_RPC_DEFAULT_IDLE_MS, 1, 86400000,
                                       &idle);
    if (!rc)
        rc = tent_config_get_int_range(e->cfg, "rpc_frame_timeout_ms",
                                       TENT_RPC_DEFAULT_FRAME_MS, 1, 3600000,
                                       &frame);
    if (!rc)
        rc = tent_config_get_int_range(e->cfg, "rpc_frame_min_rate",
                                       TENT_RPC_DEFAULT_MIN_RATE, 0, 1 << 30,
                                       &rate);
    /* tcp's frames are what the server's workers spin for (rpc.h) */
    if (!rc)
        rc = tent_config_get_int_range(e->cfg, "transports/tcp/spin_us",
                                       TENT_RPC_DEFAULT_SPIN_US, 0,
                                       TENT_RPC_MAX_SPIN_US, &spin);
    bool follow = TENT_RPC_FOLLOW_DEFAULT;
    if (!rc)
        rc = tent_config_get_bool(e->cfg, TENT_RPC_FOLLOW_KEY,
                                  TENT_RPC_FOLLOW_DEFAULT, &follow);
    const char *mtype = NULL, *lname = NULL;
    if (!rc)
        rc = tent_config_get_string(e->cfg, "metadata_type", "p2p", &mtype);
    if (!rc)
        rc = tent_config_get_string(e->cfg, "local_segment_name", NULL, &lname);
    if (!rc)
        rc = tent_auth_from_config(e->cfg, &e->auth);
    if (rc)
        return rc;
    e->rpc_timeout_ms = (int)to;

    /* The RPC server fixes the address, so it starts first. */
    static const struct tent_rpc_handlers handlers_tmpl = {
        .describe = rpc_describe,
        .notify = rpc_notify,
    };
    struct tent_rpc_handlers h = handlers_tmpl;
    h.ctx = e;
    uint16_t port;
    struct tent_rpc_limits lim = {.max_conns = (int)maxc,
                                  .idle_timeout_ms = (int)idle,
                                  .frame_timeout_ms = (int)frame,
                                  .min_frame_rate = (int)rate,
                                  .loopback_follow_cpu = follow,
                                  .auth = e->auth,
                                  .metrics = e->metrics,
                                  .spin_us = (int)spin};
    snprintf(lim.loopback_cc, sizeof(lim.loopback_cc), "%s", e->loopback_cc);
    int pmin = 0, pmax = 0;
    rc = port_range(e, &pmin, &pmax);
    if (rc)
        goto fail_auth;
    if (e->rpc_port == 0 && pmin) {
        /* Mooncake's P2P handshake: a random port of the range, tried
         * again elsewhere when it is taken (500 times, as Mooncake). */
        unsigned seed = (unsigned)getpid() ^ (unsigned)(uintptr_t)e;
        for (int attempt = 0; attempt < 500; attempt++) {
            uint16_t p =
                (uint16_t)(pmin + rand_r(&seed) % (unsigned)(pmax - pmin + 1));
            rc =
                tent_rpc_server_start(&h, &lim, e->hostname, p, &e->rpc, &port);
            if (rc != TENT_EPEER)
                break;
        }
    } else {
        rc = tent_rpc_server_start(&h, &lim, e->hostname, e->rpc_port, &e->rpc,
                                   &port);
    }
    if (rc)
        goto fail_auth;
    e->rpc_port = port;
    char addr[320], pid[24];
    tent_net_format_hostport(addr, sizeof(addr), e->hostname, port);
    /* In p2p mode a name that is only an address ("10.0.0.2", "::1")
     * names the host: peers open the segment by "<host>:<port>", as in
     * TENT's p2p mode.  A metadata service publishes any name as given (as
     * Mooncake publishes its local server name). */
    char lhost[256];
    bool lport = true;
    if (strcmp(mtype, "p2p") == 0 && lname &&
        tent_net_address_of(lname, lhost, sizeof(lhost), &lport) && !lport)
        lname = NULL;
    if (!lname || !*lname)
        snprintf(e->segment_name, sizeof(e->segment_name), "%s", addr);
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    pthread_rwlock_wrlock(&e->local->lock);
    host_identity(e->local->host_id, sizeof(e->local->host_id));
    rc = tent_segment_set_attr_locked(e->local, "rpc_addr", addr);
    if (!rc)
        rc = tent_segment_set_attr_locked(e->local, "pid", pid);
    pthread_rwlock_unlock(&e->local->lock);

    const struct tent_meta_ops *ops = NULL;
    if (!rc)
        rc = tent_meta_find(mtype, &ops);
    if (rc)
        goto fail;
    if (!lname || !*lname)
        ops->default_name(addr, e->segment_name, sizeof(e->segment_name));
    size_t nl = strlen(e->segment_name);
    if (nl >= sizeof(e->local->v.name)) {
        if (ops != &tent_meta_p2p_ops) {
            rc = tent_set_error(TENT_ECONFIG, "segment name '%s' is too long",
                                e->segment_name);
            goto fail;
        }
        nl = sizeof(e->local->v.name) - 1; /* p2p: peers dial the address */
    }
    pthread_rwlock_wrlock(&e->local->lock);
    memcpy(e->local->v.name, e->segment_name, nl);
    e->local->v.name[nl] = 0;
    pthread_rwlock_unlock(&e->local->lock);

    struct tent_meta_env env = {
        .cfg = e->cfg,
        .segment_name = e->segment_name,
        .rpc_timeout_ms = e->rpc_timeout_ms,
        .describe = rpc_describe,
        .ctx = e,
        .metrics = e->metrics,
        .auth = e->auth,
    };
    rc = ops->start(&env, &e->meta);
    if (rc)
        goto fail;
    e->meta_ops = ops;
    if (!e->seg_ops)
        e->seg_ops = &ctrl_segment_ops;
    return TENT_OK;

fail:
    tent_rpc_server_stop(e->rpc);
    e->rpc = NULL;
fail_auth:
    tent_auth_free(e->auth);
    e->auth = NULL;
    return rc;
}

void tent_ctrl_warn_open(struct tent_engine *e)
{
    if (e->auth || !e->rpc)
        return;
    char rpc[320] = "", nics[1024] = "";
    tent_segment_attr_copy(e->local, "rpc_addr", rpc, sizeof(rpc));
    tent_segment_attr_copy(e->local, "tcp_nics", nics, sizeof(nics));
    /* a warning when the network reaches it; loopback alone: a note */
    char host[256];
    bool port = false;
    bool lo = tent_net_address_of(rpc, host, sizeof(host), &port) &&
              tent_addr_is_loopback(host);
    for (const char *p = nics; lo && (p = strchr(p, '=')); p++) {
        char hp[128];
        snprintf(hp, sizeof(hp), "%.*s", (int)strcspn(p + 1, ","), p + 1);
        lo = tent_net_address_of(hp, host, sizeof(host), &port) &&
             tent_addr_is_loopback(host);
    }
    TENT_LOG(lo ? TENT_LOG_INFO : TENT_LOG_WARNING,
             "no cluster secret (%s): anyone who can reach the RPC server "
             "at %s%s%s%s gets this engine's descriptor and its memory "
             "registered for remote access",
             TENT_AUTH_CONFIG_KEY, rpc, *nics ? " (tcp NICs " : "", nics,
             *nics ? ")" : "");
}

void tent_ctrl_local_changed(struct tent_engine *e)
{
    if (e->meta)
        e->meta_ops->local_changed(e->meta);
}

void tent_ctrl_stop_server(struct tent_engine *e)
{
    tent_rpc_server_stop(e->rpc);
    e->rpc = NULL;
}

void tent_ctrl_stop(struct tent_engine *e)
{
    if (e->meta) {
        e->meta_ops->stop(e->meta);
        e->meta = NULL;
    }
    tent_ctrl_stop_server(e);
}
