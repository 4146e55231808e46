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
 * markers renumbered (iotool/decode/segments.py describes the table), checking every entry it uses;
 * decode_seekable(...) is the per-crop path in one call: it walks the headers, checks the table,
 * plans the segments a box needs, gathers them and decodes the box of the result.
 *
 * Nothing is kept between calls but the bound library; the GIL is released while libjpeg works.
 *
 * One module, one file per concept, each with its header: this file binds the library (load,
 * library_path) and holds the method table; _jpegregion_errors.c is the strict error manager,
 * _jpegregion_decode.c the region decode, _jpegregion_transcode.c the transcode,
 * _jpegregion_gather.c the segment gather and the seekable decode, _jpegregion_run.c a run of
 * samples into batch rows (with the resize kernel's files, compiled in); _jpegregion_common.h is
 * the types they share.
 *
 * Built against CPython's limited API (Py_LIMITED_API, set by setup.py), so one abi3 wheel serves
 * every CPython the project supports.
 */
#include "_jpegregion_common.h"

#include <dlfcn.h>

#include "_jpegregion_decode.h"
#include "_jpegregion_errors.h"
#include "_jpegregion_gather.h"
#include "_jpegregion_run.h"
#include "_jpegregion_transcode.h"

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

/* The jpeg_* symbols load() binds, by field of struct library. */
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
    job.cinfo.err = jr_strict_errors(lib, &job.err);
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

static PyMethodDef methods[] = {
    {"load", load, METH_VARARGS,
     "load(path) -> library\n\n"
     "dlopen a libjpeg(-turbo) shared library (a path or a soname), bind the jpeg_* functions the\n"
     "region decoder calls and check its ABI (JPEG_LIB_VERSION, struct size); OSError if it cannot."},
    {"library_path", library_path, METH_O,
     "library_path(library) -> str | None\n\nThe file a loaded library was mapped from (dladdr)."},
    {"decode_region", jr_decode_region, METH_VARARGS,
     "decode_region(library, data, scale_num, top, left, height, width, margin) -> bytearray\n\n"
     "Decode the region of a JPEG at scale_num/8 of its size (height x width x 3 RGB) with a library\n"
     "from load(); coordinates are in the scaled image."},
    {"transcode", jr_transcode, METH_VARARGS,
     "transcode(library, data, restart_mcus, optimize, skip_code, skip_tag) -> bytes\n\n"
     "Rewrite a JPEG's entropy coding losslessly (the same DCT coefficients, libjpeg's coefficient\n"
     "API): sequential, a restart marker every restart_mcus MCUs (0: none), optimised Huffman tables\n"
     "when optimize. APPn/COM segments are copied, except the one of marker skip_code whose data\n"
     "starts with skip_tag."},
    {"gather", jr_gather, METH_VARARGS,
     "gather(data, head, entropy, table, end, rows, per_row, c0, c1, r0, r1) -> bytes\n\n"
     "head + the restart segments c0..c1-1 of MCU rows r0..r1-1 of a seekable JPEG (markers\n"
     "renumbered) + EOI. table: offset of the big-endian u32 row starts (from entropy); every start\n"
     "used is checked; ValueError when one is wrong or a row lacks its segments."},
    {"run_samples", jr_run_samples, METH_VARARGS,
     "run_samples(library, op, sources, (seed, epoch, rank), records, dst, first_row, tag, version) -> bytes\n\n"
     "JPEG k of sources (bytes; None: skipped) cropped as op = (kind 0 random resized crop or 1 centre\n"
     "crop, out_h, out_w, scale0, scale1, ratio0, ratio1, flip_p (< 0: none), reducing_gap, max_pixels)\n"
     "says, the box drawn from record k's stream and decoded by region at the reduced DCT scale (or from\n"
     "its restart segments: tag, version), resized into row first_row + k of dst (3 x out_h x out_w\n"
     "planes) and flipped; the GIL released. Returns bytes: 0 done, 1 left to the caller."},
    {"decode_seekable", jr_decode_seekable, METH_VARARGS,
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
