/*
 * The eviction choice, shared by the host cache, the GPU slot pool and the
 * simulator, so that `wspager simulate` measures the code that runs.
 */
#include <errno.h>
#include <stdbool.h>

#include "predict/predict.h"

/* Should a be evicted before b? */
static bool evict_before(enum wsp_policy policy, const struct evict_cand *a,
			 const struct evict_cand *b)
{
	if (policy == WSP_POLICY_PREDICT && a->distance != b->distance)
		return a->distance > b->distance;
	return a->last_use < b->last_use;
}

int evict_choose(enum wsp_policy policy, const struct evict_cand *cand, unsigned n)
{
	unsigned best = 0;

	if (n == 0 || !cand)
		return -1;
	for (unsigned i = 1; i < n; i++)
		if (evict_before(policy, &cand[i], &cand[best]))
			best = i;
	return (int)best;
}

int evict_plan(enum wsp_policy policy, struct evict_cand *cand, uint64_t *bytes, unsigned n,
	       uint64_t need, uint64_t incoming_distance)
{
	bool admission = policy == WSP_POLICY_PREDICT && incoming_distance > 0;
	uint64_t freed = 0;
	unsigned taken = 0;

	/* Selection by repeated evict_choose() over the untaken tail: the same
	 * order as a sort, and victims are usually one or two. */
	while (freed < need) {
		int k;
		if (taken == n)
			return -ENOSPC;
		k = evict_choose(policy, cand + taken, n - taken);
		struct evict_cand c = cand[taken + (unsigned)k];
		uint64_t b = bytes[taken + (unsigned)k];
		if (admission && c.distance < incoming_distance)
			return -ENOSPC;
		cand[taken + (unsigned)k] = cand[taken];
		bytes[taken + (unsigned)k] = bytes[taken];
		cand[taken] = c;
		bytes[taken] = b;
		taken++;
		freed = b > UINT64_MAX - freed ? UINT64_MAX : freed + b;
	}
	return (int)taken;
}
