/* WSP_CODEC_AUTO, the converter's default: per chunk, exprans (which a GPU
 * decodes) unless zstd with the byte transform stores the chunk in more
 * than 3% fewer bytes; exprans codes the low halves of fp32 values too
 * (transform bit 0) where they have structure.  With the top bit on
 * (WSP_CONVERT_SMALLEST) it also codes each value's top mantissa bit with
 * the exponent (transform bit 1) wherever that is smaller; by default
 * never.  On realistic data, each chunk encoded three ways, both with the
 * top bit off and on:
 *
 *   Gaussian bf16 and fp32 (exprans, the fp32 low halves raw; within 0.5%
 *   of zstd, and no larger than zstd with the top bit);
 *   fp32 upcast from bf16 and from fp16, exactly and with a few bits of
 *   noise in the low half, and bf16 widened with a random byte 1 and one
 *   random bit in byte 0, as a real fp32 checkpoint showed (exprans with
 *   coded low halves: no larger than zstd, and far smaller than with the
 *   low halves raw);
 *
 * and every chunk decodes to its raw bytes.  Printed: each codec's ratio. */
#include <math.h>

#include "codec_test.h"
#include "float_data.h"
#include "pack/exprans/exprans.h"

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
	static const char *const names[] = {
		"gaussian bf16", "gaussian f32", "f32 upcast from bf16",
		"f32 upcast from bf16, 4 noisy low bits", "f32 upcast from f16",
		"f32 upcast from f16, 6 noisy low bits", "f32: bf16, random byte 1, byte 0 0 or 128" };
	enum { CASES = 7 };
	size_t cap = (size_t)N * 4;
	uint8_t *raw = malloc(cap), *st = malloc(chunk_encode_bound(cap)), *back = malloc(cap);
	uint8_t *plain = malloc(exprans_bound(N, 4, 3));
	uint16_t *h = malloc((size_t)N * 2);
	struct chunk_encoder *enc;
	struct chunk_decoder *dec;
	struct wsp_convert_options opt;

	CHECK(raw && st && back && h && plain);
	wsp_convert_options_init(&opt);
	CHECK(opt.codec == WSP_CODEC_AUTO);   /* the default */
	CHECK_RC(chunk_encoder_create(opt.level, cap, &enc), 0);
	CHECK_RC(chunk_decoder_create(cap, &dec), 0);
	for (int top_on = 0; top_on < 2; top_on++)
	for (int k = 0; k < CASES; k++) {
		chunk_encoder_set_top_bit(enc, top_on);
		int dtype = k == 0 ? WSP_DTYPE_BF16 : WSP_DTYPE_F32;
		size_t bytes = (size_t)N * (k == 0 ? 2 : 4);
		uint32_t *f = (uint32_t *)raw;
		if (k == 0) {
			fill(h, N, GAUSS);
			memcpy(raw, h, bytes);
		} else if (k == 1) {
			fill_values(raw, N, WSP_DTYPE_F32, GAUSS);
		} else if (k < 4) {
			fill(h, N, GAUSS);
			for (uint32_t i = 0; i < N; i++)
				f[i] = (uint32_t)h[i] << 16 | (k == 3 ? (uint32_t)(t_rand() & 0xf) : 0);
		} else if (k < 6) {
			for (uint32_t i = 0; i < N; i++)
				f[i] = widen_f16(f16_of((float)t_gauss(0.02))) |
				       (k == 5 ? (uint32_t)(t_rand() & 0x3f) : 0);
		} else {
			fill_values(raw, N, WSP_DTYPE_F32, UPCAST_BYTE1);
		}
		struct wspm_chunk cx, cz, ca;
		unsigned x = encode(enc, dec, raw, bytes, dtype, WSP_CODEC_EXPRANS, st, back, &cx);
		unsigned z = encode(enc, dec, raw, bytes, dtype, WSP_CODEC_ZSTD, st, back, &cz);
		unsigned a = encode(enc, dec, raw, bytes, dtype, WSP_CODEC_AUTO, st, back, &ca);
		/* exprans with the low halves stored raw, as before they were
		 * coded; and in the chosen layout less the top bit */
		int64_t r = k ? exprans_encode(raw, N, 4, 0, plain, exprans_bound(N, 4, 0)) : x;
		unsigned w = k ? 4 : 2, untop = cx.transform & ~EXPRANS_TOP_BIT;
		int64_t nt = exprans_encode(raw, N, w, untop, plain, exprans_bound(N, 4, 3));
		CHECK(r > 0 && nt > 0);
		fprintf(stderr, "%-40s ratio exprans %.3f (low halves raw: %.3f; without the top "
			"bit: %.3f), zstd %.3f, auto %.3f (%s%s%s)\n", names[k], (double)bytes / x,
			(double)bytes / (double)r, (double)bytes / (double)nt, (double)bytes / z,
			(double)bytes / a, ca.codec == WSP_CODEC_EXPRANS ? "exprans" : "zstd",
			ca.codec == WSP_CODEC_EXPRANS && (ca.transform & EXPRANS_LOW_PLANES)
			? ", low halves coded" : "",
			ca.codec == WSP_CODEC_EXPRANS && (ca.transform & EXPRANS_TOP_BIT)
			? ", top bit coded" : "");
		/* the top bit: where it makes the chunk smaller, when asked */
		int64_t t = exprans_top_bit_fits(raw, N, w)
			    ? exprans_encode(raw, N, w, untop | EXPRANS_TOP_BIT, plain, exprans_bound(N, 4, 3))
			    : nt;
		CHECK(t > 0);
		int want_top = top_on && t < nt;
		CHECK(!!(cx.transform & EXPRANS_TOP_BIT) == want_top);
		CHECK(want_top ? x == t && x < nt : x == nt);
		if (top_on)   /* on all these kinds it pays */
			CHECK(want_top);
		CHECK(cx.codec == WSP_CODEC_EXPRANS && cz.codec == WSP_CODEC_ZSTD);
		/* the rule, and its result never worse than either beyond 3% */
		if ((uint64_t)z * 100 < (uint64_t)x * 97)
			CHECK(ca.codec == WSP_CODEC_ZSTD && a == z);
		else
			CHECK(ca.codec == WSP_CODEC_EXPRANS && a == x);
		CHECK(a <= x && (uint64_t)a * 97 <= (uint64_t)z * 100);
		/* what the data should lead to: exprans everywhere (a GPU decodes
		 * it); on Gaussian weights with the low halves raw, on upcast ones
		 * coded, far smaller than raw */
		CHECK(ca.codec == WSP_CODEC_EXPRANS);
		if (k < 2)
			CHECK((ca.transform & ~EXPRANS_TOP_BIT) == 0);
		else
			CHECK((ca.transform & EXPRANS_LOW_PLANES) && (double)a < 0.8 * (double)r);
		/* the GPU-decodable codec no larger than zstd: an exact upcast's
		 * zero low bytes cost 4 bytes a section (compact frequencies),
		 * noise of a few bits is packed at its width; on Gaussian weights
		 * at most 0.5% behind, and with the top bit no larger */
		if (k < 2 && !top_on)
			CHECK((double)x <= 1.005 * (double)z);
		else
			CHECK(x <= z);
	}
	chunk_encoder_free(enc);
	chunk_decoder_free(dec);
	free(raw);
	free(st);
	free(back);
	free(h);
	free(plain);
	return 0;
}
