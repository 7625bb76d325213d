/*
 * Gradients out of the GPU: per-layer landing buffers, staging buffers
 * and push slots, filled by the callers' pushes (grads.h); the worker
 * that applies each push once its copies are done is worker.c, the adding
 * itself accumulate.c, the work the worker does ahead (widening and
 * clearing) ahead.c, the landing ring ring.c.
 *
 * A tensor's push of WB_RING_MIN_BYTES or more is copied out by the worker
 * through the landing ring (ring.h) and widened as it lands, reading each
 * chunk back from the CPU's cache: assigned to its accumulator when it is
 * the first since zeroing (the one micro-batch of most training steps),
 * else added there (gradient accumulation's later micro-batches).  Smaller
 * tensors' first pushes, and all where no ring could be made, are copied
 * straight into the layer's landing buffer, in
 * the gradient's own dtype, and never wait to be widened (widening from
 * memory runs far below the link, docs/PERFORMANCE.md).  The worker
 * widens landed tensors when it has nothing else to do (no push queued,
 * or the oldest one's copies still running), a layer at a time, so that
 * most of that work is done while the backward
 * pass still runs rather than when the accumulators are read (wsp_grad_get,
 * after the backward); a reader widens whatever is left, and a second push
 * widens its tensor first.  Their later pushes go through a staging buffer
 * and are added, and so do pushes of rows (an embedding's gradient, nonzero
 * only in the rows of the batch's tokens, sent as those rows; its
 * accumulator, zeroed before the rows go in, is cleared by the worker as
 * soon as its layer is zeroed, since the rows come at the very end of a
 * backward, where nothing hides a pass over a whole vocabulary).  A caller
 * whose host memory is the bottleneck may instead send a gradient already
 * widened on the GPU (wb_push_f32): a first push of it is copied straight
 * into its accumulator, pinned in place, and leaves the host nothing to do.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "train/grads_int.h"
#include "train/tofloat.h"

int wb_create(struct dev *d, const struct wsp_pack_s *pk, wsp_trace_fn trace, void *trace_ctx,
	      struct wb **out, struct wspi_err *err)
{
	struct wb *wb = calloc(1, sizeof(*wb));
	if (!wb)
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory");
	wb->dev = d;
	wb->pk = pk;
	wb->trace = trace;
	wb->trace_ctx = trace_ctx;
	/* Widening is memory-bound but one core's share of the bandwidth is
	 * small (bench/adamw_bench on a 16-core Xeon: 8 threads 14.9 G
	 * elements/s, 14 threads 19.3): all
	 * cores but two, which the caller's threads keep while the backward
	 * still runs beside the widening. */
	uint64_t cpus = wspi_cpu_count();
	wb->add_threads = (unsigned)WSP_MAX(WSP_MIN(cpus > 4 ? cpus - 2 : cpus, WB_ADD_THREADS), 1);
	wb->n_layers = pk->m.hdr->n_layers;
	for (uint32_t l = 0; l < wb->n_layers; l++) {
		wb->max_tensors = WSP_MAX(wb->max_tensors, pk->layers[l].n_tensors);
		wb->max_bytes = WSP_MAX(wb->max_bytes, pk->layers[l].raw_bytes);
	}
	wb->layers = calloc(wb->n_layers ? wb->n_layers : 1, sizeof(*wb->layers));
	wb->scratch = calloc(4 * (size_t)(wb->max_tensors ? wb->max_tensors : 1), 1);
	wb->to_widen.at = calloc(wb->n_layers ? wb->n_layers : 1, sizeof(uint32_t));
	wb->to_clear.at = calloc(wb->n_layers ? wb->n_layers : 1, sizeof(uint32_t));
	wb->widening = NO_LAYER;
	if (!wb->layers || !wb->scratch || !wb->to_widen.at || !wb->to_clear.at) {
		free(wb->layers);
		free(wb->scratch);
		free(wb->to_widen.at);
		free(wb->to_clear.at);
		free(wb);
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory");
	}
	pthread_mutex_init(&wb->lock, NULL);
	pthread_cond_init(&wb->cond, NULL);
	wspi_err_init(&wb->failed);
	*out = wb;
	return 0;
}

/* Whether the worker is widening or clearing `layer` (or any, for UINT32_MAX) ahead. */
static int widening(struct wb *wb, uint32_t layer)
{
	return wb->widening != NO_LAYER && (layer == UINT32_MAX || wb->widening == layer);
}

static int start_pushes(struct wb *wb, struct wspi_err *err);

static void pushes_free(struct wb *wb)
{
	struct dev *d = wb->dev;
	for (unsigned i = 0; i < WB_PUSHES; i++) {
		struct wb_push_s *p = &wb->pushes[i];
		if (p->after_user)
			d->ops->event_destroy(d, p->after_user);
		if (p->copied)
			d->ops->event_destroy(d, p->copied);
		if (p->begin)
			d->ops->event_destroy(d, p->begin);
		for (unsigned k = 0; k + 1 < WB_ROW_PIECES; k++)
			if (p->piece[k])
				d->ops->event_destroy(d, p->piece[k]);
		free(p->present);
		free(p->landed);
		free((void *)p->ring_src);
		memset(p, 0, sizeof(*p));
	}
	for (unsigned i = 0; i < WB_BUFS; i++) {
		struct wb_buf *b = &wb->bufs[i];
		if (b->pinned)
			d->ops->unpin(d, b->mem);
		free(b->mem);
		memset(b, 0, sizeof(*b));
	}
	wb->free = NULL;
	wb->free_bufs = NULL;
	if (wb->epoch)
		d->ops->event_destroy(d, wb->epoch);
	wb->epoch = NULL;
}

/* Pushes, staging buffers, their events and the worker, at the first push;
 * all or nothing (a failed start leaves nothing behind, and the next push
 * tries again). */
static int start(struct wb *wb, struct wspi_err *err)
{
	int rc = start_pushes(wb, err);
	if (rc == 0 && wspi_ring_chunk_bytes) {
		/* Without a ring (no memory to pin, no thread) layers land
		 * whole: slower on the host's memory, the same sums. */
		struct wspi_err e;
		wspi_err_init(&e);
		if (wb_ring_create(wb->dev, wb->add_threads, &wb->ring, &e) < 0)
			wb->ring = NULL;
		wspi_err_destroy(&e);
	}
	if (rc == 0) {
		int e = pthread_create(&wb->worker, NULL, wb_worker_main, wb);
		if (e)
			rc = WSP_ERR(err, -e, "write-back: starting its thread: %s", strerror(e));
	}
	if (rc < 0) {
		wb_ring_destroy(wb->ring);
		wb->ring = NULL;
		pushes_free(wb);
	} else {
		wb->started = 1;
	}
	return rc;
}

static int start_pushes(struct wb *wb, struct wspi_err *err)
{
	struct dev *d = wb->dev;
	/* Tensors are staged at WB_ALIGN-aligned offsets: room for the padding. */
	uint64_t bytes = wspi_align_up(wb->max_bytes + (uint64_t)wb->max_tensors * WB_ALIGN, 4096);
	wb->buf_bytes = bytes ? bytes : 4096;
	for (unsigned i = 0; i < WB_BUFS; i++) {
		struct wb_buf *b = &wb->bufs[i];
		int rc;
		if (!(b->mem = aligned_alloc(4096, wb->buf_bytes)))
			return WSP_ERR(err, -ENOMEM, "write-back: out of memory for %u staging "
				       "buffers of %" PRIu64 " bytes", WB_BUFS, wb->buf_bytes);
		if (!dev_is_host(d)) {
			if ((rc = d->ops->pin(d, b->mem, wb->buf_bytes, err)) < 0)
				return rc;
			b->pinned = 1;
		}
		b->next = wb->free_bufs;
		wb->free_bufs = b;
	}
	/* Timing events only when traced (they cost a little). */
	int timed = wb->trace != NULL;
	for (unsigned i = 0; i < WB_PUSHES; i++) {
		struct wb_push_s *p = &wb->pushes[i];
		int rc;
		p->present = calloc(wb->max_tensors ? wb->max_tensors : 1, 1);
		p->landed = calloc(wb->max_tensors ? wb->max_tensors : 1, 1);
		p->ring_src = calloc(wb->max_tensors ? wb->max_tensors : 1, sizeof(*p->ring_src));
		if (!p->present || !p->landed || !p->ring_src)
			return WSP_ERR(err, -ENOMEM, "write-back: out of memory");
		if ((rc = d->ops->event_create(d, 0, &p->after_user, err)) < 0 ||
		    (rc = d->ops->event_create(d, timed, &p->copied, err)) < 0 ||
		    (timed && (rc = d->ops->event_create(d, 1, &p->begin, err)) < 0))
			return rc;
		p->next = wb->free;
		wb->free = p;
	}
	if (wb->trace) {
		/* Device time 0 of the trace: an event on the idle write-back
		 * stream, completed at once, read against the host clock. */
		int rc;
		if ((rc = d->ops->event_create(d, 1, &wb->epoch, err)) < 0 ||
		    (rc = d->ops->record(d, wb->epoch, DEV_Q_BACK, NULL, err)) < 0 ||
		    (rc = d->ops->event_sync(d, wb->epoch, err)) < 0)
			return rc;
		wb->epoch_ns = wspi_now_ns();
	}
	return 0;
}

static int check_failed(struct wb *wb, struct wspi_err *err)
{
	if (!wb->failed_code)
		return 0;
	return WSP_ERR(err, wb->failed_code, "write-back failed earlier: %s", wb->failed.msg);
}

static int layer_arrays(struct wb *wb, struct wb_layer *wl, uint32_t n, struct wspi_err *err)
{
	if (wl->acc)
		return 0;
	wl->acc = calloc(n ? n : 1, sizeof(*wl->acc));
	wl->has = calloc(n ? n : 1, 1);
	wl->planned = calloc(n ? n : 1, 1);
	wl->acc_pinned = calloc(n ? n : 1, 1);
	wl->rows = calloc(n ? n : 1, 1);
	if (!wl->acc || !wl->has || !wl->planned || !wl->acc_pinned || !wl->rows) {
		free(wl->acc);
		free(wl->has);
		free(wl->planned);
		free(wl->acc_pinned);
		free(wl->rows);
		wl->acc = NULL;
		wl->has = wl->planned = wl->acc_pinned = wl->rows = NULL;
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory");
	}
	(void)wb;
	return 0;
}

/* The layer's landing buffer (staging layout), pinned where the device pins. */
static int land_buffer(struct wb *wb, uint32_t layer, struct wspi_err *err)
{
	struct wb_layer *wl = &wb->layers[layer];
	const struct wsp_layer *L = &wb->pk->layers[layer];
	if (wl->land)
		return 0;
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < L->n_tensors; i++)
		bytes += wspi_align_up(L->tensors[i].bytes, WB_ALIGN);
	bytes = wspi_align_up(bytes ? bytes : 1, 4096);
	if (!(wl->land = aligned_alloc(4096, bytes)))
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory for the gradients of %s "
			       "(%" PRIu64 " bytes)", L->name, bytes);
	if (!dev_is_host(wb->dev)) {
		int rc = wb->dev->ops->pin(wb->dev, wl->land, bytes, err);
		if (rc < 0) {
			free(wl->land);
			wl->land = NULL;
			return rc;
		}
		wl->land_pinned = 1;
	}
	return 0;
}

/* What a push carries: the dense gradients grads[] of a layer; or (grads
 * NULL) n_rows rows of tensor `tensor`; or (f32) tensor `tensor`'s whole
 * gradient as fp32 at `values`. */
struct push_args {
	uint32_t layer;
	const void *const *grads;
	uint32_t tensor;
	const int64_t *rows;
	const void *values;
	uint64_t n_rows;
	int f32;
};

/* Whether an fp32 gradient may be copied straight into its accumulator:
 * its first push since zeroing (the accumulator holds nothing to keep),
 * into memory the device can copy into without the host waiting (pinned
 * in place, or host memory on the host backend). */
static int f32_direct(struct wb *wb, const struct push_args *a)
{
	const struct wb_layer *wl = &wb->layers[a->layer];
	uint64_t bytes = wb_tensor_elements(&wb->pk->layers[a->layer].tensors[a->tensor]) * 4;
	if (wl->planned[a->tensor])
		return 0;
	return dev_is_host(wb->dev) ||
	       (bytes + 4 >= WB_PIN_MIN_BYTES && wl->acc_pinned[a->tensor] != 2);
}

/* Whether a tensor's pushes land through the ring (each chunk widened or
 * added as it lands) rather than whole. */
static int rings(const struct wb *wb, const struct wsp_tensor *t)
{
	return wb->ring && t->bytes >= WB_RING_MIN_BYTES;
}

/* Whether the push needs a staging buffer: rows always; an fp32 gradient
 * unless copied into its accumulator; dense gradients when one of them is
 * added to an earlier push's without the ring. */
static int needs_buf(struct wb *wb, const struct push_args *a)
{
	if (a->f32)
		return !f32_direct(wb, a);
	if (!a->grads)
		return 1;
	const struct wsp_layer *L = &wb->pk->layers[a->layer];
	const struct wb_layer *wl = &wb->layers[a->layer];
	for (uint32_t i = 0; i < L->n_tensors; i++)
		if (a->grads[i] && wl->planned[i] && !rings(wb, &L->tensors[i]))
			return 1;
	return 0;
}

/* 4 MiB: a copy of that size runs at the link's rate; an embedding's rows
 * of a batch of 6144 tokens of 4096 (48 MiB) go in the most pieces. */
uint64_t wspi_row_piece_bytes = 4u << 20;

/* How push p of n_rows rows of row_bytes each is copied: in pieces of
 * wspi_row_piece_bytes bytes of values or more, WB_ROW_PIECES at most,
 * their events made at the slot's first push of rows (one piece where
 * they cannot be: the rows are added once all have landed). */
static void row_pieces(struct wb *wb, struct wb_push_s *p, uint64_t n_rows, uint64_t row_bytes)
{
	struct dev *d = wb->dev;
	uint64_t n = WSP_MIN(n_rows * row_bytes / WSP_MAX(wspi_row_piece_bytes, 1), WB_ROW_PIECES);
	p->n_pieces = 1;
	p->piece_rows = WSP_MAX(n_rows, 1);
	if (n < 2)
		return;
	for (unsigned k = 0; k + 1 < n; k++)
		if (!p->piece[k] && d->ops->event_create(d, 0, &p->piece[k], NULL) < 0)
			return;
	p->piece_rows = (n_rows + n - 1) / n;
	p->n_pieces = (uint32_t)((n_rows + p->piece_rows - 1) / p->piece_rows);
}

/* Enqueue the copies of one push after the user's stream: a tensor the
 * ring takes is left for the worker to copy through it; otherwise a
 * tensor's first push since zeroing lands in the layer's landing buffer,
 * later ones (and rows) in the staging buffer.  Under wb->lock (the device
 * calls only enqueue), so pushes are applied in the order they were
 * planned. */
static int enqueue_push(struct wb *wb, struct wb_push_s *p, const struct push_args *a,
			void *stream, struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[a->layer];
	struct wb_layer *wl = &wb->layers[a->layer];
	struct dev *d = wb->dev;
	uint64_t off = 0;
	int rc = d->ops->record(d, p->after_user, DEV_Q_USER, stream, err);
	if (rc == 0)
		rc = d->ops->wait(d, DEV_Q_BACK, NULL, p->after_user, err);
	if (rc == 0 && p->begin)
		rc = d->ops->record(d, p->begin, DEV_Q_BACK, NULL, err);
	p->bytes = 0;
	if (a->f32) {
		uint64_t bytes = wb_tensor_elements(&L->tensors[a->tensor]) * 4;
		memset(p->present, 0, L->n_tensors);
		memset(p->landed, 0, L->n_tensors);
		p->present[a->tensor] = 1;
		p->direct = !p->buf;
		if (rc == 0 && bytes)
			rc = d->ops->copy_d2h(d, DEV_Q_BACK,
					      p->direct ? (void *)wl->acc[a->tensor] : p->buf->mem,
					      a->values, bytes, err);
		p->bytes = bytes;
	} else if (!a->grads) {
		const struct wsp_tensor *t = &L->tensors[a->tensor];
		uint64_t row_bytes = t->bytes / t->shape[0];
		uint8_t *values = (uint8_t *)p->buf->mem + wspi_align_up(a->n_rows * 8, WB_ALIGN);
		memset(p->present, 0, L->n_tensors);
		memset(p->landed, 0, L->n_tensors);
		row_pieces(wb, p, a->n_rows, row_bytes);
		/* The rows first: the worker checks them all once piece 0 is in. */
		if (rc == 0 && a->n_rows)
			rc = d->ops->copy_d2h(d, DEV_Q_BACK, p->buf->mem, a->rows, a->n_rows * 8, err);
		for (uint32_t k = 0; rc == 0 && a->n_rows && row_bytes && k < p->n_pieces; k++) {
			uint64_t first = k * p->piece_rows;
			uint64_t n = WSP_MIN(p->piece_rows, a->n_rows - first);
			rc = d->ops->copy_d2h(d, DEV_Q_BACK, values + first * row_bytes,
					      (const uint8_t *)a->values + first * row_bytes,
					      n * row_bytes, err);
			if (rc == 0 && k + 1 < p->n_pieces)
				rc = d->ops->record(d, p->piece[k], DEV_Q_BACK, NULL, err);
		}
		p->bytes = a->n_rows * (8 + row_bytes);
	}
	p->ring_bytes = 0;
	for (uint32_t i = 0; a->grads && rc == 0 && i < L->n_tensors; i++) {
		p->present[i] = a->grads[i] != NULL;
		p->landed[i] = 0;
		if (a->grads[i] && rings(wb, &L->tensors[i]))
			p->landed[i] = LAND_RING;
		else if (a->grads[i] && !wl->planned[i])
			p->landed[i] = LAND_BUFFER;
		if (p->landed[i] == LAND_RING) {   /* copied by the worker (wb_apply_pushes) */
			p->ring_src[i] = a->grads[i];
			p->ring_bytes += L->tensors[i].bytes;
			off += wspi_align_up(L->tensors[i].bytes, WB_ALIGN);
			continue;
		}
		if (p->landed[i] && !wl->land)
			rc = land_buffer(wb, a->layer, err);
		if (rc == 0 && a->grads[i] && L->tensors[i].bytes) {
			uint8_t *dst = (uint8_t *)(p->landed[i] ? wl->land : p->buf->mem) + off;
			rc = d->ops->copy_d2h(d, DEV_Q_BACK, dst, a->grads[i], L->tensors[i].bytes, err);
			p->bytes += L->tensors[i].bytes;
		}
		off += wspi_align_up(L->tensors[i].bytes, WB_ALIGN);
	}
	if (rc == 0)
		rc = d->ops->record(d, p->copied, DEV_Q_BACK, NULL, err);
	return rc;
}

/* Before an fp32 gradient is copied straight into its accumulator: the
 * accumulator made, and pinned in place where the device pins (once; under
 * wb->lock, so the first step pays it).  A pinning that fails is not an
 * error: the tensor's fp32 gradients go through staging from then on. */
static int f32_prepare(struct wb *wb, const struct push_args *a, struct wspi_err *err)
{
	struct wb_layer *wl = &wb->layers[a->layer];
	const struct wsp_tensor *t = &wb->pk->layers[a->layer].tensors[a->tensor];
	uint64_t n = wb_tensor_elements(t);
	if (!wl->acc[a->tensor]) {
		if (!(wl->acc[a->tensor] = wb_acc_alloc(n)))
			return WSP_ERR(err, -ENOMEM, "write-back: out of memory for the fp32 "
				       "gradient of %s (%" PRIu64 " elements)", t->name, n);
		wl->has[a->tensor] = HAS_STALE;   /* nothing in it yet */
	}
	if (dev_is_host(wb->dev) || wl->acc_pinned[a->tensor])
		return 0;
	struct wspi_err e;
	wspi_err_init(&e);
	int rc = wb->dev->ops->pin(wb->dev, wl->acc[a->tensor], wspi_align_up(n * 4 + 4, 4096), &e);
	wl->acc_pinned[a->tensor] = rc < 0 ? 2 : 1;
	wspi_err_destroy(&e);
	return 0;
}

static int push(struct wb *wb, const struct push_args *a, void *stream, struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[a->layer];
	pthread_mutex_lock(&wb->lock);
	int rc = check_failed(wb, err);
	if (rc == 0 && !wb->started)
		rc = start(wb, err);
	if (rc == 0)
		rc = layer_arrays(wb, &wb->layers[a->layer], L->n_tensors, err);
	if (rc == 0 && !a->grads && !a->f32 &&
	    wspi_align_up(a->n_rows * 8, WB_ALIGN) + a->n_rows * (L->tensors[a->tensor].bytes /
								 L->tensors[a->tensor].shape[0]) >
		    wb->buf_bytes)
		rc = WSP_ERR(err, WSP_ETOOBIG, "gradient rows of %s: %" PRIu64 " rows do not fit "
			     "a staging buffer of %" PRIu64 " bytes; push the whole gradient",
			     L->tensors[a->tensor].name, a->n_rows, wb->buf_bytes);
	/* Wait for a free push, and a free buffer if this one needs one (the
	 * need is seen again after each wait: another thread's push or zeroing
	 * of the layer may have changed it).  A push straight into an
	 * accumulator also waits while the worker works on its layer ahead:
	 * that reads and writes the layer's states unlocked, and may be
	 * clearing this very accumulator. */
	while (rc == 0) {
		int direct = a->f32 && f32_direct(wb, a);
		if (!(direct && widening(wb, a->layer))) {
			if (direct)
				rc = f32_prepare(wb, a, err);
			if (rc < 0 || (wb->free && (!needs_buf(wb, a) || wb->free_bufs)))
				break;
		}
		pthread_cond_wait(&wb->cond, &wb->lock);
	}
	uint64_t f32_bytes = a->f32 ? wb_tensor_elements(&L->tensors[a->tensor]) * 4 : 0;
	if (rc == 0 && a->f32 && needs_buf(wb, a) && f32_bytes > wb->buf_bytes)
		rc = WSP_ERR(err, WSP_ETOOBIG, "fp32 gradient of %s: %" PRIu64 " bytes do not fit "
			     "a staging buffer of %" PRIu64 " bytes (it is added to an earlier push); "
			     "push it in the tensor's dtype", L->tensors[a->tensor].name, f32_bytes,
			     wb->buf_bytes);
	if (rc < 0) {
		pthread_mutex_unlock(&wb->lock);
		return rc;
	}
	struct wb_push_s *p = wb->free;
	wb->free = p->next;
	p->layer = a->layer;
	p->rows_tensor = a->grads || a->f32 ? NO_ROWS : a->tensor;
	p->f32_tensor = a->f32 ? a->tensor : NO_ROWS;
	p->n_rows = a->n_rows;
	p->direct = 0;
	p->buf = NULL;
	if (needs_buf(wb, a)) {
		p->buf = wb->free_bufs;
		wb->free_bufs = p->buf->next;
	}
	rc = enqueue_push(wb, p, a, stream, err);
	if (rc < 0) {
		/* Nothing queued.  Copies that were enqueued may still run: wait
		 * for the write-back stream before the buffer or landing buffer
		 * is used again. */
		if (wb->dev->ops->record(wb->dev, p->copied, DEV_Q_BACK, NULL, NULL) == 0)
			(void)wb->dev->ops->event_sync(wb->dev, p->copied, NULL);
		if (p->direct) {   /* a copy into the accumulator may have begun */
			while (widening(wb, a->layer))   /* its states are the worker's */
				pthread_cond_wait(&wb->cond, &wb->lock);
			wb->layers[a->layer].has[a->tensor] = HAS_STALE;
		}
		wb_push_free(wb, p);
	} else {
		for (uint32_t i = 0; i < L->n_tensors; i++)
			if (a->grads ? a->grads[i] != NULL : i == a->tensor)
				wb->layers[a->layer].planned[i] = 1;
		p->next = NULL;
		if (wb->tail)
			wb->tail->next = p;
		else
			wb->head = p;
		wb->tail = p;
		wb->layers[a->layer].pending++;
		wb->pending_all++;
		wb->n_pushes++;
		wb->bytes_d2h += p->bytes + p->ring_bytes;
	}
	pthread_cond_broadcast(&wb->cond);
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

int wb_push(struct wb *wb, uint32_t layer, const void *const *grads, void *stream,
	    struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[layer];
	for (uint32_t i = 0; i < L->n_tensors; i++)
		if (grads[i] && !wb_dtype_ok(L->tensors[i].dtype))
			return WSP_ERR(err, WSP_EDTYPE, "gradient of %s: dtype %s; gradients are "
				       "F32, F16 or BF16", L->tensors[i].name,
				       wsp_dtype_name(L->tensors[i].dtype));
	struct push_args a = { .layer = layer, .grads = grads };
	return push(wb, &a, stream, err);
}

int wb_push_f32(struct wb *wb, uint32_t layer, uint32_t tensor, const void *grad, void *stream,
		struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[layer];
	if (tensor >= L->n_tensors)
		return WSP_ERR(err, WSP_ENOTFOUND, "fp32 gradient: layer %s has no tensor %u (it "
			       "has %u)", L->name, tensor, L->n_tensors);
	const struct wsp_tensor *t = &L->tensors[tensor];
	if (!wb_dtype_ok(t->dtype))
		return WSP_ERR(err, WSP_EDTYPE, "gradient of %s: dtype %s; gradients are F32, F16 "
			       "or BF16", t->name, wsp_dtype_name(t->dtype));
	if (!grad && t->bytes)
		return WSP_ERR(err, -EINVAL, "fp32 gradient of %s: grad is NULL", t->name);
	struct push_args a = { .layer = layer, .tensor = tensor, .values = grad, .f32 = 1 };
	return push(wb, &a, stream, err);
}

int wb_push_rows(struct wb *wb, uint32_t layer, uint32_t tensor, const int64_t *rows,
		 uint64_t n_rows, const void *values, void *stream, struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[layer];
	if (tensor >= L->n_tensors)
		return WSP_ERR(err, WSP_ENOTFOUND, "gradient rows: layer %s has no tensor %u (it has "
			       "%u)", L->name, tensor, L->n_tensors);
	const struct wsp_tensor *t = &L->tensors[tensor];
	if (!wb_dtype_ok(t->dtype))
		return WSP_ERR(err, WSP_EDTYPE, "gradient of %s: dtype %s; gradients are F32, F16 "
			       "or BF16", t->name, wsp_dtype_name(t->dtype));
	if (t->rank == 0 || t->shape[0] == 0)
		return WSP_ERR(err, -EINVAL, "gradient rows of %s: a tensor of rank %u and first "
			       "dimension %" PRIu64 " has no rows", t->name, t->rank,
			       t->rank ? t->shape[0] : 0);
	if (n_rows && (!rows || !values))
		return WSP_ERR(err, -EINVAL, "gradient rows of %s: rows or values is NULL", t->name);
	struct push_args a = { .layer = layer, .tensor = tensor, .rows = rows, .values = values,
			       .n_rows = n_rows };
	return push(wb, &a, stream, err);
}

static uint32_t pending(struct wb *wb, uint32_t layer)
{
	return layer == UINT32_MAX ? wb->pending_all : wb->layers[layer].pending;
}

int wb_query(struct wb *wb, uint32_t layer, struct wspi_err *err)
{
	pthread_mutex_lock(&wb->lock);
	int rc = pending(wb, layer) ? 0 : 1;
	if (rc == 1)
		rc = check_failed(wb, err) < 0 ? wb->failed_code : 1;
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

static int wait_locked(struct wb *wb, uint32_t layer, struct wspi_err *err)
{
	while (pending(wb, layer) || widening(wb, layer))
		pthread_cond_wait(&wb->cond, &wb->lock);
	return check_failed(wb, err);
}

int wb_wait(struct wb *wb, uint32_t layer, struct wspi_err *err)
{
	pthread_mutex_lock(&wb->lock);
	int rc = wait_locked(wb, layer, err);
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

int wb_grads(struct wb *wb, uint32_t layer, float *const **data, uint64_t *pushes,
	     struct wspi_err *err)
{
	pthread_mutex_lock(&wb->lock);
	int rc = wait_locked(wb, layer, err);
	if (rc == 0)
		rc = layer_arrays(wb, &wb->layers[layer], wb->pk->layers[layer].n_tensors, err);
	if (rc == 0) {   /* nothing of the layer is pending: the accumulators are ours */
		uint64_t t0 = wspi_now_ns();
		rc = wb_widen_landed(wb, layer, wb->scratch + 2 * wb->max_tensors,
				  wb->scratch + 3 * wb->max_tensors, err);
		wb->add_ns += wspi_now_ns() - t0;
	}
	if (rc == 0) {
		struct wb_layer *wl = &wb->layers[layer];
		const struct wsp_layer *L = &wb->pk->layers[layer];
		for (uint32_t i = 0; rc == 0 && i < L->n_tensors; i++)
			if (wl->has[i] == HAS_CLEARED) {
				wl->has[i] = HAS_ZERO;   /* zeroed ahead */
			} else if (wl->has[i] == HAS_STALE) {
				uint64_t n = wb_tensor_elements(&L->tensors[i]);
				if (!wl->acc[i] && !(wl->acc[i] = wb_acc_alloc(n)))
					rc = WSP_ERR(err, -ENOMEM, "write-back: out of memory for the fp32 "
						     "gradient of %s", L->tensors[i].name);
				else
					memset(wl->acc[i], 0, n * 4);
				wl->has[i] = HAS_ZERO;
			}
		if (rc == 0) {
			*data = wl->acc;
			*pushes = wl->pushes;
		}
	}
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

static void zero_layer(struct wb *wb, uint32_t l)
{
	struct wb_layer *wl = &wb->layers[l];
	const struct wsp_layer *L = &wb->pk->layers[l];
	wl->pushes = 0;
	for (uint32_t i = 0; wl->acc && i < L->n_tensors; i++) {
		if (wl->has[i] == HAS_SUM)
			wl->has[i] = HAS_STALE;   /* cleared when read, or overwritten by a push */
		else if (wl->has[i] == HAS_LANDED)
			wl->has[i] = HAS_STALE;   /* its accumulator may not exist yet */
		wl->planned[i] = 0;           /* the next push lands */
	}
	wb_queue_clear(wb, l);
}

int wb_zero(struct wb *wb, uint32_t layer, struct wspi_err *err)
{
	pthread_mutex_lock(&wb->lock);
	int rc = wait_locked(wb, layer, err);
	if (rc == 0) {
		if (layer == UINT32_MAX)
			for (uint32_t l = 0; l < wb->n_layers; l++)
				zero_layer(wb, l);
		else
			zero_layer(wb, layer);
		pthread_cond_broadcast(&wb->cond);   /* accumulators to clear ahead */
	}
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

void wb_counters(struct wb *wb, uint64_t *pushes, uint64_t *bytes_d2h, uint64_t *add_ns)
{
	pthread_mutex_lock(&wb->lock);
	*pushes = wb->n_pushes;
	*bytes_d2h = wb->bytes_d2h;
	*add_ns = wb->add_ns;
	pthread_mutex_unlock(&wb->lock);
}

void wb_reset_counters(struct wb *wb)
{
	pthread_mutex_lock(&wb->lock);
	wb->n_pushes = wb->bytes_d2h = wb->add_ns = 0;
	pthread_mutex_unlock(&wb->lock);
}

void wb_destroy(struct wb *wb)
{
	if (!wb)
		return;
	pthread_mutex_lock(&wb->lock);
	while (wb->pending_all)
		pthread_cond_wait(&wb->cond, &wb->lock);
	wb->stop = 1;
	pthread_cond_broadcast(&wb->cond);
	pthread_mutex_unlock(&wb->lock);
	if (wb->started)
		pthread_join(wb->worker, NULL);
	wb_ring_destroy(wb->ring);
	pushes_free(wb);
	for (uint32_t l = 0; l < wb->n_layers; l++) {
		struct wb_layer *wl = &wb->layers[l];
		for (uint32_t i = 0; wl->acc && i < wb->pk->layers[l].n_tensors; i++) {
			if (wl->acc_pinned[i] == 1)
				wb->dev->ops->unpin(wb->dev, wl->acc[i]);
			free(wl->acc[i]);
		}
		if (wl->land_pinned)
			wb->dev->ops->unpin(wb->dev, wl->land);
		free(wl->land);
		free(wl->acc);
		free(wl->has);
		free(wl->planned);
		free(wl->acc_pinned);
		free(wl->rows);
	}
	free(wb->layers);
	free(wb->scratch);
	free(wb->to_widen.at);
	free(wb->to_clear.at);
	wspi_err_destroy(&wb->failed);
	pthread_cond_destroy(&wb->cond);
	pthread_mutex_destroy(&wb->lock);
	free(wb);
}
