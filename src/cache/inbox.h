/*
 * The front end's inbox (inbox.c): what the rooms below the front end tell
 * it, as messages.  The load pipeline posts a layer whose load ended (its
 * last job, any pipeline thread); the pages post that pinning made more of
 * them usable (the pin thread).  The front end's own thread takes them up
 * and alone runs the front end's logic for them (entries.c: the entry
 * becomes VALID or fails, waiters wake, the host tier's user is told;
 * prefetches that waited for pages start).  Posting takes only the
 * inbox's lock, which is last in the lock order (the pages post under
 * hc->lock) and never held across a call.  Written only by inbox.c; private to
 * src/cache (hcache_int.h includes it).
 */
#ifndef WSP_CACHE_INBOX_H
#define WSP_CACHE_INBOX_H

#include <pthread.h>
#include <stdint.h>

#include "common/error.h"

struct hcache;

struct hc_inbox {
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* posted, stopping, or taken up (idle) */
	uint32_t *ended;           /* ring of n_layers: a layer's load ends once
	                              before the front end can start the next */
	uint32_t head, n;
	int pages_ready;
	int busy;                  /* the thread is taking messages up */
	int stop;
	pthread_t thread;
	int started, inited;
};

/* Its ring and lock, and its thread (hc_inbox_fini undoes both). */
int hc_inbox_start(struct hcache *hc, struct wspi_err *err);
/* Posted by the pipeline and the pages (any thread, no lock held). */
void hc_inbox_post_ended(struct hcache *hc, uint32_t layer);
void hc_inbox_post_pages(struct hcache *hc);
/* Wait until everything posted so far has been taken up. */
void hc_inbox_drain(struct hcache *hc);
/* Take up what is left and stop the thread (after the pipeline stopped). */
void hc_inbox_fini(struct hcache *hc);

#endif
