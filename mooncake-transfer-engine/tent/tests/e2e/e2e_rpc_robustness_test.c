/* The RPC server against raw sockets: malformed or truncated frames close
 * that connection only; well-formed requests outside the registered
 * buffers or their permissions are refused with an error answer and touch
 * nothing; a well-behaved peer keeps being served throughout.  Hostile
 * clients: idle, half-open and slow connections cannot lock peers out
 * (rpc_max_connections, rpc_idle_timeout_ms, rpc_frame_timeout_ms), and one
 * sender cannot queue unbounded notifications at the receiver. */
// clang-format off
#include <setjmp.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
// clang-format on

#include "common/config.h"
#include "e2e_peer.h"
#include "rpc/rpc.h"
#include "transport/tcp/tcp_wire.h"
#include "rpc/wire.h"
#include "runtime/engine.h"
#include "tent/transfer_engine.h"

static struct e2e_peer g_peer;
static char g_host[256];
static uint16_t g_port;

static int group_setup(void **state)
{
    (void)state;
    if (e2e_peer_start(&g_peer, 1 << 20, false, true))
        return -1;
    e2e_config(false, true);
    return tent_rpc_parse_addr(g_peer.name, g_host, sizeof(g_host), &g_port);
}

static int group_teardown(void **state)
{
    (void)state;
    e2e_peer_quit(&g_peer);
    return 0;
}

/* The access block naming the key g_peer publishes for the buffer at addr
 * (zeros when none holds it). */
static struct tcp_wire_access peer_acc(uint64_t addr)
{
    struct tcp_wire_access a = {0};
    assert_true(e2e_desc_key(g_host, g_port, addr, a.key) >= 0);
    return a;
}

static int raw_connect(void)
{
    int fd = -1;
    assert_int_equal(tent_rpc_connect(g_host, g_port, 3000, &fd), 0);
    return fd;
}

/* True when the server closes the connection within 3 s. */
static bool closed_by_server(int fd)
{
    long end = e2e_now_ms() + 3000;
    char buf[256];
    while (e2e_now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return true;
    }
    return false;
}

static void send_bytes(int fd, const void *b, size_t n)
{
    assert_int_equal(send(fd, b, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void desc_roundtrip(int fd)
{
    uint8_t h[TENT_WIRE_HDR_LEN];
    tent_wire_encode_hdr(h, TENT_WIRE_DESC_REQ, 7, 0);
    send_bytes(fd, h, sizeof(h));
    struct tent_wire_hdr hdr;
    assert_int_equal(tent_rpc_recv_all(fd, h, sizeof(h)), 0);
    assert_int_equal(tent_wire_decode_hdr(h, sizeof(h), &hdr), 0);
    assert_int_equal(hdr.type, TENT_WIRE_DESC_RESP);
    assert_int_equal(hdr.seq, 7);
    char *body = malloc(hdr.len);
    assert_int_equal(tent_rpc_recv_all(fd, body, hdr.len), 0);
    struct tent_wire_desc *d = calloc(1, sizeof(*d));
    assert_int_equal(tent_wire_decode_desc(body, hdr.len, d), 0);
    assert_true(d->nbufs >= 4);
    tent_wire_desc_free(d);
    free(d);
    free(body);
}

/* Allocates and registers (TENT's pattern: allocate, then register). */
static void *alloc_registered(tent_engine_t e, size_t len)
{
    void *buf = NULL;
    assert_int_equal(tent_allocate_memory(e, &buf, len, "cpu"), 0);
    assert_int_equal(tent_register_memory(e, buf, len), 0);
    return buf;
}

/* One read of 4096 bytes of e2e_pattern at base of segment name, through
 * initiator e over the tcp transport, every byte checked. */
static void read_check(tent_engine_t e, tent_segment_id_t seg, uint64_t base)
{
    uint8_t *buf = alloc_registered(e, 4096);
    memset(buf, 0, 4096);
    tent_request_t r = {.opcode = OPCODE_READ,
                        .source = buf,
                        .target_id = seg,
                        .target_offset = base,
                        .length = 4096};
    tent_batch_id_t b = tent_allocate_batch(e, 1);
    assert_int_equal(tent_submit(e, b, &r, 1), 0);
    tent_status_t st;
    assert_int_equal(e2e_wait(e, b, 5000, &st), 0);
    assert_int_equal(st.status, STATUS_COMPLETED);
    for (size_t i = 0; i < 4096; i++)
        assert_int_equal(buf[i], e2e_pattern(i));
    assert_int_equal(tent_free_batch(e, b), 0);
    tent_unregister_memory(e, buf, 4096);
    tent_free_memory(e, buf);
}

static void roundtrip_to(const char *name, uint64_t base)
{
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, name), 0);
    read_check(e, seg, base);
    tent_destroy_engine(e);
}

/* A transfer through the public API still works. */
static void engine_roundtrip(void)
{
    roundtrip_to(g_peer.name, g_peer.rw_base);
}

/* The first MiB of the target's read-write buffer holds its pattern, with
 * [8192, 8192 + n) either untouched or equal to partial (the truncated write
 * of the malformed-frames test). */
static bool target_intact_but_partial(const uint8_t *partial, size_t n)
{
    uint8_t *exp = malloc(1 << 20);
    e2e_pattern_fill(exp, 1u << 20, 0);
    uint64_t h = e2e_peer_hash(&g_peer, false, 0, 1 << 20);
    bool ok = h == e2e_fnv(exp, 1 << 20);
    memcpy(exp + 8192, partial, n);
    ok = ok || h == e2e_fnv(exp, 1 << 20);
    free(exp);
    return ok;
}

static int32_t read_answer(int fd, struct tent_wire_hdr *hdr);

static void test_malformed_frames_drop_only_their_connection(void **state)
{
    (void)state;
    int good = raw_connect(); /* a well-behaved client, open throughout */
    desc_roundtrip(good);

    uint8_t h[64];

    /* bad magic */
    int fd = raw_connect();
    tent_wire_encode_hdr(h, TENT_WIRE_DESC_REQ, 1, 0);
    h[0] ^= 0xff;
    send_bytes(fd, h, TENT_WIRE_HDR_LEN);
    assert_true(closed_by_server(fd));
    close(fd);
    /* unsupported version */
    fd = raw_connect();
    tent_wire_encode_hdr(h, TENT_WIRE_DESC_REQ, 1, 0);
    h[4] = 9;
    send_bytes(fd, h, TENT_WIRE_HDR_LEN);
    assert_true(closed_by_server(fd));
    close(fd);
    /* nonzero flags */
    fd = raw_connect();
    tent_wire_encode_hdr(h, TENT_WIRE_DESC_REQ, 1, 0);
    h[6] = 1;
    send_bytes(fd, h, TENT_WIRE_HDR_LEN);
    assert_true(closed_by_server(fd));
    close(fd);
    /* a type no transport here serves: its body skipped, TENT_ENOTSUP
     * answered, the connection kept (a transport this engine does not
     * run); then a response type sent as a request */
    fd = raw_connect();
    tent_wire_encode_hdr(h, 77, 1, 5);
    memset(h + TENT_WIRE_HDR_LEN, 0x77, 5);
    send_bytes(fd, h, TENT_WIRE_HDR_LEN + 5);
    struct tent_wire_hdr ah;
    assert_int_equal(read_answer(fd, &ah), TENT_ENOTSUP);
    assert_int_equal(ah.seq, 1);
    tent_wire_encode_hdr(h, 0, 2, 0); /* type 0 does not decode */
    send_bytes(fd, h, TENT_WIRE_HDR_LEN);
    assert_true(closed_by_server(fd));
    close(fd);
    fd = raw_connect();
    tent_wire_encode_hdr(h, TENT_WIRE_RESP, 1, 8);
    memset(h + 16, 0, 8);
    send_bytes(fd, h, 24);
    assert_true(closed_by_server(fd));
    close(fd);
    /* huge body length */
    fd = raw_connect();
    tent_wire_encode_hdr(h, TCP_WIRE_WRITE, 1, 0xffffffffu);
    send_bytes(fd, h, TENT_WIRE_HDR_LEN);
    assert_true(closed_by_server(fd));
    close(fd);
    /* write whose body length disagrees with its declared data length */
    fd = raw_connect();
    tent_wire_encode_hdr(h, TCP_WIRE_WRITE, 1, TCP_WIRE_RW_LEN + 10);
    tcp_wire_encode_rw(h + 16, g_peer.rw_base, 100, NULL);
    send_bytes(fd, h, TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN);
    assert_true(closed_by_server(fd));
    close(fd);
    /* notification with inconsistent lengths */
    fd = raw_connect();
    tent_wire_encode_hdr(h, TENT_WIRE_NOTIFY, 1, 12);
    memset(h + 16, 0, 12);
    h[16] = 200; /* name_len 200 in a 12-byte body */
    send_bytes(fd, h, 28);
    assert_true(closed_by_server(fd));
    close(fd);
    /* descriptor request with a body */
    fd = raw_connect();
    tent_wire_encode_hdr(h, TENT_WIRE_DESC_REQ, 1, 4);
    send_bytes(fd, h, 20);
    assert_true(closed_by_server(fd));
    close(fd);
    /* truncated header, then the client goes away */
    fd = raw_connect();
    tent_wire_encode_hdr(h, TENT_WIRE_DESC_REQ, 1, 0);
    send_bytes(fd, h, 7);
    close(fd);
    /* truncated write body, then the client goes away: the 10 bytes that
     * arrived land (the sender had the right to write them), nothing else */
    uint8_t partial[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    fd = raw_connect();
    tent_wire_encode_hdr(h, TCP_WIRE_WRITE, 1, TCP_WIRE_RW_LEN + 4096);
    struct tcp_wire_access acc = peer_acc(g_peer.rw_base);
    tcp_wire_encode_rw(h + 16, g_peer.rw_base + 8192, 4096, &acc);
    send_bytes(fd, h, TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN);
    send_bytes(fd, partial, sizeof(partial));
    close(fd);
    /* garbage */
    fd = raw_connect();
    for (size_t i = 0; i < sizeof(h); i++)
        h[i] = (uint8_t)(i * 37 + 11);
    send_bytes(fd, h, sizeof(h));
    assert_true(closed_by_server(fd));
    close(fd);

    /* The server still serves the well-behaved connection and new peers. */
    desc_roundtrip(good);
    close(good);
    engine_roundtrip();
    /* The target's memory is untouched by all of the above, except that the
     * 10 bytes of the truncated write may have landed (whether the server
     * read them before the connection went away is a matter of timing). */
    assert_true(target_intact_but_partial(partial, sizeof(partial)));
}

/* Reads the head of the next answer (header and status; any data it
 * carries stays on fd), which must be an answer; returns its status. */
static int32_t read_answer(int fd, struct tent_wire_hdr *hdr)
{
    uint8_t a[TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN];
    int32_t st = 1;
    assert_int_equal(tent_rpc_recv_all(fd, a, sizeof(a)), 0);
    assert_int_equal(tent_wire_decode_hdr(a, TENT_WIRE_HDR_LEN, hdr), 0);
    assert_int_equal(hdr->type, TENT_WIRE_RESP);
    assert_int_equal(
        tent_wire_decode_resp(a + TENT_WIRE_HDR_LEN, TENT_WIRE_RESP_LEN, &st),
        0);
    return st;
}

/* Appends a READ or WRITE request (a WRITE with its len bytes of data) to
 * out; returns its length. */
static size_t put_rw(uint8_t *out, int type, uint32_t seq, uint64_t addr,
                     uint32_t len, const uint8_t *data,
                     const struct tcp_wire_access *acc)
{
    bool w = type == TCP_WIRE_WRITE;
    const size_t at = TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN;
    tent_wire_encode_hdr(out, (uint8_t)type, seq,
                         TCP_WIRE_RW_LEN + (w ? len : 0));
    tcp_wire_encode_rw(out + 16, addr, len, acc);
    if (w)
        memcpy(out + at, data, len);
    return at + (w ? len : 0);
}

/* Sends one well-formed request (a WRITE's data: zeros); returns the
 * answer's status. */
static int32_t raw_rw_acc(int fd, int type, uint64_t addr, uint32_t len,
                          const struct tcp_wire_access *acc)
{
    uint8_t *zeros = calloc(1, len), *req = malloc(TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN + (size_t)len);
    send_bytes(fd, req, put_rw(req, type, 3, addr, len, zeros, acc));
    free(req);
    free(zeros);
    struct tent_wire_hdr hdr;
    int32_t st = read_answer(fd, &hdr);
    if (hdr.len > 8) {
        uint8_t *d = malloc(hdr.len - 8);
        assert_int_equal(tent_rpc_recv_all(fd, d, hdr.len - 8), 0);
        free(d);
    }
    return st;
}

/* raw_rw_acc with the key g_peer publishes for addr. */
static int32_t raw_rw(int fd, int type, uint64_t addr, uint32_t len)
{
    struct tcp_wire_access a = peer_acc(addr);
    return raw_rw_acc(fd, type, addr, len, &a);
}

/* Reads the next answer: it must be seq's, a success, carrying data[0, n). */
static void expect_answer(int fd, uint32_t seq, const uint8_t *data, size_t n)
{
    struct tent_wire_hdr hdr;
    assert_int_equal(read_answer(fd, &hdr), 0);
    assert_int_equal(hdr.seq, seq);
    assert_int_equal(hdr.len, 8 + n);
    uint8_t got[64];
    assert_true(n <= sizeof(got));
    assert_int_equal(tent_rpc_recv_all(fd, got, n), 0);
    assert_memory_equal(got, data, n);
}

static void test_server_enforces_bounds_and_permissions(void **state)
{
    (void)state;
    int fd = raw_connect();
    struct e2e_peer *p = &g_peer;
    assert_int_equal(raw_rw(fd, TCP_WIRE_WRITE, p->ro_base, 64), TENT_EPERM);
    assert_int_equal(raw_rw(fd, TCP_WIRE_WRITE, p->local_base, 64),
                     TENT_EPERM);
    assert_int_equal(raw_rw(fd, TCP_WIRE_READ, p->local_base, 64), TENT_EPERM);
    assert_int_equal(
        raw_rw(fd, TCP_WIRE_READ, p->rw_base + p->rw_len - 10, 64),
        TENT_ERANGE);
    assert_int_equal(raw_rw(fd, TCP_WIRE_WRITE, p->rw_base - 8, 64),
                     TENT_ERANGE);
    assert_int_equal(raw_rw(fd, TCP_WIRE_READ, 0x1000, 64), TENT_ERANGE);
    /* the connection survives refusals and then serves a valid request */
    assert_int_equal(raw_rw(fd, TCP_WIRE_READ, p->ro_base, 64), 0);
    close(fd);
    const uint8_t partial[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    assert_true(target_intact_but_partial(partial, sizeof(partial)));
}

/* Access keys: a raw client that knows host:port and, from the descriptor,
 * a buffer's address and length, but not its key (zeros, or a key one bit
 * off), is refused for READ and WRITE with the very answer an unregistered
 * range gets (TENT_ERANGE, also where the permission would refuse), and the
 * target's memory is unchanged; the right key is served. */
static void test_wrong_key_refused_as_unregistered(void **state)
{
    (void)state;
    struct e2e_peer *p = &g_peer;
    uint64_t before = e2e_peer_hash(p, false, 0, 1 << 20);
    struct tcp_wire_access good = peer_acc(p->rw_base), zero = {0},
                            off = good, ro_zero = {0};
    uint8_t any = 0;
    for (int i = 0; i < TCP_WIRE_KEY_LEN; i++)
        any |= good.key[i];
    assert_true(any); /* the descriptor publishes a key */
    off.key[TCP_WIRE_KEY_LEN - 1] ^= 1;
    int fd = raw_connect();
    const struct tcp_wire_access *bad[] = {&zero, &off};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(
            raw_rw_acc(fd, TCP_WIRE_WRITE, p->rw_base, 4096, bad[k]),
            TENT_ERANGE);
        assert_int_equal(
            raw_rw_acc(fd, TCP_WIRE_READ, p->rw_base + 64, 64, bad[k]),
            TENT_ERANGE);
    }
    /* an unregistered range: the same answer */
    assert_int_equal(raw_rw_acc(fd, TCP_WIRE_READ, 0x1000, 64, &zero),
                     TENT_ERANGE);
    /* no key is no permission oracle either: read-only and local memory
     * answer as unregistered, not TENT_EPERM */
    assert_int_equal(raw_rw_acc(fd, TCP_WIRE_WRITE, p->ro_base, 64, &ro_zero),
                     TENT_ERANGE);
    assert_int_equal(
        raw_rw_acc(fd, TCP_WIRE_READ, p->local_base, 64, &ro_zero),
        TENT_ERANGE);
    assert_int_equal(e2e_peer_hash(p, false, 0, 1 << 20), before);
    /* the connection survives; the right key reads */
    assert_int_equal(raw_rw_acc(fd, TCP_WIRE_READ, p->rw_base, 64, &good), 0);
    close(fd);
}

/* A buffer registered again at the same address gets a new key: a request
 * with the old descriptor's key is refused and writes nothing, the new key
 * is served, and an engine holding the old descriptor refetches it and
 * moves every byte. */
static void test_reregistration_gets_a_new_key(void **state)
{
    (void)state;
    struct e2e_peer *p = &g_peer;
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, p->name), 0);
    read_check(e, seg, p->rw_base); /* the engine holds the old descriptor */
    struct tcp_wire_access old = peer_acc(p->rw_base);
    assert_int_equal(e2e_peer_reregister_rw(p, PERM_GLOBAL_READ_WRITE), 0);
    struct tcp_wire_access cur = peer_acc(p->rw_base);
    assert_memory_not_equal(old.key, cur.key, TCP_WIRE_KEY_LEN);
    uint64_t before = e2e_peer_hash(p, false, 0, 1 << 20);
    int fd = raw_connect();
    assert_int_equal(raw_rw_acc(fd, TCP_WIRE_WRITE, p->rw_base, 4096, &old),
                     TENT_ERANGE);
    assert_int_equal(raw_rw_acc(fd, TCP_WIRE_READ, p->rw_base, 4096, &old),
                     TENT_ERANGE);
    assert_int_equal(e2e_peer_hash(p, false, 0, 1 << 20), before);
    /* the new key writes: the pattern's own bytes, so nothing changes */
    enum { N = 4096 };
    uint8_t *req = malloc(TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN + N);
    uint8_t pat[N];
    e2e_pattern_fill(pat, N, 0);
    send_bytes(fd, req,
               put_rw(req, TCP_WIRE_WRITE, 5, p->rw_base, N, pat, &cur));
    expect_answer(fd, 5, NULL, 0);
    free(req);
    close(fd);
    assert_int_equal(e2e_peer_hash(p, false, 0, 1 << 20), before);
    read_check(e, seg, p->rw_base); /* refetched: the new key */
    tent_destroy_engine(e);
}

/* Requests sent back to back: two large writes (the server receives their
 * bodies straight into the target, and with them the start of whatever
 * follows) then reads, the last one's header split across two sends.
 * Every request is served in order and every byte lands where it belongs;
 * the target gets its pattern back at the end. */
static void test_back_to_back_requests_after_large_bodies(void **state)
{
    (void)state;
    struct e2e_peer *p = &g_peer;
    enum { A = 65536, B = 20000, SPLIT = 10 };
    uint8_t *mine = malloc(A + B), *orig = malloc(A + B);
    uint8_t *out = malloc(2 * (A + B) + 256);
    e2e_pattern_fill(orig, A + B, 0);
    for (size_t i = 0; i < A + B; i++)
        mine[i] = (uint8_t)~orig[i];
    struct tcp_wire_access acc = peer_acc(p->rw_base);
    size_t n = put_rw(out, TCP_WIRE_WRITE, 11, p->rw_base, A, mine, &acc);
    n += put_rw(out + n, TCP_WIRE_WRITE, 12, p->rw_base + A, B, mine + A,
                &acc);
    n += put_rw(out + n, TCP_WIRE_READ, 13, p->rw_base + A - 6, 12, NULL,
                &acc);
    size_t last = n;
    n += put_rw(out + n, TCP_WIRE_READ, 14, p->rw_base + A + B - 6, 12, NULL,
                &acc);
    int fd = raw_connect();
    /* all but the tail of the last header, which follows only once the
     * request before it is answered: the server then holds part of a
     * header and must wait for the rest */
    assert_int_equal(tent_rpc_send_all(fd, out, last + SPLIT), 0);
    expect_answer(fd, 11, NULL, 0);
    expect_answer(fd, 12, NULL, 0);
    expect_answer(fd, 13, mine + A - 6, 12);
    assert_int_equal(
        tent_rpc_send_all(fd, out + last + SPLIT, n - last - SPLIT), 0);
    uint8_t edge[12];
    memcpy(edge, mine + A + B - 6, 6);
    e2e_pattern_fill(edge + 6, 6, A + B);
    expect_answer(fd, 14, edge, 12);
    /* the pattern back, in one large write */
    n = put_rw(out, TCP_WIRE_WRITE, 15, p->rw_base, A + B, orig, &acc);
    assert_int_equal(tent_rpc_send_all(fd, out, n), 0);
    expect_answer(fd, 15, NULL, 0);
    close(fd);
    free(mine);
    free(orig);
    free(out);
    uint8_t *exp = malloc(1 << 20);
    e2e_pattern_fill(exp, 1u << 20, 0);
    assert_true(e2e_peer_hash(p, false, 0, 1 << 20) == e2e_fnv(exp, 1 << 20));
    free(exp);
    engine_roundtrip();
}

/* Sends a HELLO or FENCE for token on fd; returns the answer's status. */
static int32_t raw_token(int fd, int type, uint64_t token)
{
    uint8_t h[TENT_WIRE_HDR_LEN + TCP_WIRE_TOKEN_LEN];
    tent_wire_encode_hdr(h, (uint8_t)type, 9, TCP_WIRE_TOKEN_LEN);
    tcp_wire_encode_token(h + TENT_WIRE_HDR_LEN, token);
    send_bytes(fd, h, sizeof(h));
    struct tent_wire_hdr hdr;
    int32_t st = read_answer(fd, &hdr);
    assert_int_equal(hdr.seq, 9);
    return st;
}

/* FENCE: a connection named by HELLO is cut off in the middle of a write;
 * once the FENCE is answered none of the write's later bytes land (what a
 * tcp initiator relies on before it sends a timed-out write over another
 * rail).  A HELLO that arrives with a token already fenced closes its
 * connection before anything on it is served. */
static void test_fence_cuts_off_a_connection(void **state)
{
    (void)state;
    struct e2e_peer *p = &g_peer;
    const uint64_t off = 512u << 10, len = 64u << 10, sent = 4096;
    uint64_t before = e2e_peer_hash(p, false, off + sent, len - sent);
    int a = raw_connect();
    assert_int_equal(raw_token(a, TCP_WIRE_HELLO, 0x5eedf00dull), 0);
    uint8_t h[TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN];
    tent_wire_encode_hdr(h, TCP_WIRE_WRITE, 3,
                         TCP_WIRE_RW_LEN + (uint32_t)len);
    struct tcp_wire_access acc = peer_acc(p->rw_base);
    tcp_wire_encode_rw(h + 16, p->rw_base + off, len, &acc);
    send_bytes(a, h, sizeof(h));
    uint8_t *data = malloc(len);
    memset(data, 0xee, len);
    send_bytes(a, data, sent); /* the write stops here: a stalled path */
    int b = raw_connect();
    long t0 = e2e_now_ms();
    assert_int_equal(raw_token(b, TCP_WIRE_FENCE, 0x5eedf00dull), 0);
    print_message("    fence answered after %ld ms\n", e2e_now_ms() - t0);
    /* the rest of the write arrives late: it must not land */
    (void)send(a, data + sent, len - sent, MSG_NOSIGNAL);
    assert_true(closed_by_server(a));
    close(a);
    assert_int_equal(e2e_peer_hash(p, false, off + sent, len - sent), before);
    /* a fenced token's HELLO arriving late: its connection is closed */
    int c = raw_connect();
    uint8_t hello[TENT_WIRE_HDR_LEN + TCP_WIRE_TOKEN_LEN];
    tent_wire_encode_hdr(hello, TCP_WIRE_HELLO, 9, TCP_WIRE_TOKEN_LEN);
    tcp_wire_encode_token(hello + TENT_WIRE_HDR_LEN, 0x5eedf00dull);
    send_bytes(c, hello, sizeof(hello));
    send_bytes(c, h, sizeof(h));
    (void)send(c, data, len, MSG_NOSIGNAL);
    assert_true(closed_by_server(c));
    close(c);
    assert_int_equal(e2e_peer_hash(p, false, off + sent, len - sent), before);
    /* an unknown token is fenced at once; token 0 is malformed */
    assert_int_equal(raw_token(b, TCP_WIRE_FENCE, 0x1234), 0);
    tent_wire_encode_hdr(hello, TCP_WIRE_FENCE, 9, TCP_WIRE_TOKEN_LEN);
    tcp_wire_encode_token(hello + TENT_WIRE_HDR_LEN, 0);
    send_bytes(b, hello, sizeof(hello));
    assert_true(closed_by_server(b));
    close(b);
    free(data);
}

/* A fake peer that answers every descriptor request with `reply`. */
struct fake_peer {
    int lfd;
    uint16_t port;
    const uint8_t *reply;
    size_t reply_len;
    pthread_t thr;
};

static void *fake_main(void *arg)
{
    struct fake_peer *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd >= 0) {
        uint8_t h[TENT_WIRE_HDR_LEN];
        if (tent_rpc_recv_all(fd, h, sizeof(h)) == 0)
            (void)send(fd, f->reply, f->reply_len, MSG_NOSIGNAL);
        shutdown(fd, SHUT_WR);
        char x;
        while (recv(fd, &x, 1, 0) > 0)
            ;
        close(fd);
    }
    return NULL;
}

static void fake_start(struct fake_peer *f)
{
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(f->lfd, 4), 0);
    assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
    f->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&f->thr, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake_peer *f)
{
    pthread_join(f->thr, NULL);
    close(f->lfd);
}

/* Opening a segment whose server answers with a bad descriptor fails
 * cleanly with TENT_ENOSEGMENT, whatever the bytes. */
static void test_bad_descriptor_refused_by_initiator(void **state)
{
    (void)state;
    static const char *bodies[] = {
        "not json", "{\"version\":1}",
        "{\"version\":1,\"name\":\"x\",\"host_id\":\"h\",\"buffers\":"
        "[{\"base\":\"10\",\"length\":\"0\",\"location\":\"cpu\","
        "\"perm\":2,\"xport_mask\":1,\"shm_name\":\"\",\"shm_offset\":"
        "\"0\"}],\"attrs\":{}}",
        "", /* truncated: header promises more than is sent */
    };
    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        uint8_t buf[512];
        size_t bl = strlen(bodies[i]);
        tent_wire_encode_hdr(buf, TENT_WIRE_DESC_RESP, 1,
                             bl ? (uint32_t)bl : 100);
        memcpy(buf + TENT_WIRE_HDR_LEN, bodies[i], bl);
        struct fake_peer f = {.reply = buf,
                              .reply_len = TENT_WIRE_HDR_LEN + bl};
        fake_start(&f);
        char name[64];
        snprintf(name, sizeof(name), "127.0.0.1:%u", (unsigned)f.port);
        tent_segment_id_t seg;
        assert_int_equal(tent_open_segment(e, &seg, name), TENT_ENOSEGMENT);
        fake_stop(&f);
    }
    /* a wrong frame type, and a header that does not decode */
    uint8_t h[TENT_WIRE_HDR_LEN];
    for (int k = 0; k < 2; k++) {
        tent_wire_encode_hdr(h, k ? TENT_WIRE_RESP : 99, 1, 0);
        struct fake_peer f = {.reply = h, .reply_len = sizeof(h)};
        fake_start(&f);
        char name[64];
        snprintf(name, sizeof(name), "127.0.0.1:%u", (unsigned)f.port);
        tent_segment_id_t seg;
        assert_int_equal(tent_open_segment(e, &seg, name), TENT_ENOSEGMENT);
        fake_stop(&f);
    }
    tent_destroy_engine(e);
}

/* ---- hostile clients ----------------------------------------------------
 * An in-process target engine with the limits under test (real sockets on
 * loopback), a pattern-filled buffer to read, and its server's counters. */
struct target {
    tent_engine_t e;
    uint8_t *buf;
    char name[256], host[256];
    uint16_t port;
};

static void target_start(struct target *t, const char *const *kv)
{
    e2e_config(false, true);
    for (; kv && kv[0]; kv += 2)
        tent_set_config(kv[0], kv[1]);
    t->e = tent_create_engine();
    assert_non_null(t->e);
    t->buf = alloc_registered(t->e, 1 << 20);
    e2e_pattern_fill(t->buf, 1u << 20, 0);
    assert_int_equal(tent_segment_name(t->e, t->name, sizeof(t->name)), 0);
    assert_int_equal(
        tent_rpc_parse_addr(t->name, t->host, sizeof(t->host), &t->port), 0);
}

static void target_stop(struct target *t)
{
    tent_destroy_engine(t->e);
    e2e_config(false, true); /* the group's settings for later tests */
}

static struct tent_rpc_stats target_stats(struct target *t)
{
    struct tent_rpc_stats st;
    tent_rpc_server_stats(((struct tent_engine *)t->e)->rpc, &st);
    return st;
}

static int connect_to(struct target *t)
{
    int fd = -1;
    assert_int_equal(tent_rpc_connect(t->host, t->port, 3000, &fd), 0);
    return fd;
}

/* ms until the server closes fd (the client sends nothing more), or -1
 * when it is still open after limit_ms. */
static long ms_until_closed(int fd, long limit_ms)
{
    long t0 = e2e_now_ms();
    char buf[256];
    while (e2e_now_ms() - t0 < limit_ms) {
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return e2e_now_ms() - t0;
    }
    return -1;
}

/* One descriptor request answered on fd (a frame completed). */
static void desc_once(int fd)
{
    uint8_t h[TENT_WIRE_HDR_LEN];
    tent_wire_encode_hdr(h, TENT_WIRE_DESC_REQ, 9, 0);
    send_bytes(fd, h, sizeof(h));
    struct tent_wire_hdr hdr;
    assert_int_equal(tent_rpc_recv_all(fd, h, sizeof(h)), 0);
    assert_int_equal(tent_wire_decode_hdr(h, sizeof(h), &hdr), 0);
    assert_int_equal(hdr.type, TENT_WIRE_DESC_RESP);
    char *body = malloc(hdr.len);
    assert_int_equal(tent_rpc_recv_all(fd, body, hdr.len), 0);
    free(body);
}

/* More idle connections than the old fixed cap of 256, none of which ever
 * sends a byte: a real peer still gets in, and the server keeps to its
 * configured cap by closing the oldest of them. */
static void test_idle_connections_cannot_lock_peers_out(void **state)
{
    (void)state;
    struct target t;
    target_start(&t, (const char *const[]){"rpc_max_connections", "32", NULL});
    enum { N = 300 };
    int *fds = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++)
        fds[i] = connect_to(&t);
    roundtrip_to(t.name, (uintptr_t)t.buf);
    struct tent_rpc_stats st = target_stats(&t);
    assert_true(st.open <= 32);
    assert_true(st.evicted >= N - 32);
    assert_int_equal(st.refused, 0);
    /* the oldest idle ones were closed, the newest kept */
    assert_true(ms_until_closed(fds[0], 2000) >= 0);
    assert_int_equal(ms_until_closed(fds[N - 1], 100), -1);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    free(fds);
    target_stop(&t);
}

/* A client that sends one byte at a time keeps no frame open past
 * rpc_frame_timeout_ms, however steadily the bytes come. */
static void test_slow_frame_dropped_at_deadline(void **state)
{
    (void)state;
    struct target t;
    target_start(&t,
                 (const char *const[]){"rpc_frame_timeout_ms", "1000", NULL});
    int fd = connect_to(&t);
    uint8_t h[TENT_WIRE_HDR_LEN];
    tent_wire_encode_hdr(h, TENT_WIRE_DESC_REQ, 1, 0);
    long t0 = e2e_now_ms(), closed = -1;
    /* 16 header bytes, one per 250 ms: 4 s for the whole header */
    for (size_t i = 0; i < sizeof(h) && closed < 0; i++) {
        if (send(fd, h + i, 1, MSG_NOSIGNAL) != 1 ||
            ms_until_closed(fd, 250) >= 0)
            closed = e2e_now_ms() - t0;
    }
    if (closed < 0 && ms_until_closed(fd, 2000) >= 0)
        closed = e2e_now_ms() - t0;
    assert_true(closed >= 0);
    assert_true(closed >= 900 && closed < 3000);
    assert_true(target_stats(&t).frame_timeouts >= 1);
    close(fd);
    roundtrip_to(t.name, (uintptr_t)t.buf);
    target_stop(&t);
}

/* Connections idle between frames are closed after rpc_idle_timeout_ms,
 * used or not; a tcp initiator whose pooled connection was closed that way
 * reconnects for its next transfer. */
static void test_idle_connection_closed_after_timeout(void **state)
{
    (void)state;
    struct target t;
    target_start(&t,
                 (const char *const[]){"rpc_idle_timeout_ms", "1000", NULL});
    int used = connect_to(&t), unused = connect_to(&t);
    desc_once(used);
    long a = ms_until_closed(used, 5000), b = ms_until_closed(unused, 5000);
    assert_true(a >= 0 && a < 4000);
    assert_true(b >= 0 && b < 4000);
    close(used);
    close(unused);

    tent_engine_t e = tent_create_engine();
    assert_non_null(e);
    tent_segment_id_t seg;
    assert_int_equal(tent_open_segment(e, &seg, t.name), 0);
    read_check(e, seg, (uintptr_t)t.buf);
    uint64_t before = target_stats(&t).idle_closed;
    long end = e2e_now_ms() + 5000;
    while (target_stats(&t).idle_closed == before && e2e_now_ms() < end)
        poll(NULL, 0, 50);
    assert_true(target_stats(&t).idle_closed > before);
    read_check(e, seg, (uintptr_t)t.buf); /* on a fresh connection */
    tent_destroy_engine(e);
    target_stop(&t);
}

/* When every slot holds a working peer inside a frame (it moved data, and
 * its frame keeps the floor rate), a newcomer is refused (and counted);
 * once those frames time out, peers get in again. */
static void test_busy_server_refuses_newcomer(void **state)
{
    (void)state;
    struct target t;
    target_start(&t, (const char *const[]){"rpc_max_connections", "4",
                                           "rpc_frame_timeout_ms", "5000",
                                           "rpc_frame_min_rate", "1", NULL});
    int fds[4];
    uint8_t h[TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN + 10];
    struct tcp_wire_access acc = {0};
    assert_int_equal(e2e_desc_key(t.host, t.port, (uintptr_t)t.buf, acc.key),
                     0);
    /* the descriptor's connection gone first: else the fourth peer below
     * can find it open on a loaded machine and evict it for its slot */
    long gone = e2e_now_ms() + 3000;
    while (target_stats(&t).open > 0 && e2e_now_ms() < gone)
        poll(NULL, 0, 5);
    assert_int_equal(target_stats(&t).open, 0);
    for (int i = 0; i < 4; i++) {
        fds[i] = connect_to(&t);
        /* a read that moves data: a working peer */
        assert_int_equal(
            raw_rw_acc(fds[i], TCP_WIRE_READ, (uintptr_t)t.buf, 64, &acc), 0);
        /* then a write of 4 KiB of which 10 bytes come: inside a frame,
         * above 1 byte a second for longer than its deadline */
        tent_wire_encode_hdr(h, TCP_WIRE_WRITE, 1, TCP_WIRE_RW_LEN + 4096);
        tcp_wire_encode_rw(h + TENT_WIRE_HDR_LEN, (uintptr_t)t.buf, 4096,
                            &acc);
        memcpy(h + TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN, t.buf, 10);
        send_bytes(fds[i], h, sizeof(h));
    }
    long end = e2e_now_ms() + 3000;
    while (target_stats(&t).busy < 4 && e2e_now_ms() < end)
        poll(NULL, 0, 10);
    assert_int_equal(target_stats(&t).busy, 4);
    /* refused long before the frames' 5 s deadline, even when the machine
     * is loaded */
    int late = connect_to(&t);
    assert_true(ms_until_closed(late, 3000) >= 0);
    close(late);
    struct tent_rpc_stats st = target_stats(&t);
    assert_int_equal(st.refused, 1);
    assert_int_equal(st.refused_no_fd, 0);
    assert_int_equal(st.evicted, 0);
    /* the frames die at their deadline; then peers are served */
    for (int i = 0; i < 4; i++) {
        long c = ms_until_closed(fds[i], 8000);
        assert_true(c >= 0);
        close(fds[i]);
    }
    roundtrip_to(t.name, (uintptr_t)t.buf);
    target_stop(&t);
}

/* Sends notifications from e to seg until one is refused; returns how many
 * were accepted (at most limit). */
static int notify_until_refused(tent_engine_t e, tent_segment_id_t seg,
                                int limit, int *refusal)
{
    char msg[4000];
    memset(msg, 'x', sizeof(msg) - 1);
    msg[sizeof(msg) - 1] = 0;
    for (int i = 0; i < limit; i++) {
        int rc = tent_send_notifs(e, seg, "n", msg);
        if (rc) {
            *refusal = rc;
            return i;
        }
    }
    *refusal = 0;
    return limit;
}

/* The receive queue is bounded per sender and in total, in bytes; beyond
 * that the sender gets TENT_EBUSY and the receiver counts the drop.  Each
 * record carries the connection's address beside the declared name. */
static void test_notification_queue_bounded(void **state)
{
    (void)state;
    char per[32], total[32];
    size_t rec = sizeof(struct tent_notifi_record);
    snprintf(per, sizeof(per), "%zu", 10 * rec);
    snprintf(total, sizeof(total), "%zu", 25 * rec);
    struct target t;
    target_start(&t, (const char *const[]){"notify_max_queued_bytes_per_sender",
                                           per, "notify_max_queued_bytes",
                                           total, NULL});
    tent_engine_t s[3];
    tent_segment_id_t seg[3];
    for (int i = 0; i < 3; i++) {
        s[i] = tent_create_engine();
        assert_non_null(s[i]);
        assert_int_equal(tent_open_segment(s[i], &seg[i], t.name), 0);
    }
    int refusal;
    assert_int_equal(notify_until_refused(s[0], seg[0], 100, &refusal), 10);
    assert_int_equal(refusal, TENT_EBUSY);
    assert_non_null(strstr(tent_last_error(), "refused the notification"));
    assert_int_equal(notify_until_refused(s[1], seg[1], 100, &refusal), 10);
    assert_int_equal(refusal, TENT_EBUSY);
    assert_int_equal(notify_until_refused(s[2], seg[2], 100, &refusal), 5);
    assert_int_equal(refusal, TENT_EBUSY);
    struct tent_engine *te = t.e;
    assert_int_equal(atomic_load(&te->notif_dropped), 3);

    /* a raw client declaring someone else's name: its address is kept */
    int fd = connect_to(&t);
    struct sockaddr_in me;
    socklen_t ml = sizeof(me);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&me, &ml), 0);
    char mine[64];
    snprintf(mine, sizeof(mine), "127.0.0.1:%u", (unsigned)ntohs(me.sin_port));
    tent_notifi_info ni;
    struct tent_notif_peer *peers = NULL;
    assert_int_equal(tent_engine_recv_notifs(te, &ni, &peers), 0);
    assert_int_equal(ni.num_records, 25);
    for (int i = 0; i < ni.num_records; i++)
        assert_true(strncmp(peers[i].addr, "127.0.0.1:", 10) == 0);
    free(peers);
    tent_free_notifs(&ni);
    uint8_t frame[TENT_WIRE_HDR_LEN + TENT_WIRE_MAX_NOTIFY];
    int bl = tent_wire_encode_notify(frame + TENT_WIRE_HDR_LEN, "spoof", "hi",
                                     "someone-else");
    assert_true(bl > 0);
    tent_wire_encode_hdr(frame, TENT_WIRE_NOTIFY, 5, (uint32_t)bl);
    send_bytes(fd, frame, TENT_WIRE_HDR_LEN + (size_t)bl);
    struct tent_wire_hdr hdr;
    assert_int_equal(read_answer(fd, &hdr), 0);
    close(fd);
    assert_int_equal(tent_engine_recv_notifs(te, &ni, &peers), 0);
    assert_int_equal(ni.num_records, 1);
    assert_string_equal(ni.records[0].name, "spoof");
    assert_string_equal(peers[0].addr, mine);
    free(peers);
    tent_free_notifs(&ni);

    /* taken: the bounds start again */
    assert_int_equal(notify_until_refused(s[0], seg[0], 3, &refusal), 3);
    for (int i = 0; i < 3; i++)
        tent_destroy_engine(s[i]);
    target_stop(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_frames_drop_only_their_connection),
        cmocka_unit_test(test_server_enforces_bounds_and_permissions),
        cmocka_unit_test(test_back_to_back_requests_after_large_bodies),
        cmocka_unit_test(test_wrong_key_refused_as_unregistered),
        cmocka_unit_test(test_reregistration_gets_a_new_key),
        cmocka_unit_test(test_bad_descriptor_refused_by_initiator),
        cmocka_unit_test(test_idle_connections_cannot_lock_peers_out),
        cmocka_unit_test(test_slow_frame_dropped_at_deadline),
        cmocka_unit_test(test_idle_connection_closed_after_timeout),
        cmocka_unit_test(test_busy_server_refuses_newcomer),
        cmocka_unit_test(test_notification_queue_bounded),
        cmocka_unit_test(test_fence_cuts_off_a_connection),
    };
    return cmocka_run_group_tests_name("e2e_rpc_robustness", tests, group_setup,
                                       group_teardown);
}
