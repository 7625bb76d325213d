/*
 * The landing ring (ring.h).  Chunks are numbered in the order they are
 * issued; chunk s uses buffer s % WB_RING_SLOTS.  A buffer is FREE, then
 * COPYING (its copy issued), LANDED (the lander saw its event), WIDENING
 * (a thread took it) and FREE again.  The lander issues and lands in
 * order; the threads take the parts of landed chunks in order.  One lock guards the
 * states and the counters; the copies, the waits for them and the
 * widening run outside it.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "train/ring.h"
#include "train/tofloat.h"

/* 2 MiB: few enough chunks a second for one thread to issue and land (a
 * copy and an event each), 16 of them (32 MiB) inside the cache a
 * device's writes may take (bench/landing_bench: rings of 32 MiB widened
 * at 0.81-0.89x the link, larger ones no faster than whole layers).  Each
 * chunk is widened in RING_PARTS parts, by as many threads, so that a
 * push's last chunk does not keep the next push waiting for one thread. */
uint64_t wspi_ring_chunk_bytes = 2u << 20;
#define RING_PARTS 8u

#define RING_MAX_THREADS 32u

enum { FREE, COPYING, LANDED, WIDENING };

struct chunk {
	float *dst;
	uint64_t n;                /* elements; 0: skipped after a failure */
	enum wsp_dtype dt;
	int state;
	uint32_t parts, taken, done;   /* parts to widen, taken by threads, widened */
};

struct wb_ring {
	struct dev *dev;
	uint8_t *mem;              /* WB_RING_SLOTS x chunk bytes */
	uint64_t chunk_bytes, part_bytes;
	int pinned;
	struct dev_event *copied[WB_RING_SLOTS];
	struct chunk slot[WB_RING_SLOTS];
	pthread_mutex_t lock;
	pthread_cond_t to_widen;   /* the threads: a chunk landed, or stop */
	pthread_cond_t widened;    /* the lander: a buffer free again */
	uint64_t n_landed;         /* chunks landed since the ring was made */
	uint64_t n_taken;          /* ... all of whose parts were taken by threads */
	uint64_t n_done;           /* ... widened (or skipped) */
	int stop;
	pthread_t threads[RING_MAX_THREADS];
	unsigned n_threads;
};

static void *widen_main(void *arg)
{
	struct wb_ring *r = arg;
	pthread_mutex_lock(&r->lock);
	for (;;) {
		while (!r->stop && r->n_taken == r->n_landed)
			pthread_cond_wait(&r->to_widen, &r->lock);
		if (r->n_taken == r->n_landed)   /* stopping, nothing left */
			break;
		unsigned s = (unsigned)(r->n_taken % WB_RING_SLOTS);
		struct chunk *c = &r->slot[s];
		uint32_t part = c->taken++;
		c->state = WIDENING;
		if (c->taken == c->parts)
			r->n_taken++;
		unsigned esize = wsp_dtype_bits(c->dt) / 8;
		uint64_t per = r->part_bytes / esize, first = per * part;
		uint64_t n = c->n > first ? WSP_MIN(per, c->n - first) : 0;
		float *dst = c->dst + first;
		enum wsp_dtype dt = c->dt;
		pthread_mutex_unlock(&r->lock);
		if (n)
			wb_accumulate(dst, r->mem + (uint64_t)s * r->chunk_bytes + first * esize, dt, n,
				      1);
		pthread_mutex_lock(&r->lock);
		if (++c->done == c->parts) {
			c->state = FREE;
			r->n_done++;
			pthread_cond_signal(&r->widened);
		}
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

void wb_ring_destroy(struct wb_ring *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = 1;
	pthread_cond_broadcast(&r->to_widen);
	pthread_mutex_unlock(&r->lock);
	for (unsigned k = 0; k < r->n_threads; k++)
		pthread_join(r->threads[k], NULL);
	for (unsigned s = 0; s < WB_RING_SLOTS; s++)
		if (r->copied[s])
			r->dev->ops->event_destroy(r->dev, r->copied[s]);
	if (r->pinned)
		r->dev->ops->unpin(r->dev, r->mem);
	free(r->mem);
	pthread_cond_destroy(&r->to_widen);
	pthread_cond_destroy(&r->widened);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

int wb_ring_create(struct dev *d, unsigned threads, struct wb_ring **out, struct wspi_err *err)
{
	struct wb_ring *r = calloc(1, sizeof(*r));
	if (!r)
		return WSP_ERR(err, -ENOMEM, "landing ring: out of memory");
	r->dev = d;
	/* Whole cache lines, so that no two chunks share one. */
	r->chunk_bytes = wspi_align_up(WSP_MAX(wspi_ring_chunk_bytes, 64), 64);
	r->part_bytes = wspi_align_up(r->chunk_bytes / RING_PARTS, 64);
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->to_widen, NULL);
	pthread_cond_init(&r->widened, NULL);
	uint64_t bytes = wspi_align_up(r->chunk_bytes * WB_RING_SLOTS, 4096);
	int rc = 0;
	if (!(r->mem = aligned_alloc(4096, bytes)))
		rc = WSP_ERR(err, -ENOMEM, "landing ring: out of memory for %" PRIu64 " bytes",
			     bytes);
	if (rc == 0 && !dev_is_host(d) && (rc = d->ops->pin(d, r->mem, bytes, err)) == 0)
		r->pinned = 1;
	for (unsigned s = 0; rc == 0 && s < WB_RING_SLOTS; s++)
		rc = d->ops->event_create(d, 0, &r->copied[s], err);
	threads = WSP_MIN(WSP_MAX(threads, 1u), RING_MAX_THREADS);
	while (rc == 0 && r->n_threads < threads &&
	       pthread_create(&r->threads[r->n_threads], NULL, widen_main, r) == 0)
		r->n_threads++;
	if (rc == 0 && !r->n_threads)
		rc = WSP_ERR(err, -EAGAIN, "landing ring: no thread could be started");
	if (rc < 0) {
		wb_ring_destroy(r);
		return rc;
	}
	*out = r;
	return 0;
}

/* Issue chunk number `seq` (under r->lock; unlocked while enqueueing). */
static int issue(struct wb_ring *r, uint64_t seq, const struct ring_job *j, uint64_t first,
		 struct wspi_err *err)
{
	unsigned s = (unsigned)(seq % WB_RING_SLOTS);
	unsigned esize = wsp_dtype_bits(j->dt) / 8;
	uint64_t n = WSP_MIN(r->chunk_bytes / esize, j->n - first);
	uint64_t per = r->part_bytes / esize;
	r->slot[s] = (struct chunk){ j->dst + first, n, j->dt, COPYING,
				     (uint32_t)WSP_MAX((n + per - 1) / per, 1), 0, 0 };
	pthread_mutex_unlock(&r->lock);
	struct dev *d = r->dev;
	int rc = d->ops->copy_d2h(d, DEV_Q_LAND, r->mem + (uint64_t)s * r->chunk_bytes,
				  (const uint8_t *)j->src + first * esize, n * esize, err);
	if (rc == 0)
		rc = d->ops->record(d, r->copied[s], DEV_Q_LAND, NULL, err);
	pthread_mutex_lock(&r->lock);
	return rc;
}

int wb_ring_land(struct wb_ring *r, const struct ring_job *jobs, uint32_t n_jobs,
		 struct wspi_err *err)
{
	pthread_mutex_lock(&r->lock);
	const uint64_t base = r->n_landed;   /* == n_done: the last call left nothing */
	uint64_t issued = 0, landed = 0;
	uint32_t j = 0;
	uint64_t at = 0;                      /* the next element of jobs[j] to issue */
	int rc = 0;
	for (;;) {
		/* Copies into every free buffer, in order. */
		while (rc == 0 && j < n_jobs &&
		       r->slot[(base + issued) % WB_RING_SLOTS].state == FREE) {
			if (at >= jobs[j].n) {
				j++;
				at = 0;
				continue;
			}
			uint64_t first = at;
			at += r->chunk_bytes / (wsp_dtype_bits(jobs[j].dt) / 8);
			rc = issue(r, base + issued, &jobs[j], first, err);
			issued++;   /* even when it failed: its copy may have been enqueued */
		}
		if (landed == issued && r->n_done - base == issued)
			break;
		if (landed < issued) {
			/* The oldest copy: wait for it, hand it to the threads.
			 * After a failure each one still issued is waited for
			 * (the device may still write into its buffer) and
			 * skipped. */
			unsigned s = (unsigned)((base + landed) % WB_RING_SLOTS);
			pthread_mutex_unlock(&r->lock);
			int e = r->dev->ops->event_sync(r->dev, r->copied[s], rc < 0 ? NULL : err);
			pthread_mutex_lock(&r->lock);
			if (e < 0 && rc == 0)
				rc = e;
			if (rc < 0) {
				r->slot[s].n = 0;
				r->slot[s].parts = 1;
			}
			r->slot[s].state = LANDED;
			r->n_landed++;
			landed++;
			if (r->slot[s].parts > 1)
				pthread_cond_broadcast(&r->to_widen);
			else
				pthread_cond_signal(&r->to_widen);
			continue;
		}
		pthread_cond_wait(&r->widened, &r->lock);   /* a buffer to come free */
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}
