/*
 * The resize kernel as a whole: rs_run, one resize (one block of memory, then the horizontal and
 * vertical passes). No Python: _resize.c holds the Python functions, and iotool._jpegregion
 * compiles this file too.
 */
#include "_resize_kernel.h"

#include "_resize_horizontal.h"
#include "_resize_vertical.h"
#include "_resize_weights.h"

/* --- the whole resize ---------------------------------------------------------------------- */

/* Runs without the GIL. Returns NULL or an error message. */
INTERNAL const char *rs_run(const job_t *j)
{
    int ch = j->channels;
    int need_h = j->width != j->out_w, need_v = j->height != j->out_h;
    size_t plane = (size_t)j->out_h * j->out_w;
    axis_t ax, ay;
    /* the rows the vertical pass reads, [y0, y1), go through the horizontal pass */
    int y0 = 0, y1 = j->height, rows;
    size_t head = rs_axis_bytes(j->width, j->out_w) + rs_axis_bytes(j->height, j->out_h) +
                  rs_hpass_scratch(j, j->out_w);
    size_t tail = (size_t)j->height * j->out_w * ch + 16;  /* the intermediate, at most */
    char *mem = malloc(head + tail);
    if (mem == NULL)
        return "out of memory";
    char *scratch = rs_axis_init(&ay, j->height, j->out_h, rs_axis_init(&ax, j->width, j->out_w, mem));
    uint8_t *tmp = (uint8_t *)mem + head;
    if (need_v) {
        y0 = ay.start[0];
        y1 = ay.start[j->out_h - 1] + ay.count[j->out_h - 1];
    }
    rows = y1 - y0;
    if (need_h || !need_v) {
        /* horizontal pass (an identity one when no axis changes: its weights are exact) */
        rs_hpass(j, &ax, y0, y1, need_v ? tmp : j->dst, need_v ? rows : j->out_h, scratch);
    } else if (j->planar) {
        /* only the height changes: de-interleave the rows the vertical pass reads */
        for (int y = y0; y < y1; y++) {
            const uint8_t *row = j->src + (ptrdiff_t)y * j->row_stride;
            for (int c = 0; c < ch; c++) {
                uint8_t *o = tmp + ((size_t)plane_of(j, c) * rows + (y - y0)) * j->out_w;
                for (int x = 0; x < j->width; x++)
                    o[x] = row[(size_t)x * ch + c];
            }
        }
    }
    if (need_v) {
        if (j->planar) {
            for (int c = 0; c < ch; c++)
                rs_vpass(tmp + (size_t)c * rows * j->out_w, j->out_w, y0, j->out_w, &ay,
                         j->dst + (size_t)c * plane, j->out_w);
        } else if (need_h) {
            rs_vpass(tmp, (ptrdiff_t)j->out_w * ch, y0, j->out_w * ch, &ay, j->dst,
                     (ptrdiff_t)j->out_w * ch);
        } else {
            rs_vpass(j->src, j->row_stride, 0, j->width * ch, &ay, j->dst, (ptrdiff_t)j->out_w * ch);
        }
    }
    free(mem);
    return NULL;
}
