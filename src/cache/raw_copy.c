/*
 * Raw copies of packed layers.  A layer the host tier keeps packed crosses
 * the link ~1.5x smaller, but the GPU decodes it at every fill, and the
 * decode takes the SMs from the user's kernels.  Where compute, not the
 * link, bounds a step, the raw bytes are the better thing to send.  So the
 * pager can ask for a raw copy of a packed entry, decoded here on the
 * caller's thread, and then have references handed out raw
 * (hcache_hand_raw).  The packed form stays: going back costs nothing.
 *
 * A copy is a page-locked buffer of its own, not arena pages: the arena is
 * sized (and pinned, from the first token on) for the pack alone, and the
 * copies are made later, only when asked, from what the budget has left
 * (hc->raw_budget).  It goes with its entry.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/hcache_int.h"
#include "common/util.h"

uint8_t *hc_raw_detach(struct hcache *hc, struct hc_entry *e, uint64_t *len)
{
	uint8_t *buf = e->raw == HC_RAW_READY ? e->raw_buf : NULL;
	*len = buf ? e->raw_len : 0;
	if (buf) {
		e->raw = HC_RAW_NONE;
		e->raw_buf = NULL;
		hc->raw_held -= e->raw_len;
	}
	return buf;
}

void hc_raw_free(struct hcache *hc, uint8_t *buf, uint64_t len)
{
	if (!buf)
		return;
	if (hc->cfg.unpin)
		hc->cfg.unpin(hc->cfg.pin_ctx, buf);
	munmap(buf, len);
}

void hc_raw_drop(struct hcache *hc, struct hc_entry *e)
{
	uint64_t len;
	uint8_t *buf = hc_raw_detach(hc, e, &len);
	hc_raw_free(hc, buf, len);
}

/* Bytes [at, at + len) of a page list into buf. */
static void gather(const struct hcache *hc, void *const *pages, uint64_t at, uint8_t *buf,
		   uint64_t len)
{
	while (len) {
		uint64_t pg = at / hc->pg.page_bytes, in = at % hc->pg.page_bytes;
		uint64_t n = WSP_MIN(len, hc->pg.page_bytes - in);
		memcpy(buf, (const uint8_t *)pages[pg] + in, n);
		buf += n;
		at += n;
		len -= n;
	}
}

/* The raw layout of layer from its packed pages into out, a fresh mapping
 * (its gaps between tensors read as zero already): each EXPRANS chunk
 * decoded (and so checked against its checksum), the others copied. */
static int unpack_pages(struct hcache *hc, uint32_t layer, void *const *packed, uint8_t *out,
			struct wspi_err *err)
{
	uint64_t j0 = hc->layer_job0[layer], j1 = hc->layer_job0[layer + 1];
	uint64_t cap = WSP_MAX(hc->max_chunk_raw, hc->max_chunk_stored);
	uint8_t *buf = malloc(cap ? cap : 1);
	struct chunk_decoder *dec = NULL;
	int rc = !buf ? -ENOMEM : chunk_decoder_create(hc->max_chunk_raw, &dec);
	if (rc < 0) {
		rc = WSP_ERR(err, rc, "raw copy of layer %s: %s", hc_layer_name(hc, layer),
			     wsp_strerror(rc));
		goto done;
	}
	for (uint64_t j = j0; j < j1 && rc == 0; j++) {
		const struct hc_job *job = &hc->jobs[j];
		const struct wspm_chunk *c = &hc->m->chunks[job->chunk];
		const struct wspm_tensor *T = &hc->m->tensors[job->tensor];
		if (!job->keep_stored) {   /* raw in the packed form too */
			gather(hc, packed, job->at, out + job->dst, c->raw_bytes);
			continue;
		}
		gather(hc, packed, job->at, buf, c->stored_bytes);
		struct wspi_span span = { out + job->dst, (size_t)c->raw_bytes };
		uint64_t t0 = wspi_now_ns();
		rc = chunk_decode(dec, c, T->dtype, buf, &span, 1, err);
		atomic_fetch_add(&hc->c_decode_ns, wspi_now_ns() - t0);
		if (rc == 0)
			atomic_fetch_add(&hc->c_bytes_decoded, c->raw_bytes);
		else
			wspi_err_prefix(err, "raw copy of layer %s, tensor %s, chunk %" PRIu32,
					hc_layer_name(hc, layer), wspm_str(hc->m, T->name_off),
					job->index_in_tensor);
	}
done:
	chunk_decoder_free(dec);
	free(buf);
	return rc;
}

/* A page-locked buffer of len bytes, cut into pages in ptr; NULL when it
 * cannot be had (no memory, or the pin hook refused it). */
static uint8_t *raw_buffer(struct hcache *hc, uint64_t len, void **ptr, uint32_t np)
{
	uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return NULL;
	struct wspi_err quiet;
	wspi_err_init(&quiet);
	int rc = hc->cfg.pin ? hc->cfg.pin(hc->cfg.pin_ctx, buf, len, &quiet) : 0;
	wspi_err_destroy(&quiet);
	if (rc < 0) {   /* pageable, it would cross the link slowly: none */
		munmap(buf, len);
		return NULL;
	}
	for (uint32_t k = 0; k < np; k++)
		ptr[k] = buf + (uint64_t)k * hc->pg.page_bytes;
	return buf;
}

int hcache_add_raw(struct hcache *hc, uint32_t layer, struct wspi_err *err)
{
	if (layer >= hc->n_layers)
		return WSP_ERR(err, WSP_ENOTFOUND, "host cache: no layer %" PRIu32, layer);
	uint64_t raw = hc->m->layers[layer].raw_bytes;
	uint64_t len = wspi_align_up(raw ? raw : 1, 4096);
	uint32_t np = (uint32_t)((len + hc->pg.page_bytes - 1) / hc->pg.page_bytes);
	struct hc_entry *e = &hc->entries[layer];
	pthread_mutex_lock(&hc->lock);
	int ok = e->state == HC_VALID && hc->layer_packed[layer] && e->raw == HC_RAW_NONE &&
		 hc->raw_held + len <= hc->raw_budget;
	if (ok) {
		e->refs++;   /* its packed pages stay while they are read */
		e->raw = HC_RAW_MAKING;
		hc->raw_held += len;
	}
	pthread_mutex_unlock(&hc->lock);
	if (!ok)
		return 0;
	void **ptr = calloc(np, sizeof(*ptr));
	uint8_t *buf = ptr ? raw_buffer(hc, len, ptr, np) : NULL;
	int rc = buf ? unpack_pages(hc, layer, e->page_ptr, buf, err) : 0;
	void **old = NULL;
	pthread_mutex_lock(&hc->lock);
	if (buf && rc == 0) {
		old = e->raw_ptr;
		e->raw_ptr = ptr;
		e->raw_buf = buf;
		e->raw_len = len;
		e->n_raw_pages = np;
		e->raw = HC_RAW_READY;
		atomic_fetch_add(&hc->c_raw_copies, 1);
	} else {
		e->raw = HC_RAW_NONE;
		hc->raw_held -= len;
		old = ptr;
	}
	if (--e->refs == 0)
		pthread_cond_broadcast(&hc->cond);
	pthread_mutex_unlock(&hc->lock);
	free(old);
	if (rc < 0 || !buf)
		hc_raw_free(hc, buf, len);
	return rc < 0 ? rc : !!buf;
}

void hcache_use_raw(struct hcache *hc, int on)
{
	pthread_mutex_lock(&hc->lock);
	hc->hand_raw = !!on;
	pthread_mutex_unlock(&hc->lock);
}

void hcache_hand_raw(struct hcache *hc, int on)
{
	pthread_mutex_lock(&hc->lock);
	hc->hand_raw = !!on;
	pthread_mutex_unlock(&hc->lock);
	/* Off: the copies go, each once no reference holds it (a copy is
	 * being read by a fill for a moment at most). */
	for (uint32_t l = 0; !on && l < hc->n_layers; l++) {
		struct hc_entry *e = &hc->entries[l];
		uint64_t len = 0;
		uint8_t *buf = NULL;
		pthread_mutex_lock(&hc->lock);
		while (e->raw == HC_RAW_READY && e->refs)
			pthread_cond_wait(&hc->cond, &hc->lock);
		buf = hc_raw_detach(hc, e, &len);
		pthread_mutex_unlock(&hc->lock);
		hc_raw_free(hc, buf, len);
	}
}

uint32_t hcache_raw_layers(struct hcache *hc)
{
	uint32_t n = 0;
	pthread_mutex_lock(&hc->lock);
	for (uint32_t l = 0; l < hc->n_layers; l++)
		n += hc->entries[l].raw == HC_RAW_READY;
	pthread_mutex_unlock(&hc->lock);
	return n;
}

uint64_t hcache_raw_room(const struct hcache *hc)
{
	return hc->raw_budget;   /* set at create, read-only after */
}
