/* Cost of the predictor per acquire: predictor_observe() followed by what
 * the pager asks after it (the next layers, and the distances of a cache's
 * worth of candidates), on cyclic and branchy traces of 32..2048 layers.
 * Then the cost per acquire as the layer count grows (2 000 .. 50 000): the
 * first pass (learning) and the next ones, observe + next 8 + 8 distances,
 * which must not grow with the layer count (`--growth`: that part only).
 * Then a MoE-shaped pack (`--moe`: that part only): 60 blocks of an
 * attention layer and 256 routed experts (15 362 layers), each forward
 * acquiring the attention and 8 experts chosen at random per block; the
 * predictor's CPU time per forward against the time the link needs to
 * bring that forward's weights in, for two expert sizes (bytes / the link's
 * GB/s: the link is an argument, `--link-gbps`, default 55, the pinned
 * host->GPU rate of the H100s in docs/PERFORMANCE.md; the predictor's time
 * is measured); once with every layer observed, once with the experts
 * routed as wspager.torch acquires them (not observed); and what the
 * predictions are worth there (moe_quality).  CPU time of one thread;
 * prints microseconds per acquire. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "predict/predict.h"
#include "wspager.h"

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

/* The MoE-shaped trace: layer 0 the embedding, then per block its
 * attention and its experts, then the head. */
enum { MOE_BLOCKS = 60, MOE_EXPERTS = 256, MOE_TOPK = 8 };

static uint32_t moe_attn(uint32_t b)
{
	return 1 + b * (1 + MOE_EXPERTS);
}

/* One forward's acquires, in the order a forward takes them (a block's
 * routed experts in index order, as transformers' dispatch runs them). */
static uint32_t moe_forward(uint32_t *out, uint64_t *rng)
{
	uint32_t n = 0;
	out[n++] = 0;
	for (uint32_t b = 0; b < MOE_BLOCKS; b++) {
		unsigned char chosen[MOE_EXPERTS] = {0};
		out[n++] = moe_attn(b);
		for (unsigned k = 0; k < MOE_TOPK;) {
			*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
			uint32_t e = (uint32_t)((*rng >> 33) % MOE_EXPERTS);
			k += !chosen[e];
			chosen[e] = 1;
		}
		for (uint32_t e = 0; e < MOE_EXPERTS; e++)
			if (chosen[e])
				out[n++] = moe_attn(b) + 1 + e;
	}
	out[n++] = moe_attn(MOE_BLOCKS);
	return n;
}

static int is_expert(uint32_t layer)
{
	return layer > 0 && layer < moe_attn(MOE_BLOCKS) && (layer - 1) % (1 + MOE_EXPERTS) != 0;
}

/* routed: the experts are acquired as wspager.torch acquires them
 * (WSP_ACQUIRE_UNPREDICTED | WSP_ACQUIRE_NO_READAHEAD, hinted by the
 * router): the predictor neither observes them nor is asked for the next
 * layers after them; their acquire still asks the distances of a slot's
 * worth of candidates (the demand victim). */
static void moe(double link_gbps, int routed)
{
	const uint32_t n = moe_attn(MOE_BLOCKS) + 1, per = 2 + MOE_BLOCKS * (1 + MOE_TOPK);
	uint32_t trace[2 + MOE_BLOCKS * (1 + MOE_TOPK)], next[8];
	struct predictor *p;
	if (predictor_create(n, &p) < 0)
		exit(1);
	uint64_t rng = 7, sink = 0;
	const unsigned learn = 2, timed = 20;
	double t = 0;
	for (unsigned pass = 0; pass < learn + timed; pass++) {
		uint32_t k = moe_forward(trace, &rng);
		double t0 = cpu_us();
		for (uint32_t i = 0; i < k; i++) {
			if (!routed || !is_expert(trace[i])) {
				predictor_observe(p, trace[i]);
				sink += predictor_next(p, next, 8);
			}
			for (uint32_t c = 0; c < 8; c++)
				sink += predictor_distance(p, (trace[i] + 1 + c * (n / 8)) % n);
		}
		if (pass >= learn)
			t += cpu_us() - t0;
	}
	predictor_free(p);
	double us_forward = t / timed;
	printf("\nMoE-shaped pack: %u blocks x (attention + %u experts) = %u layers; a forward "
	       "acquires %u (top %u); %s\npredictor: %.2f us per acquire, %.0f us per forward "
	       "(observe + next 8 + 8 distances%s)\n", MOE_BLOCKS, MOE_EXPERTS, n, per, MOE_TOPK,
	       routed ? "experts routed (not observed, as wspager.torch acquires them)"
		      : "every layer observed (a C caller that does not flag routed experts)",
	       us_forward / per, us_forward, routed ? "; an expert: 8 distances" : "");
	/* bf16 sizes: an expert is 3 matrices of hidden x intermediate; the
	 * attention of a block as given */
	static const struct { const char *name; double expert, attn; } shapes[] = {
		{ "DeepSeek-V3-sized (expert 7168 x 2048 x 3, attention 0.36 GB)",
		  3.0 * 7168 * 2048 * 2, 0.36e9 },
		{ "small (expert 2048 x 768 x 3, attention 0.04 GB)", 3.0 * 2048 * 768 * 2, 0.04e9 },
	};
	for (unsigned s = 0; s < 2; s++) {
		double bytes = MOE_BLOCKS * (shapes[s].attn + MOE_TOPK * shapes[s].expert);
		double link_us = bytes / (link_gbps * 1e9) * 1e6;
		printf("  %-60s %6.2f GB a forward, %9.0f us at %.1f GB/s: predictor %.3f%% of it\n",
		       shapes[s].name, bytes / 1e9, link_us, link_gbps, 100 * us_forward / link_us);
	}
	if (sink == 42)
		puts("");
}

/* What the predictions are worth on the same trace: the host tier's hits
 * in `wsp_simulate` (every layer observed; small experts, the attention
 * 0.04 GB) under LRU, the predictive policy and Belady's offline rule, for
 * tiers of half a forward's bytes to a quarter of the model.  The floor a
 * change that makes the walk cheaper must keep (only Belady knows which
 * experts the next forward takes). */
static void moe_quality(void)
{
	enum { FORWARDS = 12 };
	const uint32_t n = moe_attn(MOE_BLOCKS) + 1, per = 2 + MOE_BLOCKS * (1 + MOE_TOPK);
	uint32_t *trace = malloc(sizeof(*trace) * FORWARDS * per);
	uint64_t *bytes = malloc(sizeof(*bytes) * n), rng = 7, len = 0, model = 0;
	if (!trace || !bytes)
		exit(1);
	for (unsigned f = 0; f < FORWARDS; f++)
		len += moe_forward(trace + len, &rng);
	for (uint32_t l = 0; l < n; l++) {
		bytes[l] = is_expert(l) ? 3ull * 2048 * 768 * 2 : 40000000;
		model += bytes[l];
	}
	uint64_t forward = MOE_BLOCKS * (40000000 + MOE_TOPK * 3ull * 2048 * 768 * 2);
	const struct { const char *name; uint64_t bytes; } tiers[] = {
		{ "half a forward", forward / 2 }, { "a forward", forward },
		{ "two forwards", 2 * forward }, { "10% of the model", model / 10 },
		{ "25% of the model", model / 4 },
	};
	printf("\nhost-tier hits on that trace (%u forwards, every layer observed, small experts; "
	       "wsp_simulate):\n%-18s %8s %8s %8s\n", FORWARDS, "tier", "LRU", "PREDICT", "BELADY");
	for (unsigned t = 0; t < sizeof(tiers) / sizeof(tiers[0]); t++) {
		struct wsp_sim_result r[3];
		for (int pol = 0; pol < 3; pol++)
			if (wsp_simulate(bytes, n, trace, len, tiers[t].bytes, (enum wsp_sim_policy)pol,
					 &r[pol]) < 0)
				exit(1);
		printf("%-18s %7.2f%% %7.2f%% %7.2f%%\n", tiers[t].name,
		       100.0 * r[WSP_SIM_LRU].hits / len, 100.0 * r[WSP_SIM_PREDICT].hits / len,
		       100.0 * r[WSP_SIM_BELADY].hits / len);
	}
	free(trace);
	free(bytes);
}

int main(int argc, char **argv)
{
	static const uint32_t sizes[] = {32, 128, 512, 2048};
	setvbuf(stdout, NULL, _IOLBF, 0);
	double link_gbps = 55;
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--link-gbps"))
			link_gbps = atof(argv[i + 1]);
	if (!(link_gbps > 0)) {
		fprintf(stderr, "predict_bench: --link-gbps must be a positive number\n");
		return 2;
	}
	if (argc > 1 && !strcmp(argv[1], "--moe")) {
		moe(link_gbps, 0);
		moe(link_gbps, 1);
		moe_quality();
		return 0;
	}
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
	if (!growth_only) {
		moe(link_gbps, 0);
		moe(link_gbps, 1);
	}
	return 0;
}
