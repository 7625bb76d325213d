/*
 * Private state of the host tier, shared by its files:
 *	hcache.c       create/destroy, statistics
 *	entries.c      the entry state machine: request, get, put, eviction
 *	pages.c        the page arena, the free-page stack, background pinning
 *	loader.c       the loader thread: staging slots, reads, slices of a layer
 *	decode_pool.c  decode workers and the completion of a load
 *	report.c       notices, trace events, layer names (used by all of them)
 *
 * Calls go one way, as a layer's bytes do: hcache.c (the facade) -> entries
 * -> loader -> decode pool, with pages and report beneath; a lower file
 * tells an upper one that something finished only through the upcalls in
 * struct hcache (hc->up), which the upper file sets when it starts.
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
	/* Failure of the latest load, for waiters: fail_seq counts failures. */
	uint64_t fail_seq;
	int fail_code;
	char fail_msg[WSP_ERRMSG_MAX];
	/* The load in flight (one at most per entry). */
	atomic_uint_fast64_t pending;  /* chunk jobs left + 1 held by the loader */
	atomic_int status;             /* first error of this load, 0 if none */
	struct wspi_err err;            /* its message */
	int err_init;
	struct hc_entry *next_load;    /* load queue link */
	int demand;                    /* a get waits for it (under hc->lock) */
	/* The layer's stored bytes handed in by hcache_provide (under
	 * hc->lock; set only while ABSENT): its next load copies them
	 * instead of reading the disk, then frees them. */
	uint8_t *provided;
	int deferred;                  /* in hc->deferred */
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
	struct io_req req;
	struct wspi_err io_err;
	struct hc_slice *next;     /* decode queue link */
};

struct hc_pin_piece {
	uint64_t first_page, n_pages;
	int pinned;
};

/* What the lower files tell the upper ones (see the top of this file). */
struct hc_upcalls {
	/* loader -> entries: a load ended (once per load, any thread, no lock). */
	void (*load_finished)(struct hcache *hc, struct hc_entry *e);
	/* decode pool -> loader: a worker finished one job of slice s. */
	void (*job_done)(struct hcache *hc, struct hc_slice *s);
	/* pages -> entries: a pinned piece became usable (pin thread, no lock). */
	void (*pages_ready)(struct hcache *hc);
};

struct hcache {
	struct hc_upcalls up;      /* set at create, before any thread starts */
	struct hcache_config cfg;
	struct wsp_pack_s *pk;
	const struct wspi_manifest *m;
	uint32_t n_layers;

	/* Pages (pages.c). */
	uint8_t *arena;
	uint64_t arena_bytes;
	uint64_t page_bytes;
	uint32_t n_pages;
	uint32_t *free_pages;      /* stack */
	uint32_t n_free;
	uint32_t n_unavailable;    /* pages of pieces not yet pinned */
	struct hc_pin_piece *pieces;
	unsigned n_pieces;
	uint64_t piece_bytes;      /* bytes of each pinning piece (the last may be shorter) */
	pthread_t pin_thread;
	int pin_thread_started;
	int pin_begun;              /* hc_pin_start has run (hcache_pin_start) */
	int pin_stop;              /* under lock */
	int pin_status;            /* 0, or the first pinning error */
	char pin_msg[WSP_ERRMSG_MAX];
	uint64_t pinned_bytes;

	/* Entries (entries.c). */
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
	uint64_t max_chunk_raw, max_chunk_stored;
	uint64_t table_bytes;       /* the chunk table and page lists (entries.c) */

	/* Loader (loader.c). */
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
	struct hc_entry *load_head, *load_tail;
	int loader_stop;
	pthread_t loader;
	int loader_started;

	/* Decode pool (decode_pool.c). */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	struct hc_slice *dq_head, *dq_tail;
	int pool_stop;
	unsigned n_workers;
	pthread_t *workers;
	void *wstate;              /* struct hc_worker[n_workers] */
	unsigned n_workers_started;

	/* Time with at least one read in flight (read_ns): overlapping slices
	 * count once, so it compares with wall time. */
	pthread_mutex_t rd_lock;
	unsigned rd_in_flight;
	uint64_t rd_since;
	/* Counters: atomics, so workers never take hc->lock for them. */
	atomic_uint_fast64_t c_hits, c_misses, c_evictions, c_prefetches, c_prefetch_wasted;
	atomic_uint_fast64_t c_prefetch_hits, c_loads, c_load_failures;
	atomic_uint_fast64_t c_bytes_read, c_bytes_decoded, c_read_ns, c_decode_ns;
};

/* pages.c */
int hc_pages_init(struct hcache *hc, uint64_t budget, struct wspi_err *err);
void hc_pages_fini(struct hcache *hc);
int hc_pin_start(struct hcache *hc, struct wspi_err *err);
void hc_pin_stop(struct hcache *hc);
static inline void *hc_page(const struct hcache *hc, uint32_t idx)
{
	return hc->arena + (uint64_t)idx * hc->page_bytes;
}

/* entries.c */
int hc_entries_init(struct hcache *hc, struct wspi_err *err);
void hc_entries_fini(struct hcache *hc);

/* loader.c */
/* Size the staging arena (slot size and count) from the pack; no memory is
 * taken yet.  Returns its bytes.  hc_loader_start maps what was planned. */
uint64_t hc_staging_plan(struct hcache *hc);
int hc_loader_start(struct hcache *hc, struct wspi_err *err);
void hc_loader_stop(struct hcache *hc);
void hc_loader_fini(struct hcache *hc);
void hc_loader_queue(struct hcache *hc, struct hc_entry *e, int demand);
/* A get waits for a queued prefetch: serve it before the other prefetches. */
void hc_loader_promote(struct hcache *hc, struct hc_entry *e);

/* decode_pool.c */
int hc_pool_start(struct hcache *hc, struct wspi_err *err);
void hc_pool_stop(struct hcache *hc);
void hc_pool_push(struct hcache *hc, struct hc_slice *s);

/* Messages */
void hc_notice(struct hcache *hc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hc_trace(struct hcache *hc, enum wsp_stage st, uint32_t layer, uint64_t b, uint64_t e,
	      uint64_t bytes, int thread);
const char *hc_layer_name(const struct hcache *hc, uint32_t layer);

#endif
