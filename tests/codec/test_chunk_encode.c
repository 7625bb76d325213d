/* Encoder contract: argument checks, the fields it fills, frames any zstd
 * decoder reads (the stored frame of a transformed chunk is the transformed
 * bytes), and the size target: Gaussian bf16 (std 0.02, fixed seed)
 * stored in at most 0.69 of its raw size at the default level. */
#include <xxhash.h>
#include <zstd.h>
#include "codec_test.h"

#define RAW (1u << 20)

int main(void)
{
	struct chunk_encoder *enc;
	struct chunk_decoder *dec;
	struct wspi_err err;
	struct wspm_chunk c;
	uint8_t *raw = malloc(RAW), *st = malloc(chunk_encode_bound(RAW));
	uint8_t *pl = malloc(RAW), *back = malloc(RAW);
	struct wsp_convert_options opt;
	int level;

	CHECK(raw && st && pl && back);
	wspi_err_init(&err);
	CHECK_RC(chunk_encoder_create(ZSTD_maxCLevel() + 1, RAW, &enc), -EINVAL);
	CHECK(enc == NULL);
	CHECK_RC(chunk_encoder_create(ZSTD_minCLevel() - 1, RAW, &enc), -EINVAL);
	CHECK_RC(chunk_encoder_create(1, (uint64_t)UINT32_MAX + 1, &enc), WSP_ETOOBIG);
	CHECK_RC(chunk_decoder_create((uint64_t)UINT32_MAX + 1, &dec), WSP_ETOOBIG);
	CHECK(dec == NULL);
	chunk_encoder_free(NULL);
	chunk_decoder_free(NULL);
	CHECK(chunk_encode_bound(RAW) >= RAW);

	wsp_convert_options_init(&opt);
	level = opt.level;
	CHECK_RC(chunk_encoder_create(level, RAW, &enc), 0);
	CHECK_RC(chunk_decoder_create(RAW, &dec), 0);

	/* too big, unknown codec, transform unfit for the dtype */
	CHECK_RC(chunk_encode(enc, raw, RAW + 1, WSP_DTYPE_BF16, WSP_CODEC_ZSTD, 1, st, &c, &err),
		 -EINVAL);
	CHECK(err.msg[0]);
	CHECK_RC(chunk_encode(enc, raw, RAW, WSP_DTYPE_BF16, (enum wsp_codec)5, 1, st, &c, &err),
		 -EINVAL);
	CHECK_RC(chunk_encode_xform(enc, raw, RAW, WSP_DTYPE_U8, WSP_CODEC_ZSTD,
				    WSPM_XFORM_BYTES, st, &c, &err), WSP_EFORMAT);

	/* Gaussian bf16 at the default level: fields, size target, interop */
	t_fill(raw, RAW, WSP_DTYPE_BF16, T_GAUSS);
	memset(&c, 0xff, sizeof(c));
	CHECK_RC(chunk_encode(enc, raw, RAW, WSP_DTYPE_BF16, WSP_CODEC_ZSTD, 1, st, &c, &err), 0);
	CHECK(c.codec == WSP_CODEC_ZSTD && c.transform == WSPM_XFORM_EXP_BF16);
	CHECK(c.raw_bytes == RAW && c.checksum == XXH3_64bits(raw, RAW));
	CHECK(wspm_chunk_stored_check(&c) == 0);   /* only EXPRANS chunks record one */
	fprintf(stderr, "gaussian bf16, level %d: ratio %.3f\n", level,
		(double)RAW / c.stored_bytes);
	CHECK((double)c.stored_bytes <= 0.69 * RAW);
	CHECK(ZSTD_getFrameContentSize(st, c.stored_bytes) == RAW);
	CHECK(ZSTD_decompress(back, RAW, st, c.stored_bytes) == RAW);
	xform_forward(WSPM_XFORM_EXP_BF16, 2, raw, RAW, pl);
	CHECK(memcmp(back, pl, RAW) == 0);

	/* transform off: plain zstd of the raw bytes, still smaller */
	CHECK_RC(chunk_encode(enc, raw, RAW, WSP_DTYPE_BF16, WSP_CODEC_ZSTD, 0, st, &c, &err), 0);
	CHECK(c.codec == WSP_CODEC_ZSTD && c.transform == WSPM_XFORM_NONE);
	CHECK(ZSTD_decompress(back, RAW, st, c.stored_bytes) == RAW);
	CHECK(memcmp(back, raw, RAW) == 0);

	/* f32 gets the exponent transform and shrinks; f16 the byte planes */
	t_fill(raw, RAW, WSP_DTYPE_F32, T_GAUSS);
	CHECK_RC(chunk_encode(enc, raw, RAW, WSP_DTYPE_F32, WSP_CODEC_ZSTD, 1, st, &c, &err), 0);
	CHECK(c.codec == WSP_CODEC_ZSTD && c.transform == WSPM_XFORM_EXP_F32);
	{
		struct wspi_span sp = { back, RAW };
		CHECK_RC(chunk_decode(dec, &c, WSP_DTYPE_F32, st, &sp, 1, &err), 0);
		CHECK(memcmp(back, raw, RAW) == 0);
	}

	/* a constant tensor (a norm weight of 1.0 = bf16 0x3f80) all but vanishes */
	for (size_t i = 0; i < RAW; i += 2)
		raw[i] = 0x80, raw[i + 1] = 0x3f;
	CHECK_RC(chunk_encode(enc, raw, RAW, WSP_DTYPE_BF16, WSP_CODEC_ZSTD, 1, st, &c, &err), 0);
	CHECK(c.codec == WSP_CODEC_ZSTD && c.stored_bytes < RAW / 100);
	{
		struct wspi_span sp[2] = { { back, RAW / 2 }, { back + RAW / 2, RAW / 2 } };
		memset(back, 0, RAW);
		CHECK_RC(chunk_decode(dec, &c, WSP_DTYPE_BF16, st, sp, 2, &err), 0);
		CHECK(memcmp(back, raw, RAW) == 0);
	}

	/* the codec asked for is raw: stored as is */
	CHECK_RC(chunk_encode(enc, raw, RAW, WSP_DTYPE_F32, WSP_CODEC_RAW, 1, st, &c, &err), 0);
	CHECK(c.codec == WSP_CODEC_RAW && c.stored_bytes == RAW && memcmp(st, raw, RAW) == 0);

	/* a zero-length chunk is stored raw with 0 bytes and decodes */
	CHECK_RC(chunk_encode(enc, raw, 0, WSP_DTYPE_BF16, WSP_CODEC_ZSTD, 1, st, &c, &err), 0);
	CHECK(c.codec == WSP_CODEC_RAW && c.stored_bytes == 0 && c.raw_bytes == 0);
	CHECK(c.checksum == XXH3_64bits(raw, 0));
	CHECK_RC(chunk_decode(dec, &c, WSP_DTYPE_BF16, st, NULL, 0, &err), 0);

	chunk_encoder_free(enc);
	chunk_decoder_free(dec);
	wspi_err_destroy(&err);
	free(raw);
	free(st);
	free(pl);
	free(back);
	return 0;
}
