/*
 * The host tier's pages (pages.c): one arena cut into pages, the stack of
 * free ones, and the thread that pins the arena in pieces in the background
 * (a page of a piece not yet pinned is unavailable).  Written only by
 * pages.c; the front end takes and gives pages through hc_pages_take and
 * hc_pages_give under hc->lock, and everyone reads page_bytes and arena
 * (set at create).  Private to src/cache (hcache_int.h includes it).
 */
#ifndef WSP_CACHE_PAGES_H
#define WSP_CACHE_PAGES_H

#include <pthread.h>
#include <stdint.h>

#include "common/error.h"

struct hcache;

struct hc_pin_piece {
	uint64_t first_page, n_pages;
	int pinned;
};

struct hc_pages {
	uint8_t *arena;
	uint64_t arena_bytes;
	uint64_t page_bytes;
	uint32_t n_pages;
	uint32_t *free_pages;      /* stack (under hc->lock) */
	uint32_t n_free;
	uint32_t n_unavailable;    /* pages of pieces not yet pinned */
	struct hc_pin_piece *pieces;
	unsigned n_pieces;
	uint64_t piece_bytes;      /* bytes of each pinning piece (the last may be shorter) */
	pthread_t pin_thread;
	int pin_thread_started;
	int pin_begun;             /* the pinning was asked for (hcache_pin_start) */
	int pin_stop;              /* under lock */
	int pin_status;            /* 0, or the first pinning error */
	char pin_msg[WSP_ERRMSG_MAX];
	uint64_t pinned_bytes;
};

/* The page size, first: the budget and the entries are sized by it. */
void hc_pages_plan(struct hcache *hc, uint64_t page_bytes);
int hc_pages_init(struct hcache *hc, uint64_t budget, struct wspi_err *err);
void hc_pages_fini(struct hcache *hc);
/* Start pinning in the background, once (later calls: 0). */
int hc_pin_start(struct hcache *hc, struct wspi_err *err);
/* Start it, and wait until every piece is pinned or pinning failed. */
int hc_pin_wait(struct hcache *hc, struct wspi_err *err);
void hc_pin_stop(struct hcache *hc);
/* Under hc->lock: pages free now, and pages not yet usable. */
uint32_t hc_pages_free(const struct hcache *hc);
uint32_t hc_pages_unavailable(const struct hcache *hc);
/* Under hc->lock: take n free pages (n <= hc_pages_free) into idx, or
 * give n back. */
void hc_pages_take(struct hcache *hc, uint32_t *idx, uint32_t n);
void hc_pages_give(struct hcache *hc, const uint32_t *idx, uint32_t n);
/* Under hc->lock: bytes pinned so far, and the pinning's error (0: none). */
uint64_t hc_pages_pinned(const struct hcache *hc, int *status);

#endif
