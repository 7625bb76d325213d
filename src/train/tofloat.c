/* Float dtypes to fp32, exactly (every bf16 and fp16 value is an fp32 value). */
#include <string.h>

#include "train/tofloat.h"

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
	if (exp == 0x1f)                       /* Inf, NaN (payload kept) */
		return from_bits(sign | 0x7f800000u | (man << 13));
	if (exp)                               /* normal */
		return from_bits(sign | ((exp + 112) << 23) | (man << 13));
	/* zero and subnormals: man x 2^-24, exact in fp32 */
	float v = (float)man * from_bits(0x33800000u);
	return sign ? -v : v;
}

/* The loops are kept free of branches so the compiler vectorises them:
 * widening bf16 is a shift, and these run at memory speed. */
static void bf16_assign(float *acc, const uint16_t *h, uint64_t n)
{
	uint32_t *out = (uint32_t *)acc;
	for (uint64_t i = 0; i < n; i++)
		out[i] = (uint32_t)h[i] << 16;
}

static void bf16_add(float *restrict acc, const uint16_t *restrict h, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
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
			for (uint64_t i = 0; i < n; i++)
				acc[i] = f16_to_f32(h[i]);
		else
			for (uint64_t i = 0; i < n; i++)
				acc[i] += f16_to_f32(h[i]);
		break;
	default:
		break;
	}
}
