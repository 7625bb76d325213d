/* A kept walk answers exactly as a fresh one: two predictors see the same
 * trace, one keeping its walk across observations (the default), one
 * walking afresh after each (predictor_keep_walks false); after every
 * observation both give the same predictor_next() of every layer and the
 * same predictor_distance() of every layer.  Traces: repeated passes (the
 * first one learnt), forward+backward with and without repeated ends,
 * per-batch branches, a pass that changes its order midway, and random
 * jumps. */
#include <stdio.h>

#include "predict/predict.h"
#include "testlib.h"
#include "traces.h"

static unsigned compare(const char *name, const struct trace *tr)
{
	struct predictor *kept, *fresh;
	uint32_t n = tr->n_layers, a[512], b[512];
	unsigned bad = 0;

	CHECK(n <= 512);
	CHECK_RC(predictor_create(n, &kept), 0);
	CHECK_RC(predictor_create(n, &fresh), 0);
	predictor_keep_walks(fresh, false);
	/* exactness is for kept walks; aged ones are approximations (test_walk_aged) */
	predictor_age_walks(kept, false);
	predictor_age_walks(fresh, false);
	for (size_t t = 0; t < tr->len && bad < 5; t++) {
		predictor_observe(kept, tr->at[t]);
		predictor_observe(fresh, tr->at[t]);
		unsigned na = predictor_next(kept, a, n), nb = predictor_next(fresh, b, n);
		int same = na == nb;
		for (unsigned i = 0; same && i < na; i++)
			same = a[i] == b[i];
		for (uint32_t l = 0; same && l < n; l++)
			same = predictor_distance(kept, l) == predictor_distance(fresh, l);
		if (!same) {
			fprintf(stderr, "%s: after access %zu (layer %u) the kept walk differs\n", name,
				t, tr->at[t]);
			bad++;
		}
	}
	uint64_t wk = predictor_walk_count(kept, NULL), wf = predictor_walk_count(fresh, NULL);
	printf("%s: %zu accesses of %u layers, %s; walks made: %llu kept, %llu fresh\n", name,
	       tr->len, n, bad ? "DIFFERENT" : "same", (unsigned long long)wk,
	       (unsigned long long)wf);
	CHECK(wf >= tr->len);   /* the oracle walked after every access */
	predictor_free(kept);
	predictor_free(fresh);
	return bad;
}

int main(void)
{
	struct trace tr = { 0 };
	unsigned bad = 0;
	static const unsigned w[] = {6, 3, 1};


	trace_passes(&tr, 97, 6);
	bad += compare("passes", &tr);
	{   /* repeated passes keep their walk: a few walks, not one per access */
		struct predictor *p;
		CHECK_RC(predictor_create(97, &p), 0);
		for (size_t t = 0; t < tr.len; t++) {
			predictor_observe(p, tr.at[t]);
			(void)predictor_distance(p, 0);
		}
		CHECK(predictor_walk_count(p, NULL) < tr.len / 20);
		predictor_free(p);
	}
	trace_free(&tr);


	trace_fwdbwd(&tr, 40, 5, 1);
	bad += compare("forward+backward, ends repeated", &tr);
	trace_free(&tr);


	trace_fwdbwd(&tr, 40, 5, 0);
	bad += compare("forward+backward", &tr);
	trace_free(&tr);


	trace_branches(&tr, 8, 3, 6, 4, 60, w, 7);
	bad += compare("branches", &tr);
	trace_free(&tr);

	/* passes in one order, then in another (every other layer first) */

	trace_passes(&tr, 50, 3);
	for (unsigned p = 0; p < 4; p++) {
		for (uint32_t i = 0; i < 50; i += 2)
			trace_push(&tr, i);
		for (uint32_t i = 1; i < 50; i += 2)
			trace_push(&tr, i);
	}
	bad += compare("order changed", &tr);
	trace_free(&tr);

	/* a pass with random jumps in it */

	tr.n_layers = 64;
	uint64_t seed = 3;
	for (unsigned i = 0; i < 1500; i++)
		trace_push(&tr, t_rand(&seed) % 10 == 0 ? (uint32_t)(t_rand(&seed) % 64) : i % 64);
	bad += compare("random jumps", &tr);
	trace_free(&tr);

	CHECK(bad == 0);
	return 0;
}
