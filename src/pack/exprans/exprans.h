/*
 * EXPRANS: a chunk codec for float weights that a GPU can decode in many
 * independent lanes.  Each value's exponent is entropy-coded with rANS and
 * the rest stored raw.  The codec works on 16-bit words: for a 16-bit value
 * (bf16, fp16) the coded symbol is bits 14..7 (bf16: the exponent; fp16:
 * the 5 exponent bits and the top 3 mantissa bits, near uniform) and one raw
 * byte holds bit 15 and bits 6..0; a 32-bit value (fp32) is coded as its
 * upper 16 bits (its bf16 truncation: sign, exponent, 7 mantissa bits) plus
 * its low 16 bits stored raw.  The normative description of the stream is
 * in wspack(5) ("Chunk codec 2: exponent rANS"); in short, little-endian:
 *
 *	u32  n                     values in the chunk
 *	u16  freq[256]             symbol frequencies, summing to 4096 (all
 *	                           zero when n is 0)
 *	u16  lane_bytes[B][32]     B = ceil(n / 32768) blocks of 32 lanes: the
 *	                           byte length of each lane's stream (even, >= 4)
 *	     lane streams          block-major, lane-minor: a u32 initial state,
 *	                           then u16 words in the order the decoder reads
 *	u16  lo[n]                 32-bit values only: bits 15..0 of each value
 *	u8   sm[n]                 (sign << 7) | low 7 bits of each upper half
 *
 * 32-bit values whose low halves have structure (fp32 upcast from bf16 or
 * fp16) may code them instead ("planes", chunk transform 1): after the
 * exponent section (freq, lane_bytes, lane streams) come two more sections
 * of the same form coding bits 15..8 and bits 7..0 of each value, then
 * sm[n]; no lo[].  In such chunks a section's frequencies may take a
 * compact form (u16 0x8000 | k, then the k symbols present and their
 * frequencies); a section of one symbol is then that header alone, with no
 * lane table and no lanes.  A byte plane may instead be packed (u16 0x4000
 * | k, the k symbols, then each value's index in ceil(log2 k) bits): an
 * incompressible byte is stored as it is, one bit of noise as one bit, with
 * no lanes.
 *
 * The top mantissa bit may be coded with the exponent ("top bit", chunk
 * transform bit 1; bf16 and fp32): a u16 `base` follows n, each value's
 * symbol is bits 14..6 of its upper half less base (the chunk's pairs of
 * exponent and top mantissa bit span at most 256), and a last section of
 * the same form as the byte planes codes the sign and bits 5..0 of the
 * upper half as a 7-bit symbol (sign << 6 | bits); no sm[].  The exponent
 * says much about that bit (a weight's magnitude thins out within each
 * octave): ~0.1 bit a value less than storing it.
 *
 * Lane j of block b codes the symbols of values b*32768 + j + 32*k: at
 * step k the 32 lanes of a warp decode 32 consecutive values.  The coder
 * is rANS with a 32-bit state kept in [2^16, 2^32), 16-bit words and
 * 12-bit probabilities; a lane's state ends at 2^16 after its last symbol
 * and its stream is used up exactly, which the decoder checks.
 *
 * This is the reference: the encoder (exprans_encode.c), and a decoder for
 * machines without a GPU (the host backend, `wspack unpack`), safe on
 * hostile input (exprans.c, its inner loops in exprans_steps.c).
 */
#ifndef WSP_PACK_EXPRANS_EXPRANS_H
#define WSP_PACK_EXPRANS_EXPRANS_H

#include <stddef.h>
#include <stdint.h>
#include "common/hash.h"
#include "common/error.h"
#include "pack/exprans/exprans_layout.h"

#define EXPRANS_LANES 32u
#define EXPRANS_BLOCK 32768u          /* values per block: 1024 per lane */
#define EXPRANS_PROB_BITS 12u
#define EXPRANS_HEADER (4u + 2u * 256u)

/* The width of the values EXPRANS codes for a dtype: 2 (BF16, F16), 4
 * (F32), or 0 (other dtypes keep zstd). */
unsigned exprans_value_bytes(int dtype);
/* Encoded size of n values of `width` bytes at most, with `flags`. */
size_t exprans_bound(uint64_t n, unsigned width, unsigned flags);
/* Encode n values of `width` bytes (2 or 4; raw little-endian) into out
 * (capacity cap) with `flags` (EXPRANS_LOW_PLANES: width 4 only;
 * EXPRANS_TOP_BIT: where exprans_top_bit_fits).  Returns the encoded size,
 * or WSP_ETOOBIG when cap is too small (or the width or flags do not
 * fit). */
int64_t exprans_encode(const void *src, uint64_t n, unsigned width, unsigned flags, void *out,
		       size_t cap);
/* Whether EXPRANS_TOP_BIT can code these values: their pairs of exponent
 * and top mantissa bit (bits 14..6 of the upper half) lie within 256 of
 * each other (not so with zeros beside large values, say). */
int exprans_top_bit_fits(const void *src, uint64_t n, unsigned width);
/* Whether coding the low halves of n 32-bit values as byte planes saves
 * at least EXPRANS_PLANES_MIN_GAIN bytes a value, by the planes' order-0
 * entropy (fp32 upcast from bf16 or fp16: their low bits are zero or few;
 * trained fp32: near random, and raw decodes faster). */
#define EXPRANS_PLANES_MIN_GAIN 0.12
int exprans_planes_pay(const void *src, uint64_t n);
/* Decode a stream of len bytes into n values of `width` bytes (flags as
 * for the encoder).  WSP_EFORMAT, with the reason, for anything malformed:
 * a count that is not n, frequencies that do not sum to 4096, lane lengths
 * beyond the stream, a lane that reads past its end or does not end in the
 * initial state, trailing bytes. */
int exprans_decode(const void *in, size_t len, void *dst, uint64_t n, unsigned width,
		   unsigned flags, struct wspi_err *err);
/* The same, feeding the decoded bytes to `hash` (XXH3, reset by the
 * caller) block by block while they are still in cache: one pass over the
 * output instead of a decode and then a hash. */
int exprans_decode_hashed(const void *in, size_t len, void *dst, uint64_t n, unsigned width,
			  unsigned flags, XXH3_state_t *hash, struct wspi_err *err);
/* 2 (default): decode with AVX-512 where the CPU has it and a section's
 * symbols fit in registers, else as 1; 1: with AVX2 where the CPU has it;
 * 0: the portable decoder only (tests compare them). */
extern int exprans_use_simd;
/* 1 (default): chunks with coded low halves or the top bit use the
 * compact frequencies and packed planes where they are smaller; 0: the full table and rANS
 * everywhere, as packs written before those forms (tests read both). */
extern int exprans_compact;

#endif
