/*
 * The write-back's worker thread (grads_int.h): it applies the queued
 * pushes in order once their copies are done (accumulate.c; first pushes
 * whose gradients are ready go together, their tensors through the
 * landing ring in one stream), traces their copies, keeps the first
 * failure, and between pushes does the work ahead (ahead.c).
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

void *wb_worker_main(void *arg)
{
	struct wb *wb = arg;
	pthread_mutex_lock(&wb->lock);
	for (;;) {
		while (!wb->head && !wb->stop && !wb_ahead_ready(wb))
			pthread_cond_wait(&wb->cond, &wb->lock);
		/* Work ahead (ahead.c) while no push is queued or the oldest
		 * one's copies still run; else apply that push. */
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
		struct wb_push_s *p = wb->head;
		pthread_mutex_unlock(&wb->lock);
		struct wspi_err e;
		wspi_err_init(&e);
		int rc = wb->dev->ops->event_sync(wb->dev, p->copied, &e);
		/* First pushes only (no staging buffer) queued behind it whose
		 * gradients are ready go with it: their chunks through the ring
		 * in one stream, not one drained ring a tensor. */
		struct wb_push_s *batch[WB_BATCH] = { p };
		uint32_t n = 1;
		pthread_mutex_lock(&wb->lock);
		for (struct wb_push_s *q = p->next; rc == 0 && !p->buf && q && !q->buf &&
						     n < WB_BATCH; q = q->next) {
			if (wb->dev->ops->query(wb->dev, q->copied, NULL) != 1)
				break;
			batch[n++] = q;
		}
		pthread_mutex_unlock(&wb->lock);
		uint64_t t0 = wspi_now_ns();
		if (rc == 0)
			rc = wb_apply_pushes(wb, batch, n, &e);
		uint64_t spent = wspi_now_ns() - t0;
		if (rc == 0 && wb->trace)
			trace_pushes(wb, batch, n, t0, t0 + spent);
		pthread_mutex_lock(&wb->lock);
		wb->add_ns += spent;
		if (rc < 0)
			fail(wb, rc, &e);
		wspi_err_destroy(&e);
		for (uint32_t k = 0; k < n; k++)
			retire(wb, batch[k], rc);
		pthread_cond_broadcast(&wb->cond);
	}
	pthread_mutex_unlock(&wb->lock);
	return NULL;
}
