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
 * One module, one file per concept: this file holds the choice of kernels (the CPU's features
 * under set_level's cap), the resize as a whole (run: one block, then the passes) and the Python
 * functions; _resize_weights.c computes an axis's weights, _resize_horizontal.c is the horizontal
 * pass and _resize_vertical.c the vertical pass, _resize_flip.c the transforms' horizontal flip
 * (hflip); _resize.h is what they share.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_resize.h"

/* --- the choice of kernels ----------------------------------------------------------------- */

INTERNAL int rs_level_cap = 2;  /* _resize.h says what it caps */

#if HAVE_X86
INTERNAL int rs_have_avx2(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return known && rs_level_cap >= 2;
}

INTERNAL int rs_have_ssse3(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("ssse3") ? 1 : 0;
    }
    return known && rs_level_cap >= 1;
}
#endif

/* --- the whole resize ---------------------------------------------------------------------- */

/* Runs without the GIL. Returns NULL or an error message. */
static const char *run(const job_t *j)
{
    int ch = j->channels;
    int need_h = j->width != j->out_w, need_v = j->height != j->out_h;
    size_t plane = (size_t)j->out_h * j->out_w;
    axis_t ax, ay;
    /* the rows the vertical pass reads, [y0, y1), go through the horizontal pass */
    int y0 = 0, y1 = j->height, rows;
    size_t head = rs_axis_bytes(j->width, j->out_w) + rs_axis_bytes(j->height, j->out_h) +
                  rs_hpass_scratch(j, j->out_w);
    size_t tail = (size_t)j->height * j->out_w * ch + 16;  /* the intermediate, at most */
    char *mem = malloc(head + tail);
    if (mem == NULL)
        return "out of memory";
    char *scratch = rs_axis_init(&ay, j->height, j->out_h, rs_axis_init(&ax, j->width, j->out_w, mem));
    uint8_t *tmp = (uint8_t *)mem + head;
    if (need_v) {
        y0 = ay.start[0];
        y1 = ay.start[j->out_h - 1] + ay.count[j->out_h - 1];
    }
    rows = y1 - y0;
    if (need_h || !need_v) {
        /* horizontal pass (an identity one when no axis changes: its weights are exact) */
        rs_hpass(j, &ax, y0, y1, need_v ? tmp : j->dst, need_v ? rows : j->out_h, scratch);
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
                rs_vpass(tmp + (size_t)c * rows * j->out_w, j->out_w, y0, j->out_w, &ay,
                         j->dst + (size_t)c * plane, j->out_w);
        } else if (need_h) {
            rs_vpass(tmp, (ptrdiff_t)j->out_w * ch, y0, j->out_w * ch, &ay, j->dst,
                     (ptrdiff_t)j->out_w * ch);
        } else {
            rs_vpass(j->src, j->row_stride, 0, j->width * ch, &ay, j->dst, (ptrdiff_t)j->out_w * ch);
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
