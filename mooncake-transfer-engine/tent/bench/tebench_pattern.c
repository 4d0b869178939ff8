/* tebench's byte pattern (what --check_consistency expects at every
 * target offset) and the target's test switch that breaks it on purpose
 * (TEBENCH_TEST_CORRUPT). */
#include "tebench.h"

#include <stdlib.h>
#include <string.h>

/* ---- pattern ------------------------------------------------------------ */

uint64_t tb_pattern_key(uint64_t seed, int case_idx, uint64_t gen, bool fixed)
{
    if (fixed)
        return tb_splitmix64(seed);
    return tb_splitmix64(seed ^ tb_splitmix64((uint64_t)case_idx + 1) ^
                         (gen * 0xd1b54a32d192ed03ull));
}

static inline uint64_t pattern_word(uint64_t key, uint64_t word)
{
    return tb_splitmix64(key ^ (word * 0x9e3779b97f4a7c15ull));
}

static inline uint8_t pattern_byte(uint64_t key, uint64_t off)
{
    return (uint8_t)(pattern_word(key, off >> 3) >> ((off & 7) * 8));
}

void tb_pattern_fill(void *dst, uint64_t len, uint64_t key, uint64_t off)
{
    uint8_t *p = dst;
    uint64_t i = 0;
    for (; i < len && ((off + i) & 7); i++)
        p[i] = pattern_byte(key, off + i);
    for (; i + 8 <= len; i += 8) {
        uint64_t w = pattern_word(key, (off + i) >> 3);
        memcpy(p + i, &w, 8); /* little-endian byte order, as pattern_byte */
    }
    for (; i < len; i++)
        p[i] = pattern_byte(key, off + i);
}

uint64_t tb_pattern_check(const void *buf, uint64_t len, uint64_t key,
                          uint64_t off, uint8_t *expected)
{
    const uint8_t *p = buf;
    uint64_t i = 0;
    for (; i < len && ((off + i) & 7); i++)
        if (p[i] != pattern_byte(key, off + i))
            goto bad;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = pattern_word(key, (off + i) >> 3), got;
        memcpy(&got, p + i, 8);
        if (got != w) {
            while (p[i] == pattern_byte(key, off + i))
                i++;
            goto bad;
        }
    }
    for (; i < len; i++)
        if (p[i] != pattern_byte(key, off + i))
            goto bad;
    return len;
bad:
    if (expected)
        *expected = pattern_byte(key, off + i);
    return i;
}

/* ---- test switch: one wrong byte ------------------------------------------
 */

/* TEBENCH_TEST_CORRUPT=1 (test-only): once the initiator has written the
 * bytes at buffer offset TEBENCH_TEST_CORRUPT_OFFSET (default 100), wait
 * TEBENCH_TEST_CORRUPT_DELAY_MS (default 0) and flip one of them, once, so a
 * test can prove --check_consistency notices. */
void tb_corrupter_init(struct tb_corrupter *k, char *buf, uint64_t len)
{
    const char *env = getenv("TEBENCH_TEST_CORRUPT");
    k->at = NULL;
    k->armed = false;
    if (!env || !*env || strcmp(env, "0") == 0)
        return;
    uint64_t off = 100;
    const char *o = getenv("TEBENCH_TEST_CORRUPT_OFFSET");
    if (o && *o)
        off = strtoull(o, NULL, 0);
    if (off + 8 > len) {
        fprintf(stderr,
                "tebench target: TEBENCH_TEST_CORRUPT_OFFSET=%llu is outside "
                "the %llu-byte buffer; not corrupting\n",
                (unsigned long long)off, (unsigned long long)len);
        return;
    }
    k->at = (volatile uint8_t *)buf + off;
    k->armed = true;
    const char *d = getenv("TEBENCH_TEST_CORRUPT_DELAY_MS");
    k->delay = d && *d ? strtod(d, NULL) / 1000 : 0;
    k->written_at = 0;
    fprintf(stderr,
            "tebench target: test switch TEBENCH_TEST_CORRUPT set: will flip "
            "the byte at buffer offset %llu once it has been written\n",
            (unsigned long long)off);
}

void tb_corrupter_poll(struct tb_corrupter *k, char *buf)
{
    if (!k->armed)
        return;
    bool written = false;
    for (int i = 0; i < 8; i++)
        written |= k->at[i] != 0;
    if (!written)
        return;
    if (k->written_at == 0)
        k->written_at = tb_now();
    if (tb_now() - k->written_at < k->delay)
        return;
    uint8_t before = k->at[0];
    k->at[0] = (uint8_t)(before ^ 0xff);
    k->armed = false;
    fprintf(stderr,
            "tebench target: TEBENCH_TEST_CORRUPT: flipped byte at buffer "
            "offset %llu: 0x%02x -> 0x%02x\n",
            (unsigned long long)((const char *)k->at - buf), before,
            (unsigned)(uint8_t)(before ^ 0xff));
}
