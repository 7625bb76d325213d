/* Updated layers (see dirty.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "writeback/dirty.h"
#include "writeback/fill.h"
#include "writeback/spill.h"

/* dirty_stream's reads from the overflow file: at most this much at once. */
#define DIRTY_STREAM_PIECE (4u << 20)

/* A dirty layer's record; its bytes are the store's while it is the
 * layer's current one, else (superseded, still read by a copy) its own. */
struct dbuf {
	void *page[1];             /* what an hcache_ref points at: identifies the buffer */
	uint64_t *checksums;       /* per tensor of the layer */
	uint32_t layer;
	unsigned refs;             /* copies reading it (the store holds it as long) */
	struct spill_mem superseded;   /* its memory once the layer has a newer one */
	struct dbuf *next;         /* superseded buffers still read by a copy */
};

struct dirty {
	struct wsp_pack_s *pk;
	pthread_mutex_t lock;
	struct dbuf **cur;         /* per layer, NULL while clean */
	struct dbuf *old;
	const char **names;        /* per layer, for the store's messages */
	struct spill *sp;          /* the current buffers, in memory or in the file */
	uint64_t layers, bytes;    /* updated so far */
};

/* A layer's buffer size: its raw bytes in whole pages (its place in the
 * file too). */
static uint64_t layer_cap(const struct dirty *dt, uint32_t layer)
{
	uint64_t raw = dt->pk->layers[layer].raw_bytes;
	return wspi_align_up(raw ? raw : 1, 4096);
}

int dirty_create(struct dev *d, struct wsp_pack_s *pk, const struct dirty_config *cfg,
		 struct dirty **out, struct wspi_err *err)
{
	struct dirty *dt = calloc(1, sizeof(*dt));
	uint32_t n = pk->m.hdr->n_layers;
	*out = NULL;
	if (!dt || !(dt->cur = calloc(n ? n : 1, sizeof(*dt->cur))) ||
	    !(dt->names = calloc(n ? n : 1, sizeof(*dt->names)))) {
		if (dt)
			free(dt->cur);
		free(dt);
		return WSP_ERR(err, -ENOMEM, "updated layers: out of memory");
	}
	for (uint32_t l = 0; l < n; l++)
		dt->names[l] = pk->layers[l].name;
	struct spill_config sc = {
		.budget = cfg->budget, .dir = cfg->dir, .pack_dir = pk->dir,
		.what = "updated layers", .plural = 1, .names = dt->names,
		.log = cfg->log, .log_ctx = cfg->log_ctx,
	};
	int rc = spill_create(d, n, &sc, &dt->sp, err);
	if (rc < 0) {
		free(dt->names);
		free(dt->cur);
		free(dt);
		return rc;
	}
	/* Each layer its own aligned place: a sparse file as large as the
	 * model at most, and no allocator for it. */
	dt->pk = pk;
	uint64_t off = 0;
	for (uint32_t l = 0; l < n; l++) {
		spill_place(dt->sp, l, off, layer_cap(dt, l));
		off += layer_cap(dt, l);
	}
	pthread_mutex_init(&dt->lock, NULL);
	*out = dt;
	return 0;
}

static void dbuf_free(struct dirty *dt, struct dbuf *b)
{
	if (!b)
		return;
	spill_free_superseded(dt->sp, &b->superseded);
	free(b->checksums);
	free(b);
}

static struct dbuf *dbuf_record(struct dirty *dt, uint32_t layer, struct wspi_err *err)
{
	const struct wsp_layer *L = &dt->pk->layers[layer];
	struct dbuf *b = calloc(1, sizeof(*b));
	if (!b || !(b->checksums = calloc(L->n_tensors ? L->n_tensors : 1, sizeof(*b->checksums)))) {
		free(b);
		WSP_ERR(err, -ENOMEM, "updated layers: out of memory");
		return NULL;
	}
	b->layer = layer;
	return b;
}

/* The layer's bytes as the pack has them, into dst (a clean layer). */
static int load_clean(struct dirty *dt, uint32_t layer, void *dst, struct wspi_err *err)
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

int dirty_update(struct dirty *dt, uint32_t layer, const void *const *values, int from_f32,
		 struct wspi_err *err)
{
	const struct wsp_layer *L = &dt->pk->layers[layer];
	const struct wspm_tensor *mt = &dt->pk->m.tensors[dt->pk->m.layers[layer].first_tensor];
	int partial = 0, rc = 0;
	for (uint32_t i = 0; i < L->n_tensors; i++)
		partial |= values[i] == NULL;

	pthread_mutex_lock(&dt->lock);
	struct dbuf *b = dt->cur[layer], *nb = b;
	void *mem = NULL;
	if (b && (partial || spill_resident(dt->sp, layer)))   /* the kept tensors, or in place */
		rc = spill_get(dt->sp, layer, &mem, err);
	if (rc == 0 && (!b || b->refs || !mem)) {
		/* A copy may be reading the current one, or it is in the
		 * file: a new buffer (the old one stays with its readers). */
		struct spill_mem old = { 0 };
		void *kept = mem;
		nb = dbuf_record(dt, layer, err);
		rc = nb ? spill_new(dt->sp, layer, L->raw_bytes, &old, &mem, err) : -ENOMEM;
		if (rc == 0 && partial) {
			if (b)
				memcpy(mem, kept, L->raw_bytes);
			else
				rc = load_clean(dt, layer, mem, err);
		}
		if (rc == 0 && b && b->refs) {
			b->superseded = old;
			b->next = dt->old;
			dt->old = b;
		} else if (rc == 0) {
			spill_free_superseded(dt->sp, &old);
			dbuf_free(dt, b);
		} else if (!b && mem) {
			spill_drop(dt->sp, layer);   /* still clean */
		}
		if (rc == 0 && !b) {
			dt->layers++;
			dt->bytes += L->raw_bytes;
		}
	}
	if (rc == 0) {
		wb_fill((uint8_t *)mem, mt, L->n_tensors, values, from_f32, nb->checksums);
		nb->page[0] = mem;
		spill_changed(dt->sp, layer);   /* a later spill writes it */
		dt->cur[layer] = nb;
	} else if (nb != b) {
		dbuf_free(dt, nb);
	}
	pthread_mutex_unlock(&dt->lock);
	return rc;
}

int dirty_get(struct dirty *dt, uint32_t layer, struct hcache_ref *ref, struct wspi_err *err)
{
	pthread_mutex_lock(&dt->lock);
	struct dbuf *b = dt->cur[layer];
	void *mem = NULL;
	int rc = b ? spill_get(dt->sp, layer, &mem, err) : 0;
	if (b && rc == 0) {
		b->page[0] = mem;
		b->refs++;
		spill_hold(dt->sp, layer);
		ref->layer = layer;
		ref->n_pages = 1;
		ref->pages = b->page;
		ref->page_bytes = layer_cap(dt, layer);
		ref->raw_bytes = dt->pk->layers[layer].raw_bytes;
		ref->bytes = ref->raw_bytes;
		ref->packed = 0;
		rc = 1;
	}
	pthread_mutex_unlock(&dt->lock);
	return rc;
}

static struct dbuf *owner(const struct hcache_ref *ref)
{
	/* page[] is in the buffer record: the record around it. */
	return (struct dbuf *)((char *)ref->pages - offsetof(struct dbuf, page));
}

/* The buffer behind ref if it is one of ours (under the lock). */
static struct dbuf *find(struct dirty *dt, const struct hcache_ref *ref, struct dbuf ***link)
{
	if (ref->layer >= dt->pk->m.hdr->n_layers)
		return NULL;
	struct dbuf *b = dt->cur[ref->layer];
	if (b && ref->pages == b->page) {
		*link = NULL;
		return b;
	}
	for (struct dbuf **p = &dt->old; *p; p = &(*p)->next)
		if (ref->pages == (*p)->page) {
			*link = p;
			return *p;
		}
	return NULL;
}

/* Drop a reference to b, one of ours (under the lock; link: where the
 * superseded list holds it, NULL for a current one): a superseded buffer
 * goes with its last one. */
static void unref(struct dirty *dt, struct dbuf *b, struct dbuf **link)
{
	b->refs--;
	if (!link) {
		spill_unhold(dt->sp, b->layer);
	} else if (b->refs == 0) {
		*link = b->next;
		dbuf_free(dt, b);
	}
}

int dirty_put(struct dirty *dt, const struct hcache_ref *ref)
{
	struct dbuf **link;
	pthread_mutex_lock(&dt->lock);
	struct dbuf *b = find(dt, ref, &link);
	if (b)
		unref(dt, b, link);
	pthread_mutex_unlock(&dt->lock);
	return b != NULL;
}

int dirty_has(struct dirty *dt, uint32_t layer)
{
	pthread_mutex_lock(&dt->lock);
	int has = layer < dt->pk->m.hdr->n_layers && dt->cur[layer] != NULL;
	pthread_mutex_unlock(&dt->lock);
	return has;
}

int dirty_owns(struct dirty *dt, const struct hcache_ref *ref)
{
	struct dbuf **link;
	pthread_mutex_lock(&dt->lock);
	int ours = find(dt, ref, &link) != NULL;
	pthread_mutex_unlock(&dt->lock);
	return ours;
}

uint64_t dirty_checksum(const struct hcache_ref *ref, uint32_t k)
{
	return owner(ref)->checksums[k];
}

/* Hand a spilled layer's bytes to `piece` straight from the overflow file,
 * a bounded piece at a time, each tensor's checksum accumulated and checked
 * at the end: no memory of the layer's size, no room to make. */
static int stream_from_file(struct dirty *dt, struct dbuf *b, pack_piece_fn piece, void *pctx,
			    struct wspi_err *err)
{
	const struct wsp_layer *L = &dt->pk->layers[b->layer];
	const struct wspm_tensor *mt = &dt->pk->m.tensors[dt->pk->m.layers[b->layer].first_tensor];
	uint64_t bytes = layer_cap(dt, b->layer);
	uint64_t step = WSP_MIN(bytes, (uint64_t)DIRTY_STREAM_PIECE);
	void *buf = wspi_map_bytes(step);
	struct wspi_ck *ck = calloc(L->n_tensors ? L->n_tensors : 1, sizeof(*ck));
	int rc = buf && ck ? 0 : WSP_ERR(err, -ENOMEM, "updated layers: out of memory to read "
					 "layer %s from the overflow file", L->name);
	for (uint64_t at = 0; rc == 0 && at < bytes; at += step) {
		uint64_t len = WSP_MIN(step, bytes - at);
		pthread_mutex_lock(&dt->lock);   /* the file's I/O runs under the lock */
		rc = spill_read_file(dt->sp, b->layer, at, buf, len, err);
		pthread_mutex_unlock(&dt->lock);
		for (uint32_t k = 0; rc == 0 && k < L->n_tensors; k++) {
			uint64_t lo = WSP_MAX(at, mt[k].layer_offset);
			uint64_t hi = WSP_MIN(at + len, mt[k].layer_offset + mt[k].raw_bytes);
			if (lo >= hi)
				continue;
			wspi_ck_add(&ck[k], (const char *)buf + (lo - at), hi - lo);
			rc = piece(pctx, &mt[k], lo - mt[k].layer_offset, (const char *)buf + (lo - at),
				   hi - lo);
		}
	}
	for (uint32_t k = 0; rc == 0 && k < L->n_tensors; k++)
		if (wspi_ck_end(&ck[k]) != b->checksums[k])
			rc = WSP_ERR(err, WSP_ECHECKSUM, "overflow file: tensor %s read back with a "
				     "wrong checksum (the disk returned other bytes than were "
				     "written)", L->tensors[k].name);
	wspi_unmap_bytes(buf, step);
	free(ck);
	return rc;
}

/* The superseded list's link to b, or NULL when b is its layer's current
 * one (under the lock). */
static struct dbuf **old_link(struct dirty *dt, struct dbuf *b)
{
	for (struct dbuf **p = &dt->old; *p; p = &(*p)->next)
		if (*p == b)
			return p;
	return NULL;
}

int dirty_stream(struct dirty *dt, uint32_t layer, pack_piece_fn piece, void *pctx,
		 struct wspi_err *err)
{
	void *mem = NULL;
	int rc = 0;
	pthread_mutex_lock(&dt->lock);
	struct dbuf *b = dt->cur[layer];
	int from_file = b && !spill_resident(dt->sp, layer);
	if (b) {
		if (!from_file)
			spill_get(dt->sp, layer, &mem, err);   /* in memory: cannot fail */
		b->refs++;   /* neither freed nor spilled meanwhile */
		spill_hold(dt->sp, layer);
		spill_keep_place(dt->sp, layer, from_file);   /* its place in the file not rewritten */
	}
	pthread_mutex_unlock(&dt->lock);
	if (!b)
		return 0;
	if (from_file) {
		rc = stream_from_file(dt, b, piece, pctx, err);
	} else {
		const struct wspm_layer *l = &dt->pk->m.layers[layer];
		const struct wspm_tensor *mt = &dt->pk->m.tensors[l->first_tensor];
		for (uint32_t k = 0; k < l->n_tensors && rc == 0; k++)
			rc = piece(pctx, &mt[k], 0, (const char *)mem + mt[k].layer_offset,
				   mt[k].raw_bytes);
	}
	pthread_mutex_lock(&dt->lock);
	spill_keep_place(dt->sp, layer, 0);
	unref(dt, b, old_link(dt, b));
	pthread_mutex_unlock(&dt->lock);
	return rc < 0 ? rc : 1;
}

void dirty_counters(struct dirty *dt, struct dirty_counters *out)
{
	struct spill_counters c;
	pthread_mutex_lock(&dt->lock);
	spill_counters(dt->sp, &c);
	*out = (struct dirty_counters){ .layers = dt->layers, .bytes = dt->bytes,
					.resident = c.resident, .spilled = c.spilled,
					.read_back = c.read_back };
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
	spill_destroy(dt->sp);
	free(dt->cur);
	free(dt->names);
	pthread_mutex_destroy(&dt->lock);
	free(dt);
}
