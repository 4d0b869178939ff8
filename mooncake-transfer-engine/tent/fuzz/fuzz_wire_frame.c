/* libFuzzer: a byte stream as the RPC server and the tcp initiator read it,
 * frame after frame: header, the tcp frame measure the server calls, then
 * the body decoder of its type. */
#include "fuzz.h"
#include "rpc/wire.h"
#include "transport/tcp/tcp_wire.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (size - off >= TENT_WIRE_HDR_LEN) {
        struct tent_wire_hdr h;
        if (tent_wire_decode_hdr(data + off, size - off, &h))
            return 0;
        off += TENT_WIRE_HDR_LEN;
        size_t avail = size - off < h.len ? size - off : h.len;
        const uint8_t *b = data + off;
        struct tcp_wire_rw rw;
        int32_t st;
        uint64_t moved;
        if (tcp_wire_frame_data(&h, b, avail, &moved) == 0 &&
            moved > TCP_WIRE_MAX_DATA)
            __builtin_trap();
        switch (h.type) {
        case TCP_WIRE_READ:
        case TCP_WIRE_WRITE:
            if (tcp_wire_decode_rw(b, avail, &rw) == 0 &&
                (rw.length == 0 || rw.addr + rw.length < rw.addr))
                __builtin_trap();
            break;
        case TENT_WIRE_RESP:
            if (tent_wire_decode_resp(b, avail, &st) == 0 && st > 0)
                __builtin_trap();
            break;
        case TENT_WIRE_NOTIFY: {
            static struct tent_wire_notify n;
            if (tent_wire_decode_notify(b, avail, &n) == 0 &&
                (strlen(n.name) > TENT_WIRE_MAX_NAME ||
                 strlen(n.msg) > TENT_WIRE_MAX_MSG))
                __builtin_trap();
            break;
        }
        case TCP_WIRE_HELLO:
        case TCP_WIRE_FENCE: {
            uint64_t tok;
            if (tcp_wire_decode_token(b, avail, &tok) == 0 && tok == 0)
                __builtin_trap();
            break;
        }
        case TENT_WIRE_DESC_RESP: {
            static struct tent_wire_desc d;
            if (tent_wire_decode_desc((const char *)b, avail, &d) == 0)
                tent_wire_desc_free(&d);
            break;
        }
        default:
            break;
        }
        off += avail;
    }
    return 0;
}
