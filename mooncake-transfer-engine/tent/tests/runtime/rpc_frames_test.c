/* The RPC server routes a frame type to the handler a transport installed
 * for it, knowing the transport's frames only through the handler's measure
 * hook: a made-up transport ("fake", frame types 200..203) is served, its
 * bad lengths drop their connection, a type nobody serves is answered
 * TENT_ENOTSUP, the server's own types cannot be taken, two transports
 * cannot share a type, and connection tags let one request close another
 * connection (what tcp's FENCE is built on). */
#include "common/error.h"
#include "rpc/rpc.h"
#include "rpc/wire.h"
#include "tu_assert.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* fake's frames: ECHO (u32 n, then n bytes; answered with them), TAG and
 * CLOSE (a u64 tag) */
#define ECHO     200
#define UNSERVED 201
#define TAG      202
#define CLOSE    203
#define ECHO_MAX 4096

struct fake {
    atomic_int served, measured;
    atomic_ullong last_data;
};

static struct tent_rpc_server *g_srv;
static uint16_t g_port;
static struct fake g_fake;

static char *describe(void *ctx, size_t *len)
{
    (void)ctx;
    *len = 2;
    return strdup("{}");
}

static int notify(void *ctx, const char *peer, const char *from,
                  const char *name, const char *msg)
{
    (void)ctx, (void)peer, (void)from, (void)name, (void)msg;
    return 0;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* ECHO: 4..4+ECHO_MAX bytes, data = what follows the count; TAG, CLOSE: 8 */
static int measure(void *ctx, const struct tent_wire_hdr *h,
                   const uint8_t *body, size_t n, uint64_t *data)
{
    struct fake *f = ctx;
    (void)body, (void)n;
    atomic_fetch_add(&f->measured, 1);
    uint32_t min = h->type == ECHO ? 4 : 8;
    uint32_t max = h->type == ECHO ? 4 + ECHO_MAX : 8;
    if (h->len < min || h->len > max)
        return tent_set_error(TENT_EPROTO, "fake frame %u of %u bytes",
                              h->type, h->len);
    *data = h->type == ECHO ? h->len - 4 : 0;
    atomic_store(&f->last_data, *data);
    return TENT_OK;
}

static int serve_echo(void *ctx, struct tent_rpc_conn *c,
                      const struct tent_wire_hdr *h)
{
    struct fake *f = ctx;
    uint8_t b[4 + ECHO_MAX];
    if (tent_rpc_conn_recv(c, b, h->len) || get32(b) != h->len - 4)
        return -1;
    atomic_fetch_add(&f->served, 1);
    return tent_rpc_conn_send_resp(c, h->seq, 0, b + 4, h->len - 4);
}

static int serve_tag(void *ctx, struct tent_rpc_conn *c,
                     const struct tent_wire_hdr *h)
{
    (void)ctx;
    uint64_t tag;
    if (tent_rpc_conn_recv(c, &tag, sizeof(tag)))
        return -1;
    if (h->type == TAG)
        return tent_rpc_conn_tag(c, tag)
                   ? -1
                   : tent_rpc_conn_send_resp(c, h->seq, 0, NULL, 0);
    int st = tent_rpc_conn_close_tagged(c, tag);
    return tent_rpc_conn_send_resp(c, h->seq, st, NULL, 0);
}

static struct tent_rpc_frame_ops ops_of(tent_rpc_frame_fn fn, bool work)
{
    return (struct tent_rpc_frame_ops){.owner = "fake",
                                       .serve = fn,
                                       .measure = measure,
                                       .prefix = 4,
                                       .work = work,
                                       .ctx = &g_fake};
}

static int setup(void **state)
{
    (void)state;
    memset(&g_fake, 0, sizeof(g_fake));
    struct tent_rpc_handlers h = {.describe = describe, .notify = notify};
    if (tent_rpc_server_start(&h, NULL, "127.0.0.1", 0, &g_srv, &g_port))
        return -1;
    struct tent_rpc_frame_ops echo = ops_of(serve_echo, true),
                              tag = ops_of(serve_tag, false);
    if (tent_rpc_server_handle(g_srv, ECHO, &echo) ||
        tent_rpc_server_handle(g_srv, TAG, &tag) ||
        tent_rpc_server_handle(g_srv, CLOSE, &tag))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tent_rpc_server_stop(g_srv);
    return 0;
}

static int conn(void)
{
    int fd = -1;
    assert_int_equal(tent_rpc_connect("127.0.0.1", g_port, 5000, &fd), 0);
    return fd;
}

static void send_frame(int fd, uint8_t type, uint32_t seq, const void *body,
                       uint32_t len)
{
    uint8_t h[TENT_WIRE_HDR_LEN];
    tent_wire_encode_hdr(h, type, seq, len);
    assert_int_equal(tent_rpc_send_all(fd, h, sizeof(h)), 0);
    if (len)
        assert_int_equal(tent_rpc_send_all(fd, body, len), 0);
}

/* The answer to seq: its status; its data (up to cap bytes) into out. */
static int32_t answer(int fd, uint32_t seq, void *out, uint32_t cap,
                      uint32_t *got)
{
    uint8_t b[TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN];
    struct tent_wire_hdr h;
    int32_t st = 1;
    assert_int_equal(tent_rpc_recv_all(fd, b, sizeof(b)), 0);
    assert_int_equal(tent_wire_decode_hdr(b, TENT_WIRE_HDR_LEN, &h), 0);
    assert_int_equal(h.type, TENT_WIRE_RESP);
    assert_int_equal(h.seq, seq);
    assert_int_equal(tent_wire_decode_resp(b + TENT_WIRE_HDR_LEN,
                                           TENT_WIRE_RESP_LEN, &st),
                     0);
    uint32_t n = h.len - TENT_WIRE_RESP_LEN;
    assert_true(n <= cap);
    if (n)
        assert_int_equal(tent_rpc_recv_all(fd, out, n), 0);
    if (got)
        *got = n;
    return st;
}

static bool closed_by_server(int fd)
{
    char c;
    ssize_t r = recv(fd, &c, 1, 0); /* the socket's timeout bounds it */
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static int32_t echo(int fd, uint32_t seq, const char *text, char *out)
{
    uint8_t b[4 + ECHO_MAX];
    uint32_t n = (uint32_t)strlen(text), got = 0;
    b[0] = (uint8_t)n, b[1] = (uint8_t)(n >> 8), b[2] = 0, b[3] = 0;
    memcpy(b + 4, text, n);
    send_frame(fd, ECHO, seq, b, 4 + n);
    int32_t st = answer(fd, seq, out, ECHO_MAX, &got);
    out[got] = 0;
    return st;
}

static void test_installed_type_is_served(void **state)
{
    (void)state;
    int fd = conn();
    char out[ECHO_MAX + 1];
    assert_int_equal(echo(fd, 7, "frames routed by transport", out), 0);
    assert_string_equal(out, "frames routed by transport");
    assert_int_equal(echo(fd, 8, "again", out), 0);
    assert_string_equal(out, "again");
    assert_int_equal(atomic_load(&g_fake.served), 2);
    assert_true(atomic_load(&g_fake.measured) >= 2);
    assert_true(atomic_load(&g_fake.last_data) == 5);
    close(fd);
}

/* A length the measure hook refuses drops that connection only. */
static void test_measure_refusal_drops_the_connection(void **state)
{
    (void)state;
    int good = conn(), bad = conn();
    uint8_t h[TENT_WIRE_HDR_LEN];
    tent_wire_encode_hdr(h, ECHO, 1, 4 + ECHO_MAX + 1);
    assert_int_equal(tent_rpc_send_all(bad, h, sizeof(h)), 0);
    assert_true(closed_by_server(bad));
    close(bad);
    char out[ECHO_MAX + 1];
    assert_int_equal(echo(good, 2, "still here", out), 0);
    close(good);
}

/* No handler: the body is skipped, TENT_ENOTSUP answered, the connection
 * kept; a removed handler is not called any more. */
static void test_unserved_type(void **state)
{
    (void)state;
    int fd = conn();
    send_frame(fd, UNSERVED, 3, "xyz", 3);
    assert_int_equal(answer(fd, 3, NULL, 0, NULL), TENT_ENOTSUP);
    char out[ECHO_MAX + 1];
    assert_int_equal(echo(fd, 4, "after", out), 0);
    assert_int_equal(tent_rpc_server_handle(g_srv, ECHO, NULL), TENT_OK);
    int served = atomic_load(&g_fake.served);
    send_frame(fd, ECHO, 5, "\x01\0\0\0z", 5);
    assert_int_equal(answer(fd, 5, NULL, 0, NULL), TENT_ENOTSUP);
    assert_int_equal(atomic_load(&g_fake.served), served);
    struct tent_rpc_frame_ops o = ops_of(serve_echo, true);
    assert_int_equal(tent_rpc_server_handle(g_srv, ECHO, &o), TENT_OK);
    assert_int_equal(echo(fd, 6, "back", out), 0);
    close(fd);
}

static void test_install_rules(void **state)
{
    (void)state;
    struct tent_rpc_frame_ops o = ops_of(serve_echo, true);
    const uint8_t own[] = {0, TENT_WIRE_DESC_REQ, TENT_WIRE_DESC_RESP,
                           TENT_WIRE_NOTIFY, TENT_WIRE_RESP};
    for (size_t i = 0; i < sizeof(own); i++)
        assert_int_equal(tent_rpc_server_handle(g_srv, own[i], &o),
                         TENT_EINVAL);
    /* the same handler again is fine; another owner's is refused */
    assert_int_equal(tent_rpc_server_handle(g_srv, ECHO, &o), TENT_OK);
    struct tent_rpc_frame_ops other = o;
    other.owner = "other";
    other.serve = serve_tag;
    assert_int_equal(tent_rpc_server_handle(g_srv, ECHO, &other), TENT_EEXIST);
    assert_non_null(strstr(tent_last_error(), "fake"));
    struct tent_rpc_frame_ops bad = o;
    bad.measure = NULL;
    assert_int_equal(tent_rpc_server_handle(g_srv, UNSERVED, &bad),
                     TENT_EINVAL);
    bad = o;
    bad.prefix = TENT_RPC_MAX_PREFIX + 1;
    assert_int_equal(tent_rpc_server_handle(g_srv, UNSERVED, &bad),
                     TENT_EINVAL);
}

/* A connection tagged on one connection is closed by a request on another;
 * the tag cannot be taken again afterwards. */
static void test_tags(void **state)
{
    (void)state;
    uint64_t tag = 0x5eedf00dull;
    int a = conn(), b = conn(), c = conn();
    send_frame(a, TAG, 1, &tag, 8);
    assert_int_equal(answer(a, 1, NULL, 0, NULL), 0);
    send_frame(b, CLOSE, 2, &tag, 8);
    assert_int_equal(answer(b, 2, NULL, 0, NULL), 0);
    assert_true(closed_by_server(a));
    send_frame(c, TAG, 3, &tag, 8);
    assert_true(closed_by_server(c));
    /* an unknown tag is closed at once; b is still served */
    uint64_t other = 0x1234;
    send_frame(b, CLOSE, 4, &other, 8);
    assert_int_equal(answer(b, 4, NULL, 0, NULL), 0);
    close(a);
    close(b);
    close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_installed_type_is_served),
        cmocka_unit_test(test_measure_refusal_drops_the_connection),
        cmocka_unit_test(test_unserved_type),
        cmocka_unit_test(test_install_rules),
        cmocka_unit_test(test_tags),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
