/*
 * wsp_save: a new pack from the pager's current layers (updated ones from
 * the write-back room, the others from the pack), written by the pack
 * writer straight from them: a feed thread hands the writer every layer in
 * pack order, a piece at a time, and the writer compresses and writes them
 * with the pack's own grouping, order and chunk size.  No checkpoint files
 * are written in between (the pack is read once and the new one written
 * once), and a pack needs no safetensors sources to be saved.  Memory stays
 * at a chunk of the pack or one updated layer, plus the writer's window.
 * The writer makes the output atomically (temporary directory, fsync,
 * rename); the open pack is never written.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/outguard.h"
#include "pack/fsutil.h"
#include "pack/writer.h"
#include "pager/pager.h"

struct save_feed {
	struct wsp_pager_s *pg;
	struct pack_writer *pw;
	struct chunk_stream cs;
	struct wspi_err err;       /* the feed's own; copied into the writer's */
	struct wspi_err *werr;     /* the writer's (the save's) */
};

/* A piece of manifest tensor t: the writer's tensor of the same index (they
 * are declared in manifest order). */
static int push_piece(void *ctx, const struct wspm_tensor *t, uint64_t off, const void *data,
		      uint64_t len)
{
	struct save_feed *f = ctx;
	return pack_writer_push(f->pw, (uint32_t)(t - f->pg->pk->m.tensors), off, data, len);
}

/* Every layer as it is now, in pack order: an updated layer from the
 * write-back room (its buffer, or the overflow file a few MiB at a time),
 * any other decoded from the pack a chunk at a time; both checked against
 * their checksums as they go. */
static int feed_layers(void *ctx, struct pack_writer *pw)
{
	(void)pw;
	struct save_feed *f = ctx;
	struct wsp_pack_s *pk = f->pg->pk;
	for (uint32_t li = 0; li < pk->m.hdr->n_layers; li++) {
		int rc = src_stream(f->pg, li, &f->cs, push_piece, f, &f->err);
		if (rc < 0) {
			if (f->err.code)   /* else the writer's own error stopped it */
				wspi_err_set_first(f->werr, rc, "%s", f->err.msg);
			return rc;
		}
	}
	return 0;
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

/* The pack's sources (each file's name, header and data size), index and
 * tensors, declared to the writer as the converter declared them. */
static int declare(struct pack_writer *pw, const struct wsp_pack_s *pk)
{
	const struct wspi_manifest *m = &pk->m;
	for (uint32_t i = 0; i < m->hdr->n_sources; i++) {
		const struct wspm_source *s = &m->sources[i];
		int rc = pack_writer_add_source(pw, wspm_str(m, s->name_off),
						(const char *)m->blobs + s->header_off, s->header_len,
						s->data_bytes);
		if (rc < 0)
			return rc;
	}
	if (m->hdr->flags & WSPM_F_HAS_INDEX)
		WSP_TRY(pack_writer_set_index(pw, (const char *)m->blobs + m->hdr->index_off,
					      m->hdr->index_len));
	for (uint32_t i = 0; i < m->hdr->n_tensors; i++) {
		const struct wspm_tensor *t = &m->tensors[i];
		WSP_TRY(pack_writer_add_tensor(pw, wspm_str(m, t->name_off), NULL, t->dtype, t->rank,
					       t->shape, NULL, t->raw_bytes, t->source,
					       t->source_offset, t->source_order));
	}
	return 0;
}

static int save(struct wsp_pager_s *pg, const char *out, unsigned flags, wsp_progress_fn progress,
		void *ctx, struct wspi_err *err)
{
	struct wsp_pack_s *pk = pg->pk;
	struct save_feed f = { .pg = pg, .werr = err };
	struct pack_writer *pw = NULL;
	const char *in = pk->dir;
	char base[4096 + 16];
	int rc;

	if ((rc = out_check_inputs(out, &in, 1, err)) < 0)
		return rc;   /* the open pack is never the output */
	if ((rc = pack_check_output(out, !!(flags & WSP_SAVE_FORCE), err)) < 0)
		return rc;   /* before any work, as the writer checks again */
	snprintf(base, sizeof(base), "%s.save", out);
	pack_clean_stale_tmp(base, NULL, NULL);   /* left by saves before 0.3, which converted files */
	const char **pairs = pack_grouping(pk);
	if (!pairs)
		return WSP_ERR(err, -ENOMEM, "save: out of memory");
	struct wsp_convert_options co;
	wsp_convert_options_init(&co);
	co.chunk_bytes = pk->m.hdr->chunk_bytes;
	co.flags = flags & WSP_SAVE_FORCE ? WSP_CONVERT_FORCE : 0;
	co.group_map = pairs;
	co.progress = progress;
	co.progress_ctx = ctx;
	wspi_err_init(&f.err);
	rc = chunk_stream_init(pk, &f.cs, err);
	if (rc == 0)
		rc = pack_writer_create(out, &co, &pw, err);
	f.pw = pw;
	if (rc == 0)
		rc = pack_writer_set_feed(pw, feed_layers, &f);
	if (rc == 0)
		rc = declare(pw, pk);
	if (rc == 0)
		rc = pack_writer_finish(pw);
	if (rc < 0)
		wspi_err_prefix(err, "save");
	pack_writer_free(pw);
	chunk_stream_free(&f.cs);
	wspi_err_destroy(&f.err);
	free(pairs);
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
