/*
 * One framed TFRecord record (uint64 length | masked CRC32C of it | data | masked CRC32C of the
 * data; the length at most max_bytes and the record exactly that long) and the features of its
 * Example that a run reads: the image's span (tf_one_record), or several bytes features'
 * (tf_record_fields). Both run without the GIL.
 */
#include "_tfrecord_record.h"

#include "_tfrecord_crc.h"
#include "_tfrecord_example.h"

static uint64_t le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The data of one framed record (its length in *length), or NULL where the framing or a CRC does
 * not match or the length passes max_bytes. */
static const uint8_t *unframed(const uint8_t *raw, size_t len, uint64_t max_bytes, uint64_t *length)
{
    if (len < 16 || le(raw + 8, 4) != tf_masked(raw, 8))
        return NULL;
    *length = le(raw, 8);
    if (*length > max_bytes || *length != len - 16 || le(raw + 12 + *length, 4) != tf_masked(raw + 12, *length))
        return NULL;
    return raw + 12;
}

/* The Feature at data[span[0], span[1]) walked as example.py's _decode_feature walks it: every kind
 * field's list counted, none past `most` values; *kind the last kind field's (0: none), *count its
 * values and first[] its first bytes value's span. 0, or -1 when malformed or past `most`. */
static int last_list(const uint8_t *data, const size_t span[2], uint64_t most, int *kind, uint64_t *count,
                     size_t first[2])
{
    field_t f;
    size_t pos = span[0];
    int got;
    *kind = 0;
    *count = 0;
    while ((got = tf_next_field(data, &pos, span[1], &f)) > 0) {
        if (f.number < 1 || f.number > 3)
            continue;
        if (f.wire != 2 || tf_count_list(data, f.start, f.stop, f.number, count, first) < 0 || *count > most)
            return -1;
        *kind = (int)f.number; /* the last kind field wins */
    }
    return got < 0 ? -1 : 0;
}

/* The image of one framed record: 1 with its span in `out`, else 0. Runs without the GIL. */
INTERNAL int tf_one_record(const uint8_t *raw, size_t len, const char *name, size_t name_len, uint64_t max_bytes,
                           size_t out[2])
{
    uint64_t length, count;
    const uint8_t *data = unframed(raw, len, max_bytes, &length);
    size_t span[1][2] = {{0, 0}}, first[2] = {0, 0};
    int found = 0, kind;
    if (data == NULL || tf_find_entries(data, (size_t)length, &name, &name_len, 1, span, &found) < 0 || found != 1)
        return 0;
    if (last_list(data, span[0], UINT64_MAX, &kind, &count, first) < 0 || kind != 1 || count == 0)
        return 0;
    out[0] = 12 + first[0];
    out[1] = 12 + first[1];
    return 1;
}

/* Features `names` of one framed record, each read as example.py's find_features reads it with a
 * limit of one value: out[3j..3j+2] = the first bytes value's (start, end) inside the record and
 * the count of values of the Feature's last kind field when that is a bytes list, else count -1
 * (absent, or another kind); 0 count for a Feature left empty. Returns 0 (the Python steps decide)
 * on a framing or CRC that does not match, a malformed message, a name that is not ASCII, or a
 * kind field of a named Feature holding more than one value (find_features refuses it). */
INTERNAL int tf_record_fields(const uint8_t *raw, size_t len, const char *const *names, const size_t *lens, int m,
                              uint64_t max_bytes, int64_t *out)
{
    uint64_t length;
    const uint8_t *data = unframed(raw, len, max_bytes, &length);
    size_t spans[MAX_NAMES][2];
    int found[MAX_NAMES] = {0};
    if (data == NULL || tf_find_entries(data, (size_t)length, names, lens, m, spans, found) < 0)
        return 0;
    for (int j = 0; j < m; j++) {
        int64_t *row = out + 3 * j;
        size_t first[2] = {0, 0};
        uint64_t count = 0;
        int kind = 0;
        row[0] = row[1] = 0;
        row[2] = found[j] == 2 ? 0 : -1;
        if (found[j] != 1)
            continue;
        if (last_list(data, spans[j], 1, &kind, &count, first) < 0)
            return 0;
        row[0] = (int64_t)(12 + first[0]);
        row[1] = (int64_t)(12 + first[1]);
        row[2] = kind == 1 ? (int64_t)count : kind == 0 ? 0 : -1;
    }
    return 1;
}
