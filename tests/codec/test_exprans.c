/*
 * The exponent-rANS codec (src/pack/exprans): round trips of bf16, f16 and
 * f32 data of every kind and odd size (0, 1, 2, a lane, a block +-1, several blocks:
 * Gaussian, heavy-tailed, all-equal exponents, NaN/Inf/subnormals, random
 * bits); the stream rejected when truncated, extended or with a changed
 * count, and never read or written out of bounds when bytes are flipped
 * (ASan), the AVX-512, AVX2 and portable decoders agreeing on every
 * stream, good or damaged; through chunk_encode/chunk_decode with the
 * checksum, f16 and f32 about as small as zstd makes them, falling back to
 * zstd for other dtypes.  Prints the ratios and the decoder's speed (speed
 * not asserted).
 */
#include <errno.h>
#include <time.h>

#include "codec_test.h"
#include "pack/exprans/exprans.h"
#include "exprans_sections.h"
#include "float_data.h"

/* flags: the layout (the chunk's transform): EXPRANS_LOW_PLANES, f32 with
 * the low halves coded; EXPRANS_TOP_BIT, the top mantissa bit coded with
 * the exponent (refused by the encoder where the values do not fit it) */
static void roundtrip(uint64_t n, enum kind k, int dtype, unsigned flags)
{
	unsigned w = exprans_value_bytes(dtype), planes = flags & EXPRANS_LOW_PLANES;
	uint8_t *v = malloc(n * w + 4), *back = malloc(n * w + 4), *back2 = malloc(n * w + 4);
	size_t cap = exprans_bound(n, w, flags);
	uint8_t *enc = malloc(cap);
	struct wspi_err err;
	CHECK(v && back && back2 && enc);
	fill_values(v, n, dtype, k);
	if ((flags & EXPRANS_TOP_BIT) && !exprans_top_bit_fits(v, n, w)) {
		CHECK_RC(exprans_encode(v, n, w, flags, enc, cap), WSP_ETOOBIG);
		free(v), free(back), free(back2), free(enc);
		return;
	}
	int64_t len = exprans_encode(v, n, w, flags, enc, cap);
	CHECK(len > 0 && (size_t)len <= cap);
	wspi_err_init(&err);
	for (int simd = 0; simd < 3; simd++) {
		exprans_use_simd = simd;
		memset(back, 0xee, n * w);
		int rc = exprans_decode(enc, (size_t)len, back, n, w, flags, &err);
		if (rc != 0)
			fprintf(stderr, "%s n %llu kind %d flags %u simd %d: %s\n",
				wsp_dtype_name(dtype), (unsigned long long)n, k, flags, simd, err.msg);
		CHECK_RC(rc, 0);
		CHECK(memcmp(v, back, n * w) == 0);
	}
	/* coded low halves or top bit: the full frequency tables of packs
	 * written before the compact form still decode, and are never smaller */
	if (flags) {
		uint8_t *full = malloc(cap);
		CHECK(full);
		exprans_compact = 0;
		int64_t flen = exprans_encode(v, n, w, flags, full, cap);
		exprans_compact = 1;
		CHECK(flen >= len);
		memset(back, 0xee, n * w);
		CHECK_RC(exprans_decode(full, (size_t)flen, back, n, w, flags, &err), 0);
		CHECK(memcmp(v, back, n * w) == 0);
		free(full);
	}
	/* one byte short, one too many, the wrong count, the other width, the
	 * other f32 layout, the other top-bit layout: refused */
	if (len > 0) {
		CHECK_RC(exprans_decode(enc, (size_t)len - 1, back, n, w, flags, &err), WSP_EFORMAT);
		CHECK_RC(exprans_decode(enc, (size_t)len, back, n + 1, w, flags, &err), WSP_EFORMAT);
		if (n && !planes)
			CHECK_RC(exprans_decode(enc, (size_t)len, back2, n, 6 - w, flags, &err),
				 WSP_EFORMAT);
		if (n && w == 4)
			CHECK_RC(exprans_decode(enc, (size_t)len, back2, n, w, flags ^ EXPRANS_LOW_PLANES,
						&err), WSP_EFORMAT);
		if (n)
			CHECK_RC(exprans_decode(enc, (size_t)len, back2, n, w, flags ^ EXPRANS_TOP_BIT,
						&err), WSP_EFORMAT);
	}
	if (w == 2)   /* planes are for 32-bit values only */
		CHECK_RC(exprans_decode(enc, (size_t)len, back2, n, w, 1, &err), -EINVAL);
	uint8_t *longer = malloc((size_t)len + 1);
	memcpy(longer, enc, (size_t)len);
	longer[len] = 0;
	CHECK_RC(exprans_decode(longer, (size_t)len + 1, back, n, w, flags, &err), WSP_EFORMAT);
	free(longer);
	/* flipped bytes: an error, or (rarely, in the raw bytes) different
	 * values; never a crash (ASan) */
	for (int t = 0; t < 40 && len > 0; t++) {
		size_t at = (size_t)(t_rand() % (uint64_t)len);
		uint8_t old = enc[at];
		enc[at] ^= (uint8_t)(1u << (t_rand() % 8));
		exprans_use_simd = 0;
		int r0 = exprans_decode(enc, (size_t)len, back2, n, w, flags, &err);
		for (int simd = 1; simd < 3; simd++) {
			exprans_use_simd = simd;
			int r = exprans_decode(enc, (size_t)len, back, n, w, flags, &err);
			CHECK(r0 == r && (r0 != 0 || memcmp(back, back2, n * w) == 0));
		}
		enc[at] = old;
	}
	exprans_use_simd = 2;
	wspi_err_destroy(&err);
	free(v), free(back), free(back2), free(enc);
}

/* Decoding bad[0, len) (n 32-bit values) fails, naming why, with both
 * decoders. */
static void refused(const uint8_t *bad, int64_t len, uint64_t n, int planes, const char *why)
{
	struct wspi_err err;
	uint32_t *back = malloc(n * 4);
	CHECK(back);
	wspi_err_init(&err);
	for (int simd = 0; simd < 3; simd++) {
		exprans_use_simd = simd;
		CHECK_RC(exprans_decode(bad, (size_t)len, back, n, 4, planes, &err), WSP_EFORMAT);
		if (!strstr(err.msg, why))
			fprintf(stderr, "want \"%s\", got: %s\n", why, err.msg);
		CHECK(strstr(err.msg, why) != NULL);
	}
	exprans_use_simd = 2;
	wspi_err_destroy(&err);
	free(back);
}

/* The compact frequencies (chunks with coded low halves): a section of
 * one symbol is a 4-byte header, and every malformed compact header is
 * refused with its reason. */
static void compact_headers(void)
{
	enum { N = 40000 };   /* two blocks */
	uint32_t *v = malloc(N * 4), *back = malloc(N * 4);
	size_t cap = exprans_bound(N, 4, 1);
	uint8_t *enc = malloc(cap), *full = malloc(cap), *bad = malloc(cap);
	struct wspi_err err;
	CHECK(v && back && enc && full && bad);
	wspi_err_init(&err);
	fill_values(v, N, WSP_DTYPE_F32, LOW_CONST);   /* both byte planes constant */
	int64_t len = exprans_encode(v, N, 4, 1, enc, cap);
	exprans_compact = 0;
	int64_t flen = exprans_encode(v, N, 4, 1, full, cap);
	exprans_compact = 1;
	CHECK(len > 0 && flen > 0);
	/* each constant plane: 4 bytes instead of 512 + 2 blocks of 64 bytes of
	 * lengths and 32 lanes' 4-byte states; the exponents' header shrinks */
	CHECK(flen - len > 2 * (512 + 2 * (64 + 128) - 4));
	CHECK_RC(exprans_decode(enc, (size_t)len, back, N, 4, 1, &err), 0);
	CHECK(memcmp(v, back, N * 4) == 0);
	/* the exponent section's compact header: k symbols, then the planes' */
	unsigned k = (unsigned)(enc[4] | enc[5] << 8) & 0x7fffu;
	CHECK((enc[5] & 0x80) && k > 1 && k < 64);
	struct { uint64_t at; uint16_t word; int byte; const char *why; } cases[] = {
		{ 4, 0x8000, 0, "a compact header of 0 symbols" },
		{ 4, 0x8101, 0, "a compact header of 257 symbols" },
		{ 6, 0, 1, "compact symbols out of order" },       /* symbol 0 = symbol 1 */
		{ 4 + 2 + k + (k & 1), 0, 0, "compact frequency 0" },
		{ 4 + 2 + k + (k & 1), 4096, 0, "summing to 4096" },   /* the rest too many */
	};
	for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		memcpy(bad, enc, (size_t)len);
		if (cases[c].byte)
			bad[cases[c].at] = bad[cases[c].at + 1];
		else {
			bad[cases[c].at] = (uint8_t)cases[c].word;
			bad[cases[c].at + 1] = (uint8_t)(cases[c].word >> 8);
		}
		refused(bad, len, N, 1, cases[c].why);
	}
	/* the first constant plane's symbol above 255 */
	uint64_t plane = 4 + exprans_section_len(enc, 4, N);
	CHECK(plane + 4 <= (uint64_t)len && enc[plane] == 1 && enc[plane + 1] == 0x80 &&
	      enc[plane + 2] == 0x2a && enc[plane + 3] == 0);   /* bits 15..8 of 0x2a17 */
	memcpy(bad, enc, (size_t)len);
	bad[plane + 3] = 1;
	refused(bad, len, N, 1, "(bits 15..8): symbol 298");
	/* a compact header where the format has none: a chunk of 16-bit values
	 * or of 32-bit values with raw low halves */
	int64_t plain = exprans_encode(v, N, 4, 0, full, cap);
	CHECK(plain > 0);
	full[4] = 0x01;
	full[5] = 0x80;
	refused(full, plain, N, 0, "compact header in a chunk without coded low halves");
	wspi_err_destroy(&err);
	free(v), free(back), free(enc), free(full), free(bad);
}

/* Packed byte planes: a byte 1 of 255 values about equally likely stored
 * as 8 bits a value, a byte 0 of two values as one bit; each smaller than
 * the rANS section it replaces, and every malformed packed plane refused
 * with its reason. */
static void packed_planes(void)
{
	enum { N = 70001 };   /* three blocks, the last short; bits end mid-byte */
	uint32_t *v = malloc(N * 4), *back = malloc(N * 4);
	size_t cap = exprans_bound(N, 4, 1);
	uint8_t *enc = malloc(cap), *bad = malloc(cap);
	struct wspi_err err;
	CHECK(v && back && enc && bad);
	wspi_err_init(&err);
	fill_values(v, N, WSP_DTYPE_F32, UPCAST_BYTE1);   /* byte 1: 0 to 254 */
	int64_t len = exprans_encode(v, N, 4, 1, enc, cap);
	CHECK(len > 0);
	CHECK_RC(exprans_decode(enc, (size_t)len, back, N, 4, 1, &err), 0);
	CHECK(memcmp(v, back, N * 4) == 0);
	uint64_t s1 = 4 + exprans_section_len(enc, 4, N), s2 = s1 + exprans_section_len(enc, s1, N);
	CHECK((enc[s1] | enc[s1 + 1] << 8) == (0x4000 | 255));
	CHECK((enc[s2] | enc[s2 + 1] << 8) == (0x4000 | 2));
	CHECK(enc[s2 + 2] == 0x00 && enc[s2 + 3] == 0x80);
	/* the symbols, padded to even, then the indices, padded to even */
	CHECK(s2 - s1 == 2 + 255 + 1 + N + 1);
	uint64_t idx1 = s1 + 2 + 255 + 1, idx2 = s2 + 2 + 2, idx2_used = (N + 7) / 8;   /* 8751 */
	CHECK(exprans_section_len(enc, s2, N) == 2 + 2 + idx2_used + 1);
	CHECK(s2 + exprans_section_len(enc, s2, N) + N == (uint64_t)len);
	exprans_compact = 0;   /* the older writer: full tables, rANS everywhere */
	int64_t old = exprans_encode(v, N, 4, 1, bad, cap);
	exprans_compact = 1;
	CHECK(old > len + 2 * 3 * 32 * 6);   /* the byte planes' lanes' states and lengths */
	/* each case a header word written, a byte written, or bits set */
	enum edit { SET_WORD, SET_BYTE, OR_BITS };
	struct { uint64_t at; enum edit how; uint16_t val; const char *why; } cases[] = {
		{ s1, SET_WORD, 0x4001, "(bits 15..8): a packed plane of 1 symbols" },
		{ s2, SET_WORD, 0x4102, "(bits 7..0): a packed plane of 258 symbols" },
		{ s2 + 3, SET_BYTE, 0x00, "(bits 7..0): packed symbols out of order" },   /* 0, 0 */
		{ idx2 + idx2_used - 1, OR_BITS, 0x02, "(bits 7..0): bits set past a packed plane's last index" },
		{ idx2 + idx2_used, OR_BITS, 0x01, "(bits 7..0): bits set past a packed plane's last index" },
		{ idx1 + 40000, OR_BITS, 0xff,
		  "(bits 15..8): value 40000 holds an index past the packed plane's symbols" },
		{ 4, SET_WORD, 0x4003, "a packed plane where the format has none" },   /* the exponents */
	};
	for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint8_t *at = bad + cases[c].at;
		memcpy(bad, enc, (size_t)len);
		if (cases[c].how == OR_BITS)
			*at |= (uint8_t)cases[c].val;
		else
			*at = (uint8_t)cases[c].val;
		if (cases[c].how == SET_WORD)
			at[1] = (uint8_t)(cases[c].val >> 8);
		refused(bad, len, N, 1, cases[c].why);
	}
	/* 5, 6 and 7 bits an index: eight values in that many bytes; each
	 * size but the last 8-value group (N % 8 == 1) */
	for (unsigned k = 32; k <= 128; k *= 2) {
		for (unsigned i = 0; i < N; i++)
			v[i] = (v[i] & ~0xffu) | (unsigned)(t_rand() % k);
		int64_t l = exprans_encode(v, N, 4, 1, enc, cap);
		CHECK(l > 0);
		uint64_t b1 = 4 + exprans_section_len(enc, 4, N), b0 = b1 + exprans_section_len(enc, b1, N);
		CHECK((unsigned)(enc[b0] | enc[b0 + 1] << 8) == (0x4000u | k));
		for (int simd = 0; simd < 3; simd++) {
			exprans_use_simd = simd;
			memset(back, 0, N * 4);
			CHECK_RC(exprans_decode(enc, (size_t)l, back, N, 4, 1, &err), 0);
			CHECK(memcmp(v, back, N * 4) == 0);
		}
		exprans_use_simd = 2;
	}
	/* a packed header where the format has none: raw low halves */
	int64_t plain = exprans_encode(v, N, 4, 0, bad, cap);
	CHECK(plain > 0);
	bad[4] = 2;
	bad[5] = 0x40;
	refused(bad, plain, N, 0, "a packed plane where the format has none");
	wspi_err_destroy(&err);
	free(v), free(back), free(enc), free(bad);
}

/* The top bit's stream: a base past 511, a symbol that base + symbol puts
 * past 511, a sign|mantissa symbol past 127: each refused with its reason
 * (the GPU decoder's test damages such streams at random). */
static void top_bit_headers(void)
{
	enum { N = 70001 };
	uint32_t *v = malloc(N * 4);
	size_t cap = exprans_bound(N, 4, EXPRANS_TOP_BIT);
	uint8_t *enc = malloc(cap), *bad = malloc(cap);
	CHECK(v && enc && bad);
	fill_values(v, N, WSP_DTYPE_F32, GAUSS);
	CHECK(exprans_top_bit_fits(v, N, 4));
	int64_t len = exprans_encode(v, N, 4, EXPRANS_TOP_BIT, enc, cap);
	CHECK(len > 0);
	uint64_t sm = 6 + exprans_section_len(enc, 6, N);
	unsigned h = enc[sm] | enc[sm + 1] << 8, k = h & 0x3fffu;
	/* Gaussian: the sign and 6 mantissa bits all occur, packed at 7 bits */
	CHECK((h & 0xc000u) == 0x4000u && k == 128 && enc[sm + 2 + k - 1] == 127);
	memcpy(bad, enc, (size_t)len);
	bad[4] = 0x00, bad[5] = 0x02;   /* base 512 */
	refused(bad, len, N, EXPRANS_TOP_BIT, "symbols start at pair 512");
	memcpy(bad, enc, (size_t)len);
	bad[4] = 0xff, bad[5] = 0x01;   /* base 511: only symbol 0 fits */
	refused(bad, len, N, EXPRANS_TOP_BIT, "exprans: symbol");
	memcpy(bad, enc, (size_t)len);
	bad[sm + 2 + k - 1] = 0x80;     /* a sign|mantissa symbol of 8 bits */
	refused(bad, len, N, EXPRANS_TOP_BIT, "(sign and mantissa): symbol 128");
	/* a value of each exponent and zero (pairs 0 to 511): no base fits */
	for (uint32_t i = 0; i < 256; i++)
		v[i] = i << 23;
	CHECK(!exprans_top_bit_fits(v, N, 4));
	CHECK_RC(exprans_encode(v, N, 4, EXPRANS_TOP_BIT, enc, cap), WSP_ETOOBIG);
	free(v), free(enc), free(bad);
}

/* The top bit's sign|mantissa section in each of its forms (one symbol,
 * packed below 7 bits, lanes), for bf16, f32 and f32 with coded low
 * halves: round trips with both decoders, from a buffer of exactly the
 * stream's length (such a stream can end with a section coded by lanes,
 * whose lanes must not read past it: ASan). */
static void top_bit_forms(void)
{
	enum { N = 70001 };
	uint16_t *h = malloc(N * 2);
	uint32_t *v = malloc(N * 4), *back = malloc(N * 4);
	size_t cap = exprans_bound(N, 4, 3);
	uint8_t *enc = malloc(cap);
	struct wspi_err err;
	CHECK(h && v && back && enc);
	wspi_err_init(&err);
	for (int form = 0; form < 3; form++)
		for (unsigned layout = 0; layout < 3; layout++) {
			/* bf16; f32 with raw low halves; f32 upcast (coded low halves) */
			unsigned w = layout ? 4 : 2, flags = EXPRANS_TOP_BIT | (layout == 2);
			fill(h, N, GAUSS);
			for (uint32_t i = 0; i < N; i++) {
				h[i] = exprans_shape_sign_mant(h[i], form, t_rand);
				v[i] = (uint32_t)h[i] << 16 | (layout == 1 ? (uint32_t)(t_rand() & 0xffff) : 0);
			}
			const void *src = w == 2 ? (const void *)h : (const void *)v;
			int64_t len = exprans_encode(src, N, w, flags, enc, cap);
			CHECK(len > 0);
			CHECK(exprans_sign_mant_form(enc, N, flags) == form);
			uint8_t *exact = malloc((size_t)len);
			CHECK(exact);
			memcpy(exact, enc, (size_t)len);
			for (int simd = 0; simd < 3; simd++) {
				exprans_use_simd = simd;
				memset(back, 0xee, N * 4);
				CHECK_RC(exprans_decode(exact, (size_t)len, back, N, w, flags, &err), 0);
				CHECK(memcmp(back, src, N * w) == 0);
			}
			free(exact);
		}
	exprans_use_simd = 2;
	wspi_err_destroy(&err);
	free(h), free(v), free(back), free(enc);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void)
{
	static const uint64_t sizes[] = { 0, 1, 2, 31, 32, 33, 1023, 1024, 1025, 32767, 32768,
					  32769, 100000 };
	static const int dtypes[] = { WSP_DTYPE_BF16, WSP_DTYPE_F16, WSP_DTYPE_F32 };
	for (unsigned d = 0; d < 3; d++)
		for (unsigned k = GAUSS; k <= (dtypes[d] == WSP_DTYPE_F32 ? LAST_KIND : BITS); k++)
			for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
				for (unsigned flags = 0; flags < 4; flags++)
					if (!(flags & EXPRANS_LOW_PLANES) || dtypes[d] == WSP_DTYPE_F32)
						roundtrip(sizes[i], (enum kind)k, dtypes[d], flags);
	CHECK(exprans_value_bytes(WSP_DTYPE_I8) == 0 && exprans_value_bytes(WSP_DTYPE_F64) == 0);
	compact_headers();
	packed_planes();
	top_bit_headers();
	top_bit_forms();

	/* Through the chunk codec: bf16, f16 and f32 coded, checksum checked;
	 * other dtypes fall back to zstd. */
	struct chunk_encoder *enc;
	struct chunk_decoder *dec;
	struct wspi_err err;
	wspi_err_init(&err);
	uint64_t raw = 1 << 20;
	CHECK_RC(chunk_encoder_create(1, raw, &enc), 0);
	CHECK_RC(chunk_decoder_create(raw, &dec), 0);
	uint16_t *v = malloc(raw), *back = malloc(raw);
	uint8_t *stored = malloc(chunk_encode_bound(raw));
	fill(v, raw / 2, GAUSS);
	struct wspm_chunk c;
	CHECK_RC(chunk_encode(enc, v, raw, WSP_DTYPE_BF16, WSP_CODEC_EXPRANS, 1, stored, &c, &err), 0);
	CHECK(c.codec == WSP_CODEC_EXPRANS && c.transform == 0 && c.stored_bytes < raw);
	printf("Gaussian bf16 (std 0.02), 1 MiB chunk: ratio %.3f\n", (double)raw / c.stored_bytes);
	CHECK((double)raw / c.stored_bytes >= 1.45);
	struct wspi_span sp = { back, raw };
	CHECK_RC(chunk_decode(dec, &c, WSP_DTYPE_BF16, stored, &sp, 1, &err), 0);
	CHECK(memcmp(v, back, raw) == 0);
	c.checksum ^= 1;   /* the decoded bytes are checked against the checksum */
	CHECK_RC(chunk_decode(dec, &c, WSP_DTYPE_BF16, stored, &sp, 1, &err), WSP_ECHECKSUM);
	c.checksum ^= 1;
	CHECK_RC(chunk_decode(dec, &c, WSP_DTYPE_F32, stored, &sp, 1, &err), WSP_EFORMAT);
	CHECK_RC(chunk_decode(dec, &c, WSP_DTYPE_I16, stored, &sp, 1, &err), WSP_EFORMAT);
	/* decode speed (one thread), for docs/PERFORMANCE.md; not asserted.
	 * The ceiling in the same run: one thread copying the raw bytes. */
	double tc = now();
	for (int r = 0; r < 20; r++) {
		memcpy(back, v, raw);
		__asm__ __volatile__("" : : "r"(back) : "memory");
	}
	double copy_gbs = 20 * (double)raw / (now() - tc) / 1e9;
	printf("ceiling: memcpy of the raw bytes, %.2f GB/s on one thread\n", copy_gbs);
	/* the chunk as coded (bf16: plain), and with the top bit coded (the
	 * converter does that for fp32 only) beside it */
	CHECK(c.transform == 0);
	uint8_t *topc = malloc(exprans_bound(raw / 2, 2, EXPRANS_TOP_BIT));
	CHECK(topc);
	int64_t top_len = exprans_encode(v, raw / 2, 2, EXPRANS_TOP_BIT, topc,
					 exprans_bound(raw / 2, 2, EXPRANS_TOP_BIT));
	CHECK(top_len > 0 && top_len < (int64_t)c.stored_bytes);
	static const char *const decoders[] = { "portable", "AVX2 where the CPU has it",
						"AVX-512 where the CPU has it" };
	for (int simd = 2; simd >= 0; simd--)
		for (unsigned flags = 0; flags <= EXPRANS_TOP_BIT; flags += EXPRANS_TOP_BIT) {
			const uint8_t *in = flags ? topc : stored;
			size_t len = flags ? (size_t)top_len : c.stored_bytes;
			exprans_use_simd = simd;
			double t0 = now();
			int reps = 20;
			for (int r = 0; r < reps; r++)
				CHECK_RC(exprans_decode(in, len, back, raw / 2, 2, flags, &err), 0);
			double gbs = reps * (double)raw / (now() - t0) / 1e9;
			printf("CPU decode (%s, %s): %.2f GB/s of raw bf16 on one thread = %.3f of "
			       "memcpy\n", decoders[simd], flags ? "top bit coded" : "plain", gbs,
			       gbs / copy_gbs);
		}
	exprans_use_simd = 2;
	free(topc);
	/* f16 and f32 Gaussian weights: coded too, about as small as zstd with
	 * the dtype's transform makes them (wspack(5)). */
	static const int wide[] = { WSP_DTYPE_F16, WSP_DTYPE_F32 };
	for (unsigned d = 0; d < 2; d++) {
		struct wspm_chunk f, z;
		uint8_t *zs = malloc(chunk_encode_bound(raw));
		fill_values(v, raw / exprans_value_bytes(wide[d]), wide[d], GAUSS);
		CHECK_RC(chunk_encode(enc, v, raw, wide[d], WSP_CODEC_EXPRANS, 1, stored, &f, &err), 0);
		CHECK(f.codec == WSP_CODEC_EXPRANS && f.stored_bytes < raw);
		CHECK_RC(chunk_encode(enc, v, raw, wide[d], WSP_CODEC_ZSTD, 1, zs, &z, &err), 0);
		printf("Gaussian %s, 1 MiB chunk: ratio %.3f (zstd with its transform: %.3f)\n",
		       wsp_dtype_name(wide[d]), (double)raw / f.stored_bytes,
		       (double)raw / z.stored_bytes);
		CHECK((double)z.stored_bytes / f.stored_bytes >= 0.99);
		memset(back, 0, raw);
		CHECK_RC(chunk_decode(dec, &f, wide[d], stored, &sp, 1, &err), 0);
		CHECK(memcmp(v, back, raw) == 0);
		free(zs);
	}
	struct wspm_chunk f;
	CHECK_RC(chunk_encode(enc, v, raw, WSP_DTYPE_I16, WSP_CODEC_EXPRANS, 1, stored, &f, &err), 0);
	CHECK(f.codec == WSP_CODEC_ZSTD || f.codec == WSP_CODEC_RAW);
	/* random bits do not shrink: stored raw */
	fill(v, raw / 2, BITS);
	CHECK_RC(chunk_encode(enc, v, raw, WSP_DTYPE_BF16, WSP_CODEC_EXPRANS, 1, stored, &c, &err), 0);
	CHECK(c.codec == WSP_CODEC_RAW);
	chunk_encoder_free(enc);
	chunk_decoder_free(dec);
	free(v), free(back), free(stored);
	wspi_err_destroy(&err);
	return 0;
}
