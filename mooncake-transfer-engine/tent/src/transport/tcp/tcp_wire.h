/* The tcp transport's frames, carried by the engine's RPC server in the
 * frame format of rpc/wire.h (header, then body; little-endian) and
 * answered with its RESP frame.  The server routes these types to the
 * handlers tcp installs (tcp_target.c, tcp_fence.c) and learns a frame's
 * size through tcp_wire_frame_data; it knows nothing else of them.
 *
 * Bodies:
 *   READ    u64 addr, u64 length (1..TCP_WIRE_MAX_DATA, no wrap), then the
 *           access block; answered by a RESP that carries, on success,
 *           exactly the requested bytes
 *   WRITE   u64 addr, u64 length, the access block, then exactly `length`
 *           data bytes; answered by a bare RESP
 *   access  u64 incarnation, u8 key[16] (TCP_WIRE_ACCESS_LEN): what
 *           entitles the request to the range (struct tcp_wire_access)
 *   HELLO   u64 token: names the connection it arrives on (a data
 *           connection, so that a FENCE can name it later)
 *   FENCE   u64 token: answered once the connection HELLO named so is
 *           closed and nothing it carried can still touch memory
 *
 * The decoders are pure (no I/O, no global state) so that they can be
 * fuzzed; each validates every field before the caller uses any. */
#ifndef TENT_TRANSPORT_TCP_TCP_WIRE_H
#define TENT_TRANSPORT_TCP_TCP_WIRE_H

#include "rpc/wire.h"

#include <stddef.h>
#include <stdint.h>

enum tcp_wire_type {
    TCP_WIRE_READ = 4,
    TCP_WIRE_WRITE = 5,
    TCP_WIRE_HELLO = 7,
    TCP_WIRE_FENCE = 8,
};

#define TCP_WIRE_KEY_LEN    16
#define TCP_WIRE_ACCESS_LEN (8 + TCP_WIRE_KEY_LEN)
#define TCP_WIRE_RW_LEN     (16 + TCP_WIRE_ACCESS_LEN)
#define TCP_WIRE_MAX_DATA   (16u << 20)
#define TCP_WIRE_TOKEN_LEN  8
_Static_assert(TCP_WIRE_MAX_DATA + TCP_WIRE_RW_LEN <= TENT_WIRE_MAX_BODY &&
                   TENT_WIRE_RESP_LEN + TCP_WIRE_MAX_DATA <= TENT_WIRE_MAX_BODY,
               "a WRITE and a READ's answer fit a frame");

/* What a data request carries besides its range, checked by the target
 * before it touches memory: the incarnation of the target engine the
 * initiator resolved the address in (from its descriptor; a target of
 * another one refuses with TENT_ESTALE; 0 names none), and the access key
 * of the target registration (from the descriptor's buffer): a key that is
 * not the registration's is refused as an unregistered range. */
struct tcp_wire_access {
    uint64_t incarnation;
    uint8_t key[TCP_WIRE_KEY_LEN];
};

struct tcp_wire_rw {
    uint64_t addr;
    uint64_t length;
    struct tcp_wire_access acc;
};

/* Checks the body length of a tcp frame's header h (READ: exactly the
 * prefix; WRITE: the prefix and at most TCP_WIRE_MAX_DATA; HELLO, FENCE: a
 * token) and sets *data to the payload bytes it moves: a WRITE's from its
 * header, a READ's from the n bytes of its body at body when its prefix is
 * among them (else 0).  0, or TENT_EPROTO (a type not tcp's included). */
int tcp_wire_frame_data(const struct tent_wire_hdr *h, const uint8_t *body,
                        size_t n, uint64_t *data);

/* acc NULL: an access block of zeros. */
void tcp_wire_encode_rw(uint8_t out[TCP_WIRE_RW_LEN], uint64_t addr,
                        uint64_t length, const struct tcp_wire_access *acc);
/* Validates a READ/WRITE prefix: length in 1..TCP_WIRE_MAX_DATA, no wrap. */
int tcp_wire_decode_rw(const uint8_t *in, size_t n, struct tcp_wire_rw *out);

/* HELLO and FENCE bodies. */
void tcp_wire_encode_token(uint8_t out[TCP_WIRE_TOKEN_LEN], uint64_t token);
/* A token is any non-zero u64.  0 or TENT_EPROTO. */
int tcp_wire_decode_token(const uint8_t *in, size_t n, uint64_t *token);

#endif
