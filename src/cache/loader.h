/*
 * The host tier's loader (loader.c): the staging arena cut into slots, the
 * queue of loads, and the thread that turns a load into reads of slices
 * through the I/O engine, handing each read slice to the decode pool.
 * Written only by loader.c; the decode pool reads the staging slots and
 * the shard paths (set at start), and hands each finished job back
 * through the slice's own completion (s->job_done).  Private to src/cache.
 */
#ifndef WSP_CACHE_LOADER_H
#define WSP_CACHE_LOADER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/load.h"
#include "common/error.h"

struct hcache;
struct hc_entry;
struct hc_slice;

struct hc_loader {
	struct hc_load *loads;     /* per layer */
	char **paths;              /* shard files, for the engine and messages */
	struct io_engine *io;
	uint8_t *staging;
	uint64_t staging_bytes, slot_bytes;
	unsigned n_slots;
	struct hc_slice *slices;   /* one per slot */
	unsigned *free_slots;
	unsigned n_free_slots;
	pthread_mutex_t stage_lock;
	pthread_cond_t stage_cond; /* load queued, slot freed, stop */
	struct hc_load *load_head, *load_tail;
	int loader_stop;
	pthread_t loader;
	int loader_started;
	/* Time with at least one read in flight (read_ns): overlapping slices
	 * count once, so it compares with wall time. */
	pthread_mutex_t rd_lock;
	unsigned rd_in_flight;
	uint64_t rd_since;
};

/* Size the staging arena (slot size and count) from the pack; no memory is
 * taken yet.  Returns its bytes.  hc_loader_start maps what was planned. */
uint64_t hc_staging_plan(struct hcache *hc);
/* Its locks and the loads' records, at create (hc_loader_fini undoes it,
 * and all the rest). */
int hc_loader_init(struct hcache *hc, struct wspi_err *err);
int hc_loader_start(struct hcache *hc, struct wspi_err *err);
void hc_loader_stop(struct hcache *hc);
void hc_loader_fini(struct hcache *hc);
void hc_loader_queue(struct hcache *hc, struct hc_entry *e, int demand);
/* A get waits for a queued prefetch: serve it before the other prefetches. */
void hc_loader_promote(struct hcache *hc, struct hc_entry *e);
/* The record of `layer`'s load (load.h), for the front end to start a
 * load and read its result. */
struct hc_load *hc_loader_record(struct hcache *hc, uint32_t layer);

#endif
