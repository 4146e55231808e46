/*
 * _jpegregion_transcode.c: the transcode to a seekable JPEG.
 */
#ifndef IOTOOL_JPEGREGION_TRANSCODE_H
#define IOTOOL_JPEGREGION_TRANSCODE_H

#include "_jpegregion_common.h"

/* transcode(...) (its docstring is in _jpegregion.c's method table). */
INTERNAL PyObject *jr_transcode(PyObject *self, PyObject *args);

#endif
