/* Helpers of the transport contract (transport.h) that the runtime and the
 * transports share: attribute sets, failure causes, sub-batch allocation. */
#include "common/error.h"
#include "transport/transport.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- attribute sets ------------------------------------------------------ */

struct tent_attr_kv {
    char key[TENT_ATTR_KEY_MAX];
    char value[TENT_ATTR_VALUE_MAX];
};

/* Sized for its n entries: a remote segment may carry many buffers. */
struct tent_attrs {
    size_t n;
    struct tent_attr_kv kv[];
};

const char *tent_attrs_get(const struct tent_attrs *a, const char *key)
{
    if (!a || !key)
        return NULL;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->kv[i].key, key) == 0)
            return a->kv[i].value;
    return NULL;
}

int tent_attrs_set(struct tent_attrs **ap, const char *key, const char *value)
{
    if (!key || !*key || strlen(key) >= TENT_ATTR_KEY_MAX ||
        (value && strlen(value) >= TENT_ATTR_VALUE_MAX))
        return tent_set_error(TENT_EINVAL,
                              "buffer attribute '%s': key empty or longer than "
                              "%d bytes, or value longer than %d",
                              key ? key : "(null)", TENT_ATTR_KEY_MAX - 1,
                              TENT_ATTR_VALUE_MAX - 1);
    struct tent_attrs *a = *ap;
    size_t i = 0;
    while (a && i < a->n && strcmp(a->kv[i].key, key) != 0)
        i++;
    if (!value) {
        if (a && i < a->n)
            a->kv[i] = a->kv[--a->n];
        return TENT_OK;
    }
    size_t n = a ? a->n : 0;
    if (i == n) {
        if (n == TENT_MAX_BUF_ATTRS)
            return tent_set_error(TENT_EINVAL,
                                  "buffer attribute '%s': a buffer has at "
                                  "most %d attributes",
                                  key, TENT_MAX_BUF_ATTRS);
        struct tent_attrs *g =
            realloc(a, sizeof(*a) + (n + 1) * sizeof(a->kv[0]));
        if (!g)
            return tent_set_error(TENT_ENOMEM,
                                  "buffer attribute '%s': out of memory", key);
        a = *ap = g;
        a->n = n + 1;
        snprintf(a->kv[i].key, sizeof(a->kv[i].key), "%s", key);
    }
    snprintf(a->kv[i].value, sizeof(a->kv[i].value), "%s", value);
    return TENT_OK;
}

size_t tent_attrs_count(const struct tent_attrs *a)
{
    return a ? a->n : 0;
}

void tent_attrs_at(const struct tent_attrs *a, size_t i, const char **key,
                   const char **value)
{
    *key = a->kv[i].key;
    *value = a->kv[i].value;
}

void tent_attrs_free(struct tent_attrs *a)
{
    free(a);
}

/* ---- failure causes ---------------------------------------------------- */

int tent_xres_fail(struct tent_xfer_result *res, int code, int native)
{
    res->code = code;
    res->native = native;
    snprintf(res->msg, sizeof(res->msg), "%s", tent_last_error());
    return code;
}

struct tent_xerr *tent_xerr_new(int code, int native, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    struct tent_xerr *e = malloc(sizeof(*e) + (size_t)n + 1);
    if (!e)
        return NULL;
    e->code = code;
    e->native = native;
    va_start(ap, fmt);
    vsnprintf(e->msg, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return e;
}

void tent_xstatus_failed(struct tent_xfer_status *out,
                         const struct tent_xerr *e, int code, int native)
{
    out->state = TENT_XFER_FAILED;
    out->bytes = 0;
    out->code = e ? e->code : code;
    out->native = e ? e->native : native;
    out->msg = e ? e->msg : NULL;
}

/* ---- sub-batches -----------------------------------------------------------
 */

int tent_sub_batch_new(struct tent_transport *t, size_t size, size_t capacity,
                       size_t task_size, void **tasks,
                       struct tent_sub_batch **out)
{
    struct tent_sub_batch *sb = calloc(1, size);
    void *tk = calloc(capacity ? capacity : 1, task_size);
    if (!sb || !tk) {
        free(sb);
        free(tk);
        return tent_set_error(TENT_ENOMEM,
                              "%s: out of memory for a sub-batch of %zu tasks",
                              t->ops->name, capacity);
    }
    sb->owner = t;
    sb->capacity = capacity;
    *tasks = tk;
    *out = sb;
    return TENT_OK;
}

void tent_sub_batch_delete(struct tent_sub_batch *sb, void *tasks)
{
    free(tasks);
    free(sb);
}
