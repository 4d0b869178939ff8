/* Checks of what arrives from a peer, kept apart from the socket reads so
 * that they can be tested and fuzzed on plain bytes (fuzz/fuzz_mf_host_wire.c).
 * Nothing here reads a socket, locks or logs. */
#include "mf_host/mf_host.h"

#include <string.h>

int mfh_wire_check_request(const struct mfh_msg *m, bool greeted,
                           const char **why)
{
    const char *bad = NULL;
    if (m->magic != MFH_MAGIC) {
        bad = "bad magic";
    } else if (!greeted && m->type != MFH_MSG_HELLO) {
        bad = "request before HELLO";
    } else {
        switch (m->type) {
        case MFH_MSG_HELLO:
            if (m->len != sizeof(struct mfh_hello))
                bad = "hello of the wrong length";
            break;
        case MFH_MSG_CHECK:
            if (m->count == 0 || m->count > MFH_MAX_BATCH ||
                m->len != (uint64_t)m->count * sizeof(struct mfh_wire_range))
                bad = "check request with a bad range count or length";
            break;
        case MFH_MSG_RANGES:
            if (m->len != 0)
                bad = "ranges request with a payload";
            break;
        case MFH_MSG_PING:
            if (m->len != 0)
                bad = "ping with a payload";
            break;
        case MFH_MSG_WRITE:
        case MFH_MSG_READ:
            break; /* addr and len are checked against the registered ranges */
        default:
            bad = "unknown request type";
        }
    }
    if (bad && why)
        *why = bad;
    return bad ? -1 : 0;
}

int mfh_wire_check_hello_reply(const struct mfh_msg *m)
{
    return m->magic == MFH_MAGIC && m->type == MFH_MSG_REPLY &&
                   m->status == SM_OK && m->len == sizeof(struct mfh_hello)
               ? 0
               : -1;
}

int mfh_wire_take_hello(struct mfh_hello *h)
{
    h->uid[MFH_UID_MAX - 1] = '\0';
    return h->version == MFH_VERSION ? 0 : -1;
}
