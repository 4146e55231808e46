/*
 * The transcode of iotool._jpegregion: transcode(library, data, restart_mcus, optimize, skip_code,
 * skip_tag), the same DCT coefficients re-entropy-coded with restart markers
 * (iotool/decode/seekable.py). See _jpegregion.c for what the module does.
 */
#include "_jpegregion_transcode.h"

#include "_jpegregion_errors.h"

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

PyObject *jr_transcode(PyObject *self, PyObject *args)
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
    job.src.err = jr_strict_errors(lib, &job.err);
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
