/* The socket layer under libtent (src/rpc, the tcp transport) and mf_host's
 * libmf_smem.so: address strings, connect and listen with timeouts, and the
 * blocking send/receive loops.  Built once as the static library tent_base
 * and linked into both, so neither carries a copy of its own.
 *
 * Convention: every call returns 0 (or a count, where said) on success and
 * a negative errno value on failure, with errno left at the same value.
 * Nothing here logs or sets tent_last_error: the caller words the error in
 * its own terms (TENT_E* codes, SM_* codes).  A socket timeout
 * (SO_RCVTIMEO / SO_SNDTIMEO) is -EAGAIN; a peer that closed the
 * connection in the middle of a receive is -ECONNRESET.  A host name that
 * does not resolve is a value at or below TENT_NET_EAI_BASE (see
 * tent_net_strerror). */
#ifndef TENT_NET_NET_H
#define TENT_NET_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* getaddrinfo's code c (negative) comes back as TENT_NET_EAI_BASE + c. */
#define TENT_NET_EAI_BASE (-100000)

static inline bool tent_net_is_resolve_error(int rc)
{
    return rc <= TENT_NET_EAI_BASE;
}

/* The text of a negative result of this module (strerror or gai_strerror). */
const char *tent_net_strerror(int rc);

/* ---- "<host>:<port>" ---------------------------------------------------- */

/* Splits at the last ':'; "[v6]:port" loses its brackets.  The port is
 * decimal digits up to 65535 (0 accepted: callers that need a real port
 * check it).  -EINVAL for anything else, an empty host, or a host that
 * does not fit cap (with its NUL). */
int tent_net_split_hostport(const char *s, char *host, size_t cap,
                            uint16_t *port);
/* Whether name names an address: an IP literal ("10.0.0.2", "::1"),
 * "localhost", or one of those with a port ("10.0.0.2:15000",
 * "[::1]:15000").  Its host part goes to host; *with_port (may be NULL)
 * tells whether a port followed. */
bool tent_net_address_of(const char *name, char *host, size_t cap,
                         bool *with_port);
/* Writes "<host>:<port>", an IPv6 literal in brackets ("[::1]:5000").
 * Returns snprintf's result: the length wanted, negative on error. */
int tent_net_format_hostport(char *buf, size_t len, const char *host,
                             unsigned port);

/* ---- sockets ------------------------------------------------------------ */

/* Send and receive timeouts of a connected socket. */
void tent_net_set_timeouts(int fd, int timeout_ms);
void tent_net_set_nodelay(int fd);

/* Whether both ends of the connected socket fd are loopback addresses
 * (127.0.0.0/8, ::1, v4-mapped 127/8): a peer on this host. */
bool tent_net_is_loopback_pair(int fd);

/* When both ends of the connected TCP socket fd are loopback addresses and
 * cc is not empty, sets its congestion control to cc (TCP_CONGESTION).
 * Returns 1 when it did, 0 when fd is not loopback to loopback (or cc is
 * empty), -errno when the kernel refused. */
int tent_net_set_loopback_cc(int fd, const char *cc);

/* Connects to host:port, trying each address in turn, each bounded by
 * connect_ms.  The socket is blocking, close-on-exec, has TCP_NODELAY and
 * send/receive timeouts of io_ms.  A timed-out attempt is -ETIMEDOUT. */
int tent_net_connect(const char *host, uint16_t port, int connect_ms, int io_ms,
                     int *fd);
/* tent_net_connect from the local address src (numeric; NULL or "" = the
 * kernel's choice): the connection leaves through src's interface. */
int tent_net_connect_from(const char *host, uint16_t port, const char *src,
                          int connect_ms, int io_ms, int *out);

/* Binds and listens on host:port (0 = an ephemeral port), close-on-exec,
 * SO_REUSEADDR; nonblock makes accept never wait.  *bound is the real
 * port. */
int tent_net_listen(const char *host, uint16_t port, bool nonblock, int *fd,
                    uint16_t *bound);
/* Accepts one connection (close-on-exec, TCP_NODELAY, send/receive timeouts
 * of io_ms).  Returns the socket or a negative errno. */
int tent_net_accept(int lfd, int io_ms);

/* ---- blocking transfers ------------------------------------------------- */

/* Sends or receives exactly n bytes, retrying on EINTR.  *left (may be
 * NULL) is what was not transferred when it fails. */
int tent_net_send_all(int fd, const void *buf, size_t n, size_t *left);
int tent_net_recv_all(int fd, void *buf, size_t n, size_t *left);

/* Buffered receiving: the caller owns the storage b[cap]; pos..len is
 * what was received and not yet read.  A run of small messages costs one
 * receive call instead of one each. */
struct tent_net_inbuf {
    uint8_t *b;
    size_t cap, pos, len;
};

/* Reads exactly n bytes, from the buffer first; a remainder of at least
 * direct_min bytes is received straight into dst. */
int tent_net_inbuf_read(int fd, struct tent_net_inbuf *in, void *dst, size_t n,
                        size_t direct_min);

/* ---- non-blocking steps (a socket in O_NONBLOCK mode, or any socket:
 * the calls pass MSG_DONTWAIT) --------------------------------------------- */

/* As many sendmsg calls as the socket takes now for iov[*at..n): advances
 * *at (and the iovec it stops in).  0 when every byte is out, -EAGAIN when
 * the socket buffer is full with some left, another negative errno on
 * failure. */
int tent_net_sendv_some(int fd, struct iovec *iov, int n, int *at);
/* Up to n bytes into dst: from the buffer first, else from one receive
 * (straight into dst when n >= direct_min).  Returns the count (> 0),
 * -EAGAIN when nothing is there now, -ECONNRESET when the peer closed the
 * connection, another negative errno on failure. */
long tent_net_inbuf_read_some(int fd, struct tent_net_inbuf *in, void *dst,
                              size_t n, size_t direct_min);

/* Asked when a send times out (stalls = timeouts in a row without
 * progress): true to keep trying. */
typedef bool (*tent_net_wait_fn)(void *arg, int stalls);

/* sendmsg (with MSG_NOSIGNAL | flags, e.g. MSG_DONTWAIT) until every iovec
 * of iov[0..n) is out; consumes iov (advances bases and lengths).  wait (may
 * be NULL: a timeout fails at once) decides whether a send timeout, or a
 * full buffer under MSG_DONTWAIT, is waited out. */
int tent_net_sendv_all(int fd, struct iovec *iov, int n, int flags,
                       tent_net_wait_fn wait, void *arg);

#endif
