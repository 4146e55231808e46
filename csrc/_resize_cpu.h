/*
 * _resize_cpu.c: the widest instruction set the kernels may use, from the CPU's features under
 * set_level's cap.
 */
#ifndef IOTOOL_RESIZE_CPU_H
#define IOTOOL_RESIZE_CPU_H

#include "_resize_common.h"

/* 2 AVX2, 1 SSSE3/SSE2, 0 scalar (set_level, for the tests that compare the paths). */
extern INTERNAL int rs_level_cap;

#if HAVE_X86
/* Whether the CPU has AVX2 (SSSE3) and rs_level_cap allows it. */
INTERNAL int rs_have_avx2(void);
INTERNAL int rs_have_ssse3(void);
#endif

#endif
