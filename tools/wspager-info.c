/* wspager info: what a pack holds, and what it needs from the tiers. */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>

#include "packinfo.h"
#include "wspager-tool.h"

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
		cli_error("out of memory building JSON");
		return CLI_EXIT_FAIL;
	}
	int rc = wt_json_print(root);
	json_decref(root);
	return rc;
}

int wt_cmd_info(int argc, char **argv)
{
	bool json = false, layers = false;
	const struct cli_opt opts[] = {
		CLI_OPT("json", 0, CLI_TRUE, &json),
		CLI_OPT("layers", 0, CLI_TRUE, &layers),
	};
	int rc = cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), wt_help);
	if (rc == CLI_HELP)
		return CLI_EXIT_OK;
	if (rc)
		return rc;
	if (optind >= argc)
		return cli_usage("missing PACK");
	if (optind + 1 < argc)
		return cli_usage("unexpected argument '%s'", argv[optind + 1]);
	const char *path = argv[optind];
	wsp_pack *pk;
	if ((rc = wt_pack_open(path, &pk)))
		return rc;
	struct wsp_pack_summary s;
	if (wsp_pack_summary(pk, &s) < 0) {
		cli_error("%s: %s", path, wsp_pack_errmsg(pk));
		wsp_pack_close(pk);
		return CLI_EXIT_FAIL;
	}
	if (json) {
		rc = info_json(path, pk, &s, layers);
	} else {
		pi_print_text(path, pk, layers ? 1 : 0);
		rc = fflush(stdout) == EOF ? CLI_EXIT_FAIL : 0;
	}
	wsp_pack_close(pk);
	return rc;
}
