/*
 * The write-back worker's work ahead, done when it has nothing else to do
 * (grads.c's worker_main, under wb->lock): widening landed layers into
 * their fp32 accumulators before anyone reads them, and clearing, after a
 * zeroing, the accumulators that take rows (an embedding's), whose rows
 * come at the very end of a backward.  Each kind keeps a FIFO of layers;
 * the work itself runs unlocked, the layer marked in wb->widening (readers,
 * zeroing and fp32 pushes straight into its accumulators wait for it).
 */
#include <pthread.h>

#include "common/util.h"
#include "train/grads_int.h"

static void fifo_push(struct wb *wb, struct layer_fifo *f, uint32_t layer)
{
	f->at[(f->head + f->n) % wb->n_layers] = layer;
	f->n++;
}

static uint32_t fifo_pop(struct wb *wb, struct layer_fifo *f)
{
	uint32_t layer = f->at[f->head];
	f->head = (f->head + 1) % wb->n_layers;
	f->n--;
	return layer;
}

/* After the worker applied push p: its layer joins the list to widen ahead
 * if a tensor of it landed. */
void wb_queue_widen(struct wb *wb, const struct wb_push_s *p)
{
	struct wb_layer *wl = &wb->layers[p->layer];
	if (p->rows_tensor != NO_ROWS || wl->widen_queued)
		return;
	for (uint32_t i = 0; i < wb->pk->layers[p->layer].n_tensors; i++)
		if (p->landed[i] == LAND_BUFFER) {
			fifo_push(wb, &wb->to_widen, p->layer);
			wl->widen_queued = 1;
			return;
		}
}

/* Whether tensor i of a layer is cleared ahead: an accumulator that takes
 * rows, stale, with no push planned into it (a push planned is applied by
 * the worker in its turn; an fp32 one may be copying into the accumulator
 * already). */
static int clears(const struct wb_layer *wl, uint32_t i)
{
	return wl->rows[i] && wl->acc[i] && wl->has[i] == HAS_STALE && !wl->planned[i];
}

void wb_queue_clear(struct wb *wb, uint32_t layer)
{
	struct wb_layer *wl = &wb->layers[layer];
	if (wl->clear_queued || !wl->acc)
		return;
	for (uint32_t i = 0; i < wb->pk->layers[layer].n_tensors; i++)
		if (clears(wl, i)) {
			fifo_push(wb, &wb->to_clear, layer);
			wl->clear_queued = 1;
			return;
		}
}

int wb_ahead_ready(const struct wb *wb)
{
	return (wb->to_widen.n || wb->to_clear.n) && !wb->stop && !wb->failed_code;
}

/* Zero the accumulators of `layer` that are to be cleared. */
static void clear_layer(struct wb *wb, uint32_t layer)
{
	struct wb_layer *wl = &wb->layers[layer];
	uint32_t n = wb->pk->layers[layer].n_tensors;
	uint8_t *which = wb->scratch;
	wl->clear_queued = 0;
	for (uint32_t i = 0; i < n; i++)
		which[i] = (uint8_t)clears(wl, i);
	wb->widening = layer;
	pthread_mutex_unlock(&wb->lock);
	uint64_t t0 = wspi_now_ns();
	for (uint32_t i = 0; i < n; i++)
		if (which[i])
			wb_zero_floats(wl->acc[i], wb_tensor_elements(&wb->pk->layers[layer].tensors[i]),
				       WSP_MIN(wb->add_threads, WB_CLEAR_THREADS));
	uint64_t spent = wspi_now_ns() - t0;
	pthread_mutex_lock(&wb->lock);
	wb->add_ns += spent;
	wb->widening = NO_LAYER;
	for (uint32_t i = 0; i < n; i++)
		if (which[i])
			wl->has[i] = HAS_CLEARED;
}

/* Widen the landed tensors of the oldest layer in the list (all of them at
 * once, so that its threads start once a layer), or drop the layer once it
 * has none left (read, zeroed or widened since; one that lands later joins
 * again).  A failure empties the list (the reader tries again). */
static int widen_layer(struct wb *wb, struct wspi_err *err)
{
	uint32_t layer = wb->to_widen.at[wb->to_widen.head];
	struct wb_layer *wl = &wb->layers[layer];
	uint32_t i = 0, n = wb->pk->layers[layer].n_tensors;
	while (i < n && wl->has[i] != HAS_LANDED)
		i++;
	if (i == n) {
		wb->layers[fifo_pop(wb, &wb->to_widen)].widen_queued = 0;
		return 0;
	}
	wb->widening = layer;
	pthread_mutex_unlock(&wb->lock);
	uint64_t t0 = wspi_now_ns();
	int rc = wb_widen_landed(wb, layer, wb->scratch, wb->scratch + wb->max_tensors, err);
	uint64_t spent = wspi_now_ns() - t0;
	pthread_mutex_lock(&wb->lock);
	wb->add_ns += spent;
	wb->widening = NO_LAYER;
	if (rc < 0)
		while (wb->to_widen.n)
			wb->layers[fifo_pop(wb, &wb->to_widen)].widen_queued = 0;
	return rc;
}

int wb_work_ahead(struct wb *wb, struct wspi_err *err)
{
	/* Clearing first: the rows it waits for come at a backward's end,
	 * widening can wait for a reader. */
	int rc = 0;
	if (wb->to_clear.n)
		clear_layer(wb, fifo_pop(wb, &wb->to_clear));
	else
		rc = widen_layer(wb, err);
	pthread_cond_broadcast(&wb->cond);
	return rc;
}
