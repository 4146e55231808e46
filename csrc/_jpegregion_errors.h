/*
 * _jpegregion_errors.c: the strict error manager every libjpeg call runs under.
 */
#ifndef IOTOOL_JPEGREGION_ERRORS_H
#define IOTOOL_JPEGREGION_ERRORS_H

#include "_jpegregion_common.h"

/* The strict error manager `err` set up for `lib`: what a decompress or compress struct's `err` takes. */
INTERNAL struct jpeg_error_mgr *jr_strict_errors(const struct library *lib, struct strict_error_mgr *err);

#endif
