/* Float dtypes to fp32, exactly (every bf16 and fp16 value is an fp32 value). */
#include <string.h>

#include "train/tofloat.h"

/* The streaming loop is built on x86-64 with GCC or clang, chosen at run time. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TOFLOAT_AVX2 1
#include <immintrin.h>
#else
#define TOFLOAT_AVX2 0
#endif

int wspi_tofloat_use_simd = 1;

int wb_dtype_ok(enum wsp_dtype dt)
{
	return dt == WSP_DTYPE_F32 || dt == WSP_DTYPE_F16 || dt == WSP_DTYPE_BF16;
}

static inline float from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	if (exp == 0x1f)   /* Inf; NaN with its payload, quieted as IEEE (and F16C) convert */
		return from_bits(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
	if (exp)                               /* normal */
		return from_bits(sign | ((exp + 112) << 23) | (man << 13));
	/* zero and subnormals: man x 2^-24, exact in fp32 */
	float v = (float)man * from_bits(0x33800000u);
	return sign ? -v : v;
}

#if TOFLOAT_AVX2
/* Below this many elements plain stores do as well, and leave the
 * accumulator in the cache for whoever reads it next. */
#define STREAM_MIN_ELEMENTS 4096u

/* A first push writes every byte of its accumulator and reads none: stores
 * that bypass the cache skip the read of each line a plain store makes
 * first (for bf16, a third of the traffic; bench/adamw_bench, one
 * thread: 1.8x on a Zen 4, 2.2x on a Xeon).  The optimizer reads the
 * accumulators long after, from memory either way.  Returns where the
 * scalar loop takes over (the same values: a shift). */
__attribute__((target("avx2")))
static uint64_t bf16_assign_stream(uint32_t *out, const uint16_t *h, uint64_t n)
{
	uint64_t i = 0;
	for (; i < n && ((uintptr_t)(out + i) & 31); i++)
		out[i] = (uint32_t)h[i] << 16;
	for (; i + 8 <= n; i += 8) {
		__m128i x = _mm_loadu_si128((const __m128i *)(h + i));
		_mm256_stream_si256((__m256i *)(out + i),
				    _mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
	}
	/* Streaming stores are weakly ordered: visible before whatever this
	 * thread stores next (the flag that says the sum is there). */
	_mm_sfence();
	return i;
}

/* A later push reads each line of its accumulator anyway: plain loads and
 * stores, 8 elements a step (the build's baseline is SSE2, where -O2 leaves
 * the scalar loop scalar).  The same sums: one fp32 rounding each. */
__attribute__((target("avx2")))
static uint64_t bf16_add_avx2(float *acc, const uint16_t *h, uint64_t n)
{
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i x = _mm_loadu_si128((const __m128i *)(h + i));
		__m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
		_mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), f));
	}
	return i;
}

/* fp16 the same ways, converted by F16C (exact: every fp16 value, subnormals
 * included, is an fp32 one); the scalar conversion branches on the
 * exponent and stays scalar. */
__attribute__((target("avx2,f16c")))
static uint64_t f16_assign_stream(float *out, const uint16_t *h, uint64_t n)
{
	uint64_t i = 0;
	for (; i < n && ((uintptr_t)(out + i) & 31); i++)
		out[i] = f16_to_f32(h[i]);
	for (; i + 8 <= n; i += 8)
		_mm256_stream_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
	_mm_sfence();
	return i;
}

__attribute__((target("avx2,f16c")))
static uint64_t f16_add_avx2(float *acc, const uint16_t *h, uint64_t n)
{
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i)));
		_mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), f));
	}
	return i;
}

static int have_f16c(void)
{
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}
#endif

static void f16_assign(float *acc, const uint16_t *h, uint64_t n)
{
	uint64_t i = 0;
#if TOFLOAT_AVX2
	if (wspi_tofloat_use_simd && n >= STREAM_MIN_ELEMENTS && have_f16c())
		i = f16_assign_stream(acc, h, n);
#endif
	for (; i < n; i++)
		acc[i] = f16_to_f32(h[i]);
}

static void f16_add(float *restrict acc, const uint16_t *restrict h, uint64_t n)
{
	uint64_t i = 0;
#if TOFLOAT_AVX2
	if (wspi_tofloat_use_simd && have_f16c())
		i = f16_add_avx2(acc, h, n);
#endif
	for (; i < n; i++)
		acc[i] += f16_to_f32(h[i]);
}

/* The loops are kept free of branches so the compiler vectorises them:
 * widening bf16 is a shift, and these run at memory speed. */
static void bf16_assign(float *acc, const uint16_t *h, uint64_t n)
{
	uint32_t *out = (uint32_t *)acc;
	uint64_t i = 0;
#if TOFLOAT_AVX2
	if (wspi_tofloat_use_simd && n >= STREAM_MIN_ELEMENTS && __builtin_cpu_supports("avx2"))
		i = bf16_assign_stream(out, h, n);
#endif
	for (; i < n; i++)
		out[i] = (uint32_t)h[i] << 16;
}

static void bf16_add(float *restrict acc, const uint16_t *restrict h, uint64_t n)
{
	uint64_t i = 0;
#if TOFLOAT_AVX2
	if (wspi_tofloat_use_simd && __builtin_cpu_supports("avx2"))
		i = bf16_add_avx2(acc, h, n);
#endif
	for (; i < n; i++) {
		uint32_t u = (uint32_t)h[i] << 16;
		float f;
		memcpy(&f, &u, sizeof(f));
		acc[i] += f;
	}
}

void wb_accumulate(float *acc, const void *src, enum wsp_dtype dt, uint64_t n, int first)
{
	const uint16_t *h = src;
	const float *f = src;
	switch (dt) {
	case WSP_DTYPE_F32:
		if (first)
			memcpy(acc, f, n * sizeof(float));
		else
			for (uint64_t i = 0; i < n; i++)
				acc[i] += f[i];
		break;
	case WSP_DTYPE_BF16:
		if (first)
			bf16_assign(acc, h, n);
		else
			bf16_add(acc, h, n);
		break;
	case WSP_DTYPE_F16:
		if (first)
			f16_assign(acc, h, n);
		else
			f16_add(acc, h, n);
		break;
	default:
		break;
	}
}
