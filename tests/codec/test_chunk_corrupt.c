/* Damaged chunks are refused with the right code and a message, and the
 * decoder stays usable afterwards:
 *  - every single-bit flip of a small zstd frame -> WSP_EZSTD, WSP_EFORMAT
 *    or WSP_ECHECKSUM, or (for bits zstd ignores, like the frame header's
 *    unused bit) success with exactly the original bytes;
 *  - a flipped byte in a large frame's payload -> WSP_EZSTD or WSP_ECHECKSUM;
 *  - truncated frames and trailing bytes;
 *  - a raw chunk with a flipped byte -> WSP_ECHECKSUM;
 *  - wrong declared raw size / stored size / segment total -> WSP_EFORMAT;
 *  - unknown codec or transform -> WSP_EFORMAT. */
#include "codec_test.h"

#define RAW (256u << 10)

static struct chunk_decoder *dec;
static struct wspi_err err;
static uint8_t *out;

static int decode(const struct wspm_chunk *c, int dtype, const void *stored, unsigned nspans)
{
	struct wspi_span sp[3] = {
		{ out, c->raw_bytes / 4 * 2 }, { out + c->raw_bytes / 4 * 2, c->raw_bytes / 4 * 2 },
		{ out + c->raw_bytes / 4 * 4, c->raw_bytes % 4 },
	};
	struct wspi_span one = { out, c->raw_bytes };
	int rc;

	wspi_err_clear(&err);
	rc = nspans == 1 ? chunk_decode(dec, c, dtype, stored, &one, 1, &err)
			 : chunk_decode(dec, c, dtype, stored, sp, 3, &err);
	if (rc < 0)
		CHECK(err.msg[0] != '\0' && err.code == rc);
	return rc;
}

static int is_err(int rc)
{
	return rc == WSP_EZSTD || rc == WSP_ECHECKSUM || rc == WSP_EFORMAT;
}

int main(void)
{
	struct chunk_encoder *enc;
	struct wspm_chunk c, bad;
	uint8_t *raw = malloc(RAW), *st = malloc(chunk_encode_bound(RAW) + 16);
	uint8_t *cp = malloc(chunk_encode_bound(RAW) + 16);
	unsigned i, bit, ns, n_ok = 0;
	int dt, x;

	CHECK(raw && st && cp);
	out = malloc(RAW);
	CHECK(out);
	wspi_err_init(&err);
	CHECK_RC(chunk_encoder_create(1, RAW, &enc), 0);
	CHECK_RC(chunk_decoder_create(RAW, &dec), 0);

	for (x = 0; x < 2; x++) {
		for (ns = 1; ns <= 3; ns += 2) {
			/* small frame: flip every bit of every byte */
			dt = x ? WSP_DTYPE_BF16 : WSP_DTYPE_I16;
			t_fill(raw, 600, dt, x ? T_GAUSS : T_SMALLINT);
			CHECK_RC(chunk_encode(enc, raw, 600, dt, WSP_CODEC_ZSTD, x, st, &c, &err), 0);
			CHECK(c.codec == WSP_CODEC_ZSTD && (c.transform != 0) == x);
			CHECK_RC(decode(&c, dt, st, ns), 0);
			for (i = 0; i < c.stored_bytes; i++)
				for (bit = 0; bit < 8; bit++) {
					int rc;
					memcpy(cp, st, c.stored_bytes);
					cp[i] ^= (uint8_t)(1u << bit);
					memset(out, 0, 600);
					rc = decode(&c, dt, cp, ns);
					if (rc == 0 && memcmp(out, raw, 600) == 0) {
						n_ok++;
						continue;
					}
					if (!is_err(rc)) {
						fprintf(stderr, "flip byte %u bit %u: rc %d\n", i, bit, rc);
						return 1;
					}
				}
			/* only a handful of bits may be don't-cares */
			CHECK(n_ok * 50 < c.stored_bytes * 8);
			n_ok = 0;
			/* every truncation */
			for (i = 0; i < c.stored_bytes; i++) {
				bad = c;
				bad.stored_bytes = i;
				CHECK(is_err(decode(&bad, dt, st, ns)));
			}
			/* trailing bytes after the frame */
			memcpy(cp, st, c.stored_bytes);
			memset(cp + c.stored_bytes, 0, 8);
			bad = c;
			bad.stored_bytes += 8;
			CHECK_RC(decode(&bad, dt, cp, ns), WSP_EFORMAT);
			/* declared raw size differs from the frame (segments sized to match) */
			bad = c;
			bad.raw_bytes -= 2;
			CHECK_RC(decode(&bad, dt, st, ns), WSP_EFORMAT);
			CHECK(strstr(err.msg, "frame holds") != NULL);
			bad.raw_bytes += 4;
			CHECK_RC(decode(&bad, dt, st, ns), WSP_EFORMAT);
			/* checksum recorded wrong */
			bad = c;
			bad.checksum ^= 1;
			CHECK_RC(decode(&bad, dt, st, ns), WSP_ECHECKSUM);
			/* still decodes the good frame afterwards */
			CHECK_RC(decode(&c, dt, st, ns), 0);
			CHECK(memcmp(out, raw, 600) == 0);
		}
	}

	/* large frame: flip payload bytes at many places */
	t_fill(raw, RAW, WSP_DTYPE_BF16, T_GAUSS);
	CHECK_RC(chunk_encode(enc, raw, RAW, WSP_DTYPE_BF16, WSP_CODEC_ZSTD, 1, st, &c, &err), 0);
	CHECK(c.codec == WSP_CODEC_ZSTD);
	for (i = 0; i < 200; i++) {
		size_t pos = 8 + t_rand() % (c.stored_bytes - 8);
		memcpy(cp, st, c.stored_bytes);
		cp[pos] ^= (uint8_t)(1u << (t_rand() % 8));
		CHECK(is_err(decode(&c, WSP_DTYPE_BF16, cp, 1 + 2 * (i & 1))));
	}
	bad = c;
	bad.stored_bytes /= 2;
	CHECK_RC(decode(&bad, WSP_DTYPE_BF16, st, 1), WSP_EZSTD);
	CHECK(strstr(err.msg, "zstd") != NULL);
	/* segment total differs from the chunk */
	{
		struct wspi_span sp = { out, RAW - 2 };
		CHECK_RC(chunk_decode(dec, &c, WSP_DTYPE_BF16, st, &sp, 1, &err), WSP_EFORMAT);
	}
	/* unknown codec, unknown transform, transform unfit for dtype */
	bad = c;
	bad.codec = 7;
	CHECK_RC(decode(&bad, WSP_DTYPE_BF16, st, 1), WSP_EFORMAT);
	bad = c;
	bad.transform = 9;
	CHECK_RC(decode(&bad, WSP_DTYPE_BF16, st, 1), WSP_EFORMAT);
	bad = c;
	bad.transform = WSPM_XFORM_BYTES;
	CHECK_RC(decode(&bad, WSP_DTYPE_U8, st, 1), WSP_EFORMAT);
	/* a chunk larger than the decoder was made for */
	{
		struct chunk_decoder *small;
		struct wspi_span sp = { out, RAW };
		CHECK_RC(chunk_decoder_create(RAW / 2, &small), 0);
		CHECK_RC(chunk_decode(small, &c, WSP_DTYPE_BF16, st, &sp, 1, &err), WSP_EFORMAT);
		chunk_decoder_free(small);
	}

	/* raw chunks: flipped byte, wrong stored size */
	t_fill(raw, RAW, WSP_DTYPE_U8, T_RANDOM);
	CHECK_RC(chunk_encode(enc, raw, RAW, WSP_DTYPE_BF16, WSP_CODEC_ZSTD, 1, st, &c, &err), 0);
	CHECK(c.codec == WSP_CODEC_RAW && c.stored_bytes == RAW);
	CHECK_RC(decode(&c, WSP_DTYPE_BF16, st, 3), 0);
	CHECK(memcmp(out, raw, RAW) == 0);
	st[12345] ^= 0x10;
	CHECK_RC(decode(&c, WSP_DTYPE_BF16, st, 1), WSP_ECHECKSUM);
	CHECK(strstr(err.msg, "checksum") != NULL);
	CHECK_RC(decode(&c, WSP_DTYPE_BF16, st, 3), WSP_ECHECKSUM);
	bad = c;
	bad.stored_bytes--;
	CHECK_RC(decode(&bad, WSP_DTYPE_BF16, st, 1), WSP_EFORMAT);

	chunk_encoder_free(enc);
	chunk_decoder_free(dec);
	wspi_err_destroy(&err);
	free(raw);
	free(st);
	free(cp);
	free(out);
	return 0;
}
