/* Several threads get, check and put random layers, and prefetch others,
 * through a cache that holds a third of the pack: no deadlock, every byte
 * right, every get either served or refused with -ENOSPC only when the
 * threads together hold every page (they never hold more than one layer
 * each here, so that never happens), and the counters add up.
 * Meant to be run under ASan and, by hand, under TSan/helgrind too. */
#include "cache_test.h"

#define THREADS 4
#define ROUNDS 150

struct ctx {
	const struct t_pack_spec *spec;
	struct wsp_pack_s *pk;
	struct hcache *hc;
	unsigned seed;
	int failed;
};

static void *worker(void *arg)
{
	struct ctx *c = arg;
	uint32_t n = c->pk->m.hdr->n_layers;
	struct wspi_err err;
	wspi_err_init(&err);
	for (int r = 0; r < ROUNDS && !c->failed; r++) {
		uint32_t l = (uint32_t)rand_r(&c->seed) % n;
		struct hcache_ref ref;
		int rc = hcache_get(c->hc, l, &ref, &err);
		if (rc < 0) {
			fprintf(stderr, "get %u: %s (%s)\n", l, wsp_strerror(rc), err.msg);
			c->failed = 1;
			break;
		}
		if (ct_check_layer(c->spec, c->pk, &ref))
			c->failed = 1;
		int p = hcache_request(c->hc, (l + 1 + (uint32_t)rand_r(&c->seed) % 3) % n, 1);
		if (p != 0 && p != 1 && p != -ENOSPC)
			c->failed = 1;
		hcache_put(c->hc, &ref);
		if (rand_r(&c->seed) % 4 == 0 && hcache_try_get(c->hc, l, &ref) == 1) {
			if (ct_check_layer(c->spec, c->pk, &ref))
				c->failed = 1;
			hcache_put(c->hc, &ref);
		}
	}
	wspi_err_destroy(&err);
	return NULL;
}

int main(void)
{
	const char *root = t_scratch("cache-threads");
	char dir[600];
	struct t_pack_spec spec = {
		.layers = 12, .tensors_per_layer = 2, .tensor_bytes = 24000,
		.compressible = 1, .codec = WSP_CODEC_ZSTD, .chunk_bytes = 8192,
	};
	snprintf(dir, sizeof(dir), "%s/p", root);
	CHECK_RC(t_make_pack(dir, &spec), 0);
	for (int pol = 0; pol < 2; pol++) {
		struct wsp_pack_s *pk = ct_open_pack(dir);
		const uint64_t page = 4096;
		uint64_t lp = (pk->m.layers[0].raw_bytes + page - 1) / page;
		struct predictor *pred;
		CHECK_RC(predictor_create(pk->m.hdr->n_layers, &pred), 0);
		struct hcache_config cfg;
		struct hcache *hc;
		struct wspi_err err;
		wspi_err_init(&err);
		/* THREADS + 1 layers: a get always finds room once loads end. */
		ct_config(&cfg, WSP_IO_PREAD, (THREADS + 1) * lp * page, page);
		cfg.policy = pol ? WSP_POLICY_PREDICT : WSP_POLICY_LRU;
		cfg.predictor = pred;
		cfg.staging_bytes = 1;
		CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
		pthread_t t[THREADS];
		struct ctx c[THREADS];
		for (int i = 0; i < THREADS; i++) {
			c[i] = (struct ctx){ &spec, pk, hc, 1234u + (unsigned)i * 77u + (unsigned)pol, 0 };
			CHECK(pthread_create(&t[i], NULL, worker, &c[i]) == 0);
		}
		for (int i = 0; i < THREADS; i++) {
			pthread_join(t[i], NULL);
			CHECK(!c[i].failed);
		}
		struct hcache_stats st;
		hcache_get_stats(hc, &st);
		CHECK(st.load_failures == 0);
		CHECK(st.misses + st.prefetches == st.loads);
		CHECK(st.hits + st.misses >= THREADS * ROUNDS);
		CHECK(st.prefetch_wasted <= st.prefetches);
		hcache_destroy(hc);
		predictor_free(pred);
		pack_close(pk);
		wspi_err_destroy(&err);
	}
	t_rmrf(root);
	return 0;
}
