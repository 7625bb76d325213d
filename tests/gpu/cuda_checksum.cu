/* CUDA: the weights on the GPU are bit-exact after every tier.  A model
 * larger than the host tier is streamed for several passes; for every
 * tensor of every acquire a kernel on the user's stream recomputes
 * wsp_checksum64 from the slot, and the result must equal the checksum the
 * pack stores.  Skips (77) without a GPU. */
#include <vector>

#include "../lib/testlib.h"
#include "cuda_util.h"
#include "pager_util.h"

#define PASSES 3

static unsigned long long h2d_events, h2d_bytes, bad_events;

/* Called from this thread only here (H2D events come from the pager's calls,
 * read/decode events from its workers: counted with atomics). */
static void on_trace(void *ctx, const struct wsp_trace_event *ev)
{
	if (ev->begin_ns > ev->end_ns)
		__atomic_add_fetch(&bad_events, 1, __ATOMIC_RELAXED);
	if (ev->stage == WSP_STAGE_H2D) {
		__atomic_add_fetch(&h2d_events, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&h2d_bytes, ev->bytes, __ATOMIC_RELAXED);
	}
}

int main(void)
{
	t_need_gpu();
	struct t_model m;
	t_model_make(&m, "cuda-checksum", 8, 512, 1024);

	struct wsp_options o;
	t_host_options(&o, &m, 40, 3);
	o.device = 0;
	o.trace = on_trace;
	CHECK(o.host_cache_bytes < m.sum.raw_bytes);
	char err[512];
	wsp_pager *pg;
	int rc = wsp_open(m.pack, &o, &pg, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "wsp_open: %s\n", err);
		return 1;
	}

	cudaStream_t s;
	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	size_t per_pass = m.sum.n_tensors;
	unsigned long long *d_sums;
	CU(cudaMalloc(&d_sums, per_pass * sizeof(*d_sums)));
	std::vector<unsigned long long> sums(per_pass);
	std::vector<uint64_t> want(per_pass);
	std::vector<const char *> names(per_pass);

	for (int pass = 0; pass < PASSES; pass++) {
		CU(cudaMemsetAsync(d_sums, 0, per_pass * sizeof(*d_sums), s));
		size_t k = 0;
		for (uint32_t l = 0; l < m.sum.n_layers; l++) {
			const struct wsp_layer *L;
			CHECK_RC(wsp_acquire(pg, l, s, &L), 0);
			for (uint32_t t = 0; t < L->n_tensors; t++, k++) {
				const struct wsp_tensor *T = &L->tensors[t];
				cudaPointerAttributes a;
				CU(cudaPointerGetAttributes(&a, T->data));
				CHECK(a.type == cudaMemoryTypeDevice);
				want[k] = T->checksum;
				names[k] = T->name;
				if (T->bytes)
					t_checksum_launch(T->data, T->bytes, d_sums + k, s);
			}
			CHECK_RC(wsp_release(pg, l, s), 0);
		}
		CHECK(k == per_pass);
		CU(cudaMemcpyAsync(sums.data(), d_sums, per_pass * sizeof(*d_sums),
				   cudaMemcpyDeviceToHost, s));
		CU(cudaStreamSynchronize(s));
		int bad = 0;
		for (size_t i = 0; i < per_pass; i++)
			if (sums[i] != want[i]) {
				fprintf(stderr, "pass %d: %s: device checksum %016llx, pack %016llx\n",
					pass, names[i], sums[i], (unsigned long long)want[i]);
				bad++;
			}
		CHECK(bad == 0);
	}
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	fprintf(stderr, "acquires %llu gpu %llu host %llu miss %llu h2d %llu bytes in %.3f ms, pinned %llu\n",
		(unsigned long long)st.acquires, (unsigned long long)st.gpu_hits,
		(unsigned long long)st.host_hits, (unsigned long long)st.misses,
		(unsigned long long)st.bytes_h2d, st.h2d_ns / 1e6,
		(unsigned long long)st.pinned_bytes);
	CHECK(st.bytes_h2d > 0 && st.h2d_ns > 0);
	/* Every completed copy was traced, with times from the device events. */
	CHECK(h2d_bytes == st.bytes_h2d && h2d_events > 0 && bad_events == 0);
	CU(cudaFree(d_sums));
	CU(cudaStreamDestroy(s));
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
