/* Peer handles (transport.h): one per (segment, transport), opened on first
 * use, closed when the segment is closed, when its descriptor names a new
 * incarnation of the peer, and at teardown; never while a task submitted
 * with it is in flight.
 *
 * A handle that leaves its segment goes to the engine's retired list and
 * is closed by the next reap that finds no task using it: reaps run where
 * no runtime lock is held (segment open and close, refetches, teardown),
 * because peer_close may join threads. */
#include "common/error.h"
#include "common/log.h"
#include "runtime/engine.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

void tent_peer_restarted_msg(char *buf, size_t len, const char *name,
                             uint64_t inc, uint64_t cur)
{
    if (cur)
        snprintf(buf, len,
                 "peer '%s' restarted: incarnation %016" PRIx64
                 " is gone, now %016" PRIx64,
                 name, inc, cur);
    else
        snprintf(buf, len,
                 "peer '%s' restarted: incarnation %016" PRIx64
                 " no longer exists",
                 name, inc);
}

/* Puts r on the retired list.  Caller holds seg->peer_lock. */
static void retire(struct tent_engine *e, struct tent_peer_ref *r)
{
    pthread_mutex_lock(&e->peers_lock);
    r->next_retired = e->retired_peers;
    e->retired_peers = r;
    atomic_fetch_add(&e->nretired_peers, 1);
    pthread_mutex_unlock(&e->peers_lock);
}

int tent_peer_get(struct tent_engine *e, struct tent_segment *seg, int xi,
                  uint64_t inc, int n, struct tent_peer_ref **out)
{
    pthread_mutex_lock(&seg->peer_lock);
    struct tent_peer_ref *r = seg->peers[xi];
    if (r && r->h->incarnation == inc) {
        atomic_fetch_add_explicit(&r->tasks, n, memory_order_relaxed);
        pthread_mutex_unlock(&seg->peer_lock);
        *out = r;
        return TENT_OK;
    }
    uint64_t cur = atomic_load(&seg->incarnation);
    if (inc != cur) {
        pthread_mutex_unlock(&seg->peer_lock);
        char msg[384];
        tent_peer_restarted_msg(msg, sizeof(msg), seg->v.name, inc, cur);
        return tent_set_error(TENT_ESTALE, "%s", msg);
    }
    if (r) { /* opened for an earlier incarnation */
        seg->peers[xi] = NULL;
        retire(e, r);
    }
    struct tent_transport *t = e->xports[xi];
    r = calloc(1, sizeof(*r));
    int rc = r ? t->ops->peer_open(t, &seg->v, inc, &r->h)
               : tent_set_error(TENT_ENOMEM, "segment '%s': out of memory",
                                seg->v.name);
    if (rc) {
        pthread_mutex_unlock(&seg->peer_lock);
        free(r);
        return rc;
    }
    r->h->owner = t;
    r->h->incarnation = inc;
    r->xi = xi;
    atomic_init(&r->tasks, n);
    seg->peers[xi] = r;
    pthread_mutex_unlock(&seg->peer_lock);
    *out = r;
    return TENT_OK;
}

void tent_segment_peers_retire(struct tent_engine *e, struct tent_segment *seg)
{
    pthread_mutex_lock(&seg->peer_lock);
    for (int i = 0; i < TENT_MAX_TRANSPORTS; i++)
        if (seg->peers[i]) {
            retire(e, seg->peers[i]);
            seg->peers[i] = NULL;
        }
    pthread_mutex_unlock(&seg->peer_lock);
}

/* Handles of transports an engine abandoned at teardown (their quiesce
 * failed: their backend may still use what a handle holds).  Kept, as the
 * transport instance is, for as long as the process lives. */
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tent_peer_ref *abandoned;

static void close_ref(struct tent_engine *e, struct tent_peer_ref *r)
{
    struct tent_transport *t = e->xports[r->xi];
    t->ops->peer_close(t, r->h);
    free(r);
}

void tent_peers_reap(struct tent_engine *e)
{
    if (atomic_load(&e->nretired_peers) == 0)
        return;
    struct tent_peer_ref *done = NULL;
    pthread_mutex_lock(&e->peers_lock);
    for (struct tent_peer_ref **pp = &e->retired_peers; *pp;) {
        struct tent_peer_ref *r = *pp;
        if (atomic_load_explicit(&r->tasks, memory_order_acquire) > 0) {
            pp = &r->next_retired;
            continue;
        }
        *pp = r->next_retired;
        r->next_retired = done;
        done = r;
        atomic_fetch_sub(&e->nretired_peers, 1);
    }
    pthread_mutex_unlock(&e->peers_lock);
    while (done) {
        struct tent_peer_ref *n = done->next_retired;
        close_ref(e, done);
        done = n;
    }
}

void tent_peers_teardown(struct tent_engine *e)
{
    for (size_t i = 0; i < e->nsegs; i++)
        if (e->segs[i])
            tent_segment_peers_retire(e, e->segs[i]);
    for (struct tent_segment *s = e->closed_segs; s; s = s->next_closed)
        tent_segment_peers_retire(e, s);
    struct tent_peer_ref *r = e->retired_peers;
    e->retired_peers = NULL;
    atomic_store(&e->nretired_peers, 0);
    while (r) {
        struct tent_peer_ref *n = r->next_retired;
        if (atomic_load(&r->tasks) > 0)
            LOG_DEBUG("closing a peer handle of transport '%s' with %d task(s) "
                      "not reported terminal (its transport is quiesced)",
                      e->xports[r->xi]->ops->name, atomic_load(&r->tasks));
        if (e->xport_abandoned[r->xi]) {
            pthread_mutex_lock(&abandoned_lock);
            r->next_retired = abandoned;
            abandoned = r;
            pthread_mutex_unlock(&abandoned_lock);
        } else {
            close_ref(e, r);
        }
        r = n;
    }
}
