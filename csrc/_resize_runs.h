/*
 * _resize_runs.c: the runs' Python functions (their table entries are in _resize.c, the module)
 * and the Python ints read as a stream's key words, which the module's single-sample functions
 * use too. Includes Python.h first, as CPython asks, so a file with Python includes this first.
 */
#ifndef IOTOOL_RESIZE_RUNS_H
#define IOTOOL_RESIZE_RUNS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_resize_common.h"

/* Python ints as the generator's key words (seed, epoch, rank, record), each taken mod 2**64; -1
 * with an error set. */
INTERNAL int rs_key_words(PyObject *const *objs, int n, uint64_t *words);

INTERNAL PyObject *rs_py_run_samples(PyObject *self, PyObject *args);
INTERNAL PyObject *rs_py_run_cached(PyObject *self, PyObject *args);
INTERNAL PyObject *rs_py_run_packed(PyObject *self, PyObject *args);

#endif
