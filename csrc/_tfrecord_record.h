/*
 * _tfrecord_record.c: a framed record's CRCs checked and the features a run reads found.
 */
#ifndef IOTOOL_TFRECORD_RECORD_H
#define IOTOOL_TFRECORD_RECORD_H

#include "_tfrecord_common.h"

/* The first value of bytes feature `name` of one framed record: 1 with its span inside the record
 * in `out`, else 0 (the Python steps decide). */
INTERNAL int tf_one_record(const uint8_t *raw, size_t len, const char *name, size_t name_len, uint64_t max_bytes,
                           size_t out[2]);

/* Features `names` of one framed record: 3 int64 a name in `out` (the first bytes value's span,
 * the count of values or -1); 1, or 0 when the Python steps must decide. */
INTERNAL int tf_record_fields(const uint8_t *raw, size_t len, const char *const *names, const size_t *lens, int m,
                              uint64_t max_bytes, int64_t *out);

#endif
