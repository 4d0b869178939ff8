#include "net/nics.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int prefix_of(const struct sockaddr *mask)
{
    if (!mask)
        return 0;
    const unsigned char *b;
    size_t n;
    if (mask->sa_family == AF_INET) {
        b = (const unsigned char *)&((const struct sockaddr_in *)mask)
                ->sin_addr;
        n = 4;
    } else {
        b = (const unsigned char *)&((const struct sockaddr_in6 *)mask)
                ->sin6_addr;
        n = 16;
    }
    int bits = 0;
    for (size_t i = 0; i < n; i++)
        bits += __builtin_popcount(b[i]);
    return bits;
}

static unsigned link_speed(const char *ifname)
{
    char path[96];
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    long v = 0;
    if (fscanf(f, "%ld", &v) != 1 || v <= 0)
        v = 0;
    fclose(f);
    return (unsigned)v;
}

size_t tent_nics_list(struct tent_nic *out, size_t max)
{
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0)
        return 0;
    size_t n = 0;
    /* two passes: the others first, loopback last */
    for (int pass = 0; pass < 2; pass++) {
        for (struct ifaddrs *i = ifa; i && n < max; i = i->ifa_next) {
            if (!i->ifa_addr || !(i->ifa_flags & IFF_UP))
                continue;
            int fam = i->ifa_addr->sa_family;
            if (fam != AF_INET && fam != AF_INET6)
                continue;
            bool lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
            if (lo != (pass == 1))
                continue;
            struct tent_nic *x = &out[n];
            memset(x, 0, sizeof(*x));
            const void *a;
            if (fam == AF_INET) {
                a = &((const struct sockaddr_in *)i->ifa_addr)->sin_addr;
            } else {
                const struct in6_addr *a6 =
                    &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
                if (IN6_IS_ADDR_LINKLOCAL(a6) || IN6_IS_ADDR_MULTICAST(a6))
                    continue;
                a = a6;
            }
            if (!inet_ntop(fam, a, x->addr, sizeof(x->addr)))
                continue;
            snprintf(x->name, sizeof(x->name), "%s", i->ifa_name);
            x->family = fam;
            x->ifindex = if_nametoindex(i->ifa_name);
            x->prefix_len = prefix_of(i->ifa_netmask);
            x->loopback = lo;
            x->speed_mbps = lo ? 0 : link_speed(i->ifa_name);
            n++;
        }
    }
    freeifaddrs(ifa);
    return n;
}

const struct tent_nic *tent_nic_by_addr(const struct tent_nic *nics, size_t n,
                                        const char *addr)
{
    unsigned char want[16], have[16];
    int fam = strchr(addr, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(fam, addr, want) != 1)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (nics[i].family == fam && inet_pton(fam, nics[i].addr, have) == 1 &&
            memcmp(want, have, fam == AF_INET ? 4 : 16) == 0)
            return &nics[i];
    return NULL;
}

/* Whether peer is inside local's subnet. */
static bool same_subnet(const struct tent_nic *local, const unsigned char *peer)
{
    unsigned char mine[16];
    if (inet_pton(local->family, local->addr, mine) != 1)
        return false;
    int bits = local->prefix_len;
    for (int i = 0; bits > 0; i++, bits -= 8) {
        unsigned char m =
            bits >= 8 ? 0xff : (unsigned char)(0xff << (8 - bits));
        if ((mine[i] & m) != (peer[i] & m))
            return false;
    }
    return true;
}

/* The output interface of the route from src to dst (RTM_GETROUTE), 0 when
 * the kernel does not say. */
static unsigned route_oif(int fam, const unsigned char *src,
                          const unsigned char *dst)
{
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0)
        return 0;
    size_t alen = fam == AF_INET ? 4 : 16;
    struct {
        struct nlmsghdr nh;
        struct rtmsg rt;
        char attrs[2 * RTA_SPACE(16)];
    } req;
    memset(&req, 0, sizeof(req));
    req.nh.nlmsg_type = RTM_GETROUTE;
    req.nh.nlmsg_flags = NLM_F_REQUEST;
    req.nh.nlmsg_seq = 1;
    req.rt.rtm_family = (unsigned char)fam;
    req.rt.rtm_dst_len = (unsigned char)(alen * 8);
    req.rt.rtm_src_len = (unsigned char)(alen * 8);
    size_t len = NLMSG_LENGTH(sizeof(struct rtmsg));
    const unsigned char *vals[2] = {dst, src};
    const unsigned short types[2] = {RTA_DST, RTA_SRC};
    for (int i = 0; i < 2; i++) {
        struct rtattr *ra = (struct rtattr *)((char *)&req + NLMSG_ALIGN(len));
        ra->rta_type = types[i];
        ra->rta_len = (unsigned short)RTA_LENGTH(alen);
        memcpy(RTA_DATA(ra), vals[i], alen);
        len = NLMSG_ALIGN(len) + RTA_SPACE(alen);
    }
    req.nh.nlmsg_len = (uint32_t)len;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    unsigned oif = 0;
    if (sendto(fd, &req, len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) ==
        (ssize_t)len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        char buf[8192];
        ssize_t r = poll(&p, 1, 1000) == 1 ? recv(fd, buf, sizeof(buf), 0) : -1;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf;
             r > 0 && NLMSG_OK(h, (size_t)r); h = NLMSG_NEXT(h, r)) {
            if (h->nlmsg_type != RTM_NEWROUTE)
                break;
            struct rtmsg *rt = NLMSG_DATA(h);
            int alen2 = (int)RTM_PAYLOAD(h);
            for (struct rtattr *ra = RTM_RTA(rt); RTA_OK(ra, alen2);
                 ra = RTA_NEXT(ra, alen2))
                if (ra->rta_type == RTA_OIF &&
                    RTA_PAYLOAD(ra) >= sizeof(uint32_t))
                    memcpy(&oif, RTA_DATA(ra), sizeof(uint32_t));
            break;
        }
    }
    close(fd);
    return oif;
}

bool tent_nic_routes_to(const struct tent_nic *local, const char *peer_addr)
{
    unsigned char peer[16], src[16];
    int fam = strchr(peer_addr, ':') ? AF_INET6 : AF_INET;
    if (fam != local->family || inet_pton(fam, peer_addr, peer) != 1 ||
        inet_pton(fam, local->addr, src) != 1)
        return false;
    unsigned oif = route_oif(fam, src, peer);
    if (oif)
        return oif == local->ifindex;
    return same_subnet(local, peer);
}
