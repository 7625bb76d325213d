/*
 * Reading one layer synchronously: pread its stored region, decode every
 * chunk into the decoded image, zero the alignment padding and check each
 * tensor's checksum.  Shared by wsp_pack_read_layer and wsp_pack_verify.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/fdio.h"
#include "common/util.h"
#include "pack/fsutil.h"
#include "pack/pack.h"

int pack_read_stored(struct wsp_pack_s *pk, uint32_t li, void *stored, struct wspi_err *err)
{
	const struct wspi_manifest *m = &pk->m;
	const struct wspm_layer *l = &m->layers[li];
	char path[PATH_MAX + 32];
	uint64_t got = 0;
	int fd, rc;

	fd = pack_shard_fd(pk, l->shard, err);
	if (fd < 0)
		return fd;
	rc = fd_read_at(fd, stored, l->stored_bytes, l->offset, &got);
	if (rc < 0) {
		pack_shard_path(pk, l->shard, path, sizeof(path));
		return WSP_ERR(err, rc, "%s: layer %u (%s): %s reading [%llu, +%llu): %s", path, li,
			       wspm_str(m, l->name_off), rc == WSP_EFORMAT ? "short read" : "error",
			       (unsigned long long)l->offset, (unsigned long long)l->stored_bytes,
			       rc == WSP_EFORMAT ? "file truncated" : strerror(-rc));
	}
	return 0;
}

int pack_load_layer(struct wsp_pack_s *pk, uint32_t li, struct chunk_decoder *dec, void *stored,
		    void *dst, struct wspi_err *err)
{
	const struct wspi_manifest *m = &pk->m;
	const struct wspm_layer *l = &m->layers[li];
	const char *lname = wspm_str(m, l->name_off);
	char path[PATH_MAX + 32];
	uint64_t pos = 0;
	int rc;

	pack_shard_path(pk, l->shard, path, sizeof(path));
	rc = pack_read_stored(pk, li, stored, err);
	if (rc < 0)
		return rc;
	for (uint32_t k = 0; k < l->n_tensors; k++) {
		const struct wspm_tensor *t = &m->tensors[l->first_tensor + k];
		char *out = (char *)dst + t->layer_offset;
		uint64_t done = 0;

		/* padding before this tensor: the decoded image is deterministic */
		memset((char *)dst + pos, 0, t->layer_offset - pos);
		for (uint64_t c = 0; c < t->n_chunks; c++) {
			const struct wspm_chunk *ch = &m->chunks[t->first_chunk + c];
			struct wspi_span span = { out + done, ch->raw_bytes };
			rc = chunk_decode(dec, ch, t->dtype, (const char *)stored + (ch->offset - l->offset),
					  &span, 1, err);
			if (rc < 0) {
				wspi_err_prefix(err, "%s: layer %u (%s), tensor %s, chunk %llu at offset %llu",
					       path, li, lname, wspm_str(m, t->name_off),
					       (unsigned long long)c, (unsigned long long)ch->offset);
				return rc;
			}
			done += ch->raw_bytes;
		}
		if (wsp_checksum64(out, t->raw_bytes) != t->checksum)
			return WSP_ERR(err, WSP_ECHECKSUM,
				       "%s: layer %u (%s), tensor %s: checksum of the decoded tensor differs",
				       path, li, lname, wspm_str(m, t->name_off));
		pos = t->layer_offset + t->raw_bytes;
	}
	memset((char *)dst + pos, 0, l->raw_bytes - pos);
	return 0;
}

int wsp_pack_read_layer(wsp_pack *pk, uint32_t layer, void *dst)
{
	int rc;

	if (!pk || !dst)
		return -EINVAL;
	if (layer >= pk->m.hdr->n_layers)
		return WSP_ERR(&pk->err, WSP_ENOTFOUND, "%s: no layer %u (the pack has %u)", pk->dir,
			       layer, pk->m.hdr->n_layers);
	if (!pk->dec) {
		rc = chunk_decoder_create(pk->max_chunk_raw ? pk->max_chunk_raw : 1, &pk->dec);
		if (rc < 0)
			return WSP_ERR(&pk->err, rc, "cannot create a chunk decoder");
	}
	if (!pk->rbuf && pk->max_layer_stored) {
		pk->rbuf = malloc(pk->max_layer_stored);
		if (!pk->rbuf)
			return WSP_ERR(&pk->err, -ENOMEM, "out of memory for a %llu-byte read buffer",
				       (unsigned long long)pk->max_layer_stored);
	}
	return pack_load_layer(pk, layer, pk->dec, pk->rbuf, dst, &pk->err);
}
