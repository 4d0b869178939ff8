/* The engine's RPC server and the client calls that reach a peer's server.
 *
 * One server per engine, bound to rpc_server_hostname:rpc_server_port.  It
 * answers descriptor fetches and notifications (control plane) itself and
 * hands every other frame type to the handler the transport that owns the
 * type installed, all in the frame format of wire.h.  A connection
 * that sends a frame that does not validate is closed; other connections are
 * not affected.
 *
 * Connections are bounded (tent_rpc_limits: frame and idle timeouts, at most
 * max_conns open).  When full, a newcomer takes the place of the connection
 * that has done the least useful work, and is refused only when every
 * connection is a working peer inside a frame (rpc_server.c gives the
 * ranking), so idle or slow clients cannot lock real peers out. */
#ifndef TENT_RPC_RPC_H
#define TENT_RPC_RPC_H

#include "net/net.h"
#include "rpc/wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tent_rpc_server;

/* What the server asks of its owner (the runtime) for the control-plane
 * frames it serves itself, called from connection threads with no server
 * lock held.  All are required. */
struct tent_rpc_handlers {
    void *ctx;
    /* The local segment's descriptor as JSON (what DESC_RESP carries);
     * malloc'd, length in *len, NULL when out of memory. */
    char *(*describe)(void *ctx, size_t *len);
    /* A notification from the peer whose segment is named from (as the
     * sender declares it); peer is the connection's address, "<ip>:<port>". */
    int (*notify)(void *ctx, const char *peer, const char *from,
                  const char *name, const char *msg);
};

/* ---- frame handlers -------------------------------------------------------
 * Frame types the server does not serve itself go to the handler the
 * transport that owns the type installed: the target half of a transport
 * lives in the transport's folder, defines its frames' bodies there, and
 * reaches the connection only through the calls below.  The server learns
 * what its bounds need of a frame (valid length, data moved) through the
 * handler's measure hook. */
struct tent_rpc_conn;

/* Serves one frame whose header h was read and validated.  It runs on the
 * connection's own thread with no server lock held; it may block on this
 * connection (the calls below bound every wait by the frame's deadline).
 * It must consume exactly h->len body bytes (tent_rpc_conn_recv /
 * tent_rpc_conn_drain) and answer through tent_rpc_conn_send_resp.  0
 * keeps the connection, -1 drops it (a frame that does not validate). */
typedef int (*tent_rpc_frame_fn)(void *ctx, struct tent_rpc_conn *c,
                                 const struct tent_wire_hdr *h);

/* Bytes of a frame's body the server reads with its header, for measure,
 * at most. */
#define TENT_RPC_MAX_PREFIX 64

/* A transport's handler of one frame type. */
struct tent_rpc_frame_ops {
    const char *owner; /* the transport's name (messages); static */
    tent_rpc_frame_fn serve;
    /* Called before serve: checks h->len for the type (0, or a negative
     * code with tent_set_error: the connection is dropped, as for a header
     * that does not decode) and sets *data to the payload bytes the frame
     * moves (in its body or its answer; 0 when none or unknown from the n
     * bytes of its body already in at body, n < prefix when the rest has
     * not arrived).  Large data frames from this host make the worker
     * follow the sender's CPU (rpc_server.c).  Pure: no I/O. */
    int (*measure)(void *ctx, const struct tent_wire_hdr *h,
                   const uint8_t *body, size_t n, uint64_t *data);
    uint32_t prefix; /* body bytes measure wants, <= TENT_RPC_MAX_PREFIX */
    /* a frame of this type that succeeds is useful work of its connection
     * (a peer moving data: the last to be replaced when the server is full) */
    bool work;
    void *ctx;
};

/* Installs ops (copied) for frames of type; ops NULL removes the handler.
 * Removal waits for running calls of the handler to return, so nothing
 * calls it afterwards.  TENT_EINVAL for a type the server serves or sends
 * itself (or 0) or ops without serve or measure or with a prefix over
 * TENT_RPC_MAX_PREFIX, TENT_EEXIST when another handler holds the type. */
int tent_rpc_server_handle(struct tent_rpc_server *s, uint8_t type,
                           const struct tent_rpc_frame_ops *ops);

/* Receives exactly n body bytes into buf within the frame's deadline.  0,
 * or -1 when the connection must be dropped (closed, timed out, stopping). */
int tent_rpc_conn_recv(struct tent_rpc_conn *c, void *buf, size_t n);
/* As tent_rpc_conn_recv, for bytes that land in memory: refuses (-1) once
 * the client has hung up or reset the connection, whatever it sent before.
 * An initiator that gives up on a frame (its deadline passed while this
 * process did not run) aborts the connection before it reports the failure,
 * so what it abandoned never lands after that report. */
int tent_rpc_conn_land(struct tent_rpc_conn *c, void *buf, size_t n);
/* Receives and discards n body bytes; 0 or -1 as tent_rpc_conn_recv. */
int tent_rpc_conn_drain(struct tent_rpc_conn *c, uint64_t n);
/* Answers frame seq with a RESP of status (0 or a negative TENT_E* code)
 * followed by len bytes of data.  0 or -1. */
int tent_rpc_conn_send_resp(struct tent_rpc_conn *c, uint32_t seq,
                            int32_t status, const void *data, uint32_t len);
/* "<ip>:<port>" of the connection's client. */
const char *tent_rpc_conn_peer(const struct tent_rpc_conn *c);
/* Makes the connection's pending and next receives and sends fail at once
 * (the handler then returns -1 and the connection is dropped).  Safe from
 * any thread while the handler runs; never blocks. */
void tent_rpc_conn_abort(struct tent_rpc_conn *c);

/* Tags: a handler names its connection with a non-zero tag, so that a
 * request on another connection can close it (a transport cutting off a
 * data connection whose writes must not land any more).
 * Tags c with tag: 0, or TENT_ESHUTDOWN when tag was closed before (the
 * server remembers the last 64 closed), and then c must be dropped. */
int tent_rpc_conn_tag(struct tent_rpc_conn *c, uint64_t tag);
/* Closes every connection but c tagged tag, remembers tag as closed, and
 * returns once they are gone (their holders closed them after the frame
 * they were in, so nothing they carried can touch memory any more): 0, or
 * TENT_ETIMEDOUT after half rpc_frame_timeout_ms (5 s at most) or when the
 * server stops. */
int tent_rpc_conn_close_tagged(struct tent_rpc_conn *c, uint64_t tag);

/* Congestion control for TCP connections between two loopback addresses:
 * config key tcp_loopback_congestion, "" for the kernel's default.  Over
 * loopback there is no network to share, yet the choice moves throughput a
 * lot: BBR paces every flow, and cubic meets spurious fast retransmits when
 * segments of one flow are reordered between CPUs' backlogs; reno has
 * neither (docs/performance.md has the figures). */
#define TENT_RPC_CC_KEY     "tcp_loopback_congestion"
#define TENT_RPC_CC_DEFAULT "reno"
#define TENT_RPC_CC_MAX     16 /* the kernel's TCP_CA_NAME_MAX, NUL included */

/* Whether the server's workers run large same-host data frames on the CPU
 * their sender used while the CPUs are crowded (config key
 * tcp_loopback_follow_cpu; rpc_server.c says when and why). */
#define TENT_RPC_FOLLOW_KEY     "tcp_loopback_follow_cpu"
#define TENT_RPC_FOLLOW_DEFAULT true

/* Checks the value cc of tcp_loopback_congestion and copies it into
 * out[TENT_RPC_CC_MAX]: TENT_OK, or TENT_ECONFIG naming the key (not a
 * name, too long). */
int tent_rpc_cc_parse(const char *cc, char *out);
/* Gives the connected socket fd congestion control cc when both its ends
 * are loopback addresses (cc "" = leave it).  Best effort: a kernel without
 * cc, or one that does not allow it to this process
 * (net.ipv4.tcp_allowed_congestion_control), leaves the default; the first
 * refusal is logged. */
void tent_rpc_tune_loopback(int fd, const char *cc);

/* Bounds on the server's connections (config keys rpc_max_connections,
 * rpc_idle_timeout_ms, rpc_frame_timeout_ms, rpc_frame_min_rate). */
struct tent_rpc_limits {
    int max_conns;        /* fewer when the fd limit cannot hold them */
    int idle_timeout_ms;  /* idle between frames this long: closed */
    int frame_timeout_ms; /* a frame must arrive whole within this */
    /* bytes per second below which a frame in progress for over a second
     * counts as slow (first to be replaced by a newcomer); 0 = no floor */
    int min_frame_rate;
    /* congestion control of connections from loopback to loopback
     * (tcp_loopback_congestion; "" = the kernel's default, which a limits
     * struct zeroed by its caller gets; NULL limits give the key's
     * default) */
    char loopback_cc[TENT_RPC_CC_MAX];
    /* tcp_loopback_follow_cpu: a worker serving a large data frame from
     * loopback to loopback while more such frames are in progress than
     * half the CPUs can run side by side moves to the CPU the client sent
     * from (SO_INCOMING_CPU), and back after (rpc_server.c) */
    bool loopback_follow_cpu;
};
#define TENT_RPC_DEFAULT_MAX_CONNS 1024
#define TENT_RPC_DEFAULT_IDLE_MS   300000
#define TENT_RPC_DEFAULT_FRAME_MS  30000
#define TENT_RPC_DEFAULT_MIN_RATE  65536

/* What the server did about its bounds, since it started. */
struct tent_rpc_stats {
    uint64_t accepted;        /* connections taken in */
    uint64_t evicted;         /* closed to make room for a newcomer */
    uint64_t evicted_working; /* of which had moved data (a peer's pool) */
    uint64_t refused;         /* newcomers refused, for either reason: */
    uint64_t refused_no_fd;   /* ... out of descriptors (EMFILE, ENFILE) */
    uint64_t idle_closed;     /* closed after idle_timeout_ms */
    uint64_t frame_timeouts;  /* closed: a frame not whole in time */
    int open;                 /* connections open now (evicted excluded) */
    int busy;      /* of which working peers inside a frame that keeps the
                    * floor rate (the ones a newcomer cannot replace) */
    int max_conns; /* the cap now: rpc_max_connections, or less when the
                    * descriptor limit is lower (lowered further for a
                    * while after accept() ran out of descriptors) */
    int workers;   /* threads serving frames (idle ones included) */
};

/* Binds host:port (0 = ephemeral) and starts serving with the handlers
 * (copied) within the limits (copied; NULL = the defaults above).
 * *bound_port is the real port. */
int tent_rpc_server_start(const struct tent_rpc_handlers *h,
                          const struct tent_rpc_limits *lim, const char *host,
                          uint16_t port, struct tent_rpc_server **out,
                          uint16_t *bound_port);
/* Also accepts on host:port (0 = ephemeral; *bound_port the real one), the
 * same frames served there: the other NICs a transport publishes.  At most
 * TENT_RPC_MAX_LISTEN addresses in all; they close when the server stops. */
#define TENT_RPC_MAX_LISTEN 17
int tent_rpc_server_listen(struct tent_rpc_server *s, const char *host,
                           uint16_t port, uint16_t *bound_port);
void tent_rpc_server_stats(struct tent_rpc_server *s,
                           struct tent_rpc_stats *out);
/* Stops accepting, closes every connection and joins every thread; after it
 * returns the server touches no engine memory.  NULL is a no-op. */
void tent_rpc_server_stop(struct tent_rpc_server *s);

/* ---- client side --------------------------------------------------------
 * The socket calls of net/net.h in TENT's error convention (TENT_E* codes
 * and a tent_last_error message). */
/* Splits "host:port" (last ':'; "[v6]:port" accepted); port 0 is refused. */
int tent_rpc_parse_addr(const char *name, char *host, size_t cap,
                        uint16_t *port);
/* Connects with a timeout; the socket has TCP_NODELAY and send/receive
 * timeouts of timeout_ms. */
int tent_rpc_connect(const char *host, uint16_t port, int timeout_ms, int *fd);
/* The same from local address src (NULL or "": the kernel's choice). */
int tent_rpc_connect_from(const char *host, uint16_t port, const char *src,
                          int timeout_ms, int *fd);
/* Full send/receive; TENT_ETIMEDOUT on a socket timeout, TENT_EPEER on a
 * closed or failed connection. */
int tent_rpc_send_all(int fd, const void *buf, size_t n);
int tent_rpc_recv_all(int fd, void *buf, size_t n);

int tent_rpc_fetch_desc(const char *host, uint16_t port, int timeout_ms,
                        struct tent_wire_desc *out);
int tent_rpc_notify(const char *host, uint16_t port, int timeout_ms,
                    const char *name, const char *msg, const char *from);
/* Sends one request frame of type with body on the connected fd and reads
 * its answer, a bare RESP (what says what it was, in errors): 0 with the
 * answer's status in *status, or a negative code. */
int tent_rpc_call_status(int fd, uint8_t type, const void *body, uint32_t len,
                         const char *what, int32_t *status);

#endif
