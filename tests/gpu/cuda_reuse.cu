/* CUDA: a slot is never overwritten before the stream that released it has
 * passed the release point.  A kernel on a slow stream spins ~50 ms and only
 * then reads its layer from the slot and checksums it; the layer is
 * released at once while the other slot is held, so the very next acquire
 * must reuse that slot.  The checksum the slow kernel computed must still
 * match the pack: the copy stream waited for the release event.  The host
 * never waits for the spinning kernel.  Skips (77) without a GPU. */
#include "../lib/testlib.h"
#include "cuda_util.h"
#include "pager_util.h"

#define ROUNDS 4

__global__ void spin_then_checksum(const unsigned char *p, uint64_t bytes, uint64_t spin_ns,
				   unsigned long long *out)
{
	t_spin_ns(spin_ns);
	uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	t_reduce_add(t_partial(p, bytes, first, stride), out);
}

int main(void)
{
	t_need_gpu();
	struct t_model m;
	t_model_make(&m, "cuda-reuse", 6, 512, 1024);

	struct wsp_options o;
	t_host_options(&o, &m, 100, 2);
	o.device = 0;
	o.flags |= WSP_OPEN_NO_PREFETCH;   /* only acquires move layers: reuse is forced */
	char err[512];
	wsp_pager *pg;
	int rc = wsp_open(m.pack, &o, &pg, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "wsp_open: %s\n", err);
		return 1;
	}
	cudaStream_t slow, fast;
	CU(cudaStreamCreateWithFlags(&slow, cudaStreamNonBlocking));
	CU(cudaStreamCreateWithFlags(&fast, cudaStreamNonBlocking));
	unsigned long long *d_sum, sum[ROUNDS * 3];
	uint64_t want[ROUNDS * 3];
	CU(cudaMalloc(&d_sum, sizeof(sum)));
	CU(cudaMemset(d_sum, 0, sizeof(sum)));

	uint32_t n = m.sum.n_layers;
	for (int r = 0; r < ROUNDS; r++) {
		uint32_t a = (3 * r) % n, b = (3 * r + 1) % n, c = (3 * r + 2) % n;
		const struct wsp_layer *A, *B, *C;
		/* Hold B in one slot: A and then C can only use the other. */
		CHECK_RC(wsp_acquire(pg, b, fast, &B), 0);
		CHECK_RC(wsp_acquire(pg, a, slow, &A), 0);
		/* The largest tensor of A: the longest copy over it. */
		const struct wsp_tensor *T = &A->tensors[0];
		for (uint32_t t = 1; t < A->n_tensors; t++)
			if (A->tensors[t].bytes > T->bytes)
				T = &A->tensors[t];
		want[3 * r] = T->checksum;
		spin_then_checksum<<<64, 256, 0, slow>>>((const unsigned char *)T->data, T->bytes,
							 50000000ull, d_sum + 3 * r);
		CU(cudaGetLastError());
		CHECK_RC(wsp_release(pg, a, slow), 0);

		/* C must overwrite A's slot, after the slow kernel is done. */
		CHECK_RC(wsp_acquire(pg, c, fast, &C), 0);
		CHECK(C->data == A->data);
		want[3 * r + 1] = B->tensors[0].checksum;
		want[3 * r + 2] = C->tensors[0].checksum;
		t_checksum_launch(B->tensors[0].data, B->tensors[0].bytes, d_sum + 3 * r + 1, fast);
		t_checksum_launch(C->tensors[0].data, C->tensors[0].bytes, d_sum + 3 * r + 2, fast);
		CHECK_RC(wsp_release(pg, b, fast), 0);
		CHECK_RC(wsp_release(pg, c, fast), 0);
	}
	CU(cudaStreamSynchronize(slow));
	CU(cudaStreamSynchronize(fast));
	CU(cudaMemcpy(sum, d_sum, sizeof(sum), cudaMemcpyDeviceToHost));
	int bad = 0;
	for (int i = 0; i < ROUNDS * 3; i++)
		if (sum[i] != want[i]) {
			fprintf(stderr, "round %d %s: device checksum %016llx, pack %016llx\n",
				i / 3, i % 3 == 0 ? "(slow kernel)" : "", sum[i],
				(unsigned long long)want[i]);
			bad++;
		}
	CHECK(bad == 0);
	CU(cudaFree(d_sum));
	CU(cudaStreamDestroy(slow));
	CU(cudaStreamDestroy(fast));
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
