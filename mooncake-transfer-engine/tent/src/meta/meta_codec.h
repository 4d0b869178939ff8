/* Pure codecs of the metadata backends (no I/O, no global state), so that
 * the decoders of bytes from a metadata server can be fuzzed: base64,
 * percent-encoding, and the pieces of etcd gateway answers the engine
 * reads. */
#ifndef TENT_META_META_CODEC_H
#define TENT_META_META_CODEC_H

#include <stddef.h>

struct cJSON;

/* malloc'd, NUL-terminated; NULL when out of memory. */
char *tent_b64_encode(const void *in, size_t n);
/* Strict base64 (padding required) into a malloc'd buffer with a NUL
 * after the *outlen bytes.  TENT_EPROTO on bad input, nothing allocated. */
int tent_b64_decode(const char *in, char **out, size_t *outlen);
/* Percent-encodes everything but [A-Za-z0-9-_.~/]; malloc'd or NULL. */
char *tent_pct_encode(const char *s);

/* /v3/kv/range answer: the first kv's value, decoded.  TENT_ENOSEGMENT when
 * there is none, TENT_EPROTO when it is not base64. */
int tent_meta_etcd_range_value(const struct cJSON *ans, const char *key,
                               char **val, size_t *len);
/* /v3/kv/range answer of a keys_only prefix range: every kv's key, decoded,
 * into a malloc'd array of *n malloc'd strings (none: NULL, 0).
 * TENT_EPROTO when a key is not base64, nothing allocated then. */
int tent_meta_etcd_range_keys(const struct cJSON *ans, char ***keys, size_t *n);
/* The etcd range_end, base64-encoded, that selects every key starting with
 * prefix: the prefix with its last byte below 0xff incremented and the
 * bytes after it dropped, or a single NUL ("every key") when there is no
 * such byte.  malloc'd, NULL when out of memory. */
char *tent_meta_etcd_prefix_end(const char *prefix);
/* /v3/lease/grant answer: the lease ID (decimal digits) into out. */
int tent_meta_etcd_lease_id(const struct cJSON *ans, char *out, size_t cap);
/* /v3/lease/keepalive answer: the remaining TTL, <= 0 when the lease is
 * gone. */
long tent_meta_etcd_keepalive_ttl(const struct cJSON *ans);

#endif
