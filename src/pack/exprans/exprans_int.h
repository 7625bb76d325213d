/*
 * EXPRANS internals shared by its encoder (exprans_encode.c), its decoder
 * (exprans.c) and the decoder's inner loops (exprans_steps.c): the
 * stream's constants, its headers' sizes and small helpers.  Not an
 * interface: exprans.h is.
 */
#ifndef WSP_PACK_EXPRANS_EXPRANS_INT_H
#define WSP_PACK_EXPRANS_EXPRANS_INT_H

#include <stdint.h>

#include "pack/exprans/exprans.h"

/* The AVX2 decoder is built on x86-64 with GCC or clang, chosen at run time. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WSP_EXPRANS_AVX2 1
#else
#define WSP_EXPRANS_AVX2 0
#endif

#define PROB_SCALE (1u << EXPRANS_PROB_BITS)
#define RANS_L (1u << 16)
#define MAX_LANE_BYTES (4u + 2u * (EXPRANS_BLOCK / EXPRANS_LANES))   /* one word a symbol at most */

static inline uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void wr32(uint8_t *p, uint32_t v)
{
	wr16(p, (uint16_t)v);
	wr16(p + 2, (uint16_t)(v >> 16));
}

static inline uint64_t n_blocks(uint64_t n)
{
	return (n + EXPRANS_BLOCK - 1) / EXPRANS_BLOCK;
}

/* How the upper halves are split: top = 0, the symbol is bits 14..7 and
 * the sign|mantissa byte is stored raw; top = 1 (EXPRANS_TOP_BIT), the
 * symbol is bits 14..6 less `base` and SEC_SIGN_MANT codes the sign and
 * bits 5..0. */
struct split {
	int top;
	unsigned base;
};

/* An upper half with the top bit coded: bits 14..6 base + symbol, the
 * sign and bits 5..0 from the 7-bit sign|mantissa symbol v. */
static inline uint16_t upper_top(unsigned sym, unsigned v, unsigned base)
{
	return (uint16_t)((sym + base) << 6 | (v & 0x40) << 9 | (v & 0x3f));
}

/* The frequencies' two forms (wspack(5)): 256 u16 ("full"), or, in chunks
 * with coded low halves or the top bit, a compact one that lists only the
 * symbols present
 * and, for a section of one symbol, nothing else: no lane table, no lane
 * streams (an upcast's zero low bytes cost 4 bytes a chunk, not 2 KiB). */
#define COMPACT_MARK 0x8000u

/* Bytes of the compact header for k symbols: the mark and count, then one
 * symbol (k = 1), or the symbols (padded to even) and their frequencies. */
static inline uint64_t compact_bytes(unsigned k)
{
	return k == 1 ? 4 : 2 + (k + (k & 1)) + 2u * k;
}

/* The packed form of a byte plane (wspack(5)): where its k symbols are
 * about equally likely (an incompressible byte, a bit or two of noise)
 * rANS gains nothing on b = ceil(log2 k) bits a value and still pays each
 * lane's state and length; packed, each value is its symbol's index in b
 * bits, and no lanes.  Only a byte plane (coded low halves) or the top
 * bit's sign|mantissa section takes it. */
#define PACKED_MARK 0x4000u

static inline unsigned index_bits(unsigned k)
{
	unsigned b = 1;
	while ((1u << b) < k)
		b++;
	return b;
}

/* The packed indices' bytes: n * b bits, rounded up to even (the next
 * section's header stays 2-byte aligned). */
static inline uint64_t packed_index_bytes(unsigned k, uint64_t n)
{
	uint64_t bytes = (n * index_bits(k) + 7) / 8;
	return bytes + (bytes & 1);
}

static inline uint64_t packed_bytes(unsigned k, uint64_t n)
{
	return 2 + k + (k & 1) + packed_index_bytes(k, n);
}

/* A section's slot -> symbol map in registers, for the AVX-512 loop
 * (exprans_steps.c), which finds each value's symbol without a table
 * lookup in memory: where the section has at most 32 symbols and at most
 * one 128-slot bucket in which more than 3 symbols start.  A bucket entry
 * holds its first slot's symbol index in bits 24..31 and, in each of
 * bytes 0..2, 128 - the offset of a symbol start inside it (0: none), so
 * that a slot's offset added to it carries into bit 7 of a byte once per
 * start at or below it; the crowded bucket is looked up in `fine`, 4 slots
 * an entry, the same way. */
struct fast_tab {
	int ok;
	uint32_t crowded;          /* the crowded bucket, 32 if none */
	uint32_t bucket[32];
	uint32_t fine[32];
	uint32_t sym[32];          /* index -> (freq - 1) | cum << 12 | symbol << 24 */
};

/* Build ft from a section's table (slot -> dec entry); ft->ok = 0 where
 * the section does not fit. */
void exprans_fast_build(const uint32_t *tab, struct fast_tab *ft);

/* The inner loops of a block's decode (exprans_steps.c): values [from,
 * end) of a block, all 32 lanes a step (the last step may be short), the
 * portable way; returns 1 when a lane needed a word past its stream. */
unsigned exprans_steps_scalar(const uint32_t *tab, uint32_t *x, int32_t *off,
			      const int32_t *stop, const uint8_t *p, const uint8_t *sm,
			      uint16_t *dst, uint64_t from, uint64_t end, struct split sp);
#if WSP_EXPRANS_AVX2
/* `steps` full steps from value `first` with AVX2 (the caller checks
 * exprans_cpu_has_avx2); p[0, len) the stream. */
unsigned exprans_steps_avx2(const uint32_t *tab, uint32_t *x, int32_t *off, const int32_t *stop,
			    const uint8_t *p, uint64_t len, const uint8_t *sm, uint16_t *dst,
			    uint64_t first, uint64_t steps, struct split sp);
/* The same with AVX-512 for a section whose fast_tab is ok (the caller
 * checks exprans_cpu_has_avx512). */
unsigned exprans_steps_avx512(const struct fast_tab *ft, uint32_t *x, int32_t *off,
			      const int32_t *stop, const uint8_t *p, uint64_t len, const uint8_t *sm,
			      uint16_t *dst, uint64_t first, uint64_t steps, struct split sp);
#endif
/* Whether this CPU runs exprans_steps_avx2 (0 where it is not built). */
int exprans_cpu_has_avx2(void);
/* Whether it runs exprans_steps_avx512 (AVX-512 F, BW and VPOPCNTDQ). */
int exprans_cpu_has_avx512(void);

#endif
