/*
 * A mask stored as a PNG, decoded without Python: the one-channel PNGs segmentation maps are
 * written as (greyscale "L" and bilevel "1", palette "P" of 1 to 8 bits), into the values
 * iotool/decode/masks.py's decode_mask gets from Pillow: palette indices, grey values (2 and 4
 * bits scaled to 0-255 as Pillow's unpackers scale them), 0 and 1 for a bilevel image.
 *
 * It accepts only what it can check whole, and is stricter than Pillow everywhere, so a PNG it
 * decodes is one Pillow decodes to the same values: the signature; chunks of ASCII letters, each
 * length within the data and each CRC right (Pillow checks only those before the image data);
 * IHDR first, compression, filter and interlace methods 0; a PLTE of 1 to 256 entries before the
 * image data, in a palette image only; the IDAT chunks one after the other, one zlib stream that
 * inflates to exactly the image's filtered rows and ends there; each row's filter 0 to 4; IEND.
 * Of the other chunks, only those Pillow reads without a check that could fail (gAMA, cHRM, sRGB
 * and pHYs at their lengths) or does not read at all (ancillary, lower-case first letter) are
 * passed over. Everything else (colour, 16 bits, interlacing, tRNS, text, APNG, unknown critical
 * chunks) is left to Pillow (MK_UNSUPPORTED); anything not whole is MK_BROKEN.
 *
 * Bounds: the output is the caller's height x width bytes, and the zlib stream is inflated into
 * two rows at a time, never past the image's last row, so no value of the file sets what is
 * allocated or how long the work runs (linear in the file and the image).
 */
#include "_masks_png.h"

#include <zlib.h>

static const uint8_t SIGNATURE[8] = {137, 80, 78, 71, 13, 10, 26, 10};

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static int is_letter(uint8_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

static int same(const uint8_t *type, const char *name) { return memcmp(type, name, 4) == 0; }

/* Whether Pillow reads an ancillary chunk `type` of `length` bytes without a check that could
 * fail, or not at all. */
static int passed_over(const uint8_t *type, uint32_t length)
{
    if (same(type, "gAMA"))
        return length >= 4;
    if (same(type, "cHRM"))
        return length >= 32;
    if (same(type, "sRGB"))
        return length >= 1;
    if (same(type, "pHYs"))
        return length >= 9;
    static const char *const read[] = {"tRNS", "tEXt", "zTXt", "iTXt", "eXIf", "acTL", "fcTL", "fdAT", "iCCP"};
    for (size_t i = 0; i < sizeof read / sizeof read[0]; i++)
        if (same(type, read[i]))
            return 0; /* Pillow reads it, and may refuse it or change the image */
    return type[0] >= 'a' && type[0] <= 'z';
}

/* Undo row filter `filter` of `row` (n bytes) against the previous row `prior` (zeros first),
 * one byte a pixel as in every PNG this file decodes. */
static int unfilter(uint8_t filter, uint8_t *row, const uint8_t *prior, size_t n)
{
    switch (filter) {
    case 0:
        return 1;
    case 1:
        for (size_t i = 1; i < n; i++)
            row[i] = (uint8_t)(row[i] + row[i - 1]);
        return 1;
    case 2:
        for (size_t i = 0; i < n; i++)
            row[i] = (uint8_t)(row[i] + prior[i]);
        return 1;
    case 3:
        for (size_t i = 0; i < n; i++)
            row[i] = (uint8_t)(row[i] + (((i ? row[i - 1] : 0) + prior[i]) >> 1));
        return 1;
    case 4:
        for (size_t i = 0; i < n; i++) {
            int a = i ? row[i - 1] : 0, b = prior[i], c = i ? prior[i - 1] : 0;
            int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
            row[i] = (uint8_t)(row[i] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c));
        }
        return 1;
    default:
        return 0;
    }
}

/* One unfiltered row of `width` values of `depth` bits into `out`: 8 bits copied, fewer
 * unpacked most significant first; grey of 2 and 4 bits scaled to 0-255 (Pillow's "L;2" and
 * "L;4"), bilevel grey and palette indices kept. */
static void unpack(const uint8_t *row, uint32_t width, int depth, int scale, uint8_t *out)
{
    if (depth == 8) {
        memcpy(out, row, width);
        return;
    }
    int per_byte = 8 / depth, mask = (1 << depth) - 1;
    for (uint32_t x = 0; x < width; x++) {
        int shift = 8 - depth * (int)(x % (uint32_t)per_byte + 1);
        out[x] = (uint8_t)(((row[x / (uint32_t)per_byte] >> shift) & mask) * scale);
    }
}

typedef struct {
    z_stream zs;
    uint32_t height, width;
    int depth, scale;
    size_t row_bytes, filled; /* of the row being inflated: its filter byte, then row_bytes */
    uint32_t y;               /* rows done */
    uint8_t *rows;            /* two rows of 1 + row_bytes: the current one and the one before */
    uint8_t *out;
} image_t;

/* Inflate `n` bytes of IDAT into the image's rows; MK_OK while the stream goes on or ends with the
 * last row, MK_BROKEN otherwise. `*ended` set when the stream has ended. */
static int inflate_idat(image_t *im, const uint8_t *data, uint32_t n, int *ended)
{
    im->zs.next_in = (Bytef *)data;
    im->zs.avail_in = n;
    size_t stride = 1 + im->row_bytes;
    while (im->zs.avail_in > 0 || im->y < im->height) {
        if (*ended)
            return MK_BROKEN; /* data after the stream's end */
        if (im->y == im->height) {
            /* every row is in: what is left must be only the stream's end (its checksum) */
            uint8_t spare;
            im->zs.next_out = &spare;
            im->zs.avail_out = 1;
        } else {
            uint8_t *row = im->rows + (im->y & 1) * stride;
            im->zs.next_out = row + im->filled;
            im->zs.avail_out = (uInt)(stride - im->filled);
        }
        uInt before_in = im->zs.avail_in, before_out = im->zs.avail_out;
        int rc = inflate(&im->zs, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
            return MK_BROKEN;
        size_t got = before_out - im->zs.avail_out;
        if (im->y == im->height) {
            if (got)
                return MK_BROKEN; /* more than the image's rows */
        } else {
            im->filled += got;
            if (im->filled == stride) {
                uint8_t *row = im->rows + (im->y & 1) * stride;
                const uint8_t *prior = im->rows + ((im->y + 1) & 1) * stride + 1;
                if (!unfilter(row[0], row + 1, prior, im->row_bytes))
                    return MK_BROKEN;
                unpack(row + 1, im->width, im->depth, im->scale, im->out + (size_t)im->y * im->width);
                im->y++;
                im->filled = 0;
            }
        }
        if (rc == Z_STREAM_END) {
            *ended = 1;
            return im->y == im->height && im->zs.avail_in == 0 ? MK_OK : MK_BROKEN;
        }
        if (got == 0 && im->zs.avail_in == before_in) /* no progress: the chunk is used up */
            return im->zs.avail_in == 0 ? MK_OK : MK_BROKEN; /* the stream goes on in the next IDAT */
    }
    return MK_OK;
}

/* IHDR's fields checked: MK_OK with depth and scale set, or why not. */
static int header(const uint8_t *p, uint32_t length, uint32_t height, uint32_t width, image_t *im, int *palette)
{
    if (length != 13)
        return MK_BROKEN;
    uint32_t w = be32(p), h = be32(p + 4);
    int depth = p[8], colour = p[9];
    if (w == 0 || h == 0 || w > 0x7FFFFFFFu || h > 0x7FFFFFFFu || p[10] != 0 || p[11] != 0)
        return MK_BROKEN;
    if (p[12] != 0 || (colour != 0 && colour != 3) || (depth != 1 && depth != 2 && depth != 4 && depth != 8))
        return MK_UNSUPPORTED;
    if (w != width || h != height)
        return MK_SIZE;
    im->height = h;
    im->width = w;
    im->depth = depth;
    im->scale = colour == 3 || depth == 1 || depth == 8 ? 1 : 255 / ((1 << depth) - 1);
    im->row_bytes = ((size_t)w * (size_t)depth + 7) / 8;
    *palette = colour == 3;
    return MK_OK;
}

/* One chunk after IHDR: MK_OK to go on, or why not; `*done` set at IEND. */
static int chunk(image_t *im, const uint8_t *type, const uint8_t *body, uint32_t length, int palette, int *state,
                 int *done)
{
    /* state: 0 before the image data, 1 in its IDAT chunks, 2 after them, and 3 once the stream has ended */
    if (same(type, "IDAT")) {
        if (*state >= 2 && !(*state == 3 && length == 0))
            return MK_BROKEN; /* IDAT chunks apart, or data after the stream */
        if (*state == 0)
            *state = 1;
        int ended = *state == 3;
        int rc = inflate_idat(im, body, length, &ended);
        if (ended)
            *state = 3;
        return rc;
    }
    if (*state == 1)
        *state = 2; /* the IDAT chunks are over */
    if (same(type, "IEND")) {
        *done = 1;
        return *state == 3 && length == 0 ? MK_OK : MK_BROKEN;
    }
    if (same(type, "PLTE")) {
        if (!palette)
            return MK_UNSUPPORTED;
        return *state == 0 && length >= 3 && length <= 768 && length % 3 == 0 ? MK_OK : MK_BROKEN;
    }
    if (same(type, "IHDR"))
        return MK_BROKEN;
    return passed_over(type, length) ? MK_OK : MK_UNSUPPORTED;
}

/* The chunks after the signature walked, the image inflated into `im` (stream set up, rows
 * allocated after IHDR). */
static int walk(const uint8_t *data, size_t len, uint32_t height, uint32_t width, image_t *im)
{
    size_t at = 8;
    int seen_header = 0, palette = 0, seen_plte = 0, state = 0, done = 0;
    while (!done) {
        if (len - at < 12)
            return MK_BROKEN; /* no IEND */
        uint32_t length = be32(data + at);
        const uint8_t *type = data + at + 4, *body = data + at + 8;
        if (length > 0x7FFFFFFFu || length > len - at - 12)
            return MK_BROKEN;
        if (!is_letter(type[0]) || !is_letter(type[1]) || !is_letter(type[2]) || !is_letter(type[3]))
            return MK_BROKEN;
        if ((uint32_t)crc32(0L, type, 4 + length) != be32(body + length))
            return MK_BROKEN;
        at += 12 + (size_t)length;
        int rc;
        if (!seen_header) {
            if (!same(type, "IHDR"))
                return MK_BROKEN;
            rc = header(body, length, height, width, im, &palette);
            if (rc == MK_OK && (im->rows = calloc(2, 1 + im->row_bytes)) == NULL)
                rc = MK_NOMEMORY;
            seen_header = 1;
        } else {
            rc = chunk(im, type, body, length, palette, &state, &done);
            if (rc == MK_OK && same(type, "PLTE") && seen_plte++)
                rc = MK_BROKEN; /* two palettes */
        }
        if (rc != MK_OK)
            return rc;
    }
    return palette && !seen_plte ? MK_UNSUPPORTED : MK_OK;
}

INTERNAL int mk_png_decode(const uint8_t *data, size_t len, uint32_t height, uint32_t width, uint8_t *out)
{
    if (data == NULL || len < 8 || memcmp(data, SIGNATURE, 8) != 0)
        return MK_BROKEN;
    image_t im;
    memset(&im, 0, sizeof im);
    im.out = out;
    if (inflateInit(&im.zs) != Z_OK)
        return MK_NOMEMORY;
    int rc = walk(data, len, height, width, &im);
    inflateEnd(&im.zs);
    free(im.rows);
    return rc;
}
