/*
 * Gradients out of the GPU: staging buffers, the accumulating worker, and
 * the per-layer fp32 accumulators (see writeback.h).
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
	uint32_t layer;
	uint8_t *present;          /* per tensor of the layer: pushed in this one */
	struct wb_stage *next;     /* in the free list or the worker's queue */
};

/* A tensor's accumulator: zero (or never made), holding a sum, or stale:
 * zeroed lazily, so that zeroing inside a backward pass costs nothing; the
 * next push assigns instead of adding, and a read clears what no push has. */
enum { HAS_ZERO = 0, HAS_SUM = 1, HAS_STALE = 2 };

struct wb_layer {
	float **acc;               /* per tensor, NULL until its first push */
	uint8_t *has;              /* per tensor: HAS_* */
	uint64_t pushes;           /* accumulated since the last zeroing */
	uint32_t pending;          /* pushed, not yet accumulated */
};

struct wb {
	struct dev *dev;
	const struct wsp_pack_s *pk;
	uint32_t n_layers, max_tensors;
	uint64_t max_bytes;
	unsigned add_threads;      /* threads adding one push (<= WB_ADD_THREADS) */

	pthread_mutex_t lock;
	pthread_cond_t cond;       /* a stage freed, a job queued or done, stop */
	struct wb_layer *layers;
	struct wb_stage stages[WB_STAGES];
	int started;               /* stages made and the worker running */
	struct wb_stage *free, *head, *tail;
	uint32_t pending_all;
	int stop;
	pthread_t worker;
	struct wsp_err failed;     /* the first failure of a copy or an addition */
	int failed_code;
	uint64_t n_pushes, bytes_d2h;
	uint64_t add_ns;           /* time the worker spent adding (after each copy) */
};

int wb_create(struct dev *d, const struct wsp_pack_s *pk, struct wb **out, struct wsp_err *err)
{
	struct wb *wb = calloc(1, sizeof(*wb));
	if (!wb)
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory");
	wb->dev = d;
	wb->pk = pk;
	wb->add_threads = (unsigned)WSP_MAX(WSP_MIN((uint64_t)wsp_cpu_count(), WB_ADD_THREADS), 1);
	wb->n_layers = pk->m.hdr->n_layers;
	for (uint32_t l = 0; l < wb->n_layers; l++) {
		wb->max_tensors = WSP_MAX(wb->max_tensors, pk->layers[l].n_tensors);
		wb->max_bytes = WSP_MAX(wb->max_bytes, pk->layers[l].raw_bytes);
	}
	wb->layers = calloc(wb->n_layers ? wb->n_layers : 1, sizeof(*wb->layers));
	if (!wb->layers) {
		free(wb);
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory");
	}
	pthread_mutex_init(&wb->lock, NULL);
	pthread_cond_init(&wb->cond, NULL);
	wsp_err_init(&wb->failed);
	*out = wb;
	return 0;
}

static void fail(struct wb *wb, int rc, struct wsp_err *e)
{
	if (!wb->failed_code) {
		wb->failed_code = rc;
		wsp_err_set(&wb->failed, rc, "%s", e->msg);
	}
}

/* One thread's share of a stage: the same slice [part/parts] of every
 * tensor (elementwise, so the split never changes a result). */
struct acc_part {
	struct wb *wb;
	struct wb_stage *s;
	unsigned part, parts;
};

static void *accumulate_part(void *arg)
{
	struct acc_part *p = arg;
	const struct wsp_layer *L = &p->wb->pk->layers[p->s->layer];
	struct wb_layer *wl = &p->wb->layers[p->s->layer];
	const uint8_t *src = p->s->mem;
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		const struct wsp_tensor *t = &L->tensors[i];
		unsigned esize = wsp_dtype_bits(t->dtype) / 8;
		uint64_t n = t->bytes / esize;
		if (p->s->present[i]) {
			uint64_t per = (n + p->parts - 1) / p->parts;
			uint64_t a = WSP_MIN(n, per * p->part), b = WSP_MIN(n, a + per);
			wb_accumulate(wl->acc[i] + a, src + a * esize, t->dtype, b - a,
				      wl->has[i] != HAS_SUM);
		}
		src += wsp_align_up(t->bytes, WB_ALIGN);
	}
	return NULL;
}

/* Add one staged push into its layer's accumulators (worker, no lock held:
 * only the worker writes accumulators, and readers wait for pending == 0).
 * Large layers are split over up to WB_ADD_THREADS threads: a bf16 layer of
 * 200 M elements takes one thread a few hundred ms. */
static int accumulate(struct wb *wb, struct wb_stage *s, struct wsp_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[s->layer];
	struct wb_layer *wl = &wb->layers[s->layer];
	uint64_t elements = 0;
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		const struct wsp_tensor *t = &L->tensors[i];
		uint64_t n = t->bytes / (wsp_dtype_bits(t->dtype) / 8);
		if (!s->present[i])
			continue;
		elements += n;
		if (!wl->acc[i] &&
		    !(wl->acc[i] = aligned_alloc(WB_ALIGN, wsp_align_up(n * 4 + 4, WB_ALIGN))))
			return WSP_ERR(err, -ENOMEM, "write-back: out of memory for the fp32 "
				       "gradient of %s (%" PRIu64 " elements)", t->name, n);
	}
	unsigned parts = (unsigned)WSP_MIN((uint64_t)wb->add_threads,
					   elements / WB_ADD_MIN_ELEMENTS + 1);
	struct acc_part part[WB_ADD_THREADS];
	pthread_t th[WB_ADD_THREADS];
	unsigned started = 0;
	for (unsigned k = 0; k < parts; k++)
		part[k] = (struct acc_part){ wb, s, k, parts };
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
		if (s->present[i])
			wl->has[i] = HAS_SUM;
	return 0;
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
		struct wsp_err e;
		wsp_err_init(&e);
		int rc = wb->dev->ops->event_sync(wb->dev, s->copied, &e);
		uint64_t t0 = wsp_now_ns();
		if (rc == 0)
			rc = accumulate(wb, s, &e);
		uint64_t spent = wsp_now_ns() - t0;
		pthread_mutex_lock(&wb->lock);
		wb->add_ns += spent;
		if (rc < 0)
			fail(wb, rc, &e);
		wsp_err_destroy(&e);
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

static int start_stages(struct wb *wb, struct wsp_err *err);

static uint64_t tensor_elements(const struct wsp_tensor *t)
{
	return t->bytes / (wsp_dtype_bits(t->dtype) / 8);
}

static void stages_free(struct wb *wb)
{
	struct dev *d = wb->dev;
	for (unsigned i = 0; i < WB_STAGES; i++) {
		struct wb_stage *s = &wb->stages[i];
		if (s->after_user)
			d->ops->event_destroy(d, s->after_user);
		if (s->copied)
			d->ops->event_destroy(d, s->copied);
		if (s->pinned)
			d->ops->unpin(d, s->mem);
		free(s->mem);
		free(s->present);
		memset(s, 0, sizeof(*s));
	}
	wb->free = NULL;
}

/* Staging buffers, their events and the worker, at the first push; all or
 * nothing (a failed start leaves nothing behind, and the next push tries
 * again). */
static int start(struct wb *wb, struct wsp_err *err)
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

static int start_stages(struct wb *wb, struct wsp_err *err)
{
	struct dev *d = wb->dev;
	/* Tensors are staged at WB_ALIGN-aligned offsets: room for the padding. */
	uint64_t bytes = wb->max_bytes + (uint64_t)wb->max_tensors * WB_ALIGN;
	for (unsigned i = 0; i < WB_STAGES; i++) {
		struct wb_stage *s = &wb->stages[i];
		int rc;
		s->mem = aligned_alloc(4096, wsp_align_up(bytes ? bytes : 1, 4096));
		s->present = calloc(wb->max_tensors ? wb->max_tensors : 1, 1);
		if (!s->mem || !s->present)
			return WSP_ERR(err, -ENOMEM, "write-back: out of memory for %u staging "
				       "buffers of %" PRIu64 " bytes", WB_STAGES, bytes);
		if (!dev_is_host(d)) {
			if ((rc = d->ops->pin(d, s->mem, wsp_align_up(bytes ? bytes : 1, 4096), err)) < 0)
				return rc;
			s->pinned = 1;
		}
		if ((rc = d->ops->event_create(d, 0, &s->after_user, err)) < 0 ||
		    (rc = d->ops->event_create(d, 0, &s->copied, err)) < 0)
			return rc;
		s->next = wb->free;
		wb->free = s;
	}
	return 0;
}

static int check_failed(struct wb *wb, struct wsp_err *err)
{
	if (!wb->failed_code)
		return 0;
	return WSP_ERR(err, wb->failed_code, "write-back failed earlier: %s", wb->failed.msg);
}

static int layer_arrays(struct wb *wb, struct wb_layer *wl, uint32_t n, struct wsp_err *err)
{
	if (wl->acc)
		return 0;
	wl->acc = calloc(n ? n : 1, sizeof(*wl->acc));
	wl->has = calloc(n ? n : 1, 1);
	if (!wl->acc || !wl->has) {
		free(wl->acc);
		free(wl->has);
		wl->acc = NULL;
		wl->has = NULL;
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory");
	}
	(void)wb;
	return 0;
}

int wb_push(struct wb *wb, uint32_t layer, const void *const *grads, void *stream,
	    struct wsp_err *err)
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
	pthread_mutex_unlock(&wb->lock);

	/* The copies wait for what the user's stream has enqueued so far. */
	struct dev *d = wb->dev;
	uint64_t off = 0, bytes = 0;
	s->layer = layer;
	rc = d->ops->record(d, s->after_user, DEV_Q_USER, stream, err);
	if (rc == 0)
		rc = d->ops->wait(d, DEV_Q_BACK, NULL, s->after_user, err);
	for (uint32_t i = 0; rc == 0 && i < L->n_tensors; i++) {
		s->present[i] = grads[i] != NULL;
		if (grads[i] && L->tensors[i].bytes) {
			rc = d->ops->copy_d2h(d, (uint8_t *)s->mem + off, grads[i],
					      L->tensors[i].bytes, err);
			bytes += L->tensors[i].bytes;
		}
		off += wsp_align_up(L->tensors[i].bytes, WB_ALIGN);
	}
	if (rc == 0)
		rc = d->ops->record(d, s->copied, DEV_Q_BACK, NULL, err);

	pthread_mutex_lock(&wb->lock);
	if (rc < 0) {   /* nothing queued: the stage goes back */
		s->next = wb->free;
		wb->free = s;
		pthread_cond_broadcast(&wb->cond);
	} else {
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
		pthread_cond_broadcast(&wb->cond);
	}
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

static uint32_t pending(struct wb *wb, uint32_t layer)
{
	return layer == UINT32_MAX ? wb->pending_all : wb->layers[layer].pending;
}

int wb_query(struct wb *wb, uint32_t layer, struct wsp_err *err)
{
	pthread_mutex_lock(&wb->lock);
	int rc = pending(wb, layer) ? 0 : 1;
	if (rc == 1)
		rc = check_failed(wb, err) < 0 ? wb->failed_code : 1;
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

static int wait_locked(struct wb *wb, uint32_t layer, struct wsp_err *err)
{
	while (pending(wb, layer))
		pthread_cond_wait(&wb->cond, &wb->lock);
	return check_failed(wb, err);
}

int wb_wait(struct wb *wb, uint32_t layer, struct wsp_err *err)
{
	pthread_mutex_lock(&wb->lock);
	int rc = wait_locked(wb, layer, err);
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

int wb_grads(struct wb *wb, uint32_t layer, float *const **data, uint64_t *pushes,
	     struct wsp_err *err)
{
	pthread_mutex_lock(&wb->lock);
	int rc = wait_locked(wb, layer, err);
	if (rc == 0)
		rc = layer_arrays(wb, &wb->layers[layer], wb->pk->layers[layer].n_tensors, err);
	if (rc == 0) {
		struct wb_layer *wl = &wb->layers[layer];
		const struct wsp_layer *L = &wb->pk->layers[layer];
		for (uint32_t i = 0; i < L->n_tensors; i++)
			if (wl->has[i] == HAS_STALE) {
				memset(wl->acc[i], 0, tensor_elements(&L->tensors[i]) * 4);
				wl->has[i] = HAS_ZERO;
			}
		*data = wl->acc;
		*pushes = wl->pushes;
	}
	pthread_mutex_unlock(&wb->lock);
	return rc;
}

static void zero_layer(struct wb *wb, uint32_t l)
{
	struct wb_layer *wl = &wb->layers[l];
	const struct wsp_layer *L = &wb->pk->layers[l];
	wl->pushes = 0;
	for (uint32_t i = 0; wl->acc && i < L->n_tensors; i++)
		if (wl->has[i] == HAS_SUM)
			wl->has[i] = HAS_STALE;   /* cleared when read, or overwritten by a push */
}

int wb_zero(struct wb *wb, uint32_t layer, struct wsp_err *err)
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
		free(wl->acc);
		free(wl->has);
	}
	free(wb->layers);
	wsp_err_destroy(&wb->failed);
	pthread_cond_destroy(&wb->cond);
	pthread_mutex_destroy(&wb->lock);
	free(wb);
}
