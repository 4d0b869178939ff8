/* libFuzzer: answers of a metadata server (etcd gateway JSON, base64
 * values).  Decoding must never crash, and base64 must round-trip. */
#include "fuzz.h"
#include "meta/meta_codec.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *j = cJSON_ParseWithLength((const char *)data, size);
    if (j) {
        char *val = NULL, id[32];
        size_t len = 0;
        if (tent_meta_etcd_range_value(j, "k", &val, &len) == 0) {
            if (val[len] != 0)
                __builtin_trap();
            free(val);
        }
        if (tent_meta_etcd_lease_id(j, id, sizeof(id)) == 0 &&
            strlen(id) >= sizeof(id))
            __builtin_trap();
        (void)tent_meta_etcd_keepalive_ttl(j);
        char **keys = NULL;
        size_t nk = 0;
        if (tent_meta_etcd_range_keys(j, &keys, &nk) == 0) {
            for (size_t i = 0; i < nk; i++)
                free(keys[i]);
            free(keys);
        }
        cJSON_Delete(j);
    }
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    char *out = NULL;
    size_t n = 0;
    if (tent_b64_decode(s, &out, &n) == 0)
        free(out);
    char *enc = tent_b64_encode(data, size);
    if (enc) {
        if (tent_b64_decode(enc, &out, &n) != 0 || n != size ||
            memcmp(out, data, size) != 0)
            __builtin_trap();
        free(out);
        free(enc);
    }
    char *end = tent_meta_etcd_prefix_end(s);
    free(end);
    char *pct = tent_pct_encode(s);
    free(pct);
    free(s);
    return 0;
}
