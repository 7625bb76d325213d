/* The host AdamW step against the host's memory bandwidth, measured in the
 * same run.
 *
 *   adamw_bench [--params N] [--threads T] [--reps R]
 *
 * Ceilings, all threads, over buffers far larger than the caches:
 *   triad     a[i] = b[i] + s * c[i]          (STREAM's triad: 12 B a float)
 *   pattern   p += g; m += g; v += g          (AdamW's own traffic without
 *                                              its arithmetic: 28 B a float)
 * Then wsp_adamw_step over N fp32 parameters (state already touched, as
 * from the second step on), in GB/s of the same 28 B a parameter, as a
 * share of both ceilings; best of R repetitions each; then the same with
 * the scalar loop (the vector loop switched off).  Then a gradient's
 * widening from bf16 into its fp32 accumulator (a first push, as the
 * write-back's threads do it: 6 B an element), with streaming stores and
 * with plain ones; the same from fp16, and both added into the sums (a
 * later micro-batch: 10 B an element), each against the scalar loop.
 * With --threads 1 it is the one-core figure.  Prints one line per
 * measurement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "common/workers.h"
#include "wspager.h"
#include "train/adamw.h"
#include "train/tofloat.h"

#define MAX_THREADS 256u

struct part {
	float *a, *b, *c;
	uint64_t begin, end;
	int kind;                  /* 0: touch, 1: triad, 2: pattern, 3: widen */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static float *p_, *g_, *m_, *v_;

/* The ceilings' loops, 8 floats an instruction where the CPU has AVX2 (as
 * the step's own loop is): a scalar loop would measure the core, not the
 * memory. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("avx2")))
static uint64_t triad_avx2(float *a, const float *b, const float *c, uint64_t i, uint64_t end)
{
	const __m256 s = _mm256_set1_ps(3.0f);
	for (; i + 8 <= end; i += 8)
		_mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(b + i),
						      _mm256_mul_ps(s, _mm256_loadu_ps(c + i))));
	return i;
}

__attribute__((target("avx2")))
static uint64_t pattern_avx2(uint64_t i, uint64_t end)
{
	for (; i + 8 <= end; i += 8) {
		__m256 g = _mm256_loadu_ps(g_ + i);
		_mm256_storeu_ps(p_ + i, _mm256_add_ps(_mm256_loadu_ps(p_ + i), g));
		_mm256_storeu_ps(m_ + i, _mm256_add_ps(_mm256_loadu_ps(m_ + i), g));
		_mm256_storeu_ps(v_ + i, _mm256_add_ps(_mm256_loadu_ps(v_ + i), g));
	}
	return i;
}
#define HAVE_AVX2() __builtin_cpu_supports("avx2")
#else
#define triad_avx2(a, b, c, i, end) (i)
#define pattern_avx2(i, end) (i)
#define HAVE_AVX2() 0
#endif

static void *run_part(void *arg)
{
	const struct part *w = arg;
	uint64_t i = w->begin;
	switch (w->kind) {
	case 0:   /* first touch by the thread that will use the range */
		for (; i < w->end; i++) {
			p_[i] = 0.01f * (float)(i % 97);
			g_[i] = 0.001f * (float)(i % 89) - 0.04f;
			m_[i] = 0;
			v_[i] = 0;
		}
		break;
	case 1:
		if (HAVE_AVX2())
			i = triad_avx2(w->a, w->b, w->c, i, w->end);
		for (; i < w->end; i++)
			w->a[i] = w->b[i] + 3.0f * w->c[i];
		break;
	case 3:   /* g_'s bytes as bf16 gradients, widened into p_ */
	case 4:   /* ... as fp16 */
	case 5:   /* ... bf16, added into p_ (a later micro-batch) */
	case 6:   /* ... fp16, added */
		wb_accumulate(p_ + i, (const uint16_t *)g_ + i,
			      w->kind % 2 ? WSP_DTYPE_BF16 : WSP_DTYPE_F16, w->end - i, w->kind < 5);
		break;
	default:
		if (HAVE_AVX2())
			i = pattern_avx2(i, w->end);
		for (; i < w->end; i++) {
			p_[i] += g_[i];
			m_[i] += g_[i];
			v_[i] += g_[i];
		}
	}
	return NULL;
}

static void run_all(int kind, uint64_t n, unsigned t)
{
	struct part parts[MAX_THREADS];
	uint64_t per = (n + t - 1) / t;
	for (unsigned k = 0; k < t; k++)
		parts[k] = (struct part){ .a = m_, .b = p_, .c = g_, .begin = WSP_MIN(n, per * k),
					  .end = WSP_MIN(n, per * (k + 1)), .kind = kind };
	wspi_run_parts(run_part, parts, sizeof(parts[0]), t);
}

int main(int argc, char **argv)
{
	uint64_t n = 256ull << 20;   /* 1 GiB an array */
	unsigned threads = 0, reps = 5;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--params") && i + 1 < argc)
			n = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = (unsigned)atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: adamw_bench [--params N] [--threads T] [--reps R]\n");
			return 2;
		}
	}
	unsigned t = threads ? threads : wspi_cpu_count();
	t = WSP_MIN(WSP_MAX(t, 1u), MAX_THREADS);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!(p_ = malloc(n * 4)) || !(g_ = malloc(n * 4)) || !(m_ = malloc(n * 4)) ||
	    !(v_ = malloc(n * 4))) {
		fprintf(stderr, "adamw_bench: out of memory for 4 x %llu floats\n",
			(unsigned long long)n);
		return 1;
	}
	run_all(0, n, t);
	printf("adamw_bench: %llu parameters (4 arrays of %.2f GiB), %u threads\n",
	       (unsigned long long)n, n * 4.0 / (1 << 30), t);

	double triad = 0, pattern = 0, step[2] = { 0, 0 };
	for (unsigned r = 0; r < reps; r++) {
		double t0 = now_s();
		run_all(1, n, t);
		triad = WSP_MAX(triad, 12.0 * n / (now_s() - t0) / 1e9);
		t0 = now_s();
		run_all(2, n, t);
		pattern = WSP_MAX(pattern, 28.0 * n / (now_s() - t0) / 1e9);
	}
	printf("triad (12 B a float)            %7.2f GB/s\n", triad);
	printf("AdamW's traffic, no arithmetic  %7.2f GB/s\n", pattern);
	static const char *const loops[] = { "wsp_adamw_step", "  the scalar loop" };
	for (int scalar = 0; scalar < 2; scalar++) {
		run_all(0, n, t);   /* values an optimizer would see, not the sums above */
		wspi_adamw_use_simd = !scalar;
		struct wsp_adamw hp = { .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
					.weight_decay = 0.01, .threads = t };
		for (unsigned r = 0; r < reps; r++) {
			hp.step = r + 1;
			double t0 = now_s();
			if (wsp_adamw_step(p_, g_, m_, v_, n, &hp) < 0) {
				fprintf(stderr, "adamw_bench: wsp_adamw_step refused its arguments\n");
				return 1;
			}
			step[scalar] = WSP_MAX(step[scalar], 28.0 * n / (now_s() - t0) / 1e9);
		}
		printf("%-31s %7.2f GB/s (28 B a param) = %.1f%% of triad, %.1f%% of the pattern"
		       "; %.2f G params/s\n", loops[scalar], step[scalar], 100 * step[scalar] / triad,
		       100 * step[scalar] / pattern, step[scalar] / 28);
	}
	/* kind, bytes an element, what the vector loop is, the scalar one */
	static const struct { int kind; double bytes; const char *simd, *plain; } widens[] = {
		{ 3, 6, "bf16 widening, streaming stores", "  plain stores" },
		{ 4, 6, "fp16 widening, F16C", "  the scalar conversion" },
		{ 5, 10, "bf16 added, AVX2", "  the scalar loop" },
		{ 6, 10, "fp16 added, F16C", "  the scalar conversion" },
	};
	for (unsigned k = 0; k < sizeof(widens) / sizeof(widens[0]); k++)
		for (int plain = 0; plain < 2; plain++) {
			double best = 0;
			wspi_tofloat_use_simd = !plain;
			for (unsigned r = 0; r < reps; r++) {
				double t0 = now_s();
				run_all(widens[k].kind, n, t);
				best = WSP_MAX(best, widens[k].bytes * n / (now_s() - t0) / 1e9);
			}
			printf("%-31s %7.2f GB/s (%.0f B an element) = %.1f%% of triad; %.2f G "
			       "elements/s\n", plain ? widens[k].plain : widens[k].simd, best,
			       widens[k].bytes, 100 * best / triad, best / widens[k].bytes);
		}
	free(p_);
	free(g_);
	free(m_);
	free(v_);
	return 0;
}
