/*
 * wsp_adamw_step: one AdamW step over fp32 host arrays, in one pass per
 * element and split over threads.  The same arithmetic, in the same order
 * and with the same fused multiply-adds, as torch.optim.AdamW's
 * single-tensor step on the CPU (decoupled weight decay; exp_avg by lerp;
 * no amsgrad), which makes five passes over memory, one tensor at a time.
 * Not bit for bit: torch's vectorised CPU sqrt is not correctly rounded
 * (measured: 0.6% of fp32 values 1 ulp off), this one's is.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "common/util.h"
#include "common/workers.h"
#include "train/adamw.h"
#include "wspager.h"

/* The AVX2 loop is built on x86-64 with GCC or clang, chosen at run time. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ADAMW_AVX2 1
#include <immintrin.h>
#else
#define ADAMW_AVX2 0
#endif

#define ADAMW_MAX_THREADS 64u
#define ADAMW_MIN_PER_THREAD (1u << 16)

struct adamw_job {
	float *p, *m, *v;
	const float *g;
	uint64_t begin, end;
	float decay, w1, beta2, c2, bc2_sqrt, eps, neg_step;
	int avx2;
};

int wspi_adamw_use_simd = 1;

/* Elements [i, end) of one job: the reference arithmetic, one at a time.
 * torch's CPU kernels fuse the multiply-adds of lerp and addcmul (FMA), so
 * this does too, explicitly: fmaf is one rounding with or without the
 * instruction, and the clone built for FMA machines uses it. */
__attribute__((target_clones("fma", "default")))
static void adamw_scalar(const struct adamw_job *j, uint64_t i, uint64_t end)
{
	for (; i < end; i++) {
		float g = j->g[i];
		float p = j->p[i] * j->decay;
		float m = j->m[i];
		/* lerp(m, g, w): w < 0.5 ? m + w*(g-m) : g - (g-m)*(1-w) */
		m = j->w1 < 0.5f ? fmaf(j->w1, g - m, m) : fmaf(-(g - m), 1.0f - j->w1, g);
		/* v*beta2, then addcmul(g, g, value=1-beta2) */
		float v = fmaf(j->c2 * g, g, j->v[i] * j->beta2);
		float denom = sqrtf(v) / j->bc2_sqrt + j->eps;
		float upd = j->neg_step * m;
		j->p[i] = p + upd / denom;   /* addcdiv: self + (value * t1) / t2 */
		j->m[i] = m;
		j->v[i] = v;
	}
}

#if ADAMW_AVX2
/* The same operations in the same order, 8 elements an instruction: each
 * of multiply, add, FMA, divide and square root is one IEEE rounding in
 * both, so the results are the scalar loop's, bit for bit (the test
 * compares them).  Returns where the scalar loop takes over. */
__attribute__((target("avx2,fma")))
static uint64_t adamw_avx2(const struct adamw_job *j, uint64_t i, uint64_t end)
{
	const __m256 decay = _mm256_set1_ps(j->decay), w1 = _mm256_set1_ps(j->w1);
	const __m256 one_w1 = _mm256_set1_ps(1.0f - j->w1), beta2 = _mm256_set1_ps(j->beta2);
	const __m256 c2 = _mm256_set1_ps(j->c2), bc2 = _mm256_set1_ps(j->bc2_sqrt);
	const __m256 eps = _mm256_set1_ps(j->eps), neg_step = _mm256_set1_ps(j->neg_step);
	const __m256 neg0 = _mm256_set1_ps(-0.0f);
	int small_w = j->w1 < 0.5f;
	for (; i + 8 <= end; i += 8) {
		__m256 g = _mm256_loadu_ps(j->g + i);
		__m256 p = _mm256_mul_ps(_mm256_loadu_ps(j->p + i), decay);
		__m256 m = _mm256_loadu_ps(j->m + i);
		__m256 d = _mm256_sub_ps(g, m);
		m = small_w ? _mm256_fmadd_ps(w1, d, m)
			    : _mm256_fmadd_ps(_mm256_xor_ps(d, neg0), one_w1, g);
		__m256 v = _mm256_fmadd_ps(_mm256_mul_ps(c2, g), g,
					   _mm256_mul_ps(_mm256_loadu_ps(j->v + i), beta2));
		__m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2), eps);
		__m256 upd = _mm256_mul_ps(neg_step, m);
		_mm256_storeu_ps(j->p + i, _mm256_add_ps(p, _mm256_div_ps(upd, denom)));
		_mm256_storeu_ps(j->m + i, m);
		_mm256_storeu_ps(j->v + i, v);
	}
	return i;
}
#endif

static void *adamw_range(void *arg)
{
	const struct adamw_job *j = arg;
	uint64_t i = j->begin;
#if ADAMW_AVX2
	if (j->avx2)
		i = adamw_avx2(j, i, j->end);
#endif
	adamw_scalar(j, i, j->end);
	return NULL;
}

int wsp_adamw_step(float *param, const float *grad, float *exp_avg, float *exp_avg_sq,
		   uint64_t n, const struct wsp_adamw *hp)
{
	if (!hp || (n && (!param || !grad || !exp_avg || !exp_avg_sq)) || hp->step == 0)
		return -EINVAL;
	for (unsigned i = 0; i < sizeof(hp->reserved) / sizeof(hp->reserved[0]); i++)
		if (hp->reserved[i])
			return -EINVAL;
	/* The scalars as torch computes them: in double, then used as float. */
	double bc1 = 1.0 - pow(hp->beta1, (double)hp->step);
	double bc2 = 1.0 - pow(hp->beta2, (double)hp->step);
	struct adamw_job base = {
		.p = param, .m = exp_avg, .v = exp_avg_sq, .g = grad,
		.decay = (float)(1.0 - (double)hp->lr * hp->weight_decay),
		.w1 = (float)(1.0 - hp->beta1), .beta2 = (float)hp->beta2,
		.c2 = (float)(1.0 - hp->beta2), .bc2_sqrt = (float)sqrt(bc2),
		.eps = (float)hp->eps, .neg_step = (float)(-(double)hp->lr / bc1),
#if ADAMW_AVX2
		.avx2 = wspi_adamw_use_simd && __builtin_cpu_supports("avx2") &&
			__builtin_cpu_supports("fma"),
#endif
	};
	unsigned t = hp->threads ? hp->threads : wspi_cpu_count();
	t = (unsigned)WSP_MAX(WSP_MIN(WSP_MIN((uint64_t)t, ADAMW_MAX_THREADS),
				      n / ADAMW_MIN_PER_THREAD), 1);
	struct adamw_job jobs[ADAMW_MAX_THREADS];
	uint64_t per = (n + t - 1) / t;
	for (unsigned k = 0; k < t; k++) {
		jobs[k] = base;
		jobs[k].begin = WSP_MIN(n, per * k);
		jobs[k].end = WSP_MIN(n, jobs[k].begin + per);
	}
	wspi_run_parts(adamw_range, jobs, sizeof(jobs[0]), t);
	return 0;
}
