/* Writes the hand-made manifest corpus of tests/fuzz/corpus/manifest from a
 * valid manifest: one file per defect.  Files named ok-* must parse; every
 * other file must be rejected (test_corpus checks both).  Each defect keeps
 * the header checksum valid, except bad-checksum-*, so that the parser's
 * deeper checks are the ones exercised.
 *	make tests/pack/mkcorpus && tests/pack/mkcorpus ../tests/fuzz/corpus/manifest */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack/manifest.h"
#include "pack/writer.h"
#include "testlib.h"

static unsigned char *valid;
static uint64_t vlen;
static const char *outdir;

#define HDR(m) ((struct wspm_header *)(m))
#define TBL(m, type, field) ((struct type *)((m) + HDR(m)->field))

static void emit(const char *name, unsigned char *m, uint64_t len, int fix)
{
	char path[1024];
	if (fix && len >= sizeof(struct wspm_header)) {
		uint64_t sum = wspm_checksum(m, len);
		memcpy(m + offsetof(struct wspm_header, checksum), &sum, 8);
	}
	snprintf(path, sizeof(path), "%s/%s", outdir, name);
	FILE *f = fopen(path, "wb");
	CHECK(f && fwrite(m, 1, len, f) == len);
	fclose(f);
}

static unsigned char *copy(void)
{
	unsigned char *m = malloc(vlen);
	memcpy(m, valid, vlen);
	return m;
}

#define CASE(name, stmt)                                                                 \
	do {                                                                             \
		unsigned char *m = copy();                                               \
		stmt;                                                                    \
		emit(name, m, vlen, 1);                                                  \
		free(m);                                                                 \
	} while (0)

static void make_valid(const char *dir)
{
	struct wsp_convert_options opt;
	struct pack_writer *pw;
	struct wspi_err err;
	static uint16_t data[4][300];
	uint64_t shape = 300;
	/* The source's header describes exactly the four tensors, and the
	 * index names the source, as a converted checkpoint's do. */
	static const char header[] =
		"{\"__metadata__\":{\"format\":\"pt\"},"
		"\"h.0.a\":{\"dtype\":\"BF16\",\"shape\":[300],\"data_offsets\":[0,600]},"
		"\"h.0.b\":{\"dtype\":\"BF16\",\"shape\":[300],\"data_offsets\":[600,1200]},"
		"\"h.1.a\":{\"dtype\":\"BF16\",\"shape\":[300],\"data_offsets\":[1200,1800]},"
		"\"h.1.b\":{\"dtype\":\"BF16\",\"shape\":[300],\"data_offsets\":[1800,2400]}}";
	static const char index[] =
		"{\"weight_map\":{\"h.0.a\":\"model.safetensors\",\"h.0.b\":\"model.safetensors\","
		"\"h.1.a\":\"model.safetensors\",\"h.1.b\":\"model.safetensors\"}}";

	for (int t = 0; t < 4; t++)
		for (int i = 0; i < 300; i++)
			data[t][i] = (uint16_t)(0x3c00 + (i % 7) + t);
	wspi_err_init(&err);
	wsp_convert_options_init(&opt);
	opt.chunk_bytes = 256;   /* several chunks per tensor */
	opt.shard_bytes = 4096;  /* one layer per shard */
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	CHECK_RC(pack_writer_add_source(pw, "model.safetensors", header, sizeof(header) - 1,
					4 * sizeof(data[0])), 0);
	CHECK_RC(pack_writer_set_index(pw, index, sizeof(index) - 1), 0);
	const char *names[] = { "h.0.a", "h.0.b", "h.1.a", "h.1.b" };
	for (int t = 0; t < 4; t++)
		CHECK_RC(pack_writer_add_tensor(pw, names[t], NULL, WSP_DTYPE_BF16, 1, &shape, data[t],
						sizeof(data[t]), 0, t * sizeof(data[0]), t), 0);
	CHECK_RC(pack_writer_finish(pw), 0);
	pack_writer_free(pw);
	wspi_err_destroy(&err);
}

int main(int argc, char **argv)
{
	char dir[600], path[700];
	if (argc != 2) {
		fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
		return 1;
	}
	outdir = argv[1];
	snprintf(dir, sizeof(dir), "%s/p", t_scratch("mkcorpus"));
	make_valid(dir);
	snprintf(path, sizeof(path), "%s/%s", dir, WSPM_FILE);
	FILE *f = fopen(path, "rb");
	CHECK(f);
	fseek(f, 0, SEEK_END);
	vlen = (uint64_t)ftell(f);
	rewind(f);
	valid = malloc(vlen);
	CHECK(fread(valid, 1, vlen, f) == vlen);
	fclose(f);
	*strrchr(dir, '/') = '\0';
	t_rmrf(dir);

	emit("ok-valid", valid, vlen, 0);
	CASE("ok-no-index", HDR(m)->flags = 0; HDR(m)->index_off = 0; HDR(m)->index_len = 0);
	emit("truncated-header", valid, 100, 0);
	emit("truncated-half", valid, vlen / 2, 0);
	emit("truncated-by-one", valid, vlen - 1, 1);
	emit("empty", valid, 0, 0);
	{
		unsigned char *m = copy();
		m[HDR(m)->tensors_off + 9] ^= 1;
		emit("bad-checksum-flip", m, vlen, 0);
		free(m);
	}
	CASE("bad-magic", m[3] = 'X');
	CASE("version-99", HDR(m)->version = 99);
	CASE("header-size", HDR(m)->header_size = 64);
	CASE("file-size", HDR(m)->file_size += 8);
	CASE("flags-unknown", HDR(m)->flags |= 8);
	CASE("chunk-bytes-odd", HDR(m)->chunk_bytes = 1000);
	CASE("chunk-bytes-zero", HDR(m)->chunk_bytes = 0);
	CASE("shards-off-out", HDR(m)->shards_off = (vlen + 7) / 8 * 8 + 8);
	CASE("sources-off-out", HDR(m)->sources_off = (vlen + 7) / 8 * 8 + 8);
	CASE("layers-off-out", HDR(m)->layers_off = (vlen + 7) / 8 * 8 + 8);
	CASE("tensors-off-out", HDR(m)->tensors_off = (vlen + 7) / 8 * 8 + 8);
	CASE("chunks-off-out", HDR(m)->chunks_off = (vlen + 7) / 8 * 8 + 8);
	CASE("strings-off-out", HDR(m)->strings_off = (vlen + 7) / 8 * 8 + 8);
	CASE("blobs-off-out", HDR(m)->blobs_off = vlen + 1);
	CASE("layers-off-misaligned", HDR(m)->layers_off += 4);
	CASE("tables-overlap", HDR(m)->tensors_off = HDR(m)->layers_off);
	CASE("count-chunks-huge", HDR(m)->n_chunks = 1ull << 60);
	CASE("count-tensors-huge", HDR(m)->n_tensors = 0xffffffffu);
	CASE("count-layers-huge", HDR(m)->n_layers = 0xffffffffu);
	CASE("count-shards-huge", HDR(m)->n_shards = 0xffffffffu);
	CASE("count-sources-huge", HDR(m)->n_sources = 0xffffffffu);
	CASE("strings-size-huge", HDR(m)->strings_size = ~0ull - 4);
	CASE("blobs-size-huge", HDR(m)->blobs_size = ~0ull);
	CASE("index-out", HDR(m)->index_off = HDR(m)->blobs_size);
	CASE("index-without-flag", HDR(m)->flags = 0);
	CASE("string-no-nul", m[HDR(m)->strings_off + HDR(m)->strings_size - 1] = 'x');
	CASE("name-off-out", TBL(m, wspm_tensor, tensors_off)[1].name_off = HDR(m)->strings_size);
	CASE("name-empty", TBL(m, wspm_layer, layers_off)[0].name_off = HDR(m)->strings_size - 1);
	CASE("name-control", m[HDR(m)->strings_off + TBL(m, wspm_tensor, tensors_off)[2].name_off] = 1);
	CASE("shard-name-traversal", memcpy(m + HDR(m)->strings_off + TBL(m, wspm_shard, shards_off)[0].name_off, "../x", 4));
	CASE("source-name-slash", m[HDR(m)->strings_off + TBL(m, wspm_source, sources_off)[0].name_off] = '/');
	CASE("shard-size-unaligned", TBL(m, wspm_shard, shards_off)[0].size -= 1);
	CASE("shard-too-small", TBL(m, wspm_shard, shards_off)[1].size = 0);
	CASE("source-header-out", TBL(m, wspm_source, sources_off)[0].header_len = HDR(m)->blobs_size + 1);
	CASE("source-data-short", TBL(m, wspm_source, sources_off)[0].data_bytes = 10);
	CASE("layer-shard-out", TBL(m, wspm_layer, layers_off)[1].shard = 9);
	CASE("layer-offset-unaligned", TBL(m, wspm_layer, layers_off)[1].offset = 8);
	CASE("layer-offset-out", TBL(m, wspm_layer, layers_off)[1].offset = 1ull << 40);
	CASE("layer-first-tensor", TBL(m, wspm_layer, layers_off)[1].first_tensor = 1);
	CASE("layer-n-tensors", TBL(m, wspm_layer, layers_off)[1].n_tensors = 3);
	CASE("layer-raw-bytes", TBL(m, wspm_layer, layers_off)[0].raw_bytes += 256);
	CASE("layer-stored-bytes", TBL(m, wspm_layer, layers_off)[0].stored_bytes += 1);
	CASE("tensor-dtype", TBL(m, wspm_tensor, tensors_off)[0].dtype = 200);
	CASE("tensor-rank", TBL(m, wspm_tensor, tensors_off)[0].rank = 9);
	CASE("tensor-shape", TBL(m, wspm_tensor, tensors_off)[0].shape[0] = 301);
	CASE("tensor-shape-overflow", TBL(m, wspm_tensor, tensors_off)[0].rank = 3;
	     TBL(m, wspm_tensor, tensors_off)[0].shape[1] = 1ull << 40;
	     TBL(m, wspm_tensor, tensors_off)[0].shape[2] = 1ull << 40);
	CASE("tensor-layer", TBL(m, wspm_tensor, tensors_off)[3].layer = 0);
	CASE("tensor-source-out", TBL(m, wspm_tensor, tensors_off)[0].source = 5);
	CASE("tensor-source-range", TBL(m, wspm_tensor, tensors_off)[3].source_offset = 1ull << 62);
	CASE("tensor-offset-unaligned", TBL(m, wspm_tensor, tensors_off)[1].layer_offset += 8);
	CASE("tensor-overlap", TBL(m, wspm_tensor, tensors_off)[1].layer_offset = 0);
	CASE("tensor-first-chunk", TBL(m, wspm_tensor, tensors_off)[1].first_chunk -= 1);
	CASE("tensor-n-chunks-huge", TBL(m, wspm_tensor, tensors_off)[3].n_chunks = 1ull << 62);
	CASE("chunk-overlap", TBL(m, wspm_chunk, chunks_off)[1].offset = TBL(m, wspm_chunk, chunks_off)[0].offset);
	CASE("chunk-codec", TBL(m, wspm_chunk, chunks_off)[0].codec = 7);
	CASE("chunk-transform", TBL(m, wspm_chunk, chunks_off)[0].transform = 9);
	CASE("chunk-transform-dtype", TBL(m, wspm_chunk, chunks_off)[0].transform = WSPM_XFORM_EXP_F32);
	CASE("chunk-stored-zero", TBL(m, wspm_chunk, chunks_off)[0].stored_bytes = 0);
	CASE("chunk-raw-above-nominal", TBL(m, wspm_chunk, chunks_off)[0].raw_bytes = 512);
	CASE("chunk-stored-past-layer", TBL(m, wspm_chunk, chunks_off)[0].stored_bytes += 100000);
	/* Forged: every table consistent, checksum recomputed, but the pack no
	 * longer describes what its source header says (unpack would write a
	 * different checkpoint), or names are ambiguous. */
	CASE("forged-tensor-dtype", TBL(m, wspm_tensor, tensors_off)[0].dtype = WSP_DTYPE_F16);
	CASE("forged-source-offsets-swapped",
	     TBL(m, wspm_tensor, tensors_off)[0].source_offset = 600;
	     TBL(m, wspm_tensor, tensors_off)[1].source_offset = 0);
	CASE("forged-source-order", TBL(m, wspm_tensor, tensors_off)[0].source_order = 1);
	CASE("forged-source-data-bytes", TBL(m, wspm_source, sources_off)[0].data_bytes += 600);
	CASE("forged-short-name-duplicate", TBL(m, wspm_tensor, tensors_off)[1].short_name_off =
	     TBL(m, wspm_tensor, tensors_off)[0].short_name_off);
	CASE("forged-header-text", {
		char *b = (char *)m + HDR(m)->blobs_off + TBL(m, wspm_source, sources_off)[0].header_off;
		char *at = memmem(b, TBL(m, wspm_source, sources_off)[0].header_len, "[300]", 5);
		CHECK(at);
		at[3] = '1';
	});
	CASE("forged-index-json", m[HDR(m)->blobs_off + HDR(m)->index_off] = 'x');
	CASE("forged-index-source", {
		char *b = (char *)m + HDR(m)->blobs_off + HDR(m)->index_off;
		char *at = memmem(b, HDR(m)->index_len, "model.safetensors", 17);
		CHECK(at);
		at[0] = 'n';
	});
	CASE("reserved-header", HDR(m)->reserved0 = 1);
	CASE("reserved-layer", TBL(m, wspm_layer, layers_off)[0].reserved = 1);
	CASE("reserved-tensor", TBL(m, wspm_tensor, tensors_off)[2].reserved2 = 1);
	CASE("reserved-chunk", TBL(m, wspm_chunk, chunks_off)[1].stored_check[5] = 1);
	return 0;
}
