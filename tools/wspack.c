/*
 * wspack: convert safetensors checkpoints into wspager packs and back,
 * describe and verify packs, and generate synthetic checkpoints.
 *
 * Uses only the public API (wspager.h).  Exit status: 0 success, 1 runtime
 * failure ("wspack: <detail>"), 2 bad usage (one line plus a hint).
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "packinfo.h"
#include "wspager.h"

static const char usage_text[] =
	"Usage: wspack COMMAND [OPTIONS]\n"
	"\n"
	"Commands:\n"
	"  convert IN... -o OUT   convert safetensors files or a checkpoint directory into a pack\n"
	"      --level N          zstd level (default 1)\n"
	"      --chunk-size SIZE  raw bytes per chunk (default 4M)\n"
	"      --shard-size SIZE  target shard size (default 4G)\n"
	"      --codec auto|exprans|zstd|raw  chunk codec (default auto: per chunk,\n"
	"                         exprans (float exponents rANS-coded, decoded by the\n"
	"                         GPU) unless zstd is >3% smaller; other dtypes zstd)\n"
	"      --no-transform     do not byte-group float dtypes before compressing\n"
	"      --threads N        worker threads (default: all cores)\n"
	"      --group REGEX      extended regex whose first group names a tensor's layer\n"
	"      --order FILE       layer names, one per line: these layers first, in this order\n"
	"      --force            replace an existing output\n"
	"  unpack PACK -o DIR     write the original safetensors files back [--force]\n"
	"  info PACK              describe a pack [--json] [--layers] [--tensors]\n"
	"  verify PACK            decode every chunk and check every checksum [--threads N]\n"
	"  generate OUT           write a synthetic Llama-shaped checkpoint\n"
	"      --layers N --hidden N --intermediate N --vocab N --heads N --kv-heads N\n"
	"      --dtype bf16|f16|f32 --shard-size SIZE --seed N --force\n"
	"\n"
	"  -h, --help             show this help;  -V, --version  show the version\n"
	"\n"
	"Exit status: 0 success, 1 failure, 2 bad usage.  See wspack(1).\n";

static int fail(const char *msg, int code)
{
	cli_error("%s", msg && *msg ? msg : wsp_strerror(code));
	return CLI_EXIT_FAIL;
}

/* Notices of the converter (files or tensors the index does not name). */
static void note_cb(void *ctx, const char *message)
{
	cli_progress_note(ctx, message);
}

static double ratio(uint64_t raw, uint64_t stored)
{
	return stored ? (double)raw / (double)stored : 0.0;
}

/* ---- convert ---- */

static int cmd_convert(int argc, char **argv)
{
	static const struct option lo[] = {
		{"output", required_argument, NULL, 'o'}, {"level", required_argument, NULL, 'l'},
		{"chunk-size", required_argument, NULL, 'c'}, {"shard-size", required_argument, NULL, 's'},
		{"codec", required_argument, NULL, 'C'}, {"no-transform", no_argument, NULL, 'T'},
		{"threads", required_argument, NULL, 't'}, {"group", required_argument, NULL, 'g'},
		{"order", required_argument, NULL, 'O'}, {"force", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'}, {0}};
	struct wsp_convert_options opt;
	wsp_convert_options_init(&opt);
	const char *out = NULL, *order_file = NULL;
	unsigned long long v;
	int c;
	while ((c = getopt_long(argc, argv, ":o:fh", lo, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'l':
			if (cli_opt_uint("--level", optarg, 0, 22, &v))
				return CLI_EXIT_USAGE;
			opt.level = (int)v;
			break;
		case 'c':
			if (cli_opt_size("--chunk-size", optarg, 1, &opt.chunk_bytes))
				return CLI_EXIT_USAGE;
			/* the library's rule, checked here so that it is a usage error */
			if (opt.chunk_bytes % 256 || opt.chunk_bytes > (1ull << 30))
				return cli_usage("--chunk-size: %s is not a multiple of 256 up to 1 GiB",
						   optarg);
			break;
		case 's':
			if (cli_opt_size("--shard-size", optarg, 1, &opt.shard_bytes))
				return CLI_EXIT_USAGE;
			break;
		case 'C':
			if (strcasecmp(optarg, "zstd") == 0)
				opt.codec = WSP_CODEC_ZSTD;
			else if (strcasecmp(optarg, "raw") == 0)
				opt.codec = WSP_CODEC_RAW;
			else if (strcasecmp(optarg, "exprans") == 0)
				opt.codec = WSP_CODEC_EXPRANS;
			else if (strcasecmp(optarg, "auto") == 0)
				opt.codec = WSP_CODEC_AUTO;
			else
				return cli_usage("--codec: must be auto, exprans, zstd or raw, not '%s'",
						   optarg);
			break;
		case 'T': opt.transform = 0; break;
		case 't':
			if (cli_opt_uint("--threads", optarg, 0, 1024, &v))
				return CLI_EXIT_USAGE;
			opt.threads = (unsigned)v;
			break;
		case 'g': opt.group_regex = optarg; break;
		case 'O': order_file = optarg; break;
		case 'f': opt.flags |= WSP_CONVERT_FORCE; break;
		case 'h': fputs(usage_text, stdout); return 0;
		default: return cli_bad_option(c, argc, argv);
		}
	}
	if (!out)
		return cli_usage("no output: give -o OUT.wsp");
	if (optind >= argc)
		return cli_usage("no input: give safetensors files or a checkpoint directory");
	char **order = NULL;
	unsigned *order_lines = NULL;
	size_t n_order;
	if (order_file && cli_read_names(order_file, &order, &order_lines, &n_order))
		return CLI_EXIT_FAIL;
	opt.layer_order = (const char *const *)order;
	struct cli_progress p;
	opt.progress = cli_progress_begin(&p, "converting");
	opt.progress_ctx = &p;
	opt.log = note_cb;
	opt.log_ctx = &p;
	char err[1024] = "";
	int rc = wsp_convert((const char *const *)argv + optind, (size_t)(argc - optind), out, &opt,
			     err, sizeof(err));
	cli_progress_end(&p);
	cli_free_names(order, order_lines);
	if (rc == WSP_ENOTFOUND && order_file) {   /* a name of the order file */
		cli_error("%s: %s", order_file, err);
		return CLI_EXIT_FAIL;
	}
	if (rc < 0)
		return fail(err, rc);
	wsp_pack *pk;
	struct wsp_pack_summary s;
	if (wsp_pack_open(out, &pk, NULL, 0) == 0) {
		if (wsp_pack_summary(pk, &s) == 0) {
			char a[32], b[32];
			printf("%s: %u layers, %u tensors, %s -> %s (ratio %.3f)\n", out, s.n_layers,
			       s.n_tensors, wsp_format_size(s.raw_bytes, a, sizeof(a)),
			       wsp_format_size(s.stored_bytes, b, sizeof(b)),
			       ratio(s.raw_bytes, s.stored_bytes));
		}
		wsp_pack_close(pk);
	}
	return 0;
}

static int open_pack(const char *path, wsp_pack **pk)
{
	char err[1024] = "";
	int rc = wsp_pack_open(path, pk, err, sizeof(err));
	return rc < 0 ? fail(err, rc) : 0;
}

/* A subcommand that takes exactly one PACK operand. */
static int one_operand(int argc, char **argv, const char *what)
{
	if (optind >= argc)
		return cli_usage("no %s given", what);
	if (optind + 1 < argc)
		return cli_usage("unexpected argument '%s'", argv[optind + 1]);
	return 0;
}

/* ---- unpack ---- */

static int cmd_unpack(int argc, char **argv)
{
	static const struct option lo[] = {{"output", required_argument, NULL, 'o'},
					   {"force", no_argument, NULL, 'f'},
					   {"help", no_argument, NULL, 'h'}, {0}};
	const char *out = NULL;
	unsigned flags = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":o:fh", lo, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'f': flags |= WSP_UNPACK_FORCE; break;
		case 'h': fputs(usage_text, stdout); return 0;
		default: return cli_bad_option(c, argc, argv);
		}
	}
	if (one_operand(argc, argv, "pack"))
		return CLI_EXIT_USAGE;
	if (!out)
		return cli_usage("no output: give -o DIR");
	wsp_pack *pk;
	if (open_pack(argv[optind], &pk))
		return 1;
	struct cli_progress p;
	wsp_progress_fn fn = cli_progress_begin(&p, "unpacking");
	int rc = wsp_pack_unpack(pk, out, flags, fn, &p);
	cli_progress_end(&p);
	if (rc < 0)
		rc = fail(wsp_pack_errmsg(pk), rc);
	wsp_pack_close(pk);
	return rc;
}

/* ---- verify ---- */

static int cmd_verify(int argc, char **argv)
{
	static const struct option lo[] = {{"threads", required_argument, NULL, 't'},
					   {"help", no_argument, NULL, 'h'}, {0}};
	unsigned long long threads = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		switch (c) {
		case 't':
			if (cli_opt_uint("--threads", optarg, 0, 1024, &threads))
				return CLI_EXIT_USAGE;
			break;
		case 'h': fputs(usage_text, stdout); return 0;
		default: return cli_bad_option(c, argc, argv);
		}
	}
	if (one_operand(argc, argv, "pack"))
		return CLI_EXIT_USAGE;
	wsp_pack *pk;
	if (open_pack(argv[optind], &pk))
		return 1;
	struct cli_progress p;
	wsp_progress_fn fn = cli_progress_begin(&p, "verifying");
	int rc = wsp_pack_verify(pk, (unsigned)threads, fn, &p);
	cli_progress_end(&p);
	struct wsp_pack_summary s;
	if (rc < 0) {
		rc = fail(wsp_pack_errmsg(pk), rc);
	} else if (wsp_pack_summary(pk, &s) == 0) {
		char a[32];
		printf("%s: OK: %u layers, %u tensors, %llu chunks, %s verified\n", argv[optind],
		       s.n_layers, s.n_tensors, (unsigned long long)s.n_chunks,
		       wsp_format_size(s.raw_bytes, a, sizeof(a)));
	}
	wsp_pack_close(pk);
	return rc;
}

/* ---- info ---- */

static int info_json(const char *path, wsp_pack *pk, const struct wsp_pack_summary *s, int layers)
{
	json_t *root = pi_pack_json(path, pk);
	if (!root)
		return fail("cannot build the JSON output", -ENOMEM);
	if (layers) {
		json_t *arr = json_array();
		json_object_set_new(root, "layer_list", arr);
		for (uint32_t i = 0; i < s->n_layers; i++) {
			const struct wsp_layer *l = wsp_pack_layer(pk, i);
			if (!l)
				continue;
			json_t *lo = pi_layer_json(l);
			json_t *tl = layers > 1 ? json_array() : NULL;
			for (uint32_t t = 0; tl && t < l->n_tensors; t++) {
				const struct wsp_tensor *x = &l->tensors[t];
				json_t *shape = json_array();
				for (unsigned d = 0; d < x->rank; d++)
					json_array_append_new(shape, json_integer((json_int_t)x->shape[d]));
				json_array_append_new(tl, json_pack("{s:s,s:s,s:s,s:o,s:I}", "name", x->name,
								    "short_name", x->short_name, "dtype",
								    wsp_dtype_name(x->dtype), "shape", shape,
								    "bytes", (json_int_t)x->bytes));
			}
			if (tl)
				json_object_set_new(lo, "tensor_list", tl);
			json_array_append_new(arr, lo);
		}
	}
	json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	putchar('\n');
	json_decref(root);
	return 0;
}

static int cmd_info(int argc, char **argv)
{
	static const struct option lo[] = {{"json", no_argument, NULL, 'j'},
					   {"layers", no_argument, NULL, 'L'},
					   {"tensors", no_argument, NULL, 'T'},
					   {"help", no_argument, NULL, 'h'}, {0}};
	int json = 0, layers = 0, c;   /* layers: 0 none, 1 the layer table, 2 with tensors */
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		switch (c) {
		case 'j': json = 1; break;
		case 'L': layers = layers > 1 ? layers : 1; break;
		case 'T': layers = 2; break;
		case 'h': fputs(usage_text, stdout); return 0;
		default: return cli_bad_option(c, argc, argv);
		}
	}
	if (one_operand(argc, argv, "pack"))
		return CLI_EXIT_USAGE;
	wsp_pack *pk;
	if (open_pack(argv[optind], &pk))
		return 1;
	struct wsp_pack_summary s;
	int rc = wsp_pack_summary(pk, &s);
	if (rc < 0) {
		rc = fail(wsp_pack_errmsg(pk), rc);
		goto out;
	}
	if (json)
		rc = info_json(argv[optind], pk, &s, layers);
	else
		pi_print_text(argv[optind], pk, layers);
out:
	wsp_pack_close(pk);
	return rc;
}

/* ---- generate ---- */

static int cmd_generate(int argc, char **argv)
{
	static const struct option lo[] = {
		{"layers", required_argument, NULL, 'L'}, {"hidden", required_argument, NULL, 'H'},
		{"intermediate", required_argument, NULL, 'I'}, {"vocab", required_argument, NULL, 'V'},
		{"heads", required_argument, NULL, 'a'}, {"kv-heads", required_argument, NULL, 'k'},
		{"dtype", required_argument, NULL, 'd'}, {"shard-size", required_argument, NULL, 's'},
		{"seed", required_argument, NULL, 'S'}, {"force", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'}, {0}};
	struct wsp_generate_options opt;
	wsp_generate_options_init(&opt);
	unsigned long long v;
	int c;
	while ((c = getopt_long(argc, argv, ":fh", lo, NULL)) != -1) {
		unsigned *dst = NULL;
		const char *name = NULL;
		switch (c) {
		case 'L': dst = &opt.layers; name = "--layers"; break;
		case 'H': dst = &opt.hidden; name = "--hidden"; break;
		case 'I': dst = &opt.intermediate; name = "--intermediate"; break;
		case 'V': dst = &opt.vocab; name = "--vocab"; break;
		case 'a': dst = &opt.heads; name = "--heads"; break;
		case 'k': dst = &opt.kv_heads; name = "--kv-heads"; break;
		case 'd':
			if (strcasecmp(optarg, "bf16") == 0)
				opt.dtype = WSP_DTYPE_BF16;
			else if (strcasecmp(optarg, "f16") == 0)
				opt.dtype = WSP_DTYPE_F16;
			else if (strcasecmp(optarg, "f32") == 0)
				opt.dtype = WSP_DTYPE_F32;
			else
				return cli_usage("--dtype: must be bf16, f16 or f32, not '%s'", optarg);
			break;
		case 's':
			if (cli_opt_size("--shard-size", optarg, 1, &opt.shard_bytes))
				return CLI_EXIT_USAGE;
			break;
		case 'S':
			if (cli_opt_uint("--seed", optarg, 0, ULLONG_MAX, &v))
				return CLI_EXIT_USAGE;
			opt.seed = v;
			break;
		case 'f': opt.flags |= WSP_CONVERT_FORCE; break;
		case 'h': fputs(usage_text, stdout); return 0;
		default: return cli_bad_option(c, argc, argv);
		}
		if (dst) {
			if (cli_opt_uint(name, optarg, 0, UINT_MAX, &v))
				return CLI_EXIT_USAGE;
			if (v == 0)
				return cli_usage("%s: must be positive", name);
			*dst = (unsigned)v;
		}
	}
	if (one_operand(argc, argv, "output path"))
		return CLI_EXIT_USAGE;
	struct cli_progress p;
	opt.progress = cli_progress_begin(&p, "generating");
	opt.progress_ctx = &p;
	char err[1024] = "";
	int rc = wsp_generate(argv[optind], &opt, err, sizeof(err));
	cli_progress_end(&p);
	if (rc < 0)
		return fail(err, rc);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} cmds[] = {{"convert", cmd_convert}, {"unpack", cmd_unpack}, {"info", cmd_info},
		    {"verify", cmd_verify}, {"generate", cmd_generate}};
	cli_name("wspack", NULL);
	if (argc < 2)
		return cli_usage("no command given");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")) {
		printf("wspack %d.%d.%d (library %s)\n", WSP_VERSION_MAJOR, WSP_VERSION_MINOR,
		       WSP_VERSION_PATCH, wsp_version_string());
		return 0;
	}
	opterr = 0;
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(argv[1], cmds[i].name) == 0) {
			cli_name("wspack", cmds[i].name);
			return cmds[i].fn(argc - 1, argv + 1);
		}
	}
	if (argv[1][0] == '-')
		return cli_usage("unknown option '%s'", argv[1]);
	return cli_usage("unknown command '%s'", argv[1]);
}
