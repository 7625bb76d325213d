/* Training state kept for the caller (see state.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/util.h"
#include "predict/predict.h"
#include "writeback/overflow.h"
#include "writeback/state.h"

struct blob {
	void *mem;                 /* NULL when spilled (or none) */
	int pinned;
	uint64_t bytes;            /* 0: none */
	uint64_t cap;              /* bytes rounded up to 4096: memory and file room */
	unsigned refs;             /* takers; a taken buffer never leaves memory */
	uint64_t used;             /* clock of the last hand-back: the spill order */
	int in_file;               /* the file holds these very bytes */
	uint64_t checksum;         /* XXH3-64 of what the file holds */
	uint64_t file_off, file_cap;   /* its room in the file (kept across changes) */
};

struct state_store {
	struct dev *dev;
	struct state_config cfg;
	char *dir, *pack_dir;       /* cfg's copies */
	pthread_mutex_t lock;
	struct blob *b;
	struct overflow *of;       /* made at the first spill */
	uint64_t file_end;
	uint64_t clock;
	int over_said;             /* the notice of a failed spill is given once */
	struct state_counters c;
};

int state_create(struct dev *d, const struct state_config *cfg, struct state_store **out,
		 struct wspi_err *err)
{
	struct state_store *st = calloc(1, sizeof(*st));
	if (!st || !(st->b = calloc(cfg->n_layers ? cfg->n_layers : 1, sizeof(*st->b)))) {
		free(st);
		return WSP_ERR(err, -ENOMEM, "training state: out of memory");
	}
	st->dev = d;
	st->cfg = *cfg;
	pthread_mutex_init(&st->lock, NULL);
	if ((cfg->dir && !(st->dir = strdup(cfg->dir))) ||
	    (cfg->pack_dir && !(st->pack_dir = strdup(cfg->pack_dir)))) {
		state_destroy(st);
		return WSP_ERR(err, -ENOMEM, "training state: out of memory");
	}
	st->cfg.dir = st->dir;
	st->cfg.pack_dir = st->pack_dir;
	*out = st;
	return 0;
}

static void drop_mem(struct state_store *st, struct blob *b)
{
	if (b->pinned)
		st->dev->ops->unpin(st->dev, b->mem);
	if (b->mem)
		st->c.resident -= b->cap;
	wspi_unmap_bytes(b->mem, b->cap);
	b->mem = NULL;
	b->pinned = 0;
}

void state_destroy(struct state_store *st)
{
	if (!st)
		return;
	for (uint32_t l = 0; l < st->cfg.n_layers; l++)
		drop_mem(st, &st->b[l]);
	overflow_close(st->of);
	free(st->dir);
	free(st->pack_dir);
	pthread_mutex_destroy(&st->lock);
	free(st->b);
	free(st);
}

static int open_overflow(struct state_store *st, struct wspi_err *err)
{
	int rc = overflow_open(st->cfg.dir, st->cfg.pack_dir, "training state", &st->of, err);
	if (rc == 0)
		wspi_notice(st->cfg.log, st->cfg.log_ctx, "training state beyond %" PRIu64 " MiB in "
			    "memory goes to an unnamed overflow file in %s (%s)", st->cfg.budget >> 20,
			    overflow_dir(st->of), overflow_how(st->of));
	return rc;
}

/* Write layer l's buffer to the file (its own room there), with its
 * checksum kept, and free its memory. */
static int spill(struct state_store *st, uint32_t l, struct wspi_err *err)
{
	struct blob *b = &st->b[l];
	int rc = b->in_file || st->of ? 0 : open_overflow(st, err);
	if (rc == 0 && !b->in_file) {
		if (b->file_cap < b->cap) {
			b->file_off = st->file_end;
			b->file_cap = b->cap;
			st->file_end += b->cap;
		}
		b->checksum = XXH3_64bits(b->mem, b->bytes);
		rc = overflow_write(st->of, b->file_off, b->mem, b->cap, err);
		if (rc == 0)
			st->c.spilled += b->cap;
	}
	if (rc < 0) {
		wspi_err_prefix(err, "training state over its %" PRIu64 " MiB budget: layer %u's "
				"stays in memory", st->cfg.budget >> 20, l);
		return rc;
	}
	drop_mem(st, b);
	b->in_file = 1;
	return 0;
}

/* Spill the least recently used buffers nobody holds (not `keep`'s) until
 * `need` more bytes fit the budget, or none is left to spill.  A spill that
 * fails (a full disk) keeps the buffers in memory over the budget, said
 * once, rather than fail the take or release that needed room. */
static void make_room(struct state_store *st, uint32_t keep, uint64_t need)
{
	while (st->c.resident + need > st->cfg.budget) {
		struct evict_pick pick;   /* least recently handed back: the LRU policy's victim */
		evict_pick_init(&pick, WSP_POLICY_LRU);
		for (uint32_t l = 0; l < st->cfg.n_layers; l++) {
			struct blob *b = &st->b[l];
			if (l != keep && b->mem && !b->refs)
				evict_pick_offer(&pick, (long)l, &(struct evict_cand){ l, b->used, 0 });
		}
		if (pick.best < 0)
			return;
		uint32_t v = (uint32_t)pick.best;
		struct wspi_err err;
		wspi_err_init(&err);
		int rc = spill(st, v, &err);
		if (rc < 0 && !st->over_said) {
			st->over_said = 1;
			wspi_notice(st->cfg.log, st->cfg.log_ctx, "%s; training state stays in memory "
				    "over its budget from now on while the overflow file cannot take it",
				    err.msg);
		}
		wspi_err_destroy(&err);
		if (rc < 0)
			return;
	}
}

/* Memory for layer l's buffer of b->cap bytes, page-locked where the
 * device pins (copies to and from the device run from it). */
static int alloc_mem(struct state_store *st, uint32_t l, struct wspi_err *err)
{
	struct blob *b = &st->b[l];
	int rc;
	make_room(st, l, b->cap);
	if (!(b->mem = wspi_map_bytes(b->cap)))
		return WSP_ERR(err, -ENOMEM, "training state: out of memory for layer %u's %" PRIu64
			       " bytes", l, b->bytes);
	st->c.resident += b->cap;
	if (!dev_is_host(st->dev)) {
		if ((rc = st->dev->ops->pin(st->dev, b->mem, b->cap, err)) < 0) {
			drop_mem(st, b);
			return rc;
		}
		b->pinned = 1;
	}
	return 0;
}

/* A spilled buffer back into memory, checked. */
static int read_back(struct state_store *st, uint32_t l, struct wspi_err *err)
{
	struct blob *b = &st->b[l];
	int rc = alloc_mem(st, l, err);
	if (rc == 0)
		rc = overflow_read(st->of, b->file_off, b->mem, b->cap, err);
	if (rc == 0) {
		st->c.read_back += b->cap;
		if (XXH3_64bits(b->mem, b->bytes) != b->checksum)
			rc = WSP_ERR(err, WSP_ECHECKSUM, "training state of layer %u read back from "
				     "the overflow file differs from what was written", l);
	}
	if (rc < 0)
		drop_mem(st, b);   /* still in the file, as it was */
	return rc;
}

int state_acquire(struct state_store *st, uint32_t layer, uint64_t bytes, void **data,
		  struct wspi_err *err)
{
	pthread_mutex_lock(&st->lock);
	struct blob *b = &st->b[layer];
	int rc = 0;
	*data = NULL;
	if (b->bytes != bytes) {
		if (b->refs) {
			rc = WSP_ERR(err, WSP_ESTATE, "training state of layer %u: taken with %" PRIu64
				     " bytes, asked for %" PRIu64, layer, b->bytes, bytes);
			goto out;
		}
		/* Another size: a new buffer of zeros (the file's room is kept). */
		drop_mem(st, b);
		st->c.held -= b->bytes;
		b->bytes = bytes;
		b->cap = wspi_align_up(bytes ? bytes : 1, 4096);
		b->in_file = 0;
		if ((rc = alloc_mem(st, layer, err)) < 0) {
			b->bytes = 0;
			goto out;
		}
		st->c.held += bytes;   /* zeros: a new mapping */
	} else if (!b->mem && (rc = read_back(st, layer, err)) < 0) {
		goto out;
	}
	b->refs++;
	*data = b->mem;
out:
	pthread_mutex_unlock(&st->lock);
	return rc;
}

int state_release(struct state_store *st, uint32_t layer, int changed, struct wspi_err *err)
{
	pthread_mutex_lock(&st->lock);
	struct blob *b = &st->b[layer];
	int rc = 0;
	if (!b->refs) {
		rc = WSP_ERR(err, WSP_ESTATE, "training state of layer %u: released but not taken",
			     layer);
	} else {
		b->refs--;
		if (changed)
			b->in_file = 0;
		b->used = ++st->clock;
		make_room(st, UINT32_MAX, 0);   /* it may leave now */
	}
	pthread_mutex_unlock(&st->lock);
	return rc;
}

uint64_t state_size(struct state_store *st, uint32_t layer)
{
	pthread_mutex_lock(&st->lock);
	uint64_t n = st->b[layer].bytes;
	pthread_mutex_unlock(&st->lock);
	return n;
}

void state_counters(struct state_store *st, struct state_counters *out)
{
	pthread_mutex_lock(&st->lock);
	*out = st->c;
	pthread_mutex_unlock(&st->lock);
}
