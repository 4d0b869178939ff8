/* libfabric transport: one-sided RMA (fi_write / fi_read) over FI_EP_RDM
 * endpoints of a libfabric provider (verbs;ofi_rxm, efa, cxi on real
 * fabrics; tcp;ofi_rxm and shm anywhere).
 *
 *  - libfabric is loaded with dlopen (libfabric_api.c): without the library,
 *    or without a provider that has a device, install answers TENT_ENODEV and
 *    the transport is not installed.
 *  - Rails: one fabric, domain, CQ, AV and endpoint per NIC (distinct
 *    domain) fi_getinfo returns for the provider, up to max_rails, each
 *    endpoint address published as libfabric_addr (rail 0) or
 *    libfabric_addr<k>; each registered buffer is registered in every
 *    rail's domain and carries its keys (libfabric_key) and the address a
 *    peer names its first byte with (libfabric_base).
 *  - submit slices requests and queues them per priority class; what the
 *    in-flight cap (tx_attr->size) allows is posted at once, the rest as
 *    operations complete.  A progress thread reads the CQs and posts queued
 *    slices, which also drives a FI_PROGRESS_MANUAL provider's target side.
 *
 * Peers (rail sets, AV entries) and buffer removal: at lf_peer_open and
 * lf_remove_buffer.  The whole story: docs/transports/libfabric.md. */
#include "transport/libfabric/libfabric_transport.h"

#include "common/clock.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "sched/rails.h"
#include "transport/libfabric/libfabric_api.h"
#include "transport/libfabric/libfabric_pair.h"
#include "transport/transport.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define LF_ATTR_ADDR       "libfabric_addr"
#define LF_ATTR_FABRICS    "libfabric_fabrics" /* rails' fabrics, "," between */
#define LF_ATTR_PROV       "libfabric_provider"
#define LF_ATTR_KEY        "libfabric_key"
#define LF_ATTR_BASE       "libfabric_base"
#define LF_MAX_ADDR        120 /* bytes: hex fits a 255-byte segment attribute */
#define LF_MAX_RAILS       6   /* keys of every rail fit a buffer attribute */
#define LF_CQ_BATCH        32
#define LF_FI_VER          FI_VERSION(1, 9)
#define LF_MAX_RETIRED     256 /* replaced endpoints of rebuilt pairs, open */
#define LF_DEFAULT_SPIN_US 200
#define LF_CALLER_NS       100000UL /* a status poll this recent: polling */
#define LF_DEFAULT_IDLE_US 10000

static const char *const default_providers[] = {"verbs;ofi_rxm", "efa", "cxi"};

/* One NIC: its own fabric objects.  cq_lock is held while the CQ is read
 * and while a peer's own endpoint on the rail is opened: the provider's
 * CQ progress walks the endpoints bound to it.  Taken alone, or inside
 * the transport's lock. */
struct lf_rail {
    const struct fi_info *info; /* an entry of lf->info */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
    bool cq_waits; /* the CQ has a wait fd the progress thread sleeps in */
    int wait_fd;   /* the CQ's FI_WAIT_FD (FI_GETWAIT), or -1 */
    /* FI_RMA_EVENT: counts the peers' RMA this side served (NULL: none) */
    struct fid_cntr *served;
    uint64_t served_seen; /* progress thread only */
    uint32_t ops_out;     /* our operations on it (lf->lock) */
    bool prov_key, mr_local, mr_endpoint;
    bool loopback; /* the host's loopback: reaches peers on this host only */
    uint64_t max_msg;
    char name[64]; /* the domain: the NIC */
    char net[64];  /* its fabric's name (fabric_attr->name): rails pair by it */
    char addr_hex[2 * LF_MAX_ADDR + 1];
    pthread_mutex_t cq_lock;
};

/* An AV entry of one rail: one per distinct endpoint address, shared by the
 * peer handles that name it (refs) and removed when the last one closes.
 *
 * stale: an operation to it failed.  libfabric 1.17's tcp;ofi_rxm keeps
 * the connection its target dropped after refusing an RMA (a key closed or
 * narrowed since), and every later operation on it fails (FI_ENOTCONN);
 * removing and inserting the address again keeps that connection.  So
 * once nothing is in flight to a stale peer, its next operation on the
 * rail gets the pair rebuilt: an endpoint of its own (ep, av: a new local
 * address, hence a new connection), replaced on the next failure.
 * Providers that bind MRs to an endpoint (FI_MR_ENDPOINT) only get the
 * address inserted again. */
struct lf_av_ent {
    int rail;
    char addr_hex[2 * LF_MAX_ADDR + 1];
    fi_addr_t fi_addr;
    struct fid_ep *ep; /* NULL: the rail's endpoint */
    struct fid_av *av;
    int refs;
    uint32_t ops_out; /* our operations in flight to it */
    uint32_t rebuilds;
    bool stale;
    struct lf_av_ent *next;
};

/* An endpoint of a rebuilt pair that was replaced or whose peer closed. */
struct lf_retired {
    struct fid_ep *ep;
    struct fid_av *av;
    struct lf_retired *next;
};

/* The peer handle (tent_peer first): its AV entry per shared rail (local
 * rail ents[j]->rail to the peer's rail of the same index) and, with more
 * than one, their rail set (rail j of the set is ents[j]). */
struct lf_peer {
    struct tent_peer base;
    int nrails;
    struct lf_av_ent *ents[LF_MAX_RAILS];
    struct tent_railset *rs;
};

/* A local registration: one MR per rail. */
struct lf_mr {
    uint64_t base, length;
    struct fid_mr *mr[LF_MAX_RAILS];
    void *desc[LF_MAX_RAILS];
    int users;    /* our running tasks using it as local memory */
    bool revoked; /* remove_buffer began: no new local use */
    struct lf_mr *next;
};

struct lf_task;

/* One posted operation; its context is handed to libfabric. */
struct lf_op {
    struct fi_context2 ctx; /* first: FI_CONTEXT / FI_CONTEXT2 modes */
    struct lf_task *task;   /* NULL: free, or abandoned (below) */
    struct lf_av_ent *ent;  /* the peer it goes to, until abandoned */
    struct fid_ep *ep;      /* the endpoint it was posted on */
    int rail;
    struct tent_rail_ticket tk;
    uint64_t off, len; /* of its task */
    uint32_t avoid;    /* rails this slice failed on */
    uint64_t posted_ns;
    bool abandoned; /* timed out: back to the pool when it completes */
    struct lf_op *next_free;
};

/* A slice whose rail failed, to be posted again on another. */
struct lf_retry {
    struct lf_task *task;
    uint64_t off, len;
    uint32_t avoid;
    uint64_t queued_ns;    /* when its rail failed */
    struct tent_xerr *why; /* the failure: the task's if no rail takes it */
    struct lf_retry *next;
};

enum { LF_IDLE, LF_RUNNING, LF_DONE, LF_FAILED };

struct lf_task {
    int state; /* under the transport's lock */
    int opcode;
    int prio;
    char *local;
    uint64_t raddr; /* fabric address of the first remote byte */
    uint64_t keys[LF_MAX_RAILS];
    struct lf_peer *peer;
    struct lf_mr *lmr;
    uint64_t length, posted, done;
    uint64_t start_ns;
    uint32_t ops_out;
    uint32_t retries; /* its slices in lf->retries */
    bool queued;
    struct lf_task *qnext;
    struct tent_xerr *err;
};

struct lf_sub {
    struct tent_sub_batch base;
    struct lf_task *tasks;
};

struct lf_transport {
    struct tent_transport base;
    struct lf_api api;
    char provider[64];
    struct fi_info *info; /* fi_getinfo's list: the rails' entries */
    struct lf_rail rails[LF_MAX_RAILS];
    int nrails;
    bool virt_addr; /* every rail: FI_MR_VIRT_ADDR */
    uint64_t slice;
    int revoke_ms, timeout_ms;
    long idle_ns;  /* longest pause of a progress thread that polls */
    long spin_ns;  /* after activity, poll this long before sleeping */
    bool fds_wait; /* every rail has a wait fd that sees a peer's traffic */
    int efd;       /* eventfd: submit and stop wake the progress thread */
    atomic_bool sleeping;       /* the progress thread is in (or near) ppoll */
    atomic_uint kicks;          /* submits that posted or queued work */
    _Atomic uint64_t status_ns; /* when a caller last polled status */
    atomic_uint busy_rails;     /* bit k: rail k has operations out */
    _Atomic uint64_t caller_sweep_ns; /* a status poll reads every rail */
    uint64_t promo_ns;
    struct tent_sched_params sp;

    /* Guards everything below and every lf_task / lf_mr / lf_av_ent. */
    pthread_mutex_t lock;
    pthread_cond_t drained; /* an operation finished */
    bool accepting;
    bool stop;
    pthread_t progress;
    struct lf_op *ops, *free_ops;
    uint32_t ops_cap, ops_out, abandoned;
    uint64_t next_scan_ns;
    /* queued tasks per class, and when each class was last served */
    struct lf_task *qhead[TENT_NPRIO], *qtail[TENT_NPRIO];
    uint64_t served_ns[TENT_NPRIO];
    struct lf_retry *retries, *retries_tail;
    struct lf_mr *mrs;
    struct lf_av_ent *avs;
    struct lf_retired *retired;
    uint32_t nretired;
    uint64_t next_key;
};

static struct lf_transport *lf_of(struct tent_transport *t)
{
    return (struct lf_transport *)t;
}

static const char *lf_err(struct lf_transport *lf, int rc)
{
    return lf->api.strerror(rc < 0 ? -rc : rc);
}

/* tent_libfabric_fault_rail */
static atomic_int g_fault_rail = -1;
static atomic_uint g_fault_left;

void tent_libfabric_fault_rail(int rail, unsigned count)
{
    atomic_store(&g_fault_left, 0);
    atomic_store(&g_fault_rail, rail);
    atomic_store(&g_fault_left, count);
}

unsigned tent_libfabric_fault_left(void)
{
    return atomic_load(&g_fault_left);
}

/* Whether an operation on rail li is to fail (one fault taken). */
static bool fault_take(int li)
{
    if (atomic_load_explicit(&g_fault_left, memory_order_relaxed) == 0 ||
        atomic_load(&g_fault_rail) != li)
        return false;
    unsigned left = atomic_load(&g_fault_left);
    while (left &&
           !atomic_compare_exchange_weak(&g_fault_left, &left, left - 1))
        ;
    return left != 0;
}

/* tent_libfabric_fault_eagain */
static atomic_uint g_eagain_left;

void tent_libfabric_fault_eagain(unsigned count)
{
    atomic_store(&g_eagain_left, count);
}

unsigned tent_libfabric_eagain_left(void)
{
    return atomic_load(&g_eagain_left);
}

/* Whether this post is to be answered FI_EAGAIN (one answer taken). */
static bool eagain_take(void)
{
    unsigned left = atomic_load_explicit(&g_eagain_left, memory_order_relaxed);
    while (left &&
           !atomic_compare_exchange_weak(&g_eagain_left, &left, left - 1))
        ;
    return left != 0;
}

/* ---- hex ------------------------------------------------------------------
 */

static void to_hex(char *out, const uint8_t *p, size_t n)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[p[i] >> 4];
        out[2 * i + 1] = d[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Bytes decoded, or -1 when s is not even-length lowercase hex within max. */
static int from_hex(uint8_t *out, size_t max, const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n % 2 || n / 2 > max)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        int h = hexval(s[2 * i]), l = hexval(s[2 * i + 1]);
        if (h < 0 || l < 0)
            return -1;
        out[i] = (uint8_t)(h << 4 | l);
    }
    return (int)(n / 2);
}

static bool parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

/* fi_getinfo for one provider name; TENT_ENODEV when it has no RMA RDM
 * endpoint here.  rma_event: also ask for FI_RMA_EVENT (counters of the
 * peers' RMA on our memory), if the provider has it. */
static int lf_getinfo(struct lf_transport *lf, const char *prov, bool rma_event,
                      struct fi_info **out)
{
    struct fi_info *hints = lf->api.dupinfo(NULL);
    if (!hints)
        return tent_set_error(TENT_ENOMEM, "libfabric: fi_dupinfo failed");
    hints->ep_attr->type = FI_EP_RDM;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                                  FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->fabric_attr->prov_name = strdup(prov);
    /* A write's completion should mean the bytes are in the target's
     * memory; providers that cannot promise it are asked without.  That
     * guarantee goes before FI_RMA_EVENT (counters that only tell the
     * progress thread a peer used our memory). */
    static const struct {
        bool event;
        uint64_t flags;
    } asks[] = {{true, FI_DELIVERY_COMPLETE},
                {false, FI_DELIVERY_COMPLETE},
                {true, 0},
                {false, 0}};
    int rc = -FI_ENODATA;
    for (size_t a = 0; a < sizeof(asks) / sizeof(*asks) && rc == -FI_ENODATA;
         a++) {
        if (asks[a].event && !rma_event)
            continue;
        hints->caps =
            FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
        if (asks[a].event)
            hints->caps |= FI_RMA_EVENT;
        hints->tx_attr->op_flags = asks[a].flags;
        rc = lf->api.getinfo(LF_FI_VER, NULL, NULL, 0, hints, out);
    }
    lf->api.freeinfo(hints);
    if (rc)
        return tent_set_error(TENT_ENODEV,
                              "libfabric: provider '%s' offers no RMA "
                              "endpoint here: fi_getinfo: %s",
                              prov, lf_err(lf, rc));
    return TENT_OK;
}

static void rail_close(struct lf_rail *r)
{
    if (r->ep)
        fi_close(&r->ep->fid);
    if (r->av)
        fi_close(&r->av->fid);
    if (r->served)
        fi_close(&r->served->fid);
    if (r->cq)
        fi_close(&r->cq->fid);
    if (r->domain)
        fi_close(&r->domain->fid);
    if (r->fabric)
        fi_close(&r->fabric->fid);
    r->ep = NULL;
    r->av = NULL;
    r->served = NULL;
    r->cq = NULL;
    r->domain = NULL;
    r->fabric = NULL;
}

#define LF_CHECK(call, what)                                                   \
    do {                                                                       \
        int _rc = (call);                                                      \
        if (_rc) {                                                             \
            tent_set_error(TENT_EVENDOR,                                       \
                           "libfabric %s (%s): %s failed: %s (%d)",            \
                           lf->provider, r->name, what, lf_err(lf, _rc), _rc); \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

/* With FI_RMA_EVENT, a counter of the RMA the rail's endpoint serves: the
 * progress thread's only sign of a peer's traffic where the CQ's wait
 * object does not see it.  Without one the rail simply has none. */
static void rail_open_served(struct lf_transport *lf, struct lf_rail *r)
{
    if (!(r->info->caps & FI_RMA_EVENT))
        return;
    struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP,
                              .wait_obj = FI_WAIT_NONE};
    int rc = fi_cntr_open(r->domain, &ca, &r->served, NULL);
    if (!rc)
        rc = fi_ep_bind(r->ep, &r->served->fid,
                        FI_REMOTE_READ | FI_REMOTE_WRITE);
    if (rc) {
        LOG_DEBUG("libfabric %s (%s): no counter of served RMA: %s",
                  lf->provider, r->name, lf_err(lf, rc));
        if (r->served)
            fi_close(&r->served->fid);
        r->served = NULL;
    }
}

/* Opens rail r on info i: fabric, domain, CQ (with a wait object when
 * cq_waits and the provider has one), AV, endpoint. */
static int rail_open(struct lf_transport *lf, struct lf_rail *r,
                     const struct fi_info *i, bool cq_waits)
{
    r->info = i;
    snprintf(r->name, sizeof(r->name), "%s",
             i->domain_attr->name ? i->domain_attr->name : "?");
    r->cq_waits = cq_waits;
    LF_CHECK(lf->api.fabric(i->fabric_attr, &r->fabric, NULL), "fi_fabric");
    LF_CHECK(fi_domain(r->fabric, (struct fi_info *)i, &r->domain, NULL),
             "fi_domain");
    /* A wait fd (fi_cq(3): FI_WAIT_FD, fetched with FI_GETWAIT) lets one
     * ppoll sleep on every rail; without one the CQ is polled. */
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT,
                             .wait_obj = FI_WAIT_FD};
    r->wait_fd = -1;
    if (r->cq_waits && fi_cq_open(r->domain, &cqa, &r->cq, NULL) != 0)
        r->cq = NULL;
    if (r->cq &&
        (fi_control(&r->cq->fid, FI_GETWAIT, &r->wait_fd) || r->wait_fd < 0)) {
        fi_close(&r->cq->fid);
        r->cq = NULL;
        r->wait_fd = -1;
    }
    if (!r->cq) {
        cqa.wait_obj = FI_WAIT_NONE;
        r->cq_waits = false;
        LF_CHECK(fi_cq_open(r->domain, &cqa, &r->cq, NULL), "fi_cq_open");
    }
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    LF_CHECK(fi_av_open(r->domain, &ava, &r->av, NULL), "fi_av_open");
    LF_CHECK(fi_endpoint(r->domain, (struct fi_info *)i, &r->ep, NULL),
             "fi_endpoint");
    LF_CHECK(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV),
             "fi_ep_bind(cq)");
    LF_CHECK(fi_ep_bind(r->ep, &r->av->fid, 0), "fi_ep_bind(av)");
    rail_open_served(lf, r);
    LF_CHECK(fi_enable(r->ep), "fi_enable");
    uint8_t addr[LF_MAX_ADDR];
    size_t alen = sizeof(addr);
    int rc = fi_getname(&r->ep->fid, addr, &alen);
    if (rc == -FI_ETOOSMALL) {
        tent_set_error(TENT_ENOTSUP,
                       "libfabric %s (%s): endpoint address of %zu bytes "
                       "exceeds %d",
                       lf->provider, r->name, alen, LF_MAX_ADDR);
        goto fail;
    }
    LF_CHECK(rc, "fi_getname");
    to_hex(r->addr_hex, addr, alen);
    uint64_t mm = i->domain_attr->mr_mode;
    r->prov_key = mm & FI_MR_PROV_KEY;
    r->mr_local = mm & FI_MR_LOCAL;
    r->mr_endpoint = mm & FI_MR_ENDPOINT;
    r->max_msg =
        i->ep_attr->max_msg_size ? i->ep_attr->max_msg_size : UINT64_MAX;
    snprintf(r->net, sizeof(r->net), "%s",
             i->fabric_attr->name ? i->fabric_attr->name : "");
    r->loopback = strcmp(r->name, "lo") == 0 || lf_fabric_loopback(r->net);
    pthread_mutex_init(&r->cq_lock, NULL);
    return TENT_OK;
fail:
    rail_close(r);
    return TENT_EVENDOR;
}

/* Opens the rail of fi_getinfo entry i unless its domain is open already
 * or its FI_MR_VIRT_ADDR differs from the first rail's (a buffer has one
 * base for all of them); one that does not open is left out (logged) and
 * *rc keeps the first such failure. */
static void rail_add(struct lf_transport *lf, const struct fi_info *i,
                     bool cq_waits, int *rc)
{
    const char *dn = i->domain_attr->name ? i->domain_attr->name : "";
    for (int k = 0; k < lf->nrails; k++)
        if (strcmp(lf->rails[k].name, dn) == 0)
            return;
    bool va = i->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
    if (lf->nrails && va != lf->virt_addr)
        return;
    struct lf_rail *r = &lf->rails[lf->nrails];
    int orc = rail_open(lf, r, i, cq_waits);
    if (orc) {
        LOG_WARN("libfabric: rail %s left out: %s", dn, tent_last_error());
        if (*rc == TENT_EVENDOR)
            *rc = orc;
        memset(r, 0, sizeof(*r));
        return;
    }
    if (!lf->nrails)
        lf->virt_addr = va;
    lf->nrails++;
}

/* The fi_getinfo entry of domain name (the first), or NULL. */
static const struct fi_info *info_of(const struct fi_info *list,
                                     const char *name, size_t len)
{
    for (const struct fi_info *i = list; i; i = i->next) {
        const char *dn = i->domain_attr->name ? i->domain_attr->name : "";
        if (strlen(dn) == len && strncmp(dn, name, len) == 0)
            return i;
    }
    return NULL;
}

/* The domains fi_getinfo lists, for an error message. */
static void list_domains(const struct fi_info *list, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (const struct fi_info *i = list; i && at < len; i = i->next) {
        const char *dn = i->domain_attr->name ? i->domain_attr->name : "";
        if (info_of(list, dn, strlen(dn)) != i)
            continue; /* listed already */
        int w = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", dn);
        at += w > 0 ? (size_t)w : 0;
    }
}

/* One rail per distinct domain: those domains names (a comma-separated
 * list) in its order, else fi_getinfo's, up to max.  A named domain the
 * provider does not list is a configuration error; TENT_EVENDOR (or the
 * first open failure) when no rail opens. */
static int rails_open(struct lf_transport *lf, int max, bool cq_waits,
                      const char *domains)
{
    int rc = TENT_EVENDOR;
    if (domains && *domains) {
        for (const char *d = domains; *d && lf->nrails < max;) {
            d += strspn(d, " \t");
            size_t n = strcspn(d, ", \t");
            const struct fi_info *i = info_of(lf->info, d, n);
            if (!i && n) {
                char have[256];
                list_domains(lf->info, have, sizeof(have));
                return tent_set_error(
                    TENT_ECONFIG,
                    "transports/libfabric/domains names '%.*s', which "
                    "provider %s does not list here (it lists: %s)",
                    (int)n, d, lf->provider, have);
            }
            if (i)
                rail_add(lf, i, cq_waits, &rc);
            d += n;
            d += strspn(d, " \t");
            d += *d == ',';
        }
    } else {
        for (const struct fi_info *i = lf->info; i && lf->nrails < max;
             i = i->next)
            rail_add(lf, i, cq_waits, &rc);
    }
    if (lf->nrails)
        return TENT_OK;
    return rc;
}

static void rails_close(struct lf_transport *lf)
{
    for (int k = 0; k < lf->nrails; k++) {
        rail_close(&lf->rails[k]);
        pthread_mutex_destroy(&lf->rails[k].cq_lock);
    }
    lf->nrails = 0;
}

/* ---- completions --------------------------------------------------------- */

/* ---- peers' AV entries ----------------------------------------------------
 */

/* Inserts addr_hex into the entry's AV (ent->fi_addr). */
static int av_insert_locked(struct lf_transport *lf, struct lf_av_ent *ent)
{
    uint8_t raw[LF_MAX_ADDR];
    int n = from_hex(raw, sizeof(raw), ent->addr_hex);
    if (n < 0)
        return tent_set_error(TENT_EPROTO,
                              "libfabric: peer address '%s' is not hex",
                              ent->addr_hex);
    struct fid_av *av = ent->av ? ent->av : lf->rails[ent->rail].av;
    int rc = fi_av_insert(av, raw, 1, &ent->fi_addr, 0, NULL);
    if (rc != 1)
        return tent_set_error(TENT_EPEER,
                              "libfabric %s: fi_av_insert of peer %s: %s",
                              lf->provider, ent->addr_hex,
                              rc < 0 ? lf_err(lf, rc) : "not inserted");
    return TENT_OK;
}

/* Takes the entry's address out of its rail's AV, or retires its own
 * endpoint (and AV).  A retired endpoint stays open until uninstall, when
 * the progress thread has stopped: closing a tcp;ofi_rxm endpoint whose
 * connection broke, while the shared CQ is progressed, crashed libfabric
 * 1.17 inside fi_cq_sread.  Operations abandoned on it keep their slots
 * (they may still complete). */
static void av_remove_locked(struct lf_transport *lf, struct lf_av_ent *ent)
{
    if (!ent->ep) {
        int rc = fi_av_remove(lf->rails[ent->rail].av, &ent->fi_addr, 1, 0);
        if (rc)
            LOG_WARN("libfabric %s: fi_av_remove of peer %s: %s", lf->provider,
                     ent->addr_hex, lf_err(lf, rc));
        return;
    }
    struct lf_retired *r = malloc(sizeof(*r));
    if (r) {
        r->ep = ent->ep;
        r->av = ent->av;
        r->next = lf->retired;
        lf->retired = r;
    } else {
        LOG_WARN("libfabric %s: out of memory: an endpoint of peer %s is "
                 "left open",
                 lf->provider, ent->addr_hex);
    }
    lf->nretired++;
    ent->ep = NULL;
    ent->av = NULL;
}

/* Gives the entry an endpoint (and AV) of its own on its rail, bound to the
 * rail's CQ: a fresh local address, so the provider connects anew. */
static int pair_open_locked(struct lf_transport *lf, struct lf_av_ent *ent)
{
    struct lf_rail *r = &lf->rails[ent->rail];
    struct fid_ep *ep = NULL;
    struct fid_av *av = NULL;
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    const char *what = "fi_av_open";
    pthread_mutex_lock(&r->cq_lock);
    int rc = fi_av_open(r->domain, &ava, &av, NULL);
    if (!rc &&
        (what = "fi_endpoint",
         rc = fi_endpoint(r->domain, (struct fi_info *)r->info, &ep, NULL)) ==
            0 &&
        (what = "fi_ep_bind(cq)",
         rc = fi_ep_bind(ep, &r->cq->fid, FI_TRANSMIT | FI_RECV)) == 0 &&
        (what = "fi_ep_bind(av)", rc = fi_ep_bind(ep, &av->fid, 0)) == 0 &&
        (what = "fi_ep_bind(cntr)",
         rc = r->served ? fi_ep_bind(ep, &r->served->fid,
                                     FI_REMOTE_READ | FI_REMOTE_WRITE)
                        : 0) == 0)
        what = "fi_enable", rc = fi_enable(ep);
    if (rc) {
        if (ep)
            fi_close(&ep->fid);
        if (av)
            fi_close(&av->fid);
        pthread_mutex_unlock(&r->cq_lock);
        return tent_set_error(TENT_EPEER,
                              "libfabric %s: rebuilding the connection to "
                              "peer %s: %s failed: %s",
                              lf->provider, ent->addr_hex, what,
                              lf_err(lf, rc));
    }
    pthread_mutex_unlock(&r->cq_lock);
    ent->ep = ep;
    ent->av = av;
    rc = av_insert_locked(lf, ent);
    if (rc)
        av_remove_locked(lf, ent);
    return rc;
}

/* The entry of addr_hex on rail, inserted if no handle holds it yet; one
 * more reference. */
static int av_get_locked(struct lf_transport *lf, int rail,
                         const char *addr_hex, struct lf_av_ent **out)
{
    for (struct lf_av_ent *e = lf->avs; e; e = e->next)
        if (e->rail == rail && strcmp(e->addr_hex, addr_hex) == 0) {
            e->refs++;
            *out = e;
            return TENT_OK;
        }
    struct lf_av_ent *e = calloc(1, sizeof(*e));
    if (!e)
        return tent_set_error(TENT_ENOMEM, "libfabric: out of memory");
    e->rail = rail;
    size_t al = strnlen(addr_hex, sizeof(e->addr_hex) - 1);
    memcpy(e->addr_hex, addr_hex, al);
    int rc = av_insert_locked(lf, e);
    if (rc) {
        free(e);
        return rc;
    }
    e->refs = 1;
    e->next = lf->avs;
    lf->avs = e;
    *out = e;
    return TENT_OK;
}

static void av_put_locked(struct lf_transport *lf, struct lf_av_ent *ent)
{
    if (--ent->refs > 0)
        return;
    struct lf_av_ent **pp = &lf->avs;
    while (*pp != ent)
        pp = &(*pp)->next;
    *pp = ent->next;
    av_remove_locked(lf, ent);
    free(ent);
}

/* A stale entry with nothing in flight gets its pair rebuilt (see struct
 * lf_av_ent).  Until then (operations still out) operations to it are
 * posted as they were and may fail the same way. */
static int av_refresh_locked(struct lf_transport *lf, struct lf_av_ent *ent)
{
    if (!ent->stale || ent->ops_out)
        return TENT_OK;
    av_remove_locked(lf, ent);
    /* retired endpoints stay open: a bounded number of rebuilds */
    int rc = lf->rails[ent->rail].mr_endpoint || lf->nretired >= LF_MAX_RETIRED
                 ? av_insert_locked(lf, ent)
                 : pair_open_locked(lf, ent);
    if (rc) {
        /* back on the rail's endpoint; stays stale: tried again next time */
        int again = av_insert_locked(lf, ent);
        return again ? again : rc;
    }
    ent->stale = false;
    ent->rebuilds++;
    LOG_DEBUG("libfabric %s: connection to peer %s rebuilt after a failed "
              "operation (%u)",
              lf->provider, ent->addr_hex, ent->rebuilds);
    return TENT_OK;
}

/* A CQ error's cause: bad key, bounds and permission are permanent (the
 * request is wrong for this target); the rest, the peer or the path.
 * FI_ECANCELED is how tcp;ofi_rxm (1.17) reports an RMA its target
 * refused (a key closed or narrowed since): the target drops the
 * connection and the operation is cancelled, so it says the peer, and the
 * runtime fetches the peer's descriptor again, which names the range's
 * current state. */
static int lf_cause(int err)
{
    switch (err) {
    case FI_EACCES:
    case FI_EPERM:
        return TENT_EPERM;
    case FI_EKEYREJECTED:
    case FI_EINVAL:
    case FI_EFAULT:
    case FI_ETOOSMALL:
    case FI_EMSGSIZE:
        return TENT_ERANGE;
    case FI_ETIMEDOUT:
        return TENT_ETIMEDOUT;
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_EHOSTUNREACH:
    case FI_ENOTCONN:
    case FI_ESHUTDOWN:
    case FI_ECANCELED:
        return TENT_EPEER;
    default:
        return TENT_EIO;
    }
}

static void rail_out_dec_locked(struct lf_transport *lf, int li)
{
    if (--lf->rails[li].ops_out == 0)
        atomic_fetch_and(&lf->busy_rails, ~(1u << li));
}

static void enqueue_locked(struct lf_transport *lf, struct lf_task *task)
{
    if (task->queued)
        return;
    int c = task->prio;
    task->queued = true;
    task->qnext = NULL;
    if (lf->qtail[c])
        lf->qtail[c]->qnext = task;
    else
        lf->qhead[c] = task;
    lf->qtail[c] = task;
}

/* Makes a task terminal once nothing of it is in flight or queued; it
 * lets its local registration go then. */
static void settle_locked(struct lf_task *task)
{
    if (task->ops_out || task->queued || task->retries ||
        task->state != LF_RUNNING)
        return;
    if (task->err)
        task->state = LF_FAILED;
    else if (task->done == task->length)
        task->state = LF_DONE;
    else
        return;
    if (task->lmr)
        task->lmr->users--;
    task->lmr = NULL;
}

static void task_fail_locked(struct lf_task *task, struct tent_xerr *e)
{
    if (!task->err)
        task->err = e;
    else
        free(e);
}

static void op_free_locked(struct lf_transport *lf, struct lf_op *op)
{
    op->task = NULL;
    op->ent = NULL;
    op->ep = NULL;
    op->abandoned = false;
    op->next_free = lf->free_ops;
    lf->free_ops = op;
}

/* Whether a failure says the path (connection, peer, timeout) rather than
 * the request (bounds, key, permission): only those move to another rail. */
static bool path_cause(int code)
{
    return code != TENT_ERANGE && code != TENT_EPERM;
}

/* Queues [off, +len) of task to be posted again on a rail not in avoid
 * (the rails it failed on), why its failure; false (nothing queued) when
 * the peer has no other rail or the task has failed already. */
static bool retry_locked(struct lf_transport *lf, struct lf_task *task,
                         uint64_t off, uint64_t len, uint32_t avoid,
                         struct tent_xerr *why)
{
    struct lf_peer *p = task->peer;
    uint32_t all = (1u << p->nrails) - 1;
    if (!p->rs || (avoid & all) == all || task->err)
        return false;
    struct lf_retry *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return false;
    LOG_DEBUG("libfabric %s: %s of %" PRIu64 " bytes failed (%s); posting it "
              "on another rail",
              lf->provider, task->opcode == OPCODE_READ ? "read" : "write", len,
              why->msg);
    *rt = (struct lf_retry){.task = task,
                            .off = off,
                            .len = len,
                            .avoid = avoid,
                            .queued_ns = tent_now_ns(),
                            .why = why};
    if (lf->retries_tail)
        lf->retries_tail->next = rt;
    else
        lf->retries = rt;
    lf->retries_tail = rt;
    task->retries++;
    return true;
}

static void op_done_locked(struct lf_transport *lf, struct lf_op *op,
                           struct tent_xerr *err)
{
    if (op->abandoned) {
        /* its task already failed with a timeout */
        free(err);
        lf->abandoned--;
        op_free_locked(lf, op);
        return;
    }
    struct lf_task *task = op->task;
    struct lf_peer *p = task->peer;
    task->ops_out--;
    op->ent->ops_out--;
    rail_out_dec_locked(lf, op->ent->rail);
    lf->ops_out--;
    if (!err) {
        if (p->rs)
            tent_rail_complete(p->rs, op->rail, op->len, &op->tk);
        task->done += op->len;
    } else {
        op->ent->stale = true;
        bool path = path_cause(err->code);
        uint32_t avoid = op->avoid | 1u << op->rail;
        if (p->rs) {
            if (path)
                tent_rail_fail(p->rs, op->rail, op->len, &op->tk);
            else
                tent_rail_complete(p->rs, op->rail, op->len, &op->tk);
        }
        if (!path || !retry_locked(lf, task, op->off, op->len, avoid, err))
            task_fail_locked(task, err);
    }
    op_free_locked(lf, op);
    settle_locked(task);
    pthread_cond_broadcast(&lf->drained);
}

/* Posts [off, +len) of task on a rail (the rail set's pick, avoiding the
 * rails of avoid).  0 posted, 1 not now (cap or FI_EAGAIN), -1 failed (the
 * task's err is set), -2 every rail not avoided is paused (nothing set). */
static int post_slice_locked(struct lf_transport *lf, struct lf_task *task,
                             uint64_t off, uint64_t len, uint32_t avoid)
{
    struct lf_op *op = lf->free_ops;
    if (!op)
        return 1;
    struct lf_peer *p = task->peer;
    int k = 0;
    struct tent_rail_ticket tk;
    memset(&tk, 0, sizeof(tk));
    if (p->rs) {
        k = tent_rail_pick(p->rs, len, task->prio == TENT_PRIO_LOW, avoid, &tk);
        if (k < 0)
            return -2;
    }
    struct lf_av_ent *ent = p->ents[k];
    int li = ent->rail; /* the local rail (paired by libfabric_pair.c) */
    struct lf_rail *r = &lf->rails[li];
    if (av_refresh_locked(lf, ent)) {
        if (p->rs)
            tent_rail_release(p->rs, k, len, &tk);
        task_fail_locked(task,
                         tent_xerr_new(TENT_EPEER, 0, "%s", tent_last_error()));
        return -1;
    }
    struct fid_ep *ep = ent->ep ? ent->ep : r->ep;
    char *loc = task->local + off;
    uint64_t raddr = task->raddr + off;
    void *desc = task->lmr ? task->lmr->desc[li] : NULL;
    ssize_t rc;
    bool fault = false;
    if (eagain_take()) {
        rc = -FI_EAGAIN; /* as a provider with full queues answers */
    } else if ((fault = fault_take(li))) {
        rc = 0; /* completed below, failed, without the provider */
    } else if (task->opcode == OPCODE_READ) {
        rc = fi_read(ep, loc, len, desc, ent->fi_addr, raddr, task->keys[li],
                     &op->ctx);
    } else {
        struct iovec iov = {.iov_base = loc, .iov_len = len};
        struct fi_rma_iov riov = {
            .addr = raddr, .len = len, .key = task->keys[li]};
        struct fi_msg_rma msg = {.msg_iov = &iov,
                                 .desc = &desc,
                                 .iov_count = 1,
                                 .addr = ent->fi_addr,
                                 .rma_iov = &riov,
                                 .rma_iov_count = 1,
                                 .context = &op->ctx};
        rc = fi_writemsg(ep, &msg, FI_COMPLETION | r->info->tx_attr->op_flags);
    }
    if (rc == -FI_EAGAIN) {
        if (p->rs)
            tent_rail_release(p->rs, k, len, &tk);
        return 1;
    }
    if (rc) {
        struct tent_xerr *e = tent_xerr_new(
            TENT_EVENDOR, (int)-rc,
            "libfabric %s (%s): %s of %" PRIu64 " bytes: %s", lf->provider,
            r->name, task->opcode == OPCODE_READ ? "fi_read" : "fi_write", len,
            lf_err(lf, (int)rc));
        /* refused by the path (no route, no connection): nothing went out,
         * so the slice may go to another rail at once */
        bool path = path_cause(lf_cause((int)-rc));
        if (p->rs && path)
            tent_rail_fail(p->rs, k, len, &tk);
        else if (p->rs)
            tent_rail_release(p->rs, k, len, &tk);
        if (path) {
            ent->stale = true;
            if (retry_locked(lf, task, off, len, avoid | 1u << k, e))
                return 0;
        }
        task_fail_locked(task, e);
        return -1;
    }
    lf->free_ops = op->next_free;
    op->task = task;
    op->ent = ent;
    op->ep = ep;
    op->rail = k;
    op->tk = tk;
    op->off = off;
    op->len = len;
    op->avoid = avoid;
    op->posted_ns = tent_now_ns();
    ent->ops_out++;
    if (r->ops_out++ == 0)
        atomic_fetch_or(&lf->busy_rails, 1u << li);
    task->ops_out++;
    lf->ops_out++;
    if (fault)
        op_done_locked(lf, op,
                       tent_xerr_new(TENT_EPEER, FI_ECONNRESET,
                                     "libfabric %s (%s): injected fault: "
                                     "connection reset",
                                     lf->provider, r->name));
    return 0;
}

/* Posts slices of failed rails again, then queued tasks' slices, the class
 * tent_prio_pick names first, each task's in order. */
static void pump_locked(struct lf_transport *lf)
{
    /* a slice whose other rails are all paused fails with its rail's
     * error (as tcp's): the runtime decides what comes next */
    while (lf->retries) {
        struct lf_retry *rt = lf->retries;
        int rc = post_slice_locked(lf, rt->task, rt->off, rt->len, rt->avoid);
        if (rc == 1)
            return;
        lf->retries = rt->next;
        if (!lf->retries)
            lf->retries_tail = NULL;
        struct lf_task *task = rt->task;
        task->retries--;
        if (rc == -2)
            task_fail_locked(task, rt->why);
        else
            free(rt->why);
        free(rt);
        settle_locked(task);
    }
    for (;;) {
        uint64_t now = tent_now_ns(), since[TENT_NPRIO];
        for (int c = 0; c < TENT_NPRIO; c++)
            since[c] = lf->qhead[c] ? tent_prio_since(lf->qhead[c]->start_ns,
                                                      lf->served_ns[c])
                                    : TENT_PRIO_IDLE;
        int c = tent_prio_pick(since, now, lf->promo_ns);
        if (c < 0)
            return;
        struct lf_task *task = lf->qhead[c];
        int rc = 0;
        while (!task->err && task->posted < task->length) {
            uint64_t len = task->length - task->posted;
            if (len > lf->slice)
                len = lf->slice;
            rc = post_slice_locked(lf, task, task->posted, len, 0);
            if (rc)
                break;
            task->posted += len;
            lf->served_ns[c] = now;
        }
        if (rc == 1 && !task->err)
            return; /* not now: keep the order */
        lf->qhead[c] = task->qnext;
        if (!lf->qhead[c])
            lf->qtail[c] = NULL;
        task->queued = false;
        settle_locked(task);
    }
}

/* Fails the tasks of operations older than timeout_ms: some providers
 * never complete an operation the target refuses (shm with a revoked key).
 * The operation stays with the provider; its slot returns to the pool
 * only if it ever completes.  Its task is FAILED now, so a late read
 * completion could still write into the local buffer: the cause says so. */
static void expire_locked(struct lf_transport *lf, uint64_t now)
{
    uint64_t limit = (uint64_t)lf->timeout_ms * 1000000u;
    for (uint32_t k = 0; k < lf->ops_cap; k++) {
        struct lf_op *op = &lf->ops[k];
        if (!op->task || op->abandoned || now - op->posted_ns < limit)
            continue;
        struct lf_task *task = op->task;
        /* failed, not posted on another rail: the operation may still
         * complete later (a read into the task's buffer, a write into the
         * peer's), after a retry's bytes, and it cannot be cancelled */
        task_fail_locked(
            task,
            tent_xerr_new(TENT_ETIMEDOUT, 0,
                          "libfabric %s (%s): %s of %" PRIu64
                          " bytes not completed after %d ms (the operation "
                          "is left with the provider)",
                          lf->provider, lf->rails[op->ent->rail].name,
                          task->opcode == OPCODE_READ ? "read" : "write",
                          op->len, lf->timeout_ms));
        if (task->peer->rs)
            tent_rail_fail(task->peer->rs, op->rail, op->len, &op->tk);
        op->abandoned = true;
        op->ent->ops_out--;
        rail_out_dec_locked(lf, op->ent->rail);
        op->ent->stale = true;
        op->ent = NULL;
        lf->abandoned++;
        task->ops_out--;
        lf->ops_out--;
        settle_locked(task);
        pthread_cond_broadcast(&lf->drained);
    }
    /* Slices of failed rails no other rail took in time (FI_EAGAIN). */
    struct lf_retry **rp = &lf->retries, *rprev = NULL;
    while (*rp) {
        struct lf_retry *rt = *rp;
        struct lf_task *task = rt->task;
        if (now < rt->queued_ns + limit) {
            rprev = rt;
            rp = &rt->next;
            continue;
        }
        *rp = rt->next;
        if (lf->retries_tail == rt)
            lf->retries_tail = rprev;
        task->retries--;
        task_fail_locked(
            task, tent_xerr_new(TENT_ETIMEDOUT, 0,
                                "libfabric %s: a slice of %" PRIu64
                                " bytes whose rail failed was not posted "
                                "again within %d ms",
                                lf->provider, rt->len, lf->timeout_ms));
        free(rt->why);
        free(rt);
        settle_locked(task);
    }
    /* Tasks the provider would not take (FI_EAGAIN all along). */
    for (int c = 0; c < TENT_NPRIO; c++) {
        struct lf_task **pp = &lf->qhead[c], *prev = NULL;
        while (*pp) {
            struct lf_task *task = *pp;
            if (now - task->start_ns < limit) {
                prev = task;
                pp = &task->qnext;
                continue;
            }
            *pp = task->qnext;
            if (lf->qtail[c] == task)
                lf->qtail[c] = prev;
            task->queued = false;
            task_fail_locked(
                task, tent_xerr_new(TENT_ETIMEDOUT, 0,
                                    "libfabric %s: %" PRIu64 " of %" PRIu64
                                    " bytes not posted within %d ms (the "
                                    "provider kept answering FI_EAGAIN)",
                                    lf->provider, task->length - task->posted,
                                    task->length, lf->timeout_ms));
            settle_locked(task);
        }
    }
}

/* Reads rail r's completions (and errors); returns how many. */
static int rail_poll(struct lf_transport *lf, struct lf_rail *r, bool block)
{
    struct fi_cq_entry ent[LF_CQ_BATCH];
    struct fi_cq_err_entry e;
    /* the progress thread takes the CQ; a caller's poll skips a busy one
     * (nobody sleeps holding it: the thread sleeps in ppoll) */
    if (block)
        pthread_mutex_lock(&r->cq_lock);
    else if (pthread_mutex_trylock(&r->cq_lock))
        return 0;
    ssize_t n = fi_cq_read(r->cq, ent, LF_CQ_BATCH);
    if (n == -FI_EAVAIL) {
        memset(&e, 0, sizeof(e));
        if (fi_cq_readerr(r->cq, &e, 0) != 1)
            n = 0;
    }
    pthread_mutex_unlock(&r->cq_lock);
    if (n > 0) {
        pthread_mutex_lock(&lf->lock);
        for (ssize_t k = 0; k < n; k++)
            op_done_locked(lf, ent[k].op_context, NULL);
        pump_locked(lf);
        pthread_mutex_unlock(&lf->lock);
        return (int)n;
    }
    if (n == -FI_EAVAIL) {
        char pbuf[128];
        const char *pmsg =
            fi_cq_strerror(r->cq, e.prov_errno, e.err_data, pbuf, sizeof(pbuf));
        struct tent_xerr *xe = tent_xerr_new(
            lf_cause(e.err), e.err,
            "libfabric %s (%s): RMA failed: %s (provider error %d: %s)",
            lf->provider, r->name, lf->api.strerror(e.err), e.prov_errno,
            pmsg ? pmsg : "?");
        if (!e.op_context) {
            free(xe);
            return 0;
        }
        pthread_mutex_lock(&lf->lock);
        op_done_locked(lf, e.op_context, xe);
        pump_locked(lf);
        pthread_mutex_unlock(&lf->lock);
        return 1;
    }
    if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT && n != 0)
        LOG_WARN("libfabric %s (%s): fi_cq_read: %s", lf->provider, r->name,
                 lf_err(lf, (int)n));
    return 0;
}

/* The CQs of the rails in mask (bit k: rail k), once each. */
static int lf_poll_rails(struct lf_transport *lf, bool block, unsigned mask)
{
    int n = 0;
    for (int k = 0; k < lf->nrails; k++)
        if (mask >> k & 1)
            n += rail_poll(lf, &lf->rails[k], block);
    return n;
}

#define LF_ALL_RAILS ((1u << LF_MAX_RAILS) - 1)

/* fi_trywait(3) on rail r's CQ, under its lock. */
static int rail_trywait(struct lf_rail *r)
{
    struct fid *f = &r->cq->fid;
    pthread_mutex_lock(&r->cq_lock);
    int rc = fi_trywait(r->fabric, &f, 1);
    pthread_mutex_unlock(&r->cq_lock);
    return rc;
}

/* A target has no completions of its own: these two tell its progress
 * thread that a peer's RMA reached it.  A rail without an FI_RMA_EVENT
 * counter but with a wait fd (tcp;ofi_rxm) says so by the fd, readable
 * before the CQ read while a peer's bytes wait in a socket: one poll over
 * those fds returns the rails (bit k: rail k) with bytes waiting. */
static unsigned lf_peer_bytes_waiting(struct lf_transport *lf)
{
    struct pollfd p[LF_MAX_RAILS];
    int rail[LF_MAX_RAILS], n = 0;
    for (int k = 0; k < lf->nrails && lf->fds_wait; k++) {
        struct lf_rail *r = &lf->rails[k];
        if (!r->served && r->wait_fd >= 0) {
            p[n] = (struct pollfd){.fd = r->wait_fd, .events = POLLIN};
            rail[n++] = k;
        }
    }
    unsigned mask = 0;
    if (n > 0 && poll(p, (nfds_t)n, 0) > 0)
        for (int i = 0; i < n; i++)
            if (p[i].revents)
                mask |= 1u << rail[i];
    return mask;
}

/* After the CQ read that served it: a rail with an FI_RMA_EVENT counter
 * (shm) says so by the counter; one with a wait fd (of those in mask) by
 * fi_trywait(3), which re-arms the fd's signal (it stays readable until
 * then) and answers -FI_EAGAIN while something is left to serve. */
static bool lf_peer_served(struct lf_transport *lf, unsigned mask)
{
    bool any = false;
    for (int k = 0; k < lf->nrails; k++) {
        struct lf_rail *r = &lf->rails[k];
        if (!r->served && !(mask >> k & 1))
            continue;
        if (r->served) {
            uint64_t v = fi_cntr_read(r->served);
            any |= v != r->served_seen;
            r->served_seen = v;
        } else if (r->wait_fd >= 0 && lf->fds_wait) {
            any |= rail_trywait(r) == -FI_EAGAIN;
        }
    }
    return any;
}

/* Whether a caller polled status lately: it reads the CQs itself. */
static bool caller_polls(struct lf_transport *lf, uint64_t now)
{
    return now - atomic_load_explicit(&lf->status_ns, memory_order_relaxed) <
           LF_CALLER_NS;
}

/* Counts a kick (activity the progress thread sees on its next pass) and,
 * with fd, wakes the thread if it sleeps (or is about to). */
static void lf_wake(struct lf_transport *lf, bool fd)
{
    atomic_fetch_add(&lf->kicks, 1);
    if (fd && atomic_load(&lf->sleeping)) {
        uint64_t one = 1;
        ssize_t w = write(lf->efd, &one, sizeof(one));
        (void)w; /* EAGAIN: the counter is already non-zero */
    }
}

/* fi_trywait(3) on every rail: 1 when the thread may block on the wait
 * fds (nothing the CQs would report without a read first), 0 when a CQ
 * asks to be read first (-FI_EAGAIN), the negative error otherwise. */
static int lf_trywait(struct lf_transport *lf)
{
    for (int k = 0; k < lf->nrails; k++) {
        int rc = rail_trywait(&lf->rails[k]);
        if (rc != FI_SUCCESS)
            return rc == -FI_EAGAIN ? 0 : rc;
    }
    return 1;
}

/* The spin after activity, as tcp's RPC workers do it: a spin that runs
 * out without new activity makes the next 2^k - 1 activities go without
 * one after k such spins in a row (k <= 6), so sparse traffic or a
 * crowded machine costs little spinning. */
struct lf_spin {
    uint64_t end; /* spin until then */
    bool on;      /* a spin is running */
    int misses, skip;
};

static void spin_activity(struct lf_spin *sp, uint64_t now, long spin_ns)
{
    if (sp->on && now < sp->end)
        sp->misses = 0; /* the spin caught it */
    if (sp->skip > 0) {
        sp->skip--;
        sp->on = false;
        sp->end = 0;
        return;
    }
    sp->on = spin_ns > 0;
    sp->end = now + (uint64_t)spin_ns;
}

/* The thread goes to sleep: a spin that ran its length counts a miss. */
static void spin_over(struct lf_spin *sp, uint64_t now)
{
    if (sp->on && now >= sp->end) {
        if (sp->misses < 6)
            sp->misses++;
        sp->skip = (1 << sp->misses) - 1;
    }
    sp->on = false;
    sp->end = 0;
}

#define LF_PAUSE_MIN_NS    2000L
#define LF_PAUSE_BUSY_NS   50000L
#define LF_WAIT_BUSY_NS    1000000L
#define LF_WARM_NS         50000000UL
#define LF_SWEEP_NS        50000UL
#define LF_CALLER_SWEEP_NS 20000UL
/* The progress thread.  After activity (a completion, a submit, a wait fd
 * that fired, a peer's RMA seen) it polls the CQs for spin_ns;
 * while a caller polls status it neither reads the CQs nor spins.  Then it
 * sleeps: pauses doubling from LF_PAUSE_MIN_NS up to LF_PAUSE_BUSY_NS while
 * operations are out (LF_WAIT_BUSY_NS while a caller polls) and for LF_WARM_NS
 * after activity; when idle, up to idle_ns, in one ppoll over the rails' wait
 * fds (after fi_trywait) and the eventfd where every rail has a wait fd that
 * sees a peer's traffic, else over the eventfd alone, since a peer's RMA on our
 * memory may need our manual progress. */
static void *progress_main(void *arg)
{
    struct lf_transport *lf = arg;
    pthread_setname_np(pthread_self(), "tent-lf-prog");
    /* short sleeps mean what they say (the default slack is 50 us) */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    struct pollfd pfd[LF_MAX_RAILS + 1];
    int nfd = 0;
    pfd[nfd++] = (struct pollfd){.fd = lf->efd, .events = POLLIN};
    for (int k = 0; k < lf->nrails; k++)
        if (lf->rails[k].wait_fd >= 0)
            pfd[nfd++] =
                (struct pollfd){.fd = lf->rails[k].wait_fd, .events = POLLIN};
    struct lf_spin sp = {0};
    uint64_t warm_until = 0, next_sweep = 0;
    long pause = LF_PAUSE_MIN_NS;
    int again = 0; /* fi_trywait's -FI_EAGAIN in a row */
    unsigned seen = atomic_load(&lf->kicks);
    for (;;) {
        pthread_mutex_lock(&lf->lock);
        bool stop = lf->stop;
        bool busy = lf->ops_out > 0 || lf->retries;
        for (int c = 0; c < TENT_NPRIO; c++)
            busy |= lf->qhead[c] != NULL;
        if (busy)
            pump_locked(lf);
        uint64_t now = tent_now_ns();
        if (busy && now >= lf->next_scan_ns) {
            expire_locked(lf, now);
            lf->next_scan_ns = now + 10000000u;
        }
        pthread_mutex_unlock(&lf->lock);
        if (stop)
            return NULL;
        /* A caller polling status reads the CQs itself, which also
         * serves the peers' RMA: the thread stays out of its way (a
         * second reader contends for the CQ lock, a second spinner takes
         * the caller's core on a small machine). */
        unsigned kicks = atomic_load(&lf->kicks);
        bool caller = caller_polls(lf, tent_now_ns());
        bool act = false;
        if (!caller) {
            /* Where every rail's wait fd sees a peer's traffic, a pass
             * reads only the CQs of rails with bytes waiting: a serving
             * target then makes one system call per idle pass rather than
             * two or three per rail.  Every CQ is read while operations
             * of ours are out and at least every LF_SWEEP_NS (rxm moves
             * deferred work and connection set-up only inside a read). */
            unsigned waiting = lf_peer_bytes_waiting(lf);
            unsigned mask = waiting;
            if (!lf->fds_wait || busy || now >= next_sweep) {
                mask = LF_ALL_RAILS;
                next_sweep = now + LF_SWEEP_NS;
            }
            act = waiting != 0;
            act |= lf_poll_rails(lf, true, mask) > 0;
            act |= lf_peer_served(lf, mask) || kicks != seen;
        }
        seen = kicks;
        now = tent_now_ns();
        if (act) {
            warm_until = now + LF_WARM_NS;
            spin_activity(&sp, now, lf->spin_ns);
            pause = LF_PAUSE_MIN_NS;
            again = 0;
            continue;
        }
        if (now < sp.end && !caller)
            continue;
        spin_over(&sp, now);
        /* Short pauses while operations are out and for LF_WARM_NS after
         * activity: rxm moves deferred operations and connection set-up
         * only inside a CQ read, which its wait fd does not announce (and
         * waking on the fds mid-traffic upset the rail scheduler's
         * estimates in the failover tests).  Long ones when idle, ended
         * early by the wait fds where they see a peer's traffic. */
        long cap = busy ? (caller ? LF_WAIT_BUSY_NS : LF_PAUSE_BUSY_NS)
                   : now < warm_until ? LF_PAUSE_BUSY_NS
                                      : lf->idle_ns;
        long ns = pause > cap ? cap : pause;
        pause = pause * 2 > cap ? cap : pause * 2;
        /* the wait fds only for a long sleep (see above) */
        bool fds = lf->fds_wait && !busy && now >= warm_until;
        if (fds) {
            int tw = lf_trywait(lf);
            if (tw < 0) {
                /* a provider that cannot say: timed sleeps from now on */
                LOG_WARN("libfabric %s: fi_trywait: %s; the progress thread "
                         "sleeps by the clock instead of in wait fds",
                         lf->provider, lf_err(lf, tw));
                lf->fds_wait = false;
                fds = false;
            } else if (tw == 0 && ++again < 4) {
                continue; /* read what the CQs hold, then ask again */
            } else if (tw == 0) {
                fds = false; /* a CQ that keeps asking: a timed pause */
            }
        }
        if (fds)
            again = 0;
        int n = fds ? nfd : 1;
        if (fds)
            ns = cap;
        /* a submit after this store writes the eventfd; one before it
         * changed kicks */
        atomic_store(&lf->sleeping, true);
        if (atomic_load(&lf->kicks) != seen) {
            atomic_store(&lf->sleeping, false);
            continue;
        }
        struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
        int rc = ppoll(pfd, (nfds_t)n, &ts, NULL);
        atomic_store(&lf->sleeping, false);
        if (rc <= 0)
            continue;
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(lf->efd, &v, sizeof(v));
            (void)r;
        }
        /* traffic (ours or a peer's): stay awake for the next one */
        now = tent_now_ns();
        warm_until = now + LF_WARM_NS;
        spin_activity(&sp, now, lf->spin_ns);
        pause = LF_PAUSE_MIN_NS;
    }
}

/* ---- install ----------------------------------------------------------- */

static void mr_close(struct lf_transport *lf, struct lf_mr *m)
{
    for (int k = 0; k < lf->nrails; k++)
        if (m->mr[k])
            fi_close(&m->mr[k]->fid);
}

static void lf_close_mrs(struct lf_transport *lf)
{
    while (lf->mrs) {
        struct lf_mr *m = lf->mrs;
        lf->mrs = m->next;
        mr_close(lf, m);
        free(m);
    }
}

static void lf_free_state(struct lf_transport *lf)
{
    /* handles the runtime left open (an abandoned engine's) */
    while (lf->avs) {
        struct lf_av_ent *e = lf->avs;
        lf->avs = e->next;
        if (e->ep) {
            fi_close(&e->ep->fid);
            fi_close(&e->av->fid);
        }
        free(e);
    }
    while (lf->retired) {
        struct lf_retired *r = lf->retired;
        lf->retired = r->next;
        fi_close(&r->ep->fid);
        fi_close(&r->av->fid);
        free(r);
    }
    while (lf->retries) {
        struct lf_retry *rt = lf->retries;
        lf->retries = rt->next;
        free(rt->why);
        free(rt);
    }
    lf->retries_tail = NULL;
    lf_close_mrs(lf);
    free(lf->ops);
    lf->ops = lf->free_ops = NULL;
}

static void rail_attr(char *key, size_t len, const char *attr, int k);

/* The rails' fabric names, "," between; "" when they do not fit (the
 * peers then pair rails in order). */
static void fabrics_attr(const struct lf_transport *lf, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < lf->nrails; k++) {
        int w = snprintf(buf + at, len - at, "%s%s", k ? "," : "",
                         lf->rails[k].net);
        if (w < 0 || (size_t)w >= len - at || strchr(lf->rails[k].net, ',')) {
            buf[0] = '\0';
            return;
        }
        at += (size_t)w;
    }
}

/* Publishes (or, publish false, removes) every rail's address, their
 * fabrics and the provider's name. */
static int publish_rails(struct tent_transport *t, bool publish)
{
    struct lf_transport *lf = lf_of(t);
    char fabrics[256];
    fabrics_attr(lf, fabrics, sizeof(fabrics));
    int rc = t->env->publish_attr(t->env->ctx, LF_ATTR_PROV,
                                  publish ? lf->provider : NULL);
    int f = t->env->publish_attr(t->env->ctx, LF_ATTR_FABRICS,
                                 publish ? fabrics : NULL);
    if (!rc)
        rc = f;
    for (int k = 0; k < lf->nrails && (!rc || !publish); k++) {
        char key[32];
        rail_attr(key, sizeof(key), LF_ATTR_ADDR, k);
        int r = t->env->publish_attr(t->env->ctx, key,
                                     publish ? lf->rails[k].addr_hex : NULL);
        if (!rc)
            rc = r;
    }
    if (rc && publish)
        publish_rails(t, false);
    return rc;
}

/* Debian's libfabric loads its psm providers, and libpsm installs handlers
 * for SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL and SIGABRT in the process
 * (writing .btr files): the application's signals are not a transport's
 * to take.  The handlers in place before libfabric is touched are put
 * back once install is done. */
#define LF_NSIG 32
static void save_signals(struct sigaction *old)
{
    for (int sig = 1; sig < LF_NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, NULL, &old[sig]);
}

static void restore_signals(const struct sigaction *old)
{
    for (int sig = 1; sig < LF_NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP)
            continue;
        struct sigaction now;
        if (sigaction(sig, NULL, &now) == 0 &&
            now.sa_handler != old[sig].sa_handler) {
            LOG_DEBUG("libfabric: signal %d handler put back", sig);
            sigaction(sig, &old[sig], NULL);
        }
    }
}

static int lf_install_inner(struct tent_transport *t);

/* Whether the progress thread polls the provider's CQs: shm's CQ takes a
 * wait object but its wait never sees a peer's RMA that needs serving. */
static bool lf_polled(const char *progress, const char *prov)
{
    return strcmp(progress, "poll") == 0 ||
           (strcmp(progress, "auto") == 0 && strcmp(prov, "shm") == 0);
}

static int lf_install(struct tent_transport *t)
{
    struct sigaction old[LF_NSIG];
    memset(old, 0, sizeof(old));
    save_signals(old);
    int rc = lf_install_inner(t);
    restore_signals(old);
    return rc;
}
static int lf_install_inner(struct tent_transport *t)
{
    struct lf_transport *lf = lf_of(t);
    const struct tent_config *cfg = t->env->cfg;
    const char *lib = NULL, *prov = NULL, *progress = NULL, *domains = NULL;
    int64_t slice, inflight, tmo, idle_us, spin_us, max_rails, promo_us;
    int rc =
        tent_config_get_string(cfg, "transports/libfabric/library", NULL, &lib);
    if (!rc)
        rc = tent_config_get_string(cfg, "transports/libfabric/provider", NULL,
                                    &prov);
    if (!rc)
        rc = tent_config_get_string(cfg, "transports/libfabric/domains", NULL,
                                    &domains);
    if (!rc)
        rc = tent_config_get_int_range(cfg, "transports/libfabric/slice_size",
                                       1 << 20, 4096, 1ll << 32, &slice);
    if (!rc)
        rc = tent_config_get_int_range(cfg, "transports/libfabric/max_inflight",
                                       256, 1, 65536, &inflight);
    if (!rc)
        rc = tent_config_get_int_range(cfg, "transports/libfabric/timeout_ms",
                                       10000, 1, 86400000, &tmo);
    if (!rc)
        rc = tent_config_get_string(cfg, "transports/libfabric/progress",
                                    "auto", &progress);
    if (!rc)
        rc =
            tent_config_get_int_range(cfg, "transports/libfabric/poll_idle_us",
                                      LF_DEFAULT_IDLE_US, 1, 1000000, &idle_us);
    if (!rc)
        rc =
            tent_config_get_int_range(cfg, "transports/libfabric/spin_us",
                                      LF_DEFAULT_SPIN_US, 0, 1000000, &spin_us);
    if (!rc)
        rc = tent_config_get_int_range(cfg, "transports/libfabric/max_rails",
                                       LF_MAX_RAILS, 1, LF_MAX_RAILS,
                                       &max_rails);
    if (!rc)
        rc = tent_config_get_int_range(
            cfg, "transports/libfabric/priority_promotion_timeout_us", 10000, 0,
            60000000, &promo_us);
    if (!rc)
        rc = tent_sched_params_load(cfg, "transports/libfabric", &lf->sp);
    if (rc)
        return rc;
    if (strcmp(progress, "auto") != 0 && strcmp(progress, "wait") != 0 &&
        strcmp(progress, "poll") != 0)
        return tent_set_error(TENT_ECONFIG,
                              "transports/libfabric/progress '%s' is not "
                              "auto, wait or poll",
                              progress);
    if (prov && strlen(prov) >= sizeof(lf->provider))
        return tent_set_error(TENT_ECONFIG,
                              "transports/libfabric/provider '%s' is too long",
                              prov);
    rc = lf_api_open(&lf->api, lib);
    if (rc) {
        LOG_INFO("libfabric transport not installed: %s", tent_last_error());
        return rc;
    }
    if (prov && *prov) {
        rc = lf_getinfo(lf, prov, lf_polled(progress, prov), &lf->info);
        snprintf(lf->provider, sizeof(lf->provider), "%s", prov);
    } else {
        rc = TENT_ENODEV;
        for (size_t k = 0;
             rc && k < sizeof(default_providers) / sizeof(default_providers[0]);
             k++) {
            rc = lf_getinfo(lf, default_providers[k],
                            lf_polled(progress, default_providers[k]),
                            &lf->info);
            snprintf(lf->provider, sizeof(lf->provider), "%s",
                     default_providers[k]);
        }
        if (rc)
            tent_set_error(TENT_ENODEV,
                           "libfabric: none of verbs;ofi_rxm, efa, cxi has "
                           "a device here (transports/libfabric/provider "
                           "names another)");
    }
    if (rc)
        goto fail_api;
    bool cq_waits = !lf_polled(progress, lf->info->fabric_attr->prov_name);
    rc = rails_open(lf, (int)max_rails, cq_waits, domains);
    if (rc)
        goto fail_info;
    lf->slice = (uint64_t)slice;
    uint64_t txsize = 0;
    for (int k = 0; k < lf->nrails; k++) {
        const struct lf_rail *r = &lf->rails[k];
        if (r->max_msg < lf->slice)
            lf->slice = r->max_msg;
        txsize += r->info->tx_attr->size;
    }
    lf->ops_cap = (uint32_t)inflight;
    if (txsize && txsize < lf->ops_cap)
        lf->ops_cap = (uint32_t)txsize;
    lf->timeout_ms = (int)tmo;
    lf->idle_ns = (long)idle_us * 1000;
    lf->spin_ns = (long)spin_us * 1000;
    lf->fds_wait = true;
    for (int k = 0; k < lf->nrails; k++)
        lf->fds_wait &= lf->rails[k].wait_fd >= 0;
    lf->promo_ns = (uint64_t)promo_us * 1000u;
    lf->revoke_ms =
        t->env->revoke_timeout_ms > 0 ? t->env->revoke_timeout_ms : (int)tmo;
    /* the rail scheduler measures slices of at least the slice size */
    if (!lf->sp.sample_min || lf->slice < lf->sp.sample_min)
        lf->sp.sample_min = lf->slice;
    lf->ops = calloc(lf->ops_cap, sizeof(*lf->ops));
    if (!lf->ops) {
        rc = tent_set_error(TENT_ENOMEM, "libfabric: out of memory");
        goto fail_rails;
    }
    for (uint32_t k = 0; k < lf->ops_cap; k++) {
        lf->ops[k].next_free = lf->free_ops;
        lf->free_ops = &lf->ops[k];
    }
    lf->next_key = 1;
    lf->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (lf->efd < 0) {
        rc = tent_set_error(TENT_ENOMEM, "libfabric: eventfd: %s",
                            strerror(errno));
        goto fail_state;
    }
    pthread_mutex_init(&lf->lock, NULL);
    pthread_cond_init(&lf->drained, NULL);
    rc = publish_rails(t, true);
    if (rc)
        goto fail_lock;
    lf->accepting = true;
    if (pthread_create(&lf->progress, NULL, progress_main, lf)) {
        rc = tent_set_error(TENT_ENOMEM,
                            "libfabric: cannot start the progress thread");
        goto fail_publish;
    }
    for (int k = 0; k < lf->nrails; k++) {
        const struct lf_rail *r = &lf->rails[k];
        if (t->env->sched)
            tent_sched_note_nic(t->env->sched, r->name, 0);
        LOG_INFO("libfabric: rail %d: provider %s (fabric %s, domain %s), "
                 "mr_mode 0x%" PRIx64 "%s",
                 k, r->info->fabric_attr->prov_name, r->info->fabric_attr->name,
                 r->name, (uint64_t)r->info->domain_attr->mr_mode,
                 r->info->tx_attr->op_flags & FI_DELIVERY_COMPLETE
                     ? ", delivery complete"
                     : "");
    }
    LOG_INFO("libfabric: %d rail(s), %u ops in flight, slices of %" PRIu64
             " bytes",
             lf->nrails, lf->ops_cap, lf->slice);
    return TENT_OK;

fail_publish:
    publish_rails(t, false);
fail_lock:
    pthread_mutex_destroy(&lf->lock);
    pthread_cond_destroy(&lf->drained);
    close(lf->efd);
    lf->efd = -1;
fail_state:
    lf_free_state(lf);
fail_rails:
    rails_close(lf);
fail_info:
    lf->api.freeinfo(lf->info);
    lf->info = NULL;
fail_api:
    lf_api_close(&lf->api);
    LOG_INFO("libfabric transport not installed: %s", tent_last_error());
    return rc;
}

static void lf_uninstall(struct tent_transport *t)
{
    struct lf_transport *lf = lf_of(t);
    pthread_mutex_lock(&lf->lock);
    lf->stop = true;
    lf->accepting = false;
    pthread_mutex_unlock(&lf->lock);
    lf_wake(lf, true);
    pthread_join(lf->progress, NULL);
    close(lf->efd);
    lf->efd = -1;
    if (t->env)
        publish_rails(t, false);
    /* Registrations the runtime left (bound to the endpoint under
     * FI_MR_ENDPOINT) go before it; then the endpoints, so nothing
     * completes into our ops after they are freed. */
    lf_close_mrs(lf);
    for (int k = 0; k < lf->nrails; k++) {
        if (lf->rails[k].ep)
            fi_close(&lf->rails[k].ep->fid);
        lf->rails[k].ep = NULL;
    }
    lf_free_state(lf);
    rails_close(lf);
    lf->api.freeinfo(lf->info);
    lf->info = NULL;
    lf_api_close(&lf->api);
    pthread_mutex_destroy(&lf->lock);
    pthread_cond_destroy(&lf->drained);
}

static uint32_t lf_capabilities(TENT_UNUSED struct tent_transport *t)
{
    return TENT_CAP_DRAM_TO_DRAM;
}

/* Rail k's attribute: attr for rail 0, attr<k> after it. */
static void rail_attr(char *key, size_t len, const char *attr, int k)
{
    if (k)
        snprintf(key, len, "%s%d", attr, k);
    else
        snprintf(key, len, "%s", attr);
}

static bool lf_can_reach(struct tent_transport *t,
                         const struct tent_seg_view *target)
{
    struct lf_transport *lf = lf_of(t);
    if (target->local)
        return true;
    char prov[64], addr[2 * LF_MAX_ADDR + 1];
    return t->env->seg_attr(t->env->ctx, target, LF_ATTR_PROV, prov,
                            sizeof(prov)) &&
           strcmp(prov, lf->provider) == 0 &&
           t->env->seg_attr(t->env->ctx, target, LF_ATTR_ADDR, addr,
                            sizeof(addr)) &&
           *addr;
}

/* ---- peers --------------------------------------------------------------- */

/* The peer's rails from its descriptor (ours for the local segment): the
 * endpoint address of each and its fabric ("" where it names none);
 * returns how many. */
static int peer_rails(struct tent_transport *t, const struct tent_seg_view *seg,
                      char (*addr)[2 * LF_MAX_ADDR + 1], char (*fabric)[64])
{
    struct lf_transport *lf = lf_of(t);
    char names[256] = "";
    if (seg->local)
        fabrics_attr(lf, names, sizeof(names));
    else if (!t->env->seg_attr(t->env->ctx, seg, LF_ATTR_FABRICS, names,
                               sizeof(names)))
        names[0] = '\0';
    const char *nm = names;
    int n = 0;
    for (; n < LF_MAX_RAILS; n++) {
        char key[32];
        rail_attr(key, sizeof(key), LF_ATTR_ADDR, n);
        if (seg->local && n < lf->nrails)
            snprintf(addr[n], sizeof(addr[n]), "%s", lf->rails[n].addr_hex);
        else if (seg->local ||
                 !t->env->seg_attr(t->env->ctx, seg, key, addr[n],
                                   sizeof(addr[n])) ||
                 !*addr[n])
            break;
        /* rail n's fabric: the nth name of the list */
        size_t len = strcspn(nm, ",");
        snprintf(fabric[n], sizeof(fabric[n]), "%.*s", (int)len, nm);
        nm += len + (nm[len] == ',');
    }
    return n;
}

/* Which peer rail each of ours goes to (libfabric_pair.h: the same fabric
 * first, then in order); use[j] = our rail and peer[j] = its peer rail for
 * the handle's rail j.  Returns how many. */
static int pair_rails(const struct lf_transport *lf, bool same_host,
                      char (*fabric)[64], int n, int *use, int *peer)
{
    const char *mine[LF_MAX_RAILS], *theirs[LF_MAX_RAILS];
    bool usable[LF_MAX_RAILS];
    int peer_of[LF_MAX_RAILS], m = 0;
    for (int k = 0; k < lf->nrails; k++) {
        mine[k] = lf->rails[k].net;
        usable[k] = !lf->rails[k].loopback || same_host;
    }
    for (int j = 0; j < n; j++)
        theirs[j] = fabric[j];
    lf_pair_rails(mine, usable, lf->nrails, theirs, n, same_host, peer_of);
    for (int k = 0; k < lf->nrails; k++)
        if (peer_of[k] != LF_PAIR_NONE) {
            use[m] = k;
            peer[m++] = peer_of[k];
        }
    return m;
}

/* peer_open: the peer's endpoint address on each rail from its descriptor
 * (ours for the local segment), in the rails' AVs from now until
 * peer_close; each of our rails goes to a peer rail on its fabric, the
 * rest in order (libfabric_pair.h).  An
 * AV entry is inserted once when the first handle naming that address
 * opens and removed when the last one closes.  With more than one rail the
 * handle has a rail set of the engine's scheduler (sched/rails.h): each
 * slice goes where it is predicted to finish first, a rail whose operation
 * failed is paused (probed back later) and the slice is posted again on
 * another rail; the pair is rebuilt before the rail's next operation to
 * that peer (struct lf_av_ent).  The class to serve comes from
 * tent_prio_pick, so LOW is promoted after priority_promotion_timeout_us,
 * and FI_EAGAIN leaves a slice queued. */
static int lf_peer_open(struct tent_transport *t,
                        const struct tent_seg_view *seg, uint64_t incarnation,
                        struct tent_peer **out)
{
    struct lf_transport *lf = lf_of(t);
    char addr[LF_MAX_RAILS][2 * LF_MAX_ADDR + 1];
    char fabric[LF_MAX_RAILS][64];
    int n = peer_rails(t, seg, addr, fabric);
    if (!n)
        return tent_set_error(TENT_EPEER,
                              "libfabric: segment %s publishes no libfabric "
                              "address",
                              seg->name);
    /* a loopback rail reaches a peer on this host only */
    bool same_host = seg->local || t->env->seg_on_host(t->env->ctx, seg);
    int use[LF_MAX_RAILS], peer[LF_MAX_RAILS];
    int m = pair_rails(lf, same_host, fabric, n, use, peer);
    if (!m)
        return tent_set_error(TENT_EPEER,
                              "libfabric: no rail reaches segment %s (this "
                              "engine's rails are loopback only, or the "
                              "peer's are)",
                              seg->name);
    if (!t->env->sched)
        m = 1;
    struct lf_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return tent_set_error(TENT_ENOMEM, "libfabric: out of memory");
    int rc = TENT_OK;
    if (m > 1) {
        struct tent_rail rails[LF_MAX_RAILS];
        memset(rails, 0, sizeof(rails));
        for (int j = 0; j < m; j++) {
            /* the domain's name as the rail's label, cut to fit */
            snprintf(rails[j].local_nic, sizeof(rails[j].local_nic), "%.*s",
                     (int)sizeof(rails[j].local_nic) - 1,
                     lf->rails[use[j]].name);
            snprintf(rails[j].peer_nic, sizeof(rails[j].peer_nic), "rail%d",
                     peer[j]);
        }
        rc = tent_railset_new(t->env->sched, &lf->sp, "libfabric", seg->name,
                              rails, (size_t)m, &p->rs);
        if (rc) {
            free(p);
            return rc;
        }
    }
    pthread_mutex_lock(&lf->lock);
    for (int j = 0; j < m && !rc; j++) {
        rc = av_get_locked(lf, use[j], addr[peer[j]], &p->ents[j]);
        if (!rc)
            p->nrails = j + 1;
    }
    if (rc)
        for (int j = 0; j < p->nrails; j++)
            av_put_locked(lf, p->ents[j]);
    pthread_mutex_unlock(&lf->lock);
    if (rc) {
        if (p->rs)
            tent_railset_free(p->rs);
        free(p);
        return rc;
    }
    p->base.owner = t;
    p->base.incarnation = incarnation;
    *out = &p->base;
    return TENT_OK;
}

static void lf_peer_close(struct tent_transport *t, struct tent_peer *h)
{
    struct lf_transport *lf = lf_of(t);
    struct lf_peer *p = (struct lf_peer *)h;
    pthread_mutex_lock(&lf->lock);
    for (int k = 0; k < p->nrails; k++)
        av_put_locked(lf, p->ents[k]);
    pthread_mutex_unlock(&lf->lock);
    if (p->rs)
        tent_railset_free(p->rs);
    free(p);
}

/* ---- sub-batches -----------------------------------------------------------
 */

static int lf_alloc_sub_batch(struct tent_transport *t, size_t capacity,
                              struct tent_sub_batch **out)
{
    struct lf_task *tasks;
    struct tent_sub_batch *sb;
    int rc = tent_sub_batch_new(t, sizeof(struct lf_sub), capacity,
                                sizeof(*tasks), (void **)&tasks, &sb);
    if (rc)
        return rc;
    ((struct lf_sub *)sb)->tasks = tasks;
    *out = sb;
    return TENT_OK;
}

static int lf_free_sub_batch(struct tent_transport *t,
                             struct tent_sub_batch *sb)
{
    struct lf_transport *lf = lf_of(t);
    struct lf_sub *s = (struct lf_sub *)sb;
    pthread_mutex_lock(&lf->lock);
    for (size_t i = 0; i < sb->capacity; i++)
        if (s->tasks[i].state == LF_RUNNING) {
            pthread_mutex_unlock(&lf->lock);
            return tent_set_error(TENT_EBUSY,
                                  "libfabric: task %zu of the sub-batch is "
                                  "still in flight",
                                  i);
        }
    pthread_mutex_unlock(&lf->lock);
    for (size_t i = 0; i < sb->capacity; i++)
        free(s->tasks[i].err);
    tent_sub_batch_delete(sb, s->tasks);
    return TENT_OK;
}

/* ---- submit / status ------------------------------------------------------
 */

/* ---- submit / status ------------------------------------------------------
 */

static struct lf_mr *find_mr_locked(struct lf_transport *lf, uint64_t addr,
                                    uint64_t len)
{
    for (struct lf_mr *m = lf->mrs; m; m = m->next)
        if (!m->revoked && addr >= m->base && len <= m->length &&
            addr - m->base <= m->length - len)
            return m;
    return NULL;
}

/* The per-rail keys of a buffer attribute ("k0,k1,..."): how many, or -1
 * when it is not that. */
static int parse_keys(const char *s, uint64_t *keys, int max)
{
    if (!s || !*s)
        return -1;
    int n = 0;
    while (*s && n < max) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 16);
        if (errno || end == s || (*end && *end != ','))
            return -1;
        keys[n++] = v;
        s = *end ? end + 1 : end;
    }
    return *s ? -1 : n;
}

static bool any_mr_local(const struct lf_transport *lf)
{
    for (int k = 0; k < lf->nrails; k++)
        if (lf->rails[k].mr_local)
            return true;
    return false;
}

static int start_locked(struct lf_transport *lf, struct lf_task *task,
                        const struct tent_xfer *r)
{
    const struct tent_buffer *tb = r->target_buf;
    uint64_t keys[LF_MAX_RAILS] = {0}, base;
    int nkeys = tb ? parse_keys(tent_attrs_get(tb->attrs, LF_ATTR_KEY), keys,
                                LF_MAX_RAILS)
                   : -1;
    if (nkeys < 0 || !parse_u64(tent_attrs_get(tb->attrs, LF_ATTR_BASE), &base))
        return tent_set_error(TENT_ENOTSUP,
                              "libfabric: the target buffer holding %#" PRIx64
                              " is not registered with libfabric",
                              r->remote);
    if (r->remote < tb->base || r->length > tb->length ||
        r->remote - tb->base > tb->length - r->length)
        return tent_set_error(TENT_ERANGE,
                              "libfabric: [%#" PRIx64 ", +%" PRIu64
                              ") is outside the target buffer",
                              r->remote, r->length);
    if (!r->peer || r->peer->owner != &lf->base)
        return tent_set_error(TENT_EINVAL,
                              "libfabric: request to %s without a libfabric "
                              "peer handle",
                              r->target->name);
    struct lf_peer *peer = (struct lf_peer *)r->peer;
    if (nkeys <= peer->ents[peer->nrails - 1]->rail)
        return tent_set_error(TENT_EPROTO,
                              "libfabric: the target buffer holding %#" PRIx64
                              " has keys for %d rail(s), the peer is reached "
                              "on rail %d",
                              r->remote, nkeys,
                              peer->ents[peer->nrails - 1]->rail);
    struct lf_mr *lmr =
        find_mr_locked(lf, (uint64_t)(uintptr_t)r->local, r->length);
    if (!lmr && any_mr_local(lf))
        return tent_set_error(TENT_ENOTREG,
                              "libfabric %s: local memory [%p, +%" PRIu64
                              ") is not registered (the provider needs "
                              "FI_MR_LOCAL)",
                              lf->provider, r->local, r->length);
    free(task->err);
    *task = (struct lf_task){.state = LF_RUNNING,
                             .opcode = r->opcode,
                             .prio = tent_prio_class(r->priority),
                             .local = r->local,
                             .raddr = base + (r->remote - tb->base),
                             .peer = peer,
                             .lmr = lmr,
                             .length = r->length,
                             .start_ns = tent_now_ns()};
    memcpy(task->keys, keys, sizeof(keys));
    if (r->length == 0) {
        task->state = LF_DONE;
        return TENT_OK;
    }
    if (lmr)
        lmr->users++;
    enqueue_locked(lf, task);
    return TENT_OK;
}

static int lf_submit(struct tent_transport *t, struct tent_sub_batch *sb,
                     const struct tent_xfer *reqs, size_t n,
                     struct tent_xfer_result *res)
{
    struct lf_transport *lf = lf_of(t);
    struct lf_sub *s = (struct lf_sub *)sb;
    int first = TENT_OK;
    pthread_mutex_lock(&lf->lock);
    for (size_t i = 0; i < n; i++) {
        const struct tent_xfer *r = &reqs[i];
        int rc;
        res[i].code = TENT_OK;
        if (!lf->accepting)
            rc = tent_set_error(TENT_ESHUTDOWN,
                                "libfabric: transport is quiesced");
        else if (r->slot >= sb->capacity)
            rc = tent_set_error(TENT_EINVAL,
                                "libfabric: slot %u beyond the sub-batch's "
                                "%zu",
                                r->slot, sb->capacity);
        else if (s->tasks[r->slot].state == LF_RUNNING)
            rc = tent_set_error(
                TENT_EBUSY, "libfabric: slot %u is still in flight", r->slot);
        else
            rc = start_locked(lf, &s->tasks[r->slot], r);
        if (rc) {
            tent_xres_fail(&res[i], rc, 0);
            if (first == TENT_OK)
                first = rc;
        }
    }
    /* Post now what may go now; the progress thread posts the rest (and
     * reads the completions when the caller does not). */
    pump_locked(lf);
    /* The thread is woken (it may be in a long idle sleep) unless a
     * caller is polling status, which reads the CQs itself: no wake-up
     * per submit then.  Work the cap left queued always wakes it. */
    bool queued = lf->retries != NULL;
    for (int c = 0; c < TENT_NPRIO; c++)
        queued |= lf->qhead[c] != NULL;
    pthread_mutex_unlock(&lf->lock);
    lf_wake(lf, queued || !caller_polls(lf, tent_now_ns()));
    return first;
}

static int lf_status(struct tent_transport *t, struct tent_sub_batch *sb,
                     uint32_t slot, struct tent_xfer_status *out)
{
    struct lf_transport *lf = lf_of(t);
    struct lf_sub *s = (struct lf_sub *)sb;
    if (slot >= sb->capacity)
        return tent_set_error(TENT_EINVAL, "libfabric: slot %u out of range",
                              slot);
    /* The caller's poll drives progress too (no thread hand-off). */
    uint64_t now = tent_now_ns();
    atomic_store_explicit(&lf->status_ns, now, memory_order_relaxed);
    /* The rails our operations are on; all of them (the peers' RMA on
     * ours needs the reads while the progress thread stays out) every
     * LF_CALLER_SWEEP_NS. */
    unsigned mask = atomic_load(&lf->busy_rails);
    if (now >=
        atomic_load_explicit(&lf->caller_sweep_ns, memory_order_relaxed)) {
        mask = LF_ALL_RAILS;
        atomic_store_explicit(&lf->caller_sweep_ns, now + LF_CALLER_SWEEP_NS,
                              memory_order_relaxed);
    }
    lf_poll_rails(lf, false, mask);
    pthread_mutex_lock(&lf->lock);
    struct lf_task *task = &s->tasks[slot];
    memset(out, 0, sizeof(*out));
    switch (task->state) {
    case LF_DONE:
        out->state = TENT_XFER_COMPLETED;
        out->bytes = task->length;
        break;
    case LF_FAILED:
        tent_xstatus_failed(out, task->err, TENT_EIO, 0);
        break;
    default:
        out->state = TENT_XFER_PENDING;
    }
    pthread_mutex_unlock(&lf->lock);
    return TENT_OK;
}

/* Waits on drained (lock held) until done(arg) or the deadline; false
 * when the deadline came first. */
static bool wait_drained_locked(struct lf_transport *lf, uint64_t deadline_ns,
                                bool (*done)(struct lf_transport *, void *),
                                void *arg)
{
    while (!done(lf, arg)) {
        if (tent_now_ns() >= deadline_ns)
            return false;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&lf->drained, &lf->lock, &ts);
    }
    return true;
}

static bool nothing_out(struct lf_transport *lf, TENT_UNUSED void *arg)
{
    bool queued = false;
    for (int c = 0; c < TENT_NPRIO; c++)
        queued |= lf->qhead[c] != NULL;
    return !lf->ops_out && !lf->retries && !queued;
}

static int lf_quiesce(struct tent_transport *t)
{
    struct lf_transport *lf = lf_of(t);
    uint64_t deadline = tent_now_ns() + (uint64_t)lf->timeout_ms * 1000000u;
    pthread_mutex_lock(&lf->lock);
    lf->accepting = false;
    bool ok = wait_drained_locked(lf, deadline, nothing_out, NULL);
    uint32_t out = lf->ops_out;
    pthread_mutex_unlock(&lf->lock);
    if (!ok)
        return tent_set_error(TENT_ETIMEDOUT,
                              "libfabric quiesce: %u operations still in "
                              "flight after %d ms",
                              out, lf->timeout_ms);
    return TENT_OK;
}

/* ---- memory -------------------------------------------------------------- */

/* ---- memory -------------------------------------------------------------- */

static int lf_add_buffer(struct tent_transport *t, struct tent_buffer *buf)
{
    struct lf_transport *lf = lf_of(t);
    if (buf->is_device)
        return tent_set_error(TENT_ENOTSUP,
                              "libfabric: device memory (%s) is not "
                              "supported yet",
                              buf->location);
    uint64_t access = FI_READ | FI_WRITE;
    if (buf->perm == PERM_GLOBAL_READ_ONLY)
        access |= FI_REMOTE_READ;
    else if (buf->perm == PERM_GLOBAL_READ_WRITE)
        access |= FI_REMOTE_READ | FI_REMOTE_WRITE;
    struct lf_mr *m = calloc(1, sizeof(*m));
    if (!m)
        return tent_set_error(TENT_ENOMEM, "libfabric: out of memory");
    pthread_mutex_lock(&lf->lock);
    uint64_t req_key = lf->next_key++;
    pthread_mutex_unlock(&lf->lock);
    void *addr = (void *)(uintptr_t)buf->base;
    char keys[TENT_ATTR_VALUE_MAX] = "";
    size_t kl = 0;
    int rc = TENT_OK;
    /* one registration per rail's domain; its key in the list */
    for (int k = 0; k < lf->nrails && !rc; k++) {
        struct lf_rail *r = &lf->rails[k];
        int frc = fi_mr_reg(r->domain, addr, buf->length, access, 0, req_key, 0,
                            &m->mr[k], NULL);
        if (frc) {
            m->mr[k] = NULL;
            rc = tent_set_error(
                TENT_EVENDOR,
                "libfabric %s (%s): fi_mr_reg([%p, +%" PRIu64 ")): %s",
                lf->provider, r->name, addr, buf->length, lf_err(lf, frc));
            break;
        }
        if (r->mr_endpoint) {
            frc = fi_mr_bind(m->mr[k], &r->ep->fid, 0);
            if (!frc)
                frc = fi_mr_enable(m->mr[k]);
            if (frc) {
                rc = tent_set_error(TENT_EVENDOR,
                                    "libfabric %s (%s): binding the MR of "
                                    "[%p, +%" PRIu64 ") to the endpoint: %s",
                                    lf->provider, r->name, addr, buf->length,
                                    lf_err(lf, frc));
                break;
            }
        }
        m->desc[k] = fi_mr_desc(m->mr[k]);
        kl += (size_t)snprintf(keys + kl, sizeof(keys) - kl, "%s%" PRIx64,
                               k ? "," : "", fi_mr_key(m->mr[k]));
    }
    m->base = buf->base;
    m->length = buf->length;
    if (!rc && buf->perm != PERM_LOCAL_READ_WRITE) {
        char v[32];
        rc = kl < sizeof(keys)
                 ? tent_attrs_set(&buf->attrs, LF_ATTR_KEY, keys)
                 : tent_set_error(TENT_ENOTSUP,
                                  "libfabric: the keys of %d rails do not "
                                  "fit a buffer attribute",
                                  lf->nrails);
        snprintf(v, sizeof(v), "%" PRIx64, lf->virt_addr ? buf->base : 0);
        if (!rc)
            rc = tent_attrs_set(&buf->attrs, LF_ATTR_BASE, v);
        if (rc)
            tent_attrs_set(&buf->attrs, LF_ATTR_KEY, NULL);
    }
    if (rc) {
        mr_close(lf, m);
        free(m);
        return rc;
    }
    pthread_mutex_lock(&lf->lock);
    m->next = lf->mrs;
    lf->mrs = m;
    pthread_mutex_unlock(&lf->lock);
    return TENT_OK;
}

static bool mr_unused(TENT_UNUSED struct lf_transport *lf, void *arg)
{
    return ((struct lf_mr *)arg)->users == 0;
}

/* Revokes the buffer for new local use, waits (bounded) for our in-flight
 * operations that use it, then closes its MRs: a peer's RMA on the range
 * fails from then on. */
static int lf_remove_buffer(struct tent_transport *t, struct tent_buffer *buf)
{
    struct lf_transport *lf = lf_of(t);
    uint64_t deadline = tent_now_ns() + (uint64_t)lf->revoke_ms * 1000000u;
    pthread_mutex_lock(&lf->lock);
    struct lf_mr **pp = &lf->mrs;
    while (*pp && ((*pp)->base != buf->base || (*pp)->length != buf->length ||
                   (*pp)->revoked))
        pp = &(*pp)->next;
    struct lf_mr *m = *pp;
    if (!m) {
        pthread_mutex_unlock(&lf->lock);
        return TENT_OK; /* add_buffer refused it: nothing registered */
    }
    m->revoked = true;
    /* Running tasks that use it (queued or posted) end first. */
    if (!wait_drained_locked(lf, deadline, mr_unused, m)) {
        m->revoked = false;
        int users = m->users;
        pthread_mutex_unlock(&lf->lock);
        return tent_set_error(TENT_EBUSY,
                              "libfabric %s: %d operations on [%#" PRIx64
                              ", +%" PRIu64 ") still in flight after %d "
                              "ms; the buffer stays registered",
                              lf->provider, users, buf->base, buf->length,
                              lf->revoke_ms);
    }
    *pp = m->next;
    pthread_mutex_unlock(&lf->lock);
    for (int k = 0; k < lf->nrails; k++) {
        int rc = fi_close(&m->mr[k]->fid);
        if (rc)
            LOG_WARN("libfabric %s (%s): closing the MR of [%#" PRIx64
                     ", +%" PRIu64 "): %s",
                     lf->provider, lf->rails[k].name, buf->base, buf->length,
                     lf_err(lf, rc));
    }
    free(m);
    return TENT_OK;
}

const struct tent_transport_ops tent_libfabric_transport_ops = {
    .name = "libfabric",
    .type = TRANSPORT_LIBFABRIC,
    .default_enabled = false, /* transports/libfabric/enable: true */
    .instance_size = sizeof(struct lf_transport),
    .install = lf_install,
    .uninstall = lf_uninstall,
    .capabilities = lf_capabilities,
    .can_reach = lf_can_reach,
    .alloc_sub_batch = lf_alloc_sub_batch,
    .free_sub_batch = lf_free_sub_batch,
    .submit = lf_submit,
    .status = lf_status,
    .quiesce = lf_quiesce,
    .peer_open = lf_peer_open,
    .peer_close = lf_peer_close,
    .add_buffer = lf_add_buffer,
    .remove_buffer = lf_remove_buffer,
};
