/* bf16 test data of the kinds a weight codec meets: Gaussian (std 0.02),
 * heavy-tailed, all one exponent, NaN/Inf/subnormals/zeros, random bits.
 * Needs t_rand and t_gauss (codec_test.h). */
#ifndef WSP_TESTS_CODEC_BF16_DATA_H
#define WSP_TESTS_CODEC_BF16_DATA_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t bf16_of(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	return (uint16_t)(x >> 16);
}

enum kind { GAUSS, HEAVY, SAME_EXP, SPECIAL, BITS };

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
		}
	}
}

#endif
