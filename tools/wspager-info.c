/* wspager info: what a pack holds, and what it needs from the tiers. */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>

#include "packinfo.h"
#include "wspager-tool.h"

static double ratio(uint64_t raw, uint64_t stored)
{
	return stored ? (double)raw / (double)stored : 0.0;
}

static json_t *layers_json(const wsp_pack *pk, const struct wsp_pack_summary *s)
{
	json_t *a = json_array();
	for (uint32_t i = 0; a && i < s->n_layers; i++)
		json_array_append_new(a, pi_layer_json(wsp_pack_layer(pk, i)));
	return a;
}

static int info_json(const char *path, const wsp_pack *pk, const struct wsp_pack_summary *s, bool layers)
{
	json_t *root = pi_pack_json(path, pk);
	if (root && layers)
		json_object_set_new(root, "layer_list", layers_json(pk, s));
	if (!root) {
		wt_error("out of memory building JSON");
		return WT_EXIT_FAIL;
	}
	int rc = wt_json_print(root);
	json_decref(root);
	return rc;
}

static void info_text(const char *path, const wsp_pack *pk, const struct wsp_pack_summary *s, bool layers)
{
	char a[32], b[32];
	const struct wsp_layer *big = NULL;
	for (uint32_t i = 0; i < s->n_layers; i++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, i);
		if (L && (!big || L->raw_bytes > big->raw_bytes))
			big = L;
	}
	printf("pack           %s (format %u)\n", path, s->format_version);
	printf("layers         %" PRIu32 "\n", s->n_layers);
	printf("tensors        %" PRIu32 "\n", s->n_tensors);
	printf("shards         %" PRIu32 "\n", s->n_shards);
	printf("sources        %" PRIu32 " safetensors file%s\n", s->n_sources, s->n_sources == 1 ? "" : "s");
	printf("chunks         %" PRIu64 " of %s raw\n", s->n_chunks, wt_size(s->chunk_bytes, a, sizeof(a)));
	printf("raw            %s (%" PRIu64 " bytes)\n", wt_size(s->raw_bytes, a, sizeof(a)), s->raw_bytes);
	printf("stored         %s (%" PRIu64 " bytes)\n", wt_size(s->stored_bytes, a, sizeof(a)), s->stored_bytes);
	printf("ratio          %.3f\n", ratio(s->raw_bytes, s->stored_bytes));
	printf("largest layer  %s, %s: the minimum GPU slot size\n", big ? wt_text(big->name) : "-",
	       wt_size(s->max_layer_raw_bytes, a, sizeof(a)));
	for (int dt = 0; dt < WSP_DTYPE_COUNT; dt++) {
		uint64_t raw = 0, stored = 0;
		if (wsp_pack_dtype_bytes(pk, (enum wsp_dtype)dt, &raw, &stored) < 0 || (!raw && !stored))
			continue;
		printf("dtype %-8s %s raw, %s stored, ratio %.3f\n", wsp_dtype_name((enum wsp_dtype)dt),
		       wt_size(raw, a, sizeof(a)), wt_size(stored, b, sizeof(b)), ratio(raw, stored));
	}
	printf("metadata       %s\n", s->metadata_json ? s->metadata_json : "(none)");
	if (!layers)
		return;
	printf("\n%-6s %-40s %7s %12s %12s\n", "index", "layer", "tensors", "raw", "stored");
	for (uint32_t i = 0; i < s->n_layers; i++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, i);
		printf("%-6u %-40s %7u %12s %12s\n", i, wt_text(L->name), L->n_tensors, wt_size(L->raw_bytes, a, sizeof(a)),
		       wt_size(L->stored_bytes, b, sizeof(b)));
	}
}

int wt_cmd_info(int argc, char **argv)
{
	enum { O_JSON = 256, O_LAYERS, O_HELP };
	static const struct option lo[] = {{"json", no_argument, NULL, O_JSON}, {"layers", no_argument, NULL, O_LAYERS},
					   {"help", no_argument, NULL, O_HELP}, {NULL, 0, NULL, 0}};
	int o, rc;
	bool json = false, layers = false;
	opterr = 0;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (o) {
		case O_JSON: json = true; break;
		case O_LAYERS: layers = true; break;
		case 'h': case O_HELP: wt_help(stdout); return WT_EXIT_OK;
		default: return wt_bad_option("info", argc, argv);
		}
	}
	if (optind >= argc)
		return wt_usage("info: missing PACK");
	if (optind + 1 < argc)
		return wt_usage("info: unexpected argument '%s'", argv[optind + 1]);
	const char *path = argv[optind];
	wsp_pack *pk;
	if ((rc = wt_pack_open(path, &pk)))
		return rc;
	struct wsp_pack_summary s;
	if (wsp_pack_summary(pk, &s) < 0) {
		wt_error("%s: %s", path, wsp_pack_errmsg(pk));
		wsp_pack_close(pk);
		return WT_EXIT_FAIL;
	}
	if (json) {
		rc = info_json(path, pk, &s, layers);
	} else {
		info_text(path, pk, &s, layers);
		rc = fflush(stdout) == EOF ? WT_EXIT_FAIL : 0;
	}
	wsp_pack_close(pk);
	return rc;
}
