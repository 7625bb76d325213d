/* One JSON schema for a pack's facts (see packinfo.h). */
#include <stdio.h>
#include <string.h>

#include "packinfo.h"

static const char *codec_name(int codec)
{
	switch (codec) {
	case WSP_CODEC_ZSTD: return "zstd";
	case WSP_CODEC_RAW: return "raw";
	case WSP_CODEC_EXPRANS: return "exprans";
	default: return "?";
	}
}

/* "exprans 12 (1.51), zstd 3 (1.62)": chunks and ratio per codec, in a
 * buffer of len bytes */
static const char *codec_mix(const wsp_pack *pk, int dt, char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = 0;
	for (int c = WSP_CODEC_EXPRANS; c >= WSP_CODEC_ZSTD; c--) {
		uint64_t cr = 0, cs = 0;
		int k = wsp_pack_codec_bytes(pk, (enum wsp_dtype)dt, (enum wsp_codec)c, &cr, &cs);
		if (k <= 0 || at >= len)
			continue;
		at += (size_t)snprintf(buf + at, len - at, "%s%s %d (%.3f)", at ? ", " : "",
				       codec_name(c), k, cs ? (double)cr / (double)cs : 0.0);
	}
	return buf;
}

static double ratio(uint64_t raw, uint64_t stored)
{
	return stored ? (double)raw / (double)stored : 0.0;
}

json_t *pi_layer_json(const struct wsp_layer *L)
{
	return json_pack("{s:I,s:s,s:I,s:I,s:I}", "index", (json_int_t)L->index, "name", L->name,
			 "tensors", (json_int_t)L->n_tensors, "raw_bytes", (json_int_t)L->raw_bytes,
			 "stored_bytes", (json_int_t)L->stored_bytes);
}

json_t *pi_pack_json(const char *path, const wsp_pack *pk)
{
	struct wsp_pack_summary s;
	if (wsp_pack_summary(pk, &s) < 0)
		return NULL;
	const struct wsp_layer *big = NULL;
	for (uint32_t i = 0; i < s.n_layers; i++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, i);
		if (L && (!big || L->raw_bytes > big->raw_bytes))
			big = L;
	}
	json_t *dtypes = json_object();
	for (int dt = 0; dtypes && dt < WSP_DTYPE_COUNT; dt++) {
		uint64_t raw = 0, stored = 0;
		int n = wsp_pack_dtype_bytes(pk, (enum wsp_dtype)dt, &raw, &stored);
		if (n <= 0)
			continue;
		json_t *codecs = json_object();
		for (int c = WSP_CODEC_ZSTD; codecs && c <= WSP_CODEC_EXPRANS; c++) {
			uint64_t cr = 0, cs = 0;
			int k = wsp_pack_codec_bytes(pk, (enum wsp_dtype)dt, (enum wsp_codec)c, &cr, &cs);
			if (k > 0)
				json_object_set_new(codecs, codec_name(c),
						    json_pack("{s:i,s:I,s:I,s:f}", "chunks", k, "raw_bytes",
							      (json_int_t)cr, "stored_bytes",
							      (json_int_t)cs, "ratio", ratio(cr, cs)));
		}
		json_object_set_new(dtypes, wsp_dtype_name((enum wsp_dtype)dt),
				    json_pack("{s:i,s:I,s:I,s:f,s:o}", "tensors", n, "raw_bytes",
					      (json_int_t)raw, "stored_bytes", (json_int_t)stored, "ratio",
					      ratio(raw, stored), "codecs", codecs ? codecs : json_object()));
	}
	/* The checkpoint's own metadata: an object, or its text when not JSON. */
	json_t *meta = json_null();
	if (s.metadata_json) {
		json_error_t je;
		json_decref(meta);
		meta = json_loads(s.metadata_json, JSON_REJECT_DUPLICATES, &je);
		if (!meta)
			meta = json_string(s.metadata_json);
	}
	return json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:I,s:I,s:I,s:I,s:f,s:I,s:s?,s:o,s:o}", "pack", path,
			 "format_version", (int)s.format_version, "layers", (int)s.n_layers, "tensors",
			 (int)s.n_tensors, "shards", (int)s.n_shards, "sources", (int)s.n_sources,
			 "chunks", (json_int_t)s.n_chunks, "chunk_bytes", (json_int_t)s.chunk_bytes,
			 "raw_bytes", (json_int_t)s.raw_bytes, "stored_bytes", (json_int_t)s.stored_bytes,
			 "ratio", ratio(s.raw_bytes, s.stored_bytes), "max_layer_raw_bytes",
			 (json_int_t)s.max_layer_raw_bytes, "largest_layer", big ? big->name : NULL,
			 "dtypes", dtypes, "metadata", meta);
}

/* The text of `info`, for both tools. */
void pi_print_text(const char *path, const wsp_pack *pk, int layers)
{
	struct wsp_pack_summary sm, *s = &sm;
	char a[32], b[32], mix[128], name[4 * 1024 + 1];   /* names are data: escaped for the terminal */
	if (wsp_pack_summary(pk, s) < 0)
		return;
	uint32_t dtype_tensors[WSP_DTYPE_COUNT] = {0};
	const struct wsp_layer *big = NULL;
	for (uint32_t i = 0; i < s->n_layers; i++) {
		const struct wsp_layer *l = wsp_pack_layer(pk, i);
		for (uint32_t t = 0; l && t < l->n_tensors; t++)
			if ((unsigned)l->tensors[t].dtype < WSP_DTYPE_COUNT)
				dtype_tensors[l->tensors[t].dtype]++;
		if (l && (!big || l->raw_bytes > big->raw_bytes))
			big = l;
	}
	printf("pack:          %s\n", path);
	printf("format:        version %u\n", s->format_version);
	printf("layers:        %u\n", s->n_layers);
	printf("tensors:       %u\n", s->n_tensors);
	printf("shards:        %u\n", s->n_shards);
	printf("sources:       %u safetensors file%s\n", s->n_sources, s->n_sources == 1 ? "" : "s");
	printf("chunks:        %llu of %s\n", (unsigned long long)s->n_chunks,
	       wsp_format_size(s->chunk_bytes, a, sizeof(a)));
	printf("raw size:      %s (%llu bytes)\n", wsp_format_size(s->raw_bytes, a, sizeof(a)),
	       (unsigned long long)s->raw_bytes);
	printf("stored size:   %s (%llu bytes)\n", wsp_format_size(s->stored_bytes, a, sizeof(a)),
	       (unsigned long long)s->stored_bytes);
	printf("ratio:         %.3f\n", ratio(s->raw_bytes, s->stored_bytes));
	printf("largest layer: %s, %s (the smallest GPU slot that holds every layer)\n",
	       big ? wsp_escape_text(big->name, name, sizeof(name)) : "-",
	       wsp_format_size(s->max_layer_raw_bytes, a, sizeof(a)));
	printf("metadata:      %s\n", s->metadata_json ? s->metadata_json : "(none)");
	printf("\n%-10s %8s %14s %14s %7s  %s\n", "dtype", "tensors", "raw", "stored", "ratio",
	       "chunks by codec (ratio)");
	for (int dt = 0; dt < WSP_DTYPE_COUNT; dt++) {
		uint64_t raw = 0, stored = 0;
		if (!dtype_tensors[dt] || wsp_pack_dtype_bytes(pk, dt, &raw, &stored) < 0)
			continue;
		printf("%-10s %8u %14s %14s %7.3f  %s\n", wsp_dtype_name(dt), dtype_tensors[dt],
		       wsp_format_size(raw, a, sizeof(a)), wsp_format_size(stored, b, sizeof(b)),
		       ratio(raw, stored), codec_mix(pk, dt, mix, sizeof(mix)));
	}
	if (!layers)
		return;
	printf("\n%6s  %-40s %8s %14s %14s %7s\n", "layer", "name", "tensors", "raw", "stored",
	       "ratio");
	for (uint32_t i = 0; i < s->n_layers; i++) {
		const struct wsp_layer *l = wsp_pack_layer(pk, i);
		if (!l)
			continue;
		printf("%6u  %-40s %8u %14s %14s %7.3f\n", l->index,
		       wsp_escape_text(l->name, name, sizeof(name)), l->n_tensors,
		       wsp_format_size(l->raw_bytes, a, sizeof(a)),
		       wsp_format_size(l->stored_bytes, b, sizeof(b)),
		       ratio(l->raw_bytes, l->stored_bytes));
		for (uint32_t t = 0; layers > 1 && t < l->n_tensors; t++) {
			const struct wsp_tensor *x = &l->tensors[t];
			char shape[256] = "";
			for (unsigned d = 0; d < x->rank; d++)
				snprintf(shape + strlen(shape), sizeof(shape) - strlen(shape), "%s%llu",
					 d ? ", " : "", (unsigned long long)x->shape[d]);
			printf("%8s%s  %s [%s]\n", "", wsp_escape_text(x->name, name, sizeof(name)),
			       wsp_dtype_name(x->dtype), shape);
		}
	}
}
