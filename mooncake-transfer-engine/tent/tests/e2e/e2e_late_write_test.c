/* A WRITE its initiator gave up on never lands (issue 43).
 *
 * An initiator whose write timed out against a peer that does not run (a
 * stopped or descheduled process) aborts its connection and reports the
 * task FAILED; the frame may already sit in the peer's socket buffer.  Once
 * the peer runs again its server must refuse that frame, not apply it over
 * whatever the application wrote there since.  A raw client plays the
 * initiator against a target engine in a child process: the frame is queued
 * while the peer is stopped (whole, or after the peer's server began it),
 * the client hangs up (FIN) or resets (RST), the peer resumes; its buffer
 * must be as before, except bytes the server took before the stop. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
// clang-format on

#include "e2e_peer.h"
#include "rpc/rpc.h"
#include "rpc/wire.h"
#include "transport/tcp/tcp_wire.h"
#include "tent/transfer_engine.h"

#define LEN     65536u
#define EARLY   4096u /* of the body sent before the stop */
#define WAIT_MS 10000

static struct e2e_peer g_peer;

static void peer_state(char want)
{
    char path[64], st[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)g_peer.pid);
    for (long end = e2e_now_ms() + WAIT_MS; e2e_now_ms() < end;) {
        FILE *fp = fopen(path, "r");
        size_t n = fp ? fread(st, 1, sizeof(st) - 1, fp) : 0;
        if (fp)
            fclose(fp);
        st[n] = 0;
        const char *p = strrchr(st, ')');
        if (p && p[1] == ' ' && ((want == 'T') == (p[2] == 'T')))
            return;
        usleep(1000);
    }
    fail_msg("peer %ld never reached state %c", (long)g_peer.pid, want);
}

static int connect_peer(void)
{
    const char *colon = strrchr(g_peer.name, ':');
    assert_non_null(colon);
    char host[64];
    snprintf(host, sizeof(host), "%.*s", (int)(colon - g_peer.name),
             g_peer.name);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)atoi(colon + 1))};
    assert_int_equal(inet_pton(AF_INET, host, &a.sin_addr), 1);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* What entitles a raw frame to the peer's rw buffer: its access key from
 * the descriptor (incarnation 0 names none). */
static struct tcp_wire_access rw_access(void)
{
    const char *colon = strrchr(g_peer.name, ':');
    char host[64];
    snprintf(host, sizeof(host), "%.*s", (int)(colon - g_peer.name),
             g_peer.name);
    struct tcp_wire_access acc = {0};
    assert_int_equal(e2e_desc_key(host, (uint16_t)atoi(colon + 1),
                                  g_peer.rw_base, acc.key),
                     0);
    return acc;
}

static void send_all(int fd, const uint8_t *b, size_t n)
{
    while (n) {
        ssize_t r = send(fd, b, n, MSG_NOSIGNAL);
        assert_true(r > 0);
        b += r;
        n -= (size_t)r;
    }
}

/* The initiator gives up: a reset, or a plain close. */
static void give_up(int fd, bool reset)
{
    if (reset) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        assert_int_equal(
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
    }
    close(fd);
}

/* Waits until the peer's server has closed every connection beyond base:
 * by then it has dealt with the abandoned frame one way or the other. */
static void settle(int base)
{
    struct tent_rpc_stats st;
    for (long end = e2e_now_ms() + WAIT_MS; e2e_now_ms() < end;) {
        assert_int_equal(e2e_peer_rpc_stats(&g_peer, &st), 0);
        if (st.open <= base)
            return;
        usleep(2000);
    }
    fail_msg("the peer still holds %d connection(s), %d before", st.open,
             base);
}

static void late_write(uint64_t off, bool begun, bool reset)
{
    uint64_t before = e2e_peer_hash(&g_peer, false, off, LEN);
    uint64_t tail_before = e2e_peer_hash(&g_peer, false, off + EARLY,
                                         LEN - EARLY);
    struct tent_rpc_stats st;
    assert_int_equal(e2e_peer_rpc_stats(&g_peer, &st), 0);
    int base = st.open;

    static uint8_t frame[TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN + LEN];
    tent_wire_encode_hdr(frame, TCP_WIRE_WRITE, 9, TCP_WIRE_RW_LEN + LEN);
    struct tcp_wire_access acc = rw_access();
    tcp_wire_encode_rw(frame + TENT_WIRE_HDR_LEN, g_peer.rw_base + off, LEN,
                       &acc);
    uint8_t *body = frame + TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN;
    for (size_t i = 0; i < LEN; i++)
        body[i] = (uint8_t)(e2e_pattern(off + i) ^ 0xa5);
    const size_t head = TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN;

    int fd = connect_peer();
    size_t sent = 0;
    if (begun) {
        /* the peer's server takes the header and the first bytes ... */
        send_all(fd, frame, head + EARLY);
        sent = head + EARLY;
        usleep(100 * 1000);
    }
    assert_int_equal(kill(g_peer.pid, SIGSTOP), 0);
    peer_state('T');
    /* ... the rest waits in its socket buffer while it is stopped */
    send_all(fd, frame + sent, sizeof(frame) - sent);
    give_up(fd, reset);
    assert_int_equal(kill(g_peer.pid, SIGCONT), 0);
    peer_state('R');
    settle(base);
    if (begun)
        assert_int_equal(e2e_peer_hash(&g_peer, false, off + EARLY,
                                       LEN - EARLY),
                         tail_before);
    else
        assert_int_equal(e2e_peer_hash(&g_peer, false, off, LEN), before);
}

static void test_queued_frame_fin(void **state)
{
    (void)state;
    late_write(0, false, false);
}

static void test_queued_frame_rst(void **state)
{
    (void)state;
    late_write(LEN, false, true);
}

static void test_begun_frame_fin(void **state)
{
    (void)state;
    late_write(2 * LEN, true, false);
}

static void test_begun_frame_rst(void **state)
{
    (void)state;
    late_write(3 * LEN, true, true);
}

/* A frame whose client still waits lands as always. */
static void test_live_frame_lands(void **state)
{
    (void)state;
    const uint64_t off = 4 * LEN;
    static uint8_t frame[TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN + LEN];
    tent_wire_encode_hdr(frame, TCP_WIRE_WRITE, 7, TCP_WIRE_RW_LEN + LEN);
    struct tcp_wire_access acc = rw_access();
    tcp_wire_encode_rw(frame + TENT_WIRE_HDR_LEN, g_peer.rw_base + off, LEN,
                       &acc);
    uint8_t *body = frame + TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN;
    for (size_t i = 0; i < LEN; i++)
        body[i] = (uint8_t)(i * 7 + 1);
    int fd = connect_peer();
    send_all(fd, frame, sizeof(frame));
    uint8_t resp[TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN];
    size_t got = 0;
    while (got < sizeof(resp)) {
        ssize_t r = recv(fd, resp + got, sizeof(resp) - got, 0);
        assert_true(r > 0);
        got += (size_t)r;
    }
    close(fd);
    int32_t status;
    memcpy(&status, resp + TENT_WIRE_HDR_LEN, sizeof(status));
    assert_int_equal(status, 0);
    assert_int_equal(e2e_peer_hash(&g_peer, false, off, LEN),
                     e2e_fnv(body, LEN));
}

static int setup(void **state)
{
    (void)state;
    e2e_config(false, true);
    return e2e_peer_start(&g_peer, 8 * LEN, false, true);
}

static int teardown(void **state)
{
    (void)state;
    e2e_peer_quit(&g_peer);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_live_frame_lands),
        cmocka_unit_test(test_queued_frame_fin),
        cmocka_unit_test(test_queued_frame_rst),
        cmocka_unit_test(test_begun_frame_fin),
        cmocka_unit_test(test_begun_frame_rst),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
