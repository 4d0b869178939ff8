/* The pure pieces of the metadata backends' list op: the etcd range_end of
 * a prefix and the keys of a keys_only range answer. */
#include "common/error.h"
#include "meta/meta_codec.h"
#include "meta/meta_kv.h"

#include <cjson/cJSON.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static char *end_of(const char *prefix, size_t *len)
{
    char *b = tent_meta_etcd_prefix_end(prefix), *raw = NULL;
    assert_non_null(b);
    assert_int_equal(tent_b64_decode(b, &raw, len), 0);
    free(b);
    return raw;
}

static void test_prefix_end(void **state)
{
    (void)state;
    size_t n;
    char *e = end_of("mooncake/tent/", &n);
    assert_int_equal(n, 14);
    assert_memory_equal(e, "mooncake/tent0", 14); /* '/' + 1 */
    free(e);
    /* trailing 0xff bytes cannot be incremented: the byte before is */
    e = end_of("a\xff\xff", &n);
    assert_int_equal(n, 1);
    assert_int_equal(e[0], 'b');
    free(e);
    /* nothing to increment: a single NUL, etcd's "every key" */
    e = end_of("", &n);
    assert_int_equal(n, 1);
    assert_int_equal(e[0], 0);
    free(e);
    e = end_of("\xff", &n);
    assert_int_equal(n, 1);
    assert_int_equal(e[0], 0);
    free(e);
}

static void test_range_keys(void **state)
{
    (void)state;
    /* "p/a", "p/bb" */
    cJSON *j = cJSON_Parse("{\"kvs\":[{\"key\":\"cC9h\"},{\"key\":\"cC9iYg==\"}],"
                           "\"count\":\"2\"}");
    char **keys = NULL;
    size_t n = 0;
    assert_int_equal(tent_meta_etcd_range_keys(j, &keys, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(keys[0], "p/a");
    assert_string_equal(keys[1], "p/bb");
    tent_meta_kv_keys_free(keys, n);
    cJSON_Delete(j);
    /* no kvs: an empty store */
    j = cJSON_Parse("{\"header\":{}}");
    assert_int_equal(tent_meta_etcd_range_keys(j, &keys, &n), 0);
    assert_int_equal(n, 0);
    assert_null(keys);
    cJSON_Delete(j);
    /* a key that is not base64, or not there: refused, nothing left */
    j = cJSON_Parse("{\"kvs\":[{\"key\":\"cC9h\"},{\"key\":\"!!\"}]}");
    assert_int_equal(tent_meta_etcd_range_keys(j, &keys, &n), TENT_EPROTO);
    assert_non_null(strstr(tent_last_error(), "key 1"));
    cJSON_Delete(j);
    j = cJSON_Parse("{\"kvs\":[{\"value\":\"cC9h\"}]}");
    assert_int_equal(tent_meta_etcd_range_keys(j, &keys, &n), TENT_EPROTO);
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_end),
        cmocka_unit_test(test_range_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
