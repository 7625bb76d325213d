/* Every layer read through the host tier equals the original bit for bit:
 * raw and zstd packs, odd tensor sizes, pages that split chunks, staging
 * small enough that a layer is read in many slices, for every I/O backend.
 * A second pass over the same layers is served from the cache: hits only,
 * nothing read or decoded again. */
#include "cache_test.h"

static int run(const char *dir, const struct t_pack_spec *spec, enum wsp_io_backend be,
	       uint64_t page, uint64_t staging)
{
	struct wsp_pack_s *pk = ct_open_pack(dir);
	struct hcache_config cfg;
	struct hcache *hc;
	struct wspi_err err;
	wspi_err_init(&err);
	ct_config(&cfg, be, 256ull << 20, page);
	cfg.staging_bytes = staging;
	int rc = hcache_create(&cfg, pk, &hc, &err);
	if (rc < 0 && be == WSP_IO_URING && ct_uring_refused(rc)) {
		fprintf(stderr, "uring refused (%s): skipping that backend\n", err.msg);
		pack_close(pk);
		wspi_err_destroy(&err);
		return 77;
	}
	if (rc < 0)
		fprintf(stderr, "hcache_create: %s\n", err.msg);
	CHECK_RC(rc, 0);
	uint32_t n = pk->m.hdr->n_layers;
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t l = 0; l < n; l++) {
			struct hcache_ref ref;
			rc = hcache_get(hc, l, &ref, &err);
			if (rc < 0)
				fprintf(stderr, "get %u: %s\n", l, err.msg);
			CHECK_RC(rc, 0);
			CHECK(hcache_contains(hc, l));
			CHECK(ct_check_layer(spec, pk, &ref) == 0);
			hcache_put(hc, &ref);
		}
		struct hcache_stats st;
		hcache_get_stats(hc, &st);
		if (pass == 0) {
			CHECK(st.misses == n && st.hits == 0 && st.evictions == 0);
			uint64_t stored = 0, raw = 0;
			for (uint64_t c = 0; c < pk->m.hdr->n_chunks; c++) {
				stored += pk->m.chunks[c].stored_bytes;
				raw += pk->m.chunks[c].raw_bytes;
			}
			CHECK(st.bytes_decoded == raw);
			CHECK(st.bytes_read >= stored);
			hcache_reset_stats(hc);
		} else {
			CHECK(st.hits == n && st.misses == 0);
			CHECK(st.bytes_read == 0 && st.bytes_decoded == 0 && st.loads == 0);
		}
	}
	hcache_destroy(hc);
	pack_close(pk);
	wspi_err_destroy(&err);
	return 0;
}

int main(void)
{
	const char *root = t_scratch("cache-rt");
	char raw_dir[600], zst_dir[600];
	/* Odd sizes (U8 words), several chunks per tensor, several shards. */
	struct t_pack_spec raw = {
		.layers = 5, .tensors_per_layer = 3, .tensor_bytes = 70001,
		.compressible = 0, .codec = WSP_CODEC_RAW, .chunk_bytes = 16384,
		.shard_bytes = 300000,
	};
	struct t_pack_spec zst = {
		.layers = 4, .tensors_per_layer = 4, .tensor_bytes = 90000,
		.compressible = 1, .codec = WSP_CODEC_ZSTD, .chunk_bytes = 32768,
	};
	snprintf(raw_dir, sizeof(raw_dir), "%s/raw", root);
	snprintf(zst_dir, sizeof(zst_dir), "%s/zst", root);
	CHECK_RC(t_make_pack(raw_dir, &raw), 0);
	CHECK_RC(t_make_pack(zst_dir, &zst), 0);

	const enum wsp_io_backend bes[] = { WSP_IO_URING, WSP_IO_PREAD, WSP_IO_MMAP };
	/* 4 KiB pages split every chunk; 12 KiB ones split some; 2 MiB none. */
	const uint64_t pages[] = { 4096, 12288, 2ull << 20 };
	for (unsigned b = 0; b < WSP_ARRAY_SIZE(bes); b++) {
		int skipped = 0;
		for (unsigned p = 0; p < WSP_ARRAY_SIZE(pages) && !skipped; p++)
			/* 0: default staging; 1 byte: the minimum, two small slots,
			 * so that every layer is read in many slices. */
			for (int s = 0; s < 2 && !skipped; s++) {
				if (run(raw_dir, &raw, bes[b], pages[p], s ? 1 : 0) == 77 ||
				    run(zst_dir, &zst, bes[b], pages[p], s ? 1 : 0) == 77)
					skipped = 1;
			}
	}
	t_rmrf(root);
	return 0;
}
