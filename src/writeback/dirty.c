/* Updated layers (see dirty.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "writeback/dirty.h"

struct dbuf {
	void *mem;
	void *page[1];             /* what an hcache_ref points at: identifies the buffer */
	uint64_t bytes;            /* allocated (raw_bytes rounded to 4096) */
	uint64_t *checksums;       /* per tensor of the layer */
	uint32_t layer;
	unsigned refs;             /* copies reading it */
	int pinned, current;
	struct dbuf *next;         /* superseded buffers still read by a copy */
};

struct dirty {
	struct dev *dev;
	struct wsp_pack_s *pk;
	pthread_mutex_t lock;
	struct dbuf **cur;         /* per layer, NULL while clean */
	struct dbuf *old;
	uint64_t n_dirty, dirty_bytes;
};

int dirty_create(struct dev *d, struct wsp_pack_s *pk, struct dirty **out, struct wsp_err *err)
{
	struct dirty *dt = calloc(1, sizeof(*dt));
	uint32_t n = pk->m.hdr->n_layers;
	if (!dt || !(dt->cur = calloc(n ? n : 1, sizeof(*dt->cur)))) {
		free(dt);
		return WSP_ERR(err, -ENOMEM, "updated layers: out of memory");
	}
	dt->dev = d;
	dt->pk = pk;
	pthread_mutex_init(&dt->lock, NULL);
	*out = dt;
	return 0;
}

static void dbuf_free(struct dirty *dt, struct dbuf *b)
{
	if (!b)
		return;
	if (b->pinned)
		dt->dev->ops->unpin(dt->dev, b->mem);
	free(b->mem);
	free(b->checksums);
	free(b);
}

static int dbuf_new(struct dirty *dt, uint32_t layer, struct dbuf **out, struct wsp_err *err)
{
	const struct wsp_layer *L = &dt->pk->layers[layer];
	struct dbuf *b = calloc(1, sizeof(*b));
	int rc;
	if (!b)
		return WSP_ERR(err, -ENOMEM, "updated layers: out of memory");
	b->layer = layer;
	b->current = 1;
	b->bytes = wsp_align_up(L->raw_bytes ? L->raw_bytes : 1, 4096);
	b->mem = aligned_alloc(4096, b->bytes);
	b->checksums = calloc(L->n_tensors ? L->n_tensors : 1, sizeof(*b->checksums));
	if (!b->mem || !b->checksums) {
		dbuf_free(dt, b);
		return WSP_ERR(err, -ENOMEM, "updated layers: out of memory for layer %s (%" PRIu64
			       " bytes)", L->name, L->raw_bytes);
	}
	memset(b->mem, 0, b->bytes);
	b->page[0] = b->mem;
	if (!dev_is_host(dt->dev)) {
		if ((rc = dt->dev->ops->pin(dt->dev, b->mem, b->bytes, err)) < 0) {
			dbuf_free(dt, b);
			return rc;
		}
		b->pinned = 1;
	}
	*out = b;
	return 0;
}

/* The layer's bytes as the pack has them, into dst (a clean layer). */
static int load_clean(struct dirty *dt, uint32_t layer, void *dst, struct wsp_err *err)
{
	struct chunk_decoder *dec = NULL;
	void *stored = malloc(dt->pk->max_layer_stored ? dt->pk->max_layer_stored : 1);
	int rc = stored ? chunk_decoder_create(dt->pk->max_chunk_raw ? dt->pk->max_chunk_raw : 1, &dec)
			: -ENOMEM;
	if (rc == 0)
		rc = pack_load_layer(dt->pk, layer, dec, stored, dst, err);
	else
		rc = WSP_ERR(err, rc, "updated layers: out of memory to read layer %u", layer);
	chunk_decoder_free(dec);
	free(stored);
	return rc;
}

int dirty_update(struct dirty *dt, uint32_t layer, const void *const *values,
		 struct wsp_err *err)
{
	const struct wsp_layer *L = &dt->pk->layers[layer];
	const struct wspm_tensor *mt = &dt->pk->m.tensors[dt->pk->m.layers[layer].first_tensor];
	int partial = 0, rc = 0;
	for (uint32_t i = 0; i < L->n_tensors; i++)
		partial |= values[i] == NULL;

	pthread_mutex_lock(&dt->lock);
	struct dbuf *b = dt->cur[layer], *nb = b;
	if (!b || b->refs) {   /* a copy may be reading the current one: a new buffer */
		rc = dbuf_new(dt, layer, &nb, err);
		if (rc == 0 && partial) {
			if (b)
				memcpy(nb->mem, b->mem, L->raw_bytes);
			else
				rc = load_clean(dt, layer, nb->mem, err);
		}
	}
	if (rc == 0) {
		for (uint32_t i = 0; i < L->n_tensors; i++) {
			uint8_t *dst = (uint8_t *)nb->mem + mt[i].layer_offset;
			if (values[i])
				memcpy(dst, values[i], mt[i].raw_bytes);
			nb->checksums[i] = wsp_checksum64(dst, mt[i].raw_bytes);
		}
		if (b != nb) {
			if (b) {
				b->current = 0;
				if (b->refs) {
					b->next = dt->old;
					dt->old = b;
				} else {
					dbuf_free(dt, b);
				}
			} else {
				dt->n_dirty++;
				dt->dirty_bytes += L->raw_bytes;
			}
			dt->cur[layer] = nb;
		}
	} else if (nb != b) {
		dbuf_free(dt, nb);
	}
	pthread_mutex_unlock(&dt->lock);
	return rc;
}

int dirty_get(struct dirty *dt, uint32_t layer, struct hcache_ref *ref)
{
	pthread_mutex_lock(&dt->lock);
	struct dbuf *b = dt->cur[layer];
	if (b) {
		b->refs++;
		ref->layer = layer;
		ref->n_pages = 1;
		ref->pages = b->page;
		ref->page_bytes = b->bytes;
		ref->raw_bytes = dt->pk->layers[layer].raw_bytes;
	}
	pthread_mutex_unlock(&dt->lock);
	return b != NULL;
}

static struct dbuf *owner(const struct hcache_ref *ref)
{
	/* page[] is the second member: the buffer record around it. */
	return (struct dbuf *)((char *)ref->pages - offsetof(struct dbuf, page));
}

int dirty_put(struct dirty *dt, const struct hcache_ref *ref)
{
	int ours = 0;
	pthread_mutex_lock(&dt->lock);
	if (ref->layer < dt->pk->m.hdr->n_layers) {
		struct dbuf *b = dt->cur[ref->layer];
		if (b && ref->pages == b->page) {
			ours = 1;
			b->refs--;
		}
		for (struct dbuf **p = &dt->old; !ours && *p; p = &(*p)->next)
			if (ref->pages == (*p)->page) {
				ours = 1;
				if (--(*p)->refs == 0) {
					struct dbuf *gone = *p;
					*p = gone->next;
					dbuf_free(dt, gone);
				}
				break;
			}
	}
	pthread_mutex_unlock(&dt->lock);
	return ours;
}

uint64_t dirty_checksum(const struct hcache_ref *ref, uint32_t k)
{
	return owner(ref)->checksums[k];
}

int dirty_copy(struct dirty *dt, uint32_t layer, void *dst)
{
	pthread_mutex_lock(&dt->lock);
	struct dbuf *b = dt->cur[layer];
	if (b)
		memcpy(dst, b->mem, dt->pk->layers[layer].raw_bytes);
	pthread_mutex_unlock(&dt->lock);
	return b != NULL;
}

void dirty_counters(struct dirty *dt, uint64_t *layers, uint64_t *bytes)
{
	pthread_mutex_lock(&dt->lock);
	*layers = dt->n_dirty;
	*bytes = dt->dirty_bytes;
	pthread_mutex_unlock(&dt->lock);
}

void dirty_destroy(struct dirty *dt)
{
	if (!dt)
		return;
	for (uint32_t l = 0; l < dt->pk->m.hdr->n_layers; l++)
		dbuf_free(dt, dt->cur[l]);
	while (dt->old) {
		struct dbuf *b = dt->old;
		dt->old = b->next;
		dbuf_free(dt, b);
	}
	free(dt->cur);
	pthread_mutex_destroy(&dt->lock);
	free(dt);
}
