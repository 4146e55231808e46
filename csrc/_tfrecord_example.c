/*
 * The walk of a serialised tf.train.Example, as iotool/formats/tfrecord/example.py walks it:
 * varints of at most 10 bytes, every length within what is left, unknown fields of wire types 0,
 * 1, 2 and 5 skipped, any other wire type or field number 0 refused; every entry of the feature
 * map walked, the last entry of a name wins, names that are not ASCII left to Python.
 */
#include "_tfrecord_example.h"


/* A varint at *pos: 0, or -1 when truncated, longer than 10 bytes or past 64 bits. */
static int tf_varint(const uint8_t *b, size_t *pos, size_t end, uint64_t *out)
{
    uint64_t result = 0;
    for (int i = 0; i < 10; i++) {
        if (*pos >= end)
            return -1;
        uint8_t byte = b[(*pos)++];
        result |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            if (i == 9 && byte > 1)
                return -1;
            *out = result;
            return 0;
        }
    }
    return -1;
}

/* The next field of the message ending at `end`: 1, 0 at its end, -1 when malformed. */
INTERNAL int tf_next_field(const uint8_t *b, size_t *pos, size_t end, field_t *f)
{
    uint64_t tag, value;
    if (*pos >= end)
        return 0;
    if (tf_varint(b, pos, end, &tag) < 0 || (tag >> 3) == 0)
        return -1;
    f->number = tag >> 3;
    f->wire = (int)(tag & 7);
    switch (f->wire) {
    case 0:
        return tf_varint(b, pos, end, &value) < 0 ? -1 : 1;
    case 2:
        if (tf_varint(b, pos, end, &value) < 0 || value > end - *pos)
            return -1;
        f->start = *pos;
        f->stop = *pos + (size_t)value;
        *pos = f->stop;
        return 1;
    case 1:
    case 5: {
        size_t size = f->wire == 1 ? 8 : 4;
        if (size > end - *pos)
            return -1;
        *pos += size;
        return 1;
    }
    default:
        return -1;
    }
}

/* One entry of the feature map (the map field `entry`): its key's span and its Feature's (the last of
 * each wins); 1 with a Feature, 0 without, -1 when malformed or the key is not ASCII. */
static int tf_read_entry(const uint8_t *b, const field_t *entry, size_t key[2], size_t feature[2])
{
    field_t part;
    size_t pos = entry->start;
    int has_feature = 0, got;
    key[0] = key[1] = feature[0] = feature[1] = 0;
    while ((got = tf_next_field(b, &pos, entry->stop, &part)) > 0) {
        if (part.wire != 2 || (part.number != 1 && part.number != 2))
            continue;
        size_t *into = part.number == 1 ? key : feature;
        into[0] = part.start;
        into[1] = part.stop;
        has_feature |= part.number == 2;
    }
    for (size_t i = key[0]; got == 0 && i < key[1]; i++)
        if (b[i] >= 0x80)
            return -1; /* Python decides what a non-ASCII name is */
    return got < 0 ? -1 : has_feature;
}

/* A list message of kind 1 (bytes), 2 (float) or 3 (int64) walked whole, as example.py's
 * _decode_list walks it (unknown fields skipped, each packed varint checked): 0 with its count of values (every packed number counted) and its first bytes value's span, or -1
 * when malformed. */
INTERNAL int tf_count_list(const uint8_t *b, size_t start, size_t end, uint64_t kind, uint64_t *count, size_t first[2])
{
    field_t f;
    int got;
    *count = 0;
    while ((got = tf_next_field(b, &start, end, &f)) > 0) {
        if (f.number != 1)
            continue;
        if (kind == 1 && f.wire == 2) {
            if (*count == 0) {
                first[0] = f.start;
                first[1] = f.stop;
            }
            (*count)++;
        } else if (kind == 3 && f.wire == 2) {
            size_t pos = f.start;
            uint64_t value;
            while (pos < f.stop) {
                if (tf_varint(b, &pos, f.stop, &value) < 0)
                    return -1;
                (*count)++;
            }
        } else if (kind == 2 && f.wire == 2) {
            if ((f.stop - f.start) % 4)
                return -1;
            *count += (f.stop - f.start) / 4;
        } else if ((kind == 3 && f.wire == 0) || (kind == 2 && f.wire == 5)) {
            (*count)++;
        } else {
            return -1;
        }
    }
    return got;
}

/* The entries of an Example in data[0, n), walked once: for each of the m names, found[j] 1 with
 * the span of the last entry of that name, 2 when that entry has no Feature, 0 when none; -1 when
 * malformed or a name is not ASCII. */
INTERNAL int tf_find_entries(const uint8_t *b, size_t n, const char *const *names, const size_t *lens, int m,
                        size_t spans[][2], int *found)
{
    field_t features, entry;
    size_t pos = 0, key[2], feature[2];
    int got, got2 = 0;
    while (got2 >= 0 && (got = tf_next_field(b, &pos, n, &features)) > 0) {
        if (features.number != 1 || features.wire != 2)
            continue;
        size_t at = features.start;
        while ((got2 = tf_next_field(b, &at, features.stop, &entry)) > 0) {
            if (entry.number != 1 || entry.wire != 2)
                continue;
            int has = tf_read_entry(b, &entry, key, feature);
            if (has < 0)
                return -1;
            for (int j = 0; j < m; j++)
                if (key[1] - key[0] == lens[j] && memcmp(b + key[0], names[j], lens[j]) == 0) {
                    found[j] = has ? 1 : 2;
                    spans[j][0] = feature[0];
                    spans[j][1] = feature[1];
                }
        }
    }
    return got < 0 || got2 < 0 ? -1 : 0;
}
