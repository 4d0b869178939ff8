/* mf_host's use of libtent's shared layer (tent_base): the log level its
 * lines are filtered by, and of net/net.h its errno convention, peer urls,
 * and transfers of user memory hidden from TSan (common/tsan.h). */
#include "common/auth.h"
#include "mf_host.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

atomic_int mfh_log_level = MFH_LOG_WARN; /* set by smem_set_log_level */

int mfh_send_full(int fd, const void *buf, size_t len)
{
    return tent_net_send_all(fd, buf, len, NULL) ? -1 : 0;
}

int mfh_recv_full(int fd, void *buf, size_t len)
{
    return tent_net_recv_all(fd, buf, len, NULL) ? -1 : 0;
}

/* The client half of the handshake on fd; 0, or -1 with errno set. */
static int authenticate(int fd, const struct tent_auth *auth, const char *ident,
                        const char *url)
{
    struct tent_auth_server_state st;
    uint8_t hello[TENT_AUTH_HELLO_LEN + TENT_AUTH_MAX_IDENT];
    uint8_t reply[TENT_AUTH_REPLY_LEN], proof[TENT_AUTH_MAC_LEN];
    size_t hl = 0;
    if (tent_auth_client_hello(&st, ident, hello, &hl) != 0)
        return -1;
    if (mfh_send_full(fd, hello, hl) != 0 ||
        mfh_recv_full(fd, reply, sizeof(reply)) != 0 ||
        tent_auth_client_answer(auth, &st, reply, proof) != 0) {
        MFH_ERROR("peer %s did not prove the cluster secret of '%s' (it has "
                  "another, or none)",
                  url, tent_auth_path(auth));
        errno = EACCES;
        return -1;
    }
    return mfh_send_full(fd, proof, sizeof(proof));
}

int mfh_connect_url(const char *url, int io_ms, const struct tent_auth *auth,
                    const char *ident)
{
    char host[MFH_UID_MAX];
    uint16_t port;
    int fd = -1;
    if (tent_net_split_hostport(url, host, sizeof(host), &port) != 0 ||
        tent_net_connect(host, port, MFH_CONNECT_TIMEOUT_MS, io_ms, &fd) != 0)
        return -1;
    if (auth && authenticate(fd, auth, ident, url) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

int mfh_sendv_user(int fd, struct iovec *iov, int n)
{
    TENT_USER_IO_BEGIN();
    int rc = tent_net_sendv_all(fd, iov, n, 0, NULL, NULL) ? -1 : 0;
    int err = errno;
    TENT_USER_IO_END();
    errno = err;
    return rc;
}

int mfh_recvv_user(int fd, struct iovec *iov, int n)
{
    int rc = 0, err = 0;
    TENT_USER_IO_BEGIN();
    while (n > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t r = recvmsg(fd, &mh, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            err = r == 0 ? ECONNRESET : errno;
            rc = -1;
            break;
        }
        size_t got = (size_t)r;
        while (n > 0 && got >= iov->iov_len) {
            got -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + got;
            iov->iov_len -= got;
        }
    }
    TENT_USER_IO_END();
    errno = err;
    return rc;
}
