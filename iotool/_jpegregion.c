/*
 * Region-of-interest JPEG decoding with libjpeg(-turbo)'s scanline API.
 *
 * decode_region(data, scale_num, top, left, height, width) decodes only what a crop needs:
 * the image is decoded at scale_num/8 of its size (libjpeg's scaled IDCT), the rows above the
 * crop are skipped (jpeg_skip_scanlines: entropy-decoded, not inverse-transformed), only the
 * iMCU columns that cover the crop are inverse-transformed (jpeg_crop_scanline), and decoding
 * stops after the crop's last row. Coordinates are in the scaled image.
 *
 * Returns (pixels, x, rows, columns): `pixels` is a bytearray of rows x columns x 3 (RGB),
 * `x` the scaled column of its first pixel (libjpeg aligns the left edge down to an iMCU
 * boundary, so x <= left and columns >= width). Every libjpeg warning is an error (strict, as
 * the rest of iotool's decoders): a corrupt stream raises ValueError with libjpeg's message.
 *
 * Nothing is kept between calls; the GIL is released while libjpeg works.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

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
    unsigned char *out;
};

static const char *run(struct job *job, const unsigned char *data, size_t size, int scale_num,
                       JDIMENSION top, JDIMENSION left, JDIMENSION height, JDIMENSION width,
                       size_t out_capacity, JDIMENSION *x, JDIMENSION *columns)
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
    if (top + height > cinfo->output_height || left + width > cinfo->output_width)
        return "region outside the scaled image";

    *x = left;
    *columns = width;
    jpeg_crop_scanline(cinfo, x, columns);
    if ((size_t)height * (size_t)(*columns) * 3 > out_capacity)
        return "region larger than the output buffer";
    if (top > 0 && jpeg_skip_scanlines(cinfo, top) != top)
        return "could not skip to the region";
    while (cinfo->output_scanline < top + height) {
        JSAMPROW row = job->out + (size_t)(cinfo->output_scanline - top) * (*columns) * 3;
        if (jpeg_read_scanlines(cinfo, &row, 1) != 1)
            return "the stream ended before the region";
    }
    return NULL;
}

static PyObject *decode_region(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    int scale_num;
    unsigned int top, left, height, width;
    if (!PyArg_ParseTuple(args, "y*iIIII", &view, &scale_num, &top, &left, &height, &width))
        return NULL;
    if (scale_num < 1 || scale_num > 16 || height == 0 || width == 0) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "bad region: scale_num=%d height=%u width=%u", scale_num, height, width);
        return NULL;
    }
    /* The aligned region is at most one iMCU column (<= 32 scaled pixels at 2x) wider on each side. */
    size_t capacity = (size_t)height * ((size_t)width + 2 * 64) * 3;
    PyObject *pixels = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)capacity);
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
    JDIMENSION x = 0, columns = 0;
    const char *problem = NULL;
    int failed = 0;

    Py_BEGIN_ALLOW_THREADS
    if (setjmp(job.err.escape)) {
        failed = 1;
    } else {
        jpeg_create_decompress(&job.cinfo);
        problem = run(&job, (const unsigned char *)view.buf, (size_t)view.len, scale_num, top, left,
                      height, width, capacity, &x, &columns);
    }
    jpeg_destroy_decompress(&job.cinfo);
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    if (failed || problem != NULL) {
        Py_DECREF(pixels);
        PyErr_SetString(PyExc_ValueError, failed ? job.err.message : problem);
        return NULL;
    }
    if (PyByteArray_Resize(pixels, (Py_ssize_t)height * columns * 3) < 0) {
        Py_DECREF(pixels);
        return NULL;
    }
    return Py_BuildValue("(NIII)", pixels, x, height, columns);
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, scale_num, top, left, height, width) -> (rgb bytearray, x, rows, columns)\n\n"
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
