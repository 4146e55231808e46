/*
 * read_inside(path, real_root, limit): the whole of a regular file that lies inside a dataset, in
 * one call that releases the GIL twice (the open and checks, then the read), where the same
 * steps from Python release and retake it at every system call. read_range_inside(path,
 * real_root, offset, size): the same steps for one range of the file (a record of a shard),
 * which must lie wholly inside it. read_many_inside(paths, real_root, limit[, ranges]): read_inside
 * (or read_range_inside) of a run of files, the GIL handed over twice for the whole run.
 *
 * The steps are those of iotool.storage.files.read_regular: open with O_RDONLY | O_NONBLOCK |
 * O_NOCTTY | O_CLOEXEC (a FIFO with no writer opens at once, no terminal is taken; O_NONBLOCK
 * has no effect on a regular file's reads), statx must say a regular file of at most `limit`
 * bytes, the file actually opened (readlink of /proc/self/fd/N: every link on the way followed)
 * must be `real_root` itself or lie under it, then one bounded pread of that size, and close.
 *
 * Returns the bytes, or None when any step fails or any check refuses: the caller then runs the
 * same steps in Python, which raise the error that names the file (or succeed, if the file
 * changed in between). Nothing is ever read past `limit` or past the size statx gave.
 *
 * Built against CPython's limited API, as iotool/_resize.c.
 */
#define _GNU_SOURCE /* statx, AT_EMPTY_PATH */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h> /* statx (glibc 2.28) */
#include <unistd.h>

/* 0 when `real` is `root` or lies under it (root given without a trailing slash, or "/"): the rule of
 * iotool.names.is_under, stated again here; tests/storage/test_containment.py runs both on one table
 * of cases (the sibling /data2 beside /data is outside, links and '..' out are outside). */
static int outside(const char *real, const char *root, size_t root_len)
{
    if (root_len == 1 && root[0] == '/')
        return real[0] != '/';
    if (strncmp(real, root, root_len) != 0)
        return 1;
    return real[root_len] != '\0' && real[root_len] != '/';
}

/* Open and check; the descriptor, or -1 (nothing left open). Runs without the GIL. */
static int open_inside(const char *path, const char *root, size_t root_len, long long limit, off_t *size)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    /* statx, not fstat: glibc 2.33 made fstat a symbol of its own (fstat64@GLIBC_2.33), which
     * would lift the wheel's floor above manylinux_2_28; statx is glibc 2.28's. A kernel without
     * it (ENOSYS) refuses here, and the caller's Python steps do the read. */
    struct statx st;
    char link[32], real[PATH_MAX + 1];
    if (statx(fd, "", AT_EMPTY_PATH, STATX_TYPE | STATX_SIZE, &st) != 0 ||
        (st.stx_mask & (STATX_TYPE | STATX_SIZE)) != (STATX_TYPE | STATX_SIZE) ||
        !S_ISREG(st.stx_mode) || (long long)st.stx_size > limit)
        goto refuse;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, PATH_MAX);
    if (n <= 0 || n >= PATH_MAX)
        goto refuse;
    real[n] = '\0';
    if (outside(real, root, root_len))
        goto refuse;
    *size = (off_t)st.stx_size;
    return fd;
refuse:
    close(fd);
    return -1;
}

/* 1 when the range [offset, offset + length) lies wholly in a file of `size` bytes. */
static int range_in_file(long long offset, long long length, off_t size)
{
    return offset <= (long long)size && length <= (long long)size - offset;
}

/* `size` bytes from `offset` of `fd` into buf, then `fd` closed: the bytes read (short: truncated
 * while read, or a read error). Runs without the GIL. */
static off_t read_fully_and_close(int fd, char *buf, off_t size, off_t offset)
{
    off_t done = 0;
    while (buf != NULL && done < size) {
        ssize_t got = pread(fd, buf + done, (size_t)(size - done), offset + done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        done += got;
    }
    close(fd);
    return done;
}

/* `size` bytes from `offset` of the open descriptor `fd` as a new bytes object, read with the
 * GIL released; `fd` is closed. None when the read comes up short (the caller's Python steps
 * report it). */
static PyObject *read_and_close(int fd, off_t offset, off_t size)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out == NULL) {
        close(fd);
        return NULL;
    }
    char *buf = PyBytes_AsString(out);
    off_t done;
    Py_BEGIN_ALLOW_THREADS
    done = read_fully_and_close(fd, buf, size, offset);
    Py_END_ALLOW_THREADS
    if (done != size) {  /* truncated while read, or a read error: the Python steps report it */
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* The descriptor of `path` opened and checked by open_inside with the GIL released, or -1 (the
 * Python steps must decide: an embedded NUL, a relative root, or a step failed or refused). */
static int open_args(const char *path, Py_ssize_t path_len, const char *root, Py_ssize_t root_len,
                     long long limit, off_t *size)
{
    if ((size_t)path_len != strlen(path) || (size_t)root_len != strlen(root) || root_len == 0 || root[0] != '/')
        return -1;
    while (root_len > 1 && root[root_len - 1] == '/')
        root_len--;
    int fd;
    Py_BEGIN_ALLOW_THREADS
    fd = open_inside(path, root, (size_t)root_len, limit, size);
    Py_END_ALLOW_THREADS
    return fd;
}

static PyObject *py_read_inside(PyObject *self, PyObject *args)
{
    (void)self;
    const char *path, *root;
    Py_ssize_t path_len, root_len;
    long long limit;
    off_t size = 0;
    if (!PyArg_ParseTuple(args, "y#y#L", &path, &path_len, &root, &root_len, &limit))
        return NULL;
    int fd = open_args(path, path_len, root, root_len, limit, &size);
    if (fd < 0)
        Py_RETURN_NONE;
    return read_and_close(fd, 0, size);
}

static PyObject *py_read_range_inside(PyObject *self, PyObject *args)
{
    (void)self;
    const char *path, *root;
    Py_ssize_t path_len, root_len;
    long long offset, length;
    off_t size = 0;
    if (!PyArg_ParseTuple(args, "y#y#LL", &path, &path_len, &root, &root_len, &offset, &length))
        return NULL;
    if (offset < 0 || length < 0 || length > PY_SSIZE_T_MAX)
        Py_RETURN_NONE;
    int fd = open_args(path, path_len, root, root_len, LLONG_MAX, &size);
    if (fd < 0)
        Py_RETURN_NONE;
    if (!range_in_file(offset, length, size)) {
        close(fd);
        Py_RETURN_NONE;
    }
    return read_and_close(fd, (off_t)offset, (off_t)length);
}

/* What read_many_inside returns when none of its files is read: (b"", [None] * n). */
static PyObject *none_read(Py_ssize_t n)
{
    PyObject *spans = PyList_New(n);
    for (Py_ssize_t k = 0; spans != NULL && k < n; k++) {
        Py_INCREF(Py_None);
        PyList_SetItem(spans, k, Py_None);
    }
    return spans == NULL ? NULL : Py_BuildValue("(yN)", "", spans);
}

/* Each path of `paths` (a list) as a C string in names[k] (NULL: not a plain path, or with `ranges`
 * its (offset, size) not one this call reads, in spans[2k], spans[2k + 1]). */
static void run_names(PyObject *paths, PyObject *ranges, Py_ssize_t n, long long limit, const char **names,
                      long long *spans)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GetItem(paths, k);
        char *name = NULL;
        Py_ssize_t len = 0;
        if (!PyBytes_Check(item) || PyBytes_AsStringAndSize(item, &name, &len) < 0 || (size_t)len != strlen(name))
            name = NULL;
        if (ranges != NULL && name != NULL &&
            (!PyArg_ParseTuple(PyList_GetItem(ranges, k), "LL", &spans[2 * k], &spans[2 * k + 1]) ||
             spans[2 * k] < 0 || spans[2 * k + 1] < 0 || spans[2 * k + 1] > limit))
            name = NULL;
        PyErr_Clear();
        names[k] = name;
    }
}

/* Open and check each named file (the GIL released): fds[k], or -1; sizes[k] the bytes to read
 * (with ranges, the range's, which must lie wholly in the file). */
static void open_run(const char **names, Py_ssize_t n, const char *root, size_t root_len, long long limit,
                     int ranged, const long long *spans, int *fds, off_t *sizes)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        fds[k] = names[k] != NULL ? open_inside(names[k], root, root_len, ranged ? LLONG_MAX : limit, &sizes[k]) : -1;
        if (fds[k] >= 0 && ranged) {
            if (!range_in_file(spans[2 * k], spans[2 * k + 1], sizes[k])) {
                close(fds[k]);
                fds[k] = -1;
            } else {
                sizes[k] = (off_t)spans[2 * k + 1];
            }
        }
    }
}

/* Read file k's bytes (from spans[2k] when ranged) to base + starts[k] and close it, every k (the
 * GIL released); fds[k] = -1 where the read came up short. */
static void read_run(int *fds, const off_t *sizes, const long long *starts, int ranged, const long long *spans,
                     char *base, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        off_t from = ranged ? (off_t)spans[2 * k] : 0;
        if (fds[k] >= 0 && read_fully_and_close(fds[k], base != NULL ? base + starts[k] : NULL, sizes[k], from) != sizes[k])
            fds[k] = -1;
    }
}

/* read_many_inside(paths, real_root, limit[, ranges]): read_inside of each path (with ranges, a list
 * of (offset, size), each at most limit: read_range_inside of each), in two GIL-free passes (every
 * file opened and checked; then, once one bytes object for the whole run is made, every file read
 * into it and closed): a run of files costs two hand-overs of the GIL and one allocation, not two
 * and one a file. Returns (blob, spans): spans[k] the (start, end) of file k's bytes in blob, or
 * None where a step failed or refused (the caller's Python steps then name the reason). */
static PyObject *py_read_many_inside(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *paths, *ranges = Py_None;
    const char *root;
    Py_ssize_t root_len;
    long long limit;
    if (!PyArg_ParseTuple(args, "O!y#L|O", &PyList_Type, &paths, &root, &root_len, &limit, &ranges))
        return NULL;
    Py_ssize_t n = PyList_Size(paths);
    int ranged = ranges != Py_None;
    if (n > (1 << 20) || (ranged && (!PyList_Check(ranges) || PyList_Size(ranges) != n))) {
        PyErr_SetString(PyExc_ValueError, "at most 2**20 paths at once, and ranges (if given) a list of one per path");
        return NULL;
    }
    if ((size_t)root_len != strlen(root) || root_len == 0 || root[0] != '/') /* the Python steps decide */
        return none_read(n);
    while (root_len > 1 && root[root_len - 1] == '/')
        root_len--;
    const char **names = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    int *fds = PyMem_Calloc((size_t)n + 1, sizeof(int));
    off_t *sizes = PyMem_Calloc((size_t)n + 1, sizeof(off_t));
    long long *spans = PyMem_Calloc(2 * (size_t)n + 2, sizeof(long long)); /* (offset, size) in each file */
    long long *starts = PyMem_Calloc((size_t)n + 1, sizeof(long long));  /* where each lands in the blob */
    PyObject *blob = NULL, *out = NULL;
    if (names == NULL || fds == NULL || sizes == NULL || spans == NULL || starts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    run_names(paths, ranged ? ranges : NULL, n, limit, names, spans);
    Py_BEGIN_ALLOW_THREADS
    open_run(names, n, root, (size_t)root_len, limit, ranged, spans, fds, sizes);
    Py_END_ALLOW_THREADS
    long long total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (fds[k] < 0)
            continue;
        if ((long long)sizes[k] > PY_SSIZE_T_MAX - total) {  /* more than one object holds: read alone */
            close(fds[k]);
            fds[k] = -1;
            continue;
        }
        starts[k] = total;
        total += (long long)sizes[k];
    }
    blob = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    char *base = blob != NULL ? PyBytes_AsString(blob) : NULL;
    Py_BEGIN_ALLOW_THREADS
    read_run(fds, sizes, starts, ranged, spans, base, n);  /* without a blob: each file only closed */
    Py_END_ALLOW_THREADS
    PyObject *list = blob != NULL ? PyList_New(n) : NULL;
    for (Py_ssize_t k = 0; list != NULL && k < n; k++) {
        PyObject *span = fds[k] >= 0 ? Py_BuildValue("(LL)", starts[k], starts[k] + (long long)sizes[k]) : Py_None;
        if (span == NULL) {
            Py_CLEAR(list);
            break;
        }
        if (span == Py_None)
            Py_INCREF(Py_None);
        PyList_SetItem(list, k, span);
    }
    if (list != NULL)
        out = Py_BuildValue("(ON)", blob, list);
done:
    Py_XDECREF(blob);
    PyMem_Free(names);
    PyMem_Free(fds);
    PyMem_Free(sizes);
    PyMem_Free(spans);
    PyMem_Free(starts);
    return out;
}

static PyMethodDef methods[] = {
    {"read_inside", py_read_inside, METH_VARARGS,
     "read_inside(path, real_root, limit): the bytes of the regular file `path` (bytes) if it lies "
     "under `real_root` (bytes, a real absolute path) and has at most `limit` bytes, else None."},
    {"read_range_inside", py_read_range_inside, METH_VARARGS,
     "read_range_inside(path, real_root, offset, size): `size` bytes from `offset` of the regular file "
     "`path` (bytes) if it lies under `real_root` and holds that whole range, else None."},
    {"read_many_inside", py_read_many_inside, METH_VARARGS,
     "read_many_inside(paths, real_root, limit[, ranges]): read_inside(path, real_root, limit) of each path "
     "(a list of bytes paths), or with ranges (a list of (offset, size), each size at most limit) "
     "read_range_inside(path, real_root, offset, size), the GIL released twice for the whole run; returns "
     "(blob, spans): spans[k] the (start, end) of path k's bytes in the one bytes object blob, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "iotool._readfile",
    .m_doc = "A dataset's regular file read whole in one call, with the GIL released for the system calls.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__readfile(void)
{
    return PyModule_Create(&module);
}
