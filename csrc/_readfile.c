/*
 * read_inside(path, real_root, limit): the whole of a regular file that lies inside a dataset, in
 * one call that releases the GIL twice (the open and checks, then the read), where the same
 * steps from Python release and retake it at every system call. read_range_inside(path,
 * real_root, offset, size): the same steps for one range of the file (a record of a shard),
 * which must lie wholly inside it. read_many_inside(paths, real_root, limit[, ranges]): read_inside
 * (or read_range_inside) of a run of files, the GIL handed over twice for the whole run, into one
 * bytes object with the spans of each file's bytes; read_named_inside(prefix, offsets, blob, indices,
 * real_root, limit): the same, each path prefix + a string column's item, joined here (the bmp
 * cache's runs: no Python object a file).
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
 * Built against CPython's limited API, as csrc/_resize.c.
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

/* The length of `root` (root_len bytes) without its trailing slashes ("/" stays), or -1 where the
 * Python steps must decide: an embedded NUL, or not an absolute path. */
static Py_ssize_t root_length(const char *root, Py_ssize_t root_len)
{
    if ((size_t)root_len != strlen(root) || root_len == 0 || root[0] != '/')
        return -1;
    while (root_len > 1 && root[root_len - 1] == '/')
        root_len--;
    return root_len;
}

/* The descriptor of `path` opened and checked by open_inside with the GIL released, or -1 (the
 * Python steps must decide: an embedded NUL, a relative root, or a step failed or refused). */
static int open_args(const char *path, Py_ssize_t path_len, const char *root, Py_ssize_t root_len,
                     long long limit, off_t *size)
{
    root_len = root_length(root, root_len);
    if ((size_t)path_len != strlen(path) || root_len < 0)
        return -1;
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

/* What a run of files returns when none of them is read: (b"", spans of (-1, -1)). */
static PyObject *none_read(Py_ssize_t n)
{
    PyObject *spans = PyBytes_FromStringAndSize(NULL, 2 * n * (Py_ssize_t)sizeof(long long));
    if (spans != NULL)
        memset(PyBytes_AsString(spans), 0xff, 2 * (size_t)n * sizeof(long long));
    return spans == NULL ? NULL : Py_BuildValue("(yN)", "", spans);
}

/* A run's paths: path k is prefix + tails[k] (tail_lens[k] bytes; tails[k] NULL: not read). With
 * ranged, file k's (offset, size) are ranges[2k], ranges[2k + 1]. */
typedef struct {
    const char *prefix;
    size_t prefix_len;
    const char **tails;
    size_t *tail_lens;
    int ranged;
    long long *ranges;
} run_paths_t;

/* Path k of `p` as a C string in buf (PATH_MAX + 1 bytes): 0, or -1 when it is not read (none, too
 * long, or with a NUL inside: the caller's Python steps name it). Runs without the GIL. */
static int path_of(const run_paths_t *p, Py_ssize_t k, char *buf)
{
    size_t len = p->tail_lens[k];
    if (p->tails[k] == NULL || p->prefix_len + len > PATH_MAX || memchr(p->tails[k], '\0', len) != NULL)
        return -1;
    memcpy(buf, p->prefix, p->prefix_len);
    memcpy(buf + p->prefix_len, p->tails[k], len);
    buf[p->prefix_len + len] = '\0';
    return 0;
}

/* Open and check each file of the run (the GIL released): fds[k], or -1; sizes[k] the bytes to read
 * (with ranges, the range's, which must lie wholly in the file). */
static void open_run(const run_paths_t *p, Py_ssize_t n, const char *root, size_t root_len, long long limit,
                     int *fds, off_t *sizes)
{
    char path[PATH_MAX + 1];
    for (Py_ssize_t k = 0; k < n; k++) {
        fds[k] = path_of(p, k, path) == 0 ? open_inside(path, root, root_len, p->ranged ? LLONG_MAX : limit, &sizes[k]) : -1;
        if (fds[k] >= 0 && p->ranged) {
            if (!range_in_file(p->ranges[2 * k], p->ranges[2 * k + 1], sizes[k])) {
                close(fds[k]);
                fds[k] = -1;
            } else {
                sizes[k] = (off_t)p->ranges[2 * k + 1];
            }
        }
    }
}

/* Read file k's bytes (from its range's offset when ranged) to base + starts[k] and close it, every
 * k (the GIL released); fds[k] = -1 where the read came up short. */
static void read_run(const run_paths_t *p, int *fds, const off_t *sizes, const long long *starts, char *base,
                     Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        off_t from = p->ranged ? (off_t)p->ranges[2 * k] : 0;
        if (fds[k] >= 0 && read_fully_and_close(fds[k], base != NULL ? base + starts[k] : NULL, sizes[k], from) != sizes[k])
            fds[k] = -1;
    }
}

/* Where each opened file lands in the run's blob (starts[k]); the blob's size. A file that would
 * take it past what one object holds is closed and left out (fds[k] = -1). */
static long long place_run(int *fds, const off_t *sizes, long long *starts, Py_ssize_t n)
{
    long long total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (fds[k] < 0)
            continue;
        if ((long long)sizes[k] > PY_SSIZE_T_MAX - total) {
            close(fds[k]);
            fds[k] = -1;
            continue;
        }
        starts[k] = total;
        total += (long long)sizes[k];
    }
    return total;
}

/* The files of `p` read in two GIL-free passes (every file opened and checked; then, once one bytes
 * object for the whole run is made, every file read into it and closed): (blob, spans), spans the
 * bytes of n (start, end) int64 pairs, file k's bytes being blob[start:end], or (-1, -1) where a
 * step failed or refused. */
static PyObject *read_files(const run_paths_t *p, Py_ssize_t n, const char *root, Py_ssize_t root_len, long long limit)
{
    root_len = root_length(root, root_len);
    if (root_len < 0) /* the Python steps decide */
        return none_read(n);
    int *fds = PyMem_Calloc((size_t)n + 1, sizeof(int));
    off_t *sizes = PyMem_Calloc((size_t)n + 1, sizeof(off_t));
    long long *starts = PyMem_Calloc((size_t)n + 1, sizeof(long long));
    PyObject *blob = NULL, *spans = NULL, *out = NULL;
    if (fds == NULL || sizes == NULL || starts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    open_run(p, n, root, (size_t)root_len, limit, fds, sizes);
    Py_END_ALLOW_THREADS
    blob = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)place_run(fds, sizes, starts, n));
    char *base = blob != NULL ? PyBytes_AsString(blob) : NULL;
    Py_BEGIN_ALLOW_THREADS
    read_run(p, fds, sizes, starts, base, n);  /* without a blob: each file only closed */
    Py_END_ALLOW_THREADS
    spans = blob != NULL ? PyBytes_FromStringAndSize(NULL, 2 * n * (Py_ssize_t)sizeof(long long)) : NULL;
    if (spans == NULL)
        goto done;
    long long *at = (long long *)PyBytes_AsString(spans);
    for (Py_ssize_t k = 0; k < n; k++) {
        at[2 * k] = fds[k] >= 0 ? starts[k] : -1;
        at[2 * k + 1] = fds[k] >= 0 ? starts[k] + (long long)sizes[k] : -1;
    }
    out = Py_BuildValue("(OO)", blob, spans);
done:
    Py_XDECREF(blob);
    Py_XDECREF(spans);
    PyMem_Free(fds);
    PyMem_Free(sizes);
    PyMem_Free(starts);
    return out;
}

/* Each item of `paths` (a list of bytes) as tails[k] (NULL: not bytes, or with `ranges` its
 * (offset, size) not one this call reads). */
static void list_tails(PyObject *paths, PyObject *ranges, Py_ssize_t n, long long limit, run_paths_t *p)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GetItem(paths, k);
        char *name = NULL;
        Py_ssize_t len = 0;
        if (!PyBytes_Check(item) || PyBytes_AsStringAndSize(item, &name, &len) < 0)
            name = NULL;
        if (ranges != NULL && name != NULL &&
            (!PyArg_ParseTuple(PyList_GetItem(ranges, k), "LL", &p->ranges[2 * k], &p->ranges[2 * k + 1]) ||
             p->ranges[2 * k] < 0 || p->ranges[2 * k + 1] < 0 || p->ranges[2 * k + 1] > limit))
            name = NULL;
        PyErr_Clear();
        p->tails[k] = name;
        p->tail_lens[k] = (size_t)len;
    }
}

/* read_many_inside(paths, real_root, limit[, ranges]): read_inside of each path (with ranges, a list
 * of (offset, size), each at most limit: read_range_inside of each), as read_files: a run of files
 * costs two hand-overs of the GIL and one allocation, not two and one a file. */
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
    run_paths_t p = {"", 0, NULL, NULL, ranges != Py_None, NULL};
    if (n > (1 << 20) || (p.ranged && (!PyList_Check(ranges) || PyList_Size(ranges) != n))) {
        PyErr_SetString(PyExc_ValueError, "at most 2**20 paths at once, and ranges (if given) a list of one per path");
        return NULL;
    }
    p.tails = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    p.tail_lens = PyMem_Calloc((size_t)n + 1, sizeof(size_t));
    p.ranges = PyMem_Calloc(2 * (size_t)n + 2, sizeof(long long));
    PyObject *out = NULL;
    if (p.tails == NULL || p.tail_lens == NULL || p.ranges == NULL) {
        PyErr_NoMemory();
    } else {
        list_tails(paths, p.ranged ? ranges : NULL, n, limit, &p);
        out = read_files(&p, n, root, root_len, limit);
    }
    PyMem_Free(p.tails);
    PyMem_Free(p.tail_lens);
    PyMem_Free(p.ranges);
    return out;
}

/* Names column entry `i` (offsets: count + 1 int64, blob: its bytes) as tails[k], or NULL where `i`
 * or its offsets are out of range. */
static void column_tails(const long long *offsets, Py_ssize_t count, const char *blob, Py_ssize_t blob_len,
                         const long long *indices, Py_ssize_t n, run_paths_t *p)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        long long i = indices[k], start = i >= 0 && i < count ? offsets[i] : -1, stop = start >= 0 ? offsets[i + 1] : -1;
        int valid = start >= 0 && start <= stop && stop <= (long long)blob_len;
        p->tails[k] = valid ? blob + start : NULL;
        p->tail_lens[k] = valid ? (size_t)(stop - start) : 0;
    }
}

/* read_named_inside(prefix, offsets, blob, indices, real_root, limit): read_many_inside of the files
 * prefix + name, each name a string column's item (offsets: int64, its count + 1; blob: the UTF-8
 * bytes) for each of `indices` (int64): no Python object a file. */
static PyObject *py_read_named_inside(PyObject *self, PyObject *args)
{
    (void)self;
    const char *root;
    Py_ssize_t root_len;
    long long limit;
    Py_buffer prefix, offsets, blob, indices;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y#L", &prefix, &offsets, &blob, &indices, &root, &root_len, &limit))
        return NULL;
    Py_ssize_t n = indices.len / 8, count = offsets.len / 8 - 1;
    run_paths_t p = {prefix.buf, (size_t)prefix.len, NULL, NULL, 0, NULL};
    PyObject *out = NULL;
    if (n > (1 << 20) || indices.len % 8 || offsets.len % 8 || count < 0) {
        PyErr_SetString(PyExc_ValueError, "offsets and indices must be int64 (at most 2**20 indices)");
        goto done;
    }
    p.tails = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    p.tail_lens = PyMem_Calloc((size_t)n + 1, sizeof(size_t));
    if (p.tails == NULL || p.tail_lens == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    column_tails(offsets.buf, count, blob.buf, blob.len, indices.buf, n, &p);
    out = read_files(&p, n, root, root_len, limit);
done:
    PyMem_Free(p.tails);
    PyMem_Free(p.tail_lens);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&blob);
    PyBuffer_Release(&indices);
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
     "(blob, spans): spans the bytes of one (start, end) int64 pair a path, its bytes in the one bytes "
     "object blob, or (-1, -1)."},
    {"read_named_inside", py_read_named_inside, METH_VARARGS,
     "read_named_inside(prefix, offsets, blob, indices, real_root, limit): read_many_inside of prefix + "
     "name for each of indices (int64), each name a string column's item (int64 offsets, UTF-8 blob)."},
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
