/*
 * The write-back's worker thread (grads_int.h): it applies the queued
 * pushes in order once their copies are done (accumulate.c; pushes without
 * a staging buffer whose gradients are ready go together, their tensors
 * through the landing ring, and later ones follow while those still land,
 * unless they write a tensor still landing), retires them in order once
 * the ring is done with them, traces their copies, keeps the first
 * failure, and when nothing lands does the work ahead (ahead.c).
 */
#include <pthread.h>

#include "common/util.h"
#include "train/grads_int.h"

static void fail(struct wb *wb, int rc, struct wspi_err *e)
{
	if (!wb->failed_code) {
		wb->failed_code = rc;
		wspi_err_set(&wb->failed, rc, "%s", e->msg);
	}
}

/* The push's copies as a D2H event: their device times on the host clock. */
static void trace_push(struct wb *wb, const struct wb_push_s *p)
{
	struct dev *d = wb->dev;
	uint64_t b, e;
	if (d->ops->elapsed_ns(d, wb->epoch, p->begin, &b, NULL) < 0 ||
	    d->ops->elapsed_ns(d, wb->epoch, p->copied, &e, NULL) < 0)
		return;
	struct wsp_trace_event ev = {
		.stage = WSP_STAGE_D2H, .layer = p->layer, .begin_ns = wb->epoch_ns + b,
		.end_ns = wb->epoch_ns + e, .bytes = p->bytes,
	};
	wb->trace(wb->trace_ctx, &ev);
}

/* The D2H events of pushes applied together, one a push: a push that
 * landed nothing through the ring keeps its copies' device times; the
 * ring's copies ran from `begin` to `end` on the host's clock, a span
 * shared out among the pushes that used it by their bytes, so that the
 * events add up to the time the copies took. */
static void trace_pushes(struct wb *wb, struct wb_push_s *const *ps, uint32_t n, uint64_t begin,
			 uint64_t end)
{
	uint64_t ring = 0, done = 0;
	for (uint32_t k = 0; k < n; k++)
		ring += ps[k]->ring_bytes;
	for (uint32_t k = 0; k < n; k++) {
		const struct wb_push_s *p = ps[k];
		if (!p->ring_bytes) {
			trace_push(wb, p);
			continue;
		}
		uint64_t from = begin + (end - begin) * done / ring;
		done += p->ring_bytes;
		struct wsp_trace_event ev = {
			.stage = WSP_STAGE_D2H, .layer = p->layer, .begin_ns = from,
			.end_ns = begin + (end - begin) * done / ring, .bytes = p->bytes + p->ring_bytes,
		};
		wb->trace(wb->trace_ctx, &ev);
	}
}

/* A push slot back to the free list, with its staging buffer (under
 * wb->lock). */
void wb_push_free(struct wb *wb, struct wb_push_s *p)
{
	if (p->buf) {
		p->buf->next = wb->free_bufs;
		wb->free_bufs = p->buf;
		p->buf = NULL;
	}
	p->next = wb->free;
	wb->free = p;
}

/* Push p applied (rc 0) or failed: off the queue (it is the oldest). */
static void retire(struct wb *wb, struct wb_push_s *p, int rc)
{
	struct wb_layer *wl = &wb->layers[p->layer];
	if (rc == 0) {
		wl->pushes++;
		wb_queue_widen(wb, p);
		if (p->rows_tensor != NO_ROWS)
			wl->rows[p->rows_tensor] = 1;
	}
	wl->pending--;
	wb->pending_all--;
	wb->head = p->next;
	if (!wb->head)
		wb->tail = NULL;
	wb_push_free(wb, p);
}

/* Batches of pushes applied whose chunks still land through the ring,
 * oldest first.  Their pushes are the oldest of the queue; each batch is
 * retired once the ring is done to its end, so that a backward's pushes
 * keep the ring full instead of draining it after each. */
#define FLIGHT 8u

struct batch {
	struct wb_push_s *ps[WB_BATCH];
	uint32_t n;
	int rc;                    /* the apply's error (already kept by fail()) */
	uint64_t end;              /* the ring's chunks up to here are its */
	uint64_t t0;               /* when it was applied, host clock (its trace) */
};

struct flight {
	struct batch b[FLIGHT];
	uint32_t first, n;
	uint64_t last_end;         /* when the last batch retired was seen done */
};

/* Whether push p writes a tensor that push q lands through the ring. */
static int writes_landing(const struct wb *wb, const struct wb_push_s *p,
			  const struct wb_push_s *q)
{
	if (p->layer != q->layer || !q->ring_bytes)
		return 0;
	for (uint32_t i = 0; i < wb->pk->layers[p->layer].n_tensors; i++)
		if (q->landed[i] == LAND_RING && (p->present[i] || p->rows_tensor == i))
			return 1;
	return 0;
}

/* Whether push p writes a tensor that the batches in flight, or the
 * first pushes of batch b (NULL: none), still land through the ring: p
 * then waits until they are done, since two passes over one accumulator
 * at once would race, and whether p assigns or adds is known only once
 * the earlier one is in. */
static int waits_for_landing(const struct wb *wb, const struct wb_push_s *p,
			     const struct flight *fl, const struct batch *b)
{
	for (uint32_t k = 0; k < fl->n; k++) {
		const struct batch *f = &fl->b[(fl->first + k) % FLIGHT];
		for (uint32_t j = 0; j < f->n; j++)
			if (writes_landing(wb, p, f->ps[j]))
				return 1;
	}
	for (uint32_t j = 0; b && j < b->n; j++)
		if (writes_landing(wb, p, b->ps[j]))
			return 1;
	return 0;
}

static uint64_t ring_done(struct wb *wb, int block)
{
	return wb->ring ? wb_ring_progress(wb->ring, block) : UINT64_MAX;
}

/* The batches the ring is done with (`done`, wb_ring_progress) retired,
 * oldest first; called unlocked. */
static void retire_landed(struct wb *wb, struct flight *fl, uint64_t done)
{
	while (fl->n && fl->b[fl->first].end <= done) {
		struct batch *b = &fl->b[fl->first];
		struct wspi_err e;
		wspi_err_init(&e);
		/* Done already: only its chunks' failure, if one failed. */
		int rc = b->end ? wb_ring_wait(wb->ring, b->end, &e) : 0;
		/* Its ring copies' span: from when it was applied, or the
		 * batch before it was done, to now; so spans do not overlap and
		 * add up to the time the ring was busy. */
		uint64_t now = wspi_now_ns();
		if (rc == 0 && b->rc == 0 && wb->trace)
			trace_pushes(wb, b->ps, b->n, WSP_MAX(b->t0, fl->last_end), now);
		fl->last_end = now;
		pthread_mutex_lock(&wb->lock);
		if (rc < 0 && b->rc == 0)
			fail(wb, rc, &e);
		if (b->rc < 0)
			rc = b->rc;
		if (rc == 0)
			wb_rings_landed(wb, b->ps, b->n);
		for (uint32_t k = 0; k < b->n; k++)
			retire(wb, b->ps[k], rc);
		pthread_cond_broadcast(&wb->cond);
		pthread_mutex_unlock(&wb->lock);
		wspi_err_destroy(&e);
		fl->first = (fl->first + 1) % FLIGHT;
		fl->n--;
	}
}

void *wb_worker_main(void *arg)
{
	struct wb *wb = arg;
	struct flight fl = { .n = 0 };
	pthread_mutex_lock(&wb->lock);
	for (;;) {
		if (!fl.n) {
			while (!wb->head && !wb->stop && !wb_ahead_ready(wb))
				pthread_cond_wait(&wb->cond, &wb->lock);
			/* Work ahead (ahead.c) while no push is queued or the
			 * oldest one's copies still run; else apply that push. */
			if (wb_ahead_ready(wb) &&
			    (!wb->head || wb->dev->ops->query(wb->dev, wb->head->copied, NULL) == 0)) {
				struct wspi_err e;
				wspi_err_init(&e);
				int rc = wb_work_ahead(wb, &e);
				if (rc < 0)   /* kept for every later call; the reader tries again */
					fail(wb, rc, &e);
				wspi_err_destroy(&e);
				continue;
			}
			if (!wb->head)   /* stopping, and nothing queued */
				break;
		}
		const struct batch *last = &fl.b[(fl.first + fl.n + FLIGHT - 1) % FLIGHT];
		struct wb_push_s *p = fl.n ? last->ps[last->n - 1]->next : wb->head;
		/* While batches land, a push follows them once its gradients
		 * are ready, unless it writes a tensor they are landing: then
		 * it waits until they are done. */
		if (fl.n && (!p || fl.n == FLIGHT ||
			     wb->dev->ops->query(wb->dev, p->copied, NULL) == 0 ||
			     waits_for_landing(wb, p, &fl, NULL))) {
			pthread_mutex_unlock(&wb->lock);
			uint64_t t = wspi_now_ns();
			uint64_t done = ring_done(wb, 1);
			uint64_t spent = wspi_now_ns() - t;
			retire_landed(wb, &fl, done);
			pthread_mutex_lock(&wb->lock);
			wb->add_ns += spent;
			continue;
		}
		pthread_mutex_unlock(&wb->lock);
		struct wspi_err e;
		wspi_err_init(&e);
		/* Rows copied in pieces are added as each lands (accumulate.c):
		 * the first is enough to begin. */
		struct dev_event *ready = p->rows_tensor != NO_ROWS ? wb_piece_event(p, 0) : p->copied;
		int rc = wb->dev->ops->event_sync(wb->dev, ready, &e);
		if (rc < 0 && ready != p->copied)   /* its buffer is freed: no copy may still run */
			(void)wb->dev->ops->event_sync(wb->dev, p->copied, NULL);
		/* Pushes without a staging buffer queued behind it whose
		 * gradients are ready go with it, up to one that writes a
		 * tensor landing before it. */
		struct batch *b = &fl.b[(fl.first + fl.n) % FLIGHT];
		b->ps[0] = p;
		b->n = 1;
		pthread_mutex_lock(&wb->lock);
		for (struct wb_push_s *q = p->next; rc == 0 && !p->buf && q && !q->buf &&
						     b->n < WB_BATCH; q = q->next) {
			if (wb->dev->ops->query(wb->dev, q->copied, NULL) != 1 ||
			    waits_for_landing(wb, q, &fl, b))
				break;
			b->ps[b->n++] = q;
		}
		pthread_mutex_unlock(&wb->lock);
		b->t0 = wspi_now_ns();
		b->end = 0;
		if (rc == 0)
			rc = wb_apply_pushes(wb, b->ps, b->n, &b->end, &e);
		b->rc = rc;
		uint64_t spent = wspi_now_ns() - b->t0;
		pthread_mutex_lock(&wb->lock);
		wb->add_ns += spent;
		if (rc < 0)
			fail(wb, rc, &e);
		pthread_mutex_unlock(&wb->lock);
		wspi_err_destroy(&e);
		fl.n++;
		retire_landed(wb, &fl, ring_done(wb, 0));
		pthread_mutex_lock(&wb->lock);
	}
	pthread_mutex_unlock(&wb->lock);
	return NULL;
}
