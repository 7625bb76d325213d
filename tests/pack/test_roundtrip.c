/* writer -> wsp_pack_open -> wsp_pack_read_layer returns exactly the input,
 * for raw and zstd chunks, compressible and self-describing data, odd sizes,
 * tensors cut into several chunks, and packs of several shards. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "testpack.h"
#include "wspager.h"

struct prog {
	uint64_t last, total;
	int calls, cancel_after;
};

static int on_progress(void *ctx, uint64_t done, uint64_t total)
{
	struct prog *p = ctx;
	CHECK(done <= total && done > p->last);   /* one caller at a time, growing */
	p->last = done;
	p->total = total;
	return ++p->calls == p->cancel_after;
}

static void roundtrip(const char *tag, const struct t_pack_spec *spec, uint32_t want_shards)
{
	char dir[600], err[512];
	wsp_pack *pk;
	struct wsp_pack_summary s;

	snprintf(dir, sizeof(dir), "%s/%s", t_scratch(tag), "pack");
	t_make_pack(dir, spec);
	CHECK_RC(wsp_pack_open(dir, &pk, err, sizeof(err)), 0);
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	CHECK(s.n_layers == spec->layers);
	CHECK(s.n_tensors == spec->layers * spec->tensors_per_layer);
	CHECK(s.raw_bytes == (uint64_t)s.n_tensors * spec->tensor_bytes);
	CHECK(s.metadata_json == NULL);
	CHECK(s.format_version == 1);
	if (want_shards)
		CHECK(s.n_shards == want_shards);
	if (spec->compressible && spec->codec == WSP_CODEC_ZSTD)
		CHECK(s.stored_bytes < s.raw_bytes);
	if (spec->codec == WSP_CODEC_RAW)
		CHECK(s.stored_bytes == s.raw_bytes);

	for (uint32_t l = 0; l < s.n_layers; l++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, l);
		char name[64];
		CHECK(L && L->index == l);
		snprintf(name, sizeof(name), "model.layers.%u", l);
		CHECK(!strcmp(L->name, name));
		CHECK(wsp_pack_find_layer(pk, name) == L);
		unsigned char *buf = malloc(L->raw_bytes + 1);
		CHECK(buf);
		memset(buf, 0xa5, L->raw_bytes + 1);
		CHECK_RC(wsp_pack_read_layer(pk, l, buf), 0);
		CHECK(buf[L->raw_bytes] == 0xa5);   /* nothing past raw_bytes */
		uint64_t end = 0;
		for (uint32_t k = 0; k < L->n_tensors; k++) {
			const struct wsp_tensor *t = &L->tensors[k];
			uint64_t off;
			char sn[16];
			snprintf(sn, sizeof(sn), "w%u", k);
			CHECK(!strcmp(t->short_name, sn));
			CHECK(wsp_pack_find_tensor(pk, t->name) == t);
			CHECK(t->layer == l && t->bytes == spec->tensor_bytes);
			/* tensors are 256-aligned in order; padding is zero */
			off = (end + 255) / 256 * 256;
			for (uint64_t i = end; i < off; i++)
				CHECK(buf[i] == 0);
			CHECK(t_check_tensor(spec, l * spec->tensors_per_layer + k, buf + off, t->bytes) == 0);
			CHECK(wsp_checksum64(buf + off, t->bytes) == t->checksum);
			end = off + t->bytes;
		}
		for (uint64_t i = end; i < L->raw_bytes; i++)
			CHECK(buf[i] == 0);
		free(buf);
	}
	/* verify: every layer once, progress up to the total, cancellable */
	struct prog p = { 0 };
	CHECK_RC(wsp_pack_verify(pk, 3, on_progress, &p), 0);
	CHECK(p.calls == (int)s.n_layers && p.last == p.total);
	struct prog c = { .cancel_after = 1 };
	CHECK_RC(wsp_pack_verify(pk, 1, on_progress, &c), -ECANCELED);
	CHECK(wsp_pack_layer(pk, s.n_layers) == NULL);
	CHECK(wsp_pack_find_layer(pk, "nope") == NULL);
	CHECK(wsp_pack_find_tensor(pk, "model.layers.0") == NULL);
	CHECK_RC(wsp_pack_read_layer(pk, s.n_layers, NULL), -EINVAL);
	wsp_pack_close(pk);
	*strrchr(dir, '/') = '\0';
	t_rmrf(dir);
}

int main(void)
{
	struct t_pack_spec raw = { .layers = 3, .tensors_per_layer = 4, .tensor_bytes = 40000,
				   .codec = WSP_CODEC_RAW, .chunk_bytes = 16384 };
	roundtrip("rt-raw", &raw, 1);

	struct t_pack_spec z = raw;
	z.codec = WSP_CODEC_ZSTD;
	roundtrip("rt-zstd", &z, 1);

	struct t_pack_spec zc = z;
	zc.compressible = 1;
	zc.tensor_bytes = 100000;
	roundtrip("rt-bf16", &zc, 1);

	struct t_pack_spec odd = { .layers = 2, .tensors_per_layer = 5, .tensor_bytes = 4097,
				   .codec = WSP_CODEC_ZSTD, .chunk_bytes = 1024 };
	roundtrip("rt-odd", &odd, 1);
	odd.codec = WSP_CODEC_RAW;
	odd.tensor_bytes = 3;
	roundtrip("rt-tiny", &odd, 1);

	/* 12 layers of 64 KiB raw and a 128 KiB shard target: two layers per shard */
	struct t_pack_spec shards = { .layers = 12, .tensors_per_layer = 2, .tensor_bytes = 32768,
				      .codec = WSP_CODEC_RAW, .shard_bytes = 131072 };
	roundtrip("rt-shards", &shards, 6);
	shards.codec = WSP_CODEC_ZSTD;
	shards.compressible = 1;
	roundtrip("rt-zshards", &shards, 6);
	return 0;
}
