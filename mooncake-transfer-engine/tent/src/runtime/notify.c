#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "runtime/engine.h"

#define MAX_QUEUED_NOTIFS 65536

int tent_engine_deliver_notif(struct tent_engine *e, uint64_t from,
                              const char *name, const char *msg)
{
    pthread_mutex_lock(&e->notif_lock);
    if (e->nnotifs == e->notif_cap) {
        size_t ncap = e->notif_cap ? e->notif_cap * 2 : 16;
        struct tent_notifi_record *n =
            ncap <= MAX_QUEUED_NOTIFS ? realloc(e->notifs, ncap * sizeof(*n))
                                      : NULL;
        if (!n) {
            pthread_mutex_unlock(&e->notif_lock);
            return tent_set_error(TENT_ENOMEM,
                                  "notification queue is full (%zu queued)",
                                  e->nnotifs);
        }
        e->notifs = n;
        e->notif_cap = ncap;
    }
    struct tent_notifi_record *r = &e->notifs[e->nnotifs++];
    r->handle = from;
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
    pthread_mutex_unlock(&e->notif_lock);
    return TENT_OK;
}

void tent_notifs_teardown(struct tent_engine *e)
{
    free(e->notifs);
    e->notifs = NULL;
    e->nnotifs = e->notif_cap = 0;
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
        return tent_engine_deliver_notif(e, LOCAL_SEGMENT_ID, name, msg);
    struct tent_segment *seg = tent_engine_segment(e, handle);
    if (!seg)
        return tent_set_error(TENT_ENOSEGMENT,
                              "send notification: unknown segment id %llu",
                              (unsigned long long)handle);
    if (!e->seg_ops || !e->seg_ops->notify)
        return tent_set_error(TENT_ENOTSUP,
                              "send notification: segment '%s' has no control "
                              "channel",
                              seg->name);
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

int tent_recv_notifs(tent_engine_t engine, tent_notifi_info *info)
{
    struct tent_engine *e = tent_engine_cast(engine);
    if (!e)
        return tent_set_error(TENT_ENULL, "tent_recv_notifs: engine is NULL");
    if (!info)
        return tent_set_error(TENT_ENULL, "tent_recv_notifs: info is NULL");
    pthread_mutex_lock(&e->notif_lock);
    info->num_records = (int)e->nnotifs;
    info->records = e->notifs;
    e->notifs = NULL;
    e->nnotifs = e->notif_cap = 0;
    pthread_mutex_unlock(&e->notif_lock);
    return TENT_OK;
}

void tent_free_notifs(tent_notifi_info *info)
{
    if (!info)
        return;
    free(info->records);
    info->records = NULL;
    info->num_records = 0;
}
