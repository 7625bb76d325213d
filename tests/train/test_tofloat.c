/* Gradients reach their fp32 accumulators exactly: every one of the 65536
 * fp16 and bf16 values converts to the fp32 value it denotes (worked out
 * here independently, with ldexp), NaN staying NaN and the sign of zero
 * kept; a first push assigns (bit for bit, -0 included), later ones add. */
#include <math.h>
#include <string.h>

#include "../lib/testlib.h"
#include "train/tofloat.h"

static double f16_value(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	double v;
	if (exp == 0x1f)
		v = man ? NAN : INFINITY;
	else if (exp == 0)
		v = ldexp(man, -24);
	else
		v = ldexp(1024 + man, exp - 25);
	return sign ? -v : v;
}

static double bf16_value(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 7) & 0xff, man = h & 0x7f;
	double v;
	if (exp == 0xff)
		v = man ? NAN : INFINITY;
	else if (exp == 0)
		v = ldexp(man, -133);
	else
		v = ldexp(128 + man, exp - 134);
	return sign ? -v : v;
}

static int same(float got, double want)
{
	if (isnan(want))
		return isnan(got);
	return (double)got == want && !signbit(got) == !signbit(want);
}

int main(void)
{
	static uint16_t all[65536];
	static float acc[65536];
	for (unsigned i = 0; i < 65536; i++)
		all[i] = (uint16_t)i;

	CHECK(wb_dtype_ok(WSP_DTYPE_F32) && wb_dtype_ok(WSP_DTYPE_F16) && wb_dtype_ok(WSP_DTYPE_BF16));
	CHECK(!wb_dtype_ok(WSP_DTYPE_I32) && !wb_dtype_ok(WSP_DTYPE_F8_E4M3) &&
	      !wb_dtype_ok(WSP_DTYPE_U8));

	wb_accumulate(acc, all, WSP_DTYPE_F16, 65536, 1);
	for (unsigned i = 0; i < 65536; i++)
		if (!same(acc[i], f16_value((uint16_t)i))) {
			fprintf(stderr, "f16 %04x: got %a, want %a\n", i, acc[i], f16_value((uint16_t)i));
			return 1;
		}
	wb_accumulate(acc, all, WSP_DTYPE_BF16, 65536, 1);
	for (unsigned i = 0; i < 65536; i++)
		if (!same(acc[i], bf16_value((uint16_t)i))) {
			fprintf(stderr, "bf16 %04x: got %a, want %a\n", i, acc[i], bf16_value((uint16_t)i));
			return 1;
		}

	/* f32: the first push is a copy (-0 stays -0); then sums in push order */
	float g1[4] = { -0.0f, 1.5f, 3e-39f, -2.0f }, g2[4] = { 0.25f, 1e8f, 1.0f, 2.0f };
	float a[4];
	wb_accumulate(a, g1, WSP_DTYPE_F32, 4, 1);
	CHECK(memcmp(a, g1, sizeof(a)) == 0);
	wb_accumulate(a, g2, WSP_DTYPE_F32, 4, 0);
	for (int i = 0; i < 4; i++)
		CHECK(a[i] == g1[i] + g2[i]);
	/* bf16 adds in fp32: 1 + 2^-20 is kept, as no bf16 sum could */
	uint16_t one = 0x3f80, tiny = 0x3580;   /* 1.0, 2^-20 */
	float s;
	wb_accumulate(&s, &one, WSP_DTYPE_BF16, 1, 1);
	wb_accumulate(&s, &tiny, WSP_DTYPE_BF16, 1, 0);
	CHECK(s == 1.0f + ldexpf(1.0f, -20));
	return 0;
}
