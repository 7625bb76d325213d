/* keep_packed: the host tier keeps an EXPRANS pack's chunks as stored.
 * Each layer takes fewer bytes than raw; its pieces (hcache_pieces), each
 * decoded with the C reference (or copied when raw) to its destination,
 * give exactly the pack's tensors with zero padding.  The host checks the
 * stored bytes of each EXPRANS chunk against the check the pack records and
 * decodes none of them (only raw chunks are copied); a chunk whose stream
 * is intact but whose bytes were changed (sign|mantissa, which no stream
 * check sees) fails the load with WSP_ECHECKSUM.  A pack written without
 * stored checks is still read: the host then decodes each chunk to check
 * its raw checksum, which catches the same change.  Without keep_packed
 * the pack is cached raw. */
#include <fcntl.h>
#include <sys/stat.h>
#include "cache_test.h"
#include "pack/exprans/exprans.h"

/* The layer's raw layout rebuilt from its packed pieces. */
static void unpack_on_host(struct hcache *hc, const struct wsp_pack_s *pk,
			   const struct hcache_ref *ref, uint8_t *raw)
{
	struct hcache_piece pc[256];
	uint32_t n = hcache_pieces(hc, ref->layer, pc, 256);
	CHECK(n > 0 && n < 256);
	memset(raw, 0, ref->raw_bytes);
	for (uint32_t i = 0; i < n; i++) {
		CHECK(pc[i].at % 16 == 0 && pc[i].at + pc[i].stored <= ref->bytes);
		CHECK(pc[i].dst + pc[i].raw <= ref->raw_bytes);
		uint8_t *stored = malloc(pc[i].stored ? pc[i].stored : 1);
		CHECK(stored);
		ct_copy_out(ref, pc[i].at, stored, pc[i].stored);
		if (pc[i].exprans) {
			struct wspi_err err;
			wspi_err_init(&err);
			unsigned w = exprans_value_bytes(pk->m.tensors[pc[i].tensor].dtype);
			CHECK(w != 0);
			CHECK_RC(exprans_decode(stored, pc[i].stored, raw + pc[i].dst, pc[i].raw / w, w,
						pc[i].layout, &err), 0);
			wspi_err_destroy(&err);
		} else {
			CHECK(pc[i].stored == pc[i].raw);
			memcpy(raw + pc[i].dst, stored, pc[i].raw);
		}
		free(stored);
	}
}

static int check_raw(const struct t_pack_spec *spec, struct wsp_pack_s *pk, uint32_t layer,
		     const uint8_t *raw)
{
	const struct wspi_manifest *m = &pk->m;
	const struct wspm_layer *L = &m->layers[layer];
	uint8_t *want = calloc(1, L->raw_bytes);
	CHECK(want);
	for (uint32_t t = L->first_tensor; t < L->first_tensor + L->n_tensors; t++) {
		const struct wspm_tensor *T = &m->tensors[t];
		t_expected_tensor(spec, ct_tensor_number(spec, wspm_str(m, T->name_off)),
				  want + T->layer_offset, T->raw_bytes);
	}
	int bad = memcmp(want, raw, L->raw_bytes) != 0;
	free(want);
	return bad;
}

/* Bytes of the chunks of `codec` in layer l (stored if `stored`, else raw). */
static uint64_t codec_bytes(const struct wspi_manifest *m, uint32_t l, int codec, int stored)
{
	const struct wspm_layer *L = &m->layers[l];
	uint64_t n = 0;
	for (uint32_t t = L->first_tensor; t < L->first_tensor + L->n_tensors; t++)
		for (uint64_t k = 0; k < m->tensors[t].n_chunks; k++) {
			const struct wspm_chunk *c = &m->chunks[m->tensors[t].first_chunk + k];
			if (c->codec == codec)
				n += stored ? c->stored_bytes : c->raw_bytes;
		}
	return n;
}

/* The pack as a writer without stored checks would have made it. */
static void strip_stored_checks(const char *dir)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/manifest.wspm", dir);
	int fd = open(path, O_RDWR);
	struct stat st;
	CHECK(fd >= 0 && fstat(fd, &st) == 0);
	unsigned char *f = malloc((size_t)st.st_size);
	CHECK(f && pread(fd, f, (size_t)st.st_size, 0) == st.st_size);
	struct wspm_header *h = (struct wspm_header *)f;
	struct wspm_chunk *c = (struct wspm_chunk *)(f + h->chunks_off);
	uint64_t had = 0;
	for (uint64_t i = 0; i < h->n_chunks; i++) {
		had += wspm_chunk_stored_check(&c[i]) != 0;
		wspm_chunk_set_stored_check(&c[i], 0);
	}
	CHECK(had > 0);
	h->checksum = wspm_checksum(f, (uint64_t)st.st_size);
	CHECK(pwrite(fd, f, (size_t)st.st_size, 0) == st.st_size && fsync(fd) == 0);
	close(fd);
	free(f);
}

/* Layer 1 of the pack in dir, loaded packed: its error, and the bytes the
 * host decoded for the layers it loaded (0 and 1). */
static int load_layer1(const char *dir, struct wspi_err *err, uint64_t *decoded)
{
	struct wsp_pack_s *pk = ct_open_pack(dir);
	struct hcache_config cfg;
	struct hcache *hc;
	struct hcache_ref ref;
	struct hcache_stats hs;
	ct_config(&cfg, WSP_IO_PREAD, 64ull << 20, 4096);
	cfg.keep_packed = 1;
	CHECK_RC(hcache_create(&cfg, pk, &hc, err), 0);
	int rc = hcache_get(hc, 1, &ref, err);
	CHECK_RC(hcache_get(hc, 0, &ref, err), 0);
	hcache_put(hc, &ref);
	hcache_get_stats(hc, &hs);
	*decoded = hs.bytes_decoded;
	hcache_destroy(hc);
	pack_close(pk);
	return rc;
}

int main(void)
{
	const char *root = t_scratch("cache-packed");
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/pack", root);
	struct t_pack_spec spec = {
		.layers = 3, .tensors_per_layer = 3, .tensor_bytes = 100002,
		.compressible = 1, .codec = WSP_CODEC_EXPRANS, .chunk_bytes = 32768,
	};
	CHECK_RC(t_make_pack(dir, &spec), 0);
	struct wsp_pack_s *pk = ct_open_pack(dir);
	const struct wspi_manifest *m = &pk->m;
	struct hcache_config cfg;
	struct hcache *hc;
	struct hcache_ref ref;
	struct wspi_err err;
	wspi_err_init(&err);

	for (int packed = 1; packed >= 0; packed--) {
		ct_config(&cfg, WSP_IO_PREAD, 64ull << 20, 4096);
		cfg.keep_packed = packed;
		CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
		uint64_t raw_total = 0, kept = 0;
		for (uint32_t l = 0; l < m->hdr->n_layers; l++) {
			CHECK_RC(hcache_get(hc, l, &ref, &err), 0);
			CHECK(ref.packed == packed);
			CHECK(ref.bytes == hcache_layer_bytes(hc, l));
			raw_total += ref.raw_bytes;
			kept += ref.bytes;
			if (packed) {
				uint8_t *raw = malloc(ref.raw_bytes);
				CHECK(raw);
				unpack_on_host(hc, pk, &ref, raw);
				CHECK(check_raw(&spec, pk, l, raw) == 0);
				free(raw);
			} else {
				struct hcache_piece one;
				CHECK(ref.bytes == ref.raw_bytes && hcache_pieces(hc, l, &one, 1) == 0);
				CHECK(ct_check_layer(&spec, pk, &ref) == 0);
			}
			hcache_put(hc, &ref);
		}
		struct hcache_stats hs;
		hcache_get_stats(hc, &hs);
		uint64_t copied = 0, chunks = 0;
		for (uint32_t l = 0; l < m->hdr->n_layers; l++) {
			copied += codec_bytes(m, l, WSP_CODEC_RAW, 0);
			for (int k = WSP_CODEC_ZSTD; k <= WSP_CODEC_EXPRANS; k++)
				chunks += codec_bytes(m, l, k, 0);
		}
		printf("%s: %" PRIu64 " bytes in the cache for %" PRIu64 " raw (%.3fx); the host "
		       "decoded %" PRIu64 " bytes\n", packed ? "packed" : "raw", kept, raw_total,
		       (double)raw_total / (double)kept, hs.bytes_decoded);
		CHECK(packed ? kept * 14 < raw_total * 10 : kept == raw_total);
		/* Packed, the host only copies the raw chunks. */
		CHECK(hs.bytes_decoded == (packed ? copied : chunks) && copied < chunks / 50);
		hcache_destroy(hc);
	}

	/* A sign|mantissa byte of layer 1's first chunk changed: the stream
	 * still decodes, only the checks see it. */
	const struct wspm_layer *L = &m->layers[1];
	const struct wspm_chunk *c = &m->chunks[m->tensors[L->first_tensor].first_chunk];
	CHECK(c->codec == WSP_CODEC_EXPRANS && wspm_chunk_stored_check(c) != 0);
	char shard[700], name[256];
	snprintf(name, sizeof(name), "%s", wspm_str(m, L->name_off));
	pack_shard_path(pk, L->shard, shard, sizeof(shard));
	uint64_t at = c->offset + c->stored_bytes - 1;   /* the last value's sign|mantissa */
	/* Layer 1's load fails, but its workers may have handled some of its
	 * other chunks before they saw the failure: those count too. */
	uint64_t layer0_copied = codec_bytes(m, 0, WSP_CODEC_RAW, 0);
	uint64_t layer0_packed = codec_bytes(m, 0, WSP_CODEC_EXPRANS, 0);
	uint64_t layer1_copied = codec_bytes(m, 1, WSP_CODEC_RAW, 0);
	uint64_t layer1_packed = codec_bytes(m, 1, WSP_CODEC_EXPRANS, 0);
	pack_close(pk);
	int fd = open(shard, O_RDWR);
	unsigned char b;
	CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)at) == 1);
	b ^= 0x01;
	CHECK(pwrite(fd, &b, 1, (off_t)at) == 1 && fsync(fd) == 0);
	close(fd);

	uint64_t decoded;
	int rc = load_layer1(dir, &err, &decoded);
	printf("changed byte in a packed layer: %s\n", err.msg);
	CHECK_RC(rc, WSP_ECHECKSUM);
	CHECK(strstr(err.msg, name) && strstr(err.msg, "stored bytes"));
	/* no exprans chunk decoded: only raw chunks copied */
	CHECK(decoded >= layer0_copied && decoded <= layer0_copied + layer1_copied);

	/* Without stored checks the host decodes to check, and still sees it. */
	strip_stored_checks(dir);
	rc = load_layer1(dir, &err, &decoded);
	printf("the same pack without stored checks: %s\n", err.msg);
	CHECK_RC(rc, WSP_ECHECKSUM);
	CHECK(strstr(err.msg, name) && strstr(err.msg, "chunk checksum"));
	/* all of layer 0 decoded to be checked */
	CHECK(decoded >= layer0_copied + layer0_packed &&
	      decoded <= layer0_copied + layer0_packed + layer1_copied + layer1_packed);

	wspi_err_destroy(&err);
	t_rmrf(root);
	return 0;
}
