/* Host-side CUDA helpers of the gpu-area tests, for .c and .cu files alike:
 * every runtime call checked, and a skip (77) without a device. */
#ifndef WSP_TESTS_GPU_CUDA_CHECK_H
#define WSP_TESTS_GPU_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CU(call)                                                                       \
	do {                                                                           \
		cudaError_t cu_rc_ = (call);                                           \
		if (cu_rc_ != cudaSuccess) {                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,  \
				cudaGetErrorString(cu_rc_));                           \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

/* Exit 77 when there is no usable CUDA device (CI machines). */
static inline void t_need_gpu(void)
{
	int n = 0;
	cudaError_t rc = cudaGetDeviceCount(&n);
	if (rc != cudaSuccess || n == 0) {
		fprintf(stderr, "skip: no CUDA device (%s)\n",
			rc != cudaSuccess ? cudaGetErrorString(rc) : "count 0");
		exit(77);
	}
}

#endif
