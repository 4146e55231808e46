/*
 * _tfrecord_example.c: a serialised tf.train.Example walked without Python.
 */
#ifndef IOTOOL_TFRECORD_EXAMPLE_H
#define IOTOOL_TFRECORD_EXAMPLE_H

#include "_tfrecord_common.h"

/* The next field of the message ending at `end`: 1, 0 at its end, -1 when malformed. */
INTERNAL int tf_next_field(const uint8_t *b, size_t *pos, size_t end, field_t *f);

/* A list message of kind 1 (bytes), 2 (float) or 3 (int64) walked whole: 0 with its count of
 * values (every packed number counted) and its first bytes value's span, or -1 when malformed. */
INTERNAL int tf_count_list(const uint8_t *b, size_t start, size_t end, uint64_t kind, uint64_t *count, size_t first[2]);

/* The entries of an Example in b[0, n), walked once: for each of the m names, found[j] 1 with the
 * span of the Feature of the last entry of that name, 2 when it has no Feature, 0 when none; 0, or
 * -1 when malformed or a name is not ASCII. */
INTERNAL int tf_find_entries(const uint8_t *b, size_t n, const char *const *names, const size_t *lens, int m,
                             size_t spans[][2], int *found);

#endif
