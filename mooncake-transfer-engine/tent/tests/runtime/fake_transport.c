#include "fake_transport.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct fake_behavior fake_behavior[3];
struct fake_stats fake_stats[3];

static long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

struct fake_slot {
    long ready_at; /* monotonic ns before which the task stays PENDING */
    int polls_left;
    uint64_t length;
    bool fail;
};

struct fake_sub {
    struct tent_sub_batch base;
    struct fake_slot slots[];
};

struct fake_xport {
    struct tent_transport base;
    int which;
};

static int which_of(struct tent_transport *t)
{
    return ((struct fake_xport *)t)->which;
}

static int fake_install(struct tent_transport *t)
{
    struct fake_xport *f = (struct fake_xport *)t;
    f->which = t->ops->type - FAKE_A_TYPE;
    atomic_fetch_add(&fake_stats[f->which].installs, 1);
    if (fake_behavior[f->which].fail_install)
        return TENT_ENODEV;
    t->durable = fake_behavior[f->which].durable;
    return TENT_OK;
}

static void fake_uninstall(struct tent_transport *t)
{
    (void)t;
}

static uint32_t fake_caps(struct tent_transport *t)
{
    return fake_behavior[which_of(t)].caps;
}

static bool fake_can_reach(struct tent_transport *t,
                           const struct tent_seg_view *target)
{
    (void)target;
    return !fake_behavior[which_of(t)].unreachable;
}

static int fake_alloc_sub(struct tent_transport *t, size_t cap,
                          struct tent_sub_batch **out)
{
    struct fake_sub *s = calloc(1, sizeof(*s) + cap * sizeof(s->slots[0]));
    if (!s)
        return TENT_ENOMEM;
    s->base.owner = t;
    s->base.capacity = cap;
    *out = &s->base;
    return TENT_OK;
}

static int fake_free_sub(struct tent_transport *t, struct tent_sub_batch *sb)
{
    (void)t;
    free(sb);
    return TENT_OK;
}

static int fake_submit(struct tent_transport *t, struct tent_sub_batch *sb,
                       const struct tent_xfer *reqs, size_t n,
                       struct tent_xfer_result *res)
{
    int w = which_of(t);
    struct fake_behavior *b = &fake_behavior[w];
    struct fake_sub *s = (struct fake_sub *)sb;
    int first = TENT_OK;
    for (size_t i = 0; i < n; i++) {
        int k = atomic_load(&fake_stats[w].submitted) +
                atomic_load(&fake_stats[w].refused);
        bool refuse =
            b->fail_all_submits ||
            (reqs[i].slot < 64 && (b->fail_submit_slots >> reqs[i].slot) & 1) ||
            (b->fail_submit_every > 0 &&
             k % b->fail_submit_every == b->fail_submit_every - 1);
        if (refuse) {
            atomic_fetch_add(&fake_stats[w].refused, 1);
            tent_set_error(b->refuse_code, "%s: refused slot %u at submit",
                           t->ops->name, reqs[i].slot);
            tent_xres_fail(&res[i], b->refuse_code, 0);
            if (!first)
                first = b->refuse_code;
            continue;
        }
        struct fake_slot *slot = &s->slots[reqs[i].slot];
        slot->polls_left = b->polls_before_done;
        slot->ready_at =
            b->complete_after_ns ? mono_ns() + b->complete_after_ns : 0;
        slot->length = reqs[i].length;
        slot->fail = b->fail_completion;
        if (b->copy_bytes && !b->fail_completion) {
            void *remote = (void *)(uintptr_t)reqs[i].remote;
            if (reqs[i].opcode == OPCODE_WRITE)
                memmove(remote, reqs[i].local, reqs[i].length);
            else
                memmove(reqs[i].local, remote, reqs[i].length);
        }
        atomic_fetch_add(&fake_stats[w].submitted, 1);
        if (reqs[i].opcode == OPCODE_WRITE && reqs[i].durable)
            atomic_fetch_add(&fake_stats[w].durable_writes, 1);
        res[i].code = TENT_OK;
        if (b->done_at_submit && !b->fail_completion && !b->never_complete &&
            !b->complete_after_ns && b->polls_before_done == 0) {
            res[i].done = true;
            atomic_fetch_add(&fake_stats[w].completed, 1);
        }
    }
    return first;
}

static int fake_status(struct tent_transport *t, struct tent_sub_batch *sb,
                       uint32_t slot_id, struct tent_xfer_status *out)
{
    int w = which_of(t);
    struct fake_behavior *b = &fake_behavior[w];
    struct fake_slot *slot = &((struct fake_sub *)sb)->slots[slot_id];
    atomic_fetch_add(&fake_stats[w].status_calls, 1);
    if (b->status_error)
        return b->status_error;
    if (b->never_complete || slot->polls_left > 0 ||
        (slot->ready_at && mono_ns() < slot->ready_at)) {
        if (slot->polls_left > 0)
            slot->polls_left--;
        out->state = TENT_XFER_PENDING;
        return TENT_OK;
    }
    if (slot->fail) {
        tent_xstatus_failed(out, NULL, b->fail_code, b->fail_native);
        atomic_fetch_add(&fake_stats[w].failed, 1);
    } else {
        out->state = TENT_XFER_COMPLETED;
        out->bytes = slot->length;
        atomic_fetch_add(&fake_stats[w].completed, 1);
    }
    return TENT_OK;
}

static int fake_add_buffer(struct tent_transport *t, struct tent_buffer *buf)
{
    uintptr_t refuse = fake_behavior[which_of(t)].refuse_buffer_base;
    if (refuse && buf->base == refuse)
        return tent_set_error(TENT_EIO, "%s: refusing buffer %#llx",
                              t->ops->name, (unsigned long long)buf->base);
    atomic_fetch_add(&fake_stats[which_of(t)].buffers, 1);
    return TENT_OK;
}

static int fake_remove_buffer(struct tent_transport *t, struct tent_buffer *buf)
{
    (void)buf;
    atomic_fetch_sub(&fake_stats[which_of(t)].buffers, 1);
    return TENT_OK;
}

#define FAKE_OPS(var, nm, ty)                                                  \
    const struct tent_transport_ops var = {                                    \
        .name = nm,                                                            \
        .type = ty,                                                            \
        .default_enabled = false,                                              \
        .instance_size = sizeof(struct fake_xport),                            \
        .install = fake_install,                                               \
        .uninstall = fake_uninstall,                                           \
        .capabilities = fake_caps,                                             \
        .can_reach = fake_can_reach,                                           \
        .alloc_sub_batch = fake_alloc_sub,                                     \
        .free_sub_batch = fake_free_sub,                                       \
        .submit = fake_submit,                                                 \
        .status = fake_status,                                                 \
        .quiesce = tent_xport_noop_quiesce,                                    \
        .peer_open = tent_xport_peer_open_plain,                               \
        .peer_close = tent_xport_peer_close_plain,                             \
        .add_buffer = fake_add_buffer,                                         \
        .remove_buffer = fake_remove_buffer,                                   \
    }

FAKE_OPS(fake_a_ops, "fake_a", FAKE_A_TYPE);
FAKE_OPS(fake_b_ops, "fake_b", FAKE_B_TYPE);
FAKE_OPS(fake_c_ops, "fake_c", FAKE_C_TYPE);

void fake_transports_reset(void)
{
    for (int i = 0; i < 3; i++) {
        memset(&fake_behavior[i], 0, sizeof(fake_behavior[i]));
        fake_behavior[i].copy_bytes = true;
        fake_behavior[i].caps = TENT_CAP_ALL;
        fake_behavior[i].fail_code = TENT_EIO;
        fake_behavior[i].refuse_code = TENT_EIO;
        fake_behavior[i].fail_native = -1;
        memset(&fake_stats[i], 0, sizeof(fake_stats[i]));
    }
}

void fake_transports_setup(void)
{
    tent_transport_register(&fake_a_ops); /* TENT_EEXIST after the first time */
    tent_transport_register(&fake_b_ops);
    tent_transport_register(&fake_c_ops);
    fake_transports_reset();
}
