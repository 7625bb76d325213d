/* One JSON schema for a pack's facts (see packinfo.h). */
#include "packinfo.h"

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
		json_object_set_new(dtypes, wsp_dtype_name((enum wsp_dtype)dt),
				    json_pack("{s:i,s:I,s:I,s:f}", "tensors", n, "raw_bytes",
					      (json_int_t)raw, "stored_bytes", (json_int_t)stored, "ratio",
					      ratio(raw, stored)));
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
