/* tcp transport, target half: the READ and WRITE frames of the engine's RPC
 * server, installed into the server's frame table at install.
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

_Static_assert(TENT_WIRE_KEY_LEN == TENT_BUF_KEY_LEN,
               "a request carries a registration's key whole");

static void abort_conn(void *arg)
{
    tent_rpc_conn_abort(arg);
}

/* A request addressed to another incarnation of this engine (an initiator
 * still holding the descriptor of a process that used this address before)
 * is refused before any memory is looked at.  0 names none. */
static int check_access(const struct tent_xport_env *env,
                        const struct tent_wire_access *acc)
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
    uint8_t body[TENT_WIRE_RW_LEN];
    struct tent_wire_rw rw;
    if (h->len != TENT_WIRE_RW_LEN ||
        tent_rpc_conn_recv(c, body, sizeof(body)) ||
        tent_wire_decode_rw(body, sizeof(body), &rw))
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
    uint8_t body[TENT_WIRE_RW_LEN];
    struct tent_wire_rw rw;
    if (h->len < TENT_WIRE_RW_LEN ||
        tent_rpc_conn_recv(c, body, sizeof(body)) ||
        tent_wire_decode_rw(body, sizeof(body), &rw) ||
        rw.length != h->len - TENT_WIRE_RW_LEN)
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
    int rc = tent_rpc_conn_recv(c, (void *)(uintptr_t)rw.addr, rw.length);
    TENT_USER_IO_END();
    env->unpin_local(env->ctx, &pin);
    if (rc)
        return -1;
    return tent_rpc_conn_send_resp(c, h->seq, 0, NULL, 0);
}

int tcp_target_start(const struct tent_xport_env *env)
{
    int rc =
        env->serve_frames(env->ctx, TENT_WIRE_READ, serve_read, (void *)env);
    if (rc)
        return rc;
    rc = env->serve_frames(env->ctx, TENT_WIRE_WRITE, serve_write, (void *)env);
    if (rc)
        env->serve_frames(env->ctx, TENT_WIRE_READ, NULL, NULL);
    return rc;
}

void tcp_target_stop(const struct tent_xport_env *env)
{
    env->serve_frames(env->ctx, TENT_WIRE_WRITE, NULL, NULL);
    env->serve_frames(env->ctx, TENT_WIRE_READ, NULL, NULL);
}
