/*
 * EXPRANS: a chunk codec for bf16 weights that a GPU can decode in many
 * independent lanes.  Each value's 8 exponent bits are entropy-coded with
 * rANS; its sign and 7 mantissa bits, which are close to uniform, are
 * stored as one raw byte.  The normative description of the stream is in
 * wspack(5) ("Chunk codec 2: exponent rANS"); in short, little-endian:
 *
 *	u32  n                     values (bf16) in the chunk
 *	u16  freq[256]             exponent frequencies, summing to 4096 (all
 *	                           zero when n is 0)
 *	u16  lane_bytes[B][32]     B = ceil(n / 32768) blocks of 32 lanes: the
 *	                           byte length of each lane's stream (even, >= 4)
 *	     lane streams          block-major, lane-minor: a u32 initial state,
 *	                           then u16 words in the order the decoder reads
 *	u8   sm[n]                 (sign << 7) | mantissa of each value
 *
 * Lane j of block b codes the exponents of values b*32768 + j + 32*k: at
 * step k the 32 lanes of a warp decode 32 consecutive values.  The coder
 * is rANS with a 32-bit state kept in [2^16, 2^32), 16-bit words and
 * 12-bit probabilities; a lane's state ends at 2^16 after its last symbol
 * and its stream is used up exactly, which the decoder checks.
 *
 * This file is the reference: the encoder, and a decoder for machines
 * without a GPU (the host backend, `wspack unpack`), safe on hostile input.
 */
#ifndef WSP_PACK_EXPRANS_EXPRANS_H
#define WSP_PACK_EXPRANS_EXPRANS_H

#include <stddef.h>
#include <stdint.h>
#include "common/error.h"

#define EXPRANS_LANES 32u
#define EXPRANS_BLOCK 32768u          /* values per block: 1024 per lane */
#define EXPRANS_PROB_BITS 12u
#define EXPRANS_HEADER (4u + 2u * 256u)

/* Encoded size of n values at most. */
size_t exprans_bound(uint64_t n);
/* Encode n bf16 values (raw little-endian) into out (capacity cap).
 * Returns the encoded size, or WSP_ETOOBIG when cap is too small. */
int64_t exprans_encode_bf16(const uint16_t *src, uint64_t n, void *out, size_t cap);
/* Decode a stream of len bytes into n values.  WSP_EFORMAT, with the
 * reason, for anything malformed: a count that is not n, frequencies that
 * do not sum to 4096, lane lengths beyond the stream, a lane that reads past
 * its end or does not end in the initial state, trailing bytes. */
int exprans_decode_bf16(const void *in, size_t len, uint16_t *dst, uint64_t n,
			struct wspi_err *err);
/* 1 (default): decode with AVX2 where the CPU has it; 0: the portable
 * decoder only (tests compare the two). */
extern int exprans_use_simd;

#endif
