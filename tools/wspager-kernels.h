/* wspager(1): entry points of tools/kernels.cu, callable from C.  Each returns
 * a cudaError_t as int (0 = cudaSuccess). */
#ifndef WSPAGER_KERNELS_H
#define WSPAGER_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Add wsp_checksum64(data, bytes) to *result (device memory, mod 2^64) on
 * `stream`.  `data` is a device pointer; any alignment.  Zero bytes: no-op. */
int wt_cuda_checksum(const void *data, uint64_t bytes, unsigned long long *result, void *stream);

/* Fill n elements of dtype `dtype` (enum wsp_dtype: BF16, F16 or F32) with
 * small deterministic values in [-0.5, 0.5). */
int wt_cuda_fill(void *data, uint64_t n, int dtype, void *stream);

#ifdef __cplusplus
}
#endif
#endif
