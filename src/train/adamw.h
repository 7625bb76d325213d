/* wsp_adamw_step's switch for its vector loop (see adamw.c). */
#ifndef WSP_TRAIN_ADAMW_H
#define WSP_TRAIN_ADAMW_H

/* 1 (default): the AVX2 loop where the CPU has AVX2 and FMA; 0: the scalar
 * loop only (tests compare the two, bit for bit). */
extern int wspi_adamw_use_simd;

#endif
