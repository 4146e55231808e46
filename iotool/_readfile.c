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
    off_t done = 0;
    Py_BEGIN_ALLOW_THREADS
    while (done < size) {
        ssize_t got = pread(fd, buf + done, (size_t)(size - done), offset + done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        done += got;
    }
    close(fd);
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
    if (offset > (long long)size || length > (long long)size - offset) {  /* the range is not all in the file */
        close(fd);
        Py_RETURN_NONE;
    }
    return read_and_close(fd, (off_t)offset, (off_t)length);
}

/* A list of n Nones. */
static PyObject *nones(Py_ssize_t n)
{
    PyObject *out = PyList_New(n);
    for (Py_ssize_t k = 0; out != NULL && k < n; k++) {
        Py_INCREF(Py_None);
        PyList_SetItem(out, k, Py_None);
    }
    return out;
}

/* read_many_inside(paths, real_root, limit[, ranges]): read_inside of each path (with ranges, a list
 * of (offset, size), each at most limit: read_range_inside of each), in two GIL-free passes (every
 * file opened and checked, then, once each bytes object is made, every file read and closed), so a
 * run of files costs two hand-overs of the GIL, not two a file. A list: bytes, or None where a
 * step failed or refused (the caller's Python steps then name the reason). */
static PyObject *py_read_many_inside(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *paths, *ranges_obj = Py_None;
    const char *root;
    Py_ssize_t root_len;
    long long limit;
    if (!PyArg_ParseTuple(args, "O!y#L|O", &PyList_Type, &paths, &root, &root_len, &limit, &ranges_obj))
        return NULL;
    Py_ssize_t n = PyList_Size(paths);
    int ranged = ranges_obj != Py_None;
    if (n > (1 << 20) || (ranged && (!PyList_Check(ranges_obj) || PyList_Size(ranges_obj) != n))) {
        PyErr_SetString(PyExc_ValueError, "at most 2**20 paths at once, and ranges (if given) a list of one per path");
        return NULL;
    }
    if ((size_t)root_len != strlen(root) || root_len == 0 || root[0] != '/') /* the Python steps decide */
        return nones(n);
    while (root_len > 1 && root[root_len - 1] == '/')
        root_len--;
    const char **names = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    int *fds = PyMem_Calloc((size_t)n + 1, sizeof(int));
    off_t *sizes = PyMem_Calloc((size_t)n + 1, sizeof(off_t));
    long long *spans = PyMem_Calloc(2 * (size_t)n + 2, sizeof(long long));  /* (offset, size) each */
    char **bufs = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    PyObject *out = PyList_New(n);
    if (names == NULL || fds == NULL || sizes == NULL || spans == NULL || bufs == NULL || out == NULL) {
        Py_XDECREF(out);
        out = NULL;
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {  /* the paths, held by the list for the whole call */
        PyObject *item = PyList_GetItem(paths, k);
        char *name = NULL;
        Py_ssize_t len = 0;
        if (!PyBytes_Check(item) || PyBytes_AsStringAndSize(item, &name, &len) < 0 || (size_t)len != strlen(name)) {
            PyErr_Clear();
            name = NULL;  /* not a plain path: left to the Python steps */
        }
        if (ranged && name != NULL &&
            (!PyArg_ParseTuple(PyList_GetItem(ranges_obj, k), "LL", &spans[2 * k], &spans[2 * k + 1]) ||
             spans[2 * k] < 0 || spans[2 * k + 1] < 0 || spans[2 * k + 1] > limit)) {
            PyErr_Clear();
            name = NULL;  /* not a range this call reads: left to the Python steps */
        }
        names[k] = name;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        fds[k] = names[k] != NULL ? open_inside(names[k], root, (size_t)root_len, ranged ? LLONG_MAX : limit, &sizes[k])
                                  : -1;
        if (fds[k] >= 0 && ranged) {  /* the range must lie wholly in the file */
            if (spans[2 * k] > (long long)sizes[k] || spans[2 * k + 1] > (long long)sizes[k] - spans[2 * k]) {
                close(fds[k]);
                fds[k] = -1;
            } else {
                sizes[k] = (off_t)spans[2 * k + 1];
            }
        }
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *data = fds[k] >= 0 ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizes[k]) : Py_None;
        if (data == NULL) {  /* out of memory: nothing is read, what was opened is closed below */
            Py_CLEAR(out);
            memset(bufs, 0, (size_t)n * sizeof(char *));
            break;
        }
        if (data == Py_None)
            Py_INCREF(Py_None);
        else
            bufs[k] = PyBytes_AsString(data);
        PyList_SetItem(out, k, data);
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        if (fds[k] < 0)
            continue;
        off_t done = 0;
        while (bufs[k] != NULL && done < sizes[k]) {
            ssize_t got = pread(fds[k], bufs[k] + done, (size_t)(sizes[k] - done), (off_t)spans[2 * k] + done);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                break;
            done += got;
        }
        close(fds[k]);
        if (done != sizes[k])
            bufs[k] = NULL;  /* short: None below */
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t k = 0; out != NULL && k < n; k++)
        if (fds[k] >= 0 && bufs[k] == NULL) {
            Py_INCREF(Py_None);
            PyList_SetItem(out, k, Py_None);
        }
done:
    PyMem_Free(names);
    PyMem_Free(fds);
    PyMem_Free(sizes);
    PyMem_Free(spans);
    PyMem_Free(bufs);
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
     "read_many_inside(paths, real_root, limit[, ranges]): [read_inside(path, real_root, limit) for path in "
     "paths] (a list of bytes paths), or with ranges (a list of (offset, size), each size at most limit) "
     "[read_range_inside(path, real_root, offset, size) ...], with the GIL released twice for the whole run."},
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
