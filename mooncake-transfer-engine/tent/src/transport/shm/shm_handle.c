#include "transport/shm/shm_handle.h"

#include "common/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Decimal digits only (no sign, no spaces), at most 20 of them. */
static int parse_dec(const char *s, const char **end, unsigned long long *v)
{
    const char *p = s;
    while (*p >= '0' && *p <= '9')
        p++;
    if (p == s || p - s > 20)
        return -1;
    char *e;
    errno = 0;
    *v = strtoull(s, &e, 10);
    if (errno || e != p)
        return -1;
    *end = p;
    return 0;
}

int tent_shm_parse_handle(const char *s, int *fd, unsigned long long *ino)
{
    const char *p;
    unsigned long long f, i;
    if (!s || strncmp(s, "memfd:", 6) != 0 || parse_dec(s + 6, &p, &f) ||
        *p != ':' || f > 0x7fffffff || parse_dec(p + 1, &p, &i) || *p)
        return tent_set_error(TENT_EPROTO, "shm: handle '%s' is malformed",
                              s ? s : "(null)");
    *fd = (int)f;
    *ino = i;
    return TENT_OK;
}

long tent_shm_parse_pid(const char *s)
{
    const char *p;
    unsigned long long v;
    if (!s || parse_dec(s, &p, &v) || *p || v == 0 || v > (1ull << 30))
        return -1;
    return (long)v;
}
