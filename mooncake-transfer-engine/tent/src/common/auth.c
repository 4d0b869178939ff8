/* The cluster secret: loading it, the connection handshake and descriptor
 * signatures (auth.h has the protocol). */
#include "common/auth.h"

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "rpc/rpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIG_MEMBER ",\"tent_sig\":\""

/* what: the config key or variable that named path, for messages */
static int load_from(const char *what, const char *path, struct tent_auth **out)
{
    char err[768];
    if (tent_auth_read(what, path, out, err, sizeof(err)))
        return tent_set_error(TENT_ECONFIG, "%s", err);
    return TENT_OK;
}

int tent_auth_load(const char *path, struct tent_auth **out)
{
    return load_from(TENT_AUTH_CONFIG_KEY, path, out);
}

int tent_auth_from_config(const struct tent_config *cfg, struct tent_auth **out)
{
    const char *path = NULL;
    *out = NULL;
    int rc = tent_config_get_string(cfg, TENT_AUTH_CONFIG_KEY, NULL, &path);
    if (rc)
        return rc;
    if (path)
        return load_from(TENT_AUTH_CONFIG_KEY, path, out);
    path = getenv(TENT_AUTH_ENV);
    if (!path || !*path)
        return TENT_OK;
    return load_from(TENT_AUTH_ENV, path, out);
}

int tent_auth_client(const struct tent_auth *a, int fd, const char *ident,
                     const char *peer)
{
    struct tent_auth_server_state st;
    uint8_t hello[TENT_AUTH_HELLO_LEN + TENT_AUTH_MAX_IDENT];
    uint8_t reply[TENT_AUTH_REPLY_LEN], proof[TENT_AUTH_MAC_LEN];
    size_t hl = 0;
    if (tent_auth_client_hello(&st, ident, hello, &hl))
        return tent_set_error(TENT_ENOMEM, "auth: getrandom failed: %s",
                              strerror(errno));
    int rc = tent_rpc_send_all(fd, hello, hl);
    if (!rc)
        rc = tent_rpc_recv_all(fd, reply, sizeof(reply));
    if (rc) {
        /* The socket failed (errno kept): a full server closes newcomers
         * so, and a client retries that; a refusal is an answer, below. */
        int err = rc == TENT_EPEER ? ECONNRESET : errno;
        rc = tent_set_error(rc,
                            "peer %s did not complete authentication (it "
                            "may not use a cluster secret, or refused the "
                            "connection): %s",
                            peer, tent_last_error());
        errno = err;
        return rc;
    }
    int r = tent_auth_client_answer(a, &st, reply, proof);
    if (r == -1)
        return tent_set_error(TENT_EPERM,
                              "peer %s answered the authentication hello "
                              "with something else",
                              peer);
    if (r)
        return tent_set_error(TENT_EPERM,
                              "peer %s does not hold the cluster secret of "
                              "'%s'",
                              peer, tent_auth_path(a));
    rc = tent_rpc_send_all(fd, proof, sizeof(proof));
    if (rc)
        return tent_set_error(TENT_EPERM, "peer %s: authentication failed: %s",
                              peer, tent_last_error());
    return TENT_OK;
}

/* ---- descriptors -------------------------------------------------------- */

static void hex_of(const uint8_t *mac, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < TENT_AUTH_MAC_LEN; i++) {
        out[2 * i] = d[mac[i] >> 4];
        out[2 * i + 1] = d[mac[i] & 15];
    }
}

char *tent_auth_sign_desc(const struct tent_auth *a, const char *json,
                          size_t len, size_t *out_len)
{
    while (len && json[len - 1] != '}')
        len--; /* trailing white space, if any */
    if (len < 2)
        return NULL;
    uint8_t mac[TENT_AUTH_MAC_LEN];
    if (!tent_auth_mac(a, "tent-desc", json, len, mac))
        return NULL;
    size_t ml = strlen(SIG_MEMBER);
    size_t n = len - 1 + ml + 2 * (size_t)TENT_AUTH_MAC_LEN + 2;
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    memcpy(s, json, len - 1);
    /* the closing "\"}" below brings the NUL */
    // NOLINTNEXTLINE(bugprone-not-null-terminated-result)
    memcpy(s + len - 1, SIG_MEMBER, ml);
    hex_of(mac, s + len - 1 + ml);
    memcpy(s + n - 2, "\"}", 3);
    *out_len = n;
    return s;
}

int tent_auth_verify_desc(const struct tent_auth *a, const char *segment,
                          char *json, size_t len, size_t *body_len)
{
    size_t ml = strlen(SIG_MEMBER),
           tail = ml + 2 * (size_t)TENT_AUTH_MAC_LEN + 2;
    if (len < tail + 2 || memcmp(json + len - 2, "\"}", 2) != 0 ||
        memcmp(json + len - tail, SIG_MEMBER, ml) != 0)
        return tent_set_error(TENT_EPERM,
                              "segment '%s': its published descriptor is not "
                              "signed with the cluster secret; refused",
                              segment);
    size_t body = len - tail + 1; /* the object up to its '}' */
    char hex[2 * TENT_AUTH_MAC_LEN];
    memcpy(hex, json + len - tail + ml, sizeof(hex));
    json[body - 1] = '}';
    uint8_t mac[TENT_AUTH_MAC_LEN];
    char want[2 * TENT_AUTH_MAC_LEN];
    bool ok = tent_auth_mac(a, "tent-desc", json, body, mac);
    hex_of(mac, want);
    if (!ok || !tent_auth_equal(want, hex, sizeof(hex)))
        return tent_set_error(TENT_EPERM,
                              "segment '%s': the signature of its published "
                              "descriptor is wrong (signed with another "
                              "secret, or altered); refused",
                              segment);
    json[body] = 0;
    *body_len = body;
    return TENT_OK;
}
