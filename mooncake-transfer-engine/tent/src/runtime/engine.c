#include "runtime/engine.h"

#include "common/auth.h"
#include "common/error.h"
#include "common/log.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "runtime/control.h"
#include "sched/rails.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static int load_settings(struct tent_engine *e)
{
    const char *level = NULL;
    int rc = tent_config_get_string(e->cfg, "log_level", NULL, &level);
    if (rc)
        return rc;
    if (level) {
        int l = tent_log_level_parse(level);
        if (l < 0)
            return tent_set_error(TENT_ECONFIG,
                                  "config key 'log_level' has unknown value "
                                  "'%s' (accepted: trace, debug, info, "
                                  "warning, error)",
                                  level);
        tent_log_set_level(l);
    } else if ((level = getenv("MC_LOG_LEVEL")) && *level) {
        /* Mooncake's variable: its names (TRACE, INFO, WARNING, ERROR) and
         * this library's, any case */
        int l = tent_log_level_parse(level);
        if (l < 0)
            return tent_set_error(TENT_ECONFIG,
                                  "environment variable MC_LOG_LEVEL has "
                                  "unknown value '%s' (accepted: TRACE, "
                                  "DEBUG, INFO, WARNING, ERROR, OFF)",
                                  level);
        tent_log_set_level(l);
    }

    /* read before create_engine (tent_create_engine); checked here */
    bool quiet;
    rc = tent_config_get_bool(e->cfg, "log_quiet", false, &quiet);
    if (rc)
        return rc;

    int64_t v;
    rc = tent_config_get_int_range(e->cfg, "max_failover_attempts", 3, 0, 255,
                                   &v);
    if (rc)
        return rc;
    e->max_failover_attempts = (int)v;

    rc = tent_config_get_bool(e->cfg, "merge_requests", true,
                              &e->merge_requests);
    if (!rc)
        rc = tent_config_get_int_range(e->cfg, "merge_max_bytes", 1 << 20, 4096,
                                       (int64_t)1 << 30, &v);
    if (rc)
        return rc;
    e->merge_max_bytes = (uint64_t)v;

    rc = tent_config_get_int_range(e->cfg, "revoke_timeout_ms", 3000, 1, 600000,
                                   &v);
    if (rc)
        return rc;
    e->revoke_timeout_ms = (int)v;

    rc = tent_config_get_bool(e->cfg, "enable_auto_failover_on_poll", true,
                              &e->auto_failover_on_poll);
    if (rc)
        return rc;

    const char *cc = NULL;
    rc = tent_config_get_string(e->cfg, TENT_RPC_CC_KEY, TENT_RPC_CC_DEFAULT,
                                &cc);
    if (!rc)
        rc = tent_rpc_cc_parse(cc, e->loopback_cc);
    if (rc)
        return rc;

    const char *host = NULL, *name = NULL;
    rc = tent_config_get_string(e->cfg, "rpc_server_hostname", NULL, &host);
    if (!rc)
        rc = tent_config_get_string(e->cfg, "local_segment_name", NULL, &name);
    if (rc)
        return rc;
    char named[256];
    if (!host && tent_net_address_of(name, named, sizeof(named), NULL)) {
        /* The application named its address: serve and publish there. */
        host = named;
    }
    if (!host)
        host = "127.0.0.1"; /* nothing named: loopback, nothing exposed */
    if (!*host || strlen(host) >= sizeof(e->hostname))
        return tent_set_error(TENT_ECONFIG,
                              "config key 'rpc_server_hostname' is empty or "
                              "too long");
    snprintf(e->hostname, sizeof(e->hostname), "%s", host);

    rc = tent_config_get_int_range(e->cfg, "rpc_server_port", 0, 0, 65535, &v);
    if (rc)
        return rc;
    e->rpc_port = (uint16_t)v;

    if (name && *name)
        snprintf(e->segment_name, sizeof(e->segment_name), "%s", name);
    else
        snprintf(e->segment_name, sizeof(e->segment_name), "%s:%u", e->hostname,
                 (unsigned)e->rpc_port);

    /* Hugepages for tent_allocate_memory, from the environment of the seed.
     * A value that says neither yes nor no fails rather than guessing. */
    const char *use = getenv("MC_STORE_USE_HUGEPAGE");
    if (use && *use && strcmp(use, "0") != 0 && strcmp(use, "1") != 0 &&
        strcasecmp(use, "true") != 0 && strcasecmp(use, "false") != 0)
        return tent_set_error(TENT_ECONFIG,
                              "MC_STORE_USE_HUGEPAGE='%s' is not supported "
                              "(accepted: 1, true, 0, false)",
                              use);
    e->use_hugepage =
        use && (strcmp(use, "1") == 0 || strcasecmp(use, "true") == 0);
    if (e->use_hugepage) {
        const char *size = getenv("MC_STORE_HUGEPAGE_SIZE");
        if (!size || !*size || strcmp(size, "2MB") == 0)
            e->hugepage_size = 2ul << 20;
        else if (strcmp(size, "512MB") == 0)
            e->hugepage_size = 512ul << 20;
        else if (strcmp(size, "1GB") == 0)
            e->hugepage_size = 1ul << 30;
        else
            return tent_set_error(TENT_ECONFIG,
                                  "MC_STORE_HUGEPAGE_SIZE='%s' is not "
                                  "supported (accepted: 2MB, 512MB, 1GB)",
                                  size);
    }
    /* Read when a file segment is opened: checked now, so that a mistyped
     * value fails here rather than at the first file. */
    const char *base = NULL;
    rc = tent_config_get_string(e->cfg, "file_desc_basepath", "", &base);
    if (rc)
        return rc;
    rc = tent_notifs_load_settings(e);
    if (rc)
        return rc;
    rc = tent_policies_load(e);
    if (rc)
        return rc;
    return tent_rq_load(e);
}

/* Installs every enabled transport.  One that is not available here (no
 * device or library, TENT_ENODEV and the like) is left out with a warning;
 * one whose configuration is wrong (TENT_ECONFIG, TENT_EINVAL) fails the
 * engine, naming the key and value: an engine without the transport it was
 * configured for would fail every submission later instead.  So does a
 * transport that is off by default and was enabled by name (memfabric,
 * shm) when no memory transport could be installed: its caller should
 * learn why (the seed's "DeviceNotFound: ..."), not find out at the first
 * request. */
static int install_transports(struct tent_engine *e)
{
    int failed = TENT_OK;
    char why[768] = "";
    const struct tent_transport_ops *ops[TENT_MAX_TRANSPORTS];
    size_t n = tent_transport_registry_snapshot(ops, TENT_MAX_TRANSPORTS);
    for (size_t i = 0; i < n && e->nxports < TENT_MAX_TRANSPORTS; i++) {
        char key[128];
        snprintf(key, sizeof(key), "transports/%s/enable", ops[i]->name);
        bool enabled;
        int rc = tent_config_get_bool(e->cfg, key, ops[i]->default_enabled,
                                      &enabled);
        if (rc != TENT_OK)
            return rc;
        if (!enabled)
            continue;
        struct tent_transport *t;
        rc = tent_transport_instance_new(ops[i], &e->xenv, e->nxports, &t);
        if (rc == TENT_ECONFIG || rc == TENT_EINVAL) {
            char msg[512];
            snprintf(msg, sizeof(msg), "%s", tent_last_error());
            return tent_set_error(rc, "transport '%s' is misconfigured: %s",
                                  ops[i]->name, msg);
        }
        if (rc != TENT_OK) {
            LOG_WARN("transport '%s' not installed: %s (%s)", ops[i]->name,
                     tent_last_error(), tent_strerror(rc));
            if (!ops[i]->default_enabled && failed == TENT_OK) {
                failed = rc;
                snprintf(why, sizeof(why), "%s", tent_last_error());
            }
            continue;
        }
        LOG_INFO("transport '%s' installed", ops[i]->name);
        e->xports[e->nxports++] = t;
    }
    if (failed != TENT_OK && !tent_available(e))
        return tent_set_error(failed, "%s", why);
    return TENT_OK;
}

static tent_engine_t create_engine(void)
{
    struct tent_engine *e = calloc(1, sizeof(*e));
    if (!e) {
        tent_set_error(TENT_ENOMEM, "tent_create_engine: out of memory");
        return NULL;
    }
    atomic_init(&e->stopping, false);
    pthread_mutex_init(&e->seg_lock, NULL);
    pthread_mutex_init(&e->reg_lock, NULL);
    pthread_mutex_init(&e->batch_lock, NULL);
    pthread_mutex_init(&e->notif_lock, NULL);
    pthread_mutex_init(&e->pin_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->pin_cond, &ca);
    pthread_condattr_destroy(&ca);

    int rc = tent_config_snapshot(&e->cfg);
    if (rc)
        goto fail_config;
    rc = load_settings(e);
    if (rc)
        goto fail_settings;
    struct tent_metrics_config mcfg;
    rc = tent_metrics_config_load(e->cfg, &mcfg);
    if (rc)
        goto fail_settings;
    if (mcfg.enabled) {
        rc = tent_metrics_create(&mcfg, &e->metrics);
        if (rc)
            goto fail_settings;
    } else if (mcfg.http_port >= 0) {
        LOG_WARN("metrics are disabled: metrics/http_port %d is ignored",
                 mcfg.http_port);
    }
    e->sched = tent_sched_new();
    if (!e->sched) {
        rc = tent_set_error(TENT_ENOMEM, "tent_create_engine: out of memory");
        goto fail_settings;
    }
    tent_metrics_set_dynamic(e->metrics, tent_rails_metrics, e->sched);
    rc = tent_segment_new(LOCAL_SEGMENT_ID, e->segment_name, true, &e->local);
    if (rc)
        goto fail_settings;
    e->segs = calloc(1, sizeof(*e->segs));
    if (!e->segs) {
        rc = tent_set_error(TENT_ENOMEM, "tent_create_engine: out of memory");
        goto fail_segs;
    }
    e->segs[0] = e->local;
    e->nsegs = 1;
    /* RPC server, segment name, metadata backend (publishes the segment). */
    rc = tent_ctrl_start(e);
    if (rc)
        goto fail_rpc;
    tent_xport_env_init(e);
    rc = install_transports(e);
    if (rc == TENT_OK) {
        for (int i = 0; i < e->nxports; i++)
            tent_metrics_set_transport(
                e->metrics, i,
                tent_transport_type_name(e->xports[i]->ops->type));
        tent_metrics_set_name(e->metrics, e->segment_name);
        /* metrics/http_required: the endpoint could not be bound. */
        rc = tent_metrics_start(e->metrics);
    }
    if (rc) {
        char msg[768];
        snprintf(msg, sizeof(msg), "%s", tent_last_error());
        tent_destroy_engine(e);
        tent_set_error(rc, "tent_create_engine: %s", msg);
        LOG_ERROR("tent_create_engine failed: %s", tent_last_error());
        return NULL;
    }
    LOG_INFO("engine created: segment '%s', %d transport(s)", e->segment_name,
             e->nxports);
    tent_ctrl_warn_open(e);
    return e;

fail_rpc:
    free(e->segs);
fail_segs:
    tent_segment_free(e->local);
fail_settings:
    tent_rq_free(e);
    tent_sched_free(e->sched);
    tent_metrics_destroy(e->metrics);
    tent_config_free(e->cfg);
fail_config:
    LOG_ERROR("tent_create_engine failed: %s", tent_last_error());
    pthread_mutex_destroy(&e->seg_lock);
    pthread_mutex_destroy(&e->reg_lock);
    pthread_mutex_destroy(&e->batch_lock);
    pthread_mutex_destroy(&e->notif_lock);
    pthread_mutex_destroy(&e->pin_lock);
    pthread_cond_destroy(&e->pin_cond);
    free(e);
    (void)rc; /* the thread's last error already says what failed */
    return NULL;
}

/* log_quiet (staged by a caller that starts an engine only to see whether
 * a transport installs): nothing this thread logs while the engine is
 * created is written; a failure is still in tent_last_error(). */
tent_engine_t tent_create_engine(void)
{
    struct tent_config *cfg = NULL;
    bool quiet = false;
    if (tent_config_snapshot(&cfg) == TENT_OK) {
        if (tent_config_get_bool(cfg, "log_quiet", false, &quiet) != TENT_OK)
            quiet = false;
        tent_config_free(cfg);
    }
    tent_log_mute_thread(quiet);
    tent_engine_t e = create_engine();
    tent_log_mute_thread(false);
    return e;
}

void tent_destroy_engine(tent_engine_t engine)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return;
    atomic_store(&e->stopping, true);
    /* Scrapes read engine state: they end before anything is torn down. */
    tent_metrics_stop(e->metrics);
    /* Peers stop finding the segment, then no peer request may touch
     * memory once teardown begins. */
    tent_ctrl_stop(e);
    /* Quiesce first: a transport whose backend may still write into memory
     * keeps that memory and its own resources rather than risk a
     * use-after-free. */
    for (int i = 0; i < e->nxports; i++) {
        struct tent_transport *t = e->xports[i];
        int rc = t->ops->quiesce(t);
        if (rc != TENT_OK) {
            e->xport_abandoned[i] = true;
            LOG_ERROR("quiesce of transport '%s' failed: %s (%s); keeping its "
                      "registered buffers and backend alive",
                      t->ops->name, tent_last_error(), tent_strerror(rc));
        }
    }
    tent_batches_teardown(e);
    /* Every peer handle, before the transports that made them go. */
    tent_peers_teardown(e);
    tent_memory_release_all(e);
    tent_file_segments_teardown(e);
    for (int i = 0; i < e->nxports; i++) {
        if (e->xport_abandoned[i]) {
            /* Deliberately leaked, see above; it outlives the engine and
             * its environment, so it must not reach either. */
            e->xports[i]->env = NULL;
            continue;
        }
        tent_transport_instance_free(e->xports[i]);
    }
    for (size_t i = 1; i < e->nsegs; i++) {
        if (!e->segs[i])
            continue;
        if (e->seg_ops)
            e->seg_ops->release(e, e->segs[i]);
        tent_segment_free(e->segs[i]);
    }
    free(e->segs);
    while (e->closed_segs) {
        struct tent_segment *seg = e->closed_segs;
        e->closed_segs = seg->next_closed;
        if (e->seg_ops)
            e->seg_ops->release(e, seg);
        tent_segment_free(seg);
    }
    /* The local segment may still hold buffers pinned by in-flight tasks;
     * tent_memory_release_all kept those (and said so). */
    if (e->local->nbufs == 0)
        tent_segment_free(e->local);
    tent_notifs_teardown(e);
    /* An abandoned transport's threads may still count into the registry. */
    bool abandoned = false;
    for (int i = 0; i < e->nxports; i++)
        abandoned |= e->xport_abandoned[i];
    if (!abandoned) {
        tent_metrics_destroy(e->metrics);
        tent_auth_free(e->auth);
    }
    tent_sched_free(e->sched);
    tent_rq_free(e);
    tent_config_free(e->cfg);
    pthread_mutex_destroy(&e->seg_lock);
    pthread_mutex_destroy(&e->reg_lock);
    pthread_mutex_destroy(&e->batch_lock);
    pthread_mutex_destroy(&e->notif_lock);
    pthread_mutex_destroy(&e->pin_lock);
    pthread_cond_destroy(&e->pin_cond);
    pthread_mutex_destroy(&e->peers_lock);
    free(e);
}

int tent_available(tent_engine_t engine)
{
    /* A transport for memory segments: the file transports alone do not
     * make an engine a peer (Mooncake's initialize fails when its
     * protocol's transport could not be installed). */
    struct tent_engine *e = tent_engine_cast(engine);
    for (int i = 0; e && i < e->nxports; i++)
        if (!(e->xports[i]->ops->capabilities(e->xports[i]) & TENT_CAP_FILE))
            return 1;
    return 0;
}

static int copy_out(char *buf, size_t len, const char *s, const char *what)
{
    if (!buf)
        return tent_set_error(TENT_ENULL, "%s: buffer is NULL", what);
    if (strlen(s) + 1 > len)
        return tent_set_error(TENT_EOVERFLOW,
                              "%s: buffer of %zu bytes is too small for '%s'",
                              what, len, s);
    memcpy(buf, s, strlen(s) + 1);
    return TENT_OK;
}

int tent_segment_name(tent_engine_t engine, char *buf, size_t buf_len)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_segment_name: engine is NULL");
    return copy_out(buf, buf_len, e->segment_name, "tent_segment_name");
}

int tent_rpc_server_addr_port(tent_engine_t engine, char *addr_buf,
                              size_t buf_len, uint16_t *port)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL,
                              "tent_rpc_server_addr_port: engine is NULL");
    if (!port)
        return tent_set_error(TENT_ENULL,
                              "tent_rpc_server_addr_port: port is NULL");
    int rc =
        copy_out(addr_buf, buf_len, e->hostname, "tent_rpc_server_addr_port");
    if (rc)
        return rc;
    *port = e->rpc_port;
    return TENT_OK;
}
