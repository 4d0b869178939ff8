/* tcp transport, initiator half: reads and writes against a peer engine's
 * registered memory, served by the peer's RPC server (the READ and WRITE
 * frames of tcp_wire.h, handled by the peer's tcp_target.c).
 *
 * Requests are cut into slices of at most slice_size bytes and the rail set
 * (sched/rails.h) picks each slice's rail: one per (local NIC, peer NIC)
 * pair the kernel routes, each with at most `connections` connections,
 * opened on demand and closed after idle_timeout_ms unused.  The threads
 * that drive them are one pool per engine (transports/tcp/workers), so
 * threads do not grow with peers.  A window is slices of one opcode and one
 * priority class, all sent before its answers are read in order.  A submit
 * that makes one window may be sent by the submitting thread itself over an
 * idle connection, so tent_submit never waits on the network.
 *
 * Sections: slices; queues (priorities, LOW pacing); windows (faults,
 * fences, retries); stealing; the pool; the lent connection; rails and
 * peers; NICs served; ops.  The whole story: docs/transports/tcp.md. */
#include "common/clock.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "metrics/metrics.h"
#include "net/nics.h"
#include "sched/rails.h"
#include "sched/slots.h"
#include "transport/tcp/tcp.h"
#include "transport/tcp/tcp_conn.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 16
#define MAX_NICS  16
/* How often the lend thread moves lent windows nobody polls, and how long
 * it keeps ticking after the last one came back before it sleeps (so that a
 * stream of lends does not wake it, a thread switch on the submit path, for
 * every one; docs/performance.md "Design figures"). */
#define LEND_TICK_MS   1
#define LEND_LINGER_MS 100

struct tcp_sub;
struct tcp_transport;
struct tcp_peer;

struct tcp_task {
    atomic_uint remaining;           /* slices not yet terminal */
    atomic_int code;                 /* the first failure's code, 0 if none */
    _Atomic(struct tent_xerr *) err; /* its cause (NULL: out of memory) */
    uint64_t length;
    struct tcp_peer *peer; /* where its slices went */
};

struct tcp_sub {
    struct tent_sub_batch base;
    struct tcp_task *tasks;
};

struct squeue {
    struct slice *head, *tail;
    uint64_t served_ns; /* a window last taken from it (promotion) */
};

struct tcp_transport;

/* A pool thread (its index in the pool and the transport). */
struct pool_thread {
    pthread_t th;
    pthread_cond_t cv;
    bool woken;
    int idx;
    struct tcp_transport *t;
};

/* Fenced writes of a lent window (the lending thread may not block on a
 * fence): a pool thread fences and moves them (serve_rail). */
struct fence_job {
    struct fence_job *next;
    uint64_t token;
    struct slice *list;
    int code, native;
    char why[512];
};

/* One path to a peer.  lock guards the queues, stop, the idle stack (the
 * connection slots nobody uses: conns[i] NULL until opened, and again
 * once closed for idleness), used_ms, fjobs, the bits of lent and
 * low_wire.  lend_lock[i] guards the window of conns[i] while it is lent;
 * whoever holds it does non-blocking steps only.  Order: lend_lock[i],
 * then lock, then the pool's pool_mu.  No runtime lock, no other rail's
 * lock and no t->lock is taken under either.  ready, ready_next, want,
 * busy and dead are the pool's (pool_mu). */
struct tcp_rail {
    struct tcp_peer *peer;
    int idx;
    char addr[320]; /* "<host>:<port>" (from <src>), for messages */
    char host[TENT_NIC_ADDR_MAX];
    uint16_t port;
    char src[TENT_NIC_ADDR_MAX];
    pthread_mutex_t lock;
    int idle[MAX_CONNS]; /* free slots, the last freed on top */
    int nidle;
    long long used_ms[MAX_CONNS]; /* when slot i was last freed */
    struct squeue q[TENT_NPRIO];
    uint64_t q_bytes;  /* bytes queued, all classes */
    uint64_t low_wire; /* bytes of LOW windows on the wire */
    bool slot_wait;    /* a pool thread waits for LOW's slot (serve_rail) */
    _Atomic long long progress_ms; /* a byte last moved on the rail */
    bool stop;
    int nconns; /* slots: transports/tcp/connections */
    struct tcp_conn *conns[MAX_CONNS];
    bool down; /* the last connection or window failed */
    struct fence_job *fjobs;
    pthread_mutex_t lend_lock[MAX_CONNS];
    atomic_uint lent; /* bit i: conns[i] is lent */
    /* the pool's */
    struct tcp_rail *ready_next;
    bool ready, dead;
    int want; /* pool threads asked for */
    int busy; /* pool threads serving it */
};

/* The peer handle (transport.h): everything tcp keeps for one peer, made
 * by peer_open from its rpc_addr and tcp_nics and gone with peer_close. */
struct tcp_peer {
    struct tent_peer base;
    struct tcp_transport *t;
    char addr[320]; /* its rpc_addr */
    struct tent_railset *rs;
    int nrails;
    struct tcp_rail *rails[TENT_MAX_RAILS];
    atomic_uint down_mask; /* rails whose last window failed */
    struct tcp_peer *next, *prev;
};

/* lock guards peers and accepting; it is a leaf (taken alone, or before a
 * rail's locks when the lend thread or the idle sweep walks the peers).
 * pool_mu guards the pool: the ready list, the threads and each rail's
 * pool fields. */
struct tcp_transport {
    struct tent_transport base;
    int timeout_ms;
    int nconns;
    uint32_t slice_size;
    uint32_t window_size; /* a window's bytes while a backlog lasts */
    uint32_t low_slice;   /* LOW's slices and windows: low_slice_size */
    bool sock_prio;       /* socket_priority: windows marked by class */
    char loopback_cc[TENT_RPC_CC_MAX]; /* tcp_loopback_congestion */
    int stall_ms;
    uint64_t promo_ns;
    struct tent_sched_params sp;
    struct tent_nic nics[MAX_NICS]; /* the NICs served (and dialled from) */
    size_t nnics;
    pthread_mutex_t lock;
    struct tcp_peer *peers;
    bool accepting;
    atomic_bool accepting_a; /* accepting, for submit (no lock) */
    bool serving;            /* the frame handlers are installed */
    atomic_size_t inflight;  /* slices queued or in flight, all peers */
    /* The lend thread: moves lent windows on while any is out (nlent), so
     * a caller that submits and polls late still has its bytes sent; it
     * sleeps on lend_cv while none is.  lend_mu guards lend_stop. */
    pthread_t lend_thread;
    bool lend_stop;
    pthread_mutex_t lend_mu;
    pthread_cond_t lend_cv;
    atomic_int nlent;
    atomic_bool lend_sleeping;
    /* The pool (see "the pool" below). */
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_done; /* a rail's busy went to 0 */
    struct tcp_rail *ready_head, *ready_tail;
    /* pool_max of each; pool_n started.  An idle thread i is on the stack
     * (the last idle on top: the one woken first, warm in its CPU) and
     * sleeps on cv[i] until woken[i]. */
    struct pool_thread *pool;
    int pool_max, pool_n;
    int *pool_stack, pool_nidle;
    bool pool_stop;
    int idle_ms;                  /* idle_timeout_ms */
    _Atomic long long next_sweep; /* when idle connections are next closed */
    /* The engine's metrics (NULL: off), taken at install: workers use it,
     * and it outlives an engine that abandoned this transport. */
    struct tent_metrics *metrics;
    /* Status polls waiting for a slice to end (status_wait): a slice that
     * ends while done_waiters > 0 bumps done_seq and wakes them.  done_mu
     * is a leaf. */
    pthread_mutex_t done_mu;
    pthread_cond_t done_cv; /* CLOCK_MONOTONIC */
    unsigned done_seq;      /* done_mu */
    atomic_int done_waiters;
};

static struct tcp_transport *tcp_of(struct tent_transport *t)
{
    return (struct tcp_transport *)t;
}

static void enqueue_one(struct tcp_rail *r, struct slice *s);
static void *lend_main(void *arg);
static void reroute(struct tcp_transport *t, struct tcp_peer *p,
                    struct slice *s, int code, int native, const char *why,
                    bool again);
static void rail_kick(struct tcp_rail *r, int n);

/* Tries of a slice whose connection the peer refused or closed (a server
 * over rpc_max_connections evicts idle ones), each on a new connection
 * opened after a pause: a full server refuses newcomers while every
 * connection it keeps is moving data, which frees one in milliseconds --
 * or, on a crowded machine, in the time its holders get a CPU.  Pauses
 * double from RETRY_PAUSE_MS up to RETRY_PAUSE_MAX_MS: ten tries span
 * about half a second to a second. */
#define TCP_RETRIES        10
#define RETRY_PAUSE_MS     4
#define RETRY_PAUSE_MAX_MS 64
/* Windows a pool thread sends on one rail before it lets other rails'
 * work go first (the rail goes to the back of the ready list). */
#define SERVE_WINDOWS 16

/* A failure that is the connection, not the path or the peer's answer: the
 * peer reset or closed a connection it had accepted (a full server refuses
 * a newcomer so, and evicts an idle connection so).  Not a connect that
 * failed (nothing listens, no route) nor a timeout: a peer that is gone or
 * silent stays failed. */
static bool conn_lost(int rc, int native)
{
    return rc == TENT_EPEER &&
           (native == ECONNRESET || native == EPIPE || native == ECONNABORTED);
}

/* The pause before try number tries (0: none): RETRY_PAUSE_MS doubled with
 * each up to RETRY_PAUSE_MAX_MS, plus up to as much again of jitter. */
static void pause_for_try(int tries)
{
    if (tries <= 0)
        return;
    int ms = tries > 5 ? RETRY_PAUSE_MAX_MS : RETRY_PAUSE_MS << (tries - 1);
    ms += (int)(tent_now_ns() % (uint64_t)ms);
    poll(NULL, 0, ms);
}

/* Frees slot w of r (caller holds r->lock): on top of the idle stack. */
static void slot_free_locked(struct tcp_rail *r, int w)
{
    r->idle[r->nidle++] = w;
    r->used_ms[w] = tent_now_ms();
}

/* tent_peers{transport="tcp",state}: moves one peer between states (or in
 * and out of the gauge when from or to is -1). */
static void peer_gauge(struct tcp_transport *t, int from, int to)
{
    struct tm_shard *s = tm_shard(t->metrics);
    unsigned x = TM_X(t->base.index);
    if (from >= 0)
        tm_gauge_add(s, TM_PEERS, x, (unsigned)from, -1);
    if (to >= 0)
        tm_gauge_add(s, TM_PEERS, x, (unsigned)to, 1);
}

/* Records whether the rail's last window worked; a peer is down when every
 * rail is.  Counts state changes only. */
static void rail_mark(struct tcp_rail *r, bool down)
{
    struct tcp_peer *p = r->peer;
    unsigned bit = 1u << r->idx, all = (1u << p->nrails) - 1;
    unsigned before = down ? atomic_fetch_or(&p->down_mask, bit)
                           : atomic_fetch_and(&p->down_mask, ~bit);
    unsigned after = down ? before | bit : before & ~bit;
    bool was = before == all, is = after == all;
    if (was != is)
        peer_gauge(p->t, is ? TM_PEER_UP : TM_PEER_DOWN,
                   is ? TM_PEER_DOWN : TM_PEER_UP);
    pthread_mutex_lock(&r->lock);
    r->down = down;
    pthread_mutex_unlock(&r->lock);
}

/* ---- slices ---------------------------------------------------------------
 * A failure is recorded per task (the first one) with our code, the errno
 * or the peer's answer, and a message naming the peer.
 */

/* A slice's outcome.  code != 0 is a failure with its native code and
 * message (printf-style, formatted only for the task's first failure).  The
 * remaining decrement is the slice's last touch of its sub-batch: once
 * every task of a sub-batch has remaining == 0 it may be freed. */
__attribute__((format(printf, 5, 6))) static void
slice_done(struct tcp_transport *t, struct slice *s, int code, int native,
           const char *fmt, ...)
{
    struct tcp_task *k = &s->sb->tasks[s->slot];
    int zero = 0;
    if (code && atomic_compare_exchange_strong(&k->code, &zero, code)) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        atomic_store(&k->err, tent_xerr_new(code, native, "%s", msg));
    }
    free(s);
    atomic_fetch_sub(&k->remaining, 1);
    atomic_fetch_sub(&t->inflight, 1);
    if (atomic_load(&t->done_waiters) > 0) {
        pthread_mutex_lock(&t->done_mu);
        t->done_seq++;
        pthread_cond_broadcast(&t->done_cv);
        pthread_mutex_unlock(&t->done_mu);
    }
}

static void fail_list(struct tcp_transport *t, struct slice *s, int code,
                      int native, const char *why)
{
    while (s) {
        struct slice *n = s->next;
        slice_done(t, s, code, native, "%s", why);
        s = n;
    }
}

/* ---- queues ----------------------------------------------------------------
 * Each rail has a queue per class (TENT_PRIO_HIGH, MEDIUM, LOW), served in
 * that order; a queue not served for priority_promotion_timeout_us counts
 * one class higher per timeout, so LOW is never starved.  LOW requests are
 * cut into slices of low_slice_size, a rail keeps at most LOW_WINDOWS LOW
 * windows on its wire, and while other classes go to the peer each goes
 * out paced just below the link's capacity (low_pacing_gain;
 * tent_rail_yield_pace), so that LOW does not build queues in the kernel or
 * the link in front of a HIGH request.  What it does queue there a
 * priority-aware qdisc can still pass: each window goes out with its class
 * as the socket's SO_PRIORITY (socket_priority; tcp_conn.h).
 */

/* Every queued slice of r, all classes, as one list.  Caller holds lock. */
static struct slice *take_all_locked(struct tcp_rail *r)
{
    struct slice *head = NULL, *tail = NULL;
    for (int k = 0; k < TENT_NPRIO; k++) {
        if (!r->q[k].head)
            continue;
        if (tail)
            tail->next = r->q[k].head;
        else
            head = r->q[k].head;
        tail = r->q[k].tail;
        r->q[k].head = r->q[k].tail = NULL;
    }
    r->q_bytes = 0;
    return head;
}

static bool queued_locked(const struct tcp_rail *r)
{
    return r->q[0].head || r->q[1].head || r->q[2].head;
}

/* LOW windows a rail keeps on its wire at most: while one waits for its
 * answer the others keep the link busy (with one, the link idled for the
 * answers' round trips and LOW alone fell well short of the capacity its
 * pace is learned from), and one connection stays free for a HIGH request
 * (it is lent, no LOW window ahead of it on its socket). */
#define LOW_WINDOWS 3

static int low_windows(const struct tcp_transport *t)
{
    int k = t->nconns - 1;
    return k > LOW_WINDOWS ? LOW_WINDOWS : k < 1 ? 1 : k;
}

/* LOW bytes the rail may have on the wire: low_windows slices.  While
 * other classes go to the peer they are paced (low_window_pace) just below
 * the link's capacity: they wait in their sockets, not in the link's
 * queues in front of a HIGH request. */
static uint64_t low_budget(struct tcp_rail *r)
{
    return r->peer->t->sp.yield_wire_max; /* set once: tcp_install */
}

/* The pacing rate (bytes/s, 0: none) of a LOW window going out on r now:
 * its share of the rail's pace for LOW (tent_rail_yield_pace). */
static uint64_t low_window_pace(struct tcp_rail *r)
{
    double pace = tent_rail_yield_pace(r->peer->rs, r->idx, true);
    return (uint64_t)(pace / low_windows(r->peer->t));
}

/* Whether LOW waits for its slot: the host's slots (shared_quota_shm_path)
 * hold it while another class is active on the host (tent_slots_holds). */
static bool low_slot_held(struct tcp_rail *r, uint64_t now)
{
    struct tent_slots *sl = tent_railset_slots(r->peer->rs);
    return sl && tent_slots_holds(sl, TENT_PRIO_LOW, now);
}

/* The queue a pool thread serves next (-1: nothing it may take now); *held
 * (may be NULL) tells whether queued LOW waits for its slot.  Caller holds
 * lock. */
static int next_queue_held_locked(struct tcp_rail *r, uint64_t low_cap,
                                  bool *held)
{
    struct tcp_transport *t = r->peer->t;
    uint64_t since[TENT_NPRIO], now = tent_now_ns();
    bool hold = false;
    for (int k = 0; k < TENT_NPRIO; k++) {
        const struct slice *h = r->q[k].head;
        if (h && k == TENT_PRIO_LOW && r->low_wire < low_cap)
            hold = low_slot_held(r, now);
        /* LOW past its budget waits for a LOW window to finish */
        since[k] =
            !h || (k == TENT_PRIO_LOW && (r->low_wire >= low_cap || hold))
                ? TENT_PRIO_IDLE
                : tent_prio_since(h->enq_ns, r->q[k].served_ns);
    }
    if (held)
        *held = hold;
    return tent_prio_pick(since, now, t->promo_ns);
}

static int next_queue_locked(struct tcp_rail *r, uint64_t low_cap)
{
    return next_queue_held_locked(r, low_cap, NULL);
}

/* Takes a window off queue k: slices of the head's opcode, at most
 * slice_size bytes (LOW: low_slice_size) or WINDOW_SLICES slices.  Caller
 * holds lock. */
static int take_window_locked(struct tcp_rail *r, int k, struct slice **w,
                              uint64_t *bytes_out)
{
    struct tcp_transport *t = r->peer->t;
    struct squeue *q = &r->q[k];
    int n = 0;
    uint64_t bytes = 0;
    int op = q->head->opcode;
    uint64_t cap = k == TENT_PRIO_LOW ? t->low_slice : t->slice_size;
    /* While the rail holds window_size bytes for each of its connections, a
     * window carries up to that much: one wait for answers (a sleep and a
     * wake-up on each side) per window, not per slice.  What is left of a
     * backlog goes in smaller windows, so its end still spreads over the
     * connections.  MEDIUM grows only with no HIGH queued behind it. */
    if (k != TENT_PRIO_LOW && t->window_size > cap &&
        (k == TENT_PRIO_HIGH || !r->q[TENT_PRIO_HIGH].head)) {
        uint64_t share = r->q_bytes / (uint64_t)r->nconns;
        if (share > cap)
            cap = share < t->window_size ? share : t->window_size;
    }
    q->served_ns = tent_now_ns();
    while (q->head && n < WINDOW_SLICES && q->head->opcode == op &&
           (n == 0 || bytes + q->head->len <= cap)) {
        struct slice *s = q->head;
        q->head = s->next;
        s->next = NULL;
        bytes += s->len;
        w[n++] = s;
    }
    if (!q->head)
        q->tail = NULL;
    r->q_bytes -= bytes;
    *bytes_out = bytes;
    return n;
}

/* ---- windows -------------------------------------------------------------
 * When a window fails on a rail (connection lost, no answer in time, or no
 * byte moved -- or no connection made -- for rail_stall_ms while another
 * rail exists), the rail is paused (probed back by the rail set) and its
 * slices go to another rail: reads and unsent writes at once; a write whose
 * bytes may have reached the peer only after the peer has cut that
 * connection off (a FENCE through another rail, answered once the old
 * connection's handler is gone), so its late bytes never land after the
 * retry.  The failed connection is aborted with a reset first
 * (tcp_conn_abort), so the target refuses what it still holds of it.
 * A connection the peer refused or closed (a full server evicts idle ones)
 * is not the path failing: its slices are tried again, up to TCP_RETRIES
 * times, on a new connection (the same rail when the peer has no other),
 * writes that may have been sent after a fence.  With no rail, fence or
 * retry left, the slice fails with the rail's error.
 */

/* The window on c ended.  Answers [0, c->ri) are in: each slice gets its
 * answer.  With rc == 0 that is all of them.  Otherwise (rc, native: the
 * message is tent_last_error()) the path failed: reads and unsent writes go
 * to another rail when they can, else fail with the rail's error; writes
 * that may have reached the peer go to *fence (the caller fences the
 * connection, then moves them), or fail when fence is NULL.  A LOW
 * window's end lets held-back LOW work go: unless the caller goes on to take
 * work itself (takes_next) and no other class is queued for it to take
 * first, a pool thread is asked for it. */
static void window_finish(struct tcp_rail *r, struct tcp_conn *c, int rc,
                          int native, bool low, uint64_t wbytes,
                          struct slice **fence, bool takes_next)
{
    struct tcp_peer *p = r->peer;
    struct tcp_transport *t = p->t;
    char why[512] = "";
    if (rc)
        snprintf(why, sizeof(why), "%s", tent_last_error());
    int answered = rc ? c->ri : c->n;
    for (int i = 0; i < c->n; i++) {
        struct slice *s = c->w[i];
        if (i >= answered) {
            /* (a probe's outcome: the rail set leaves probing on a
             * completion or a failure only) */
            tent_rail_fail(p->rs, r->idx, s->len, &s->tk);
            bool again = conn_lost(rc, native) && s->tries < TCP_RETRIES;
            bool safe = s->opcode == OPCODE_READ || tcp_conn_unsent(c, i);
            if (safe) {
                reroute(t, p, s, rc, native, why, again);
            } else if (fence && (p->nrails > 1 || again)) {
                /* may have landed (in part): no second copy before the
                 * peer has cut the old connection off */
                s->next = *fence;
                *fence = s;
            } else {
                slice_done(t, s, rc, native, "%s", why);
            }
            continue;
        }
        tent_rail_complete(p->rs, r->idx, s->len, &s->tk);
        if (c->status[i])
            slice_done(t, s, c->status[i], 0,
                       "tcp: peer %s refused the %s of [%#llx, +%u): %s",
                       r->addr, s->opcode == OPCODE_WRITE ? "write" : "read",
                       (unsigned long long)s->remote, s->len,
                       tent_strerror(c->status[i]));
        else
            slice_done(t, s, 0, 0, "%s", "");
    }
    c->n = 0;
    if (low) {
        /* LOW work held back by the budget may go now: the caller's own
         * next window, without a thread switch, when it takes one and
         * nothing ranks above it (one wake-up less per LOW window, of
         * which a LOW stream makes thousands a second) */
        pthread_mutex_lock(&r->lock);
        r->low_wire -= wbytes;
        bool other = r->q[TENT_PRIO_HIGH].head || r->q[TENT_PRIO_MEDIUM].head;
        if (r->q[TENT_PRIO_LOW].head && r->nidle > 0 && (!takes_next || other))
            rail_kick(r, 1);
        pthread_mutex_unlock(&r->lock);
    }
    rail_mark(r, rc != 0);
}

/* The slices queued on r when one of its windows failed, which follow that
 * window's slices elsewhere (or fail with them).  Taken before the window's
 * own slices end: once they end, their caller may submit again, and what it
 * submits then must not fail with the window that failed before it (it
 * did, now and then, when the ending thread took the queue after them).
 * On a connection the peer refused or closed they stay (another connection
 * takes them): only the window's own slices count a try. */
static struct slice *take_queue_at_failure(struct tcp_rail *r)
{
    pthread_mutex_lock(&r->lock);
    struct slice *rest = take_all_locked(r);
    pthread_mutex_unlock(&r->lock);
    return rest;
}

/* Moves the slices of a rail that failed elsewhere (or fails them). */
static void reroute_list(struct tcp_rail *r, struct slice *s, int code,
                         int native, const char *why)
{
    while (s) {
        struct slice *n = s->next;
        tent_rail_release(r->peer->rs, r->idx, s->len, &s->tk);
        reroute(r->peer->t, r->peer, s, code, native, why,
                conn_lost(code, native));
        s = n;
    }
}

/* A slice whose rail failed: to another rail; else, when again (its
 * connection was refused or closed and it has tries left), to any rail of
 * the peer, its own included, on a new connection; else failed. */
static void reroute(struct tcp_transport *t, struct tcp_peer *p,
                    struct slice *s, int code, int native, const char *why,
                    bool again)
{
    s->avoid |= 1u << s->rail;
    int nr = p->nrails > 1
                 ? tent_rail_pick(p->rs, s->len, s->prio == TENT_PRIO_LOW,
                                  s->avoid, &s->tk)
                 : -1;
    if (nr < 0 && again && s->tries < TCP_RETRIES &&
        atomic_load(&t->accepting_a)) {
        s->tries++;
        s->avoid = 0;
        nr = tent_rail_pick(p->rs, s->len, s->prio == TENT_PRIO_LOW, 0, &s->tk);
        if (nr < 0)
            nr = s->rail;
        LOG_DEBUG("tcp: slice of %u bytes tried again (%d) on rail %s: %s",
                  s->len, s->tries, p->rails[nr]->addr, why);
    }
    if (nr < 0) {
        slice_done(t, s, code, native, "%s", why);
        return;
    }
    LOG_DEBUG("tcp: slice of %u bytes moves from rail %s to %s", s->len,
              p->rails[s->rail]->addr, p->rails[nr]->addr);
    s->rail = nr;
    enqueue_one(p->rails[nr], s);
}

/* Writes of a failed window that may have reached the peer: once the peer
 * has closed the old connection (token) -- asked through another rail --
 * nothing it carried can land any more, and they go to another rail;
 * without that answer they fail with the rail's error. */
static void fence_and_move(struct tcp_rail *r, uint64_t token,
                           struct slice *list, int code, int native,
                           const char *why)
{
    struct tcp_peer *p = r->peer;
    struct tcp_transport *t = p->t;
    int rc = TENT_EPEER;
    char fwhy[512] = "no other rail to fence the connection through";
    /* the other rails first; the rail itself (a new connection to the same
     * server) last, when the connection was refused or closed, as a server
     * that evicted it still answers */
    bool own = conn_lost(code, native);
    /* a fence the full server refused is asked again, as a window is */
    for (int a = 0; rc && a <= (own ? TCP_RETRIES : 0); a++) {
        if (a > 0 && rc != TENT_EPEER)
            break;
        pause_for_try(a);
        for (int j = 0; j <= p->nrails && rc; j++) {
            int i = j < p->nrails ? j : r->idx;
            struct tcp_rail *o = p->rails[i];
            if (j < p->nrails ? o == r || !tent_rail_usable(p->rs, i) : !own)
                continue;
            rc = tcp_fence(t->base.env->auth, t->base.env->segment_name,
                           o->host, o->port, o->src, t->timeout_ms, token);
            if (rc)
                snprintf(fwhy, sizeof(fwhy), "%s", tent_last_error());
            else
                LOG_INFO("tcp: rail %s: the peer closed the old connection "
                         "(fenced through %s); its writes go elsewhere",
                         r->addr, o->addr);
        }
    }
    while (list) {
        struct slice *n = list->next;
        if (rc == TENT_OK)
            reroute(t, p, list, code, native, why, own);
        else
            slice_done(t, list, code, native, "%s (and no fence: %s)", why,
                       fwhy);
        list = n;
    }
}

/* ---- stealing -------------------------------------------------------------
 * Picks predict; stealing corrects.  A pool thread with nothing queued on
 * its rail takes a window's worth of slices from the tail of a sibling rail
 * whose connections are all busy and which has more than a window queued, so
 * that a batch's rails finish together even when the bandwidth estimates
 * are off, and work queued on a rail that slowed down moves to the others.
 * Only unsent slices move; a rail too slow for normal picks (or paused)
 * steals nothing. */

/* Sends a pool thread to another rail of the peer with a free connection
 * and nothing queued, to steal from r. */
static void poke_siblings(struct tcp_rail *r)
{
    struct tcp_peer *p = r->peer;
    for (int i = 0; i < p->nrails; i++) {
        struct tcp_rail *o = p->rails[i];
        if (o == r || !tent_rail_may_take(p->rs, i))
            continue;
        pthread_mutex_lock(&o->lock);
        bool woke = false;
        if (o->nidle > 0 && !queued_locked(o) && !o->stop) {
            rail_kick(o, 1);
            woke = true;
        }
        pthread_mutex_unlock(&o->lock);
        if (woke)
            return;
    }
}

/* Takes the tail of victim's most urgent queue, at most slice_size bytes
 * (one slice at least), unless a slice there must avoid rail avoid_idx.
 * Caller holds victim->lock.  Returns the list, NULL when none. */
static struct slice *cut_tail_locked(struct tcp_rail *victim, int avoid_idx,
                                     uint32_t budget, int *cls,
                                     uint64_t *bytes_out)
{
    int k = 0;
    while (k < TENT_NPRIO && !victim->q[k].head)
        k++;
    if (k == TENT_NPRIO)
        return NULL;
    struct squeue *q = &victim->q[k];
    uint64_t total = 0;
    for (struct slice *s = q->head; s; s = s->next)
        total += s->len;
    /* the suffix: the shortest run from the tail over budget, minus one */
    struct slice *prev = NULL, *cut = q->head;
    uint64_t before = 0;
    while (cut->next && total - before > budget) {
        before += cut->len;
        prev = cut;
        cut = cut->next;
    }
    for (struct slice *s = cut; s; s = s->next)
        if (s->avoid & (1u << avoid_idx))
            return NULL;
    if (prev)
        prev->next = NULL;
    else
        q->head = NULL;
    q->tail = prev;
    *bytes_out = total - before;
    victim->q_bytes -= total - before;
    *cls = k;
    return cut;
}

static bool steal(struct tcp_rail *r)
{
    struct tcp_peer *p = r->peer;
    struct tcp_transport *t = p->t;
    if (!tent_rail_may_take(p->rs, r->idx))
        return false;
    struct tcp_rail *victim = NULL;
    uint64_t most = t->slice_size;
    for (int i = 0; i < p->nrails; i++) {
        struct tcp_rail *o = p->rails[i];
        if (o == r)
            continue;
        pthread_mutex_lock(&o->lock);
        if (o->nidle == 0 && o->q_bytes > most) {
            most = o->q_bytes;
            victim = o;
        }
        pthread_mutex_unlock(&o->lock);
    }
    if (!victim)
        return false;
    int k = 0;
    uint64_t bytes = 0;
    pthread_mutex_lock(&victim->lock);
    struct slice *list =
        victim->nidle == 0 && victim->q_bytes > t->slice_size
            ? cut_tail_locked(victim, r->idx, t->slice_size, &k, &bytes)
            : NULL;
    pthread_mutex_unlock(&victim->lock);
    if (!list)
        return false;
    struct slice *tail = list;
    for (struct slice *s = list; s; s = s->next) {
        tent_rail_move(p->rs, victim->idx, r->idx, s->len, &s->tk);
        s->rail = r->idx;
        tail = s;
    }
    /* queued ahead of what r's picks gave it later: it waited already */
    pthread_mutex_lock(&r->lock);
    tail->next = r->q[k].head;
    r->q[k].head = list;
    if (!r->q[k].tail)
        r->q[k].tail = tail;
    r->q_bytes += bytes;
    pthread_mutex_unlock(&r->lock);
    return true;
}

/* The connection each thread last lent, per rail (a few rails per thread;
 * a hint only: the rail may be gone and its address reused). */
#define LEND_HINTS 4
struct lend_hint {
    const struct tcp_rail *r;
    int w;
};
static _Thread_local struct lend_hint lend_hints[LEND_HINTS];
static _Thread_local unsigned lend_hint_next;

/* The place on r's idle stack of the connection this thread lends next:
 * the one it lent last on r while that one is idle and connected, else the
 * most recently idle one.  A connection that keeps carrying the same
 * thread's requests keeps the peer's server thread serving it on one CPU: on a
 * loopback peer that worker runs beside its sender (rpc_server.c,
 * tcp_loopback_follow_cpu), and two threads that took whichever connection
 * was on top swapped their workers' CPUs every few requests (1,600 forced
 * migrations in 3 s of 1 MiB writes from 2 threads).  Pool threads keep
 * to theirs the same way (slot_take_locked).  Caller holds lock;
 * r->nidle > 0: hint_at_locked, the place of the one lent last or -1;
 * lend_pick_locked, that or the top. */
static int hint_at_locked(const struct tcp_rail *r)
{
    for (int h = 0; h < LEND_HINTS; h++) {
        if (lend_hints[h].r != r)
            continue;
        for (int i = r->nidle - 1; i >= 0; i--)
            if (r->idle[i] == lend_hints[h].w && r->conns[lend_hints[h].w] &&
                r->conns[lend_hints[h].w]->fd >= 0)
                return i;
        break;
    }
    return -1;
}

static int lend_pick_locked(const struct tcp_rail *r)
{
    int at = hint_at_locked(r);
    return at >= 0 ? at : r->nidle - 1;
}

/* Remembers that this thread lent (or, a pool thread, served) w of r. */
static void lend_hint_set(const struct tcp_rail *r, int w)
{
    for (int h = 0; h < LEND_HINTS; h++) {
        if (lend_hints[h].r == r) {
            lend_hints[h].w = w;
            return;
        }
    }
    lend_hints[lend_hint_next++ % LEND_HINTS] = (struct lend_hint){r, w};
}

/* ---- the pool --------------------------------------------------------- */

/* One pool of threads per engine (workers; by default twice the online
 * CPUs, 8 to 64), started as work needs them: a rail with work and a free
 * connection is put on the pool's ready list, and a pool thread takes a
 * window off it on one of its connections.  A window is slices of one
 * opcode and one class (so only one direction carries bulk data and
 * neither side can block the other), at most slice_size bytes or
 * WINDOW_SLICES slices; the thread sends every request, then reads the
 * answers in order.  A slow or dead peer holds a pool thread only for the
 * window it is sending (bounded by timeout_ms, or rail_stall_ms with
 * another rail). */

static void *pool_main(void *arg);

/* Starts one more pool thread (caller holds pool_mu); false when the pool
 * is full or the thread cannot be had. */
static bool pool_grow_locked(struct tcp_transport *t)
{
    if (t->pool_n >= t->pool_max || t->pool_stop)
        return false;
    struct pool_thread *pt = &t->pool[t->pool_n];
    pt->idx = t->pool_n;
    pt->t = t;
    pt->woken = false;
    if (pthread_create(&pt->th, NULL, pool_main, pt)) {
        LOG_WARN("tcp: cannot start pool thread %d: %s", t->pool_n + 1,
                 strerror(errno));
        return false;
    }
    t->pool_n++;
    return true;
}

/* Sees that n pool threads are on their way to serve r (queued work, a
 * fence job or a steal), counting those asked for before that have not
 * taken it yet (want), and no more than r has free connections (one for a
 * fence job or a steal, which need none): r goes to the back of the ready
 * list unless it is there, and the threads missing are woken (or
 * started).  Caller holds r->lock (nidle). */
static void rail_kick(struct tcp_rail *r, int n)
{
    struct tcp_transport *t = r->peer->t;
    int room = r->nidle > 0 ? r->nidle : 1;
    if (n > room)
        n = room;
    pthread_mutex_lock(&t->pool_mu);
    if (!r->dead && n > r->want) {
        if (!r->ready) {
            r->ready = true;
            r->ready_next = NULL;
            if (t->ready_tail)
                t->ready_tail->ready_next = r;
            else
                t->ready_head = r;
            t->ready_tail = r;
        }
        int more = n - r->want;
        r->want = n;
        for (int i = 0; i < more; i++) {
            if (t->pool_nidle > 0) {
                struct pool_thread *pt =
                    &t->pool[t->pool_stack[--t->pool_nidle]];
                pt->woken = true;
                pthread_cond_signal(&pt->cv);
            } else if (!pool_grow_locked(t)) {
                break;
            }
        }
    }
    pthread_mutex_unlock(&t->pool_mu);
}

/* Takes r off the ready list (caller holds pool_mu). */
static void ready_remove_locked(struct tcp_transport *t, struct tcp_rail *r)
{
    if (!r->ready)
        return;
    struct tcp_rail **pp = &t->ready_head, *prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->ready_next;
    }
    if (*pp)
        *pp = r->ready_next;
    if (t->ready_tail == r)
        t->ready_tail = prev;
    r->ready = false;
    r->ready_next = NULL;
    r->want = 0;
}

/* The free slot a pool thread takes (caller holds lock; nidle > 0): the
 * one it served last when free and open (lend_pick_locked says why), else
 * the topmost one with an open connection, else the top. */
static int slot_take_locked(struct tcp_rail *r)
{
    int at = hint_at_locked(r);
    for (int i = r->nidle - 1; at < 0 && i >= 0; i--)
        if (r->conns[r->idle[i]] && r->conns[r->idle[i]]->fd >= 0)
            at = i;
    if (at < 0)
        at = r->nidle - 1;
    int w = r->idle[at];
    memmove(&r->idle[at], &r->idle[at + 1],
            (size_t)(r->nidle - 1 - at) * sizeof(r->idle[0]));
    r->nidle--;
    lend_hint_set(r, w);
    return w;
}

/* Before a new connection for a window with slices tried again: a pause
 * that doubles with each try (RETRY_PAUSE_MS, 2x, 4x, ...), with jitter so
 * that initiators refused together do not come back together. */
static void retry_pause(struct slice **w, int n)
{
    int tries = 0;
    for (int i = 0; i < n; i++)
        if (w[i]->tries > tries)
            tries = w[i]->tries;
    pause_for_try(tries);
}

/* Fails a fence job's writes (the rail stops) or fences and moves them. */
static void fence_job_run(struct tcp_rail *r, struct fence_job *j, bool fail)
{
    if (fail)
        fail_list(r->peer->t, j->list, j->code, j->native, j->why);
    else
        fence_and_move(r, j->token, j->list, j->code, j->native, j->why);
    free(j);
}

/* The connection of r's slot me, made on first use (NULL when out of
 * memory). */
static struct tcp_conn *slot_conn_locked(struct tcp_rail *r, int me)
{
    struct tcp_conn *c = r->conns[me];
    if (c)
        return c;
    c = tcp_conn_new();
    if (c) {
        c->path_progress_ms = &r->progress_ms;
        c->mark_prio = r->peer->t->sock_prio;
        c->acc.incarnation = r->peer->base.incarnation;
        r->conns[me] = c;
    }
    return c;
}

/* Closes (abort: resets) busy connection c of r under the rail's lock:
 * rail_stop shuts down the fds of busy connections and must not see the
 * number once close has freed it for reuse. */
static void conn_drop(struct tcp_rail *r, struct tcp_conn *c, bool abort)
{
    pthread_mutex_lock(&r->lock);
    if (abort)
        tcp_conn_abort(c);
    else
        tcp_conn_close(c);
    pthread_mutex_unlock(&r->lock);
}

/* Sends window w[0..n) on c (opened first when it is not open: the peer
 * may have closed it while idle) and takes its answers; 0 or the failure
 * (native: its errno). */
static int window_run(struct tcp_rail *r, struct tcp_conn *c, struct slice **w,
                      int n, bool low, int *native)
{
    struct tcp_transport *t = r->peer->t;
    int rc = TENT_OK;
    if (c->fd >= 0 && tcp_conn_closed_while_idle(c)) {
        LOG_DEBUG("tcp: peer %s closed an idle connection; reconnecting",
                  r->addr);
        conn_drop(r, c, false);
    }
    if (c->fd < 0) {
        retry_pause(w, n);
        /* With another rail to go to, a connect (or its hello) that has
         * not finished within the stall window is a stalled path too: a
         * far end that went down leaves SYNs unanswered until ARP gives
         * up, seconds later, and the probe slice with them. */
        int open_ms = t->timeout_ms;
        if (r->peer->nrails > 1 && t->stall_ms > 0 && t->stall_ms < open_ms)
            open_ms = t->stall_ms;
        rc = tcp_conn_open(c, t->base.env->auth, t->base.env->segment_name,
                           r->host, r->port, r->src, t->loopback_cc, open_ms,
                           native);
    }
    tcp_conn_window(c, w, n, t->timeout_ms, low ? low_window_pace(r) : 0);
    c->stall_ms = r->peer->nrails > 1 ? t->stall_ms : 0;
    if (!rc)
        rc = tcp_conn_step(c, r->addr, true, t->timeout_ms, native);
    return rc;
}

/* Sends windows of r on one of its connections until it has no work a
 * thread may take, no free connection, or SERVE_WINDOWS were sent (then
 * it goes to the back of the ready list). */
static void serve_rail(struct tcp_rail *r)
{
    struct tcp_transport *t = r->peer->t;
    struct slice *w[WINDOW_SLICES];
    int me = -1; /* the slot held */
    bool tried = false;
    for (int sent = 0;; sent++) {
        uint64_t low_cap = low_budget(r);
        pthread_mutex_lock(&r->lock);
        if (r->stop) {
            if (me >= 0)
                slot_free_locked(r, me);
            pthread_mutex_unlock(&r->lock);
            return;
        }
        struct fence_job *fj = r->fjobs;
        if (fj) {
            r->fjobs = fj->next;
            pthread_mutex_unlock(&r->lock);
            fence_job_run(r, fj, false);
            continue;
        }
        bool held = false;
        int k = next_queue_held_locked(r, low_cap, &held);
        if (k < 0 && held && !r->slot_wait) {
            /* LOW waits for its slot: one thread per rail sleeps until
             * then (10 ms at a time, so a stop is seen), holding no
             * connection, and serves it */
            r->slot_wait = true;
            if (me >= 0)
                slot_free_locked(r, me);
            me = -1;
            pthread_mutex_unlock(&r->lock);
            tent_slots_wait(tent_railset_slots(r->peer->rs), TENT_PRIO_LOW,
                            10000000ull);
            pthread_mutex_lock(&r->lock);
            r->slot_wait = false;
            pthread_mutex_unlock(&r->lock);
            sent--; /* no window sent: the rail's turn goes on */
            continue;
        }
        if (k < 0 && !tried && r->peer->nrails > 1 && !queued_locked(r)) {
            tried = true;
            pthread_mutex_unlock(&r->lock);
            (void)steal(r);
            continue; /* what it stole, or what came meanwhile */
        }
        if (k < 0 || (me < 0 && r->nidle == 0) || sent >= SERVE_WINDOWS) {
            if (me >= 0)
                slot_free_locked(r, me);
            if (k >= 0 && sent >= SERVE_WINDOWS)
                rail_kick(r, 1);
            pthread_mutex_unlock(&r->lock);
            return;
        }
        if (me < 0)
            me = slot_take_locked(r);
        tried = false;
        uint64_t wbytes;
        int n = take_window_locked(r, k, w, &wbytes);
        bool low = k == TENT_PRIO_LOW;
        if (low)
            r->low_wire += wbytes;
        /* more than this window: another thread takes it in parallel */
        if (r->nidle > 0 && next_queue_locked(r, low_cap) >= 0)
            rail_kick(r, 1);
        struct tcp_conn *c = slot_conn_locked(r, me);
        pthread_mutex_unlock(&r->lock);
        if (!c) {
            /* as a failed window, unsent: nothing of it reached the peer */
            struct tcp_conn none = {.fd = -1};
            tent_set_error(TENT_ENOMEM,
                           "tcp: out of memory for a "
                           "connection to %s",
                           r->addr);
            tcp_conn_window(&none, w, n, t->timeout_ms, 0);
            window_finish(r, &none, TENT_ENOMEM, 0, low, wbytes, NULL, false);
            continue;
        }

        int native = 0;
        int rc = window_run(r, c, w, n, low, &native);
        if (rc < 0) {
            /* a refused or closed connection is tried again: routine for
             * a peer whose server is full */
            if (conn_lost(rc, native))
                LOG_INFO("tcp: rail %s: %s; %d slice(s) go elsewhere, are "
                         "tried again or fail",
                         r->addr, tent_last_error(), n);
            else
                LOG_WARN("tcp: rail %s: %s; %d slice(s) and the rail's queue "
                         "go elsewhere or fail",
                         r->addr, tent_last_error(), n);
            char why[512];
            snprintf(why, sizeof(why), "%s", tent_last_error());
            conn_drop(r, c, true);
            struct slice *rest =
                conn_lost(rc, native) ? NULL : take_queue_at_failure(r);
            struct slice *fence = NULL;
            window_finish(r, c, rc, native, low, wbytes, &fence, false);
            reroute_list(r, rest, rc, native, why);
            if (fence)
                fence_and_move(r, c->token, fence, rc, native, why);
            continue;
        }
        window_finish(r, c, TENT_OK, 0, low, wbytes, NULL, true);
    }
}

/* Closes r's connections idle for idle_ms or more (their slots stay). */
static void rail_sweep(struct tcp_rail *r, long long now, int idle_ms)
{
    struct tcp_conn *gone[MAX_CONNS];
    int ngone = 0;
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->nidle; i++) {
        int w = r->idle[i];
        struct tcp_conn *c = r->conns[w];
        if (c && c->n == 0 && now - r->used_ms[w] >= idle_ms) {
            gone[ngone++] = c;
            r->conns[w] = NULL;
        }
    }
    pthread_mutex_unlock(&r->lock);
    for (int i = 0; i < ngone; i++) {
        if (gone[i]->fd >= 0)
            LOG_DEBUG("tcp: rail %s: a connection idle for %d ms closes",
                      r->addr, idle_ms);
        tcp_conn_close(gone[i]);
        free(gone[i]);
    }
}

/* How often the idle sweep runs: a quarter of idle_timeout_ms, within
 * [10 ms, 1 s]. */
static int sweep_every_ms(const struct tcp_transport *t)
{
    int ms = t->idle_ms / 4;
    return ms < 10 ? 10 : ms > 1000 ? 1000 : ms;
}

/* Closes every peer's idle connections when the sweep is due (one thread
 * at a time: the one that moves next_sweep). */
static void sweep_if_due(struct tcp_transport *t)
{
    long long now = tent_now_ms();
    long long due = atomic_load(&t->next_sweep);
    if (now < due || !atomic_compare_exchange_strong(&t->next_sweep, &due,
                                                     now + sweep_every_ms(t)))
        return;
    pthread_mutex_lock(&t->lock);
    for (struct tcp_peer *p = t->peers; p; p = p->next)
        for (int i = 0; i < p->nrails; i++)
            rail_sweep(p->rails[i], now, t->idle_ms);
    pthread_mutex_unlock(&t->lock);
}

/* A pool thread: serves the rails on the ready list.  The first one also
 * wakes for the idle sweep while there is nothing to serve. */
static void *pool_main(void *arg)
{
    struct pool_thread *me = arg;
    struct tcp_transport *t = me->t;
    bool sweeper = me->idx == 0;
    pthread_mutex_lock(&t->pool_mu);
    while (!t->pool_stop) {
        struct tcp_rail *r = t->ready_head;
        if (!r) {
            t->pool_stack[t->pool_nidle++] = me->idx;
            me->woken = false;
            bool timed_out = false;
            while (!me->woken && !t->pool_stop && !timed_out) {
                if (sweeper) {
                    struct timespec ts;
                    clock_gettime(CLOCK_REALTIME, &ts);
                    long long ns =
                        ts.tv_nsec + (long long)sweep_every_ms(t) * 1000000LL;
                    ts.tv_sec += ns / 1000000000LL;
                    ts.tv_nsec = ns % 1000000000LL;
                    timed_out = pthread_cond_timedwait(&me->cv, &t->pool_mu,
                                                       &ts) == ETIMEDOUT;
                } else {
                    pthread_cond_wait(&me->cv, &t->pool_mu);
                }
            }
            if (!me->woken) /* still on the stack */
                for (int i = 0; i < t->pool_nidle; i++)
                    if (t->pool_stack[i] == me->idx) {
                        t->pool_stack[i] = t->pool_stack[--t->pool_nidle];
                        break;
                    }
            if (!t->ready_head && !t->pool_stop) {
                pthread_mutex_unlock(&t->pool_mu);
                sweep_if_due(t);
                pthread_mutex_lock(&t->pool_mu);
            }
            continue;
        }
        if (--r->want <= 0)
            ready_remove_locked(t, r);
        r->busy++;
        pthread_mutex_unlock(&t->pool_mu);
        serve_rail(r);
        pthread_mutex_lock(&t->pool_mu);
        if (--r->busy == 0)
            pthread_cond_broadcast(&t->pool_done);
        pthread_mutex_unlock(&t->pool_mu);
        sweep_if_due(t);
        pthread_mutex_lock(&t->pool_mu);
    }
    pthread_mutex_unlock(&t->pool_mu);
    return NULL;
}

/* ---- the lent connection ----------------------------------------------------
 * A submit that makes one window to a rail (at most slice_size bytes, one
 * opcode, not LOW; writes only to a peer of one rail, as a write lent to a
 * peer of several could need a fence, which blocks) skips the hand-off to
 * the pool when the rail has no queued work a pool thread may take now
 * (LOW slices held back by their wire budget do not count): the submitting
 * thread borrows an idle connection of the rail, sends what the socket
 * takes without blocking and returns; status calls on the peer's tasks (and
 * quiesce) move the window on with the same non-blocking steps until its
 * answers are in, then give the connection back.  Every idle connection
 * can be lent, so each thread of a multi-threaded caller drives its own
 * (lend_pick_locked).  The lend thread moves lent windows on every
 * LEND_TICK_MS while any is out, so bytes move and deadlines are checked
 * for a caller that polls late or not at all.
 */

/* Gives the lent connection w back: onto the idle stack, and a pool
 * thread to it when work waits that a thread may take.  Caller holds
 * lend_lock[w]. */
static void lend_return(struct tcp_rail *r, int w)
{
    uint64_t low_cap = low_budget(r);
    pthread_mutex_lock(&r->lock);
    atomic_fetch_and(&r->lent, ~(1u << w));
    slot_free_locked(r, w);
    if (next_queue_locked(r, low_cap) >= 0 || r->fjobs)
        rail_kick(r, 1);
    pthread_mutex_unlock(&r->lock);
    atomic_fetch_sub(&r->peer->t->nlent, 1);
}

/* The window lent on connection w ended (rc as window_finish). */
static void lend_finish(struct tcp_rail *r, int w, int rc, int native)
{
    struct tcp_conn *c = r->conns[w];
    struct slice *rest = NULL, *fence = NULL;
    char why[512] = "";
    if (rc < 0) {
        if (conn_lost(rc, native))
            LOG_INFO("tcp: rail %s: %s; %d slice(s) go elsewhere, are tried "
                     "again or fail",
                     r->addr, tent_last_error(), c->n);
        else
            LOG_WARN("tcp: rail %s: %s; %d slice(s) go elsewhere or fail",
                     r->addr, tent_last_error(), c->n);
        snprintf(why, sizeof(why), "%s", tent_last_error());
        tcp_conn_abort(c);
        if (!conn_lost(rc, native))
            rest = take_queue_at_failure(r);
    }
    /* lent windows to a peer with several rails are reads (pend_flush):
     * only a closed connection's writes need a fence, which blocks: a pool
     * thread runs it (fence_job) */
    uint64_t token = c->token;
    window_finish(r, c, rc < 0 ? rc : TENT_OK, native, false, 0,
                  rc < 0 && conn_lost(rc, native) ? &fence : NULL, false);
    struct fence_job *fj = NULL;
    if (fence) {
        fj = calloc(1, sizeof(*fj));
        if (fj) {
            fj->token = token;
            fj->list = fence;
            fj->code = rc;
            fj->native = native;
            snprintf(fj->why, sizeof(fj->why), "%s", why);
            pthread_mutex_lock(&r->lock);
            fj->next = r->fjobs;
            r->fjobs = fj;
            pthread_mutex_unlock(&r->lock);
        } else {
            fail_list(r->peer->t, fence, rc, native, why);
        }
    }
    lend_return(r, w);
    if (rc < 0)
        reroute_list(r, rest, rc, native, why);
}

/* Moves r's lent windows on, those no other thread is moving. */
static void lend_progress(struct tcp_rail *r)
{
    unsigned mask = atomic_load(&r->lent);
    for (int w = 0; mask; w++, mask >>= 1) {
        if (!(mask & 1u) || pthread_mutex_trylock(&r->lend_lock[w]))
            continue;
        /* conns[w] is only read while lent: a free slot's may be closed
         * for idleness (rail_sweep) */
        struct tcp_conn *c =
            (atomic_load(&r->lent) & (1u << w)) ? r->conns[w] : NULL;
        if (c && c->n > 0) {
            int native;
            int rc = tcp_conn_step(c, r->addr, false, r->peer->t->timeout_ms,
                                   &native);
            if (rc != 0)
                lend_finish(r, w, rc, native);
        }
        pthread_mutex_unlock(&r->lend_lock[w]);
    }
}

static void peer_progress(struct tcp_peer *p)
{
    for (int i = 0; i < p->nrails; i++)
        lend_progress(p->rails[i]);
}

/* Wakes the lend thread when it sleeps: a window is out. */
static void lend_thread_poke(struct tcp_transport *t)
{
    if (atomic_load(&t->lend_sleeping)) {
        pthread_mutex_lock(&t->lend_mu);
        pthread_cond_signal(&t->lend_cv);
        pthread_mutex_unlock(&t->lend_mu);
    }
}

/* Sends the slices list (one opcode, one class, at most WINDOW_SLICES) from
 * this thread over an idle open connection without blocking; false
 * (nothing done) when none can be had now, or when queued work that a pool
 * thread may take now (which goes first) would be passed.  LOW slices held
 * back by their wire budget are not such work: a HIGH read lent past them is
 * what keeps its latency off the hand-off to the pool under a LOW stream. */
static bool run_lent(struct tcp_rail *r, struct slice *head)
{
    struct tcp_transport *t = r->peer->t;
    int w = -1;
    uint64_t low_cap = low_budget(r);
    pthread_mutex_lock(&r->lock);
    if (r->nidle > 0 && !r->stop && next_queue_locked(r, low_cap) < 0) {
        int at = lend_pick_locked(r);
        int cand = r->idle[at];
        if (r->conns[cand] && r->conns[cand]->fd >= 0) {
            w = cand;
            memmove(&r->idle[at], &r->idle[at + 1],
                    (size_t)(r->nidle - 1 - at) * sizeof(r->idle[0]));
            r->nidle--;
            atomic_fetch_or(&r->lent, 1u << w);
        }
    }
    pthread_mutex_unlock(&r->lock);
    if (w < 0)
        return false;
    lend_hint_set(r, w);
    /* a thread that just gave w back may still hold its lock */
    pthread_mutex_lock(&r->lend_lock[w]);
    atomic_fetch_add(&t->nlent, 1);
    struct tcp_conn *c = r->conns[w];
    if (tcp_conn_closed_while_idle(c)) {
        /* A pool thread reconnects it when it next takes it: let it. */
        LOG_DEBUG("tcp: peer %s closed an idle connection", r->addr);
        tcp_conn_close(c);
        lend_return(r, w);
        pthread_mutex_unlock(&r->lend_lock[w]);
        return false;
    }
    struct slice *win[WINDOW_SLICES];
    int n = 0;
    for (struct slice *s = head; s; s = s->next)
        win[n++] = s;
    tcp_conn_window(c, win, n, r->peer->t->timeout_ms, 0); /* never LOW */
    c->stall_ms = r->peer->nrails > 1 ? r->peer->t->stall_ms : 0;
    int native;
    int rc = tcp_conn_step(c, r->addr, false, r->peer->t->timeout_ms, &native);
    if (rc != 0)
        lend_finish(r, w, rc, native);
    pthread_mutex_unlock(&r->lend_lock[w]);
    /* after the send: the request does not wait for the thread switch */
    if (rc == 0)
        lend_thread_poke(t);
    return true;
}

/* ---- rails and peers ----------------------------------------------------- */

/* Queues a list of slices (one class) on r and asks the pool for as many
 * threads as it makes windows (at most the free connections). */
static void enqueue(struct tcp_rail *r, struct slice *head, struct slice *tail,
                    uint32_t nslices, uint64_t bytes)
{
    struct tcp_transport *t = r->peer->t;
    uint64_t by_bytes = (bytes + t->slice_size - 1) / t->slice_size;
    uint64_t by_count = (nslices + WINDOW_SLICES - 1) / WINDOW_SLICES;
    uint64_t windows = by_bytes > by_count ? by_bytes : by_count;
    uint64_t now = tent_now_ns();
    for (struct slice *s = head; s; s = s->next)
        s->enq_ns = now;
    struct squeue *q = &r->q[head->prio];
    pthread_mutex_lock(&r->lock);
    if (q->tail)
        q->tail->next = head;
    else
        q->head = head;
    q->tail = tail;
    r->q_bytes += bytes;
    uint64_t free_slots = (uint64_t)r->nidle;
    bool backlog = windows > free_slots + 1;
    if (free_slots > 0 && !r->stop)
        rail_kick(r, (int)(windows < free_slots ? windows : free_slots));
    pthread_mutex_unlock(&r->lock);
    if (backlog && r->peer->nrails > 1)
        poke_siblings(r);
}

static void enqueue_one(struct tcp_rail *r, struct slice *s)
{
    s->next = NULL;
    enqueue(r, s, s, 1, s->len);
}

/* No pool thread serves r any more, none will, and its lent windows are
 * back or left behind (n > 0). */
static void rail_stop(struct tcp_rail *r)
{
    struct tcp_transport *t = r->peer->t;
    /* waits out threads still moving lent windows */
    for (int i = 0; i < MAX_CONNS; i++) {
        pthread_mutex_lock(&r->lend_lock[i]);
        pthread_mutex_unlock(&r->lend_lock[i]);
    }
    pthread_mutex_lock(&r->lock);
    r->stop = true;
    /* the connections in use: a pool thread blocked on one returns */
    unsigned lent = atomic_load(&r->lent);
    bool is_free[MAX_CONNS] = {false};
    for (int i = 0; i < r->nidle; i++)
        is_free[r->idle[i]] = true;
    for (int i = 0; i < r->nconns; i++)
        if (!is_free[i] && !(lent & (1u << i)) && r->conns[i] &&
            r->conns[i]->fd >= 0)
            shutdown(r->conns[i]->fd, SHUT_RDWR);
    pthread_mutex_unlock(&r->lock);
    pthread_mutex_lock(&t->pool_mu);
    r->dead = true;
    ready_remove_locked(t, r);
    while (r->busy > 0)
        pthread_cond_wait(&t->pool_done, &t->pool_mu);
    pthread_mutex_unlock(&t->pool_mu);
}

static void rail_free(struct tcp_rail *r)
{
    for (int i = 0; i < MAX_CONNS; i++) {
        if (r->conns[i])
            tcp_conn_close(r->conns[i]);
        free(r->conns[i]);
    }
    while (r->fjobs) {
        struct fence_job *j = r->fjobs;
        r->fjobs = j->next;
        fence_job_run(r, j, true);
    }
    pthread_mutex_destroy(&r->lock);
    for (int i = 0; i < MAX_CONNS; i++)
        pthread_mutex_destroy(&r->lend_lock[i]);
    free(r);
}

/* A rail with nconns free slots and no connection yet (opened on demand). */
static int rail_new(struct tcp_peer *p, int idx, const struct tent_rail *d,
                    struct tcp_rail **out)
{
    struct tcp_transport *t = p->t;
    struct tcp_rail *r = calloc(1, sizeof(*r));
    if (!r)
        return tent_set_error(TENT_ENOMEM, "tcp: out of memory");
    r->peer = p;
    r->idx = idx;
    snprintf(r->host, sizeof(r->host), "%s", d->peer_host);
    r->port = d->peer_port;
    snprintf(r->src, sizeof(r->src), "%s", d->local_addr);
    char hp[TENT_NIC_ADDR_MAX + 16];
    tent_net_format_hostport(hp, sizeof(hp), r->host, r->port);
    if (r->src[0])
        snprintf(r->addr, sizeof(r->addr), "%s (from %s)", hp, r->src);
    else
        snprintf(r->addr, sizeof(r->addr), "%s", hp);
    atomic_init(&r->lent, 0u);
    pthread_mutex_init(&r->lock, NULL);
    for (int i = 0; i < MAX_CONNS; i++)
        pthread_mutex_init(&r->lend_lock[i], NULL);
    r->nconns = t->nconns;
    /* slot 0 on top: the first connection opened is the first used */
    for (int i = r->nconns - 1; i >= 0; i--)
        r->idle[r->nidle++] = i;
    *out = r;
    return TENT_OK;
}

/* The rails towards a peer that publishes nics ("<name>=<host>:<port>,..."):
 * one per (local NIC, peer NIC) pair the kernel routes over the local NIC;
 * a single rail to the peer's rpc_addr when none. */
static size_t plan_rails(struct tcp_transport *t, const char *rpc_addr,
                         const char *nics, struct tent_rail *out)
{
    size_t n = 0;
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", nics);
    char *save = NULL;
    for (char *e = strtok_r(buf, ",", &save); e && n < TENT_MAX_RAILS;
         e = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(e, '=');
        char host[TENT_NIC_ADDR_MAX];
        uint16_t port;
        if (!eq || eq == e ||
            tent_net_split_hostport(eq + 1, host, sizeof(host), &port) != 0)
            continue;
        *eq = '\0';
        for (size_t i = 0; i < t->nnics && n < TENT_MAX_RAILS; i++) {
            const struct tent_nic *l = &t->nics[i];
            if (!tent_nic_routes_to(l, host))
                continue;
            struct tent_rail *r = &out[n++];
            memset(r, 0, sizeof(*r));
            snprintf(r->local_nic, sizeof(r->local_nic), "%s", l->name);
            snprintf(r->local_addr, sizeof(r->local_addr), "%s", l->addr);
            snprintf(r->peer_nic, sizeof(r->peer_nic), "%s", e);
            snprintf(r->peer_host, sizeof(r->peer_host), "%s", host);
            r->peer_port = port;
            r->link_bw = l->speed_mbps ? l->speed_mbps * 1e6 / 8 : 0;
        }
    }
    if (n == 0) {
        struct tent_rail *r = &out[0];
        memset(r, 0, sizeof(*r));
        if (tent_net_split_hostport(rpc_addr, r->peer_host,
                                    sizeof(r->peer_host), &r->peer_port) == 0)
            n = 1;
    }
    return n;
}

static void peer_free(struct tcp_peer *p)
{
    for (int i = 0; i < p->nrails; i++)
        rail_free(p->rails[i]);
    tent_railset_free(p->rs);
    free(p);
}

/* Stops every rail of p and fails what is left on them. */
static void peer_stop(struct tcp_transport *t, struct tcp_peer *p,
                      const char *why)
{
    /* no pool thread serves any rail before any slice is failed: a
     * failed rail's slices move to the peer's other rails */
    for (int i = 0; i < p->nrails; i++)
        rail_stop(p->rails[i]);
    for (int i = 0; i < p->nrails; i++) {
        struct tcp_rail *r = p->rails[i];
        for (int k = 0; k < r->nconns; k++)
            if (r->conns[k] && r->conns[k]->n > 0) /* a lent window left */
                window_finish(r, r->conns[k], TENT_ESHUTDOWN, 0, false, 0, NULL,
                              false);
    }
    for (int i = 0; i < p->nrails; i++) {
        struct tcp_rail *r = p->rails[i];
        pthread_mutex_lock(&r->lock);
        struct slice *rest = take_all_locked(r);
        struct fence_job *fj = r->fjobs;
        r->fjobs = NULL;
        pthread_mutex_unlock(&r->lock);
        fail_list(t, rest, TENT_ESHUTDOWN, 0, why);
        while (fj) {
            struct fence_job *n = fj->next;
            fail_list(t, fj->list, TENT_ESHUTDOWN, 0, why);
            free(fj);
            fj = n;
        }
    }
    unsigned all = (1u << p->nrails) - 1;
    peer_gauge(t, atomic_load(&p->down_mask) == all ? TM_PEER_DOWN : TM_PEER_UP,
               -1);
}

/* peer_open: the rails towards the segment's rpc_addr and tcp_nics, read
 * once here; the pool connects them on their first windows. */
static int tcp_peer_open(struct tent_transport *base,
                         const struct tent_seg_view *seg, uint64_t incarnation,
                         struct tent_peer **out)
{
    struct tcp_transport *t = tcp_of(base);
    const struct tent_xport_env *env = base->env;
    char addr[256], nics[1024];
    if (!env->seg_attr(env->ctx, seg, "rpc_addr", addr, sizeof(addr)) || !*addr)
        return tent_set_error(
            TENT_EPEER, "tcp: segment '%s' publishes no rpc_addr", seg->name);
    if (!env->seg_attr(env->ctx, seg, "tcp_nics", nics, sizeof(nics)))
        nics[0] = '\0';
    struct tent_rail plan[TENT_MAX_RAILS];
    size_t n = plan_rails(t, addr, nics, plan);
    if (n == 0)
        return tent_set_error(TENT_EPEER,
                              "tcp: segment '%s' has no address to reach "
                              "(rpc_addr '%s')",
                              seg->name, addr);
    struct tcp_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return tent_set_error(TENT_ENOMEM, "tcp: out of memory");
    p->base.owner = base;
    p->base.incarnation = incarnation;
    p->t = t;
    snprintf(p->addr, sizeof(p->addr), "%s", addr);
    atomic_init(&p->down_mask, 0);
    int rc =
        tent_railset_new(env->sched, &t->sp, "tcp", seg->name, plan, n, &p->rs);
    for (size_t i = 0; !rc && i < n; i++) {
        rc = rail_new(p, (int)i, &plan[i], &p->rails[i]);
        if (!rc)
            p->nrails++;
    }
    if (!rc) {
        pthread_mutex_lock(&t->lock);
        if (t->accepting) {
            p->next = t->peers;
            if (t->peers)
                t->peers->prev = p;
            t->peers = p;
        } else {
            rc = tent_set_error(TENT_ESHUTDOWN,
                                "tcp: transport is shutting down");
        }
        pthread_mutex_unlock(&t->lock);
    }
    if (rc) { /* no rail was ever served */
        peer_free(p);
        return rc;
    }
    if (n > 1) {
        char list[1024] = "";
        for (int i = 0; i < p->nrails; i++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                     i ? ", " : "", p->rails[i]->addr);
        LOG_INFO("tcp: %d rails to segment '%s': %s", p->nrails, seg->name,
                 list);
    }
    peer_gauge(t, -1, TM_PEER_UP);
    *out = &p->base;
    return TENT_OK;
}

/* peer_close: no task of the peer is in flight; no pool thread serves it
 * any more, its connections are closed, its rails leave the scheduler. */
static void tcp_peer_close(struct tent_transport *base, struct tent_peer *h)
{
    struct tcp_transport *t = tcp_of(base);
    struct tcp_peer *p = (struct tcp_peer *)h;
    pthread_mutex_lock(&t->lock);
    /* uninstall may have taken the list (and closes what is on it) */
    bool listed = p->prev || t->peers == p;
    if (listed) {
        if (p->prev)
            p->prev->next = p->next;
        else
            t->peers = p->next;
        if (p->next)
            p->next->prev = p->prev;
    }
    pthread_mutex_unlock(&t->lock);
    if (!listed)
        return;
    peer_stop(t, p, "tcp: the peer was closed");
    peer_free(p);
}

/* ---- NICs served -----------------------------------------------------------
 * Loopback only when the engine is bound to a loopback address, else every
 * interface with an address (transports/tcp/nics to choose), each with a
 * listening address of the engine's RPC server, published as the
 * "tcp_nics" attribute.  Towards a peer, plan_rails builds one rail per
 * (local NIC, peer NIC) pair the kernel routes over that local NIC, or a
 * single rail to the peer's rpc_addr when no pair works.
 */

/* Whether a NIC is one transports/tcp/nics names (by name or address). */
static bool nic_wanted(const cJSON *want, const struct tent_nic *n)
{
    if (cJSON_IsString(want)) {
        char buf[512];
        snprintf(buf, sizeof(buf), "%s", want->valuestring);
        char *save = NULL;
        for (char *e = strtok_r(buf, ", ", &save); e;
             e = strtok_r(NULL, ", ", &save))
            if (strcmp(e, n->name) == 0 || strcmp(e, n->addr) == 0)
                return true;
        return false;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, want)
        if (cJSON_IsString(it) && (strcmp(it->valuestring, n->name) == 0 ||
                                   strcmp(it->valuestring, n->addr) == 0))
            return true;
    return false;
}

/* Chooses the NICs served and publishes them, each with a listening
 * address of the engine's RPC server: loopback only for an engine bound to
 * loopback, else the one the engine is bound to and the interfaces
 * transports/tcp/nics names.  Without nics, every interface with an address
 * when the engine has a cluster secret (every connection authenticates),
 * else the engine's own address alone: naming one address must not open
 * the others to anyone who reaches them. */
static int nics_setup(struct tcp_transport *t)
{
    const struct tent_xport_env *env = t->base.env;
    struct tent_nic all[MAX_NICS * 2];
    size_t nall = tent_nics_list(all, (size_t)MAX_NICS * 2);
    /* its kind was checked by tcp_install */
    const cJSON *want = tent_config_node(env->cfg, "transports/tcp/nics");
    if (want && !cJSON_IsString(want) && !cJSON_IsArray(want))
        want = NULL;
    const struct tent_nic *own = tent_nic_by_addr(all, nall, env->hostname);
    t->nnics = 0;
    if (tent_addr_is_loopback(env->hostname) || !own) {
        /* bound to loopback (or to an address no interface holds): that
         * address alone, as one NIC */
        struct tent_nic *n = &t->nics[t->nnics++];
        if (own) {
            *n = *own;
        } else {
            memset(n, 0, sizeof(*n));
            snprintf(n->name, sizeof(n->name), "%s",
                     tent_addr_is_loopback(env->hostname) ? "lo" : "default");
            snprintf(n->addr, sizeof(n->addr), "%s", env->hostname);
            n->family = strchr(env->hostname, ':') ? AF_INET6 : AF_INET;
            n->ifindex = if_nametoindex("lo");
            n->loopback = tent_addr_is_loopback(env->hostname);
        }
    } else {
        t->nics[t->nnics++] = *own;
        for (size_t i = 0;
             i < nall && t->nnics < MAX_NICS && (want || env->auth); i++) {
            if (all[i].loopback || &all[i] == own ||
                (want && !nic_wanted(want, &all[i])))
                continue;
            t->nics[t->nnics++] = all[i];
        }
    }
    char pub[1024] = "";
    for (size_t i = 0; i < t->nnics; i++) {
        struct tent_nic *n = &t->nics[i];
        uint16_t port = env->rpc_port;
        if (i > 0) {
            int rc = env->listen(env->ctx, n->addr, 0, &port);
            if (rc) {
                LOG_WARN("tcp: NIC %s (%s) is not served: %s", n->name, n->addr,
                         tent_last_error());
                memmove(n, n + 1, (t->nnics - i - 1) * sizeof(*n));
                t->nnics--;
                i--;
                continue;
            }
        }
        char hp[128];
        tent_net_format_hostport(hp, sizeof(hp), n->addr, port);
        size_t used = strlen(pub);
        snprintf(pub + used, sizeof(pub) - used, "%s%s=%s", used ? "," : "",
                 n->name, hp);
        tent_sched_note_nic(env->sched, n->name,
                            n->speed_mbps ? n->speed_mbps * 1e6 / 8
                                          : t->sp.default_bw);
    }
    return env->publish_attr(env->ctx, "tcp_nics", pub);
}

/* ---- ops ------------------------------------------------------------------
 */

/* transports/tcp/workers at most; 0 there: pool_default. */
#define TCP_POOL_CEIL 1024

static void lend_thread_stop(struct tcp_transport *t);

/* The pool's size by default: twice the online CPUs (a window's thread
 * sleeps while its bytes cross the network), at least 8 (two rails' worth
 * of connections), at most 64. */
static int pool_default(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long n = cpus > 0 ? 2 * cpus : 8;
    return (int)(n < 8 ? 8 : n > 64 ? 64 : n);
}

static int tcp_install(struct tent_transport *base)
{
    struct tcp_transport *t = tcp_of(base);
    const struct tent_xport_env *env = base->env;
    t->metrics = env->metrics;
    int64_t to, nc, ss, ws, lss, st, promo, nw, idle;
    int rc = tent_config_get_int_range(env->cfg, "transports/tcp/timeout_ms",
                                       3000, 1, 600000, &to);
    if (!rc)
        rc = tent_config_get_int_range(env->cfg, "transports/tcp/connections",
                                       4, 1, MAX_CONNS, &nc);
    if (!rc)
        rc = tent_config_get_int_range(env->cfg, "transports/tcp/slice_size",
                                       1 << 20, 4096, TCP_WIRE_MAX_DATA, &ss);
    if (!rc)
        rc = tent_config_get_int_range(env->cfg, "transports/tcp/window_size",
                                       2 << 20, 4096, TCP_WIRE_MAX_DATA, &ws);
    if (!rc)
        rc =
            tent_config_get_int_range(env->cfg, "transports/tcp/low_slice_size",
                                      64 << 10, 4096, TCP_WIRE_MAX_DATA, &lss);
    if (!rc)
        rc = tent_config_get_int_range(env->cfg, "transports/tcp/rail_stall_ms",
                                       500, 0, 600000, &st);
    if (!rc)
        rc = tent_config_get_int_range(
            env->cfg, "transports/tcp/priority_promotion_timeout_us", 10000, 0,
            60000000, &promo);
    if (!rc)
        rc = tent_config_get_int_range(env->cfg, "transports/tcp/workers", 0, 0,
                                       TCP_POOL_CEIL, &nw);
    if (!rc)
        rc = tent_config_get_int_range(env->cfg,
                                       "transports/tcp/idle_timeout_ms", 60000,
                                       1, 86400000, &idle);
    if (!rc)
        rc = tent_config_get_bool(env->cfg, "transports/tcp/socket_priority",
                                  true, &t->sock_prio);
    if (!rc)
        rc = tent_sched_params_load(env->cfg, "transports/tcp", &t->sp);
    const cJSON *nics = tent_config_node(env->cfg, "transports/tcp/nics");
    if (!rc && nics && !cJSON_IsNull(nics) && !cJSON_IsString(nics) &&
        !cJSON_IsArray(nics))
        rc = tent_config_wrong_kind("transports/tcp/nics", nics,
                                    "a string (comma list) or an array of "
                                    "names");
    if (rc)
        return rc;
    /* checked by the engine; absent (an environment built without one):
     * the default */
    snprintf(t->loopback_cc, sizeof(t->loopback_cc), "%s",
             env->loopback_cc ? env->loopback_cc : TENT_RPC_CC_DEFAULT);
    t->timeout_ms = (int)to;
    t->nconns = (int)nc;
    t->slice_size = (uint32_t)ss;
    t->window_size = (uint32_t)(ws > ss ? ws : ss);
    t->low_slice = (uint32_t)(lss < ss ? lss : ss);
    /* low_budget(): the LOW bytes a rail lets onto its wire; the HIGH pick
     * counts a rail's LOW bytes only that far: the rest waits behind HIGH in
     * our queues */
    t->sp.yield_wire_max = t->low_slice * (uint64_t)low_windows(t);
    /* bulk comes in slices of low_slice (LOW) or slice_size, either of which
     * may be below 64 KiB: the smaller one must still measure the rails */
    t->sp.sample_min = t->low_slice;
    t->stall_ms = (int)st;
    t->promo_ns = (uint64_t)promo * 1000u;
    t->pool_max = nw ? (int)nw : pool_default();
    t->idle_ms = (int)idle;
    atomic_init(&t->next_sweep, 0);
    /* The target half: peers' reads and writes of our memory. */
    rc = tcp_target_start(env);
    if (rc)
        return rc;
    rc = nics_setup(t);
    if (rc) {
        tcp_target_stop(env);
        return rc;
    }
    pthread_mutex_init(&t->lend_mu, NULL);
    pthread_cond_init(&t->lend_cv, NULL);
    if (pthread_create(&t->lend_thread, NULL, lend_main, t)) {
        pthread_cond_destroy(&t->lend_cv);
        pthread_mutex_destroy(&t->lend_mu);
        tcp_target_stop(env);
        return tent_set_error(TENT_ENOMEM, "tcp: cannot start the lend "
                                           "thread");
    }
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->pool_mu, NULL);
    pthread_cond_init(&t->pool_done, NULL);
    t->pool = calloc((size_t)t->pool_max, sizeof(*t->pool));
    t->pool_stack = calloc((size_t)t->pool_max, sizeof(*t->pool_stack));
    for (int i = 0; t->pool && i < t->pool_max; i++)
        pthread_cond_init(&t->pool[i].cv, NULL);
    /* one thread from the start (it also runs the idle sweep), the others
     * as work needs them */
    pthread_mutex_lock(&t->pool_mu);
    bool started = t->pool && t->pool_stack && pool_grow_locked(t);
    pthread_mutex_unlock(&t->pool_mu);
    if (!started) {
        for (int i = 0; t->pool && i < t->pool_max; i++)
            pthread_cond_destroy(&t->pool[i].cv);
        free(t->pool);
        free(t->pool_stack);
        pthread_cond_destroy(&t->pool_done);
        pthread_mutex_destroy(&t->pool_mu);
        pthread_mutex_destroy(&t->lock);
        lend_thread_stop(t);
        tcp_target_stop(env);
        return tent_set_error(TENT_ENOMEM, "tcp: cannot start the worker "
                                           "pool");
    }
    /* before the first submit, which nothing above can make */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&t->done_mu, NULL);
    t->serving = true;
    t->accepting = true;
    atomic_store(&t->accepting_a, true);
    return TENT_OK;
}

/* Moves every peer's lent windows on (quiesce: nobody may poll any more). */
static void progress_all_lent(struct tcp_transport *t)
{
    /* under the lock: peer_close takes a peer off the list before it stops
     * its rails (peer_progress takes only rail locks, non-blocking steps) */
    pthread_mutex_lock(&t->lock);
    for (struct tcp_peer *p = t->peers; p; p = p->next)
        peer_progress(p);
    pthread_mutex_unlock(&t->lock);
}

/* The lend thread (see "the lent connection" above). */
static void *lend_main(void *arg)
{
    struct tcp_transport *t = arg;
    int idle_ticks = 0; /* ticks since a window was last seen out */
    pthread_mutex_lock(&t->lend_mu);
    while (!t->lend_stop) {
        if (atomic_load(&t->nlent) == 0 &&
            idle_ticks >= LEND_LINGER_MS / LEND_TICK_MS) {
            atomic_store(&t->lend_sleeping, true);
            if (atomic_load(&t->nlent) == 0)
                pthread_cond_wait(&t->lend_cv, &t->lend_mu);
            atomic_store(&t->lend_sleeping, false);
            idle_ticks = 0;
            continue;
        }
        pthread_mutex_unlock(&t->lend_mu);
        /* a tick first: a window just lent is its lender's to move, and
         * most are done before the tick ends */
        poll(NULL, 0, LEND_TICK_MS);
        if (atomic_load(&t->nlent) > 0) {
            progress_all_lent(t);
            idle_ticks = 0;
        } else {
            idle_ticks++;
        }
        pthread_mutex_lock(&t->lend_mu);
    }
    pthread_mutex_unlock(&t->lend_mu);
    return NULL;
}

/* Only after an install that succeeded (the registry never uninstalls
 * another), so the thread runs. */
static void lend_thread_stop(struct tcp_transport *t)
{
    pthread_mutex_lock(&t->lend_mu);
    t->lend_stop = true;
    pthread_cond_signal(&t->lend_cv);
    pthread_mutex_unlock(&t->lend_mu);
    pthread_join(t->lend_thread, NULL);
    pthread_cond_destroy(&t->lend_cv);
    pthread_mutex_destroy(&t->lend_mu);
}

/* Waits (bounded) until no slice is queued or in flight. */
static int tcp_quiesce(struct tent_transport *base)
{
    struct tcp_transport *t = tcp_of(base);
    pthread_mutex_lock(&t->lock);
    bool idle = !t->accepting && !t->peers;
    t->accepting = false;
    atomic_store(&t->accepting_a, false);
    pthread_mutex_unlock(&t->lock);
    if (idle)
        return TENT_OK;
    long long start = tent_now_ms();
    long long limit_ms = 2LL * t->timeout_ms + 1000;
    while (atomic_load(&t->inflight) > 0) {
        long long ms = tent_now_ms() - start;
        if (ms > limit_ms)
            return tent_set_error(TENT_ETIMEDOUT,
                                  "tcp: %zu slice(s) still in flight after "
                                  "%lld ms",
                                  atomic_load(&t->inflight), ms);
        progress_all_lent(t);
        poll(NULL, 0, 1);
    }
    return TENT_OK;
}

static void tcp_uninstall(struct tent_transport *base)
{
    struct tcp_transport *t = tcp_of(base);
    if (t->serving && base->env)
        tcp_target_stop(base->env);
    lend_thread_stop(t); /* before the rails it moves windows on */
    pthread_mutex_lock(&t->lock);
    struct tcp_peer *p = t->peers;
    t->peers = NULL;
    t->accepting = false;
    pthread_mutex_unlock(&t->lock);
    /* handles the runtime did not close (an engine that abandoned us) */
    while (p) {
        struct tcp_peer *n = p->next;
        p->next = p->prev = NULL;
        peer_stop(t, p, "tcp: the transport was uninstalled");
        peer_free(p);
        p = n;
    }
    /* no rail is left to serve */
    pthread_mutex_lock(&t->pool_mu);
    t->pool_stop = true;
    int n = t->pool_n;
    for (int i = 0; i < n; i++)
        pthread_cond_signal(&t->pool[i].cv);
    pthread_mutex_unlock(&t->pool_mu);
    for (int i = 0; i < n; i++)
        pthread_join(t->pool[i].th, NULL);
    for (int i = 0; i < t->pool_max; i++)
        pthread_cond_destroy(&t->pool[i].cv);
    free(t->pool);
    free(t->pool_stack);
    pthread_cond_destroy(&t->pool_done);
    pthread_mutex_destroy(&t->pool_mu);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->done_cv);
    pthread_mutex_destroy(&t->done_mu);
}

static uint32_t tcp_caps(TENT_UNUSED struct tent_transport *t)
{
    return TENT_CAP_DRAM_TO_DRAM;
}

static bool tcp_can_reach(struct tent_transport *t,
                          const struct tent_seg_view *target)
{
    char a[256];
    return t->env->seg_attr(t->env->ctx, target, "rpc_addr", a, sizeof(a)) &&
           *a;
}

static int tcp_alloc_sub(struct tent_transport *t, size_t capacity,
                         struct tent_sub_batch **out)
{
    struct tcp_task *tasks;
    int rc = tent_sub_batch_new(t, sizeof(struct tcp_sub), capacity,
                                sizeof(*tasks), (void **)&tasks, out);
    if (!rc)
        ((struct tcp_sub *)*out)->tasks = tasks;
    return rc;
}

static void task_forget_err(struct tcp_task *k)
{
    free(atomic_exchange(&k->err, NULL));
    atomic_store(&k->code, 0);
}

static int tcp_free_sub(TENT_UNUSED struct tent_transport *t,
                        struct tent_sub_batch *base)
{
    struct tcp_sub *sb = (struct tcp_sub *)base;
    for (size_t i = 0; i < sb->base.capacity; i++)
        if (atomic_load(&sb->tasks[i].remaining) > 0)
            return tent_set_error(TENT_EBUSY,
                                  "tcp: task %zu still has %u slice(s) in "
                                  "flight",
                                  i, atomic_load(&sb->tasks[i].remaining));
    for (size_t i = 0; i < sb->base.capacity; i++)
        task_forget_err(&sb->tasks[i]);
    tent_sub_batch_delete(&sb->base, sb->tasks);
    return TENT_OK;
}

/* Slices of a submit queued per rail at the end, one wake-up per rail and
 * class, so that a pool thread finds the whole group and sends it as one
 * window. */
struct pending {
    struct tcp_rail *r;
    int prio;
    struct slice *head, *tail;
    uint64_t bytes;
    uint32_t nslices;
    int opcode; /* -1 once mixed */
};
#define MAX_PENDING 16

static void pend_flush(struct pending *q)
{
    /* a write lent to a peer with several rails could need a fence, which
     * blocks: those go to the pool; so does LOW, whose windows on the
     * wire the pool holds to the rail's bandwidth-delay product */
    bool lendable = q->prio != TENT_PRIO_LOW &&
                    (q->opcode == OPCODE_READ ||
                     (q->opcode == OPCODE_WRITE && q->r->peer->nrails == 1));
    if (lendable && q->bytes <= q->r->peer->t->slice_size &&
        q->nslices <= WINDOW_SLICES && run_lent(q->r, q->head))
        return;
    enqueue(q->r, q->head, q->tail, q->nslices, q->bytes);
}

static void pend_add(struct pending *pend, int *npend, struct tcp_rail *r,
                     struct slice *s)
{
    int j = 0;
    while (j < *npend && (pend[j].r != r || pend[j].prio != s->prio))
        j++;
    if (j == *npend && *npend == MAX_PENDING) {
        enqueue_one(r, s);
        return;
    }
    s->next = NULL;
    if (j == *npend) {
        pend[j] = (struct pending){
            .r = r, .prio = s->prio, .head = s, .tail = s, .opcode = s->opcode};
        (*npend)++;
    } else {
        pend[j].tail->next = s;
        pend[j].tail = s;
        if (pend[j].opcode != s->opcode)
            pend[j].opcode = -1;
    }
    pend[j].bytes += s->len;
    pend[j].nslices++;
}

/* Cuts one request into slices (all allocated before any is given a
 * rail). */
static int make_slices(struct tcp_transport *t, struct tcp_sub *sb,
                       const struct tent_xfer *x, struct slice **head,
                       uint32_t *count)
{
    *head = NULL;
    *count = 0;
    struct slice **link = head;
    int prio = tent_prio_class(x->priority);
    /* LOW in smaller slices: a HIGH request waits behind one at most */
    uint64_t cut = prio == TENT_PRIO_LOW ? t->low_slice : t->slice_size;
    for (uint64_t off = 0; off < x->length; off += cut) {
        struct slice *s = calloc(1, sizeof(*s));
        if (!s) {
            while (*head) {
                struct slice *n = (*head)->next;
                free(*head);
                *head = n;
            }
            return tent_set_error(TENT_ENOMEM, "tcp: out of memory");
        }
        uint64_t left = x->length - off;
        s->sb = sb;
        s->slot = x->slot;
        s->opcode = x->opcode;
        s->prio = prio;
        s->local = (char *)x->local + off;
        s->remote = x->remote + off;
        s->len = (uint32_t)(left < cut ? left : cut);
        if (x->target_buf) /* else zeros: the target refuses it */
            memcpy(s->key, x->target_buf->key, sizeof(s->key));
        *link = s;
        link = &s->next;
        (*count)++;
    }
    return TENT_OK;
}

static int tcp_submit(struct tent_transport *base, struct tent_sub_batch *sbb,
                      const struct tent_xfer *reqs, size_t n,
                      struct tent_xfer_result *res)
{
    struct tcp_transport *t = tcp_of(base);
    struct tcp_sub *sb = (struct tcp_sub *)sbb;
    int first = TENT_OK;
    struct pending pend[MAX_PENDING];
    int npend = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tent_xfer *x = &reqs[i];
        struct tcp_peer *p = (struct tcp_peer *)x->peer;
        struct slice *head = NULL;
        uint32_t cnt = 0;
        int rc = TENT_OK;
        if (x->slot >= sb->base.capacity)
            rc = tent_set_error(TENT_EINVAL, "tcp: slot %u beyond capacity",
                                x->slot);
        else if (!p || p->base.owner != base)
            rc = tent_set_error(TENT_EINVAL,
                                "tcp: request to segment '%s' without a tcp "
                                "peer handle",
                                x->target->name);
        else if (!atomic_load_explicit(&t->accepting_a, memory_order_relaxed))
            rc = tent_set_error(TENT_ESHUTDOWN,
                                "tcp: transport is shutting down");
        if (!rc)
            rc = make_slices(t, sb, x, &head, &cnt);
        if (rc) {
            tent_xres_fail(&res[i], rc, 0);
            if (!first)
                first = rc;
            continue;
        }
        res[i].code = TENT_OK;
        struct tcp_task *k = &sb->tasks[x->slot];
        task_forget_err(k);
        k->length = x->length;
        k->peer = p;
        atomic_store(&k->remaining, cnt);
        atomic_fetch_add(&t->inflight, cnt);
        while (head) {
            struct slice *s = head;
            head = s->next;
            /* with avoid 0 a rail set always answers (a paused rail when
             * every rail is paused) */
            s->rail = tent_rail_pick(p->rs, s->len, s->prio == TENT_PRIO_LOW, 0,
                                     &s->tk);
            if (s->rail < 0)
                s->rail = 0;
            pend_add(pend, &npend, p->rails[s->rail], s);
        }
    }
    for (int j = 0; j < npend; j++)
        pend_flush(&pend[j]);
    return first;
}

/* A status poll that finds a task of POLL_YIELD_MIN bytes or more still on
 * its way gives up the CPU (sched_yield), at most once every
 * POLL_YIELD_GAP_NS per thread (a batch's status polls each of its tasks).
 * Its bytes are being copied by a thread that needs a CPU: our workers, or
 * on this host the peer's server, which runs beside its sender while the
 * CPUs are crowded (rpc_server.c, tcp_loopback_follow_cpu).  A caller that
 * polls without pause, as Mooncake's benchmark does, otherwise holds that
 * CPU until the scheduler takes it away.  A caller that yields itself
 * (tebench) is unchanged, and a shorter gap costs the spinning caller
 * throughput on small blocks (docs/performance.md "Design figures").  With
 * nothing else to run the yield returns at once. */
#define POLL_YIELD_MIN    65536
#define POLL_YIELD_GAP_NS 50000

static void poll_yield(const struct tcp_task *k)
{
    static _Thread_local uint64_t last_ns;
    if (k->length < POLL_YIELD_MIN)
        return;
    uint64_t now = tent_now_ns();
    if (now - last_ns < POLL_YIELD_GAP_NS)
        return;
    last_ns = now;
    sched_yield();
}

/* A status poll that finds a task of STATUS_WAIT_MIN bytes or more still
 * on its way, with no lent window out (whose bytes only polls and the lend
 * thread's ticks move), sleeps until a slice of the transport ends, for at
 * most STATUS_WAIT_NS: its bytes are moved by pool threads, and a caller
 * that spins meanwhile burns a CPU they or the peer's server need.  One
 * such wait per scan of a sub-batch (a poll of a slot at or before the last
 * one polled starts a scan), so tent_overall_status waits once, not once
 * per task.  Smaller tasks finish within a wake-up's time and keep the
 * yield of poll_yield. */
#define STATUS_WAIT_MIN (256u << 10)
#define STATUS_WAIT_NS  1000000u

static bool status_wait(struct tcp_transport *t, const struct tcp_sub *sb,
                        uint32_t slot, struct tcp_task *k)
{
    static _Thread_local const struct tcp_sub *last_sb;
    static _Thread_local uint32_t last_slot;
    bool scan = sb != last_sb || slot <= last_slot;
    last_sb = sb;
    last_slot = slot;
    if (k->length < STATUS_WAIT_MIN || !scan || atomic_load(&t->nlent) > 0)
        return false;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + STATUS_WAIT_NS;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_mutex_lock(&t->done_mu);
    atomic_fetch_add(&t->done_waiters, 1);
    unsigned seq = t->done_seq;
    /* slice_done's decrement comes before its look at done_waiters, this
     * look at remaining after the increment: one of them sees the other */
    while (t->done_seq == seq && atomic_load(&k->remaining) > 0)
        if (pthread_cond_timedwait(&t->done_cv, &t->done_mu, &ts))
            break;
    atomic_fetch_sub(&t->done_waiters, 1);
    pthread_mutex_unlock(&t->done_mu);
    return true;
}

static int tcp_status(struct tent_transport *base, struct tent_sub_batch *sbb,
                      uint32_t slot, struct tent_xfer_status *out)
{
    struct tcp_sub *sb = (struct tcp_sub *)sbb;
    if (slot >= sb->base.capacity)
        return tent_set_error(TENT_EINVAL, "tcp: slot %u beyond capacity",
                              slot);
    struct tcp_task *k = &sb->tasks[slot];
    memset(out, 0, sizeof(*out));
    if (atomic_load(&k->remaining) > 0 && k->peer) {
        peer_progress(k->peer);
        if (atomic_load(&k->remaining) > 0 &&
            !status_wait(tcp_of(base), sb, slot, k))
            poll_yield(k);
        if (atomic_load(&k->remaining) > 0) {
            out->state = TENT_XFER_PENDING;
            return TENT_OK;
        }
    }
    int code = atomic_load(&k->code);
    if (code) {
        tent_xstatus_failed(out, atomic_load(&k->err), code, 0);
    } else {
        out->state = TENT_XFER_COMPLETED;
        out->bytes = k->length;
    }
    return TENT_OK;
}

const struct tent_transport_ops tent_tcp_transport_ops = {
    .name = "tcp",
    .type = TRANSPORT_TCP,
    .default_enabled = true,
    .instance_size = sizeof(struct tcp_transport),
    .install = tcp_install,
    .uninstall = tcp_uninstall,
    .capabilities = tcp_caps,
    .can_reach = tcp_can_reach,
    .alloc_sub_batch = tcp_alloc_sub,
    .free_sub_batch = tcp_free_sub,
    .submit = tcp_submit,
    .status = tcp_status,
    .quiesce = tcp_quiesce,
    .peer_open = tcp_peer_open,
    .peer_close = tcp_peer_close,
    .add_buffer = tent_xport_noop_buffer,
    .remove_buffer = tent_xport_noop_buffer,
};
