/* CUDA errors surface with their detail: a device ordinal out of range is
 * WSP_ENODEVICE; more slots than the API allows are -EINVAL before any
 * allocation; slots that cannot be allocated are WSP_ECUDA with the bytes
 * asked and the bytes free.  Skips (77) without a GPU. */
#include <cuda_runtime_api.h>
#include <errno.h>

#include "pager_util.h"

int main(void)
{
	int n = 0;
	cudaError_t crc = cudaGetDeviceCount(&n);
	if (crc != cudaSuccess || n == 0)
		SKIP("no CUDA device (%s)", crc != cudaSuccess ? cudaGetErrorString(crc) : "count 0");

	struct t_model m;
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	t_model_make(&m, "cuda-errors", 3, 512, 1024);

	t_host_options(&o, &m, 100, 3);
	o.device = n;   /* one past the last */
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), WSP_ENODEVICE);
	CHECK(pg == NULL);
	CHECK(strstr(err, "does not exist") != NULL);

	/* Above the API's bound: refused before any allocation. */
	t_host_options(&o, &m, 100, 100000);
	o.device = 0;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "gpu_slots") != NULL);

	/* 4096 slots (the most allowed) of an 80 MiB block, 320 GiB: beyond any
	 * GPU's memory, so cudaMalloc fails and says how much is free.  Four
	 * blocks, so that the blocks set every slot's size (with one, the
	 * small embedding and head would be the typical layer). */
	struct t_model big;
	t_model_make(&big, "cuda-errors-big", 4, 2048, 4096);
	t_host_options(&o, &big, 100, 4096);
	o.device = 0;
	CHECK_RC(wsp_open(big.pack, &o, &pg, err, sizeof(err)), WSP_ECUDA);
	CHECK(pg == NULL);
	fprintf(stderr, "message: %s\n", err);
	CHECK(strstr(err, "cudaMalloc of") != NULL);
	CHECK(strstr(err, "free") != NULL);
	t_model_remove(&big);

	/* The device still works afterwards: a normal open succeeds. */
	t_host_options(&o, &m, 100, 3);
	o.device = 0;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	const struct wsp_layer *L;
	CHECK_RC(wsp_acquire(pg, 0, NULL, &L), 0);
	CHECK_RC(wsp_release(pg, 0, NULL), 0);
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
