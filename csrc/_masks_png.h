/*
 * _masks_png.c: a one-channel PNG (greyscale or palette, 1 to 8 bits, not interlaced) decoded
 * into its values, as Pillow's PNG plugin gives them to numpy.
 */
#ifndef IOTOOL_MASKS_PNG_H
#define IOTOOL_MASKS_PNG_H

#include "_masks_common.h"

/* Decode the PNG of `len` bytes at `data`, which must be `height` x `width`, into `out`
 * (height * width bytes, rows one after the other): MK_OK, or why not (the _masks_common.h
 * answers; `out` is then undefined). */
INTERNAL int mk_png_decode(const uint8_t *data, size_t len, uint32_t height, uint32_t width, uint8_t *out);

#endif
