/*
 * The segment gather of iotool._jpegregion, for seekable JPEGs (iotool/decode/segments.py
 * describes iotool's table of row starts): gather(...) copies some restart segments into a JPEG of
 * their own, restart markers renumbered, checking every table entry it uses; decode_seekable(...)
 * walks the headers, checks the table, plans the segments a box needs, gathers them and decodes
 * the box of the result (jr_decode_into, _jpegregion_decode.c). The same rules in Python, the
 * tests' reference, are tests/support/seekable_cuts.py. See _jpegregion.c for the module.
 */
#include "_jpegregion_gather.h"

#include "_jpegregion_decode.h"

/* --- gather: the sub-JPEG of some restart segments of a seekable JPEG ------------------------------ */

static unsigned long read_u32(const unsigned char *p)
{
    return ((unsigned long)p[0] << 24) | ((unsigned long)p[1] << 16) | ((unsigned long)p[2] << 8) | p[3];
}

/* The start of MCU row `row` from the table, checked: inside (entropy, end], after the previous
 * row's start, and right after the restart marker that ends the row before (0 for row 0). */
static int row_start(const unsigned char *data, size_t entropy, size_t end, const unsigned char *table,
                     unsigned int row, unsigned int per_row, size_t *at)
{
    unsigned long offset = read_u32(table + 4 * (size_t)row);
    if (row == 0) {
        *at = entropy;
        return offset == 0;
    }
    if (offset > end - entropy || offset < 2)
        return 0;
    *at = entropy + offset;
    unsigned int number = (unsigned int)(((unsigned long long)row * per_row - 1) % 8);
    return data[*at - 2] == 0xFF && data[*at - 1] == 0xD0 + number;
}

/* Which segments of which seekable JPEG go into a sub-JPEG (see gather's docstring). */
struct segments {
    const unsigned char *data, *head;
    size_t n, head_length, entropy, table, end;
    unsigned int rows, per_row, c0, c1, r0, r1;
};

/* Check the request and the row starts that bound it; the size the sub-JPEG can reach (0 and
 * `problem` set when the request or the table is wrong). No data byte outside the record is read. */
static size_t plan_segments(const struct segments *g, char *problem, size_t size)
{
    if (g->entropy > g->end || g->end > g->n || g->rows == 0 || g->per_row == 0 || g->table > g->n ||
        (g->n - g->table) / 4 < g->rows || g->c0 >= g->c1 || g->c1 > g->per_row || g->r0 >= g->r1 ||
        g->r1 > g->rows) {
        snprintf(problem, size, "bad segment request");
        return 0;
    }
    const unsigned char *table = g->data + g->table;
    size_t first = 0, last = g->end;
    if (!row_start(g->data, g->entropy, g->end, table, g->r0, g->per_row, &first)) {
        snprintf(problem, size, "bad start for MCU row %u", g->r0);
        return 0;
    }
    if (g->r1 < g->rows && !row_start(g->data, g->entropy, g->end, table, g->r1, g->per_row, &last)) {
        snprintf(problem, size, "bad start for MCU row %u", g->r1);
        return 0;
    }
    if (last < first) {
        snprintf(problem, size, "MCU rows %u and %u out of order", g->r0, g->r1);
        return 0;
    }
    /* the segments copied lie in [first, last); each brings at most one 2-byte marker; EOI */
    return g->head_length + (last - first) + 2 * (size_t)(g->r1 - g->r0) * (g->c1 - g->c0) + 2;
}

/* Write head + the segments + EOI into `out` (of plan_segments' size); the bytes written, or 0
 * with `problem` set when a row start is wrong or a row lacks its restart markers. No Python. */
static size_t copy_segments(const struct segments *g, unsigned char *out, char *problem, size_t size)
{
    const unsigned char *data = g->data, *table = data + g->table;
    memcpy(out, g->head, g->head_length);
    size_t used = g->head_length, start = 0, stop = 0;
    unsigned int number = 0, copied = 0;
    row_start(data, g->entropy, g->end, table, g->r0, g->per_row, &start);  /* checked by plan_segments */
    for (unsigned int row = g->r0; row < g->r1; row++) {
        if (row + 1 == g->rows)
            stop = g->end;
        else if (!row_start(data, g->entropy, g->end, table, row + 1, g->per_row, &stop) || stop <= start) {
            snprintf(problem, size, "bad start for MCU row %u", row + 1);
            return 0;
        }
        /* segment k of the row runs from `from` to the next RSTn (or to the row's end) */
        const unsigned char *p = data + start, *limit = data + stop, *from = p;
        for (unsigned int k = 0; k < g->c1;) {
            const unsigned char *ff = p < limit ? memchr(p, 0xFF, (size_t)(limit - p)) : NULL;
            int is_rst = ff != NULL && ff + 1 < limit && ff[1] >= 0xD0 && ff[1] <= 0xD7;
            if (ff != NULL && !is_rst) {
                p = ff + 1;
                continue;
            }
            const unsigned char *to = ff != NULL ? ff : limit;
            if (ff == NULL && (row + 1 < g->rows || k + 1 < g->per_row)) {
                snprintf(problem, size, "MCU row %u holds %u restart segments, not %u", row, k, g->per_row);
                return 0;
            }
            if (k >= g->c0) {
                if (copied++) {
                    out[used++] = 0xFF;
                    out[used++] = (unsigned char)(0xD0 + number);
                    number = (number + 1) % 8;
                }
                memcpy(out + used, from, (size_t)(to - from));
                used += (size_t)(to - from);
            }
            k++;
            if (ff == NULL)
                break;
            p = from = ff + 2;
        }
        start = stop;
    }
    out[used++] = 0xFF;
    out[used++] = 0xD9;
    return used;
}

/* Fill `g` from the views and offsets of a call; 0 when an offset is negative. */
static int segments_from(struct segments *g, const Py_buffer *view, const Py_buffer *head, Py_ssize_t entropy,
                         Py_ssize_t table, Py_ssize_t end)
{
    g->data = view->buf;
    g->n = (size_t)view->len;
    g->head = head->buf;
    g->head_length = (size_t)head->len;
    g->entropy = (size_t)entropy;
    g->table = (size_t)table;
    g->end = (size_t)end;
    return entropy >= 0 && table >= 0 && end >= 0;
}

PyObject *jr_gather(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view, head;
    Py_ssize_t entropy, table, end;
    struct segments g;
    if (!PyArg_ParseTuple(args, "y*y*nnnIIIIII", &view, &head, &entropy, &table, &end, &g.rows, &g.per_row,
                          &g.c0, &g.c1, &g.r0, &g.r1))
        return NULL;
    char problem[160] = "";
    size_t bound = 0, used = 0;
    if (!segments_from(&g, &view, &head, entropy, table, end))
        snprintf(problem, sizeof(problem), "bad segment request");
    else
        bound = plan_segments(&g, problem, sizeof(problem));
    unsigned char *out = NULL;
    if (!problem[0] && (out = malloc(bound)) == NULL) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&head);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    if (!problem[0])
        used = copy_segments(&g, out, problem, sizeof(problem));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyBuffer_Release(&head);
    PyObject *result = NULL;
    if (problem[0])
        PyErr_SetString(PyExc_ValueError, problem);
    else
        result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)used);
    free(out);
    return result;
}

/* --- decode_seekable: a crop of a seekable JPEG from the segments that cover it, in one call ------- */

/* What the headers of a JPEG up to its first scan say (iotool/decode/segments.py, read_frame). */
struct frame {
    unsigned int height, width, components, mcu_h, mcu_w, marker, interval, scan_components;
    size_t sof, entropy, table, table_end;  /* table_end == 0: no iotool table */
};

static unsigned int read_u16(const unsigned char *p)
{
    return ((unsigned int)p[0] << 8) | p[1];
}

/* Walk the marker segments up to the first SOS, every length bounded by the data; NULL or why not. */
static const char *walk_frame(const unsigned char *d, size_t n, const unsigned char *tag, size_t tag_length,
                              struct frame *f)
{
    memset(f, 0, sizeof(*f));
    if (n < 4 || d[0] != 0xFF || d[1] != 0xD8)
        return "not a JPEG (no SOI marker)";
    for (size_t pos = 2; pos + 4 <= n;) {
        if (d[pos] != 0xFF)
            return "corrupt JPEG header (expected a marker)";
        unsigned int marker = d[pos + 1];
        if (marker == 0xFF) {
            pos++;
            continue;
        }
        if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
            pos += 2;
            continue;
        }
        size_t length = read_u16(d + pos + 2), end = pos + 2 + length;
        if (length < 2 || end > n)
            return "corrupt JPEG (a segment runs past the data)";
        if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
            unsigned int comps = length >= 8 ? d[pos + 9] : 0, h = 0, v = 0;
            f->height = length >= 8 ? read_u16(d + pos + 5) : 0;
            f->width = length >= 8 ? read_u16(d + pos + 7) : 0;
            if (f->height == 0 || f->width == 0 || comps == 0 || length < 8 + 3 * (size_t)comps)
                return "corrupt JPEG frame header";
            for (unsigned int k = 0; k < comps; k++) {
                unsigned int factors = d[pos + 11 + 3 * k];
                h = factors >> 4 > h ? factors >> 4 : h;
                v = (factors & 15) > v ? factors & 15 : v;
            }
            if (comps == 1 || h == 0 || v == 0)  /* one component: the MCU is one 8x8 block */
                h = v = 1;
            f->components = comps;
            f->mcu_h = 8 * v;
            f->mcu_w = 8 * h;
            f->sof = pos;
            f->marker = marker;
        } else if (marker == 0xDD && length == 4) {
            f->interval = read_u16(d + pos + 4);
        } else if (marker == 0xE9 && length >= 2 + tag_length && memcmp(d + pos + 4, tag, tag_length) == 0) {
            f->table = pos;
            f->table_end = end;
        } else if (marker == 0xDA) {
            if (f->marker == 0)
                return "corrupt JPEG (a scan before the frame header)";
            f->scan_components = length > 2 ? d[pos + 4] : 0;
            f->entropy = end;
            return NULL;
        } else if (marker == 0xD9) {
            break;
        }
        pos = end;
    }
    return "truncated JPEG (no scan)";
}

/* Check iotool's table against the frame (tests/support/seekable_cuts.py, read_layout) and fill g's layout fields;
 * NULL, or why the table does not fit (`problem` holds the text). */
static const char *check_table(const unsigned char *d, size_t n, const struct frame *f, size_t tag_length,
                               unsigned int version, struct segments *g, char *problem, size_t size)
{
    size_t body = f->table + 4 + tag_length, fixed = 5 + 32;
    unsigned int per_row_mcus = (f->width + f->mcu_w - 1) / f->mcu_w, rows = (f->height + f->mcu_h - 1) / f->mcu_h;
    if (f->table_end - body < fixed) {
        snprintf(problem, size, "the table is %zu bytes: too short", f->table_end - f->table);
        return problem;
    }
    unsigned int got_version = d[body], interval = read_u16(d + body + 1), table_rows = read_u16(d + body + 3);
    if (got_version != version)
        snprintf(problem, size, "version %u, not %u", got_version, version);
    else if (f->marker != 0xC0 && f->marker != 0xC1)
        snprintf(problem, size, "not a sequential Huffman-coded JPEG");
    else if (f->scan_components != f->components)
        snprintf(problem, size, "not a single interleaved scan");
    else if (f->interval == 0 || per_row_mcus % f->interval)
        snprintf(problem, size, "restart interval %u does not divide the %u MCUs of a row", f->interval,
                 per_row_mcus);
    else if (interval != f->interval || table_rows != rows || f->table_end - body != fixed + 4 * (size_t)rows)
        snprintf(problem, size, "interval %u, %u rows in %zu bytes; the JPEG has interval %u and %u MCU rows",
                 interval, table_rows, f->table_end - body, f->interval, rows);
    else if (d[n - 2] != 0xFF || d[n - 1] != 0xD9)
        snprintf(problem, size, "the data does not end with EOI");
    if (problem[0])
        return problem;
    g->entropy = f->entropy;
    g->table = body + fixed;
    g->end = n - 2;
    g->rows = rows;
    g->per_row = per_row_mcus / f->interval;
    return NULL;
}

/* The segments covering the box (scaled coordinates) plus `margin` scaled pixels, and at least two
 * MCU columns (tests/support/seekable_cuts.py, plan_cut, says why); the box inside the sub-JPEG into `inner`, its size
 * into `cut_h`/`cut_w`. 0 when those are every segment (decode the JPEG itself). */
static int plan_box(const struct frame *f, struct segments *g, unsigned int scale, const struct region *box,
                    struct region *inner, unsigned int *cut_h, unsigned int *cut_w)
{
    unsigned long long m = (unsigned long long)box->margin * scale, seg_w = (unsigned long long)f->interval * f->mcu_w;
    unsigned long long top = (unsigned long long)box->top * scale, left = (unsigned long long)box->left * scale;
    unsigned long long bottom = ((unsigned long long)box->top + box->height) * scale + m;
    unsigned long long right = ((unsigned long long)box->left + box->width) * scale + m;
    top = top > m ? top - m : 0;
    left = left > m ? left - m : 0;
    bottom = bottom < f->height ? bottom : f->height;
    right = right < f->width ? right : f->width;
    g->c0 = (unsigned int)(left / seg_w);
    g->c1 = (unsigned int)((right + seg_w - 1) / seg_w);
    g->c1 = g->c1 < g->per_row ? g->c1 : g->per_row;
    if (g->c1 - g->c0 == 1 && f->interval == 1 && g->per_row > 1) {  /* at least two MCU columns */
        if (g->c1 < g->per_row)
            g->c1++;
        else
            g->c0--;
    }
    g->r0 = (unsigned int)(top / f->mcu_h);
    g->r1 = (unsigned int)((bottom + f->mcu_h - 1) / f->mcu_h);
    g->r1 = g->r1 < g->rows ? g->r1 : g->rows;
    if (g->c0 == 0 && g->c1 == g->per_row && g->r0 == 0 && g->r1 == g->rows)
        return 0;
    unsigned long long x0 = g->c0 * seg_w, y0 = (unsigned long long)g->r0 * f->mcu_h;
    unsigned long long x1 = g->c1 * seg_w, y1 = (unsigned long long)g->r1 * f->mcu_h;
    *cut_w = (unsigned int)((x1 < f->width ? x1 : f->width) - x0);
    *cut_h = (unsigned int)((y1 < f->height ? y1 : f->height) - y0);
    *inner = *box;
    inner->top = box->top - (JDIMENSION)(y0 / scale);
    inner->left = box->left - (JDIMENSION)(x0 / scale);
    return 1;
}

/* The sub-JPEG's headers: the record's up to its scan data without iotool's table, the frame's
 * size set to the cut's (the table and the frame header are two segments of the walk). */
static unsigned char *cut_headers(const unsigned char *d, const struct frame *f, unsigned int height,
                                  unsigned int width, size_t *length)
{
    size_t skipped = f->table_end - f->table;
    unsigned char *head = malloc(f->entropy - skipped);
    if (head == NULL)
        return NULL;
    memcpy(head, d, f->table);
    memcpy(head + f->table, d + f->table_end, f->entropy - f->table_end);
    unsigned char *size = head + f->sof + 5 - (f->table < f->sof ? skipped : 0);
    size[0] = (unsigned char)(height >> 8);
    size[1] = (unsigned char)height;
    size[2] = (unsigned char)(width >> 8);
    size[3] = (unsigned char)width;
    *length = f->entropy - skipped;
    return head;
}

/* Everything decode_seekable does without Python: the walk, the table's checks, the plan, the
 * sub-JPEG and its decode. Returns 1 (pixels written), 0 (not cut: decode the JPEG itself) or -1
 * (`problem` says why: "segments: " for a table that does not fit, "header: " for the headers,
 * else libjpeg's message). */
INTERNAL int jr_seek_and_decode(struct job *job, const unsigned char *d, size_t n, const unsigned char *tag,
                                size_t tag_length, unsigned int version, unsigned int scale, unsigned int full_h,
                                unsigned int full_w, const struct region *box, char *problem, size_t size)
{
    struct frame f;
    struct segments g;
    struct region inner;
    unsigned int cut_h = 0, cut_w = 0;
    char why[160] = "";
    const char *walk = walk_frame(d, n, tag, tag_length, &f);
    if (walk != NULL) {
        snprintf(problem, size, "header: %s", walk);
        return -1;
    }
    if (f.table_end == 0)
        return 0;
    if (f.height != full_h || f.width != full_w) {
        snprintf(problem, size, "header: the frame is %ux%u, not the %ux%u its header gave", f.width, f.height,
                 full_w, full_h);
        return -1;
    }
    memset(&g, 0, sizeof(g));
    g.data = d;
    g.n = n;
    if (check_table(d, n, &f, tag_length, version, &g, why, sizeof(why)) != NULL) {
        snprintf(problem, size, "segments: %s", why);
        return -1;
    }
    if (!plan_box(&f, &g, scale, box, &inner, &cut_h, &cut_w))
        return 0;
    unsigned char *head = cut_headers(d, &f, cut_h, cut_w, &g.head_length), *sub = NULL;
    g.head = head;
    size_t bound = head != NULL ? plan_segments(&g, why, sizeof(why)) : 0;
    size_t used = bound && (sub = malloc(bound)) != NULL ? copy_segments(&g, sub, why, sizeof(why)) : 0;
    free(head);
    if (!used) {
        free(sub);
        snprintf(problem, size, "segments: %s", why[0] ? why : "out of memory");
        return -1;
    }
    const char *decode_problem = jr_decode_into(job, sub, used, (int)(8 / scale), &inner);
    free(sub);
    if (decode_problem != NULL) {
        snprintf(problem, size, "%s", decode_problem);
        return -1;
    }
    return 1;
}

PyObject *jr_decode_seekable(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *capsule;
    Py_buffer view, tag;
    unsigned int version, scale, full_h, full_w;
    struct region box;
    if (!PyArg_ParseTuple(args, "Oy*y*IIIIIIIII", &capsule, &view, &tag, &version, &scale, &full_h, &full_w,
                          &box.top, &box.left, &box.height, &box.width, &box.margin))
        return NULL;
    const struct library *lib = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    PyObject *pixels = NULL;
    if (lib != NULL && ((scale != 1 && scale != 2 && scale != 4 && scale != 8) || box.height == 0 ||
                        box.width == 0 || full_h == 0 || full_w == 0 || box.margin > JPEG_MAX_DIMENSION ||
                        (unsigned long long)box.top + box.height > (full_h + scale - 1) / scale ||
                        (unsigned long long)box.left + box.width > (full_w + scale - 1) / scale))
        PyErr_Format(PyExc_ValueError, "bad region: %ux%u at (%u, %u) is not inside the %ux%u image at scale "
                     "1/%u (of 1, 2, 4, 8)", box.width, box.height, box.left, box.top, full_w, full_h, scale);
    else if (lib != NULL)
        pixels = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)box.height * box.width * 3);
    if (pixels == NULL) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&tag);
        return NULL;
    }
    struct job job;
    memset(&job, 0, sizeof(job));
    job.lib = lib;
    job.out = (unsigned char *)PyByteArray_AsString(pixels);
    char problem[JMSG_LENGTH_MAX + 32] = "";
    int done;
    Py_BEGIN_ALLOW_THREADS
    done = jr_seek_and_decode(&job, view.buf, (size_t)view.len, tag.buf, (size_t)tag.len, version, scale, full_h,
                           full_w, &box, problem, sizeof(problem));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyBuffer_Release(&tag);
    if (done == 1)
        return pixels;
    Py_DECREF(pixels);
    if (done == 0)
        Py_RETURN_NONE;
    PyErr_SetString(PyExc_ValueError, problem);
    return NULL;
}
