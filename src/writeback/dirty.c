/* Updated layers (see dirty.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "predict/predict.h"
#include "writeback/dirty.h"
#include "writeback/fill.h"
#include "writeback/overflow.h"

/* dirty_stream's reads from the overflow file: at most this much at once. */
#define DIRTY_STREAM_PIECE (4u << 20)

struct dbuf {
	void *mem;
	void *page[1];             /* what an hcache_ref points at: identifies the buffer */
	uint64_t bytes;            /* allocated (raw_bytes rounded to 4096) */
	uint64_t *checksums;       /* per tensor of the layer */
	uint32_t layer;
	unsigned refs;             /* copies reading it */
	int pinned, current;
	int spilled;               /* mem is NULL; the bytes are in the overflow file */
	int in_file;               /* the file holds these very bytes (read back, unchanged) */
	uint64_t used;             /* clock of the last use: the spill order */
	struct dbuf *next;         /* superseded buffers still read by a copy */
};

struct dirty {
	struct dev *dev;
	struct wsp_pack_s *pk;
	struct dirty_config cfg;
	char *dir;                 /* cfg.dir's copy */
	pthread_mutex_t lock;
	struct dbuf **cur;         /* per layer, NULL while clean */
	struct dbuf *old;
	uint64_t *file_off;        /* per layer: its place in the overflow file */
	struct overflow *of;       /* made at the first spill */
	uint32_t streaming;        /* the layer dirty_stream reads from the file, or
	                              UINT32_MAX: no spill may overwrite its place */
	int over_said;             /* the notice of a failed spill is given once */
	uint64_t clock;
	struct dirty_counters c;
};

int dirty_create(struct dev *d, struct wsp_pack_s *pk, const struct dirty_config *cfg,
		 struct dirty **out, struct wspi_err *err)
{
	struct dirty *dt = calloc(1, sizeof(*dt));
	uint32_t n = pk->m.hdr->n_layers;
	if (!dt || !(dt->cur = calloc(n ? n : 1, sizeof(*dt->cur))) ||
	    !(dt->file_off = calloc(n ? n : 1, sizeof(*dt->file_off))) ||
	    (cfg->dir && !(dt->dir = strdup(cfg->dir)))) {
		if (dt) {
			free(dt->cur);
			free(dt->file_off);
		}
		free(dt);
		return WSP_ERR(err, -ENOMEM, "updated layers: out of memory");
	}
	dt->dev = d;
	dt->pk = pk;
	dt->cfg = *cfg;
	dt->cfg.dir = dt->dir;
	dt->streaming = UINT32_MAX;
	/* Each layer its own aligned place: a sparse file as large as the
	 * model at most, and no allocator for it. */
	for (uint32_t l = 1; l < n; l++)
		dt->file_off[l] = dt->file_off[l - 1] +
				  wspi_align_up(pk->layers[l - 1].raw_bytes ? pk->layers[l - 1].raw_bytes : 1, 4096);
	pthread_mutex_init(&dt->lock, NULL);
	*out = dt;
	return 0;
}

static void dbuf_release_mem(struct dirty *dt, struct dbuf *b)
{
	if (b->pinned)
		dt->dev->ops->unpin(dt->dev, b->mem);
	if (b->mem)
		dt->c.resident -= b->bytes;
	wspi_unmap_bytes(b->mem, b->bytes);
	b->mem = b->page[0] = NULL;
	b->pinned = 0;
}

static void dbuf_free(struct dirty *dt, struct dbuf *b)
{
	if (!b)
		return;
	dbuf_release_mem(dt, b);
	free(b->checksums);
	free(b);
}

/* Memory (pinned where the device pins) for b's bytes. */
static int dbuf_alloc_mem(struct dirty *dt, struct dbuf *b, struct wspi_err *err)
{
	int rc;
	if (!(b->mem = wspi_map_bytes(b->bytes)))
		return WSP_ERR(err, -ENOMEM, "updated layers: out of memory for layer %s (%" PRIu64
			       " bytes)", dt->pk->layers[b->layer].name, b->bytes);
	b->page[0] = b->mem;
	dt->c.resident += b->bytes;
	if (!dev_is_host(dt->dev)) {
		if ((rc = dt->dev->ops->pin(dt->dev, b->mem, b->bytes, err)) < 0) {
			dbuf_release_mem(dt, b);
			return rc;
		}
		b->pinned = 1;
	}
	return 0;
}

static int dbuf_new(struct dirty *dt, uint32_t layer, struct dbuf **out, struct wspi_err *err)
{
	const struct wsp_layer *L = &dt->pk->layers[layer];
	struct dbuf *b = calloc(1, sizeof(*b));
	int rc;
	if (!b || !(b->checksums = calloc(L->n_tensors ? L->n_tensors : 1, sizeof(*b->checksums)))) {
		free(b);
		return WSP_ERR(err, -ENOMEM, "updated layers: out of memory");
	}
	b->layer = layer;
	b->current = 1;
	b->bytes = wspi_align_up(L->raw_bytes ? L->raw_bytes : 1, 4096);
	if ((rc = dbuf_alloc_mem(dt, b, err)) < 0) {
		dbuf_free(dt, b);
		return rc;
	}
	/* zeros: a new mapping */
	*out = b;
	return 0;
}

/* The overflow file, made at the first spill (where: overflow_open). */
static int open_overflow(struct dirty *dt, struct wspi_err *err)
{
	int rc = overflow_open(dt->cfg.dir, dt->pk->dir, "updated layers", &dt->of, err);
	if (rc == 0)
		wspi_notice(dt->cfg.log, dt->cfg.log_ctx, "updated layers beyond %" PRIu64 " MiB in "
			    "memory go to an unnamed overflow file in %s (%s)", dt->cfg.budget >> 20,
			    overflow_dir(dt->of), overflow_how(dt->of));
	return rc;
}

/* Write b to the overflow file and free its memory. */
static int spill(struct dirty *dt, struct dbuf *b, struct wspi_err *err)
{
	int rc = b->in_file || dt->of ? 0 : open_overflow(dt, err);
	if (rc == 0 && !b->in_file)
		rc = overflow_write(dt->of, dt->file_off[b->layer], b->mem, b->bytes, err);
	if (rc < 0) {
		wspi_err_prefix(err, "updated layers over their %" PRIu64 " MiB budget: layer %s "
			       "stays in memory", dt->cfg.budget >> 20, dt->pk->layers[b->layer].name);
		return rc;
	}
	if (!b->in_file)
		dt->c.spilled += b->bytes;
	dbuf_release_mem(dt, b);
	b->spilled = b->in_file = 1;
	return 0;
}

/* Spill least recently used layers until `need` more bytes fit the budget
 * (`keep` stays).  Over budget, and never an error: when every candidate is
 * being read (those copies end soon and the bound is met at the next call),
 * and when the overflow file cannot be written (a full disk: the layers
 * stay in memory, said once, rather than fail the update or acquire that
 * needed room; nothing is lost, and wsp_save still works). */
static void make_room(struct dirty *dt, uint32_t keep, uint64_t need)
{
	uint32_t n = dt->pk->m.hdr->n_layers;
	while (dt->c.resident + need > dt->cfg.budget) {
		struct evict_pick pick;   /* least recently used: the LRU policy's victim */
		evict_pick_init(&pick, WSP_POLICY_LRU);
		for (uint32_t l = 0; l < n; l++) {
			struct dbuf *b = dt->cur[l];
			if (b && l != keep && l != dt->streaming && b->mem && !b->refs)
				evict_pick_offer(&pick, (long)l, &(struct evict_cand){ l, b->used, 0 });
		}
		if (pick.best < 0)
			return;
		struct dbuf *v = dt->cur[pick.best];
		struct wspi_err err;
		wspi_err_init(&err);
		int rc = spill(dt, v, &err);
		if (rc < 0 && !dt->over_said) {
			dt->over_said = 1;
			wspi_notice(dt->cfg.log, dt->cfg.log_ctx, "%s; updated layers stay in memory "
				    "over their budget from now on while the overflow file cannot "
				    "take them", err.msg);
		}
		wspi_err_destroy(&err);
		if (rc < 0)
			return;
	}
}

/* Bring a spilled buffer back into memory, every tensor checked. */
static int read_back(struct dirty *dt, struct dbuf *b, struct wspi_err *err)
{
	const struct wsp_layer *L = &dt->pk->layers[b->layer];
	const struct wspm_tensor *mt = &dt->pk->m.tensors[dt->pk->m.layers[b->layer].first_tensor];
	make_room(dt, b->layer, b->bytes);
	int rc = dbuf_alloc_mem(dt, b, err);
	if (rc == 0)
		rc = overflow_read(dt->of, dt->file_off[b->layer], b->mem, b->bytes, err);
	for (uint32_t i = 0; rc == 0 && i < L->n_tensors; i++)
		if (wsp_checksum64((uint8_t *)b->mem + mt[i].layer_offset, mt[i].raw_bytes) !=
		    b->checksums[i])
			rc = WSP_ERR(err, WSP_ECHECKSUM, "overflow file: tensor %s read back with a "
				     "wrong checksum (the disk returned other bytes than were "
				     "written)", L->tensors[i].name);
	if (rc < 0) {
		if (b->mem)
			dbuf_release_mem(dt, b);
		return rc;
	}
	b->spilled = 0;
	dt->c.read_back += b->bytes;
	return 0;
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
	if (b && b->spilled && partial)   /* the kept tensors are in the file */
		rc = read_back(dt, b, err);
	if (rc == 0 && (!b || b->refs || !b->mem)) {
		/* A copy may be reading the current one, or it is in the
		 * file: a new buffer. */
		make_room(dt, layer, wspi_align_up(L->raw_bytes ? L->raw_bytes : 1, 4096));
		rc = dbuf_new(dt, layer, &nb, err);
		if (rc == 0 && partial) {
			if (b)
				memcpy(nb->mem, b->mem, L->raw_bytes);
			else
				rc = load_clean(dt, layer, nb->mem, err);
		}
	}
	if (rc == 0) {
		wb_fill((uint8_t *)nb->mem, mt, L->n_tensors, values, from_f32, nb->checksums);
		nb->used = ++dt->clock;
		nb->in_file = 0;   /* changed: a later spill writes it */
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
				dt->c.layers++;
				dt->c.bytes += L->raw_bytes;
			}
			dt->cur[layer] = nb;
		}
	} else if (nb != b) {
		dbuf_free(dt, nb);
	}
	pthread_mutex_unlock(&dt->lock);
	return rc;
}

/* Layer's current buffer in memory (read back if spilled), used now: 1 and
 * *out, 0 when the layer is clean, < 0 when it cannot be read back.  Under
 * the lock. */
static int in_memory(struct dirty *dt, uint32_t layer, struct dbuf **out, struct wspi_err *err)
{
	struct dbuf *b = dt->cur[layer];
	if (!b)
		return 0;
	if (b->spilled)
		WSP_TRY(read_back(dt, b, err));
	b->used = ++dt->clock;
	*out = b;
	return 1;
}

int dirty_get(struct dirty *dt, uint32_t layer, struct hcache_ref *ref, struct wspi_err *err)
{
	struct dbuf *b;
	pthread_mutex_lock(&dt->lock);
	int rc = in_memory(dt, layer, &b, err);
	if (rc == 1) {
		b->refs++;
		ref->layer = layer;
		ref->n_pages = 1;
		ref->pages = b->page;
		ref->page_bytes = b->bytes;
		ref->raw_bytes = dt->pk->layers[layer].raw_bytes;
		ref->bytes = ref->raw_bytes;
		ref->packed = 0;
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

/* Drop a reference to b, one of ours (under the lock): a superseded
 * buffer goes with its last one. */
static void unref(struct dirty *dt, struct dbuf *b, struct dbuf **link)
{
	if (--b->refs == 0 && link) {
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
	uint64_t step = WSP_MIN(b->bytes, (uint64_t)DIRTY_STREAM_PIECE);
	void *buf = wspi_map_bytes(step);
	struct wspi_ck *ck = calloc(L->n_tensors ? L->n_tensors : 1, sizeof(*ck));
	int rc = buf && ck ? 0 : WSP_ERR(err, -ENOMEM, "updated layers: out of memory to read "
					 "layer %s from the overflow file", L->name);
	for (uint64_t at = 0; rc == 0 && at < b->bytes; at += step) {
		uint64_t len = WSP_MIN(step, b->bytes - at);
		pthread_mutex_lock(&dt->lock);   /* the file's I/O runs under the lock */
		rc = overflow_read(dt->of, dt->file_off[b->layer] + at, buf, len, err);
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

int dirty_stream(struct dirty *dt, uint32_t layer, pack_piece_fn piece, void *pctx,
		 struct wspi_err *err)
{
	pthread_mutex_lock(&dt->lock);
	struct dbuf *b = dt->cur[layer];
	int from_file = b && b->spilled;
	if (b) {
		b->refs++;   /* neither freed nor spilled meanwhile */
		if (from_file)
			dt->streaming = layer;   /* and its place in the file not rewritten */
	}
	pthread_mutex_unlock(&dt->lock);
	if (!b)
		return 0;
	int rc = 0;
	if (from_file) {
		rc = stream_from_file(dt, b, piece, pctx, err);
	} else {
		const struct wspm_layer *l = &dt->pk->m.layers[layer];
		const struct wspm_tensor *mt = &dt->pk->m.tensors[l->first_tensor];
		for (uint32_t k = 0; k < l->n_tensors && rc == 0; k++)
			rc = piece(pctx, &mt[k], 0, (const char *)b->mem + mt[k].layer_offset,
				   mt[k].raw_bytes);
	}
	pthread_mutex_lock(&dt->lock);
	dt->streaming = UINT32_MAX;
	struct dbuf **link = NULL;
	for (struct dbuf **p = &dt->old; *p; p = &(*p)->next)
		if (*p == b)
			link = p;
	unref(dt, b, link);
	pthread_mutex_unlock(&dt->lock);
	return rc < 0 ? rc : 1;
}

void dirty_counters(struct dirty *dt, struct dirty_counters *out)
{
	pthread_mutex_lock(&dt->lock);
	*out = dt->c;
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
	overflow_close(dt->of);
	free(dt->cur);
	free(dt->file_off);
	free(dt->dir);
	pthread_mutex_destroy(&dt->lock);
	free(dt);
}
