/*
 * Execution-order prediction and the eviction choice that uses it.
 *
 * The predictor watches the sequence of acquired layers and learns successor
 * statistics with a variable-order context (the last two layers, falling back
 * to the last one, falling back to pack order), so repeated passes, forward
 * then backward, and per-batch branches are predicted.  Before anything is
 * observed it predicts pack order (0, 1, 2, ...).
 * All functions are thread-safe (one internal mutex).
 */
#ifndef WSP_PREDICT_PREDICT_H
#define WSP_PREDICT_PREDICT_H

#include <stdbool.h>
#include <stdint.h>
#include "wspager.h"

#define PREDICT_NEVER UINT64_MAX

struct predictor;
int predictor_create(uint32_t n_layers, struct predictor **out);
/* The memory it holds (its tables grow with the layer count). */
uint64_t predictor_bytes(const struct predictor *p);
/* For tests: false makes every observation walk afresh, the oracle a kept
 * walk must answer exactly as (default true). */
void predictor_keep_walks(struct predictor *p, bool keep);
/* For tests: false walks an uncertain walk again after every observation
 * (default true: a long one is walked again after one observation per
 * UNCERTAIN_STEPS_PER_WALK of its steps, and read from where the
 * observations since have reached in between: an approximation). */
void predictor_age_walks(struct predictor *p, bool age);
/* For tests: how many walks it has made, and (when main_steps is not
 * NULL) the steps of their main walks in all. */
uint64_t predictor_walk_count(struct predictor *p, uint64_t *main_steps);
void predictor_free(struct predictor *p);
void predictor_reset(struct predictor *p);
/* An acquire of `layer` happened. */
void predictor_observe(struct predictor *p, uint32_t layer);
/* The predicted next layers after the last observed one, in order, distinct,
 * at most k; returns how many were written. */
unsigned predictor_next(struct predictor *p, uint32_t *out, unsigned k);
/* In how many acquires `layer` is predicted to be used next (1 = the very
 * next acquire), PREDICT_NEVER if not within the horizon (2 * n_layers steps
 * of the predicted walk; 4096 at most once the walk passes a branch whose
 * outcome varies, since such a walk is made afresh at every query).  Where
 * the walk passes a branch whose outcome has varied (a context with several
 * successors), the distance of what lies
 * behind it is divided by the probability of getting there, until the
 * branches merge again; layers of the branches not taken get a distance the
 * same way.  For a workload that always repeats, it is the exact count.
 * O(1): the walk is recomputed only after a new observation. */
uint64_t predictor_distance(struct predictor *p, uint32_t layer);
/* predictor_distance() of n layers at once, from one consistent walk (one
 * lock round trip for a whole candidate list). */
void predictor_distances(struct predictor *p, const uint32_t *layers, uint64_t *out, unsigned n);

/* Eviction: choose one victim among `n` candidates (entries not in use).
 * LRU: the smallest last_use.  PREDICT: the largest predicted distance, ties
 * broken by LRU.  Returns the index into cand, or -1 if n == 0. */
struct evict_cand {
	uint32_t layer;
	uint64_t last_use;         /* logical clock of its last use */
	uint64_t distance;         /* predictor_distance() at decision time */
};
int evict_choose(enum wsp_policy policy, const struct evict_cand *cand, unsigned n);

/* The same choice over candidates met one at a time, for tiers that keep
 * no candidate array (the GPU slots' early fills, the updated-layer and
 * training-state stores): evict_pick_init, evict_pick_offer for each, and
 * the victim is pick.best (an index the caller chose; -1: none offered),
 * its candidate pick.cand. */
struct evict_pick {
	enum wsp_policy policy;
	long best;
	struct evict_cand cand;
};
void evict_pick_init(struct evict_pick *p, enum wsp_policy policy);
void evict_pick_offer(struct evict_pick *p, long index, const struct evict_cand *c);

/*
 * Plan room for an incoming entry of a given next-use distance: take victims
 * in the order evict_choose() gives them until their bytes reach `need`.
 * `cand` and `bytes` (parallel arrays) are permuted in place; on success the
 * victims are cand[0 .. ret-1] and nothing has been evicted yet.
 * Admission (PREDICT): a victim predicted to be needed sooner than the
 * incoming entry (distance < incoming_distance) is never taken; when room can
 * only be made that way the plan fails with -ENOSPC and the caller should not
 * cache the incoming entry (bypass).  incoming_distance 0 (a demand load that
 * must be cached) disables admission; LRU never applies it.
 * Returns the number of victims (0 when need is 0), or -ENOSPC.
 */
int evict_plan(enum wsp_policy policy, struct evict_cand *cand, uint64_t *bytes, unsigned n,
	       uint64_t need, uint64_t incoming_distance);

#endif
