/* The predictor learns repeated passes, forward+backward and per-batch
 * branches; before any observation it predicts pack order. */
#include <stdio.h>

#include "predict/predict.h"
#include "testlib.h"
#include "traces.h"

/* After observing tr[0..t], does the predictor know the future exactly?
 * predictor_next() must list the distinct layers of the future in order and
 * predictor_distance() the first future position of every layer within the
 * horizon (2 * n_layers accesses); the trace must extend that far. */
static int exact_at(struct predictor *p, const struct trace *tr, size_t t)
{
	uint32_t n = tr->n_layers, got[256], want[256];
	uint64_t dist[256];
	unsigned n_want = 0, n_got;
	uint64_t horizon = 2ull * n;

	CHECK(n <= 256 && t + horizon < tr->len);
	for (uint32_t i = 0; i < n; i++)
		dist[i] = PREDICT_NEVER;
	for (uint64_t d = 1; d <= horizon; d++) {
		uint32_t l = tr->at[t + d];
		if (dist[l] == PREDICT_NEVER) {
			dist[l] = d;
			want[n_want++] = l;
		}
	}
	n_got = predictor_next(p, got, n);
	if (n_got != n_want || memcmp(got, want, n_want * sizeof(*got)) != 0)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		if (predictor_distance(p, i) != dist[i])
			return 0;
	/* A shorter request is a prefix. */
	if (n_want >= 3 && (predictor_next(p, got, 3) != 3 || memcmp(got, want, 3 * sizeof(*got))))
		return 0;
	return 1;
}

static void test_pack_order(void)
{
	struct predictor *p;
	uint32_t got[16];

	CHECK_RC(predictor_create(10, &p), 0);
	for (int round = 0; round < 2; round++) {
		CHECK(predictor_next(p, got, 16) == 10);
		for (uint32_t i = 0; i < 10; i++) {
			CHECK(got[i] == i);
			CHECK(predictor_distance(p, i) == i + 1);
		}
		CHECK(predictor_next(p, got, 0) == 0);
		CHECK(predictor_distance(p, 10) == PREDICT_NEVER);
		/* Nothing learned yet after one observation: pack order from it. */
		predictor_observe(p, 4);
		CHECK(predictor_next(p, got, 3) == 3);
		CHECK(got[0] == 5 && got[1] == 6 && got[2] == 7);
		CHECK(predictor_distance(p, 4) == 10);
		CHECK(predictor_distance(p, 3) == 9);
		predictor_observe(p, 99);    /* out of range: ignored */
		CHECK(predictor_distance(p, 5) == 1);
		predictor_reset(p);          /* forgets everything */
	}
	predictor_free(p);
	predictor_free(NULL);
	CHECK_RC(predictor_create(0, &p), -EINVAL);
	CHECK(p == NULL);
	CHECK_RC(predictor_create(UINT32_MAX, &p), WSP_ETOOBIG);
	CHECK(p == NULL);
}

/* Observe the trace; from `from` on every position must be exact. */
static void expect_exact_from(const struct trace *tr, size_t from, const char *what)
{
	struct predictor *p;
	size_t t;

	CHECK_RC(predictor_create(tr->n_layers, &p), 0);
	for (t = 0; t + 2ull * tr->n_layers < tr->len; t++) {
		predictor_observe(p, tr->at[t]);
		if (t >= from && !exact_at(p, tr, t)) {
			fprintf(stderr, "%s: not exact after access %zu (layer %u)\n", what, t,
				tr->at[t]);
			exit(1);
		}
	}
	predictor_free(p);
}

static void test_passes(void)
{
	struct trace tr = { 0 };

	/* Pack order is right from the start; after one pass it is learned. */
	trace_passes(&tr, 12, 6);
	expect_exact_from(&tr, 0, "passes");
	trace_free(&tr);

	/* A pass in another order (reversed, skipping): learned after one. */
	tr.n_layers = 9;
	for (int pass = 0; pass < 6; pass++)
		for (int i = 8; i >= 0; i -= 2)
			trace_push(&tr, (uint32_t)i);
	expect_exact_from(&tr, 5, "reversed passes");
	trace_free(&tr);
}

static void test_fwdbwd(uint32_t n)
{
	struct trace tr = { 0 };

	/* 0..9, 8..1, 0..9, ...: after one cycle both turnarounds are known. */
	trace_fwdbwd(&tr, n, 6, 0);
	expect_exact_from(&tr, 2 * n - 2, "forward+backward");
	trace_free(&tr);

	/* 0..9, 9..0, 0..9, ...: a repeated layer at each turnaround.  The
	 * repeat at 0 first happens at the start of the second cycle; from the
	 * access after it on, everything is known. */
	trace_fwdbwd(&tr, n, 6, 1);
	expect_exact_from(&tr, 2 * n + 1, "forward+backward, repeated ends");
	trace_free(&tr);
}

/* Branches: shared layers must be predicted exactly once every group has
 * been seen; returns the accuracy of the branch choice. */
static double branch_accuracy(const unsigned *weights, unsigned warm)
{
	struct trace tr = { 0 };
	const uint32_t pre = 6, groups = 3, gsize = 3, post = 3;
	struct predictor *p;
	unsigned choices = 0, right = 0;
	uint32_t next;

	trace_branches(&tr, pre, groups, gsize, post, 400, weights, 7);
	CHECK_RC(predictor_create(tr.n_layers, &p), 0);
	for (size_t t = 0; t + 1 < tr.len; t++) {
		uint32_t actual = tr.at[t + 1];
		int is_choice = actual >= pre && actual < pre + groups * gsize &&
				(actual - pre) % gsize == 0;
		predictor_observe(p, tr.at[t]);
		CHECK(predictor_next(p, &next, 1) == 1);
		if (t < (size_t)warm * (pre + gsize + post))
			continue;
		if (is_choice) {
			choices++;
			right += next == actual;
			/* The other groups are not on the predicted walk, the
			 * predicted one is. */
			CHECK(next >= pre && next < pre + groups * gsize);
		} else if (next != actual) {
			fprintf(stderr, "branches: shared/in-group layer %u after %u predicted as %u\n",
				actual, tr.at[t], next);
			exit(1);
		}
	}
	predictor_free(p);
	trace_free(&tr);
	return (double)right / choices;
}

/* Distances behind a varying branch are scaled by its probability; where
 * the branches merge they are exact again; other branches get one too. */
static void test_branch_distances(void)
{
	static const unsigned w[3] = { 6, 3, 1 };
	const uint32_t pre = 6, gsize = 3, post = 3;
	struct trace tr = { 0 };
	struct predictor *p;
	uint32_t walk[32];

	trace_branches(&tr, pre, 3, gsize, post, 50, w, 7);
	CHECK_RC(predictor_create(tr.n_layers, &p), 0);
	for (size_t t = 0; t < tr.len; t++)
		predictor_observe(p, tr.at[t]);
	/* At the end of a batch: pre, the likeliest group, post. */
	CHECK(predictor_next(p, walk, 32) == pre + gsize + post);
	uint32_t best = (walk[pre] - pre) / gsize;
	for (uint32_t i = 0; i < pre; i++)
		CHECK(walk[i] == i && predictor_distance(p, i) == i + 1);
	for (uint32_t j = 0; j < post; j++)
		CHECK(predictor_distance(p, pre + 3 * gsize + j) == pre + gsize + 1 + j);
	for (uint32_t g = 0; g < 3; g++) {
		for (uint32_t k = 0; k < gsize; k++) {
			uint64_t d = predictor_distance(p, pre + g * gsize + k);
			uint64_t d_best = predictor_distance(p, pre + best * gsize + k);
			CHECK(d != PREDICT_NEVER && d > pre + 1 + k);
			CHECK(g == best || d > d_best);
		}
	}
	printf("distances of group layers after 50 batches (weights 6/3/1):");
	for (uint32_t l = pre; l < pre + 3 * gsize; l++)
		printf(" %u:%llu", l, (unsigned long long)predictor_distance(p, l));
	printf("\n");
	predictor_free(p);
	trace_free(&tr);
}

static void test_branches(void)
{
	static const unsigned skewed[3] = { 6, 3, 1 };
	double uni = branch_accuracy(NULL, 30), skew = branch_accuracy(skewed, 30);

	printf("branch choice accuracy: uniform 3 groups %.1f%% (chance 33.3%%), "
	       "weights 60/30/10 %.1f%% (best possible without the future ~60%%)\n",
	       100 * uni, 100 * skew);
	/* Predicting the most frequent branch of a skewed choice beats chance. */
	CHECK(skew > 0.5);
	CHECK(uni > 0.2);
}

/* Counts fade: an old habit is overturned by a new one in bounded time. */
static void test_habit_change(void)
{
	struct predictor *p;
	uint32_t next;
	int i;

	CHECK_RC(predictor_create(8, &p), 0);
	for (i = 0; i < 5000; i++) {
		predictor_observe(p, 1);
		predictor_observe(p, 2);
	}
	predictor_observe(p, 1);
	CHECK(predictor_next(p, &next, 1) == 1 && next == 2);
	for (i = 0; i < 300; i++) {
		predictor_observe(p, 1);
		predictor_observe(p, 5);
	}
	predictor_observe(p, 1);
	CHECK(predictor_next(p, &next, 1) == 1 && next == 5);
	/* Many distinct contexts: the bounded tables keep working. */
	uint64_t seed = 3;
	for (i = 0; i < 100000; i++)
		predictor_observe(p, (uint32_t)(t_rand(&seed) % 8));
	CHECK(predictor_next(p, &next, 1) == 1 && next < 8);
	predictor_free(p);
}

/* A walk whose outcome varies is walked afresh at every query, so it
 * stops 4096 steps ahead (an O(layers) walk per acquire cost a 15 000-layer
 * MoE ~1 ms): on a 6000-layer cycle with a branch at its start, the layers
 * before that step have their distance, the ones after it read as never
 * needed, and the next layers are still predicted. */
static void test_uncertain_horizon(void)
{
	const uint32_t n = 6000;
	struct predictor *p;
	uint32_t next[4];
	uint64_t rng = 3;
	CHECK_RC(predictor_create(n, &p), 0);
	for (int pass = 0; pass < 4; pass++) {
		predictor_observe(p, 0);
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		predictor_observe(p, 1 + (uint32_t)(rng >> 63));   /* 1 or 2 */
		for (uint32_t l = 3; l < n; l++)
			predictor_observe(p, l);
	}
	predictor_observe(p, 0);   /* at the branch: 1 or 2 next */
	CHECK(predictor_next(p, next, 4) == 4 && next[1] == 3 && next[2] == 4);
	uint64_t near = predictor_distance(p, 3000), far = predictor_distance(p, n - 1);
	printf("uncertain walk over %u layers: layer 3000 at %llu, layer %u %s\n", n,
	       (unsigned long long)near, n - 1, far == PREDICT_NEVER ? "beyond the horizon" : "near");
	CHECK(near != PREDICT_NEVER && near >= 2999);
	CHECK(far == PREDICT_NEVER);
	predictor_free(p);
}

/* Routing that varies (a MoE: per block an attention layer, then 2 of 16
 * experts at random): the walk is uncertain and made afresh at every
 * observation.  It stops where it comes back to a state it was in, after
 * about one forward (a step depends on the state alone, so the rest would
 * repeat it), not at 2 * n_layers steps; and the blocks ahead are still
 * predicted in order. */
static void test_uncertain_cycle(void)
{
	enum { BLOCKS = 20, EXPERTS = 16, PER = 1 + EXPERTS };
	const uint32_t n = 2 + BLOCKS * PER, forward = 2 + BLOCKS * 3;
	struct predictor *p;
	uint32_t next[64];
	uint64_t rng = 5, steps0 = 0, steps1 = 0, walks0 = 0;
	CHECK_RC(predictor_create(n, &p), 0);
	for (int pass = 0; pass < 12; pass++) {
		if (pass == 10)
			walks0 = predictor_walk_count(p, &steps0);
		predictor_observe(p, 0);
		for (uint32_t b = 0; b < BLOCKS; b++) {
			uint32_t attn = 1 + b * PER, e0, e1;
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			e0 = (uint32_t)(rng >> 40) % EXPERTS;
			e1 = (e0 + 1 + (uint32_t)(rng >> 20) % (EXPERTS - 1)) % EXPERTS;
			predictor_observe(p, attn);
			predictor_observe(p, attn + 1 + (e0 < e1 ? e0 : e1));
			predictor_observe(p, attn + 1 + (e0 < e1 ? e1 : e0));
			(void)predictor_distance(p, 0);   /* a query: the walk is made */
		}
		predictor_observe(p, n - 1);
	}
	uint64_t walks = predictor_walk_count(p, &steps1) - walks0;
	printf("uncertain walks on a %u-layer MoE trace (%u acquires a forward): "
	       "%.1f main steps a walk (2 * n_layers = %u)\n", n, forward,
	       (double)(steps1 - steps0) / (double)walks, 2 * n);
	CHECK(walks >= 2 * BLOCKS);
	/* one cycle of the predicted forward, and the steps that join it (a
	 * predicted block may take more experts than a real one) */
	CHECK(steps1 - steps0 <= walks * 2 * forward);
	/* after block 0's experts: the next blocks' attention layers, in order */
	predictor_observe(p, 0);
	predictor_observe(p, 1);
	predictor_observe(p, 2);
	predictor_observe(p, 3);
	unsigned k = predictor_next(p, next, 64), at = 0;
	for (unsigned i = 0; i < k; i++)
		if (next[i] == 1 + (at + 1) * PER)
			at++;
	CHECK(at >= 5);
	predictor_free(p);
}

int main(void)
{
	test_uncertain_cycle();
	test_uncertain_horizon();
	test_pack_order();
	test_passes();
	test_fwdbwd(10);
	test_fwdbwd(32);
	test_fwdbwd(100);
	test_branches();
	test_branch_distances();
	test_habit_change();
	return 0;
}
