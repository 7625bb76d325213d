/*
 * The landing ring (ring.h).  Chunks are numbered in the order they are
 * issued; chunk s uses buffer s % WB_RING_SLOTS.  A buffer is FREE, then
 * COPYING (its copy issued), LANDED (the lander saw its event), WIDENING
 * (a thread took it), WIDENED (all its parts done, an earlier chunk's not
 * yet) and FREE again, in chunk order: threads finish chunks out of order,
 * but "done up to n" must mean every chunk below n is in its accumulator.
 * The caller (one at a time) issues
 * and lands in order, across calls: a call's chunks follow the last
 * call's without waiting for them to be widened; the threads take the
 * parts of landed chunks in order.  One lock guards the states and the
 * counters; the copies, the waits for them and the widening run outside
 * it.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "train/ring.h"
#include "train/tofloat.h"

/* 4 MiB: few enough chunks a second for one thread to issue and land (a
 * copy and an event each), 16 of them (64 MiB) inside the cache a
 * device's writes may take.  bench/landing_bench on an H200: this ring
 * alone widens at 0.95x the link with 4 MiB chunks, 0.89x with 2 MiB,
 * 0.54x with 1 MiB and 0.62x with 8 MiB (rings of 16 MiB of smaller
 * chunks: 0.49x; of 512 MiB: no faster than whole layers).  In full
 * training (bench/torch_train.py --fwd-bwd-only, an H200) 16 x 4 MiB beat
 * 16 x 2 MiB at batch 4 (100.8-102.8 ms against 108.7-109.2) and at batch
 * 12 (127.7-134.9 against 131.4-136.3); 32 x 2, 64 x 2, 8 x 8, 32 x 4 and
 * 16 x 8 MiB did no better.  Each chunk is widened in RING_PARTS parts,
 * by as many threads, so that a push's last chunk does not keep the next
 * push waiting for one thread. */
uint64_t wspi_ring_chunk_bytes = 4u << 20;
#define RING_PARTS 8u

void (*wspi_ring_part_hook)(uint64_t chunk);

#define RING_MAX_THREADS 32u

enum { FREE, COPYING, LANDED, WIDENING, WIDENED };

struct chunk {
	float *dst;
	uint64_t n;                /* elements; 0: skipped after a failure */
	enum wsp_dtype dt;
	int add;                   /* added into dst, not assigned (ring_job.add) */
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
	uint64_t n_issued;         /* chunks issued since the ring was made (a chunk's
				      number is its place in that order) */
	uint64_t n_landed;         /* ... landed (their copies seen done) */
	uint64_t n_taken;          /* ... all of whose parts were taken by threads */
	uint64_t n_done;           /* ... widened (or skipped), it and all before it */
	uint64_t fail_seq;         /* the first chunk whose copy or wait failed, or UINT64_MAX */
	int fail_rc;
	char fail_msg[WSP_ERRMSG_MAX];
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
		uint64_t seq = r->n_taken;
		c->state = WIDENING;
		if (c->taken == c->parts)
			r->n_taken++;
		unsigned esize = wsp_dtype_bits(c->dt) / 8;
		uint64_t per = r->part_bytes / esize, first = per * part;
		uint64_t n = c->n > first ? WSP_MIN(per, c->n - first) : 0;
		float *dst = c->dst + first;
		enum wsp_dtype dt = c->dt;
		int assign = !c->add;
		pthread_mutex_unlock(&r->lock);
		if (wspi_ring_part_hook)
			wspi_ring_part_hook(seq);
		if (n)
			wb_accumulate(dst, r->mem + (uint64_t)s * r->chunk_bytes + first * esize, dt, n,
				      assign);
		pthread_mutex_lock(&r->lock);
		if (++c->done == c->parts) {
			c->state = WIDENED;
			uint64_t was = r->n_done;
			while (r->n_done < r->n_taken &&
			       r->slot[r->n_done % WB_RING_SLOTS].state == WIDENED) {
				r->slot[r->n_done % WB_RING_SLOTS].state = FREE;
				r->n_done++;
			}
			if (r->n_done != was)
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
	r->fail_seq = UINT64_MAX;
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

/* A copy or a wait of chunk `seq` failed (under r->lock): kept, the first
 * one, for every wait that covers it; chunks from it on are skipped. */
static void note_failure(struct wb_ring *r, uint64_t seq, int rc, const struct wspi_err *e)
{
	if (seq < r->fail_seq) {
		r->fail_seq = seq;
		r->fail_rc = rc;
		snprintf(r->fail_msg, sizeof(r->fail_msg), "%s", e->msg);
	}
}

/* The kept failure into err (under r->lock). */
static int failure(const struct wb_ring *r, struct wspi_err *err)
{
	return WSP_ERR(err, r->fail_rc, "%s", r->fail_msg);
}

/* Issue chunk number r->n_issued (under r->lock; unlocked while enqueueing). */
static int issue(struct wb_ring *r, const struct ring_job *j, uint64_t first, struct wspi_err *err)
{
	uint64_t seq = r->n_issued;
	unsigned s = (unsigned)(seq % WB_RING_SLOTS);
	unsigned esize = wsp_dtype_bits(j->dt) / 8;
	uint64_t n = WSP_MIN(r->chunk_bytes / esize, j->n - first);
	uint64_t per = r->part_bytes / esize;
	r->slot[s] = (struct chunk){ j->dst + first, n, j->dt, j->add, COPYING,
				     (uint32_t)WSP_MAX((n + per - 1) / per, 1), 0, 0 };
	r->n_issued++;   /* even when it fails: its copy may have been enqueued */
	pthread_mutex_unlock(&r->lock);
	struct dev *d = r->dev;
	int rc = d->ops->copy_d2h(d, DEV_Q_LAND, r->mem + (uint64_t)s * r->chunk_bytes,
				  (const uint8_t *)j->src + first * esize, n * esize, err);
	if (rc == 0)
		rc = d->ops->record(d, r->copied[s], DEV_Q_LAND, NULL, err);
	pthread_mutex_lock(&r->lock);
	if (rc < 0)
		note_failure(r, seq, rc, err);
	return rc;
}

/* The oldest copy in flight (under r->lock, one in flight at least):
 * waited for (block) or asked about, and once done handed to the threads
 * (skipped from a failure on: the device may still have written into its
 * buffer, so it is waited for all the same).  1 if it was, 0 if not yet. */
static int land_oldest(struct wb_ring *r, int block)
{
	uint64_t seq = r->n_landed;
	unsigned s = (unsigned)(seq % WB_RING_SLOTS);
	struct wspi_err e;
	wspi_err_init(&e);
	pthread_mutex_unlock(&r->lock);
	int rc = block ? r->dev->ops->event_sync(r->dev, r->copied[s], &e)
		       : r->dev->ops->query(r->dev, r->copied[s], &e);
	pthread_mutex_lock(&r->lock);
	if (!block && rc == 0) {
		wspi_err_destroy(&e);
		return 0;
	}
	if (rc < 0)
		note_failure(r, seq, rc, &e);
	wspi_err_destroy(&e);
	struct chunk *c = &r->slot[s];
	if (seq >= r->fail_seq) {
		c->n = 0;
		c->parts = 1;
	}
	c->state = LANDED;
	r->n_landed++;
	if (c->parts > 1)
		pthread_cond_broadcast(&r->to_widen);
	else
		pthread_cond_signal(&r->to_widen);
	return 1;
}

int wb_ring_issue(struct wb_ring *r, const struct ring_job *jobs, uint32_t n_jobs, uint64_t *end,
		  struct wspi_err *err)
{
	pthread_mutex_lock(&r->lock);
	int rc = r->fail_seq < r->n_issued ? failure(r, err) : 0;
	for (uint32_t j = 0; rc == 0 && j < n_jobs; j++) {
		uint64_t per = r->chunk_bytes / (wsp_dtype_bits(jobs[j].dt) / 8);
		for (uint64_t at = 0; rc == 0 && at < jobs[j].n; at += per) {
			/* Its buffer free: the chunk WB_RING_SLOTS before it
			 * landed and widened. */
			while (rc == 0 && r->slot[r->n_issued % WB_RING_SLOTS].state != FREE) {
				if (r->n_landed < r->n_issued)
					land_oldest(r, 1);
				else
					pthread_cond_wait(&r->widened, &r->lock);
				if (r->fail_seq < r->n_issued)
					rc = failure(r, err);
			}
			if (rc == 0)
				rc = issue(r, &jobs[j], at, err);
		}
	}
	*end = r->n_issued;
	pthread_mutex_unlock(&r->lock);
	return rc;
}

uint64_t wb_ring_progress(struct wb_ring *r, int block)
{
	pthread_mutex_lock(&r->lock);
	int moved = 0;
	while (r->n_landed < r->n_issued && land_oldest(r, 0))
		moved = 1;
	if (block && !moved) {
		if (r->n_landed < r->n_issued)
			land_oldest(r, 1);
		else if (r->n_done < r->n_issued)
			pthread_cond_wait(&r->widened, &r->lock);
	}
	uint64_t done = r->n_done;
	pthread_mutex_unlock(&r->lock);
	return done;
}

int wb_ring_wait(struct wb_ring *r, uint64_t end, struct wspi_err *err)
{
	pthread_mutex_lock(&r->lock);
	while (r->n_done < end) {
		if (r->n_landed < end)
			land_oldest(r, 1);
		else
			pthread_cond_wait(&r->widened, &r->lock);
	}
	int rc = r->fail_seq < end ? failure(r, err) : 0;
	if (rc < 0 && r->n_done == r->n_issued)   /* reported, nothing in flight: forgotten */
		r->fail_seq = UINT64_MAX;
	pthread_mutex_unlock(&r->lock);
	return rc;
}
