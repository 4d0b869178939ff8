/* tcp transport: the state machine that moves one window of slices on one
 * connection.  Sockets are non-blocking; every wait has a deadline:
 * timeout_ms for sending the whole window, then timeout_ms for each answer,
 * however slowly its bytes trickle in; with stall_ms set, also no more than
 * stall_ms without a byte moving. */
#include "transport/tcp/tcp_conn.h"

#include "common/clock.h"
#include "common/error.h"
#include "rpc/rpc.h"
#include "tent/transfer_engine.h"
#include "transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

struct tcp_conn *tcp_conn_new(void)
{
    struct tcp_conn *c = calloc(1, sizeof(*c));
    if (c) {
        c->fd = -1;
        c->nb = (struct tent_net_inbuf){.b = c->inb, .cap = sizeof(c->inb)};
    }
    return c;
}

void tcp_conn_close(struct tcp_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->nb.pos = c->nb.len = 0; /* nothing carries over connections */
}

void tcp_conn_abort(struct tcp_conn *c)
{
    if (c->fd >= 0) {
        /* a reset goes out at once, even ahead of unsent bytes */
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    tcp_conn_close(c);
}

/* Between windows nothing is due from the server, so anything readable
 * means it closed the connection (its idle timeout, or an eviction). */
bool tcp_conn_closed_while_idle(struct tcp_conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) > 0;
}

int tcp_conn_open(struct tcp_conn *c, const struct tent_auth *auth,
                  const char *ident, const char *host, uint16_t port,
                  const char *src, const char *cc, int timeout_ms, int *native)
{
    int fd;
    int rc = tent_rpc_open(auth, ident, host, port, src, timeout_ms, &fd);
    if (rc) {
        *native = errno;
        return rc;
    }
    tent_rpc_tune_loopback(fd, cc);
    uint64_t token = 0;
    while (token == 0)
        if (getrandom(&token, sizeof(token), 0) != (ssize_t)sizeof(token))
            token = (tent_now_ns() << 16) ^ (uint64_t)(uintptr_t)c;
    c->token = token;
    c->hello_due = true;
    c->hello_wait = false;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        *native = errno;
        close(fd);
        return tent_set_error(TENT_EPEER, "tcp: fcntl(O_NONBLOCK) failed: %s",
                              strerror(*native));
    }
    c->fd = fd;
    c->nb.pos = c->nb.len = 0;
    c->sock_prio = 0; /* a new socket's */
    c->pace = 0;
    return TENT_OK;
}

/* The SO_PRIORITY a window of class prio (TENT_PRIO_*) goes out with:
 * Linux's TC_PRIO_INTERACTIVE for HIGH, TC_PRIO_BESTEFFORT for MEDIUM,
 * TC_PRIO_BULK for LOW (pfifo_fast's bands 0, 1 and 2). */
static int sock_prio_of(int prio)
{
    switch (prio) {
    case TENT_PRIO_HIGH:
        return 6; /* TC_PRIO_INTERACTIVE */
    case TENT_PRIO_LOW:
        return 2; /* TC_PRIO_BULK */
    default:
        return 0; /* TC_PRIO_BESTEFFORT */
    }
}

/* A socket that refuses a priority keeps its own: the window goes anyway,
 * and the attempt is not repeated for that priority. */
static void mark_window(struct tcp_conn *c, int prio)
{
    int p = sock_prio_of(prio);
    if (c->fd < 0 || p == c->sock_prio)
        return;
    (void)setsockopt(c->fd, SOL_SOCKET, SO_PRIORITY, &p, sizeof(p));
    c->sock_prio = p;
}

/* The kernel paces the socket's packets at pace bytes/s (0: as fast as
 * congestion control lets it).  A socket that refuses goes unpaced, and
 * the attempt is not repeated for that rate. */
static void pace_window(struct tcp_conn *c, uint64_t pace)
{
    if (c->fd < 0 || pace == c->pace)
        return;
    unsigned long v = pace ? (unsigned long)pace : ~0UL;
    (void)setsockopt(c->fd, SOL_SOCKET, SO_MAX_PACING_RATE, &v, sizeof(v));
    c->pace = pace;
}

static void note_progress(struct tcp_conn *c)
{
    long long now = tent_now_ms();
    c->progress_ms = now;
    if (c->path_progress_ms)
        atomic_store_explicit(c->path_progress_ms, now, memory_order_relaxed);
}

void tcp_conn_window(struct tcp_conn *c, struct slice **w, int n,
                     int timeout_ms, uint64_t pace)
{
    int k = 0;
    if (c->mark_prio && n > 0)
        mark_window(c, w[0]->prio);
    pace_window(c, pace);
    if (c->hello_due) {
        tent_wire_encode_hdr(c->hello, TCP_WIRE_HELLO, TCP_HELLO_SEQ,
                             TCP_WIRE_TOKEN_LEN);
        tcp_wire_encode_token(c->hello + TENT_WIRE_HDR_LEN, c->token);
        c->iov[k].iov_base = c->hello;
        c->iov[k++].iov_len = sizeof(c->hello);
        c->hello_due = false;
        c->hello_wait = true;
    }
    c->wbytes = 0;
    for (int i = 0; i < n; i++) {
        struct slice *s = w[i];
        bool wr = s->opcode == OPCODE_WRITE;
        c->w[i] = s;
        tent_wire_encode_hdr(c->hdrs[i], wr ? TCP_WIRE_WRITE : TCP_WIRE_READ,
                             (uint32_t)i, TCP_WIRE_RW_LEN + (wr ? s->len : 0));
        memcpy(c->acc.key, s->key, sizeof(c->acc.key));
        tcp_wire_encode_rw(c->hdrs[i] + TENT_WIRE_HDR_LEN, s->remote, s->len,
                           &c->acc);
        c->first_iov[i] = k;
        c->iov[k].iov_base = c->hdrs[i];
        c->iov[k++].iov_len = sizeof(c->hdrs[i]);
        if (wr) {
            c->iov[k].iov_base = s->local;
            c->iov[k++].iov_len = s->len;
            c->wbytes += s->len;
        }
    }
    c->n = n;
    c->iov_at = 0;
    c->iov_n = k;
    c->ri = 0;
    c->rh_got = 0;
    c->rdata = 0;
    c->rdata_len = 0;
    c->deadline = tent_now_ms() + timeout_ms;
    c->progress_ms = tent_now_ms();
}

bool tcp_conn_unsent(const struct tcp_conn *c, int i)
{
    int f = c->first_iov[i];
    return c->iov_at < f ||
           (c->iov_at == f && c->iov[f].iov_base == (void *)c->hdrs[i]);
}

/* The answer to the HELLO, whole in rh: a bare success. */
static int hello_answer(struct tcp_conn *c)
{
    struct tent_wire_hdr hdr;
    int32_t st = 0;
    int rc = tent_wire_decode_hdr(c->rh, TENT_WIRE_HDR_LEN, &hdr);
    if (!rc && (hdr.type != TENT_WIRE_RESP || hdr.seq != TCP_HELLO_SEQ ||
                hdr.len != TENT_WIRE_RESP_LEN))
        rc = tent_set_error(TENT_EPROTO,
                            "tcp: unexpected answer type %u seq %u to the "
                            "connection's hello",
                            hdr.type, hdr.seq);
    if (!rc)
        rc = tent_wire_decode_resp(c->rh + TENT_WIRE_HDR_LEN,
                                   TENT_WIRE_RESP_LEN, &st);
    if (!rc && st)
        rc = tent_set_error(TENT_EPROTO,
                            "tcp: the peer refused the "
                            "connection's hello: %s",
                            tent_strerror(st));
    return rc;
}

/* Parses the header of answer ri once it is whole; the data it carries
 * must be what the slice asked for. */
static int answer_header(struct tcp_conn *c)
{
    struct slice *s = c->w[c->ri];
    struct tent_wire_hdr hdr;
    int rc = tent_wire_decode_hdr(c->rh, TENT_WIRE_HDR_LEN, &hdr);
    if (!rc && (hdr.type != TENT_WIRE_RESP || hdr.seq != (uint32_t)c->ri ||
                hdr.len < TENT_WIRE_RESP_LEN))
        rc =
            tent_set_error(TENT_EPROTO, "tcp: unexpected answer type %u seq %u",
                           hdr.type, hdr.seq);
    if (!rc)
        rc = tent_wire_decode_resp(c->rh + TENT_WIRE_HDR_LEN,
                                   TENT_WIRE_RESP_LEN, &c->status[c->ri]);
    if (rc)
        return rc;
    uint32_t data = hdr.len - TENT_WIRE_RESP_LEN;
    bool rd_ok = s->opcode == OPCODE_READ && c->status[c->ri] == 0;
    if (data != (rd_ok ? s->len : 0))
        return tent_set_error(TENT_EPROTO,
                              "tcp: answer carries %u bytes, expected %u", data,
                              rd_ok ? s->len : 0);
    c->rdata_len = data;
    return TENT_OK;
}

/* A socket call's failure in TENT's terms. */
static int io_fail(int neg, const char *what, const char *addr, int *native)
{
    *native = -neg;
    if (neg == -ECONNRESET)
        return tent_set_error(TENT_EPEER, "tcp: peer %s closed the connection",
                              addr);
    return tent_set_error(TENT_EPEER, "tcp: %s %s failed: %s", what, addr,
                          strerror(-neg));
}

/* Sends what the socket takes of the window's frames: 0 when all of them
 * are out (each answer now gets timeout_ms), POLLOUT when the socket is
 * full, or a negative TENT_E* code. */
static int send_window(struct tcp_conn *c, const char *addr, int timeout_ms,
                       int *native)
{
    if (c->iov_at >= c->iov_n)
        return 0;
    int at = c->iov_at;
    size_t left = c->iov[at].iov_len;
    int r = tent_net_sendv_some(c->fd, c->iov, c->iov_n, &c->iov_at);
    if (c->iov_at != at || c->iov[at].iov_len != left)
        note_progress(c);
    if (r == -EAGAIN)
        return POLLOUT;
    if (r)
        return io_fail(r, "send to", addr, native);
    c->deadline = tent_now_ms() + timeout_ms;
    return 0;
}

/* Where one read of an answer's bytes leaves answer ri. */
enum answer_read {
    ANSWER_MORE,   /* bytes of it are still due: read on */
    ANSWER_WHOLE,  /* it is all in */
    ANSWER_WAIT,   /* the socket has nothing now */
    ANSWER_FAILED, /* the connection is done for (*rc says why) */
};

/* A read that moved no byte: r is read_some's result, -EAGAIN or a
 * negative errno (never 0: every read asks for at least one byte). */
static enum answer_read read_stopped(long r, const char *addr, int *native,
                                     int *rc)
{
    if (r == -EAGAIN)
        return ANSWER_WAIT;
    if (r < 0) {
        *rc = io_fail((int)r, "receive from", addr, native);
        return ANSWER_FAILED;
    }
    return ANSWER_WHOLE;
}

/* Reads bytes of answer ri's header; a whole header is checked, and the
 * HELLO's answer, which comes ahead of the window's, consumed. */
static enum answer_read read_answer_header(struct tcp_conn *c, const char *addr,
                                           int *native, int *rc)
{
    long r = tent_net_inbuf_read_some(c->fd, &c->nb, c->rh + c->rh_got,
                                      sizeof(c->rh) - c->rh_got, SIZE_MAX);
    if (r <= 0)
        return read_stopped(r, addr, native, rc);
    note_progress(c);
    c->rh_got += (size_t)r;
    if (c->rh_got < sizeof(c->rh))
        return ANSWER_MORE;
    if (c->hello_wait) {
        if ((*rc = hello_answer(c)))
            return ANSWER_FAILED;
        c->hello_wait = false;
        c->rh_got = 0;
        return ANSWER_MORE;
    }
    if ((*rc = answer_header(c)))
        return ANSWER_FAILED;
    return c->rdata_len ? ANSWER_MORE : ANSWER_WHOLE;
}

/* Reads bytes of the data answer ri carries, into its slice's buffer. */
static enum answer_read read_answer_data(struct tcp_conn *c, const char *addr,
                                         int *native, int *rc)
{
    struct slice *s = c->w[c->ri];
    long r = tent_net_inbuf_read_some(c->fd, &c->nb, s->local + c->rdata,
                                      c->rdata_len - c->rdata, DIRECT_MIN);
    if (r <= 0)
        return read_stopped(r, addr, native, rc);
    note_progress(c);
    c->rdata += (uint32_t)r;
    return c->rdata < c->rdata_len ? ANSWER_MORE : ANSWER_WHOLE;
}

/* Receives the answers the socket has: 0 when every answer is in, POLLIN
 * when it has no more now, or a negative TENT_E* code. */
static int recv_answers(struct tcp_conn *c, const char *addr, int timeout_ms,
                        int *native)
{
    while (c->ri < c->n) {
        int rc = 0;
        enum answer_read a = c->rh_got < sizeof(c->rh)
                                 ? read_answer_header(c, addr, native, &rc)
                                 : read_answer_data(c, addr, native, &rc);
        if (a == ANSWER_FAILED)
            return rc;
        if (a == ANSWER_WAIT)
            return POLLIN;
        if (a == ANSWER_MORE)
            continue;
        /* answer ri is whole; the next one gets timeout_ms */
        c->ri++;
        c->rh_got = 0;
        c->rdata = 0;
        c->rdata_len = 0;
        c->deadline = tent_now_ms() + timeout_ms;
    }
    return 0;
}

/* When a byte last moved on this connection or, if it has one, its path. */
static long long last_progress(const struct tcp_conn *c)
{
    long long last = c->progress_ms;
    if (c->path_progress_ms) {
        long long p =
            atomic_load_explicit(c->path_progress_ms, memory_order_relaxed);
        if (p > last)
            last = p;
    }
    return last;
}

/* Fails a window waiting (want) past its deadline or, with stall_ms, for
 * stall_ms without a byte moving on the path; else *until is when the wait
 * for want must end. */
static int check_deadlines(struct tcp_conn *c, const char *addr, short want,
                           int timeout_ms, long long now, long long *until,
                           int *native)
{
    if (now >= c->deadline) {
        *native = ETIMEDOUT;
        return tent_set_error(TENT_ETIMEDOUT,
                              "tcp: peer %s: no %s within %d ms", addr,
                              want == POLLOUT ? "progress sending the "
                                                "window"
                                              : "answer",
                              timeout_ms);
    }
    *until = c->deadline;
    if (c->stall_ms <= 0)
        return TENT_OK;
    long long last = last_progress(c);
    if (now - last >= c->stall_ms) {
        *native = ETIMEDOUT;
        return tent_set_error(TENT_ETIMEDOUT,
                              "tcp: peer %s: no byte moved on the "
                              "path for %d ms",
                              addr, c->stall_ms);
    }
    if (last + c->stall_ms < *until)
        *until = last + c->stall_ms;
    return TENT_OK;
}

/* Waits up to left ms for the socket to be ready for want. */
static int wait_ready(struct tcp_conn *c, short want, long long left,
                      int *native)
{
    struct pollfd pf = {.fd = c->fd, .events = want};
    if (poll(&pf, 1, left > INT_MAX ? INT_MAX : (int)left) < 0 &&
        errno != EINTR) {
        *native = errno;
        return tent_set_error(TENT_EPEER, "tcp: poll failed: %s",
                              strerror(errno));
    }
    return TENT_OK;
}

/* A window that just finished sending this much write data has no answer
 * yet (the target first takes the data in): the step waits for one before
 * it reads, not after a read that finds nothing. */
#define ANSWER_LATER_MIN 65536

int tcp_conn_step(struct tcp_conn *c, const char *addr, bool block,
                  int timeout_ms, int *native)
{
    *native = 0;
    for (;;) {
        bool sending = c->iov_at < c->iov_n;
        int want = send_window(c, addr, timeout_ms, native);
        if (want == 0 && sending && c->wbytes >= ANSWER_LATER_MIN)
            want = POLLIN;
        else if (want == 0)
            want = recv_answers(c, addr, timeout_ms, native);
        if (want < 0)
            return want;
        if (want == 0)
            return 1;
        long long now = tent_now_ms();
        long long until = 0;
        int rc = check_deadlines(c, addr, (short)want, timeout_ms, now, &until,
                                 native);
        if (rc)
            return rc;
        if (!block)
            return 0;
        if ((rc = wait_ready(c, (short)want, until - now, native)))
            return rc;
    }
}
