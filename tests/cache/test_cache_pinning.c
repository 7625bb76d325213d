/* While the arena is still being pinned, a prefetch waits for the pages
 * to come rather than evicting what earlier prefetches read: a cold first
 * pass hinted layer after layer while pinning lagged evicted 2-3 layers
 * and read them again (4-9% more bytes from disk).  Pinning is held here
 * piece by piece: one layer is read into the one pinned piece, then two
 * more are hinted; nothing may be evicted, as all four pieces will come. */
#include "cache_test.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t moved = PTHREAD_COND_INITIALIZER;
static unsigned allowed, pinned;

static int pin(void *ctx, void *p, uint64_t len, struct wspi_err *err)
{
	(void)ctx, (void)p, (void)len, (void)err;
	pthread_mutex_lock(&lock);
	while (pinned >= allowed)
		pthread_cond_wait(&moved, &lock);
	pinned++;
	pthread_cond_broadcast(&moved);
	pthread_mutex_unlock(&lock);
	return 0;
}

static void unpin(void *ctx, void *p)
{
	(void)ctx, (void)p;
}

/* Let `n` pieces in all be pinned, and wait until they are. */
static void allow(unsigned n)
{
	pthread_mutex_lock(&lock);
	allowed = n;
	pthread_cond_broadcast(&moved);
	while (pinned < n)
		pthread_cond_wait(&moved, &lock);
	pthread_mutex_unlock(&lock);
}

int main(void)
{
	const char *root = t_scratch("cache-pinning");
	char dir[600];
	struct t_pack_spec spec = {
		.layers = 4, .tensors_per_layer = 2, .tensor_bytes = 40000,
		.compressible = 1, .codec = WSP_CODEC_ZSTD, .chunk_bytes = 8192,
	};
	snprintf(dir, sizeof(dir), "%s/p", root);
	CHECK_RC(t_make_pack(dir, &spec), 0);
	struct wsp_pack_s *pk = ct_open_pack(dir);
	const uint64_t page = 4096;
	uint64_t lp = (pk->m.layers[0].raw_bytes + page - 1) / page;
	struct hcache_config cfg;
	struct hcache *hc;
	struct wspi_err err;
	wspi_err_init(&err);

	/* Room for four layers, pinned one layer at a time. */
	ct_config(&cfg, WSP_IO_PREAD, 4 * lp * page, page);
	cfg.pin = pin;
	cfg.unpin = unpin;
	cfg.pin_piece_bytes = lp * page;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
	allow(1);
	/* The first layer is read on demand into the one pinned piece and
	 * used; then the next two are hinted. */
	struct hcache_ref ref;
	CHECK_RC(hcache_get(hc, 0, &ref, &err), 0);
	hcache_put(hc, &ref);
	for (uint32_t l = 1; l < 3; l++)
		CHECK(hcache_request(hc, l, 1) >= 0);
	allow(4);
	CHECK_RC(hcache_pin_wait(hc, &err), 0);
	for (uint32_t l = 0; l < 3; l++) {
		CHECK_RC(hcache_get(hc, l, &ref, &err), 0);
		CHECK(ct_check_layer(&spec, pk, &ref) == 0);
		hcache_put(hc, &ref);
	}
	struct hcache_stats st;
	hcache_get_stats(hc, &st);
	printf("loads %llu, prefetches %llu, evictions %llu, wasted %llu, misses %llu\n",
	       (unsigned long long)st.loads, (unsigned long long)st.prefetches,
	       (unsigned long long)st.evictions, (unsigned long long)st.prefetch_wasted,
	       (unsigned long long)st.misses);
	CHECK(st.evictions == 0 && st.prefetch_wasted == 0);
	CHECK(st.loads == 3 && st.prefetches == 2 && st.misses == 1);
	hcache_destroy(hc);

	pack_close(pk);
	wspi_err_destroy(&err);
	t_rmrf(root);
	return 0;
}
