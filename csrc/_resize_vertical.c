/*
 * The vertical pass of iotool._resize: output row y is the source rows of its window weighted
 * by the height axis's weights, rounded; rows paired in pmaddwd (SSE2, or AVX2), a scalar loop
 * for the rest. See _resize.c for what the module does.
 */
#include "_resize_vertical.h"

#include "_resize_cpu.h"

/* dst row y = the rows ay->start[y] - first ... of src weighted by ay's weights, rounded. */
static void vpass_scalar(const uint8_t *src, ptrdiff_t src_stride, int first, int len, const axis_t *ay,
                         uint8_t *dst, ptrdiff_t dst_stride, int from)
{
    const int32_t bias = 1 << (ay->prec - 1);
    for (int y = 0; y < ay->out; y++) {
        const int16_t *w = ay->w + (size_t)y * ay->maxk;
        const uint8_t *base = src + (ptrdiff_t)(ay->start[y] - first) * src_stride;
        uint8_t *o = dst + (ptrdiff_t)y * dst_stride;
        for (int i = from; i < len; i++) {
            int32_t acc = bias;
            for (int k = 0; k < ay->count[y]; k++)
                acc += w[k] * base[(ptrdiff_t)k * src_stride + i];
            o[i] = clip8(acc >> ay->prec);
        }
    }
}

#if HAVE_X86
/* Taps in pairs: the bytes of two rows interleaved and widened to int16 meet a pair of weights
 * in pmaddwd (an odd last tap is paired with a zero weight on the same row). Returns how many
 * leading bytes of each row were done; the caller finishes the rest. */
#define VPASS_BODY(VEC, LOAD, STORE, SET1, SETZERO, UNLO8, UNHI8, UNLO16, UNHI16, MADD, ADD, SRA,  \
                   PACKS, PACKUS, WIDTH)                                                           \
    const VEC zero = SETZERO();                                                                    \
    const VEC bias = SET1(1 << (ay->prec - 1));                                                    \
    const __m128i shift = _mm_cvtsi32_si128(ay->prec);                                             \
    int done = len - len % WIDTH;                                                                  \
    for (int y = 0; y < ay->out; y++) {                                                            \
        const int16_t *w = ay->w + (size_t)y * ay->maxk;                                           \
        const uint8_t *base = src + (ptrdiff_t)(ay->start[y] - first) * src_stride;               \
        uint8_t *o = dst + (ptrdiff_t)y * dst_stride;                                              \
        int taps = ay->count[y];                                                                   \
        for (int i = 0; i < done; i += WIDTH) {                                                    \
            VEC a0 = bias, a1 = bias, a2 = bias, a3 = bias;                                        \
            for (int k = 0; k < taps; k += 2) {                                                    \
                const uint8_t *r = base + (ptrdiff_t)k * src_stride + i;                           \
                int second = k + 1 < taps;                                                         \
                uint32_t pair = (uint16_t)w[k] | ((uint32_t)(uint16_t)(second ? w[k + 1] : 0) << 16); \
                VEC wk = SET1((int32_t)pair);                                                      \
                VEC s0 = LOAD((const VEC *)r);                                                     \
                VEC s1 = second ? LOAD((const VEC *)(r + src_stride)) : s0;                        \
                VEC lo = UNLO8(s0, s1), hi = UNHI8(s0, s1);                                        \
                a0 = ADD(a0, MADD(UNLO8(lo, zero), wk));                                           \
                a1 = ADD(a1, MADD(UNHI8(lo, zero), wk));                                           \
                a2 = ADD(a2, MADD(UNLO8(hi, zero), wk));                                           \
                a3 = ADD(a3, MADD(UNHI8(hi, zero), wk));                                           \
            }                                                                                      \
            a0 = SRA(a0, shift);                                                                   \
            a1 = SRA(a1, shift);                                                                   \
            a2 = SRA(a2, shift);                                                                   \
            a3 = SRA(a3, shift);                                                                   \
            STORE((VEC *)(o + i), PACKUS(PACKS(a0, a1), PACKS(a2, a3)));                           \
        }                                                                                          \
    }                                                                                              \
    return done;

static int vpass_sse2(const uint8_t *src, ptrdiff_t src_stride, int first, int len, const axis_t *ay,
                      uint8_t *dst, ptrdiff_t dst_stride)
{
    VPASS_BODY(__m128i, _mm_loadu_si128, _mm_storeu_si128, _mm_set1_epi32, _mm_setzero_si128,
               _mm_unpacklo_epi8, _mm_unpackhi_epi8, _mm_unpacklo_epi16, _mm_unpackhi_epi16,
               _mm_madd_epi16, _mm_add_epi32, _mm_sra_epi32, _mm_packs_epi32, _mm_packus_epi16, 16)
}

__attribute__((target("avx2")))
static int vpass_avx2(const uint8_t *src, ptrdiff_t src_stride, int first, int len, const axis_t *ay,
                      uint8_t *dst, ptrdiff_t dst_stride)
{
    VPASS_BODY(__m256i, _mm256_loadu_si256, _mm256_storeu_si256, _mm256_set1_epi32, _mm256_setzero_si256,
               _mm256_unpacklo_epi8, _mm256_unpackhi_epi8, _mm256_unpacklo_epi16, _mm256_unpackhi_epi16,
               _mm256_madd_epi16, _mm256_add_epi32, _mm256_sra_epi32, _mm256_packs_epi32, _mm256_packus_epi16,
               32)
}

#endif

INTERNAL void rs_vpass(const uint8_t *src, ptrdiff_t src_stride, int first, int len, const axis_t *ay,
                       uint8_t *dst, ptrdiff_t dst_stride)
{
    int done = 0;
#if HAVE_X86
    if (rs_have_avx2())
        done = vpass_avx2(src, src_stride, first, len, ay, dst, dst_stride);
    else if (rs_level_cap >= 1)
        done = vpass_sse2(src, src_stride, first, len, ay, dst, dst_stride);
#endif
    if (done < len)
        vpass_scalar(src, src_stride, first, len, ay, dst, dst_stride, done);
}
