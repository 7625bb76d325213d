/* wspager(1) device kernels: wsp_checksum64 recomputed on the GPU, and the
 * activations the GEMM workload multiplies. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "wspager.h"
#include "wspager-kernels.h"

#define WT_CK_K 0x9E3779B97F4A7C15ull
#define WT_THREADS 256
#define WT_MAX_BLOCKS 2048

/* The splitmix64 finalizer, as in src/common/checksum.c. */
__device__ __forceinline__ unsigned long long wt_mix64(unsigned long long z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Little-endian word i built from bytes (unaligned data, and the tail). */
__device__ __forceinline__ unsigned long long wt_word_bytes(const unsigned char *p, uint64_t n)
{
	unsigned long long w = 0;
	for (uint64_t b = 0; b < n; b++)
		w |= (unsigned long long)p[b] << (8 * b);
	return w;
}

__global__ void wt_checksum_kernel(const unsigned char *data, uint64_t bytes, int aligned,
				   unsigned long long *result)
{
	uint64_t words = bytes / 8, tail = bytes % 8;
	uint64_t n = words + (tail ? 1 : 0);
	unsigned long long sum = 0;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		unsigned long long w;
		if (i < words && aligned)
			w = reinterpret_cast<const unsigned long long *>(data)[i];
		else
			w = wt_word_bytes(data + i * 8, i < words ? 8 : tail);
		sum += wt_mix64(w ^ (i * WT_CK_K));
	}
	/* Sum mod 2^64 is order-independent: reduce per warp, then per block. */
	for (int off = 16; off > 0; off >>= 1)
		sum += __shfl_down_sync(0xffffffffu, sum, off);
	__shared__ unsigned long long warp_sum[WT_THREADS / 32];
	if ((threadIdx.x & 31) == 0)
		warp_sum[threadIdx.x >> 5] = sum;
	__syncthreads();
	if (threadIdx.x == 0) {
		unsigned long long s = 0;
		for (int k = 0; k < WT_THREADS / 32; k++)
			s += warp_sum[k];
		atomicAdd(result, s);
	}
}

extern "C" int wt_cuda_checksum(const void *data, uint64_t bytes, unsigned long long *result, void *stream)
{
	if (bytes == 0)
		return cudaSuccess;
	uint64_t n = (bytes + 7) / 8;
	uint64_t blocks = (n + WT_THREADS - 1) / WT_THREADS;
	if (blocks > WT_MAX_BLOCKS)
		blocks = WT_MAX_BLOCKS;
	int aligned = ((uintptr_t)data % 8) == 0;
	wt_checksum_kernel<<<(unsigned)blocks, WT_THREADS, 0, (cudaStream_t)stream>>>(
		(const unsigned char *)data, bytes, aligned, result);
	return cudaGetLastError();
}

__device__ __forceinline__ float wt_value(uint64_t i)
{
	/* A cheap hash gives values without structure a GEMM could exploit. */
	unsigned v = (unsigned)((i * 2654435761ull) >> 7) & 1023u;
	return (float)v / 1024.0f - 0.5f;
}

__global__ void wt_fill_kernel(void *data, uint64_t n, int dtype)
{
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		float v = wt_value(i);
		if (dtype == WSP_DTYPE_BF16)
			((__nv_bfloat16 *)data)[i] = __float2bfloat16(v);
		else if (dtype == WSP_DTYPE_F16)
			((__half *)data)[i] = __float2half(v);
		else
			((float *)data)[i] = v;
	}
}

extern "C" int wt_cuda_fill(void *data, uint64_t n, int dtype, void *stream)
{
	if (n == 0)
		return cudaSuccess;
	if (dtype != WSP_DTYPE_BF16 && dtype != WSP_DTYPE_F16 && dtype != WSP_DTYPE_F32)
		return cudaErrorInvalidValue;
	uint64_t blocks = (n + WT_THREADS - 1) / WT_THREADS;
	if (blocks > WT_MAX_BLOCKS)
		blocks = WT_MAX_BLOCKS;
	wt_fill_kernel<<<(unsigned)blocks, WT_THREADS, 0, (cudaStream_t)stream>>>(data, n, dtype);
	return cudaGetLastError();
}
