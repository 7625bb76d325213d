/* Float dtypes to fp32, exactly (every bf16 and fp16 value is an fp32 value). */
#include <string.h>

#include "writeback/tofloat.h"

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

static inline float bf16_to_f32(uint16_t h)
{
	return from_bits((uint32_t)h << 16);
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
		for (uint64_t i = 0; i < n; i++)
			acc[i] = first ? bf16_to_f32(h[i]) : acc[i] + bf16_to_f32(h[i]);
		break;
	case WSP_DTYPE_F16:
		for (uint64_t i = 0; i < n; i++)
			acc[i] = first ? f16_to_f32(h[i]) : acc[i] + f16_to_f32(h[i]);
		break;
	default:
		break;
	}
}
