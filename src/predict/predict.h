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

#include <stdint.h>
#include "wspager.h"

#define PREDICT_NEVER UINT64_MAX

struct predictor;
int predictor_create(uint32_t n_layers, struct predictor **out);
void predictor_free(struct predictor *p);
void predictor_reset(struct predictor *p);
/* An acquire of `layer` happened. */
void predictor_observe(struct predictor *p, uint32_t layer);
/* The predicted next layers after the last observed one, in order, distinct,
 * at most k; returns how many were written. */
unsigned predictor_next(struct predictor *p, uint32_t *out, unsigned k);
/* In how many acquires `layer` is predicted to be used next (1 = the very
 * next acquire), PREDICT_NEVER if not within the horizon. */
uint64_t predictor_distance(struct predictor *p, uint32_t layer);

/* Eviction: choose one victim among `n` candidates (entries not in use).
 * LRU: the smallest last_use.  PREDICT: the largest predicted distance, ties
 * broken by LRU.  Returns the index into cand, or -1 if n == 0. */
struct evict_cand {
	uint32_t layer;
	uint64_t last_use;         /* logical clock of its last use */
	uint64_t distance;         /* predictor_distance() at decision time */
};
int evict_choose(enum wsp_policy policy, const struct evict_cand *cand, unsigned n);

#endif
