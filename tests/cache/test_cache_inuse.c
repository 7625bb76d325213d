/* Entries in use are never evicted.
 *  - With every page referenced, a prefetch and a demand request return
 *    -ENOSPC and a get returns -ENOSPC with a message naming the layer
 *    (instead of waiting forever); the referenced layers stay intact.
 *  - Releasing one reference lets the get evict exactly that layer.
 *  - A layer still being read (held back in the I/O fault hook) is not
 *    evicted either: requests that would need its pages are refused, and
 *    once the read goes on it completes intact. */
#include "cache_test.h"

struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int armed, open, waiting;
	uint64_t lo[2], hi[2];   /* file ranges to hold back (a layer's each) */
};

static int gate_fault(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	struct gate *g = ctx;
	pthread_mutex_lock(&g->lock);
	int hold = 0;
	for (int k = 0; k < g->armed; k++)
		hold |= off >= g->lo[k] && off < g->hi[k];
	if (hold) {
		g->waiting++;
		pthread_cond_broadcast(&g->cond);
		while (!g->open)
			pthread_cond_wait(&g->cond, &g->lock);
	}
	pthread_mutex_unlock(&g->lock);
	return 0;
}

int main(void)
{
	const char *root = t_scratch("cache-inuse");
	char dir[600];
	struct t_pack_spec spec = {
		.layers = 6, .tensors_per_layer = 2, .tensor_bytes = 50000,
		.compressible = 0, .codec = WSP_CODEC_ZSTD, .chunk_bytes = 16384,
	};
	snprintf(dir, sizeof(dir), "%s/p", root);
	CHECK_RC(t_make_pack(dir, &spec), 0);
	struct wsp_pack_s *pk = ct_open_pack(dir);
	const uint64_t page = 4096;
	uint64_t lp = (pk->m.layers[0].raw_bytes + page - 1) / page;

	struct gate g = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
	struct hcache_config cfg;
	struct hcache *hc;
	struct wspi_err err;
	wspi_err_init(&err);
	ct_config(&cfg, WSP_IO_PREAD, 3 * lp * page, page);   /* three layers fit */
	cfg.io.fault = gate_fault;
	cfg.io.fault_ctx = &g;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);

	struct hcache_ref r[3], x;
	for (uint32_t l = 0; l < 3; l++)
		CHECK_RC(hcache_get(hc, l, &r[l], &err), 0);
	CHECK_RC(hcache_request(hc, 3, 1), -ENOSPC);
	CHECK_RC(hcache_request(hc, 3, 0), -ENOSPC);
	CHECK_RC(hcache_get(hc, 4, &x, &err), -ENOSPC);
	fprintf(stderr, "expected failure: %s\n", err.msg);
	CHECK(strstr(err.msg, "model.layers.4") && strstr(err.msg, "in use"));
	CHECK(hcache_try_get(hc, 4, &x) == 0);
	for (uint32_t l = 0; l < 3; l++)
		CHECK(ct_check_layer(&spec, pk, &r[l]) == 0);
	struct hcache_stats st;
	hcache_get_stats(hc, &st);
	CHECK(st.evictions == 0);

	/* Release layer 1 only: the get of 4 evicts it, nothing else. */
	hcache_put(hc, &r[1]);
	CHECK_RC(hcache_get(hc, 4, &x, &err), 0);
	CHECK(ct_check_layer(&spec, pk, &x) == 0);
	CHECK(!hcache_contains(hc, 1));
	CHECK(hcache_contains(hc, 0) && hcache_contains(hc, 2));
	CHECK(ct_check_layer(&spec, pk, &r[0]) == 0 && ct_check_layer(&spec, pk, &r[2]) == 0);
	hcache_put(hc, &x);
	hcache_put(hc, &r[2]);

	/* Hold the reads of layers 5 and 3 back; 0 stays referenced.  Layer 5
	 * takes the pages of 4 or 2 (unreferenced), then one unreferenced layer
	 * is left; a request for 3 evicts it; a request for 1 finds nothing
	 * (3 must still be loading then: a read let through could finish
	 * first and leave 3 evictable, as it did on a slow sanitizer run). */
	const struct wspm_layer *L5 = &pk->m.layers[5], *L3 = &pk->m.layers[3];
	pthread_mutex_lock(&g.lock);
	g.lo[0] = L5->offset;
	g.hi[0] = L5->offset + L5->stored_bytes;
	g.lo[1] = L3->offset;
	g.hi[1] = L3->offset + L3->stored_bytes;
	g.armed = 2;
	pthread_mutex_unlock(&g.lock);
	CHECK_RC(hcache_request(hc, 5, 1), 1);
	pthread_mutex_lock(&g.lock);
	while (!g.waiting)
		pthread_cond_wait(&g.cond, &g.lock);
	pthread_mutex_unlock(&g.lock);
	CHECK(!hcache_contains(hc, 5));
	CHECK(hcache_try_get(hc, 5, &x) == 0);
	CHECK_RC(hcache_request(hc, 3, 0), 1);
	CHECK_RC(hcache_request(hc, 1, 0), -ENOSPC);   /* 0 in use, 5 loading, 3 loading */
	CHECK_RC(hcache_request(hc, 1, 1), -ENOSPC);
	pthread_mutex_lock(&g.lock);
	g.open = 1;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
	CHECK_RC(hcache_get(hc, 5, &x, &err), 0);
	CHECK(ct_check_layer(&spec, pk, &x) == 0);
	hcache_put(hc, &x);
	CHECK_RC(hcache_get(hc, 3, &x, &err), 0);
	CHECK(ct_check_layer(&spec, pk, &x) == 0);
	hcache_put(hc, &x);
	CHECK(ct_check_layer(&spec, pk, &r[0]) == 0);
	hcache_put(hc, &r[0]);

	hcache_destroy(hc);
	pack_close(pk);
	wspi_err_destroy(&err);
	t_rmrf(root);
	return 0;
}
