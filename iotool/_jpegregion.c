/*
 * Region-of-interest JPEG decoding with libjpeg(-turbo)'s scanline API.
 *
 * decode_region(library, data, scale_num, top, left, height, width, margin) decodes only what a
 * crop needs: the image is decoded at scale_num/8 of its size (libjpeg's scaled IDCT), the rows
 * above the crop are skipped (jpeg_skip_scanlines: entropy-decoded, not inverse-transformed), only
 * the iMCU columns that cover the crop are inverse-transformed (jpeg_crop_scanline), and decoding
 * stops after the crop's last row. Coordinates are in the scaled image.
 *
 * libjpeg replicates the edge pixels of a cropped region when it upsamples chroma, so the columns
 * are decoded `margin` pixels wider on each side (where the image has them) and each row is cut
 * back to the crop: the result is pixel-identical to the same box of a full decode. A region as
 * wide as the image is written by libjpeg straight into the result (no row buffer, no copy).
 *
 * The library is not linked at build time: the extension is compiled against the libjpeg 6.2 API
 * headers (jpeglib.h, JPEG_LIB_VERSION 62, which libjpeg-turbo 1.x to 3.x all keep) and
 * load(path) binds the jpeg_* functions of a libjpeg(-turbo) shared library with dlopen/dlsym, so
 * that Python can pick the newest copy present at run time (Pillow's wheel bundles libjpeg-turbo
 * 3.x) rather than the system's. jpeg_CreateDecompress checks JPEG_LIB_VERSION and the struct
 * size, so a library with another ABI is refused at load time.
 *
 * Returns a dense bytearray of height x width x 3 (RGB). Every libjpeg warning is an error
 * (strict, as iotool's other decoders): a corrupt stream raises ValueError with libjpeg's message.
 *
 * transcode(library, data, restart_mcus, optimize, ...) rewrites a JPEG's entropy coding with
 * the coefficient API (jpeg_read_coefficients / jpeg_write_coefficients): the same quantised DCT
 * coefficients, hence the same pixels through the same library, written sequentially with a
 * restart marker every restart_mcus MCUs and optimised Huffman tables (iotool/decode/seekable.py).
 *
 * gather(...) copies some restart segments of such a JPEG into a JPEG of their own, restart
 * markers renumbered (iotool/decode/segments.py), checking every table entry it uses;
 * decode_seekable(...) is the per-crop path in one call: it walks the headers, checks the table,
 * plans the segments a box needs, gathers them and decodes the box of the result.
 *
 * Nothing is kept between calls but the bound library; the GIL is released while libjpeg works.
 *
 * Built against CPython's limited API (Py_LIMITED_API, set by setup.py), so one abi3 wheel serves
 * every CPython the project supports.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  /* dladdr */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>

/* glibc 2.34 moved dlopen & co. from libdl into libc under a new symbol version, GLIBC_2.34, which
 * a build on a newer glibc binds by default: such a wheel would not load on glibc < 2.34 (RHEL 8,
 * Ubuntu 20.04; auditwheel: manylinux_2_34). Bind the versions every glibc still exports, the
 * architecture's base version. On an older glibc they are found in libdl.so.2, which any CPython
 * there has loaded (it dlopens extension modules itself); setup.py links -ldl too. */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
#if defined(__x86_64__)
#define DL_BASE_VERSION "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define DL_BASE_VERSION "GLIBC_2.17"
#endif
#ifdef DL_BASE_VERSION
__asm__(".symver dlopen,dlopen@" DL_BASE_VERSION);
__asm__(".symver dlsym,dlsym@" DL_BASE_VERSION);
__asm__(".symver dlerror,dlerror@" DL_BASE_VERSION);
__asm__(".symver dlclose,dlclose@" DL_BASE_VERSION);
__asm__(".symver dladdr,dladdr@" DL_BASE_VERSION);
#endif
#endif
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#define ROWS_PER_CALL 16
#define CAPSULE_NAME "iotool._jpegregion.library"

/* The jpeg_* functions of one loaded library (the macro jpeg_create_decompress calls
 * jpeg_CreateDecompress with this build's JPEG_LIB_VERSION and struct size). */
struct library {
    void *handle;
    struct jpeg_error_mgr *(*std_error)(struct jpeg_error_mgr *);
    void (*create_decompress)(j_decompress_ptr, int, size_t);
    void (*destroy_decompress)(j_decompress_ptr);
    void (*mem_src)(j_decompress_ptr, const unsigned char *, unsigned long);
    int (*read_header)(j_decompress_ptr, boolean);
    boolean (*start_decompress)(j_decompress_ptr);
    void (*crop_scanline)(j_decompress_ptr, JDIMENSION *, JDIMENSION *);
    JDIMENSION (*skip_scanlines)(j_decompress_ptr, JDIMENSION);
    JDIMENSION (*read_scanlines)(j_decompress_ptr, JSAMPARRAY, JDIMENSION);
    /* the coefficient API of transcode() */
    void (*save_markers)(j_decompress_ptr, int, unsigned int);
    jvirt_barray_ptr *(*read_coefficients)(j_decompress_ptr);
    boolean (*finish_decompress)(j_decompress_ptr);
    void (*create_compress)(j_compress_ptr, int, size_t);
    void (*destroy_compress)(j_compress_ptr);
    void (*copy_critical_parameters)(j_decompress_ptr, j_compress_ptr);
    void (*write_coefficients)(j_compress_ptr, jvirt_barray_ptr *);
    void (*write_marker)(j_compress_ptr, int, const JOCTET *, unsigned int);
    void (*finish_compress)(j_compress_ptr);
};

#define SYMBOLS(X) \
    X(std_error, "jpeg_std_error") X(create_decompress, "jpeg_CreateDecompress") \
    X(destroy_decompress, "jpeg_destroy_decompress") X(mem_src, "jpeg_mem_src") \
    X(read_header, "jpeg_read_header") X(start_decompress, "jpeg_start_decompress") \
    X(crop_scanline, "jpeg_crop_scanline") X(skip_scanlines, "jpeg_skip_scanlines") \
    X(read_scanlines, "jpeg_read_scanlines") \
    X(save_markers, "jpeg_save_markers") X(read_coefficients, "jpeg_read_coefficients") \
    X(finish_decompress, "jpeg_finish_decompress") X(create_compress, "jpeg_CreateCompress") \
    X(destroy_compress, "jpeg_destroy_compress") \
    X(copy_critical_parameters, "jpeg_copy_critical_parameters") \
    X(write_coefficients, "jpeg_write_coefficients") X(write_marker, "jpeg_write_marker") \
    X(finish_compress, "jpeg_finish_compress")

struct strict_error_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf escape;
    char message[JMSG_LENGTH_MAX];
};

static void on_error(j_common_ptr cinfo)
{
    struct strict_error_mgr *err = (struct strict_error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->escape, 1);
}

static void on_message(j_common_ptr cinfo, int level)
{
    /* level < 0 is a warning (corrupt data, premature end): treat it as an error. */
    if (level < 0)
        on_error(cinfo);
}

/* Everything the decode needs, kept in one place so the longjmp path can clean it up. */
struct job {
    const struct library *lib;
    struct jpeg_decompress_struct cinfo;
    struct strict_error_mgr err;
    unsigned char *out;  /* height x width x 3, owned by the caller */
    unsigned char *rows;  /* ROWS_PER_CALL decoded rows of the widened region, owned by the job */
};

struct region {
    JDIMENSION top, left, height, width, margin;
};

static const char *run(struct job *job, const unsigned char *data, size_t size, int scale_num,
                       const struct region *r)
{
    const struct library *lib = job->lib;
    struct jpeg_decompress_struct *cinfo = &job->cinfo;

    lib->mem_src(cinfo, data, (unsigned long)size);
    lib->read_header(cinfo, TRUE);
    if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK)
        return "CMYK/YCCK JPEGs are not decoded by region";
    cinfo->out_color_space = JCS_RGB;
    cinfo->scale_num = (unsigned int)scale_num;
    cinfo->scale_denom = 8;
    lib->start_decompress(cinfo);
    if (cinfo->output_components != 3)
        return "unexpected number of output components";
    if ((unsigned long long)r->top + r->height > cinfo->output_height ||
        (unsigned long long)r->left + r->width > cinfo->output_width)
        return "region outside the scaled image";

    JDIMENSION start = r->left > r->margin ? r->left - r->margin : 0;
    unsigned long long wide = (unsigned long long)r->left + r->width + r->margin;
    JDIMENSION stop = wide > cinfo->output_width ? cinfo->output_width : (JDIMENSION)wide;
    JDIMENSION x = start, columns = stop - start;
    lib->crop_scanline(cinfo, &x, &columns);  /* x moves left to an iMCU boundary */
    size_t stride = (size_t)columns * 3, offset = (size_t)(r->left - x) * 3, length = (size_t)r->width * 3;
    int whole_rows = offset == 0 && stride == length;  /* libjpeg can write into the result itself */
    if (!whole_rows && (job->rows = malloc(stride * ROWS_PER_CALL)) == NULL)
        return "out of memory";
    if (r->top > 0 && lib->skip_scanlines(cinfo, r->top) != r->top)
        return "could not skip to the region";
    /* Several rows per call: libjpeg's per-call overhead is large next to one row of work. */
    JSAMPROW pointers[ROWS_PER_CALL];
    for (JDIMENSION y = 0; y < r->height;) {
        JDIMENSION want = r->height - y < ROWS_PER_CALL ? r->height - y : ROWS_PER_CALL;
        for (JDIMENSION k = 0; k < want; k++)
            pointers[k] = whole_rows ? job->out + (size_t)(y + k) * length : job->rows + k * stride;
        JDIMENSION got = lib->read_scanlines(cinfo, pointers, want);
        if (got == 0)
            return "the stream ended before the region";
        for (JDIMENSION k = 0; k < got && !whole_rows; k++)
            memcpy(job->out + (size_t)(y + k) * length, pointers[k] + offset, length);
        y += got;
    }
    return NULL;
}

/* Decode region `r` of `data` at scale_num/8 into job->out, the decompressor made and destroyed
 * here: NULL, or why not (libjpeg's message, or run()'s). No Python: call it with the GIL released. */
static const char *decode_into(struct job *job, const unsigned char *data, size_t size, int scale_num,
                               const struct region *r)
{
    const struct library *lib = job->lib;
    const char *problem = NULL;
    job->cinfo.err = lib->std_error(&job->err.pub);
    job->err.pub.error_exit = on_error;
    job->err.pub.emit_message = on_message;
    if (setjmp(job->err.escape)) {
        problem = job->err.message;
    } else {
        lib->create_decompress(&job->cinfo, JPEG_LIB_VERSION, sizeof(struct jpeg_decompress_struct));
        problem = run(job, data, size, scale_num, r);
    }
    lib->destroy_decompress(&job->cinfo);
    free(job->rows);
    job->rows = NULL;
    return problem;
}

static void release_library(PyObject *capsule)
{
    struct library *lib = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (lib != NULL) {
        dlclose(lib->handle);
        free(lib);
    }
}

/* The size check of jpeg_CreateDecompress, run once at load: a library built for another
 * JPEG_LIB_VERSION or another struct layout fails here instead of in the first decode. */
static const char *check_abi(const struct library *lib, char *message)
{
    struct job job;
    memset(&job, 0, sizeof(job));
    job.cinfo.err = lib->std_error(&job.err.pub);
    job.err.pub.error_exit = on_error;
    job.err.pub.emit_message = on_message;
    if (setjmp(job.err.escape)) {
        lib->destroy_decompress(&job.cinfo);
        memcpy(message, job.err.message, JMSG_LENGTH_MAX);
        return message;
    }
    lib->create_decompress(&job.cinfo, JPEG_LIB_VERSION, sizeof(struct jpeg_decompress_struct));
    lib->destroy_decompress(&job.cinfo);
    return NULL;
}

static PyObject *load(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *name;
    if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &name))
        return NULL;
    struct library *lib = calloc(1, sizeof(*lib));
    if (lib == NULL) {
        Py_DECREF(name);
        return PyErr_NoMemory();
    }
    char message[JMSG_LENGTH_MAX + 128];
    const char *problem = NULL;
    lib->handle = dlopen(PyBytes_AsString(name), RTLD_NOW | RTLD_LOCAL);
    if (lib->handle == NULL) {
        const char *why = dlerror();
        snprintf(message, sizeof(message), "%s", why ? why : "dlopen failed");
        problem = message;
    }
#define BIND(field, symbol)                                                              \
    if (problem == NULL && (*(void **)&lib->field = dlsym(lib->handle, symbol)) == NULL) { \
        snprintf(message, sizeof(message), "%s lacks %s: not a libjpeg(-turbo >= 1.5) library",  \
                 PyBytes_AsString(name), symbol);                                         \
        problem = message;                                                                \
    }
    SYMBOLS(BIND)
#undef BIND
    Py_DECREF(name);
    if (problem == NULL)
        problem = check_abi(lib, message);
    if (problem != NULL) {
        if (lib->handle != NULL)
            dlclose(lib->handle);
        free(lib);
        PyErr_SetString(PyExc_OSError, problem);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(lib, CAPSULE_NAME, release_library);
    if (capsule == NULL) {
        dlclose(lib->handle);
        free(lib);
    }
    return capsule;
}

static PyObject *library_path(PyObject *self, PyObject *capsule)
{
    (void)self;
    struct library *lib = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (lib == NULL)
        return NULL;
    Dl_info info;
    if (dladdr(*(void **)&lib->read_scanlines, &info) == 0 || info.dli_fname == NULL)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(info.dli_fname);
}

static PyObject *decode_region(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *capsule;
    Py_buffer view;
    int scale_num;
    struct region r;
    if (!PyArg_ParseTuple(args, "Oy*iIIIII", &capsule, &view, &scale_num, &r.top, &r.left, &r.height,
                          &r.width, &r.margin))
        return NULL;
    const struct library *lib = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (lib == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (scale_num < 1 || scale_num > 16 || r.height == 0 || r.width == 0 || r.height > JPEG_MAX_DIMENSION ||
        r.width > JPEG_MAX_DIMENSION || r.margin > JPEG_MAX_DIMENSION) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "bad region: scale_num=%d height=%u width=%u", scale_num, r.height,
                     r.width);
        return NULL;
    }
    PyObject *pixels = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)r.height * r.width * 3);
    if (pixels == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }

    struct job job;
    memset(&job, 0, sizeof(job));
    job.lib = lib;
    job.out = (unsigned char *)PyByteArray_AsString(pixels);
    const char *problem;

    /* The capsule (and so the library) stays alive: the caller's argument tuple holds it. */
    Py_BEGIN_ALLOW_THREADS
    problem = decode_into(&job, (const unsigned char *)view.buf, (size_t)view.len, scale_num, &r);
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    if (problem != NULL) {
        Py_DECREF(pixels);
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    return pixels;
}


/* --- transcode: the same DCT coefficients, re-entropy-coded with restart markers ---------------- */

/* The APPn segment transcode() is told not to copy (iotool's own, from an earlier transcode). */
struct skip_marker {
    int code;
    const unsigned char *tag;
    size_t tag_length;
};

static int starts_with(const jpeg_saved_marker_ptr m, const char *tag, size_t length)
{
    return m->data_length >= length && memcmp(m->data, tag, length) == 0;
}

/* Copy the source's APPn and COM segments, as jpegtran -copy all does, but not the JFIF / Adobe
 * headers the compressor writes itself, nor the segment named by `skip`. */
static void copy_markers(const struct library *lib, j_decompress_ptr src, j_compress_ptr dst,
                         const struct skip_marker *skip)
{
    for (jpeg_saved_marker_ptr m = src->marker_list; m != NULL; m = m->next) {
        if (dst->write_JFIF_header && m->marker == JPEG_APP0 && starts_with(m, "JFIF\0", 5))
            continue;
        if (dst->write_Adobe_marker && m->marker == JPEG_APP0 + 14 && starts_with(m, "Adobe", 5))
            continue;
        if (m->marker == skip->code && starts_with(m, (const char *)skip->tag, skip->tag_length))
            continue;
        lib->write_marker(dst, m->marker, m->data, m->data_length);
    }
}

/* The output buffer, owned here (not jpeg_mem_dest's, whose reallocated buffer is lost when an
 * error jumps out): grown by doubling, freed by the caller on every path. */
struct growing_dest {
    struct jpeg_destination_mgr pub;
    unsigned char *buffer;
    size_t capacity;
};

static void dest_init(j_compress_ptr cinfo)
{
    struct growing_dest *d = (struct growing_dest *)cinfo->dest;
    d->pub.next_output_byte = d->buffer;
    d->pub.free_in_buffer = d->capacity;
}

static boolean dest_grow(j_compress_ptr cinfo)
{
    struct growing_dest *d = (struct growing_dest *)cinfo->dest;
    size_t used = d->capacity;  /* libjpeg calls this when the buffer is full */
    unsigned char *bigger = d->capacity > ((size_t)-1) / 2 ? NULL : realloc(d->buffer, d->capacity * 2);
    if (bigger == NULL) {
        struct strict_error_mgr *err = (struct strict_error_mgr *)cinfo->err;
        snprintf(err->message, sizeof(err->message), "out of memory for the transcoded JPEG");
        longjmp(err->escape, 1);
    }
    d->buffer = bigger;
    d->capacity *= 2;
    d->pub.next_output_byte = bigger + used;
    d->pub.free_in_buffer = d->capacity - used;
    return TRUE;
}

static void dest_term(j_compress_ptr cinfo)
{
    (void)cinfo;  /* the length is capacity - free_in_buffer, read by the caller */
}

struct transcode_job {
    const struct library *lib;
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    struct strict_error_mgr err;
    struct growing_dest out;
    int have_src, have_dst;
};

static const char *run_transcode(struct transcode_job *job, const unsigned char *data, size_t size,
                                 unsigned int restart_mcus, int optimize, const struct skip_marker *skip)
{
    const struct library *lib = job->lib;
    lib->mem_src(&job->src, data, (unsigned long)size);
    lib->save_markers(&job->src, JPEG_COM, 0xFFFF);
    for (int k = 0; k < 16; k++)
        lib->save_markers(&job->src, JPEG_APP0 + k, 0xFFFF);
    lib->read_header(&job->src, TRUE);
    jvirt_barray_ptr *coefficients = lib->read_coefficients(&job->src);
    job->dst.err = &job->err.pub;  /* kept by jpeg_CreateCompress */
    lib->create_compress(&job->dst, JPEG_LIB_VERSION, sizeof(struct jpeg_compress_struct));
    job->have_dst = 1;
    lib->copy_critical_parameters(&job->src, &job->dst);  /* sequential (baseline) unless told otherwise */
    job->dst.restart_interval = restart_mcus;
    job->dst.optimize_coding = optimize ? TRUE : FALSE;
    job->dst.dest = &job->out.pub;
    lib->write_coefficients(&job->dst, coefficients);
    copy_markers(lib, &job->src, &job->dst, skip);
    lib->finish_compress(&job->dst);
    lib->finish_decompress(&job->src);
    return NULL;
}

static PyObject *transcode(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *capsule;
    Py_buffer view, tag;
    unsigned int restart_mcus;
    int optimize, skip_code;
    if (!PyArg_ParseTuple(args, "Oy*Iiiy*", &capsule, &view, &restart_mcus, &optimize, &skip_code, &tag))
        return NULL;
    const struct library *lib = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (lib == NULL || restart_mcus > 65535) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&tag);
        if (lib != NULL)
            PyErr_Format(PyExc_ValueError, "restart_mcus=%u: must be 0 to 65535", restart_mcus);
        return NULL;
    }
    struct skip_marker skip = {skip_code, (const unsigned char *)tag.buf, (size_t)tag.len};
    struct transcode_job job;
    memset(&job, 0, sizeof(job));
    job.lib = lib;
    job.out.pub.init_destination = dest_init;
    job.out.pub.empty_output_buffer = dest_grow;
    job.out.pub.term_destination = dest_term;
    job.out.capacity = (size_t)view.len + 65536;
    if ((job.out.buffer = malloc(job.out.capacity)) == NULL) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&tag);
        return PyErr_NoMemory();
    }
    job.src.err = lib->std_error(&job.err.pub);
    job.err.pub.error_exit = on_error;
    job.err.pub.emit_message = on_message;
    const char *problem = NULL;
    int failed = 0;

    Py_BEGIN_ALLOW_THREADS
    if (setjmp(job.err.escape)) {
        failed = 1;
    } else {
        lib->create_decompress(&job.src, JPEG_LIB_VERSION, sizeof(struct jpeg_decompress_struct));
        job.have_src = 1;
        problem = run_transcode(&job, (const unsigned char *)view.buf, (size_t)view.len, restart_mcus,
                                optimize, &skip);
    }
    if (job.have_dst)
        lib->destroy_compress(&job.dst);
    if (job.have_src)
        lib->destroy_decompress(&job.src);
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    PyBuffer_Release(&tag);
    PyObject *result = NULL;
    if (failed || problem != NULL)
        PyErr_SetString(PyExc_ValueError, failed ? job.err.message : problem);
    else
        result = PyBytes_FromStringAndSize((const char *)job.out.buffer,
                                           (Py_ssize_t)(job.out.capacity - job.out.pub.free_in_buffer));
    free(job.out.buffer);
    return result;
}

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

static PyObject *gather(PyObject *self, PyObject *args)
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

/* Check iotool's table against the frame (segments.py, read_layout) and fill g's layout fields;
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
 * MCU columns (segments.py, plan_cut, says why); the box inside the sub-JPEG into `inner`, its size
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
static int seek_and_decode(struct job *job, const unsigned char *d, size_t n, const unsigned char *tag,
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
    const char *decode_problem = decode_into(job, sub, used, (int)(8 / scale), &inner);
    free(sub);
    if (decode_problem != NULL) {
        snprintf(problem, size, "%s", decode_problem);
        return -1;
    }
    return 1;
}

static PyObject *decode_seekable(PyObject *self, PyObject *args)
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
    done = seek_and_decode(&job, view.buf, (size_t)view.len, tag.buf, (size_t)tag.len, version, scale, full_h,
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

static PyMethodDef methods[] = {
    {"load", load, METH_VARARGS,
     "load(path) -> library\n\n"
     "dlopen a libjpeg(-turbo) shared library (a path or a soname), bind the jpeg_* functions the\n"
     "region decoder calls and check its ABI (JPEG_LIB_VERSION, struct size); OSError if it cannot."},
    {"library_path", library_path, METH_O,
     "library_path(library) -> str | None\n\nThe file a loaded library was mapped from (dladdr)."},
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(library, data, scale_num, top, left, height, width, margin) -> bytearray\n\n"
     "Decode the region of a JPEG at scale_num/8 of its size (height x width x 3 RGB) with a library\n"
     "from load(); coordinates are in the scaled image."},
    {"transcode", transcode, METH_VARARGS,
     "transcode(library, data, restart_mcus, optimize, skip_code, skip_tag) -> bytes\n\n"
     "Rewrite a JPEG's entropy coding losslessly (the same DCT coefficients, libjpeg's coefficient\n"
     "API): sequential, a restart marker every restart_mcus MCUs (0: none), optimised Huffman tables\n"
     "when optimize. APPn/COM segments are copied, except the one of marker skip_code whose data\n"
     "starts with skip_tag."},
    {"gather", gather, METH_VARARGS,
     "gather(data, head, entropy, table, end, rows, per_row, c0, c1, r0, r1) -> bytes\n\n"
     "head + the restart segments c0..c1-1 of MCU rows r0..r1-1 of a seekable JPEG (markers\n"
     "renumbered) + EOI. table: offset of the big-endian u32 row starts (from entropy); every start\n"
     "used is checked; ValueError when one is wrong or a row lacks its segments."},
    {"decode_seekable", decode_seekable, METH_VARARGS,
     "decode_seekable(library, data, tag, version, scale, full_height, full_width, top, left, height,\n"
     "                width, margin) -> bytearray | None\n\n"
     "The box (top, left, height, width) at 1/scale of a seekable JPEG from the restart segments that\n"
     "cover it plus margin scaled pixels, in one call, the GIL released: the headers walked, iotool's\n"
     "table (the APP9 segment whose data starts with tag) checked against them, the segments gathered\n"
     "into a sub-JPEG and its box decoded. None: no table, or the box needs every segment (decode the\n"
     "JPEG itself). ValueError: 'segments: ...' (the table does not fit), 'header: ...' (the headers\n"
     "are corrupt or disagree with full_height x full_width), else libjpeg's message (corrupt stream)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_jpegregion",
    .m_doc = "Region-of-interest JPEG decoding with libjpeg's scanline API, bound at run time.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__jpegregion(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* The API headers this was compiled against (not the library it runs with: see load()). */
    if (PyModule_AddIntConstant(m, "JPEG_LIB_VERSION", JPEG_LIB_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "HEADERS_LIBJPEG_TURBO_VERSION_NUMBER",
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
                                LIBJPEG_TURBO_VERSION_NUMBER
#else
                                0
#endif
                                ) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
