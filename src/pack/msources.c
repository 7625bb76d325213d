/*
 * Manifest validation, second part: what unpack and name lookups rely on.
 * manifest.c proves that every offset stays inside its table and file; this
 * proves that the sources describe the tensors (so `unpack` writes back the
 * checkpoint the pack was made from, or the pack is refused at open), that
 * the stored index is the JSON it claims to be, and that names are unique
 * where lookups need them to be.  A manifest forged with a recomputed
 * checksum passes the first part; it must not pass this one.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pack/manifest.h"
#include "safetensors/safetensors.h"

#define FMT(...) WSP_ERR(err, WSP_EFORMAT, __VA_ARGS__)
#define INDEX_NAME "model.safetensors.index.json"

static int all_zero(const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		if (c[i])
			return 0;
	return 1;
}

/* wspack(5): reserved fields are zero; a reader that tolerated anything
 * there could not give them a meaning later. */
static int check_reserved(const struct wspi_manifest *m, struct wspi_err *err)
{
	const struct wspm_header *h = m->hdr;

	if (h->reserved0 || !all_zero(h->reserved, sizeof(h->reserved)))
		return FMT("header: reserved fields are not zero");
	for (uint32_t i = 0; i < h->n_layers; i++)
		if (m->layers[i].reserved)
			return FMT("layer %u: reserved field is not zero", i);
	for (uint32_t i = 0; i < h->n_tensors; i++)
		if (!all_zero(m->tensors[i].reserved, sizeof(m->tensors[i].reserved)) ||
		    m->tensors[i].reserved2)
			return FMT("tensor %u (%s): reserved fields are not zero", i,
				   wspm_str(m, m->tensors[i].name_off));
	/* Only EXPRANS chunks record a check of their stored bytes. */
	for (uint64_t i = 0; i < h->n_chunks; i++)
		if (m->chunks[i].codec != WSP_CODEC_EXPRANS &&
		    !all_zero(m->chunks[i].stored_check, sizeof(m->chunks[i].stored_check)))
			return FMT("chunk %llu: stored check set on a chunk of codec %u",
				   (unsigned long long)i, m->chunks[i].codec);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Source file names: unique, and never the index's (unpack writes both). */
static int check_source_names(const struct wspi_manifest *m, struct wspi_err *err)
{
	uint32_t n = m->hdr->n_sources;
	const char **names;
	int rc = 0;

	if (n == 0)
		return 0;
	names = malloc(n * sizeof(*names));
	if (!names)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		names[i] = wspm_str(m, m->sources[i].name_off);
		if (!strcmp(names[i], INDEX_NAME))
			rc = FMT("source %u: named %s, the index's name", i, INDEX_NAME);
	}
	qsort(names, n, sizeof(*names), cmp_str);
	for (uint32_t i = 1; i < n && rc == 0; i++)
		if (!strcmp(names[i - 1], names[i]))
			rc = FMT("two sources named %s", names[i]);
	free(names);
	return rc;
}

/* Short names are what wsp_layer_tensor() looks up: unique within a layer. */
static int check_short_names(const struct wspi_manifest *m, struct wspi_err *err)
{
	const char **names = NULL;
	uint32_t cap = 0;
	int rc = 0;

	for (uint32_t li = 0; li < m->hdr->n_layers && rc == 0; li++) {
		const struct wspm_layer *l = &m->layers[li];
		if (l->n_tensors > cap) {
			const char **grown = realloc(names, l->n_tensors * sizeof(*names));
			if (!grown) {
				rc = WSP_ERR(err, -ENOMEM, "out of memory");
				break;
			}
			names = grown;
			cap = l->n_tensors;
		}
		for (uint32_t k = 0; k < l->n_tensors; k++)
			names[k] = wspm_str(m, m->tensors[l->first_tensor + k].short_name_off);
		qsort(names, l->n_tensors, sizeof(*names), cmp_str);
		for (uint32_t k = 1; k < l->n_tensors && rc == 0; k++)
			if (!strcmp(names[k - 1], names[k]))
				rc = FMT("layer %u (%s): two tensors with the short name %s", li,
					 wspm_str(m, l->name_off), names[k]);
	}
	free(names);
	return rc;
}

/* Order of a source's tensors in its data section: the order st_parse
 * sorts a header's tensors in (begin, end, key order), so that zero-size
 * tensors sharing an offset with another tensor compare one to one. */
static int cmp_source_offset(const void *a, const void *b, void *ctx)
{
	const struct wspi_manifest *m = ctx;
	const struct wspm_tensor *x = &m->tensors[*(const uint32_t *)a];
	const struct wspm_tensor *y = &m->tensors[*(const uint32_t *)b];
	if (x->source_offset != y->source_offset)
		return x->source_offset < y->source_offset ? -1 : 1;
	if (x->raw_bytes != y->raw_bytes)
		return x->raw_bytes < y->raw_bytes ? -1 : 1;
	return x->source_order < y->source_order ? -1 : x->source_order > y->source_order;
}

/* The stored header of source `si` parses as safetensors, covers exactly
 * its data_bytes, and names exactly the tensors `idx[0..n)` that point at
 * it, with their dtypes, shapes, offsets and key order. */
static int check_one_source(const struct wspi_manifest *m, uint32_t si, uint32_t *idx, uint32_t n,
			    struct wspi_err *err)
{
	const struct wspm_source *s = &m->sources[si];
	const char *sname = wspm_str(m, s->name_off);
	struct st_file f;
	uint64_t size;
	char *buf;
	int rc;

	if (s->header_len > ST_MAX_HEADER || ckd_add(&size, 8 + s->header_len, s->data_bytes))
		return FMT("source %u (%s): header of %llu bytes above the limit", si, sname,
			   (unsigned long long)s->header_len);
	buf = malloc(8 + s->header_len);
	if (!buf)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	memcpy(buf, &s->header_len, 8);   /* little-endian host, checked at parse */
	memcpy(buf + 8, m->blobs + s->header_off, s->header_len);
	memset(&f, 0, sizeof(f));
	rc = st_parse_named(sname, buf, 8 + s->header_len, size, &f, err);
	free(buf);
	if (rc < 0) {
		wspi_err_prefix(err, "source %u: stored header of", si);
		return rc == -ENOMEM ? rc : WSP_EFORMAT;
	}
	if (f.n_tensors != n) {
		rc = FMT("source %u (%s): its header names %u tensors, %u tensors point at it", si,
			 sname, f.n_tensors, n);
		goto out;
	}
	/* st_parse sorts by begin (and checks that ranges tile the data
	 * section); sort ours the same way and compare one to one. */
	qsort_r(idx, n, sizeof(*idx), cmp_source_offset, (void *)m);
	for (uint32_t k = 0; k < n; k++) {
		const struct st_tensor *h = &f.tensors[k];
		const struct wspm_tensor *t = &m->tensors[idx[k]];
		const char *tname = wspm_str(m, t->name_off);
		if (strcmp(h->name, tname) || h->dtype != t->dtype || h->rank != t->rank ||
		    memcmp(h->shape, t->shape, t->rank * sizeof(t->shape[0])) ||
		    h->begin != t->source_offset || h->end - h->begin != t->raw_bytes ||
		    h->key_order != t->source_order) {
			rc = FMT("source %u (%s): tensor %s at data offset %llu does not match its "
				 "stored header (which has %s %s rank %u at [%llu, %llu))",
				 si, sname, tname, (unsigned long long)t->source_offset, h->name,
				 wsp_dtype_name((enum wsp_dtype)h->dtype), h->rank,
				 (unsigned long long)h->begin, (unsigned long long)h->end);
			goto out;
		}
	}
out:
	st_file_free(&f);
	return rc;
}

static int check_sources(const struct wspi_manifest *m, struct wspi_err *err)
{
	const struct wspm_header *h = m->hdr;
	uint32_t *count, *start, *idx;
	int rc = 0;

	if (h->n_sources == 0)
		return 0;
	count = calloc(h->n_sources + 1, sizeof(*count));
	start = calloc(h->n_sources + 1, sizeof(*start));
	idx = malloc((h->n_tensors ? h->n_tensors : 1) * sizeof(*idx));
	if (!count || !start || !idx) {
		rc = WSP_ERR(err, -ENOMEM, "out of memory");
		goto out;
	}
	/* Bucket tensors by source (manifest.c checked every index). */
	for (uint32_t i = 0; i < h->n_tensors; i++) {
		if (m->tensors[i].source == WSPM_NO_SOURCE) {
			rc = FMT("tensor %u (%s): no source, in a pack made from source files", i,
				 wspm_str(m, m->tensors[i].name_off));
			goto out;
		}
		count[m->tensors[i].source]++;
	}
	for (uint32_t s = 1; s <= h->n_sources; s++)
		start[s] = start[s - 1] + count[s - 1];
	memset(count, 0, (h->n_sources + 1) * sizeof(*count));
	for (uint32_t i = 0; i < h->n_tensors; i++) {
		uint32_t s = m->tensors[i].source;
		idx[start[s] + count[s]++] = i;
	}
	for (uint32_t s = 0; s < h->n_sources && rc == 0; s++)
		rc = check_one_source(m, s, idx + start[s], count[s], err);
out:
	free(count);
	free(start);
	free(idx);
	return rc;
}

/* The stored index: a JSON object whose weight_map names only sources. */
static int check_index(const struct wspi_manifest *m, struct wspi_err *err)
{
	const struct wspm_header *h = m->hdr;
	json_error_t jerr;
	const char *key;
	json_t *root, *wmap, *v;
	int rc = 0;

	if (!(h->flags & WSPM_F_HAS_INDEX))
		return 0;
	root = json_loadb(m->blobs + h->index_off, h->index_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return FMT("stored index: not valid JSON: %s", jerr.text);
	wmap = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
	if (!json_is_object(wmap))
		rc = FMT("stored index: no weight_map object");
	json_object_foreach(json_is_object(wmap) ? wmap : NULL, key, v) {
		uint32_t s = 0;
		if (json_is_string(v))
			for (; s < h->n_sources; s++)
				if (!strcmp(json_string_value(v), wspm_str(m, m->sources[s].name_off)))
					break;
		if (!json_is_string(v) || s == h->n_sources) {
			rc = FMT("stored index: weight_map entry %.200s names no source of the pack",
				 key);
			break;
		}
	}
	json_decref(root);
	return rc;
}

int wspm_check_names_and_sources(const struct wspi_manifest *m, struct wspi_err *err)
{
	WSP_TRY(check_reserved(m, err));
	WSP_TRY(check_short_names(m, err));
	WSP_TRY(check_source_names(m, err));
	WSP_TRY(check_sources(m, err));
	return check_index(m, err);
}
