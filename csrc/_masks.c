/*
 * iotool._masks: a run's masks stored as PNGs, decoded and moved as their images moved, all with
 * the GIL released (iotool/loading/targets.py's TargetMover.move_run calls it for the Loader's
 * runs). What the per-sample path does with Pillow, torch and NumPy while holding the GIL (about
 * 550 us a 640x480 mask: the PNG's chunks parsed in Python, its pixels copied out, the move).
 *
 *   _masks_png.c   the PNG decoder: one-channel PNGs, checked whole, else left to Pillow
 *   _masks_move.c  the move: crop box, nearest-neighbour resize, flip, in one pass
 *
 * move_masks(datas, moves, outs) -> bytes: for each k, the PNG datas[k] (bytes-like, or None) of
 * the size moves[k] says, moved as moves[k] says into outs[k] (a writable buffer of out_h * out_w
 * bytes); moves is a buffer of 9 int64 a mask (src_h, src_w, top, left, box_h, box_w, out_h,
 * out_w, flip). Its k-th byte is MK_OK where outs[k] holds the mask, else why not
 * (_masks_common.h): the caller then runs the Python steps, which give the mask or raise the error
 * that names it. tests/loading/test_mask_runs.py holds the two to the same answers, on hostile
 * bytes too.
 *
 * Built against CPython's limited API, as csrc/_resize.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_masks_move.h"
#include "_masks_png.h"

/* At most this many pixels a mask: twice PIL's decompression-bomb error limit (2 ** 31 / 4 * 2 is
 * what any image iotool decodes stays under). */
#define MAX_PIXELS ((int64_t)1 << 30)

/* Whether a side is at least 1 and at most MAX_PIXELS, and an offset within +-MAX_PIXELS: checked
 * before any product or sum of them, so none can overflow. */
static int side(int64_t v) { return v >= 1 && v <= MAX_PIXELS; }
static int offset(int64_t v) { return v >= -MAX_PIXELS && v <= MAX_PIXELS; }

static int valid(const mk_move_t *m)
{
    if (!side(m->src_h) || !side(m->src_w) || !side(m->box_h) || !side(m->box_w) || !side(m->out_h) ||
        !side(m->out_w) || !offset(m->top) || !offset(m->left))
        return 0;
    return m->src_h * m->src_w <= MAX_PIXELS && m->out_h * m->out_w <= MAX_PIXELS;
}

static int whole(const mk_move_t *m)
{
    return !m->flip && m->top == 0 && m->left == 0 && m->box_h == m->src_h && m->box_w == m->src_w &&
           m->out_h == m->src_h && m->out_w == m->src_w;
}

/* One mask decoded and moved, `*scratch` (of `*room` bytes) grown as needed. */
static int one_mask(const Py_buffer *data, const mk_move_t *m, uint8_t *out, uint8_t **scratch, size_t *room)
{
    if (whole(m))
        return mk_png_decode(data->buf, (size_t)data->len, (uint32_t)m->src_h, (uint32_t)m->src_w, out);
    size_t need = (size_t)(m->src_h * m->src_w);
    if (need > *room) {
        uint8_t *grown = realloc(*scratch, need);
        if (grown == NULL)
            return MK_NOMEMORY;
        *scratch = grown;
        *room = need;
    }
    int rc = mk_png_decode(data->buf, (size_t)data->len, (uint32_t)m->src_h, (uint32_t)m->src_w, *scratch);
    return rc == MK_OK ? mk_move(*scratch, m, out) : rc;
}

static PyObject *py_move_masks(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *datas, *outs;
    Py_buffer moves;
    if (!PyArg_ParseTuple(args, "O!y*O!", &PyList_Type, &datas, &moves, &PyList_Type, &outs))
        return NULL;
    Py_ssize_t n = PyList_Size(datas);
    if (PyList_Size(outs) != n || moves.len != n * 9 * (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(&moves);
        PyErr_SetString(PyExc_ValueError, "move_masks: datas, outs and moves (9 int64 a mask) must have one entry a mask");
        return NULL;
    }
    Py_buffer *in = PyMem_Calloc((size_t)n + 1, sizeof(Py_buffer)), *dst = PyMem_Calloc((size_t)n + 1, sizeof(Py_buffer));
    PyObject *result = PyBytes_FromStringAndSize(NULL, n);
    if (in == NULL || dst == NULL || result == NULL) {
        Py_CLEAR(result);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    char *status = PyBytes_AsString(result);
    const mk_move_t *each = (const mk_move_t *)moves.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *data = PyList_GetItem(datas, k), *out = PyList_GetItem(outs, k);
        status[k] = MK_NOT_GIVEN;
        if (data == Py_None || out == Py_None || !valid(&each[k]))
            continue;
        if (PyObject_GetBuffer(data, &in[k], PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            continue;
        }
        if (PyObject_GetBuffer(out, &dst[k], PyBUF_WRITABLE) < 0) {
            PyErr_Clear();
            continue;
        }
        if (dst[k].len == each[k].out_h * each[k].out_w)
            status[k] = MK_OK; /* to do */
    }
    Py_BEGIN_ALLOW_THREADS
    uint8_t *scratch = NULL;
    size_t room = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (status[k] == MK_OK)
            status[k] = (char)one_mask(&in[k], &each[k], dst[k].buf, &scratch, &room);
    free(scratch);
    Py_END_ALLOW_THREADS
done:
    for (Py_ssize_t k = 0; k < n; k++) {
        if (in != NULL && in[k].obj != NULL)
            PyBuffer_Release(&in[k]);
        if (dst != NULL && dst[k].obj != NULL)
            PyBuffer_Release(&dst[k]);
    }
    PyMem_Free(in);
    PyMem_Free(dst);
    PyBuffer_Release(&moves);
    return result;
}

static PyMethodDef methods[] = {
    {"move_masks", py_move_masks, METH_VARARGS,
     "move_masks(datas, moves, outs) -> bytes: each PNG mask of datas decoded and moved as moves (9 int64 a "
     "mask: src_h, src_w, top, left, box_h, box_w, out_h, out_w, flip) says, into outs, with the GIL released; "
     "a status a mask, 0 where outs holds it (else the Python steps decide)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "iotool._masks",
    .m_doc = "A run's PNG masks decoded and moved with the GIL released.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__masks(void)
{
    return PyModule_Create(&module);
}
