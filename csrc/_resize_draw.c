/*
 * The augmentations' random numbers: a counter-based generator, and the crop box and flip drawn
 * from it (what iotool.transforms.draws computes in Python when the extension is not built; both
 * give the same numbers, and the tests compare them).
 *
 * A sample's stream is a 64-bit key made from (seed, epoch, rank, record); its n-th number is
 * SplitMix64's output at step n from that key: mix(key + (n + 1) * GAMMA). Nothing is carried
 * between samples or threads, so a sample's draws depend on those four values alone: the same for
 * any thread count, process or order of work, and computed without the GIL.
 *
 * Kernel code only: no Python here (the Python functions are in _resize.c).
 */
#include "_resize_draw.h"

#define GAMMA 0x9e3779b97f4a7c15ULL

static inline uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

INTERNAL uint64_t rs_sample_key(const uint64_t *words, int n)
{
    uint64_t h = GAMMA;
    for (int k = 0; k < n; k++)
        h = mix(h ^ words[k]) + GAMMA;
    return h;
}

INTERNAL double rs_uniform01(uint64_t key, uint64_t *counter)
{
    uint64_t z = mix(key + (++*counter) * GAMMA);
    return (double)(z >> 11) * 0x1.0p-53;  /* 53 random bits: [0, 1) */
}

/* randint(a, b), both included, as iotool.transforms.draws.SampleStream.randint. */
static long randint(uint64_t key, uint64_t *counter, long a, long b)
{
    double span = (double)(b - a + 1);
    long k = (long)floor(rs_uniform01(key, counter) * span);
    return a + (k > b - a ? b - a : k);
}

/* torchvision's fallback: the whole image, its aspect ratio clamped to [r0, r1], centred. */
static void central(long height, long width, double r0, double r1, long box[4])
{
    double in_ratio = (double)width / (double)height;
    long h = height, w = width;
    if (in_ratio < r0) {
        h = (long)rint((double)w / r0);
    } else if (in_ratio > r1) {
        w = (long)rint((double)h * r1);
    }
    box[0] = (height - h) / 2;
    box[1] = (width - w) / 2;
    box[2] = h;
    box[3] = w;
}

INTERNAL void rs_crop_box(uint64_t key, uint64_t *counter, long height, long width, const double scale[2],
                          const double ratio[2], long box[4])
{
    double area = (double)height * (double)width;
    double log_low = log(ratio[0]), log_high = log(ratio[1]);
    for (int attempt = 0; attempt < RS_ATTEMPTS; attempt++) {
        double target = area * (scale[0] + (scale[1] - scale[0]) * rs_uniform01(key, counter));
        double aspect = exp(log_low + (log_high - log_low) * rs_uniform01(key, counter));
        long w = (long)rint(sqrt(target * aspect));
        long h = (long)rint(sqrt(target / aspect));
        if (0 < w && w <= width && 0 < h && h <= height) {
            box[0] = randint(key, counter, 0, height - h);
            box[1] = randint(key, counter, 0, width - w);
            box[2] = h;
            box[3] = w;
            return;
        }
    }
    central(height, width, ratio[0] < ratio[1] ? ratio[0] : ratio[1], ratio[0] < ratio[1] ? ratio[1] : ratio[0],
            box);
}
