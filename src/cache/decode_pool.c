/*
 * The decode pool: workers, each with its own chunk_decoder, take the chunks
 * of slices whose reads have completed and decode each straight into the
 * entry's pages (split at page boundaries).  The last chunk of a slice frees
 * its staging slot; the last chunk of a layer finishes the load.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hcache_int.h"
#include "common/util.h"

struct hc_worker {
	struct hcache *hc;
	unsigned index;
	struct chunk_decoder *dec;
	struct wspi_span *spans;
	unsigned max_spans;
	uint8_t *check;            /* a kept-stored chunk decoded here, to be checked */
	struct wspi_err err;
};

/* Copy len bytes to offset `at` of the entry's pages. */
static void to_pages(struct hcache *hc, struct hc_entry *e, uint64_t at, const uint8_t *src,
		     uint64_t len)
{
	while (len) {
		uint64_t pg = at / hc->pg.page_bytes, in = at % hc->pg.page_bytes;
		uint64_t n = WSP_MIN(len, hc->pg.page_bytes - in);
		memcpy((uint8_t *)e->page_ptr[pg] + in, src, n);
		at += n;
		src += n;
		len -= n;
	}
}

void hc_pool_push(struct hcache *hc, struct hc_slice *s)
{
	pthread_mutex_lock(&hc->dp.pool_lock);
	s->next = NULL;
	if (hc->dp.dq_tail)
		hc->dp.dq_tail->next = s;
	else
		hc->dp.dq_head = s;
	hc->dp.dq_tail = s;
	pthread_cond_broadcast(&hc->dp.pool_cond);
	pthread_mutex_unlock(&hc->dp.pool_lock);
}

static void run_job(struct hc_worker *w, struct hc_slice *s, uint64_t j)
{
	struct hcache *hc = w->hc;
	struct hc_entry *e = &hc->entries[s->layer];
	if (hc_load_failed(s->load))
		return;   /* the layer already failed: its pages are dropped */
	const struct hc_job *job = &hc->jobs[s->job0 + j];
	const struct wspm_chunk *c = &hc->m->chunks[job->chunk];
	const struct wspm_tensor *T = &hc->m->tensors[job->tensor];
	const uint8_t *stored = hc->ld.staging + (uint64_t)s->slot * hc->ld.slot_bytes +
				(c->offset - s->file_off);
	unsigned n = 0;
	uint64_t d = job->at, left = c->raw_bytes;
	uint64_t t0 = wspi_now_ns();
	int rc = 1;
	wspi_err_clear(&w->err);
	if (job->keep_stored) {
		/* The pages keep the stream for the GPU.  Its stored bytes are
		 * checked here when the pack records their check; else the
		 * chunk is decoded, only to check the raw bytes' checksum. */
		rc = chunk_check_stored(c, stored, &w->err);
		w->spans[n++] = (struct wspi_span){ w->check, (size_t)c->raw_bytes };
		left = 0;
	}
	while (left && n < w->max_spans) {
		uint64_t pg = d / hc->pg.page_bytes, in = d % hc->pg.page_bytes;
		uint64_t len = WSP_MIN(left, hc->pg.page_bytes - in);
		w->spans[n++] = (struct wspi_span){ (uint8_t *)e->page_ptr[pg] + in, (size_t)len };
		d += len;
		left -= len;
	}
	int decoded = rc > 0;
	if (decoded)
		rc = chunk_decode(w->dec, c, T->dtype, stored, w->spans, n, &w->err);
	uint64_t t1 = wspi_now_ns();
	atomic_fetch_add(&hc->c_decode_ns, t1 - t0);
	hc_trace(hc, WSP_STAGE_DECODE, s->layer, t0, t1, c->raw_bytes, (int)w->index);
	if (rc >= 0) {
		if (job->keep_stored)
			to_pages(hc, e, job->at, stored, c->stored_bytes);
		if (decoded)
			atomic_fetch_add(&hc->c_bytes_decoded, c->raw_bytes);
		return;
	}
	char msg[WSP_ERRMSG_MAX];
	wspi_err_copy(&w->err, msg, sizeof(msg));
	/* e->provided stays set for the whole load that copies from it */
	hc_load_fail(s->load, rc, "%s%s: layer %s, tensor %s, chunk %" PRIu32 " (offset %"
		     PRIu64 "): %s", e->provided ? "bytes handed in (wsp_provide) for " : "",
		     hc->ld.paths[hc->m->layers[s->layer].shard], hc_layer_name(hc, s->layer),
		     wspm_str(hc->m, T->name_off), job->index_in_tensor, c->offset,
		     msg[0] ? msg : wsp_strerror(rc));
}

static void *worker_main(void *arg)
{
	struct hc_worker *w = arg;
	struct hcache *hc = w->hc;
	for (;;) {
		pthread_mutex_lock(&hc->dp.pool_lock);
		while (!hc->dp.dq_head && !hc->dp.pool_stop)
			pthread_cond_wait(&hc->dp.pool_cond, &hc->dp.pool_lock);
		struct hc_slice *s = hc->dp.dq_head;
		uint64_t j = 0;
		if (s) {
			j = s->next_job++;
			if (s->next_job == s->n_jobs) {
				hc->dp.dq_head = s->next;
				if (!hc->dp.dq_head)
					hc->dp.dq_tail = NULL;
			}
		}
		pthread_mutex_unlock(&hc->dp.pool_lock);
		if (!s)
			break;   /* stopping and the queue is drained */
		run_job(w, s, j);
		s->job_done(s);   /* its completion; s may be reused after this */
	}
	return NULL;
}

static struct hc_worker *workers_of(struct hcache *hc)
{
	return hc->dp.wstate;
}

void hc_pool_init(struct hcache *hc)
{
	pthread_mutex_init(&hc->dp.pool_lock, NULL);
	pthread_cond_init(&hc->dp.pool_cond, NULL);
}

void hc_pool_fini(struct hcache *hc)
{
	pthread_mutex_destroy(&hc->dp.pool_lock);
	pthread_cond_destroy(&hc->dp.pool_cond);
}

int hc_pool_start(struct hcache *hc, struct wspi_err *err)
{
	unsigned n = hc->cfg.decode_threads ? hc->cfg.decode_threads : wspi_cpu_count();
	if (n > 1024)
		n = 1024;
	hc->dp.workers = calloc(n, sizeof(pthread_t));
	hc->dp.wstate = calloc(n, sizeof(struct hc_worker));
	if (!hc->dp.workers || !hc->dp.wstate)
		return WSP_ERR(err, -ENOMEM, "host cache: out of memory for %u decode workers", n);
	struct hc_worker *ws = workers_of(hc);
	unsigned max_spans = (unsigned)(hc->max_chunk_raw / hc->pg.page_bytes + 2);
	for (unsigned i = 0; i < n; i++) {
		struct hc_worker *w = &ws[i];
		w->hc = hc;
		w->index = i;
		w->max_spans = max_spans;
		wspi_err_init(&w->err);
		hc->dp.n_workers = i + 1;   /* states to free */
		w->spans = calloc(max_spans, sizeof(*w->spans));
		if (hc->cfg.keep_packed)
			w->check = malloc(hc->max_chunk_raw ? hc->max_chunk_raw : 1);
		if (!w->spans || (hc->cfg.keep_packed && !w->check))
			return WSP_ERR(err, -ENOMEM, "host cache: out of memory for decode workers");
		int rc = chunk_decoder_create(hc->max_chunk_raw, &w->dec);
		if (rc < 0)
			return WSP_ERR(err, rc, "host cache: cannot create a chunk decoder: %s",
				       wsp_strerror(rc));
	}
	for (unsigned i = 0; i < n; i++) {
		int rc = pthread_create(&hc->dp.workers[i], NULL, worker_main, &ws[i]);
		if (rc)
			return WSP_ERR(err, -rc, "host cache: cannot start decode worker %u: %s", i,
				       strerror(rc));
		hc->dp.n_workers_started++;
	}
	return 0;
}

/* Workers finish the queued slices before they exit, so that every load in
 * flight completes (and frees its pages) before the arena goes away. */
void hc_pool_stop(struct hcache *hc)
{
	pthread_mutex_lock(&hc->dp.pool_lock);
	hc->dp.pool_stop = 1;
	pthread_cond_broadcast(&hc->dp.pool_cond);
	pthread_mutex_unlock(&hc->dp.pool_lock);
	for (unsigned i = 0; i < hc->dp.n_workers_started; i++)
		pthread_join(hc->dp.workers[i], NULL);
	hc->dp.n_workers_started = 0;
	struct hc_worker *ws = workers_of(hc);
	for (unsigned i = 0; ws && i < hc->dp.n_workers; i++) {
		chunk_decoder_free(ws[i].dec);
		free(ws[i].spans);
		free(ws[i].check);
		wspi_err_destroy(&ws[i].err);
	}
	free(hc->dp.workers);
	free(hc->dp.wstate);
	hc->dp.workers = NULL;
	hc->dp.wstate = NULL;
	hc->dp.n_workers = 0;
}
