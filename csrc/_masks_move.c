/*
 * A decoded mask moved as a run moved its image, in one pass: what
 * iotool/transforms/geometry.py's move_mask does with a run's record (crop_padded, then
 * resize_nearest, then a flip; iotool/transforms/maskpixels.py): torchvision v2's moves of a Mask.
 *
 * The nearest-neighbour source of output index i among `out` from `in` is ATen's nearest_idx
 * without a scale factor: i itself when the sizes are equal, i >> 1 when the output is twice the
 * input, else floorf(i * ((float)in / out)), at most in - 1, in single precision as torch computes
 * it. A source outside the mask (a crop box reaching past it) gives 0.
 */
#include "_masks_move.h"

#include <math.h>

/* The source index of each of `out` outputs from `in`, offset by `start`, into `index`. */
static void nearest(int64_t in, int64_t out, int64_t start, int64_t *index)
{
    float scale = (float)in / (float)out;
    for (int64_t i = 0; i < out; i++) {
        int64_t src;
        if (out == in)
            src = i;
        else if (out == 2 * in)
            src = i >> 1;
        else {
            src = (int64_t)floorf((float)i * scale);
            if (src > in - 1)
                src = in - 1;
        }
        index[i] = start + src;
    }
}

INTERNAL int mk_move(const uint8_t *src, const mk_move_t *m, uint8_t *out)
{
    int64_t *rows = malloc((size_t)m->out_h * sizeof *rows), *cols = malloc((size_t)m->out_w * sizeof *cols);
    if (rows == NULL || cols == NULL) {
        free(rows);
        free(cols);
        return MK_NOMEMORY;
    }
    nearest(m->box_h, m->out_h, m->top, rows);
    nearest(m->box_w, m->out_w, m->left, cols);
    if (m->flip)
        for (int64_t a = 0, b = m->out_w - 1; a < b; a++, b--) {
            int64_t t = cols[a];
            cols[a] = cols[b];
            cols[b] = t;
        }
    for (int64_t y = 0; y < m->out_h; y++) {
        uint8_t *dst = out + y * m->out_w;
        int64_t r = rows[y];
        if (r < 0 || r >= m->src_h) {
            memset(dst, 0, (size_t)m->out_w);
            continue;
        }
        const uint8_t *line = src + r * m->src_w;
        for (int64_t x = 0; x < m->out_w; x++) {
            int64_t c = cols[x];
            dst[x] = c >= 0 && c < m->src_w ? line[c] : 0;
        }
    }
    free(rows);
    free(cols);
    return MK_OK;
}
