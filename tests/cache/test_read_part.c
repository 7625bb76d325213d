/* wsp_pack_read_part: for 1 to 7 parts, every layer's parts follow each
 * other, hold whole chunks, and together give exactly its packed form,
 * built here from the pack's own pieces (EXPRANS chunks' stored bytes from
 * the shard, the others' raw bytes from wsp_pack_read_layer) and, where
 * the host tier keeps the layer packed, the same bytes the host tier holds;
 * their readers together read the layer's stored bytes once.  Damaged
 * bytes fail exactly the part that holds them, naming the chunk; the other
 * parts still read.  A small buffer is -EINVAL, a part past the count
 * -EINVAL, an unknown layer WSP_ENOTFOUND. */
#include <fcntl.h>
#include <unistd.h>
#include "cache_test.h"

/* Layer l's packed form built from its pieces; *len its size. */
static uint8_t *packed_form(struct wsp_pack_s *pk, uint32_t l, uint64_t *len)
{
	const struct wspi_manifest *m = &pk->m;
	const struct wspm_layer *L = &m->layers[l];
	uint8_t *raw = malloc(L->raw_bytes ? L->raw_bytes : 1);
	uint8_t *stored = malloc(L->stored_bytes ? L->stored_bytes : 1);
	uint8_t *out = calloc(1, 2 * L->raw_bytes + 16 * 1024);   /* more than enough */
	char shard[700];
	CHECK(raw && stored && out);
	CHECK_RC(wsp_pack_read_layer(pk, l, raw), 0);
	pack_shard_path(pk, L->shard, shard, sizeof(shard));
	int fd = open(shard, O_RDONLY);
	CHECK(fd >= 0 && pread(fd, stored, L->stored_bytes, (off_t)L->offset) ==
			 (ssize_t)L->stored_bytes);
	close(fd);
	uint64_t at = 0;
	for (uint32_t t = L->first_tensor; t < L->first_tensor + L->n_tensors; t++) {
		const struct wspm_tensor *T = &m->tensors[t];
		uint64_t dst = T->layer_offset;
		for (uint64_t k = 0; k < T->n_chunks; k++) {
			const struct wspm_chunk *c = &m->chunks[T->first_chunk + k];
			if (c->codec == WSP_CODEC_EXPRANS) {
				memcpy(out + at, stored + (c->offset - L->offset), c->stored_bytes);
				at += c->stored_bytes;
			} else {
				memcpy(out + at, raw + dst, c->raw_bytes);
				at += c->raw_bytes;
			}
			at = (at + 15) & ~(uint64_t)15;
			dst += c->raw_bytes;
		}
	}
	free(raw);
	free(stored);
	*len = at;
	return out;
}

/* Whether each part of layer l, of `parts`, reads and matches `want`. */
static void check_parts(struct wsp_pack_s *pk, uint32_t l, unsigned parts, const uint8_t *want,
			uint64_t len)
{
	const struct wspm_layer *L = &pk->m.layers[l];
	uint64_t at = 0, stored = 0;
	for (unsigned k = 0; k < parts; k++) {
		struct wsp_part p;
		CHECK_RC(wsp_pack_read_part(pk, l, k, parts, NULL, 0, &p), 0);
		CHECK(p.offset == at && p.stored_offset == stored);
		CHECK(p.offset % 16 == 0 && p.bytes % 16 == 0);
		uint8_t *buf = malloc(p.bytes + 1);
		CHECK(buf);
		memset(buf, 0xa5, p.bytes + 1);   /* gaps must be written, not left */
		if (p.bytes) {
			CHECK_RC(wsp_pack_read_part(pk, l, k, parts, buf, p.bytes - 1, &p),
				 -EINVAL);
			CHECK(strstr(wsp_pack_errmsg(pk), "do not fit") != NULL);
		}
		struct wsp_part again;
		CHECK_RC(wsp_pack_read_part(pk, l, k, parts, buf, p.bytes, &again), 0);
		CHECK(memcmp(&again, &p, sizeof(p)) == 0);
		CHECK(memcmp(buf, want + p.offset, p.bytes) == 0);
		CHECK(buf[p.bytes] == 0xa5);   /* and nothing past the part */
		free(buf);
		at += p.bytes;
		stored += p.stored_bytes;
	}
	CHECK(at == len && stored == L->stored_bytes);
}

/* The host tier's packed bytes of layer l equal `want`. */
static void check_host_tier(struct wsp_pack_s *pk, uint32_t l, const uint8_t *want,
			    uint64_t len)
{
	struct hcache_config cfg;
	struct hcache *hc;
	struct hcache_ref ref;
	struct wspi_err err;
	wspi_err_init(&err);
	ct_config(&cfg, WSP_IO_PREAD, 64ull << 20, 4096);
	cfg.keep_packed = 1;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
	CHECK_RC(hcache_get(hc, l, &ref, &err), 0);
	CHECK(ref.packed && ref.bytes == len);
	uint8_t *got = malloc(len);
	CHECK(got);
	ct_copy_out(&ref, 0, got, len);
	/* The host tier leaves its gaps as they were: compare the chunks. */
	struct hcache_piece pc[64];
	uint32_t n = hcache_pieces(hc, l, pc, 64);
	CHECK(n > 0 && n < 64);
	for (uint32_t i = 0; i < n; i++)
		CHECK(memcmp(got + pc[i].at, want + pc[i].at, pc[i].stored) == 0);
	free(got);
	hcache_put(hc, &ref);
	hcache_destroy(hc);
	wspi_err_destroy(&err);
}

/* Damage the last stored byte of chunk `k` of layer l's first tensor; the
 * part of `parts` that holds it fails naming that chunk (WSP_ECHECKSUM, or
 * with `zstd` also WSP_EZSTD: a frame may no longer decode), the others
 * read. */
static void check_damage(const char *dir, uint32_t l, uint64_t k, unsigned parts, int zstd)
{
	struct wsp_pack_s *pk = ct_open_pack(dir);
	const struct wspm_layer *L = &pk->m.layers[l];
	const struct wspm_chunk *c = &pk->m.chunks[pk->m.tensors[L->first_tensor].first_chunk + k];
	char shard[700], chunk[64];
	pack_shard_path(pk, L->shard, shard, sizeof(shard));
	uint64_t pos = c->offset + c->stored_bytes - 1, rel = c->offset - L->offset;
	int fd = open(shard, O_RDWR);
	unsigned char b;
	CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)pos) == 1);
	b ^= 0x01;
	CHECK(pwrite(fd, &b, 1, (off_t)pos) == 1);
	unsigned failed = 0;
	for (unsigned i = 0; i < parts; i++) {
		struct wsp_part p;
		CHECK_RC(wsp_pack_read_part(pk, l, i, parts, NULL, 0, &p), 0);
		uint8_t *buf = malloc(p.bytes ? p.bytes : 1);
		CHECK(buf);
		int holds = rel >= p.stored_offset && rel < p.stored_offset + p.stored_bytes;
		int rc = wsp_pack_read_part(pk, l, i, parts, buf, p.bytes, &p);
		if (holds) {
			CHECK(rc == WSP_ECHECKSUM || (zstd && rc == WSP_EZSTD));
			snprintf(chunk, sizeof(chunk), "chunk %" PRIu64 " ", k);
			CHECK(strstr(wsp_pack_errmsg(pk), chunk) != NULL);
			failed++;
		} else {
			CHECK_RC(rc, 0);
		}
		free(buf);
	}
	CHECK(failed == 1);
	b ^= 0x01;   /* mended for the next check */
	CHECK(pwrite(fd, &b, 1, (off_t)pos) == 1);
	close(fd);
	pack_close(pk);
}

int main(void)
{
	const char *root = t_scratch("read-part");
	static const enum wsp_codec codecs[] = { WSP_CODEC_EXPRANS, WSP_CODEC_ZSTD };
	for (unsigned ci = 0; ci < 2; ci++) {
		char dir[600];
		snprintf(dir, sizeof(dir), "%s/pack%u", root, ci);
		struct t_pack_spec spec = {
			.layers = 3, .tensors_per_layer = 3, .tensor_bytes = 100002,
			.compressible = 1, .codec = codecs[ci], .chunk_bytes = 32768,
		};
		CHECK_RC(t_make_pack(dir, &spec), 0);
		struct wsp_pack_s *pk = ct_open_pack(dir);
		uint64_t kinds[3] = { 0 };
		for (uint64_t i = 0; i < pk->m.hdr->n_chunks; i++)
			kinds[pk->m.chunks[i].codec]++;
		printf("%s pack: %" PRIu64 " zstd, %" PRIu64 " raw, %" PRIu64 " exprans chunks\n",
		       ci ? "zstd" : "exprans", kinds[0], kinds[1], kinds[2]);
		CHECK(ci ? kinds[0] > 0 : kinds[2] > 0 && kinds[1] > 0);
		for (uint32_t l = 0; l < pk->m.hdr->n_layers; l++) {
			uint64_t len;
			uint8_t *want = packed_form(pk, l, &len);
			struct wsp_part whole;
			CHECK_RC(wsp_pack_read_part(pk, l, 0, 1, NULL, 0, &whole), 0);
			CHECK(whole.bytes == len);
			for (unsigned parts = 1; parts <= 7; parts++)
				check_parts(pk, l, parts, want, len);
			if (ci == 0)
				check_host_tier(pk, l, want, len);
			free(want);
		}
		struct wsp_part p;
		CHECK_RC(wsp_pack_read_part(pk, 0, 2, 2, NULL, 0, &p), -EINVAL);
		CHECK_RC(wsp_pack_read_part(pk, 0, 0, 0, NULL, 0, &p), -EINVAL);
		CHECK_RC(wsp_pack_read_part(pk, 0, 0, 1, NULL, 0, NULL), -EINVAL);
		CHECK_RC(wsp_pack_read_part(pk, pk->m.hdr->n_layers, 0, 1, NULL, 0, &p),
			 WSP_ENOTFOUND);
		pack_close(pk);
		/* A changed sign|mantissa byte (exprans: only the stored check
		 * sees it) or zstd frame byte, in the middle chunk of layer 1's
		 * first tensor and in its first chunk. */
		for (unsigned parts = 2; parts <= 3; parts++) {
			check_damage(dir, 1, 1, parts, ci == 1);
			check_damage(dir, 1, 0, parts, ci == 1);
		}
	}
	printf("ok\n");
	return 0;
}
