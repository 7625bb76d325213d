/*
 * The public gradient calls: argument checks and error detail here, the
 * work in the write-back room (src/writeback), made at the first push so
 * that inference never pays for it.
 */
#include <errno.h>
#include <string.h>

#include "pager/pager.h"

static int check_layer(struct wsp_pager_s *pg, uint32_t layer, int all_ok, struct wspi_err *err)
{
	if (layer == WSP_ALL_LAYERS && all_ok)
		return 0;
	if (layer >= pg->pk->m.hdr->n_layers)
		return WSP_ERR(err, WSP_ENOTFOUND, "%s: no layer %u (the pack has %u)", pg->pk->dir,
			       layer, pg->pk->m.hdr->n_layers);
	return 0;
}

/* The room, made on first use under the pager's lock (NULL when that fails). */
static struct wb *room(struct wsp_pager_s *pg, int make, struct wspi_err *err, int *rc)
{
	pthread_mutex_lock(&pg->lock);
	if (!pg->wb && make)
		*rc = wb_create(pg->dev, pg->pk, pg->opt.trace, pg->opt.trace_ctx, &pg->wb, err);
	struct wb *wb = pg->wb;
	pthread_mutex_unlock(&pg->lock);
	return wb;
}

int wsp_grad_push(wsp_pager *pg, uint32_t layer, const void *const *grads, void *stream)
{
	struct wspi_err err;
	int rc = 0;
	if (!pg)
		return -EINVAL;
	if (pg->group)
		return pgroup_refuse(pg, "wsp_grad_push");
	wspi_err_init(&err);
	if (!grads)
		rc = WSP_ERR(&err, -EINVAL, "wsp_grad_push: grads is NULL");
	if (rc == 0)
		rc = check_layer(pg, layer, 0, &err);
	struct wb *wb = rc == 0 ? room(pg, 1, &err, &rc) : NULL;
	if (rc == 0)
		rc = wb_push(wb, layer, grads, stream, &err);
	return pager_result(pg, &err, rc);
}

int wsp_grad_push_f32(wsp_pager *pg, uint32_t layer, uint32_t tensor, const void *grad,
		      void *stream)
{
	struct wspi_err err;
	int rc = 0;
	if (!pg)
		return -EINVAL;
	if (pg->group)
		return pgroup_refuse(pg, "wsp_grad_push_f32");
	wspi_err_init(&err);
	rc = check_layer(pg, layer, 0, &err);
	struct wb *wb = rc == 0 ? room(pg, 1, &err, &rc) : NULL;
	if (rc == 0)
		rc = wb_push_f32(wb, layer, tensor, grad, stream, &err);
	return pager_result(pg, &err, rc);
}

int wsp_grad_push_rows(wsp_pager *pg, uint32_t layer, uint32_t tensor, const int64_t *rows,
		       uint64_t n_rows, const void *values, void *stream)
{
	struct wspi_err err;
	int rc = 0;
	if (!pg)
		return -EINVAL;
	if (pg->group)
		return pgroup_refuse(pg, "wsp_grad_push_rows");
	wspi_err_init(&err);
	rc = check_layer(pg, layer, 0, &err);
	struct wb *wb = rc == 0 ? room(pg, 1, &err, &rc) : NULL;
	if (rc == 0)
		rc = wb_push_rows(wb, layer, tensor, rows, n_rows, values, stream, &err);
	return pager_result(pg, &err, rc);
}

/* A call on every push so far of `layer` (or WSP_ALL_LAYERS): `op` on the
 * room, or `none` when nothing was ever pushed (no room yet). */
static int on_pushes(wsp_pager *pg, uint32_t layer,
		     int (*op)(struct wb *, uint32_t, struct wspi_err *), int none)
{
	struct wspi_err err;
	if (!pg)
		return -EINVAL;
	wspi_err_init(&err);
	int rc = check_layer(pg, layer, 1, &err);
	struct wb *wb = rc == 0 ? room(pg, 0, &err, &rc) : NULL;
	if (rc == 0)
		rc = wb ? op(wb, layer, &err) : none;
	return pager_result(pg, &err, rc);
}

int wsp_grad_query(wsp_pager *pg, uint32_t layer)
{
	if (pg && pg->group)
		return pgroup_refuse(pg, "wsp_grad_query");
	return on_pushes(pg, layer, wb_query, 1);   /* nothing pushed: nothing pending */
}

int wsp_grad_wait(wsp_pager *pg, uint32_t layer)
{
	if (pg && pg->group)
		return pgroup_refuse(pg, "wsp_grad_wait");
	return on_pushes(pg, layer, wb_wait, 0);
}

int wsp_grad_get(wsp_pager *pg, uint32_t layer, struct wsp_grads *out)
{
	struct wspi_err err;
	int rc = 0;
	if (!pg || !out)
		return -EINVAL;
	if (pg->group)
		return pgroup_refuse(pg, "wsp_grad_get");
	wspi_err_init(&err);
	memset(out, 0, sizeof(*out));
	rc = check_layer(pg, layer, 0, &err);
	struct wb *wb = rc == 0 ? room(pg, 1, &err, &rc) : NULL;
	float *const *data = NULL;
	uint64_t pushes = 0;
	if (rc == 0)
		rc = wb_grads(wb, layer, &data, &pushes, &err);
	if (rc == 0) {
		out->layer = layer;
		out->n_tensors = pg->pk->layers[layer].n_tensors;
		out->data = data;
		out->pushes = pushes;
	}
	return pager_result(pg, &err, rc);
}

int wsp_grad_zero(wsp_pager *pg, uint32_t layer)
{
	if (pg && pg->group)
		return pgroup_refuse(pg, "wsp_grad_zero");
	return on_pushes(pg, layer, wb_zero, 0);
}
