/* A long uncertain walk (a MoE forward, every layer observed) is walked
 * again after one observation per UNCERTAIN_STEPS_PER_WALK of its steps,
 * not after each: the walking an observation pays stays bounded, and
 * far below walking afresh, while every answer stays well-formed (next
 * layers distinct and in range, distances >= 1).  Certain walks are not
 * aged: on repeated passes the default predictor answers exactly as one
 * that walks afresh after every observation. */
#include <stdio.h>
#include <stdlib.h>

#include "predict/predict.h"
#include "testlib.h"
#include "traces.h"

/* Observe the trace, asking what the pager asks after an acquire (the
 * next 8, 8 candidates' distances); the main steps walked per observation
 * after the first two forwards. */
static double steps_per_observation(struct predictor *p, const struct trace *tr, size_t learn)
{
	uint32_t next[8];
	uint64_t steps0 = 0, steps;
	uint8_t *seen = calloc(tr->n_layers, 1);
	CHECK(seen);
	for (size_t t = 0; t < tr->len; t++) {
		if (t == learn)
			predictor_walk_count(p, &steps0);
		predictor_observe(p, tr->at[t]);
		unsigned n = predictor_next(p, next, 8);
		for (unsigned i = 0; i < n; i++) {
			CHECK(next[i] < tr->n_layers && !seen[next[i]]);
			seen[next[i]] = 1;
		}
		for (unsigned i = 0; i < n; i++)
			seen[next[i]] = 0;
		for (uint32_t c = 0; c < 8; c++)
			CHECK(predictor_distance(p, (tr->at[t] + 1 + c * (tr->n_layers / 8)) %
							 tr->n_layers) >= 1);
	}
	free(seen);
	predictor_walk_count(p, &steps);
	return (double)(steps - steps0) / (double)(tr->len - learn);
}

int main(void)
{
	struct trace tr = { 0 };
	struct predictor *aged, *fresh;

	/* 60 blocks of attention + 6 of 64 experts: 3 902 layers, 422 a forward */
	trace_moe(&tr, 60, 64, 6, 10, 5);
	size_t learn = 2 * (tr.len / 10);
	CHECK_RC(predictor_create(tr.n_layers, &aged), 0);
	CHECK_RC(predictor_create(tr.n_layers, &fresh), 0);
	predictor_age_walks(fresh, false);
	double a = steps_per_observation(aged, &tr, learn);
	double f = steps_per_observation(fresh, &tr, learn);
	printf("MoE, %u layers: main steps walked per observation: aged %.1f, afresh %.1f\n",
	       tr.n_layers, a, f);
	CHECK(a <= 3 * 32);   /* UNCERTAIN_STEPS_PER_WALK, with room for walks cut short */
	CHECK(f >= 4 * a);
	predictor_free(aged);
	predictor_free(fresh);
	trace_free(&tr);

	/* repeated passes: certain walks, answered exactly as afresh */
	trace_passes(&tr, 300, 5);
	CHECK_RC(predictor_create(tr.n_layers, &aged), 0);
	CHECK_RC(predictor_create(tr.n_layers, &fresh), 0);
	predictor_keep_walks(fresh, false);
	predictor_age_walks(fresh, false);
	for (size_t t = 0; t < tr.len; t++) {
		predictor_observe(aged, tr.at[t]);
		predictor_observe(fresh, tr.at[t]);
		for (uint32_t l = 0; l < tr.n_layers; l += 7)
			CHECK(predictor_distance(aged, l) == predictor_distance(fresh, l));
	}
	predictor_free(aged);
	predictor_free(fresh);
	trace_free(&tr);
	return 0;
}
