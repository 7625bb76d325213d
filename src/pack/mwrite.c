/*
 * Serializing the manifest: tables in file order, strings, blobs, then the
 * header checksum.  Written last, after every shard is durable, so that a
 * directory with a manifest always has complete shards.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fdio.h"
#include "common/util.h"
#include "pack/fsutil.h"
#include "pack/writer_int.h"

struct strtab {
	char *buf;
	size_t len, cap;
};

static int str_add(struct strtab *s, const char *str, uint64_t *off)
{
	uint64_t n = strlen(str) + 1;

	if (wspi_grow((void **)&s->buf, &s->cap, s->len + n, 1, 4096) < 0)
		return -ENOMEM;
	memcpy(s->buf + s->len, str, n);
	*off = s->len;
	s->len += n;
	return 0;
}

/* Names: shards, sources, layers, tensors (short names point into the full
 * name's string, since they are its suffix). */
static int build_strings(struct pack_writer *pw, struct strtab *st, uint64_t *shard_off,
			 uint64_t *source_off, uint64_t *layer_off, uint64_t *tensor_off)
{
	char name[32];
	int rc = 0;

	for (uint32_t i = 0; i < pw->n_shards && rc == 0; i++) {
		snprintf(name, sizeof(name), WSPM_SHARD_FMT, i);
		rc = str_add(st, name, &shard_off[i]);
	}
	for (uint32_t i = 0; i < pw->n_sources && rc == 0; i++)
		rc = str_add(st, pw->sources[i].name, &source_off[i]);
	for (uint32_t i = 0; i < pw->n_layers && rc == 0; i++)
		rc = str_add(st, pw->layers[i].name, &layer_off[i]);
	for (uint32_t i = 0; i < pw->n_tensors && rc == 0; i++)
		rc = str_add(st, pw->tensors[pw->order[i]].name, &tensor_off[i]);
	return rc;
}

static void fill_tables(struct pack_writer *pw, char *img, const struct wspm_header *h,
			const uint64_t *shard_off, const uint64_t *source_off,
			const uint64_t *layer_off, const uint64_t *tensor_off)
{
	struct wspm_shard *sh = (void *)(img + h->shards_off);
	struct wspm_source *so = (void *)(img + h->sources_off);
	struct wspm_layer *la = (void *)(img + h->layers_off);
	struct wspm_tensor *te = (void *)(img + h->tensors_off);
	uint64_t blob = 0;

	for (uint32_t i = 0; i < pw->n_shards; i++) {
		sh[i].name_off = shard_off[i];
		sh[i].size = pw->shard_size[i];
	}
	for (uint32_t i = 0; i < pw->n_sources; i++) {
		const struct pw_source *s = &pw->sources[i];
		so[i].name_off = source_off[i];
		so[i].header_off = blob;
		so[i].header_len = s->header_len;
		so[i].data_bytes = s->data_bytes;
		memcpy(img + h->blobs_off + blob, s->header, s->header_len);
		blob += s->header_len;
	}
	if (pw->has_index)
		memcpy(img + h->blobs_off + h->index_off, pw->index_json, pw->index_len);
	for (uint32_t i = 0; i < pw->n_layers; i++) {
		const struct pw_layer *L = &pw->layers[i];
		la[i].name_off = layer_off[i];
		la[i].first_tensor = L->first_tensor;
		la[i].n_tensors = L->n_tensors;
		la[i].shard = L->shard;
		la[i].offset = L->offset;
		la[i].stored_bytes = L->stored_bytes;
		la[i].raw_bytes = L->raw_bytes;
	}
	for (uint32_t i = 0; i < pw->n_tensors; i++) {
		const struct pw_tensor *t = &pw->tensors[pw->order[i]];
		struct wspm_tensor *o = &te[i];
		o->name_off = tensor_off[i];
		o->short_name_off = tensor_off[i] + t->short_off;
		o->dtype = (uint8_t)t->dtype;
		o->rank = (uint8_t)t->rank;
		memcpy(o->shape, t->shape, sizeof(o->shape));
		o->layer = t->layer;
		o->source = t->source;
		o->source_offset = t->source_offset;
		o->raw_bytes = t->bytes;
		o->layer_offset = t->layer_offset;
		o->checksum = t->checksum;
		o->first_chunk = t->first_chunk;
		o->n_chunks = t->n_chunks;
		o->source_order = t->source_order;
	}
	memcpy(img + h->chunks_off, pw->chunks, pw->n_chunks * sizeof(struct wspm_chunk));
}

static int write_file(struct pack_writer *pw, const char *img, uint64_t size)
{
	char path[4096];
	int fd, rc;

	snprintf(path, sizeof(path), "%s/%s", pw->tmp, WSPM_FILE);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0)
		return WSP_ERR(pw->err, -errno, "%s: %s", path, strerror(errno));
	rc = fd_write_at(fd, img, size, 0);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc < 0 ? WSP_ERR(pw->err, rc, "%s: %s", path, strerror(-rc)) : 0;
}

int pw_write_manifest(struct pack_writer *pw)
{
	struct strtab st = { 0 };
	struct wspm_header h;
	uint64_t *offs, size, blobs = 0;
	char *img = NULL;
	int rc;

	offs = calloc((uint64_t)pw->n_shards + pw->n_sources + pw->n_layers + pw->n_tensors + 1,
		      sizeof(*offs));
	if (!offs)
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	uint64_t *shard_off = offs, *source_off = shard_off + pw->n_shards;
	uint64_t *layer_off = source_off + pw->n_sources, *tensor_off = layer_off + pw->n_layers;
	if (build_strings(pw, &st, shard_off, source_off, layer_off, tensor_off) < 0) {
		rc = WSP_ERR(pw->err, -ENOMEM, "out of memory");
		goto out;
	}

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, WSPM_MAGIC, 8);
	h.version = WSPM_VERSION;
	h.header_size = sizeof(h);
	h.n_shards = pw->n_shards;
	h.n_sources = pw->n_sources;
	h.n_layers = pw->n_layers;
	h.n_tensors = pw->n_tensors;
	h.n_chunks = pw->n_chunks;
	h.chunk_bytes = pw->opt.chunk_bytes;
	h.shards_off = sizeof(h);
	h.sources_off = h.shards_off + (uint64_t)pw->n_shards * sizeof(struct wspm_shard);
	h.layers_off = h.sources_off + (uint64_t)pw->n_sources * sizeof(struct wspm_source);
	h.tensors_off = h.layers_off + (uint64_t)pw->n_layers * sizeof(struct wspm_layer);
	h.chunks_off = h.tensors_off + (uint64_t)pw->n_tensors * sizeof(struct wspm_tensor);
	h.strings_off = h.chunks_off + pw->n_chunks * sizeof(struct wspm_chunk);
	h.strings_size = st.len;
	h.blobs_off = wspi_align_up(h.strings_off + st.len, 8);
	for (uint32_t i = 0; i < pw->n_sources; i++)
		blobs += pw->sources[i].header_len;   /* each below 4 GiB: bounded by the file cap */
	if (pw->has_index) {
		h.flags |= WSPM_F_HAS_INDEX;
		h.index_off = blobs;
		h.index_len = pw->index_len;
		blobs += pw->index_len;
	}
	h.blobs_size = blobs;
	if (ckd_add(&size, h.blobs_off, blobs) || size > WSPM_MAX_FILE) {
		rc = WSP_ERR(pw->err, WSP_ETOOBIG, "the manifest would exceed %llu bytes",
			     (unsigned long long)WSPM_MAX_FILE);
		goto out;
	}
	h.file_size = size;
	img = calloc(1, size);
	if (!img) {
		rc = WSP_ERR(pw->err, -ENOMEM, "out of memory for a %llu-byte manifest",
			     (unsigned long long)size);
		goto out;
	}
	memcpy(img, &h, sizeof(h));
	if (st.len)
		memcpy(img + h.strings_off, st.buf, st.len);
	fill_tables(pw, img, &h, shard_off, source_off, layer_off, tensor_off);
	h.checksum = wspm_checksum(img, size);
	memcpy(img, &h, sizeof(h));

	/* Check our own output with the reader's rules before committing it. */
	struct wspi_manifest m;
	rc = wspm_parse(img, size, &m, pw->err);
	if (rc < 0)
		wspi_err_prefix(pw->err, "internal error: the manifest written is invalid");
	else
		rc = write_file(pw, img, size);
out:
	free(img);
	free(st.buf);
	free(offs);
	return rc;
}
