/*
 * The horizontal flip of the transforms: rows mirrored pixel by pixel into a new buffer, or in
 * place (src == dst: each row is first copied aside). The Python function, hflip, is in
 * _resize.c: it releases the GIL around this. It runs on the caller's thread, with no thread
 * pool: torch's flip runs on its intra-op pool, whose threads a loader's threads keep waiting
 * for on a busy machine (milliseconds for a 224x224 image).
 */
#include "_resize_flip.h"

static void flip_row(const uint8_t *s, uint8_t *d, ptrdiff_t width, ptrdiff_t pixel)
{
    if (pixel == 1) {
        ptrdiff_t x = 0;
        for (; x + 8 <= width; x += 8) { /* 8 bytes at a time: load, reverse, store */
            uint64_t v;
            memcpy(&v, s + width - 8 - x, 8);
            v = __builtin_bswap64(v);
            memcpy(d + x, &v, 8);
        }
        for (; x < width; x++)
            d[x] = s[width - 1 - x];
    } else if (pixel == 3) {
        for (ptrdiff_t x = 0; x < width; x++) {
            const uint8_t *p = s + (width - 1 - x) * 3;
            d[3 * x] = p[0];
            d[3 * x + 1] = p[1];
            d[3 * x + 2] = p[2];
        }
    } else {
        for (ptrdiff_t x = 0; x < width; x++)
            memcpy(d + x * pixel, s + (width - 1 - x) * pixel, (size_t)pixel);
    }
}

INTERNAL int rs_flip_rows(const uint8_t *src, uint8_t *dst, ptrdiff_t rows, ptrdiff_t width, ptrdiff_t pixel)
{
    ptrdiff_t row_bytes = width * pixel;
    uint8_t *aside = NULL;
    if (src == dst && rows > 0 && row_bytes > 0) {
        aside = malloc((size_t)row_bytes);
        if (aside == NULL)
            return -1;
    }
    for (ptrdiff_t r = 0; r < rows; r++) {
        const uint8_t *s = src + r * row_bytes;
        uint8_t *d = dst + r * row_bytes;
        if (aside != NULL) {
            memcpy(aside, s, (size_t)row_bytes);
            s = aside;
        }
        flip_row(s, d, width, pixel);
    }
    free(aside);
    return 0;
}
