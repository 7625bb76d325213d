/*
 * What the pager says: notices to the user's log (each kind once per
 * pager), and the detail of the calling thread's last failed call
 * (wsp_errmsg).  Every room of the pager reports through here; nothing
 * here calls back into them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pager/pager.h"

/* The detail of the calling thread's last failed call, and on which pager:
 * per thread, so that concurrent acquires never see each other's errors. */
static __thread struct {
	const struct wsp_pager_s *pg;
	char msg[WSP_ERRMSG_MAX];
} last_error;

void pager_notice(void *ctx, const char *msg)
{
	struct wsp_pager_s *pg = ctx;
	int fresh = 1;
	if (!pg->opt.log || !msg)
		return;
	/* Each kind of notice once per pager. */
	pthread_mutex_lock(&pg->log_lock);
	for (unsigned i = 0; i < pg->n_notices; i++)
		if (strcmp(pg->notices[i], msg) == 0)
			fresh = 0;
	if (fresh && pg->n_notices < PAGER_MAX_NOTICES) {
		char *copy = strdup(msg);
		if (copy)
			pg->notices[pg->n_notices++] = copy;
	}
	pthread_mutex_unlock(&pg->log_lock);
	if (fresh)
		pg->opt.log(pg->opt.log_ctx, msg);
}

int pager_result(struct wsp_pager_s *pg, struct wspi_err *err, int rc)
{
	if (rc < 0) {
		last_error.pg = pg;
		wspi_err_copy(err, last_error.msg, sizeof(last_error.msg));
		if (!last_error.msg[0])
			snprintf(last_error.msg, sizeof(last_error.msg), "%s", wsp_strerror(rc));
	}
	wspi_err_destroy(err);
	return rc;
}

int pgroup_pass(struct wsp_pager_s *pg, const struct wsp_pager_s *member, int rc)
{
	if (rc < 0) {
		if (last_error.pg != member)   /* refused before it said why */
			snprintf(last_error.msg, sizeof(last_error.msg), "%s", wsp_strerror(rc));
		last_error.pg = pg;
	}
	return rc;
}

const char *wsp_errmsg(wsp_pager *pg)
{
	if (!pg)
		return "no pager handle";
	return last_error.pg == pg ? last_error.msg : "";
}

void pager_forget_errors(const struct wsp_pager_s *pg)
{
	if (last_error.pg == pg)
		last_error.pg = NULL;
}

int pager_bad_layer(struct wsp_pager_s *pg, uint32_t layer, struct wspi_err *err)
{
	return WSP_ERR(err, WSP_ENOTFOUND, "%s: no layer %u (the pack has %u)", pg->pk->dir, layer,
		       pg->pk->m.hdr->n_layers);
}
