/*
 * What the files of iotool._tfrecord share and no file owns: the C headers, the INTERNAL
 * visibility and a protobuf field as the walk reads it. No function is declared here: each file's
 * own header declares what it defines (tests/native/test_include_graph.py). _tfrecord.c says what
 * the module does and which file holds what. Kernel code only: no Python here.
 */
#ifndef IOTOOL_TFRECORD_COMMON_H
#define IOTOOL_TFRECORD_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Shared between the files of the extension, not exported from it. */
#define INTERNAL __attribute__((visibility("hidden")))

/* The most feature names tf_record_fields looks for in one record. */
#define MAX_NAMES 64

/* One field of a protobuf message: its number, wire type and, for wire type 2, its bytes' span. */
typedef struct {
    uint64_t number;
    int wire;
    size_t start, stop; /* wire 2: the value's bytes */
} field_t;

#endif
