/* Stream a pack twice the budget through the host tier for several passes,
 * in order, observing each layer in the predictor and prefetching the next.
 * Every byte is checked on every pass, and the counters are exact:
 *  - LRU evicts exactly what a cyclic scan needs next: no reuse at all after
 *    the first pass (every get is served by a fresh load);
 *  - PREDICT (largest predicted distance out, and a prefetch never pushes
 *    out what is needed before it) reuses, pass by pass, exactly as many
 *    layers as Belady's offline optimum computed here on the same trace.
 * "Reuse" = hits - prefetch_hits: gets that found data already used once.
 * Prefetching one layer ahead keeps the run deterministic: the only load in
 * flight at any decision is the one the next get waits for. */
#include "cache_test.h"

#define N_LAYERS 8
#define FIT 4        /* layers the budget holds */
#define PASSES 5

/* Belady's hits per pass for the cyclic trace with `fit` entries. */
static void belady(unsigned n, unsigned fit, unsigned passes, uint64_t *hits)
{
	unsigned len = n * passes, in[64] = { 0 }, used = 0;
	for (unsigned t = 0; t < len; t++) {
		unsigned x = t % n;
		if (in[x]) {
			hits[t / n]++;
			continue;
		}
		if (used == fit) {
			unsigned victim = 0, far = 0;
			for (unsigned y = 0; y < n; y++) {
				if (!in[y])
					continue;
				unsigned nx = t + 1;
				while (nx < len && nx % n != y)
					nx++;
				if (nx >= far) {
					far = nx;
					victim = y;
				}
			}
			in[victim] = 0;
			used--;
		}
		in[x] = 1;
		used++;
	}
}

static void run(const char *dir, const struct t_pack_spec *spec, enum wsp_policy policy)
{
	struct wsp_pack_s *pk = ct_open_pack(dir);
	CHECK(pk->m.hdr->n_layers == N_LAYERS);
	const uint64_t page = 8192;
	uint64_t pages = 0;
	for (uint32_t l = 0; l < N_LAYERS; l++) {
		uint64_t p = (pk->m.layers[l].raw_bytes + page - 1) / page;
		CHECK(l == 0 || p == pages);   /* equal layers: the count is in layers */
		pages = p;
	}
	struct predictor *pred;
	CHECK_RC(predictor_create(N_LAYERS, &pred), 0);
	/* Teach the cycle first, so that every decision below is predictable. */
	for (int k = 0; k < 2; k++)
		for (uint32_t l = 0; l < N_LAYERS; l++)
			predictor_observe(pred, l);

	struct hcache_config cfg;
	struct hcache *hc;
	struct wspi_err err;
	wspi_err_init(&err);
	ct_config(&cfg, WSP_IO_PREAD, FIT * pages * page, page);
	cfg.policy = policy;
	cfg.predictor = pred;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);

	uint64_t want[PASSES] = { 0 };
	belady(N_LAYERS, FIT, PASSES, want);
	uint64_t total_reuse = 0;
	for (unsigned p = 0; p < PASSES; p++) {
		hcache_reset_stats(hc);
		for (uint32_t l = 0; l < N_LAYERS; l++) {
			struct hcache_ref ref;
			int rc = hcache_get(hc, l, &ref, &err);
			if (rc < 0)
				fprintf(stderr, "pass %u get %u: %s\n", p, l, err.msg);
			CHECK_RC(rc, 0);
			CHECK(ct_check_layer(spec, pk, &ref) == 0);
			hcache_put(hc, &ref);
			predictor_observe(pred, l);
			rc = hcache_request(hc, (l + 1) % N_LAYERS, 1);
			CHECK(rc == 0 || rc == 1 || rc == -ENOSPC);
		}
		struct hcache_stats st;
		hcache_get_stats(hc, &st);
		uint64_t reuse = st.hits - st.prefetch_hits;
		fprintf(stderr, "%s pass %u: hits %" PRIu64 " (reuse %" PRIu64 ", prefetched %" PRIu64
			") misses %" PRIu64 " loads %" PRIu64 " evictions %" PRIu64 " wasted %" PRIu64
			"; Belady reuse %" PRIu64 "\n",
			policy == WSP_POLICY_LRU ? "LRU" : "PREDICT", p, st.hits, reuse,
			st.prefetch_hits, st.misses, st.loads, st.evictions, st.prefetch_wasted,
			want[p]);
		CHECK(st.hits + st.misses == N_LAYERS);
		CHECK(st.load_failures == 0);
		if (policy == WSP_POLICY_LRU) {
			if (p > 0) {
				CHECK(reuse == 0);
				CHECK(st.loads == N_LAYERS);   /* every layer read every pass */
			}
		} else {
			CHECK(reuse == want[p]);
			total_reuse += reuse;
		}
		/* Whatever was loaded was used or is still there: nothing wasted. */
		CHECK(st.prefetch_wasted == 0);
	}
	if (policy == WSP_POLICY_PREDICT) {
		uint64_t b = 0;
		for (unsigned p = 0; p < PASSES; p++)
			b += want[p];
		/* Belady keeps FIT-1 layers across each wrap. */
		CHECK(total_reuse == b && b >= (PASSES - 1) * (FIT - 1));
	}
	hcache_destroy(hc);
	predictor_free(pred);
	pack_close(pk);
	wspi_err_destroy(&err);
}

int main(void)
{
	const char *root = t_scratch("cache-stream");
	char dir[600];
	struct t_pack_spec spec = {
		.layers = N_LAYERS, .tensors_per_layer = 2, .tensor_bytes = 40000,
		.compressible = 1, .codec = WSP_CODEC_ZSTD, .chunk_bytes = 16384,
	};
	snprintf(dir, sizeof(dir), "%s/p", root);
	CHECK_RC(t_make_pack(dir, &spec), 0);
	run(dir, &spec, WSP_POLICY_LRU);
	run(dir, &spec, WSP_POLICY_PREDICT);
	t_rmrf(root);
	return 0;
}
