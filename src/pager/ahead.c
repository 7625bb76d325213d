/*
 * Moving layers up the tiers ahead of need: after each acquire the
 * predicted successors (pager_prefetch_ahead), and what callers name
 * (wsp_prefetch, wsp_hint_next, wsp_provide).  The first few go into
 * slots when the host tier has them (an early fill, under the admission rule);
 * the rest are requested from the host tier.  Early fills are posted to
 * the pager's thread (copier.c), which alone copies into slots; so is a
 * layer the host tier finished loading (pager_on_ready), which the thread
 * copies up if it was hinted or is predicted near.  wsp_provide_device's
 * bytes are on the device already: the thread fills a slot from them at
 * once, as for a demand.
 * Locking as in acquire.c: pg->lock is never held across host-cache calls.
 */
#include <errno.h>

#include "common/util.h"
#include "gpu/unpack.h"
#include "pager/pager.h"

/* Ask the pager's thread for an early fill of `layer` if its bytes are at
 * hand (the host tier, or the updated-layer store).  1 when it is in a slot
 * or was posted, 0 when it must be read first. */
static int early_fill(struct wsp_pager_s *pg, uint32_t layer, uint64_t dist)
{
	pthread_mutex_lock(&pg->lock);
	int in_slot = slots_find(&pg->sp, layer) != NULL;
	pthread_mutex_unlock(&pg->lock);
	if (in_slot)
		return 1;
	if (!hcache_contains(pg->hc, layer) && !src_updated(pg, layer))
		return 0;
	pager_post(pg, layer, 1, dist);
	return 1;
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
	if (status >= 0 && layer < pg->pk->m.hdr->n_layers)
		pager_post(pg, layer, 0, 0);
}

/* Move `layer` up the tiers as needed in `dist` acquires; `certain`: the
 * caller knows it comes (a demand request for the host tier, which evicts
 * what the policy picks), else a prefetch that the admission rule may
 * refuse. */
static void hint(struct wsp_pager_s *pg, uint32_t layer, uint64_t dist, int certain)
{
	if (early_fill(pg, layer, dist))
		return;   /* in a slot or on its way there: nothing to read */
	pthread_mutex_lock(&pg->lock);
	pg->hinted[layer] = 1;   /* taken into a slot when it lands (copier.c) */
	pthread_mutex_unlock(&pg->lock);
	(void)hcache_request(pg->hc, layer, !certain);   /* a full tier drops the hint */
	/* It may have landed between the two calls, before the hint was seen. */
	if (hcache_contains(pg->hc, layer))
		pager_post(pg, layer, 1, dist);
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

int wsp_provide_device(wsp_pager *pg, uint32_t layer, const void *packed, uint64_t len,
		       void *stream)
{
	struct wspi_err err;
	if (!pg || (!packed && len))
		return -EINVAL;
	if (pg->group) {
		struct wsp_pager_s *m;
		int rg = pgroup_member(pg, layer, &m);
		return rg < 0 ? rg : pgroup_pass(pg, m, wsp_provide_device(m, layer, packed, len,
									   stream));
	}
	wspi_err_init(&err);
	if (layer >= pg->pk->m.hdr->n_layers)
		return pager_result(pg, &err, pager_bad_layer(pg, layer, &err));
	const char *name = pg->pk->layers[layer].name;
	if (!unpacker_fills_from_device(pg->sp.unpack, layer)) {
		WSP_ERR(&err, -ENOTSUP, "wsp_provide_device: layer %u (%s): this pager decodes "
			"nothing on its device (no GPU, no exponent-rANS chunk, or "
			"WSP_OPEN_HOST_DECODE)", layer, name);
		return pager_result(pg, &err, -ENOTSUP);
	}
	if (!packed) {   /* the question only */
		wspi_err_destroy(&err);
		return 1;
	}
	uint64_t want = unpacker_packed_bytes(pg->sp.unpack, layer);
	if (len != want) {
		WSP_ERR(&err, -EINVAL, "wsp_provide_device: layer %u (%s): its packed form has "
			"%llu bytes, not %llu", layer, name, (unsigned long long)want,
			(unsigned long long)len);
		return pager_result(pg, &err, -EINVAL);
	}
	if (src_updated(pg, layer)) {   /* training changed it: the pack's bytes are old */
		wspi_err_destroy(&err);
		return 0;
	}
	pthread_mutex_lock(&pg->lock);
	struct pager_demand d = { .layer = layer, .stream = stream, .packed_dev = packed,
				  .err = &err };
	pager_demand_wait(pg, &d);
	pthread_mutex_unlock(&pg->lock);
	if (d.rc < 0)
		return pager_result(pg, &err, d.rc);
	wspi_err_destroy(&err);
	return d.rc;
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
