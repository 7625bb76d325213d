/* EXPRANS reference encoder (see exprans.h; the stream in wspack(5)). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pack/exprans/exprans_int.h"

/* Bytes of one section's frequencies, lane table and lane streams at most
 * (a symbol renormalises once at most: one word). */
static uint64_t section_bound(uint64_t n)
{
	return 2u * 256u + n_blocks(n) * EXPRANS_LANES * (2 + MAX_LANE_BYTES);
}

size_t exprans_bound(uint64_t n, unsigned width, unsigned flags)
{
	unsigned planes = flags & EXPRANS_LOW_PLANES, top = flags & EXPRANS_TOP_BIT;
	uint64_t raw = (width == 4 && !planes ? 2 * n : 0) + (top ? 0 : n);
	return 4 + (top ? 2 : 0) + (1 + 2 * !!planes + !!top) * section_bound(n) + raw;
}

/* Value i's upper 16 bits: the value itself (16-bit), or its high half. */
static inline uint16_t high16(const void *src, uint64_t i, unsigned width)
{
	if (width == 2)
		return ((const uint16_t *)src)[i];
	return (uint16_t)(((const uint32_t *)src)[i] >> 16);
}

/* What a section codes: the exponent symbol of the upper half; (32-bit
 * values with coded low halves) bits 15..8 or bits 7..0; or (the top
 * mantissa bit coded with the exponent) the rest of the upper half. */
enum section { SEC_EXP, SEC_BITS15_8, SEC_BITS7_0, SEC_SIGN_MANT };

static inline unsigned symbol_of(const void *src, uint64_t i, unsigned width, enum section sec,
				 struct split sp)
{
	unsigned h = high16(src, i, width);
	if (sec == SEC_EXP)
		return sp.top ? ((h >> 6) & 0x1ff) - sp.base : (h >> 7) & 0xff;
	if (sec == SEC_SIGN_MANT)
		return (h >> 9 & 0x40) | (h & 0x3f);
	uint32_t v = ((const uint32_t *)src)[i];
	return sec == SEC_BITS15_8 ? (v >> 8) & 0xff : v & 0xff;
}

/* The lowest pair (bits 14..6 of the upper half) of n values; the split
 * fits when no pair lies 256 or more above it. */
static int top_split(const void *src, uint64_t n, unsigned width, struct split *sp)
{
	unsigned lo = 0x1ff, hi = 0;
	for (uint64_t i = 0; i < n; i++) {
		unsigned pair = (high16(src, i, width) >> 6) & 0x1ff;
		lo = WSP_MIN(lo, pair);
		hi = WSP_MAX(hi, pair);
	}
	*sp = (struct split){ .top = 1, .base = n ? lo : 0 };
	return n == 0 || hi - lo < 256;
}

int exprans_top_bit_fits(const void *src, uint64_t n, unsigned width)
{
	struct split sp;
	return (width == 2 || width == 4) && top_split(src, n, width, &sp);
}

/* Frequencies summing to PROB_SCALE, each symbol present at least 1. */
static void quantize(const uint64_t *count, uint64_t n, uint16_t *freq)
{
	uint32_t sum = 0, best = 0;
	for (unsigned s = 0; s < 256; s++) {
		freq[s] = 0;
		if (!count[s])
			continue;
		uint64_t f = count[s] * PROB_SCALE / n;
		freq[s] = (uint16_t)(f ? f : 1);
		sum += freq[s];
		if (freq[s] > freq[best] || !freq[best])
			best = s;
	}
	/* Take the difference from the most frequent symbols, never below 1. */
	while (sum > PROB_SCALE) {
		unsigned top = 0;
		for (unsigned s = 1; s < 256; s++)
			if (freq[s] > freq[top])
				top = s;
		uint32_t cut = WSP_MIN(sum - PROB_SCALE, (uint32_t)freq[top] - 1u);
		freq[top] = (uint16_t)(freq[top] - cut);
		sum -= cut;
	}
	freq[best] = (uint16_t)(freq[best] + (PROB_SCALE - sum));
}

int exprans_compact = 1;

static unsigned symbols_present(const uint16_t *freq)
{
	unsigned k = 0;
	for (unsigned s = 0; s < 256; s++)
		k += freq[s] != 0;
	return k;
}

/* Writes the header at o; returns its length and sets *lanes_follow. */
static uint64_t write_freq(const uint16_t *freq, uint64_t n, int compact, uint8_t *o,
			   int *lanes_follow)
{
	unsigned k = symbols_present(freq);
	*lanes_follow = 1;
	if (!compact || n == 0 || compact_bytes(k) >= 2 * 256) {
		for (unsigned s = 0; s < 256; s++)
			wr16(o + 2 * s, freq[s]);
		return 2 * 256;
	}
	wr16(o, (uint16_t)(COMPACT_MARK | k));
	unsigned i = 0, pad = k & 1;
	for (unsigned s = 0; s < 256; s++)
		if (freq[s]) {
			o[2 + i] = (uint8_t)s;   /* k = 1: the symbol is the u16's low byte */
			if (k > 1)
				wr16(o + 2 + k + pad + 2 * i, freq[s]);
			i++;
		}
	if (pad)
		o[2 + k] = 0;   /* k = 1: the u16's high byte */
	*lanes_follow = k > 1;
	return compact_bytes(k);
}

/* Section `sec` of n values (a byte plane, or the top bit's sign|mantissa
 * symbols), packed at o; returns its length. */
static uint64_t write_packed(const void *src, uint64_t n, unsigned width, enum section sec,
			     struct split sp, const uint16_t *freq, uint8_t *o)
{
	unsigned k = symbols_present(freq), b = index_bits(k), i = 0;
	uint8_t index[256];
	wr16(o, (uint16_t)(PACKED_MARK | k));
	for (unsigned s = 0; s < 256; s++)
		if (freq[s]) {
			o[2 + i] = (uint8_t)s;
			index[s] = (uint8_t)i++;
		}
	if (k & 1)
		o[2 + k] = 0;
	uint8_t *q = o + 2 + k + (k & 1);
	memset(q, 0, packed_index_bytes(k, n));
	for (uint64_t v = 0, bit = 0; v < n; v++, bit += b) {
		unsigned x = (unsigned)index[symbol_of(src, v, width, sec, sp)] << (bit & 7);
		q[bit >> 3] |= (uint8_t)x;
		if ((bit & 7) + b > 8)
			q[(bit >> 3) + 1] |= (uint8_t)(x >> 8);
	}
	return packed_bytes(k, n);
}

/* lane_bytes[B][32] and the lane streams of a section at o; returns their
 * length. */
static uint64_t encode_lanes(const void *src, uint64_t n, unsigned width, enum section sec,
			     struct split sp, const uint16_t *freq, const uint32_t *cum, uint8_t *o)
{
	uint64_t nb = n_blocks(n);
	uint8_t *lens = o;
	uint8_t *p = lens + nb * EXPRANS_LANES * 2;
	uint16_t words[MAX_LANE_BYTES / 2];
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t first = b * EXPRANS_BLOCK, end = WSP_MIN(n, first + EXPRANS_BLOCK);
		for (unsigned j = 0; j < EXPRANS_LANES; j++) {
			/* Encode the lane's symbols last to first: the decoder reads
			 * them first to last. */
			uint32_t x = RANS_L;
			unsigned nw = 0;
			uint64_t cnt = first + j < end ? (end - first - j + EXPRANS_LANES - 1) / EXPRANS_LANES : 0;
			for (uint64_t k = cnt; k-- > 0;) {
				unsigned s = symbol_of(src, first + j + k * EXPRANS_LANES, width, sec, sp);
				uint32_t f = freq[s];
				uint64_t x_max = (uint64_t)((RANS_L >> EXPRANS_PROB_BITS) << 16) * f;
				if (x >= x_max) {
					words[nw++] = (uint16_t)x;
					x >>= 16;
				}
				x = ((x / f) << EXPRANS_PROB_BITS) + (x % f) + cum[s];
			}
			wr32(p, x);
			for (unsigned w = 0; w < nw; w++)   /* reversed: the decoder's order */
				wr16(p + 4 + 2 * w, words[nw - 1 - w]);
			unsigned bytes = 4 + 2 * nw;
			wr16(lens + (b * EXPRANS_LANES + j) * 2, (uint16_t)bytes);
			p += bytes;
		}
	}
	return (uint64_t)(p - o);
}

/* One section at o: frequencies, lane_bytes[B][32], the lane streams (or,
 * compact and of one symbol, the header alone; or, any section but the
 * exponents', packed where that is no larger).  Returns its length. */
static uint64_t encode_section(const void *src, uint64_t n, unsigned width, enum section sec,
			       struct split sp, int compact, uint8_t *o)
{
	uint64_t count[256] = { 0 };
	for (uint64_t i = 0; i < n; i++)
		count[symbol_of(src, i, width, sec, sp)]++;
	uint16_t freq[256];
	uint32_t cum[257];
	if (n)
		quantize(count, n, freq);
	else
		memset(freq, 0, sizeof(freq));
	cum[0] = 0;
	for (unsigned s = 0; s < 256; s++)
		cum[s + 1] = cum[s] + freq[s];
	int lanes_follow;
	uint64_t head = write_freq(freq, n, compact, o, &lanes_follow);
	if (!lanes_follow)
		return head;
	uint64_t coded = encode_lanes(src, n, width, sec, sp, freq, cum, o + head);
	unsigned k = symbols_present(freq);
	/* the coded form was written first: the packed one, when no larger,
	 * fits where it lies (it decodes faster, so it wins a tie) */
	if (compact && sec != SEC_EXP && n && k >= 2 && packed_bytes(k, n) <= head + coded)
		return write_packed(src, n, width, sec, sp, freq, o);
	return head + coded;
}

int64_t exprans_encode(const void *src, uint64_t n, unsigned width, unsigned flags, void *out,
		       size_t cap)
{
	uint8_t *o = out;
	unsigned planes = flags & EXPRANS_LOW_PLANES;
	struct split sp = { 0 };
	if ((width != 2 && width != 4) || (planes && width != 4) ||
	    (flags & ~(EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT)) ||
	    cap < exprans_bound(n, width, flags) || n > UINT32_MAX)
		return WSP_ETOOBIG;
	if ((flags & EXPRANS_TOP_BIT) && !top_split(src, n, width, &sp))
		return WSP_ETOOBIG;
	wr32(o, (uint32_t)n);
	uint8_t *p = o + 4;
	if (sp.top) {
		wr16(p, (uint16_t)sp.base);
		p += 2;
	}
	int compact = (planes || sp.top) && exprans_compact;
	p += encode_section(src, n, width, SEC_EXP, sp, compact, p);
	if (planes) {
		p += encode_section(src, n, width, SEC_BITS15_8, sp, compact, p);
		p += encode_section(src, n, width, SEC_BITS7_0, sp, compact, p);
	}
	if (sp.top)
		p += encode_section(src, n, width, SEC_SIGN_MANT, sp, compact, p);
	for (uint64_t i = 0; width == 4 && !planes && i < n; i++, p += 2)   /* low halves, raw */
		wr16(p, (uint16_t)((const uint32_t *)src)[i]);
	for (uint64_t i = 0; !sp.top && i < n; i++) {
		uint16_t h = high16(src, i, width);
		*p++ = (uint8_t)(((h >> 8) & 0x80) | (h & 0x7f));
	}
	return (int64_t)(p - o);
}

/* Order-0 entropy of a byte histogram, in bits. */
static double entropy_bits(const uint64_t *count, uint64_t n)
{
	double bits = 0;
	for (unsigned s = 0; s < 256; s++)
		if (count[s])
			bits -= (double)count[s] * log2((double)count[s] / (double)n);
	return bits;
}

/* Estimated bytes of a byte-plane section: its entropy (and 1% for rANS's
 * 12-bit probabilities), its header, and its lanes' initial states and
 * lengths; a plane of one symbol is its 4-byte header alone, and one
 * cheaper packed is that. */
static double plane_cost(const uint64_t *count, uint64_t n)
{
	unsigned k = 0;
	for (unsigned s = 0; s < 256; s++)
		k += count[s] != 0;
	if (k == 1)
		return 4;
	double coded = entropy_bits(count, n) / 8 * 1.01 +
		       (double)WSP_MIN(compact_bytes(k), 2u * 256u) +
		       (double)(n_blocks(n) * EXPRANS_LANES * (2 + 4));
	return exprans_compact ? fmin(coded, (double)packed_bytes(k, n)) : coded;
}

int exprans_planes_pay(const void *src, uint64_t n)
{
	uint64_t hi[256] = { 0 }, lo[256] = { 0 };
	const uint32_t *v = src;
	if (n == 0)
		return 0;
	for (uint64_t i = 0; i < n; i++) {
		hi[(v[i] >> 8) & 0xff]++;
		lo[v[i] & 0xff]++;
	}
	/* against 2 raw bytes a value */
	double coded = plane_cost(hi, n) + plane_cost(lo, n);
	return coded + (double)n * EXPRANS_PLANES_MIN_GAIN < 2.0 * (double)n;
}
