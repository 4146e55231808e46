/*
 * The strict error manager of iotool._jpegregion: libjpeg's errors, and its warnings (corrupt data,
 * premature end), jump to the job's `escape` with the message, as in iotool's other decoders. Every
 * file that calls libjpeg sets it up (_jpegregion.c at load, the decodes, the transcode). See
 * _jpegregion.c for what the module does.
 */
#include "_jpegregion_errors.h"

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

struct jpeg_error_mgr *jr_strict_errors(const struct library *lib, struct strict_error_mgr *err)
{
    struct jpeg_error_mgr *pub = lib->std_error(&err->pub);
    err->pub.error_exit = on_error;
    err->pub.emit_message = on_message;
    return pub;
}
