/* Float test data (bf16, f16, f32) of the kinds a weight codec meets:
 * Gaussian (std 0.02), heavy-tailed, all one exponent, NaN/Inf/subnormals/
 * zeros, random bits.  Needs t_rand and t_gauss (codec_test.h). */
#ifndef WSP_TESTS_CODEC_FLOAT_DATA_H
#define WSP_TESTS_CODEC_FLOAT_DATA_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "wspager.h"

static inline uint16_t bf16_of(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	return (uint16_t)(x >> 16);
}

/* From UPCAST on, fp32 kinds (other dtypes get GAUSS): Gaussian bf16
 * widened (low halves zero), the same with the constant low half 0x2a17,
 * Gaussian fp16 widened (bits 12..0 zero), bf16 widened with 4 random low
 * bits, and bf16 widened with a random byte 1 (0 to 254: a packed plane's
 * 8-bit indices can name a symbol it lacks) and bit 7 random in byte 0 (an
 * fp32 checkpoint saved from a model trained near bf16: byte 1 does not
 * compress, byte 0 holds one bit), and bf16 widened with 7 random bits in
 * byte 1 and 5 in byte 0 (packed indices that straddle bytes). */
enum kind { GAUSS, HEAVY, SAME_EXP, SPECIAL, BITS, UPCAST, LOW_CONST, UPCAST_F16, UPCAST_NOISY,
	    UPCAST_BYTE1, UPCAST_ODD_BITS, LAST_KIND = UPCAST_ODD_BITS };

static inline void fill(uint16_t *v, uint64_t n, enum kind k)
{
	static const uint16_t special[] = { 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x0001, 0x8001,
					    0x007f, 0x0000, 0x8000, 0x3f80 };
	for (uint64_t i = 0; i < n; i++) {
		switch (k) {
		case GAUSS:
			v[i] = bf16_of((float)t_gauss(0.02));
			break;
		case HEAVY: {   /* Student-t-like: a Gaussian over a random scale */
			double s = exp(t_gauss(1.5));
			v[i] = bf16_of((float)t_gauss(0.02 * s));
			break;
		}
		case SAME_EXP:
			v[i] = (uint16_t)(0x3f00 | (t_rand() & 0x807f));
			break;
		case SPECIAL:
			v[i] = special[t_rand() % (sizeof(special) / sizeof(special[0]))];
			break;
		case BITS:
			v[i] = (uint16_t)t_rand();
			break;
		default:
			v[i] = bf16_of((float)t_gauss(0.02));
			break;
		}
	}
}

/* IEEE half of a float, rounded to nearest even (subnormals, Inf, NaN). */
static inline uint16_t f16_of(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
	if (e == 0xff)
		return (uint16_t)(sign | 0x7c00u | (m ? 0x200u | (m >> 13) : 0));
	int ex = (int)e - 127 + 15;
	if (ex >= 31)
		return (uint16_t)(sign | 0x7c00u);
	if (ex <= 0) {   /* subnormal or zero: shift the full mantissa in */
		if (ex < -10)
			return (uint16_t)sign;
		m |= 0x800000u;
		unsigned shift = (unsigned)(14 - ex);
		uint32_t h = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		h += rest > half || (rest == half && (h & 1));
		return (uint16_t)(sign | h);
	}
	uint32_t h = (uint32_t)ex << 10 | m >> 13, rest = m & 0x1fffu;
	h += rest > 0x1000u || (rest == 0x1000u && (h & 1));   /* may carry into Inf: right */
	return (uint16_t)(sign | h);
}

/* n values of `dtype` (BF16, F16 or F32) of kind k into v. */
/* fp32 of an IEEE half, exactly. */
static inline uint32_t widen_f16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0x1f)
		return sign | 0x7f800000u | m << 13;
	if (e == 0) {   /* zero or subnormal: m * 2^-24, exact in fp32 */
		float f = ldexpf((float)m, -24);
		uint32_t x;
		memcpy(&x, &f, 4);
		return sign | x;
	}
	return sign | (e - 15 + 127) << 23 | m << 13;
}

static inline void fill_values(void *v, uint64_t n, int dtype, enum kind k)
{
	static const uint16_t special16[] = { 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x0001, 0x8001,
					      0x03ff, 0x0000, 0x8000, 0x3c00 };
	static const uint32_t special32[] = { 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
					      0x00000001u, 0x80000001u, 0x007fffffu, 0,
					      0x80000000u, 0x3f800000u };
	if (dtype == WSP_DTYPE_BF16) {
		fill(v, n, k);
		return;
	}
	for (uint64_t i = 0; i < n; i++) {
		float f = 0;
		if (k == GAUSS || k >= UPCAST)
			f = (float)t_gauss(0.02);
		else if (k == HEAVY)
			f = (float)t_gauss(0.02 * exp(t_gauss(1.5)));
		if (dtype == WSP_DTYPE_F16) {
			uint16_t *h = v;
			h[i] = k == SAME_EXP ? (uint16_t)(0x3800 | (t_rand() & 0x83ff))
			     : k == SPECIAL ? special16[t_rand() % 10]
			     : k == BITS ? (uint16_t)t_rand() : f16_of(f);
		} else {
			uint32_t *w = v, b;
			memcpy(&b, &f, 4);
			w[i] = k == SAME_EXP ? (uint32_t)(0x3f000000u | (t_rand() & 0x807fffffu))
			     : k == SPECIAL ? special32[t_rand() % 10]
			     : k == BITS ? (uint32_t)t_rand()
			     : k == UPCAST ? (uint32_t)bf16_of(f) << 16
			     : k == LOW_CONST ? (uint32_t)bf16_of(f) << 16 | 0x2a17u
			     : k == UPCAST_F16 ? widen_f16(f16_of(f))
			     : k == UPCAST_NOISY ? (uint32_t)bf16_of(f) << 16 | (t_rand() & 0xfu)
			     : k == UPCAST_BYTE1 ? (uint32_t)bf16_of(f) << 16 | (t_rand() % 255u) << 8 |
						   (t_rand() & 1u) << 7
			     : k == UPCAST_ODD_BITS ? (uint32_t)bf16_of(f) << 16 |
						      (t_rand() & 0x7fu) << 8 | (t_rand() & 0x1fu)
			     : b;
		}
	}
}

#endif
