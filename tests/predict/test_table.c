/*
 * The target, as a property of the algorithm: on repeated passes,
 * forward+backward and per-batch branches, with equal and varied layer
 * sizes, and a host cache of 25%..90% of the model, the predictive policy
 * hits at least 95% as often as Belady's offline rule.  Everything is
 * deterministic, so this is a test; it also prints the table that
 * the "Prediction, eviction and cache simulation" section of
 * docs/PERFORMANCE.md quotes (run tests/predict/test_table).
 */
#include <stdio.h>

#include "common/util.h"
#include "predict/predict.h"
#include "testlib.h"
#include "traces.h"

#define TARGET 0.95
/* Every row: PREDICT never hits more often than Belady (a check of the
 * simulator).  For the families where no online policy can reach TARGET:
 * PREDICT hits at least as often as LRU, and at least this fraction of
 * Belady's hits (a floor against regressions; the lowest row measured was
 * 0.825). */
#define INFO_FLOOR 0.80

struct family {
	const char *name;
	void (*make)(struct trace *t);
	/* 1: TARGET; 0: the weaker INFO_FLOOR checks; 2 (routing chosen at
	 * random, most of the model: Belady is far out of reach): PREDICT
	 * hits at least as often as LRU */
	int asserted;
};

static void make_passes(struct trace *t)
{
	trace_passes(t, 32, 20);
}

static void make_fwdbwd(struct trace *t)
{
	trace_fwdbwd(t, 32, 10, 1);
}

static void make_branches(struct trace *t)
{
	/* 12 shared layers, one of 3 groups of 4 per batch (uniform), 4 shared. */
	trace_branches(t, 12, 3, 4, 4, 60, NULL, 11);
}

static void make_branches_skewed(struct trace *t)
{
	static const unsigned w[4] = { 5, 3, 1, 1 };
	trace_branches(t, 8, 4, 4, 8, 60, w, 5);
}

/* Most of the model in branches chosen uniformly at random: Belady knows
 * each batch's choice in advance, which no online policy can (see
 * docs/PERFORMANCE.md, "Where Belady stays ahead"): the 95% target is not
 * asserted, only the weaker INFO_FLOOR below. */
static void make_branch_heavy(struct trace *t)
{
	trace_branches(t, 4, 4, 6, 4, 100, NULL, 1);
}

/* Passes where each access is skipped with probability 10%: which layers a
 * pass skips is random, so again only Belady knows it; only INFO_FLOOR. */
static void make_noisy_passes(struct trace *t)
{
	uint64_t seed = 5;

	t->n_layers = 32;
	for (int pass = 0; pass < 30; pass++)
		for (uint32_t i = 0; i < 32; i++)
			if (t_rand(&seed) % 10 != 0)
				trace_push(t, i);
}

/* A MoE forward (trace_moe): 8 blocks of an attention layer and 4 of 32
 * experts, every layer observed (a caller that does not flag routed
 * experts).  Which experts a batch takes only Belady knows. */
static void make_moe(struct trace *t)
{
	trace_moe(t, 8, 32, 4, 40, 9);
}

static const struct family families[] = {
	{ "passes (32 layers x 20)", make_passes, 1 },
	{ "fwd+bwd (32 layers x 10)", make_fwdbwd, 1 },
	{ "branches 12+3x4+4, uniform (60 batches)", make_branches, 1 },
	{ "branches 8+4x4+8, 50/30/10/10 (60 batches)", make_branches_skewed, 1 },
	{ "(info) branches 4+4x6+4, uniform (100 batches)", make_branch_heavy, 0 },
	{ "(info) passes (32 layers x 30), 10% random skips", make_noisy_passes, 0 },
	{ "(moe) 8 x (attention + 4 of 32 experts), 40 forwards", make_moe, 2 },
};

static const unsigned percents[] = { 25, 50, 75, 90 };

int main(void)
{
	int failed = 0;

	printf("hit rate (%% of accesses) by policy; ratio = PREDICT hits / BELADY hits;\n"
	       "read P/B = bytes read from disk, PREDICT / BELADY\n\n");
	printf("| trace | sizes | cache | LRU | PREDICT | BELADY | ratio | read P/B |\n");
	printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	for (size_t f = 0; f < WSP_ARRAY_SIZE(families); f++) {
		for (int varied = 0; varied <= 1; varied++) {
			struct trace tr = { 0 };
			uint64_t *bytes, total = 0;

			families[f].make(&tr);
			bytes = calloc(tr.n_layers, sizeof(*bytes));
			CHECK(bytes);
			layer_sizes(bytes, tr.n_layers, varied);
			for (uint32_t i = 0; i < tr.n_layers; i++)
				total += bytes[i];
			for (size_t c = 0; c < WSP_ARRAY_SIZE(percents); c++) {
				struct wsp_sim_result r[3];
				uint64_t cache = total * percents[c] / 100;
				double ratio;

				for (int pol = 0; pol < 3; pol++)
					CHECK_RC(wsp_simulate(bytes, tr.n_layers, tr.at, tr.len, cache,
							      (enum wsp_sim_policy)pol, &r[pol]), 0);
				ratio = r[WSP_SIM_BELADY].hits
						? (double)r[WSP_SIM_PREDICT].hits / r[WSP_SIM_BELADY].hits
						: 1.0;
				printf("| %s | %s | %u%% | %.1f%% | %.1f%% | %.1f%% | %.3f%s | %.3f |\n",
				       families[f].name, varied ? "varied" : "equal", percents[c],
				       100.0 * r[WSP_SIM_LRU].hits / tr.len,
				       100.0 * r[WSP_SIM_PREDICT].hits / tr.len,
				       100.0 * r[WSP_SIM_BELADY].hits / tr.len, ratio,
				       ratio < TARGET && families[f].asserted == 1 ? " BELOW TARGET" : "",
				       (double)r[WSP_SIM_PREDICT].bytes_read /
					       (double)r[WSP_SIM_BELADY].bytes_read);
				int kind = families[f].asserted;
				if (ratio < TARGET && kind == 1)
					failed = 1;
				if (r[WSP_SIM_PREDICT].hits > r[WSP_SIM_BELADY].hits ||
				    (kind != 1 && r[WSP_SIM_PREDICT].hits < r[WSP_SIM_LRU].hits) ||
				    (kind == 0 && ratio < INFO_FLOOR)) {
					printf("   ^ fails: PREDICT <= BELADY%s\n", kind == 1 ? ""
					       : kind == 0 ? ", LRU <= PREDICT and ratio >= 0.80"
					       : ", LRU <= PREDICT");
					failed = 1;
				}
			}
			free(bytes);
			trace_free(&tr);
		}
	}
	return failed;
}
