/*
 * Gradients out of the GPU: per-layer landing buffers, staging buffers, the
 * accumulating worker, and the per-layer fp32 accumulators (writeback.h).
 *
 * Widening bf16 into fp32 on the host runs at memory speed, far below the
 * link (docs/PERFORMANCE.md), so a layer's first push after zeroing (the
 * one micro-batch of most training steps) is copied straight into the
 * layer's landing buffer, in the gradient's own dtype, and nothing else
 * happens on the host; it is widened only when a second push must be added
 * to it or when the accumulators are read (wsp_grad_get, the optimizer's
 * time).  Later pushes go through a staging buffer and are added.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "writeback/tofloat.h"
#include "writeback/writeback.h"

/* Staging buffers: two copies in flight while the worker adds a third. */
#define WB_STAGES 3u
#define WB_ALIGN 64u
/* Threads adding one push, at most; and elements per thread at least. */
#define WB_ADD_THREADS 8u
#define WB_ADD_MIN_ELEMENTS (1u << 20)

struct wb_stage {
	void *mem;                 /* max layer bytes, pinned where the device pins */
	int pinned;
	struct dev_event *after_user, *copied;
	struct dev_event *begin;   /* timing, before the copies (traced pushes only) */
	uint64_t bytes;            /* copied by this push */
	uint32_t layer;
	uint8_t *present;          /* per tensor of the layer: pushed in this one */
	uint8_t *landed;           /* ... and copied into the landing buffer, not mem */
	struct wb_stage *next;     /* in the free list or the worker's queue */
};

/* A tensor's gradient: zero (or never made); a sum in the fp32 accumulator;
 * stale (zeroed lazily, so that zeroing inside a backward pass costs
 * nothing: the next push overwrites, a read clears what no push wrote); or
 * one push in the landing buffer, in its own dtype, not yet widened. */
enum { HAS_ZERO = 0, HAS_SUM = 1, HAS_STALE = 2, HAS_LANDED = 3 };

struct wb_layer {
	float **acc;               /* per tensor, NULL until first widened into */
	uint8_t *has;              /* per tensor: HAS_*, as the worker has applied */
	uint8_t *planned;          /* per tensor: 1 once a push since zeroing is queued */
	void *land;                /* landing buffer (stage layout), made at first use */
	int land_pinned;
	uint64_t pushes;           /* accumulated since the last zeroing */
	uint32_t pending;          /* pushed, not yet accumulated */
};

struct wb {
	struct dev *dev;
	const struct wsp_pack_s *pk;
	uint32_t n_layers, max_tensors;
	uint64_t max_bytes;
	unsigned add_threads;      /* threads adding one push (<= WB_ADD_THREADS) */
	uint8_t *scratch;          /* 4 x max_tensors: the worker's two, a reader's two */

	pthread_mutex_t lock;
	pthread_cond_t cond;       /* a stage freed, a job queued or done, stop */
	struct wb_layer *layers;
	struct wb_stage stages[WB_STAGES];
	int started;               /* stages made and the worker running */
	struct wb_stage *free, *head, *tail;
	uint32_t pending_all;
	int stop;
	pthread_t worker;
	struct wspi_err failed;     /* the first failure of a copy or an addition */
	int failed_code;
	uint64_t n_pushes, bytes_d2h;
	uint64_t add_ns;           /* time the worker spent adding (after each copy) */
	wsp_trace_fn trace;        /* D2H events, timed from `epoch` (host time epoch_ns) */
	void *trace_ctx;
	struct dev_event *epoch;
	uint64_t epoch_ns;
};

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
	wb->add_threads = (unsigned)WSP_MAX(WSP_MIN((uint64_t)wspi_cpu_count(), WB_ADD_THREADS), 1);
	wb->n_layers = pk->m.hdr->n_layers;
	for (uint32_t l = 0; l < wb->n_layers; l++) {
		wb->max_tensors = WSP_MAX(wb->max_tensors, pk->layers[l].n_tensors);
		wb->max_bytes = WSP_MAX(wb->max_bytes, pk->layers[l].raw_bytes);
	}
	wb->layers = calloc(wb->n_layers ? wb->n_layers : 1, sizeof(*wb->layers));
	wb->scratch = calloc(4 * (size_t)(wb->max_tensors ? wb->max_tensors : 1), 1);
	if (!wb->layers || !wb->scratch) {
		free(wb->layers);
		free(wb->scratch);
		free(wb);
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory");
	}
	pthread_mutex_init(&wb->lock, NULL);
	pthread_cond_init(&wb->cond, NULL);
	wspi_err_init(&wb->failed);
	*out = wb;
	return 0;
}

static void fail(struct wb *wb, int rc, struct wspi_err *e)
{
	if (!wb->failed_code) {
		wb->failed_code = rc;
		wspi_err_set(&wb->failed, rc, "%s", e->msg);
	}
}

/* One pass over some tensors of a layer laid out as a stage is (each at a
 * WB_ALIGN-aligned offset of `src`): which[i] selects tensor i, first[i]
 * assigns instead of adding.  One thread takes the same slice [part/parts]
 * of each (elementwise, so the split never changes a result). */
struct acc_part {
	struct wb *wb;
	uint32_t layer;
	const uint8_t *src, *which, *first;
	unsigned part, parts;
};

static void *accumulate_part(void *arg)
{
	struct acc_part *p = arg;
	const struct wsp_layer *L = &p->wb->pk->layers[p->layer];
	struct wb_layer *wl = &p->wb->layers[p->layer];
	const uint8_t *src = p->src;
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		const struct wsp_tensor *t = &L->tensors[i];
		unsigned esize = wsp_dtype_bits(t->dtype) / 8;
		uint64_t n = t->bytes / esize;
		if (p->which[i]) {
			uint64_t per = (n + p->parts - 1) / p->parts;
			uint64_t a = WSP_MIN(n, per * p->part), b = WSP_MIN(n, a + per);
			wb_accumulate(wl->acc[i] + a, src + a * esize, t->dtype, b - a, p->first[i]);
		}
		src += wspi_align_up(t->bytes, WB_ALIGN);
	}
	return NULL;
}

static uint64_t tensor_elements(const struct wsp_tensor *t)
{
	return t->bytes / (wsp_dtype_bits(t->dtype) / 8);
}

/* Widen or add the selected tensors of `src` into the layer's accumulators,
 * then mark them HAS_SUM.  Large layers are split over up to WB_ADD_THREADS
 * threads.  Only the worker, or a reader holding the lock with nothing of
 * the layer pending, calls it: accumulators have one writer at a time. */
static int accumulate(struct wb *wb, uint32_t layer, const void *src, const uint8_t *which,
		      const uint8_t *first, struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[layer];
	struct wb_layer *wl = &wb->layers[layer];
	uint64_t elements = 0;
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		uint64_t n = tensor_elements(&L->tensors[i]);
		if (!which[i])
			continue;
		elements += n;
		if (!wl->acc[i] &&
		    !(wl->acc[i] = aligned_alloc(WB_ALIGN, wspi_align_up(n * 4 + 4, WB_ALIGN))))
			return WSP_ERR(err, -ENOMEM, "write-back: out of memory for the fp32 "
				       "gradient of %s (%" PRIu64 " elements)", L->tensors[i].name, n);
	}
	if (!elements)
		return 0;
	unsigned parts = (unsigned)WSP_MIN((uint64_t)wb->add_threads,
					   elements / WB_ADD_MIN_ELEMENTS + 1);
	struct acc_part part[WB_ADD_THREADS];
	pthread_t th[WB_ADD_THREADS];
	unsigned started = 0;
	for (unsigned k = 0; k < parts; k++)
		part[k] = (struct acc_part){ wb, layer, src, which, first, k, parts };
	for (unsigned k = 1; k < parts; k++) {
		if (pthread_create(&th[k], NULL, accumulate_part, &part[k]) != 0)
			break;
		started = k;
	}
	accumulate_part(&part[0]);
	for (unsigned k = 1; k <= started; k++)
		pthread_join(th[k], NULL);
	for (unsigned k = started + 1; k < parts; k++)   /* threads that could not start */
		accumulate_part(&part[k]);
	for (uint32_t i = 0; i < L->n_tensors; i++)
		if (which[i])
			wl->has[i] = HAS_SUM;
	return 0;
}

/* Widen the landed tensors of a layer into its accumulators; which and
 * first: scratch of max_tensors bytes (the worker's, or the reader's). */
static int widen_landed(struct wb *wb, uint32_t layer, uint8_t *which, uint8_t *first,
			struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[layer];
	struct wb_layer *wl = &wb->layers[layer];
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		which[i] = wl->has[i] == HAS_LANDED;
		first[i] = 1;
	}
	return accumulate(wb, layer, wl->land, which, first, err);
}

/* The worker's part of one push, once its copies are done. */
static int apply_push(struct wb *wb, struct wb_stage *s, struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[s->layer];
	struct wb_layer *wl = &wb->layers[s->layer];
	uint8_t *which = wb->scratch, *first = wb->scratch + wb->max_tensors;
	int rc = 0;
	int widen = 0;
	for (uint32_t i = 0; i < L->n_tensors; i++)
		widen |= s->present[i] && !s->landed[i] && wl->has[i] == HAS_LANDED;
	if (widen)   /* a second push adds to a landed one: widen that first */
		rc = widen_landed(wb, s->layer, which, first, err);
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		which[i] = s->present[i] && !s->landed[i];
		first[i] = wl->has[i] != HAS_SUM;
	}
	if (rc == 0)
		rc = accumulate(wb, s->layer, s->mem, which, first, err);
	for (uint32_t i = 0; rc == 0 && i < L->n_tensors; i++)
		if (s->present[i] && s->landed[i])
			wl->has[i] = HAS_LANDED;
	return rc;
}

/* The push's copies as a D2H event: their device times on the host clock. */
static void trace_push(struct wb *wb, const struct wb_stage *s)
{
	struct dev *d = wb->dev;
	uint64_t b, e;
	if (d->ops->elapsed_ns(d, wb->epoch, s->begin, &b, NULL) < 0 ||
	    d->ops->elapsed_ns(d, wb->epoch, s->copied, &e, NULL) < 0)
		return;
	struct wsp_trace_event ev = {
		.stage = WSP_STAGE_D2H, .layer = s->layer, .begin_ns = wb->epoch_ns + b,
		.end_ns = wb->epoch_ns + e, .bytes = s->bytes,
	};
	wb->trace(wb->trace_ctx, &ev);
}

static void *worker_main(void *arg)
{
	struct wb *wb = arg;
	pthread_mutex_lock(&wb->lock);
	for (;;) {
		while (!wb->head && !wb->stop)
			pthread_cond_wait(&wb->cond, &wb->lock);
		if (!wb->head)
			break;
		struct wb_stage *s = wb->head;
		pthread_mutex_unlock(&wb->lock);
		struct wspi_err e;
		wspi_err_init(&e);
		int rc = wb->dev->ops->event_sync(wb->dev, s->copied, &e);
		if (rc == 0 && wb->trace)
			trace_push(wb, s);
		uint64_t t0 = wspi_now_ns();
		if (rc == 0)
			rc = apply_push(wb, s, &e);
		uint64_t spent = wspi_now_ns() - t0;
		pthread_mutex_lock(&wb->lock);
		wb->add_ns += spent;
		if (rc < 0)
			fail(wb, rc, &e);
		wspi_err_destroy(&e);
		struct wb_layer *wl = &wb->layers[s->layer];
		if (rc == 0)
			wl->pushes++;
		wl->pending--;
		wb->pending_all--;
		wb->head = s->next;
		if (!wb->head)
			wb->tail = NULL;
		s->next = wb->free;
		wb->free = s;
		pthread_cond_broadcast(&wb->cond);
	}
	pthread_mutex_unlock(&wb->lock);
	return NULL;
}

static int start_stages(struct wb *wb, struct wspi_err *err);

static void stages_free(struct wb *wb)
{
	struct dev *d = wb->dev;
	for (unsigned i = 0; i < WB_STAGES; i++) {
		struct wb_stage *s = &wb->stages[i];
		if (s->after_user)
			d->ops->event_destroy(d, s->after_user);
		if (s->copied)
			d->ops->event_destroy(d, s->copied);
		if (s->begin)
			d->ops->event_destroy(d, s->begin);
		if (s->pinned)
			d->ops->unpin(d, s->mem);
		free(s->mem);
		free(s->present);
		free(s->landed);
		memset(s, 0, sizeof(*s));
	}
	wb->free = NULL;
	if (wb->epoch)
		d->ops->event_destroy(d, wb->epoch);
	wb->epoch = NULL;
}

/* Staging buffers, their events and the worker, at the first push; all or
 * nothing (a failed start leaves nothing behind, and the next push tries
 * again). */
static int start(struct wb *wb, struct wspi_err *err)
{
	int rc = start_stages(wb, err);
	if (rc == 0) {
		int e = pthread_create(&wb->worker, NULL, worker_main, wb);
		if (e)
			rc = WSP_ERR(err, -e, "write-back: starting its thread: %s", strerror(e));
	}
	if (rc < 0)
		stages_free(wb);
	else
		wb->started = 1;
	return rc;
}

static int start_stages(struct wb *wb, struct wspi_err *err)
{
	struct dev *d = wb->dev;
	/* Tensors are staged at WB_ALIGN-aligned offsets: room for the padding. */
	uint64_t bytes = wb->max_bytes + (uint64_t)wb->max_tensors * WB_ALIGN;
	for (unsigned i = 0; i < WB_STAGES; i++) {
		struct wb_stage *s = &wb->stages[i];
		int rc;
		s->mem = aligned_alloc(4096, wspi_align_up(bytes ? bytes : 1, 4096));
		s->present = calloc(wb->max_tensors ? wb->max_tensors : 1, 1);
		s->landed = calloc(wb->max_tensors ? wb->max_tensors : 1, 1);
		if (!s->mem || !s->present || !s->landed)
			return WSP_ERR(err, -ENOMEM, "write-back: out of memory for %u staging "
				       "buffers of %" PRIu64 " bytes", WB_STAGES, bytes);
		if (!dev_is_host(d)) {
			if ((rc = d->ops->pin(d, s->mem, wspi_align_up(bytes ? bytes : 1, 4096), err)) < 0)
				return rc;
			s->pinned = 1;
		}
		/* Timing events only when traced (they cost a little). */
		int timed = wb->trace != NULL;
		if ((rc = d->ops->event_create(d, 0, &s->after_user, err)) < 0 ||
		    (rc = d->ops->event_create(d, timed, &s->copied, err)) < 0 ||
		    (timed && (rc = d->ops->event_create(d, 1, &s->begin, err)) < 0))
			return rc;
		s->next = wb->free;
		wb->free = s;
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
	if (!wl->acc || !wl->has || !wl->planned) {
		free(wl->acc);
		free(wl->has);
		free(wl->planned);
		wl->acc = NULL;
		wl->has = wl->planned = NULL;
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory");
	}
	(void)wb;
	return 0;
}

/* The layer's landing buffer (stage layout), pinned where the device pins. */
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

/* Enqueue the copies of one push: a tensor's first push since zeroing lands
 * in the layer's landing buffer, later ones in the stage.  Under wb->lock
 * (the device calls only enqueue), so pushes are applied in the order they
 * were planned. */
static int enqueue_push(struct wb *wb, struct wb_stage *s, uint32_t layer,
			const void *const *grads, void *stream, uint64_t *bytes, struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[layer];
	struct wb_layer *wl = &wb->layers[layer];
	struct dev *d = wb->dev;
	uint64_t off = 0;
	int rc = d->ops->record(d, s->after_user, DEV_Q_USER, stream, err);
	if (rc == 0)
		rc = d->ops->wait(d, DEV_Q_BACK, NULL, s->after_user, err);
	if (rc == 0 && s->begin)
		rc = d->ops->record(d, s->begin, DEV_Q_BACK, NULL, err);
	for (uint32_t i = 0; rc == 0 && i < L->n_tensors; i++) {
		s->present[i] = grads[i] != NULL;
		s->landed[i] = grads[i] && !wl->planned[i];
		if (s->landed[i] && !wl->land)
			rc = land_buffer(wb, layer, err);
		if (rc == 0 && grads[i] && L->tensors[i].bytes) {
			uint8_t *dst = (uint8_t *)(s->landed[i] ? wl->land : s->mem) + off;
			rc = d->ops->copy_d2h(d, dst, grads[i], L->tensors[i].bytes, err);
			*bytes += L->tensors[i].bytes;
		}
		off += wspi_align_up(L->tensors[i].bytes, WB_ALIGN);
	}
	if (rc == 0)
		rc = d->ops->record(d, s->copied, DEV_Q_BACK, NULL, err);
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
	pthread_mutex_lock(&wb->lock);
	int rc = check_failed(wb, err);
	if (rc == 0 && !wb->started)
		rc = start(wb, err);
	if (rc == 0)
		rc = layer_arrays(wb, &wb->layers[layer], L->n_tensors, err);
	while (rc == 0 && !wb->free)
		pthread_cond_wait(&wb->cond, &wb->lock);
	if (rc < 0) {
		pthread_mutex_unlock(&wb->lock);
		return rc;
	}
	struct wb_stage *s = wb->free;
	wb->free = s->next;
	s->layer = layer;
	uint64_t bytes = 0;
	rc = enqueue_push(wb, s, layer, grads, stream, &bytes, err);
	s->bytes = bytes;
	if (rc < 0) {
		/* Nothing queued.  Copies that were enqueued may still run: wait
		 * for the write-back stream before the stage or landing buffer is
		 * used again. */
		if (wb->dev->ops->record(wb->dev, s->copied, DEV_Q_BACK, NULL, NULL) == 0)
			(void)wb->dev->ops->event_sync(wb->dev, s->copied, NULL);
		s->next = wb->free;
		wb->free = s;
	} else {
		for (uint32_t i = 0; i < L->n_tensors; i++)
			if (grads[i])
				wb->layers[layer].planned[i] = 1;
		s->next = NULL;
		if (wb->tail)
			wb->tail->next = s;
		else
			wb->head = s;
		wb->tail = s;
		wb->layers[layer].pending++;
		wb->pending_all++;
		wb->n_pushes++;
		wb->bytes_d2h += bytes;
	}
	pthread_cond_broadcast(&wb->cond);
	pthread_mutex_unlock(&wb->lock);
	return rc;
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
	while (pending(wb, layer))
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
		rc = widen_landed(wb, layer, wb->scratch + 2 * wb->max_tensors,
				  wb->scratch + 3 * wb->max_tensors, err);
		wb->add_ns += wspi_now_ns() - t0;
	}
	if (rc == 0) {
		struct wb_layer *wl = &wb->layers[layer];
		const struct wsp_layer *L = &wb->pk->layers[layer];
		for (uint32_t i = 0; rc == 0 && i < L->n_tensors; i++)
			if (wl->has[i] == HAS_STALE) {
				uint64_t n = tensor_elements(&L->tensors[i]);
				if (!wl->acc[i] &&
				    !(wl->acc[i] = aligned_alloc(WB_ALIGN, wspi_align_up(n * 4 + 4, WB_ALIGN))))
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
	stages_free(wb);
	for (uint32_t l = 0; l < wb->n_layers; l++) {
		struct wb_layer *wl = &wb->layers[l];
		for (uint32_t i = 0; wl->acc && i < wb->pk->layers[l].n_tensors; i++)
			free(wl->acc[i]);
		if (wl->land_pinned)
			wb->dev->ops->unpin(wb->dev, wl->land);
		free(wl->land);
		free(wl->acc);
		free(wl->has);
		free(wl->planned);
	}
	free(wb->layers);
	free(wb->scratch);
	wspi_err_destroy(&wb->failed);
	pthread_cond_destroy(&wb->cond);
	pthread_mutex_destroy(&wb->lock);
	free(wb);
}
