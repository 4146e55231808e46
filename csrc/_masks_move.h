/*
 * _masks_move.c: a decoded mask moved as a run moved its image: the crop box (zeros outside the
 * mask), the nearest-neighbour resize of torch's interpolate(mode="nearest"), the flip.
 */
#ifndef IOTOOL_MASKS_MOVE_H
#define IOTOOL_MASKS_MOVE_H

#include "_masks_common.h"

/* One mask's move: the box (top, left, box_h, box_w) of the src_h x src_w mask `src`, resized to
 * out_h x out_w, flipped left to right where `flip`, into `out` (out_h * out_w bytes). The
 * sizes are at least 1 (the caller checks). */
typedef struct {
    int64_t src_h, src_w, top, left, box_h, box_w, out_h, out_w, flip;
} mk_move_t;

/* Move `src` into `out` as `move` says; MK_OK or MK_NOMEMORY. */
INTERNAL int mk_move(const uint8_t *src, const mk_move_t *move, uint8_t *out);

#endif
