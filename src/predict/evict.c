/*
 * The eviction choice, shared by every tier that evicts (the host cache,
 * the GPU slot pool, the updated-layer and training-state stores) and by
 * the simulator, so that `wspager simulate` measures the code that runs.
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

void evict_pick_init(struct evict_pick *p, enum wsp_policy policy)
{
	p->policy = policy;
	p->best = -1;
}

void evict_pick_offer(struct evict_pick *p, long index, const struct evict_cand *c)
{
	if (p->best < 0 || evict_before(p->policy, c, &p->cand)) {
		p->best = index;
		p->cand = *c;
	}
}

int evict_choose(enum wsp_policy policy, const struct evict_cand *cand, unsigned n)
{
	struct evict_pick p;

	evict_pick_init(&p, policy);
	for (unsigned i = 0; cand && i < n; i++)
		evict_pick_offer(&p, (long)i, &cand[i]);
	return (int)p.best;
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
