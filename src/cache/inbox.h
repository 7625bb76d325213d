/*
 * The front end's inbox (inbox.c): what the rooms below the front end tell
 * it, as messages.  The load pipeline posts a layer whose load ended (its
 * last job, any pipeline thread); the pages post that pinning made more of
 * them usable (the pin thread, under hc->lock).  The front end's own thread
 * (hcache.c) takes them and alone runs the front end's logic for them
 * (entries.c).  This file is only the mailbox: it calls nobody, so the
 * rooms that post sit below the front end that reads.  Its lock is last in
 * the lock order and never held across a call.  Written only by inbox.c;
 * private to src/cache (hcache_int.h includes it).
 */
#ifndef WSP_CACHE_INBOX_H
#define WSP_CACHE_INBOX_H

#include <pthread.h>
#include <stdint.h>

#include "common/error.h"

struct hcache;

struct hc_inbox {
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* posted, stopping, or a batch done */
	uint32_t *ended;           /* ring of n_layers: a layer's load ends once
	                              before the front end can start the next */
	uint32_t n_layers, head, n;
	int pages_ready;
	int busy;                  /* a batch taken and not yet done */
	int stop;
	int inited;
};

int hc_inbox_init(struct hcache *hc, struct wspi_err *err);
void hc_inbox_fini(struct hcache *hc);
/* Posted by the pipeline and the pages (any thread). */
void hc_inbox_post_ended(struct hcache *hc, uint32_t layer);
void hc_inbox_post_pages(struct hcache *hc);
/* The front end's thread: wait for messages and take up to `max` ended
 * loads into `out` (their count returned) and the pages' news (*pages);
 * -1 once stopped with nothing left.  hc_inbox_done after acting on them. */
int hc_inbox_take(struct hcache *hc, uint32_t *out, unsigned max, int *pages);
void hc_inbox_done(struct hcache *hc);
/* Wait until everything posted so far has been taken and acted on. */
void hc_inbox_drain(struct hcache *hc);
/* No more waiting: hc_inbox_take returns -1 once the rest is taken. */
void hc_inbox_stop(struct hcache *hc);

#endif
