/*
 * _jpegregion_run.c: a run of JPEG samples into batch rows.
 */
#ifndef IOTOOL_JPEGREGION_RUN_H
#define IOTOOL_JPEGREGION_RUN_H

#include "_jpegregion_common.h"

/* run_samples(...) (its docstring is in _jpegregion.c's method table). */
INTERNAL PyObject *jr_run_samples(PyObject *self, PyObject *args);

#endif
