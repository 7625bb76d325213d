/* EXPRANS: the inner loops of a block's decode, portable, AVX2 (8 lanes
 * an instruction) and AVX-512 (16, the symbols found in registers for
 * sections that fit: struct fast_tab), chosen at run time (see
 * exprans_int.h). */
#include <string.h>

#include "common/util.h"
#include "pack/exprans/exprans_int.h"

/* Values [from, end) of a block, all 32 lanes a step (the last step may be
 * short); returns 1 when a lane needed a word past its stream. */
unsigned exprans_steps_scalar(const uint32_t *tab, uint32_t *x, int32_t *off,
			      const int32_t *stop, const uint8_t *p, const uint8_t *sm,
			      uint16_t *dst, uint64_t from, uint64_t end, struct split sp)
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

int exprans_cpu_has_avx2(void)
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

/* The tail of join_step, from the step's 32 symbols as bytes in order. */
__attribute__((target("avx2"), always_inline))
static inline void join_sym(__m256i sym, const uint8_t *sm, uint16_t *dst)
{
	const __m256i sign = _mm256_set1_epi8((char)0x80), mant = _mm256_set1_epi8(0x7f);
	__m256i v = _mm256_loadu_si256((const __m256i *)sm);
	__m256i lo = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(sym, 7), sign),
				     _mm256_and_si256(v, mant));
	__m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(sym, 1), mant),
				     _mm256_and_si256(v, sign));
	__m256i a = _mm256_unpacklo_epi8(lo, hi), b = _mm256_unpackhi_epi8(lo, hi);
	_mm256_storeu_si256((__m256i *)dst, _mm256_permute2x128_si256(a, b, 0x20));
	_mm256_storeu_si256((__m256i *)(dst + 16), _mm256_permute2x128_si256(a, b, 0x31));
}

/* A step's 32 symbols (table entries E, 8 lanes each) joined with their
 * sign|mantissa bytes into dst, a byte at a time: the symbols packed to
 * bytes in order, then low byte = (symbol bit 0) << 7 | mantissa, high byte
 * = sign | symbol >> 1. */
__attribute__((target("avx2"), always_inline))
static inline void join_step(const __m256i *E, const uint8_t *sm, uint16_t *dst)
{
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	__m256i e01 = _mm256_packus_epi32(_mm256_srli_epi32(E[0], 24), _mm256_srli_epi32(E[1], 24));
	__m256i e23 = _mm256_packus_epi32(_mm256_srli_epi32(E[2], 24), _mm256_srli_epi32(E[3], 24));
	join_sym(_mm256_permutevar8x32_epi32(_mm256_packus_epi16(e01, e23), order), sm, dst);
}

/* 16 values with the top bit coded (upper_top): their symbols s16 in
 * 16-bit lanes, sm7 their 7-bit sign|mantissa symbols, base16 the base in
 * every lane. */
__attribute__((target("avx2"), always_inline))
static inline void join_top16(__m256i s16, const uint8_t *sm7, uint16_t *dst, __m256i base16)
{
	const __m256i b6 = _mm256_set1_epi16(0x40), low6 = _mm256_set1_epi16(0x3f);
	__m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)sm7));
	__m256i hi = _mm256_or_si256(_mm256_slli_epi16(_mm256_add_epi16(s16, base16), 6),
				     _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(v, b6), 9),
						     _mm256_and_si256(v, low6)));
	_mm256_storeu_si256((__m256i *)dst, hi);
}

/* The same with the top bit coded (upper_top): sm7 holds each value's
 * 7-bit sign|mantissa symbol, base16 the base in every 16-bit lane. */
__attribute__((target("avx2"), always_inline))
static inline void join_step_top(const __m256i *E, const uint8_t *sm7, uint16_t *dst,
				 __m256i base16)
{
	/* 16-bit symbols: packus interleaves the halves of E[0] and E[1];
	 * the 64-bit permute puts values 0..15 (16..31) in order */
	__m256i e01 = _mm256_packus_epi32(_mm256_srli_epi32(E[0], 24), _mm256_srli_epi32(E[1], 24));
	__m256i e23 = _mm256_packus_epi32(_mm256_srli_epi32(E[2], 24), _mm256_srli_epi32(E[3], 24));
	__m256i s[2] = { _mm256_permute4x64_epi64(e01, 0xd8), _mm256_permute4x64_epi64(e23, 0xd8) };
	join_top16(s[0], sm7, dst, base16);
	join_top16(s[1], sm7 + 16, dst + 16, base16);
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

/* Whether a lane may read past the input p[0, len) in `steps` steps
 * (each advances a lane by 2 bytes at most; a gather reads 4).  Where
 * none may, the SIMD loops run without the per-step check that a lane
 * stays in its stream: one that strays ends past its stop, which the
 * block's end check refuses. */
static int steps_checked(const int32_t *off, uint64_t steps, uint64_t len)
{
	int64_t far = 0;
	for (unsigned j = 0; j < EXPRANS_LANES; j++)
		far = WSP_MAX(far, (int64_t)off[j]);
	return (uint64_t)far + 2 * steps + 4 > len;
}

/* `steps` full steps (steps_checked says with or without the check). */
__attribute__((target("avx2")))
unsigned exprans_steps_avx2(const uint32_t *tab, uint32_t *x, int32_t *off, const int32_t *stop,
			    const uint8_t *p, uint64_t len, const uint8_t *sm, uint16_t *dst,
			    uint64_t first, uint64_t steps, struct split sp)
{
	if (!steps_checked(off, steps, len))
		return steps_avx2_body(tab, x, off, stop, p, sm, dst, first, steps, 0, sp);
	return steps_avx2_body(tab, x, off, stop, p, sm, dst, first, steps, 1, sp);
}

int exprans_cpu_has_avx512(void)
{
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vpopcntdq") && __builtin_cpu_supports("avx2");
}

#define AVX512 "avx512f,avx512bw,avx512vpopcntdq,avx2"

/* A fast_tab's tables in registers: 32 entries each, two halves. */
struct fast_regs {
	__m512i bucket[2], fine[2], sym[2], crowded;
};

/* The symbol entries (fast_tab.sym) of 16 lanes in state X, and their
 * slots: the bucket's first symbol plus the starts at or below the slot,
 * counted by the carries into bit 7 of the entry's bytes. */
__attribute__((target(AVX512), always_inline))
static inline __m512i lanes_symbol(const struct fast_regs *r, __m512i X, __m512i *slot)
{
	const __m512i slots = _mm512_set1_epi32(PROB_SCALE - 1), carries = _mm512_set1_epi32(0x808080);
	const __m512i in128 = _mm512_set1_epi32(127), in4 = _mm512_set1_epi32(3);
	/* each lane's offset copied to its bytes 0..2, byte 3 zeroed */
	const __m512i spread = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, -128, 4, 4, 4, -128,
								    8, 8, 8, -128, 12, 12, 12, -128));
	*slot = _mm512_and_si512(X, slots);
	__m512i b = _mm512_srli_epi32(*slot, 7);
	__m512i coarse = _mm512_permutex2var_epi32(r->bucket[0], b, r->bucket[1]);
	/* vpermt2d reads an index's low 5 bits: (slot >> 2) picks its 4 slots
	 * of the crowded bucket without a mask */
	__m512i fine = _mm512_permutex2var_epi32(r->fine[0], _mm512_srli_epi32(*slot, 2), r->fine[1]);
	__mmask16 crowded = _mm512_cmpeq_epi32_mask(b, r->crowded);
	__m512i e = _mm512_mask_mov_epi32(coarse, crowded, fine);
	__m512i low = _mm512_and_si512(*slot, _mm512_mask_mov_epi32(in128, crowded, in4));
	__m512i rep = _mm512_shuffle_epi8(low, spread);
	__m512i starts = _mm512_popcnt_epi32(_mm512_and_si512(_mm512_add_epi32(rep, e), carries));
	__m512i index = _mm512_add_epi32(_mm512_srli_epi32(e, 24), starts);
	return _mm512_permutex2var_epi32(r->sym[0], index, r->sym[1]);
}

/* One step of 16 lanes (lanes_step's arithmetic): state X, stream
 * offset O (the word there is w); the symbol entry into *e; returns
 * which lanes took a word. */
__attribute__((target(AVX512), always_inline))
static inline __mmask16 lanes_step512(const struct fast_regs *r, __m512i *X, __m512i *O,
				      __m512i S, __mmask16 *ovr, __m512i w, __m512i *e,
				      int checked)
{
	const __m512i low12 = _mm512_set1_epi32(0xfff), one = _mm512_set1_epi32(1);
	const __m512i word = _mm512_set1_epi32(0xffff), two = _mm512_set1_epi32(2);
	__m512i slot;
	*e = lanes_symbol(r, *X, &slot);
	__m512i f = _mm512_add_epi32(_mm512_and_si512(*e, low12), one);
	__m512i cum = _mm512_and_si512(_mm512_srli_epi32(*e, 12), low12);
	__m512i y = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srli_epi32(*X, 12)),
				     _mm512_sub_epi32(slot, cum));
	__mmask16 need = _mm512_cmpeq_epi32_mask(_mm512_srli_epi32(y, 16), _mm512_setzero_si512());
	*X = _mm512_mask_mov_epi32(y, need, _mm512_or_si512(_mm512_slli_epi32(y, 16),
							    _mm512_and_si512(w, word)));
	if (checked) {
		__mmask16 have = _mm512_cmpgt_epi32_mask(S, *O);
		*ovr |= need & (__mmask16)~have;
		need &= have;
	}
	*O = _mm512_mask_add_epi32(*O, need, *O, two);
	return need;
}

/* A step's join from its two halves' symbol entries. */
__attribute__((target(AVX512), always_inline))
static inline void join512(const __m512i *E, const uint8_t *sm, uint16_t *dst, struct split sp,
			   __m256i base16)
{
	__m512i s0 = _mm512_srli_epi32(E[0], 24), s1 = _mm512_srli_epi32(E[1], 24);
	if (sp.top) {
		join_top16(_mm512_cvtepi32_epi16(s0), sm, dst, base16);
		join_top16(_mm512_cvtepi32_epi16(s1), sm + 16, dst + 16, base16);
	} else {
		join_sym(_mm256_set_m128i(_mm512_cvtepi32_epi8(s1), _mm512_cvtepi32_epi8(s0)), sm,
			 dst);
	}
}

/* steps_avx2_body with 16 lanes an instruction and the symbols found in
 * registers (lanes_symbol): the words are still gathered, a gather of 4
 * bytes serving two steps. */
__attribute__((target(AVX512), always_inline))
static inline unsigned steps_avx512_body(const struct fast_tab *ft, uint32_t *x, int32_t *off,
					 const int32_t *stop, const uint8_t *p, const uint8_t *sm,
					 uint16_t *dst, uint64_t first, uint64_t steps, int checked,
					 struct split sp)
{
	const __m256i base16 = _mm256_set1_epi16((short)sp.base);
	struct fast_regs r;
	for (int h = 0; h < 2; h++) {
		r.bucket[h] = _mm512_loadu_si512(ft->bucket + 16 * h);
		r.fine[h] = _mm512_loadu_si512(ft->fine + 16 * h);
		r.sym[h] = _mm512_loadu_si512(ft->sym + 16 * h);
	}
	r.crowded = _mm512_set1_epi32((int)ft->crowded);
	__m512i X[2], O[2], S[2], E[2];
	__mmask16 ovr = 0;
	_Pragma("GCC unroll 2") for (int g = 0; g < 2; g++) {
		X[g] = _mm512_loadu_si512(x + 16 * g);
		O[g] = _mm512_loadu_si512(off + 16 * g);
		S[g] = _mm512_loadu_si512(stop + 16 * g);
	}
	uint64_t k = 0;
	for (; k + 2 <= steps; k += 2) {
		uint64_t base = first + k * EXPRANS_LANES;
		__m512i W[2];
		__mmask16 took[2];
		_Pragma("GCC unroll 2") for (int g = 0; g < 2; g++) {
			W[g] = _mm512_i32gather_epi32(O[g], p, 1);
			took[g] = lanes_step512(&r, &X[g], &O[g], S[g], &ovr, W[g], &E[g], checked);
		}
		join512(E, sm + base, dst + base, sp, base16);
		_Pragma("GCC unroll 2") for (int g = 0; g < 2; g++) {
			__m512i w = _mm512_mask_srli_epi32(W[g], took[g], W[g], 16);
			lanes_step512(&r, &X[g], &O[g], S[g], &ovr, w, &E[g], checked);
		}
		join512(E, sm + base + EXPRANS_LANES, dst + base + EXPRANS_LANES, sp, base16);
	}
	if (k < steps) {   /* an odd step */
		uint64_t base = first + k * EXPRANS_LANES;
		_Pragma("GCC unroll 2") for (int g = 0; g < 2; g++)
			lanes_step512(&r, &X[g], &O[g], S[g], &ovr, _mm512_i32gather_epi32(O[g], p, 1),
				      &E[g], checked);
		join512(E, sm + base, dst + base, sp, base16);
	}
	_Pragma("GCC unroll 2") for (int g = 0; g < 2; g++) {
		_mm512_storeu_si512(x + 16 * g, X[g]);
		_mm512_storeu_si512(off + 16 * g, O[g]);
	}
	return ovr != 0;
}

/* exprans_steps_avx2's contract, with AVX-512 and the section's fast_tab. */
__attribute__((target(AVX512)))
unsigned exprans_steps_avx512(const struct fast_tab *ft, uint32_t *x, int32_t *off,
			      const int32_t *stop, const uint8_t *p, uint64_t len, const uint8_t *sm,
			      uint16_t *dst, uint64_t first, uint64_t steps, struct split sp)
{
	if (!steps_checked(off, steps, len))
		return steps_avx512_body(ft, x, off, stop, p, sm, dst, first, steps, 0, sp);
	return steps_avx512_body(ft, x, off, stop, p, sm, dst, first, steps, 1, sp);
}
#else
int exprans_cpu_has_avx2(void)
{
	return 0;
}

int exprans_cpu_has_avx512(void)
{
	return 0;
}
#endif

/* The entry of `width` slots from `lo` (fast_tab): the index of the symbol
 * holding lo (*i, moved on), and each start inside as 128 - its offset;
 * UINT32_MAX where more than 3 start inside. */
static uint32_t starts_entry(const uint32_t *start, unsigned k, uint32_t lo, uint32_t width,
			     unsigned *i)
{
	while (start[*i + 1] <= lo)
		(*i)++;
	uint32_t e = *i << 24;
	unsigned n = 0;
	for (unsigned j = *i + 1; j < k && start[j] < lo + width; j++, n++)
		if (n < 3)
			e |= (128u - (start[j] - lo)) << (8 * n);
	return n > 3 ? UINT32_MAX : e;
}

void exprans_fast_build(const uint32_t *tab, struct fast_tab *ft)
{
	uint32_t start[33];
	unsigned k = 0, i = 0;
	ft->ok = 0;
	/* the symbols in slot order (a table sums to PROB_SCALE) */
	for (uint32_t slot = 0; slot < PROB_SCALE; k++) {
		uint32_t e = tab[slot];
		if (k == 32)
			return;
		ft->sym[k] = (e & 0xfff) | slot << 12 | (e >> 24) << 24;
		start[k] = slot;
		slot += (e & 0xfff) + 1;
	}
	start[k] = PROB_SCALE;
	for (unsigned j = k; j < 32; j++)
		ft->sym[j] = 0;
	ft->crowded = 32;
	memset(ft->fine, 0, sizeof(ft->fine));
	for (unsigned b = 0; b < 32; b++) {
		uint32_t e = starts_entry(start, k, b * 128, 128, &i);
		if (e == UINT32_MAX) {
			if (ft->crowded != 32)
				return;
			ft->crowded = b;
			unsigned i4 = i;
			for (unsigned q = 0; q < 32; q++)   /* 4 slots: 3 starts at most */
				ft->fine[q] = starts_entry(start, k, b * 128 + 4 * q, 4, &i4);
			e = 0;
		}
		ft->bucket[b] = e;
	}
	ft->ok = 1;
}

