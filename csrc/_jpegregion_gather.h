/*
 * _jpegregion_gather.c: the segment gather and the seekable decode.
 */
#ifndef IOTOOL_JPEGREGION_GATHER_H
#define IOTOOL_JPEGREGION_GATHER_H

#include "_jpegregion_common.h"

/* The seekable decode of `box` (at 1/scale) from the restart segments of `d` that cover it; no
 * Python. 1 pixels written into job->out, 0 no table or every segment needed (decode by region),
 * -1 `problem` says why. */
INTERNAL int jr_seek_and_decode(struct job *job, const unsigned char *d, size_t n, const unsigned char *tag,
                                size_t tag_length, unsigned int version, unsigned int scale, unsigned int full_h,
                                unsigned int full_w, const struct region *box, char *problem, size_t size);

/* gather(...) and decode_seekable(...) (their docstrings are in _jpegregion.c's method table). */
INTERNAL PyObject *jr_gather(PyObject *self, PyObject *args);
INTERNAL PyObject *jr_decode_seekable(PyObject *self, PyObject *args);

#endif
