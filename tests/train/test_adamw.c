/* wsp_adamw_step: the step of torch.optim.AdamW (decoupled weight decay,
 * lerp, no amsgrad), checked against the formula in double precision over
 * ten steps (within 1e-6 relative), the same bits whatever the number of
 * threads (the split is elementwise) and with or without the vector loop
 * (for either branch of lerp: beta1 below and above 0.5), and -EINVAL for step 0, NULL arrays
 * and non-zero reserved fields.  tests/python/test_adamw.py compares it
 * with torch's own AdamW. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/testlib.h"
#include "wspager.h"
#include "train/adamw.h"

#define N 300007u

static double urand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return (double)(*x >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

int main(void)
{
	float *p = malloc(N * 4), *q = malloc(N * 4), *g = malloc(N * 4);
	float *m = calloc(N, 4), *v = calloc(N, 4), *m1 = calloc(N, 4), *v1 = calloc(N, 4);
	double *P = malloc(N * 8), *M = calloc(N, 8), *V = calloc(N, 8);
	uint64_t x = 0x9E3779B97F4A7C15ull;
	CHECK(p && q && g && m && v && m1 && v1 && P && M && V);
	for (unsigned i = 0; i < N; i++)
		P[i] = q[i] = p[i] = (float)(urand(&x) * 0.05);
	struct wsp_adamw hp;
	memset(&hp, 0, sizeof(hp));
	hp.lr = 1e-3;
	hp.beta1 = 0.9;
	hp.beta2 = 0.999;
	hp.eps = 1e-8;
	hp.weight_decay = 1e-2;
	double worst = 0;
	for (uint64_t step = 1; step <= 10; step++) {
		double scale = pow(10.0, -(double)(step % 5) * 2);   /* 1 down to 1e-8 */
		for (unsigned i = 0; i < N; i++)
			g[i] = (float)(urand(&x) * scale);
		hp.step = step;
		hp.threads = 0;
		CHECK_RC(wsp_adamw_step(p, g, m, v, N, &hp), 0);
		hp.threads = 1;
		wspi_adamw_use_simd = 0;   /* one thread, the scalar loop */
		CHECK_RC(wsp_adamw_step(q, g, m1, v1, N, &hp), 0);
		wspi_adamw_use_simd = 1;
		CHECK(memcmp(p, q, N * 4) == 0 && memcmp(m, m1, N * 4) == 0 && memcmp(v, v1, N * 4) == 0);
		double bc1 = 1 - pow(0.9, (double)step), bc2 = 1 - pow(0.999, (double)step);
		double big = 0, diff = 0;
		for (unsigned i = 0; i < N; i++) {
			P[i] *= 1 - 1e-3 * 1e-2;
			M[i] += 0.1 * (g[i] - M[i]);
			V[i] = V[i] * 0.999 + 0.001 * (double)g[i] * g[i];
			P[i] -= 1e-3 / bc1 * M[i] / (sqrt(V[i]) / sqrt(bc2) + 1e-8);
			big = fmax(big, fabs(P[i]));
			diff = fmax(diff, fabs(P[i] - p[i]));
		}
		worst = fmax(worst, diff / big);
	}
	printf("10 steps: max |fp32 - double| / max |w| = %.3g\n", worst);
	CHECK(worst <= 1e-6);

	/* beta1 >= 0.5 takes lerp's other branch; odd beta2 and decay */
	hp.beta1 = 0.3;
	hp.beta2 = 0.95;
	hp.weight_decay = 0.1;
	for (uint64_t step = 1; step <= 3; step++) {
		for (unsigned i = 0; i < N; i++)
			g[i] = (float)(urand(&x) * 1e-3);
		hp.step = step;
		hp.threads = 3;
		CHECK_RC(wsp_adamw_step(p, g, m, v, N, &hp), 0);
		wspi_adamw_use_simd = 0;
		CHECK_RC(wsp_adamw_step(q, g, m1, v1, N, &hp), 0);
		wspi_adamw_use_simd = 1;
		CHECK(memcmp(p, q, N * 4) == 0 && memcmp(m, m1, N * 4) == 0 && memcmp(v, v1, N * 4) == 0);
	}

	hp.step = 0;
	CHECK_RC(wsp_adamw_step(p, g, m, v, N, &hp), -EINVAL);
	hp.step = 1;
	CHECK_RC(wsp_adamw_step(p, NULL, m, v, N, &hp), -EINVAL);
	CHECK_RC(wsp_adamw_step(p, g, m, v, N, NULL), -EINVAL);
	CHECK_RC(wsp_adamw_step(NULL, NULL, NULL, NULL, 0, &hp), 0);   /* nothing to do */
	hp.reserved[2] = 1;
	CHECK_RC(wsp_adamw_step(p, g, m, v, N, &hp), -EINVAL);
	free(p), free(q), free(g), free(m), free(v), free(m1), free(v1), free(P), free(M), free(V);
	return 0;
}
