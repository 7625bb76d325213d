/*
 * Moving layers up the tiers ahead of need: after each acquire the
 * predicted successors (pager_prefetch_ahead), and what callers name
 * (wsp_prefetch, wsp_hint_next, wsp_provide).  The first few go into slots
 * when the host tier has them (an early fill, under the admission rule);
 * the rest are requested from the host tier.  When one lands, the host
 * tier's thread only posts it (pager_on_ready); the pager's own thread
 * takes it up (pager_landed_main) and copies it into a slot if it was
 * hinted or is predicted near.
 * Locking as in acquire.c: pg->lock is never held across host-cache calls.
 */
#include <errno.h>

#include "common/util.h"
#include "pager/pager.h"

/* Admission for an early fill of `layer` (the host cache's rule): a free
 * slot it fits, or the unused one whose layer is predicted furthest (the
 * predictive policy's victim), if further than `dist`. */
static struct slot *prefetch_victim(struct wsp_pager_s *pg, uint32_t layer, uint64_t dist)
{
	for (int pass = 0; pass < 2; pass++) {
		struct evict_pick pick;
		evict_pick_init(&pick, WSP_POLICY_PREDICT);
		for (unsigned i = 0; i < pg->sp.n; i++) {
			struct slot *s = &pg->sp.slots[i];
			if (s->refs || !pager_slot_fits(pg, s, layer, pass))
				continue;
			if (s->state == SLOT_FREE)
				return s;
			struct evict_cand c = { s->layer, s->last_use,
						predictor_distance(pg->pred, s->layer) };
			evict_pick_offer(&pick, (long)i, &c);
		}
		if (pick.best >= 0 && pick.cand.distance > dist)
			return &pg->sp.slots[pick.best];
	}
	return NULL;
}

static int fill_early(struct wsp_pager_s *pg, uint32_t layer, uint64_t dist)
{
	struct hcache_ref ref;
	int used = 0, in_slot = 0;

	pthread_mutex_lock(&pg->lock);
	in_slot = slots_find(&pg->sp, layer) != NULL;
	pthread_mutex_unlock(&pg->lock);
	if (in_slot)
		return 1;
	if (src_try_get(pg, layer, &ref, NULL) != 1)
		return 0;   /* an updated layer that fails to come back: the acquire reports */
	pthread_mutex_lock(&pg->lock);
	if (slots_find(&pg->sp, layer)) {
		in_slot = 1;
	} else if (!pg->closing) {
		struct slot *s = prefetch_victim(pg, layer, dist);
		/* A failed early copy is dropped quietly: the acquire that
		 * needs the layer retries and reports. */
		if (s && slots_fill(&pg->sp, s, pg->pk, layer, &ref, 1, NULL) == 0) {
			src_fix_view(pg, s, &ref);
			used = in_slot = 1;
			pg->hinted[layer] = 0;
		}
	}
	pthread_mutex_unlock(&pg->lock);
	if (!used)
		src_put(pg, &ref);
	return in_slot;
}

/* Copy `layer` into a slot ahead of need if the host tier holds it and the
 * admission rule allows.  Returns 1 when the layer is (now) in a slot, 0
 * when the host tier does not have it yet or no slot may be taken. */
static int early_fill(struct wsp_pager_s *pg, uint32_t layer, uint64_t dist)
{
	pager_holder_enter(pg);
	int in_slot = fill_early(pg, layer, dist);
	pager_holder_leave(pg);
	return in_slot;
}

void pager_prefetch_ahead(struct wsp_pager_s *pg)
{
	uint32_t next[PAGER_MAX_AHEAD];
	uint64_t dist[PAGER_MAX_AHEAD];
	unsigned n = predictor_next(pg->pred, next, WSP_MIN(pg->host_ahead, PAGER_MAX_AHEAD));
	/* Admission compares the incoming layer with the slots' occupants, so
	 * both sides must use the predictor's own (probability-scaled) distance,
	 * not the position in this list. */
	predictor_distances(pg->pred, next, dist, n);
	for (unsigned i = 0; i < n; i++) {
		if (pg->on_demand[next[i]] || readahead_skip(pg->ra, next[i]))
			continue;   /* read only when acquired or hinted */
		if (i < pg->gpu_ahead && early_fill(pg, next[i], dist[i]))
			continue;
		if (src_updated(pg, next[i]))
			continue;   /* in the write-back room: nothing to read */
		/* Not in the host tier yet: on_ready copies it up when it lands. */
		int rc = hcache_request(pg->hc, next[i], 1);
		if (rc == -ENOSPC)
			break;   /* the rest are needed even later */
		if (rc == 1)
			readahead_started(pg->ra, next[i]);
	}
}

void pager_on_unused(void *ctx, uint32_t layer)
{
	struct wsp_pager_s *pg = ctx;
	readahead_unused(pg->ra, layer);
}

void pager_on_ready(void *ctx, uint32_t layer, int status)
{
	struct wsp_pager_s *pg = ctx;
	uint32_t n = pg->pk->m.hdr->n_layers;
	if (status < 0 || layer >= n)
		return;
	pthread_mutex_lock(&pg->lock);
	if (!pg->closing && !pg->is_landed[layer]) {
		pg->landed[(pg->landed_head + pg->n_landed) % n] = layer;
		pg->n_landed++;
		pg->is_landed[layer] = 1;
		pthread_cond_signal(&pg->landed_cv);
	}
	pthread_mutex_unlock(&pg->lock);
}

void *pager_landed_main(void *arg)
{
	struct wsp_pager_s *pg = arg;
	uint32_t n = pg->pk->m.hdr->n_layers;
	for (;;) {
		pthread_mutex_lock(&pg->lock);
		while (!pg->n_landed && !pg->closing)
			pthread_cond_wait(&pg->landed_cv, &pg->lock);
		if (pg->closing) {
			pthread_mutex_unlock(&pg->lock);
			return NULL;
		}
		uint32_t layer = pg->landed[pg->landed_head];
		pg->landed_head = (pg->landed_head + 1) % n;
		pg->n_landed--;
		pg->is_landed[layer] = 0;
		int hinted = pg->hinted[layer];
		pthread_mutex_unlock(&pg->lock);

		uint64_t dist = predictor_distance(pg->pred, layer);
		if (hinted || (!(pg->opt.flags & WSP_OPEN_NO_PREFETCH) && !pg->on_demand[layer] &&
			       dist <= pg->gpu_ahead))
			early_fill(pg, layer, dist);
	}
}

/* Move `layer` up the tiers as needed in `dist` acquires; `certain`: the
 * caller knows it comes (a demand request for the host tier, which evicts
 * what the policy picks), else a prefetch that the admission rule may
 * refuse. */
static void hint(struct wsp_pager_s *pg, uint32_t layer, uint64_t dist, int certain)
{
	if (early_fill(pg, layer, dist) || src_updated(pg, layer))
		return;   /* in a slot, or in the write-back room: nothing to read */
	pthread_mutex_lock(&pg->lock);
	pg->hinted[layer] = 1;   /* taken into a slot when it lands (pager_landed_main) */
	pthread_mutex_unlock(&pg->lock);
	(void)hcache_request(pg->hc, layer, !certain);   /* a full tier drops the hint */
	/* It may have landed between the two calls, before the hint was seen. */
	if (hcache_contains(pg->hc, layer))
		early_fill(pg, layer, dist);
}

int wsp_prefetch(wsp_pager *pg, uint32_t layer)
{
	struct wspi_err err;
	if (!pg)
		return -EINVAL;
	if (pg->group) {
		struct wsp_pager_s *m;
		int rg = pgroup_member(pg, layer, &m);
		return rg < 0 ? rg : pgroup_pass(pg, m, wsp_prefetch(m, layer));
	}
	if (layer >= pg->pk->m.hdr->n_layers) {
		wspi_err_init(&err);
		return pager_result(pg, &err, pager_bad_layer(pg, layer, &err));
	}
	hint(pg, layer, predictor_distance(pg->pred, layer), 0);
	return 0;
}

int wsp_provide(wsp_pager *pg, uint32_t layer, const void *stored, uint64_t len)
{
	struct wspi_err err;
	if (!pg || !stored)
		return -EINVAL;
	if (pg->group) {
		struct wsp_pager_s *m;
		int rg = pgroup_member(pg, layer, &m);
		return rg < 0 ? rg : pgroup_pass(pg, m, wsp_provide(m, layer, stored, len));
	}
	wspi_err_init(&err);
	if (layer >= pg->pk->m.hdr->n_layers)
		return pager_result(pg, &err, pager_bad_layer(pg, layer, &err));
	if (len != pg->pk->layers[layer].stored_bytes)
		return pager_result(pg, &err, WSP_ERR(&err, -EINVAL, "wsp_provide: layer %u (%s) "
						      "stores %llu bytes, not %llu", layer,
						      pg->pk->layers[layer].name,
						      (unsigned long long)pg->pk->layers[layer].stored_bytes,
						      (unsigned long long)len));
	int rc = hcache_provide(pg->hc, layer, stored);
	if (rc < 0)
		return pager_result(pg, &err, WSP_ERR(&err, rc, "wsp_provide: layer %u: %s", layer,
						      wsp_strerror(rc)));
	wspi_err_destroy(&err);
	if (rc == 1)   /* needed: on its way up now */
		hint(pg, layer, predictor_distance(pg->pred, layer), 1);
	return rc;
}

int wsp_hint_next(wsp_pager *pg, const uint32_t *layers, size_t n)
{
	struct wspi_err err;
	if (!pg || (!layers && n))
		return -EINVAL;
	if (pg->group)
		return pgroup_hint_next(pg, layers, n);
	for (size_t i = 0; i < n; i++)
		if (layers[i] >= pg->pk->m.hdr->n_layers) {
			wspi_err_init(&err);
			return pager_result(pg, &err, pager_bad_layer(pg, layers[i], &err));
		}
	/* Each as needed at its place in the list: the admission rule then
	 * weighs it against the slots' and the host tier's occupants. */
	for (size_t i = 0; i < n; i++)
		hint(pg, layers[i], i + 1, 1);
	return 0;
}
