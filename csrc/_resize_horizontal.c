/*
 * The horizontal pass of iotool._resize: one source row to one output row, interleaved or one
 * row per plane. 3-channel rows go through an SSSE3 kernel (one 16-byte load gives four taps of a
 * pixel; pshufb spreads them into pmaddwd pairs), two rows at once with AVX2; a scalar kernel does
 * the rest. See _resize.c for what the module does.
 */
#include "_resize_horizontal.h"

#include "_resize_cpu.h"

/* Any channel count and pixel stride. Output: interleaved (planes == NULL) or one row per plane. */
static void hrow_scalar(const uint8_t *row, int channels, const axis_t *ax, uint8_t *out,
                        uint8_t *const *planes)
{
    int32_t bias = 1 << (ax->prec - 1);
    for (int x = 0; x < ax->out; x++) {
        const int16_t *w = ax->w + (size_t)x * ax->maxk;
        const uint8_t *p = row + (size_t)ax->start[x] * channels;
        for (int c = 0; c < channels; c++) {
            int32_t acc = bias;
            for (int k = 0; k < ax->count[x]; k++)
                acc += w[k] * p[k * channels + c];
            uint8_t v = clip8(acc >> ax->prec);
            if (planes)
                planes[c][x] = v;
            else
                out[(size_t)x * channels + c] = v;
        }
    }
}

#if HAVE_X86
#define SSSE3 __attribute__((target("ssse3")))

/* One output pixel of 3 channels: [R, G, B, 0] as int32 sums (bias included) over `groups`
 * groups of four taps; one 16-byte load per group (12 bytes used), pshufb to int16 pairs of
 * neighbouring taps, pmaddwd with the pairs of weights. */
SSSE3 static inline __attribute__((always_inline)) __m128i pixel3(const uint8_t *p, const __m128i *wp,
                                                                    int groups, __m128i bias)
{
    const __m128i lo = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m128i hi = _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    __m128i acc = bias;
    for (int g = 0; g < groups; g++, p += 12, wp += 2) {
        __m128i s = _mm_loadu_si128((const __m128i *)p);
        acc = _mm_add_epi32(acc, _mm_add_epi32(_mm_madd_epi16(_mm_shuffle_epi8(s, lo), wp[0]),
                                               _mm_madd_epi16(_mm_shuffle_epi8(s, hi), wp[1])));
    }
    return acc;
}

/* Store 4 pixels (the low 12 bytes of `bytes` after the shuffle that `planes` selects; only the
 * first m when m < 4) of one row. */
SSSE3 static inline __attribute__((always_inline)) void store4(__m128i bytes, int x, int m, uint8_t *out,
                                                               uint8_t *const *planes)
{
    if (planes) {
        if (m == 4) {
            uint32_t r = (uint32_t)_mm_cvtsi128_si32(bytes);
            uint32_t g = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(bytes, 4));
            uint32_t b = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(bytes, 8));
            memcpy(planes[0] + x, &r, 4);
            memcpy(planes[1] + x, &g, 4);
            memcpy(planes[2] + x, &b, 4);
        } else {
            uint8_t tmp[16];
            _mm_storeu_si128((__m128i *)tmp, bytes);
            for (int i = 0; i < m; i++)
                for (int c = 0; c < 3; c++)
                    planes[c][x + i] = tmp[4 * c + i];
        }
    } else if (m == 4) {
        uint64_t a = (uint64_t)_mm_cvtsi128_si64(bytes);
        uint32_t b = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(bytes, 8));
        memcpy(out + (size_t)x * 3, &a, 8);
        memcpy(out + (size_t)x * 3 + 8, &b, 4);
    } else {
        uint8_t tmp[16];
        _mm_storeu_si128((__m128i *)tmp, bytes);
        for (int i = 0; i < m * 3; i++)
            out[(size_t)x * 3 + i] = tmp[i];
    }
}

/* 3 channels, `groups` groups of four taps per output pixel (a row must have 4 readable bytes
 * after its last pixel); `pairs` holds ax->out x groups x 2 vectors of int16 weight pairs.
 * Output: interleaved (planes == NULL) or one row per plane. */
SSSE3 static inline __attribute__((always_inline)) void hrow3_body(
    const uint8_t *row, int n, int prec, const int *gstart, const __m128i *pairs, int groups,
    uint8_t *out, uint8_t *const *planes)
{
    const __m128i packed = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    const __m128i planar = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, -1, -1, -1, -1);
    const __m128i bias = _mm_set1_epi32(1 << (prec - 1));
    const __m128i shift = _mm_cvtsi32_si128(prec);
    const size_t step = (size_t)groups * 2;
    int x = 0;
    for (; x < n; x += 4) {
        int x1 = x + 1 < n ? x + 1 : x, x2 = x + 2 < n ? x + 2 : x, x3 = x + 3 < n ? x + 3 : x;
        __m128i v0 = pixel3(row + (size_t)gstart[x] * 3, pairs + x * step, groups, bias);
        __m128i v1 = pixel3(row + (size_t)gstart[x1] * 3, pairs + x1 * step, groups, bias);
        __m128i v2 = pixel3(row + (size_t)gstart[x2] * 3, pairs + x2 * step, groups, bias);
        __m128i v3 = pixel3(row + (size_t)gstart[x3] * 3, pairs + x3 * step, groups, bias);
        v0 = _mm_sra_epi32(v0, shift);
        v1 = _mm_sra_epi32(v1, shift);
        v2 = _mm_sra_epi32(v2, shift);
        v3 = _mm_sra_epi32(v3, shift);
        __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(v0, v1), _mm_packs_epi32(v2, v3));
        bytes = _mm_shuffle_epi8(bytes, planes ? planar : packed);
        store4(bytes, x, n - x < 4 ? n - x : 4, out, planes);
    }
}

/* The body specialised for one and two groups (up to 8 taps: downscales up to ~3.5x), where the
 * tap loop unrolls; any count otherwise. */
SSSE3 static void hrow3_ssse3(const uint8_t *row, const axis_t *ax, const int *gstart, const __m128i *pairs,
                              int groups, uint8_t *out, uint8_t *const *planes)
{
    if (groups == 1)
        hrow3_body(row, ax->out, ax->prec, gstart, pairs, 1, out, planes);
    else if (groups == 2)
        hrow3_body(row, ax->out, ax->prec, gstart, pairs, 2, out, planes);
    else
        hrow3_body(row, ax->out, ax->prec, gstart, pairs, groups, out, planes);
}

#define AVX2 __attribute__((target("avx2")))

/* Two rows at once, one per 128-bit lane, sharing the weights (AVX2). */
AVX2 static inline __attribute__((always_inline)) __m256i pixel3x2(const uint8_t *pa, const uint8_t *pb,
                                                                   const __m128i *wp, int groups, __m256i bias)
{
    const __m256i lo = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
                                        0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m256i hi = _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1,
                                        6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    __m256i acc = bias;
    for (int g = 0; g < groups; g++, pa += 12, pb += 12, wp += 2) {
        __m256i s = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)pa)),
                                            _mm_loadu_si128((const __m128i *)pb), 1);
        __m256i w0 = _mm256_broadcastsi128_si256(wp[0]), w1 = _mm256_broadcastsi128_si256(wp[1]);
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(_mm256_shuffle_epi8(s, lo), w0),
                                                     _mm256_madd_epi16(_mm256_shuffle_epi8(s, hi), w1)));
    }
    return acc;
}

AVX2 static inline __attribute__((always_inline)) void hrow3x2_body(
    const uint8_t *ra, const uint8_t *rb, int n, int prec, const int *gstart, const __m128i *pairs,
    int groups, uint8_t *oa, uint8_t *ob, uint8_t *const *pa, uint8_t *const *pb)
{
    const __m256i packed = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,
                                            0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    const __m256i planar = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, -1, -1, -1, -1,
                                            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, -1, -1, -1, -1);
    const __m256i bias = _mm256_set1_epi32(1 << (prec - 1));
    const __m128i shift = _mm_cvtsi32_si128(prec);
    const size_t step = (size_t)groups * 2;
    for (int x = 0; x < n; x += 4) {
        int x1 = x + 1 < n ? x + 1 : x, x2 = x + 2 < n ? x + 2 : x, x3 = x + 3 < n ? x + 3 : x;
        size_t s0 = (size_t)gstart[x] * 3, s1 = (size_t)gstart[x1] * 3;
        size_t s2 = (size_t)gstart[x2] * 3, s3 = (size_t)gstart[x3] * 3;
        __m256i v0 = _mm256_sra_epi32(pixel3x2(ra + s0, rb + s0, pairs + x * step, groups, bias), shift);
        __m256i v1 = _mm256_sra_epi32(pixel3x2(ra + s1, rb + s1, pairs + x1 * step, groups, bias), shift);
        __m256i v2 = _mm256_sra_epi32(pixel3x2(ra + s2, rb + s2, pairs + x2 * step, groups, bias), shift);
        __m256i v3 = _mm256_sra_epi32(pixel3x2(ra + s3, rb + s3, pairs + x3 * step, groups, bias), shift);
        __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
        bytes = _mm256_shuffle_epi8(bytes, pa ? planar : packed);
        int m = n - x < 4 ? n - x : 4;
        store4(_mm256_castsi256_si128(bytes), x, m, oa, pa);
        store4(_mm256_extracti128_si256(bytes, 1), x, m, ob, pb);
    }
}

AVX2 static void hrow3x2_avx2(const uint8_t *ra, const uint8_t *rb, const axis_t *ax, const int *gstart,
                              const __m128i *pairs, int groups, uint8_t *oa, uint8_t *ob,
                              uint8_t *const *pa, uint8_t *const *pb)
{
    if (groups == 1)
        hrow3x2_body(ra, rb, ax->out, ax->prec, gstart, pairs, 1, oa, ob, pa, pb);
    else if (groups == 2)
        hrow3x2_body(ra, rb, ax->out, ax->prec, gstart, pairs, 2, oa, ob, pa, pb);
    else
        hrow3x2_body(ra, rb, ax->out, ax->prec, gstart, pairs, groups, oa, ob, pa, pb);
}
#endif

/* The horizontal pass of source rows [y0, y1) into `out` (rows of out_w pixels, interleaved, or
 * planes of `plane_rows` rows). */
INTERNAL void rs_hpass(const job_t *j, const axis_t *ax, int y0, int y1, uint8_t *out, int plane_rows,
                       char *scratch)
{
    int ch = j->channels;
    size_t row_bytes = (size_t)j->width * ch;
#if HAVE_X86
    /* SSSE3 taps in groups of four: every window is moved inside the row (its weights shifted,
     * zero weights padding it) so each group load stays within the row plus 4 bytes. */
    int maxcount = 0;
    for (int x = 0; x < ax->out; x++)
        maxcount = ax->count[x] > maxcount ? ax->count[x] : maxcount;
    int groups = (maxcount + 3) / 4;
    int simd = ch == 3 && groups <= 16 && groups * 4 <= j->width && rs_have_ssse3();
    __m128i *pairs = NULL;
    int *gstart = NULL;
    uint8_t *last = NULL;
    if (simd) {
        pairs = (__m128i *)(((uintptr_t)scratch + 15) & ~(uintptr_t)15);
        gstart = (int *)(pairs + (size_t)ax->out * groups * 2);
        last = (uint8_t *)(gstart + ax->out);
        for (int x = 0; x < ax->out; x++) {
            int s = ax->start[x], shift = 0;
            if (s + groups * 4 > j->width) {
                shift = s + groups * 4 - j->width;
                s -= shift;
            }
            gstart[x] = s;
            int16_t taps[64] = {0};
            for (int k = 0; k < ax->count[x]; k++)
                taps[shift + k] = ax->w[(size_t)x * ax->maxk + k];
            for (int t = 0; t < groups * 4; t += 2) {
                uint32_t pair = (uint16_t)taps[t] | ((uint32_t)(uint16_t)taps[t + 1] << 16);
                pairs[(size_t)x * groups * 2 + t / 2] = _mm_set1_epi32((int32_t)pair);
            }
        }
    }
#endif
    for (int y = y0; y < y1; y++) {
        const uint8_t *row = j->src + (ptrdiff_t)y * j->row_stride;
        size_t r = (size_t)(y - y0);
        uint8_t *o = out + r * ax->out * ch, *planes[4], *planes2[4];
        if (j->planar) {
            for (int c = 0; c < ch; c++) {
                planes[c] = out + ((size_t)plane_of(j, c) * plane_rows + r) * ax->out;
                planes2[c] = planes[c] + ax->out;
            }
        }
        (void)planes2;  /* read by the AVX2 path only */
#if HAVE_X86
        if (simd) {
            if (y + 1 < y1 && y + 1 < j->height - 1 && rs_have_avx2()) {  /* two rows, neither the last */
                hrow3x2_avx2(row, row + j->row_stride, ax, gstart, pairs, groups, o, o + ax->out * ch,
                             j->planar ? planes : NULL, j->planar ? planes2 : NULL);
                y++;
                continue;
            }
            if (y == j->height - 1) {  /* the image's last row may end its buffer: read a copy */
                memcpy(last, row, row_bytes);
                memset(last + row_bytes, 0, 16);
                row = last;
            }
            hrow3_ssse3(row, ax, gstart, pairs, groups, o, j->planar ? planes : NULL);
            continue;
        }
#endif
        hrow_scalar(row, ch, ax, o, j->planar ? planes : NULL);
    }
    (void)scratch;
    (void)row_bytes;
}

INTERNAL size_t rs_hpass_scratch(const job_t *j, int out_w)
{
    /* per output pixel: the pair vectors of at most (maxk + 3) / 4 groups and gstart; the
     * last-row copy; alignment */
    double scale = (double)j->width / out_w, support = scale >= 1.0 ? scale : 1.0;
    size_t groups = ((size_t)ceil(support) * 2 + 1 + 3) / 4;
    return (size_t)out_w * (groups * 2 * 16 + sizeof(int)) + (size_t)j->width * j->channels + 64;
}

