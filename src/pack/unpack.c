/*
 * wsp_pack_unpack: write the original safetensors files back, byte for
 * byte: the 8-byte header length, the header text kept verbatim in the
 * manifest, and each tensor's bytes at its original position in the data
 * section.  Layers are decoded one at a time, so memory stays at one layer.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fdio.h"
#include "common/outguard.h"
#include "common/util.h"
#include "pack/fsutil.h"
#include "pack/pack.h"

#define INDEX_FILE "model.safetensors.index.json"

static int write_whole(struct wsp_pack_s *pk, const char *dir, const char *name, const void *buf,
		       uint64_t len)
{
	char path[PATH_MAX + 64];
	int fd, rc;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0)
		return WSP_ERR(&pk->err, -errno, "%s: %s", path, strerror(errno));
	rc = fd_write_at(fd, buf, len, 0);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc < 0 ? WSP_ERR(&pk->err, rc, "%s: %s", path, strerror(-rc)) : 0;
}

/* Create each source file with its header and a data section of the right
 * size; tensors are written into it afterwards. */
static int create_sources(struct wsp_pack_s *pk, const char *tmp, int *fds)
{
	const struct wspi_manifest *m = &pk->m;

	for (uint32_t i = 0; i < m->hdr->n_sources; i++) {
		const struct wspm_source *s = &m->sources[i];
		const char *name = wspm_str(m, s->name_off);
		char path[PATH_MAX + 64];
		uint64_t len = s->header_len, size;
		int rc;

		snprintf(path, sizeof(path), "%s/%s", tmp, name);
		fds[i] = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fds[i] < 0)
			return WSP_ERR(&pk->err, -errno, "%s: %s", path, strerror(errno));
		if (ckd_add(&size, 8 + len, s->data_bytes) || size > (uint64_t)INT64_MAX)
			return WSP_ERR(&pk->err, WSP_ETOOBIG, "%s: size overflows", path);
		rc = fd_write_at(fds[i], &len, 8, 0);   /* little-endian host */
		if (rc == 0)
			rc = fd_write_at(fds[i], m->blobs + s->header_off, len, 8);
		if (rc == 0 && ftruncate(fds[i], (off_t)size) < 0)
			rc = -errno;
		if (rc < 0)
			return WSP_ERR(&pk->err, rc, "%s: %s", path, strerror(-rc));
	}
	return 0;
}

/* The default layer source: decode it from the pack. */
static int load_from_pack(void *ctx, struct wsp_pack_s *pk, uint32_t li, void *dst)
{
	(void)ctx;
	return pack_load_layer(pk, li, pk->dec, pk->rbuf, dst, &pk->err);
}

static int write_tensors(struct wsp_pack_s *pk, const char *tmp, const int *fds, void *buf,
			 pack_layer_fn load, void *lctx, wsp_progress_fn progress, void *ctx)
{
	const struct wspi_manifest *m = &pk->m;
	uint64_t done = 0, total = 0;

	for (uint32_t li = 0; li < m->hdr->n_layers; li++)
		total += m->layers[li].raw_bytes;
	for (uint32_t li = 0; li < m->hdr->n_layers; li++) {
		const struct wspm_layer *l = &m->layers[li];
		int rc = load(lctx, pk, li, buf);
		if (rc < 0)
			return rc;
		for (uint32_t k = 0; k < l->n_tensors; k++) {
			const struct wspm_tensor *t = &m->tensors[l->first_tensor + k];
			if (t->source == WSPM_NO_SOURCE || t->raw_bytes == 0)
				continue;
			const struct wspm_source *s = &m->sources[t->source];
			rc = fd_write_at(fds[t->source], (char *)buf + t->layer_offset,
					      t->raw_bytes, 8 + s->header_len + t->source_offset);
			if (rc < 0)
				return WSP_ERR(&pk->err, rc, "%s/%s: write of tensor %s: %s", tmp,
					       wspm_str(m, s->name_off), wspm_str(m, t->name_off),
					       strerror(-rc));
		}
		done += l->raw_bytes;
		if (progress && progress(ctx, done, total))
			return WSP_ERR(&pk->err, -ECANCELED, "unpack cancelled");
	}
	return 0;
}

/* The safetensors files and index into the existing directory `dir`. */
static int fill_dir(struct wsp_pack_s *pk, const char *dir, int *fds, void *buf, pack_layer_fn load,
		    void *lctx, wsp_progress_fn progress, void *ctx)
{
	const struct wspi_manifest *m = &pk->m;
	int rc = create_sources(pk, dir, fds);
	if (rc == 0)
		rc = write_tensors(pk, dir, fds, buf, load, lctx, progress, ctx);
	for (uint32_t i = 0; i < m->hdr->n_sources; i++) {
		if (fds[i] < 0)
			continue;
		if (rc == 0 && fsync(fds[i]) < 0)
			rc = WSP_ERR(&pk->err, -errno, "%s/%s: fsync: %s", dir,
				     wspm_str(m, m->sources[i].name_off), strerror(errno));
		close(fds[i]);
		fds[i] = -1;
	}
	if (rc == 0 && (m->hdr->flags & WSPM_F_HAS_INDEX))
		rc = write_whole(pk, dir, INDEX_FILE, m->blobs + m->hdr->index_off, m->hdr->index_len);
	return rc;
}

/* Checks and buffers shared by wsp_pack_unpack and pack_unpack_into. */
static int unpack_prepare(struct wsp_pack_s *pk, void **buf, int **fds)
{
	const struct wspi_manifest *m = &pk->m;
	uint64_t max_raw = 0;
	if (m->hdr->n_sources == 0)
		return WSP_ERR(&pk->err, WSP_ESTATE, "%s: the pack was not made from safetensors files",
			       pk->dir);
	for (uint32_t i = 0; i < m->hdr->n_tensors; i++)
		if (m->tensors[i].source == WSPM_NO_SOURCE)
			return WSP_ERR(&pk->err, WSP_ESTATE, "%s: tensor %s has no source file",
				       pk->dir, wspm_str(m, m->tensors[i].name_off));
	for (uint32_t i = 0; i < m->hdr->n_layers; i++)
		max_raw = WSP_MAX(max_raw, m->layers[i].raw_bytes);
	*buf = malloc(max_raw ? max_raw : 1);
	*fds = malloc(m->hdr->n_sources * sizeof(**fds));
	if (!*buf || !*fds) {
		free(*buf);
		free(*fds);
		*buf = NULL;
		*fds = NULL;
		return WSP_ERR(&pk->err, -ENOMEM, "out of memory for a %llu-byte layer",
			       (unsigned long long)max_raw);
	}
	for (uint32_t i = 0; i < m->hdr->n_sources; i++)
		(*fds)[i] = -1;
	return 0;
}

int pack_unpack_into(struct wsp_pack_s *pk, const char *dir, pack_layer_fn load, void *lctx,
		     wsp_progress_fn progress, void *ctx)
{
	void *buf;
	int *fds;
	int rc = unpack_prepare(pk, &buf, &fds);
	if (rc == 0)
		rc = fill_dir(pk, dir, fds, buf, load, lctx, progress, ctx);
	free(buf);
	free(fds);
	return rc;
}

int wsp_pack_unpack(wsp_pack *pk, const char *out_dir, unsigned flags, wsp_progress_fn progress,
		    void *ctx)
{
	char *tmp = NULL, *out = NULL;
	int *fds = NULL, lock = -1, rc;
	void *buf = NULL;

	if (!pk || !out_dir || !*out_dir)
		return -EINVAL;
	if ((rc = unpack_prepare(pk, &buf, &fds)) < 0)
		return rc;
	out = strdup(out_dir);
	if (!out) {
		rc = WSP_ERR(&pk->err, -ENOMEM, "out of memory");
		goto done;
	}
	for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--)
		out[n - 1] = '\0';
	{
		const char *in = pk->dir;
		rc = out_check_inputs(out, &in, 1, &pk->err);
		if (rc == 0)
			rc = out_check_replaceable(out, !!(flags & WSP_UNPACK_FORCE), 0,
						   out_checkpoint_entry, NULL,
						   "a directory of safetensors files", &pk->err);
		if (rc < 0)
			goto done;
	}
	if (!pk->dec && (rc = chunk_decoder_create(pk->max_chunk_raw ? pk->max_chunk_raw : 1,
						   &pk->dec)) < 0) {
		WSP_ERR(&pk->err, rc, "cannot create a chunk decoder");
		goto done;
	}
	if (!pk->rbuf && pk->max_layer_stored && !(pk->rbuf = malloc(pk->max_layer_stored))) {
		rc = WSP_ERR(&pk->err, -ENOMEM, "out of memory");
		goto done;
	}
	/* The API has no log callback for unpack: removals go unreported. */
	pack_clean_stale_tmp(out, NULL, NULL);
	rc = pack_make_locked_tmpdir(out, &tmp, &lock, &pk->err);
	if (rc < 0)
		goto done;
	rc = fill_dir(pk, tmp, fds, buf, load_from_pack, NULL, progress, ctx);
	if (rc == 0)
		rc = pack_commit_locked_dir(tmp, out, !!(flags & WSP_UNPACK_FORCE), &pk->err);
	if (rc < 0)
		pack_rmtree(tmp);
	if (lock >= 0)
		close(lock);   /* after the removal, which it protects */
done:
	free(tmp);
	free(out);
	free(fds);
	free(buf);
	return rc;
}
