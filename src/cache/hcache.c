/*
 * The host tier: creation (budget, clamping, workers), teardown, counters.
 * See hcache.h for the contract and hcache_int.h for how the files divide
 * the work.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hcache_int.h"
#include "common/util.h"

#define HC_DEFAULT_PAGE (2ull << 20)
#define HC_DEFAULT_BUDGET_MAX (8ull << 30)
/* Pages a budget smaller than one page is carved into instead. */
#define HC_MIN_PAGES 16u
/* A zstd decompression context with its window and buffers, per worker. */
#define HC_DECODER_OVERHEAD (1ull << 20)

/*
 * The budget actually used: `want`, clamped so that the cache plus `reserve`
 * (staging, decoder buffers, the caller's own) stay within 90% of the memory
 * the process may use (MemAvailable or the cgroup limit), so that a run
 * inside a memory limit is not killed for what the clamp forgot.
 */
static uint64_t choose_budget(struct hcache *hc, uint64_t want, uint64_t reserve)
{
	const char *why = NULL;
	uint64_t avail = wspi_memory_available(&why);
	if (!want) {
		want = avail ? avail / 4 : HC_DEFAULT_BUDGET_MAX;
		return WSP_MIN(want, HC_DEFAULT_BUDGET_MAX);
	}
	uint64_t usable = avail / 10 * 9;
	uint64_t limit = usable > reserve ? usable - reserve : 0;
	if (avail && want > limit) {
		char a[32], b[32], c[32], d[32];
		hc_notice(hc, "host cache budget %s is above the memory available for it (%s, %s, of "
			      "which 90%% less %s for staging, decode buffers and slots): using %s",
			  wsp_format_size(want, a, sizeof(a)), wsp_format_size(avail, b, sizeof(b)),
			  why ? why : "MemAvailable", wsp_format_size(reserve, d, sizeof(d)),
			  wsp_format_size(limit, c, sizeof(c)));
		want = limit;
	}
	return want;
}

/* What the tier can ever hold: every layer at once, each in whole pages
 * of its raw bytes (the most a layer takes, packed or not). */
static uint64_t most_held(const struct hcache *hc)
{
	uint64_t sum = 0, page = hc->pg.page_bytes;
	for (uint32_t l = 0; l < hc->n_layers; l++)
		sum += (hc->m->layers[l].raw_bytes + page - 1) / page * page;
	return sum;
}

static int check_fits(struct hcache *hc, uint64_t budget, uint64_t asked, uint64_t reserve,
		      struct wspi_err *err)
{
	uint64_t pages = budget / hc->pg.page_bytes, most = 0;
	uint32_t big = 0;
	for (uint32_t l = 0; l < hc->n_layers; l++) {
		uint64_t need = (hc->layer_bytes[l] + hc->pg.page_bytes - 1) / hc->pg.page_bytes;
		if (need > most) {
			most = need;
			big = l;
		}
	}
	if (most > pages) {
		char a[32], b[32], c[32], d[32], e[32], why[128] = "";
		/* Under a total budget the least that works includes the rest. */
		uint64_t least = most * hc->pg.page_bytes + (hc->cfg.budget_total ? reserve : 0);
		if (hc->cfg.budget_total)
			snprintf(why, sizeof(why), ", after %s for staging, decode buffers and slots "
				 "and the tables of %u layers", wsp_format_size(reserve, e, sizeof(e)),
				 hc->n_layers);
		else if (budget < asked)
			snprintf(why, sizeof(why), ", after clamping to the memory available");
		return WSP_ERR(err, WSP_ETOOBIG,
			       "host cache: layer %s needs %s (%" PRIu64 " pages of %s) but the budget "
			       "holds %" PRIu64 " pages (%s%s); the host cache needs at least %s",
			       hc_layer_name(hc, big),
			       wsp_format_size(hc->layer_bytes[big], a, sizeof(a)), most,
			       wsp_format_size(hc->pg.page_bytes, b, sizeof(b)), pages,
			       wsp_format_size(pages * hc->pg.page_bytes, c, sizeof(c)), why,
			       wsp_format_size(least, d, sizeof(d)));
	}
	return 0;
}

/* Messages from the inbox taken up at a time, out of its lock. */
#define FRONT_BATCH 64u

/* The front end's thread: takes up what the rooms below post to its inbox
 * (a load ended; pinning made pages usable) and runs the front end's logic
 * for it (entries.c).  Ends when the inbox is stopped and empty. */
static void *front_main(void *arg)
{
	struct hcache *hc = arg;
	uint32_t ended[FRONT_BATCH];
	int pages, k;

	while ((k = hc_inbox_take(hc, ended, FRONT_BATCH, &pages)) >= 0) {
		for (int i = 0; i < k; i++)
			hc_entry_load_ended(hc, ended[i]);
		if (pages)
			hc_entries_pages_ready(hc);
		hc_inbox_done(hc);
	}
	return NULL;
}

static int front_start(struct hcache *hc, struct wspi_err *err)
{
	int rc = hc_inbox_init(hc, err);
	if (rc < 0)
		return rc;
	rc = pthread_create(&hc->front, NULL, front_main, hc);
	if (rc)
		return WSP_ERR(err, -rc, "host cache: cannot start a thread: %s", strerror(rc));
	hc->front_started = 1;
	return 0;
}

int hcache_create(const struct hcache_config *cfg, struct wsp_pack_s *pk, struct hcache **out,
		  struct wspi_err *err)
{
	*out = NULL;
	uint64_t page = cfg->page_bytes ? cfg->page_bytes : HC_DEFAULT_PAGE;
	if (page % WSP_ALIGN_DIRECT || page > (1ull << 40))
		return WSP_ERR(err, -EINVAL, "host cache: page size %" PRIu64 " is not a multiple of 4096",
			       page);
	struct hcache *hc = calloc(1, sizeof(*hc));
	if (!hc)
		return WSP_ERR(err, -ENOMEM, "host cache: out of memory");
	hc->cfg = *cfg;
	hc->pk = pk;
	hc->m = &pk->m;
	hc->n_layers = pk->m.hdr->n_layers;
	/* A budget smaller than one page would hold nothing: it is carved into
	 * HC_MIN_PAGES smaller pages instead. */
	if (cfg->budget_bytes && cfg->budget_bytes < page) {
		uint64_t fit = WSP_MAX(wspi_align_down(cfg->budget_bytes / HC_MIN_PAGES,
						      WSP_ALIGN_DIRECT), (uint64_t)WSP_ALIGN_DIRECT);
		char a[32], b[32], c[32];
		hc_notice(hc, "host cache budget %s is smaller than a page of %s: using %s pages",
			  wsp_format_size(cfg->budget_bytes, a, sizeof(a)),
			  wsp_format_size(page, b, sizeof(b)), wsp_format_size(fit, c, sizeof(c)));
		page = fit;
	}
	hc_pages_plan(hc, page);
	pthread_mutex_init(&hc->lock, NULL);
	pthread_cond_init(&hc->cond, NULL);
	hc_pool_init(hc);
	int rc = hc_loader_init(hc, err);
	if (rc < 0)
		goto fail;

	/* The chunk table first: staging and decoder sizes depend on it, and
	 * the budget is clamped net of them. */
	rc = hc_entries_init(hc, err);
	if (rc < 0 || (rc = front_start(hc, err)) < 0)
		goto fail;
	unsigned workers = cfg->decode_threads ? cfg->decode_threads : wspi_cpu_count();
	/* A decoder's buffers; a second chunk to check kept-stored chunks in. */
	uint64_t per_worker = hc->max_chunk_raw * (cfg->keep_packed ? 2 : 1) + HC_DECODER_OVERHEAD;
	if (cfg->budget_total && cfg->budget_bytes && !cfg->decode_threads) {
		/* Within a total budget the decoders' buffers take at most an
		 * eighth of it too: fewer decode threads (at least one). */
		uint64_t fit = cfg->budget_bytes / 8 / per_worker;
		workers = (unsigned)WSP_MAX(WSP_MIN(fit, (uint64_t)workers), 1);
		hc->cfg.decode_threads = workers;   /* what the pool starts */
	}
	/* Within a total budget the chunk table counts too (it grows with
	 * the layer and chunk counts). */
	uint64_t reserve = cfg->reserve_bytes + hc_staging_plan(hc) + (uint64_t)workers * per_worker +
			   (cfg->budget_total ? hc->table_bytes : 0);
	uint64_t want = cfg->budget_bytes;
	if (cfg->budget_total && want)   /* the cache gets what the rest leaves */
		want = want > reserve ? want - reserve : 0;
	uint64_t budget = want || !cfg->budget_total ? choose_budget(hc, want, reserve) : 0;
	/* No bigger than the pack (every layer at once, in whole pages): the
	 * arena is page-locked whole, in the background, and a 64 GB budget
	 * for a 6 GB model would lock 58 GB the tier can never fill (and, on
	 * two ranks of one host, locking 16 GB each while the forwards ran
	 * held them up for seconds). */
	uint64_t arena = WSP_MIN(budget, most_held(hc));
	/* What the clamp left of the budget may hold raw copies of packed
	 * layers (raw_copy.c), made only when a pager asks. */
	hc->raw_budget = cfg->keep_packed ? budget - arena : 0;
	budget = arena;
	rc = check_fits(hc, budget, cfg->budget_bytes, reserve, err);
	if (rc < 0)
		goto fail;
	if ((rc = hc_pages_init(hc, budget, err)) < 0 ||
	    (rc = hc_pool_start(hc, err)) < 0 || (rc = hc_loader_start(hc, err)) < 0 ||
	    (!cfg->pin_later && (rc = hcache_pin_start(hc, err)) < 0))
		goto fail;
	*out = hc;
	return 0;
fail:
	hcache_destroy(hc);
	return rc;
}

void hcache_destroy(struct hcache *hc)
{
	if (!hc)
		return;
	hc_pin_stop(hc);      /* first: what it posts may start deferred prefetches */
	if (hc->front_started)
		hc_inbox_drain(hc);   /* ... which start now, or never */
	hc_loader_stop(hc);   /* cancels queued loads, waits for reads in flight */
	hc_pool_stop(hc);     /* decodes what was read: every load finishes */
	hc_inbox_stop(hc);    /* the front end takes up their ends, then stops */
	if (hc->front_started)
		pthread_join(hc->front, NULL);
	hc_inbox_fini(hc);
	hc_loader_fini(hc);
	hc_pool_fini(hc);
	hc_pages_fini(hc);
	hc_entries_fini(hc);
	pthread_mutex_destroy(&hc->lock);
	pthread_cond_destroy(&hc->cond);
	free(hc);
}

const struct io_engine *hcache_io(const struct hcache *hc)
{
	return hc->ld.io;
}

int hcache_pin_start(struct hcache *hc, struct wspi_err *err)
{
	return hc_pin_start(hc, err);
}

int hcache_pin_wait(struct hcache *hc, struct wspi_err *err)
{
	int rc = hc_pin_wait(hc, err);
	if (hc->front_started)
		hc_inbox_drain(hc);   /* what waited for the pages has started */
	return rc;
}

#define LD(x) atomic_load(&hc->x)
void hcache_get_stats(struct hcache *hc, struct hcache_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->hits = LD(c_hits);
	out->misses = LD(c_misses);
	out->evictions = LD(c_evictions);
	out->prefetches = LD(c_prefetches);
	out->prefetch_wasted = LD(c_prefetch_wasted);
	out->prefetch_hits = LD(c_prefetch_hits);
	out->loads = LD(c_loads);
	out->load_failures = LD(c_load_failures);
	out->bytes_read = LD(c_bytes_read);
	out->bytes_decoded = LD(c_bytes_decoded);
	out->read_ns = LD(c_read_ns);
	out->decode_ns = LD(c_decode_ns);
	out->raw_copies = LD(c_raw_copies);
	out->budget_bytes = hc->pg.arena_bytes;
	out->staging_bytes = hc->ld.staging_bytes;
	pthread_mutex_lock(&hc->lock);
	out->pinned_bytes = hc_pages_pinned(hc, &out->pin_error);
	pthread_mutex_unlock(&hc->lock);
}

void hcache_reset_stats(struct hcache *hc)
{
	atomic_uint_fast64_t *c[] = {
		&hc->c_hits, &hc->c_misses, &hc->c_evictions, &hc->c_prefetches,
		&hc->c_prefetch_wasted, &hc->c_prefetch_hits, &hc->c_loads,
		&hc->c_load_failures, &hc->c_bytes_read, &hc->c_bytes_decoded,
		&hc->c_read_ns, &hc->c_decode_ns, &hc->c_raw_copies,
	};
	for (size_t i = 0; i < WSP_ARRAY_SIZE(c); i++)
		atomic_store(c[i], 0);
}
