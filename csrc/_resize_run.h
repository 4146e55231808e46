/*
 * _resize_run.c: a run of samples into batch rows, their sources (decoded rows, a BMP file, a RAM
 * cache's block) and what each sample goes through.
 */
#ifndef IOTOOL_RESIZE_RUN_H
#define IOTOOL_RESIZE_RUN_H

#include "_resize_common.h"

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
