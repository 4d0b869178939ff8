/* The socket layer (src/net): address strings, and real loopback sockets
 * for connect/listen/accept, the send/receive loops, the iovec loop's
 * bookkeeping and the timeout hook. */
#include "net/net.h"

/* cmocka needs these first. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void test_split_hostport(void **state)
{
    (void)state;
    char host[16];
    uint16_t port = 1;
    assert_int_equal(
        tent_net_split_hostport("127.0.0.1:15000", host, sizeof(host), &port),
        0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 15000);
    assert_int_equal(
        tent_net_split_hostport("[::1]:80", host, sizeof(host), &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 80);
    assert_int_equal(tent_net_split_hostport("h:0", host, sizeof(host), &port),
                     0);
    assert_int_equal(port, 0); /* callers that need a real port refuse it */
    const char *bad[] = {"",
                         "host",
                         "host:",
                         ":80",
                         "h:65536",
                         "h:8x",
                         "h:-1",
                         "h:+5",
                         "h: 5",
                         "[::1:80",
                         "[]:80",
                         "h:99999999999999999999",
                         "a-much-too-long-host:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        errno = 0;
        assert_int_equal(
            tent_net_split_hostport(bad[i], host, sizeof(host), &port),
            -EINVAL);
        assert_int_equal(errno, EINVAL);
    }
    assert_int_equal(tent_net_split_hostport(NULL, host, sizeof(host), &port),
                     -EINVAL);
}

static void test_format_hostport(void **state)
{
    (void)state;
    char buf[64];
    assert_int_equal(tent_net_format_hostport(buf, sizeof(buf), "10.0.0.1", 7),
                     10);
    assert_string_equal(buf, "10.0.0.1:7");
    tent_net_format_hostport(buf, sizeof(buf), "::1", 5000);
    assert_string_equal(buf, "[::1]:5000");
}

static void test_strerror(void **state)
{
    (void)state;
    assert_true(tent_net_is_resolve_error(TENT_NET_EAI_BASE + EAI_NONAME));
    assert_false(tent_net_is_resolve_error(-ECONNREFUSED));
    assert_string_equal(tent_net_strerror(TENT_NET_EAI_BASE + EAI_NONAME),
                        gai_strerror(EAI_NONAME));
    assert_string_equal(tent_net_strerror(-ECONNREFUSED),
                        strerror(ECONNREFUSED));
}

/* A connected pair over loopback: a = client, b = accepted. */
struct pair {
    int lfd, a, b;
    uint16_t port;
};

static void pair_open(struct pair *p, int io_ms)
{
    assert_int_equal(tent_net_listen("127.0.0.1", 0, false, &p->lfd, &p->port),
                     0);
    assert_int_not_equal(p->port, 0);
    assert_int_equal(tent_net_connect("127.0.0.1", p->port, 1000, io_ms, &p->a),
                     0);
    p->b = tent_net_accept(p->lfd, io_ms);
    assert_true(p->b >= 0);
}

static void pair_close(struct pair *p)
{
    if (p->a >= 0)
        close(p->a);
    if (p->b >= 0)
        close(p->b);
    close(p->lfd);
}

static void test_send_recv_and_close(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, 2000);
    const char msg[] = "hello over loopback";
    size_t left = 99;
    assert_int_equal(tent_net_send_all(p.a, msg, sizeof(msg), &left), 0);
    assert_int_equal(left, 0);
    char got[sizeof(msg) + 8];
    assert_int_equal(tent_net_recv_all(p.b, got, sizeof(msg), &left), 0);
    assert_memory_equal(got, msg, sizeof(msg));
    /* 4 bytes sent, 8 expected, then the sender closes: 4 outstanding */
    assert_int_equal(tent_net_send_all(p.a, "abcd", 4, NULL), 0);
    close(p.a);
    p.a = -1;
    assert_int_equal(tent_net_recv_all(p.b, got, 8, &left), -ECONNRESET);
    assert_int_equal(errno, ECONNRESET);
    assert_int_equal(left, 4);
    pair_close(&p);
}

/* Whether the kernel offers congestion control name. */
static bool cc_available(const char *name)
{
    char buf[512] = "";
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_congestion_control", "r");
    if (!f)
        return false;
    bool ok = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    for (char *t = strtok(buf, " \n"); ok && t; t = strtok(NULL, " \n"))
        if (!strcmp(t, name))
            return true;
    return false;
}

static void cc_of(int fd, char *out, size_t cap)
{
    socklen_t l = (socklen_t)cap;
    assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, out, &l), 0);
    out[cap - 1] = 0;
}

/* tent_net_set_loopback_cc: a loopback connection gets the algorithm; an
 * empty name, an unknown one and a socket that is not TCP over loopback
 * are left as they are. */
static void test_loopback_cc(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, 2000);
    char was[16], now[16];
    cc_of(p.a, was, sizeof(was));
    assert_int_equal(tent_net_set_loopback_cc(p.a, ""), 0);
    assert_int_equal(tent_net_set_loopback_cc(p.a, NULL), 0);
    cc_of(p.a, now, sizeof(now));
    assert_string_equal(now, was);
    assert_true(tent_net_set_loopback_cc(p.a, "no_such_cc") < 0);
    cc_of(p.a, now, sizeof(now));
    assert_string_equal(now, was);
    /* the other algorithm than the default, so that the change shows */
    const char *want = strcmp(was, "reno") ? "reno" : "cubic";
    int r = cc_available(want) ? tent_net_set_loopback_cc(p.b, want) : 0;
    if (r == -EPERM) {
        print_message("(%s is not allowed to this process: not set)\n", want);
    } else if (r) {
        assert_int_equal(r, 1);
        cc_of(p.b, now, sizeof(now));
        assert_string_equal(now, want);
    } else {
        print_message("(%s is not offered here: not set)\n", want);
    }
    pair_close(&p);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(tent_net_set_loopback_cc(sv[0], "reno"), 0);
    close(sv[0]);
    close(sv[1]);
}

static void test_recv_timeout(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, 50);
    char c;
    size_t left = 0;
    assert_int_equal(tent_net_recv_all(p.b, &c, 1, &left), -EAGAIN);
    assert_int_equal(left, 1);
    pair_close(&p);
}

static void test_connect_refused(void **state)
{
    (void)state;
    int lfd, fd = -1;
    uint16_t port;
    assert_int_equal(tent_net_listen("127.0.0.1", 0, false, &lfd, &port), 0);
    close(lfd); /* nobody listens there now */
    int rc = tent_net_connect("127.0.0.1", port, 1000, 1000, &fd);
    assert_int_equal(rc, -ECONNREFUSED);
    assert_int_equal(fd, -1);
}

struct reader {
    int fd;
    uint8_t *buf;
    size_t n;
    int rc;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    r->rc = tent_net_recv_all(r->fd, r->buf, r->n, NULL);
    return NULL;
}

/* More iovecs than one sendmsg takes (IOV_MAX), so the loop goes on in
 * turns: the bytes arrive whole and in order.  (A partly sent iovec is
 * covered by test_sendv_wait_hook: a blocking socket only stops early on
 * its timeout.) */
static void test_sendv_many_iovecs(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, 5000);
    enum { N = 3000, BIG = 4 << 20 };
    size_t total = 0;
    struct iovec *iov = calloc(N, sizeof(*iov));
    uint8_t *src = malloc(BIG + N * 3), *dst = malloc(BIG + N * 3);
    assert_non_null(iov);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < BIG + N * 3; i++)
        src[i] = (uint8_t)(i * 31 + 7);
    for (int i = 0; i < N; i++) {
        /* one large piece among the small ones */
        size_t len = i == N / 2 ? BIG : 3;
        iov[i] = (struct iovec){.iov_base = src + total, .iov_len = len};
        total += len;
    }
    struct reader r = {.fd = p.b, .buf = dst, .n = total};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, reader_main, &r), 0);
    assert_int_equal(tent_net_sendv_all(p.a, iov, N, 0, NULL, NULL), 0);
    pthread_join(t, NULL);
    assert_int_equal(r.rc, 0);
    assert_memory_equal(dst, src, total);
    free(iov);
    free(src);
    free(dst);
    pair_close(&p);
}

static int g_stalls;

static bool give_up_after_two(void *arg, int stalls)
{
    assert_ptr_equal(arg, &g_stalls);
    g_stalls = stalls;
    return stalls < 2;
}

/* A peer that never reads: each timed-out send asks the hook, which ends
 * it on the second stall in a row. */
static void test_sendv_wait_hook(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, 50);
    enum { BIG = 64 << 20 };
    uint8_t *src = calloc(1, BIG);
    assert_non_null(src);
    struct iovec iov = {.iov_base = src, .iov_len = BIG};
    g_stalls = 0;
    assert_int_equal(
        tent_net_sendv_all(p.a, &iov, 1, 0, give_up_after_two, &g_stalls),
        -EAGAIN);
    assert_int_equal(g_stalls, 2);
    assert_true(iov.iov_len < BIG); /* progress was accounted for */
    free(src);
    pair_close(&p);
}

/* Small reads are served from the buffer in order; a large remainder goes
 * straight to the destination; EOF is -ECONNRESET. */
static void test_inbuf(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, 2000);
    uint8_t msgs[64];
    for (int i = 0; i < 64; i++)
        msgs[i] = (uint8_t)i;
    assert_int_equal(tent_net_send_all(p.a, msgs, sizeof(msgs), NULL), 0);
    uint8_t store[256];
    struct tent_net_inbuf in = {.b = store, .cap = sizeof(store)};
    uint8_t got[8];
    for (int k = 0; k < 8; k++) {
        assert_int_equal(tent_net_inbuf_read(p.b, &in, got, 8, SIZE_MAX), 0);
        assert_memory_equal(got, msgs + 8 * k, 8);
    }
    assert_int_equal(in.pos, in.len);
    /* direct: 4 buffered bytes are not there, 1000 arrive in the socket */
    uint8_t big[1000], out[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = (uint8_t)(i ^ 0x5a);
    assert_int_equal(tent_net_send_all(p.a, big, sizeof(big), NULL), 0);
    assert_int_equal(tent_net_inbuf_read(p.b, &in, out, sizeof(out), 512), 0);
    assert_memory_equal(out, big, sizeof(big));
    assert_int_equal(in.pos, in.len);
    close(p.a);
    p.a = -1;
    assert_int_equal(tent_net_inbuf_read(p.b, &in, got, 1, SIZE_MAX),
                     -ECONNRESET);
    pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_hostport),
        cmocka_unit_test(test_format_hostport),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_send_recv_and_close),
        cmocka_unit_test(test_recv_timeout),
        cmocka_unit_test(test_loopback_cc),
        cmocka_unit_test(test_connect_refused),
        cmocka_unit_test(test_sendv_many_iovecs),
        cmocka_unit_test(test_sendv_wait_hook),
        cmocka_unit_test(test_inbuf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
