/* Wire format of the engine's RPC server.  Every message is a frame: a
 * fixed 16-byte header, then `len` bytes of body; integers little-endian.
 *
 *   offset 0  u32 magic   TENT_WIRE_MAGIC
 *          4  u8  version TENT_WIRE_VERSION (a different version is refused)
 *          5  u8  type    enum tent_wire_type, or a transport's
 *          6  u16 flags   must be 0
 *          8  u32 seq     echoed in the response
 *         12  u32 len     body length, <= TENT_WIRE_MAX_BODY
 *
 * The server's own frames: DESC_REQ (empty), DESC_RESP (the JSON segment
 * descriptor), NOTIFY and RESP (bodies at their enum tent_wire_type
 * entries).  Every other type belongs to a transport, which defines its
 * bodies in its own folder and installs their handlers (rpc.h
 * tent_rpc_server_handle); the server refuses a type two transports claim.
 * Types taken: 4, 5, 7, 8 (transport/tcp/tcp_wire.h).
 *
 * The decode functions are pure (no I/O, no global state) so that they can
 * be fuzzed; each validates every field before the caller uses any. */
#ifndef TENT_RPC_WIRE_H
#define TENT_RPC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* VERSION is the frames'; DESC_VERSION the JSON descriptors' (which the
 * metadata services store too). */
#define TENT_WIRE_MAGIC        0x31544e54u /* "TNT1" on the wire */
#define TENT_WIRE_VERSION      2
#define TENT_WIRE_DESC_VERSION 1
#define TENT_WIRE_HDR_LEN      16
#define TENT_WIRE_KEY_LEN      16 /* a descriptor buffer's access key */
#define TENT_WIRE_RESP_LEN     8
/* the longest body of any frame: 16 MiB of data and up to 64 bytes more */
#define TENT_WIRE_MAX_BODY   ((16u << 20) + 64)
#define TENT_WIRE_MAX_NOTIFY (8 + 255 + 4095 + 255)
#define TENT_WIRE_MAX_NAME   255
#define TENT_WIRE_MAX_MSG    4095

/* The server's own frame types and their bodies. */
enum tent_wire_type {
    /* empty */
    TENT_WIRE_DESC_REQ = 1,
    /* JSON segment descriptor (see tent_wire_decode_desc) */
    TENT_WIRE_DESC_RESP = 2,
    /* u16 name_len, u16 msg_len, u16 from_len, u16 0, then name, msg, from
     * (no NULs; lengths < 256, 4096, 256) */
    TENT_WIRE_NOTIFY = 3,
    /* the answer to a request: i32 status (0 or a negative TENT_E* code),
     * u32 0, then what the request's type says (nothing for the server's
     * own requests) */
    TENT_WIRE_RESP = 6,
};

struct tent_wire_hdr {
    uint8_t type;
    uint32_t seq;
    uint32_t len;
};

struct tent_wire_notify {
    char name[TENT_WIRE_MAX_NAME + 1];
    char msg[TENT_WIRE_MAX_MSG + 1];
    char from[TENT_WIRE_MAX_NAME + 1];
};

/* A per-buffer attribute (a transport's handle for the buffer). */
#define TENT_WIRE_MAX_BUF_ATTRS 8
#define TENT_WIRE_ATTR_KEY_MAX  32  /* bytes, NUL included */
#define TENT_WIRE_ATTR_VAL_MAX  128 /* bytes, NUL included */
struct tent_wire_kv {
    char key[TENT_WIRE_ATTR_KEY_MAX];
    char value[TENT_WIRE_ATTR_VAL_MAX];
};

/* One buffer of a decoded descriptor.  key: the registration's access key
 * (all zeros when the descriptor names none, which no target accepts). */
struct tent_wire_buf {
    uint64_t base, length;
    char location[64];
    int perm;
    uint32_t xport_mask;
    uint8_t key[TENT_WIRE_KEY_LEN];
    struct tent_wire_kv *attrs; /* nattrs entries (heap), or NULL */
    int nattrs;
};

#define TENT_WIRE_MAX_BUFS  (1u << 16)
#define TENT_WIRE_MAX_ATTRS 16

struct tent_wire_desc {
    char name[256];
    char host_id[128];
    uint64_t incarnation; /* the engine's; 0 when the descriptor has none */
    struct tent_wire_buf *bufs; /* sorted by base, non-overlapping */
    size_t nbufs;
    char attr_key[TENT_WIRE_MAX_ATTRS][64];
    char attr_value[TENT_WIRE_MAX_ATTRS][256];
    int nattrs;
};

void tent_wire_encode_hdr(uint8_t out[TENT_WIRE_HDR_LEN], uint8_t type,
                          uint32_t seq, uint32_t len);
/* Validates magic, version, flags, type (not 0) and length (the server's
 * own types' bounds; a transport's type within TENT_WIRE_MAX_BODY, its
 * handler checks the rest).  0 or TENT_EPROTO. */
int tent_wire_decode_hdr(const uint8_t *in, size_t n,
                         struct tent_wire_hdr *out);

void tent_wire_encode_resp(uint8_t out[TENT_WIRE_RESP_LEN], int32_t status);
/* Status must be 0 or a negative code >= -1000. */
int tent_wire_decode_resp(const uint8_t *in, size_t n, int32_t *status);

/* Returns the body length written to out (out must hold
 * TENT_WIRE_MAX_NOTIFY bytes), or TENT_EINVAL when a field is too long. */
int tent_wire_encode_notify(uint8_t *out, const char *name, const char *msg,
                            const char *from);
int tent_wire_decode_notify(const uint8_t *in, size_t n,
                            struct tent_wire_notify *out);

/* Decodes a JSON descriptor of n bytes (not NUL-terminated).  On success
 * out->bufs (and each buffer's attrs) is allocated (free with
 * tent_wire_desc_free); on failure nothing is allocated and the error names
 * the bad field.  A descriptor is
 *   {"version": 1, "name": s, "host_id": s, "incarnation": "<u64>" (optional),
 *    "buffers": [{"base": "<u64>", "length": "<u64>", "location": s,
 *                 "perm": 0..2, "xport_mask": u32,
 *                 "key": "<32 lower-case hex digits>" (optional),
 *                 "attrs": {key: value, ...}}, ...],   sorted, disjoint
 *    "attrs": {key: value, ...}} */
int tent_wire_decode_desc(const char *in, size_t n, struct tent_wire_desc *out);
void tent_wire_desc_free(struct tent_wire_desc *d);

/* Encodes d as JSON; returns a malloc'd string (length in *len) or NULL. */
char *tent_wire_encode_desc(const struct tent_wire_desc *d, size_t *len);

#endif
