/*
 * Private state of the host tier.  Its rooms, each with its own state in a
 * struct of its own (written only by its file; the others read what it set
 * up at create, or call it):
 *	hcache.c       create/destroy, statistics         (the front end:
 *	entries.c      the entry state machine: request,   struct hcache's own
 *	               get, put, eviction                  fields, hc->lock)
 *	pages.c        the page arena, the free-page stack, background pinning
 *	               (struct hc_pages, pages.h)
 *	loader.c       the loader thread: staging slots, reads, slices of a layer
 *	               (struct hc_loader, loader.h)
 *	decode_pool.c  decode workers and the completion of a load
 *	               (struct hc_pool, decode_pool.h)
 *	inbox.c        the front end's inbox, a mailbox the rooms below post to
 *	               (struct hc_inbox, inbox.h); hcache.c's thread reads it
 *	report.c       notices, trace events, layer names (used by all of them)
 *	raw_copy.c     raw copies of packed entries, in buffers of their own,
 *	               made on the caller's thread (under hc->lock for the
 *	               entry's fields only)
 * A load in flight is a record of its own (struct hc_load, load.c), one a
 * layer, owned by the loader: the front end starts it (hc_load_begin) and
 * reads its result when it ends; the decode pool, through the slice's
 * s->load, records a failure (hc_load_fail).  The pipeline reads the entry's
 * page list and provided bytes, which the front end set before queueing
 * it and keeps until the load ends.
 *
 * Calls go one way, as a layer's bytes do: hcache.c (the facade) -> entries
 * -> the load pipeline (loader -> decode pool), with pages, the load
 * records, the inbox and report beneath.  What a lower room tells an upper one travels as a
 * message: a slice carries its own completion (s->job_done, set by the
 * loader, as an io_req carries its own), and a load's end and the pages
 * that pinning made usable are posted to the front end's inbox (inbox.c),
 * which the front end's own thread takes up (hcache.c): no thread of a
 * lower room runs the front end's logic.
 *
 * Locks, in order: hc->lock (entries, free pages, counters that need
 * consistency) -> predictor's own lock.  hc->pool_lock (decode queue) and
 * hc->stage_lock (staging slots, load queue) are never held together with
 * hc->lock, and no I/O or decoding ever runs under any of them.
 */
#ifndef WSP_CACHE_HCACHE_INT_H
#define WSP_CACHE_HCACHE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cache/hcache.h"
#include "pack/chunk.h"

enum hc_state { HC_ABSENT = 0, HC_LOADING, HC_VALID };

/* One chunk of a layer, in file order: where its raw bytes go. */
struct hc_job {
	uint64_t chunk;            /* index into the manifest's chunks */
	uint64_t dst;              /* offset in the layer's raw layout */
	uint64_t at;               /* offset in the cached form (dst unless packed) */
	int keep_stored;           /* packed layer, EXPRANS chunk: kept as stored */
	uint32_t tensor;           /* global tensor index (dtype, messages) */
	uint32_t index_in_tensor;  /* for messages */
};

struct hc_entry {
	enum hc_state state;
	uint32_t refs;
	uint32_t waiters;          /* gets waiting for its load: not evictable
	                              between the load's end and their wake-up */
	uint32_t n_pages;          /* pages covering raw_bytes */
	uint32_t *page_idx;        /* n_pages indices while LOADING/VALID */
	void **page_ptr;           /* the same as pointers, for hcache_ref */
	uint64_t last_use;         /* logical clock of the last get (or load start) */
	int prefetched_unused;     /* loaded by a prefetch and not yet got */
	int loaded_by_prefetch;
	/* Failure of the latest load, for waiters: fail_seq counts failures.
	 * The load in flight itself is the loader's (struct hc_load). */
	uint64_t fail_seq;
	int fail_code;
	char fail_msg[WSP_ERRMSG_MAX];
	int demand;                    /* a get waits for it (under hc->lock) */
	/* The layer's stored bytes handed in by hcache_provide (under
	 * hc->lock; set only while ABSENT): its next load copies them
	 * instead of reading the disk, then gives them back (hc_spare_put). */
	uint8_t *provided;
	uint64_t provided_cap;         /* its buffer's size (a spare may be larger) */
	int deferred;                  /* in hc->deferred */
	/* A packed entry's raw copy (raw_copy.c): none, being made (the maker
	 * holds a reference), or ready; in a pinned buffer of its own, outside
	 * the arena, which raw_ptr cuts into pages for hcache_ref. */
	enum { HC_RAW_NONE = 0, HC_RAW_MAKING, HC_RAW_READY } raw;
	uint8_t *raw_buf;
	uint64_t raw_len;
	uint32_t n_raw_pages;
	void **raw_ptr;
};

/* A piece of a layer read into one staging slot: consecutive chunks. */
struct hc_slice {
	struct hcache *hc;
	unsigned slot;
	uint32_t layer;
	uint64_t file_off;         /* 4096-aligned start of the read */
	uint64_t job0, n_jobs;     /* into the layer's jobs */
	uint64_t next_job;         /* next job a worker takes (pool_lock) */
	atomic_uint_fast64_t jobs_left;
	uint64_t read_begin;
	struct hc_load *load;      /* the load it is part of (load.h) */
	/* Its completion, set by the loader: a worker finished one job. */
	void (*job_done)(struct hc_slice *s);
	struct io_req req;
	struct wspi_err io_err;
	struct hc_slice *next;     /* decode queue link */
};

#include "cache/pages.h"
#include "cache/loader.h"
#include "cache/decode_pool.h"
#include "cache/inbox.h"

#define HC_SPARES 4u   /* and at most a quarter of the tier's bytes */

struct hcache {
	struct hcache_config cfg;
	struct wsp_pack_s *pk;
	const struct wspi_manifest *m;
	uint32_t n_layers;

	/* The rooms below the front end, each written only by its own file
	 * (others read the constants it set up, or call its functions). */
	struct hc_pages pg;        /* pages.c */
	struct hc_loader ld;       /* loader.c */
	struct hc_pool dp;         /* decode_pool.c */

	/* The front end (entries.c, hcache.c): its inbox (inbox.c) and the
	 * thread that takes it up (hcache.c). */
	struct hc_inbox in;
	pthread_t front;
	int front_started;
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* load finished, ref dropped, pages pinned */
	struct hc_entry *entries;
	struct hc_job *jobs;       /* all layers' jobs, in file order per layer */
	uint64_t *layer_job0;      /* n_layers + 1 */
	uint8_t *layer_zero_all;   /* tensors not in layer_offset order: memset all */
	uint64_t *layer_bytes;     /* bytes in the cache: packed size, or raw */
	uint8_t *layer_packed;     /* kept packed (cfg.keep_packed and an EXPRANS chunk) */
	struct evict_cand *cand;   /* n_layers, scratch of make_room */
	uint64_t *cand_pages;      /* n_layers, pages of each candidate */
	uint32_t *deferred;        /* prefetches waiting for pinned pages, in order */
	uint32_t n_deferred;
	uint32_t *started;         /* scratch of deferred_run, entries.c (pin thread only) */
	uint64_t clock;
	unsigned n_loading;
	int hand_raw;               /* references get raw copies where made (raw_copy.c) */
	uint64_t raw_budget;        /* the budget the arena left unused, for raw copies */
	uint64_t raw_held;          /* bytes of raw copies (ready or being made) */
	uint64_t max_chunk_raw, max_chunk_stored;
	uint64_t table_bytes;       /* the chunk table and page lists (entries.c) */
	/* Buffers of handed-in bytes kept after their loads for the next ones
	 * (entries.c, under lock): a process that gets every layer handed in
	 * would otherwise fault fresh pages in for each copy. */
	uint8_t *spare[HC_SPARES];
	uint64_t spare_cap[HC_SPARES];

	/* Counters: atomics, so workers never take hc->lock for them. */
	atomic_uint_fast64_t c_hits, c_misses, c_evictions, c_prefetches, c_prefetch_wasted;
	atomic_uint_fast64_t c_prefetch_hits, c_loads, c_load_failures;
	atomic_uint_fast64_t c_bytes_read, c_bytes_decoded, c_read_ns, c_decode_ns;
	atomic_uint_fast64_t c_raw_copies;
};

static inline void *hc_page(const struct hcache *hc, uint32_t idx)
{
	return hc->pg.arena + (uint64_t)idx * hc->pg.page_bytes;
}

/* entries.c */
int hc_entries_init(struct hcache *hc, struct wspi_err *err);
void hc_entries_fini(struct hcache *hc);
/* The front end's thread (inbox.c) only: a load of `layer` ended (the entry
 * becomes VALID or records the failure; waiters wake; cfg.on_ready), and
 * pinning made pages usable (prefetches that waited for them start). */
void hc_entry_load_ended(struct hcache *hc, uint32_t layer);
void hc_entries_pages_ready(struct hcache *hc);

/* raw_copy.c, under hc->lock: detach an entry's raw copy, if it has one:
 * returns its buffer (its length in *len) for hc_raw_free, outside the lock. */
uint8_t *hc_raw_detach(struct hcache *hc, struct hc_entry *e, uint64_t *len);
void hc_raw_free(struct hcache *hc, uint8_t *buf, uint64_t len);
/* Both at once, where the lock may stay held (an eviction, the teardown). */
void hc_raw_drop(struct hcache *hc, struct hc_entry *e);


/* Messages */
void hc_notice(struct hcache *hc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hc_trace(struct hcache *hc, enum wsp_stage st, uint32_t layer, uint64_t b, uint64_t e,
	      uint64_t bytes, int thread);
const char *hc_layer_name(const struct hcache *hc, uint32_t layer);

#endif
