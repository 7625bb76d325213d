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
	uint64_t n = budget / hc->page_bytes;
	if (n > UINT32_MAX - 1)
		n = UINT32_MAX - 1;
	hc->n_pages = (uint32_t)n;
	hc->arena_bytes = n * hc->page_bytes;
	if (!n)
		return 0;
	void *p = mmap(NULL, hc->arena_bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		char sz[32];
		return WSP_ERR(err, -e, "host cache: mapping %s failed: %s",
			       wsp_format_size(hc->arena_bytes, sz, sizeof(sz)), strerror(e));
	}
	hc->arena = p;
	/* Large pages make decoding into the arena cheaper; optional. */
	(void)madvise(p, hc->arena_bytes, MADV_HUGEPAGE);

	hc->free_pages = calloc(n, sizeof(*hc->free_pages));
	uint64_t piece = hc->cfg.pin_piece_bytes ? hc->cfg.pin_piece_bytes : HC_PIN_PIECE;
	uint64_t per = WSP_MAX(piece / hc->page_bytes, 1);
	hc->piece_bytes = per * hc->page_bytes;
	hc->n_pieces = (unsigned)((n + per - 1) / per);
	hc->pieces = calloc(hc->n_pieces, sizeof(*hc->pieces));
	if (!hc->free_pages || !hc->pieces)
		return WSP_ERR(err, -ENOMEM, "host cache: out of memory for %" PRIu64 " pages", n);
	for (unsigned i = 0; i < hc->n_pieces; i++) {
		hc->pieces[i].first_page = i * per;
		hc->pieces[i].n_pages = WSP_MIN(per, n - i * per);
	}
	/* Every page arrives through hc_pin_start: until then loads wait for
	 * them rather than finding the cache full. */
	hc->n_unavailable = hc->n_pages;
	return 0;
}

/* Push the pages of piece i on the free stack (lock held), lowest index on top. */
static void piece_available(struct hcache *hc, unsigned i)
{
	const struct hc_pin_piece *pc = &hc->pieces[i];
	for (uint64_t k = pc->n_pages; k-- > 0;)
		hc->free_pages[hc->n_free++] = (uint32_t)(pc->first_page + k);
	hc->n_unavailable -= (uint32_t)pc->n_pages;
}

static void *pin_main(void *arg)
{
	struct hcache *hc = arg;
	struct wspi_err perr;
	wspi_err_init(&perr);
	unsigned i;
	int stopped = 0;
	for (i = 0; i < hc->n_pieces; i++) {
		struct hc_pin_piece *pc = &hc->pieces[i];
		pthread_mutex_lock(&hc->lock);
		int stop = hc->pin_stop, failed = hc->pin_status < 0;
		pthread_mutex_unlock(&hc->lock);
		if (stop) {
			stopped = 1;
			break;
		}
		int rc = 0;
		uint64_t len = pc->n_pages * hc->page_bytes;
		if (!failed) {
			rc = hc->cfg.pin(hc->cfg.pin_ctx, hc_page(hc, (uint32_t)pc->first_page), len,
					 &perr);
			if (rc >= 0)
				pc->pinned = 1;
		}
		pthread_mutex_lock(&hc->lock);
		if (rc < 0 && hc->pin_status == 0) {
			char a[32], b[32], msg[320];
			wspi_err_copy(&perr, msg, sizeof(msg));
			hc->pin_status = rc;
			snprintf(hc->pin_msg, sizeof(hc->pin_msg),
				 "host cache: pinning %s at offset %s failed (%s): %s; the rest of the cache stays pageable",
				 wsp_format_size(len, a, sizeof(a)),
				 wsp_format_size(pc->first_page * hc->page_bytes, b, sizeof(b)),
				 wsp_strerror(rc), msg[0] ? msg : "no detail");
		}
		if (pc->pinned)
			hc->pinned_bytes += len;
		piece_available(hc, i);
		pthread_cond_broadcast(&hc->cond);
		pthread_mutex_unlock(&hc->lock);
		if (rc < 0)
			hc_notice(hc, "%s", hc->pin_msg);
		hc->up.pages_ready(hc);
		/* The driver serialises cudaHostRegister with the other CUDA
		 * calls: pinning piece after piece without a pause kept the
		 * pager's fills (copies, events, kernel launches) waiting until
		 * the whole cache was pinned. */
		if (hc->cfg.pin_piece_bytes)
			nanosleep(&(struct timespec){ .tv_nsec = 100 * 1000 }, NULL);
	}
	/* Stopped early: hand out the rest unpinned so that the counts add up. */
	pthread_mutex_lock(&hc->lock);
	for (; i < hc->n_pieces; i++)
		piece_available(hc, i);
	pthread_cond_broadcast(&hc->cond);
	pthread_mutex_unlock(&hc->lock);
	if (!stopped)
		hc->up.pages_ready(hc);   /* the last chance: the rest are dropped */
	wspi_err_destroy(&perr);
	return NULL;
}

int hc_pin_start(struct hcache *hc, struct wspi_err *err)
{
	if (!hc->n_pages)
		return 0;
	pthread_mutex_lock(&hc->lock);
	if (!hc->cfg.pin) {
		for (unsigned i = hc->n_pieces; i-- > 0;)
			piece_available(hc, i);
		pthread_cond_broadcast(&hc->cond);
		pthread_mutex_unlock(&hc->lock);
		return 0;
	}
	hc->pin_thread_started = 1;   /* before it runs: hcache_pin_wait waits for it */
	pthread_mutex_unlock(&hc->lock);
	int rc = pthread_create(&hc->pin_thread, NULL, pin_main, hc);
	if (rc) {
		pthread_mutex_lock(&hc->lock);
		hc->pin_thread_started = 0;
		pthread_mutex_unlock(&hc->lock);
		return WSP_ERR(err, -rc, "host cache: cannot start the pinning thread: %s",
			       strerror(rc));
	}
	return 0;
}

void hc_pin_stop(struct hcache *hc)
{
	if (!hc->pin_thread_started)
		return;
	pthread_mutex_lock(&hc->lock);
	hc->pin_stop = 1;
	pthread_mutex_unlock(&hc->lock);
	pthread_join(hc->pin_thread, NULL);
	hc->pin_thread_started = 0;
}

void hc_pages_fini(struct hcache *hc)
{
	if (hc->pieces && hc->cfg.unpin)
		for (unsigned i = 0; i < hc->n_pieces; i++)
			if (hc->pieces[i].pinned)
				hc->cfg.unpin(hc->cfg.pin_ctx,
					      hc_page(hc, (uint32_t)hc->pieces[i].first_page));
	if (hc->arena)
		munmap(hc->arena, hc->arena_bytes);
	free(hc->free_pages);
	free(hc->pieces);
	hc->arena = NULL;
	hc->free_pages = NULL;
	hc->pieces = NULL;
}
