/*
 * Antialiased bilinear resize of HxWxC uint8 images, bit-exact with torch's uint8 kernel.
 *
 * resize(src, dst, out_height, out_width, planar[, swap]) resizes src (an HxWxC uint8 buffer
 * whose pixels are C adjacent bytes and whose rows may be strided: a crop view of a larger image
 * is read in place) into dst, a C-contiguous buffer of out_height x out_width x C bytes laid out
 * as CxHxW planes (planar=1) or HxWxC (planar=0). With swap (planar only), the planes come out in
 * reversed channel order: BGR pixels (a BMP's rows) give RGB planes, with no conversion pass.
 *
 * The arithmetic is torch's F.interpolate(mode="bilinear", antialias=True) on uint8
 * (ATen's UpSampleKernel.cpp, itself after Pillow's Resample.c): per axis, a triangle filter
 * widened by the downscale factor, weights normalised in double precision and rounded to int16
 * at a per-axis precision; a horizontal pass over the rows the vertical pass needs, rounded and
 * clamped to uint8, then a vertical pass. Integer sums are exact, so any summation order gives
 * the same bytes; the pass order and every rounding step are torch's, so the output is identical.
 *
 * Speed: on x86-64, 3-channel rows go through an SSSE3 kernel (one 16-byte load gives four taps
 * of a pixel; pshufb spreads them into pmaddwd pairs), two rows at once with AVX2, and the
 * vertical pass pairs rows in pmaddwd (SSE2, or AVX2): chosen at run time. A portable scalar path
 * does everything else (other CPUs, 1, 2 or 4 channels, tails); all paths give the same bytes.
 * Each call allocates one block (weights and the intermediate rows); the GIL is released.
 *
 * Built against CPython's limited API (Py_LIMITED_API, set by setup.py; the buffer protocol is in
 * it from 3.11), so one abi3 wheel serves every CPython the project supports.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_X86 1
#include <immintrin.h>
#else
#define HAVE_X86 0
#endif

/* One axis: for each output index, the first input index, the tap count and the int16 weights
 * (maxk per output, zero-padded). */
typedef struct {
    int in, out, maxk, prec;
    int *start, *count;
    int16_t *w;
} axis_t;

static double triangle(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static size_t axis_bytes(int in, int out)
{
    double scale = (double)in / out, support = scale >= 1.0 ? scale : 1.0;
    int maxk = (int)ceil(support) * 2 + 1;
    return (size_t)out * (2 * sizeof(int) + (size_t)maxk * (sizeof(int16_t) + sizeof(double))) + 64;
}

/* torch's _compute_indices_min_size_weights_aa and _compute_index_ranges_int16_weights
 * (bilinear, align_corners=False, no scale factor), on memory carved from `mem`. */
static char *axis_init(axis_t *a, int in, int out, char *mem)
{
    double scale = (double)in / out;
    double support = scale >= 1.0 ? scale : 1.0;
    double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    int maxk = (int)ceil(support) * 2 + 1;
    double *wf = (double *)mem, wt_max = 0.0;
    mem += (size_t)out * maxk * sizeof(double);
    a->start = (int *)mem;
    mem += (size_t)out * sizeof(int);
    a->count = (int *)mem;
    mem += (size_t)out * sizeof(int);
    a->w = (int16_t *)mem;
    mem += (size_t)out * maxk * sizeof(int16_t);
    a->in = in;
    a->out = out;
    a->maxk = maxk;
    for (int i = 0; i < out; i++) {
        double center = scale * (i + 0.5), total = 0.0, *ws = wf + (size_t)i * maxk;
        int64_t lo = (int64_t)(center - support + 0.5), hi = (int64_t)(center + support + 0.5);
        if (lo < 0)
            lo = 0;
        if (hi > in)
            hi = in;
        int64_t n = hi - lo;
        n = n < 0 ? 0 : (n > maxk ? maxk : n);
        for (int j = 0; j < n; j++) {
            ws[j] = triangle(((double)(j + lo) - center + 0.5) * invscale);
            total += ws[j];
        }
        if (total != 0.0)
            for (int j = 0; j < n; j++) {
                ws[j] /= total;
                if (ws[j] > wt_max)
                    wt_max = ws[j];
            }
        for (int j = (int)n; j < maxk; j++)
            ws[j] = 0.0;
        a->start[i] = (int)lo;
        a->count[i] = (int)n;
    }
    int prec;
    for (prec = 0; prec < 22; prec++)
        if ((int)(0.5 + wt_max * (1 << (prec + 1))) >= (1 << 15))
            break;
    a->prec = prec;
    for (size_t j = 0; j < (size_t)out * maxk; j++) {
        double v = wf[j] * (1 << prec);
        a->w[j] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    return mem;
}

static inline uint8_t clip8(int32_t v)
{
    return v < 0 ? 0 : (v > 255 ? 255 : (uint8_t)v);
}

/* --- horizontal pass: one source row to one output row ------------------------------------- */

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

/* The widest instruction set the kernels may use: 2 AVX2, 1 SSSE3/SSE2, 0 scalar (set_level, for
 * the tests that compare the paths). */
static int level_cap = 2;

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

static int have_avx2(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return known && level_cap >= 2;
}

static int have_ssse3(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("ssse3") ? 1 : 0;
    }
    return known && level_cap >= 1;
}
#endif

/* --- vertical pass: rows of `len` bytes ---------------------------------------------------- */

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

static void vpass(const uint8_t *src, ptrdiff_t src_stride, int first, int len, const axis_t *ay,
                  uint8_t *dst, ptrdiff_t dst_stride)
{
    int done = 0;
#if HAVE_X86
    if (have_avx2())
        done = vpass_avx2(src, src_stride, first, len, ay, dst, dst_stride);
    else if (level_cap >= 1)
        done = vpass_sse2(src, src_stride, first, len, ay, dst, dst_stride);
#endif
    if (done < len)
        vpass_scalar(src, src_stride, first, len, ay, dst, dst_stride, done);
}

/* --- the whole resize ---------------------------------------------------------------------- */

typedef struct {
    const uint8_t *src;
    ptrdiff_t row_stride;
    int height, width, channels;
    uint8_t *dst;
    int out_h, out_w, planar, swap;
} job_t;

/* The plane of dst that channel c of src goes to. */
static inline int plane_of(const job_t *j, int c)
{
    return j->swap ? j->channels - 1 - c : c;
}

/* The horizontal pass of source rows [y0, y1) into `out` (rows of out_w pixels, interleaved, or
 * planes of `plane_rows` rows). */
static void hpass(const job_t *j, const axis_t *ax, int y0, int y1, uint8_t *out, int plane_rows,
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
    int simd = ch == 3 && groups <= 16 && groups * 4 <= j->width && have_ssse3();
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
            if (y + 1 < y1 && y + 1 < j->height - 1 && have_avx2()) {  /* two rows, neither the last */
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

static size_t hpass_scratch(const job_t *j, int out_w)
{
    /* per output pixel: the pair vectors of at most (maxk + 3) / 4 groups and gstart; the
     * last-row copy; alignment */
    double scale = (double)j->width / out_w, support = scale >= 1.0 ? scale : 1.0;
    size_t groups = ((size_t)ceil(support) * 2 + 1 + 3) / 4;
    return (size_t)out_w * (groups * 2 * 16 + sizeof(int)) + (size_t)j->width * j->channels + 64;
}

/* Runs without the GIL. Returns NULL or an error message. */
static const char *run(const job_t *j)
{
    int ch = j->channels;
    int need_h = j->width != j->out_w, need_v = j->height != j->out_h;
    size_t plane = (size_t)j->out_h * j->out_w;
    axis_t ax, ay;
    /* the rows the vertical pass reads, [y0, y1), go through the horizontal pass */
    int y0 = 0, y1 = j->height, rows;
    size_t head = axis_bytes(j->width, j->out_w) + axis_bytes(j->height, j->out_h) + hpass_scratch(j, j->out_w);
    size_t tail = (size_t)j->height * j->out_w * ch + 16;  /* the intermediate, at most */
    char *mem = malloc(head + tail);
    if (mem == NULL)
        return "out of memory";
    char *scratch = axis_init(&ay, j->height, j->out_h, axis_init(&ax, j->width, j->out_w, mem));
    uint8_t *tmp = (uint8_t *)mem + head;
    if (need_v) {
        y0 = ay.start[0];
        y1 = ay.start[j->out_h - 1] + ay.count[j->out_h - 1];
    }
    rows = y1 - y0;
    if (need_h || !need_v) {
        /* horizontal pass (an identity one when no axis changes: its weights are exact) */
        hpass(j, &ax, y0, y1, need_v ? tmp : j->dst, need_v ? rows : j->out_h, scratch);
    } else if (j->planar) {
        /* only the height changes: de-interleave the rows the vertical pass reads */
        for (int y = y0; y < y1; y++) {
            const uint8_t *row = j->src + (ptrdiff_t)y * j->row_stride;
            for (int c = 0; c < ch; c++) {
                uint8_t *o = tmp + ((size_t)plane_of(j, c) * rows + (y - y0)) * j->out_w;
                for (int x = 0; x < j->width; x++)
                    o[x] = row[(size_t)x * ch + c];
            }
        }
    }
    if (need_v) {
        if (j->planar) {
            for (int c = 0; c < ch; c++)
                vpass(tmp + (size_t)c * rows * j->out_w, j->out_w, y0, j->out_w, &ay,
                      j->dst + (size_t)c * plane, j->out_w);
        } else if (need_h) {
            vpass(tmp, (ptrdiff_t)j->out_w * ch, y0, j->out_w * ch, &ay, j->dst, (ptrdiff_t)j->out_w * ch);
        } else {
            vpass(j->src, j->row_stride, 0, j->width * ch, &ay, j->dst, (ptrdiff_t)j->out_w * ch);
        }
    }
    free(mem);
    return NULL;
}

/* --- Python ---------------------------------------------------------------------------------- */

static PyObject *py_resize(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *src_obj, *dst_obj;
    int out_h, out_w, planar, swap = 0;
    if (!PyArg_ParseTuple(args, "OOiip|p", &src_obj, &dst_obj, &out_h, &out_w, &planar, &swap))
        return NULL;
    Py_buffer src, dst;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_STRIDES) < 0)
        return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_CONTIG) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *problem = NULL;
    job_t j;
    memset(&j, 0, sizeof(j));
    if (src.ndim != 3 || src.itemsize != 1)
        problem = "src must be a 3-d uint8 buffer (HxWxC)";
    else if (src.shape[0] < 1 || src.shape[1] < 1 || src.shape[2] < 1 || src.shape[2] > 4 ||
             src.shape[0] > (1 << 24) || src.shape[1] > (1 << 24))
        problem = "src must be HxWxC with H, W >= 1 and 1 <= C <= 4";
    else if (src.strides[2] != 1 || src.strides[1] != src.shape[2] ||
             src.strides[0] < src.shape[1] * src.shape[2])
        problem = "src pixels must be C adjacent bytes and its rows must not overlap (positive strides)";
    else if (out_h < 1 || out_w < 1 || out_h > (1 << 24) || out_w > (1 << 24))
        problem = "the output size must be positive";
    else if (dst.len != (Py_ssize_t)out_h * out_w * src.shape[2])
        problem = "dst must hold out_height x out_width x C bytes";
    else if (swap && !planar)
        problem = "swap (reversed channel order) needs planar output";
    if (problem == NULL) {
        j.src = (const uint8_t *)src.buf;
        j.row_stride = src.strides[0];
        j.height = (int)src.shape[0];
        j.width = (int)src.shape[1];
        j.channels = (int)src.shape[2];
        j.dst = (uint8_t *)dst.buf;
        j.out_h = out_h;
        j.out_w = out_w;
        j.planar = planar;
        j.swap = swap;
        Py_BEGIN_ALLOW_THREADS
        problem = run(&j);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    if (problem != NULL) {
        if (strcmp(problem, "out of memory") == 0)
            return PyErr_NoMemory();
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *py_simd(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
#if HAVE_X86
    return PyUnicode_FromString(have_avx2() ? "avx2" : (have_ssse3() ? "ssse3" : "scalar"));
#else
    return PyUnicode_FromString("scalar");
#endif
}

static PyObject *py_set_level(PyObject *self, PyObject *args)
{
    (void)self;
    int level;
    if (!PyArg_ParseTuple(args, "i", &level))
        return NULL;
    if (level < 0 || level > 2) {
        PyErr_SetString(PyExc_ValueError, "level must be 0 (scalar), 1 (SSSE3) or 2 (AVX2)");
        return NULL;
    }
    int previous = level_cap;
    level_cap = level;
    return PyLong_FromLong(previous);
}

static PyMethodDef methods[] = {
    {"set_level", py_set_level, METH_VARARGS,
     "set_level(level): cap the instruction set (0 scalar, 1 SSSE3, 2 AVX2; for tests); returns the "
     "previous cap. Not thread-safe: set it before resizing."},
    {"resize", py_resize, METH_VARARGS,
     "resize(src, dst, out_height, out_width, planar, swap=False): antialiased bilinear resize of an "
     "HxWxC uint8 buffer into dst (CxHxW planes when planar, else HxWxC), bit-exact with torch's uint8 "
     "kernel; swap (planar only) writes the planes in reversed channel order (BGR in, RGB out)."},
    {"simd", py_simd, METH_NOARGS, "simd(): the instruction set in use: 'avx2', 'ssse3' or 'scalar'."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "iotool._resize",
    .m_doc = "Antialiased bilinear resize of HxWxC uint8 images, bit-exact with torch's uint8 kernel.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__resize(void)
{
    return PyModule_Create(&module);
}
