/*
 * The entry state machine of the host tier: ABSENT -> LOADING -> VALID, or
 * back to ABSENT when a load fails (never valid) or the entry is evicted.
 * Only VALID entries with no reference are eviction candidates, so nothing
 * being read, decoded or used is ever evicted.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hcache_int.h"
#include "common/util.h"

static int job_cmp(const void *a, const void *b, void *arg)
{
	const struct wspm_chunk *ch = arg;
	uint64_t x = ch[((const struct hc_job *)a)->chunk].offset;
	uint64_t y = ch[((const struct hc_job *)b)->chunk].offset;
	return x < y ? -1 : x > y;
}

/* Where each chunk of layer l lies in the cache: at its raw destination,
 * or, when the layer is kept packed, in the packed form (pack.h). */
static void lay_out(struct hcache *hc, uint32_t l, uint64_t j1)
{
	const struct wspm_chunk *ch = hc->m->chunks;
	uint64_t j0 = hc->layer_job0[l], at = 0;
	int packed = 0;
	for (uint64_t j = j0; hc->cfg.keep_packed && j < j1; j++)
		packed |= pack_chunk_stays_stored(&ch[hc->jobs[j].chunk]);
	for (uint64_t j = j0; j < j1; j++) {   /* the packed form (pack.h) */
		struct hc_job *job = &hc->jobs[j];
		const struct wspm_chunk *c = &ch[job->chunk];
		job->keep_stored = packed && pack_chunk_stays_stored(c);
		job->at = packed ? at : job->dst;
		at = pack_packed_next(at, c);
	}
	hc->layer_packed[l] = (uint8_t)packed;
	hc->layer_bytes[l] = packed ? at : hc->m->layers[l].raw_bytes;
}

uint32_t hcache_pieces(const struct hcache *hc, uint32_t layer, struct hcache_piece *out,
		       uint32_t max)
{
	if (!hc->layer_packed[layer])
		return 0;
	uint64_t j0 = hc->layer_job0[layer], j1 = hc->layer_job0[layer + 1];
	uint32_t n = 0;
	for (uint64_t j = j0; j < j1 && n < max; j++, n++) {
		const struct hc_job *job = &hc->jobs[j];
		const struct wspm_chunk *c = &hc->m->chunks[job->chunk];
		out[n] = (struct hcache_piece){ .at = job->at, .dst = job->dst,
						.stored = job->keep_stored ? c->stored_bytes : c->raw_bytes,
						.raw = c->raw_bytes,
						.exprans = job->keep_stored,
						.layout = c->transform,
						.tensor = job->tensor, .index = job->index_in_tensor };
	}
	return n;
}

int hcache_layer_packed(const struct hcache *hc, uint32_t layer)
{
	return hc->layer_packed[layer];
}

uint64_t hcache_layer_bytes(const struct hcache *hc, uint32_t layer)
{
	return hc->layer_bytes[layer];
}

/* Lay out every layer's chunks in file order with their destinations. */
int hc_entries_init(struct hcache *hc, struct wspi_err *err)
{
	const struct wspi_manifest *m = hc->m;
	uint64_t n_chunks = m->hdr->n_chunks, bytes;
	if (ckd_mul(&bytes, n_chunks, (uint64_t)sizeof(struct hc_job)))
		return WSP_ERR(err, WSP_ETOOBIG, "host cache: %" PRIu64 " chunks", n_chunks);
	hc->entries = calloc(hc->n_layers ? hc->n_layers : 1, sizeof(*hc->entries));
	hc->layer_job0 = calloc((size_t)hc->n_layers + 1, sizeof(*hc->layer_job0));
	hc->layer_zero_all = calloc(hc->n_layers ? hc->n_layers : 1, 1);
	hc->layer_bytes = calloc(hc->n_layers ? hc->n_layers : 1, sizeof(*hc->layer_bytes));
	hc->layer_packed = calloc(hc->n_layers ? hc->n_layers : 1, 1);
	hc->jobs = malloc(bytes ? bytes : 1);
	hc->cand = calloc(hc->n_layers ? hc->n_layers : 1, sizeof(*hc->cand));
	hc->cand_pages = calloc(hc->n_layers ? hc->n_layers : 1, sizeof(*hc->cand_pages));
	hc->deferred = calloc(hc->n_layers ? hc->n_layers : 1, sizeof(*hc->deferred));
	hc->started = calloc(hc->n_layers ? hc->n_layers : 1, sizeof(*hc->started));
	if (!hc->entries || !hc->cand || !hc->cand_pages || !hc->deferred || !hc->started || !hc->layer_job0 || !hc->layer_zero_all || !hc->jobs ||
	    !hc->layer_bytes || !hc->layer_packed)
		return WSP_ERR(err, -ENOMEM, "host cache: out of memory for the chunk table");
	hc->table_bytes = bytes + ((uint64_t)hc->n_layers + 1) *
		(sizeof(*hc->entries) + sizeof(*hc->layer_job0) + 2 + sizeof(*hc->layer_bytes) +
		 sizeof(*hc->cand) + sizeof(*hc->cand_pages) + sizeof(*hc->deferred) +
		 sizeof(*hc->started));

	uint64_t j = 0;
	for (uint32_t l = 0; l < hc->n_layers; l++) {
		const struct wspm_layer *L = &m->layers[l];
		struct hc_entry *e = &hc->entries[l];
		uint64_t prev_off = 0, prev_end = 0;
		int sorted = 1;
		hc->layer_job0[l] = j;
		for (uint32_t t = L->first_tensor; t < L->first_tensor + L->n_tensors; t++) {
			const struct wspm_tensor *T = &m->tensors[t];
			uint64_t dst = T->layer_offset;
			if (T->layer_offset < prev_end)
				hc->layer_zero_all[l] = 1;
			prev_end = T->layer_offset + T->raw_bytes;
			for (uint64_t k = 0; k < T->n_chunks; k++) {
				const struct wspm_chunk *c = &m->chunks[T->first_chunk + k];
				if (j >= n_chunks)
					return WSP_ERR(err, WSP_EFORMAT, "host cache: chunk table overflow");
				hc->jobs[j] = (struct hc_job){ .chunk = T->first_chunk + k, .dst = dst,
							       .tensor = t,
							       .index_in_tensor = (uint32_t)k };
				if (c->offset < prev_off)
					sorted = 0;
				prev_off = c->offset;
				dst += c->raw_bytes;
				hc->max_chunk_raw = WSP_MAX(hc->max_chunk_raw, c->raw_bytes);
				hc->max_chunk_stored = WSP_MAX(hc->max_chunk_stored, c->stored_bytes);
				j++;
			}
		}
		if (!sorted)
			qsort_r(hc->jobs + hc->layer_job0[l], j - hc->layer_job0[l],
				sizeof(struct hc_job), job_cmp, (void *)m->chunks);
		lay_out(hc, l, j);
		uint64_t np = (hc->layer_bytes[l] + hc->pg.page_bytes - 1) / hc->pg.page_bytes;
		e->n_pages = (uint32_t)np;   /* bounded by n_pages: checked at create */
		e->page_idx = calloc(np ? np : 1, sizeof(*e->page_idx));
		e->page_ptr = calloc(np ? np : 1, sizeof(*e->page_ptr));
		hc->table_bytes += (np ? np : 1) * (sizeof(*e->page_idx) + sizeof(*e->page_ptr));
		if (!e->page_idx || !e->page_ptr)
			return WSP_ERR(err, -ENOMEM, "host cache: out of memory for the page lists");
	}
	hc->layer_job0[hc->n_layers] = j;
	return 0;
}

void hc_entries_fini(struct hcache *hc)
{
	if (hc->entries)
		for (uint32_t l = 0; l < hc->n_layers; l++) {
			struct hc_entry *e = &hc->entries[l];
			free(e->provided);
			free(e->page_idx);
			free(e->page_ptr);
			hc_raw_drop(hc, e);
			free(e->raw_ptr);
		}
	for (unsigned i = 0; i < HC_SPARES; i++)
		free(hc->spare[i]);
	free(hc->entries);
	free(hc->cand);
	free(hc->cand_pages);
	free(hc->deferred);
	free(hc->started);
	free(hc->jobs);
	free(hc->layer_job0);
	free(hc->layer_zero_all);
	free(hc->layer_bytes);
	free(hc->layer_packed);
}

/* Return an entry's pages to the free stack (lock held). */
static void release_pages(struct hcache *hc, struct hc_entry *e)
{
	hc_pages_give(hc, e->page_idx, e->n_pages);
	/* A raw copy goes with its entry (rare: only a tier short of room
	 * evicts, and the trial makes copies only when all fits). */
	hc_raw_drop(hc, e);
	e->state = HC_ABSENT;
}

static void evict(struct hcache *hc, uint32_t layer)
{
	struct hc_entry *e = &hc->entries[layer];
	if (e->prefetched_unused) {
		atomic_fetch_add(&hc->c_prefetch_wasted, 1);
		if (hc->cfg.on_unused)
			hc->cfg.on_unused(hc->cfg.ready_ctx, layer);
	}
	e->prefetched_unused = 0;
	release_pages(hc, e);
	atomic_fetch_add(&hc->c_evictions, 1);
}

/*
 * Find room for `need` pages (lock held).  The victims are chosen first and
 * evicted only if enough can be had, so a refused prefetch evicts nothing.
 * Returns 0, -ENOSPC (refused or nothing evictable), or -EAGAIN when a
 * demand request would succeed once loads in flight or pinning finish.
 */
static int make_room(struct hcache *hc, uint32_t layer, uint32_t need, int is_prefetch)
{
	uint32_t free_now = hc_pages_free(hc);
	if (free_now >= need)
		return 0;
	/* Pages the pinning thread has yet to hand out would hold it: a
	 * prefetch waits for them (hcache_request defers it) instead of
	 * evicting.  A cold first pass whose hints ran ahead of the pinning
	 * evicted 2-3 layers and read them again, 4-9% more bytes. */
	if (is_prefetch && hc_pages_unavailable(hc) >= need - free_now)
		return -ENOSPC;
	int predictive = hc->cfg.policy == WSP_POLICY_PREDICT && hc->cfg.predictor;
	unsigned n = 0;
	for (uint32_t l = 0; l < hc->n_layers; l++) {
		const struct hc_entry *e = &hc->entries[l];
		if (e->state != HC_VALID || e->refs || e->waiters || !e->n_pages)
			continue;
		hc->cand[n] = (struct evict_cand){
			.layer = l, .last_use = e->last_use,
			.distance = predictive ? predictor_distance(hc->cfg.predictor, l)
					       : PREDICT_NEVER,
		};
		hc->cand_pages[n++] = e->n_pages;
	}
	/* The simulator's own plan, admission rule included: a prefetch never
	 * pushes out what is needed before `layer` (a demand load passes 0). */
	uint64_t incoming = is_prefetch && predictive ? predictor_distance(hc->cfg.predictor, layer) : 0;
	int victims = evict_plan(hc->cfg.policy, hc->cand, hc->cand_pages, n, need - free_now,
				 incoming);
	if (victims < 0)
		return (!is_prefetch && (hc->n_loading || hc_pages_unavailable(hc))) ? -EAGAIN : -ENOSPC;
	for (int k = 0; k < victims; k++)
		evict(hc, hc->cand[k].layer);
	return 0;
}

/* Start a load of an ABSENT entry (lock held): 1, -ENOSPC or -EAGAIN. */
static int start_load(struct hcache *hc, uint32_t layer, int is_prefetch)
{
	struct hc_entry *e = &hc->entries[layer];
	int rc = make_room(hc, layer, e->n_pages, is_prefetch);
	if (rc < 0)
		return rc;
	hc_pages_take(hc, e->page_idx, e->n_pages);
	for (uint32_t k = 0; k < e->n_pages; k++)
		e->page_ptr[k] = hc_page(hc, e->page_idx[k]);
	e->state = HC_LOADING;
	e->last_use = hc->clock;
	e->loaded_by_prefetch = is_prefetch;
	e->prefetched_unused = is_prefetch;
	e->demand = !is_prefetch;
	hc->n_loading++;
	hc_load_begin(hc_loader_record(hc, layer), hc->layer_job0[layer + 1] - hc->layer_job0[layer]);
	atomic_fetch_add(&hc->c_loads, 1);
	if (is_prefetch)
		atomic_fetch_add(&hc->c_prefetches, 1);
	return 1;
}

/* Under hc->lock: keep `buf` (`cap` bytes; NULL: nothing) as a spare for
 * the next handed-in layer, in place of a smaller one if the spares are
 * full.  Returns what is not kept, for the caller to free after unlocking.
 * Copies into a fresh buffer each (250 MB layers, on a VM host) ran at
 * ~1.1 GB/s: 3.8 s of an 8.9 s data-parallel pass; new pages being
 * faulted in is the likely cause (not profiled). */
static void *spare_put(struct hcache *hc, uint8_t *buf, uint64_t cap)
{
	uint64_t held = 0, limit = (uint64_t)hc->pg.n_pages * hc->pg.page_bytes / 4;
	unsigned small = 0;
	for (unsigned i = 0; i < HC_SPARES; i++) {
		held += hc->spare_cap[i];
		if (hc->spare_cap[i] < hc->spare_cap[small])
			small = i;   /* an empty place first (its cap is 0) */
	}
	if (!buf || cap <= hc->spare_cap[small] || held - hc->spare_cap[small] + cap > limit)
		return buf;
	void *out = hc->spare[small];
	hc->spare[small] = buf;
	hc->spare_cap[small] = cap;
	return out;
}

/* Under hc->lock: the smallest spare of at least `len` bytes, taken out of
 * the spares (its size in *cap), or NULL. */
static uint8_t *spare_take(struct hcache *hc, uint64_t len, uint64_t *cap)
{
	int best = -1;
	for (unsigned i = 0; i < HC_SPARES; i++)
		if (hc->spare[i] && hc->spare_cap[i] >= len &&
		    (best < 0 || hc->spare_cap[i] < hc->spare_cap[best]))
			best = (int)i;
	if (best < 0)
		return NULL;
	uint8_t *buf = hc->spare[best];
	*cap = hc->spare_cap[best];
	hc->spare[best] = NULL;
	hc->spare_cap[best] = 0;
	return buf;
}

void hc_entry_load_ended(struct hcache *hc, uint32_t layer)
{
	struct hc_entry *e = &hc->entries[layer];
	char msg[WSP_ERRMSG_MAX];
	int status = hc_load_result(hc_loader_record(hc, layer), msg, sizeof(msg));
	pthread_mutex_lock(&hc->lock);
	hc->n_loading--;
	void *unused = spare_put(hc, e->provided, e->provided_cap);   /* used (or found bad) */
	e->provided = NULL;
	if (status == 0) {
		e->state = HC_VALID;
	} else {
		e->prefetched_unused = 0;
		release_pages(hc, e);
		e->fail_code = status;
		snprintf(e->fail_msg, sizeof(e->fail_msg), "%s", msg);
		e->fail_seq++;
		atomic_fetch_add(&hc->c_load_failures, 1);
	}
	pthread_cond_broadcast(&hc->cond);
	pthread_mutex_unlock(&hc->lock);
	free(unused);
	if (hc->cfg.on_ready)
		hc->cfg.on_ready(hc->cfg.ready_ctx, layer, status);
}

int hcache_provide(struct hcache *hc, uint32_t layer, const void *stored)
{
	if (layer >= hc->n_layers)
		return WSP_ENOTFOUND;
	uint64_t len = hc->m->layers[layer].stored_bytes, cap = len ? len : 1;
	pthread_mutex_lock(&hc->lock);
	uint8_t *copy = spare_take(hc, len, &cap);
	pthread_mutex_unlock(&hc->lock);
	if (!copy && !(copy = malloc(cap)))
		return -ENOMEM;
	memcpy(copy, stored, len);
	pthread_mutex_lock(&hc->lock);
	struct hc_entry *e = &hc->entries[layer];
	int taken = e->state == HC_ABSENT;
	void *unused;
	if (taken) {   /* handed in twice before a load: the later */
		unused = spare_put(hc, e->provided, e->provided_cap);
		e->provided = copy;
		e->provided_cap = cap;
	} else {
		unused = spare_put(hc, copy, cap);
	}
	pthread_mutex_unlock(&hc->lock);
	free(unused);
	return taken;
}

int hcache_request(struct hcache *hc, uint32_t layer, int is_prefetch)
{
	if (layer >= hc->n_layers)
		return WSP_ENOTFOUND;
	pthread_mutex_lock(&hc->lock);
	struct hc_entry *e = &hc->entries[layer];
	int rc = 0;
	if (e->state == HC_ABSENT) {
		rc = start_load(hc, layer, is_prefetch);
		if (rc == -EAGAIN)
			rc = -ENOSPC;
		/* The arena is still being pinned: keep the hint until the
		 * next piece is usable instead of dropping it. */
		if (rc == -ENOSPC && is_prefetch && hc_pages_unavailable(hc)) {
			if (!e->deferred) {
				e->deferred = 1;
				hc->deferred[hc->n_deferred++] = layer;
			}
			rc = 0;
		}
	}
	pthread_mutex_unlock(&hc->lock);
	if (rc == 1)
		hc_loader_queue(hc, e, !is_prefetch);
	return rc;
}

void hc_entries_pages_ready(struct hcache *hc)
{
	uint32_t n = 0;
	pthread_mutex_lock(&hc->lock);
	uint32_t keep = 0;
	for (uint32_t i = 0; i < hc->n_deferred; i++) {
		uint32_t l = hc->deferred[i];
		struct hc_entry *e = &hc->entries[l];
		int rc = e->state == HC_ABSENT ? start_load(hc, l, 1) : 0;
		if (rc == 1) {
			e->deferred = 0;
			hc->started[n++] = l;
		} else if (rc < 0 && hc_pages_unavailable(hc)) {
			hc->deferred[keep++] = l;   /* more pages are coming */
		} else {
			e->deferred = 0;            /* present, loading, or refused for good */
		}
	}
	hc->n_deferred = keep;
	pthread_mutex_unlock(&hc->lock);
	/* Only the front end's thread runs this, so `started` is its own. */
	for (uint32_t i = 0; i < n; i++)
		hc_loader_queue(hc, &hc->entries[hc->started[i]], 0);
}

static void fill_ref(struct hcache *hc, uint32_t layer, struct hcache_ref *ref)
{
	const struct hc_entry *e = &hc->entries[layer];
	int raw = hc->hand_raw && e->raw == HC_RAW_READY;
	ref->layer = layer;
	ref->n_pages = raw ? e->n_raw_pages : e->n_pages;
	ref->pages = raw ? e->raw_ptr : e->page_ptr;
	ref->page_bytes = hc->pg.page_bytes;
	ref->raw_bytes = hc->m->layers[layer].raw_bytes;
	ref->bytes = raw ? ref->raw_bytes : hc->layer_bytes[layer];
	ref->packed = raw ? 0 : hc->layer_packed[layer];
	/* A raw copy is one pinned range: its pages merge into long copies. */
	ref->arena = raw ? (const char *)e->raw_buf : (const char *)hc->pg.arena;
	ref->piece_bytes = raw ? 0 : hc->pg.piece_bytes;
}

/* Take the reference on a VALID entry (lock held). */
static void take(struct hcache *hc, struct hc_entry *e, struct hcache_ref *ref)
{
	e->refs++;
	e->last_use = ++hc->clock;
	e->prefetched_unused = 0;
	fill_ref(hc, (uint32_t)(e - hc->entries), ref);
}

int hcache_get(struct hcache *hc, uint32_t layer, struct hcache_ref *ref, struct wspi_err *err)
{
	if (layer >= hc->n_layers)
		return WSP_ERR(err, WSP_ENOTFOUND, "host cache: no layer %" PRIu32 " (pack has %" PRIu32 ")",
			       layer, hc->n_layers);
	struct hc_entry *e = &hc->entries[layer];
	int counted = 0, waiting = 0, rc = 0;
	uint64_t seq = 0;
	pthread_mutex_lock(&hc->lock);
	for (;;) {
		/* The load this get waited for (or started) failed, however
		 * fast: report it rather than start another one. */
		if (waiting && e->fail_seq != seq) {
			rc = WSP_ERR(err, e->fail_code, "%s", e->fail_msg);
			break;
		}
		if (e->state == HC_VALID) {
			if (!counted) {
				atomic_fetch_add(&hc->c_hits, 1);
				if (e->prefetched_unused)
					atomic_fetch_add(&hc->c_prefetch_hits, 1);
			}
			take(hc, e, ref);
			break;
		}
		if (e->state == HC_LOADING) {
			if (!counted) {
				atomic_fetch_add(&hc->c_hits, 1);
				if (e->prefetched_unused)
					atomic_fetch_add(&hc->c_prefetch_hits, 1);
				counted = 1;
			}
			/* A prefetched load becomes demanded: it is this get's. */
			e->prefetched_unused = 0;
			if (!waiting) {
				waiting = 1;
				seq = e->fail_seq;
				e->waiters++;
				if (!e->demand) {
					/* Queued as a prefetch: a get now waits for it. */
					e->demand = 1;
					pthread_mutex_unlock(&hc->lock);
					hc_loader_promote(hc, e);
					pthread_mutex_lock(&hc->lock);
					continue;
				}
			}
			pthread_cond_wait(&hc->cond, &hc->lock);
			continue;
		}
		/* ABSENT: load it, or wait for room. */
		int s = start_load(hc, layer, 0);
		if (s == 1) {
			if (!counted)
				atomic_fetch_add(&hc->c_misses, 1);
			counted = 1;
			if (!waiting)
				e->waiters++;
			waiting = 1;
			seq = e->fail_seq;
			pthread_mutex_unlock(&hc->lock);
			hc_loader_queue(hc, e, 1);
			pthread_mutex_lock(&hc->lock);
			continue;
		}
		if (s == -EAGAIN) {
			pthread_cond_wait(&hc->cond, &hc->lock);
			continue;
		}
		char a[32], b[32];
		rc = WSP_ERR(err, s, s == -ENOSPC ?
			     "host cache: no room for layer %s (%s): all %s of the cache are in use (release a layer first)" :
			     "host cache: cannot load layer %s (%s): out of memory (%s)",
			     hc_layer_name(hc, layer),
			     wsp_format_size(hc->m->layers[layer].raw_bytes, a, sizeof(a)),
			     wsp_format_size(hc->pg.arena_bytes, b, sizeof(b)));
		break;
	}
	if (waiting)
		e->waiters--;
	pthread_mutex_unlock(&hc->lock);
	return rc;
}

int hcache_try_get(struct hcache *hc, uint32_t layer, struct hcache_ref *ref)
{
	if (layer >= hc->n_layers)
		return WSP_ENOTFOUND;
	int got = 0;
	pthread_mutex_lock(&hc->lock);
	struct hc_entry *e = &hc->entries[layer];
	if (e->state == HC_VALID) {
		atomic_fetch_add(&hc->c_hits, 1);
		if (e->prefetched_unused)
			atomic_fetch_add(&hc->c_prefetch_hits, 1);
		take(hc, e, ref);
		got = 1;
	}
	pthread_mutex_unlock(&hc->lock);
	return got;
}

int hcache_contains(struct hcache *hc, uint32_t layer)
{
	if (layer >= hc->n_layers)
		return 0;
	pthread_mutex_lock(&hc->lock);
	int v = hc->entries[layer].state == HC_VALID;
	pthread_mutex_unlock(&hc->lock);
	return v;
}

void hcache_put(struct hcache *hc, struct hcache_ref *ref)
{
	if (!ref || ref->layer >= hc->n_layers)
		return;
	pthread_mutex_lock(&hc->lock);
	struct hc_entry *e = &hc->entries[ref->layer];
	if (e->refs && --e->refs == 0)
		pthread_cond_broadcast(&hc->cond);
	pthread_mutex_unlock(&hc->lock);
	ref->pages = NULL;
	ref->n_pages = 0;
}
