/* CUDA helpers for the gpu-area tests (.cu files): cuda_check.h's, and
 * wsp_checksum64 computed on the device. */
#ifndef WSP_TESTS_GPU_CUDA_UTIL_H
#define WSP_TESTS_GPU_CUDA_UTIL_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"

#define T_CK_K 0x9E3779B97F4A7C15ull

/* Spin spin_ns nanoseconds of the device's clock: a kernel that the
 * stream is busy with while the host goes on. */
__device__ __forceinline__ void t_spin_ns(uint64_t spin_ns)
{
	uint64_t t0, now;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
	while (now - t0 < spin_ns);
}

__device__ __forceinline__ uint64_t t_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Sum over this thread's words of wsp_checksum64's terms (tail zero-padded);
 * `p` is 8-byte aligned (tensors start at 256-byte offsets in a slot). */
__device__ __forceinline__ unsigned long long t_partial(const unsigned char *p, uint64_t bytes,
							 uint64_t first, uint64_t stride)
{
	uint64_t full = bytes / 8, words = (bytes + 7) / 8;
	unsigned long long sum = 0;
	for (uint64_t i = first; i < words; i += stride) {
		uint64_t w = 0;
		if (i < full) {
			w = reinterpret_cast<const uint64_t *>(p)[i];
		} else {
			for (uint64_t b = 0; b < bytes % 8; b++)
				w |= (uint64_t)p[i * 8 + b] << (8 * b);
		}
		sum += t_mix64(w ^ (i * T_CK_K));
	}
	return sum;
}

__device__ __forceinline__ void t_reduce_add(unsigned long long sum, unsigned long long *out)
{
	for (int o = 16; o > 0; o >>= 1)
		sum += __shfl_down_sync(0xffffffffu, sum, o);
	if ((threadIdx.x & 31) == 0)
		atomicAdd(out, sum);
}

/* *out (zeroed by the caller) += wsp_checksum64(p, bytes). */
__global__ void t_checksum_kernel(const unsigned char *p, uint64_t bytes, unsigned long long *out)
{
	uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	t_reduce_add(t_partial(p, bytes, first, stride), out);
}

static inline void t_checksum_launch(const void *p, uint64_t bytes, unsigned long long *out,
				     cudaStream_t s)
{
	unsigned blocks = (unsigned)((bytes / 8 / 256) + 1);
	if (blocks > 1024)
		blocks = 1024;
	t_checksum_kernel<<<blocks, 256, 0, s>>>((const unsigned char *)p, bytes, out);
	CU(cudaGetLastError());
}

#endif
