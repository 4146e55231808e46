/*
 * iotool._boxes: a run's stored boxes values parsed with the GIL released, where each one is the
 * canonical JSON that iotool's boxes kind writes (iotool/fields/kinds/boxes.py, encode):
 *
 *     {"boxes":[[x,y,x,y],...],"labels":[l,...]}
 *
 * with no spaces, the keys in that order, each coordinate a JSON number without an exponent and
 * each label a non-negative integer below 2**31, one label a box. That is what BoxesKind's
 * decode_run gives in Python (json.loads, then numpy's float32 and int64 arrays), about 11 us of
 * a detection sample's held time: a coordinate with a fraction is read as the nearest double (as
 * Python's float does) and rounded to float32, an integer one (at most 18 digits: an int64, as
 * numpy holds a Python int that fits one, "-0" the integer 0) cast from int64 to float32, as
 * numpy casts it. (encode writes float32 values positionally: 1e30 is 31 digits, left to Python.)
 *
 * parse_run(datas, max_bytes, max_boxes) -> (boxes, labels, counts) | None: the run's boxes as
 * float32 (4 a box), labels as int64 and each value's count as int64, each a bytearray; None for
 * the whole run where one value is missing, longer than max_bytes, has more than max_boxes boxes,
 * is not exactly that form, or gives a coordinate that is not finite in float32: the Python steps
 * then decode each value, and raise the error that names it. tests/fields/test_boxes_in_c.py holds
 * the two to the same answers, on hostile bytes too.
 *
 * Built against CPython's limited API, as csrc/_resize.c.
 */
#define _GNU_SOURCE /* strtod_l: a decimal point whatever the process's locale */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *at, *end;
} text_t;

static int literal(text_t *t, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(t->end - t->at) < n || memcmp(t->at, word, n) != 0)
        return 0;
    t->at += n;
    return 1;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* A run of digits: their count (0 when none, or a leading 0 followed by a digit, which JSON refuses). */
static size_t digits(text_t *t)
{
    const char *start = t->at;
    while (t->at < t->end && is_digit(*t->at))
        t->at++;
    size_t n = (size_t)(t->at - start);
    return n > 1 && start[0] == '0' ? 0 : n;
}

/* One coordinate: -?(0|[1-9][0-9]*)(.[0-9]+)? read into *out as Python and numpy would. */
static int coordinate(text_t *t, locale_t c_locale, float *out)
{
    const char *start = t->at;
    int negative = t->at < t->end && *t->at == '-';
    t->at += negative;
    size_t whole = digits(t);
    if (whole == 0)
        return 0;
    if (t->at < t->end && *t->at == '.') {
        t->at++;
        const char *fraction = t->at;
        while (t->at < t->end && is_digit(*t->at))
            t->at++;
        if (t->at == fraction)
            return 0;
        char number[64];
        size_t n = (size_t)(t->at - start);
        if (n >= sizeof number)
            return 0; /* longer than any float32 iotool writes: left to Python */
        memcpy(number, start, n);
        number[n] = '\0';
        *out = (float)strtod_l(number, NULL, c_locale);
    } else {
        if (whole > 18)
            return 0; /* past what an int64 surely holds: left to Python */
        int64_t value = 0;
        for (const char *p = t->at - whole; p < t->at; p++)
            value = value * 10 + (*p - '0');
        /* numpy casts a Python int that fits an int64 to float32 from the int64, rounded once;
         * "-0" is the integer 0: +0.0, as in Python */
        *out = (float)(negative ? -value : value);
    }
    return isfinite(*out);
}

static int label(text_t *t, int64_t *out)
{
    size_t n = digits(t);
    if (n == 0 || n > 10)
        return 0;
    int64_t value = 0;
    for (const char *p = t->at - n; p < t->at; p++)
        value = value * 10 + (*p - '0');
    *out = value;
    return value < ((int64_t)1 << 31);
}

/* One value parsed: its boxes appended at boxes[*n] and labels at labels[*n]; 1, or 0 when it is
 * not the canonical form (or has more than max_boxes boxes). */
static int one_value(text_t t, locale_t c_locale, size_t max_boxes, float *boxes, int64_t *labels, size_t *n)
{
    size_t first = *n, count = 0, named = 0;
    if (!literal(&t, "{\"boxes\":["))
        return 0;
    if (!literal(&t, "]")) {
        for (;;) {
            if (count == max_boxes || !literal(&t, "["))
                return 0;
            float *box = boxes + 4 * (first + count);
            for (int j = 0; j < 4; j++)
                if (!coordinate(&t, c_locale, &box[j]) || !literal(&t, j < 3 ? "," : "]"))
                    return 0;
            count++;
            if (literal(&t, "]"))
                break;
            if (!literal(&t, ","))
                return 0;
        }
    }
    if (!literal(&t, ",\"labels\":["))
        return 0;
    if (!literal(&t, "]")) {
        for (;;) {
            if (named == count || !label(&t, &labels[first + named]))
                return 0;
            named++;
            if (literal(&t, "]"))
                break;
            if (!literal(&t, ","))
                return 0;
        }
    }
    if (named != count || !literal(&t, "}") || t.at != t.end)
        return 0;
    *n = first + count;
    return 1;
}

static PyObject *py_parse_run(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *datas;
    Py_ssize_t max_bytes, max_boxes;
    if (!PyArg_ParseTuple(args, "O!nn", &PyList_Type, &datas, &max_bytes, &max_boxes))
        return NULL;
    Py_ssize_t count = PyList_Size(datas);
    Py_buffer *views = PyMem_Calloc((size_t)count + 1, sizeof(Py_buffer));
    int64_t *counts = PyMem_Calloc((size_t)count + 1, sizeof(int64_t));
    float *boxes = NULL;
    int64_t *labels = NULL;
    PyObject *result = NULL;
    int whole = views != NULL && counts != NULL;
    size_t room = 1; /* boxes the run could hold: a box takes at least 10 bytes ([0,0,0,0] and a comma) */
    for (Py_ssize_t k = 0; whole && k < count; k++) {
        PyObject *item = PyList_GetItem(datas, k);
        if (item == Py_None || PyObject_GetBuffer(item, &views[k], PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            whole = 0;
        } else if (views[k].len > max_bytes)
            whole = 0;
        else
            room += (size_t)views[k].len / 10 + 1;
    }
    if (whole) {
        boxes = PyMem_Malloc(room * 4 * sizeof(float));
        labels = PyMem_Malloc(room * sizeof(int64_t));
        whole = boxes != NULL && labels != NULL;
    }
    size_t n = 0;
    locale_t c_locale = whole ? newlocale(LC_NUMERIC_MASK, "C", (locale_t)0) : (locale_t)0;
    whole = whole && c_locale != (locale_t)0;
    if (whole) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; whole && k < count; k++) {
            size_t before = n;
            text_t t = {views[k].buf, (const char *)views[k].buf + views[k].len};
            whole = one_value(t, c_locale, (size_t)max_boxes, boxes, labels, &n);
            counts[k] = (int64_t)(n - before);
        }
        Py_END_ALLOW_THREADS
    }
    if (c_locale != (locale_t)0)
        freelocale(c_locale);
    if (whole) { /* bytearrays: the arrays made over them are the caller's to change */
        PyObject *b = PyByteArray_FromStringAndSize((const char *)boxes, (Py_ssize_t)(n * 4 * sizeof(float)));
        PyObject *l = PyByteArray_FromStringAndSize((const char *)labels, (Py_ssize_t)(n * sizeof(int64_t)));
        PyObject *c = PyByteArray_FromStringAndSize((const char *)counts, (Py_ssize_t)((size_t)count * sizeof(int64_t)));
        if (b != NULL && l != NULL && c != NULL)
            result = PyTuple_Pack(3, b, l, c);
        Py_XDECREF(b);
        Py_XDECREF(l);
        Py_XDECREF(c);
    } else if (!PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(Py_None);
    }
    for (Py_ssize_t k = 0; views != NULL && k < count; k++)
        if (views[k].obj != NULL)
            PyBuffer_Release(&views[k]);
    PyMem_Free(views);
    PyMem_Free(counts);
    PyMem_Free(boxes);
    PyMem_Free(labels);
    return result;
}

static PyMethodDef methods[] = {
    {"parse_run", py_parse_run, METH_VARARGS,
     "parse_run(datas, max_bytes, max_boxes) -> (boxes, labels, counts) | None: a run's canonical boxes "
     "JSON values parsed with the GIL released (float32, int64 and int64 bytes), or None where one is not."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "iotool._boxes",
    .m_doc = "A run's stored boxes values parsed with the GIL released.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__boxes(void)
{
    return PyModule_Create(&module);
}
