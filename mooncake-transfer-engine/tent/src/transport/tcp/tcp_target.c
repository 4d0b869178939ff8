/* tcp transport, target half: the READ and WRITE frames of the engine's RPC
 * server (tcp_wire.h), installed into the server's frame table at install
 * with the HELLO and FENCE frames of tcp_fence.c.
 *
 * A request is checked against the local registrations through the env's
 * pin_local (bounds, the registration's access key the request carries, the
 * permission it was registered with, served by tcp),
 * which keeps the buffer pinned for the duration of the copy.  An
 * unregister meanwhile aborts the connection (the copy fails, the peer's
 * task with it) and waits for the unpin, so the memory is never written or
 * read after the unregister returns.
 *
 * The copies between the socket and registered memory are hidden from TSan
 * (common/tsan.h): what orders a WRITE served here against a later READ of
 * the same bytes on another connection is the initiator, in another
 * process. */
#include "common/error.h"
#include "common/log.h"
#include "common/tsan.h"
#include "transport/tcp/tcp.h"

_Static_assert(TCP_WIRE_KEY_LEN == TENT_BUF_KEY_LEN,
               "a request carries a registration's key whole");

static void abort_conn(void *arg)
{
    tent_rpc_conn_abort(arg);
}

/* A request addressed to another incarnation of this engine (an initiator
 * still holding the descriptor of a process that used this address before)
 * is refused before any memory is looked at.  0 names none. */
static int check_access(const struct tent_xport_env *env,
                        const struct tcp_wire_access *acc)
{
    return acc->incarnation && acc->incarnation != env->incarnation
               ? TENT_ESTALE
               : TENT_OK;
}

static struct tent_pin pin_for(struct tent_rpc_conn *c)
{
    return (struct tent_pin){
        .peer = tent_rpc_conn_peer(c), .abort = abort_conn, .arg = c};
}

static int serve_read(void *ctx, struct tent_rpc_conn *c,
                      const struct tent_wire_hdr *h)
{
    const struct tent_xport_env *env = ctx;
    uint8_t body[TCP_WIRE_RW_LEN];
    struct tcp_wire_rw rw;
    if (h->len != TCP_WIRE_RW_LEN ||
        tent_rpc_conn_recv(c, body, sizeof(body)) ||
        tcp_wire_decode_rw(body, sizeof(body), &rw))
        return -1;
    struct tent_pin pin = pin_for(c);
    int st = check_access(env, &rw.acc);
    if (!st)
        st = env->pin_local(env->ctx, TRANSPORT_TCP, rw.addr, rw.length, false,
                            rw.acc.key, &pin);
    if (st)
        return tent_rpc_conn_send_resp(c, h->seq, st, NULL, 0);
    TENT_USER_IO_BEGIN();
    int rc = tent_rpc_conn_send_resp(
        c, h->seq, 0, (const void *)(uintptr_t)rw.addr, (uint32_t)rw.length);
    TENT_USER_IO_END();
    env->unpin_local(env->ctx, &pin);
    return rc;
}

static int serve_write(void *ctx, struct tent_rpc_conn *c,
                       const struct tent_wire_hdr *h)
{
    const struct tent_xport_env *env = ctx;
    uint8_t body[TCP_WIRE_RW_LEN];
    struct tcp_wire_rw rw;
    if (h->len < TCP_WIRE_RW_LEN || tent_rpc_conn_recv(c, body, sizeof(body)) ||
        tcp_wire_decode_rw(body, sizeof(body), &rw) ||
        rw.length != h->len - TCP_WIRE_RW_LEN)
        return -1;
    struct tent_pin pin = pin_for(c);
    int st = check_access(env, &rw.acc);
    if (!st)
        st = env->pin_local(env->ctx, TRANSPORT_TCP, rw.addr, rw.length, true,
                            rw.acc.key, &pin);
    if (st) {
        if (tent_rpc_conn_drain(c, rw.length))
            return -1;
        return tent_rpc_conn_send_resp(c, h->seq, st, NULL, 0);
    }
    TENT_USER_IO_BEGIN();
    int rc = tent_rpc_conn_land(c, (void *)(uintptr_t)rw.addr, rw.length);
    TENT_USER_IO_END();
    env->unpin_local(env->ctx, &pin);
    if (rc)
        return -1;
    return tent_rpc_conn_send_resp(c, h->seq, 0, NULL, 0);
}

int tcp_frame_measure(void *ctx, const struct tent_wire_hdr *h,
                      const uint8_t *body, size_t n, uint64_t *data)
{
    (void)ctx;
    return tcp_wire_frame_data(h, body, n, data);
}

/* READ and WRITE move a peer's data (work; a READ's size is in its
 * prefix); HELLO and FENCE do not. */
static const struct {
    uint8_t type;
    tent_rpc_frame_fn serve;
    uint32_t prefix;
    bool work;
} frames[] = {
    {TCP_WIRE_READ, serve_read, TCP_WIRE_RW_LEN, true},
    {TCP_WIRE_WRITE, serve_write, TCP_WIRE_RW_LEN, true},
    {TCP_WIRE_HELLO, tcp_serve_hello, 0, false},
    {TCP_WIRE_FENCE, tcp_serve_fence, 0, false},
};
#define NFRAMES (sizeof(frames) / sizeof(frames[0]))

int tcp_target_start(const struct tent_xport_env *env)
{
    for (size_t i = 0; i < NFRAMES; i++) {
        struct tent_rpc_frame_ops ops = {
            .owner = "tcp",
            .serve = frames[i].serve,
            .measure = tcp_frame_measure,
            .prefix = frames[i].prefix,
            .work = frames[i].work,
            .ctx = (void *)env,
        };
        int rc = env->serve_frames(env->ctx, frames[i].type, &ops);
        if (rc) {
            while (i-- > 0)
                env->serve_frames(env->ctx, frames[i].type, NULL);
            return rc;
        }
    }
    return TENT_OK;
}

void tcp_target_stop(const struct tent_xport_env *env)
{
    for (size_t i = NFRAMES; i-- > 0;)
        env->serve_frames(env->ctx, frames[i].type, NULL);
}
