/* CUDA: wsp_grad_push copies gradients out of device memory only after the
 * work enqueued on the user's stream: a kernel that spins ~300 ms and then
 * writes the gradients precedes the push, the push returns while that
 * stream is still busy (the host did not wait), and the accumulators hold
 * exactly what the kernel wrote, then the sum of two pushes.  Skips (77)
 * without a GPU. */
#include <string.h>

#include "../lib/testlib.h"
#include "cuda_util.h"
#include "pager_util.h"

#define SPIN_NS 300000000ull

__host__ __device__ static uint16_t grad_bits(uint64_t i, uint32_t t, unsigned k)
{
	uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)t << 40) ^ ((uint64_t)k << 52);
	x ^= x >> 29;
	return (uint16_t)(0x3000 + (x % 0x1000)) | (uint16_t)((x >> 17 & 1) << 15);
}

__global__ void spin_then_fill(uint16_t *g, uint64_t n, uint32_t t, unsigned k, uint64_t spin_ns)
{
	t_spin_ns(spin_ns);
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		g[i] = grad_bits(i, t, k);
}

int main(void)
{
	t_need_gpu();
	struct t_model m;
	t_model_make(&m, "cuda-grads", 4, 256, 512);
	wsp_pager *pg;
	wsp_pack *pk;
	t_gpu_open(&m, &pg, &pk);
	const struct wsp_layer *L = wsp_pack_layer(pk, 1);
	CHECK(L->n_tensors <= 32);
	cudaStream_t s;
	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	uint16_t *d[32];
	const void *ptr[32];
	for (uint32_t t = 0; t < L->n_tensors; t++) {
		CHECK(L->tensors[t].dtype == WSP_DTYPE_BF16);
		CU(cudaMalloc(&d[t], L->tensors[t].bytes));
		CU(cudaMemset(d[t], 0xff, L->tensors[t].bytes));   /* NaNs until the kernel runs */
		ptr[t] = d[t];
	}
	CU(cudaDeviceSynchronize());

	for (unsigned k = 0; k < 2; k++) {
		for (uint32_t t = 0; t < L->n_tensors; t++)
			spin_then_fill<<<64, 256, 0, s>>>(d[t], L->tensors[t].bytes / 2, t, k,
							  t == 0 ? SPIN_NS : 0);
		CU(cudaGetLastError());
		CHECK_RC(wsp_grad_push(pg, 1, ptr, s), 0);
		/* the host did not wait for the spinning kernel */
		CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
		CU(cudaStreamSynchronize(s));   /* before the buffers are written again */
		CHECK_RC(wsp_grad_wait(pg, 1), 0);
	}
	struct wsp_grads gr;
	CHECK_RC(wsp_grad_get(pg, 1, &gr), 0);
	CHECK(gr.pushes == 2);
	uint64_t checked = 0;
	for (uint32_t t = 0; t < L->n_tensors; t++)
		for (uint64_t i = 0; i < L->tensors[t].bytes / 2; i++) {
			float want = t_bf16f(grad_bits(i, t, 0)) + t_bf16f(grad_bits(i, t, 1));
			if (memcmp(&want, &gr.data[t][i], 4) != 0) {
				fprintf(stderr, "tensor %u element %llu: %a, want %a\n", t,
					(unsigned long long)i, gr.data[t][i], want);
				return 1;
			}
			checked++;
		}
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("%llu gradient elements exact after 2 pushes; %llu bytes out\n",
	       (unsigned long long)checked, (unsigned long long)st.bytes_d2h);
	CHECK(st.grad_pushes == 2 && st.bytes_d2h == 2 * checked * 2);
	for (uint32_t t = 0; t < L->n_tensors; t++)
		CU(cudaFree(d[t]));
	CU(cudaStreamDestroy(s));
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
