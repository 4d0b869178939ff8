/* libFuzzer: segment descriptors (JSON from a peer).  Whatever decodes must
 * satisfy the invariants the runtime relies on (sorted, disjoint, no wrap,
 * attribute keys unique) and survive an encode/decode round trip unchanged,
 * field by field (a buffer's attributes are compared by content: the
 * decoded copies live at different addresses). */
#include "fuzz.h"
#include "rpc/wire.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int same_buf(const struct tent_wire_buf *a,
                    const struct tent_wire_buf *b)
{
    if (a->base != b->base || a->length != b->length || a->perm != b->perm ||
        a->xport_mask != b->xport_mask || a->nattrs != b->nattrs ||
        strcmp(a->location, b->location))
        return 0;
    for (int k = 0; k < a->nattrs; k++)
        if (strcmp(a->attrs[k].key, b->attrs[k].key) ||
            strcmp(a->attrs[k].value, b->attrs[k].value))
            return 0;
    return 1;
}

static int same_desc(const struct tent_wire_desc *a,
                     const struct tent_wire_desc *b)
{
    if (a->nbufs != b->nbufs || a->nattrs != b->nattrs ||
        strcmp(a->name, b->name) || strcmp(a->host_id, b->host_id))
        return 0;
    for (size_t i = 0; i < a->nbufs; i++)
        if (!same_buf(&a->bufs[i], &b->bufs[i]))
            return 0;
    for (int k = 0; k < a->nattrs; k++)
        if (strcmp(a->attr_key[k], b->attr_key[k]) ||
            strcmp(a->attr_value[k], b->attr_value[k]))
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct tent_wire_desc d, d2;
    if (tent_wire_decode_desc((const char *)data, size, &d))
        return 0;
    for (size_t i = 0; i < d.nbufs; i++) {
        const struct tent_wire_buf *b = &d.bufs[i];
        if (b->length == 0 || b->base + b->length < b->base)
            __builtin_trap();
        if (i && b->base < d.bufs[i - 1].base + d.bufs[i - 1].length)
            __builtin_trap();
        for (int k = 0; k < b->nattrs; k++)
            for (int j = 0; j < k; j++)
                if (!strcmp(b->attrs[j].key, b->attrs[k].key))
                    __builtin_trap();
    }
    size_t len = 0;
    char *json = tent_wire_encode_desc(&d, &len);
    if (json) {
        if (tent_wire_decode_desc(json, len, &d2) != 0 || !same_desc(&d, &d2))
            __builtin_trap();
        tent_wire_desc_free(&d2);
        free(json);
    }
    tent_wire_desc_free(&d);
    return 0;
}
