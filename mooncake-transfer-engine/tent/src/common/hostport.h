/* "<host>:<port>" as peers and the vendor library expect it: an IPv6
 * literal goes in brackets ("[::1]:5000"). */
#ifndef TENT_COMMON_HOSTPORT_H
#define TENT_COMMON_HOSTPORT_H

#include <stdio.h>
#include <string.h>

/* Returns snprintf's result: the length wanted, negative on error. */
static inline int tent_format_hostport(char *buf, size_t len, const char *host,
                                       unsigned port)
{
    if (strchr(host, ':'))
        return snprintf(buf, len, "[%s]:%u", host, port);
    return snprintf(buf, len, "%s:%u", host, port);
}

#endif
