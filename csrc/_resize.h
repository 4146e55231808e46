/*
 * What the parts of the extension iotool._resize share (one module built from several files,
 * see setup.py): the two structures (an axis's weights, the resize job), the helpers every pass
 * uses, and the functions one file calls in another. _resize.c says what the module does and
 * which file holds what.
 *
 * Kernel code only: no Python here (_resize.c includes Python.h first, as CPython asks).
 */
#ifndef IOTOOL_RESIZE_H
#define IOTOOL_RESIZE_H

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

/* Shared between the files of the extension, not exported from it. */
#define INTERNAL __attribute__((visibility("hidden")))

/* One axis: for each output index, the first input index, the tap count and the int16 weights
 * (maxk per output, zero-padded). */
typedef struct {
    int in, out, maxk, prec;
    int *start, *count;
    int16_t *w;
} axis_t;

/* One resize: src (rows row_stride bytes apart) into dst, as resize() describes. */
typedef struct {
    const uint8_t *src;
    ptrdiff_t row_stride;
    int height, width, channels;
    uint8_t *dst;
    int out_h, out_w, planar, swap;
} job_t;

static inline uint8_t clip8(int32_t v)
{
    return v < 0 ? 0 : (v > 255 ? 255 : (uint8_t)v);
}

/* The plane of dst that channel c of src goes to. */
static inline int plane_of(const job_t *j, int c)
{
    return j->swap ? j->channels - 1 - c : c;
}

/* The whole resize of `j`, without the GIL: NULL, or what went wrong (_resize.c). */
INTERNAL const char *rs_run(const job_t *j);

/* The widest instruction set the kernels may use: 2 AVX2, 1 SSSE3/SSE2, 0 scalar (set_level, for
 * the tests that compare the paths; _resize.c). */
extern INTERNAL int rs_level_cap;

#if HAVE_X86
/* Whether the CPU has AVX2 (SSSE3) and rs_level_cap allows it (_resize.c). */
INTERNAL int rs_have_avx2(void);
INTERNAL int rs_have_ssse3(void);
#endif

/* The bytes rs_axis_init carves for an axis of `in` to `out` samples, and the init itself: the
 * weights of torch's kernel on memory from `mem`; returns the memory after them
 * (_resize_weights.c). */
INTERNAL size_t rs_axis_bytes(int in, int out);
INTERNAL char *rs_axis_init(axis_t *a, int in, int out, char *mem);

/* The horizontal pass of source rows [y0, y1) into `out`, and the scratch bytes it needs
 * (_resize_horizontal.c). */
INTERNAL void rs_hpass(const job_t *j, const axis_t *ax, int y0, int y1, uint8_t *out, int plane_rows,
                       char *scratch);
INTERNAL size_t rs_hpass_scratch(const job_t *j, int out_w);

/* The vertical pass over rows of `len` bytes (_resize_vertical.c). */
INTERNAL void rs_vpass(const uint8_t *src, ptrdiff_t src_stride, int first, int len, const axis_t *ay,
                       uint8_t *dst, ptrdiff_t dst_stride);

/* _resize_flip.c: dst row r = src row r mirrored, pixel by pixel (`pixel` adjacent bytes); the
 * rows x width x pixel bytes of src and dst are contiguous and either the same buffer (in place)
 * or apart. 0, or -1 when out of memory. */
INTERNAL int rs_flip_rows(const uint8_t *src, uint8_t *dst, ptrdiff_t rows, ptrdiff_t width, ptrdiff_t pixel);

/* _resize_draw.c: the augmentations' counter-based generator. A sample's stream is the key of its
 * words (seed, epoch, rank, record); rs_uniform01 gives its next number in [0, 1), counting draws
 * in *counter; rs_crop_box draws torchvision's RandomResizedCrop box (top, left, height, width)
 * from it, RS_ATTEMPTS tries then the central fallback. */
#define RS_ATTEMPTS 10
INTERNAL uint64_t rs_sample_key(const uint64_t *words, int n);
INTERNAL double rs_uniform01(uint64_t key, uint64_t *counter);
INTERNAL void rs_crop_box(uint64_t key, uint64_t *counter, long height, long width, const double scale[2],
                          const double ratio[2], long box[4]);

/* _resize_run.c: a run of samples into batch rows. A sample's pixels: decoded HxWxC rows
 * (`pixels`, rows `row_stride` bytes apart, `swap` for BGR), or a BMP file's bytes (`bmp`,
 * `bmp_len`: the rows are found in it). */
typedef struct {
    const uint8_t *pixels;
    ptrdiff_t row_stride;
    int height, width, channels, swap;
    const uint8_t *bmp;
    size_t bmp_len;
} rs_source_t;

/* What each sample goes through: a random resized crop (scale, ratio), a centre crop or an
 * exact-size resize to out_h x out_w planes of `channels`, then a flip with probability flip_p
 * (< 0: no flip transform, so nothing drawn). */
enum { RS_OP_CROP = 0, RS_OP_CENTER = 1, RS_OP_RESIZE = 2 };
typedef struct {
    int kind, channels, out_h, out_w;
    double scale[2], ratio[2], flip_p;
} rs_op_t;

/* The box (top, left, height, width) of a height x width image the op resizes, drawn from stream
 * `key` (draws counted in *counter); 0 when the per-sample path must compute it (a centre crop
 * larger than the image pads). */
INTERNAL int rs_op_box(const rs_op_t *op, long height, long width, uint64_t key, uint64_t *counter, long box[4]);

/* `box` of `src` resized into `row` (channels x out_h x out_w planes), then flipped there when
 * the op's flip draws so (the next number of the stream), *flipped (when not NULL) set to 1 if it
 * did, else 0: 0, or -1 when out of memory. */
INTERNAL int rs_into_row(const rs_op_t *op, const rs_source_t *src, const long box[4], uint64_t key,
                         uint64_t *counter, uint8_t *row, int *flipped);

/* Sample k (stream keys[k]) into rows + k * channels * out_h * out_w; status[k] = 0 done, 1 left
 * to the caller (a source this code does not take); with `geometry` (not NULL), a done sample's
 * RS_GEOMETRY values at geometry + RS_GEOMETRY * k: its source's height and width, the box (top,
 * left, height, width) resized, and 1 if it was flipped. 0, or -1 when out of memory. */
#define RS_GEOMETRY 7
INTERNAL int rs_run_samples(const rs_op_t *op, rs_source_t *sources, const uint64_t *keys, int n, uint8_t *rows,
                            uint8_t *status, int64_t *geometry);

/* A RAM cache's block (iotool.loading.ramcache lays it out): `count` records, a state byte each
 * at `state` (1: its pixels are ready), (height, width) int32 pairs at `shapes`, count + 1 int64
 * pixel offsets at `offsets`, relative to `pixels`; every pixel an RGB triple. */
typedef struct {
    const uint8_t *block;
    size_t len;
    long long state, shapes, offsets, pixels, count;
} rs_cache_t;

/* 1 when the table offsets lie inside the block, else 0. */
INTERNAL int rs_cache_valid(const rs_cache_t *cache);

/* Record `record`'s cached pixels as a source: its pixels when ready and inside the block, else
 * `pixels` NULL (left to the caller). Runs without the GIL; the state is read with acquire order,
 * so the pixels written before it was set are seen. */
INTERNAL void rs_cached_source(const rs_cache_t *cache, long long record, rs_source_t *src);

/* Source k of a run whose BMP files were read into one buffer (iotool.storage.files.Packed): the bytes
 * buf[start:end], or no source (left to the caller) where start < 0 or the span is not wholly in buf. */
INTERNAL void rs_packed_source(const uint8_t *buf, size_t len, long long start, long long end, rs_source_t *src);

#endif
