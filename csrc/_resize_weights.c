/*
 * The weights of iotool._resize: per axis, torch's triangle filter widened by the downscale
 * factor, normalised in double precision and rounded to int16 at a per-axis precision. See
 * _resize.c for what the module does.
 */
#include "_resize_weights.h"

static double triangle(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

INTERNAL size_t rs_axis_bytes(int in, int out)
{
    double scale = (double)in / out, support = scale >= 1.0 ? scale : 1.0;
    int maxk = (int)ceil(support) * 2 + 1;
    return (size_t)out * (2 * sizeof(int) + (size_t)maxk * (sizeof(int16_t) + sizeof(double))) + 64;
}

/* torch's _compute_indices_min_size_weights_aa and _compute_index_ranges_int16_weights
 * (bilinear, align_corners=False, no scale factor), on memory carved from `mem`. */
INTERNAL char *rs_axis_init(axis_t *a, int in, int out, char *mem)
{
    double scale = (double)in / out;
    double support = scale >= 1.0 ? scale : 1.0;
    double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    int maxk = (int)ceil(support) * 2 + 1;
    double *wf = (double *)mem, wt_max = 0.0;
    mem += (size_t)out * maxk * sizeof(double);
    a->start = (int *)mem;
    mem += (size_t)out * sizeof(int);
    a->count = (int *)mem;
    mem += (size_t)out * sizeof(int);
    a->w = (int16_t *)mem;
    mem += (size_t)out * maxk * sizeof(int16_t);
    a->in = in;
    a->out = out;
    a->maxk = maxk;
    for (int i = 0; i < out; i++) {
        double center = scale * (i + 0.5), total = 0.0, *ws = wf + (size_t)i * maxk;
        int64_t lo = (int64_t)(center - support + 0.5), hi = (int64_t)(center + support + 0.5);
        if (lo < 0)
            lo = 0;
        if (hi > in)
            hi = in;
        int64_t n = hi - lo;
        n = n < 0 ? 0 : (n > maxk ? maxk : n);
        for (int j = 0; j < n; j++) {
            ws[j] = triangle(((double)(j + lo) - center + 0.5) * invscale);
            total += ws[j];
        }
        if (total != 0.0)
            for (int j = 0; j < n; j++) {
                ws[j] /= total;
                if (ws[j] > wt_max)
                    wt_max = ws[j];
            }
        for (int j = (int)n; j < maxk; j++)
            ws[j] = 0.0;
        a->start[i] = (int)lo;
        a->count[i] = (int)n;
    }
    int prec;
    for (prec = 0; prec < 22; prec++)
        if ((int)(0.5 + wt_max * (1 << (prec + 1))) >= (1 << 15))
            break;
    a->prec = prec;
    for (size_t j = 0; j < (size_t)out * maxk; j++) {
        double v = wf[j] * (1 << prec);
        a->w[j] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    return mem;
}
