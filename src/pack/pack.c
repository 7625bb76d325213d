/*
 * The read-only pack handle: the validated manifest plus the public
 * wsp_layer/wsp_tensor views built from it, and lookups by name.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "pack/pack.h"

static int cmp_layer(const void *a, const void *b, void *ctx)
{
	const struct wsp_pack_s *pk = ctx;
	return strcmp(pk->layers[*(const uint32_t *)a].name, pk->layers[*(const uint32_t *)b].name);
}

static int cmp_tensor(const void *a, const void *b, void *ctx)
{
	const struct wsp_pack_s *pk = ctx;
	return strcmp(pk->tensors[*(const uint32_t *)a].name, pk->tensors[*(const uint32_t *)b].name);
}

static int build_views(struct wsp_pack_s *pk, struct wspi_err *err)
{
	const struct wspi_manifest *m = &pk->m;
	uint32_t nl = m->hdr->n_layers, nt = m->hdr->n_tensors;

	pk->layers = calloc(nl ? nl : 1, sizeof(*pk->layers));
	pk->tensors = calloc(nt ? nt : 1, sizeof(*pk->tensors));
	pk->layer_by_name = malloc((nl ? nl : 1) * sizeof(uint32_t));
	pk->tensor_by_name = malloc((nt ? nt : 1) * sizeof(uint32_t));
	pk->shard_fds = malloc((m->hdr->n_shards ? m->hdr->n_shards : 1) * sizeof(int));
	if (!pk->layers || !pk->tensors || !pk->layer_by_name || !pk->tensor_by_name || !pk->shard_fds)
		return WSP_ERR(err, -ENOMEM, "%s: out of memory for %u layers and %u tensors", pk->dir,
			       nl, nt);
	for (uint32_t i = 0; i < m->hdr->n_shards; i++)
		pk->shard_fds[i] = -1;
	for (uint32_t i = 0; i < nt; i++) {
		const struct wspm_tensor *s = &m->tensors[i];
		struct wsp_tensor *t = &pk->tensors[i];
		t->name = wspm_str(m, s->name_off);
		t->short_name = wspm_str(m, s->short_name_off);
		t->dtype = (enum wsp_dtype)s->dtype;
		t->rank = s->rank;
		memcpy(t->shape, s->shape, sizeof(t->shape));
		t->bytes = s->raw_bytes;
		t->checksum = s->checksum;
		t->layer = s->layer;
		pk->tensor_by_name[i] = i;
	}
	for (uint32_t i = 0; i < nl; i++) {
		const struct wspm_layer *s = &m->layers[i];
		struct wsp_layer *l = &pk->layers[i];
		l->index = i;
		l->name = wspm_str(m, s->name_off);
		l->n_tensors = s->n_tensors;
		l->tensors = &pk->tensors[s->first_tensor];
		l->raw_bytes = s->raw_bytes;
		l->stored_bytes = s->stored_bytes;
		pk->layer_by_name[i] = i;
		pk->max_layer_stored = WSP_MAX(pk->max_layer_stored, s->stored_bytes);
	}
	for (uint64_t i = 0; i < m->hdr->n_chunks; i++) {
		pk->max_chunk_raw = WSP_MAX(pk->max_chunk_raw, m->chunks[i].raw_bytes);
		pk->max_chunk_stored = WSP_MAX(pk->max_chunk_stored, m->chunks[i].stored_bytes);
	}

	/* Names are keys: two layers or tensors of one name would make
	 * lookups ambiguous. */
	qsort_r(pk->layer_by_name, nl, sizeof(uint32_t), cmp_layer, pk);
	qsort_r(pk->tensor_by_name, nt, sizeof(uint32_t), cmp_tensor, pk);
	for (uint32_t i = 1; i < nl; i++)
		if (!cmp_layer(&pk->layer_by_name[i - 1], &pk->layer_by_name[i], pk))
			return WSP_ERR(err, WSP_EFORMAT, "%s/%s: two layers named %s", pk->dir,
				       WSPM_FILE, pk->layers[pk->layer_by_name[i]].name);
	for (uint32_t i = 1; i < nt; i++)
		if (!cmp_tensor(&pk->tensor_by_name[i - 1], &pk->tensor_by_name[i], pk))
			return WSP_ERR(err, WSP_EFORMAT, "%s/%s: two tensors named %s", pk->dir,
				       WSPM_FILE, pk->tensors[pk->tensor_by_name[i]].name);
	return 0;
}

int pack_open(const char *dir, struct wsp_pack_s **out, struct wspi_err *err)
{
	struct wsp_pack_s *pk;
	char abs[PATH_MAX];
	int rc;

	*out = NULL;
	pk = calloc(1, sizeof(*pk));
	if (!pk)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	wspi_err_init(&pk->err);
	pthread_mutex_init(&pk->lock, NULL);
	pk->dir = strdup(realpath(dir, abs) ? abs : dir);
	if (!pk->dir) {
		pack_close(pk);
		return WSP_ERR(err, -ENOMEM, "out of memory");
	}
	rc = wspm_map(dir, &pk->m, err);
	if (rc == 0)
		rc = build_views(pk, err);
	if (rc < 0) {
		pack_close(pk);
		return rc;
	}
	*out = pk;
	return 0;
}

void pack_close(struct wsp_pack_s *pk)
{
	if (!pk)
		return;
	for (uint32_t i = 0; pk->shard_fds && pk->m.hdr && i < pk->m.hdr->n_shards; i++)
		if (pk->shard_fds[i] >= 0)
			close(pk->shard_fds[i]);
	chunk_decoder_free(pk->dec);
	free(pk->rbuf);
	free(pk->metadata_json);
	free(pk->shard_fds);
	free(pk->layer_by_name);
	free(pk->tensor_by_name);
	free(pk->layers);
	free(pk->tensors);
	wspm_unmap(&pk->m);
	free(pk->dir);
	pthread_mutex_destroy(&pk->lock);
	wspi_err_destroy(&pk->err);
	free(pk);
}

void pack_shard_path(const struct wsp_pack_s *pk, uint32_t shard, char *buf, size_t len)
{
	snprintf(buf, len, "%s/" WSPM_SHARD_FMT, pk->dir, shard);
}

int wsp_pack_shard_path(const wsp_pack *pk, uint32_t shard, char *buf, size_t len)
{
	if (!pk || (!buf && len))
		return -EINVAL;
	if (shard >= pk->m.hdr->n_shards)
		return WSP_ENOTFOUND;
	int n = snprintf(buf, len, "%s/" WSPM_SHARD_FMT, pk->dir, shard);
	return n < 0 ? -EINVAL : n;
}

int wsp_pack_layer_extent(const wsp_pack *pk, uint32_t layer, uint32_t *shard, uint64_t *offset)
{
	if (!pk || !shard || !offset)
		return -EINVAL;
	if (layer >= pk->m.hdr->n_layers)
		return WSP_ENOTFOUND;
	*shard = pk->m.layers[layer].shard;
	*offset = pk->m.layers[layer].offset;
	return 0;
}

int pack_shard_fd(struct wsp_pack_s *pk, uint32_t shard, struct wspi_err *err)
{
	int fd, rc = 0;

	pthread_mutex_lock(&pk->lock);
	fd = pk->shard_fds[shard];
	if (fd < 0) {
		char path[PATH_MAX + 32];
		pack_shard_path(pk, shard, path, sizeof(path));
		fd = wspi_open_regular(path, O_RDONLY, err);
		if (fd < 0)
			rc = fd;
		else
			pk->shard_fds[shard] = fd;
	}
	pthread_mutex_unlock(&pk->lock);
	return rc < 0 ? rc : fd;
}

int wsp_pack_open(const char *path, wsp_pack **out, char *errbuf, size_t errlen)
{
	struct wspi_err err;
	int rc;

	wspi_err_init(&err);
	if (out)
		*out = NULL;
	if (!path || !out)
		rc = WSP_ERR(&err, -EINVAL, "wsp_pack_open: no %s", path ? "output handle" : "pack path");
	else
		rc = pack_open(path, out, &err);
	if (errbuf && errlen)
		wspi_err_copy(&err, errbuf, errlen);
	wspi_err_destroy(&err);
	return rc;
}

void wsp_pack_close(wsp_pack *pk)
{
	pack_close(pk);
}

const char *wsp_pack_errmsg(const wsp_pack *pk)
{
	return pk ? pk->err.msg : "no pack handle";
}

/* The first source's "__metadata__", compact; NULL when absent. */
static char *extract_metadata(const struct wspi_manifest *m)
{
	if (m->hdr->n_sources == 0)
		return NULL;
	const struct wspm_source *s = &m->sources[0];
	json_t *root = json_loadb(m->blobs + s->header_off, s->header_len, JSON_REJECT_DUPLICATES,
				  NULL);
	json_t *meta = root ? json_object_get(root, "__metadata__") : NULL;
	char *text = meta ? json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(root);
	wspi_release_after_json(s->header_len);
	return text;
}

int wsp_pack_summary(const wsp_pack *cpk, struct wsp_pack_summary *out)
{
	/* The handle is logically const: only the metadata cache changes. */
	struct wsp_pack_s *pk = (struct wsp_pack_s *)cpk;
	const struct wspi_manifest *m;

	if (!pk || !out)
		return -EINVAL;
	m = &pk->m;
	memset(out, 0, sizeof(*out));
	out->n_layers = m->hdr->n_layers;
	out->n_tensors = m->hdr->n_tensors;
	out->n_shards = m->hdr->n_shards;
	out->n_sources = m->hdr->n_sources;
	out->n_chunks = m->hdr->n_chunks;
	out->chunk_bytes = m->hdr->chunk_bytes;
	out->format_version = m->hdr->version;
	for (uint32_t i = 0; i < m->hdr->n_tensors; i++)
		out->raw_bytes += m->tensors[i].raw_bytes;
	for (uint32_t i = 0; i < m->hdr->n_layers; i++) {
		out->stored_bytes += m->layers[i].stored_bytes;
		out->max_layer_raw_bytes = WSP_MAX(out->max_layer_raw_bytes, m->layers[i].raw_bytes);
	}
	pthread_mutex_lock(&pk->lock);
	if (!pk->metadata_done) {
		pk->metadata_json = extract_metadata(m);
		pk->metadata_done = 1;
	}
	out->metadata_json = pk->metadata_json;
	pthread_mutex_unlock(&pk->lock);
	return 0;
}

const struct wsp_layer *wsp_pack_layer(const wsp_pack *pk, uint32_t index)
{
	if (!pk || index >= pk->m.hdr->n_layers)
		return NULL;
	return &pk->layers[index];
}

const struct wsp_layer *wsp_pack_find_layer(const wsp_pack *pk, const char *name)
{
	uint32_t lo = 0, hi;

	if (!pk || !name)
		return NULL;
	hi = pk->m.hdr->n_layers;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2, i = pk->layer_by_name[mid];
		int c = strcmp(name, pk->layers[i].name);
		if (c == 0)
			return &pk->layers[i];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

const struct wsp_tensor *wsp_pack_find_tensor(const wsp_pack *pk, const char *full_name)
{
	uint32_t lo = 0, hi;

	if (!pk || !full_name)
		return NULL;
	hi = pk->m.hdr->n_tensors;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2, i = pk->tensor_by_name[mid];
		int c = strcmp(full_name, pk->tensors[i].name);
		if (c == 0)
			return &pk->tensors[i];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

int wsp_pack_dtype_bytes(const wsp_pack *pk, enum wsp_dtype dt, uint64_t *raw, uint64_t *stored)
{
	const struct wspi_manifest *m;
	uint64_t r = 0, s = 0;
	int count = 0;

	if (!pk || (unsigned)dt >= WSP_DTYPE_COUNT)
		return -EINVAL;
	m = &pk->m;
	for (uint32_t i = 0; i < m->hdr->n_tensors; i++) {
		const struct wspm_tensor *t = &m->tensors[i];
		if (t->dtype != dt)
			continue;
		count++;
		r += t->raw_bytes;
		for (uint64_t k = 0; k < t->n_chunks; k++)
			s += m->chunks[t->first_chunk + k].stored_bytes;
	}
	if (raw)
		*raw = r;
	if (stored)
		*stored = s;
	return count;
}

int wsp_pack_codec_bytes(const wsp_pack *pk, enum wsp_dtype dt, enum wsp_codec codec,
			 uint64_t *raw, uint64_t *stored)
{
	const struct wspi_manifest *m;
	uint64_t r = 0, s = 0;
	int count = 0;

	if (!pk || (unsigned)dt >= WSP_DTYPE_COUNT || (unsigned)codec > WSP_CODEC_EXPRANS)
		return -EINVAL;
	m = &pk->m;
	for (uint32_t i = 0; i < m->hdr->n_tensors; i++) {
		const struct wspm_tensor *t = &m->tensors[i];
		if (t->dtype != dt)
			continue;
		for (uint64_t k = 0; k < t->n_chunks; k++) {
			const struct wspm_chunk *c = &m->chunks[t->first_chunk + k];
			if (c->codec != codec)
				continue;
			count++;
			r += c->raw_bytes;
			s += c->stored_bytes;
		}
	}
	if (raw)
		*raw = r;
	if (stored)
		*stored = s;
	return count;
}

uint64_t pack_bytes(const struct wsp_pack_s *pk)
{
	const struct wspm_header *h = pk->m.hdr;
	return sizeof(*pk) + pk->m.map_size +
	       h->n_layers * (uint64_t)(sizeof(*pk->layers) + sizeof(*pk->layer_by_name)) +
	       h->n_tensors * (uint64_t)(sizeof(*pk->tensors) + sizeof(*pk->tensor_by_name)) +
	       h->n_shards * (uint64_t)sizeof(*pk->shard_fds);
}
