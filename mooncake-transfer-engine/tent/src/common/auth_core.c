/* The cluster secret's core, shared by libtent and mf_host's libmf_smem.so
 * (which has no error or config module): the secret file, the handshake's
 * messages and the HMAC (auth.h has the protocol).  Errors are a message
 * in a caller's buffer; auth.c turns them into TENT_E* codes. */
#include "common/auth.h"

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
#define SECRET_MIN   16

struct tent_auth {
    char path[512];
    size_t len;
    uint8_t key[TENT_AUTH_SECRET_MAX];
};

int tent_auth_read(const char *what, const char *path, struct tent_auth **out,
                   char *err, size_t cap)
{
    *out = NULL;
    if (!path || !*path) {
        snprintf(err, cap, "%s: the secret file name is empty", what);
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        snprintf(err, cap, "%s: cannot read secret file '%s': %s", what, path,
                 strerror(e));
        return -1;
    }
    int rc = -1;
    struct tent_auth *a = NULL;
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, cap, "%s: secret file '%s' is not a regular file", what,
                 path);
    } else if (st.st_mode & 077) {
        snprintf(err, cap,
                 "%s: secret file '%s' is readable or writable by group or "
                 "others (mode %04o); chmod 600 it",
                 what, path, (unsigned)(st.st_mode & 07777));
    } else if (!(a = calloc(1, sizeof(*a)))) {
        snprintf(err, cap, "%s: out of memory", what);
    } else {
        ssize_t n = read(fd, a->key, sizeof(a->key));
        char extra;
        if (n < 0)
            snprintf(err, cap, "%s: cannot read secret file '%s': %s", what,
                     path, strerror(errno));
        else if (n == (ssize_t)sizeof(a->key) && read(fd, &extra, 1) > 0)
            snprintf(err, cap, "%s: secret file '%s' is longer than %d bytes",
                     what, path, TENT_AUTH_SECRET_MAX);
        else if ((n > 0 && a->key[n - 1] == '\n' ? n - 1 : n) < SECRET_MIN)
            snprintf(err, cap, "%s: secret file '%s' holds fewer than %d bytes",
                     what, path, SECRET_MIN);
        else
            rc = 0;
        if (!rc) {
            a->len = (size_t)(a->key[n - 1] == '\n' ? n - 1 : n);
            snprintf(a->path, sizeof(a->path), "%s", path);
        }
    }
    close(fd);
    if (rc) {
        tent_auth_free(a);
        return -1;
    }
    *out = a;
    return 0;
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

bool tent_auth_mac(const struct tent_auth *a, const char *label,
                   const void *data, size_t n, uint8_t mac[TENT_AUTH_MAC_LEN])
{
    /* the label's NUL separates it from what follows */
    size_t ll = strlen(label) + 1;
    uint8_t stackbuf[512];
    uint8_t *buf = ll + n <= sizeof(stackbuf) ? stackbuf : malloc(ll + n);
    if (!buf)
        return false;
    memcpy(buf, label, ll);
    if (n)
        memcpy(buf + ll, data, n);
    unsigned int ml = 0;
    bool ok = HMAC(EVP_sha256(), a->key, (int)a->len, buf, ll + n, mac, &ml) &&
              ml == TENT_AUTH_MAC_LEN;
    if (buf != stackbuf)
        free(buf);
    return ok;
}

bool tent_auth_equal(const void *x, const void *y, size_t n)
{
    return CRYPTO_memcmp(x, y, n) == 0;
}

/* T = nonce_c | nonce_s | ident_len | ident */
static bool transcript_mac(const struct tent_auth *a, const char *label,
                           const struct tent_auth_server_state *st,
                           uint8_t mac[TENT_AUTH_MAC_LEN])
{
    uint8_t t[2 * TENT_AUTH_NONCE_LEN + 1 + TENT_AUTH_MAX_IDENT];
    memcpy(t, st->nc, TENT_AUTH_NONCE_LEN);
    memcpy(t + TENT_AUTH_NONCE_LEN, st->ns, TENT_AUTH_NONCE_LEN);
    t[2 * (size_t)TENT_AUTH_NONCE_LEN] = st->ident_len;
    memcpy(t + 2 * (size_t)TENT_AUTH_NONCE_LEN + 1, st->ident, st->ident_len);
    return tent_auth_mac(a, label, t,
                         2 * TENT_AUTH_NONCE_LEN + 1u + st->ident_len, mac);
}

static bool ident_ok(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

int tent_auth_client_hello(struct tent_auth_server_state *st, const char *ident,
                           uint8_t *out, size_t *len)
{
    memset(st, 0, sizeof(*st));
    size_t il = ident ? strlen(ident) : 0;
    if (il > TENT_AUTH_MAX_IDENT)
        il = TENT_AUTH_MAX_IDENT; /* as the server will see it */
    if (getrandom(st->nc, sizeof(st->nc), 0) != (ssize_t)sizeof(st->nc))
        return -1;
    st->ident_len = (uint8_t)il;
    memcpy(st->ident, ident ? ident : "", il);
    memcpy(out, AUTH_MAGIC, 4);
    out[4] = AUTH_VERSION;
    out[5] = (uint8_t)il;
    out[6] = out[7] = 0;
    memcpy(out + 8, st->nc, TENT_AUTH_NONCE_LEN);
    memcpy(out + TENT_AUTH_HELLO_LEN, st->ident, il);
    *len = TENT_AUTH_HELLO_LEN + il;
    return 0;
}

int tent_auth_client_answer(const struct tent_auth *a,
                            struct tent_auth_server_state *st,
                            const uint8_t reply[TENT_AUTH_REPLY_LEN],
                            uint8_t proof[TENT_AUTH_MAC_LEN])
{
    uint8_t want[TENT_AUTH_MAC_LEN];
    if (memcmp(reply, AUTH_MAGIC, 4) != 0)
        return -1;
    memcpy(st->ns, reply + 8, TENT_AUTH_NONCE_LEN);
    if (!transcript_mac(a, "tent-auth-server", st, want) ||
        !tent_auth_equal(want, reply + 8 + TENT_AUTH_NONCE_LEN,
                         TENT_AUTH_MAC_LEN))
        return -2;
    return transcript_mac(a, "tent-auth-client", st, proof) ? 0 : -2;
}

bool tent_auth_hello_start(const uint8_t in[8])
{
    return memcmp(in, AUTH_MAGIC, 4) == 0 && in[4] == AUTH_VERSION;
}

int tent_auth_hello_parse(const uint8_t *in, struct tent_auth_server_state *st,
                          size_t *ident_len)
{
    if (!tent_auth_hello_start(in))
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
    if (!ident_ok(ident, st->ident_len) ||
        getrandom(st->ns, sizeof(st->ns), 0) != (ssize_t)sizeof(st->ns))
        return -1;
    memcpy(st->ident, ident, st->ident_len);
    st->ident[st->ident_len] = 0;
    /* the wire's four magic bytes, no NUL */
    // NOLINTNEXTLINE(bugprone-not-null-terminated-result)
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
           tent_auth_equal(want, proof, TENT_AUTH_MAC_LEN);
}
