/* Writes the seed corpus of fuzz_chunk into the directory given as argv[1]
 * (not run by make check): valid chunks of every codec and transform, and a
 * few bad ones (huge window, truncated, wrong size). */
#include <stdio.h>
#include <xxhash.h>
#include "codec_test.h"
#include "exprans_sections.h"
#include "pack/exprans/exprans.h"

static uint8_t buf[1u << 17];

static void put(const char *dir, const char *name, const struct wspm_chunk *c, int dtype,
		unsigned spans, const void *stored, size_t n)
{
	char path[1024];
	uint8_t hdr[16] = { c->codec, c->transform, (uint8_t)dtype, (uint8_t)(spans - 1) };
	FILE *f;

	memcpy(hdr + 4, &c->raw_bytes, 4);
	memcpy(hdr + 8, &c->checksum, 8);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	CHECK(f);
	CHECK(fwrite(hdr, 1, 16, f) == 16);
	CHECK(fwrite(stored, 1, n, f) == n);
	CHECK(fclose(f) == 0);
}

int main(int argc, char **argv)
{
	static const struct { const char *name; int dtype; enum t_data kind; int xf; } seeds[] = {
		{ "ok-bf16-exp", WSP_DTYPE_BF16, T_GAUSS, 1 },
		{ "ok-bf16-none", WSP_DTYPE_BF16, T_GAUSS, 0 },
		{ "ok-f32-exp", WSP_DTYPE_F32, T_GAUSS, 1 },
		{ "ok-f16-bytes", WSP_DTYPE_F16, T_GAUSS, 1 },
		{ "ok-i32-none", WSP_DTYPE_I32, T_SMALLINT, 1 },
		{ "ok-raw", WSP_DTYPE_U8, T_RANDOM, 1 },
	};
	uint8_t raw[4096], out[4096 + 64];
	struct chunk_encoder *enc;
	struct wspi_err err;
	struct wspm_chunk c;
	unsigned i;

	if (argc != 2)
		return 2;
	wspi_err_init(&err);
	CHECK_RC(chunk_encoder_create(1, sizeof(raw), &enc), 0);
	for (i = 0; i < WSP_ARRAY_SIZE(seeds); i++) {
		t_fill(raw, sizeof(raw), seeds[i].dtype, seeds[i].kind);
		CHECK_RC(chunk_encode(enc, raw, sizeof(raw), seeds[i].dtype, WSP_CODEC_ZSTD,
				      seeds[i].xf, buf, &c, &err), 0);
		put(argv[1], seeds[i].name, &c, seeds[i].dtype, 1 + i % 4, buf, c.stored_bytes);
		if (i == 0) {
			put(argv[1], "bad-truncated", &c, seeds[i].dtype, 3, buf, c.stored_bytes / 2);
			c.raw_bytes -= 2;
			put(argv[1], "bad-size", &c, seeds[i].dtype, 2, buf, c.stored_bytes);
		}
	}
	CHECK_RC(chunk_encode(enc, raw, 0, WSP_DTYPE_BF16, WSP_CODEC_ZSTD, 1, buf, &c, &err), 0);
	put(argv[1], "ok-empty", &c, WSP_DTYPE_BF16, 1, buf, 0);
	/* a frame claiming a 2 GiB window: magic, FHD (4-byte size), window
	 * descriptor 2^31, size, one last raw block */
	{
		uint32_t magic = 0xFD2FB528u, n = 64, bh = 1u | (n << 3);
		size_t p = 0;
		memcpy(out + p, &magic, 4), p += 4;
		out[p++] = 0x80;
		out[p++] = (31 - 10) << 3;
		memcpy(out + p, &n, 4), p += 4;
		out[p++] = (uint8_t)bh, out[p++] = (uint8_t)(bh >> 8), out[p++] = (uint8_t)(bh >> 16);
		memset(out + p, 7, n), p += n;
		memset(&c, 0, sizeof(c));
		c.codec = WSP_CODEC_ZSTD;
		c.raw_bytes = n;
		memset(raw, 7, n);
		c.checksum = XXH3_64bits(raw, n);
		put(argv[1], "bad-window", &c, WSP_DTYPE_U8, 2, out, p);
	}
	/* exponent rANS (codec 2): a valid chunk, then damaged copies */
	t_fill(raw, sizeof(raw), WSP_DTYPE_BF16, T_GAUSS);
	CHECK_RC(chunk_encode(enc, raw, sizeof(raw), WSP_DTYPE_BF16, WSP_CODEC_EXPRANS, 1, buf, &c,
			      &err), 0);
	CHECK(c.codec == WSP_CODEC_EXPRANS);
	put(argv[1], "ok-bf16-exprans", &c, WSP_DTYPE_BF16, 3, buf, c.stored_bytes);
	put(argv[1], "bad-exprans-truncated", &c, WSP_DTYPE_BF16, 1, buf, c.stored_bytes - 7);
	memcpy(out, buf, c.stored_bytes);
	out[4 + 2 * 0x78] ^= 0x10;   /* a frequency: the sum is no longer 4096 */
	put(argv[1], "bad-exprans-freq", &c, WSP_DTYPE_BF16, 2, out, c.stored_bytes);
	memcpy(out, buf, c.stored_bytes);
	out[516 + 2 * 5] += 2;       /* lane 5 claims two more bytes */
	put(argv[1], "bad-exprans-lane", &c, WSP_DTYPE_BF16, 1, out, c.stored_bytes);
	memcpy(out, buf, c.stored_bytes);
	out[516 + 64 + 40] ^= 0x5a;  /* inside the lane streams */
	put(argv[1], "bad-exprans-stream", &c, WSP_DTYPE_BF16, 4, out, c.stored_bytes);
	/* exponent rANS of f16 and f32 values (16 KiB: an f16 chunk of 4 KiB
	 * does not shrink); an f32 chunk with its low halves cut short */
	{
		static uint8_t big[16384];
		struct chunk_encoder *e16;
		CHECK_RC(chunk_encoder_create(1, sizeof(big), &e16), 0);
		t_fill(big, sizeof(big), WSP_DTYPE_F16, T_GAUSS);
		CHECK_RC(chunk_encode(e16, big, sizeof(big), WSP_DTYPE_F16, WSP_CODEC_EXPRANS, 1, buf,
				      &c, &err), 0);
		CHECK(c.codec == WSP_CODEC_EXPRANS);
		put(argv[1], "ok-f16-exprans", &c, WSP_DTYPE_F16, 2, buf, c.stored_bytes);
		t_fill(big, sizeof(big), WSP_DTYPE_F32, T_GAUSS);
		chunk_encoder_set_top_bit(e16, 1);
		CHECK_RC(chunk_encode(e16, big, sizeof(big), WSP_DTYPE_F32, WSP_CODEC_EXPRANS, 1, buf,
				      &c, &err), 0);
		chunk_encoder_set_top_bit(e16, 0);
		CHECK(c.codec == WSP_CODEC_EXPRANS);
		/* Gaussian fp32: the top mantissa bit coded (transform 2), as
		 * WSP_CONVERT_SMALLEST writes it */
		CHECK(c.transform == EXPRANS_TOP_BIT);
		put(argv[1], "ok-f32-exprans", &c, WSP_DTYPE_F32, 3, buf, c.stored_bytes);
		put(argv[1], "bad-f32-exprans-short", &c, WSP_DTYPE_F32, 1, buf, c.stored_bytes - 1024);
		put(argv[1], "bad-f32-exprans-as-bf16", &c, WSP_DTYPE_BF16, 1, buf, c.stored_bytes);
		c.transform = 0;
		put(argv[1], "bad-f32-top-bit-as-plain", &c, WSP_DTYPE_F32, 1, buf, c.stored_bytes);
		/* fp32 upcast from bf16: the low halves coded (transform 1); read
		 * as the other layout, then with a section cut short */
		for (size_t q = 0; q + 4 <= sizeof(big); q += 4)
			big[q] = big[q + 1] = 0;
		CHECK_RC(chunk_encode(e16, big, sizeof(big), WSP_DTYPE_F32, WSP_CODEC_EXPRANS, 1, buf,
				      &c, &err), 0);
		CHECK(c.codec == WSP_CODEC_EXPRANS && c.transform == WSPM_XFORM_BYTES);
		put(argv[1], "ok-f32-exprans-coded-low", &c, WSP_DTYPE_F32, 3, buf, c.stored_bytes);
		put(argv[1], "bad-f32-coded-low-short", &c, WSP_DTYPE_F32, 1, buf, c.stored_bytes - 300);
		c.transform = WSPM_XFORM_NONE;
		put(argv[1], "bad-f32-coded-low-as-raw", &c, WSP_DTYPE_F32, 2, buf, c.stored_bytes);
		/* the same with the full frequency tables (packs written before
		 * the compact form) */
		exprans_compact = 0;
		CHECK_RC(chunk_encode(e16, big, sizeof(big), WSP_DTYPE_F32, WSP_CODEC_EXPRANS, 1, buf,
				      &c, &err), 0);
		exprans_compact = 1;
		CHECK(c.codec == WSP_CODEC_EXPRANS && c.transform == WSPM_XFORM_BYTES);
		put(argv[1], "ok-f32-coded-low-full-tables", &c, WSP_DTYPE_F32, 2, buf, c.stored_bytes);
		/* fp32 upcast from fp16: a plane of 8 symbols, one of one; then
		 * the exponents' compact symbols out of order */
		t_fill(big, sizeof(big), WSP_DTYPE_F32, T_GAUSS);
		for (size_t q = 0; q + 4 <= sizeof(big); q += 4) {
			big[q] = 0;
			big[q + 1] &= 0xe0;
		}
		CHECK_RC(chunk_encode(e16, big, sizeof(big), WSP_DTYPE_F32, WSP_CODEC_EXPRANS, 1, buf,
				      &c, &err), 0);
		CHECK(c.codec == WSP_CODEC_EXPRANS && c.transform == WSPM_XFORM_BYTES);
		CHECK(buf[5] & 0x80);   /* the compact form */
		put(argv[1], "ok-f32-coded-low-f16", &c, WSP_DTYPE_F32, 3, buf, c.stored_bytes);
		buf[7] = buf[6];
		put(argv[1], "bad-f32-coded-low-order", &c, WSP_DTYPE_F32, 1, buf, c.stored_bytes);
		/* a byte 0 of two values, one rare: coded with lanes (1/3 bit a
		 * value), not packed */
		t_fill(big, sizeof(big), WSP_DTYPE_F32, T_GAUSS);
		for (size_t q = 0; q + 4 <= sizeof(big); q += 4) {
			big[q] = (uint8_t)(t_rand() % 16 == 0);
			big[q + 1] = 0;
		}
		CHECK_RC(chunk_encode(e16, big, sizeof(big), WSP_DTYPE_F32, WSP_CODEC_EXPRANS, 1, buf,
				      &c, &err), 0);
		CHECK(c.codec == WSP_CODEC_EXPRANS && c.transform == WSPM_XFORM_BYTES);
		put(argv[1], "ok-f32-coded-low-skewed", &c, WSP_DTYPE_F32, 3, buf, c.stored_bytes);
		/* packed byte planes: byte 1 of 255 values (8-bit indices), byte 0
		 * of two (1 bit); then an index naming a symbol the plane lacks */
		t_fill(big, sizeof(big), WSP_DTYPE_F32, T_GAUSS);
		for (size_t q = 0; q + 4 <= sizeof(big); q += 4) {
			big[q] = (uint8_t)(t_rand() & 0x80);
			big[q + 1] = (uint8_t)(t_rand() % 255);
		}
		CHECK_RC(chunk_encode(e16, big, sizeof(big), WSP_DTYPE_F32, WSP_CODEC_EXPRANS, 1, buf,
				      &c, &err), 0);
		CHECK(c.codec == WSP_CODEC_EXPRANS && c.transform == WSPM_XFORM_BYTES);
		put(argv[1], "ok-f32-coded-low-packed", &c, WSP_DTYPE_F32, 3, buf, c.stored_bytes);
		/* byte 1's plane: its header (255 symbols), then the indices */
		uint64_t at = 4 + exprans_section_len(buf, 4, sizeof(big) / 4);
		CHECK(buf[at] == 0xff && buf[at + 1] == 0x40 && at + 2 + 256 + 10 < c.stored_bytes);
		buf[at + 2 + 256 + 10] = 0xff;
		put(argv[1], "bad-f32-coded-low-index", &c, WSP_DTYPE_F32, 1, buf, c.stored_bytes);
		/* bf16 with the top bit (a stream that ends with a section), its
		 * sign|mantissa section packed, then coded by lanes */
		chunk_encoder_set_top_bit(e16, 1);
		for (int lanes = 0; lanes < 2; lanes++) {
			uint16_t *h = (uint16_t *)big;
			t_fill(big, sizeof(big), WSP_DTYPE_BF16, T_GAUSS);
			for (size_t q = 0; lanes && q < sizeof(big) / 2; q++)
				h[q] = exprans_shape_sign_mant(h[q], 2, t_rand);
			CHECK_RC(chunk_encode(e16, big, sizeof(big), WSP_DTYPE_BF16, WSP_CODEC_EXPRANS, 1,
					      buf, &c, &err), 0);
			CHECK(c.codec == WSP_CODEC_EXPRANS && c.transform == EXPRANS_TOP_BIT);
			CHECK(exprans_sign_mant_form(buf, sizeof(big) / 2, c.transform) == 1 + lanes);
			put(argv[1], lanes ? "ok-bf16-top-bit-lanes" : "ok-bf16-top-bit", &c,
			    WSP_DTYPE_BF16, 1, buf, c.stored_bytes);
		}
		chunk_encoder_set_top_bit(e16, 0);
		chunk_encoder_free(e16);
	}
	chunk_encoder_free(enc);
	wspi_err_destroy(&err);
	return 0;
}
