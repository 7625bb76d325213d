/*
 * Soak: many passes with random branch patterns through the host backend.
 * Each batch runs shared layers, then one of several task-specific branches
 * chosen at random, then the shared tail; every tensor is checksummed on
 * every acquire; counters must stay consistent and resident memory must not
 * grow after warm-up.  make check runs a short soak; scripts/soak.sh runs
 * hundreds of passes (WSP_SOAK_PASSES).
 */
#include <inttypes.h>

#include "rel.h"

int main(void)
{
	const char *dir = t_scratch("soak");
	char pack[1024];
	snprintf(pack, sizeof(pack), "%s/m.wsp", dir);
	/* 12 blocks + embed/norm/head: 15 layers of ~0.4-1 MiB */
	rel_make_pack(dir, pack, 12, 256, 704, 2048);

	const char *env = getenv("WSP_SOAK_PASSES");
	unsigned passes = env ? (unsigned)atoi(env) : 40;
	struct wsp_options opt;
	wsp_options_init(&opt);
	opt.device = WSP_DEVICE_HOST;
	opt.host_cache_bytes = 6ull << 20;   /* about half the model */
	opt.page_bytes = 256 << 10;
	opt.decode_threads = 2;
	wsp_pager *pg;
	char err[512];
	int rc = wsp_open(pack, &opt, &pg, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "wsp_open: %s\n", err);
		return 1;
	}
	const wsp_pack *pk = wsp_pager_pack(pg);
	struct wsp_pack_summary s;
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	uint32_t n = s.n_layers;
	CHECK(n >= 10);
	/* layers 0..3 shared head, 4..n-4 three branches of blocks, rest shared tail */
	unsigned branches = 3, first_branch = 4, tail = n - 3;
	unsigned per_branch = (tail - first_branch) / branches;
	CHECK(per_branch >= 1);

	uint64_t seed = 12345, rss_warm = 0, verified = 0, acquires = 0;
	for (unsigned p = 0; p < passes; p++) {
		for (uint32_t l = 0; l < first_branch; l++, acquires++)
			verified += rel_check_layer(pg, l);
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		unsigned b = (unsigned)(seed >> 33) % branches;
		for (unsigned k = 0; k < per_branch; k++, acquires++)
			verified += rel_check_layer(pg, first_branch + b * per_branch + k);
		for (uint32_t l = tail; l < n; l++, acquires++)
			verified += rel_check_layer(pg, l);
		if (p == 4)
			rss_warm = rel_status_bytes("VmRSS");
	}
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	uint64_t rss_end = rel_status_bytes("VmRSS");
	printf("passes %u, acquires %" PRIu64 ", verified %" PRIu64 " bytes\n", passes, acquires, verified);
	printf("gpu hits %" PRIu64 ", host hits %" PRIu64 ", misses %" PRIu64 ", read %" PRIu64 " bytes\n",
	       st.gpu_hits, st.host_hits, st.misses, st.bytes_read);
	printf("VmRSS after warm-up %" PRIu64 " KiB, at end %" PRIu64 " KiB\n", rss_warm >> 10, rss_end >> 10);
	/* counters consistent */
	CHECK(st.acquires == acquires);
	CHECK(st.gpu_hits + st.host_hits + st.misses == st.acquires);
	CHECK(st.bytes_read > 0 && st.bytes_decoded >= st.bytes_read);
	/* no growth after warm-up beyond allocator noise (1 MiB) */
	if (passes > 5)
		CHECK(rss_end <= rss_warm + (1u << 20));
	wsp_close(pg);
	t_rmrf(dir);
	return 0;
}
