#include "common/compiler.h"
#include "common/error.h"
#include "transport/transport.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The transports this build has, in the order of transports.def (CMake
 * generates the list from the folders it built). */
#define TENT_XPORT(name, suffix)                                               \
    extern const struct tent_transport_ops tent_##name##_transport_ops;
#include "tent_transports_built.def"

/* The type table of transports.def must be the public header's. */
#define TENT_XPORT_TYPE(suffix, value, name, pyname)                           \
    _Static_assert(TRANSPORT_##suffix == (value),                              \
                   "transports.def: TRANSPORT_" #suffix " differs from the "   \
                   "public header");
#include "transport/transports.def"

/* Guards registry/nregistry/seeded.  A leaf lock: nothing else is taken
 * while it is held. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct tent_transport_ops *registry[TENT_MAX_TRANSPORTS];
static size_t nregistry;
static int seeded;

/* Built-in order = default preference order (fastest first), which is the
 * order from buffer registration when no policy is configured. */
static void seed_locked(void)
{
    if (seeded)
        return;
    seeded = 1;
#define TENT_XPORT(name, suffix)                                               \
    registry[nregistry++] = &tent_##name##_transport_ops;
#include "tent_transports_built.def"
}

int tent_transport_register(const struct tent_transport_ops *ops)
{
    if (!ops || !ops->name)
        return tent_set_error(TENT_ENULL, "transport register: ops is NULL");
    if (!ops->peer_open || !ops->peer_close)
        return tent_set_error(TENT_EINVAL,
                              "transport register: '%s' has no peer_open or "
                              "peer_close (tent_xport_peer_*_plain when it "
                              "keeps nothing per peer)",
                              ops->name);
    pthread_mutex_lock(&reg_lock);
    seed_locked();
    for (size_t i = 0; i < nregistry; i++)
        if (strcmp(registry[i]->name, ops->name) == 0) {
            pthread_mutex_unlock(&reg_lock);
            return tent_set_error(
                TENT_EEXIST, "transport '%s' is already registered", ops->name);
        }
    if (nregistry == sizeof(registry) / sizeof(registry[0])) {
        pthread_mutex_unlock(&reg_lock);
        return tent_set_error(TENT_ENOMEM, "transport registry is full");
    }
    registry[nregistry++] = ops;
    pthread_mutex_unlock(&reg_lock);
    return TENT_OK;
}

size_t tent_transport_registry_snapshot(const struct tent_transport_ops **out,
                                        size_t max)
{
    pthread_mutex_lock(&reg_lock);
    seed_locked();
    size_t n = nregistry < max ? nregistry : max;
    memcpy(out, registry, n * sizeof(*out));
    pthread_mutex_unlock(&reg_lock);
    return n;
}

static const char *const type_names[] = {
#define TENT_XPORT_TYPE(suffix, value, name, pyname) [value] = name,
#include "transport/transports.def"
};
#define NTYPES ((int)(sizeof(type_names) / sizeof(type_names[0])))

const char *tent_transport_type_name(int type)
{
    if (type >= 0 && type < NTYPES && type_names[type])
        return type_names[type];
    /* Test transports use types beyond the public ones. */
    const struct tent_transport_ops *ops[TENT_MAX_TRANSPORTS];
    size_t n = tent_transport_registry_snapshot(ops, TENT_MAX_TRANSPORTS);
    for (size_t i = 0; i < n; i++)
        if (ops[i]->type == type)
            return ops[i]->name;
    return "unknown";
}

int tent_transport_type_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < NTYPES; i++)
        if (type_names[i] && strcasecmp(type_names[i], name) == 0)
            return i;
    const struct tent_transport_ops *ops[TENT_MAX_TRANSPORTS];
    size_t n = tent_transport_registry_snapshot(ops, TENT_MAX_TRANSPORTS);
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(ops[i]->name, name) == 0)
            return ops[i]->type;
    return -1;
}

int tent_transport_instance_new(const struct tent_transport_ops *ops,
                                const struct tent_xport_env *env, int index,
                                struct tent_transport **out)
{
    struct tent_transport *t = calloc(1, ops->instance_size);
    if (!t)
        return tent_set_error(TENT_ENOMEM, "transport '%s': out of memory",
                              ops->name);
    t->ops = ops;
    t->env = env;
    t->index = index;
    int rc = ops->install(t);
    if (rc != TENT_OK) {
        /* install undid what it did: nothing to uninstall */
        free(t);
        return rc;
    }
    *out = t;
    return TENT_OK;
}

void tent_transport_instance_free(struct tent_transport *t)
{
    if (!t)
        return;
    t->ops->uninstall(t);
    free(t);
}

bool tent_xport_reach_any(TENT_UNUSED struct tent_transport *t,
                          TENT_UNUSED const struct tent_seg_view *target)
{
    return true;
}

int tent_xport_noop_quiesce(TENT_UNUSED struct tent_transport *t)
{
    return TENT_OK;
}

int tent_xport_noop_buffer(TENT_UNUSED struct tent_transport *t,
                           TENT_UNUSED struct tent_buffer *buf)
{
    return TENT_OK;
}

int tent_xport_peer_open_plain(struct tent_transport *t,
                               TENT_UNUSED const struct tent_seg_view *seg,
                               uint64_t incarnation, struct tent_peer **out)
{
    struct tent_peer *p = malloc(sizeof(*p));
    if (!p)
        return tent_set_error(TENT_ENOMEM, "%s: out of memory", t->ops->name);
    p->owner = t;
    p->incarnation = incarnation;
    *out = p;
    return TENT_OK;
}

void tent_xport_peer_close_plain(TENT_UNUSED struct tent_transport *t,
                                 struct tent_peer *peer)
{
    free(peer);
}
