/* The cluster secret (config key security/secret_file, environment
 * MC_TENT_SECRET_FILE): a mutual challenge-response that opens every
 * connection to an engine's RPC server, and signatures on the descriptors
 * published to a metadata service.  The cryptography is OpenSSL's
 * (HMAC-SHA256); this file only frames it.
 *
 * Handshake (before any frame; the client speaks first, so a server
 * without the secret refuses the hello as a frame that does not validate):
 *   client -> server  HELLO  "TNA1" u8 version u8 ident_len u16 0
 *                            nonce_c[32] ident[ident_len]
 *   server -> client  REPLY  "TNA1" u32 0 nonce_s[32]
 *                            HMAC(K, "tent-auth-server" | T)
 *   client -> server  PROOF  HMAC(K, "tent-auth-client" | T)
 * with T = nonce_c | nonce_s | ident_len | ident.  Each side proves it
 * holds K over the other's fresh nonce; the labels keep one side's answer
 * from serving as the other's.  ident is the client's segment name (may be
 * empty): the server binds notifications on the connection to it. */
#ifndef TENT_COMMON_AUTH_H
#define TENT_COMMON_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tent_config;

#define TENT_AUTH_CONFIG_KEY "security/secret_file"
#define TENT_AUTH_ENV        "MC_TENT_SECRET_FILE"
#define TENT_AUTH_NONCE_LEN  32
#define TENT_AUTH_MAC_LEN    32
#define TENT_AUTH_HELLO_LEN  40 /* without the ident */
#define TENT_AUTH_REPLY_LEN  72
#define TENT_AUTH_MAX_IDENT  255
#define TENT_AUTH_SECRET_MAX 4096

struct tent_auth;

/* Reads the secret from path: a regular file not readable or writable by
 * group or others, 16..4096 bytes (one trailing newline dropped).
 * TENT_ECONFIG naming the file otherwise. */
int tent_auth_load(const char *path, struct tent_auth **out);
/* The engine's secret: security/secret_file, else MC_TENT_SECRET_FILE, else
 * none (*out NULL, TENT_OK). */
int tent_auth_from_config(const struct tent_config *cfg,
                          struct tent_auth **out);
void tent_auth_free(struct tent_auth *a);
/* The file the secret came from (for messages). */
const char *tent_auth_path(const struct tent_auth *a);

/* ---- the core (auth_core.c, also in mf_host) -----------------------------
 */
/* tent_auth_load's work: -1 with a message in err (naming what and path). */
int tent_auth_read(const char *what, const char *path, struct tent_auth **out,
                   char *err, size_t cap);
/* HMAC-SHA256(secret, label NUL data). */
bool tent_auth_mac(const struct tent_auth *a, const char *label,
                   const void *data, size_t n, uint8_t mac[TENT_AUTH_MAC_LEN]);
/* Constant-time comparison. */
bool tent_auth_equal(const void *x, const void *y, size_t n);

/* ---- client: one call right after connect -------------------------------
 * Runs the handshake on the blocking socket fd (its send/receive timeouts
 * bound it) as ident.  TENT_OK, or TENT_EPERM when the peer does not prove
 * the secret (wrong one, none, or it closed the connection), naming peer. */
int tent_auth_client(const struct tent_auth *a, int fd, const char *ident,
                     const char *peer);

/* ---- the steps, I/O left to the caller ------------------------------------
 */
struct tent_auth_server_state {
    uint8_t nc[TENT_AUTH_NONCE_LEN], ns[TENT_AUTH_NONCE_LEN];
    uint8_t ident_len;
    char ident[TENT_AUTH_MAX_IDENT + 1];
};
/* Client: draws nonce_c and writes the HELLO (out holds
 * TENT_AUTH_HELLO_LEN + TENT_AUTH_MAX_IDENT bytes) of *len bytes.  -1 when
 * no random bytes came. */
int tent_auth_client_hello(struct tent_auth_server_state *st, const char *ident,
                           uint8_t *out, size_t *len);
/* Client: checks the server's REPLY and writes the PROOF.  0, -1 when the
 * reply is not one, -2 when the server does not hold the secret. */
int tent_auth_client_answer(const struct tent_auth *a,
                            struct tent_auth_server_state *st,
                            const uint8_t reply[TENT_AUTH_REPLY_LEN],
                            uint8_t proof[TENT_AUTH_MAC_LEN]);
/* Whether the first 8 bytes of a connection begin a hello. */
bool tent_auth_hello_start(const uint8_t in[8]);
/* Checks the fixed part of a hello (TENT_AUTH_HELLO_LEN bytes); the ident
 * length follows in *ident_len.  -1 when it is not a hello. */
int tent_auth_hello_parse(const uint8_t *in, struct tent_auth_server_state *st,
                          size_t *ident_len);
/* Takes the ident (ident_len bytes), draws nonce_s and writes the REPLY.
 * -1 when the ident is not printable or no random bytes came. */
int tent_auth_server_reply(const struct tent_auth *a,
                           struct tent_auth_server_state *st,
                           const uint8_t *ident,
                           uint8_t out[TENT_AUTH_REPLY_LEN]);
/* Whether the client's PROOF is right (constant-time compare). */
bool tent_auth_server_check(const struct tent_auth *a,
                            const struct tent_auth_server_state *st,
                            const uint8_t proof[TENT_AUTH_MAC_LEN]);

/* ---- signed descriptors --------------------------------------------------
 * A signed descriptor is the JSON object with one more last member,
 * "tent_sig":"<64 hex digits>", the HMAC over the object without it (the
 * bytes the engine encoded, incarnation included). */
/* Signs json (len bytes, a JSON object): a malloc'd copy with the
 * signature, NULL when out of memory. */
char *tent_auth_sign_desc(const struct tent_auth *a, const char *json,
                          size_t len, size_t *out_len);
/* Checks a signed descriptor (len bytes of json, which it may change): on
 * success json is cut to the object without the signature, *body_len bytes
 * and a NUL.  TENT_EPERM naming segment when it has no signature or a
 * wrong one. */
int tent_auth_verify_desc(const struct tent_auth *a, const char *segment,
                          char *json, size_t len, size_t *body_len);

#endif
