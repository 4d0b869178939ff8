/* Notifications: sending (to self or through the segment's control
 * channel) and the receive queue, bounded in bytes in total and per sender
 * (each queued notification counts as one tent_notifi_record). */
#include "common/error.h"
#include "common/log.h"
#include "net/net.h"
#include "rpc/wire.h"
#include "runtime/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_QUEUED_NOTIFS 65536
#define RECORD_BYTES      sizeof(struct tent_notifi_record)
#define WARN_EVERY_MS     5000

/* Bytes one sender has queued.  A sender is the segment name it declares
 * at the address it connects from: a name alone is whatever a client says,
 * so the per-sender bound is kept per address too, and the total bound
 * holds whatever names a client makes up.  Cleared when the queue is
 * taken. */
struct tent_notif_sender {
    char key[TENT_WIRE_MAX_NAME + 72]; /* "<name>@<ip>" */
    size_t bytes;
};

int tent_notifs_load_settings(struct tent_engine *e)
{
    int64_t total, per;
    int rc =
        tent_config_get_int_range(e->cfg, "notify_max_queued_bytes", 64ll << 20,
                                  (int64_t)RECORD_BYTES, 1ll << 40, &total);
    if (!rc)
        rc = tent_config_get_int_range(
            e->cfg, "notify_max_queued_bytes_per_sender", 16ll << 20,
            (int64_t)RECORD_BYTES, 1ll << 40, &per);
    if (rc)
        return rc;
    e->notif_max_bytes = (size_t)total;
    e->notif_max_sender_bytes = (size_t)per;
    return TENT_OK;
}

/* The sender's entry (created empty).  NULL when out of memory.  Caller
 * holds notif_lock. */
static struct tent_notif_sender *
sender_locked(struct tent_engine *e, const char *peer, const char *sender)
{
    char host[64];
    uint16_t port;
    if (tent_net_split_hostport(peer, host, sizeof(host), &port) != 0)
        snprintf(host, sizeof(host), "%s", peer);
    char key[sizeof(((struct tent_notif_sender *)0)->key)];
    snprintf(key, sizeof(key), "%s@%s", sender, host);
    for (size_t i = 0; i < e->nsenders; i++)
        if (strcmp(e->senders[i].key, key) == 0)
            return &e->senders[i];
    if (e->nsenders == e->senders_cap) {
        size_t ncap = e->senders_cap ? e->senders_cap * 2 : 8;
        struct tent_notif_sender *n = realloc(e->senders, ncap * sizeof(*n));
        if (!n)
            return NULL;
        e->senders = n;
        e->senders_cap = ncap;
    }
    struct tent_notif_sender *s = &e->senders[e->nsenders++];
    memcpy(s->key, key, sizeof(key));
    s->bytes = 0;
    return s;
}

/* Grows the record arrays for one more.  Caller holds notif_lock. */
static int reserve_locked(struct tent_engine *e)
{
    if (e->nnotifs < e->notif_cap)
        return TENT_OK;
    size_t ncap = e->notif_cap ? e->notif_cap * 2 : 16;
    if (ncap > MAX_QUEUED_NOTIFS)
        return TENT_EBUSY;
    struct tent_notifi_record *n = realloc(e->notifs, ncap * sizeof(*n));
    if (!n)
        return TENT_ENOMEM;
    e->notifs = n;
    struct tent_notif_peer *p = realloc(e->notif_peers, ncap * sizeof(*p));
    if (!p)
        return TENT_ENOMEM;
    e->notif_peers = p;
    e->notif_cap = ncap;
    return TENT_OK;
}

int tent_engine_deliver_notif(struct tent_engine *e, uint64_t from,
                              const char *peer, const char *sender,
                              const char *name, const char *msg)
{
    pthread_mutex_lock(&e->notif_lock);
    struct tent_notif_sender *s = sender_locked(e, peer, sender);
    int rc = s ? reserve_locked(e) : TENT_ENOMEM;
    const char *what = NULL;
    size_t limit = 0;
    if (!rc && e->notif_bytes + RECORD_BYTES > e->notif_max_bytes) {
        what = "notify_max_queued_bytes";
        limit = e->notif_max_bytes;
    } else if (!rc && s->bytes + RECORD_BYTES > e->notif_max_sender_bytes) {
        what = "notify_max_queued_bytes_per_sender";
        limit = e->notif_max_sender_bytes;
    }
    if (what || rc) {
        size_t queued = e->nnotifs, bytes = s ? s->bytes : 0;
        pthread_mutex_unlock(&e->notif_lock);
        unsigned long nd = atomic_fetch_add(&e->notif_dropped, 1) + 1;
        if (rc == TENT_ENOMEM)
            return tent_set_error(TENT_ENOMEM,
                                  "notification from '%s' at %s: out of "
                                  "memory",
                                  sender, peer);
        if (!what)
            what = "the queue's record limit";
        unsigned long held;
        if (tent_log_ratelimit_ok(&e->notif_rl, WARN_EVERY_MS, &held))
            LOG_WARN("dropping a notification from '%s' at %s: %zu queued, "
                     "%zu bytes from this sender, limit %s (%zu bytes); %lu "
                     "dropped so far (%lu warnings held back)",
                     sender, peer, queued, bytes, what, limit, nd, held);
        return tent_set_error(TENT_EBUSY,
                              "notification queue full for '%s' at %s (%s "
                              "%zu bytes; the receiver has not taken its "
                              "notifications)",
                              sender, peer, what, limit);
    }
    struct tent_notifi_record *r = &e->notifs[e->nnotifs];
    r->handle = from;
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
    snprintf(e->notif_peers[e->nnotifs].addr, sizeof(e->notif_peers[0].addr),
             "%s", peer);
    e->nnotifs++;
    e->notif_bytes += RECORD_BYTES;
    s->bytes += RECORD_BYTES;
    pthread_mutex_unlock(&e->notif_lock);
    LOG_TRACE("notification '%s' from '%s' at %s", name, sender, peer);
    return TENT_OK;
}

/* Empties the queue; caller holds notif_lock. */
static void take_locked(struct tent_engine *e, tent_notifi_info *info,
                        struct tent_notif_peer **peers)
{
    info->num_records = (int)e->nnotifs;
    info->records = e->notifs;
    if (peers)
        *peers = e->notif_peers;
    else
        free(e->notif_peers);
    e->notifs = NULL;
    e->notif_peers = NULL;
    e->nnotifs = e->notif_cap = 0;
    e->notif_bytes = 0;
    e->nsenders = 0;
}

void tent_notifs_teardown(struct tent_engine *e)
{
    tent_notifi_info info;
    take_locked(e, &info, NULL);
    free(info.records);
    free(e->senders);
    e->senders = NULL;
    e->senders_cap = 0;
}

static int check_notif(const char *name, const char *msg, const char *what)
{
    if (!name || !msg)
        return tent_set_error(TENT_ENULL, "%s: name or message is NULL", what);
    if (strlen(name) >= sizeof(((tent_notifi_record_t *)0)->name))
        return tent_set_error(TENT_EINVAL, "%s: name longer than 255 bytes",
                              what);
    if (strlen(msg) >= sizeof(((tent_notifi_record_t *)0)->msg))
        return tent_set_error(TENT_EINVAL, "%s: message longer than 4095 bytes",
                              what);
    return TENT_OK;
}

int tent_notif_validate(const char *name, const char *msg, const char *what)
{
    return check_notif(name, msg, what);
}

int tent_engine_send_notif(struct tent_engine *e, uint64_t handle,
                           const char *name, const char *msg)
{
    if (handle == LOCAL_SEGMENT_ID)
        return tent_engine_deliver_notif(e, LOCAL_SEGMENT_ID, "local",
                                         e->segment_name, name, msg);
    struct tent_segment *seg = tent_engine_segment(e, handle);
    if (!seg)
        return tent_set_error(TENT_ENOSEGMENT,
                              "send notification: unknown segment id %llu",
                              (unsigned long long)handle);
    if (!e->seg_ops || !e->seg_ops->notify)
        return tent_set_error(TENT_ENOTSUP,
                              "send notification: segment '%s' has no control "
                              "channel",
                              seg->v.name);
    return e->seg_ops->notify(e, seg, name, msg);
}

int tent_send_notifs(tent_engine_t engine, tent_segment_id_t handle,
                     const char *name, const char *message)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_send_notifs: engine is NULL");
    int rc = check_notif(name, message, "tent_send_notifs");
    if (rc)
        return rc;
    return tent_engine_send_notif(e, handle, name, message);
}

int tent_engine_recv_notifs(struct tent_engine *e, tent_notifi_info *info,
                            struct tent_notif_peer **peers)
{
    pthread_mutex_lock(&e->notif_lock);
    take_locked(e, info, peers);
    pthread_mutex_unlock(&e->notif_lock);
    return TENT_OK;
}

int tent_recv_notifs(tent_engine_t engine, tent_notifi_info *info)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_recv_notifs: engine is NULL");
    if (!info)
        return tent_set_error(TENT_ENULL, "tent_recv_notifs: info is NULL");
    return tent_engine_recv_notifs(e, info, NULL);
}

void tent_free_notifs(tent_notifi_info *info)
{
    if (!info)
        return;
    free(info->records);
    info->records = NULL;
    info->num_records = 0;
}
