/*
 * wsp_pack_unpack: write the original safetensors files back, byte for
 * byte: the 8-byte header length, the header text kept verbatim in the
 * manifest, and each tensor's bytes at its original position in the data
 * section.  Layers are decoded a chunk at a time (pack_stream_layer), so
 * memory stays at one chunk whatever a layer holds.
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

/* Where write_tensors puts a piece of a tensor: its file, at its place. */
struct sink {
	struct wsp_pack_s *pk;
	const char *dir;
	const int *fds;
};

static int write_piece(void *ctx, const struct wspm_tensor *t, uint64_t off, const void *data,
		       uint64_t len)
{
	struct sink *k = ctx;
	const struct wspi_manifest *m = &k->pk->m;
	if (t->source == WSPM_NO_SOURCE || len == 0)
		return 0;
	const struct wspm_source *s = &m->sources[t->source];
	int rc = fd_write_at(k->fds[t->source], data, len, 8 + s->header_len + t->source_offset + off);
	if (rc < 0)
		return WSP_ERR(&k->pk->err, rc, "%s/%s: write of tensor %s: %s", k->dir,
			       wspm_str(m, s->name_off), wspm_str(m, t->name_off), strerror(-rc));
	return 0;
}

static int write_tensors(struct wsp_pack_s *pk, const char *tmp, const int *fds,
			 wsp_progress_fn progress, void *ctx)
{
	const struct wspi_manifest *m = &pk->m;
	struct sink sink = { pk, tmp, fds };
	struct chunk_stream cs = {0};
	uint64_t done = 0, total = 0;
	int rc = chunk_stream_init(pk, &cs, &pk->err);

	for (uint32_t li = 0; li < m->hdr->n_layers; li++)
		total += m->layers[li].raw_bytes;
	for (uint32_t li = 0; li < m->hdr->n_layers && rc == 0; li++) {
		rc = pack_stream_layer(pk, li, &cs, write_piece, &sink, &pk->err);
		done += m->layers[li].raw_bytes;
		if (rc == 0 && progress && progress(ctx, done, total))
			rc = WSP_ERR(&pk->err, -ECANCELED, "unpack cancelled");
	}
	chunk_stream_free(&cs);
	return rc;
}

/* The safetensors files and index into the existing directory `dir`. */
static int fill_dir(struct wsp_pack_s *pk, const char *dir, int *fds, wsp_progress_fn progress,
		    void *ctx)
{
	const struct wspi_manifest *m = &pk->m;
	int rc = create_sources(pk, dir, fds);
	if (rc == 0)
		rc = write_tensors(pk, dir, fds, progress, ctx);
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

/* What unpacking needs: sources for every tensor, and their descriptors. */
static int unpack_prepare(struct wsp_pack_s *pk, int **fds)
{
	const struct wspi_manifest *m = &pk->m;
	if (m->hdr->n_sources == 0)
		return WSP_ERR(&pk->err, WSP_ESTATE, "%s: the pack was not made from safetensors files",
			       pk->dir);
	for (uint32_t i = 0; i < m->hdr->n_tensors; i++)
		if (m->tensors[i].source == WSPM_NO_SOURCE)
			return WSP_ERR(&pk->err, WSP_ESTATE, "%s: tensor %s has no source file",
				       pk->dir, wspm_str(m, m->tensors[i].name_off));
	*fds = malloc(m->hdr->n_sources * sizeof(**fds));
	if (!*fds)
		return WSP_ERR(&pk->err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < m->hdr->n_sources; i++)
		(*fds)[i] = -1;
	return 0;
}

int wsp_pack_unpack(wsp_pack *pk, const char *out_dir, unsigned flags, wsp_progress_fn progress,
		    void *ctx)
{
	char *tmp = NULL, *out = NULL;
	int *fds = NULL, lock = -1, rc;

	if (!pk || !out_dir || !*out_dir)
		return -EINVAL;
	if ((rc = unpack_prepare(pk, &fds)) < 0)
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
	/* The API has no log callback for unpack: removals go unreported. */
	pack_clean_stale_tmp(out, NULL, NULL);
	rc = pack_make_locked_tmpdir(out, &tmp, &lock, &pk->err);
	if (rc < 0)
		goto done;
	rc = fill_dir(pk, tmp, fds, progress, ctx);
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
	return rc;
}
