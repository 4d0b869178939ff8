/* libFuzzer: segment descriptors (JSON from a peer).  Whatever decodes must
 * satisfy the invariants the runtime relies on (sorted, disjoint, no wrap)
 * and survive an encode/decode round trip unchanged. */
#include "fuzz.h"
#include "rpc/wire.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    }
    size_t len = 0;
    char *json = tent_wire_encode_desc(&d, &len);
    if (json) {
        if (tent_wire_decode_desc(json, len, &d2) != 0 || d2.nbufs != d.nbufs ||
            d2.nattrs != d.nattrs ||
            (d.nbufs &&
             memcmp(d.bufs, d2.bufs, d.nbufs * sizeof(*d.bufs)) != 0))
            __builtin_trap();
        tent_wire_desc_free(&d2);
        free(json);
    }
    tent_wire_desc_free(&d);
    return 0;
}
