/*
 * The host tier: a pinned, bounded cache of decoded layers, and the loader
 * that fills it (I/O engine -> staging -> decode pool -> cache pages).
 *
 * Memory: one anonymous mapping of budget bytes, carved into fixed pages; a
 * layer is a list of pages, so nothing fragments.  It is pinned through the
 * `pin` hook (cudaHostRegister for a GPU; NULL for the host device) in
 * pieces from a background thread so start-up does not stall.  Staging for
 * reads is a separate, bounded arena (documented in wspager(3)).
 * Entries being read, decoded or referenced are never evicted.
 */
#ifndef WSP_CACHE_HCACHE_H
#define WSP_CACHE_HCACHE_H

#include <stdint.h>
#include "common/error.h"
#include "io/io.h"
#include "pack/pack.h"
#include "predict/predict.h"
#include "wspager.h"

struct hcache;

struct hcache_config {
	uint64_t budget_bytes;      /* clamped to available memory, with a notice */
	uint64_t page_bytes;        /* multiple of 4096; default 2 MiB */
	unsigned decode_threads;    /* 0: one per core */
	uint64_t staging_bytes;     /* read staging arena, in slots of up to 8 MiB (at
	                               least two, each holding the largest chunk);
	                               0: 2 x the largest layer's stored bytes,
	                               within [32 MiB, 256 MiB] */
	uint64_t reserve_bytes;     /* memory the caller takes besides the cache
	                               (host-memory GPU slots): kept out of the
	                               clamp to available memory, as are staging
	                               and the decoders' buffers */
	int budget_total;           /* budget_bytes covers the cache, staging, the
	                               decoders' buffers and reserve_bytes: the
	                               cache gets what is left; staging is then
	                               at most budget_bytes / 8 unless given */
	/* Keep layers packed: their EXPRANS chunks stay as stored (their
	 * stored bytes checked on the host at load, or in packs without
	 * stored checks decoded once to check them; decoded by the GPU at
	 * each slot fill),
	 * their other chunks decoded; see hcache_pieces.  Off for the host
	 * device, which has nothing else to decode with. */
	int keep_packed;
	enum wsp_policy policy;
	struct io_config io;
	struct predictor *predictor;   /* may be NULL (then LRU order) */
	/* Page-lock hooks; NULL = plain memory.  pin is called from a
	 * background thread for each piece of the arena (pin_piece_bytes) in
	 * order; a piece's pages are handed out once it returns.
	 * unpin gets the start of each piece that pinned, at destroy.  After a
	 * failure the rest stays pageable (notice, stats, hcache_pin_wait). */
	int (*pin)(void *ctx, void *p, uint64_t len, struct wspi_err *err);
	void (*unpin)(void *ctx, void *p);
	void *pin_ctx;
	/* Pinning starts at hcache_pin_start, not at create: the pager sets up
	 * the GPU first, whose CUDA calls would each wait behind the
	 * registration of the arena's pieces (for a 4 GiB cache its open took
	 * a second, and no read started before). */
	int pin_later;
	/* Pin in pieces of this size (rounded to pages), with a pause of
	 * 100 us after each so that the other threads' CUDA calls, which wait
	 * for the same driver lock, get their turn; 0: 256 MiB, no pause. */
	uint64_t pin_piece_bytes;
	/* Called from the cache's own thread (the front end's, which takes up
	 * the pipeline's messages) when a load finishes (status 0 or error),
	 * after the entry changed state and waiting gets were woken; no cache
	 * lock is held. */
	void (*on_ready)(void *ctx, uint32_t layer, int status);
	/* Called when an entry loaded by a prefetch is evicted before any get
	 * used it (the read was wasted), with the cache's lock held: it must
	 * not call into the cache.  May be NULL. */
	void (*on_unused)(void *ctx, uint32_t layer);
	void *ready_ctx;
	wsp_trace_fn trace;
	void *trace_ctx;
	void (*notice)(void *ctx, const char *msg);
	void *notice_ctx;
};

/* A reference to a valid entry: its bytes are pages[k] for offsets
 * [k*page_bytes, (k+1)*page_bytes) of its form in the cache: the layer's
 * raw layout, or when `packed` the pieces hcache_pieces lists. */
struct hcache_ref {
	uint32_t layer;
	uint32_t n_pages;
	void *const *pages;
	uint64_t page_bytes;
	uint64_t raw_bytes;         /* the layer's raw size */
	uint64_t bytes;             /* bytes in the pages: raw_bytes unless packed */
	int packed;
	/* The arena the pages are in and its pinning pieces: a copy may merge
	 * adjacent pages only within one piece, as each piece is a separate
	 * cudaHostRegister range (0: no pieces). */
	const char *arena;
	uint64_t piece_bytes;
};

/* A packed layer in the cache: piece i holds chunk i's bytes (in file
 * order) at `at`, 16-aligned; `exprans` pieces are the stored stream of
 * `raw` bytes of bf16 values, the others the raw bytes themselves.  They
 * go to `dst` of the layer's raw layout; the bytes of that layout no piece
 * covers (padding) are zero. */
struct hcache_piece {
	uint64_t at, dst, stored, raw;
	int exprans;                /* 0 raw bytes, 1 an exprans stream */
	unsigned layout;            /* exprans: its flags (the chunk's transform) */
	uint32_t tensor, index;     /* global tensor index, chunk in it (messages) */
};
/* The layer's pieces into out[0..max): returns their number, 0 when the
 * layer is not kept packed. */
uint32_t hcache_pieces(const struct hcache *hc, uint32_t layer, struct hcache_piece *out,
		       uint32_t max);
/* Whether the cache keeps `layer` in its packed form (pack.h). */
int hcache_layer_packed(const struct hcache *hc, uint32_t layer);
/* Bytes a layer takes in the cache (its packed size, or raw). */
uint64_t hcache_layer_bytes(const struct hcache *hc, uint32_t layer);

/*
 * hits: gets that found the layer present (valid, or loading already) and so
 * started no read; misses: gets that had to start a load.  prefetch_hits:
 * the hits that were the first use of a prefetched load (hits minus
 * prefetch_hits are reuses of data already used once).  loads: loads
 * started (prefetch or demand); load_failures: those that failed.
 * read_ns: time with at least one read in flight; decode_ns: decode time
 * summed over the workers.
 * pin_error: 0, or the code of the first pinning failure (the message went
 * to the notice channel and hcache_pin_wait returns it).
 */
struct hcache_stats {
	uint64_t hits, misses, evictions, prefetches, prefetch_wasted;
	uint64_t prefetch_hits, loads, load_failures;
	uint64_t bytes_read, bytes_decoded;
	uint64_t read_ns, decode_ns;
	uint64_t budget_bytes, pinned_bytes, staging_bytes;
	uint64_t raw_copies;        /* raw copies made */
	int pin_error;
};

/* Errors: WSP_ETOOBIG when the largest layer does not fit in the budget. */
int hcache_create(const struct hcache_config *cfg, struct wsp_pack_s *pk, struct hcache **out,
		  struct wspi_err *err);
void hcache_destroy(struct hcache *hc);
const struct io_engine *hcache_io(const struct hcache *hc);
/* Wait until background pinning has finished: 0 when every page is pinned
 * (or there is no pin hook), else the pinning error with its message.  The
 * pages stay usable, only pageable, after a failure: the caller decides.
 * It returns once the prefetches that waited for pages have started, which
 * the cache's own thread does (and which calls on_ready meanwhile): do not
 * call it holding a lock that on_ready takes. */
int hcache_pin_wait(struct hcache *hc, struct wspi_err *err);
/* Start the pinning that pin_later deferred (no pages are handed out before
 * it); once only, later calls return 0.  hcache_pin_wait starts it too. */
int hcache_pin_start(struct hcache *hc, struct wspi_err *err);

/* Start loading `layer` if absent; never blocks.  Returns 1 if a load was
 * started, 0 if it is already present or loading (or, for a prefetch while
 * the arena is still being pinned, deferred until the next pinned piece),
 * -ENOSPC if room could only be made by evicting something needed sooner
 * (the request is dropped).
 * A prefetch (policy PREDICT with a predictor) never evicts an entry
 * predicted to be needed sooner than `layer`; a demand request evicts what
 * the policy picks among entries not in use, and returns -ENOSPC when every
 * page is in use or loading (hcache_get then waits for the loads). */
int hcache_request(struct hcache *hc, uint32_t layer, int is_prefetch);
/* The layer's stored bytes (its whole extent, wsp_pack_layer_extent), got
 * by the caller from elsewhere (another process that read them): copied,
 * and used by the layer's next load instead of a disk read (the buffer then
 * kept for the next one's copy, a few at most: entries.c).
 * Returns 1 when taken, 0 when the layer is loading or present already (the
 * bytes are not needed), -ENOMEM.  The load checks them as it checks what
 * it reads: bytes that do not match the manifest fail that load. */
int hcache_provide(struct hcache *hc, uint32_t layer, const void *stored);
/* Take a reference, loading the layer if absent and waiting until it is valid.
 * Returns 0, or the load's error (the entry is then dropped, never valid), or
 * -ENOSPC when every page is referenced (instead of waiting forever). */
int hcache_get(struct hcache *hc, uint32_t layer, struct hcache_ref *ref, struct wspi_err *err);
/* Take a reference only if the layer is valid now: 1 taken, 0 not valid yet. */
int hcache_try_get(struct hcache *hc, uint32_t layer, struct hcache_ref *ref);
/* 1 if `layer` is valid in the cache now (no reference taken). */
int hcache_contains(struct hcache *hc, uint32_t layer);
void hcache_put(struct hcache *hc, struct hcache_ref *ref);
/* Raw copies of packed layers (raw_copy.c): add one to `layer`'s entry,
 * decoded from its packed form on the calling thread into a buffer of its
 * own, page-locked with the pin hook, within what the budget has left
 * beyond the arena (the arena never takes more than the whole pack raw).
 * 1 made; 0 when not (the layer is not valid and packed, has a copy, or
 * the copy would not fit or could not be pinned); < 0 when its bytes fail
 * their checks (err says where).  With hcache_hand_raw(hc, 1) references
 * come raw (packed 0) from the layers that have a copy; (hc, 0) hands out
 * the packed form again and frees the copies; hcache_use_raw switches
 * between the two forms and keeps the copies.  A copy goes with its
 * entry.  hcache_raw_layers: how many copies there are. */
int hcache_add_raw(struct hcache *hc, uint32_t layer, struct wspi_err *err);
void hcache_hand_raw(struct hcache *hc, int on);
void hcache_use_raw(struct hcache *hc, int on);
uint32_t hcache_raw_layers(struct hcache *hc);
/* Bytes of raw copies the budget allows in all (0: none can be made). */
uint64_t hcache_raw_room(const struct hcache *hc);
void hcache_get_stats(struct hcache *hc, struct hcache_stats *out);
void hcache_reset_stats(struct hcache *hc);

#endif
