/*
 * The loader: one thread takes queued loads (demand loads first) and reads
 * each layer's stored bytes into staging slots, a slice of whole chunks at a
 * time.  When a slice's read completes the decode pool decodes its chunks
 * into the entry's pages while the next slices are being read, so reading
 * and decoding overlap within a layer as well as across layers.
 *
 * Slices start at a 4096-aligned offset (chunks need not be aligned; the
 * few bytes before the first chunk are read again) and their span fits a
 * slot, so O_DIRECT constraints hold: layers start on 4096 and shards are
 * padded to 4096, so a span never passes the end of a file.
 *
 * Raw-codec chunks are copied from staging by the decode workers too; reading
 * them straight into the pages would save a copy (a later optimization).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/hcache_int.h"
#include "common/util.h"

#define HC_SLOT_MIN (8ull << 20)
#define HC_STAGING_MIN (32ull << 20)
#define HC_STAGING_MAX (256ull << 20)

static uint32_t load_layer(const struct hcache *hc, const struct hc_load *ld)
{
	return (uint32_t)(ld - hc->ld.loads);
}

/* Drop `n` from the load's pending count; it ends at zero. */
static void load_put(struct hcache *hc, uint32_t layer, uint64_t n)
{
	if (hc_load_put(&hc->ld.loads[layer], n))
		hc_inbox_post_ended(hc, layer);   /* the front end takes it up */
}

struct hc_load *hc_loader_record(struct hcache *hc, uint32_t layer)
{
	return &hc->ld.loads[layer];
}

void hc_loader_queue(struct hcache *hc, struct hc_entry *e, int demand)
{
	struct hc_load *ld = &hc->ld.loads[e - hc->entries];
	pthread_mutex_lock(&hc->ld.stage_lock);
	ld->next = NULL;
	if (!hc->ld.load_head) {
		hc->ld.load_head = hc->ld.load_tail = ld;
	} else if (demand) {
		/* A get is waiting for it: ahead of prefetches. */
		ld->next = hc->ld.load_head;
		hc->ld.load_head = ld;
	} else {
		hc->ld.load_tail->next = ld;
		hc->ld.load_tail = ld;
	}
	pthread_cond_broadcast(&hc->ld.stage_cond);
	pthread_mutex_unlock(&hc->ld.stage_lock);
}

void hc_loader_promote(struct hcache *hc, struct hc_entry *e)
{
	struct hc_load *ld = &hc->ld.loads[e - hc->entries];
	pthread_mutex_lock(&hc->ld.stage_lock);
	struct hc_load *prev = NULL, *q = hc->ld.load_head;
	while (q && q != ld) {
		prev = q;
		q = q->next;
	}
	if (q && prev) {   /* queued, not first: unlink and put in front */
		prev->next = ld->next;
		if (hc->ld.load_tail == ld)
			hc->ld.load_tail = prev;
		ld->next = hc->ld.load_head;
		hc->ld.load_head = ld;
	}
	pthread_mutex_unlock(&hc->ld.stage_lock);
}

static void release_slot(struct hcache *hc, unsigned slot)
{
	pthread_mutex_lock(&hc->ld.stage_lock);
	hc->ld.free_slots[hc->ld.n_free_slots++] = slot;
	pthread_cond_broadcast(&hc->ld.stage_cond);
	pthread_mutex_unlock(&hc->ld.stage_lock);
}

static void reads_begin(struct hcache *hc, uint64_t now)
{
	pthread_mutex_lock(&hc->ld.rd_lock);
	if (hc->ld.rd_in_flight++ == 0)
		hc->ld.rd_since = now;
	pthread_mutex_unlock(&hc->ld.rd_lock);
}

static void reads_end(struct hcache *hc, uint64_t now)
{
	pthread_mutex_lock(&hc->ld.rd_lock);
	if (--hc->ld.rd_in_flight == 0)
		atomic_fetch_add(&hc->c_read_ns, now - hc->ld.rd_since);
	pthread_mutex_unlock(&hc->ld.rd_lock);
}

static void read_done(struct io_req *r, int result)
{
	struct hc_slice *s = r->ctx;
	struct hcache *hc = s->hc;
	uint64_t end = wspi_now_ns();
	reads_end(hc, end);
	hc_trace(hc, WSP_STAGE_READ, s->layer, s->read_begin, end, r->length, (int)s->slot);
	if (result >= 0) {
		atomic_fetch_add(&hc->c_bytes_read, r->length);
		atomic_store(&s->jobs_left, s->n_jobs);
		s->next_job = 0;
		hc_pool_push(hc, s);
		return;
	}
	char msg[WSP_ERRMSG_MAX];
	wspi_err_copy(&s->io_err, msg, sizeof(msg));
	hc_load_fail(&hc->ld.loads[s->layer], result, "%s: layer %s: reading %" PRIu64 " bytes at offset %"
		     PRIu64 ": %s", hc->ld.paths[r->file], hc_layer_name(hc, s->layer), r->length,
		     r->offset, msg[0] ? msg : wsp_strerror(result));
	uint64_t n = s->n_jobs;
	uint32_t layer = s->layer;
	release_slot(hc, s->slot);   /* s may be reused now */
	load_put(hc, layer, n);
}

/* A slice copied from provided bytes: to the decoders as a read would go. */
static void provided_done(struct hc_slice *s)
{
	atomic_store(&s->jobs_left, s->n_jobs);
	s->next_job = 0;
	hc_pool_push(s->hc, s);
}

static void zero_range(struct hcache *hc, struct hc_entry *e, uint64_t off, uint64_t len)
{
	while (len) {
		uint64_t pg = off / hc->pg.page_bytes, in = off % hc->pg.page_bytes;
		uint64_t n = WSP_MIN(len, hc->pg.page_bytes - in);
		memset((uint8_t *)e->page_ptr[pg] + in, 0, n);
		off += n;
		len -= n;
	}
}

/* Pages are reused: clear the alignment padding between tensors once per
 * load so that a layer's bytes never depend on what the pages held before. */
static void zero_gaps(struct hcache *hc, uint32_t layer, struct hc_entry *e)
{
	const struct wspm_layer *L = &hc->m->layers[layer];
	if (hc->layer_zero_all[layer]) {
		zero_range(hc, e, 0, L->raw_bytes);
		return;
	}
	uint64_t at = 0;
	for (uint32_t t = L->first_tensor; t < L->first_tensor + L->n_tensors; t++) {
		const struct wspm_tensor *T = &hc->m->tensors[t];
		if (T->layer_offset > at)
			zero_range(hc, e, at, T->layer_offset - at);
		at = T->layer_offset + T->raw_bytes;
	}
	if (L->raw_bytes > at)
		zero_range(hc, e, at, L->raw_bytes - at);
}

/* A free staging slot, waiting for one; -1 when the cache is closing. */
static int get_slot(struct hcache *hc)
{
	int slot = -1;
	pthread_mutex_lock(&hc->ld.stage_lock);
	while (!hc->ld.n_free_slots && !hc->ld.loader_stop)
		pthread_cond_wait(&hc->ld.stage_cond, &hc->ld.stage_lock);
	if (!hc->ld.loader_stop)
		slot = (int)hc->ld.free_slots[--hc->ld.n_free_slots];
	pthread_mutex_unlock(&hc->ld.stage_lock);
	return slot;
}

static void run_load(struct hcache *hc, uint32_t layer)
{
	struct hc_entry *e = &hc->entries[layer];
	const struct wspm_layer *L = &hc->m->layers[layer];
	const struct wspm_chunk *ch = hc->m->chunks;
	uint64_t j = hc->layer_job0[layer], j1 = hc->layer_job0[layer + 1];

	/* Set before the load was queued, freed when it finishes. */
	pthread_mutex_lock(&hc->lock);
	const uint8_t *provided = e->provided;
	pthread_mutex_unlock(&hc->lock);
	if (!hc->layer_packed[layer])   /* a packed layer's padding is the GPU's to zero */
		zero_gaps(hc, layer, e);
	while (j < j1) {
		if (hc_load_failed(&hc->ld.loads[layer]))
			break;
		int slot = get_slot(hc);
		if (slot < 0) {
			hc_load_fail(&hc->ld.loads[layer], -ECANCELED, "layer %s: the host cache is closing",
				     hc_layer_name(hc, layer));
			break;
		}
		const struct wspm_chunk *c0 = &ch[hc->jobs[j].chunk];
		uint64_t start = wspi_align_down(c0->offset, WSP_ALIGN_DIRECT);
		uint64_t end = c0->offset + c0->stored_bytes, k = j + 1;
		for (; k < j1; k++) {
			const struct wspm_chunk *c = &ch[hc->jobs[k].chunk];
			uint64_t ne = WSP_MAX(end, c->offset + c->stored_bytes);
			if (io_span(ne - start) > hc->ld.slot_bytes)
				break;
			end = ne;
		}
		struct hc_slice *s = &hc->ld.slices[slot];
		s->layer = layer;
		s->load = &hc->ld.loads[layer];
		s->file_off = start;
		s->job0 = j;
		s->n_jobs = k - j;
		s->req = (struct io_req){
			.file = L->shard, .offset = start, .length = end - start,
			.buf = hc->ld.staging + (uint64_t)slot * hc->ld.slot_bytes,
			.done = read_done, .ctx = s, .err = &s->io_err,
		};
		wspi_err_clear(&s->io_err);
		j = k;
		if (provided) {   /* handed in: a copy, not a read (not counted as one) */
			memcpy(s->req.buf, provided + (start - L->offset), end - start);
			provided_done(s);
			continue;
		}
		s->read_begin = wspi_now_ns();
		reads_begin(hc, s->read_begin);
		int rc = io_submit(hc->ld.io, &s->req);
		if (rc < 0)
			read_done(&s->req, rc);   /* not queued: done will not be called */
	}
	/* Jobs never dispatched, and the loader's own hold. */
	load_put(hc, layer, (j1 - j) + 1);
}

static void *loader_main(void *arg)
{
	struct hcache *hc = arg;
	for (;;) {
		pthread_mutex_lock(&hc->ld.stage_lock);
		while (!hc->ld.load_head && !hc->ld.loader_stop)
			pthread_cond_wait(&hc->ld.stage_cond, &hc->ld.stage_lock);
		struct hc_load *ld = hc->ld.load_head;
		if (ld) {
			hc->ld.load_head = ld->next;
			if (!hc->ld.load_head)
				hc->ld.load_tail = NULL;
		}
		int stop = hc->ld.loader_stop;
		pthread_mutex_unlock(&hc->ld.stage_lock);
		if (!ld)
			break;
		uint32_t layer = load_layer(hc, ld);
		if (stop)
			hc_load_fail(&hc->ld.loads[layer], -ECANCELED, "layer %s: the host cache is closing",
				     hc_layer_name(hc, layer));
		run_load(hc, layer);   /* cancelled loads only finish */
	}
	return NULL;
}

uint64_t hc_staging_plan(struct hcache *hc)
{
	uint64_t max_span = 0;
	for (uint32_t l = 0; l < hc->n_layers; l++)
		max_span = WSP_MAX(max_span, io_span(hc->m->layers[l].stored_bytes));
	/* A slot holds the largest chunk wherever it starts within a page. */
	uint64_t chunk_need = wspi_align_up(hc->max_chunk_stored, WSP_ALIGN_DIRECT) +
			      2 * WSP_ALIGN_DIRECT;
	uint64_t want = hc->cfg.staging_bytes;
	if (!want) {
		want = WSP_MIN(WSP_MAX(2 * max_span, HC_STAGING_MIN), HC_STAGING_MAX);
		/* Within a total budget staging takes at most an eighth of it:
		 * reads then pipeline in smaller slots, the cache keeps the rest. */
		if (hc->cfg.budget_total && hc->cfg.budget_bytes)
			want = WSP_MIN(want, hc->cfg.budget_bytes / 8);
	}
	/* A small arena: smaller slots, at least two. */
	hc->ld.slot_bytes = WSP_MAX(chunk_need, wspi_align_down(WSP_MIN(HC_SLOT_MIN, want / 2),
							    WSP_ALIGN_DIRECT));
	uint64_t n = WSP_MAX(want / hc->ld.slot_bytes, 2);
	if (n > 4096)
		n = 4096;
	hc->ld.n_slots = (unsigned)n;
	hc->ld.staging_bytes = n * hc->ld.slot_bytes;
	return hc->ld.staging_bytes;
}

/* A slice's completion (the decode pool calls it through s->job_done): the
 * last job frees its staging slot, and each gives back its share of the
 * layer's load, whose end is posted to the front end's inbox. */
static void job_done(struct hc_slice *s)
{
	struct hcache *hc = s->hc;
	uint32_t layer = s->layer;
	if (atomic_fetch_sub(&s->jobs_left, 1) == 1)
		release_slot(hc, s->slot);   /* s may be reused now */
	load_put(hc, layer, 1);
}

int hc_loader_init(struct hcache *hc, struct wspi_err *err)
{
	pthread_mutex_init(&hc->ld.stage_lock, NULL);
	pthread_cond_init(&hc->ld.stage_cond, NULL);
	pthread_mutex_init(&hc->ld.rd_lock, NULL);
	hc->ld.loads = calloc(hc->n_layers ? hc->n_layers : 1, sizeof(*hc->ld.loads));
	if (!hc->ld.loads)
		return WSP_ERR(err, -ENOMEM, "host cache: out of memory");
	for (uint32_t l = 0; l < hc->n_layers; l++)
		wspi_err_init(&hc->ld.loads[l].err);
	return 0;
}

/* The shard files' paths, for the engine and for messages. */
static int make_paths(struct hcache *hc, struct wspi_err *err)
{
	uint32_t n = hc->m->hdr->n_shards;
	hc->ld.paths = calloc(n ? n : 1, sizeof(*hc->ld.paths));
	if (!hc->ld.paths)
		return WSP_ERR(err, -ENOMEM, "host cache: out of memory");
	for (uint32_t i = 0; i < n; i++) {
		char buf[4096];
		pack_shard_path(hc->pk, i, buf, sizeof(buf));
		if (!(hc->ld.paths[i] = strdup(buf)))
			return WSP_ERR(err, -ENOMEM, "host cache: out of memory");
	}
	return 0;
}

int hc_loader_start(struct hcache *hc, struct wspi_err *err)
{
	WSP_TRY(make_paths(hc, err));
	if (!hc->ld.staging_bytes)
		hc_staging_plan(hc);
	unsigned n = hc->ld.n_slots;
	void *p = mmap(NULL, hc->ld.staging_bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		char sz[32];
		return WSP_ERR(err, -e, "host cache: mapping %s of staging failed: %s",
			       wsp_format_size(hc->ld.staging_bytes, sz, sizeof(sz)), strerror(e));
	}
	hc->ld.staging = p;
	hc->ld.slices = calloc(n, sizeof(*hc->ld.slices));
	hc->ld.free_slots = calloc(n, sizeof(*hc->ld.free_slots));
	if (!hc->ld.slices || !hc->ld.free_slots)
		return WSP_ERR(err, -ENOMEM, "host cache: out of memory for staging slots");
	for (unsigned i = 0; i < n; i++) {
		hc->ld.slices[i].hc = hc;
		hc->ld.slices[i].slot = i;
		hc->ld.slices[i].job_done = job_done;
		wspi_err_init(&hc->ld.slices[i].io_err);
		hc->ld.free_slots[hc->ld.n_free_slots++] = (unsigned)(n - 1 - i);
	}

	struct io_config ioc = hc->cfg.io;
	if (!ioc.notice) {
		ioc.notice = hc->cfg.notice;
		ioc.notice_ctx = hc->cfg.notice_ctx;
	}
	int rc = io_engine_open(&ioc, (const char *const *)hc->ld.paths, hc->m->hdr->n_shards,
				&hc->ld.io, err);
	if (rc < 0)
		return rc;
	/* Not fatal: the engine reads without a fixed buffer and says so. */
	(void)io_engine_register_buffer(hc->ld.io, hc->ld.staging, hc->ld.staging_bytes);

	rc = pthread_create(&hc->ld.loader, NULL, loader_main, hc);
	if (rc)
		return WSP_ERR(err, -rc, "host cache: cannot start the loader thread: %s",
			       strerror(rc));
	hc->ld.loader_started = 1;
	return 0;
}

/* Stop taking loads, cancel the queued ones, then wait for reads in flight
 * (their completions still feed the decode pool, which is stopped after). */
void hc_loader_stop(struct hcache *hc)
{
	if (hc->ld.loader_started) {
		pthread_mutex_lock(&hc->ld.stage_lock);
		hc->ld.loader_stop = 1;
		pthread_cond_broadcast(&hc->ld.stage_cond);
		pthread_mutex_unlock(&hc->ld.stage_lock);
		pthread_join(hc->ld.loader, NULL);
		hc->ld.loader_started = 0;
	}
	if (hc->ld.io)
		io_engine_close(hc->ld.io);
	hc->ld.io = NULL;
}

void hc_loader_fini(struct hcache *hc)
{
	if (hc->ld.slices)
		for (unsigned i = 0; i < hc->ld.n_slots; i++)
			wspi_err_destroy(&hc->ld.slices[i].io_err);
	free(hc->ld.slices);
	free(hc->ld.free_slots);
	if (hc->ld.staging)
		munmap(hc->ld.staging, hc->ld.staging_bytes);
	hc->ld.slices = NULL;
	hc->ld.free_slots = NULL;
	hc->ld.staging = NULL;
	if (hc->ld.paths)
		for (uint32_t i = 0; i < hc->m->hdr->n_shards; i++)
			free(hc->ld.paths[i]);
	free(hc->ld.paths);
	hc->ld.paths = NULL;
	if (hc->ld.loads)
		for (uint32_t l = 0; l < hc->n_layers; l++)
			wspi_err_destroy(&hc->ld.loads[l].err);
	free(hc->ld.loads);
	hc->ld.loads = NULL;
	pthread_mutex_destroy(&hc->ld.stage_lock);
	pthread_cond_destroy(&hc->ld.stage_cond);
	pthread_mutex_destroy(&hc->ld.rd_lock);
}
