/* Codec of the tcp transport's frames (see tcp_wire.h).  Pure functions
 * only, like rpc/wire.c: every byte from a socket passes a decoder here
 * before anything else looks at it. */
#include "transport/tcp/tcp_wire.h"

#include "common/error.h"
#include "tent/transfer_engine.h"

#include <inttypes.h>
#include <string.h>

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

int tcp_wire_frame_data(const struct tent_wire_hdr *h, const uint8_t *body,
                        size_t n, uint64_t *data)
{
    uint32_t min, max;
    switch (h->type) {
    case TCP_WIRE_READ:
        min = max = TCP_WIRE_RW_LEN;
        break;
    case TCP_WIRE_WRITE:
        min = TCP_WIRE_RW_LEN;
        max = TCP_WIRE_RW_LEN + TCP_WIRE_MAX_DATA;
        break;
    case TCP_WIRE_HELLO:
    case TCP_WIRE_FENCE:
        min = max = TCP_WIRE_TOKEN_LEN;
        break;
    default:
        return tent_set_error(TENT_EPROTO, "frame type %u is not tcp's",
                              h->type);
    }
    /* a shorter body is the handler's to refuse (it reads it first) */
    if (h->len > max)
        return tent_set_error(TENT_EPROTO,
                              "frame of type %u has body length %u > %u",
                              h->type, h->len, max);
    *data = 0;
    struct tcp_wire_rw rw;
    if (h->type == TCP_WIRE_WRITE && h->len >= min)
        *data = h->len - TCP_WIRE_RW_LEN;
    else if (h->type == TCP_WIRE_READ && body && n >= TCP_WIRE_RW_LEN &&
             !tcp_wire_decode_rw(body, TCP_WIRE_RW_LEN, &rw))
        *data = rw.length;
    return TENT_OK;
}

void tcp_wire_encode_rw(uint8_t out[TCP_WIRE_RW_LEN], uint64_t addr,
                        uint64_t length, const struct tcp_wire_access *acc)
{
    put64(out, addr);
    put64(out + 8, length);
    put64(out + 16, acc ? acc->incarnation : 0);
    if (acc)
        memcpy(out + 24, acc->key, TCP_WIRE_KEY_LEN);
    else
        memset(out + 24, 0, TCP_WIRE_KEY_LEN);
}

int tcp_wire_decode_rw(const uint8_t *in, size_t n, struct tcp_wire_rw *out)
{
    if (!in || n < TCP_WIRE_RW_LEN)
        return tent_set_error(TENT_EPROTO,
                              "read/write request truncated: %zu bytes", n);
    uint64_t addr = get64(in), length = get64(in + 8);
    if (length == 0 || length > TCP_WIRE_MAX_DATA)
        return tent_set_error(TENT_EPROTO,
                              "read/write length %" PRIu64 " is outside 1..%u",
                              length, TCP_WIRE_MAX_DATA);
    if (addr + length < addr)
        return tent_set_error(TENT_EPROTO,
                              "read/write [%#" PRIx64 ", +%" PRIu64 ") wraps",
                              addr, length);
    out->addr = addr;
    out->length = length;
    out->acc.incarnation = get64(in + 16);
    memcpy(out->acc.key, in + 24, TCP_WIRE_KEY_LEN);
    return TENT_OK;
}

void tcp_wire_encode_token(uint8_t out[TCP_WIRE_TOKEN_LEN], uint64_t token)
{
    put64(out, token);
}

int tcp_wire_decode_token(const uint8_t *in, size_t n, uint64_t *token)
{
    if (!in || n != TCP_WIRE_TOKEN_LEN)
        return tent_set_error(TENT_EPROTO, "connection token of %zu bytes", n);
    uint64_t t = get64(in);
    if (t == 0)
        return tent_set_error(TENT_EPROTO, "connection token is 0");
    *token = t;
    return TENT_OK;
}
