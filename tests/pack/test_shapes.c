/* Tensors of every kind of shape survive a round trip: rank-0, empty (a zero
 * dimension), a layer holding only an empty tensor, sub-byte dtypes, sizes
 * that are not multiples of the chunk size, and several dtypes in a layer. */
#include <stdlib.h>
#include <string.h>

#include "pack/writer.h"
#include "testlib.h"
#include "wspager.h"

struct tdef {
	const char *name;
	int dtype;
	unsigned rank;
	uint64_t shape[3];
	uint64_t bytes;
};

static const struct tdef defs[] = {
	{ "model.layers.0.scalar", WSP_DTYPE_F32, 0, { 0 }, 4 },
	{ "model.layers.0.empty", WSP_DTYPE_BF16, 2, { 0, 5 }, 0 },
	{ "model.layers.0.bytes", WSP_DTYPE_U8, 1, { 7 }, 7 },
	{ "model.layers.0.half", WSP_DTYPE_F16, 2, { 3, 129 }, 774 },
	{ "model.layers.0.f4", WSP_DTYPE_F4, 1, { 6 }, 3 },
	{ "model.layers.0.f32", WSP_DTYPE_F32, 2, { 33, 17 }, 2244 },
	{ "empty.only", WSP_DTYPE_I32, 3, { 4, 0, 2 }, 0 },
	{ "model.layers.1.bf16", WSP_DTYPE_BF16, 1, { 1000 }, 2000 },
};

static void run(enum wsp_codec codec, uint64_t chunk)
{
	struct wsp_convert_options opt;
	struct pack_writer *pw;
	struct wspi_err err;
	unsigned char *data[sizeof(defs) / sizeof(defs[0])];
	char dir[600], msg[512];
	wsp_pack *pk;
	const size_t n = sizeof(defs) / sizeof(defs[0]);

	wspi_err_init(&err);
	wsp_convert_options_init(&opt);
	opt.codec = codec;
	opt.chunk_bytes = chunk;
	opt.threads = 3;
	snprintf(dir, sizeof(dir), "%s/p", t_scratch("shapes"));
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	for (size_t i = 0; i < n; i++) {
		data[i] = malloc(defs[i].bytes + 1);
		for (uint64_t b = 0; b < defs[i].bytes; b++)
			data[i][b] = (unsigned char)(b * 7 + i * 31 + (b >> 8));
		CHECK_RC(pack_writer_add_tensor(pw, defs[i].name, NULL, defs[i].dtype, defs[i].rank,
						defs[i].shape, data[i], defs[i].bytes, 0, 0, 0), 0);
	}
	CHECK_RC(pack_writer_finish(pw), 0);
	pack_writer_free(pw);

	CHECK_RC(wsp_pack_open(dir, &pk, msg, sizeof(msg)), 0);
	struct wsp_pack_summary s;
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	CHECK(s.n_layers == 3 && s.n_tensors == n);
	CHECK(!strcmp(wsp_pack_layer(pk, 2)->name, "empty"));
	CHECK(wsp_pack_layer(pk, 2)->raw_bytes == 0);
	for (size_t i = 0; i < n; i++) {
		const struct wsp_tensor *t = wsp_pack_find_tensor(pk, defs[i].name);
		CHECK(t && t->bytes == defs[i].bytes && t->rank == defs[i].rank);
		CHECK((int)t->dtype == defs[i].dtype);
		CHECK(!memcmp(t->shape, defs[i].shape, defs[i].rank * sizeof(uint64_t)));
		const struct wsp_layer *L = wsp_pack_layer(pk, t->layer);
		unsigned char *buf = malloc(L->raw_bytes + 1);
		CHECK_RC(wsp_pack_read_layer(pk, t->layer, buf), 0);
		uint64_t off = (uint64_t)-1;
		/* find the tensor's position: the layer view gives it by order */
		uint64_t pos = 0;
		for (uint32_t k = 0; k < L->n_tensors; k++) {
			pos = (pos + 255) / 256 * 256;
			if (&L->tensors[k] == t)
				off = pos;
			pos += L->tensors[k].bytes;
		}
		CHECK(off != (uint64_t)-1);
		CHECK(!memcmp(buf + off, data[i], defs[i].bytes));
		free(buf);
	}
	CHECK_RC(wsp_pack_verify(pk, 2, NULL, NULL), 0);
	uint64_t raw, stored;
	CHECK_RC(wsp_pack_dtype_bytes(pk, WSP_DTYPE_F32, &raw, &stored), 2);
	CHECK(raw == 4 + 2244);
	if (codec == WSP_CODEC_RAW)
		CHECK(stored == raw);
	/* Every shard's path names a file of the pack, cut as snprintf cuts. */
	struct wsp_pack_summary sum;
	CHECK_RC(wsp_pack_summary(pk, &sum), 0);
	CHECK(sum.n_shards > 0);
	for (uint32_t i = 0; i < sum.n_shards; i++) {
		char path[700], small[8];
		int len = wsp_pack_shard_path(pk, i, path, sizeof(path));
		CHECK(len > 0 && (size_t)len == strlen(path) && strncmp(path, dir, strlen(dir)) == 0);
		CHECK(access(path, R_OK) == 0);
		CHECK_RC(wsp_pack_shard_path(pk, i, NULL, 0), len);
		CHECK_RC(wsp_pack_shard_path(pk, i, small, sizeof(small)), len);
		CHECK(strlen(small) == sizeof(small) - 1 && strncmp(small, path, 7) == 0);
		CHECK_RC(wsp_pack_shard_path(pk, i, NULL, 4), -EINVAL);
	}
	CHECK_RC(wsp_pack_shard_path(pk, sum.n_shards, NULL, 0), WSP_ENOTFOUND);
	wsp_pack_close(pk);
	for (size_t i = 0; i < n; i++)
		free(data[i]);
	wspi_err_destroy(&err);
	*strrchr(dir, '/') = '\0';
	t_rmrf(dir);
}

/* A pack of no tensors at all is valid and empty. */
static void empty_pack(void)
{
	struct wsp_convert_options opt;
	struct pack_writer *pw;
	struct wspi_err err;
	struct wsp_pack_summary s;
	char dir[600], msg[512];
	wsp_pack *pk;

	wspi_err_init(&err);
	wsp_convert_options_init(&opt);
	snprintf(dir, sizeof(dir), "%s/p", t_scratch("empty"));
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	CHECK_RC(pack_writer_finish(pw), 0);
	CHECK_RC(pack_writer_finish(pw), WSP_ESTATE);
	uint64_t one = 1;
	CHECK_RC(pack_writer_add_tensor(pw, "late", NULL, WSP_DTYPE_U8, 1, &one, "x", 1, 0, 0, 0),
		 WSP_ESTATE);
	pack_writer_free(pw);
	CHECK_RC(wsp_pack_open(dir, &pk, msg, sizeof(msg)), 0);
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	CHECK(s.n_layers == 0 && s.n_tensors == 0 && s.n_shards == 0 && s.raw_bytes == 0);
	CHECK(wsp_pack_layer(pk, 0) == NULL);
	CHECK_RC(wsp_pack_verify(pk, 0, NULL, NULL), 0);
	CHECK_RC(wsp_pack_read_layer(pk, 0, msg), WSP_ENOTFOUND);
	CHECK_RC(wsp_pack_unpack(pk, dir, 0, NULL, NULL), WSP_ESTATE);
	wsp_pack_close(pk);
	wspi_err_destroy(&err);
	*strrchr(dir, '/') = '\0';
	t_rmrf(dir);
}

int main(void)
{
	empty_pack();
	run(WSP_CODEC_RAW, 256);
	run(WSP_CODEC_ZSTD, 256);
	run(WSP_CODEC_ZSTD, 0);
	return 0;
}
