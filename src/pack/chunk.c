/*
 * Chunk codec (see chunk.h).
 *
 * Framing: a chunk is one standard zstd frame (with zstd's own content
 * checksum and the content size in its header) over the transformed bytes,
 * or the raw bytes when zstd does not shrink them.  One frame keeps every
 * chunk an independently decodable unit that any zstd decoder reads.
 *
 * Transformed float chunks are written as "entropy-only" frames: blocks of
 * literals without any match, each block inside one plane, built with
 * ZSTD_compressSequences.  On float weights LZ matches only hurt: the
 * exponent plane (~2.55 bits of entropy per byte) has many short repeats
 * that zstd's fast match finders take, and each costs more than Huffman-
 * coding its bytes (level 1 spends 2.88 bits per exponent, level 3 3.24,
 * pure Huffman 2.59).  The sign/mantissa planes are near-random, so zstd
 * keeps their literals raw and they decode at memcpy speed.  Result on
 * Gaussian bf16: ratio 1.51 instead of 1.47 at level 1, 2.5x faster
 * compression and faster decoding (docs/PERFORMANCE-codec.md).  From level
 * CHUNK_LZ_LEVEL up the encoder also tries a normal LZ frame and keeps the
 * smaller, for tensors with real repeats (sparse or quantized weights).
 *
 * XXH3-64 of the untransformed bytes (wspm_chunk.checksum) is checked after
 * every decode; it also covers raw chunks, which have no frame checksum.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "common/hash.h"
/* ZSTD_compressSequences is in zstd's "experimental" section; it is exported
 * by libzstd and has kept its signature since 1.5.0. */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>
#if ZSTD_VERSION_NUMBER >= 10500 && !defined(CHUNK_NO_ENTROPY_FRAMES)
#define CHUNK_ENTROPY_FRAMES 1   /* -DCHUNK_NO_ENTROPY_FRAMES: for comparisons */
#endif

#include "pack/chunk.h"
#include "pack/exprans/exprans.h"
#include "pack/transform.h"
#include "common/util.h"

/* Frames declaring a window above this are refused (memory bombs).  The
 * encoder never writes one: it caps its window at the same value. */
#define CHUNK_WINDOW_LOG_MAX 27
/* Inverse transform and hashing walk the output in pieces this large, so
 * that XXH3 reads bytes that are still in L1/L2. */
#define CHUNK_HASH_STEP (32u << 10)
/* zstd's frame checksum (XXH64 of the transformed bytes) is redundant with
 * wspm_chunk.checksum (XXH3 of the final bytes, always checked); verifying
 * it costs ~17% of single-core decode speed (docs/PERFORMANCE-codec.md).
 * chunk.h promises both checks, so it stays on unless built with 0. */
#ifndef CHUNK_VERIFY_FRAME_CHECKSUM
#define CHUNK_VERIFY_FRAME_CHECKSUM 1
#endif
/* From this level up, transformed chunks also get a normal LZ attempt. */
#define CHUNK_LZ_LEVEL 3

struct chunk_decoder {
	ZSTD_DCtx *dctx;
	XXH3_state_t *xxh;
	uint8_t *scratch;          /* transformed bytes of one chunk */
	uint64_t cap;
};

struct chunk_encoder {
	ZSTD_CCtx *cctx;           /* normal frames at the chosen level */
	uint8_t *scratch;          /* transformed bytes */
	uint8_t *trial;            /* the zstd attempt beside exprans (WSP_CODEC_AUTO), or
				      exprans with the top bit beside without */
	int top_bit;               /* chunk_encoder_set_top_bit */
	uint64_t cap;
#ifdef CHUNK_ENTROPY_FRAMES
	ZSTD_CCtx *ectx;           /* entropy-only frames */
	ZSTD_Sequence *seqs;       /* one block delimiter per block */
	size_t max_seqs;
	uint8_t *alt;              /* the LZ attempt, when both are tried */
#endif
};

static void *alloc_buf(uint64_t bytes)
{
	size_t n = (size_t)wspi_align_up(bytes ? bytes : 1, 64);
	return aligned_alloc(64, n);
}

/* Measured on Gaussian weights at level 1 (docs/PERFORMANCE-codec.md):
 * bf16 1.510 with EXP_BF16 vs 1.493 BYTES vs 1.282 none; f32 1.203 EXP_F32
 * vs 1.198 vs 1.080; f16 1.186 BYTES vs 1.089 (its 10 mantissa bits are
 * random, so no exponent split can do much better). */
enum wspm_transform chunk_transform_for(int dtype)
{
	switch (dtype) {
	case WSP_DTYPE_BF16:
		return WSPM_XFORM_EXP_BF16;
	case WSP_DTYPE_F32:
		return WSPM_XFORM_EXP_F32;
	case WSP_DTYPE_F16:
		return WSPM_XFORM_BYTES;
	default:
		return WSPM_XFORM_NONE;
	}
}

/* ---- decoding ----------------------------------------------------------- */

int chunk_decoder_create(uint64_t max_chunk_raw, struct chunk_decoder **out)
{
	struct chunk_decoder *d;

	*out = NULL;
	if (max_chunk_raw > UINT32_MAX)
		return WSP_ETOOBIG;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->cap = max_chunk_raw;
	d->dctx = ZSTD_createDCtx();
	d->xxh = XXH3_createState();
	d->scratch = alloc_buf(max_chunk_raw);
	if (!d->dctx || !d->xxh || !d->scratch ||
	    ZSTD_isError(ZSTD_DCtx_setParameter(d->dctx, ZSTD_d_windowLogMax,
						CHUNK_WINDOW_LOG_MAX))) {
		chunk_decoder_free(d);
		return -ENOMEM;
	}
#if !CHUNK_VERIFY_FRAME_CHECKSUM && ZSTD_VERSION_NUMBER >= 10500
	ZSTD_DCtx_setParameter(d->dctx, ZSTD_d_forceIgnoreChecksum, ZSTD_d_ignoreChecksum);
#endif
	*out = d;
	return 0;
}

void chunk_decoder_free(struct chunk_decoder *d)
{
	if (!d)
		return;
	ZSTD_freeDCtx(d->dctx);
	XXH3_freeState(d->xxh);
	free(d->scratch);
	free(d);
}

static int zstd_fail(struct wspi_err *err, size_t r, const char *what)
{
	if (ZSTD_getErrorCode(r) == ZSTD_error_checksum_wrong)
		return WSP_ERR(err, WSP_ECHECKSUM, "zstd frame checksum mismatch (%s)", what);
	if (ZSTD_getErrorCode(r) == ZSTD_error_frameParameter_windowTooLarge)
		return WSP_ERR(err, WSP_EFORMAT, "zstd frame window above 2^%d bytes",
			       CHUNK_WINDOW_LOG_MAX);
	return WSP_ERR(err, WSP_EZSTD, "zstd %s: %s", what, ZSTD_getErrorName(r));
}

/* Check that `stored` is exactly one zstd frame holding raw_bytes bytes
 * with a window within the limit, before any byte is decoded. */
static int check_frame(const uint8_t *p, size_t n, uint64_t raw_bytes, struct wspi_err *err)
{
	unsigned long long fcs;
	size_t fsize;
	uint32_t magic;

	if (n < 4 || (memcpy(&magic, p, 4), magic != ZSTD_MAGICNUMBER))
		return WSP_ERR(err, WSP_EZSTD, "not a zstd frame (%zu stored bytes)", n);
	fsize = ZSTD_findFrameCompressedSize(p, n);
	if (ZSTD_isError(fsize))
		return zstd_fail(err, fsize, "frame");
	if (fsize != n)
		return WSP_ERR(err, WSP_EFORMAT, "%zu bytes after the zstd frame", n - fsize);
	/* Frame header (RFC 8878 3.1.1.1): without Single_Segment_flag a
	 * window descriptor follows the descriptor byte. */
	if (!(p[4] & 0x20)) {
		unsigned wd = p[5], wlog = 10 + (wd >> 3);
		if (wlog > CHUNK_WINDOW_LOG_MAX || (wlog == CHUNK_WINDOW_LOG_MAX && (wd & 7)))
			return WSP_ERR(err, WSP_EFORMAT,
				       "zstd frame window above the limit of 2^%d bytes",
				       CHUNK_WINDOW_LOG_MAX);
	}
	fcs = ZSTD_getFrameContentSize(p, n);
	if (fcs == ZSTD_CONTENTSIZE_ERROR)
		return WSP_ERR(err, WSP_EZSTD, "zstd frame header unreadable");
	if (fcs == ZSTD_CONTENTSIZE_UNKNOWN)
		return WSP_ERR(err, WSP_EFORMAT, "zstd frame does not record its size");
	if (fcs != raw_bytes)
		return WSP_ERR(err, WSP_EFORMAT, "zstd frame holds %llu bytes, chunk says %llu",
			       fcs, (unsigned long long)raw_bytes);
	return 0;
}

/* One frame straight into the segments (no transform). */
static int decode_into_spans(struct chunk_decoder *d, const void *stored, size_t n,
			     const struct wspi_span *dst, unsigned n_dst, struct wspi_err *err)
{
	ZSTD_inBuffer in = { stored, n, 0 };
	size_t r = 1;
	unsigned k;
	uint8_t extra;

	if (n_dst == 1) {
		r = ZSTD_decompressDCtx(d->dctx, dst[0].ptr, dst[0].len, stored, n);
		if (ZSTD_isError(r))
			return zstd_fail(err, r, "decode");
		if (r != dst[0].len)
			return WSP_ERR(err, WSP_EFORMAT, "zstd frame decoded to %zu bytes, want %zu",
				       r, dst[0].len);
		return 0;
	}
	ZSTD_DCtx_reset(d->dctx, ZSTD_reset_session_only);
	for (k = 0; k < n_dst; k++) {
		ZSTD_outBuffer out = { dst[k].ptr, dst[k].len, 0 };
		while (out.pos < out.size) {
			size_t ipos = in.pos, opos = out.pos;
			r = ZSTD_decompressStream(d->dctx, &out, &in);
			if (ZSTD_isError(r))
				return zstd_fail(err, r, "decode");
			if (r == 0 && out.pos < out.size)
				return WSP_ERR(err, WSP_EFORMAT, "zstd frame ended early");
			if (in.pos == ipos && out.pos == opos)
				return WSP_ERR(err, WSP_EZSTD, "zstd frame truncated");
		}
	}
	/* Every byte is out; let zstd read the rest (the frame checksum).  A
	 * byte beyond the declared size lands in `extra` and is an error. */
	while (r != 0) {
		ZSTD_outBuffer out = { &extra, 1, 0 };
		size_t ipos = in.pos;
		r = ZSTD_decompressStream(d->dctx, &out, &in);
		if (ZSTD_isError(r))
			return zstd_fail(err, r, "decode");
		if (out.pos)
			return WSP_ERR(err, WSP_EFORMAT, "zstd frame holds more than declared");
		if (r != 0 && in.pos == ipos)
			return WSP_ERR(err, WSP_EZSTD, "zstd frame truncated");
	}
	return 0;
}

/* Transformed bytes at `src` -> segments, hashing as we go. */
static uint64_t inverse_into_spans(struct chunk_decoder *d, enum wspm_transform t,
				   unsigned es, const uint8_t *src, uint64_t len,
				   const struct wspi_span *dst, unsigned n_dst)
{
	uint64_t off = 0;
	unsigned k;

	wspi_xxh3_reset(d->xxh);
	for (k = 0; k < n_dst; k++) {
		size_t pos = 0;
		while (pos < dst[k].len) {
			size_t take = WSP_MIN(dst[k].len - pos, (size_t)CHUNK_HASH_STEP);
			uint8_t *o = (uint8_t *)dst[k].ptr + pos;
			xform_inverse_range(t, es, src, len, off, take, o);
			wspi_xxh3_update(d->xxh, o, take);
			pos += take;
			off += take;
		}
	}
	return wspi_xxh3_digest(d->xxh);
}

static uint64_t hash_spans(struct chunk_decoder *d, const struct wspi_span *dst, unsigned n_dst)
{
	unsigned k;

	if (n_dst == 1)
		return wspi_xxh3(dst[0].ptr, dst[0].len);
	wspi_xxh3_reset(d->xxh);
	for (k = 0; k < n_dst; k++)
		wspi_xxh3_update(d->xxh, dst[k].ptr, dst[k].len);
	return wspi_xxh3_digest(d->xxh);
}

static const char *dt_name(int dtype)
{
	const char *n = wsp_dtype_name(dtype);
	return n ? n : "(unknown)";
}

int chunk_check_stored(const struct wspm_chunk *c, const void *stored, struct wspi_err *err)
{
	uint64_t want = wspm_chunk_stored_check(c), got;
	if (!want)
		return 1;
	got = wspm_stored_check(stored, c->stored_bytes);
	if (got != want)
		return WSP_ERR(err, WSP_ECHECKSUM, "stored bytes check mismatch: recorded %012llx, "
			       "read %012llx", (unsigned long long)want, (unsigned long long)got);
	return 0;
}

int chunk_decode(struct chunk_decoder *d, const struct wspm_chunk *c, int dtype,
		 const void *stored, const struct wspi_span *dst, unsigned n_dst,
		 struct wspi_err *err)
{
	enum wspm_transform t = c->transform;
	const uint8_t *planes = NULL;   /* bytes still to copy/inverse into dst */
	uint64_t total = 0, sum = 0;
	unsigned k;
	int es, rc;

	for (k = 0; k < n_dst; k++)
		if (ckd_add(&total, total, (uint64_t)dst[k].len))
			return WSP_ERR(err, WSP_ETOOBIG, "destination segments overflow");
	if (total != c->raw_bytes)
		return WSP_ERR(err, WSP_EFORMAT, "chunk raw size %u differs from destination %llu",
			       c->raw_bytes, (unsigned long long)total);
	es = xform_elem_bytes(t, dtype);
	if (es < 0)
		return WSP_ERR(err, WSP_EFORMAT, "chunk transform %u unknown or unfit for dtype %s",
			       c->transform, dt_name(dtype));

	switch (c->codec) {
	case WSP_CODEC_RAW:
		if (c->stored_bytes != c->raw_bytes)
			return WSP_ERR(err, WSP_EFORMAT, "raw chunk stores %u bytes, holds %u",
				       c->stored_bytes, c->raw_bytes);
		planes = stored;
		break;
	case WSP_CODEC_EXPRANS: {
		unsigned w = exprans_value_bytes(dtype);
		/* an exprans chunk's transform is its layout flags: bit 0, fp32
		 * with coded low halves; bit 1, the top mantissa bit coded */
		unsigned flags = (unsigned)t;
		if (!w || flags > (EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT) ||
		    ((flags & EXPRANS_LOW_PLANES) && w != 4) || c->raw_bytes % w)
			return WSP_ERR(err, WSP_EFORMAT, "exprans chunk of dtype %s, transform %u, "
				       "%u bytes", dt_name(dtype), c->transform, c->raw_bytes);
		if (c->raw_bytes > d->cap)
			return WSP_ERR(err, WSP_EFORMAT, "chunk raw size %u above the decoder's %llu",
				       c->raw_bytes, (unsigned long long)d->cap);
		if ((rc = chunk_check_stored(c, stored, err)) < 0)
			return rc;
		/* One destination (the usual case): decoded in place.  Either way
		 * each block is hashed as it comes out, while in cache. */
		void *into = n_dst == 1 ? dst[0].ptr : d->scratch;
		wspi_xxh3_reset(d->xxh);
		rc = exprans_decode_hashed(stored, c->stored_bytes, into, c->raw_bytes / w, w,
					   flags, d->xxh, err);
		if (rc < 0)
			return rc;
		uint64_t at = 0;
		for (k = 0; n_dst > 1 && k < n_dst; at += dst[k].len, k++)
			memcpy(dst[k].ptr, d->scratch + at, dst[k].len);
		sum = wspi_xxh3_digest(d->xxh);
		break;
	}
	case WSP_CODEC_ZSTD:
		rc = check_frame(stored, c->stored_bytes, c->raw_bytes, err);
		if (rc < 0)
			return rc;
		if (t == WSPM_XFORM_NONE) {
			/* no transform: zstd writes the final bytes in place */
			rc = decode_into_spans(d, stored, c->stored_bytes, dst, n_dst, err);
			if (rc < 0)
				return rc;
			break;
		}
		if (c->raw_bytes > d->cap)
			return WSP_ERR(err, WSP_EFORMAT, "chunk raw size %u above the decoder's %llu",
				       c->raw_bytes, (unsigned long long)d->cap);
		{
			size_t r = ZSTD_decompressDCtx(d->dctx, d->scratch, c->raw_bytes, stored,
						       c->stored_bytes);
			if (ZSTD_isError(r))
				return zstd_fail(err, r, "decode");
			if (r != c->raw_bytes)
				return WSP_ERR(err, WSP_EFORMAT,
					       "zstd frame decoded to %zu bytes, want %u", r,
					       c->raw_bytes);
		}
		planes = d->scratch;
		break;
	default:
		return WSP_ERR(err, WSP_EFORMAT, "unknown chunk codec %u", c->codec);
	}

	if (c->codec == WSP_CODEC_EXPRANS)
		;   /* hashed as decoded */
	else if (c->codec == WSP_CODEC_RAW || t != WSPM_XFORM_NONE)
		sum = inverse_into_spans(d, t, (unsigned)es, planes, c->raw_bytes, dst, n_dst);
	else
		sum = hash_spans(d, dst, n_dst);
	if (sum != c->checksum)
		return WSP_ERR(err, WSP_ECHECKSUM,
			       "chunk checksum mismatch: stored %016llx, decoded %016llx",
			       (unsigned long long)c->checksum, (unsigned long long)sum);
	return 0;
}

/* ---- encoding ----------------------------------------------------------- */

static size_t set_params(ZSTD_CCtx *cc, int level, uint64_t max_chunk_raw)
{
	size_t r = ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level);

	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 1);
	/* Frames must stay within the decoder's window limit; below it zstd
	 * sizes the window to the chunk by itself. */
	if (!ZSTD_isError(r) && max_chunk_raw > (1ull << CHUNK_WINDOW_LOG_MAX))
		r = ZSTD_CCtx_setParameter(cc, ZSTD_c_windowLog, CHUNK_WINDOW_LOG_MAX);
	return r;
}

int chunk_encoder_create(int level, uint64_t max_chunk_raw, struct chunk_encoder **out)
{
	struct chunk_encoder *e;
	size_t r;

	*out = NULL;
	if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
		return -EINVAL;
	if (max_chunk_raw > UINT32_MAX)
		return WSP_ETOOBIG;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->cap = max_chunk_raw;
	e->cctx = ZSTD_createCCtx();
	e->scratch = alloc_buf(max_chunk_raw);
	e->trial = alloc_buf(chunk_encode_bound(max_chunk_raw));
	if (!e->cctx || !e->scratch || !e->trial)
		goto nomem;
	r = set_params(e->cctx, level, max_chunk_raw);
#ifdef CHUNK_ENTROPY_FRAMES
	/* every plane (8 at most) and the tail may end in a partial block */
	e->max_seqs = max_chunk_raw / ZSTD_BLOCKSIZE_MAX + 10;
	e->seqs = calloc(e->max_seqs, sizeof(*e->seqs));
	e->ectx = ZSTD_createCCtx();
	if (!e->seqs || !e->ectx)
		goto nomem;
	if (level >= CHUNK_LZ_LEVEL) {
		e->alt = alloc_buf(chunk_encode_bound(max_chunk_raw));
		if (!e->alt)
			goto nomem;
	}
	if (!ZSTD_isError(r))
		r = set_params(e->ectx, level, max_chunk_raw);
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(e->ectx, ZSTD_c_blockDelimiters,
					   ZSTD_sf_explicitBlockDelimiters);
	/* negative levels would otherwise leave literals uncompressed */
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(e->ectx, ZSTD_c_literalCompressionMode,
					   ZSTD_ps_enable);
#endif
	if (ZSTD_isError(r)) {
		chunk_encoder_free(e);
		return -EINVAL;
	}
	*out = e;
	return 0;
nomem:
	chunk_encoder_free(e);
	return -ENOMEM;
}

void chunk_encoder_free(struct chunk_encoder *e)
{
	if (!e)
		return;
	ZSTD_freeCCtx(e->cctx);
	free(e->scratch);
	free(e->trial);
#ifdef CHUNK_ENTROPY_FRAMES
	ZSTD_freeCCtx(e->ectx);
	free(e->seqs);
	free(e->alt);
#endif
	free(e);
}

size_t chunk_encode_bound(uint64_t raw_bytes)
{
	size_t z = ZSTD_compressBound((size_t)raw_bytes);
	size_t x2 = exprans_bound(raw_bytes / 2, 2, EXPRANS_TOP_BIT);
	size_t x4 = exprans_bound(raw_bytes / 4, 4, EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT);
	return WSP_MAX(z, WSP_MAX(x2, x4));
}

#ifdef CHUNK_ENTROPY_FRAMES
/* An entropy-only frame of the transformed bytes: blocks of literals, none
 * spanning two planes, so each block's Huffman table fits one plane. */
static size_t entropy_frame(struct chunk_encoder *e, const void *src, size_t len, unsigned es,
			    void *out, size_t cap)
{
	size_t nel = len / es, n_seqs = 0, bounds[10], pos = 0;
	unsigned k, n_bounds = 0;

	for (k = 1; k <= es; k++)
		bounds[n_bounds++] = k * nel;
	bounds[n_bounds++] = len;
	for (k = 0; k < n_bounds; k++) {
		while (pos < bounds[k]) {
			size_t take = WSP_MIN(bounds[k] - pos, (size_t)ZSTD_BLOCKSIZE_MAX);
			if (n_seqs == e->max_seqs)
				return (size_t)-1;   /* cannot happen: sized at create */
			e->seqs[n_seqs] = (ZSTD_Sequence){ .litLength = (unsigned)take };
			n_seqs++;
			pos += take;
		}
	}
	return ZSTD_compressSequences(e->ectx, out, cap, e->seqs, n_seqs, src, len);
}
#endif

void chunk_encoder_set_top_bit(struct chunk_encoder *e, int on)
{
	e->top_bit = on;
}

/* n values of w bytes as exprans into out; *flags gets the layout (the
 * chunk's transform).  fp32 whose low halves have structure (upcast)
 * codes them too.  With e->top_bit the top mantissa bit is coded with the
 * exponent where that is smaller (tried in e->trial; the plain layout
 * wins a tie).  Not by default: its GPU decode is slower (380 against 690
 * GB/s on bf16, a small layer's launch 2.4x slower), and streaming a real
 * fp32 CNN from the host tier fell from 28.5-29.6 to 19.4 GB/s for 0.5% of
 * ratio (docs/PERFORMANCE.md). */
static int64_t encode_exprans(struct chunk_encoder *e, const void *raw, uint64_t n, unsigned w,
			      void *out, size_t cap, uint8_t *flags)
{
	unsigned base = w == 4 && exprans_planes_pay(raw, n) ? EXPRANS_LOW_PLANES : 0;
	int64_t len = exprans_encode(raw, n, w, base, out, cap);
	*flags = (uint8_t)base;
	if (len < 0 || !e->top_bit || !exprans_top_bit_fits(raw, n, w))
		return len;
	int64_t top = exprans_encode(raw, n, w, base | EXPRANS_TOP_BIT, e->trial, cap);
	if (top < 0 || top >= len)
		return top < 0 ? top : len;
	memcpy(out, e->trial, (size_t)top);
	*flags = (uint8_t)(base | EXPRANS_TOP_BIT);
	return top;
}

/* WSP_CODEC_AUTO: exprans (which a GPU decodes) unless zstd with the
 * dtype's byte transform is clearly smaller: more than AUTO_ZSTD_GAIN_PCT
 * percent fewer stored bytes (fp32 upcast from a narrower type, whose low
 * bytes exprans stores raw and zstd finds structure in). */
#define AUTO_ZSTD_GAIN_PCT 3

static int encode_auto(struct chunk_encoder *e, const void *raw, uint64_t raw_bytes, int dtype,
		       enum wspm_transform t, void *out, struct wspm_chunk *c,
		       struct wspi_err *err)
{
	struct wspm_chunk z;
	int rc = chunk_encode_xform(e, raw, raw_bytes, dtype, WSP_CODEC_EXPRANS, t, out, c, err);

	if (rc < 0 || c->codec == WSP_CODEC_ZSTD)   /* a dtype exprans does not code */
		return rc;
	/* the zstd attempt goes to e->trial: `out` keeps the exprans stream */
	rc = chunk_encode_xform(e, raw, raw_bytes, dtype, WSP_CODEC_ZSTD, t, e->trial, &z, err);
	if (rc < 0)
		return rc;
	if (c->codec == WSP_CODEC_RAW ||
	    (uint64_t)z.stored_bytes * 100 < (uint64_t)c->stored_bytes * (100 - AUTO_ZSTD_GAIN_PCT)) {
		memcpy(out, e->trial, z.stored_bytes);
		*c = z;
	}
	return 0;
}

int chunk_encode_xform(struct chunk_encoder *e, const void *raw, uint64_t raw_bytes, int dtype,
		       enum wsp_codec codec, enum wspm_transform t, void *out,
		       struct wspm_chunk *c, struct wspi_err *err)
{
	size_t cap = chunk_encode_bound(raw_bytes), r;
	const void *src = raw;
	int es;

	if (raw_bytes > e->cap)
		return WSP_ERR(err, -EINVAL, "chunk of %llu bytes above the encoder's %llu",
			       (unsigned long long)raw_bytes, (unsigned long long)e->cap);
	if (codec == WSP_CODEC_AUTO)
		return encode_auto(e, raw, raw_bytes, dtype, t, out, c, err);
	if (codec != WSP_CODEC_ZSTD && codec != WSP_CODEC_RAW && codec != WSP_CODEC_EXPRANS)
		return WSP_ERR(err, -EINVAL, "unknown codec %d", (int)codec);
	/* EXPRANS codes bf16, fp16 and fp32 values; other dtypes keep zstd. */
	unsigned w = exprans_value_bytes(dtype);
	if (codec == WSP_CODEC_EXPRANS && (!w || raw_bytes % w))
		codec = WSP_CODEC_ZSTD;
	es = xform_elem_bytes(t, dtype);
	if (es < 0)
		return WSP_ERR(err, WSP_EFORMAT, "transform %d does not fit dtype %s", (int)t,
			       dt_name(dtype));
	memset(c->stored_check, 0, sizeof(c->stored_check));
	c->raw_bytes = (uint32_t)raw_bytes;
	c->checksum = wspi_xxh3(raw, raw_bytes);

	if (codec == WSP_CODEC_EXPRANS && raw_bytes > 0) {
		int64_t n = encode_exprans(e, raw, raw_bytes / w, w, out, cap, &c->transform);
		if (n < 0)
			return WSP_ERR(err, (int)n, "exprans: output of %zu bytes too small", cap);
		if ((uint64_t)n < raw_bytes) {
			/* Readers that check only the stored bytes rely on this. */
			int rc = exprans_decode(out, (size_t)n, e->scratch, raw_bytes / w, w,
						c->transform, err);
			if (rc < 0) {
				wspi_err_prefix(err, "exprans: the encoded chunk does not decode");
				return rc;
			}
			if (memcmp(e->scratch, raw, raw_bytes) != 0)
				return WSP_ERR(err, WSP_EFORMAT, "exprans: the encoded chunk decodes to "
					       "other bytes than its input");
			c->codec = WSP_CODEC_EXPRANS;
			c->stored_bytes = (uint32_t)n;
			wspm_chunk_set_stored_check(c, wspm_stored_check(out, (uint64_t)n));
			return 0;
		}
	}

	if (codec == WSP_CODEC_ZSTD && raw_bytes > 0) {
		if (t != WSPM_XFORM_NONE) {
			xform_forward(t, (unsigned)es, raw, raw_bytes, e->scratch);
			src = e->scratch;
		}
#ifdef CHUNK_ENTROPY_FRAMES
		if (t != WSPM_XFORM_NONE) {
			r = entropy_frame(e, src, raw_bytes, (unsigned)es, out, cap);
			if (!ZSTD_isError(r) && e->alt) {
				size_t r2 = ZSTD_compress2(e->cctx, e->alt, cap, src, raw_bytes);
				if (ZSTD_isError(r2))
					return WSP_ERR(err, WSP_EZSTD, "zstd compress: %s",
						       ZSTD_getErrorName(r2));
				if (r2 < r) {
					memcpy(out, e->alt, r2);
					r = r2;
				}
			}
		} else
#endif
			r = ZSTD_compress2(e->cctx, out, cap, src, raw_bytes);
		if (ZSTD_isError(r))
			return WSP_ERR(err, WSP_EZSTD, "zstd compress: %s", ZSTD_getErrorName(r));
		if (r < raw_bytes) {
			c->codec = WSP_CODEC_ZSTD;
			c->transform = (uint8_t)t;
			c->stored_bytes = (uint32_t)r;
			return 0;
		}
	}
	/* zstd did not shrink it (or was not asked): keep the raw bytes. */
	if (raw_bytes)
		memcpy(out, raw, raw_bytes);
	c->codec = WSP_CODEC_RAW;
	c->transform = WSPM_XFORM_NONE;
	c->stored_bytes = (uint32_t)raw_bytes;
	return 0;
}

int chunk_encode(struct chunk_encoder *e, const void *raw, uint64_t raw_bytes, int dtype,
		 enum wsp_codec codec, int use_transform, void *out, struct wspm_chunk *c,
		 struct wspi_err *err)
{
	enum wspm_transform t = use_transform ? chunk_transform_for(dtype) : WSPM_XFORM_NONE;

	return chunk_encode_xform(e, raw, raw_bytes, dtype, codec, t, out, c, err);
}
