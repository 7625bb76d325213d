/* A spill store (see spill.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/util.h"
#include "predict/predict.h"
#include "writeback/overflow.h"
#include "writeback/spill.h"

struct slot {
	void *mem;                 /* NULL when spilled (or none) */
	int pinned;
	int exists;                /* spill_new made one (it may be in the file) */
	uint64_t bytes;            /* as asked */
	uint64_t cap;              /* bytes rounded up to 4096: memory and file room */
	unsigned holds;            /* a held buffer never leaves memory */
	uint64_t used;             /* clock of the last use: the spill order */
	int in_file;               /* the file holds these very bytes */
	int keep_place;            /* its place in the file is being read: no spill */
	uint64_t checksum;         /* XXH3-64 of what the file holds */
	uint64_t file_off, file_cap;   /* its place in the file (kept across changes) */
};

struct spill {
	struct dev *dev;
	struct spill_config cfg;
	char *dir, *pack_dir;      /* cfg's copies (what and names: the owner's) */
	uint32_t n;
	struct slot *s;
	struct overflow *of;       /* made at the first spill */
	uint64_t file_end;         /* past every place given so far */
	uint64_t clock;
	int over_said;             /* the notice of a failed spill is given once */
	struct spill_counters c;
};

int spill_create(struct dev *d, uint32_t n_keys, const struct spill_config *cfg,
		 struct spill **out, struct wspi_err *err)
{
	struct spill *sp = calloc(1, sizeof(*sp));
	*out = NULL;
	if (!sp || !(sp->s = calloc(n_keys ? n_keys : 1, sizeof(*sp->s))) ||
	    (cfg->dir && !(sp->dir = strdup(cfg->dir))) ||
	    (cfg->pack_dir && !(sp->pack_dir = strdup(cfg->pack_dir)))) {
		spill_destroy(sp);
		return WSP_ERR(err, -ENOMEM, "%s: out of memory", cfg->what);
	}
	sp->dev = d;
	sp->n = n_keys;
	sp->cfg = *cfg;
	sp->cfg.dir = sp->dir;
	sp->cfg.pack_dir = sp->pack_dir;
	*out = sp;
	return 0;
}

/* What messages call the key: its name, else "layer N". */
static const char *key_name(const struct spill *sp, uint32_t key, char *buf, size_t size)
{
	if (sp->cfg.names)
		return sp->cfg.names[key];
	snprintf(buf, size, "layer %u", key);
	return buf;
}

/* The slot's memory, if any, freed. */
static void drop_mem(struct spill *sp, struct slot *s)
{
	struct spill_mem m = { s->mem, s->cap, s->pinned };
	spill_free_superseded(sp, &m);
	s->mem = NULL;
	s->pinned = 0;
}

void spill_destroy(struct spill *sp)
{
	if (!sp)
		return;
	for (uint32_t k = 0; sp->s && k < sp->n; k++)
		drop_mem(sp, &sp->s[k]);
	overflow_close(sp->of);
	free(sp->s);
	free(sp->dir);
	free(sp->pack_dir);
	free(sp);
}

void spill_place(struct spill *sp, uint32_t key, uint64_t off, uint64_t cap)
{
	sp->s[key].file_off = off;
	sp->s[key].file_cap = cap;
	sp->file_end = WSP_MAX(sp->file_end, off + cap);
}

static int open_overflow(struct spill *sp, struct wspi_err *err)
{
	int rc = overflow_open(sp->cfg.dir, sp->cfg.pack_dir, sp->cfg.what, &sp->of, err);
	if (rc == 0)
		wspi_notice(sp->cfg.log, sp->cfg.log_ctx, "%s beyond %" PRIu64 " MiB in memory %s "
			    "to an unnamed overflow file in %s (%s)", sp->cfg.what,
			    sp->cfg.budget >> 20, sp->cfg.plural ? "go" : "goes",
			    overflow_dir(sp->of), overflow_how(sp->of));
	return rc;
}

/* Write key's buffer to its place in the file, its checksum kept, and
 * free its memory. */
static int spill_out(struct spill *sp, uint32_t key, struct wspi_err *err)
{
	struct slot *s = &sp->s[key];
	int rc = s->in_file || sp->of ? 0 : open_overflow(sp, err);
	if (rc == 0 && !s->in_file) {
		if (s->file_cap < s->cap) {
			s->file_off = sp->file_end;
			s->file_cap = s->cap;
			sp->file_end += s->cap;
		}
		s->checksum = wspi_xxh3(s->mem, s->bytes);
		rc = overflow_write(sp->of, s->file_off, s->mem, s->cap, err);
		if (rc == 0)
			sp->c.spilled += s->cap;
	}
	if (rc < 0) {
		char nb[32];
		wspi_err_prefix(err, "%s over %s %" PRIu64 " MiB budget: %s stays in memory",
				sp->cfg.what, sp->cfg.plural ? "their" : "its", sp->cfg.budget >> 20,
				key_name(sp, key, nb, sizeof(nb)));
		return rc;
	}
	drop_mem(sp, s);
	s->in_file = 1;
	return 0;
}

/* Spill the least recently used buffers nobody holds (not `keep`'s) until
 * `need` more bytes fit the budget, or none is left to spill.  A spill that
 * fails (a full disk) keeps the buffers in memory over the budget, said
 * once, rather than fail the call that needed room. */
static void make_room(struct spill *sp, uint32_t keep, uint64_t need)
{
	while (sp->c.resident + need > sp->cfg.budget) {
		struct evict_pick pick;   /* least recently used: the LRU policy's victim */
		evict_pick_init(&pick, WSP_POLICY_LRU);
		for (uint32_t k = 0; k < sp->n; k++) {
			struct slot *s = &sp->s[k];
			if (k != keep && s->mem && !s->holds && !s->keep_place)
				evict_pick_offer(&pick, (long)k, &(struct evict_cand){ k, s->used, 0 });
		}
		if (pick.best < 0)
			return;
		struct wspi_err err;
		wspi_err_init(&err);
		int rc = spill_out(sp, (uint32_t)pick.best, &err);
		if (rc < 0 && !sp->over_said) {
			sp->over_said = 1;
			wspi_notice(sp->cfg.log, sp->cfg.log_ctx, "%s; %s %s in memory over %s budget "
				    "from now on while the overflow file cannot take %s", err.msg,
				    sp->cfg.what, sp->cfg.plural ? "stay" : "stays",
				    sp->cfg.plural ? "their" : "its", sp->cfg.plural ? "them" : "it");
		}
		wspi_err_destroy(&err);
		if (rc < 0)
			return;
	}
}

void spill_trim(struct spill *sp)
{
	make_room(sp, UINT32_MAX, 0);
}

/* `cap` bytes of memory, page-locked where the device pins, after room is
 * made for them (not by spilling `key`). */
static int alloc_mem(struct spill *sp, uint32_t key, uint64_t cap, struct spill_mem *out,
		     struct wspi_err *err)
{
	char nb[32];
	int rc;
	make_room(sp, key, cap);
	*out = (struct spill_mem){ wspi_map_bytes(cap), cap, 0 };
	if (!out->mem)
		return WSP_ERR(err, -ENOMEM, "%s: out of memory for %s (%" PRIu64 " bytes)",
			       sp->cfg.what, key_name(sp, key, nb, sizeof(nb)), cap);
	sp->c.resident += cap;
	if (!dev_is_host(sp->dev)) {
		if ((rc = sp->dev->ops->pin(sp->dev, out->mem, cap, err)) < 0) {
			spill_free_superseded(sp, out);
			return rc;
		}
		out->pinned = 1;
	}
	return 0;
}

int spill_new(struct spill *sp, uint32_t key, uint64_t bytes, struct spill_mem *superseded,
	      void **mem, struct wspi_err *err)
{
	struct slot *s = &sp->s[key];
	struct spill_mem m;
	char nb[32];
	uint64_t cap = wspi_align_up(bytes ? bytes : 1, 4096);
	*mem = NULL;
	if (superseded)
		*superseded = (struct spill_mem){ 0 };
	if (s->holds && !superseded)
		return WSP_ERR(err, WSP_ESTATE, "%s: %s is in use", sp->cfg.what,
			       key_name(sp, key, nb, sizeof(nb)));
	WSP_TRY(alloc_mem(sp, key, cap, &m, err));   /* zeros: a new mapping */
	if (superseded && s->mem)
		*superseded = (struct spill_mem){ s->mem, s->cap, s->pinned };
	else
		drop_mem(sp, s);
	*s = (struct slot){ .mem = m.mem, .pinned = m.pinned, .exists = 1, .bytes = bytes,
			    .cap = cap, .used = ++sp->clock, .keep_place = s->keep_place,
			    .file_off = s->file_off, .file_cap = s->file_cap };
	*mem = s->mem;
	return 0;
}

void spill_free_superseded(struct spill *sp, struct spill_mem *m)
{
	if (m->pinned)
		sp->dev->ops->unpin(sp->dev, m->mem);
	if (m->mem)
		sp->c.resident -= m->cap;
	wspi_unmap_bytes(m->mem, m->cap);
	*m = (struct spill_mem){ 0 };
}

void spill_drop(struct spill *sp, uint32_t key)
{
	struct slot *s = &sp->s[key];
	drop_mem(sp, s);
	s->exists = s->in_file = 0;
}

int spill_get(struct spill *sp, uint32_t key, void **mem, struct wspi_err *err)
{
	struct slot *s = &sp->s[key];
	int rc = 0;
	*mem = NULL;
	if (!s->exists)
		return -ENOENT;
	if (!s->mem) {
		struct spill_mem m;
		char nb[32];
		WSP_TRY(alloc_mem(sp, key, s->cap, &m, err));
		rc = overflow_read(sp->of, s->file_off, m.mem, s->cap, err);
		if (rc == 0) {
			sp->c.read_back += s->cap;
			if (wspi_xxh3(m.mem, s->bytes) != s->checksum)
				rc = WSP_ERR(err, WSP_ECHECKSUM, "%s: %s read back from the overflow "
					     "file in %s differs from what was written (the disk "
					     "returned other bytes)", sp->cfg.what,
					     key_name(sp, key, nb, sizeof(nb)), overflow_dir(sp->of));
		}
		if (rc < 0) {
			spill_free_superseded(sp, &m);   /* still in the file, as it was */
			return rc;
		}
		s->mem = m.mem;
		s->pinned = m.pinned;
	}
	s->used = ++sp->clock;
	*mem = s->mem;
	return 0;
}

uint64_t spill_bytes(const struct spill *sp, uint32_t key)
{
	return sp->s[key].exists ? sp->s[key].bytes : 0;
}

int spill_resident(const struct spill *sp, uint32_t key)
{
	return sp->s[key].mem != NULL;
}

void spill_hold(struct spill *sp, uint32_t key)
{
	sp->s[key].holds++;
}

void spill_unhold(struct spill *sp, uint32_t key)
{
	sp->s[key].holds--;
	sp->s[key].used = ++sp->clock;   /* handed back: used until now */
}

unsigned spill_holders(const struct spill *sp, uint32_t key)
{
	return sp->s[key].holds;
}

void spill_changed(struct spill *sp, uint32_t key)
{
	sp->s[key].in_file = 0;
	sp->s[key].used = ++sp->clock;
}

int spill_read_file(struct spill *sp, uint32_t key, uint64_t at, void *buf, uint64_t len,
		    struct wspi_err *err)
{
	return overflow_read(sp->of, sp->s[key].file_off + at, buf, len, err);
}

void spill_keep_place(struct spill *sp, uint32_t key, int keep)
{
	sp->s[key].keep_place = keep;
}

void spill_counters(const struct spill *sp, struct spill_counters *out)
{
	*out = sp->c;
}
