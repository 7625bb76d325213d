/* WSP_CODEC_AUTO, the converter's default: per chunk, exprans (which a GPU
 * decodes) unless zstd with the byte transform stores the chunk in more
 * than 3% fewer bytes.  On realistic data, each chunk encoded three ways:
 *
 *   Gaussian bf16 and fp32 (exprans is as small as zstd: exprans chosen);
 *   fp32 upcast from bf16 (low 16 bits zero: zstd far smaller, chosen);
 *   fp32 upcast from bf16 with 4 bits of noise in the low half (zstd
 *   still smaller: chosen);
 *
 * and every chunk decodes to its raw bytes.  Printed: each codec's ratio. */
#include "codec_test.h"
#include "float_data.h"

#define N (1u << 18)   /* values a chunk */

static unsigned encode(struct chunk_encoder *enc, struct chunk_decoder *dec, const void *raw,
		       size_t bytes, int dtype, enum wsp_codec codec, uint8_t *st, uint8_t *back,
		       struct wspm_chunk *c)
{
	struct wspi_err err;
	struct wspi_span span = { .ptr = back, .len = bytes };

	wspi_err_init(&err);
	CHECK_RC(chunk_encode(enc, raw, bytes, dtype, codec, 1, st, c, &err), 0);
	CHECK(c->codec != WSP_CODEC_AUTO);
	memset(back, 0xa5, bytes);
	CHECK_RC(chunk_decode(dec, c, dtype, st, &span, 1, &err), 0);
	CHECK(memcmp(back, raw, bytes) == 0);
	wspi_err_destroy(&err);
	return c->stored_bytes;
}

int main(void)
{
	static const char *const names[] = { "gaussian bf16", "gaussian f32", "f32 upcast from bf16",
					     "f32 upcast from bf16, 4 noisy low bits" };
	size_t cap = (size_t)N * 4;
	uint8_t *raw = malloc(cap), *st = malloc(chunk_encode_bound(cap)), *back = malloc(cap);
	uint16_t *h = malloc((size_t)N * 2);
	struct chunk_encoder *enc;
	struct chunk_decoder *dec;
	struct wsp_convert_options opt;

	CHECK(raw && st && back && h);
	wsp_convert_options_init(&opt);
	CHECK(opt.codec == WSP_CODEC_AUTO);   /* the default */
	CHECK_RC(chunk_encoder_create(opt.level, cap, &enc), 0);
	CHECK_RC(chunk_decoder_create(cap, &dec), 0);
	for (int k = 0; k < 4; k++) {
		int dtype = k == 0 ? WSP_DTYPE_BF16 : WSP_DTYPE_F32;
		size_t bytes = (size_t)N * (k == 0 ? 2 : 4);
		if (k == 0) {
			fill(h, N, GAUSS);
			memcpy(raw, h, bytes);
		} else if (k == 1) {
			fill_values(raw, N, WSP_DTYPE_F32, GAUSS);
		} else {
			fill(h, N, GAUSS);
			uint32_t *f = (uint32_t *)raw;
			for (uint32_t i = 0; i < N; i++)
				f[i] = (uint32_t)h[i] << 16 | (k == 3 ? (uint32_t)(t_rand() & 0xf) : 0);
		}
		struct wspm_chunk cx, cz, ca;
		unsigned x = encode(enc, dec, raw, bytes, dtype, WSP_CODEC_EXPRANS, st, back, &cx);
		unsigned z = encode(enc, dec, raw, bytes, dtype, WSP_CODEC_ZSTD, st, back, &cz);
		unsigned a = encode(enc, dec, raw, bytes, dtype, WSP_CODEC_AUTO, st, back, &ca);
		fprintf(stderr, "%-40s ratio exprans %.3f, zstd %.3f, auto %.3f (%s)\n", names[k],
			(double)bytes / x, (double)bytes / z, (double)bytes / a,
			ca.codec == WSP_CODEC_EXPRANS ? "exprans" : "zstd");
		CHECK(cx.codec == WSP_CODEC_EXPRANS && cz.codec == WSP_CODEC_ZSTD);
		/* the rule, and its result never worse than either beyond 3% */
		if ((uint64_t)z * 100 < (uint64_t)x * 97)
			CHECK(ca.codec == WSP_CODEC_ZSTD && a == z);
		else
			CHECK(ca.codec == WSP_CODEC_EXPRANS && a == x);
		CHECK(a <= x && (uint64_t)a * 97 <= (uint64_t)z * 100);
		/* what the data should lead to: exprans on Gaussian weights,
		 * zstd on upcast ones (the low half has structure) */
		if (k < 2)
			CHECK(ca.codec == WSP_CODEC_EXPRANS);
		else
			CHECK(ca.codec == WSP_CODEC_ZSTD && (double)a < 0.9 * x);
	}
	chunk_encoder_free(enc);
	chunk_decoder_free(dec);
	free(raw);
	free(st);
	free(back);
	free(h);
	return 0;
}
