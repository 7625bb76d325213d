/*
 * wspager run: stream a pack through the pager for a number of passes,
 * running the workload (wspager-work.c) on every layer, and report
 * throughput, compute and wait time, hit rates, disk bytes and CPU time.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "wspager-tool.h"

struct run_cfg {
	const char *pack, *order_file, *trace_file;
	bool force;           /* --force: replace an existing trace file */
	unsigned passes, batch, gpu_slots, lookahead, threads;
	uint64_t host_cache;
	bool host_cache_set, gpu_slots_set, lookahead_set, json, no_prefetch, device_set;
	int device;
	struct wt_devices devices;   /* --devices: a pager over several */
	bool devices_set;
	enum wsp_io_backend io;
	enum wsp_policy policy;
};

/* One row of the report: a pass, or the total. */
struct run_row {
	unsigned pass;
	uint64_t wall_ns, bytes, compute_ns, wait_ns;
	struct wsp_stats st;          /* counters of this pass (difference) */
	struct wt_cpu cpu;
	uint64_t gemms, checksums, flops, steps;
};

static void log_cb(void *ctx, const char *message)
{
	(void)ctx;
	fprintf(stderr, "wspager: %s\n", message);
}

/* Layer names, one per line ('#' comments, blank lines skipped), as
 * indices into the pack. */
int wt_read_order(const char *path, const wsp_pack *pk, uint32_t **out, size_t *n_out)
{
	char **names;
	unsigned *lines;
	size_t n;
	int rc = cli_read_names(path, &names, &lines, &n);
	if (rc)
		return rc;
	uint32_t *order = malloc(n * sizeof(*order));
	if (!order) {
		cli_error("out of memory");
		rc = CLI_EXIT_FAIL;
	}
	for (size_t i = 0; !rc && i < n; i++) {
		const struct wsp_layer *L = wsp_pack_find_layer(pk, names[i]);
		if (!L) {
			cli_error("%s:%u: no layer named '%s' in the pack", path, lines[i], names[i]);
			rc = CLI_EXIT_FAIL;
		} else {
			order[i] = L->index;
		}
	}
	cli_free_names(names, lines);
	if (rc) {
		free(order);
		return rc;
	}
	*out = order;
	*n_out = n;
	return 0;
}

static void stats_diff(const struct wsp_stats *a, const struct wsp_stats *b, struct wsp_stats *d)
{
	*d = *b;
#define D(f) d->f = b->f - a->f
	D(acquires); D(gpu_hits); D(host_hits); D(misses); D(predicted); D(prefetches);
	D(prefetch_wasted); D(host_evictions); D(gpu_evictions); D(bytes_read); D(bytes_decoded);
	D(bytes_h2d); D(read_ns); D(decode_ns); D(h2d_ns); D(acquire_block_ns);
#undef D
}

static void row_add(struct run_row *t, const struct run_row *r)
{
	t->wall_ns += r->wall_ns;
	t->bytes += r->bytes;
	t->compute_ns += r->compute_ns;
	t->wait_ns += r->wait_ns;
	t->cpu.user_ns += r->cpu.user_ns;
	t->cpu.sys_ns += r->cpu.sys_ns;
	t->gemms += r->gemms;
	t->checksums += r->checksums;
	t->flops += r->flops;
	t->steps += r->steps;
#define A(f) t->st.f += r->st.f
	A(acquires); A(gpu_hits); A(host_hits); A(misses); A(predicted); A(prefetches);
	A(prefetch_wasted); A(host_evictions); A(gpu_evictions); A(bytes_read); A(bytes_decoded);
	A(bytes_h2d); A(read_ns); A(decode_ns); A(h2d_ns); A(acquire_block_ns);
#undef A
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

/* Host hit: the layer was at least in the host tier when acquired. */
static double host_hit_rate(const struct wsp_stats *s)
{
	return s->acquires ? ratio(s->acquires - (s->misses < s->acquires ? s->misses : s->acquires), s->acquires) : 0;
}

static json_t *row_json(const struct run_row *r, bool total)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	if (!total)
		json_object_set_new(o, "pass", json_integer(r->pass));
	json_object_set_new(o, "layers", json_integer((json_int_t)r->steps));
	json_object_set_new(o, "wall_s", json_real(r->wall_ns / 1e9));
	json_object_set_new(o, "weights_bytes", json_integer((json_int_t)r->bytes));
	json_object_set_new(o, "weights_gbps", json_real(wt_gbps(r->bytes, r->wall_ns)));
	json_object_set_new(o, "compute_s", json_real(r->compute_ns / 1e9));
	json_object_set_new(o, "wait_s", json_real(r->wait_ns / 1e9));
	json_object_set_new(o, "acquire_block_s", json_real(r->st.acquire_block_ns / 1e9));
	json_object_set_new(o, "acquires", json_integer((json_int_t)r->st.acquires));
	json_object_set_new(o, "gpu_hits", json_integer((json_int_t)r->st.gpu_hits));
	json_object_set_new(o, "host_hits", json_integer((json_int_t)r->st.host_hits));
	json_object_set_new(o, "misses", json_integer((json_int_t)r->st.misses));
	json_object_set_new(o, "gpu_hit_rate", json_real(ratio(r->st.gpu_hits, r->st.acquires)));
	json_object_set_new(o, "host_hit_rate", json_real(host_hit_rate(&r->st)));
	json_object_set_new(o, "predicted", json_integer((json_int_t)r->st.predicted));
	json_object_set_new(o, "prefetches", json_integer((json_int_t)r->st.prefetches));
	json_object_set_new(o, "prefetch_wasted", json_integer((json_int_t)r->st.prefetch_wasted));
	json_object_set_new(o, "host_evictions", json_integer((json_int_t)r->st.host_evictions));
	json_object_set_new(o, "gpu_evictions", json_integer((json_int_t)r->st.gpu_evictions));
	json_object_set_new(o, "bytes_read", json_integer((json_int_t)r->st.bytes_read));
	json_object_set_new(o, "bytes_decoded", json_integer((json_int_t)r->st.bytes_decoded));
	json_object_set_new(o, "bytes_h2d", json_integer((json_int_t)r->st.bytes_h2d));
	json_object_set_new(o, "cpu_user_s", json_real(r->cpu.user_ns / 1e9));
	json_object_set_new(o, "cpu_sys_s", json_real(r->cpu.sys_ns / 1e9));
	json_object_set_new(o, "gemms", json_integer((json_int_t)r->gemms));
	json_object_set_new(o, "gemm_tflops", json_real(r->compute_ns ? (double)r->flops / r->compute_ns / 1e3 : 0));
	json_object_set_new(o, "checksums", json_integer((json_int_t)r->checksums));
	return o;
}

static const char *policy_name(enum wsp_policy p)
{
	return p == WSP_POLICY_LRU ? "lru" : "predict";
}

/* wsp_who_decodes as a word (wsp_open(3)). */
static const char *decoder_name(int who)
{
	switch (who) {
	case WSP_DECODE_GPU: return "gpu";
	case WSP_DECODE_HOST: return "host";
	case WSP_DECODE_TRYING: return "trying";
	case WSP_DECODE_MIXED: return "mixed";
	default: return "unknown";
	}
}

static int print_json(const struct run_cfg *c, const char *devices, const struct wsp_pack_summary *s,
		      size_t steps, const struct wsp_stats *fin, int who, const struct run_row *rows,
		      const struct run_row *tot)
{
	json_t *cfg = json_pack("{s:i,s:i,s:I,s:I,s:i,s:I,s:I,s:s,s:b,s:s,s:i,s:i,s:b,s:s}", "passes", c->passes, "batch",
				c->batch, "host_cache_bytes", (json_int_t)fin->host_cache_bytes, "pinned_bytes",
				(json_int_t)fin->pinned_bytes, "gpu_slots", fin->gpu_slots, "slot_bytes",
				(json_int_t)fin->slot_bytes, "slots_total_bytes",
				(json_int_t)fin->slots_total_bytes, "io_backend", fin->io_backend, "direct_io",
				fin->direct_io != 0, "policy", policy_name(c->policy), "lookahead", c->lookahead,
				"threads", c->threads, "prefetch", !c->no_prefetch, "who_decodes", decoder_name(who));
	json_t *model = json_pack("{s:i,s:i,s:i,s:I,s:I,s:I,s:i}", "layers", s->n_layers, "tensors", s->n_tensors,
				  "shards", s->n_shards, "raw_bytes", (json_int_t)s->raw_bytes, "stored_bytes",
				  (json_int_t)s->stored_bytes, "max_layer_raw_bytes", (json_int_t)s->max_layer_raw_bytes,
				  "layers_per_pass", (int)steps);
	json_t *passes = json_array();
	for (unsigned p = 0; passes && p < c->passes; p++)
		json_array_append_new(passes, row_json(&rows[p], false));
	json_t *root = json_pack("{s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "version", wsp_version_string(), "pack", c->pack,
				 "device", devices, "config", cfg, "model", model,
				 "passes", passes, "total", row_json(tot, true));
	if (!root) {
		cli_error("out of memory building JSON");
		return CLI_EXIT_FAIL;
	}
	int rc = wt_json_print(root);
	json_decref(root);
	return rc;
}

static void print_row(const char *label, const struct run_row *r)
{
	char rd[32];
	printf("%-6s %8.3f %9.2f %9.3f %9.3f %8.1f%% %8.1f%% %11s %8.2f\n", label, r->wall_ns / 1e9,
	       wt_gbps(r->bytes, r->wall_ns), r->compute_ns / 1e9, r->wait_ns / 1e9, 100 * host_hit_rate(&r->st),
	       100 * ratio(r->st.gpu_hits, r->st.acquires), wt_size(r->st.bytes_read, rd, sizeof(rd)),
	       (r->cpu.user_ns + r->cpu.sys_ns) / 1e9);
}

static void print_table(const struct run_cfg *c, const char *devices, bool host,
			const struct wsp_pack_summary *s, size_t steps, const struct wsp_stats *fin,
			int who, const struct run_row *rows, const struct run_row *tot)
{
	char a[32], b[32], d[32];
	printf("pack      %s: %u layers, %s raw, %s stored\n", c->pack, s->n_layers,
	       wt_size(s->raw_bytes, a, sizeof(a)), wt_size(s->stored_bytes, b, sizeof(b)));
	printf("device    %s\n", devices);
	printf("tiers     host cache %s (%s pinned), %u GPU slots of up to %s",
	       wt_size(fin->host_cache_bytes, a, sizeof(a)), wt_size(fin->pinned_bytes, b, sizeof(b)),
	       fin->gpu_slots, wt_size(fin->slot_bytes, d, sizeof(d)));
	/* Slots are sized by what they hold: say what that saved. */
	uint64_t all_largest = (uint64_t)fin->gpu_slots * fin->slot_bytes;
	if (fin->slots_total_bytes && fin->slots_total_bytes < all_largest)
		printf(": %s in all (%s if each were the largest)", wt_size(fin->slots_total_bytes, a, sizeof(a)),
		       wt_size(all_largest, b, sizeof(b)));
	printf("\n");
	printf("io        %s%s, policy %s, %zu layers per pass, batch %u\n", fin->io_backend,
	       fin->direct_io ? " (O_DIRECT)" : " (buffered)", policy_name(c->policy), steps, c->batch);
	printf("decode    %s%s\n\n", decoder_name(who),
	       who == WSP_DECODE_TRYING ? " (still measuring who decodes at the end: more passes let "
					  "the pager choose)" : "");
	printf("%-6s %8s %9s %9s %9s %9s %9s %11s %8s\n", "pass", "time(s)", "GB/s", "compute", "wait(s)",
	       "host hit", "GPU hit", "disk read", "CPU(s)");
	for (unsigned p = 0; p < c->passes; p++) {
		char lab[16];
		snprintf(lab, sizeof(lab), "%u", rows[p].pass);
		print_row(lab, &rows[p]);
	}
	print_row("total", tot);
	printf("\nGB/s: raw weight bytes acquired per second of wall time (1 GB = 1e9 bytes).\n"
	       "wait: time the %s waited for weights between layers%s.\n",
	       host ? "workload (host backend: blocked in acquire)" : "GPU",
	       strchr(devices, ',') ? ", summed over the devices (with each one's idle time while "
				      "the others computed)" : "");
}

static int parse(int argc, char **argv, struct run_cfg *c)
{
	static const char *const ios[] = { "auto", "uring", "pread", "mmap", NULL };
	static const int io_ids[] = { WSP_IO_AUTO, WSP_IO_URING, WSP_IO_PREAD, WSP_IO_MMAP };
	static const char *const policies[] = { "lru", "predict", NULL };
	static const int policy_ids[] = { WSP_POLICY_LRU, WSP_POLICY_PREDICT };
	memset(c, 0, sizeof(*c));
	c->passes = 3;
	c->batch = 16;
	c->device = 0;
	c->policy = WSP_POLICY_PREDICT;
	int io = (int)c->io, policy = (int)c->policy;
	const struct cli_opt opts[] = {
		CLI_OPT("passes", 0, CLI_UINT, &c->passes, .min = 1, .max = 1000000),
		CLI_OPT("order", 0, CLI_STRING, &c->order_file),
		CLI_OPT("batch", 0, CLI_UINT, &c->batch, .min = 1, .max = 65536),
		CLI_OPT("host-cache", 0, CLI_SIZE, &c->host_cache, .nonzero = true,
			.given = &c->host_cache_set),
		CLI_OPT("gpu-slots", 0, CLI_UINT, &c->gpu_slots, .min = 1, .max = 4096,
			.given = &c->gpu_slots_set),
		CLI_OPT("device", 0, CLI_CALL, &c->device, .call = wt_opt_device,
			.given = &c->device_set),
		CLI_OPT("devices", 0, CLI_CALL, &c->devices, .call = wt_opt_devices,
			.given = &c->devices_set),
		CLI_OPT("io", 0, CLI_CHOICE, &io, .names = ios, .values = io_ids),
		CLI_OPT("policy", 0, CLI_CHOICE, &policy, .names = policies, .values = policy_ids),
		CLI_OPT("lookahead", 0, CLI_UINT, &c->lookahead, .max = 1000000,
			.given = &c->lookahead_set),
		CLI_OPT("threads", 0, CLI_UINT, &c->threads, .max = 4096),
		CLI_OPT("json", 0, CLI_TRUE, &c->json),
		CLI_OPT("trace-json", 0, CLI_STRING, &c->trace_file),
		CLI_OPT("force", 0, CLI_TRUE, &c->force),
		CLI_OPT("no-prefetch", 0, CLI_TRUE, &c->no_prefetch),
	};
	int rc = cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), wt_help);
	if (rc == CLI_HELP)
		return -1;
	c->io = (enum wsp_io_backend)io;
	c->policy = (enum wsp_policy)policy;
	if (rc)
		return rc;
	if (c->device_set && c->devices_set)
		return cli_usage("--device and --devices: give one");
	if (optind >= argc)
		return cli_usage("missing PACK");
	if (optind + 1 < argc)
		return cli_usage("unexpected argument '%s'", argv[optind + 1]);
	c->pack = argv[optind];
	return 0;
}

/* Pass 1 is timed from t_open, when wsp_open began (and with it the
 * prefetching), and its CPU time counted from cpu_open, taken then; the
 * later passes from their first acquire. */
static int run_passes(const struct run_cfg *c, wsp_pager *pg, struct wt_work *const *works,
		      unsigned n_works, const uint32_t *order, size_t steps, uint64_t t_open,
		      const struct wt_cpu *cpu_open, struct wt_trace *tr, struct run_row *rows)
{
	const wsp_pack *pk = wsp_pager_pack(pg);
	struct cli_progress prog;
	uint64_t per_pass = 0, done = 0;
	for (size_t i = 0; i < steps; i++)
		per_pass += wsp_pack_layer(pk, order[i])->raw_bytes;
	cli_progress_begin(&prog, "run");
	for (unsigned p = 0; p < c->passes; p++) {
		struct run_row *r = &rows[p];
		struct wsp_stats s0, s1;
		struct wt_cpu c0, c1;
		struct wt_pass_result res;
		int rc;
		r->pass = p + 1;
		/* Pass 1 counts from the open: prefetching starts there. */
		if (p == 0)
			memset(&s0, 0, sizeof(s0));
		else
			wsp_get_stats(pg, &s0);
		if (p == 0)
			c0 = *cpu_open;
		else
			wt_cpu_now(&c0);
		uint64_t t0 = p == 0 ? t_open : wt_now_ns();
		for (unsigned k = 0; k < n_works; k++)
			if (wt_work_pass_begin(works[k]))
				return CLI_EXIT_FAIL;
		for (size_t i = 0; i < steps; i++) {
			const struct wsp_layer *v;
			int dev;
			unsigned k = 0;
			if (n_works > 1 && wsp_layer_device(pg, order[i], &dev, &k) < 0) {
				cli_progress_end(&prog);
				cli_error("layer %u: %s", order[i], wsp_errmsg(pg));
				return CLI_EXIT_FAIL;
			}
			struct wt_work *w = works[k];   /* the layer's device's workload */
			void *stream = wt_work_stream(w);
			rc = wsp_acquire(pg, order[i], stream, &v);
			if (rc < 0) {
				cli_progress_end(&prog);
				wt_acquire_error(pg, wsp_pack_layer(pk, order[i])->name);
				return CLI_EXIT_FAIL;
			}
			rc = wt_work_layer(w, v);
			int rr = wsp_release(pg, order[i], stream);
			if (rc) {
				cli_progress_end(&prog);
				return rc;
			}
			if (rr < 0) {
				cli_progress_end(&prog);
				cli_error("release of layer %s: %s", v->name, wsp_errmsg(pg));
				return CLI_EXIT_FAIL;
			}
			r->bytes += v->raw_bytes;
			done += v->raw_bytes;
			cli_progress_update(&prog, done, per_pass * c->passes);
		}
		struct wt_pass_result all;
		memset(&all, 0, sizeof(all));
		rc = 0;
		for (unsigned k = 0; k < n_works && !rc; k++) {
			rc = wt_work_pass_end(works[k], &res);
			all.compute_ns += res.compute_ns;
			all.wait_ns += res.wait_ns;
			all.gemms += res.gemms;
			all.checksums += res.checksums;
			all.flops += res.flops;
			all.steps += res.steps;
			if (!rc && tr)
				wt_trace_compute(tr, &res, p + 1);
		}
		res = all;
		uint64_t t1 = wt_now_ns();
		if (rc) {
			cli_progress_end(&prog);
			return rc;
		}
		wt_cpu_now(&c1);
		wsp_get_stats(pg, &s1);
		stats_diff(&s0, &s1, &r->st);
		r->wall_ns = t1 - t0;
		r->compute_ns = res.compute_ns;
		r->wait_ns = res.wait_ns;
		r->cpu.user_ns = c1.user_ns - c0.user_ns;
		r->cpu.sys_ns = c1.sys_ns - c0.sys_ns;
		r->gemms = res.gemms;
		r->checksums = res.checksums;
		r->flops = res.flops;
		r->steps = res.steps;
	}
	cli_progress_end(&prog);
	return 0;
}

int wt_cmd_run(int argc, char **argv)
{
	struct run_cfg c;
	int rc = parse(argc, argv, &c);
	if (rc)
		return rc < 0 ? CLI_EXIT_OK : rc;

	/* One device, or with --devices several (each must exist). */
	struct wt_devices devs = { .n = 1 };
	if (c.devices_set) {
		devs.n = c.devices.n;
		for (unsigned k = 0; k < devs.n; k++)
			if ((rc = wt_pick_device("--devices", c.devices.dev[k], true, &devs.dev[k])))
				return rc;
	} else if ((rc = wt_pick_device("--device", c.device, c.device_set, &devs.dev[0]))) {
		return rc;
	}
	char label[WT_MAX_DEVICES * 80] = "";
	bool host = true;
	for (unsigned k = 0; k < devs.n; k++) {
		char dn[300];
		size_t at = strlen(label);
		snprintf(label + at, sizeof(label) - at, "%s%s", k ? ", " : "",
			 wt_device_name(devs.dev[k], dn, sizeof(dn)));
		host = host && devs.dev[k] == WSP_DEVICE_HOST;
	}

	struct wt_trace *tr = NULL;
	struct stat ts, os;
	if (c.trace_file && c.order_file && stat(c.trace_file, &ts) == 0 &&
	    stat(c.order_file, &os) == 0 && ts.st_dev == os.st_dev && ts.st_ino == os.st_ino) {
		cli_error("--trace-json %s: is the order file", c.trace_file);
		return CLI_EXIT_USAGE;
	}
	if (c.trace_file && (rc = wt_trace_new(c.trace_file, c.pack, c.force, &tr)))
		return rc;

	struct wsp_options opt;
	wsp_options_init(&opt);
	if (c.host_cache_set)
		opt.host_cache_bytes = c.host_cache;
	if (c.gpu_slots_set)
		opt.gpu_slots = c.gpu_slots;
	if (c.lookahead_set)
		opt.lookahead = c.lookahead;
	opt.device = devs.dev[0];
	if (devs.n > 1) {
		opt.devices = devs.dev;
		opt.n_devices = devs.n;
	}
	opt.io = c.io;
	opt.policy = c.policy;
	opt.decode_threads = c.threads;
	if (c.no_prefetch)
		opt.flags |= WSP_OPEN_NO_PREFETCH;
	opt.log = log_cb;
	if (tr) {
		opt.trace = wt_trace_cb;
		opt.trace_ctx = tr;
	}

	wsp_pager *pg = NULL;
	struct wt_work *works[WT_MAX_DEVICES] = { NULL };
	uint32_t *order = NULL;
	struct run_row *rows = NULL;
	size_t steps = 0;
	char err[512] = "";
	/* The workload is set up on a pack handle of its own before the pager
	 * opens (cuBLAS loads there, which takes a while): the pager starts
	 * reading at wsp_open and pass 1 is timed from it, so a cold pass gets
	 * no head start. */
	wsp_pack *pk = NULL;
	if (wt_pack_open(c.pack, &pk)) {
		wt_trace_free(tr);
		return CLI_EXIT_FAIL;
	}
	struct wsp_pack_summary s;
	rc = CLI_EXIT_FAIL;
	if (wsp_pack_summary(pk, &s) < 0) {
		cli_error("%s: cannot read the pack summary", c.pack);
		goto out;
	}
	if (c.order_file) {
		if (wt_read_order(c.order_file, pk, &order, &steps))
			goto out;
	} else {
		steps = s.n_layers;
		order = malloc((steps ? steps : 1) * sizeof(*order));
		if (!order) {
			cli_error("out of memory");
			goto out;
		}
		for (uint32_t i = 0; i < s.n_layers; i++)
			order[i] = i;
	}
	if (s.n_layers == 0) {
		cli_error("%s holds no layers (its checkpoint had no tensors): there is nothing to page",
			  c.pack);
		goto out;
	}
	if (steps == 0) {
		cli_error("%s: the pack has no layers", c.pack);
		goto out;
	}
	for (unsigned k = 0; k < devs.n; k++) {
		struct wt_work_cfg wc = {.device = devs.dev[k], .batch = c.batch, .max_steps = steps};
		if (wt_work_open(&wc, pk, &works[k]))
			goto out;
	}
	rows = calloc(c.passes, sizeof(*rows));
	if (!rows) {
		cli_error("out of memory");
		goto out;
	}
	struct wt_cpu cpu_open;
	wt_cpu_now(&cpu_open);
	uint64_t t_open = wt_now_ns();
	int orc = wsp_open(c.pack, &opt, &pg, err, sizeof(err));
	if (orc < 0) {
		wt_open_error(c.pack, err, orc);
		goto out;
	}
	struct wsp_pack_summary ps;
	if (wsp_pack_summary(wsp_pager_pack(pg), &ps) < 0 || ps.n_layers != s.n_layers ||
	    ps.raw_bytes != s.raw_bytes || ps.stored_bytes != s.stored_bytes) {
		cli_error("%s: the pack changed while it was being opened", c.pack);
		goto out;
	}
	if (run_passes(&c, pg, works, devs.n, order, steps, t_open, &cpu_open, tr, rows))
		goto out;

	struct run_row tot;
	memset(&tot, 0, sizeof(tot));
	for (unsigned p = 0; p < c.passes; p++)
		row_add(&tot, &rows[p]);
	struct wsp_stats fin;
	wsp_get_stats(pg, &fin);
	int who = wsp_who_decodes(pg);
	if (c.json)
		rc = print_json(&c, label, &s, steps, &fin, who, rows, &tot);
	else {
		print_table(&c, label, host, &s, steps, &fin, who, rows, &tot);
		rc = fflush(stdout) == EOF ? CLI_EXIT_FAIL : 0;
	}
out:
	for (unsigned k = 0; k < devs.n; k++)
		wt_work_close(works[k]);
	/* Close the pager before writing the trace: its workers report until
	 * they stop. */
	wsp_close(pg);
	wsp_pack_close(pk);
	if (!rc && tr)
		rc = wt_trace_write(tr);
	wt_trace_free(tr);
	free(rows);
	free(order);
	return rc;
}
