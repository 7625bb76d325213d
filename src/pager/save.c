/*
 * wsp_save: a new pack from the pager's current layers (updated ones from
 * the write-back room, the others from the pack).  The layers are written
 * out as the pack's safetensors files into a locked temporary directory
 * beside the output, one layer in memory at a time, and converted from
 * there with the pack's own grouping and order (a chunk of the pack or one
 * updated layer in memory at a time); the converter makes the
 * output atomically (temporary directory, fsync, rename).  The open pack is
 * never written; a temporary left by a killed save is removed by the next
 * save to the same output.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/outguard.h"
#include "pack/fsutil.h"
#include "pager/pager.h"

struct save_src {
	struct wsp_pager_s *pg;
	struct chunk_stream cs;
};

/* Layer li as it is now: an updated layer from the write-back room (its
 * buffer, or the overflow file a few MiB at a time), any other decoded from
 * the pack a chunk at a time. */
static int layer_now(void *ctx, struct wsp_pack_s *pk, uint32_t li, pack_piece_fn piece,
		     void *pctx)
{
	struct save_src *s = ctx;
	struct dirty *dt = __atomic_load_n(&s->pg->dirty, __ATOMIC_ACQUIRE);
	int rc = dt ? dirty_stream(dt, li, piece, pctx, &pk->err) : 0;
	if (rc != 0)
		return rc < 0 ? rc : 0;
	return pack_stream_layer(pk, li, &s->cs, piece, pctx, &pk->err);
}

/* {tensor, layer, ...} of the pack in its order: the same layers again. */
static const char **pack_grouping(const struct wsp_pack_s *pk)
{
	uint32_t n = pk->m.hdr->n_tensors;
	const char **pairs = calloc(2 * (size_t)n + 1, sizeof(*pairs));
	if (!pairs)
		return NULL;
	size_t k = 0;
	for (uint32_t l = 0; l < pk->m.hdr->n_layers; l++)
		for (uint32_t t = 0; t < pk->layers[l].n_tensors; t++) {
			pairs[k++] = pk->layers[l].tensors[t].name;
			pairs[k++] = pk->layers[l].name;
		}
	return pairs;
}

/* What the converter reads back from `tmp`: the directory when the pack
 * recorded an index (model.safetensors.index.json names its shards) or no
 * sources, else each source file by name, as it was converted (one
 * checkpoint file need not be called *.safetensors: `wspack generate`'s is
 * not).  Returns the count, *list (free it and its strings), or -ENOMEM. */
static int reread_inputs(const struct wsp_pack_s *pk, const char *tmp, char ***list)
{
	const struct wspi_manifest *m = &pk->m;
	uint32_t n = m->hdr->flags & WSPM_F_HAS_INDEX ? 0 : m->hdr->n_sources;
	char **l = calloc(n ? n : 1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		if (asprintf(&l[i], "%s/%s", tmp, wspm_str(m, m->sources[i].name_off)) < 0) {
			l[i] = NULL;
			for (uint32_t k = 0; k < i; k++)
				free(l[k]);
			free(l);
			return -ENOMEM;
		}
	if (n == 0 && !(l[0] = strdup(tmp))) {
		free(l);
		return -ENOMEM;
	}
	*list = l;
	return n ? (int)n : 1;
}

static int save(struct wsp_pager_s *pg, const char *out, unsigned flags, wsp_progress_fn progress,
		void *ctx, struct wspi_err *err)
{
	struct wsp_pack_s *pk = pg->pk;
	struct save_src src = { .pg = pg };
	char *tmp = NULL, base[4096 + 16];
	int lock = -1, rc;
	const char *in = pk->dir;

	if ((rc = out_check_inputs(out, &in, 1, err)) < 0)
		return rc;   /* the open pack is never the output */
	if ((rc = pack_check_output(out, !!(flags & WSP_SAVE_FORCE), err)) < 0)
		return rc;   /* before any work, as the converter checks again */
	snprintf(base, sizeof(base), "%s.save", out);
	pack_clean_stale_tmp(base, NULL, NULL);
	if ((rc = pack_make_locked_tmpdir(base, &tmp, &lock, err)) < 0)
		return rc;
	if ((rc = chunk_stream_init(pk, &src.cs, err)) < 0) {
		wspi_err_prefix(err, "save");
		goto done;
	}
	rc = pack_unpack_into(pk, tmp, layer_now, &src, progress, ctx);
	if (rc < 0) {
		wspi_err_set(err, rc, "save: %s", pk->err.msg);
		goto done;
	}
	const char **pairs = pack_grouping(pk);
	if (!pairs) {
		rc = WSP_ERR(err, -ENOMEM, "save: out of memory");
		goto done;
	}
	struct wsp_convert_options co;
	wsp_convert_options_init(&co);
	co.chunk_bytes = pk->m.hdr->chunk_bytes;
	co.flags = flags & WSP_SAVE_FORCE ? WSP_CONVERT_FORCE : 0;
	co.group_map = pairs;
	char msg[WSP_ERRMSG_MAX], **inputs = NULL;
	int n_in = reread_inputs(pk, tmp, &inputs);
	if (n_in < 0) {
		free(pairs);
		rc = WSP_ERR(err, n_in, "save: out of memory");
		goto done;
	}
	rc = wsp_convert((const char *const *)inputs, (size_t)n_in, out, &co, msg, sizeof(msg));
	for (int i = 0; i < n_in; i++)
		free(inputs[i]);
	free(inputs);
	free(pairs);
	if (rc < 0)
		wspi_err_set(err, rc, "save: %s", msg);
done:
	chunk_stream_free(&src.cs);
	pack_rmtree(tmp);
	free(tmp);
	if (lock >= 0)
		close(lock);   /* after the removal, which it protects */
	return rc;
}

int wsp_save(wsp_pager *pg, const char *out, unsigned flags, wsp_progress_fn progress, void *ctx)
{
	struct wspi_err err;
	int rc;
	if (!pg)
		return -EINVAL;
	if (pg->group)
		return pgroup_refuse(pg, "wsp_save");
	wspi_err_init(&err);
	if (!out || !*out) {
		rc = WSP_ERR(&err, -EINVAL, "wsp_save: no output path");
	} else {
		pthread_mutex_lock(&pg->save_lock);
		rc = save(pg, out, flags, progress, ctx, &err);
		pthread_mutex_unlock(&pg->save_lock);
	}
	return pager_result(pg, &err, rc);
}
