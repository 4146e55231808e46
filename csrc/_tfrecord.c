/*
 * image_spans(raws, name, max_bytes): where each framed TFRecord record of `raws` (a list of
 * bytes-like objects, each one whole record as the index locates it) holds the first value of its
 * bytes feature `name`, found with the GIL released for the whole run: what
 * iotool.formats.tfrecord.reader.TfrecordReader._payload computes in Python for one record
 * (framing.unframe, then example.find_bytes), about 70 us a record with the GIL held.
 *
 * The framing: uint64 length | uint32 masked CRC32C of the length | data | uint32 masked CRC32C of
 * the data; the length at most max_bytes and the record exactly that long. The data: a
 * tf.train.Example walked as example.py walks it (varints of at most 10 bytes, every length within
 * what is left, unknown fields of wire types 0, 1, 2 and 5 skipped, any other wire type or field
 * number 0 refused; every entry of the feature map walked, the last entry of `name` wins, and of
 * its Feature the last kind field; each list of that Feature walked whole, packed and unpacked
 * numbers both accepted).
 *
 * A record comes back as (start, end) of the image bytes inside it, or None wherever this code
 * would not give exactly what the Python steps give: a CRC or framing that does not match, any
 * malformed message, a feature name that is not ASCII (Python checks UTF-8), no such feature or
 * not a bytes one, an empty list, and every record when the CPU has no CRC32C instruction (SSE4.2):
 * the caller then runs the Python steps, which raise the error that names the record (or give the
 * image). tests/formats/test_tfrecord_spans.py holds the two to the same answers on hostile bytes.
 *
 * field_spans(raws, names, max_bytes) does the same for several features of each record in one
 * walk (a run's stored fields, each one bytes value: text, JSON, arrays, bytes), each read as
 * example.py's find_features reads it with a limit of one value.
 *
 * The files: _tfrecord_crc.c the CRC32C, _tfrecord_example.c the Example walk,
 * _tfrecord_record.c a framed record and the features a run reads; this file the Python functions.
 *
 * Built against CPython's limited API, as csrc/_resize.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_tfrecord_crc.h"
#include "_tfrecord_record.h"

/* A buffer view of each item of `raws` (a list of n items): views[k].obj NULL where the item is None
 * or not bytes-like (left to the Python steps); NULL with MemoryError set when out of memory. */
static Py_buffer *acquire_views(PyObject *raws, Py_ssize_t n)
{
    Py_buffer *views = PyMem_Calloc((size_t)n + 1, sizeof(Py_buffer));
    if (views == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GetItem(raws, k);
        if (item != Py_None && PyObject_GetBuffer(item, &views[k], PyBUF_SIMPLE) < 0)
            PyErr_Clear();
    }
    return views;
}

static void release_views(Py_buffer *views, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; views != NULL && k < n; k++)
        if (views[k].obj != NULL)
            PyBuffer_Release(&views[k]);
    PyMem_Free(views);
}

static PyObject *py_image_spans(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *raws;
    const char *name;
    Py_ssize_t name_len;
    unsigned long long max_bytes;
    if (!PyArg_ParseTuple(args, "O!y#K", &PyList_Type, &raws, &name, &name_len, &max_bytes))
        return NULL;
    Py_ssize_t n = PyList_Size(raws);
    Py_buffer *views = acquire_views(raws, n);
    size_t *spans = PyMem_Calloc(2 * (size_t)n + 2, sizeof(size_t));
    char *ok = PyMem_Calloc((size_t)n + 1, 1);
    PyObject *out = NULL;
    if (views == NULL || spans == NULL || ok == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    if (tf_have_crc()) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n; k++)
            if (views[k].obj != NULL)
                ok[k] = (char)tf_one_record(views[k].buf, (size_t)views[k].len, name, (size_t)name_len,
                                         (uint64_t)max_bytes, &spans[2 * k]);
        Py_END_ALLOW_THREADS
    }
    out = PyList_New(n);
    for (Py_ssize_t k = 0; out != NULL && k < n; k++) {
        PyObject *span = ok[k] ? Py_BuildValue("(nn)", (Py_ssize_t)spans[2 * k], (Py_ssize_t)spans[2 * k + 1]) : Py_None;
        if (span == NULL) {
            Py_CLEAR(out);
            break;
        }
        if (span == Py_None)
            Py_INCREF(Py_None);
        PyList_SetItem(out, k, span);
    }
done:
    release_views(views, n);
    PyMem_Free(spans);
    PyMem_Free(ok);
    return out;
}

static PyObject *py_crc32c(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    if (!tf_have_crc()) {
        PyBuffer_Release(&data);
        Py_RETURN_NONE;
    }
    uint32_t crc = tf_crc32c(data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *py_field_spans(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *raws, *names;
    unsigned long long max_bytes;
    if (!PyArg_ParseTuple(args, "O!O!K", &PyList_Type, &raws, &PyList_Type, &names, &max_bytes))
        return NULL;
    Py_ssize_t n = PyList_Size(raws), m = PyList_Size(names);
    if (m < 1 || m > MAX_NAMES) {
        PyErr_SetString(PyExc_ValueError, "field_spans: 1 to 64 feature names");
        return NULL;
    }
    const char *name_ptrs[MAX_NAMES];
    size_t lens[MAX_NAMES];
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *name = PyList_GetItem(names, j);
        char *buffer;
        Py_ssize_t size;
        if (!PyBytes_Check(name) || PyBytes_AsStringAndSize(name, &buffer, &size) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "field_spans: the feature names are bytes");
            return NULL;
        }
        name_ptrs[j] = buffer;
        lens[j] = (size_t)size;
    }
    Py_buffer *views = acquire_views(raws, n);
    int64_t *spans = PyMem_Calloc(3 * (size_t)m * (size_t)n + 1, sizeof(int64_t));
    char *ok = PyMem_Calloc((size_t)n + 1, 1);
    PyObject *out = NULL;
    if (views == NULL || spans == NULL || ok == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    if (tf_have_crc()) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n; k++)
            if (views[k].obj != NULL)
                ok[k] = (char)tf_record_fields(views[k].buf, (size_t)views[k].len, name_ptrs, lens, (int)m,
                                            (uint64_t)max_bytes, spans + 3 * m * k);
        Py_END_ALLOW_THREADS
    }
    out = PyList_New(n);
    for (Py_ssize_t k = 0; out != NULL && k < n; k++) {
        PyObject *row = ok[k] ? PyBytes_FromStringAndSize((const char *)(spans + 3 * m * k), 3 * m * (Py_ssize_t)sizeof(int64_t))
                              : Py_None;
        if (row == NULL) {
            Py_CLEAR(out);
            break;
        }
        if (row == Py_None)
            Py_INCREF(Py_None);
        PyList_SetItem(out, k, row);
    }
done:
    release_views(views, n);
    PyMem_Free(spans);
    PyMem_Free(ok);
    return out;
}

static PyMethodDef methods[] = {
    {"image_spans", py_image_spans, METH_VARARGS,
     "image_spans(raws, name, max_bytes): for each framed TFRecord record of raws (bytes-like, or None), "
     "the (start, end) inside it of the first value of its bytes feature `name` (bytes), CRCs and "
     "structure checked, or None where the Python steps must decide; the GIL is released."},
    {"field_spans", py_field_spans, METH_VARARGS,
     "field_spans(raws, names, max_bytes): for each framed TFRecord record of raws (bytes-like, or None), "
     "bytes of 3 int64 a feature of names (bytes): the first bytes value's (start, end) and the count of "
     "values (-1: absent or not bytes), each read with a limit of one value; None where the Python steps "
     "must decide; the GIL is released."},
    {"crc32c", py_crc32c, METH_VARARGS,
     "crc32c(data): the CRC32C of data with the CPU's instruction, or None without one (for tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "iotool._tfrecord",
    .m_doc = "The image bytes of framed TFRecord records, found with the GIL released.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__tfrecord(void)
{
    return PyModule_Create(&module);
}
