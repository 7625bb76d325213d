/*
 * wsp_update: new values for a layer (an optimizer step), kept in the
 * write-back room as an updated layer; the next acquire copies from there.
 */
#include <errno.h>

#include "pager/pager.h"

/* The updated-layers room, made at the first update (under pg->lock). */
static struct dirty *room(struct wsp_pager_s *pg, struct wsp_err *err, int *rc)
{
	pthread_mutex_lock(&pg->lock);
	struct dirty *dt = pg->dirty;
	if (!dt && (*rc = dirty_create(pg->dev, pg->pk, &dt, err)) == 0)
		__atomic_store_n(&pg->dirty, dt, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pg->lock);
	return dt;
}

/* Drop the slot copy of `layer`: its bytes are about to change. */
static int forget_slot(struct wsp_pager_s *pg, uint32_t layer, struct wsp_err *err)
{
	pthread_mutex_lock(&pg->lock);
	int rc = slots_forget(&pg->sp, layer);
	pthread_mutex_unlock(&pg->lock);
	if (rc == -EBUSY)
		return WSP_ERR(err, WSP_ESTATE, "update of layer %u (%s): it is acquired; release it "
			       "first", layer, pg->pk->layers[layer].name);
	return 0;
}

int wsp_update(wsp_pager *pg, uint32_t layer, const void *const *values)
{
	struct wsp_err err;
	int rc = 0;
	if (!pg)
		return -EINVAL;
	wsp_err_init(&err);
	if (!values)
		rc = WSP_ERR(&err, -EINVAL, "wsp_update: values is NULL");
	else if (layer >= pg->pk->m.hdr->n_layers)
		rc = WSP_ERR(&err, WSP_ENOTFOUND, "%s: no layer %u (the pack has %u)", pg->pk->dir,
			     layer, pg->pk->m.hdr->n_layers);
	struct dirty *dt = rc == 0 ? room(pg, &err, &rc) : NULL;
	if (rc == 0)
		rc = forget_slot(pg, layer, &err);
	if (rc == 0) {
		pthread_mutex_lock(&pg->save_lock);
		rc = dirty_update(dt, layer, values, &err);
		pthread_mutex_unlock(&pg->save_lock);
	}
	/* An early fill may have copied the old bytes meanwhile. */
	if (rc == 0)
		rc = forget_slot(pg, layer, &err);
	return pager_result(pg, &err, rc);
}
