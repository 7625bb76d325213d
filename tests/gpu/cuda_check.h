/* Host-side CUDA helpers of the gpu-area tests, for .c and .cu files alike:
 * every runtime call checked, and a skip (77) without a device. */
#ifndef WSP_TESTS_GPU_CUDA_CHECK_H
#define WSP_TESTS_GPU_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wspager.h"

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

/* Whether a slot (view L of pack layer l, after stream s) holds exactly the
 * pack's raw layer, padding included; a difference is reported on stderr
 * with where it starts.  Exits when the pack cannot be read. */
static inline int t_slot_matches(const struct wsp_layer *L, wsp_pack *pk, uint32_t l,
				 cudaStream_t s)
{
	uint8_t *got = (uint8_t *)malloc(L->raw_bytes ? L->raw_bytes : 1);
	uint8_t *want = (uint8_t *)malloc(L->raw_bytes ? L->raw_bytes : 1);
	if (!got || !want || wsp_pack_read_layer(pk, l, want) < 0) {
		fprintf(stderr, "layer %u: cannot read it from the pack\n", l);
		exit(1);
	}
	CU(cudaMemcpyAsync(got, L->data, L->raw_bytes, cudaMemcpyDeviceToHost, s));
	CU(cudaStreamSynchronize(s));
	uint64_t i = 0;
	while (i < L->raw_bytes && got[i] == want[i])
		i++;
	if (i < L->raw_bytes)
		fprintf(stderr, "layer %u differs at byte %llu of %llu\n", l, (unsigned long long)i,
			(unsigned long long)L->raw_bytes);
	free(got);
	free(want);
	return i == L->raw_bytes;
}

#endif
