/* Cost of the predictor per acquire: predictor_observe() followed by what
 * the pager asks after it (the next layers, and the distances of a cache's
 * worth of candidates), on cyclic and branchy traces of 32..2048 layers.
 * Then the cost per acquire as the layer count grows (2 000 .. 50 000): the
 * first pass (learning) and the next ones, observe + next 8 + 8 distances,
 * which must not grow with the layer count (`--growth`: that part only).
 * CPU time of one thread; prints microseconds per acquire. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "predict/predict.h"

static double cpu_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Layer at step i: a cycle, or shared head/tail with one of 3 branches. */
static uint32_t step_layer(uint32_t n, int branchy, uint64_t i, uint64_t *rng)
{
	if (!branchy)
		return (uint32_t)(i % n);
	uint32_t third = n / 3, pos = (uint32_t)(i % (2 * third));
	if (pos == third) {
		*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
	}
	if (pos < third)
		return pos;                               /* shared */
	uint32_t branch = (uint32_t)((*rng >> 33) % 3);
	return third + branch * (third / 3) + (pos - third) % (third / 3);
}

int main(int argc, char **argv)
{
	static const uint32_t sizes[] = {32, 128, 512, 2048};
	setvbuf(stdout, NULL, _IOLBF, 0);
	int growth_only = argc > 1 && !strcmp(argv[1], "--growth");
	printf("layers  trace     us per acquire (observe + next 8 + %s distances)\n", "n/4");
	for (unsigned s = 0; !growth_only && s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (int branchy = 0; branchy < 2; branchy++) {
			uint32_t n = sizes[s], cand = n / 4, next[8];
			struct predictor *p;
			if (predictor_create(n, &p) < 0)
				return 1;
			uint64_t rng = 1, steps = 20ull * n, sink = 0;
			for (uint64_t i = 0; i < 4ull * n; i++)   /* learn first */
				predictor_observe(p, step_layer(n, branchy, i, &rng));
			double t0 = cpu_us();
			for (uint64_t i = 0; i < steps; i++) {
				predictor_observe(p, step_layer(n, branchy, i, &rng));
				sink += predictor_next(p, next, 8);
				for (uint32_t c = 0; c < cand; c++)
					sink += predictor_distance(p, (uint32_t)(i + c * 4) % n);
			}
			double us = (cpu_us() - t0) / (double)steps;
			printf("%6u  %-8s  %8.2f\n", n, branchy ? "branchy" : "cyclic", us);
			predictor_free(p);
			if (sink == 42)
				puts("");
		}
	/* Growth with the layer count: a pass must cost O(layers). */
	static const uint32_t many[] = {2000, 16000, 50000};
	printf("\nlayers   us/acquire, pass 1 (learning)   passes 2-3   (observe + next 8 + 8 distances)\n");
	for (unsigned s = 0; s < sizeof(many) / sizeof(many[0]); s++) {
		uint32_t n = many[s], next[8];
		struct predictor *p;
		if (predictor_create(n, &p) < 0)
			return 1;
		uint64_t sink = 0;
		double t[2] = {0, 0};
		for (unsigned pass = 0; pass < 3; pass++) {
			double t0 = cpu_us();
			for (uint32_t i = 0; i < n; i++) {
				predictor_observe(p, i);
				sink += predictor_next(p, next, 8);
				for (uint32_t c = 0; c < 8; c++)
					sink += predictor_distance(p, (i + 1 + c * (n / 8)) % n);
			}
			t[pass > 0] += cpu_us() - t0;
		}
		printf("%6u   %12.2f                   %8.2f\n", n, t[0] / n, t[1] / (2.0 * n));
		predictor_free(p);
		if (sink == 42)
			puts("");
	}
	return 0;
}
