/*
 * _resize_draw.c: the augmentations' counter-based generator.
 */
#ifndef IOTOOL_RESIZE_DRAW_H
#define IOTOOL_RESIZE_DRAW_H

#include "_resize_common.h"

/* _resize_draw.c: the augmentations' counter-based generator. A sample's stream is the key of its
 * words (seed, epoch, rank, record); rs_uniform01 gives its next number in [0, 1), counting draws
 * in *counter; rs_crop_box draws torchvision's RandomResizedCrop box (top, left, height, width)
 * from it, RS_ATTEMPTS tries then the central fallback. */
#define RS_ATTEMPTS 10
INTERNAL uint64_t rs_sample_key(const uint64_t *words, int n);
INTERNAL double rs_uniform01(uint64_t key, uint64_t *counter);
INTERNAL void rs_crop_box(uint64_t key, uint64_t *counter, long height, long width, const double scale[2],
                          const double ratio[2], long box[4]);

#endif
