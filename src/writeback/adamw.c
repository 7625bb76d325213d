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
#include "wspager.h"

#define ADAMW_MAX_THREADS 64u
#define ADAMW_MIN_PER_THREAD (1u << 16)

struct adamw_job {
	float *p, *m, *v;
	const float *g;
	uint64_t begin, end;
	float decay, w1, beta2, c2, bc2_sqrt, eps, neg_step;
};

/* torch's CPU kernels fuse the multiply-adds of lerp and addcmul (FMA), so
 * this does too, explicitly: fmaf is one rounding with or without the
 * instruction, and the clone built for FMA machines uses it. */
__attribute__((target_clones("fma", "default")))
static void *adamw_range(void *arg)
{
	const struct adamw_job *j = arg;
	for (uint64_t i = j->begin; i < j->end; i++) {
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
