/*
 * _jpegregion_decode.c: the region decode.
 */
#ifndef IOTOOL_JPEGREGION_DECODE_H
#define IOTOOL_JPEGREGION_DECODE_H

#include "_jpegregion_common.h"

/* Decode region `r` of `data` at scale_num/8 into job->out; no Python. */
INTERNAL const char *jr_decode_into(struct job *job, const unsigned char *data, size_t size, int scale_num,
                                    const struct region *r);

/* decode_region(...) (its docstring is in _jpegregion.c's method table). */
INTERNAL PyObject *jr_decode_region(PyObject *self, PyObject *args);

#endif
