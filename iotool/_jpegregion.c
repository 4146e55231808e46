/*
 * Region-of-interest JPEG decoding with libjpeg(-turbo)'s scanline API.
 *
 * decode_region(data, scale_num, top, left, height, width, margin) decodes only what a crop needs:
 * the image is decoded at scale_num/8 of its size (libjpeg's scaled IDCT), the rows above the
 * crop are skipped (jpeg_skip_scanlines: entropy-decoded, not inverse-transformed), only the
 * iMCU columns that cover the crop are inverse-transformed (jpeg_crop_scanline), and decoding
 * stops after the crop's last row. Coordinates are in the scaled image.
 *
 * libjpeg replicates the edge pixels of a cropped region when it upsamples chroma, so the columns
 * are decoded `margin` pixels wider on each side (where the image has them) and each row is cut
 * back to the crop: the result is pixel-identical to the same box of a full decode.
 *
 * Returns a dense bytearray of height x width x 3 (RGB). Every libjpeg warning is an error
 * (strict, as iotool's other decoders): a corrupt stream raises ValueError with libjpeg's message.
 *
 * Nothing is kept between calls; the GIL is released while libjpeg works.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#define ROWS_PER_CALL 16

struct strict_error_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf escape;
    char message[JMSG_LENGTH_MAX];
};

static void on_error(j_common_ptr cinfo)
{
    struct strict_error_mgr *err = (struct strict_error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->escape, 1);
}

static void on_message(j_common_ptr cinfo, int level)
{
    /* level < 0 is a warning (corrupt data, premature end): treat it as an error. */
    if (level < 0)
        on_error(cinfo);
}

/* Everything the decode needs, kept in one place so the longjmp path can clean it up. */
struct job {
    struct jpeg_decompress_struct cinfo;
    struct strict_error_mgr err;
    unsigned char *out;  /* height x width x 3, owned by the caller */
    unsigned char *rows;  /* ROWS_PER_CALL decoded rows of the widened region, owned by the job */
};

struct region {
    JDIMENSION top, left, height, width, margin;
};

static const char *run(struct job *job, const unsigned char *data, size_t size, int scale_num,
                       const struct region *r)
{
    struct jpeg_decompress_struct *cinfo = &job->cinfo;

    jpeg_mem_src(cinfo, data, (unsigned long)size);
    jpeg_read_header(cinfo, TRUE);
    if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK)
        return "CMYK/YCCK JPEGs are not decoded by region";
    cinfo->out_color_space = JCS_RGB;
    cinfo->scale_num = (unsigned int)scale_num;
    cinfo->scale_denom = 8;
    jpeg_start_decompress(cinfo);
    if (cinfo->output_components != 3)
        return "unexpected number of output components";
    if ((unsigned long long)r->top + r->height > cinfo->output_height ||
        (unsigned long long)r->left + r->width > cinfo->output_width)
        return "region outside the scaled image";

    JDIMENSION start = r->left > r->margin ? r->left - r->margin : 0;
    unsigned long long wide = (unsigned long long)r->left + r->width + r->margin;
    JDIMENSION stop = wide > cinfo->output_width ? cinfo->output_width : (JDIMENSION)wide;
    JDIMENSION x = start, columns = stop - start;
    jpeg_crop_scanline(cinfo, &x, &columns);  /* x moves left to an iMCU boundary */
    size_t stride = (size_t)columns * 3, offset = (size_t)(r->left - x) * 3, length = (size_t)r->width * 3;
    job->rows = malloc(stride * ROWS_PER_CALL);
    if (job->rows == NULL)
        return "out of memory";
    JSAMPROW pointers[ROWS_PER_CALL];
    for (int k = 0; k < ROWS_PER_CALL; k++)
        pointers[k] = job->rows + k * stride;
    if (r->top > 0 && jpeg_skip_scanlines(cinfo, r->top) != r->top)
        return "could not skip to the region";
    /* Several rows per call: libjpeg's per-call overhead is large next to one row of work. */
    for (JDIMENSION y = 0; y < r->height;) {
        JDIMENSION want = r->height - y < ROWS_PER_CALL ? r->height - y : ROWS_PER_CALL;
        JDIMENSION got = jpeg_read_scanlines(cinfo, pointers, want);
        if (got == 0)
            return "the stream ended before the region";
        for (JDIMENSION k = 0; k < got; k++, y++)
            memcpy(job->out + (size_t)y * length, pointers[k] + offset, length);
    }
    return NULL;
}

static PyObject *decode_region(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    int scale_num;
    struct region r;
    if (!PyArg_ParseTuple(args, "y*iIIIII", &view, &scale_num, &r.top, &r.left, &r.height, &r.width,
                          &r.margin))
        return NULL;
    if (scale_num < 1 || scale_num > 16 || r.height == 0 || r.width == 0 || r.height > JPEG_MAX_DIMENSION ||
        r.width > JPEG_MAX_DIMENSION || r.margin > JPEG_MAX_DIMENSION) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "bad region: scale_num=%d height=%u width=%u", scale_num, r.height,
                     r.width);
        return NULL;
    }
    PyObject *pixels = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)r.height * r.width * 3);
    if (pixels == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }

    struct job job;
    memset(&job, 0, sizeof(job));
    job.out = (unsigned char *)PyByteArray_AS_STRING(pixels);
    job.cinfo.err = jpeg_std_error(&job.err.pub);
    job.err.pub.error_exit = on_error;
    job.err.pub.emit_message = on_message;
    const char *problem = NULL;
    int failed = 0;

    Py_BEGIN_ALLOW_THREADS
    if (setjmp(job.err.escape)) {
        failed = 1;
    } else {
        jpeg_create_decompress(&job.cinfo);
        problem = run(&job, (const unsigned char *)view.buf, (size_t)view.len, scale_num, &r);
    }
    jpeg_destroy_decompress(&job.cinfo);
    free(job.rows);
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    if (failed || problem != NULL) {
        Py_DECREF(pixels);
        PyErr_SetString(PyExc_ValueError, failed ? job.err.message : problem);
        return NULL;
    }
    return pixels;
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, scale_num, top, left, height, width, margin) -> bytearray (height x width x 3 RGB)\n\n"
     "Decode the region of a JPEG at scale_num/8 of its size; coordinates are in the scaled image."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_jpegregion",
    .m_doc = "Region-of-interest JPEG decoding with libjpeg's scanline API.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__jpegregion(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "JPEG_LIB_VERSION", JPEG_LIB_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION_NUMBER",
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
                                LIBJPEG_TURBO_VERSION_NUMBER
#else
                                0
#endif
                                ) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
