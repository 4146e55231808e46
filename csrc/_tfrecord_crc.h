/*
 * _tfrecord_crc.c: TFRecord's CRC32C and its masked form.
 */
#ifndef IOTOOL_TFRECORD_CRC_H
#define IOTOOL_TFRECORD_CRC_H

#include "_tfrecord_common.h"

/* Whether the CPU has the CRC32C instruction (SSE4.2): without it no CRC is computed. */
INTERNAL int tf_have_crc(void);

/* The CRC32C of n bytes at p (only where tf_have_crc()). */
INTERNAL uint32_t tf_crc32c(const uint8_t *p, size_t n);

/* TFRecord's masked CRC32C of n bytes at p. */
INTERNAL uint32_t tf_masked(const uint8_t *p, size_t n);

#endif
