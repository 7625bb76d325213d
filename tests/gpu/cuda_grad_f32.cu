/* CUDA: wsp_grad_push_f32 of a bf16 layer's gradients as fp32 device
 * memory.  A first push since zeroing is copied straight into the
 * accumulators: those of 64 KiB and more are then pinned host memory (the
 * device wrote them; no host thread widened), the smaller ones staged.
 * Once pinned (pinning may wait for the device), the copies wait for the
 * work enqueued on the user's stream (a kernel that spins ~300 ms, then
 * writes the gradients: the pushes return while it runs).  A further
 * round, fp32 and bf16 pushes mixed, adds: the sums are exact (against
 * the values the device wrote, read back: a host compiler may contract a
 * recomputation into an FMA).  Skips (77) without a GPU. */
#include <string.h>

#include "../lib/testlib.h"
#include "cuda_util.h"
#include "pager_util.h"

#define SPIN_NS 300000000ull

/* Gradient k of tensor t, element i: a bf16 value widened, times a factor
 * bf16 cannot hold. */
__host__ __device__ static float grad_value(uint64_t i, uint32_t t, unsigned k)
{
	uint64_t x = (i + 1 + ((uint64_t)k << 32)) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)t << 40);
	x ^= x >> 29;
	uint32_t bits = (uint32_t)((0x3000 + (x % 0x1000)) | ((x >> 17 & 1) << 15)) << 16;
	float f;
	memcpy(&f, &bits, 4);
	return f * (1.0f + (float)(i % 5) / 512.0f);
}

__global__ void spin_then_fill(float *g, uint16_t *h, uint64_t n, uint32_t t, unsigned k,
			       uint64_t spin_ns)
{
	t_spin_ns(spin_ns);
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		float f = grad_value(i, t, k);
		g[i] = f;
		uint32_t bits;
		memcpy(&bits, &f, 4);
		h[i] = (uint16_t)(bits >> 16);   /* the bf16 push of round 1: truncated */
	}
}

static float trunc_bf16(float f)
{
	uint32_t bits;
	memcpy(&bits, &f, 4);
	return t_bf16f((uint16_t)(bits >> 16));
}

int main(void)
{
	t_need_gpu();
	struct t_model m;
	t_model_make(&m, "cuda-grad-f32", 4, 256, 512);
	wsp_pager *pg;
	wsp_pack *pk;
	t_gpu_open(&m, &pg, &pk);
	const struct wsp_layer *L = wsp_pack_layer(pk, 1);
	CHECK(L->n_tensors <= 32);
	cudaStream_t s;
	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	float *d[32], *v0[32], *r1[32];   /* device; the host's copies of rounds 0 and 1 */
	uint16_t *h[32];
	unsigned big = 0;
	for (uint32_t t = 0; t < L->n_tensors; t++) {
		uint64_t n = L->tensors[t].bytes / 2;
		CHECK(L->tensors[t].dtype == WSP_DTYPE_BF16);
		CU(cudaMalloc(&d[t], n * 4));
		v0[t] = (float *)malloc(n * 4 + 4);
		r1[t] = (float *)malloc(n * 4 + 4);
		CHECK(v0[t] && r1[t]);
		CU(cudaMalloc(&h[t], n * 2));
		CU(cudaMemset(d[t], 0xff, n * 4));   /* NaNs until the kernel runs */
		big += n * 4 >= (64u << 10);
	}
	CHECK(big > 0 && big < L->n_tensors);   /* both paths taken */
	CU(cudaDeviceSynchronize());

	/* Round 0: every tensor as fp32, the first push since zeroing (the
	 * accumulators are made and pinned); again after zeroing, the copies
	 * behind the spinning kernel. */
	struct wsp_grads gr;
	for (unsigned again = 0; again < 2; again++) {
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			spin_then_fill<<<64, 256, 0, s>>>(d[t], h[t], L->tensors[t].bytes / 2, t, 0,
							  again && t == 0 ? SPIN_NS : 0);
			CU(cudaGetLastError());
			CHECK_RC(wsp_grad_push_f32(pg, 1, t, d[t], s), 0);
		}
		if (again)   /* the host did not wait */
			CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
		CU(cudaStreamSynchronize(s));
		CHECK_RC(wsp_grad_get(pg, 1, &gr), 0);
		CHECK(gr.pushes == L->n_tensors);
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			CU(cudaMemcpy(v0[t], d[t], L->tensors[t].bytes * 2, cudaMemcpyDeviceToHost));
			for (uint64_t i = 0; i < L->tensors[t].bytes / 2; i++) {
				float want = v0[t][i];
				if (memcmp(&want, &gr.data[t][i], 4) != 0) {
					fprintf(stderr, "round 0 (%u), tensor %u element %llu: %a, want %a\n",
						again, t, (unsigned long long)i, gr.data[t][i], want);
					return 1;
				}
			}
		}
		if (!again)
			CHECK_RC(wsp_grad_zero(pg, 1), 0);
	}
	for (uint32_t t = 0; t < L->n_tensors; t++) {
		cudaPointerAttributes at;
		CU(cudaPointerGetAttributes(&at, gr.data[t]));
		int pinned = at.type == cudaMemoryTypeHost;
		if (pinned != (L->tensors[t].bytes * 2 >= (64u << 10))) {
			fprintf(stderr, "tensor %u (%llu bytes of fp32): pinned %d\n", t,
				(unsigned long long)L->tensors[t].bytes * 2, pinned);
			return 1;
		}
	}

	/* Round 1: even tensors as fp32 again, odd ones as bf16 (staged, added). */
	for (uint32_t t = 0; t < L->n_tensors; t++) {
		spin_then_fill<<<64, 256, 0, s>>>(d[t], h[t], L->tensors[t].bytes / 2, t, 1, 0);
		CU(cudaGetLastError());
		if (t % 2 == 0) {
			CHECK_RC(wsp_grad_push_f32(pg, 1, t, d[t], s), 0);
		} else {
			const void *ptr[32] = { 0 };
			ptr[t] = h[t];
			CHECK_RC(wsp_grad_push(pg, 1, ptr, s), 0);
		}
	}
	CU(cudaStreamSynchronize(s));
	CHECK_RC(wsp_grad_get(pg, 1, &gr), 0);
	CHECK(gr.pushes == 2 * L->n_tensors);
	for (uint32_t t = 0; t < L->n_tensors; t++)
		CU(cudaMemcpy(r1[t], d[t], L->tensors[t].bytes * 2, cudaMemcpyDeviceToHost));
	uint64_t checked = 0;
	for (uint32_t t = 0; t < L->n_tensors; t++)
		for (uint64_t i = 0; i < L->tensors[t].bytes / 2; i++) {
			float want = v0[t][i] + (t % 2 == 0 ? r1[t][i] : trunc_bf16(r1[t][i]));
			if (memcmp(&want, &gr.data[t][i], 4) != 0) {
				fprintf(stderr, "tensor %u element %llu: %a, want %a\n", t,
					(unsigned long long)i, gr.data[t][i], want);
				return 1;
			}
			checked++;
		}
	printf("%llu gradient elements exact after an fp32 round and a mixed one; %u of %u "
	       "accumulators pinned\n", (unsigned long long)checked, big, L->n_tensors);
	for (uint32_t t = 0; t < L->n_tensors; t++) {
		CU(cudaFree(d[t]));
		CU(cudaFree(h[t]));
		free(v0[t]);
		free(r1[t]);
	}
	CU(cudaStreamDestroy(s));
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
