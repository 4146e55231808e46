/*
 * _resize_flip.c: the transforms' horizontal flip.
 */
#ifndef IOTOOL_RESIZE_FLIP_H
#define IOTOOL_RESIZE_FLIP_H

#include "_resize_common.h"

/* _resize_flip.c: dst row r = src row r mirrored, pixel by pixel (`pixel` adjacent bytes); the
 * rows x width x pixel bytes of src and dst are contiguous and either the same buffer (in place)
 * or apart. 0, or -1 when out of memory. */
INTERNAL int rs_flip_rows(const uint8_t *src, uint8_t *dst, ptrdiff_t rows, ptrdiff_t width, ptrdiff_t pixel);

#endif
