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
 * Built against CPython's limited API, as csrc/_resize.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define HAVE_CRC_INSN 1
#else
#define HAVE_CRC_INSN 0
#endif

/* --- CRC32C -------------------------------------------------------------------------------------- */

static int have_crc(void)
{
#if HAVE_CRC_INSN
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    return known;
#else
    return 0;
#endif
}

#if HAVE_CRC_INSN
__attribute__((target("sse4.2"))) static uint32_t crc32c(const uint8_t *p, size_t n)
{
    uint64_t crc = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = _mm_crc32_u64(crc, word);
    }
    uint32_t c = (uint32_t)crc;
    for (; n > 0; p++, n--)
        c = _mm_crc32_u8(c, *p);
    return c ^ 0xFFFFFFFFu;
}
#else
static uint32_t crc32c(const uint8_t *p, size_t n)
{
    (void)p;
    (void)n;
    return 0; /* never called: have_crc() is 0 */
}
#endif

static uint32_t masked(const uint8_t *p, size_t n)
{
    uint32_t crc = crc32c(p, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

static uint64_t le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* --- the protobuf walk ---------------------------------------------------------------------------- */

typedef struct {
    uint64_t number;
    int wire;
    size_t start, stop; /* wire 2: the value's bytes */
} field_t;

/* A varint at *pos: 0, or -1 when truncated, longer than 10 bytes or past 64 bits. */
static int varint(const uint8_t *b, size_t *pos, size_t end, uint64_t *out)
{
    uint64_t result = 0;
    for (int i = 0; i < 10; i++) {
        if (*pos >= end)
            return -1;
        uint8_t byte = b[(*pos)++];
        result |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            if (i == 9 && byte > 1)
                return -1;
            *out = result;
            return 0;
        }
    }
    return -1;
}

/* The next field of the message ending at `end`: 1, 0 at its end, -1 when malformed. */
static int next_field(const uint8_t *b, size_t *pos, size_t end, field_t *f)
{
    uint64_t tag, value;
    if (*pos >= end)
        return 0;
    if (varint(b, pos, end, &tag) < 0 || (tag >> 3) == 0)
        return -1;
    f->number = tag >> 3;
    f->wire = (int)(tag & 7);
    switch (f->wire) {
    case 0:
        return varint(b, pos, end, &value) < 0 ? -1 : 1;
    case 2:
        if (varint(b, pos, end, &value) < 0 || value > end - *pos)
            return -1;
        f->start = *pos;
        f->stop = *pos + (size_t)value;
        *pos = f->stop;
        return 1;
    case 1:
    case 5: {
        size_t size = f->wire == 1 ? 8 : 4;
        if (size > end - *pos)
            return -1;
        *pos += size;
        return 1;
    }
    default:
        return -1;
    }
}

/* A list message of kind 1 (bytes), 2 (float) or 3 (int64) walked whole: 0 with its value count
 * at most 1 counted (*any) and the first bytes value's span, or -1 when malformed. */
static int walk_list(const uint8_t *b, size_t start, size_t end, uint64_t kind, int *any, size_t first[2])
{
    field_t f;
    int got;
    *any = 0;
    while ((got = next_field(b, &start, end, &f)) > 0) {
        if (f.number != 1)
            continue;
        if (kind == 1 && f.wire == 2) {
            if (!*any) {
                first[0] = f.start;
                first[1] = f.stop;
            }
            *any = 1;
        } else if (kind == 3 && f.wire == 2) { /* packed varints, each checked */
            size_t pos = f.start;
            uint64_t value;
            while (pos < f.stop)
                if (varint(b, &pos, f.stop, &value) < 0)
                    return -1;
        } else if (kind == 2 && f.wire == 2) {
            if ((f.stop - f.start) % 4)
                return -1;
        } else if (!(kind == 3 && f.wire == 0) && !(kind == 2 && f.wire == 5)) {
            return -1;
        }
    }
    return got;
}

/* One entry of the feature map (the map field `entry`): its key's span and its Feature's (the last of
 * each wins); 1 with a Feature, 0 without, -1 when malformed or the key is not ASCII. */
static int read_entry(const uint8_t *b, const field_t *entry, size_t key[2], size_t feature[2])
{
    field_t part;
    size_t pos = entry->start;
    int has_feature = 0, got;
    key[0] = key[1] = feature[0] = feature[1] = 0;
    while ((got = next_field(b, &pos, entry->stop, &part)) > 0) {
        if (part.wire != 2 || (part.number != 1 && part.number != 2))
            continue;
        size_t *into = part.number == 1 ? key : feature;
        into[0] = part.start;
        into[1] = part.stop;
        has_feature |= part.number == 2;
    }
    for (size_t i = key[0]; got == 0 && i < key[1]; i++)
        if (b[i] >= 0x80)
            return -1; /* Python decides what a non-ASCII name is */
    return got < 0 ? -1 : has_feature;
}

/* The entries of an Example in data[0, n): the span of the last entry named `name` (found: 1; its
 * Feature absent: 2), 0 when none is, -1 when malformed or a name is not ASCII. */
static int find_entry(const uint8_t *b, size_t n, const char *name, size_t name_len, size_t span[2])
{
    field_t features, entry;
    size_t pos = 0, key[2], feature[2];
    int found = 0, got, got2 = 0;
    while (got2 >= 0 && (got = next_field(b, &pos, n, &features)) > 0) {
        if (features.number != 1 || features.wire != 2)
            continue; /* an unknown field of Example */
        size_t at = features.start;
        while ((got2 = next_field(b, &at, features.stop, &entry)) > 0) {
            if (entry.number != 1 || entry.wire != 2)
                continue; /* an unknown field of Features */
            int has = read_entry(b, &entry, key, feature);
            if (has < 0)
                return -1;
            if (key[1] - key[0] == name_len && memcmp(b + key[0], name, name_len) == 0) {
                found = has ? 1 : 2;
                span[0] = feature[0];
                span[1] = feature[1];
            }
        }
    }
    return got < 0 || got2 < 0 ? -1 : found;
}

/* The image of one framed record: 1 with its span in `out`, else 0. Runs without the GIL. */
static int one_record(const uint8_t *raw, size_t len, const char *name, size_t name_len, uint64_t max_bytes,
                      size_t out[2])
{
    if (len < 16 || le(raw + 8, 4) != masked(raw, 8))
        return 0;
    uint64_t length = le(raw, 8);
    if (length > max_bytes || length != len - 16 || le(raw + 12 + length, 4) != masked(raw + 12, length))
        return 0;
    const uint8_t *data = raw + 12;
    size_t span[2] = {0, 0}, first[2] = {0, 0};
    if (find_entry(data, (size_t)length, name, name_len, span) != 1)
        return 0;
    field_t f;
    size_t pos = span[0];
    int got, kind = 0, any = 0;
    while ((got = next_field(data, &pos, span[1], &f)) > 0) {
        if (f.number < 1 || f.number > 3)
            continue;
        if (f.wire != 2 || walk_list(data, f.start, f.stop, f.number, &any, first) < 0)
            return 0;
        kind = (int)f.number; /* the last kind field wins */
    }
    if (got < 0 || kind != 1 || !any)
        return 0;
    out[0] = 12 + first[0];
    out[1] = 12 + first[1];
    return 1;
}

/* --- a record's fields: several features, each one bytes value --------------------------------------- */

#define MAX_NAMES 64

/* A list message of kind 1 (bytes), 2 (float) or 3 (int64) walked whole, as walk_list walks it:
 * 0 with its count of values (every packed number counted) and its first bytes value's span, or -1
 * when malformed. */
static int count_list(const uint8_t *b, size_t start, size_t end, uint64_t kind, uint64_t *count, size_t first[2])
{
    field_t f;
    int got;
    *count = 0;
    while ((got = next_field(b, &start, end, &f)) > 0) {
        if (f.number != 1)
            continue;
        if (kind == 1 && f.wire == 2) {
            if (*count == 0) {
                first[0] = f.start;
                first[1] = f.stop;
            }
            (*count)++;
        } else if (kind == 3 && f.wire == 2) {
            size_t pos = f.start;
            uint64_t value;
            while (pos < f.stop) {
                if (varint(b, &pos, f.stop, &value) < 0)
                    return -1;
                (*count)++;
            }
        } else if (kind == 2 && f.wire == 2) {
            if ((f.stop - f.start) % 4)
                return -1;
            *count += (f.stop - f.start) / 4;
        } else if ((kind == 3 && f.wire == 0) || (kind == 2 && f.wire == 5)) {
            (*count)++;
        } else {
            return -1;
        }
    }
    return got;
}

/* The entries of an Example in data[0, n), walked once: for each of the m names, found[j] 1 with
 * the span of the last entry of that name, 2 when that entry has no Feature, 0 when none; -1 when
 * malformed or a name is not ASCII. */
static int find_entries(const uint8_t *b, size_t n, const char *const *names, const size_t *lens, int m,
                        size_t spans[][2], int *found)
{
    field_t features, entry;
    size_t pos = 0, key[2], feature[2];
    int got, got2 = 0;
    while (got2 >= 0 && (got = next_field(b, &pos, n, &features)) > 0) {
        if (features.number != 1 || features.wire != 2)
            continue;
        size_t at = features.start;
        while ((got2 = next_field(b, &at, features.stop, &entry)) > 0) {
            if (entry.number != 1 || entry.wire != 2)
                continue;
            int has = read_entry(b, &entry, key, feature);
            if (has < 0)
                return -1;
            for (int j = 0; j < m; j++)
                if (key[1] - key[0] == lens[j] && memcmp(b + key[0], names[j], lens[j]) == 0) {
                    found[j] = has ? 1 : 2;
                    spans[j][0] = feature[0];
                    spans[j][1] = feature[1];
                }
        }
    }
    return got < 0 || got2 < 0 ? -1 : 0;
}

/* Features `names` of one framed record, each read as example.py's find_features reads it with a
 * limit of one value: out[3j..3j+2] = the first bytes value's (start, end) inside the record and
 * the count of values of the Feature's last kind field when that is a bytes list, else count -1
 * (absent, or another kind); 0 count for a Feature left empty. Returns 0 (the Python steps decide)
 * on a framing or CRC that does not match, a malformed message, a name that is not ASCII, or a
 * kind field of a named Feature holding more than one value (find_features refuses it). */
static int record_fields(const uint8_t *raw, size_t len, const char *const *names, const size_t *lens, int m,
                         uint64_t max_bytes, int64_t *out)
{
    if (len < 16 || le(raw + 8, 4) != masked(raw, 8))
        return 0;
    uint64_t length = le(raw, 8);
    if (length > max_bytes || length != len - 16 || le(raw + 12 + length, 4) != masked(raw + 12, length))
        return 0;
    const uint8_t *data = raw + 12;
    size_t spans[MAX_NAMES][2];
    int found[MAX_NAMES] = {0};
    if (find_entries(data, (size_t)length, names, lens, m, spans, found) < 0)
        return 0;
    for (int j = 0; j < m; j++) {
        int64_t *row = out + 3 * j;
        row[0] = row[1] = 0;
        row[2] = found[j] == 2 ? 0 : -1;
        if (found[j] != 1)
            continue;
        field_t f;
        size_t pos = spans[j][0], first[2] = {0, 0};
        int got, kind = 0;
        uint64_t count = 0;
        while ((got = next_field(data, &pos, spans[j][1], &f)) > 0) {
            if (f.number < 1 || f.number > 3)
                continue;
            if (f.wire != 2 || count_list(data, f.start, f.stop, f.number, &count, first) < 0 || count > 1)
                return 0;
            kind = (int)f.number; /* the last kind field wins */
        }
        if (got < 0)
            return 0;
        row[0] = (int64_t)(12 + first[0]);
        row[1] = (int64_t)(12 + first[1]);
        row[2] = kind == 1 ? (int64_t)count : kind == 0 ? 0 : -1;
    }
    return 1;
}

/* --- Python ---------------------------------------------------------------------------------------- */

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
    Py_buffer *views = PyMem_Calloc((size_t)n + 1, sizeof(Py_buffer));
    size_t *spans = PyMem_Calloc(2 * (size_t)n + 2, sizeof(size_t));
    char *ok = PyMem_Calloc((size_t)n + 1, 1);
    PyObject *out = NULL;
    if (views == NULL || spans == NULL || ok == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GetItem(raws, k);
        if (item != Py_None && PyObject_GetBuffer(item, &views[k], PyBUF_SIMPLE) < 0)
            PyErr_Clear(); /* not bytes-like: left to the Python steps */
    }
    if (have_crc()) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n; k++)
            if (views[k].obj != NULL)
                ok[k] = (char)one_record(views[k].buf, (size_t)views[k].len, name, (size_t)name_len,
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
    for (Py_ssize_t k = 0; views != NULL && k < n; k++)
        if (views[k].obj != NULL)
            PyBuffer_Release(&views[k]);
    PyMem_Free(views);
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
    if (!have_crc()) {
        PyBuffer_Release(&data);
        Py_RETURN_NONE;
    }
    uint32_t crc = crc32c(data.buf, (size_t)data.len);
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
    Py_buffer *views = PyMem_Calloc((size_t)n + 1, sizeof(Py_buffer));
    int64_t *spans = PyMem_Calloc(3 * (size_t)m * (size_t)n + 1, sizeof(int64_t));
    char *ok = PyMem_Calloc((size_t)n + 1, 1);
    PyObject *out = NULL;
    if (views == NULL || spans == NULL || ok == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GetItem(raws, k);
        if (item != Py_None && PyObject_GetBuffer(item, &views[k], PyBUF_SIMPLE) < 0)
            PyErr_Clear(); /* not bytes-like: left to the Python steps */
    }
    if (have_crc()) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n; k++)
            if (views[k].obj != NULL)
                ok[k] = (char)record_fields(views[k].buf, (size_t)views[k].len, name_ptrs, lens, (int)m,
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
    for (Py_ssize_t k = 0; views != NULL && k < n; k++)
        if (views[k].obj != NULL)
            PyBuffer_Release(&views[k]);
    PyMem_Free(views);
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
