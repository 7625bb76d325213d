/* EXPRANS reference encoder and decoder (see exprans.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pack/exprans/exprans.h"
#include "pack/exprans/exprans_gpu.h"

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

static uint64_t n_blocks(uint64_t n)
{
	return (n + EXPRANS_BLOCK - 1) / EXPRANS_BLOCK;
}

unsigned exprans_value_bytes(int dtype)
{
	switch (dtype) {
	case WSP_DTYPE_BF16:
	case WSP_DTYPE_F16:
		return 2;
	case WSP_DTYPE_F32:
		return 4;
	default:
		return 0;
	}
}

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

/* How the upper halves are split: top = 0, the symbol is bits 14..7 and
 * the sign|mantissa byte is stored raw; top = 1 (EXPRANS_TOP_BIT), the
 * symbol is bits 14..6 less `base` and SEC_SIGN_MANT codes the sign and
 * bits 5..0. */
struct split {
	int top;
	unsigned base;
};

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

/* The frequencies' two forms (wspack(5)): 256 u16 ("full"), or, in chunks
 * with coded low halves, a compact one that lists only the symbols present
 * and, for a section of one symbol, nothing else: no lane table, no lane
 * streams (an upcast's zero low bytes cost 4 bytes a chunk, not 2 KiB). */
#define COMPACT_MARK 0x8000u

int exprans_compact = 1;

static unsigned symbols_present(const uint16_t *freq)
{
	unsigned k = 0;
	for (unsigned s = 0; s < 256; s++)
		k += freq[s] != 0;
	return k;
}

/* Bytes of the compact header for k symbols: the mark and count, then one
 * symbol (k = 1), or the symbols (padded to even) and their frequencies. */
static uint64_t compact_bytes(unsigned k)
{
	return k == 1 ? 4 : 2 + (k + (k & 1)) + 2u * k;
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

/* The packed form of a byte plane (wspack(5)): where its k symbols are
 * about equally likely (an incompressible byte, a bit or two of noise)
 * rANS gains nothing on b = ceil(log2 k) bits a value and still pays each
 * lane's state and length; packed, each value is its symbol's index in b
 * bits, and no lanes.  Only the byte planes of chunks with coded low
 * halves take it. */
#define PACKED_MARK 0x4000u

static unsigned index_bits(unsigned k)
{
	unsigned b = 1;
	while ((1u << b) < k)
		b++;
	return b;
}

/* The packed indices' bytes: n * b bits, rounded up to even (the next
 * section's header stays 2-byte aligned). */
static uint64_t packed_index_bytes(unsigned k, uint64_t n)
{
	uint64_t bytes = (n * index_bits(k) + 7) / 8;
	return bytes + (bytes & 1);
}

static uint64_t packed_bytes(unsigned k, uint64_t n)
{
	return 2 + k + (k & 1) + packed_index_bytes(k, n);
}

/* The plane `sec` of n 32-bit values, packed at o; returns its length. */
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
 * compact and of one symbol, the header alone; or a byte plane packed where
 * that is no larger).  Returns its length. */
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

/* slot -> (freq - 1) | (slot - cum) << 12 | symbol << 24, one word. */
static inline uint32_t dec_entry(uint32_t freq, uint32_t bias, uint32_t sym)
{
	return (freq - 1) | bias << 12 | sym << 24;
}

int exprans_use_simd = 1;

/* An upper half with the top bit coded: bits 14..6 base + symbol, the
 * sign and bits 5..0 from the 7-bit sign|mantissa symbol v. */
static inline uint16_t upper_top(unsigned sym, unsigned v, unsigned base)
{
	return (uint16_t)((sym + base) << 6 | (v & 0x40) << 9 | (v & 0x3f));
}

/* Values [from, end) of a block, all 32 lanes a step (the last step may be
 * short); returns 1 when a lane needed a word past its stream. */
static unsigned steps_scalar(const uint32_t *tab, uint32_t *x, int32_t *off, const int32_t *stop,
			     const uint8_t *p, const uint8_t *sm, uint16_t *dst, uint64_t from,
			     uint64_t end, struct split sp)
{
	unsigned overrun = 0;
	for (uint64_t base = from; base < end; base += EXPRANS_LANES) {
		unsigned lanes = (unsigned)WSP_MIN((uint64_t)EXPRANS_LANES, end - base);
		for (unsigned j = 0; j < lanes; j++) {
			uint32_t e = tab[x[j] & (PROB_SCALE - 1)];
			uint32_t y = ((e & 0xfff) + 1) * (x[j] >> EXPRANS_PROB_BITS) + ((e >> 12) & 0xfff);
			unsigned need = y < RANS_L, have = off[j] < stop[j];
			overrun |= need & !have;
			uint32_t w = rd16(p + off[j]);
			uint32_t m = 0u - need;   /* a mask, not a branch: renormalisation is random */
			x[j] = (y & ~m) | ((y << 16 | w) & m);
			off[j] += (int32_t)(2 * (need & have));
			uint8_t v = sm[base + j];
			dst[base + j] = sp.top ? upper_top(e >> 24, v, sp.base)
					       : (uint16_t)((v & 0x80) << 8 | (e >> 24) << 7 | (v & 0x7f));
		}
	}
	return overrun;
}

#if WSP_EXPRANS_AVX2
#include <immintrin.h>

static int cpu_has_avx2(void)
{
	return __builtin_cpu_supports("avx2");
}

/* One step of 8 lanes: state X, stream offset O (the word there is w),
 * their symbols' table entries into *e; returns which lanes took a word. */
__attribute__((target("avx2"), always_inline))
static inline __m256i lanes_step(const uint32_t *tab, __m256i *X, __m256i *O, __m256i S,
				 __m256i *ovr, __m256i w, __m256i *e, int checked)
{
	const __m256i low12 = _mm256_set1_epi32(0xfff), one = _mm256_set1_epi32(1);
	const __m256i word = _mm256_set1_epi32(0xffff), two = _mm256_set1_epi32(2);
	const __m256i slots = _mm256_set1_epi32(PROB_SCALE - 1);
	*e = _mm256_i32gather_epi32((const int *)tab, _mm256_and_si256(*X, slots), 4);
	__m256i f = _mm256_add_epi32(_mm256_and_si256(*e, low12), one);
	__m256i y = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(*X, 12)),
				     _mm256_and_si256(_mm256_srli_epi32(*e, 12), low12));
	__m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(y, 16), _mm256_setzero_si256());
	*X = _mm256_blendv_epi8(y, _mm256_or_si256(_mm256_slli_epi32(y, 16),
						   _mm256_and_si256(w, word)), need);
	if (checked) {
		__m256i have = _mm256_cmpgt_epi32(S, *O);
		*ovr = _mm256_or_si256(*ovr, _mm256_andnot_si256(have, need));
		need = _mm256_and_si256(need, have);
	}
	*O = _mm256_add_epi32(*O, _mm256_and_si256(need, two));
	return need;
}

/* A step's 32 symbols (table entries E, 8 lanes each) joined with their
 * sign|mantissa bytes into dst, a byte at a time: the symbols packed to
 * bytes in order, then low byte = (symbol bit 0) << 7 | mantissa, high byte
 * = sign | symbol >> 1. */
__attribute__((target("avx2"), always_inline))
static inline void join_step(const __m256i *E, const uint8_t *sm, uint16_t *dst)
{
	const __m256i sign = _mm256_set1_epi8((char)0x80), mant = _mm256_set1_epi8(0x7f);
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	__m256i e01 = _mm256_packus_epi32(_mm256_srli_epi32(E[0], 24), _mm256_srli_epi32(E[1], 24));
	__m256i e23 = _mm256_packus_epi32(_mm256_srli_epi32(E[2], 24), _mm256_srli_epi32(E[3], 24));
	__m256i sym = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(e01, e23), order);
	__m256i v = _mm256_loadu_si256((const __m256i *)sm);
	__m256i lo = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(sym, 7), sign),
				     _mm256_and_si256(v, mant));
	__m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(sym, 1), mant),
				     _mm256_and_si256(v, sign));
	__m256i a = _mm256_unpacklo_epi8(lo, hi), b = _mm256_unpackhi_epi8(lo, hi);
	_mm256_storeu_si256((__m256i *)dst, _mm256_permute2x128_si256(a, b, 0x20));
	_mm256_storeu_si256((__m256i *)(dst + 16), _mm256_permute2x128_si256(a, b, 0x31));
}

/* The same with the top bit coded (upper_top): sm7 holds each value's
 * 7-bit sign|mantissa symbol, base16 the base in every 16-bit lane. */
__attribute__((target("avx2"), always_inline))
static inline void join_step_top(const __m256i *E, const uint8_t *sm7, uint16_t *dst,
				 __m256i base16)
{
	const __m256i b6 = _mm256_set1_epi16(0x40), low6 = _mm256_set1_epi16(0x3f);
	/* 16-bit symbols: packus interleaves the halves of E[0] and E[1];
	 * the 64-bit permute puts values 0..15 (16..31) in order */
	__m256i e01 = _mm256_packus_epi32(_mm256_srli_epi32(E[0], 24), _mm256_srli_epi32(E[1], 24));
	__m256i e23 = _mm256_packus_epi32(_mm256_srli_epi32(E[2], 24), _mm256_srli_epi32(E[3], 24));
	__m256i s[2] = { _mm256_permute4x64_epi64(e01, 0xd8), _mm256_permute4x64_epi64(e23, 0xd8) };
	for (int h = 0; h < 2; h++) {
		__m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(sm7 + 16 * h)));
		__m256i hi = _mm256_or_si256(
			_mm256_slli_epi16(_mm256_add_epi16(s[h], base16), 6),
			_mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(v, b6), 9),
					_mm256_and_si256(v, low6)));
		_mm256_storeu_si256((__m256i *)(dst + 16 * h), hi);
	}
}

/* A step's join, plain or with the top bit coded. */
__attribute__((target("avx2"), always_inline))
static inline void join_any(const __m256i *E, const uint8_t *sm, uint16_t *dst, struct split sp,
			    __m256i base16)
{
	if (sp.top)
		join_step_top(E, sm, dst, base16);
	else
		join_step(E, sm, dst);
}

/* `steps` full steps from value `first`, 8 lanes an instruction: the same
 * arithmetic as steps_scalar.  Steps go in pairs: a lane takes one word a
 * step at most, so one gather of 4 bytes at each lane's offset serves both
 * (the second step's word is the upper half where the first took one). */
__attribute__((target("avx2"), always_inline))
static inline unsigned steps_avx2_body(const uint32_t *tab, uint32_t *x, int32_t *off,
				       const int32_t *stop, const uint8_t *p, const uint8_t *sm,
				       uint16_t *dst, uint64_t first, uint64_t steps, int checked,
				       struct split sp)
{
	const __m256i sixteen = _mm256_set1_epi32(16), base16 = _mm256_set1_epi16((short)sp.base);
	__m256i X[4], O[4], S[4], E[4], ovr = _mm256_setzero_si256();
	for (int g = 0; g < 4; g++) {
		X[g] = _mm256_loadu_si256((const __m256i *)(x + 8 * g));
		O[g] = _mm256_loadu_si256((const __m256i *)(off + 8 * g));
		S[g] = _mm256_loadu_si256((const __m256i *)(stop + 8 * g));
	}
	uint64_t k = 0;
	for (; k + 2 <= steps; k += 2) {
		uint64_t base = first + k * EXPRANS_LANES;
		__m256i W[4], took[4];
		for (int g = 0; g < 4; g++) {
			W[g] = _mm256_i32gather_epi32((const int *)p, O[g], 1);
			took[g] = lanes_step(tab, &X[g], &O[g], S[g], &ovr, W[g], &E[g], checked);
		}
		join_any(E, sm + base, dst + base, sp, base16);
		for (int g = 0; g < 4; g++) {
			__m256i w = _mm256_srlv_epi32(W[g], _mm256_and_si256(took[g], sixteen));
			lanes_step(tab, &X[g], &O[g], S[g], &ovr, w, &E[g], checked);
		}
		join_any(E, sm + base + EXPRANS_LANES, dst + base + EXPRANS_LANES, sp, base16);
	}
	if (k < steps) {   /* an odd step */
		uint64_t base = first + k * EXPRANS_LANES;
		for (int g = 0; g < 4; g++)
			lanes_step(tab, &X[g], &O[g], S[g], &ovr,
				   _mm256_i32gather_epi32((const int *)p, O[g], 1), &E[g], checked);
		join_any(E, sm + base, dst + base, sp, base16);
	}
	for (int g = 0; g < 4; g++) {
		_mm256_storeu_si256((__m256i *)(x + 8 * g), X[g]);
		_mm256_storeu_si256((__m256i *)(off + 8 * g), O[g]);
	}
	return !_mm256_testz_si256(ovr, ovr);
}

/* `steps` full steps; where no lane can read past the input in them (each
 * step advances a lane by 2 bytes at most), without the per-step check
 * that a lane stays in its stream: one that strays ends past its stop,
 * which the block's end check refuses. */
__attribute__((target("avx2")))
static unsigned steps_avx2(const uint32_t *tab, uint32_t *x, int32_t *off, const int32_t *stop,
			   const uint8_t *p, uint64_t len, const uint8_t *sm, uint16_t *dst,
			   uint64_t first, uint64_t steps, struct split sp)
{
	int64_t far = 0;
	for (unsigned j = 0; j < EXPRANS_LANES; j++)
		far = WSP_MAX(far, (int64_t)off[j]);
	if ((uint64_t)far + 2 * steps + 4 <= len)
		return steps_avx2_body(tab, x, off, stop, p, sm, dst, first, steps, 0, sp);
	return steps_avx2_body(tab, x, off, stop, p, sm, dst, first, steps, 1, sp);
}
#else
static int cpu_has_avx2(void)
{
	return 0;
}
#endif

/* A section being decoded: its table, its lane table, and where the next
 * block's lane streams start; or, of one symbol in the compact form, that
 * symbol alone; or, packed, its indices and what each names. */
struct section_dec {
	union {
		uint32_t tab[PROB_SCALE];      /* rANS: slot -> entry */
		uint16_t wide[256][8];         /* packed, 1, 2 or 4 bits: an index byte's values */
	};
	const uint8_t *lens;
	const uint8_t *lane;
	uint64_t blocks;
	int constant;              /* every value's symbol is `symbol`; no lanes */
	unsigned symbol;
	int may_pack;              /* a byte plane of a chunk with coded low halves */
	unsigned limit;            /* the largest symbol the section may code */
	int packed;                /* packed: each value's index in `bits` bits at `index` */
	int some_bad;              /* packed: some indices name no symbol (k < 2^bits) */
	unsigned bits;
	const uint8_t *index, *index_end;
	uint16_t unpack[256];      /* index -> symbol << 7; PACKED_BAD past the k symbols */
	const char *what;          /* in messages: "" or " (bits 15..8)" */
};

#define PACKED_BAD 0xffffu

/* The compact frequencies at p[at, len) (wspack(5)): k symbols, strictly
 * increasing, each with a frequency of at least 1, summing to 4096; of one
 * symbol, the section's only part.  The table is built; *head gets the
 * header's length. */
static int parse_compact(const uint8_t *p, size_t len, uint64_t at, uint64_t n,
			 struct section_dec *s, uint64_t *head, struct wspi_err *err)
{
	unsigned k = rd16(p + at) & ~COMPACT_MARK;
	if (k < 1 || k > 256)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a compact header of %u symbols",
			       s->what, k);
	if (!n)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: frequencies for an empty chunk", s->what);
	*head = compact_bytes(k);
	if (at + *head > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: %zu bytes, shorter than the header",
			       s->what, len);
	if (k == 1) {
		s->constant = 1;
		s->symbol = rd16(p + at + 2);
		if (s->symbol > s->limit)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: symbol %u", s->what, s->symbol);
		return 0;
	}
	const uint8_t *sym = p + at + 2, *freq = sym + k + (k & 1);
	uint32_t sum = 0;
	for (unsigned i = 0; i < k; i++) {
		uint32_t f = rd16(freq + 2 * i);
		if (i && sym[i] <= sym[i - 1])
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: compact symbols out of order",
				       s->what);
		if (sym[i] > s->limit)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: symbol %u", s->what, sym[i]);
		if (f < 1 || f > PROB_SCALE - sum)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: compact frequency %u of symbol "
				       "%u (each at least 1, summing to %u)", s->what, f, sym[i],
				       PROB_SCALE);
		for (uint32_t j = 0; j < f; j++)
			s->tab[sum + j] = dec_entry(f, j, sym[i]);
		sum += f;
	}
	if (sum != PROB_SCALE)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: frequencies sum to %u, not %u", s->what,
			       sum, PROB_SCALE);
	return 0;
}

/* The full frequencies at p[at, len): 256 u16 summing to 4096 (all 0 for
 * an empty chunk).  The table is built. */
static int parse_full(const uint8_t *p, size_t len, uint64_t at, uint64_t n,
		      struct section_dec *s, struct wspi_err *err)
{
	if (at + 2 * 256 > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: %zu bytes, shorter than the header",
			       s->what, len);
	uint32_t sum = 0;
	for (unsigned k = 0; k < 256; k++) {
		uint32_t f = rd16(p + at + 2 * k);
		if (f > PROB_SCALE - sum)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: frequencies sum above %u", s->what,
				       PROB_SCALE);
		if (f && k > s->limit)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: symbol %u", s->what, k);
		for (uint32_t i = 0; i < f; i++)
			s->tab[sum + i] = dec_entry(f, i, k);
		sum += f;
	}
	if (n && sum != PROB_SCALE)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: frequencies sum to %u, not %u", s->what,
			       sum, PROB_SCALE);
	if (!n && sum)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: frequencies for an empty chunk", s->what);
	return 0;
}

/* The packed plane at p[at, len) (wspack(5)): k symbols, 2 to 256,
 * strictly increasing, then n indices of ceil(log2 k) bits, the bits past
 * the last zero.  *head gets the whole section's length. */
static int parse_packed(const uint8_t *p, size_t len, uint64_t at, uint64_t n,
			struct section_dec *s, uint64_t *head, struct wspi_err *err)
{
	unsigned k = rd16(p + at) & ~PACKED_MARK;
	if (!s->may_pack)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a packed plane where the format has "
			       "none", s->what);
	if (k < 2 || k > 256)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a packed plane of %u symbols",
			       s->what, k);
	if (!n)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a packed plane for an empty chunk",
			       s->what);
	*head = packed_bytes(k, n);
	if (at + *head > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a packed plane of %llu bytes beyond "
			       "the stream", s->what, (unsigned long long)*head);
	const uint8_t *sym = p + at + 2;
	for (unsigned i = 0; i < 256; i++)
		s->unpack[i] = i < k ? (uint16_t)(sym[i] << 7) : PACKED_BAD;
	for (unsigned i = 1; i < k; i++)
		if (sym[i] <= sym[i - 1])
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: packed symbols out of order",
				       s->what);
	if (sym[k - 1] > s->limit)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: symbol %u", s->what, sym[k - 1]);
	s->packed = 1;
	s->bits = index_bits(k);
	s->some_bad = k < 1u << s->bits;
	s->index = sym + k + (k & 1);
	unsigned mask = (1u << s->bits) - 1;
	if (8 % s->bits == 0 && s->bits < 8)   /* the values of each index byte */
		for (unsigned byte = 0; byte < 256; byte++)
			for (unsigned t = 0; t < 8 / s->bits; t++)
				s->wide[byte][t] = s->unpack[(byte >> (t * s->bits)) & mask];
	/* the bits after the last index, to the end of the (even) bytes */
	uint64_t used = n * s->bits, bytes = packed_index_bytes(k, n);
	s->index_end = s->index + bytes;
	unsigned spare = (used & 7) ? s->index[used >> 3] >> (used & 7) : 0;
	for (uint64_t i = (used + 7) >> 3; i < bytes; i++)
		spare |= s->index[i];
	if (spare)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: bits set past a packed plane's last "
			       "index", s->what);
	return 0;
}

/* Value i's index in a packed plane of `bits` bits an index: the widths
 * that divide a byte never straddle two. */
static inline unsigned packed_index(const uint8_t *q, uint64_t i, unsigned bits)
{
	uint64_t bit = i * bits;
	unsigned w = q[bit >> 3];
	if ((bit & 7) + bits > 8)
		w |= (unsigned)q[(bit >> 3) + 1] << 8;
	return (w >> (bit & 7)) & ((1u << bits) - 1);
}

/* Values [first, end) of a packed plane into out, as symbol << 7 (as a
 * coded byte plane comes out of decode_block); first is a block's start.
 * Widths that divide a byte: an index byte's values at a time, from
 * `wide` (2.5x one value at a time). */
static int unpack_range(const struct section_dec *s, uint64_t first, uint64_t end,
			uint16_t *out, struct wspi_err *err)
{
	const uint8_t *q = s->index;
	unsigned bits = s->bits, per = 8 % bits == 0 && bits < 8 ? 8 / bits : 0;
	uint64_t count = end - first, i = 0;
	if (bits == 8) {
		for (; i < count; i++)
			out[i] = s->unpack[q[first + i]];
	} else if (per) {
		const uint8_t *b = q + first / per;
		uint16_t *o = out;
		for (uint64_t m = 0; m < count / per; m++, o += per)
			memcpy(o, s->wide[b[m]], per * sizeof(*out));
		i = count / per * per;
	} else {
		/* 3, 5, 6 or 7 bits: eight values in `bits` bytes at a time */
		const uint8_t *b = q + first / 8 * bits;
		unsigned mask = (1u << bits) - 1;
		for (; i + 8 <= count; i += 8, b += bits) {
			uint64_t w = 0;
			for (unsigned j = 0; j < bits; j++)
				w |= (uint64_t)b[j] << (8 * j);
			for (unsigned t = 0; t < 8; t++)
				out[i + t] = s->unpack[(w >> (t * bits)) & mask];
		}
	}
	for (; i < count; i++)   /* the last values */
		out[i] = s->unpack[packed_index(q, first + i, bits)];
	/* every index names a symbol unless k is short of 2^bits */
	unsigned bad = 0;
	for (i = 0; s->some_bad && i < count; i++)
		bad |= out[i] == PACKED_BAD;
	for (i = 0; bad && i < count; i++)
		if (out[i] == PACKED_BAD)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: value %llu holds an index past "
				       "the packed plane's symbols", s->what,
				       (unsigned long long)(first + i));
	return 0;
}

/* Parse the section at p[*at, len): frequencies (building the table) and
 * lane table, checked; *at moves past its lane streams.  compact: the
 * compact header may be used (chunks with coded low halves or the top
 * mantissa bit coded). */
static int parse_section(const uint8_t *p, size_t len, uint64_t *at, uint64_t n, int compact,
			 struct section_dec *s, struct wspi_err *err)
{
	uint64_t head = 2 * 256;
	s->constant = 0;
	s->symbol = 0;
	s->packed = 0;
	if (*at + 2 > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: %zu bytes, shorter than the header",
			       s->what, len);
	if ((rd16(p + *at) & (COMPACT_MARK | PACKED_MARK)) == PACKED_MARK) {
		int rc = parse_packed(p, len, *at, n, s, &head, err);
		*at += head;
		return rc;
	}
	if (rd16(p + *at) & COMPACT_MARK) {
		if (!compact)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a compact header in a chunk "
				       "without coded low halves or top bit", s->what);
		int rc = parse_compact(p, len, *at, n, s, &head, err);
		if (rc || s->constant) {
			*at += head;
			return rc;
		}
	} else {
		WSP_TRY(parse_full(p, len, *at, n, s, err));
	}
	uint64_t nb = n_blocks(n);
	uint64_t lens_at = *at + head, streams_at = lens_at + nb * EXPRANS_LANES * 2;
	if (streams_at > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: lane table beyond the stream", s->what);
	uint64_t total = 0;
	for (uint64_t i = 0; i < nb * EXPRANS_LANES; i++) {
		uint32_t l = rd16(p + lens_at + 2 * i);
		if (l < 4 || (l & 1) || l > MAX_LANE_BYTES)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: lane %llu has a length of %u bytes",
				       s->what, (unsigned long long)i, l);
		total += l;
	}
	if (streams_at + total > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: lane streams beyond the stream", s->what);
	s->lens = p + lens_at;
	s->lane = p + streams_at;
	s->blocks = nb;
	*at = streams_at + total;
	return 0;
}

/* The bytes of block b's lane streams. */
static uint64_t lane_bytes(const struct section_dec *s, uint64_t b)
{
	uint64_t sum = 0;
	for (unsigned j = 0; j < EXPRANS_LANES; j++)
		sum += rd16(s->lens + 2 * (b * EXPRANS_LANES + j));
	return sum;
}

/* Hint the cache to fetch [p, p + n): locality 3 keeps the lines in L1,
 * 2 in L2. */
static void prefetch(const uint8_t *p, uint64_t n, int locality)
{
	for (uint64_t q = 0; q < n; q += 64)
		if (locality == 3)
			__builtin_prefetch(p + q, 0, 3);
		else
			__builtin_prefetch(p + q, 0, 2);
}

/* Block b's values [first, end) of section s into out (sm: the raw
 * sign|mantissa bytes, or zeros for a byte-plane section, whose symbols
 * then come out as symbol << 7; with sp.top, the exponent section and
 * each value's 7-bit sign|mantissa symbol, joined by upper_top).  Checks
 * the lanes' start and end. */
static int decode_block(struct section_dec *s, const uint8_t *p, uint64_t len, uint64_t b,
			uint64_t first, uint64_t end, const uint8_t *sm, uint16_t *out, int simd,
			struct split sp, struct wspi_err *err)
{
	int32_t off[EXPRANS_LANES], stop[EXPRANS_LANES];
	uint32_t x[EXPRANS_LANES];
	if (s->constant) {
		for (uint64_t i = 0; i < end - first; i++)
			out[i] = sp.top ? upper_top(s->symbol, sm[i], sp.base)
					: (uint16_t)((sm[i] & 0x80) << 8 | s->symbol << 7 | (sm[i] & 0x7f));
		return 0;
	}
	/* A block's 32 lane streams lie back to back, each read 2 bytes at a
	 * time: too slowly and in too many places for the hardware to see
	 * streams.  The next block's are fetched while this one decodes (the
	 * first block's, now); 2.0 -> 2.3 GB/s a thread on 64 MiB. */
	uint64_t here = lane_bytes(s, b);
	if (b == 0)
		prefetch(s->lane, here, 3);
	if (b + 1 < s->blocks)
		prefetch(s->lane + here, lane_bytes(s, b + 1), 2);
	for (unsigned j = 0; j < EXPRANS_LANES; j++) {
		uint32_t l = rd16(s->lens + 2 * (b * EXPRANS_LANES + j));
		x[j] = rd32(s->lane);
		off[j] = (int32_t)(s->lane + 4 - p);
		stop[j] = (int32_t)(s->lane + l - p);
		s->lane += l;
		if (x[j] < RANS_L && first + j < end)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: block %llu lane %u starts in "
				       "state %u", s->what, (unsigned long long)b, j, x[j]);
	}
	/* All 32 lanes at each step (the GPU's order, and independent work for
	 * the CPU to overlap), without branches: a lane that needs a word past
	 * its stream reads at its end instead (in bounds: sm[] or another
	 * section follows with enough bytes) and the block fails. */
	uint64_t full = (end - first) / EXPRANS_LANES, done = 0;
	unsigned overrun = 0;
#if WSP_EXPRANS_AVX2
	if (simd) {
		overrun |= steps_avx2(s->tab, x, off, stop, p, len, sm, out, 0, full, sp);
		done = full;
	}
#else
	(void)simd;
	(void)full;
	(void)len;
#endif
	overrun |= steps_scalar(s->tab, x, off, stop, p, sm, out, done * EXPRANS_LANES, end - first,
				sp);
	if (overrun)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: block %llu reads past a lane's stream",
			       s->what, (unsigned long long)b);
	for (unsigned j = 0; j < EXPRANS_LANES; j++)
		if (off[j] != stop[j] || x[j] != RANS_L)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: block %llu lane %u does not end "
				       "where it should (corrupt stream)", s->what,
				       (unsigned long long)b, j);
	return 0;
}

/* A block of 32-bit values from its decoded upper halves and byte planes
 * (each symbol << 7, or a section's one symbol): loops without branches,
 * which the compiler vectorises. */
static void join_planes(uint32_t *d32, const uint16_t *buf, const struct section_dec *sec,
			uint64_t count)
{
	const uint16_t *b1 = buf + EXPRANS_BLOCK, *b0 = buf + 2 * EXPRANS_BLOCK;
	uint32_t c1 = sec[1].symbol << 8, c0 = sec[2].symbol;
	if (sec[1].constant && sec[2].constant)
		for (uint64_t i = 0; i < count; i++)
			d32[i] = (uint32_t)buf[i] << 16 | c1 | c0;
	else if (sec[1].constant)
		for (uint64_t i = 0; i < count; i++)
			d32[i] = (uint32_t)buf[i] << 16 | c1 | (uint32_t)(b0[i] >> 7);
	else if (sec[2].constant)
		for (uint64_t i = 0; i < count; i++)
			d32[i] = (uint32_t)buf[i] << 16 | (uint32_t)(b1[i] >> 7) << 8 | c0;
	else
		for (uint64_t i = 0; i < count; i++)
			d32[i] = (uint32_t)buf[i] << 16 | (uint32_t)(b1[i] >> 7) << 8 |
				 (uint32_t)(b0[i] >> 7);
}

/* Values [first, end) of a packed plane of 7-bit indices naming every
 * one of its symbols (128, the sign|mantissa symbols of most weights) as
 * bytes: eight values from seven bytes at a time. */
static void unpack7_bytes(const struct section_dec *s, uint64_t first, uint64_t end,
			  uint8_t *out)
{
	uint8_t sym[128];
	for (unsigned i = 0; i < 128; i++)
		sym[i] = (uint8_t)(s->unpack[i] >> 7);
	const uint8_t *q = s->index + first / 8 * 7;   /* first is a block's start */
	uint64_t count = end - first, i = 0;
	for (; i + 8 <= count; i += 8, q += 7) {
		/* 8 bytes where the indices go on (7 copied would stall the
		 * load that follows the copy) */
		uint64_t w = 0;
		memcpy(&w, q, q + 8 <= s->index_end ? 8 : 7);
		for (unsigned t = 0; t < 8; t++)
			out[i + t] = sym[(w >> (7 * t)) & 0x7f];
	}
	for (; i < count; i++)
		out[i] = sym[packed_index(s->index, first + i, 7)];
}

/* A block's 7-bit sign|mantissa symbols as bytes, from its section:
 * decoded or unpacked as symbol << 7 into dec, or of one symbol. */
static void sign_mant_bytes(uint8_t *sm7, const uint16_t *dec, const struct section_dec *s,
			    uint64_t count)
{
	if (s->constant)
		memset(sm7, (int)s->symbol, count);
	else
		for (uint64_t i = 0; i < count; i++)
			sm7[i] = (uint8_t)(dec[i] >> 7);
}

/* The sign|mantissa bytes of a byte-plane section: none. */
static const uint8_t no_raw_bytes[EXPRANS_BLOCK];

int exprans_decode(const void *in, size_t len, void *dst, uint64_t n, unsigned width,
		   unsigned flags, struct wspi_err *err)
{
	return exprans_decode_hashed(in, len, dst, n, width, flags, NULL, err);
}

int exprans_decode_hashed(const void *in, size_t len, void *dst, uint64_t n, unsigned width,
			  unsigned flags, XXH3_state_t *hash, struct wspi_err *err)
{
	const uint8_t *p = in;
	unsigned planes = flags & EXPRANS_LOW_PLANES, top = !!(flags & EXPRANS_TOP_BIT);
	if ((width != 2 && width != 4) || (planes && width != 4) ||
	    (flags & ~(EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT)))
		return WSP_ERR(err, -EINVAL, "exprans: values of %u bytes with flags %#x (2 or 4; "
			       "coded low halves: 4)", width, flags);
	/* The lanes' reads past their end land in the next section or sm[],
	 * which must hold two bytes: a one-value stream is decoded from a
	 * padded copy. */
	uint8_t small[4 + 2 + 4 * (2 * 256 + EXPRANS_LANES * (2 + 6)) + 3 + 2];
	if (n == 1 && len <= sizeof(small) - 2) {
		memset(small, 0, sizeof(small));
		memcpy(small, in, len);
		p = small;
	}
	/* the count (and base), then a compact header at least */
	int compact = planes || top;
	if (len < (compact ? 4u + 2u * top + 4u : EXPRANS_HEADER))
		return WSP_ERR(err, WSP_EFORMAT, "exprans: %zu bytes, shorter than the header", len);
	if (rd32(p) != n)
		return WSP_ERR(err, WSP_EFORMAT, "exprans: stream of %u values where %llu are expected",
			       rd32(p), (unsigned long long)n);
	unsigned base = top ? rd16(p + 4) : 0;
	if (base > 0x1ff)
		return WSP_ERR(err, WSP_EFORMAT, "exprans: symbols start at pair %u (at most 511)",
			       base);
	/* On the stack (about 66 KiB): decoders run per chunk on every
	 * worker, and an allocation each would churn the heap. */
	unsigned n_sec = 1 + 2 * !!planes + top, k_sm = n_sec - 1;
	struct section_dec sec[4];
	uint16_t *buf = NULL;
	static const char *const what[4] = { "", " (bits 15..8)", " (bits 7..0)",
					     " (sign and mantissa)" };
	uint64_t at = 4 + 2 * top;
	int rc = 0;
	for (unsigned k = 0; k < n_sec && rc == 0; k++) {
		int is_sm = top && k == k_sm;
		sec[k].what = what[is_sm ? 3 : k];
		sec[k].may_pack = k > 0;
		sec[k].limit = k == 0 ? (top ? 0x1ffu - base : 0xffu) : is_sm ? 0x7fu : 0xffu;
		rc = parse_section(p, len, &at, n, compact, &sec[k], err);
	}
	uint64_t raw_after = (width == 4 && !planes ? 2 * n : 0) + (top ? 0 : n);
	if (rc == 0 && at + raw_after != len)
		rc = WSP_ERR(err, WSP_EFORMAT, "exprans: %zu bytes where the lanes and values need "
			     "%llu", len, (unsigned long long)(at + raw_after));
	const uint8_t *lo = p + at;                              /* 32-bit values' low halves */
	const uint8_t *sm = top ? no_raw_bytes : p + at + raw_after - n;
	/* 32-bit values, and any with the top bit coded: a block's symbols
	 * (and the other sections) are decoded here, then joined. */
	if (rc == 0 && (width == 4 || top) && n &&
	    !(buf = malloc(n_sec * EXPRANS_BLOCK * sizeof(*buf))))
		rc = WSP_ERR(err, -ENOMEM, "exprans: out of memory");
	/* SIMD reads 4 bytes at a lane's position: 4 must follow any lane end. */
	int simd = exprans_use_simd && n >= 4 && len < (1u << 30) && cpu_has_avx2();
	struct split sp = { .top = (int)top, .base = base }, plain = { 0 };
	/* with the top bit: a block's sign|mantissa symbols, joined as the
	 * exponents are decoded (32 bytes of slack for a SIMD load) */
	uint8_t *sm7 = rc == 0 && top && n ? malloc(EXPRANS_BLOCK + 32) : NULL;
	if (rc == 0 && top && n && !sm7)
		rc = WSP_ERR(err, -ENOMEM, "exprans: out of memory");
	for (uint64_t b = 0; rc == 0 && b < n_blocks(n); b++) {
		uint64_t first = b * EXPRANS_BLOCK, end = WSP_MIN(n, first + EXPRANS_BLOCK);
		/* the other sections first (their symbols << 7 into buf; the
		 * sign|mantissa symbols as bytes into sm7) */
		for (unsigned k = 1; k < n_sec && rc == 0; k++)
			if (top && k == k_sm && sec[k].packed && sec[k].bits == 7 && !sec[k].some_bad)
				unpack7_bytes(&sec[k], first, end, sm7);
			else if (sec[k].packed)
				rc = unpack_range(&sec[k], first, end, buf + k * EXPRANS_BLOCK, err);
			else if (!sec[k].constant)   /* joined below as it is */
				rc = decode_block(&sec[k], p, len, b, first, end, no_raw_bytes,
						  buf + k * EXPRANS_BLOCK, simd, plain, err);
		if (rc == 0 && top && !(sec[k_sm].packed && sec[k_sm].bits == 7 && !sec[k_sm].some_bad))
			sign_mant_bytes(sm7, buf + k_sm * EXPRANS_BLOCK, &sec[k_sm], end - first);
		/* then the upper halves: 16-bit values straight into dst */
		uint16_t *out = width == 2 ? (uint16_t *)dst + first : buf;
		if (rc == 0)
			rc = decode_block(&sec[0], p, len, b, first, end, top ? sm7 : sm + first, out,
					  simd, sp, err);
		uint32_t *d32 = (uint32_t *)dst + first;
		if (rc == 0 && width == 4 && planes)
			join_planes(d32, buf, sec, end - first);
		else if (rc == 0 && width == 4)
			for (uint64_t i = 0; i < end - first; i++)
				d32[i] = (uint32_t)buf[i] << 16 | rd16(lo + 2 * (first + i));
		if (rc == 0 && hash)
			wspi_xxh3_update(hash, (uint8_t *)dst + first * width, (end - first) * width);
	}
	free(sm7);
	free(buf);
	return rc;
}

/* The GPU decoder's status words (exprans_gpu.h), here so that messages
 * need no CUDA. */
const char *exprans_gpu_status_text(uint32_t s)
{
	if (s & EXPRANS_GPU_BAD_HEADER)
		return "header: too short, misaligned, or another number of values";
	if (s & EXPRANS_GPU_TOO_BIG)
		return "more values than the GPU decoder takes in one chunk";
	if (s & EXPRANS_GPU_BAD_FREQ)
		return "frequencies malformed or not summing to 4096";
	if (s & EXPRANS_GPU_BAD_LANES)
		return "lane lengths do not fit the stream";
	if (s & EXPRANS_GPU_BAD_START)
		return "a lane starts below 2^16";
	if (s & EXPRANS_GPU_OVERRUN)
		return "a lane reads past its stream";
	if (s & EXPRANS_GPU_BAD_END)
		return "a lane does not end where it should (corrupt stream)";
	if (s & EXPRANS_GPU_BAD_PACKED)
		return "a packed byte plane malformed, or an index past its symbols";
	return s ? "unknown status" : "ok";
}
