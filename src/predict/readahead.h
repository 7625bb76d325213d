/*
 * What read-ahead has been worth, per layer: a layer the pager read into
 * the host tier ahead of need and that left it before any acquire used it
 * was a wasted read.  A layer whose read-ahead is mostly wasted (routed
 * experts the predictor cannot call, a cache too small to keep what it
 * reads early) is left to demand: the pager stops reading it ahead until
 * the learned order is reset (wsp_reset_prediction: the workload changed).
 * Counts are halved as they grow, so that recent reads weigh most.
 * Thread-safe (one mutex).
 */
#ifndef WSP_PREDICT_READAHEAD_H
#define WSP_PREDICT_READAHEAD_H

#include <stdint.h>

struct readahead;
int readahead_create(uint32_t n_layers, struct readahead **out);
/* The memory it holds. */
uint64_t readahead_bytes(const struct readahead *ra);
void readahead_free(struct readahead *ra);
/* A read-ahead of `layer` started a load. */
void readahead_started(struct readahead *ra, uint32_t layer);
/* What it loaded left the host tier unused. */
void readahead_unused(struct readahead *ra, uint32_t layer);
/* `layer` was acquired. */
void readahead_acquired(struct readahead *ra, uint32_t layer);
/* 1 when read-ahead of `layer` has mostly been wasted: leave it to demand. */
int readahead_skip(struct readahead *ra, uint32_t layer);
/* How many layers readahead_skip leaves to demand now (for the stats). */
uint32_t readahead_left_out(struct readahead *ra);
void readahead_reset(struct readahead *ra);

#endif
