/*
 * Decoding a layer chunk by chunk: each chunk's stored bytes are read and
 * decoded into one chunk-sized buffer and handed on, and each tensor's
 * checksum accumulates across its chunks.  Memory is about three chunks
 * per thread (stored, decoded, the decoder's scratch) whatever a (possibly
 * forged) manifest says a layer holds; used by wsp_pack_verify,
 * wsp_pack_unpack and wsp_save.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/fdio.h"
#include "common/util.h"
#include "pack/pack.h"

int chunk_stream_init(struct wsp_pack_s *pk, struct chunk_stream *cs, struct wspi_err *err)
{
	cs->stored = malloc(pk->max_chunk_stored ? pk->max_chunk_stored : 1);
	cs->raw = malloc(pk->max_chunk_raw ? pk->max_chunk_raw : 1);
	int rc = cs->stored && cs->raw ?
		chunk_decoder_create(pk->max_chunk_raw ? pk->max_chunk_raw : 1, &cs->dec) : -ENOMEM;
	if (rc < 0) {
		chunk_stream_free(cs);
		return WSP_ERR(err, rc, "out of memory for chunks of %llu bytes",
			       (unsigned long long)pk->max_chunk_raw);
	}
	return 0;
}

void chunk_stream_free(struct chunk_stream *cs)
{
	chunk_decoder_free(cs->dec);
	free(cs->stored);
	free(cs->raw);
	cs->dec = NULL;
	cs->stored = cs->raw = NULL;
}

int pack_stream_layer(struct wsp_pack_s *pk, uint32_t li, struct chunk_stream *cs,
		      pack_piece_fn piece, void *pctx, struct wspi_err *err)
{
	const struct wspi_manifest *m = &pk->m;
	const struct wspm_layer *l = &m->layers[li];
	const char *lname = wspm_str(m, l->name_off);
	char path[PATH_MAX + 32];
	int fd = pack_shard_fd(pk, l->shard, err), rc;

	if (fd < 0)
		return fd;
	pack_shard_path(pk, l->shard, path, sizeof(path));
	for (uint32_t k = 0; k < l->n_tensors; k++) {
		const struct wspm_tensor *t = &m->tensors[l->first_tensor + k];
		struct wspi_ck ck = {0};
		uint64_t done = 0;

		for (uint64_t c = 0; c < t->n_chunks; c++) {
			const struct wspm_chunk *ch = &m->chunks[t->first_chunk + c];
			struct wspi_span span = { cs->raw, ch->raw_bytes };
			uint64_t got = 0;
			rc = fd_read_at(fd, cs->stored, ch->stored_bytes, ch->offset, &got);
			if (rc < 0)
				return WSP_ERR(err, rc, "%s: layer %u (%s), tensor %s, chunk %llu: %s "
					       "reading [%llu, +%llu): %s", path, li, lname,
					       wspm_str(m, t->name_off), (unsigned long long)c,
					       rc == WSP_EFORMAT ? "short read" : "error",
					       (unsigned long long)ch->offset,
					       (unsigned long long)ch->stored_bytes,
					       rc == WSP_EFORMAT ? "file truncated" : strerror(-rc));
			rc = chunk_decode(cs->dec, ch, t->dtype, cs->stored, &span, 1, err);
			if (rc < 0) {
				wspi_err_prefix(err, "%s: layer %u (%s), tensor %s, chunk %llu at offset "
						"%llu", path, li, lname, wspm_str(m, t->name_off),
						(unsigned long long)c, (unsigned long long)ch->offset);
				return rc;
			}
			wspi_ck_add(&ck, cs->raw, ch->raw_bytes);
			if (piece && (rc = piece(pctx, t, done, cs->raw, ch->raw_bytes)) < 0)
				return rc;
			done += ch->raw_bytes;
		}
		if (wspi_ck_end(&ck) != t->checksum)
			return WSP_ERR(err, WSP_ECHECKSUM,
				       "%s: layer %u (%s), tensor %s: checksum of the decoded tensor differs",
				       path, li, lname, wspm_str(m, t->name_off));
	}
	return 0;
}
