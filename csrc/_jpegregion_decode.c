/*
 * The region decode of iotool._jpegregion: decode_region(library, data, scale_num, top, left,
 * height, width, margin), and jr_decode_into, the decode of one region that the seekable decode
 * (_jpegregion_gather.c) runs on its sub-JPEG. See _jpegregion.c for what the module does.
 */
#include "_jpegregion_decode.h"

#include "_jpegregion_errors.h"

static const char *run(struct job *job, const unsigned char *data, size_t size, int scale_num,
                       const struct region *r)
{
    const struct library *lib = job->lib;
    struct jpeg_decompress_struct *cinfo = &job->cinfo;

    lib->mem_src(cinfo, data, (unsigned long)size);
    lib->read_header(cinfo, TRUE);
    if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK)
        return "CMYK/YCCK JPEGs are not decoded by region";
    cinfo->out_color_space = JCS_RGB;
    cinfo->scale_num = (unsigned int)scale_num;
    cinfo->scale_denom = 8;
    lib->start_decompress(cinfo);
    if (cinfo->output_components != 3)
        return "unexpected number of output components";
    if ((unsigned long long)r->top + r->height > cinfo->output_height ||
        (unsigned long long)r->left + r->width > cinfo->output_width)
        return "region outside the scaled image";

    JDIMENSION start = r->left > r->margin ? r->left - r->margin : 0;
    unsigned long long wide = (unsigned long long)r->left + r->width + r->margin;
    JDIMENSION stop = wide > cinfo->output_width ? cinfo->output_width : (JDIMENSION)wide;
    JDIMENSION x = start, columns = stop - start;
    lib->crop_scanline(cinfo, &x, &columns);  /* x moves left to an iMCU boundary */
    size_t stride = (size_t)columns * 3, offset = (size_t)(r->left - x) * 3, length = (size_t)r->width * 3;
    int whole_rows = offset == 0 && stride == length;  /* libjpeg can write into the result itself */
    if (!whole_rows && (job->rows = malloc(stride * ROWS_PER_CALL)) == NULL)
        return "out of memory";
    if (r->top > 0 && lib->skip_scanlines(cinfo, r->top) != r->top)
        return "could not skip to the region";
    /* Several rows per call: libjpeg's per-call overhead is large next to one row of work. */
    JSAMPROW pointers[ROWS_PER_CALL];
    for (JDIMENSION y = 0; y < r->height;) {
        JDIMENSION want = r->height - y < ROWS_PER_CALL ? r->height - y : ROWS_PER_CALL;
        for (JDIMENSION k = 0; k < want; k++)
            pointers[k] = whole_rows ? job->out + (size_t)(y + k) * length : job->rows + k * stride;
        JDIMENSION got = lib->read_scanlines(cinfo, pointers, want);
        if (got == 0)
            return "the stream ended before the region";
        for (JDIMENSION k = 0; k < got && !whole_rows; k++)
            memcpy(job->out + (size_t)(y + k) * length, pointers[k] + offset, length);
        y += got;
    }
    return NULL;
}

/* Decode region `r` of `data` at scale_num/8 into job->out, the decompressor made and destroyed
 * here: NULL, or why not (libjpeg's message, or run()'s). No Python: call it with the GIL released. */
const char *jr_decode_into(struct job *job, const unsigned char *data, size_t size, int scale_num,
                               const struct region *r)
{
    const struct library *lib = job->lib;
    const char *problem = NULL;
    job->cinfo.err = jr_strict_errors(lib, &job->err);
    if (setjmp(job->err.escape)) {
        problem = job->err.message;
    } else {
        lib->create_decompress(&job->cinfo, JPEG_LIB_VERSION, sizeof(struct jpeg_decompress_struct));
        problem = run(job, data, size, scale_num, r);
    }
    lib->destroy_decompress(&job->cinfo);
    free(job->rows);
    job->rows = NULL;
    return problem;
}

PyObject *jr_decode_region(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *capsule;
    Py_buffer view;
    int scale_num;
    struct region r;
    if (!PyArg_ParseTuple(args, "Oy*iIIIII", &capsule, &view, &scale_num, &r.top, &r.left, &r.height,
                          &r.width, &r.margin))
        return NULL;
    const struct library *lib = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (lib == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
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
    job.lib = lib;
    job.out = (unsigned char *)PyByteArray_AsString(pixels);
    const char *problem;

    /* The capsule (and so the library) stays alive: the caller's argument tuple holds it. */
    Py_BEGIN_ALLOW_THREADS
    problem = jr_decode_into(&job, (const unsigned char *)view.buf, (size_t)view.len, scale_num, &r);
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    if (problem != NULL) {
        Py_DECREF(pixels);
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    return pixels;
}
