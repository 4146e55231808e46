/*
 * The choice of kernels: the CPU's features (AVX2, SSSE3) under set_level's cap, asked by the
 * passes (_resize_horizontal.c, _resize_vertical.c) and set by set_level (_resize.c). A file of its
 * own, below the passes and the kernel that runs them, so that none of them includes another's
 * caller. No Python.
 */
#include "_resize_cpu.h"

INTERNAL int rs_level_cap = 2;  /* _resize_cpu.h says what it caps */

#if HAVE_X86
INTERNAL int rs_have_avx2(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return known && rs_level_cap >= 2;
}

INTERNAL int rs_have_ssse3(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("ssse3") ? 1 : 0;
    }
    return known && rs_level_cap >= 1;
}
#endif
