/*
 * What the files of iotool._masks share and no file owns: the C headers, the INTERNAL visibility
 * and the answers a mask gets. No function is declared here: _masks_png.h and _masks_move.h
 * declare what their files define (tests/native/test_include_graph.py). _masks.c says what the
 * module does. Kernel code only: no Python here.
 */
#ifndef IOTOOL_MASKS_COMMON_H
#define IOTOOL_MASKS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Shared between the files of the extension, not exported from it. */
#define INTERNAL __attribute__((visibility("hidden")))

/* What became of one mask. Anything but MK_OK leaves it to the Python steps (Pillow's decoder and
 * iotool/transforms/maskpixels.py), which give it or raise the error that names it. */
enum {
    MK_OK = 0,
    MK_BROKEN = 1,      /* not a PNG, or a chunk, CRC or zlib stream that is not whole and right */
    MK_UNSUPPORTED = 2, /* a PNG this decoder leaves to Pillow (colour, 16 bits, interlaced, tRNS, text...) */
    MK_SIZE = 3,        /* not the size of its image */
    MK_NOMEMORY = 4,
    MK_NOT_GIVEN = 5    /* no bytes to decode, or an output of the wrong size */
};

#endif
