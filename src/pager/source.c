/*
 * Where a layer's bytes come from: an updated layer's buffer in the
 * write-back room when training has changed it, else the pack's (the host
 * cache for a slot, the pack itself for a save).  The slot code copies from
 * either the same way (a host reference of pages), the save writes from
 * either the same way (pieces); this is the one place that knows there are
 * two.
 */
#include "pager/pager.h"

/* Set once, by the first wsp_update, and kept until close. */
static struct dirty *room(struct wsp_pager_s *pg)
{
	return __atomic_load_n(&pg->dirty, __ATOMIC_ACQUIRE);
}

int src_try_get(struct wsp_pager_s *pg, uint32_t layer, struct hcache_ref *ref,
		struct wspi_err *err)
{
	struct dirty *dt = room(pg);
	int rc = dt ? dirty_get(dt, layer, ref, err) : 0;
	if (rc != 0)      /* an updated layer, or one that cannot be read back */
		return rc;
	return hcache_try_get(pg->hc, layer, ref);
}

int src_updated(struct wsp_pager_s *pg, uint32_t layer)
{
	struct dirty *dt = room(pg);
	return dt && dirty_has(dt, layer);
}

void src_put(struct wsp_pager_s *pg, struct hcache_ref *ref)
{
	struct dirty *dt = room(pg);
	if (dt && dirty_put(dt, ref))
		return;
	hcache_put(pg->hc, ref);
}

int src_stream(struct wsp_pager_s *pg, uint32_t layer, struct chunk_stream *cs,
	       pack_piece_fn piece, void *ctx, struct wspi_err *err)
{
	struct dirty *dt = room(pg);
	int rc = dt ? dirty_stream(dt, layer, piece, ctx, err) : 0;
	if (rc != 0)      /* handed over from the store, or failed */
		return rc < 0 ? rc : 0;
	return pack_stream_layer(pg->pk, layer, cs, piece, ctx, err);
}

void src_fix_view(struct wsp_pager_s *pg, struct slot *s, const struct hcache_ref *ref)
{
	struct dirty *dt = room(pg);
	/* An updated layer's view carries its new checksums. */
	if (dt && ref->pages && dirty_owns(dt, ref))
		for (uint32_t k = 0; k < s->view.n_tensors; k++)
			s->tensors[k].checksum = dirty_checksum(ref, k);
}
