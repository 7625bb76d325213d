/*
 * Chunk codec: encode a raw chunk for a pack, decode one back.
 *
 * Decoding writes into a destination that may be split across host-cache
 * pages, so it takes a list of segments.  Segment boundaries always fall on
 * element boundaries (pages are multiples of 256 bytes; tensors start 256-aligned).
 */
#ifndef WSP_PACK_CHUNK_H
#define WSP_PACK_CHUNK_H

#include <stddef.h>
#include <stdint.h>
#include "common/error.h"
#include "pack/manifest.h"

struct wspi_span {
	void *ptr;
	size_t len;
};

/* Per-thread decoding state (a ZSTD_DCtx and a scratch buffer of the largest
 * raw chunk).  One per worker; not shared between threads. */
struct chunk_decoder;
int chunk_decoder_create(uint64_t max_chunk_raw, struct chunk_decoder **out);
void chunk_decoder_free(struct chunk_decoder *d);

/*
 * Decode chunk `c` whose stored bytes are at `stored` into the segments `dst`
 * (total length == c->raw_bytes), undoing the transform for `dtype`, and
 * check the stored check (EXPRANS), the frame checksum and c->checksum.  Errors: WSP_EZSTD for a frame
 * zstd rejects (message: zstd's reason), WSP_EFORMAT when the decoded size
 * differs from c->raw_bytes or the window is above the limit, WSP_ECHECKSUM.
 * The caller adds shard/layer/tensor/chunk context to the message.
 */
int chunk_decode(struct chunk_decoder *d, const struct wspm_chunk *c, int dtype,
		 const void *stored, const struct wspi_span *dst, unsigned n_dst,
		 struct wspi_err *err);

/* Check the stored bytes of chunk `c` against its recorded stored check:
 * 0 when they match, 1 when c records none (only a decode can check it
 * then), WSP_ECHECKSUM when they differ. */
int chunk_check_stored(const struct wspm_chunk *c, const void *stored, struct wspi_err *err);

/* The transform used for a dtype when transforms are on (NONE if none pays). */
enum wspm_transform chunk_transform_for(int dtype);

/* Encoding, for the converter: `raw` -> `out` (capacity chunk_encode_bound()).
 * Falls back to raw storage when zstd does not shrink the chunk.  Fills codec,
 * transform, stored_bytes, raw_bytes, checksum and (EXPRANS) the stored check
 * of *c.  An EXPRANS chunk is decoded again and compared with `raw` before it
 * is accepted, so that a stored stream whose check matches decodes to the
 * raw bytes. */
struct chunk_encoder;
int chunk_encoder_create(int level, uint64_t max_chunk_raw, struct chunk_encoder **out);
void chunk_encoder_free(struct chunk_encoder *e);
/* on: exprans chunks also try the top mantissa bit coded with the exponent
 * and keep it where it is smaller (WSP_CONVERT_SMALLEST); off by default,
 * as its GPU decode is slower. */
void chunk_encoder_set_top_bit(struct chunk_encoder *e, int on);
size_t chunk_encode_bound(uint64_t raw_bytes);
int chunk_encode(struct chunk_encoder *e, const void *raw, uint64_t raw_bytes, int dtype,
		 enum wsp_codec codec, int use_transform, void *out, struct wspm_chunk *c,
		 struct wspi_err *err);
/* chunk_encode with an explicit transform (for benchmarks and tests);
 * WSP_EFORMAT when `transform` does not fit the dtype. */
int chunk_encode_xform(struct chunk_encoder *e, const void *raw, uint64_t raw_bytes, int dtype,
		       enum wsp_codec codec, enum wspm_transform transform, void *out,
		       struct wspm_chunk *c, struct wspi_err *err);

#endif
