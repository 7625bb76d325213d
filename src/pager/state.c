/*
 * wsp_state_acquire / _release / _size: training state kept for the
 * caller, in the write-back room (src/writeback/state.c), made at the first
 * acquire.
 */
#include <errno.h>
#include <inttypes.h>

#include "common/util.h"
#include "pager/pager.h"

/* The largest buffer: its size rounded up to pages still fits the int64_t
 * that wsp_state_size returns. */
#define STATE_MAX_BYTES ((uint64_t)INT64_MAX - 4095)

/* The state store for a call on `layer`: *rc WSP_ENOTFOUND for no such
 * layer, else the store, made at the first acquire (`make`; under
 * pg->lock); NULL without `make` when none was ever acquired. */
static struct state_store *store(struct wsp_pager_s *pg, uint32_t layer, int make,
				 struct wspi_err *err, int *rc)
{
	if (layer >= pg->pk->m.hdr->n_layers) {
		*rc = WSP_ERR(err, WSP_ENOTFOUND, "%s: no layer %u (the pack has %u)", pg->pk->dir,
			      layer, pg->pk->m.hdr->n_layers);
		return NULL;
	}
	struct state_config cfg = {
		.n_layers = pg->pk->m.hdr->n_layers,
		.budget = pg->opt.state_bytes ? pg->opt.state_bytes : pg->opt.host_cache_bytes / 4,
		.dir = pg->opt.overflow_dir, .pack_dir = pg->pk->dir,
		.log = pager_notice, .log_ctx = pg,
	};
	pthread_mutex_lock(&pg->lock);
	struct state_store *st = pg->state;
	if (!st && make && (*rc = state_create(pg->dev, &cfg, &st, err)) == 0)
		__atomic_store_n(&pg->state, st, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pg->lock);
	return st;
}

int wsp_state_acquire(wsp_pager *pg, uint32_t layer, uint64_t bytes, void **data)
{
	struct wspi_err err;
	if (!pg || !data)
		return -EINVAL;
	if (pg->group)
		return pgroup_refuse(pg, "wsp_state_acquire");
	*data = NULL;
	wspi_err_init(&err);
	int rc = 0;
	if (!bytes)
		rc = WSP_ERR(&err, -EINVAL, "wsp_state_acquire: 0 bytes");
	else if (bytes > STATE_MAX_BYTES)   /* rounding up to pages would wrap */
		rc = WSP_ERR(&err, WSP_ETOOBIG, "wsp_state_acquire: %" PRIu64 " bytes: above the "
			     "largest state buffer (%" PRIu64 " bytes)", bytes, (uint64_t)STATE_MAX_BYTES);
	struct state_store *st = rc == 0 ? store(pg, layer, 1, &err, &rc) : NULL;
	if (rc == 0)
		rc = state_acquire(st, layer, bytes, data, &err);
	return pager_result(pg, &err, rc);
}

int wsp_state_release(wsp_pager *pg, uint32_t layer, int changed)
{
	struct wspi_err err;
	int rc = 0;
	if (!pg)
		return -EINVAL;
	if (pg->group)
		return pgroup_refuse(pg, "wsp_state_release");
	wspi_err_init(&err);
	struct state_store *st = store(pg, layer, 0, &err, &rc);
	if (rc == 0)
		rc = st ? state_release(st, layer, changed, &err)
			: WSP_ERR(&err, WSP_ESTATE, "training state of layer %u: released but not "
				  "taken", layer);
	return pager_result(pg, &err, rc);
}

int64_t wsp_state_size(wsp_pager *pg, uint32_t layer)
{
	struct wspi_err err;
	int rc = 0;
	if (!pg)
		return -EINVAL;
	if (pg->group)
		return pgroup_refuse(pg, "wsp_state_size");
	wspi_err_init(&err);
	struct state_store *st = store(pg, layer, 0, &err, &rc);
	uint64_t n = st ? state_size(st, layer) : 0;
	rc = pager_result(pg, &err, rc);
	return rc < 0 ? rc : (int64_t)n;
}
