/*
 * What every file of the extension iotool._jpegregion shares and no file owns (one module built
 * from several files, see setup.py): the C headers (Python.h first, as CPython asks), the INTERNAL
 * visibility, the libjpeg(-turbo) functions bound at run time (struct library, loaded by
 * _jpegregion.c), the strict error manager's state and the decode job that the region decode
 * (_jpegregion_decode.c) and the seekable decode (_jpegregion_gather.c) both fill. No function of
 * any file is declared here: each file's own header declares what it defines, so a file includes
 * the headers of the files it calls and the includes form no cycle
 * (tests/native/test_include_graph.py).
 *
 * Built against CPython's limited API (Py_LIMITED_API, set by setup.py).
 */
#ifndef IOTOOL_JPEGREGION_COMMON_H
#define IOTOOL_JPEGREGION_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE  /* dladdr */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* Shared between the files of the extension, not exported from it. */
#define INTERNAL __attribute__((visibility("hidden")))

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

/* libjpeg's errors, and its warnings (corrupt data, premature end), jump to `escape` with the
 * message in `message`: every warning is an error, as in iotool's other decoders. */
struct strict_error_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf escape;
    char message[JMSG_LENGTH_MAX];
};

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

#endif
