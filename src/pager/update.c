/*
 * wsp_update: new values for a layer (an optimizer step), kept in the
 * write-back room as an updated layer; the next acquire copies from there.
 */
#include <errno.h>

#include "common/util.h"
#include "pager/pager.h"
#include "writeback/fill.h"

/* wsp_options.updated_bytes, or its default: a quarter of the host cache,
 * and room for two of the largest layer (one being read, one written). */
static uint64_t updated_budget(const struct wsp_pager_s *pg)
{
	uint64_t largest = 1;
	if (pg->opt.updated_bytes)
		return pg->opt.updated_bytes;
	for (uint32_t l = 0; l < pg->pk->m.hdr->n_layers; l++)
		if (pg->pk->layers[l].raw_bytes > largest)
			largest = pg->pk->layers[l].raw_bytes;
	uint64_t two = 2 * wspi_align_up(largest, 4096);
	return pg->opt.host_cache_bytes / 4 > two ? pg->opt.host_cache_bytes / 4 : two;
}

/* The updated-layers room, made at the first update (under pg->lock). */
static struct dirty *room(struct wsp_pager_s *pg, struct wspi_err *err, int *rc)
{
	struct dirty_config cfg = {
		.budget = updated_budget(pg), .dir = pg->opt.overflow_dir,
		.log = pager_notice, .log_ctx = pg,
	};
	pthread_mutex_lock(&pg->lock);
	struct dirty *dt = pg->dirty;
	if (!dt && (*rc = dirty_create(pg->dev, pg->pk, &cfg, &dt, err)) == 0)
		__atomic_store_n(&pg->dirty, dt, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pg->lock);
	return dt;
}

/* Drop the slot copy of `layer`: its bytes are about to change. */
static int forget_slot(struct wsp_pager_s *pg, uint32_t layer, struct wspi_err *err)
{
	pthread_mutex_lock(&pg->lock);
	int rc = slots_forget(&pg->sp, layer);
	pthread_mutex_unlock(&pg->lock);
	if (rc == -EBUSY)
		return WSP_ERR(err, WSP_ESTATE, "update of layer %u (%s): it is acquired; release it "
			       "first", layer, pg->pk->layers[layer].name);
	return 0;
}

/* wsp_update and wsp_update_f32 (from_f32: values are fp32, narrowed). */
static int update(wsp_pager *pg, uint32_t layer, const void *const *values, int from_f32,
		  const char *call)
{
	struct wspi_err err;
	int rc = 0;
	if (!pg)
		return -EINVAL;
	if (pg->group)
		return pgroup_refuse(pg, call);
	wspi_err_init(&err);
	if (!values)
		rc = WSP_ERR(&err, -EINVAL, "%s: values is NULL", call);
	else if (layer >= pg->pk->m.hdr->n_layers)
		rc = WSP_ERR(&err, WSP_ENOTFOUND, "%s: no layer %u (the pack has %u)", pg->pk->dir,
			     layer, pg->pk->m.hdr->n_layers);
	for (uint32_t i = 0; rc == 0 && from_f32 && i < pg->pk->layers[layer].n_tensors; i++) {
		const struct wsp_tensor *t = &pg->pk->layers[layer].tensors[i];
		if (values[i] && !wb_narrow_ok(t->dtype))
			rc = WSP_ERR(&err, -EINVAL, "%s: tensor %s is %s: fp32 values narrow to F32 "
				     "and BF16 tensors only (convert it and use wsp_update)", call,
				     t->name, wsp_dtype_name(t->dtype));
	}
	struct dirty *dt = rc == 0 ? room(pg, &err, &rc) : NULL;
	/* Copies that are done let go of the layer's buffer, which can then
	 * take the new bytes in place: no new buffer to allocate and pin (and
	 * none to spill for room) at every optimizer step. */
	if (rc == 0)
		pager_reap(pg, 0);
	if (rc == 0)
		rc = forget_slot(pg, layer, &err);
	if (rc == 0) {
		pthread_mutex_lock(&pg->save_lock);
		rc = dirty_update(dt, layer, values, from_f32, &err);
		pthread_mutex_unlock(&pg->save_lock);
		if (rc < 0)
			wspi_err_prefix(&err, "update of layer %u (%s)", layer, pg->pk->layers[layer].name);
	}
	/* An early fill may have copied the old bytes meanwhile. */
	if (rc == 0)
		rc = forget_slot(pg, layer, &err);
	return pager_result(pg, &err, rc);
}

int wsp_update(wsp_pager *pg, uint32_t layer, const void *const *values)
{
	return update(pg, layer, values, 0, "wsp_update");
}

int wsp_update_f32(wsp_pager *pg, uint32_t layer, const float *const *values)
{
	return update(pg, layer, (const void *const *)values, 1, "wsp_update_f32");
}
