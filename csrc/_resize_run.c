/*
 * A run of samples in one call: each sample's pixels (decoded HxWxC rows, or a 24-bit BMP's
 * stored rows) cropped, resized and flipped into its row of a batch, with the crop box and the
 * flip drawn from the sample's counter-based stream (_resize_draw.c). What iotool's transforms
 * compute for one sample at a time in Python (RandomResizedCrop, CenterCrop, an exact-size
 * Resize, then RandomHorizontalFlip), with the same boxes, draws and bytes; the Python function,
 * run_samples, is in _resize.c and releases the GIL around rs_run_samples.
 *
 * A sample this code does not take (a bottom-up or malformed BMP, a channel count other than the
 * batch's, an image smaller than a centre crop) is left to the caller, marked in `status`: the
 * caller's per-sample path computes it, or raises the error that names it.
 *
 * Kernel code only: no Python here.
 */
#include "_resize_run.h"

#include "_resize_draw.h"
#include "_resize_flip.h"
#include "_resize_kernel.h"

/* A BMP's stored pixels: 14-byte file header, 40-byte (or longer) info header, rows of 3-byte BGR
 * pixels padded to 4 bytes. 1 and the rows when it is an uncompressed, top-down 24-bit BMP whose
 * rows lie inside the data (what iotool.decode.bmp.bmp_rows accepts, top-down only). */
static int bmp_source(const uint8_t *data, size_t len, rs_source_t *src)
{
    if (len < 54 || data[0] != 'B' || data[1] != 'M')
        return 0;
    uint32_t offset, compression;
    int32_t w, h;
    uint16_t planes, bpp;
    memcpy(&offset, data + 10, 4);
    memcpy(&w, data + 18, 4);
    memcpy(&h, data + 22, 4);
    memcpy(&planes, data + 26, 2);
    memcpy(&bpp, data + 28, 2);
    memcpy(&compression, data + 30, 4);
    if (bpp != 24 || compression != 0 || planes != 1 || w <= 0 || h >= 0 || w > (1 << 24) || h < -(1 << 24))
        return 0;
    uint64_t stride = ((uint64_t)w * 3 + 3) & ~(uint64_t)3, rows = (uint64_t)(-(int64_t)h);
    if ((uint64_t)offset + stride * rows > len)
        return 0;
    src->pixels = data + offset;
    src->row_stride = (ptrdiff_t)stride;
    src->height = (int)rows;
    src->width = w;
    src->channels = 3;
    src->swap = 1;
    return 1;
}

INTERNAL int rs_op_box(const rs_op_t *op, long height, long width, uint64_t key, uint64_t *counter, long box[4])
{
    switch (op->kind) {
    case RS_OP_CROP:
        rs_crop_box(key, counter, height, width, op->scale, op->ratio, box);
        return 1;
    case RS_OP_CENTER:
        if (height < op->out_h || width < op->out_w)
            return 0;
        /* torchvision's int(round((H - h) / 2.0)): halves to even, as rint */
        box[0] = (long)rint((double)(height - op->out_h) / 2.0);
        box[1] = (long)rint((double)(width - op->out_w) / 2.0);
        box[2] = op->out_h;
        box[3] = op->out_w;
        return 1;
    default: /* RS_OP_RESIZE: the whole image */
        box[0] = box[1] = 0;
        box[2] = height;
        box[3] = width;
        return 1;
    }
}

INTERNAL int rs_into_row(const rs_op_t *op, const rs_source_t *src, const long box[4], uint64_t key,
                         uint64_t *counter, uint8_t *row, int *flipped)
{
    job_t j;
    memset(&j, 0, sizeof(j));
    j.src = src->pixels + box[0] * src->row_stride + box[1] * src->channels;
    j.row_stride = src->row_stride;
    j.height = (int)box[2];
    j.width = (int)box[3];
    j.channels = src->channels;
    j.dst = row;
    j.out_h = op->out_h;
    j.out_w = op->out_w;
    j.planar = 1;
    j.swap = src->swap;
    if (rs_run(&j) != NULL)
        return -1;
    /* RandomHorizontalFlip draws after the crop, from the same stream: flips when u < p */
    int flip = op->flip_p >= 0 && rs_uniform01(key, counter) < op->flip_p;
    if (flipped != NULL)
        *flipped = flip;
    if (flip && rs_flip_rows(row, row, (ptrdiff_t)op->channels * op->out_h, op->out_w, 1) != 0)
        return -1;
    return 0;
}

/* Sample k of the run into `row`: 0 done, 1 left to the caller, -1 out of memory; its geometry
 * into `geometry` when done and not NULL (rs_run_samples). */
static int one_sample(const rs_op_t *op, const rs_source_t *src, uint64_t key, uint8_t *row, int64_t *geometry)
{
    uint64_t counter = 0;
    long box[4];
    int flipped = 0;
    if (src->pixels == NULL || src->channels != op->channels ||
        !rs_op_box(op, src->height, src->width, key, &counter, box))
        return 1;
    int result = rs_into_row(op, src, box, key, &counter, row, &flipped);
    if (result == 0 && geometry != NULL) {
        const int64_t values[RS_GEOMETRY] = {src->height, src->width, box[0], box[1], box[2], box[3], flipped};
        memcpy(geometry, values, sizeof(values));
    }
    return result;
}

INTERNAL int rs_run_samples(const rs_op_t *op, rs_source_t *sources, const uint64_t *keys, int n, uint8_t *rows,
                            uint8_t *status, int64_t *geometry)
{
    size_t row_bytes = (size_t)op->channels * op->out_h * op->out_w;
    for (int k = 0; k < n; k++) {
        rs_source_t *src = &sources[k];
        if (src->bmp != NULL && !bmp_source(src->bmp, src->bmp_len, src))
            src->pixels = NULL;
        int got = one_sample(op, src, keys[k], rows + (size_t)k * row_bytes,
                             geometry != NULL ? geometry + (size_t)RS_GEOMETRY * k : NULL);
        if (got < 0)
            return -1;
        status[k] = (uint8_t)got;
    }
    return 0;
}

static int span_inside(long long start, long long bytes, size_t len)
{
    return start >= 0 && bytes >= 0 && (unsigned long long)start <= len && (unsigned long long)bytes <= len - start;
}

/* --- a run's files read at once -------------------------------------------------------------- */

INTERNAL void rs_packed_source(const uint8_t *buf, size_t len, long long start, long long end, rs_source_t *src)
{
    memset(src, 0, sizeof(*src));
    if (start < 0 || end < start || !span_inside(start, end - start, len))
        return;
    src->bmp = buf + start;
    src->bmp_len = (size_t)(end - start);
}

/* --- the RAM cache's pixels ------------------------------------------------------------------ */

INTERNAL int rs_cache_valid(const rs_cache_t *c)
{
    return c->count >= 0 && c->count < (1LL << 40) && span_inside(c->state, c->count, c->len) &&
           span_inside(c->shapes, 8 * c->count, c->len) && span_inside(c->offsets, 8 * (c->count + 1), c->len) &&
           span_inside(c->pixels, 0, c->len);
}

INTERNAL void rs_cached_source(const rs_cache_t *c, long long record, rs_source_t *src)
{
    int32_t shape[2];
    int64_t offset;
    memset(src, 0, sizeof(*src));
    if (record < 0 || record >= c->count || __atomic_load_n(c->block + c->state + record, __ATOMIC_ACQUIRE) != 1)
        return;
    memcpy(shape, c->block + c->shapes + 8 * record, sizeof(shape));
    memcpy(&offset, c->block + c->offsets + 8 * record, sizeof(offset));
    if (shape[0] < 1 || shape[1] < 1 || shape[0] > (1 << 24) || shape[1] > (1 << 24) || offset < 0 ||
        offset > (long long)c->len - c->pixels ||
        !span_inside(c->pixels + offset, 3LL * shape[0] * shape[1], c->len))
        return;
    src->pixels = c->block + c->pixels + offset;
    src->row_stride = 3 * (ptrdiff_t)shape[1];
    src->height = shape[0];
    src->width = shape[1];
    src->channels = 3;
}
