/*
 * wsp_acquire / wsp_release: the slot logic of the pager as callers meet it
 * (what moves layers up ahead of need is in ahead.c; the copies themselves
 * start on the pager's thread, copier.c).
 *
 * An acquire is a GPU hit when a slot already holds the layer: the user's
 * stream then only waits on the fill event, on the caller's thread.
 * Otherwise the acquire is a demand, posted to the pager's thread, which
 * takes the host tier's reference (waiting only when the layer is not in
 * the host tier yet), picks a slot and enqueues the copy; the caller waits
 * for that demand alone.  After every acquire pager_prefetch_ahead
 * (ahead.c) starts the predicted successors up the tiers.
 *
 * Locking: pg->lock guards the slot pool and counters and is never held
 * while calling into the host cache, whose thread posts finished loads
 * under it (pager_on_ready); so the only lock order is pager ->
 * predictor/device.
 */
#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "pager/pager.h"

/* The CLOCK_REALTIME time `ns` from now, for pthread_cond_timedwait. */
static struct timespec deadline_in(uint64_t ns)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	/* seconds and the rest apart: UINT64_MAX ("forever") must not wrap */
	uint64_t rest = ns % 1000000000u + (uint64_t)t.tv_nsec;
	t.tv_sec += (time_t)(ns / 1000000000u + rest / 1000000000u);
	t.tv_nsec = (long)(rest % 1000000000u);
	return t;
}

/* The body of wsp_acquire; the caller counts the outcome. */
static int acquire(struct wsp_pager_s *pg, uint32_t layer, void *stream,
		   const struct wsp_layer **view, enum pager_outcome *how, uint64_t *blocked,
		   struct wspi_err *err)
{
	int rc;

	pager_reap(pg, 0);
	pthread_mutex_lock(&pg->lock);
	pg->hinted[layer] = 0;
	struct slot *s = slots_find(&pg->sp, layer);
	if (pg->decode_rc) {
		rc = WSP_ERR(err, pg->decode_rc, "%s", pg->decode_msg);
	} else if (s) {
		*how = PAGER_GPU_HIT;
		rc = slots_use(&pg->sp, s, stream, view, err);
	} else {
		struct pager_demand d = { .layer = layer, .stream = stream, .view = view,
					  .err = err, .how = PAGER_MISS };
		pager_demand_wait(pg, &d);
		*how = d.how;
		*blocked = d.blocked_ns;
		rc = d.rc;
	}
	pthread_mutex_unlock(&pg->lock);
	return rc;
}

/* wsp_acquire, and each try of wsp_acquire_wait (`waiting`): a retry is not
 * observed again by the predictor, and a waiting try's WSP_ESTATE is not
 * counted (the waiting call counts once, however many tries it takes). */
static int acquire_try(struct wsp_pager_s *pg, uint32_t layer, void *stream,
		       const struct wsp_layer **view, int waiting, int retry, unsigned flags)
{
	struct wspi_err err;
	enum pager_outcome how = PAGER_MISS;
	uint64_t blocked = 0;
	uint32_t first;
	int rc, was_predicted = 0;

	*view = NULL;
	wspi_err_init(&err);
	if (layer >= pg->pk->m.hdr->n_layers) {
		pthread_mutex_lock(&pg->lock);
		pg->acquire_failures++;
		pthread_mutex_unlock(&pg->lock);
		return pager_result(pg, &err, pager_bad_layer(pg, layer, &err));
	}

	int observe = !retry && !(flags & WSP_ACQUIRE_UNPREDICTED);
	if (observe)
		was_predicted = predictor_next(pg->pred, &first, 1) == 1 && first == layer;
	rc = acquire(pg, layer, stream, view, &how, &blocked, &err);
	/* Observed once the layer is held (a slot's use): until then it is the
	 * predicted next layer, which no prefetch pushes out.  Observed before,
	 * its next use was a whole pass away, and a prefetch landing meanwhile
	 * could take its slot or its host pages: a miss on a layer that had
	 * arrived in time. */
	if (observe)
		predictor_observe(pg->pred, layer);

	/* Counted once the outcome is known: a failed acquire is neither a
	 * hit nor a miss, so contention cannot distort the hit rates. */
	pthread_mutex_lock(&pg->lock);
	pg->acquire_block_ns += blocked;
	if (rc == 0) {
		pg->acquires++;
		pg->predicted += was_predicted;
		pg->gpu_hits += how == PAGER_GPU_HIT;
		pg->host_hits += how == PAGER_HOST_HIT;
		pg->misses += how == PAGER_MISS;
	} else if (!(waiting && rc == WSP_ESTATE)) {
		pg->acquire_failures++;
	}
	pthread_mutex_unlock(&pg->lock);
	if (rc == 0) {
		who_decodes_acquired(pg, layer);
		readahead_acquired(pg->ra, layer);
		if (!(pg->opt.flags & WSP_OPEN_NO_PREFETCH) && !(flags & WSP_ACQUIRE_NO_READAHEAD))
			pager_prefetch_ahead(pg);
		pager_reap(pg, 0);
	}
	return pager_result(pg, &err, rc);
}

int wsp_acquire(wsp_pager *pg, uint32_t layer, void *stream, const struct wsp_layer **view)
{
	if (!pg || !view)
		return -EINVAL;
	if (pg->group) {
		struct wsp_pager_s *m;
		int rg = pgroup_member(pg, layer, &m);
		return rg < 0 ? rg : pgroup_pass(pg, m, wsp_acquire(m, layer, stream, view));
	}
	return acquire_try(pg, layer, stream, view, 0, 0, 0);
}

int wsp_acquire_flags(wsp_pager *pg, uint32_t layer, void *stream, unsigned flags,
		      const struct wsp_layer **view)
{
	if (!pg || !view || (flags & ~(WSP_ACQUIRE_UNPREDICTED | WSP_ACQUIRE_NO_READAHEAD))) {
		if (pg && view) {
			struct wspi_err err;
			wspi_err_init(&err);
			return pager_result(pg, &err, WSP_ERR(&err, -EINVAL, "wsp_acquire_flags: "
							      "unknown flags 0x%x", flags));
		}
		return -EINVAL;
	}
	if (pg->group) {
		struct wsp_pager_s *m;
		int rg = pgroup_member(pg, layer, &m);
		return rg < 0 ? rg : pgroup_pass(pg, m, wsp_acquire_flags(m, layer, stream, flags, view));
	}
	return acquire_try(pg, layer, stream, view, 0, 0, flags);
}

/* Whether an acquire of `layer` would find a slot now: the layer is in one,
 * or some slot it fits is held by nobody.  Under pg->lock. */
static int slot_within_reach(struct wsp_pager_s *pg, uint32_t layer)
{
	if (slots_find(&pg->sp, layer))
		return 1;
	for (unsigned i = 0; i < pg->sp.n; i++)
		if (!pg->sp.slots[i].refs && pager_slot_fits(pg, &pg->sp.slots[i], layer, 1))
			return 1;
	return 0;
}

int wsp_acquire_wait(wsp_pager *pg, uint32_t layer, void *stream, const struct wsp_layer **view,
		     uint64_t timeout_ns)
{
	struct timespec until;
	struct wspi_err err;
	int rc;

	if (!pg || !view)
		return -EINVAL;
	*view = NULL;
	if (pg->group) {
		struct wsp_pager_s *m;
		int rg = pgroup_member(pg, layer, &m);
		return rg < 0 ? rg : pgroup_pass(pg, m, wsp_acquire_wait(m, layer, stream, view, timeout_ns));
	}
	until = deadline_in(timeout_ns);
	for (int tries = 0;; tries++) {
		/* Wait for a release (it signals `progress`), then try: another
		 * thread may still take the slot first, and then this waits again. */
		int timed_out = 0;
		pthread_mutex_lock(&pg->lock);
		while (layer < pg->pk->m.hdr->n_layers && !slot_within_reach(pg, layer) && !timed_out)
			timed_out = pthread_cond_timedwait(&pg->progress, &pg->lock, &until) == ETIMEDOUT;
		pthread_mutex_unlock(&pg->lock);
		rc = acquire_try(pg, layer, stream, view, 1, tries > 0, 0);
		if (rc != WSP_ESTATE)
			return rc;
		if (timed_out) {
			pthread_mutex_lock(&pg->lock);
			pg->acquire_failures++;
			pthread_mutex_unlock(&pg->lock);
			wspi_err_init(&err);
			return pager_result(pg, &err, WSP_ERR(&err, -ETIMEDOUT, "acquire of layer %u (%s): "
							       "every slot stayed held for %.3f s",
							       layer, pg->pk->layers[layer].name,
							       timeout_ns / 1e9));
		}
	}
}

int wsp_acquire_by_name(wsp_pager *pg, const char *name, void *stream,
			const struct wsp_layer **view)
{
	struct wspi_err err;

	if (!pg || !name || !view)
		return -EINVAL;
	*view = NULL;
	const struct wsp_layer *l = wsp_pack_find_layer(pg->pk, name);
	if (l)
		return wsp_acquire(pg, l->index, stream, view);
	wspi_err_init(&err);
	return pager_result(pg, &err, WSP_ERR(&err, WSP_ENOTFOUND, "%s: no layer named \"%s\"",
					      pg->pk->dir, name));
}

const struct wsp_tensor *wsp_layer_tensor(const struct wsp_layer *view, const char *name)
{
	if (!view || !name)
		return NULL;
	for (uint32_t i = 0; i < view->n_tensors; i++) {
		const struct wsp_tensor *t = &view->tensors[i];
		if ((t->short_name && strcmp(t->short_name, name) == 0) ||
		    (t->name && strcmp(t->name, name) == 0))
			return t;
	}
	return NULL;
}

int wsp_release(wsp_pager *pg, uint32_t layer, void *stream)
{
	struct wspi_err err;
	int rc;
	if (!pg)
		return -EINVAL;
	if (pg->group) {
		struct wsp_pager_s *m;
		int rg = pgroup_member(pg, layer, &m);
		return rg < 0 ? rg : pgroup_pass(pg, m, wsp_release(m, layer, stream));
	}
	wspi_err_init(&err);
	if (layer >= pg->pk->m.hdr->n_layers)
		return pager_result(pg, &err, pager_bad_layer(pg, layer, &err));
	pthread_mutex_lock(&pg->lock);
	struct slot *s = slots_find(&pg->sp, layer);
	if (!s || s->refs == 0)
		rc = WSP_ERR(&err, WSP_ESTATE, "release of layer %u (%s): it is not acquired",
			     layer, pg->pk->layers[layer].name);
	else
		rc = slots_unuse(&pg->sp, s, stream, NULL, &err);
	pthread_cond_broadcast(&pg->progress);
	pthread_mutex_unlock(&pg->lock);
	if (rc == 0)
		pager_reap(pg, 0);
	return pager_result(pg, &err, rc);
}

int wsp_release_view(wsp_pager *pg, const struct wsp_layer *view, void *stream)
{
	struct wspi_err err;
	int rc;
	if (!pg || !view)
		return -EINVAL;
	if (pg->group) {
		struct wsp_pager_s *m;
		int rg = pgroup_member(pg, view->index, &m);
		return rg < 0 ? rg : pgroup_pass(pg, m, wsp_release_view(m, view, stream));
	}
	wspi_err_init(&err);
	pthread_mutex_lock(&pg->lock);
	struct slot *s = slots_of_view(&pg->sp, view);
	if (!s)
		rc = WSP_ERR(&err, WSP_ESTATE, "release of a view that is not acquired (released "
			     "already, or not from this pager)");
	else
		rc = slots_unuse(&pg->sp, s, stream, view, &err);
	pthread_cond_broadcast(&pg->progress);
	pthread_mutex_unlock(&pg->lock);
	if (rc == 0)
		pager_reap(pg, 0);
	return pager_result(pg, &err, rc);
}
