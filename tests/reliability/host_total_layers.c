/*
 * WSP_OPEN_HOST_TOTAL bounds the pager's host memory whatever the layer
 * count: with 6 000 tiny layers the per-layer bookkeeping (the pack's
 * tables and manifest, the predictor, the cache's chunk table) is tens of
 * MB, and it counts within host_cache_bytes.  The resident memory grown by
 * an open and two passes stays within the budget; a budget too small for
 * the tables is refused, naming them.  Host backend.
 */
#include <inttypes.h>

#include "rel.h"

#define LAYERS 6000

static uint64_t resident_bytes(void)
{
	unsigned long pages[2] = {0, 0};
	FILE *f = fopen("/proc/self/statm", "r");
	CHECK(f && fscanf(f, "%lu %lu", &pages[0], &pages[1]) == 2);
	fclose(f);
	return (uint64_t)pages[1] * (uint64_t)sysconf(_SC_PAGESIZE);
}

static int open_total(const char *pack, uint64_t budget, wsp_pager **pg, char *err, size_t len)
{
	struct wsp_options o;
	wsp_options_init(&o);
	o.device = WSP_DEVICE_HOST;
	o.host_cache_bytes = budget;
	o.gpu_slots = 2;
	o.flags = WSP_OPEN_HOST_TOTAL;
	return wsp_open(pack, &o, pg, err, len);
}

int main(void)
{
	const char *dir = t_scratch("htlayers");
	char pack[1024], small[1024], err[512];
	snprintf(pack, sizeof(pack), "%s/many.wsp", dir);
	snprintf(small, sizeof(small), "%s/small.wsp", dir);
	rel_make_pack(dir, pack, LAYERS, 8, 8, 16);
	rel_make_pack(dir, small, 2, 8, 8, 16);

	/* Warm up: the library's code and the allocator's first arenas are
	 * not per-layer costs. */
	wsp_pager *pg;
	CHECK_RC(open_total(small, 16 << 20, &pg, err, sizeof(err)), 0);
	for (uint32_t l = 0; l < 3; l++)
		rel_check_layer(pg, l);
	wsp_close(pg);

	/* Too small for the tables of 6 000 layers: refused, saying why. */
	CHECK_RC(open_total(pack, 8 << 20, &pg, err, sizeof(err)), WSP_ETOOBIG);
	printf("8 MiB: %s\n", err);
	CHECK(strstr(err, "tables of 6003 layers") != NULL);

	uint64_t budget = 72ull << 20, before = resident_bytes();
	int rc = open_total(pack, budget, &pg, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "wsp_open: %s\n", err);
		return 1;
	}
	struct wsp_pack_summary s;
	CHECK_RC(wsp_pack_summary(wsp_pager_pack(pg), &s), 0);
	uint64_t verified = 0;
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < s.n_layers; l++)
			verified += rel_check_layer(pg, l);
	uint64_t grown = resident_bytes() - before;
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("%u layers, %u tensors: budget %" PRIu64 " KiB, cache %" PRIu64 " KiB, resident "
	       "memory grown by %" PRIu64 " KiB\n", s.n_layers, s.n_tensors, budget >> 10,
	       st.host_cache_bytes >> 10, grown >> 10);
	CHECK(verified == 2 * s.raw_bytes);
	/* (Not under AddressSanitizer, whose redzones, quarantine and shadow
	 * come on top of every allocation: there the refusal above is what is
	 * checked.) */
#if defined(__SANITIZE_ADDRESS__)
	printf("resident memory not checked: AddressSanitizer's own memory comes on top\n");
#else
	CHECK(grown <= budget);
#endif
	wsp_close(pg);
	t_rmrf(dir);
	return 0;
}
