/* What the CUDA benchmarks share: every runtime call checked (exit 1 with
 * the call and CUDA's message), and the time between two events. */
#ifndef WSP_BENCH_CUDA_BENCH_H
#define WSP_BENCH_CUDA_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>

#define CU(call)                                                                       \
	do {                                                                           \
		cudaError_t cu_rc_ = (call);                                           \
		if (cu_rc_ != cudaSuccess) {                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,  \
				cudaGetErrorString(cu_rc_));                           \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

static inline double ms_between(cudaEvent_t a, cudaEvent_t b)
{
	float ms = 0;
	CU(cudaEventElapsedTime(&ms, a, b));
	return ms;
}

#endif
