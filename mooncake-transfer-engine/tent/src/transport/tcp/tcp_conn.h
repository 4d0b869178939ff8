/* tcp transport, initiator side: one connection and the window of slices in
 * progress on it (tcp_conn.c), shared by the rail workers and the lent
 * connection of tcp_transport.c. */
#ifndef TENT_TRANSPORT_TCP_TCP_CONN_H
#define TENT_TRANSPORT_TCP_TCP_CONN_H

#include "net/net.h"
#include "sched/rails.h"
#include "transport/tcp/tcp_wire.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#define WINDOW_SLICES 64
/* Answers larger than this skip the connection's input buffer. */
#define DIRECT_MIN 16384
/* The sequence number of a connection's HELLO (windows use 0..63). */
#define TCP_HELLO_SEQ 0xffffffffu

struct tcp_sub;

/* A piece of one request (at most slice_size bytes) on its way over one
 * rail. */
struct slice {
    struct tcp_sub *sb;
    uint32_t slot;
    int opcode;
    int prio; /* TENT_PRIO_HIGH .. TENT_PRIO_LOW */
    char *local;
    uint64_t remote;
    uint32_t len;
    uint8_t key[TCP_WIRE_KEY_LEN]; /* the target registration's */
    int rail;                      /* index in the peer's rail set */
    uint32_t avoid;                /* rails it failed on (bit per rail) */
    int tries; /* new connections it was given (tcp_transport.c reroute) */
    struct tent_rail_ticket tk; /* from its rail's pick */
    uint64_t enq_ns; /* when it was queued there (priority promotion) */
    struct slice *next;
};

/* A connection and the window in progress on it. */
struct tcp_conn {
    int fd; /* non-blocking; -1 when not connected */
    struct tent_net_inbuf nb;
    uint8_t inb[65536];
    /* the window: n slices, 0 when none */
    int n;
    struct slice *w[WINDOW_SLICES];
    int32_t status[WINDOW_SLICES];
    int first_iov[WINDOW_SLICES]; /* iov index of slice i's header */
    uint8_t hdrs[WINDOW_SLICES][TENT_WIRE_HDR_LEN + TCP_WIRE_RW_LEN];
    struct iovec iov[2 * WINDOW_SLICES + 1];
    int iov_at, iov_n; /* send progress */
    uint64_t wbytes;   /* write data the window carries */
    int ri;            /* answers received whole */
    uint8_t rh[TENT_WIRE_HDR_LEN + TENT_WIRE_RESP_LEN];
    size_t rh_got;      /* bytes of answer ri's header received */
    uint32_t rdata;     /* bytes of answer ri's data received */
    uint32_t rdata_len; /* data answer ri carries (known once rh is whole) */
    long long deadline; /* ms: of the send, then of each answer */
    /* With another rail to go to, a window that moves no byte for stall_ms
     * fails early (0: only the deadlines above). */
    int stall_ms;
    long long progress_ms; /* when a byte last moved on this connection */
    /* when a byte last moved on any connection of the same path (one TCP
     * flow may wait out a retransmission while its siblings move data: the
     * path works) */
    _Atomic long long *path_progress_ms;
    /* What this connection's HELLO named it at the server (a FENCE through
     * another rail can close it there).  The HELLO goes ahead of the first
     * window (hello_due) and its answer comes first (hello_wait). */
    uint64_t token;
    bool hello_due, hello_wait;
    uint8_t hello[TENT_WIRE_HDR_LEN + TCP_WIRE_TOKEN_LEN];
    struct iovec iov_hello;
    /* Each window's class as the socket's SO_PRIORITY (mark_prio, set by
     * the owner), so that a priority-aware qdisc on the way out (pfifo_fast,
     * prio, mqprio) sends HIGH's packets ahead of LOW's queued ones;
     * sock_prio is what the socket has now. */
    bool mark_prio;
    int sock_prio;
    /* The access block of every request on this connection: the peer's
     * incarnation its rail was opened for (set by the owner); each request
     * puts its slice's key in it. */
    struct tcp_wire_access acc;
    /* The socket's SO_MAX_PACING_RATE, bytes/s (0: none): a LOW window
     * may go out paced (tcp_conn_window). */
    uint64_t pace;
};

struct tent_auth;

struct tcp_conn *tcp_conn_new(void);
void tcp_conn_close(struct tcp_conn *c);
/* Closes with a reset, for a connection whose window failed: the target
 * refuses what it still holds of it (tent_rpc_conn_land) once the reset is
 * in, which it is before the failure is reported. */
void tcp_conn_abort(struct tcp_conn *c);
/* Whether the server has closed an idle connection. */
bool tcp_conn_closed_while_idle(struct tcp_conn *c);
/* Connects to host:port from src ("" = the kernel's choice) and, with a
 * cluster secret, authenticates as ident (tent_rpc_open); non-blocking
 * from then on, with a fresh token that a HELLO ahead of the first window
 * gives the connection at the server; a loopback connection gets congestion
 * control cc (tent_rpc_tune_loopback).  On failure *native is the errno. */
int tcp_conn_open(struct tcp_conn *c, const struct tent_auth *auth,
                  const char *ident, const char *host, uint16_t port,
                  const char *src, const char *cc, int timeout_ms, int *native);
/* Puts slices w[0..n) (one class) on c as its window: the frames to send
 * and the deadline of the send; with mark_prio, the socket's priority
 * becomes the class's (tcp_conn.c: sock_prio_of).  pace: the rate (bytes/s)
 * the kernel sends the window at (SO_MAX_PACING_RATE), 0 for none. */
void tcp_conn_window(struct tcp_conn *c, struct slice **w, int n,
                     int timeout_ms, uint64_t pace);
/* Moves the window forward: sends what the socket takes, receives the
 * answers there are.  block: waits in poll() until the window is done;
 * else returns at the first EAGAIN.  1 when every answer is in, 0 when not
 * yet (non-blocking only), or a negative TENT_E* code (message set, *native
 * the errno, if any) after which the connection must be closed; answers
 * [0, c->ri) are in even then. */
int tcp_conn_step(struct tcp_conn *c, const char *addr, bool block,
                  int timeout_ms, int *native);
/* After a failed step: whether no byte of slice i's frame left this host
 * (a write that may go elsewhere without a fence). */
bool tcp_conn_unsent(const struct tcp_conn *c, int i);

#endif
