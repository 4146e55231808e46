/*
 * A run of JPEG samples in one call: run_samples(library, op, sources, (seed, epoch, rank),
 * records, dst, first_row, tag, version[, geometry]). Each sample's JPEG is read up to its frame header,
 * its crop box (and flip) drawn from its counter-based stream (_resize_draw.c), the box decoded
 * by region at the reduced DCT scale the box allows (or from its restart segments, for a seekable
 * JPEG), resized into its batch row and flipped there: what iotool's fused
 * DecodeRandomResizedCrop or CenterCrop and RandomHorizontalFlip compute for one sample at a time
 * (iotool/transforms/decoding.py), with the same boxes, scales and bytes. The GIL is released for
 * the whole run.
 *
 * A sample this code does not take is left to the caller's per-sample path, marked in the status
 * it returns: not a JPEG, a frame the region decoder does not handle (arithmetic, lossless,
 * 12-bit, CMYK), more pixels than the caller's bomb limit (the per-sample path refuses or warns),
 * no end-of-image marker at the end, a centre crop larger than the image, or any decode error
 * (the per-sample path decodes it again and raises the error that names the record).
 */
#include "_jpegregion_run.h"

#include "_jpegregion_decode.h"
#include "_jpegregion_gather.h"
#include "_resize_draw.h"
#include "_resize_run.h"

#define MARGIN 2  /* iotool.decode.region.MARGIN: pixels decoded past each side of the box */

struct jpeg_op {
    rs_op_t base;  /* RS_OP_CROP or RS_OP_CENTER, into 3 planes */
    double gap;  /* DecodeRandomResizedCrop's reducing_gap */
    unsigned long long max_pixels;  /* 0: no bomb limit */
    const unsigned char *tag;  /* iotool's seekable table: its tag and version (iotool.decode.segments) */
    size_t tag_length;
    unsigned int version;
};

struct frame_info {
    long height, width;
    int marker;
};

/* The frame header, walking the marker segments as iotool.decode.backends.parse_jpeg_header
 * does; 1 when it is one the region decoder takes (8-bit Huffman DCT, 1 or 3 components). */
static int read_frame(const unsigned char *d, size_t n, struct frame_info *f)
{
    if (n < 4 || d[0] != 0xFF || d[1] != 0xD8 || d[2] != 0xFF)
        return 0;
    size_t pos = 2;
    while (pos + 4 <= n) {
        if (d[pos] != 0xFF)
            return 0;
        int marker = d[pos + 1];
        if (marker == 0xFF) {
            pos += 1;
            continue;
        }
        if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
            pos += 2;
            continue;
        }
        if (marker == 0xDA || marker == 0xD9)
            return 0;
        size_t length = ((size_t)d[pos + 2] << 8) | d[pos + 3];
        if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
            if (pos + 10 > n || (marker != 0xC0 && marker != 0xC1 && marker != 0xC2))
                return 0;
            int precision = d[pos + 4], components = d[pos + 9];
            f->height = ((long)d[pos + 5] << 8) | d[pos + 6];
            f->width = ((long)d[pos + 7] << 8) | d[pos + 8];
            f->marker = marker;
            return precision == 8 && (components == 1 || components == 3) && f->height > 0 && f->width > 0;
        }
        pos += 2 + length;
    }
    return 0;
}

/* Whether iotool's APP9 table sits where the transcode puts it (iotool.decode.segments.table_hint). */
static int table_hint(const unsigned char *d, size_t n, const struct jpeg_op *op)
{
    size_t at = 2;
    if (n >= 6 && d[2] == 0xFF && d[3] == 0xE0)
        at = 4 + (((size_t)d[4] << 8) | d[5]);
    return at + 4 + op->tag_length <= n && d[at] == 0xFF && d[at + 1] == 0xE9 &&
           memcmp(d + at + 4, op->tag, op->tag_length) == 0;
}

/* [start, start + length) of a full axis of `full` pixels on the axis decoded at 1/s, of `reduced`
 * pixels (iotool.transforms.decoding.reduced_span). */
static void reduced_span(long start, long length, int s, long reduced, unsigned int *low, unsigned int *size)
{
    double factor = 1.0 / s;
    long lo = (long)rint((double)start * factor);
    if (lo > reduced - 1)
        lo = reduced - 1;
    long hi = (long)rint((double)(start + length) * factor);
    if (hi < lo + 1)
        hi = lo + 1;
    if (hi > reduced)
        hi = reduced;
    *low = (unsigned int)lo;
    *size = (unsigned int)(hi - lo);
}

/* The DCT reduction for a crop of h x w (DecodeRandomResizedCrop.decode_scale); a centre crop's
 * box is the output's size, so it is never reduced. */
static int decode_scale(const struct jpeg_op *op, long h, long w)
{
    for (int s = 8; s >= 2; s /= 2)
        if ((double)h >= s * op->gap * op->base.out_h && (double)w >= s * op->gap * op->base.out_w)
            return s;
    return 1;
}

/* One sample into `row`: 0 done, 1 left to the caller, -1 out of memory. When done and `geometry`
 * is not NULL, its RS_GEOMETRY values: the image's height and width, the box (top, left, height,
 * width) on it, and 1 if the row was flipped, else 0 (what the per-sample path notes for its
 * boxes: iotool.transforms.geometry). */
static int one_jpeg(const struct library *lib, const struct jpeg_op *op, const unsigned char *d, size_t n,
                    uint64_t key, uint8_t *row, int64_t *geometry)
{
    struct frame_info f;
    if (!read_frame(d, n, &f) || n < 2 || d[n - 2] != 0xFF || d[n - 1] != 0xD9)
        return 1;
    if (op->max_pixels && (unsigned long long)f.height * (unsigned long long)f.width > op->max_pixels)
        return 1;
    uint64_t counter = 0;
    long box[4];
    if (!rs_op_box(&op->base, f.height, f.width, key, &counter, box))
        return 1;
    int s = decode_scale(op, box[2], box[3]);
    long rows = (f.height + s - 1) / s, cols = (f.width + s - 1) / s;
    struct region r;
    reduced_span(box[0], box[2], s, rows, &r.top, &r.height);
    reduced_span(box[1], box[3], s, cols, &r.left, &r.width);
    r.margin = MARGIN;
    unsigned char *pixels = malloc((size_t)r.height * r.width * 3);
    if (pixels == NULL)
        return -1;
    struct job job;
    memset(&job, 0, sizeof(job));
    job.lib = lib;
    job.out = pixels;
    int done = 0;
    if ((f.marker == 0xC0 || f.marker == 0xC1) && table_hint(d, n, op)) {
        char problem[JMSG_LENGTH_MAX + 32] = "";
        done = jr_seek_and_decode(&job, d, n, op->tag, op->tag_length, op->version, (unsigned int)s,
                                  (unsigned int)f.height, (unsigned int)f.width, &r, problem, sizeof(problem));
        if (done < 0) {
            free(pixels);
            return 1;
        }
    }
    if (done == 0 && jr_decode_into(&job, d, n, 8 / s, &r) != NULL) {
        free(pixels);
        return 1;
    }
    rs_source_t decoded = {.pixels = pixels, .row_stride = (ptrdiff_t)r.width * 3, .height = (int)r.height,
                           .width = (int)r.width, .channels = 3};
    const long whole[4] = {0, 0, r.height, r.width};
    int flipped = 0;
    int result = rs_into_row(&op->base, &decoded, whole, key, &counter, row, &flipped);
    free(pixels);
    if (result == 0 && geometry != NULL) {
        const int64_t values[RS_GEOMETRY] = {f.height, f.width, box[0], box[1], box[2], box[3], flipped};
        memcpy(geometry, values, sizeof(values));
    }
    return result;
}

PyObject *jr_run_samples(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *capsule, *sources_obj, *records_obj, *dst_obj, *words_obj[3], *geometry_obj = Py_None;
    struct jpeg_op op;
    Py_buffer tag, dst, geometry = {0};
    Py_ssize_t first_row;
    memset(&op, 0, sizeof(op));
    rs_op_t *base = &op.base;
    if (!PyArg_ParseTuple(args, "O(iiiddddddK)O!(OOO)O!Ony*I|O", &capsule, &base->kind, &base->out_h, &base->out_w,
                          &base->scale[0], &base->scale[1], &base->ratio[0], &base->ratio[1], &base->flip_p, &op.gap,
                          &op.max_pixels, &PyList_Type, &sources_obj, &words_obj[0], &words_obj[1],
                          &words_obj[2], &PyList_Type, &records_obj, &dst_obj, &first_row, &tag, &op.version,
                          &geometry_obj))
        return NULL;
    base->channels = 3;
    op.tag = tag.buf;
    op.tag_length = (size_t)tag.len;
    const struct library *lib = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    Py_ssize_t n = PyList_Size(sources_obj);
    const char *problem = NULL;
    if (lib == NULL) {
        PyBuffer_Release(&tag);
        return NULL;
    }
    if ((base->kind != RS_OP_CROP && base->kind != RS_OP_CENTER) || base->out_h < 1 || base->out_w < 1 ||
        base->out_h > (1 << 24) || base->out_w > (1 << 24) || !(base->ratio[0] > 0) || !(base->ratio[1] > 0) ||
        !(op.gap >= 1) || op.tag_length < 1)
        problem = "op must be (kind 0 or 1, out_h, out_w >= 1, scale0, scale1, ratio0, ratio1 > 0, flip_p, "
                  "reducing_gap >= 1, max_pixels) and tag not empty";
    else if (PyList_Size(records_obj) != n || n > (1 << 20))
        problem = "sources and records must be lists of one length (at most 2**20)";
    if (problem != NULL) {
        PyBuffer_Release(&tag);
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    uint64_t words[4];
    for (int k = 0; k < 3; k++) {
        words[k] = (uint64_t)PyLong_AsUnsignedLongLongMask(words_obj[k]);
        if (PyErr_Occurred()) {
            PyBuffer_Release(&tag);
            return NULL;
        }
    }
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_CONTIG) < 0) {
        PyBuffer_Release(&tag);
        return NULL;
    }
    if (geometry_obj != Py_None) {
        if (PyObject_GetBuffer(geometry_obj, &geometry, PyBUF_CONTIG) < 0) {
            PyBuffer_Release(&dst);
            PyBuffer_Release(&tag);
            return NULL;
        }
        if ((size_t)geometry.len < (size_t)n * RS_GEOMETRY * sizeof(int64_t)) {
            PyBuffer_Release(&geometry);
            PyBuffer_Release(&dst);
            PyBuffer_Release(&tag);
            PyErr_SetString(PyExc_ValueError, "geometry must hold 7 int64 values a source");
            return NULL;
        }
    }
    size_t row_bytes = (size_t)3 * base->out_h * base->out_w;
    PyObject *status = PyBytes_FromStringAndSize(NULL, n);
    Py_buffer *views = PyMem_Calloc((size_t)n + 1, sizeof(Py_buffer));
    uint64_t *keys = PyMem_Calloc((size_t)n + 1, sizeof(uint64_t));
    Py_ssize_t taken = 0;
    int failed = status == NULL || views == NULL || keys == NULL;
    if (failed && !PyErr_Occurred())
        PyErr_NoMemory();
    if (!failed && (first_row < 0 || (size_t)(first_row + n) * row_bytes > (size_t)dst.len)) {
        PyErr_SetString(PyExc_ValueError, "dst must hold first_row + len(sources) rows of 3 x out_h x out_w bytes");
        failed = 1;
    }
    for (; !failed && taken < n; taken++) {
        PyObject *source = PyList_GetItem(sources_obj, taken);
        words[3] = (uint64_t)PyLong_AsUnsignedLongLongMask(PyList_GetItem(records_obj, taken));
        if (PyErr_Occurred() || (source != Py_None && PyObject_GetBuffer(source, &views[taken], PyBUF_SIMPLE) < 0)) {
            failed = 1;
            break;
        }
        keys[taken] = rs_sample_key(words, 4);
    }
    int result = 0;
    if (!failed) {
        uint8_t *rows = (uint8_t *)dst.buf + (size_t)first_row * row_bytes;
        uint8_t *flags = (uint8_t *)PyBytes_AsString(status);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n && result >= 0; k++) {
            if (views[k].obj == NULL) {
                flags[k] = 1;
                continue;
            }
            int64_t *where = geometry.buf != NULL ? (int64_t *)geometry.buf + (size_t)k * RS_GEOMETRY : NULL;
            result = one_jpeg(lib, &op, views[k].buf, (size_t)views[k].len, keys[k], rows + (size_t)k * row_bytes,
                              where);
            flags[k] = (uint8_t)(result > 0);
        }
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t k = 0; k < taken && views != NULL; k++)
        if (views[k].obj != NULL)
            PyBuffer_Release(&views[k]);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&tag);
    if (geometry.obj != NULL)
        PyBuffer_Release(&geometry);
    PyMem_Free(views);
    PyMem_Free(keys);
    if (failed || result < 0) {
        Py_XDECREF(status);
        return result < 0 ? PyErr_NoMemory() : NULL;
    }
    return status;
}
