/* The cluster secret: loading it, the connection handshake and descriptor
 * signatures (auth.h has the protocol). */
#include "common/auth.h"

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "rpc/rpc.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define AUTH_MAGIC   "TNA1"
#define AUTH_VERSION 1
#define SIG_MEMBER   ",\"tent_sig\":\""
#define SECRET_MIN   16

struct tent_auth {
    char path[512];
    size_t len;
    uint8_t key[TENT_AUTH_SECRET_MAX];
};

/* what: the config key or variable that named path, for messages */
static int load_from(const char *what, const char *path, struct tent_auth **out)
{
    *out = NULL;
    if (!path || !*path)
        return tent_set_error(TENT_ECONFIG, "%s: the secret file name is empty",
                              what);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return tent_set_error(TENT_ECONFIG,
                              "%s: cannot read secret file '%s': %s", what,
                              path, strerror(err));
    }
    int rc = TENT_OK;
    if (!S_ISREG(st.st_mode))
        rc = tent_set_error(TENT_ECONFIG,
                            "%s: secret file '%s' is not a regular file", what,
                            path);
    else if (st.st_mode & 077)
        rc = tent_set_error(TENT_ECONFIG,
                            "%s: secret file '%s' is readable or writable by "
                            "group or others (mode %04o); chmod 600 it",
                            what, path, (unsigned)(st.st_mode & 07777));
    struct tent_auth *a = rc ? NULL : calloc(1, sizeof(*a));
    if (!rc && !a)
        rc = tent_set_error(TENT_ENOMEM, "secret: out of memory");
    if (!rc) {
        ssize_t n = read(fd, a->key, sizeof(a->key));
        char extra;
        if (n < 0)
            rc = tent_set_error(TENT_ECONFIG,
                                "%s: cannot read secret file '%s': %s", what,
                                path, strerror(errno));
        else if (n == (ssize_t)sizeof(a->key) && read(fd, &extra, 1) > 0)
            rc = tent_set_error(TENT_ECONFIG,
                                "%s: secret file '%s' is longer than %d bytes",
                                what, path, TENT_AUTH_SECRET_MAX);
        if (!rc && n > 0 && a->key[n - 1] == '\n')
            n--;
        if (!rc && n < SECRET_MIN)
            rc = tent_set_error(TENT_ECONFIG,
                                "%s: secret file '%s' holds %zd bytes, fewer "
                                "than %d",
                                what, path, n, SECRET_MIN);
        if (!rc) {
            a->len = (size_t)n;
            snprintf(a->path, sizeof(a->path), "%s", path);
        }
    }
    close(fd);
    if (rc) {
        tent_auth_free(a);
        return rc;
    }
    *out = a;
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

void tent_auth_free(struct tent_auth *a)
{
    if (a) {
        OPENSSL_cleanse(a->key, sizeof(a->key));
        free(a);
    }
}

const char *tent_auth_path(const struct tent_auth *a)
{
    return a->path;
}

/* HMAC-SHA256(K, label | parts...) into mac; false if OpenSSL failed. */
static bool mac_of(const struct tent_auth *a, const char *label, const void *p1,
                   size_t n1, const void *p2, size_t n2,
                   uint8_t mac[TENT_AUTH_MAC_LEN])
{
    /* the label's NUL separates it from what follows */
    size_t ll = strlen(label) + 1;
    size_t n = ll + n1 + n2;
    uint8_t stackbuf[512];
    uint8_t *buf = n <= sizeof(stackbuf) ? stackbuf : malloc(n);
    if (!buf)
        return false;
    memcpy(buf, label, ll);
    if (n1)
        memcpy(buf + ll, p1, n1);
    if (n2)
        memcpy(buf + ll + n1, p2, n2);
    unsigned int ml = 0;
    bool ok = HMAC(EVP_sha256(), a->key, (int)a->len, buf, n, mac, &ml) &&
              ml == TENT_AUTH_MAC_LEN;
    if (buf != stackbuf)
        free(buf);
    return ok;
}

/* T = nonce_c | nonce_s | ident_len | ident */
static bool transcript_mac(const struct tent_auth *a, const char *label,
                           const struct tent_auth_server_state *st,
                           uint8_t mac[TENT_AUTH_MAC_LEN])
{
    uint8_t t[2 * TENT_AUTH_NONCE_LEN + 1 + TENT_AUTH_MAX_IDENT];
    memcpy(t, st->nc, TENT_AUTH_NONCE_LEN);
    memcpy(t + TENT_AUTH_NONCE_LEN, st->ns, TENT_AUTH_NONCE_LEN);
    t[2 * TENT_AUTH_NONCE_LEN] = st->ident_len;
    memcpy(t + 2 * TENT_AUTH_NONCE_LEN + 1, st->ident, st->ident_len);
    return mac_of(a, label, t, 2 * TENT_AUTH_NONCE_LEN + 1u + st->ident_len,
                  NULL, 0, mac);
}

static bool fill_random(void *p, size_t n)
{
    return getrandom(p, n, 0) == (ssize_t)n;
}

static bool ident_ok(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

int tent_auth_client(const struct tent_auth *a, int fd, const char *ident,
                     const char *peer)
{
    struct tent_auth_server_state st = {0};
    size_t il = ident ? strlen(ident) : 0;
    if (il > TENT_AUTH_MAX_IDENT)
        il = TENT_AUTH_MAX_IDENT; /* as the server will see it */
    if (!fill_random(st.nc, sizeof(st.nc)))
        return tent_set_error(TENT_ENOMEM, "auth: getrandom failed: %s",
                              strerror(errno));
    st.ident_len = (uint8_t)il;
    memcpy(st.ident, ident ? ident : "", il);
    uint8_t hello[TENT_AUTH_HELLO_LEN + TENT_AUTH_MAX_IDENT];
    memcpy(hello, AUTH_MAGIC, 4);
    hello[4] = AUTH_VERSION;
    hello[5] = (uint8_t)il;
    hello[6] = hello[7] = 0;
    memcpy(hello + 8, st.nc, TENT_AUTH_NONCE_LEN);
    memcpy(hello + TENT_AUTH_HELLO_LEN, st.ident, il);
    uint8_t reply[TENT_AUTH_REPLY_LEN], want[TENT_AUTH_MAC_LEN];
    int rc = tent_rpc_send_all(fd, hello, TENT_AUTH_HELLO_LEN + il);
    if (!rc)
        rc = tent_rpc_recv_all(fd, reply, sizeof(reply));
    if (rc)
        return tent_set_error(TENT_EPERM,
                              "peer %s did not complete authentication (it "
                              "may not use a cluster secret): %s",
                              peer, tent_last_error());
    if (memcmp(reply, AUTH_MAGIC, 4) != 0)
        return tent_set_error(TENT_EPERM,
                              "peer %s answered the authentication hello "
                              "with something else",
                              peer);
    memcpy(st.ns, reply + 8, TENT_AUTH_NONCE_LEN);
    if (!transcript_mac(a, "tent-auth-server", &st, want))
        return tent_set_error(TENT_ENOMEM, "auth: HMAC failed");
    if (CRYPTO_memcmp(want, reply + 8 + TENT_AUTH_NONCE_LEN,
                      TENT_AUTH_MAC_LEN) != 0)
        return tent_set_error(TENT_EPERM,
                              "peer %s does not hold the cluster secret of "
                              "'%s'",
                              peer, a->path);
    uint8_t proof[TENT_AUTH_MAC_LEN];
    if (!transcript_mac(a, "tent-auth-client", &st, proof))
        return tent_set_error(TENT_ENOMEM, "auth: HMAC failed");
    rc = tent_rpc_send_all(fd, proof, sizeof(proof));
    OPENSSL_cleanse(proof, sizeof(proof));
    if (rc)
        return tent_set_error(TENT_EPERM, "peer %s: authentication failed: %s",
                              peer, tent_last_error());
    return TENT_OK;
}

bool tent_auth_hello_start(const uint8_t in[8])
{
    return memcmp(in, AUTH_MAGIC, 4) == 0 && in[4] == AUTH_VERSION;
}

int tent_auth_hello_parse(const uint8_t *in, struct tent_auth_server_state *st,
                          size_t *ident_len)
{
    if (memcmp(in, AUTH_MAGIC, 4) != 0 || in[4] != AUTH_VERSION)
        return -1;
    memset(st, 0, sizeof(*st));
    memcpy(st->nc, in + 8, TENT_AUTH_NONCE_LEN);
    st->ident_len = in[5];
    *ident_len = in[5];
    return 0;
}

int tent_auth_server_reply(const struct tent_auth *a,
                           struct tent_auth_server_state *st,
                           const uint8_t *ident,
                           uint8_t out[TENT_AUTH_REPLY_LEN])
{
    if (!ident_ok(ident, st->ident_len) || !fill_random(st->ns, sizeof(st->ns)))
        return -1;
    memcpy(st->ident, ident, st->ident_len);
    st->ident[st->ident_len] = 0;
    memcpy(out, AUTH_MAGIC, 4);
    memset(out + 4, 0, 4);
    memcpy(out + 8, st->ns, TENT_AUTH_NONCE_LEN);
    return transcript_mac(a, "tent-auth-server", st,
                          out + 8 + TENT_AUTH_NONCE_LEN)
               ? 0
               : -1;
}

bool tent_auth_server_check(const struct tent_auth *a,
                            const struct tent_auth_server_state *st,
                            const uint8_t proof[TENT_AUTH_MAC_LEN])
{
    uint8_t want[TENT_AUTH_MAC_LEN];
    return transcript_mac(a, "tent-auth-client", st, want) &&
           CRYPTO_memcmp(want, proof, TENT_AUTH_MAC_LEN) == 0;
}

/* ---- descriptors -------------------------------------------------------- */

static void hex_of(const uint8_t *mac, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < TENT_AUTH_MAC_LEN; i++) {
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
    if (!mac_of(a, "tent-desc", json, len, NULL, 0, mac))
        return NULL;
    size_t ml = strlen(SIG_MEMBER);
    size_t n = len - 1 + ml + 2 * TENT_AUTH_MAC_LEN + 2;
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    memcpy(s, json, len - 1);
    memcpy(s + len - 1, SIG_MEMBER, ml);
    hex_of(mac, s + len - 1 + ml);
    memcpy(s + n - 2, "\"}", 3);
    *out_len = n;
    return s;
}

int tent_auth_verify_desc(const struct tent_auth *a, const char *segment,
                          char *json, size_t len, size_t *body_len)
{
    size_t ml = strlen(SIG_MEMBER), tail = ml + 2 * TENT_AUTH_MAC_LEN + 2;
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
    bool ok = mac_of(a, "tent-desc", json, body, NULL, 0, mac);
    hex_of(mac, want);
    if (!ok || CRYPTO_memcmp(want, hex, sizeof(hex)) != 0)
        return tent_set_error(TENT_EPERM,
                              "segment '%s': the signature of its published "
                              "descriptor is wrong (signed with another "
                              "secret, or altered); refused",
                              segment);
    json[body] = 0;
    *body_len = body;
    return TENT_OK;
}
