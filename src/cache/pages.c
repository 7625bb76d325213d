/*
 * The page arena of the host tier: one anonymous mapping of the budget,
 * carved into fixed pages kept on a free stack.  With a pin hook the arena
 * is page-locked in pieces by a background thread; a piece's pages join the
 * free stack once it is pinned, so the first loads start before the whole
 * budget is locked.  A pinning failure is never silent: it goes to the
 * notice channel and the statistics, and the remaining pages are handed out
 * pageable so that the caller (the GPU tier) decides what to do.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/hcache_int.h"
#include "common/util.h"

#define HC_PIN_PIECE (256ull << 20)

int hc_pages_init(struct hcache *hc, uint64_t budget, struct wspi_err *err)
{
	uint64_t n = budget / hc->pg.page_bytes;
	if (n > UINT32_MAX - 1)
		n = UINT32_MAX - 1;
	hc->pg.n_pages = (uint32_t)n;
	hc->pg.arena_bytes = n * hc->pg.page_bytes;
	if (!n)
		return 0;
	void *p = mmap(NULL, hc->pg.arena_bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		char sz[32];
		return WSP_ERR(err, -e, "host cache: mapping %s failed: %s",
			       wsp_format_size(hc->pg.arena_bytes, sz, sizeof(sz)), strerror(e));
	}
	hc->pg.arena = p;
	/* Large pages make decoding into the arena cheaper; optional. */
	(void)madvise(p, hc->pg.arena_bytes, MADV_HUGEPAGE);

	hc->pg.free_pages = calloc(n, sizeof(*hc->pg.free_pages));
	uint64_t piece = hc->cfg.pin_piece_bytes ? hc->cfg.pin_piece_bytes : HC_PIN_PIECE;
	uint64_t per = WSP_MAX(piece / hc->pg.page_bytes, 1);
	hc->pg.piece_bytes = per * hc->pg.page_bytes;
	hc->pg.n_pieces = (unsigned)((n + per - 1) / per);
	hc->pg.pieces = calloc(hc->pg.n_pieces, sizeof(*hc->pg.pieces));
	if (!hc->pg.free_pages || !hc->pg.pieces)
		return WSP_ERR(err, -ENOMEM, "host cache: out of memory for %" PRIu64 " pages", n);
	for (unsigned i = 0; i < hc->pg.n_pieces; i++) {
		hc->pg.pieces[i].first_page = i * per;
		hc->pg.pieces[i].n_pages = WSP_MIN(per, n - i * per);
	}
	/* Every page arrives through hc_pin_start: until then loads wait for
	 * them rather than finding the cache full. */
	hc->pg.n_unavailable = hc->pg.n_pages;
	return 0;
}

/* Push the pages of piece i on the free stack (lock held), lowest index on top. */
static void piece_available(struct hcache *hc, unsigned i)
{
	const struct hc_pin_piece *pc = &hc->pg.pieces[i];
	for (uint64_t k = pc->n_pages; k-- > 0;)
		hc->pg.free_pages[hc->pg.n_free++] = (uint32_t)(pc->first_page + k);
	hc->pg.n_unavailable -= (uint32_t)pc->n_pages;
}

static void *pin_main(void *arg)
{
	struct hcache *hc = arg;
	struct wspi_err perr;
	wspi_err_init(&perr);
	unsigned i;
	int stopped = 0;
	for (i = 0; i < hc->pg.n_pieces; i++) {
		struct hc_pin_piece *pc = &hc->pg.pieces[i];
		pthread_mutex_lock(&hc->lock);
		int stop = hc->pg.pin_stop, failed = hc->pg.pin_status < 0;
		pthread_mutex_unlock(&hc->lock);
		if (stop) {
			stopped = 1;
			break;
		}
		int rc = 0;
		uint64_t len = pc->n_pages * hc->pg.page_bytes;
		if (!failed) {
			rc = hc->cfg.pin(hc->cfg.pin_ctx, hc_page(hc, (uint32_t)pc->first_page), len,
					 &perr);
			if (rc >= 0)
				pc->pinned = 1;
		}
		pthread_mutex_lock(&hc->lock);
		if (rc < 0 && hc->pg.pin_status == 0) {
			char a[32], b[32], msg[320];
			wspi_err_copy(&perr, msg, sizeof(msg));
			hc->pg.pin_status = rc;
			snprintf(hc->pg.pin_msg, sizeof(hc->pg.pin_msg),
				 "host cache: pinning %s at offset %s failed (%s): %s; the rest of the cache stays pageable",
				 wsp_format_size(len, a, sizeof(a)),
				 wsp_format_size(pc->first_page * hc->pg.page_bytes, b, sizeof(b)),
				 wsp_strerror(rc), msg[0] ? msg : "no detail");
		}
		if (pc->pinned)
			hc->pg.pinned_bytes += len;
		piece_available(hc, i);
		/* Told before anyone can see the piece usable, so that once
		 * hcache_pin_wait has seen it, draining the front end's inbox
		 * means the prefetches that waited for it have started. */
		hc_inbox_post_pages(hc);
		pthread_cond_broadcast(&hc->cond);
		pthread_mutex_unlock(&hc->lock);
		if (rc < 0)
			hc_notice(hc, "%s", hc->pg.pin_msg);
		/* The driver serialises cudaHostRegister with the other CUDA
		 * calls: pinning piece after piece without a pause kept the
		 * pager's fills (copies, events, kernel launches) waiting until
		 * the whole cache was pinned. */
		if (hc->cfg.pin_piece_bytes)
			nanosleep(&(struct timespec){ .tv_nsec = 100 * 1000 }, NULL);
	}
	/* Stopped early: hand out the rest unpinned so that the counts add up. */
	pthread_mutex_lock(&hc->lock);
	for (; i < hc->pg.n_pieces; i++)
		piece_available(hc, i);
	if (!stopped)
		hc_inbox_post_pages(hc);   /* the last chance: the rest are dropped */
	pthread_cond_broadcast(&hc->cond);
	pthread_mutex_unlock(&hc->lock);
	wspi_err_destroy(&perr);
	return NULL;
}

int hc_pin_start(struct hcache *hc, struct wspi_err *err)
{
	pthread_mutex_lock(&hc->lock);
	int begun = hc->pg.pin_begun;
	hc->pg.pin_begun = 1;
	pthread_mutex_unlock(&hc->lock);
	if (begun || !hc->pg.n_pages)
		return 0;
	pthread_mutex_lock(&hc->lock);
	if (!hc->cfg.pin) {
		for (unsigned i = hc->pg.n_pieces; i-- > 0;)
			piece_available(hc, i);
		pthread_cond_broadcast(&hc->cond);
		pthread_mutex_unlock(&hc->lock);
		return 0;
	}
	hc->pg.pin_thread_started = 1;   /* before it runs: hcache_pin_wait waits for it */
	pthread_mutex_unlock(&hc->lock);
	int rc = pthread_create(&hc->pg.pin_thread, NULL, pin_main, hc);
	if (rc) {
		pthread_mutex_lock(&hc->lock);
		hc->pg.pin_thread_started = 0;
		pthread_mutex_unlock(&hc->lock);
		return WSP_ERR(err, -rc, "host cache: cannot start the pinning thread: %s",
			       strerror(rc));
	}
	return 0;
}

int hc_pin_wait(struct hcache *hc, struct wspi_err *err)
{
	int rc = hc_pin_start(hc, err);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&hc->lock);
	while (hc->pg.n_unavailable && hc->pg.pin_thread_started)
		pthread_cond_wait(&hc->cond, &hc->lock);
	rc = hc->pg.pin_status;
	if (rc < 0)
		WSP_ERR(err, rc, "%s", hc->pg.pin_msg);
	pthread_mutex_unlock(&hc->lock);
	return rc;
}

void hc_pin_stop(struct hcache *hc)
{
	if (!hc->pg.pin_thread_started)
		return;
	pthread_mutex_lock(&hc->lock);
	hc->pg.pin_stop = 1;
	pthread_mutex_unlock(&hc->lock);
	pthread_join(hc->pg.pin_thread, NULL);
	hc->pg.pin_thread_started = 0;
}

void hc_pages_fini(struct hcache *hc)
{
	if (hc->pg.pieces && hc->cfg.unpin)
		for (unsigned i = 0; i < hc->pg.n_pieces; i++)
			if (hc->pg.pieces[i].pinned)
				hc->cfg.unpin(hc->cfg.pin_ctx,
					      hc_page(hc, (uint32_t)hc->pg.pieces[i].first_page));
	if (hc->pg.arena)
		munmap(hc->pg.arena, hc->pg.arena_bytes);
	free(hc->pg.free_pages);
	free(hc->pg.pieces);
	hc->pg.arena = NULL;
	hc->pg.free_pages = NULL;
	hc->pg.pieces = NULL;
}

uint32_t hc_pages_free(const struct hcache *hc)
{
	return hc->pg.n_free;
}

uint32_t hc_pages_unavailable(const struct hcache *hc)
{
	return hc->pg.n_unavailable;
}

void hc_pages_take(struct hcache *hc, uint32_t *idx, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		idx[k] = hc->pg.free_pages[--hc->pg.n_free];
}

/* Pushed last first, so that a take of the same count gets them back in
 * their order. */
void hc_pages_give(struct hcache *hc, const uint32_t *idx, uint32_t n)
{
	for (uint32_t k = n; k-- > 0;)
		hc->pg.free_pages[hc->pg.n_free++] = idx[k];
}

uint64_t hc_pages_pinned(const struct hcache *hc, int *status)
{
	*status = hc->pg.pin_status;
	return hc->pg.pinned_bytes;
}

void hc_pages_plan(struct hcache *hc, uint64_t page_bytes)
{
	hc->pg.page_bytes = page_bytes;
}
