/*
 * _resize_kernel.c: one resize as a whole (one block of memory, then the passes).
 */
#ifndef IOTOOL_RESIZE_KERNEL_H
#define IOTOOL_RESIZE_KERNEL_H

#include "_resize_common.h"

/* The whole resize of `j`, without the GIL: NULL, or what went wrong. */
INTERNAL const char *rs_run(const job_t *j);

#endif
