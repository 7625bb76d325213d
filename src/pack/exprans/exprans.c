/* EXPRANS reference encoder and decoder (see exprans.h). */
#include <errno.h>
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

size_t exprans_bound(uint64_t n, unsigned width)
{
	uint64_t b = n_blocks(n);
	return EXPRANS_HEADER + b * EXPRANS_LANES * (2 + MAX_LANE_BYTES) + n * (width - 1);
}

/* Value i's upper 16 bits: the value itself (16-bit), or its high half. */
static inline uint16_t high16(const void *src, uint64_t i, unsigned width)
{
	if (width == 2)
		return ((const uint16_t *)src)[i];
	return (uint16_t)(((const uint32_t *)src)[i] >> 16);
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

int64_t exprans_encode(const void *src, uint64_t n, unsigned width, void *out, size_t cap)
{
	uint8_t *o = out;
	if ((width != 2 && width != 4) || cap < exprans_bound(n, width) || n > UINT32_MAX)
		return WSP_ETOOBIG;
	uint64_t count[256] = { 0 };
	for (uint64_t i = 0; i < n; i++)
		count[(high16(src, i, width) >> 7) & 0xff]++;
	uint16_t freq[256];
	uint32_t cum[257];
	if (n)
		quantize(count, n, freq);
	else
		memset(freq, 0, sizeof(freq));
	cum[0] = 0;
	for (unsigned s = 0; s < 256; s++)
		cum[s + 1] = cum[s] + freq[s];
	wr32(o, (uint32_t)n);
	for (unsigned s = 0; s < 256; s++)
		wr16(o + 4 + 2 * s, freq[s]);
	uint64_t nb = n_blocks(n);
	uint8_t *lens = o + EXPRANS_HEADER;
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
				unsigned s = (high16(src, first + j + k * EXPRANS_LANES, width) >> 7) & 0xff;
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
	for (uint64_t i = 0; width == 4 && i < n; i++, p += 2)   /* low halves, raw */
		wr16(p, (uint16_t)((const uint32_t *)src)[i]);
	for (uint64_t i = 0; i < n; i++) {
		uint16_t h = high16(src, i, width);
		*p++ = (uint8_t)(((h >> 8) & 0x80) | (h & 0x7f));
	}
	return (int64_t)(p - o);
}

/* slot -> (freq - 1) | (slot - cum) << 12 | symbol << 24, one word. */
static inline uint32_t dec_entry(uint32_t freq, uint32_t bias, uint32_t sym)
{
	return (freq - 1) | bias << 12 | sym << 24;
}

int exprans_use_simd = 1;

/* Values [from, end) of a block, all 32 lanes a step (the last step may be
 * short); returns 1 when a lane needed a word past its stream. */
static unsigned steps_scalar(const uint32_t *tab, uint32_t *x, int32_t *off, const int32_t *stop,
			     const uint8_t *p, const uint8_t *sm, uint16_t *dst, uint64_t from,
			     uint64_t end)
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
			dst[base + j] = (uint16_t)((v & 0x80) << 8 | (e >> 24) << 7 | (v & 0x7f));
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

/* `steps` full steps from value `first`, 8 lanes an instruction: the same
 * arithmetic as steps_scalar, with gathers for the table and the words. */
__attribute__((target("avx2")))
static unsigned steps_avx2(const uint32_t *tab, uint32_t *x, int32_t *off, const int32_t *stop,
			   const uint8_t *p, const uint8_t *sm, uint16_t *dst, uint64_t first,
			   uint64_t steps)
{
	const __m256i low12 = _mm256_set1_epi32(0xfff), slots = _mm256_set1_epi32(PROB_SCALE - 1);
	const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
	const __m256i word = _mm256_set1_epi32(0xffff), zero = _mm256_setzero_si256();
	const __m256i sign = _mm256_set1_epi32(0x80), mant = _mm256_set1_epi32(0x7f);
	__m256i X[4], O[4], S[4], ovr = zero;
	for (int g = 0; g < 4; g++) {
		X[g] = _mm256_loadu_si256((const __m256i *)(x + 8 * g));
		O[g] = _mm256_loadu_si256((const __m256i *)(off + 8 * g));
		S[g] = _mm256_loadu_si256((const __m256i *)(stop + 8 * g));
	}
	for (uint64_t k = 0; k < steps; k++) {
		uint64_t base = first + k * EXPRANS_LANES;
		for (int g = 0; g < 4; g++) {
			__m256i e = _mm256_i32gather_epi32((const int *)tab, _mm256_and_si256(X[g], slots), 4);
			__m256i f = _mm256_add_epi32(_mm256_and_si256(e, low12), one);
			__m256i y = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(X[g], 12)),
						     _mm256_and_si256(_mm256_srli_epi32(e, 12), low12));
			__m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(y, 16), zero);
			__m256i have = _mm256_cmpgt_epi32(S[g], O[g]);
			ovr = _mm256_or_si256(ovr, _mm256_andnot_si256(have, need));
			__m256i w = _mm256_and_si256(_mm256_i32gather_epi32((const int *)p, O[g], 1), word);
			X[g] = _mm256_blendv_epi8(y, _mm256_or_si256(_mm256_slli_epi32(y, 16), w), need);
			O[g] = _mm256_add_epi32(O[g], _mm256_and_si256(_mm256_and_si256(need, have), two));
			__m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sm + base + 8 * g)));
			__m256i out = _mm256_or_si256(
				_mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(v, sign), 8),
						_mm256_slli_epi32(_mm256_srli_epi32(e, 24), 7)),
				_mm256_and_si256(v, mant));
			__m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(out, out), 0x08);
			_mm_storeu_si128((__m128i *)(dst + base + 8 * g), _mm256_castsi256_si128(pk));
		}
	}
	for (int g = 0; g < 4; g++) {
		_mm256_storeu_si256((__m256i *)(x + 8 * g), X[g]);
		_mm256_storeu_si256((__m256i *)(off + 8 * g), O[g]);
	}
	return !_mm256_testz_si256(ovr, ovr);
}
#else
static int cpu_has_avx2(void)
{
	return 0;
}
#endif

int exprans_decode(const void *in, size_t len, void *dst, uint64_t n, unsigned width,
		   struct wspi_err *err)
{
	const uint8_t *p = in;
	if (width != 2 && width != 4)
		return WSP_ERR(err, -EINVAL, "exprans: values of %u bytes (2 or 4)", width);
	/* The lanes' reads past their end land in sm[], which must hold two
	 * bytes: a one-value stream is decoded from a padded copy. */
	uint8_t small[EXPRANS_HEADER + EXPRANS_LANES * (2 + MAX_LANE_BYTES) + 3];
	if (n == 1 && len <= sizeof(small) - 2) {
		memset(small, 0, sizeof(small));
		memcpy(small, in, len);
		p = small;
	}
	if (len < EXPRANS_HEADER)
		return WSP_ERR(err, WSP_EFORMAT, "exprans: %zu bytes, shorter than the header", len);
	if (rd32(p) != n)
		return WSP_ERR(err, WSP_EFORMAT, "exprans: stream of %u values where %llu are expected",
			       rd32(p), (unsigned long long)n);
	uint32_t tab[PROB_SCALE];
	uint32_t sum = 0;
	for (unsigned s = 0; s < 256; s++) {
		uint32_t f = rd16(p + 4 + 2 * s);
		if (f > PROB_SCALE - sum)
			return WSP_ERR(err, WSP_EFORMAT, "exprans: frequencies sum above %u", PROB_SCALE);
		for (uint32_t k = 0; k < f; k++)
			tab[sum + k] = dec_entry(f, k, s);
		sum += f;
	}
	if (n && sum != PROB_SCALE)
		return WSP_ERR(err, WSP_EFORMAT, "exprans: frequencies sum to %u, not %u", sum,
			       PROB_SCALE);
	if (!n && sum)
		return WSP_ERR(err, WSP_EFORMAT, "exprans: frequencies for an empty chunk");
	uint64_t nb = n_blocks(n);
	uint64_t lens_at = EXPRANS_HEADER, streams_at = lens_at + nb * EXPRANS_LANES * 2;
	if (streams_at > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans: lane table beyond the stream");
	uint64_t total = 0;
	for (uint64_t i = 0; i < nb * EXPRANS_LANES; i++) {
		uint32_t l = rd16(p + lens_at + 2 * i);
		if (l < 4 || (l & 1) || l > MAX_LANE_BYTES)
			return WSP_ERR(err, WSP_EFORMAT, "exprans: lane %llu has a length of %u bytes",
				       (unsigned long long)i, l);
		total += l;
	}
	if (streams_at + total + n * (width - 1) != len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans: %zu bytes where the lanes and values need "
			       "%llu", len, (unsigned long long)(streams_at + total + n * (width - 1)));
	const uint8_t *lo = p + streams_at + total;              /* 32-bit values' low halves */
	const uint8_t *sm = lo + (width == 4 ? 2 * n : 0);
	const uint8_t *lane = p + streams_at;
	/* 32-bit values: a block's upper halves are decoded here, then joined
	 * with their low halves. */
	uint16_t *hi = NULL;
	if (width == 4 && n && !(hi = malloc(EXPRANS_BLOCK * sizeof(*hi))))
		return WSP_ERR(err, -ENOMEM, "exprans: out of memory");
	int rc = 0;
	/* SIMD reads 4 bytes at a lane's position: 4 must follow any lane end. */
	int simd = exprans_use_simd && n >= 4 && len < (1u << 30) && cpu_has_avx2();
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t first = b * EXPRANS_BLOCK, end = WSP_MIN(n, first + EXPRANS_BLOCK);
		int32_t off[EXPRANS_LANES], stop[EXPRANS_LANES];
		uint32_t x[EXPRANS_LANES];
		for (unsigned j = 0; j < EXPRANS_LANES; j++) {
			uint32_t l = rd16(p + lens_at + 2 * (b * EXPRANS_LANES + j));
			x[j] = rd32(lane);
			off[j] = (int32_t)(lane + 4 - p);
			stop[j] = (int32_t)(lane + l - p);
			lane += l;
			if (x[j] < RANS_L && first + j < end && rc == 0)
				rc = WSP_ERR(err, WSP_EFORMAT, "exprans: block %llu lane %u starts in "
					     "state %u", (unsigned long long)b, j, x[j]);
		}
		if (rc < 0)
			break;
		uint16_t *out = width == 2 ? (uint16_t *)dst + first : hi;
		/* All 32 lanes at each step (the GPU's order, and independent
		 * work for the CPU to overlap), without branches: a lane that
		 * needs a word past its stream reads at its end instead (in
		 * bounds: sm[] follows with enough bytes) and the block fails. */
		uint64_t full = (end - first) / EXPRANS_LANES;
		unsigned overrun = 0;
		uint64_t done = 0;
#if WSP_EXPRANS_AVX2
		if (simd) {
			overrun |= steps_avx2(tab, x, off, stop, p, sm + first, out, 0, full);
			done = full;
		}
#else
		(void)simd;
#endif
		overrun |= steps_scalar(tab, x, off, stop, p, sm + first, out, done * EXPRANS_LANES,
					end - first);
		if (overrun) {
			rc = WSP_ERR(err, WSP_EFORMAT, "exprans: block %llu reads past a lane's stream",
				     (unsigned long long)b);
			break;
		}
		for (unsigned j = 0; j < EXPRANS_LANES && rc == 0; j++)
			if (off[j] != stop[j] || x[j] != RANS_L)
				rc = WSP_ERR(err, WSP_EFORMAT, "exprans: block %llu lane %u does not end "
					     "where it should (corrupt stream)", (unsigned long long)b, j);
		for (uint64_t i = 0; width == 4 && rc == 0 && i < end - first; i++)
			((uint32_t *)dst)[first + i] = (uint32_t)hi[i] << 16 | rd16(lo + 2 * (first + i));
	}
	free(hi);
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
		return "frequencies do not sum to 4096";
	if (s & EXPRANS_GPU_BAD_LANES)
		return "lane lengths do not fit the stream";
	if (s & EXPRANS_GPU_BAD_START)
		return "a lane starts below 2^16";
	if (s & EXPRANS_GPU_OVERRUN)
		return "a lane reads past its stream";
	if (s & EXPRANS_GPU_BAD_END)
		return "a lane does not end where it should (corrupt stream)";
	return s ? "unknown status" : "ok";
}
