/* Raw copies of packed layers (hcache_add_raw, hcache_hand_raw): a copy of
 * each packed layer, decoded on the host, is handed out raw and holds
 * exactly the pack's tensors with zero padding, again after the copies
 * were dropped and made anew; without hand_raw, or after it is turned off,
 * references are packed again; hcache_use_raw switches between the forms
 * keeping the copies.  Copies take only what the budget leaves
 * beyond the arena (which holds the pack raw at most): a budget with room
 * for one copy makes one, then none (evicting nothing), and one more once
 * the first is dropped.  Packed bytes changed in memory make the copy fail
 * with WSP_ECHECKSUM, naming the layer, and the entry stays as it was. */
#include "cache_test.h"

static uint32_t pages(uint64_t bytes, uint64_t page)
{
	return (uint32_t)((bytes + page - 1) / page);
}

static void get_all(struct hcache *hc, uint32_t n, struct wspi_err *err)
{
	struct hcache_ref ref;
	for (uint32_t l = 0; l < n; l++) {
		CHECK_RC(hcache_get(hc, l, &ref, err), 0);
		hcache_put(hc, &ref);
	}
}

/* Every layer's reference: raw and right (want_raw), or packed. */
static void check_refs(struct hcache *hc, const struct t_pack_spec *spec, struct wsp_pack_s *pk,
		       uint32_t n, int want_raw, struct wspi_err *err)
{
	struct hcache_ref ref;
	for (uint32_t l = 0; l < n; l++) {
		CHECK_RC(hcache_get(hc, l, &ref, err), 0);
		CHECK(ref.packed == !want_raw);
		if (want_raw) {
			CHECK(ref.bytes == ref.raw_bytes);
			CHECK(ct_check_layer(spec, pk, &ref) == 0);
		} else {
			CHECK(ref.bytes == hcache_layer_bytes(hc, l) && ref.bytes < ref.raw_bytes);
		}
		hcache_put(hc, &ref);
	}
}

int main(void)
{
	const char *root = t_scratch("cache-raw-copy");
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/pack", root);
	const uint64_t page = 4096;
	struct t_pack_spec spec = {
		.layers = 4, .tensors_per_layer = 3, .tensor_bytes = 100002,
		.compressible = 1, .codec = WSP_CODEC_EXPRANS, .chunk_bytes = 32768,
	};
	CHECK_RC(t_make_pack(dir, &spec), 0);
	struct wsp_pack_s *pk = ct_open_pack(dir);
	const uint32_t n = pk->m.hdr->n_layers;
	struct hcache_config cfg;
	struct hcache *hc;
	struct hcache_stats hs;
	struct wspi_err err;
	wspi_err_init(&err);

	/* Room for everything: a copy of each layer, handed out raw. */
	ct_config(&cfg, WSP_IO_PREAD, 64ull << 20, page);
	cfg.keep_packed = 1;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
	get_all(hc, n, &err);
	hcache_hand_raw(hc, 1);
	check_refs(hc, &spec, pk, n, 0, &err);   /* no copies yet: packed */
	for (int round = 0; round < 2; round++) {   /* the second in reused pages */
		for (uint32_t l = 0; l < n; l++) {
			CHECK_RC(hcache_add_raw(hc, l, &err), 1);
			CHECK_RC(hcache_add_raw(hc, l, &err), 0);   /* has one */
		}
		CHECK(hcache_raw_layers(hc) == n);
		check_refs(hc, &spec, pk, n, 1, &err);
		/* Taking turns (the decode trial): packed, the copies kept. */
		hcache_use_raw(hc, 0);
		CHECK(hcache_raw_layers(hc) == n);
		check_refs(hc, &spec, pk, n, 0, &err);
		hcache_use_raw(hc, 1);
		check_refs(hc, &spec, pk, n, 1, &err);
		hcache_hand_raw(hc, 0);
		CHECK(hcache_raw_layers(hc) == 0);
		check_refs(hc, &spec, pk, n, 0, &err);
		hcache_hand_raw(hc, 1);
	}
	hcache_get_stats(hc, &hs);
	CHECK(hs.raw_copies == 2ull * n && hs.evictions == 0);

	/* Packed bytes changed in memory (a sign|mantissa byte of layer 2's
	 * first chunk, which its stream check does not see). */
	struct hcache_ref ref;
	CHECK_RC(hcache_get(hc, 2, &ref, &err), 0);
	struct hcache_piece pc[64];
	CHECK(hcache_pieces(hc, 2, pc, 64) > 0 && pc[0].exprans);
	uint64_t at = pc[0].at + pc[0].stored - 1;
	((uint8_t *)ref.pages[at / page])[at % page] ^= 0x01;
	hcache_put(hc, &ref);
	int rc = hcache_add_raw(hc, 2, &err);
	printf("packed bytes changed in memory: %s\n", err.msg);
	CHECK_RC(rc, WSP_ECHECKSUM);
	CHECK(strstr(err.msg, "raw copy of layer") && strstr(err.msg, pk->layers[2].name));
	CHECK(hcache_raw_layers(hc) == 0 && hcache_contains(hc, 2));
	CHECK_RC(hcache_get(hc, 2, &ref, &err), 0);
	CHECK(ref.packed);
	hcache_put(hc, &ref);
	hcache_destroy(hc);

	/* A budget with room for the pack raw (the arena's most) and one copy. */
	uint64_t arena = 0;
	for (uint32_t l = 0; l < n; l++)
		arena += pages(pk->layers[l].raw_bytes, page);
	ct_config(&cfg, WSP_IO_PREAD, (arena + pages(pk->layers[0].raw_bytes, page)) * page, page);
	cfg.keep_packed = 1;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
	hcache_hand_raw(hc, 1);
	get_all(hc, n, &err);
	CHECK_RC(hcache_add_raw(hc, 0, &err), 1);
	CHECK_RC(hcache_add_raw(hc, 1, &err), 0);   /* no room left: nothing evicted */
	hcache_get_stats(hc, &hs);
	CHECK(hs.evictions == 0 && hcache_raw_layers(hc) == 1);
	for (uint32_t l = 0; l < n; l++)
		CHECK(hcache_contains(hc, l));
	hcache_hand_raw(hc, 0);
	CHECK_RC(hcache_add_raw(hc, 1, &err), 1);   /* the first one's room */
	hcache_hand_raw(hc, 1);
	CHECK_RC(hcache_get(hc, 1, &ref, &err), 0);
	CHECK(!ref.packed && ct_check_layer(&spec, pk, &ref) == 0);
	hcache_put(hc, &ref);
	hcache_destroy(hc);   /* with a copy: freed with its entry */

	/* A budget the arena takes whole: no copy. */
	ct_config(&cfg, WSP_IO_PREAD, arena * page, page);
	cfg.keep_packed = 1;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
	get_all(hc, n, &err);
	CHECK_RC(hcache_add_raw(hc, 0, &err), 0);
	hcache_destroy(hc);

	pack_close(pk);
	wspi_err_destroy(&err);
	t_rmrf(root);
	return 0;
}
