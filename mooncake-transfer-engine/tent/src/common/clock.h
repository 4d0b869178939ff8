/* The monotonic clock in the units the code uses: one copy for libtent,
 * mf_host and the tools. */
#ifndef TENT_COMMON_CLOCK_H
#define TENT_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t tent_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline long long tent_now_ms(void)
{
    return (long long)(tent_now_ns() / 1000000ull);
}

#endif
