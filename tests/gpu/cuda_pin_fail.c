/* CUDA: pinning the host tier fails (every cudaHostRegister the library
 * makes is refused, through -Wl,--wrap).  The failure must be said, not
 * hidden: a notice naming cudaHostRegister, and pinned_bytes 0 in the
 * stats; the pager still runs on pageable memory and every weight that
 * reaches the GPU is exact (copied back and checksummed).  Skips (77)
 * without a GPU. */
#include <cuda_runtime_api.h>
#include <stdatomic.h>

#include "pager_util.h"

cudaError_t __wrap_cudaHostRegister(void *p, size_t len, unsigned int flags);

static atomic_int refused;
static char notices[4096];
static atomic_int n_notices;

cudaError_t __wrap_cudaHostRegister(void *p, size_t len, unsigned int flags)
{
	atomic_fetch_add(&refused, 1);
	return cudaErrorMemoryAllocation;
}

static void on_log(void *ctx, const char *msg)
{
	/* serialised by the pager's notice lock; keep the first few */
	if (atomic_fetch_add(&n_notices, 1) < 8) {
		size_t used = strlen(notices);
		snprintf(notices + used, sizeof(notices) - used, "%s\n", msg);
	}
}

int main(void)
{
	int n = 0;
	cudaError_t crc = cudaGetDeviceCount(&n);
	if (crc != cudaSuccess || n == 0)
		SKIP("no CUDA device (%s)", crc != cudaSuccess ? cudaGetErrorString(crc) : "count 0");

	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	char err[512];
	wsp_pager *pg;
	t_model_make(&m, "cuda-pin-fail", 6, 512, 1024);
	t_host_options(&o, &m, 50, 3);
	o.device = 0;
	o.log = on_log;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);

	void *host = malloc(m.sum.max_layer_raw_bytes);
	CHECK(host != NULL);
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < m.sum.n_layers; l++) {
			const struct wsp_layer *L;
			CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
			for (uint32_t t = 0; t < L->n_tensors; t++) {
				const struct wsp_tensor *T = &L->tensors[t];
				CHECK(cudaMemcpy(host, T->data, T->bytes, cudaMemcpyDeviceToHost) ==
				      cudaSuccess);
				if (wsp_checksum64(host, T->bytes) != T->checksum) {
					fprintf(stderr, "pass %d: %s differs on the GPU\n", pass, T->name);
					return 1;
				}
			}
			CHECK_RC(wsp_release(pg, l, NULL), 0);
		}
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	wsp_close(pg);
	fprintf(stderr, "cudaHostRegister refused %d times; pinned_bytes %llu; notices:\n%s",
		(int)refused, (unsigned long long)st.pinned_bytes, notices);
	CHECK(refused > 0);
	CHECK(st.pinned_bytes == 0);
	CHECK(strstr(notices, "cudaHostRegister") != NULL);
	free(host);
	t_model_remove(&m);
	return 0;
}
