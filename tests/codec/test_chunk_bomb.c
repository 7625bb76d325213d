/* Frames that declare a window above the limit (memory bombs) are refused
 * with WSP_EFORMAT before anything is decoded: a hand-made frame claiming a
 * 2 GiB window, and a real zstd frame compressed with a 256 MiB window and
 * no recorded size.  A frame without a recorded content size is refused. */
#include <xxhash.h>
#include <zstd.h>
#include "codec_test.h"

#define RAW 4096u

static struct chunk_decoder *dec;

static int decode(const uint8_t *frame, size_t n, uint32_t raw_bytes, const uint8_t *raw,
		  uint8_t *out, struct wspi_err *err)
{
	struct wspm_chunk c = { 0 };
	struct wspi_span sp[2] = { { out, raw_bytes / 2 }, { out + raw_bytes / 2, raw_bytes / 2 } };

	c.codec = WSP_CODEC_ZSTD;
	c.stored_bytes = (uint32_t)n;
	c.raw_bytes = raw_bytes;
	c.checksum = XXH3_64bits(raw, raw_bytes);
	return chunk_decode(dec, &c, WSP_DTYPE_U8, frame, sp, 2, err);
}

/* magic, descriptor (4-byte content size, window descriptor present), one
 * last raw block holding `raw`: a valid frame apart from its window. */
static size_t handmade(uint8_t *f, unsigned wd, const uint8_t *raw, uint32_t n)
{
	uint32_t magic = ZSTD_MAGICNUMBER, bh = 1u | (n << 3);
	size_t p = 0;

	memcpy(f + p, &magic, 4), p += 4;
	f[p++] = 0x80;          /* FCS_flag 2: 4-byte content size */
	f[p++] = (uint8_t)wd;   /* window descriptor */
	memcpy(f + p, &n, 4), p += 4;
	f[p++] = (uint8_t)bh, f[p++] = (uint8_t)(bh >> 8), f[p++] = (uint8_t)(bh >> 16);
	memcpy(f + p, raw, n), p += n;
	return p;
}

int main(void)
{
	uint8_t raw[RAW], out[RAW], frame[RAW + 64];
	uint8_t *big = malloc(ZSTD_compressBound(RAW));
	struct wspi_err err;
	ZSTD_CCtx *cc;
	size_t n;

	CHECK(big);
	wspi_err_init(&err);
	CHECK_RC(chunk_decoder_create(1u << 20, &dec), 0);
	t_fill(raw, RAW, WSP_DTYPE_U8, T_RANDOM);

	/* the same hand-made frame with a modest window decodes: the frame is valid */
	n = handmade(frame, (20 - 10) << 3, raw, RAW);
	CHECK_RC(decode(frame, n, RAW, raw, out, &err), 0);
	CHECK(memcmp(out, raw, RAW) == 0);
	/* window exactly at the limit (2^27) is accepted */
	n = handmade(frame, (27 - 10) << 3, raw, RAW);
	CHECK_RC(decode(frame, n, RAW, raw, out, &err), 0);
	/* 2^27 + 1/8: above */
	n = handmade(frame, (27 - 10) << 3 | 1, raw, RAW);
	CHECK_RC(decode(frame, n, RAW, raw, out, &err), WSP_EFORMAT);
	CHECK(strstr(err.msg, "window") != NULL);
	/* 2 GiB window */
	n = handmade(frame, (31 - 10) << 3, raw, RAW);
	CHECK_RC(decode(frame, n, RAW, raw, out, &err), WSP_EFORMAT);
	CHECK(strstr(err.msg, "window") != NULL);

	/* a real frame: 256 MiB window, streamed so zstd records no size */
	cc = ZSTD_createCCtx();
	CHECK(cc);
	CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_windowLog, 28)));
	CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1)));
	{
		ZSTD_inBuffer in = { raw, RAW, 0 };
		ZSTD_outBuffer ob = { big, ZSTD_compressBound(RAW), 0 };
		size_t r = ZSTD_compressStream2(cc, &ob, &in, ZSTD_e_continue);
		CHECK(!ZSTD_isError(r));
		do {
			r = ZSTD_compressStream2(cc, &ob, &in, ZSTD_e_end);
			CHECK(!ZSTD_isError(r));
		} while (r);
		n = ob.pos;
	}
	CHECK_RC(decode(big, n, RAW, raw, out, &err), WSP_EFORMAT);
	CHECK(strstr(err.msg, "window") != NULL);

	/* a normal-window frame with no recorded content size */
	ZSTD_CCtx_reset(cc, ZSTD_reset_session_and_parameters);
	CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0)));
	n = ZSTD_compress2(cc, big, ZSTD_compressBound(RAW), raw, RAW);
	CHECK(!ZSTD_isError(n));
	CHECK_RC(decode(big, n, RAW, raw, out, &err), WSP_EFORMAT);
	CHECK(strstr(err.msg, "size") != NULL);

	/* not a zstd frame at all (a skippable frame, then garbage) */
	{
		uint8_t skip[16] = { 0x50, 0x2a, 0x4d, 0x18, 8, 0, 0, 0 };
		CHECK_RC(decode(skip, sizeof(skip), 0, raw, out, &err), WSP_EZSTD);
		memset(skip, 0x77, sizeof(skip));
		CHECK_RC(decode(skip, sizeof(skip), 0, raw, out, &err), WSP_EZSTD);
	}

	ZSTD_freeCCtx(cc);
	chunk_decoder_free(dec);
	wspi_err_destroy(&err);
	free(big);
	return 0;
}
