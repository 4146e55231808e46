/*
 * _resize_weights.c: an axis's weights, torch's kernel's.
 */
#ifndef IOTOOL_RESIZE_WEIGHTS_H
#define IOTOOL_RESIZE_WEIGHTS_H

#include "_resize_common.h"

/* The bytes rs_axis_init carves for an axis of `in` to `out` samples, and the init itself: the
 * weights of torch's kernel on memory from `mem`; returns the memory after them. */
INTERNAL size_t rs_axis_bytes(int in, int out);
INTERNAL char *rs_axis_init(axis_t *a, int in, int out, char *mem);

#endif
