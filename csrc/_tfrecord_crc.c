/*
 * The CRC32C of TFRecord's framing, with the CPU's SSE4.2 instruction (none without it: the
 * caller then leaves every record to Python).
 */
#include "_tfrecord_crc.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define HAVE_CRC_INSN 1
#else
#define HAVE_CRC_INSN 0
#endif

INTERNAL int tf_have_crc(void)
{
#if HAVE_CRC_INSN
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    return known;
#else
    return 0;
#endif
}

#if HAVE_CRC_INSN
__attribute__((target("sse4.2"))) INTERNAL uint32_t tf_crc32c(const uint8_t *p, size_t n)
{
    uint64_t crc = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = _mm_crc32_u64(crc, word);
    }
    uint32_t c = (uint32_t)crc;
    for (; n > 0; p++, n--)
        c = _mm_crc32_u8(c, *p);
    return c ^ 0xFFFFFFFFu;
}
#else
INTERNAL uint32_t tf_crc32c(const uint8_t *p, size_t n)
{
    (void)p;
    (void)n;
    return 0; /* never called: tf_have_crc() is 0 */
}
#endif

INTERNAL uint32_t tf_masked(const uint8_t *p, size_t n)
{
    uint32_t crc = tf_crc32c(p, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}
