/* Adding a gradient of a float dtype into an fp32 accumulator. */
#ifndef WSP_TRAIN_TOFLOAT_H
#define WSP_TRAIN_TOFLOAT_H

#include <stdint.h>
#include "wspager.h"

/* 1 for the dtypes a gradient may have (F32, F16, BF16). */
int wb_dtype_ok(enum wsp_dtype dt);
/* acc[i] = src[i] (first push: the gradient's own value, bit for bit; an
 * fp16 signalling NaN comes out quiet, as IEEE conversion has it) or
 * acc[i] += src[i], for n elements of dtype dt. */
void wb_accumulate(float *acc, const void *src, enum wsp_dtype dt, uint64_t n, int first);
/* 0: the plain loops only (tests compare the two; default 1). */
extern int wspi_tofloat_use_simd;

#endif
