/*
 * The training room's gradients: what leaves the GPU in a backward.  Beside
 * the host cache, not in it: the cache holds what the pack says; this holds
 * what training made.
 *
 * Gradients: a push copies a layer's gradient tensors GPU -> host on the
 * device's write-back stream, ordered after the user's stream by an event
 * (the host never waits).  A tensor's push is copied out by the worker
 * through the landing ring and widened (a first push since zeroing) or
 * added as it lands (ring.h), in push order, into the layer's fp32
 * accumulators (one per tensor, made on first use); a small tensor's first
 * push lands in the layer's pinned landing buffer in its own dtype and is
 * widened later, its later pushes (and rows) go through one of a few
 * pinned staging buffers and the worker adds them.  A push may carry some
 * of a layer's tensors (each as its gradient is ready), or some rows of
 * one tensor.  When every staging
 * buffer a push needs, or every push slot, is in flight it waits for the
 * oldest.
 */
#ifndef WSP_TRAIN_GRADS_H
#define WSP_TRAIN_GRADS_H

#include <stdint.h>
#include "common/error.h"
#include "gpu/device.h"
#include "pack/pack.h"

struct wb;

/* The least bytes of values in each piece of a push of rows copied in
 * pieces (grads_int.h; a variable: tests shrink it). */
extern uint64_t wspi_row_piece_bytes;

/* Nothing is allocated until the first push.  `trace` (may be NULL) gets a
 * WSP_STAGE_D2H event per push once its copies are done, timed on the
 * device (CLOCK_MONOTONIC, like the pager's other events). */
int wb_create(struct dev *d, const struct wsp_pack_s *pk, wsp_trace_fn trace, void *trace_ctx,
	      struct wb **out, struct wspi_err *err);
/* Waits for pushes in flight, then frees everything. */
void wb_destroy(struct wb *wb);

/* grads[i]: tensor i of the layer, in its dtype, contiguous, or NULL.
 * Errors: WSP_EDTYPE for a non-float tensor given a gradient; a copy or
 * accumulation that failed earlier (the first failure, kept). */
int wb_push(struct wb *wb, uint32_t layer, const void *const *grads, void *stream,
	    struct wspi_err *err);
/* Tensor `tensor`'s whole gradient as fp32 (device memory), whatever the
 * tensor's dtype: copied straight into its accumulator when it is the
 * tensor's first push since zeroing (no widening on the host), else staged
 * and added.  Errors as wb_push's, WSP_ENOTFOUND for a tensor the layer
 * lacks, and WSP_ETOOBIG when it must be staged and does not fit. */
int wb_push_f32(struct wb *wb, uint32_t layer, uint32_t tensor, const void *grad, void *stream,
		struct wspi_err *err);
/* n_rows rows of tensor `tensor` (along its first dimension): rows[k]
 * (int64, device memory; negative: padding, skipped) has the values at
 * values + k * row bytes; other rows' gradient is zero.  Errors as
 * wb_push's, and WSP_ETOOBIG when they do not fit a staging buffer. */
int wb_push_rows(struct wb *wb, uint32_t layer, uint32_t tensor, const int64_t *rows,
		 uint64_t n_rows, const void *values, void *stream, struct wspi_err *err);
/* 1 when the pushes of `layer` (UINT32_MAX: all) are accumulated, 0 if not. */
int wb_query(struct wb *wb, uint32_t layer, struct wspi_err *err);
int wb_wait(struct wb *wb, uint32_t layer, struct wspi_err *err);
/* After wb_wait: the accumulators (entries NULL for tensors never pushed)
 * and the number of pushes since the last zeroing. */
int wb_grads(struct wb *wb, uint32_t layer, float *const **data, uint64_t *pushes,
	     struct wspi_err *err);
int wb_zero(struct wb *wb, uint32_t layer, struct wspi_err *err);
/* Counters for wsp_stats. */
void wb_counters(struct wb *wb, uint64_t *pushes, uint64_t *bytes_d2h, uint64_t *add_ns);
void wb_reset_counters(struct wb *wb);

#endif
