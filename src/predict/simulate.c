/*
 * wsp_simulate(): replay a trace of layer accesses against a host cache of
 * a byte budget, without disk or GPU.
 *
 * Rules (the same for every policy unless said otherwise):
 * - An access to a resident layer is a hit.  Any other access is a miss and
 *   costs the layer's bytes read from disk.
 * - A layer larger than the whole cache is always a miss and never cached.
 * - A missed layer that fits in the free space is always inserted.
 * - Otherwise victims are planned with evict_plan() (the pager's own code):
 *   LRU evicts least recently used first and always inserts.
 *   PREDICT asks the pager's predictor, fed with the trace as it goes (the
 *   access is observed before the miss is handled, as wsp_acquire does), for
 *   each resident layer's distance and evicts the furthest first.
 *   BELADY uses the true distance to the next use (one backward pass over the
 *   trace) and the same rule; with equal sizes this is the offline optimum,
 *   with varied sizes it is a heuristic (the optimum is NP-hard).
 * - Admission (PREDICT and BELADY): a resident layer needed sooner than the
 *   incoming one is never evicted for it; if room can only be made that way
 *   the incoming layer is used and not cached (bypass).  This is what the
 *   pager's prefetch does, and what makes Belady optimal on cyclic scans,
 *   where caching the layer just read would push out one needed sooner.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "predict/predict.h"
#include "wspager.h"

struct sim {
	const uint64_t *bytes;
	uint32_t n;
	uint64_t cache, used;
	enum wsp_sim_policy policy;
	struct predictor *pred;
	bool *resident;
	uint64_t *last_use;
	uint64_t *next_use;        /* BELADY: per layer, the index of its next access */
	uint32_t *list;            /* resident layers, unordered */
	uint32_t *pos;             /* index of a resident layer in list */
	uint32_t n_list;
	struct evict_cand *cand;
	uint64_t *cand_bytes;
	uint32_t *cand_layer;
	uint64_t *cand_dist;
};

static void sim_free(struct sim *s)
{
	predictor_free(s->pred);
	free(s->resident);
	free(s->last_use);
	free(s->next_use);
	free(s->list);
	free(s->pos);
	free(s->cand);
	free(s->cand_bytes);
	free(s->cand_layer);
	free(s->cand_dist);
}

static int sim_init(struct sim *s)
{
	uint32_t n = s->n;

	/* The predictor first: it refuses sizes it cannot index. */
	if (s->policy == WSP_SIM_PREDICT) {
		int rc = predictor_create(n, &s->pred);
		if (rc < 0)
			return rc;
	}
	s->resident = calloc(n, sizeof(*s->resident));
	s->last_use = calloc(n, sizeof(*s->last_use));
	s->next_use = calloc(n, sizeof(*s->next_use));
	s->list = calloc(n, sizeof(*s->list));
	s->pos = calloc(n, sizeof(*s->pos));
	s->cand = calloc(n, sizeof(*s->cand));
	s->cand_bytes = calloc(n, sizeof(*s->cand_bytes));
	s->cand_layer = calloc(n, sizeof(*s->cand_layer));
	s->cand_dist = calloc(n, sizeof(*s->cand_dist));
	if (!s->resident || !s->last_use || !s->next_use || !s->list || !s->pos ||
	    !s->cand || !s->cand_bytes || !s->cand_layer || !s->cand_dist)
		return -ENOMEM;
	return 0;
}

static void sim_insert(struct sim *s, uint32_t layer)
{
	s->resident[layer] = true;
	s->pos[layer] = s->n_list;
	s->list[s->n_list++] = layer;
	s->used += s->bytes[layer];
}

static void sim_evict(struct sim *s, uint32_t layer)
{
	uint32_t last = s->list[--s->n_list];

	s->list[s->pos[layer]] = last;
	s->pos[last] = s->pos[layer];
	s->resident[layer] = false;
	s->used -= s->bytes[layer];
}

/* Distance of `layer`'s next use as seen at access t (BELADY). */
static uint64_t belady_distance(const struct sim *s, uint32_t layer, uint64_t t)
{
	uint64_t nu = s->next_use[layer];
	return nu == PREDICT_NEVER ? PREDICT_NEVER : nu - t;
}

/* Handle a miss of `layer` at access t: insert it, evicting as planned, or
 * bypass the cache. */
static void sim_miss(struct sim *s, uint32_t layer, uint64_t t)
{
	uint64_t size = s->bytes[layer], need, total, incoming = 0;
	enum wsp_policy pol = s->policy == WSP_SIM_LRU ? WSP_POLICY_LRU : WSP_POLICY_PREDICT;
	unsigned n = s->n_list;
	int victims;

	if (size > s->cache)
		return;
	if (!ckd_add(&total, s->used, size) && total <= s->cache) {
		sim_insert(s, layer);
		s->last_use[layer] = t;
		return;
	}
	need = size - (s->cache - s->used);   /* used <= cache, size <= cache */
	memcpy(s->cand_layer, s->list, (size_t)n * sizeof(*s->cand_layer));
	if (s->policy == WSP_SIM_PREDICT) {
		predictor_distances(s->pred, s->cand_layer, s->cand_dist, n);
		incoming = predictor_distance(s->pred, layer);
	} else if (s->policy == WSP_SIM_BELADY) {
		for (unsigned i = 0; i < n; i++)
			s->cand_dist[i] = belady_distance(s, s->cand_layer[i], t);
		incoming = belady_distance(s, layer, t);
	}
	for (unsigned i = 0; i < n; i++) {
		uint32_t c = s->cand_layer[i];
		s->cand[i] = (struct evict_cand){
			.layer = c,
			.last_use = s->last_use[c],
			.distance = s->policy == WSP_SIM_LRU ? 0 : s->cand_dist[i],
		};
		s->cand_bytes[i] = s->bytes[c];
	}
	victims = evict_plan(pol, s->cand, s->cand_bytes, n, need, incoming);
	if (victims < 0)
		return;   /* bypass */
	for (int i = 0; i < victims; i++)
		sim_evict(s, s->cand[i].layer);
	sim_insert(s, layer);
	s->last_use[layer] = t;
}

int wsp_simulate(const uint64_t *layer_bytes, uint32_t n_layers, const uint32_t *trace,
		 size_t n_trace, uint64_t cache_bytes, enum wsp_sim_policy policy,
		 struct wsp_sim_result *out)
{
	struct sim s = {
		.bytes = layer_bytes, .n = n_layers, .cache = cache_bytes, .policy = policy,
	};
	uint64_t *next_at = NULL;
	int rc;

	if (!out || (n_trace && !trace) || (n_layers && !layer_bytes))
		return -EINVAL;
	if (policy != WSP_SIM_LRU && policy != WSP_SIM_PREDICT && policy != WSP_SIM_BELADY)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	for (size_t t = 0; t < n_trace; t++)
		if (trace[t] >= n_layers)
			return WSP_ENOTFOUND;
	if (n_trace == 0)
		return 0;

	rc = sim_init(&s);
	if (rc < 0)
		goto done;
	if (policy == WSP_SIM_BELADY) {
		/* next_at[t]: the index of the next access to trace[t] after t.
		 * One backward pass, with next_use as the "seen later" table. */
		size_t sz;
		if (ckd_mul(&sz, n_trace, sizeof(*next_at))) {
			rc = WSP_ETOOBIG;
			goto done;
		}
		next_at = malloc(sz);
		if (!next_at) {
			rc = -ENOMEM;
			goto done;
		}
		for (uint32_t i = 0; i < n_layers; i++)
			s.next_use[i] = PREDICT_NEVER;
		for (size_t t = n_trace; t-- > 0;) {
			next_at[t] = s.next_use[trace[t]];
			s.next_use[trace[t]] = t;
		}
	}

	for (size_t t = 0; t < n_trace; t++) {
		uint32_t layer = trace[t];
		out->accesses++;
		if (s.pred)
			predictor_observe(s.pred, layer);
		if (next_at)
			s.next_use[layer] = next_at[t];
		if (s.resident[layer]) {
			out->hits++;
			s.last_use[layer] = t;
			continue;
		}
		out->misses++;
		if (ckd_add(&out->bytes_read, out->bytes_read, layer_bytes[layer])) {
			rc = WSP_ETOOBIG;
			goto done;
		}
		sim_miss(&s, layer, t);
	}
	rc = 0;
done:
	free(next_at);
	sim_free(&s);
	if (rc < 0)
		memset(out, 0, sizeof(*out));
	return rc;
}
