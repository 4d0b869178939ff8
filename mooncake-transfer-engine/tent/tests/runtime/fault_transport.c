#include "fault_transport.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct fault_config fault_cfg;
struct fault_stats fault_stats;
static const struct tent_transport_ops *inner_ops;

struct fault_xport {
    struct tent_transport base;
    struct tent_transport *inner;
};

struct fault_slot {
    int polls_left;
    long ready_at;
};

struct fault_sub {
    struct tent_sub_batch base;
    struct tent_sub_batch *inner;
    struct fault_slot slots[];
};

static long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* The inner transport's handle, wrapped: requests go to it with it. */
struct fault_peer {
    struct tent_peer base;
    struct tent_peer *inner;
};

static struct tent_transport *inner_of(struct tent_transport *t)
{
    return ((struct fault_xport *)t)->inner;
}

static bool slot_bit(uint64_t mask, uint32_t slot)
{
    return slot < 64 && ((mask >> slot) & 1);
}

static int fault_install(struct tent_transport *t)
{
    struct fault_xport *f = (struct fault_xport *)t;
    atomic_fetch_add(&fault_stats.installs, 1);
    if (!inner_ops)
        return TENT_ENODEV;
    f->inner = calloc(1, inner_ops->instance_size);
    if (!f->inner)
        return TENT_ENOMEM;
    f->inner->ops = inner_ops;
    f->inner->env = t->env;
    f->inner->index = t->index;
    int rc = inner_ops->install(f->inner);
    if (rc != TENT_OK) { /* a failed install left nothing to uninstall */
        free(f->inner);
        f->inner = NULL;
    }
    return rc;
}

static void fault_uninstall(struct tent_transport *t)
{
    struct fault_xport *f = (struct fault_xport *)t;
    if (!f->inner)
        return;
    f->inner->ops->uninstall(f->inner);
    free(f->inner);
    f->inner = NULL;
}

static uint32_t fault_caps(struct tent_transport *t)
{
    return inner_of(t)->ops->capabilities(inner_of(t));
}

static bool fault_can_reach(struct tent_transport *t,
                            const struct tent_seg_view *target)
{
    return inner_of(t)->ops->can_reach(inner_of(t), target);
}

static int fault_alloc_sub(struct tent_transport *t, size_t cap,
                           struct tent_sub_batch **out)
{
    struct fault_sub *s = calloc(1, sizeof(*s) + cap * sizeof(s->slots[0]));
    if (!s)
        return TENT_ENOMEM;
    int rc = inner_of(t)->ops->alloc_sub_batch(inner_of(t), cap, &s->inner);
    if (rc != TENT_OK) {
        free(s);
        return rc;
    }
    s->base.owner = t;
    s->base.capacity = cap;
    *out = &s->base;
    return TENT_OK;
}

static int fault_free_sub(struct tent_transport *t, struct tent_sub_batch *sb)
{
    struct fault_sub *s = (struct fault_sub *)sb;
    int rc = inner_of(t)->ops->free_sub_batch(inner_of(t), s->inner);
    if (rc != TENT_OK)
        return rc;
    free(s);
    return TENT_OK;
}

static int fault_submit(struct tent_transport *t, struct tent_sub_batch *sb,
                        const struct tent_xfer *reqs, size_t n,
                        struct tent_xfer_result *res)
{
    struct fault_sub *s = (struct fault_sub *)sb;
    int call = atomic_fetch_add(&fault_stats.submit_calls, 1) + 1;
    bool whole = fault_cfg.fail_nth_submit == call;
    struct tent_xfer *fwd = malloc(n * sizeof(*fwd));
    struct tent_xfer_result *fwd_res = malloc(n * sizeof(*fwd_res));
    size_t *fwd_idx = malloc(n * sizeof(*fwd_idx));
    if (!fwd || !fwd_res || !fwd_idx) {
        free(fwd);
        free(fwd_res);
        free(fwd_idx);
        for (size_t i = 0; i < n; i++)
            tent_xres_fail(&res[i], TENT_ENOMEM, 0);
        return TENT_ENOMEM;
    }
    size_t k = 0;
    int first = TENT_OK;
    for (size_t i = 0; i < n; i++) {
        if (whole || slot_bit(fault_cfg.fail_submit_slots, reqs[i].slot)) {
            tent_set_error(fault_cfg.refuse_code,
                           "fault: refused slot %u at submit", reqs[i].slot);
            tent_xres_fail(&res[i], fault_cfg.refuse_code, 0);
            atomic_fetch_add(&fault_stats.refused, 1);
            if (!first)
                first = res[i].code;
            continue;
        }
        fwd[k] = reqs[i];
        fwd[k].peer = ((struct fault_peer *)reqs[i].peer)->inner;
        fwd_idx[k++] = i;
    }
    if (k) {
        inner_of(t)->ops->submit(inner_of(t), s->inner, fwd, k, fwd_res);
        for (size_t j = 0; j < k; j++) {
            res[fwd_idx[j]] = fwd_res[j];
            /* completion is this wrapper's to report (delays, faults):
             * never "done at submit" */
            res[fwd_idx[j]].done = false;
            if (fwd_res[j].code != TENT_OK) {
                if (!first)
                    first = fwd_res[j].code;
                continue;
            }
            atomic_fetch_add(&fault_stats.forwarded, 1);
            struct fault_slot *sl = &s->slots[fwd[j].slot];
            sl->polls_left = fault_cfg.delay_polls;
            sl->ready_at =
                fault_cfg.delay_ns ? mono_ns() + fault_cfg.delay_ns : 0;
        }
    }
    free(fwd);
    free(fwd_res);
    free(fwd_idx);
    return first;
}

static int fault_status(struct tent_transport *t, struct tent_sub_batch *sb,
                        uint32_t slot, struct tent_xfer_status *out)
{
    struct fault_sub *s = (struct fault_sub *)sb;
    struct fault_slot *sl = &s->slots[slot];
    if (fault_cfg.block_status && atomic_load(fault_cfg.block_status)) {
        atomic_fetch_add(&fault_stats.blocked, 1);
        while (atomic_load(fault_cfg.block_status))
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (fault_cfg.status_error)
        return fault_cfg.status_error;
    if (fault_cfg.never_complete || sl->polls_left > 0 ||
        (sl->ready_at && mono_ns() < sl->ready_at)) {
        if (sl->polls_left > 0)
            sl->polls_left--;
        out->state = TENT_XFER_PENDING;
        out->bytes = 0;
        return TENT_OK;
    }
    int rc = inner_of(t)->ops->status(inner_of(t), s->inner, slot, out);
    if (rc != TENT_OK || out->state != TENT_XFER_COMPLETED)
        return rc;
    if (fault_cfg.completed_to_failed ||
        slot_bit(fault_cfg.fail_complete_slots, slot)) {
        atomic_fetch_add(&fault_stats.converted, 1);
        tent_xstatus_failed(out, NULL, fault_cfg.complete_code, -77);
    }
    return TENT_OK;
}

static int fault_quiesce(struct tent_transport *t)
{
    if (fault_cfg.quiesce_error)
        return fault_cfg.quiesce_error;
    return inner_of(t)->ops->quiesce(inner_of(t));
}

static int fault_peer_open(struct tent_transport *t,
                           const struct tent_seg_view *seg, uint64_t inc,
                           struct tent_peer **out)
{
    struct fault_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return TENT_ENOMEM;
    int rc = inner_of(t)->ops->peer_open(inner_of(t), seg, inc, &p->inner);
    if (rc) {
        free(p);
        return rc;
    }
    p->base.owner = t;
    p->base.incarnation = inc;
    *out = &p->base;
    return TENT_OK;
}

static void fault_peer_close(struct tent_transport *t, struct tent_peer *h)
{
    struct fault_peer *p = (struct fault_peer *)h;
    inner_of(t)->ops->peer_close(inner_of(t), p->inner);
    free(p);
}

static int fault_add_buffer(struct tent_transport *t, struct tent_buffer *buf)
{
    return inner_of(t)->ops->add_buffer(inner_of(t), buf);
}

static int fault_remove_buffer(struct tent_transport *t,
                               struct tent_buffer *buf)
{
    return inner_of(t)->ops->remove_buffer(inner_of(t), buf);
}

const struct tent_transport_ops fault_ops = {
    .name = "fault",
    .type = FAULT_TYPE,
    .default_enabled = false,
    .instance_size = sizeof(struct fault_xport),
    .install = fault_install,
    .uninstall = fault_uninstall,
    .capabilities = fault_caps,
    .can_reach = fault_can_reach,
    .alloc_sub_batch = fault_alloc_sub,
    .free_sub_batch = fault_free_sub,
    .submit = fault_submit,
    .status = fault_status,
    .quiesce = fault_quiesce,
    .peer_open = fault_peer_open,
    .peer_close = fault_peer_close,
    .add_buffer = fault_add_buffer,
    .remove_buffer = fault_remove_buffer,
};

void fault_reset(void)
{
    memset(&fault_cfg, 0, sizeof(fault_cfg));
    fault_cfg.refuse_code = TENT_EIO;
    fault_cfg.complete_code = TENT_EIO;
    atomic_store(&fault_stats.submit_calls, 0);
    atomic_store(&fault_stats.forwarded, 0);
    atomic_store(&fault_stats.refused, 0);
    atomic_store(&fault_stats.converted, 0);
    atomic_store(&fault_stats.installs, 0);
}

void fault_wrap(const struct tent_transport_ops *inner)
{
    inner_ops = inner;
    tent_transport_register(&fault_ops); /* TENT_EEXIST after the first */
    fault_reset();
}
