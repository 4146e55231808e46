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
 *
 * One module, one file per concept, each declaring what it defines in a header of the same name:
 * this file holds the Python functions; _resize_cpu.c the choice of kernels (the CPU's features
 * under set_level's cap), _resize_kernel.c the resize as a whole (one block, then the passes);
 * _resize_weights.c computes an axis's weights, _resize_horizontal.c is the horizontal pass and
 * _resize_vertical.c the vertical pass, _resize_flip.c the transforms' horizontal flip (hflip),
 * _resize_draw.c the augmentations' random numbers and _resize_run.c a run of samples into batch
 * rows; _resize_common.h holds the types they share. _resize_runs.c holds the runs' Python
 * functions (run_samples, run_cached, run_packed: their arguments checked, the GIL released around
 * the run) and the stream keys read from Python ints. iotool._jpegregion compiles the kernel files
 * too, for its runs of JPEG samples (_jpegregion_run.c).
 */
#include "_resize_runs.h"

#include "_resize_cpu.h"
#include "_resize_draw.h"
#include "_resize_flip.h"
#include "_resize_kernel.h"

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
        problem = rs_run(&j);
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

static PyObject *py_hflip(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *src_obj, *dst_obj;
    Py_ssize_t rows, width, pixel;
    if (!PyArg_ParseTuple(args, "OOnnn", &src_obj, &dst_obj, &rows, &width, &pixel))
        return NULL;
    Py_buffer src, dst;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_CONTIG_RO) < 0)
        return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_CONTIG) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *problem = NULL;
    const uint8_t *s = (const uint8_t *)src.buf;
    uint8_t *d = (uint8_t *)dst.buf;
    if (rows < 0 || width < 0 || pixel < 1 || pixel > 16)
        problem = "rows and width must be >= 0 and pixel 1 to 16 bytes";
    else if (width > 0 && rows > PY_SSIZE_T_MAX / width / pixel)
        problem = "rows x width x pixel overflows";
    else if (src.len != rows * width * pixel || dst.len != src.len)
        problem = "src and dst must each hold rows x width x pixel bytes";
    else if (src.len > 0 && s != d && d < s + src.len && s < d + dst.len)
        problem = "src and dst must be the same buffer or not overlap";
    int failed = 0;
    if (problem == NULL) {
        Py_BEGIN_ALLOW_THREADS
        failed = rs_flip_rows(s, d, rows, width, pixel);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    if (failed)
        return PyErr_NoMemory();
    if (problem != NULL) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *py_sample_key(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objs[4];
    uint64_t words[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3]) || rs_key_words(objs, 4, words) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(rs_sample_key(words, 4));
}

static PyObject *py_uniform(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long key, counter;
    if (!PyArg_ParseTuple(args, "KK", &key, &counter))
        return NULL;
    uint64_t count = counter;
    return PyFloat_FromDouble(rs_uniform01(key, &count));
}

static PyObject *py_crop_box(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long key, counter;
    long height, width;
    double scale[2], ratio[2];
    if (!PyArg_ParseTuple(args, "KKlldddd", &key, &counter, &height, &width, &scale[0], &scale[1], &ratio[0],
                          &ratio[1]))
        return NULL;
    if (height < 1 || width < 1 || !(ratio[0] > 0) || !(ratio[1] > 0)) {
        PyErr_SetString(PyExc_ValueError, "height and width must be >= 1 and the ratios > 0");
        return NULL;
    }
    uint64_t count = counter;
    long box[4];
    rs_crop_box(key, &count, height, width, scale, ratio, box);
    return Py_BuildValue("(llllK)", box[0], box[1], box[2], box[3], (unsigned long long)count);
}

static PyObject *py_simd(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
#if HAVE_X86
    return PyUnicode_FromString(rs_have_avx2() ? "avx2" : (rs_have_ssse3() ? "ssse3" : "scalar"));
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
    int previous = rs_level_cap;
    rs_level_cap = level;
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
    {"hflip", py_hflip, METH_VARARGS,
     "hflip(src, dst, rows, width, pixel): dst row r = src row r mirrored, pixel by pixel (pixel "
     "adjacent bytes; CxHxW planes: rows=C*H, pixel=1; HxWxC: rows=H, pixel=C); both C-contiguous, "
     "the same buffer (in place) or apart; the GIL is released and no thread pool is used."},
    {"sample_key", py_sample_key, METH_VARARGS,
     "sample_key(seed, epoch, rank, record): the 64-bit key of a sample's random stream (each word mod 2**64)."},
    {"uniform", py_uniform, METH_VARARGS,
     "uniform(key, counter): the number in [0, 1) that stream `key` draws after `counter` draws."},
    {"crop_box", py_crop_box, METH_VARARGS,
     "crop_box(key, counter, height, width, scale0, scale1, ratio0, ratio1): torchvision's RandomResizedCrop "
     "box drawn from stream `key` after `counter` draws: (top, left, height, width, counter after)."},
    {"run_samples", rs_py_run_samples, METH_VARARGS,
     "run_samples(op, sources, bmp, (seed, epoch, rank), records, dst, first_row): each source (an HxWxC "
     "uint8 buffer, or with bmp a BMP file's bytes; None: skipped) cropped, resized and flipped as op = "
     "(kind, channels, out_h, out_w, scale0, scale1, ratio0, ratio1, flip_p) says into row first_row + k of "
     "dst, drawing from record k's stream; the GIL is released. Returns bytes: 0 done, 1 left to the caller."},
    {"run_packed", rs_py_run_packed, METH_VARARGS,
     "run_packed(op, blob, spans, (seed, epoch, rank), records, dst, first_row[, labels, label_rows]): "
     "run_samples of BMP files read into one buffer: source k is blob[spans[2k]:spans[2k + 1]] (int64 "
     "pairs), or left where -1; with labels (int64, every record's), records[k]'s into label_rows[first_row + k]."},
    {"run_cached", rs_py_run_cached, METH_VARARGS,
     "run_cached(op, block, (state, shapes, offsets, pixels, count), (seed, epoch, rank), records, dst, "
     "first_row[, labels, label_rows]): run_samples (and the labels, as run_packed's) over a RAM cache's "
     "block (iotool.loading.ramcache's layout): each record's pixels found there when its state byte says "
     "ready, else left to the caller (status 1)."},
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
