/* WSP_OPEN_HOST_TOTAL: host_cache_bytes bounds all the pager's host memory.
 * Without it the cache is the budget, or every layer at once if that is
 * less (a cache past the pack would lock memory it can never fill).
 * The cache, the read staging (at most an eighth of the budget) and the
 * host-backend slots together stay within it, the cache being what is left;
 * every layer still reads back intact; a budget whose rest cannot hold the
 * largest layer is WSP_ETOOBIG, saying what the rest took.  Host backend. */
#include <inttypes.h>

#include "pager_util.h"

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats plain, total;
	const struct wsp_layer *L;
	char err[512];
	wsp_pager *pg;

	t_model_make(&m, "host-total", 6, 256, 512);
	t_host_options(&o, &m, 100, 3);
	/* whole pages of 64 KiB, so that the plain cache is the budget exactly */
	uint64_t budget = (o.host_cache_bytes + 3 * m.sum.max_layer_raw_bytes + (4 << 20)) >> 16 << 16;
	/* ... unless that is more than every layer at once, in whole pages:
	 * the cache takes no more than the pack can fill */
	uint64_t most = 0;
	wsp_pack *pk;
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	for (uint32_t i = 0; i < m.sum.n_layers; i++)
		most += (wsp_pack_layer(pk, i)->raw_bytes + (64 << 10) - 1) >> 16 << 16;
	wsp_pack_close(pk);

	o.host_cache_bytes = budget;   /* without the flag: the cache alone */
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	CHECK_RC(wsp_get_stats(pg, &plain), 0);
	wsp_close(pg);
	CHECK(plain.host_cache_bytes == (budget < most ? budget : most));
	/* a budget past the pack: the cache is the pack, in whole pages */
	o.host_cache_bytes = 4 * most;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	CHECK_RC(wsp_get_stats(pg, &plain), 0);
	wsp_close(pg);
	CHECK(plain.host_cache_bytes == most);
	o.host_cache_bytes = budget;

	o.flags |= WSP_OPEN_HOST_TOTAL;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	CHECK_RC(wsp_get_stats(pg, &total), 0);
	uint64_t slots = (uint64_t)total.gpu_slots * total.slot_bytes;
	printf("budget %" PRIu64 ": cache %" PRIu64 " + staging %" PRIu64 " + slots %" PRIu64
	       " (without the flag: cache %" PRIu64 " + staging %" PRIu64 ")\n", budget,
	       total.host_cache_bytes, total.staging_bytes, slots, plain.host_cache_bytes,
	       plain.staging_bytes);
	CHECK(total.host_cache_bytes + total.staging_bytes + slots <= budget);
	CHECK(total.staging_bytes <= budget / 8);
	CHECK(total.host_cache_bytes >= m.sum.max_layer_raw_bytes);
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < m.sum.n_layers; i++) {
			CHECK_RC(wsp_acquire(pg, i, NULL, &L), 0);
			CHECK(t_view_bad(L) == 0);
			CHECK_RC(wsp_release(pg, i, NULL), 0);
		}
	wsp_close(pg);

	/* Enough for the largest layer alone, not for it and the rest. */
	o.host_cache_bytes = m.sum.max_layer_raw_bytes + (64 << 10);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), WSP_ETOOBIG);
	printf("too small: %s\n", err);
	CHECK(strstr(err, "for staging, decode buffers and slots") != NULL);
	CHECK(strstr(err, "needs at least") != NULL);
	t_model_remove(&m);
	return 0;
}
