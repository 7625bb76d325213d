/* Every exprans layout the converter writes survives a pack: a pack of
 * Gaussian bf16, f16 and fp32, fp32 upcast from bf16 and bf16 widened with
 * a random byte 1 opens (the manifest's checks accept each chunk's
 * layout), reads back byte for byte and verifies, and its chunks carry the
 * layouts the data should lead to: by default plain, the upcasts with
 * coded low halves; with WSP_CONVERT_SMALLEST the top bit coded too. */
#include <stdlib.h>
#include <string.h>

#include "../codec/codec_test.h"
#include "../codec/float_data.h"
#include "pack/exprans/exprans_layout.h"
#include "pack/pack.h"
#include "pack/writer.h"

struct tdef {
	const char *name;
	int dtype;
	enum kind kind;
	int want[2];        /* the layout its chunks should take: by default,
			       smallest (-1: either) */
};

static const struct tdef defs[] = {
	{ "model.layers.0.bf16", WSP_DTYPE_BF16, GAUSS, { 0, EXPRANS_TOP_BIT } },
	{ "model.layers.0.f16", WSP_DTYPE_F16, GAUSS, { 0, -1 } },
	{ "model.layers.1.f32", WSP_DTYPE_F32, GAUSS, { 0, EXPRANS_TOP_BIT } },
	{ "model.layers.1.upcast", WSP_DTYPE_F32, UPCAST,
	  { EXPRANS_LOW_PLANES, EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT } },
	{ "model.layers.2.byte1", WSP_DTYPE_F32, UPCAST_BYTE1,
	  { EXPRANS_LOW_PLANES, EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT } },
};
#define N_DEFS (sizeof(defs) / sizeof(defs[0]))
#define VALUES 300000u   /* several chunks of 256 KiB */

static void run(int smallest)
{
	struct wsp_convert_options opt;
	struct pack_writer *pw;
	struct wspi_err err;
	uint8_t *data[N_DEFS];
	char dir[600], msg[512];
	wsp_pack *pk;

	wspi_err_init(&err);
	wsp_convert_options_init(&opt);
	CHECK(opt.codec == WSP_CODEC_AUTO);
	opt.chunk_bytes = 256 * 1024;
	opt.flags = smallest ? WSP_CONVERT_SMALLEST : 0;
	snprintf(dir, sizeof(dir), "%s/p", t_scratch("layouts"));
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	for (size_t i = 0; i < N_DEFS; i++) {
		uint64_t shape = VALUES, bytes = VALUES * wsp_dtype_bits(defs[i].dtype) / 8;
		data[i] = malloc(bytes + 4);
		CHECK(data[i]);
		fill_values(data[i], VALUES, defs[i].dtype, defs[i].kind);
		CHECK_RC(pack_writer_add_tensor(pw, defs[i].name, NULL, defs[i].dtype, 1, &shape,
						data[i], bytes, 0, 0, 0), 0);
	}
	CHECK_RC(pack_writer_finish(pw), 0);
	pack_writer_free(pw);

	CHECK_RC(wsp_pack_open(dir, &pk, msg, sizeof(msg)), 0);
	for (size_t i = 0; i < N_DEFS; i++) {
		const struct wsp_tensor *t = wsp_pack_find_tensor(pk, defs[i].name);
		CHECK(t != NULL);
		const struct wsp_layer *L = wsp_pack_layer(pk, t->layer);
		uint8_t *buf = malloc(L->raw_bytes + 1);
		CHECK(buf);
		CHECK_RC(wsp_pack_read_layer(pk, t->layer, buf), 0);
		uint64_t pos = 0, off = (uint64_t)-1;
		for (uint32_t k = 0; k < L->n_tensors; k++) {
			pos = (pos + 255) / 256 * 256;
			if (&L->tensors[k] == t)
				off = pos;
			pos += L->tensors[k].bytes;
		}
		CHECK(off != (uint64_t)-1 && !memcmp(buf + off, data[i], t->bytes));
		free(buf);
		/* the layouts: every exprans chunk of the tensor but a short last */
		const struct wspm_tensor *mt = &pk->m.tensors[t - pk->tensors];
		unsigned exprans = 0;
		for (uint64_t c = 0; c < mt->n_chunks; c++) {
			const struct wspm_chunk *ch = &pk->m.chunks[mt->first_chunk + c];
			if (ch->codec != WSP_CODEC_EXPRANS)
				continue;
			exprans++;
			if (c + 1 < mt->n_chunks && defs[i].want[smallest] >= 0)
				CHECK(ch->transform == defs[i].want[smallest]);
		}
		fprintf(stderr, "%s%-24s %llu chunks, %u exprans\n", smallest ? "smallest: " : "",
			defs[i].name, (unsigned long long)mt->n_chunks, exprans);
		CHECK(exprans + 1 >= mt->n_chunks);
	}
	CHECK_RC(wsp_pack_verify(pk, 2, NULL, NULL), 0);
	wsp_pack_close(pk);
	for (size_t i = 0; i < N_DEFS; i++)
		free(data[i]);
	wspi_err_destroy(&err);
	*strrchr(dir, '/') = '\0';
	t_rmrf(dir);
}

int main(void)
{
	run(0);
	run(1);
	return 0;
}
