/*
 * The host tier's decode pool (decode_pool.c): worker threads that check
 * and decode the chunks of each read slice into the entry's pages, and end
 * the load with its last chunk.  Written only by decode_pool.c.  Private
 * to src/cache.
 */
#ifndef WSP_CACHE_DECODE_POOL_H
#define WSP_CACHE_DECODE_POOL_H

#include <pthread.h>

#include "common/error.h"

struct hcache;
struct hc_slice;

struct hc_pool {
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	struct hc_slice *dq_head, *dq_tail;
	int pool_stop;
	unsigned n_workers;
	pthread_t *workers;
	void *wstate;              /* struct hc_worker[n_workers] */
	unsigned n_workers_started;
};

/* Its lock, at create; hc_pool_fini after hc_pool_stop. */
void hc_pool_init(struct hcache *hc);
void hc_pool_fini(struct hcache *hc);
int hc_pool_start(struct hcache *hc, struct wspi_err *err);
void hc_pool_stop(struct hcache *hc);
void hc_pool_push(struct hcache *hc, struct hc_slice *s);

#endif
