/*
 * What every file of the resize kernel shares and no file owns: the C headers, the INTERNAL
 * visibility, the x86 test, the two structures (an axis's weights, the resize job) and the inline
 * helpers every pass uses. No function of any file is declared here: each file's own header
 * declares what it defines (_resize_weights.h, _resize_horizontal.h, ...), so a file includes the
 * headers of the files it calls and the includes form no cycle (tests/native/test_include_graph.py).
 * _resize.c says what the module does and which file holds what.
 *
 * Kernel code only: no Python here (the files with Python include _resize_runs.h first, which
 * includes Python.h first, as CPython asks).
 */
#ifndef IOTOOL_RESIZE_COMMON_H
#define IOTOOL_RESIZE_COMMON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_X86 1
#include <immintrin.h>
#else
#define HAVE_X86 0
#endif

/* Shared between the files of the extension, not exported from it. */
#define INTERNAL __attribute__((visibility("hidden")))

/* One axis: for each output index, the first input index, the tap count and the int16 weights
 * (maxk per output, zero-padded). */
typedef struct {
    int in, out, maxk, prec;
    int *start, *count;
    int16_t *w;
} axis_t;

/* One resize: src (rows row_stride bytes apart) into dst, as resize() describes. */
typedef struct {
    const uint8_t *src;
    ptrdiff_t row_stride;
    int height, width, channels;
    uint8_t *dst;
    int out_h, out_w, planar, swap;
} job_t;

static inline uint8_t clip8(int32_t v)
{
    return v < 0 ? 0 : (v > 255 ? 255 : (uint8_t)v);
}

/* The plane of dst that channel c of src goes to. */
static inline int plane_of(const job_t *j, int c)
{
    return j->swap ? j->channels - 1 - c : c;
}

#endif
