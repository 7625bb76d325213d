/* Trace families shared by the predict tests: repeated passes, forward then
 * backward, and per-batch branches; layer sizes equal or varied.  All are
 * deterministic (a fixed-seed generator), so results can be asserted. */
#ifndef WSP_TESTS_PREDICT_TRACES_H
#define WSP_TESTS_PREDICT_TRACES_H

#include <stdint.h>
#include <stdlib.h>

struct trace {
	uint32_t *at;
	size_t len, cap;
	uint32_t n_layers;
};

static inline void trace_push(struct trace *t, uint32_t layer)
{
	if (t->len == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 256;
		t->at = realloc(t->at, t->cap * sizeof(*t->at));
		if (!t->at)
			abort();
	}
	t->at[t->len++] = layer;
}

static inline void trace_free(struct trace *t)
{
	free(t->at);
	*t = (struct trace){ 0 };
}

static inline uint64_t t_rand(uint64_t *state)
{
	/* splitmix64 */
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* 0..n-1, repeated. */
static inline void trace_passes(struct trace *t, uint32_t n, unsigned passes)
{
	t->n_layers = n;
	for (unsigned p = 0; p < passes; p++)
		for (uint32_t i = 0; i < n; i++)
			trace_push(t, i);
}

/* MoE forwards: an embedding, then per block its attention layer and
 * `topk` of `experts` experts chosen at random (acquired in index order,
 * as a dispatch runs them), then the head. */
static inline void trace_moe(struct trace *t, uint32_t blocks, uint32_t experts, unsigned topk,
			     unsigned forwards, uint64_t seed)
{
	uint8_t *take = malloc(experts);
	if (!take)
		abort();
	t->n_layers = 2 + blocks * (1 + experts);
	for (unsigned pass = 0; pass < forwards; pass++) {
		trace_push(t, 0);
		for (uint32_t b = 0; b < blocks; b++) {
			uint32_t attn = 1 + b * (1 + experts);
			for (uint32_t e = 0; e < experts; e++)
				take[e] = 0;
			trace_push(t, attn);
			for (unsigned k = 0; k < topk;) {
				uint32_t e = (uint32_t)(t_rand(&seed) % experts);
				k += !take[e];
				take[e] = 1;
			}
			for (uint32_t e = 0; e < experts; e++)
				if (take[e])
					trace_push(t, attn + 1 + e);
		}
		trace_push(t, t->n_layers - 1);
	}
	free(take);
}

/* Forward then backward, repeated.  repeat_ends: the turnaround layers are
 * acquired twice (0..n-1, n-1..0, as forward and backward passes do);
 * otherwise once (0..n-1, n-2..1, 0..n-1, ...). */
static inline void trace_fwdbwd(struct trace *t, uint32_t n, unsigned cycles, int repeat_ends)
{
	t->n_layers = n;
	for (unsigned c = 0; c < cycles; c++) {
		for (uint32_t i = 0; i < n; i++)
			trace_push(t, i);
		for (uint32_t i = n; i-- > 0;)
			if (repeat_ends || (i < n - 1 && i > 0))
				trace_push(t, i);
	}
	if (!repeat_ends)
		trace_push(t, 0);
}

/* Per-batch branches: shared layers 0..pre-1, then one of `groups` groups of
 * `gsize` layers (group g is pre + g*gsize ...), then `post` shared layers.
 * The group is drawn per batch with the given weights (NULL: uniform). */
static inline uint32_t branch_layers(uint32_t pre, uint32_t groups, uint32_t gsize, uint32_t post)
{
	return pre + groups * gsize + post;
}

static inline void trace_branches(struct trace *t, uint32_t pre, uint32_t groups, uint32_t gsize,
				  uint32_t post, unsigned batches, const unsigned *weights,
				  uint64_t seed)
{
	unsigned total = 0;

	t->n_layers = branch_layers(pre, groups, gsize, post);
	for (uint32_t g = 0; g < groups; g++)
		total += weights ? weights[g] : 1;
	for (unsigned b = 0; b < batches; b++) {
		unsigned r = (unsigned)(t_rand(&seed) % total);
		uint32_t g = 0;
		while (r >= (weights ? weights[g] : 1)) {
			r -= weights ? weights[g] : 1;
			g++;
		}
		for (uint32_t i = 0; i < pre; i++)
			trace_push(t, i);
		for (uint32_t i = 0; i < gsize; i++)
			trace_push(t, pre + g * gsize + i);
		for (uint32_t i = 0; i < post; i++)
			trace_push(t, pre + groups * gsize + i);
	}
}

/* Layer sizes: equal (1 MiB each), or varied in [0.5, 2] MiB with a large
 * first and last layer (embeddings and head). */
static inline void layer_sizes(uint64_t *bytes, uint32_t n, int varied)
{
	uint64_t seed = 42;

	for (uint32_t i = 0; i < n; i++) {
		bytes[i] = 1u << 20;
		if (varied)
			bytes[i] = (512u << 10) + t_rand(&seed) % (1536u << 10);
	}
	if (varied && n > 2) {
		bytes[0] = 3u << 20;
		bytes[n - 1] = 3u << 20;
	}
}

#endif
