/* The machine's network interfaces and the kernel's routes between them and
 * a peer's, for the transports that publish NICs and the rails built over
 * them (sched/rails.h). */
#ifndef TENT_NET_NICS_H
#define TENT_NET_NICS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define TENT_NIC_NAME_MAX 32
#define TENT_NIC_ADDR_MAX 64

/* One address of one interface. */
struct tent_nic {
    char name[TENT_NIC_NAME_MAX]; /* "eth0", "lo" */
    char addr[TENT_NIC_ADDR_MAX]; /* numeric, no brackets: "10.0.0.2", "fd00::2"
                                   */
    int family;                   /* AF_INET, AF_INET6 */
    unsigned ifindex;
    int prefix_len;
    bool loopback;
    unsigned speed_mbps; /* the link speed sysfs gives, 0 when unknown */
};

/* The interfaces that are up with an address a peer can reach: IPv4 and
 * global IPv6 (link-local ones need a scope and are left out), at most max
 * of them, loopback ones last.  Returns the count (0: none, or getifaddrs
 * failed). */
size_t tent_nics_list(struct tent_nic *out, size_t max);

/* The NIC of out[0..n) holding address addr (numeric), or NULL. */
const struct tent_nic *tent_nic_by_addr(const struct tent_nic *nics, size_t n,
                                        const char *addr);

/* Whether the kernel sends traffic from local's address to peer_addr out of
 * local's own interface (a route lookup with that source, as `ip route get
 * <peer> from <local>`).  Without an answer from the kernel, whether
 * peer_addr is inside local's subnet. */
bool tent_nic_routes_to(const struct tent_nic *local, const char *peer_addr);

/* Whether host (numeric, or "localhost") is a loopback address
 * (127.0.0.0/8, ::1).  Inline: the classic library, which sees only
 * libtent's public symbols, uses it too. */
static inline bool tent_addr_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return strcmp(host, "localhost") == 0;
}

#endif
