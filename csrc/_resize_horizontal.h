/*
 * _resize_horizontal.c: the horizontal pass.
 */
#ifndef IOTOOL_RESIZE_HORIZONTAL_H
#define IOTOOL_RESIZE_HORIZONTAL_H

#include "_resize_common.h"

/* The horizontal pass of source rows [y0, y1) into `out`, and the scratch bytes it needs. */
INTERNAL void rs_hpass(const job_t *j, const axis_t *ax, int y0, int y1, uint8_t *out, int plane_rows,
                       char *scratch);
INTERNAL size_t rs_hpass_scratch(const job_t *j, int out_w);

#endif
