/*
 * What the two files of iotool._resize that hold Python functions share: _resize.c (the module, its
 * table and the single-image functions) and _resize_runs.c (the runs of samples).
 */
#ifndef IOTOOL_RESIZE_PY_H
#define IOTOOL_RESIZE_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_resize.h"

/* Python ints as the generator's key words (seed, epoch, rank, record), each taken mod 2**64; -1
 * with an error set. */
INTERNAL int rs_key_words(PyObject *const *objs, int n, uint64_t *words);

INTERNAL PyObject *rs_py_run_samples(PyObject *self, PyObject *args);
INTERNAL PyObject *rs_py_run_cached(PyObject *self, PyObject *args);
INTERNAL PyObject *rs_py_run_packed(PyObject *self, PyObject *args);

#endif
