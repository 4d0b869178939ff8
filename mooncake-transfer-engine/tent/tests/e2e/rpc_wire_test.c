/* The wire codec on its own: round trips, and every field of every frame
 * and descriptor validated (each bad value refused with TENT_EPROTO). */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
// clang-format on

#include "rpc/rpc.h"
#include "transport/tcp/tcp_wire.h"
#include "rpc/wire.h"
#include "tent/transfer_engine.h"
#include "transport/shm/shm_handle.h"

static void test_header(void **state)
{
    (void)state;
    uint8_t h[TENT_WIRE_HDR_LEN];
    struct tent_wire_hdr d;
    tent_wire_encode_hdr(h, TCP_WIRE_READ, 42, TCP_WIRE_RW_LEN);
    assert_int_equal(tent_wire_decode_hdr(h, sizeof(h), &d), 0);
    assert_int_equal(d.type, TCP_WIRE_READ);
    assert_int_equal(d.seq, 42);
    assert_int_equal(d.len, TCP_WIRE_RW_LEN);
    assert_int_equal(tent_wire_decode_hdr(h, sizeof(h) - 1, &d), TENT_EPROTO);
    uint8_t b[TENT_WIRE_HDR_LEN];
    for (int field = 0; field < 5; field++) {
        memcpy(b, h, sizeof(b));
        switch (field) {
        case 0:
            b[1] ^= 1;
            break; /* magic */
        case 1:
            b[4] = TENT_WIRE_VERSION + 1;
            break; /* version */
        case 2:
            b[5] = 0;
            break; /* type */
        case 3:
            b[7] = 1;
            break; /* flags */
        case 4:
            b[12] = 0, b[13] = 0, b[14] = 0, b[15] = 2; /* len 32 MiB */
            break; /* a body is at most TENT_WIRE_MAX_BODY */
        }
        assert_int_equal(tent_wire_decode_hdr(b, sizeof(b), &d), TENT_EPROTO);
    }
    tent_wire_encode_hdr(b, TENT_WIRE_DESC_REQ, 1, 1);
    assert_int_equal(tent_wire_decode_hdr(b, sizeof(b), &d), TENT_EPROTO);
    tent_wire_encode_hdr(b, TCP_WIRE_WRITE, 1, TENT_WIRE_MAX_BODY + 1);
    assert_int_equal(tent_wire_decode_hdr(b, sizeof(b), &d), TENT_EPROTO);
    /* a type the server does not know is a transport's: its handler's
     * measure checks the length */
    tent_wire_encode_hdr(b, 200, 1, TENT_WIRE_MAX_BODY);
    assert_int_equal(tent_wire_decode_hdr(b, sizeof(b), &d), 0);
    assert_int_equal(d.type, 200);
}

/* What the RPC server learns of tcp's frames: their lengths checked per
 * type, and the data each moves. */
static void test_tcp_frame_data(void **state)
{
    (void)state;
    uint64_t data = 99;
    struct tent_wire_hdr h = {.type = TCP_WIRE_READ, .len = TCP_WIRE_RW_LEN};
    uint8_t rw[TCP_WIRE_RW_LEN];
    tcp_wire_encode_rw(rw, 0x1000, 65536, NULL);
    assert_int_equal(tcp_wire_frame_data(&h, rw, sizeof(rw), &data), 0);
    assert_true(data == 65536);
    /* the prefix not in yet: size unknown */
    assert_int_equal(tcp_wire_frame_data(&h, rw, sizeof(rw) - 1, &data), 0);
    assert_true(data == 0);
    h.len = TCP_WIRE_RW_LEN + 1; /* a READ body is TCP_WIRE_RW_LEN */
    assert_int_equal(tcp_wire_frame_data(&h, rw, sizeof(rw), &data),
                     TENT_EPROTO);
    h = (struct tent_wire_hdr){.type = TCP_WIRE_WRITE,
                               .len = TCP_WIRE_RW_LEN + 4096};
    assert_int_equal(tcp_wire_frame_data(&h, NULL, 0, &data), 0);
    assert_true(data == 4096);
    h.len = TCP_WIRE_RW_LEN + TCP_WIRE_MAX_DATA + 1;
    assert_int_equal(tcp_wire_frame_data(&h, NULL, 0, &data), TENT_EPROTO);
    h = (struct tent_wire_hdr){.type = TCP_WIRE_HELLO,
                               .len = TCP_WIRE_TOKEN_LEN};
    assert_int_equal(tcp_wire_frame_data(&h, NULL, 0, &data), 0);
    assert_true(data == 0);
    h.type = TCP_WIRE_FENCE;
    h.len = TCP_WIRE_TOKEN_LEN + 1;
    assert_int_equal(tcp_wire_frame_data(&h, NULL, 0, &data), TENT_EPROTO);
    h.type = TENT_WIRE_NOTIFY; /* not tcp's */
    h.len = 0;
    assert_int_equal(tcp_wire_frame_data(&h, NULL, 0, &data), TENT_EPROTO);
}

/* tcp's frames byte for byte as they have always been on the wire: a WRITE
 * header and prefix, a HELLO. */
static void test_tcp_bytes(void **state)
{
    (void)state;
    static const uint8_t want_write[] = {
        0x54, 0x4e, 0x54, 0x31, 0x02, 0x05, 0x00, 0x00, /* magic, v2, WRITE */
        0x03, 0x00, 0x00, 0x00, 0x28, 0x01, 0x00, 0x00, /* seq 3, len 296 */
        0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* addr 0x2000 */
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* length 256 */
        0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, /* incarnation */
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}; /* key */
    uint8_t b[TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN];
    struct tcp_wire_access acc = {.incarnation = 0x0123456789abcdefull};
    for (int i = 0; i < TCP_WIRE_KEY_LEN; i++)
        acc.key[i] = (uint8_t)i;
    tent_wire_encode_hdr(b, TCP_WIRE_WRITE, 3, TCP_WIRE_RW_LEN + 256);
    tcp_wire_encode_rw(b + TENT_WIRE_HDR_LEN, 0x2000, 256, &acc);
    assert_int_equal(sizeof(b), sizeof(want_write));
    assert_memory_equal(b, want_write, sizeof(b));
    static const uint8_t want_hello[] = {
        0x54, 0x4e, 0x54, 0x31, 0x02, 0x07, 0x00, 0x00, /* magic, v2, HELLO */
        0xff, 0xff, 0xff, 0xff, 0x08, 0x00, 0x00, 0x00, /* seq, len 8 */
        0x0d, 0xf0, 0xed, 0x5e, 0x00, 0x00, 0x00, 0x00}; /* token */
    uint8_t hb[TENT_WIRE_HDR_LEN + TCP_WIRE_TOKEN_LEN];
    tent_wire_encode_hdr(hb, TCP_WIRE_HELLO, 0xffffffffu, TCP_WIRE_TOKEN_LEN);
    tcp_wire_encode_token(hb + TENT_WIRE_HDR_LEN, 0x5eedf00dull);
    assert_memory_equal(hb, want_hello, sizeof(hb));
}

static void test_rw_resp_notify(void **state)
{
    (void)state;
    uint8_t b[TENT_WIRE_MAX_NOTIFY];
    struct tcp_wire_rw rw;
    tcp_wire_encode_rw(b, 0x1000, 64, NULL);
    assert_int_equal(tcp_wire_decode_rw(b, TCP_WIRE_RW_LEN, &rw), 0);
    assert_int_equal(rw.addr, 0x1000);
    assert_int_equal(rw.length, 64);
    tcp_wire_encode_rw(b, 0x1000, 0, NULL);
    assert_int_equal(tcp_wire_decode_rw(b, TCP_WIRE_RW_LEN, &rw), TENT_EPROTO);
    tcp_wire_encode_rw(b, 0x1000, TCP_WIRE_MAX_DATA + 1ull, NULL);
    assert_int_equal(tcp_wire_decode_rw(b, TCP_WIRE_RW_LEN, &rw), TENT_EPROTO);
    tcp_wire_encode_rw(b, UINT64_MAX - 10, 64, NULL);
    assert_int_equal(tcp_wire_decode_rw(b, TCP_WIRE_RW_LEN, &rw), TENT_EPROTO);
    assert_int_equal(tcp_wire_decode_rw(b, TCP_WIRE_RW_LEN - 1, &rw), TENT_EPROTO);
    /* the access block travels whole: incarnation and key */
    struct tcp_wire_access acc = {.incarnation = 0x0123456789abcdefull};
    for (int i = 0; i < TCP_WIRE_KEY_LEN; i++)
        acc.key[i] = (uint8_t)(0xa0 + i);
    tcp_wire_encode_rw(b, 0x2000, 8, &acc);
    assert_int_equal(tcp_wire_decode_rw(b, TCP_WIRE_RW_LEN, &rw), 0);
    assert_int_equal(rw.acc.incarnation, acc.incarnation);
    assert_memory_equal(rw.acc.key, acc.key, TCP_WIRE_KEY_LEN);
    tcp_wire_encode_rw(b, 0x2000, 8, NULL);
    assert_int_equal(tcp_wire_decode_rw(b, TCP_WIRE_RW_LEN, &rw), 0);
    assert_int_equal(rw.acc.incarnation, 0);

    int32_t st;
    tent_wire_encode_resp(b, TENT_EPERM);
    assert_int_equal(tent_wire_decode_resp(b, 8, &st), 0);
    assert_int_equal(st, TENT_EPERM);
    tent_wire_encode_resp(b, 5);
    assert_int_equal(tent_wire_decode_resp(b, 8, &st), TENT_EPROTO);

    struct tent_wire_notify *n = malloc(sizeof(*n));
    int len = tent_wire_encode_notify(b, "name", "hello", "h:1");
    assert_int_equal(len, 8 + 4 + 5 + 3);
    assert_int_equal(tent_wire_decode_notify(b, (size_t)len, n), 0);
    assert_string_equal(n->name, "name");
    assert_string_equal(n->msg, "hello");
    assert_string_equal(n->from, "h:1");
    assert_int_equal(tent_wire_decode_notify(b, (size_t)len - 1, n),
                     TENT_EPROTO);
    b[8] = 0; /* NUL inside the name */
    assert_int_equal(tent_wire_decode_notify(b, (size_t)len, n), TENT_EPROTO);
    free(n);
}

static const char *good_desc =
    "{\"version\":1,\"name\":\"127.0.0.1:1\",\"host_id\":\"b/h\","
    "\"buffers\":[{\"base\":\"4096\",\"length\":\"100\",\"location\":\"cpu\","
    "\"perm\":2,\"xport_mask\":128,"
    "\"attrs\":{\"shm_name\":\"cma\",\"shm_offset\":\"0\"}},"
    "{\"base\":\"8192\",\"length\":\"100\",\"location\":\"cpu\",\"perm\":1,"
    "\"xport_mask\":128,\"shm_name\":\"\",\"shm_offset\":\"0\"}],"
    "\"attrs\":{\"rpc_addr\":\"127.0.0.1:1\"}}";

static int decode_str(const char *s)
{
    struct tent_wire_desc *d = calloc(1, sizeof(*d));
    int rc = tent_wire_decode_desc(s, strlen(s), d);
    if (rc == 0)
        tent_wire_desc_free(d);
    free(d);
    return rc;
}

/* good_desc with the first occurrence of `from` replaced by `to`. */
static int decode_mutated(const char *from, const char *to)
{
    char buf[2048];
    const char *p = strstr(good_desc, from);
    assert_non_null(p);
    snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(p - good_desc), good_desc, to,
             p + strlen(from));
    return decode_str(buf);
}

/* HELLO and FENCE carry one non-zero token, nothing more. */
static void test_tokens(void **state)
{
    (void)state;
    uint8_t b[TENT_WIRE_HDR_LEN + TCP_WIRE_TOKEN_LEN + 1];
    struct tent_wire_hdr h;
    tent_wire_encode_hdr(b, TCP_WIRE_FENCE, 7, TCP_WIRE_TOKEN_LEN);
    assert_int_equal(tent_wire_decode_hdr(b, TENT_WIRE_HDR_LEN, &h), 0);
    assert_int_equal(h.type, TCP_WIRE_FENCE);
    tent_wire_encode_hdr(b, TCP_WIRE_HELLO, 7, TCP_WIRE_TOKEN_LEN + 1);
    assert_int_equal(tent_wire_decode_hdr(b, TENT_WIRE_HDR_LEN, &h), 0);
    uint64_t data;
    assert_int_equal(tcp_wire_frame_data(&h, NULL, 0, &data), TENT_EPROTO);
    uint64_t t = 0;
    tcp_wire_encode_token(b, 0x0102030405060708ull);
    assert_int_equal(b[0], 0x08); /* little-endian */
    assert_int_equal(tcp_wire_decode_token(b, TCP_WIRE_TOKEN_LEN, &t), 0);
    assert_true(t == 0x0102030405060708ull);
    assert_int_equal(tcp_wire_decode_token(b, TCP_WIRE_TOKEN_LEN - 1, &t),
                     TENT_EPROTO);
    tcp_wire_encode_token(b, 0);
    assert_int_equal(tcp_wire_decode_token(b, TCP_WIRE_TOKEN_LEN, &t),
                     TENT_EPROTO);
}

static void test_descriptor(void **state)
{
    (void)state;
    struct tent_wire_desc *d = calloc(1, sizeof(*d));
    assert_int_equal(tent_wire_decode_desc(good_desc, strlen(good_desc), d), 0);
    assert_int_equal(d->nbufs, 2);
    assert_int_equal(d->bufs[1].perm, PERM_GLOBAL_READ_ONLY);
    assert_string_equal(d->attr_value[0], "127.0.0.1:1");
    size_t len;
    char *again = tent_wire_encode_desc(d, &len);
    assert_non_null(again);
    struct tent_wire_desc *d2 = calloc(1, sizeof(*d2));
    assert_int_equal(tent_wire_decode_desc(again, len, d2), 0);
    for (int i = 0; i < 2; i++) { /* field by field: attrs live apart */
        assert_int_equal(d->bufs[i].base, d2->bufs[i].base);
        assert_int_equal(d->bufs[i].length, d2->bufs[i].length);
        assert_int_equal(d->bufs[i].perm, d2->bufs[i].perm);
        assert_int_equal(d->bufs[i].xport_mask, d2->bufs[i].xport_mask);
        assert_string_equal(d->bufs[i].location, d2->bufs[i].location);
        assert_int_equal(d->bufs[i].nattrs, d2->bufs[i].nattrs);
    }
    assert_int_equal(d2->bufs[0].nattrs, 2);
    assert_string_equal(d2->bufs[0].attrs[0].key, "shm_name");
    assert_string_equal(d2->bufs[0].attrs[0].value, "cma");
    assert_string_equal(d2->bufs[0].attrs[1].key, "shm_offset");
    assert_string_equal(d2->bufs[0].attrs[1].value, "0");
    assert_int_equal(d2->incarnation, 0); /* none in good_desc */
    /* an incarnation (all 64 bits) survives a round trip */
    d->incarnation = 0xfedcba9876543210ull;
    free(again);
    again = tent_wire_encode_desc(d, &len);
    assert_non_null(again);
    tent_wire_desc_free(d2);
    memset(d2, 0, sizeof(*d2));
    assert_int_equal(tent_wire_decode_desc(again, len, d2), 0);
    assert_int_equal(d2->incarnation, 0xfedcba9876543210ull);
    /* a buffer's access key (all 16 bytes) survives a round trip; a
     * descriptor without one decodes with zeros */
    static const uint8_t zero[TENT_WIRE_KEY_LEN];
    assert_memory_equal(d2->bufs[0].key, zero, TENT_WIRE_KEY_LEN);
    for (int i = 0; i < TENT_WIRE_KEY_LEN; i++)
        d->bufs[1].key[i] = (uint8_t)(0xf1 - 17 * i);
    free(again);
    again = tent_wire_encode_desc(d, &len);
    assert_non_null(again);
    tent_wire_desc_free(d2);
    memset(d2, 0, sizeof(*d2));
    assert_int_equal(tent_wire_decode_desc(again, len, d2), 0);
    assert_memory_equal(d2->bufs[1].key, d->bufs[1].key, TENT_WIRE_KEY_LEN);
    assert_memory_equal(d2->bufs[0].key, zero, TENT_WIRE_KEY_LEN);
    tent_wire_desc_free(d2);
    tent_wire_desc_free(d);
    free(again);
    free(d);
    free(d2);

    assert_int_equal(decode_str("{"), TENT_EPROTO);
    assert_int_equal(decode_str("[]"), TENT_EPROTO);
    assert_int_equal(decode_mutated("\"version\":1", "\"version\":2"),
                     TENT_EPROTO);
    assert_int_equal(decode_mutated("\"base\":\"4096\"", "\"base\":4096"),
                     TENT_EPROTO);
    assert_int_equal(decode_mutated("\"base\":\"4096\"", "\"base\":\"-1\""),
                     TENT_EPROTO);
    assert_int_equal(decode_mutated("\"base\":\"4096\"",
                                    "\"base\":\"99999999999999999999\""),
                     TENT_EPROTO);
    assert_int_equal(decode_mutated("\"length\":\"100\"", "\"length\":\"0\""),
                     TENT_EPROTO);
    assert_int_equal(decode_mutated("\"base\":\"4096\"",
                                    "\"base\":\"18446744073709551600\""),
                     TENT_EPROTO); /* wraps */
    assert_int_equal(decode_mutated("\"perm\":2", "\"perm\":3"), TENT_EPROTO);
    /* a key is exactly 32 lower-case hex digits */
    assert_int_equal(
        decode_mutated("\"perm\":2",
                       "\"perm\":2,\"key\":\"00112233445566778899aabbccddeeff\""),
        TENT_OK);
    assert_int_equal(
        decode_mutated("\"perm\":2",
                       "\"perm\":2,\"key\":\"00112233445566778899aabbccddeef\""),
        TENT_EPROTO);
    assert_int_equal(
        decode_mutated("\"perm\":2",
                       "\"perm\":2,\"key\":\"00112233445566778899aabbccddeefg\""),
        TENT_EPROTO);
    assert_int_equal(decode_mutated("\"perm\":2", "\"perm\":2,\"key\":7"),
                     TENT_EPROTO);
    assert_int_equal(decode_mutated("\"perm\":2", "\"perm\":1.5"), TENT_EPROTO);
    assert_int_equal(decode_mutated("\"xport_mask\":128", "\"xport_mask\":-1"),
                     TENT_EPROTO);
    assert_int_equal(decode_mutated("\"location\":\"cpu\"", "\"location\":7"),
                     TENT_EPROTO);
    assert_int_equal(decode_mutated("\"base\":\"8192\"", "\"base\":\"4100\""),
                     TENT_EPROTO); /* overlaps the first */
    assert_int_equal(decode_mutated("\"base\":\"8192\"", "\"base\":\"0\""),
                     TENT_EPROTO); /* out of order */
    assert_int_equal(decode_mutated("\"buffers\":[", "\"buffers\":{\"x\":["),
                     TENT_EPROTO);
    assert_int_equal(
        decode_mutated("\"rpc_addr\":\"127.0.0.1:1\"", "\"rpc_addr\":1"),
        TENT_EPROTO);
    /* an attribute key given twice is malformed, not "last one wins" */
    assert_int_equal(decode_mutated("\"shm_offset\":\"0\"}",
                                    "\"shm_name\":\"x\"}"),
                     TENT_EPROTO);
    assert_int_equal(decode_mutated("{\"rpc_addr\":\"127.0.0.1:1\"}",
                                    "{\"a\":\"1\",\"a\":\"2\"}"),
                     TENT_EPROTO);
    char longname[400];
    memset(longname, 'a', sizeof(longname));
    longname[sizeof(longname) - 1] = 0;
    char repl[420];
    snprintf(repl, sizeof(repl), "\"name\":\"%s\"", longname);
    assert_int_equal(decode_mutated("\"name\":\"127.0.0.1:1\"", repl),
                     TENT_EPROTO);
}

static void test_peer_addr(void **state)
{
    (void)state;
    char host[64];
    uint16_t port;
    assert_int_equal(
        tent_rpc_parse_addr("127.0.0.1:15000", host, sizeof(host), &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 15000);
    assert_int_equal(tent_rpc_parse_addr("[::1]:80", host, sizeof(host), &port),
                     0);
    assert_string_equal(host, "::1");
    const char *bad[] = {"",    "host",    "host:", ":80",
                         "h:0", "h:65536", "h:8x",  "h:-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(tent_rpc_parse_addr(bad[i], host, sizeof(host), &port),
                         TENT_EINVAL);
}

static void test_shm_fields(void **state)
{
    (void)state;
    int fd;
    unsigned long long ino;
    assert_int_equal(tent_shm_parse_handle("memfd:12:345", &fd, &ino), 0);
    assert_int_equal(fd, 12);
    assert_int_equal(ino, 345);
    const char *bad[] = {"",           "cma",        "memfd:",
                         "memfd:1",    "memfd:1:",   "memfd:-1:2",
                         "memfd:1:2x", "memfd: 1:2", "memfd:99999999999:1",
                         "memfd:1:2:3"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(tent_shm_parse_handle(bad[i], &fd, &ino), TENT_EPROTO);
    assert_int_equal(tent_shm_parse_pid("4242"), 4242);
    assert_int_equal(tent_shm_parse_pid("0"), -1);
    assert_int_equal(tent_shm_parse_pid("-5"), -1);
    assert_int_equal(tent_shm_parse_pid("12a"), -1);
    assert_int_equal(tent_shm_parse_pid("9999999999"), -1);
    assert_int_equal(tent_shm_parse_pid(NULL), -1);
    /* 64 bits at most, digits only; the end is left after the last digit */
    const char *end;
    unsigned long long v;
    assert_int_equal(tent_shm_parse_u64("18446744073709551615:", &end, &v), 0);
    assert_true(v == ~0ull);
    assert_int_equal(*end, ':');
    assert_int_equal(tent_shm_parse_u64("10000000000000000000", &end, &v), 0);
    assert_true(v == 10000000000000000000ull);
    assert_int_equal(tent_shm_parse_u64("007", &end, &v), 0);
    assert_true(v == 7);
    const char *nok[] = {"18446744073709551616", "99999999999999999999",
                         "000000000000000000001", "", "+1", " 1", "-0"};
    for (size_t i = 0; i < sizeof(nok) / sizeof(nok[0]); i++)
        assert_int_equal(tent_shm_parse_u64(nok[i], &end, &v), -1);
    assert_int_equal(tent_shm_parse_handle("memfd:1:18446744073709551616", &fd,
                                           &ino),
                     TENT_EPROTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_rw_resp_notify),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_tcp_frame_data),
        cmocka_unit_test(test_tcp_bytes),
        cmocka_unit_test(test_descriptor),
        cmocka_unit_test(test_peer_addr),
        cmocka_unit_test(test_shm_fields),
    };
    return cmocka_run_group_tests_name("rpc_wire", tests, NULL, NULL);
}
