/*
 * Peak resident memory while streaming a pack four times larger than the
 * host budget stays within the documented bound:
 *
 *   host_cache_bytes + gpu_slots x slot_bytes (host backend: slots are host
 *   memory) + staging_bytes + decode workers' scratch + a fixed overhead
 *
 * The fixed overhead (program, libraries, thread stacks, allocator) is stated
 * here as WSP_FIXED_OVERHEAD and in wspager(3).  The pack is built in a child
 * process so that the parent's peak reflects the pager alone.
 */
#include <inttypes.h>

#include "rel.h"

#define WSP_FIXED_OVERHEAD (24ull << 20)

int main(void)
{
	const char *dir = t_scratch("membound");
	char pack[1024];
	snprintf(pack, sizeof(pack), "%s/m.wsp", dir);
	rel_make_pack(dir, pack, 16, 512, 1408, 4096);   /* ~75 MiB raw */

	wsp_pack *pk;
	char err[512];
	CHECK_RC(wsp_pack_open(pack, &pk, err, sizeof(err)), 0);
	struct wsp_pack_summary s;
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	uint64_t raw = s.raw_bytes, chunk = s.chunk_bytes;
	wsp_pack_close(pk);

	struct wsp_options opt;
	wsp_options_init(&opt);
	opt.device = WSP_DEVICE_HOST;
	opt.host_cache_bytes = raw / 4;
	opt.decode_threads = 2;
	wsp_pager *pg;
	int rc = wsp_open(pack, &opt, &pg, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "wsp_open: %s\n", err);
		return 1;
	}
	uint64_t verified = 0;
	for (int pass = 0; pass < 3; pass++)
		for (uint32_t l = 0; l < s.n_layers; l++)
			verified += rel_check_layer(pg, l);
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	uint64_t peak = rel_status_bytes("VmHWM");
	uint64_t scratch = (uint64_t)2 * 2 * chunk;   /* 2 workers: stored + decoded chunk */
	uint64_t bound = st.host_cache_bytes + (uint64_t)st.gpu_slots * st.slot_bytes +
			 st.staging_bytes + scratch + WSP_FIXED_OVERHEAD;
	printf("pack raw %" PRIu64 " KiB = %.1f x host budget %" PRIu64 " KiB\n", raw >> 10,
	       (double)raw / (double)st.host_cache_bytes, st.host_cache_bytes >> 10);
	printf("slots %u x %" PRIu64 " KiB, staging %" PRIu64 " KiB, decode scratch %" PRIu64 " KiB\n",
	       st.gpu_slots, st.slot_bytes >> 10, st.staging_bytes >> 10, scratch >> 10);
	printf("peak RSS %" PRIu64 " KiB, bound %" PRIu64 " KiB (fixed overhead %llu KiB)\n", peak >> 10,
	       bound >> 10, WSP_FIXED_OVERHEAD >> 10);
	CHECK(verified == 3 * raw);
	CHECK(raw >= 4 * st.host_cache_bytes - 4096);
	CHECK(st.bytes_read > 0);
	CHECK(peak > 0 && peak <= bound);
	wsp_close(pg);
	t_rmrf(dir);
	return 0;
}
