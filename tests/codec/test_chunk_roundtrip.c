/* chunk_encode + chunk_decode restore every byte: every dtype size, with and
 * without transforms, zstd, raw and exprans codecs, odd and zero lengths,
 * and the destination cut into segments at many element-aligned points
 * (and, for robustness, inside elements).  Guard bytes between segments
 * must stay untouched. */
#include "codec_test.h"

#define MAX_RAW (256u << 10)

static struct chunk_encoder *enc;
static struct chunk_decoder *dec;
static uint8_t *raw, *stored;
static unsigned n_zstd, n_raw, n_xform, n_exprans;

static void roundtrip(int dtype, size_t len, enum t_data kind, enum wsp_codec codec, int xform)
{
	struct wspi_err err;
	struct wspm_chunk c;
	unsigned es = wsp_dtype_bits(dtype) >= 8 ? wsp_dtype_bits(dtype) / 8 : 1;
	size_t cuts[T_MAX_SPANS];
	struct t_dest d;
	unsigned layout;

	wspi_err_init(&err);
	t_fill(raw, len, dtype, kind);
	memset(&c, 0xff, sizeof(c));
	CHECK_RC(chunk_encode(enc, raw, len, dtype, codec, xform, stored, &c, &err), 0);
	CHECK(c.raw_bytes == len);
	CHECK(c.stored_bytes <= chunk_encode_bound(len));
	CHECK(c.codec == WSP_CODEC_ZSTD || c.codec == WSP_CODEC_RAW ||
	      (c.codec == WSP_CODEC_EXPRANS && codec == WSP_CODEC_EXPRANS));
	if (c.codec == WSP_CODEC_EXPRANS) {
		n_exprans++;
	} else if (c.codec == WSP_CODEC_ZSTD) {
		CHECK(c.stored_bytes < len);
		n_zstd++;
	} else {
		CHECK(c.stored_bytes == len && c.transform == WSPM_XFORM_NONE);
		CHECK(memcmp(stored, raw, len) == 0);
		n_raw++;
	}
	if (codec == WSP_CODEC_RAW)
		CHECK(c.codec == WSP_CODEC_RAW);
	if (!xform && c.codec != WSP_CODEC_EXPRANS)   /* its transform 1: fp32 low halves coded */
		CHECK(c.transform == WSPM_XFORM_NONE);
	if (c.transform != WSPM_XFORM_NONE && c.codec != WSP_CODEC_EXPRANS) {
		CHECK(c.transform == chunk_transform_for(dtype));
		n_xform++;
	}

	for (layout = 0; layout < 6; layout++) {
		unsigned n_cuts = 0, k;
		switch (layout) {
		case 0:         /* one segment */
			break;
		case 1:         /* a few random element-aligned cuts */
			n_cuts = t_random_cuts(cuts, 5, len, es);
			break;
		case 2:         /* many: every 256 bytes, like host-cache pages */
			for (k = 256; k < len && n_cuts < T_MAX_SPANS - 1; k += 256)
				cuts[n_cuts++] = k;
			break;
		case 3:         /* every element (small chunks only) */
			if (len > 2048)
				continue;
			for (k = es; k < len; k += es)
				cuts[n_cuts++] = k;
			break;
		case 4:         /* empty segments at both ends and in the middle */
			cuts[n_cuts++] = 0;
			cuts[n_cuts++] = len / es / 2 * es;
			cuts[n_cuts++] = len / es / 2 * es;
			cuts[n_cuts++] = len;
			break;
		case 5:         /* cuts inside elements: not promised, still exact */
			n_cuts = t_random_cuts(cuts, 7, len, 1);
			break;
		}
		t_dest_init(&d, len, cuts, n_cuts);
		if (chunk_decode(dec, &c, dtype, stored, d.spans, d.n, &err) != 0) {
			fprintf(stderr, "dtype %s len %zu layout %u: %s\n", wsp_dtype_name(dtype),
				len, layout, err.msg);
			exit(1);
		}
		if (!t_dest_equal(&d, raw)) {
			fprintf(stderr, "dtype %s len %zu layout %u: bytes differ\n",
				wsp_dtype_name(dtype), len, layout);
			exit(1);
		}
		t_dest_free(&d);
	}
	wspi_err_destroy(&err);
}

int main(void)
{
	static const int dtypes[] = { WSP_DTYPE_U8, WSP_DTYPE_I16, WSP_DTYPE_F16, WSP_DTYPE_BF16,
				      WSP_DTYPE_F32, WSP_DTYPE_I32, WSP_DTYPE_F64, WSP_DTYPE_F4 };
	static const size_t lens[] = { 0, 1, 2, 3, 6, 17, 256, 1023, 4096, 65538,
				       200000, MAX_RAW - 2, MAX_RAW };
	unsigned i, j, kind, x, level;

	raw = malloc(MAX_RAW);
	stored = malloc(chunk_encode_bound(MAX_RAW));
	CHECK(raw && stored);
	CHECK_RC(chunk_decoder_create(MAX_RAW, &dec), 0);
	for (level = 0; level < 2; level++) {
		CHECK_RC(chunk_encoder_create(level ? 3 : -1, MAX_RAW, &enc), 0);
		for (i = 0; i < WSP_ARRAY_SIZE(dtypes); i++)
			for (j = 0; j < WSP_ARRAY_SIZE(lens); j++)
				for (kind = T_RANDOM; kind <= T_SMALLINT; kind++)
					for (x = 0; x < 4; x++)
						roundtrip(dtypes[i], lens[j], kind,
							  x == 3 ? WSP_CODEC_EXPRANS :
							  x == 2 ? WSP_CODEC_RAW : WSP_CODEC_ZSTD,
							  x == 1);
		chunk_encoder_free(enc);
	}
	/* every path was taken */
	CHECK(n_zstd > 0 && n_raw > 0 && n_xform > 0 && n_exprans > 0);
	CHECK(chunk_transform_for(WSP_DTYPE_BF16) == WSPM_XFORM_EXP_BF16);
	CHECK(chunk_transform_for(WSP_DTYPE_F32) == WSPM_XFORM_EXP_F32);
	CHECK(chunk_transform_for(WSP_DTYPE_F16) == WSPM_XFORM_BYTES);
	CHECK(chunk_transform_for(WSP_DTYPE_U8) == WSPM_XFORM_NONE);
	chunk_decoder_free(dec);
	free(raw);
	free(stored);
	return 0;
}
