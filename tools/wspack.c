/*
 * wspack: convert safetensors checkpoints into wspager packs and back,
 * describe and verify packs, and generate synthetic checkpoints.
 *
 * Uses only the public API (wspager.h).  Exit status: 0 success, 1 runtime
 * failure ("wspack: <detail>"), 2 bad usage (one line plus a hint).
 */
#include <errno.h>
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
	"      --smallest         also code fp32/bf16 top mantissa bits with the exponent\n"
	"                         where smaller (~0.5%; slower GPU decode)\n"
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

static void help(FILE *out)
{
	fputs(usage_text, out);
}

static double ratio(uint64_t raw, uint64_t stored)
{
	return stored ? (double)raw / (double)stored : 0.0;
}

/* ---- convert ---- */

/* --chunk-size: the library's rule, checked here so that it is a usage error */
static int chunk_size(const char *opt, const char *arg, void *dest)
{
	uint64_t *v = dest;
	int rc = cli_opt_size(opt, arg, 1, v);
	if (rc == 0 && (*v % 256 || *v > (1ull << 30)))
		return cli_usage("%s: %s is not a multiple of 256 up to 1 GiB", opt, arg);
	return rc;
}

static int cmd_convert(int argc, char **argv)
{
	static const char *const codecs[] = { "auto", "exprans", "zstd", "raw", NULL };
	static const int codec_ids[] = { WSP_CODEC_AUTO, WSP_CODEC_EXPRANS, WSP_CODEC_ZSTD,
					 WSP_CODEC_RAW };
	struct wsp_convert_options opt;
	wsp_convert_options_init(&opt);
	const char *out = NULL, *order_file = NULL;
	unsigned level = (unsigned)opt.level, no_transform = 0;
	int codec = (int)opt.codec;
	const struct cli_opt opts[] = {
		CLI_OPT("output", 'o', CLI_STRING, &out),
		CLI_OPT("level", 0, CLI_UINT, &level, .min = 0, .max = 22),
		CLI_OPT("chunk-size", 0, CLI_CALL, &opt.chunk_bytes, .call = chunk_size),
		CLI_OPT("shard-size", 0, CLI_SIZE, &opt.shard_bytes, .min = 1),
		CLI_OPT("codec", 0, CLI_CHOICE, &codec, .names = codecs, .values = codec_ids),
		CLI_OPT("no-transform", 0, CLI_BITS, &no_transform, .bits = 1),
		CLI_OPT("threads", 0, CLI_UINT, &opt.threads, .min = 0, .max = 1024),
		CLI_OPT("group", 0, CLI_STRING, &opt.group_regex),
		CLI_OPT("order", 0, CLI_STRING, &order_file),
		CLI_OPT("force", 'f', CLI_BITS, &opt.flags, .bits = WSP_CONVERT_FORCE),
		CLI_OPT("smallest", 0, CLI_BITS, &opt.flags, .bits = WSP_CONVERT_SMALLEST),
	};
	int c = cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), help);
	if (c)
		return c == CLI_HELP ? 0 : c;
	opt.level = (int)level;
	opt.codec = (enum wsp_codec)codec;
	if (no_transform)
		opt.transform = 0;
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
	const char *out = NULL;
	unsigned flags = 0;
	const struct cli_opt opts[] = {
		CLI_OPT("output", 'o', CLI_STRING, &out),
		CLI_OPT("force", 'f', CLI_BITS, &flags, .bits = WSP_UNPACK_FORCE),
	};
	int c = cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), help);
	if (c)
		return c == CLI_HELP ? 0 : c;
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
	unsigned threads = 0;
	const struct cli_opt opts[] = {
		CLI_OPT("threads", 0, CLI_UINT, &threads, .min = 0, .max = 1024),
	};
	int c = cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), help);
	if (c)
		return c == CLI_HELP ? 0 : c;
	if (one_operand(argc, argv, "pack"))
		return CLI_EXIT_USAGE;
	wsp_pack *pk;
	if (open_pack(argv[optind], &pk))
		return 1;
	struct cli_progress p;
	wsp_progress_fn fn = cli_progress_begin(&p, "verifying");
	int rc = wsp_pack_verify(pk, threads, fn, &p);
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
	bool json = false, with_layers = false, with_tensors = false;
	const struct cli_opt opts[] = {
		CLI_OPT("json", 0, CLI_TRUE, &json),
		CLI_OPT("layers", 0, CLI_TRUE, &with_layers),
		CLI_OPT("tensors", 0, CLI_TRUE, &with_tensors),
	};
	int c = cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), help);
	if (c)
		return c == CLI_HELP ? 0 : c;
	int layers = with_tensors ? 2 : with_layers;   /* 0 none, 1 the layer table, 2 with tensors */
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
	static const char *const dtypes[] = { "bf16", "f16", "f32", NULL };
	static const int dtype_ids[] = { WSP_DTYPE_BF16, WSP_DTYPE_F16, WSP_DTYPE_F32 };
	struct wsp_generate_options opt;
	wsp_generate_options_init(&opt);
	int dtype = (int)opt.dtype;
	unsigned long long seed = opt.seed;
	const struct cli_opt opts[] = {
		CLI_OPT("layers", 0, CLI_UINT, &opt.layers, .max = UINT_MAX, .nonzero = true),
		CLI_OPT("hidden", 0, CLI_UINT, &opt.hidden, .max = UINT_MAX, .nonzero = true),
		CLI_OPT("intermediate", 0, CLI_UINT, &opt.intermediate, .max = UINT_MAX, .nonzero = true),
		CLI_OPT("vocab", 0, CLI_UINT, &opt.vocab, .max = UINT_MAX, .nonzero = true),
		CLI_OPT("heads", 0, CLI_UINT, &opt.heads, .max = UINT_MAX, .nonzero = true),
		CLI_OPT("kv-heads", 0, CLI_UINT, &opt.kv_heads, .max = UINT_MAX, .nonzero = true),
		CLI_OPT("dtype", 0, CLI_CHOICE, &dtype, .names = dtypes, .values = dtype_ids),
		CLI_OPT("shard-size", 0, CLI_SIZE, &opt.shard_bytes, .min = 1),
		CLI_OPT("seed", 0, CLI_ULL, &seed, .max = ULLONG_MAX),
		CLI_OPT("force", 'f', CLI_BITS, &opt.flags, .bits = WSP_CONVERT_FORCE),
	};
	int c = cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), help);
	if (c)
		return c == CLI_HELP ? 0 : c;
	opt.dtype = (enum wsp_dtype)dtype;
	opt.seed = seed;
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
