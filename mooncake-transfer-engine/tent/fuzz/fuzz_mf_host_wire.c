/* libFuzzer: mf_host's wire protocol as its two readers take it.  The first
 * byte picks the side:
 *   even: a connection's byte stream as the server reads it, request after
 *         request (header, then the payload its type carries); nothing
 *         but a HELLO is served before a HELLO of our version;
 *   odd:  the answer to our HELLO as the connecting side reads it (reply
 *         header, then the peer's hello). */
#include "fuzz.h"
#include "mf_host/mf_host.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static int take_hello(const uint8_t *p)
{
    struct mfh_hello h;
    memcpy(&h, p, sizeof(h));
    int rc = mfh_wire_take_hello(&h);
    if (strnlen(h.uid, sizeof(h.uid)) >= sizeof(h.uid) ||
        (rc == 0) != (h.version == MFH_VERSION))
        __builtin_trap();
    return rc;
}

static void server_stream(const uint8_t *data, size_t size)
{
    size_t off = 0;
    bool greeted = false;
    while (size - off >= sizeof(struct mfh_msg)) {
        struct mfh_msg m;
        memcpy(&m, data + off, sizeof(m));
        off += sizeof(m);
        const char *why = NULL;
        if (mfh_wire_check_request(&m, greeted, &why) != 0) {
            if (!why || !why[0])
                __builtin_trap(); /* a refusal always says why */
            return;               /* the server closes the connection */
        }
        if (!greeted && m.type != MFH_MSG_HELLO)
            __builtin_trap(); /* nothing is served before a HELLO */
        uint64_t payload = 0;
        switch (m.type) {
        case MFH_MSG_HELLO:
            if (m.len != sizeof(struct mfh_hello))
                __builtin_trap();
            payload = m.len;
            if (size - off >= payload && take_hello(data + off) == 0)
                greeted = true;
            break;
        case MFH_MSG_CHECK:
            if (m.count == 0 || m.count > MFH_MAX_BATCH ||
                m.len / sizeof(struct mfh_wire_range) != m.count ||
                m.len % sizeof(struct mfh_wire_range) != 0)
                __builtin_trap();
            payload = m.len;
            break;
        case MFH_MSG_RANGES:
        case MFH_MSG_PING:
            if (m.len != 0)
                __builtin_trap();
            break;
        case MFH_MSG_WRITE:
            payload = m.len;
            break;
        case MFH_MSG_READ:
            break;
        default:
            __builtin_trap(); /* only the six request types are served */
        }
        if (payload > size - off)
            return; /* the rest of the payload never arrived */
        off += (size_t)payload;
    }
}

static void hello_answer(const uint8_t *data, size_t size)
{
    if (size < sizeof(struct mfh_msg))
        return;
    struct mfh_msg m;
    memcpy(&m, data, sizeof(m));
    if (mfh_wire_check_hello_reply(&m) != 0)
        return;
    if (m.magic != MFH_MAGIC || m.type != MFH_MSG_REPLY || m.status != SM_OK ||
        m.len != sizeof(struct mfh_hello))
        __builtin_trap();
    if (size - sizeof(m) >= sizeof(struct mfh_hello))
        take_hello(data + sizeof(m));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        hello_answer(data + 1, size - 1);
    else
        server_stream(data + 1, size - 1);
    return 0;
}
