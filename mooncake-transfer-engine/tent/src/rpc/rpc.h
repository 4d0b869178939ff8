/* The engine's RPC server and the client calls that reach a peer's server.
 *
 * One server per engine, bound to rpc_server_hostname:rpc_server_port.  It
 * answers descriptor fetches and notifications (control plane) itself and
 * hands data frames (the tcp transport's reads and writes) to the frame
 * handlers transports install, all in the wire format of wire.h.  A connection
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
 * Frame types the server does not serve itself (the data frames READ and
 * WRITE) go to the handler a transport installed for them: the target half
 * of a transport lives in the transport's folder and reaches the connection
 * only through the calls below. */
struct tent_rpc_conn;

/* Serves one frame whose header h was read and validated.  It runs on the
 * connection's own thread with no server lock held; it may block on this
 * connection (the calls below bound every wait by the frame's deadline).
 * It must consume exactly h->len body bytes (tent_rpc_conn_recv /
 * tent_rpc_conn_drain) and answer through tent_rpc_conn_send_resp.  0
 * keeps the connection, -1 drops it (a frame that does not validate). */
typedef int (*tent_rpc_frame_fn)(void *ctx, struct tent_rpc_conn *c,
                                 const struct tent_wire_hdr *h);

/* Installs fn (with ctx) for frames of type; fn NULL removes it.  Removal
 * waits for running calls of the handler to return, so nothing calls fn
 * afterwards.  TENT_EINVAL for a type the server serves itself,
 * TENT_EEXIST when another handler holds the type. */
int tent_rpc_server_handle(struct tent_rpc_server *s, uint8_t type,
                           tent_rpc_frame_fn fn, void *ctx);

/* Receives exactly n body bytes into buf within the frame's deadline.  0,
 * or -1 when the connection must be dropped (closed, timed out, stopping). */
int tent_rpc_conn_recv(struct tent_rpc_conn *c, void *buf, size_t n);
/* Receives and discards n body bytes; 0 or -1 as tent_rpc_conn_recv. */
int tent_rpc_conn_drain(struct tent_rpc_conn *c, uint64_t n);
/* Answers frame seq with status (0 or a negative TENT_E* code) and len
 * bytes of data (a successful READ).  0 or -1. */
int tent_rpc_conn_send_resp(struct tent_rpc_conn *c, uint32_t seq,
                            int32_t status, const void *data, uint32_t len);
/* "<ip>:<port>" of the connection's client. */
const char *tent_rpc_conn_peer(const struct tent_rpc_conn *c);
/* Makes the connection's pending and next receives and sends fail at once
 * (the handler then returns -1 and the connection is dropped).  Safe from
 * any thread while the handler runs; never blocks. */
void tent_rpc_conn_abort(struct tent_rpc_conn *c);

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
    /* tcp_loopback_follow_cpu: a worker serving a large READ or WRITE from
     * loopback to loopback while more such frames are in progress than
     * half the CPUs can run side by side moves to the CPU the client sent
     * from (SO_INCOMING_CPU), and back after (rpc_server.c) */
    bool loopback_follow_cpu;
    /* transports/tcp/spin_us: a worker that finds no next bytes on its
     * connection (a next frame, the rest of one) keeps reading without
     * sleeping for this long before it waits in poll(), so that a peer's
     * next request does not pay a thread's wake-up; 0 = sleep at once.
     * Only after a frame: an idle connection costs no CPU. */
    int spin_us;
};
#define TENT_RPC_DEFAULT_MAX_CONNS 1024
#define TENT_RPC_DEFAULT_IDLE_MS   300000
#define TENT_RPC_DEFAULT_FRAME_MS  30000
#define TENT_RPC_DEFAULT_MIN_RATE  65536
#define TENT_RPC_DEFAULT_SPIN_US   50
#define TENT_RPC_MAX_SPIN_US       10000 /* below LINGER_MS */

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
/* Asks the server at host:port (from src, "" = any) to close the
 * connection token names and answer once nothing it carried can touch
 * memory any more (FENCE). */
int tent_rpc_fence(const char *host, uint16_t port, const char *src,
                   int timeout_ms, uint64_t token);

#endif
