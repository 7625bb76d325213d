/* CUDA: wsp_grad_push_rows copies the rows out of device memory in pieces
 * and adds each piece once it has landed (the worker and its adding threads
 * wait for the piece of each row they add).  An embedding of 32768 rows of
 * 2048 bf16; 30000 rows listed (sorted, some twice and thrice), 123 MB of
 * values in 8 pieces (the last lands ~2 ms after the first), written by a
 * kernel that first spins ~200 ms: the
 * push returns while the stream is still busy, and the accumulator (zeroed
 * after an untimed first push) holds exactly the rows' values (the first
 * listing of a row assigned, repeats added), then, after a second push of
 * other values, their sum.  A piece
 * added before it landed would add the first push's values again.  Skips
 * (77) without a GPU. */
#include <string.h>

#include "../lib/testlib.h"
#include "cuda_util.h"
#include "pager_util.h"
#include "train/grads.h"

#define SPIN_NS 200000000ull

__global__ void spin_then_copy(uint16_t *dst, const uint16_t *src, uint64_t n, uint64_t spin_ns)
{
	t_spin_ns(spin_ns);
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		dst[i] = src[i];
}

enum { N = 30000, PUSHES = 2 };

int main(void)
{
	t_need_gpu();
	struct t_model m;
	t_model_make_shape(&m, "cuda-grad-rows", 1, 2048, 2048, 32768, WSP_DTYPE_BF16);
	wsp_pager *pg;
	wsp_pack *pk;
	t_gpu_open(&m, &pg, &pk);
	const struct wsp_tensor *T = &wsp_pack_layer(pk, 0)->tensors[0];
	CHECK(T->rank == 2 && T->dtype == WSP_DTYPE_BF16 && T->shape[0] == 32768);
	uint64_t V = T->shape[0], H = T->shape[1];
	CHECK((uint64_t)N * H * 2 / wspi_row_piece_bytes >= 8);   /* the most pieces */

	int64_t *list = (int64_t *)malloc(N * sizeof(*list));
	uint16_t *vals[PUSHES];
	CHECK((uint64_t)t_rows_listed(list, N, 777, 8) < V);
	uint16_t *src[PUSHES], *d_vals;
	int64_t *d_rows;
	CU(cudaMalloc(&d_vals, (uint64_t)N * H * 2));
	CU(cudaMalloc(&d_rows, N * sizeof(*list)));
	CU(cudaMemcpy(d_rows, list, N * sizeof(*list), cudaMemcpyHostToDevice));
	for (unsigned p = 0; p < PUSHES; p++) {
		vals[p] = (uint16_t *)malloc((uint64_t)N * H * 2);
		for (int k = 0; k < N; k++)
			t_fill_grad(vals[p] + (uint64_t)k * H, H, p, 0, 9000 + (unsigned)k);
		CU(cudaMalloc(&src[p], (uint64_t)N * H * 2));
		CU(cudaMemcpy(src[p], vals[p], (uint64_t)N * H * 2, cudaMemcpyHostToDevice));
	}
	cudaStream_t s;
	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

	/* A first push, untimed, then zeroed: the pager makes its staging
	 * buffers at the first push, and pinning them (hundreds of MB) can
	 * take longer than the kernel spins. */
	CU(cudaMemcpy(d_vals, src[0], (uint64_t)N * H * 2, cudaMemcpyDeviceToDevice));
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, d_rows, N, d_vals, s), 0);
	CHECK_RC(wsp_grad_wait(pg, 0), 0);
	CHECK_RC(wsp_grad_zero(pg, 0), 0);

	float *want = (float *)calloc(V * H, 4);
	uint8_t *seen = (uint8_t *)calloc(V, 1);
	for (unsigned p = 0; p < PUSHES; p++) {
		for (int k = 0; k < N; k++) {
			float *w = want + (uint64_t)list[k] * H;
			const uint16_t *v = vals[p] + (uint64_t)k * H;
			for (uint64_t i = 0; i < H; i++)
				w[i] = seen[list[k]] ? w[i] + t_bf16f(v[i]) : t_bf16f(v[i]);
			seen[list[k]] = 1;
		}
		spin_then_copy<<<128, 256, 0, s>>>(d_vals, src[p], (uint64_t)N * H, SPIN_NS);
		CU(cudaGetLastError());
		CHECK_RC(wsp_grad_push_rows(pg, 0, 0, d_rows, N, d_vals, s), 0);
		/* the host did not wait for the spinning kernel */
		CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
		struct wsp_grads gr;
		CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
		CHECK(gr.pushes == p + 1);
		CHECK(t_same_floats(gr.data[0], want, V * H, p ? "rows added" : "rows on zero"));
		CU(cudaStreamSynchronize(s));   /* before the values are written again */
	}
	printf("%d rows of %llu, pushed %d times in pieces of %llu bytes or more: exact\n", N,
	       (unsigned long long)H, PUSHES, (unsigned long long)wspi_row_piece_bytes);
	for (unsigned p = 0; p < PUSHES; p++) {
		CU(cudaFree(src[p]));
		free(vals[p]);
	}
	CU(cudaFree(d_vals));
	CU(cudaFree(d_rows));
	CU(cudaStreamDestroy(s));
	free(list);
	free(want);
	free(seen);
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
