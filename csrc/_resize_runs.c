/*
 * The Python functions of iotool._resize that compute a run of samples into batch rows (the Loader's
 * runs, iotool.transforms.runs): run_samples (a list of pixel arrays or BMP files), run_cached (a RAM
 * cache's block) and run_packed (BMP files read into one buffer). Each checks its arguments with the
 * GIL held, then releases it for the whole run (_resize_run.c); with `labels` and `label_rows`,
 * run_cached and run_packed also write each record's label into its row; with `geometry` (a last
 * optional int64 buffer of 7 values a sample), each done sample's geometry (rs_run_samples).
 */
#include "_resize_runs.h"

#include "_resize_draw.h"
#include "_resize_run.h"

INTERNAL int rs_key_words(PyObject *const *objs, int n, uint64_t *words)
{
    for (int k = 0; k < n; k++) {
        words[k] = (uint64_t)PyLong_AsUnsignedLongLongMask(objs[k]);
        if (words[k] == (uint64_t)-1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* run_samples' arguments, checked: the op, the sources (their buffers held in `views`). */
static const char *parse_op(PyObject *op_obj, rs_op_t *op)
{
    if (!PyArg_ParseTuple(op_obj, "iiiiddddd", &op->kind, &op->channels, &op->out_h, &op->out_w, &op->scale[0],
                          &op->scale[1], &op->ratio[0], &op->ratio[1], &op->flip_p))
        return "";
    if (op->kind < RS_OP_CROP || op->kind > RS_OP_RESIZE)
        return "op kind must be 0 (random resized crop), 1 (centre crop) or 2 (resize)";
    if (op->channels < 1 || op->channels > 4 || op->out_h < 1 || op->out_w < 1 || op->out_h > (1 << 24) ||
        op->out_w > (1 << 24))
        return "op needs 1 to 4 channels and a positive output size";
    if (!(op->ratio[0] > 0) || !(op->ratio[1] > 0))
        return "op ratios must be > 0";
    return NULL;
}

static const char *take_source(PyObject *obj, int bmp, Py_buffer *view, rs_source_t *src)
{
    memset(src, 0, sizeof(*src));
    if (obj == Py_None)
        return NULL;  /* left to the caller */
    if (PyObject_GetBuffer(obj, view, bmp ? PyBUF_SIMPLE : PyBUF_STRIDES) < 0)
        return "";
    if (bmp) {
        src->bmp = (const uint8_t *)view->buf;
        src->bmp_len = (size_t)view->len;
        return NULL;
    }
    if (view->ndim != 3 || view->itemsize != 1 || view->shape[0] < 1 || view->shape[1] < 1 ||
        view->shape[0] > (1 << 24) || view->shape[1] > (1 << 24) || view->shape[2] < 1 || view->shape[2] > 4 ||
        view->strides[2] != 1 || view->strides[1] != view->shape[2] ||
        view->strides[0] < view->shape[1] * view->shape[2])
        return "a pixel source must be an HxWxC uint8 buffer of adjacent channel bytes (1 to 4) and rows apart";
    src->pixels = (const uint8_t *)view->buf;
    src->row_stride = view->strides[0];
    src->height = (int)view->shape[0];
    src->width = (int)view->shape[1];
    src->channels = (int)view->shape[2];
    return NULL;
}

/* A run's common tail: rows first_row.. of dst hold the n samples, drawn from streams keys; with
 * `cache`, sources[k] is found there (record records[k]) once the GIL is released. The status
 * bytes, or NULL with an error set. */
static PyObject *run_into(const rs_op_t *op, rs_source_t *sources, const uint64_t *keys, Py_ssize_t n,
                          const rs_cache_t *cache, const long long *records, Py_buffer *dst, Py_ssize_t first_row,
                          PyObject *geometry_obj)
{
    size_t row_bytes = (size_t)op->channels * op->out_h * op->out_w;
    if (first_row < 0 || (size_t)(first_row + n) * row_bytes > (size_t)dst->len) {
        PyErr_SetString(PyExc_ValueError, "dst must hold first_row + len(sources) rows of channels x out_h x out_w bytes");
        return NULL;
    }
    Py_buffer geometry = {0};
    if (geometry_obj != Py_None) {
        if (PyObject_GetBuffer(geometry_obj, &geometry, PyBUF_CONTIG) < 0)
            return NULL;
        if ((size_t)geometry.len < (size_t)n * RS_GEOMETRY * sizeof(int64_t)) {
            PyBuffer_Release(&geometry);
            PyErr_SetString(PyExc_ValueError, "geometry must hold 7 int64 values a source");
            return NULL;
        }
    }
    PyObject *status = PyBytes_FromStringAndSize(NULL, n);
    if (status == NULL) {
        if (geometry.obj != NULL)
            PyBuffer_Release(&geometry);
        return NULL;
    }
    uint8_t *rows = (uint8_t *)dst->buf + (size_t)first_row * row_bytes;
    uint8_t *flags = (uint8_t *)PyBytes_AsString(status);
    int64_t *where = (int64_t *)geometry.buf;
    int result;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; cache != NULL && k < n; k++)
        rs_cached_source(cache, records[k], &sources[k]);
    result = rs_run_samples(op, sources, keys, (int)n, rows, flags, where);
    Py_END_ALLOW_THREADS
    if (geometry.obj != NULL)
        PyBuffer_Release(&geometry);
    if (result < 0) {
        Py_DECREF(status);
        return PyErr_NoMemory();
    }
    return status;
}

/* The key of each record of `records_obj` (a list of n ints) under `words`, into keys (and the
 * records into `records`, when given); -1 with an error set. */
static int record_keys(PyObject *records_obj, Py_ssize_t n, uint64_t words[4], uint64_t *keys, long long *records)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GetItem(records_obj, k);
        words[3] = (uint64_t)PyLong_AsUnsignedLongLongMask(item);
        if (records != NULL)
            records[k] = PyLong_AsLongLong(item);
        if (PyErr_Occurred())
            return -1;
        keys[k] = rs_sample_key(words, 4);
    }
    return 0;
}

/* op, (seed, epoch, rank) and the records list parsed; n: the records' count, which must be `expect`
 * (when >= 0). -1 with an error set. */
static int run_args(PyObject *op_obj, PyObject *const *words_obj, PyObject *records_obj, Py_ssize_t expect,
                    rs_op_t *op, uint64_t words[4], Py_ssize_t *n)
{
    const char *problem = parse_op(op_obj, op);
    if (problem != NULL) {
        if (*problem)
            PyErr_SetString(PyExc_ValueError, problem);
        return -1;
    }
    if (rs_key_words(words_obj, 3, words) < 0)
        return -1;
    *n = PyList_Size(records_obj);
    if ((expect >= 0 && *n != expect) || *n > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "sources and records must be lists of one length (at most 2**20)");
        return -1;
    }
    return 0;
}

INTERNAL PyObject *rs_py_run_samples(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *op_obj, *sources_obj, *records_obj, *dst_obj, *words_obj[3], *geometry = Py_None;
    int bmp;
    Py_ssize_t first_row, n;
    rs_op_t op;
    uint64_t words[4];
    if (!PyArg_ParseTuple(args, "O!O!p(OOO)O!On|O", &PyTuple_Type, &op_obj, &PyList_Type, &sources_obj, &bmp,
                          &words_obj[0], &words_obj[1], &words_obj[2], &PyList_Type, &records_obj, &dst_obj,
                          &first_row, &geometry) ||
        run_args(op_obj, words_obj, records_obj, PyList_Size(sources_obj), &op, words, &n) < 0)
        return NULL;
    Py_buffer dst;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_CONTIG) < 0)
        return NULL;
    Py_buffer *views = PyMem_Calloc((size_t)n + 1, sizeof(Py_buffer));
    rs_source_t *sources = PyMem_Calloc((size_t)n + 1, sizeof(rs_source_t));
    uint64_t *keys = PyMem_Calloc((size_t)n + 1, sizeof(uint64_t));
    PyObject *status = NULL;
    Py_ssize_t taken = 0;
    const char *problem = NULL;
    if (views == NULL || sources == NULL || keys == NULL) {
        PyErr_NoMemory();
    } else {
        for (; taken < n; taken++) {
            problem = take_source(PyList_GetItem(sources_obj, taken), bmp, &views[taken], &sources[taken]);
            if (problem != NULL) {
                if (views[taken].obj != NULL)
                    PyBuffer_Release(&views[taken]);  /* taken, then refused */
                break;
            }
        }
        if (problem != NULL && *problem)
            PyErr_SetString(PyExc_ValueError, problem);
        else if (problem == NULL && record_keys(records_obj, n, words, keys, NULL) == 0)
            status = run_into(&op, sources, keys, n, NULL, NULL, &dst, first_row, geometry);
    }
    for (Py_ssize_t k = 0; k < taken && views != NULL; k++)
        if (views[k].obj != NULL)
            PyBuffer_Release(&views[k]);
    PyBuffer_Release(&dst);
    PyMem_Free(views);
    PyMem_Free(sources);
    PyMem_Free(keys);
    return status;
}

/* With `labels_obj` not None (an int64 buffer: every record's label), record k's label into row
 * first_row + k of `rows_obj` (an int64 buffer): every record checked first, nothing written when
 * one has no label there. 0, or -1 with an error set. */
static int write_labels(PyObject *labels_obj, PyObject *rows_obj, const long long *records, Py_ssize_t n,
                        Py_ssize_t first_row)
{
    if (labels_obj == Py_None)
        return 0;
    Py_buffer labels, rows;
    if (PyObject_GetBuffer(labels_obj, &labels, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(rows_obj, &rows, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&labels);
        return -1;
    }
    Py_ssize_t count = labels.len / 8;
    int ok = labels.len % 8 == 0 && rows.len % 8 == 0 && first_row >= 0 && first_row <= rows.len / 8 - n;
    for (Py_ssize_t k = 0; ok && k < n; k++)
        ok = records[k] >= 0 && records[k] < count;
    for (Py_ssize_t k = 0; ok && k < n; k++)
        memcpy((char *)rows.buf + 8 * (first_row + k), (const char *)labels.buf + 8 * records[k], 8);
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "labels must be int64 with a label for every record, and label_rows "
                                          "int64 with first_row + len(records) rows");
    PyBuffer_Release(&labels);
    PyBuffer_Release(&rows);
    return ok ? 0 : -1;
}

INTERNAL PyObject *rs_py_run_cached(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *op_obj, *block_obj, *records_obj, *dst_obj, *words_obj[3], *labels = Py_None, *label_rows = Py_None;
    PyObject *geometry = Py_None;
    Py_ssize_t first_row, n;
    rs_cache_t cache;
    rs_op_t op;
    uint64_t words[4];
    if (!PyArg_ParseTuple(args, "O!O(LLLLL)(OOO)O!On|OOO", &PyTuple_Type, &op_obj, &block_obj, &cache.state,
                          &cache.shapes, &cache.offsets, &cache.pixels, &cache.count, &words_obj[0], &words_obj[1],
                          &words_obj[2], &PyList_Type, &records_obj, &dst_obj, &first_row, &labels, &label_rows,
                          &geometry) ||
        run_args(op_obj, words_obj, records_obj, -1, &op, words, &n) < 0)
        return NULL;
    if (op.channels != 3) {
        PyErr_SetString(PyExc_ValueError, "the RAM cache's pixels are RGB: op must have 3 channels");
        return NULL;
    }
    Py_buffer block, dst;
    if (PyObject_GetBuffer(block_obj, &block, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_CONTIG) < 0) {
        PyBuffer_Release(&block);
        return NULL;
    }
    cache.block = (const uint8_t *)block.buf;
    cache.len = (size_t)block.len;
    rs_source_t *sources = PyMem_Calloc((size_t)n + 1, sizeof(rs_source_t));
    uint64_t *keys = PyMem_Calloc((size_t)n + 1, sizeof(uint64_t));
    long long *records = PyMem_Calloc((size_t)n + 1, sizeof(long long));
    PyObject *status = NULL;
    if (sources == NULL || keys == NULL || records == NULL)
        PyErr_NoMemory();
    else if (!rs_cache_valid(&cache))
        PyErr_SetString(PyExc_ValueError, "the cache's tables do not lie inside its block");
    else if (record_keys(records_obj, n, words, keys, records) == 0 &&
             write_labels(labels, label_rows, records, n, first_row) == 0)
        status = run_into(&op, sources, keys, n, &cache, records, &dst, first_row, geometry);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&block);
    PyMem_Free(sources);
    PyMem_Free(keys);
    PyMem_Free(records);
    return status;
}

/* run_samples of BMP files read into one buffer (iotool.storage.files.Packed): source k is
 * blob[spans[2k]:spans[2k + 1]] (native int64 pairs; -1, or a span not in blob: left). */
INTERNAL PyObject *rs_py_run_packed(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *op_obj, *records_obj, *dst_obj, *words_obj[3], *status = NULL, *labels = Py_None, *label_rows = Py_None;
    PyObject *geometry = Py_None;
    Py_ssize_t first_row, n;
    Py_buffer blob, spans, dst = {0};
    rs_op_t op;
    uint64_t words[4];
    if (!PyArg_ParseTuple(args, "O!y*y*(OOO)O!On|OOO", &PyTuple_Type, &op_obj, &blob, &spans, &words_obj[0],
                          &words_obj[1], &words_obj[2], &PyList_Type, &records_obj, &dst_obj, &first_row, &labels,
                          &label_rows, &geometry))
        return NULL;
    size_t most = (size_t)spans.len / 16 + 1;
    rs_source_t *sources = PyMem_Calloc(most, sizeof(rs_source_t));
    uint64_t *keys = PyMem_Calloc(most, sizeof(uint64_t));
    long long *records = PyMem_Calloc(most, sizeof(long long));
    if (sources == NULL || keys == NULL || records == NULL)
        PyErr_NoMemory();
    else if (spans.len % 16)
        PyErr_SetString(PyExc_ValueError, "spans must hold (start, end) int64 pairs");
    else if (run_args(op_obj, words_obj, records_obj, spans.len / 16, &op, words, &n) == 0 &&
             record_keys(records_obj, n, words, keys, records) == 0 &&
             write_labels(labels, label_rows, records, n, first_row) == 0 &&
             PyObject_GetBuffer(dst_obj, &dst, PyBUF_CONTIG) == 0) {
        const long long *at = (const long long *)spans.buf;
        for (Py_ssize_t k = 0; k < n; k++)
            rs_packed_source((const uint8_t *)blob.buf, (size_t)blob.len, at[2 * k], at[2 * k + 1], &sources[k]);
        status = run_into(&op, sources, keys, n, NULL, NULL, &dst, first_row, geometry);
        PyBuffer_Release(&dst);
    }
    PyBuffer_Release(&blob);
    PyBuffer_Release(&spans);
    PyMem_Free(sources);
    PyMem_Free(keys);
    PyMem_Free(records);
    return status;
}
