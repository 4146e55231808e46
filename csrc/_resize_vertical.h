/*
 * _resize_vertical.c: the vertical pass.
 */
#ifndef IOTOOL_RESIZE_VERTICAL_H
#define IOTOOL_RESIZE_VERTICAL_H

#include "_resize_common.h"

/* The vertical pass over rows of `len` bytes. */
INTERNAL void rs_vpass(const uint8_t *src, ptrdiff_t src_stride, int first, int len, const axis_t *ay,
                       uint8_t *dst, ptrdiff_t dst_stride);

#endif
