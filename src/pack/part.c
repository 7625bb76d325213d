/*
 * One part of a layer's packed form (pack.h), for processes that read a
 * layer together and exchange the parts (wsp_pack_read_part).  The parts
 * split the layer where its chunks meet, so that each reader checks whole
 * chunks before anyone decodes them: on a GPU nothing checks them again.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/fdio.h"
#include "common/util.h"
#include "pack/chunk.h"
#include "pack/pack.h"

/* Where a part starts: its first chunk (an index into the layer's chunks
 * in file order), and that chunk's offsets in the stored and packed forms. */
struct cut {
	uint64_t chunk, stored, packed;
};

/* The chunk of the layer at index i in file order (tensors in pack order,
 * their chunks in order): the layer's chunks are contiguous in the table. */
static const struct wspm_chunk *layer_chunk(const struct wspi_manifest *m,
					    const struct wspm_layer *l, uint64_t i)
{
	return &m->chunks[m->tensors[l->first_tensor].first_chunk + i];
}

static uint64_t n_layer_chunks(const struct wspi_manifest *m, const struct wspm_layer *l)
{
	uint64_t n = 0;
	for (uint32_t t = l->first_tensor; t < l->first_tensor + l->n_tensors; t++)
		n += m->tensors[t].n_chunks;
	return n;
}

/* Where part k of `parts` starts: after the first chunk whose stored bytes
 * reach k / parts of the layer's (the whole layer's end for k = parts). */
static struct cut cut_at(const struct wspi_manifest *m, const struct wspm_layer *l, unsigned k,
			 unsigned parts)
{
	struct cut c = { 0, 0, 0 };
	uint64_t want = (uint64_t)((unsigned __int128)l->stored_bytes * k / parts);
	uint64_t n = n_layer_chunks(m, l);
	if (k == 0)
		return c;
	while (c.chunk < n) {
		const struct wspm_chunk *ch = layer_chunk(m, l, c.chunk++);
		c.stored += ch->stored_bytes;
		c.packed = pack_packed_next(c.packed, ch);
		if (c.stored >= want && k < parts)
			break;
	}
	return c;
}

/* Scratch for chunks checked by decoding, made on first need. */
struct checker {
	struct wsp_pack_s *pk;
	struct chunk_decoder *dec;
	void *stored, *raw;
};

static int checker_ready(struct checker *ck, struct wspi_err *err)
{
	uint64_t raw = ck->pk->max_chunk_raw ? ck->pk->max_chunk_raw : 1;
	uint64_t stored = ck->pk->max_chunk_stored ? ck->pk->max_chunk_stored : 1;
	if (ck->dec)
		return 0;
	int rc = chunk_decoder_create(raw, &ck->dec);
	if (rc < 0)
		return WSP_ERR(err, rc, "cannot create a chunk decoder");
	if (!(ck->stored = malloc(stored)) || !(ck->raw = malloc(raw)))
		return WSP_ERR(err, -ENOMEM, "out of memory for a chunk");
	return 0;
}

/* Chunk ch (of a tensor of dtype `dtype`), read at `src`, to its place in
 * the packed form at `dst`, checked: one that stays stored by its stored
 * check where recorded, else by decoding it; another decoded there, which
 * checks it.  src and dst may overlap with src >= dst. */
static int place_chunk(struct checker *ck, const struct wspm_chunk *ch, int dtype,
		       const uint8_t *src, uint8_t *dst, struct wspi_err *err)
{
	int rc;
	if (pack_chunk_stays_stored(ch) && wspm_chunk_stored_check(ch)) {
		if ((rc = chunk_check_stored(ch, src, err)) < 0)
			return rc;
		memmove(dst, src, ch->stored_bytes);
		return 0;
	}
	if ((rc = checker_ready(ck, err)) < 0)
		return rc;
	/* Decoded from a copy: the raw bytes may reach past src's start. */
	memcpy(ck->stored, src, ch->stored_bytes);
	int stays = pack_chunk_stays_stored(ch);
	struct wspi_span span = { stays ? ck->raw : dst, ch->raw_bytes };
	if ((rc = chunk_decode(ck->dec, ch, dtype, ck->stored, &span, 1, err)) < 0)
		return rc;
	if (stays)   /* checked by decoding; its stored bytes go in */
		memcpy(dst, ck->stored, ch->stored_bytes);
	return 0;
}

int wsp_pack_read_part(wsp_pack *pk, uint32_t layer, unsigned part, unsigned parts, void *dst,
		       uint64_t cap, struct wsp_part *out)
{
	if (!pk || !out || !parts || part >= parts)
		return -EINVAL;
	const struct wspi_manifest *m = &pk->m;
	if (layer >= m->hdr->n_layers)
		return WSP_ERR(&pk->err, WSP_ENOTFOUND, "%s: no layer %u (the pack has %u)", pk->dir,
			       layer, m->hdr->n_layers);
	const struct wspm_layer *l = &m->layers[layer];
	struct cut lo = cut_at(m, l, part, parts), hi = cut_at(m, l, part + 1, parts);
	uint64_t plen = hi.packed - lo.packed, slen = hi.stored - lo.stored;
	*out = (struct wsp_part){ .offset = lo.packed, .bytes = plen,
				  .stored_offset = lo.stored, .stored_bytes = slen };
	if (!dst || !plen)
		return 0;
	if (cap < plen)
		return WSP_ERR(&pk->err, -EINVAL, "layer %u, part %u of %u: %" PRIu64 " bytes do not "
			       "fit a buffer of %" PRIu64, layer, part, parts, plen, cap);

	/* The stored bytes are read to the end of the part's room (the packed
	 * form takes at least as many bytes from any chunk on), then each
	 * chunk is moved or decoded to its place, front to back. */
	char path[PATH_MAX + 32];
	uint8_t *base = dst, *src = base + (plen - slen);
	uint64_t got = 0;
	int fd = pack_shard_fd(pk, l->shard, &pk->err), rc;
	if (fd < 0)
		return fd;
	pack_shard_path(pk, l->shard, path, sizeof(path));
	if ((rc = fd_read_at(fd, src, slen, l->offset + lo.stored, &got)) < 0)
		return WSP_ERR(&pk->err, rc, "%s: layer %u (%s): %s reading [%" PRIu64 ", +%" PRIu64
			       ")", path, layer, wspm_str(m, l->name_off),
			       rc == WSP_EFORMAT ? "file truncated," : "error", l->offset + lo.stored,
			       slen);

	struct checker ck = { .pk = pk };
	uint64_t at = 0, from = 0, tchunk = 0;
	uint32_t t = l->first_tensor;
	for (uint64_t c = 0; c < hi.chunk; c++) {
		while (tchunk == m->tensors[t].n_chunks) {   /* the tensor chunk c belongs to */
			t++;
			tchunk = 0;
		}
		tchunk++;
		const struct wspm_chunk *ch = layer_chunk(m, l, c);
		if (c < lo.chunk)
			continue;
		if ((rc = place_chunk(&ck, ch, m->tensors[t].dtype, src + from, base + at,
				      &pk->err)) < 0) {
			wspi_err_prefix(&pk->err, "%s: layer %u (%s), tensor %s, chunk %" PRIu64
					" at offset %" PRIu64, path, layer, wspm_str(m, l->name_off),
					wspm_str(m, m->tensors[t].name_off), tchunk - 1, ch->offset);
			break;
		}
		uint64_t next = pack_packed_next(at, ch);
		uint64_t end = at + (pack_chunk_stays_stored(ch) ? ch->stored_bytes : ch->raw_bytes);
		memset(base + end, 0, next - end);   /* the gap to the next chunk */
		from += ch->stored_bytes;
		at = next;
	}
	if (ck.dec)
		chunk_decoder_free(ck.dec);
	free(ck.stored);
	free(ck.raw);
	return rc < 0 ? rc : 0;
}
