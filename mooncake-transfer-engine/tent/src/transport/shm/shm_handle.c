#include "transport/shm/shm_handle.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

/* Decimal digits only (no sign, no spaces), at most 20 of them, and no
 * more than fits in 64 bits.  Called for every submit call: no strtoull
 * (locale, errno). */
int tent_shm_parse_u64(const char *s, const char **end, unsigned long long *v)
{
    const char *p = s;
    unsigned long long x = 0;
    const unsigned long long top = ~0ull / 10;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        /* 19 digits always fit; a 20th only below 2^64 */
        if (p - s >= 19 &&
            (p - s >= 20 || x > top || (x == top && d > ~0ull % 10)))
            return -1;
        x = x * 10 + d;
    }
    if (p == s)
        return -1;
    *end = p;
    *v = x;
    return 0;
}

int tent_shm_parse_handle(const char *s, int *fd, unsigned long long *ino)
{
    const char *p;
    unsigned long long f, i;
    if (!s || strncmp(s, "memfd:", 6) != 0 ||
        tent_shm_parse_u64(s + 6, &p, &f) || *p != ':' || f > 0x7fffffff ||
        tent_shm_parse_u64(p + 1, &p, &i) || *p)
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
    if (!s || tent_shm_parse_u64(s, &p, &v) || *p || v == 0 || v > (1ull << 30))
        return -1;
    return (long)v;
}
