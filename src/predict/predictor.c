/*
 * Execution-order predictor.
 *
 * Model: the next acquired layer depends on the last two (order 2), falling
 * back to the last one (order 1), falling back to the current stride (pack
 * order when nothing is known: current + 1, wrapping to 0).  Each context keeps a few successors with a count and the
 * time it was last seen; the prediction is the most frequent successor, ties
 * going to the most recent.  Order 2 is what tells a forward pass from a
 * backward one (1 after 0 vs. 1 after 2) and what makes a repeated layer at a
 * turnaround (..., 6, 7, 7, 6, ...) predictable.
 *
 * Memory is bounded by n_layers: order-1 contexts are an array indexed by the
 * layer, order-2 contexts live in a set-associative table with
 * pow2 >= 2 * n_layers sets of CTX2_WAYS ways, replacing the least recently
 * seen way of a full set.  Each context holds at most SUCC_WAYS successors; a new
 * one replaces the weakest (lowest count, then oldest).
 *
 * Eviction asks predictor_distance() once per candidate, so the predicted
 * walk (2 * n_layers steps from the current state) is computed once after
 * each observation, lazily, into per-layer distances and the order of first
 * appearance; lookups are then O(1).  A walk costs O(its steps), not
 * O(layers): the per-layer results carry the walk's epoch, and a layer
 * whose stamp is older reads as not on the walk.  A certain walk is kept
 * across the observations that follow it (exactly); a long uncertain one
 * (routing: a MoE) is read from where the observations since have reached
 * until they number 1 / UNCERTAIN_STEPS_PER_WALK of its steps (an
 * approximation), so that an observation pays about that many steps of
 * walking, whatever the layer count.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL   /* an 8-byte key per step of the walk: inline it */
#include <xxhash.h>

#include "common/util.h"
#include "predict/predict.h"

#define NONE UINT32_MAX
#define EMPTY_KEY UINT64_MAX
#define SUCC_WAYS 4
#define CTX2_WAYS 8
/* When a count reaches this, the context's counts are halved, so that a
 * change of workload overturns an old habit in bounded time. */
#define COUNT_MAX 256u
/* Layer indices fit in 32 bits with room for NONE; bound the tables anyway
 * so their sizes cannot overflow on any host. */
#define PREDICT_MAX_LAYERS (1u << 24)
/* An uncertain walk (routing that varies: MoE) is walked afresh at every
 * query.  It usually stops within one predicted pass, where it comes back
 * to a state it was in (walk()); this bounds it where that takes longer:
 * far beyond any look-ahead the pager asks for.  Layers past it read as
 * never needed (bench/predict_bench --moe: a 15 000-layer MoE trace). */
#define UNCERTAIN_HORIZON 4096u
/* A long uncertain walk (a MoE's forward: hundreds of steps, its routed
 * steps guesses) is walked again after one observation per this many of
 * its steps, not after each: in between, queries read it from the step
 * the observations have reached (aged_distance).  So the walking an
 * observation pays is about this many steps whatever the layer count,
 * and a short walk (a few branches) is still walked after each. */
#define UNCERTAIN_STEPS_PER_WALK 32u
/* Alternatives of the walk less likely than this are not walked: their
 * layers read as reached through the main walk, or never. */
#define ALT_MASS_MIN 1e-4

struct succ {
	uint32_t layer;    /* NONE: unused */
	uint32_t count;
	uint64_t stamp;    /* observation clock when last seen */
};

struct ctx {
	struct succ s[SUCC_WAYS];
};

/* A layer's place on the current walk; the fields mean something only
 * while stamp is the walk's epoch (on_walk()), else the layer is not on it. */
struct on_walk {
	uint32_t stamp;
	uint64_t main_step;   /* first step of the main walk, or NEVER */
	uint64_t last_step;   /* last step of the main walk, 0: none */
	uint64_t dist;        /* the distance that queries answer */
	double alt_dist;      /* best distance on an alternative, or HUGE_VAL */
};

struct predictor {
	pthread_mutex_t lock;
	uint32_t n;
	uint32_t prev, cur;        /* the last two observed layers, NONE before */
	uint64_t clock;            /* observations so far */
	struct ctx *o1;            /* n contexts */
	/* Order-2 contexts, (set_mask + 1) * CTX2_WAYS ways as parallel arrays:
	 * a set's keys share one cache line, so a lookup (once per step of the
	 * walk) touches that line and the one context it finds. */
	uint64_t *o2_key;          /* prev << 32 | cur; EMPTY_KEY: unused way */
	uint64_t *o2_stamp;        /* last use, for replacement within the set */
	struct ctx *o2_ctx;
	uint32_t set_mask;
	/* The cached walk, valid unless dirty. */
	bool dirty;
	uint32_t epoch;            /* of the current walk; 0 never is one */
	struct on_walk *lw;        /* per layer: where it is on the walk */
	uint32_t *touched;         /* the layers whose place is of this epoch */
	uint32_t n_touched;
	uint32_t *order;           /* distinct layers in order of first appearance */
	uint32_t n_order;
	/* Scratch of the walk, per step 1 .. 2 * n (index 0 unused). */
	uint32_t *w_cur, *w_layer;       /* state before the step, layer predicted */
	const struct ctx **w_ctx;        /* context the prediction came from */
	double *w_prob, *w_after;        /* path probability before / after */
	double *merge;                   /* mass of alternatives merging here */
	/* A certain walk (every step taken with probability 1, no alternative:
	 * repeated passes, and the first pass, walked by stride) is kept across
	 * the observations that follow it: `shift` of its steps have happened
	 * since it was computed and one step is added at its end for each, so
	 * it always reaches 2 * n steps ahead; steps are absolute and kept in
	 * the w_ arrays modulo their size (at()).  A layer's distance is then
	 * main_step - shift; w_next (per step: the next step of the same
	 * layer, 0: none) and last_step move first steps on as steps are
	 * taken and added.  So a pass costs O(layers), not O(layers^2). */
	bool certain, keep_walks, age_walks;
	uint32_t aged;                   /* observations since an uncertain walk */
	uint64_t walks, walked;          /* walks made, their main steps: for tests */
	uint64_t steps, shift;
	uint64_t *w_next;
	uint64_t bytes;                  /* all of the above, for predictor_bytes */
};

static void ctx_clear(struct ctx *c)
{
	for (unsigned i = 0; i < SUCC_WAYS; i++)
		c->s[i] = (struct succ){ .layer = NONE };
}

/* Is a a better prediction than b: more frequent, then more recent. */
static bool succ_better(const struct succ *a, const struct succ *b)
{
	if (a->count != b->count)
		return a->count > b->count;
	return a->stamp > b->stamp;
}

static void ctx_add(struct ctx *c, uint32_t layer, uint64_t stamp)
{
	struct succ *slot = NULL;

	for (unsigned i = 0; i < SUCC_WAYS; i++) {
		if (c->s[i].layer == layer) {
			slot = &c->s[i];
			break;
		}
	}
	if (!slot) {
		/* An empty way, else the weakest successor gives way. */
		for (unsigned i = 0; i < SUCC_WAYS; i++) {
			struct succ *s = &c->s[i];
			if (s->layer == NONE) {
				slot = s;
				break;
			}
			if (!slot || succ_better(slot, s))
				slot = s;
		}
		*slot = (struct succ){ .layer = layer, .count = 0 };
	}
	slot->count++;
	slot->stamp = stamp;
	if (slot->count >= COUNT_MAX) {
		for (unsigned i = 0; i < SUCC_WAYS; i++)
			if (c->s[i].layer != NONE)
				c->s[i].count = (c->s[i].count + 1) / 2;
	}
}

static uint32_t ctx_best(const struct ctx *c)
{
	const struct succ *best = NULL;

	for (unsigned i = 0; i < SUCC_WAYS; i++) {
		if (c->s[i].layer == NONE)
			continue;
		if (!best || succ_better(&c->s[i], best))
			best = &c->s[i];
	}
	return best ? best->layer : NONE;
}

static size_t ctx2_set(const struct predictor *p, uint64_t key)
{
	uint64_t h = XXH3_64bits(&key, sizeof(key));
	return (size_t)(h & p->set_mask) * CTX2_WAYS;
}

static struct ctx *ctx2_find(struct predictor *p, uint32_t prev, uint32_t cur)
{
	uint64_t key = (uint64_t)prev << 32 | cur;
	size_t set = ctx2_set(p, key);

	for (size_t i = set; i < set + CTX2_WAYS; i++)
		if (p->o2_key[i] == key)
			return &p->o2_ctx[i];
	return NULL;
}

/* The context for (prev, cur), created in place of the least recently used
 * way of its set when absent (*replaced: another state's context gave way);
 * its stamp is refreshed. */
static struct ctx *ctx2_get(struct predictor *p, uint32_t prev, uint32_t cur, bool *replaced)
{
	uint64_t key = (uint64_t)prev << 32 | cur;
	size_t set = ctx2_set(p, key), way = SIZE_MAX;

	for (size_t i = set; i < set + CTX2_WAYS; i++)
		if (p->o2_key[i] == key)
			way = i;
	for (size_t i = set; way == SIZE_MAX && i < set + CTX2_WAYS; i++) {
		if (p->o2_key[i] == EMPTY_KEY) {
			way = i;
			break;
		}
	}
	if (way == SIZE_MAX) {
		way = set;
		for (size_t i = set + 1; i < set + CTX2_WAYS; i++)
			if (p->o2_stamp[i] < p->o2_stamp[way])
				way = i;
	}
	*replaced = p->o2_key[way] != key && p->o2_key[way] != EMPTY_KEY;
	if (p->o2_key[way] != key) {
		p->o2_key[way] = key;
		ctx_clear(&p->o2_ctx[way]);
	}
	p->o2_stamp[way] = p->clock;
	return &p->o2_ctx[way];
}

/* The predicted successor of the state (prev, cur) in *next; returns the
 * context it came from (its other successors are the alternatives), or NULL
 * for a guess from the stride or pack order. */
static const struct ctx *predict_step(struct predictor *p, uint32_t prev, uint32_t cur,
				      uint32_t *next)
{
	const struct ctx *c1;

	if (cur == NONE) {
		*next = 0;
		return NULL;
	}
	if (prev != NONE) {
		const struct ctx *c2 = ctx2_find(p, prev, cur);
		if (c2 && (*next = ctx_best(c2)) != NONE)
			return c2;
	}
	/* Order 1 says what followed `cur` in some other context.  If that is
	 * where we just came from, it most likely was learned walking the
	 * other way (the first backward pass after forward ones): keep the
	 * current stride instead of predicting a bounce. */
	c1 = &p->o1[cur];
	*next = ctx_best(c1);
	if (*next != NONE && *next != prev)
		return c1;
	if (prev != NONE && prev != cur) {
		int64_t stride = (int64_t)cur - (int64_t)prev, to = (int64_t)cur + stride;
		if (to >= 0 && to < (int64_t)p->n) {
			*next = (uint32_t)to;
			return NULL;
		}
	}
	if (*next != NONE)
		return c1;
	*next = cur + 1 < p->n ? cur + 1 : 0;
	return NULL;
}

static uint32_t ctx_total(const struct ctx *c)
{
	uint32_t total = 0;

	for (unsigned i = 0; i < SUCC_WAYS; i++)
		if (c->s[i].layer != NONE)
			total += c->s[i].count;
	return total;
}

/* A distance scaled by the probability of getting there, in whole acquires. */
static double scaled(uint64_t step, double prob)
{
	return (double)step / (prob > 1.0 ? 1.0 : prob);
}

static uint64_t to_distance(double d)
{
	if (!(d < 1e18))
		return PREDICT_NEVER - 1;
	return (uint64_t)ceil(d - 1e-9);
}

/* The layer's place on the current walk, made fresh (not on it) the first
 * time the walk touches it. */
static struct on_walk *on_walk(struct predictor *p, uint32_t layer)
{
	struct on_walk *w = &p->lw[layer];
	if (w->stamp != p->epoch) {
		*w = (struct on_walk){ .stamp = p->epoch, .main_step = PREDICT_NEVER,
				       .dist = PREDICT_NEVER, .alt_dist = HUGE_VAL };
		p->touched[p->n_touched++] = layer;
	}
	return w;
}

/* The layer's first step on the main walk, or NEVER; touches nothing. */
static uint64_t main_step(const struct predictor *p, uint32_t layer)
{
	const struct on_walk *w = &p->lw[layer];
	return w->stamp == p->epoch ? w->main_step : PREDICT_NEVER;
}

/* A new walk: every layer's place is forgotten at once. */
static void new_epoch(struct predictor *p)
{
	if (++p->epoch == 0) {   /* wrapped: old stamps could read as current */
		for (uint32_t i = 0; i < p->n; i++)
			p->lw[i].stamp = 0;
		p->epoch = 1;
	}
}

/* Was the walk in the state (prev, cur) after a step before `before`
 * (the step that brought it there)?  The steps that reached cur are
 * chained through w_next. */
static bool state_seen(const struct predictor *p, uint32_t prev, uint32_t cur, uint64_t before)
{
	if (cur == NONE)
		return false;
	for (uint64_t t = main_step(p, cur); t < before; t = p->w_next[t] ? p->w_next[t] : PREDICT_NEVER)
		if (p->w_cur[t] == prev)
			return true;
	return false;
}

/*
 * Alternatives of the walk's branch points.  At step s the walk took the
 * most frequent successor; each other successor x of that context is taken
 * with probability mass = P(path up to s) * count(x) / total.  Its own walk
 * gives its layers the distance (step / mass), until it reaches a layer the
 * main walk visits after s: there the branches merge, and the main walk's
 * layers from that step on are reached with the mass added back.  The total
 * alternative steps are bounded by the horizon, and an alternative less
 * likely than ALT_MASS_MIN is not walked.
 */
static void walk_alternatives(struct predictor *p, uint64_t steps, uint64_t horizon)
{
	uint64_t budget = horizon;

	for (uint64_t s = 1; s <= steps && budget > 0; s++) {
		/* An alternative's mass is at most the path's, which only falls
		 * along the walk: from here on every one is below the cut. */
		if (p->w_prob[s] < ALT_MASS_MIN)
			break;
		const struct ctx *c = p->w_ctx[s];
		uint32_t total;
		if (!c || (total = ctx_total(c)) == 0)
			continue;
		for (unsigned i = 0; i < SUCC_WAYS && budget > 0; i++) {
			uint32_t prev = p->w_cur[s], cur = c->s[i].layer;
			double mass = p->w_prob[s] * c->s[i].count / total;
			if (cur == NONE || cur == p->w_layer[s] || mass < ALT_MASS_MIN)
				continue;
			for (uint64_t k = s; k < s + horizon && budget > 0; k++, budget--) {
				struct on_walk *w = on_walk(p, cur);
				uint64_t m = w->main_step;
				double d = scaled(k, mass);
				uint32_t next;
				if (d < w->alt_dist)
					w->alt_dist = d;
				if (m != PREDICT_NEVER && m > s) {
					p->merge[m] += mass;
					break;
				}
				predict_step(p, prev, cur, &next);
				prev = cur;
				cur = next;
			}
		}
	}
}

/*
 * The predicted walk: from the current state follow the most likely
 * successor for 2 * n_layers steps.  predictor_next() is the order of first
 * appearance; a layer's distance is its first step, divided by the
 * probability that the walk gets there (1 for what has always happened, less
 * after a branch whose outcome varies, back up where the branches merge), so
 * that eviction prefers to keep what is certain.  Layers seen only on an
 * alternative branch get a distance too (see walk_alternatives).
 */
static void walk(struct predictor *p)
{
	p->walks++;
	uint64_t horizon = 2 * (uint64_t)p->n, steps = 0;
	uint32_t prev = p->prev, cur = p->cur;
	double prob = 1.0, merged = 0.0;

	new_epoch(p);
	p->n_touched = 0;
	p->n_order = 0;
	/* Once every layer has its first step the rest of the walk changes no
	 * distance; a certain walk goes on to the horizon all the same, so
	 * that it can be kept while up to n_layers observations follow it.
	 * An uncertain one also stops where it comes back to a state it was
	 * in: a step depends on the state alone, so from there the walk
	 * repeats itself and brings no layer nearer (one forward of a MoE,
	 * not UNCERTAIN_HORIZON steps). */
	for (uint64_t step = 1; step <= horizon && (p->n_order < p->n || prob == 1.0) &&
	     (prob == 1.0 || (step <= UNCERTAIN_HORIZON && !state_seen(p, prev, cur, step - 1))); step++) {
		uint32_t next;
		const struct ctx *c = predict_step(p, prev, cur, &next);
		p->w_cur[step] = cur;
		p->w_layer[step] = next;
		p->w_ctx[step] = c;
		p->w_prob[step] = prob;
		p->merge[step] = 0.0;
		p->w_next[step] = 0;
		if (c) {
			uint32_t total = ctx_total(c);
			for (unsigned i = 0; i < SUCC_WAYS; i++)
				if (c->s[i].layer == next && total > 0)
					prob *= (double)c->s[i].count / total;
		}
		p->w_after[step] = prob;
		struct on_walk *w = on_walk(p, next);
		if (w->main_step == PREDICT_NEVER) {
			w->main_step = step;
			p->order[p->n_order++] = next;
		} else {
			p->w_next[w->last_step] = step;
		}
		w->last_step = step;
		prev = cur;
		cur = next;
		steps = step;
	}
	walk_alternatives(p, steps, prob == 1.0 ? horizon : WSP_MIN(horizon, UNCERTAIN_HORIZON));
	p->walked += steps;
	p->steps = steps;
	p->shift = 0;
	p->certain = prob == 1.0;
	for (uint32_t i = 0; i < p->n_touched && p->certain; i++)
		p->certain = !(p->lw[p->touched[i]].alt_dist < HUGE_VAL);
	for (uint64_t step = 1; step <= steps; step++) {
		struct on_walk *w = &p->lw[p->w_layer[step]];
		merged += p->merge[step];
		if (w->main_step == step)
			w->dist = to_distance(scaled(step, p->w_after[step] + merged));
	}
	for (uint32_t i = 0; i < p->n_touched; i++) {
		struct on_walk *w = &p->lw[p->touched[i]];
		if (w->alt_dist < HUGE_VAL) {
			uint64_t d = to_distance(w->alt_dist);
			if (d < w->dist)
				w->dist = d;
		}
	}
	p->aged = 0;
	p->dirty = false;
}

/* Bring the walk up to date for a query (under the lock). */
static void walk_if_stale(struct predictor *p)
{
	if (p->dirty)
		walk(p);
}

/* On an uncertain walk `aged` observations old: a layer's distance from
 * the step they reached.  One the walk met before that step is read at
 * its next step on the walk (without the alternatives' or merges' share),
 * or as never. */
static uint64_t aged_distance(const struct predictor *p, uint32_t layer)
{
	const struct on_walk *w = &p->lw[layer];
	if (w->stamp != p->epoch)
		return PREDICT_NEVER;
	if (w->main_step == PREDICT_NEVER || w->main_step > p->aged)
		return w->dist > p->aged ? w->dist - p->aged : 1;
	uint64_t t = w->main_step;
	while (t <= p->aged && p->w_next[t])
		t = p->w_next[t];
	return t > p->aged ? to_distance(scaled(t - p->aged, p->w_after[t])) : PREDICT_NEVER;
}

static uint64_t distance_now(const struct predictor *p, uint32_t layer)
{
	if (!p->certain)
		return p->aged ? aged_distance(p, layer) :
		       p->lw[layer].stamp == p->epoch ? p->lw[layer].dist : PREDICT_NEVER;
	uint64_t m = main_step(p, layer);
	return m == PREDICT_NEVER ? PREDICT_NEVER : m - p->shift;
}

static void reset_locked(struct predictor *p)
{
	size_t n2 = (size_t)(p->set_mask + 1) * CTX2_WAYS;

	p->prev = p->cur = NONE;
	p->clock = 0;
	for (uint32_t i = 0; i < p->n; i++)
		ctx_clear(&p->o1[i]);
	for (size_t i = 0; i < n2; i++) {
		p->o2_key[i] = EMPTY_KEY;
		p->o2_stamp[i] = 0;
		ctx_clear(&p->o2_ctx[i]);
	}
	p->dirty = true;
}

static void free_arrays(struct predictor *p)
{
	free(p->o1);
	free(p->o2_key);
	free(p->o2_stamp);
	free(p->o2_ctx);
	free(p->lw);
	free(p->touched);
	free(p->order);
	free(p->w_cur);
	free(p->w_layer);
	free(p->w_ctx);
	free(p->w_prob);
	free(p->w_after);
	free(p->merge);
	free(p->w_next);
	free(p);
}

int predictor_create(uint32_t n_layers, struct predictor **out)
{
	struct predictor *p;
	uint32_t sets = 1;
	size_t steps;

	*out = NULL;
	if (n_layers == 0)
		return -EINVAL;
	if (n_layers > PREDICT_MAX_LAYERS)
		return WSP_ETOOBIG;
	/* Forward+backward needs 2 contexts per layer, branches a few more:
	 * >= 2n sets of 8 ways keeps the chance of a full set negligible. */
	while (sets < 2 * n_layers)
		sets <<= 1;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->n = n_layers;
	p->set_mask = sets - 1;
	p->keep_walks = true;
	p->age_walks = true;
	p->o1 = calloc(n_layers, sizeof(*p->o1));
	p->o2_key = calloc((size_t)sets * CTX2_WAYS, sizeof(*p->o2_key));
	p->o2_stamp = calloc((size_t)sets * CTX2_WAYS, sizeof(*p->o2_stamp));
	p->o2_ctx = calloc((size_t)sets * CTX2_WAYS, sizeof(*p->o2_ctx));
	p->lw = calloc(n_layers, sizeof(*p->lw));
	p->touched = calloc(n_layers, sizeof(*p->touched));
	p->order = calloc(n_layers, sizeof(*p->order));
	steps = 2 * (size_t)n_layers + 1;
	p->w_cur = calloc(steps, sizeof(*p->w_cur));
	p->w_layer = calloc(steps, sizeof(*p->w_layer));
	p->w_ctx = calloc(steps, sizeof(*p->w_ctx));
	p->w_prob = calloc(steps, sizeof(*p->w_prob));
	p->w_after = calloc(steps, sizeof(*p->w_after));
	p->merge = calloc(steps, sizeof(*p->merge));
	p->w_next = calloc(steps, sizeof(*p->w_next));
	if (!p->w_next || !p->o1 || !p->o2_key || !p->o2_stamp || !p->o2_ctx || !p->lw ||
	    !p->touched || !p->order ||
	    !p->w_cur || !p->w_layer || !p->w_ctx || !p->w_prob || !p->w_after || !p->merge ||
	    pthread_mutex_init(&p->lock, NULL) != 0) {
		free_arrays(p);
		return -ENOMEM;
	}
	p->bytes = sizeof(*p) +
		   n_layers * (uint64_t)(sizeof(*p->o1) + sizeof(*p->lw) + sizeof(*p->touched) +
					 sizeof(*p->order)) +
		   (uint64_t)sets * CTX2_WAYS * (sizeof(*p->o2_key) + sizeof(*p->o2_stamp) +
						 sizeof(*p->o2_ctx)) +
		   steps * (uint64_t)(sizeof(*p->w_cur) + sizeof(*p->w_layer) + sizeof(*p->w_ctx) +
				      sizeof(*p->w_prob) + sizeof(*p->w_after) + sizeof(*p->merge) +
				      sizeof(*p->w_next));
	reset_locked(p);
	*out = p;
	return 0;
}

void predictor_free(struct predictor *p)
{
	if (!p)
		return;
	pthread_mutex_destroy(&p->lock);
	free_arrays(p);
}

void predictor_reset(struct predictor *p)
{
	pthread_mutex_lock(&p->lock);
	reset_locked(p);
	pthread_mutex_unlock(&p->lock);
}

/* Where absolute step s of a kept walk lies in the w_ arrays. */
static inline uint64_t at(const struct predictor *p, uint64_t s)
{
	return s % (2 * (uint64_t)p->n + 1);
}

/* The step that would be taken from the state (prev, cur), if it is
 * certain: its layer in *next, else false. */
static bool certain_step(struct predictor *p, uint32_t prev, uint32_t cur, uint32_t *next)
{
	const struct ctx *c = predict_step(p, prev, cur, next);
	if (c)
		for (unsigned i = 0; i < SUCC_WAYS; i++)
			if (c->s[i].layer == *next && c->s[i].count != ctx_total(c))
				return false;
	return true;
}

/* After the contexts of state `cur` learnt a successor: does the kept walk
 * still hold?  Every later step taken from `cur` (the steps after its
 * occurrences, found through w_next) is predicted again: the same layer,
 * with certainty.  Under the lock. */
static bool walk_still_holds(struct predictor *p, uint32_t cur)
{
	for (uint64_t t = main_step(p, cur); t != PREDICT_NEVER && t < p->steps;
	     t = p->w_next[at(p, t)] ? p->w_next[at(p, t)] : PREDICT_NEVER) {
		uint32_t next;
		if (!certain_step(p, p->w_cur[at(p, t)], cur, &next) ||
		    next != p->w_layer[at(p, t + 1)])
			return false;
	}
	return true;
}

/* Take the kept walk's next step (it happened) and add one at its end, so
 * that it still reaches 2 * n steps ahead; false when that step is not
 * certain (the walk is then made again). */
static bool walk_advance(struct predictor *p, uint32_t layer)
{
	uint64_t s = ++p->shift, end = p->steps + 1;
	uint64_t next_step = p->w_next[at(p, s)];
	struct on_walk *w = on_walk(p, layer);
	w->main_step = next_step ? next_step : PREDICT_NEVER;
	if (w->last_step == s)
		w->last_step = 0;
	uint32_t next;
	if (!certain_step(p, p->w_cur[at(p, p->steps)], p->w_layer[at(p, p->steps)], &next))
		return false;
	p->w_cur[at(p, end)] = p->w_layer[at(p, p->steps)];
	p->w_layer[at(p, end)] = next;
	p->w_next[at(p, end)] = 0;
	struct on_walk *wn = on_walk(p, next);
	if (wn->last_step)
		p->w_next[at(p, wn->last_step)] = end;
	else
		wn->main_step = end;
	wn->last_step = end;
	p->steps = end;
	return true;
}

void predictor_observe(struct predictor *p, uint32_t layer)
{
	if (layer >= p->n)
		return;   /* callers validate; a stray index must not corrupt the tables */
	pthread_mutex_lock(&p->lock);
	/* A certain walk that predicted this layer is kept when what the
	 * contexts learn now changes none of its steps (checked where it
	 * passes the state learnt) and no other state's context gave way. */
	bool keep = p->keep_walks && !p->dirty && p->certain && p->shift < p->steps &&
		    p->w_layer[at(p, p->shift + 1)] == layer;
	p->clock++;
	if (p->cur != NONE) {
		ctx_add(&p->o1[p->cur], layer, p->clock);
		if (p->prev != NONE) {
			bool replaced;
			ctx_add(ctx2_get(p, p->prev, p->cur, &replaced), layer, p->clock);
			keep = keep && !replaced;
		}
	}
	keep = keep && walk_advance(p, layer) && (p->cur == NONE || walk_still_holds(p, p->cur));
	p->prev = p->cur;
	p->cur = layer;
	if (!keep && p->age_walks && !p->dirty && !p->certain &&
	    p->aged + 1 < p->steps / UNCERTAIN_STEPS_PER_WALK)
		p->aged++;
	else if (!keep)
		p->dirty = true;
	pthread_mutex_unlock(&p->lock);
}

unsigned predictor_next(struct predictor *p, uint32_t *out, unsigned k)
{
	unsigned n = 0;

	pthread_mutex_lock(&p->lock);
	walk_if_stale(p);
	if (p->certain) {
		/* first appearances from now on: the steps where a layer's
		 * first step lies */
		for (uint64_t s = p->shift + 1; s <= p->steps && n < k; s++)
			if (main_step(p, p->w_layer[at(p, s)]) == s)
				out[n++] = p->w_layer[at(p, s)];
	} else {   /* first appearances after the steps already taken */
		for (uint32_t i = 0; i < p->n_order && n < k; i++)
			if (main_step(p, p->order[i]) > p->aged)
				out[n++] = p->order[i];
	}
	pthread_mutex_unlock(&p->lock);
	return n;
}

uint64_t predictor_distance(struct predictor *p, uint32_t layer)
{
	uint64_t d;

	if (layer >= p->n)
		return PREDICT_NEVER;
	pthread_mutex_lock(&p->lock);
	walk_if_stale(p);
	d = distance_now(p, layer);
	pthread_mutex_unlock(&p->lock);
	return d;
}

void predictor_distances(struct predictor *p, const uint32_t *layers, uint64_t *out, unsigned n)
{
	pthread_mutex_lock(&p->lock);
	walk_if_stale(p);
	for (unsigned i = 0; i < n; i++)
		out[i] = layers[i] < p->n ? distance_now(p, layers[i]) : PREDICT_NEVER;
	pthread_mutex_unlock(&p->lock);
}

uint64_t predictor_bytes(const struct predictor *p)
{
	return p ? p->bytes : 0;
}

uint64_t predictor_walk_count(struct predictor *p, uint64_t *main_steps)
{
	pthread_mutex_lock(&p->lock);
	uint64_t n = p->walks;
	if (main_steps)
		*main_steps = p->walked;
	pthread_mutex_unlock(&p->lock);
	return n;
}

void predictor_keep_walks(struct predictor *p, bool keep)
{
	pthread_mutex_lock(&p->lock);
	p->keep_walks = keep;
	pthread_mutex_unlock(&p->lock);
}

void predictor_age_walks(struct predictor *p, bool age)
{
	pthread_mutex_lock(&p->lock);
	p->age_walks = age;
	pthread_mutex_unlock(&p->lock);
}
