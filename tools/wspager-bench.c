/*
 * wspager bench: in one run, the machine's ceilings and four loaders over the
 * same pack and the same GEMM workload:
 *   (1) naive: per layer read + decode on one thread into a malloc'd buffer,
 *       synchronous cudaMemcpy, compute, cudaDeviceSynchronize;
 *   (2) the same with a pinned (cudaHostRegister'ed) buffer;
 *   (3) the pager, cold (page cache dropped when root, O_DIRECT otherwise);
 *   (4) the pager with the whole model in its host tier (second pass).
 * Each is reported as a fraction of the ceiling that bounds it: the disk side
 * min(disk x ratio, decode) for (1)-(3), pinned host-to-GPU for (4).  When
 * the pager leaves decoding to the GPU (exprans packs: its host decoded
 * under a tenth of the cold pass's bytes), the host's decode does not bound
 * (3): its ceiling is then disk x ratio, and the row says how much the host
 * decoded.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef WSP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "wspager-tool.h"

enum { R_NAIVE, R_PINNED, R_COLD, R_WARM, R_N };
/* At most this much of the pack is read for the disk ceiling around (3). */
#define DISK_SPAN (16ull << 30)
static const char *const row_label[R_N] = {"(1) naive, pageable buffer", "(2) naive, pinned buffer",
					   "(3) pager, cold", "(4) pager, model in host tier"};
static const char *const row_key[R_N] = {"naive_pageable", "naive_pinned", "pager_cold", "pager_warm"};

struct bench {
	const char *pack;
	int device;
	uint64_t host_cache;
	bool host_cache_set, json;
	wsp_pack *pk;
	struct wsp_pack_summary s;
	/* ceilings, GB/s; < 0 when not measured */
	double h2d_pinned, h2d_pageable, disk, decode, disk_side;
	bool gpu_decodes;            /* the cold pager shipped packed chunks */
	/* The disk: a probe of the first WT_DISK_PROBE bytes picks the best
	 * pread pattern; then the pack (up to DISK_SPAN bytes) is read with it
	 * and with the pager's own path just before and just after (3).  dc,
	 * the ceiling of (1)-(3), is the better of those two, or the probe
	 * where they did not run (no GPU). */
	struct wt_disk_ceiling probe, before, after, dc;
	bool spanned;
	bool direct, dropped;
	struct {
		double gbps;
		uint64_t wall_ns;
		uint64_t bytes_h2d, bytes_read;  /* of the timed pass */
		uint64_t host_decoded, host_decode_ns;
		char skip[128];
	} row[R_N];
};

static void skip_row(struct bench *b, int r, const char *why)
{
	snprintf(b->row[r].skip, sizeof(b->row[r].skip), "%s", why);
}

static void log_cb(void *ctx, const char *message)
{
	(void)ctx;
	fprintf(stderr, "wspager: %s\n", message);
}

#ifdef WSP_HAVE_CUDA
/* Tensor positions in a decoded layer: 256-byte aligned, in tensor order
 * (wspack(5)); checked against the checksums before any timing. */
static void layout(const struct wsp_layer *L, uint64_t *off)
{
	uint64_t c = 0;
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		c = (c + 255) / 256 * 256;
		off[i] = c;
		c += L->tensors[i].bytes;
	}
}

static int check_layout(wsp_pack *pk, uint32_t layer, void *buf, uint64_t *off)
{
	const struct wsp_layer *L = wsp_pack_layer(pk, layer);
	if (wsp_pack_read_layer(pk, layer, buf) < 0) {
		cli_error("%s", wsp_pack_errmsg(pk));
		return CLI_EXIT_FAIL;
	}
	layout(L, off);
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		const struct wsp_tensor *t = &L->tensors[i];
		if (off[i] + t->bytes > L->raw_bytes ||
		    wsp_checksum64((char *)buf + off[i], t->bytes) != t->checksum) {
			cli_error("bench: layer %s: tensor %s is not where the pack layout puts it", L->name, t->name);
			return CLI_EXIT_FAIL;
		}
	}
	return 0;
}

#define CK(call, what)                                                                        \
	do {                                                                                  \
		cudaError_t ce_ = (call);                                                     \
		if (ce_ != cudaSuccess) {                                                     \
			cli_error("CUDA: %s: %s (%s)", (what), cudaGetErrorString(ce_),        \
				 cudaGetErrorName(ce_));                                      \
			goto out;                                                             \
		}                                                                             \
	} while (0)

static int naive(struct bench *b, bool pinned, int r)
{
	const struct wsp_pack_summary *s = &b->s;
	void *hbuf = NULL, *dbuf = NULL;
	bool registered = false;
	struct wt_work *w = NULL;
	uint64_t *off = NULL;
	struct wsp_tensor *tv = NULL;
	uint32_t max_t = 0;
	int rc = CLI_EXIT_FAIL;
	for (uint32_t i = 0; i < s->n_layers; i++)
		if (wsp_pack_layer(b->pk, i)->n_tensors > max_t)
			max_t = wsp_pack_layer(b->pk, i)->n_tensors;
	uint64_t bytes = s->max_layer_raw_bytes ? s->max_layer_raw_bytes : 1;
	off = calloc(max_t + 1, sizeof(*off));
	tv = calloc(max_t + 1, sizeof(*tv));
	if (!off || !tv || posix_memalign(&hbuf, 4096, bytes)) {
		hbuf = NULL;
		cli_error("out of memory (%" PRIu64 " bytes for the largest layer)", bytes);
		goto out;
	}
	memset(hbuf, 0, bytes);
	CK(cudaSetDevice(b->device), "cudaSetDevice");
	if (pinned) {
		CK(cudaHostRegister(hbuf, bytes, cudaHostRegisterDefault), "cudaHostRegister (layer buffer)");
		registered = true;
	}
	CK(cudaMalloc(&dbuf, bytes), "cudaMalloc (layer buffer)");
	/* Before timing: the layout rule and the device checksum kernel are
	 * checked on the layer with the most tensors. */
	uint32_t probe = 0;
	for (uint32_t i = 0; i < s->n_layers; i++)
		if (wsp_pack_layer(b->pk, i)->n_tensors > wsp_pack_layer(b->pk, probe)->n_tensors)
			probe = i;
	if (check_layout(b->pk, probe, hbuf, off))
		goto out;
	if (!pinned) {
		const struct wsp_layer *L = wsp_pack_layer(b->pk, probe);
		struct wt_work_cfg sc = {.device = b->device, .batch = 1, .checksum_all = true, .max_steps = 1};
		struct wsp_layer v = *L;
		struct wt_pass_result sr;
		CK(cudaMemcpy(dbuf, hbuf, L->raw_bytes, cudaMemcpyHostToDevice), "cudaMemcpy (layer)");
		for (uint32_t k = 0; k < L->n_tensors; k++) {
			tv[k] = L->tensors[k];
			tv[k].data = (char *)dbuf + off[k];
		}
		v.tensors = tv;
		v.data = dbuf;
		if (wt_work_open(&sc, b->pk, &w))
			goto out;
		if (wt_work_pass_begin(w) || wt_work_layer(w, &v) || wt_work_pass_end(w, &sr))
			goto out;
		wt_work_close(w);
		w = NULL;
	}
	struct wt_work_cfg wc = {.device = b->device, .batch = 16, .max_steps = s->n_layers};
	if (wt_work_open(&wc, b->pk, &w))
		goto out;
	wt_drop_caches();
	uint64_t t0 = wt_now_ns();
	if (wt_work_pass_begin(w))
		goto out;
	for (uint32_t i = 0; i < s->n_layers; i++) {
		const struct wsp_layer *L = wsp_pack_layer(b->pk, i);
		if (wsp_pack_read_layer(b->pk, i, hbuf) < 0) {
			cli_error("%s", wsp_pack_errmsg(b->pk));
			goto out;
		}
		CK(cudaMemcpy(dbuf, hbuf, L->raw_bytes, cudaMemcpyHostToDevice), "cudaMemcpy (layer)");
		struct wsp_layer v = *L;
		layout(L, off);
		for (uint32_t k = 0; k < L->n_tensors; k++) {
			tv[k] = L->tensors[k];
			tv[k].data = (char *)dbuf + off[k];
		}
		v.tensors = tv;
		v.data = dbuf;
		if (wt_work_layer(w, &v))
			goto out;
		CK(cudaDeviceSynchronize(), "workload");
	}
	struct wt_pass_result res;
	if (wt_work_pass_end(w, &res))
		goto out;
	b->row[r].wall_ns = wt_now_ns() - t0;
	b->row[r].gbps = wt_gbps(s->raw_bytes, b->row[r].wall_ns);
	b->row[r].bytes_h2d = s->raw_bytes;
	b->row[r].bytes_read = s->stored_bytes;
	rc = 0;
out:
	wt_work_close(w);
	if (registered)
		cudaHostUnregister(hbuf);
	cudaFree(dbuf);
	free(hbuf);
	free(off);
	free(tv);
	return rc;
}
#undef CK
#endif /* WSP_HAVE_CUDA */

/* Passes in pack order through a pager; times the last.  The warm row runs
 * three and times the steady state: on a 16-core H200 machine its second
 * pass measured 74% of the pinned ceiling while `wspager run` passes 2-5
 * of the same pack all measured ~100%; the cause was not established. */
static int pager(struct bench *b, uint64_t host_cache, bool set_cache, unsigned passes, int r)
{
	struct wsp_options opt;
	wsp_options_init(&opt);
	opt.device = b->device;
	opt.log = log_cb;
	if (set_cache)
		opt.host_cache_bytes = host_cache;
	wsp_pager *pg = NULL;
	struct wt_work *w = NULL;
	char err[512] = "";
	int rc = CLI_EXIT_FAIL;
	/* The workload first (cuBLAS loads in it): the pager starts reading at
	 * wsp_open, and the first pass is timed from there, so no reading
	 * happens before the clock starts. */
	struct wt_work_cfg wc = {.device = b->device, .batch = 16, .max_steps = b->s.n_layers};
	if (wt_work_open(&wc, b->pk, &w))
		return CLI_EXIT_FAIL;
	wt_drop_caches();
	uint64_t t_open = wt_now_ns();
	int orc = wsp_open(b->pack, &opt, &pg, err, sizeof(err));
	if (orc < 0) {
		wt_open_error(b->pack, err, orc);
		wt_work_close(w);
		return CLI_EXIT_FAIL;
	}
	for (unsigned p = 0; p < passes; p++) {
		struct wsp_stats s0, s1;
		memset(&s0, 0, sizeof(s0));
		if (p > 0)
			wsp_get_stats(pg, &s0);
		uint64_t t0 = p == 0 ? t_open : wt_now_ns();
		if (wt_work_pass_begin(w))
			goto out;
		for (uint32_t i = 0; i < b->s.n_layers; i++) {
			const struct wsp_layer *v;
			if (wsp_acquire(pg, i, wt_work_stream(w), &v) < 0) {
				wt_acquire_error(pg, wsp_pack_layer(b->pk, i)->name);
				goto out;
			}
			int wr = wt_work_layer(w, v);
			int rr = wsp_release(pg, i, wt_work_stream(w));
			if (wr)
				goto out;
			if (rr < 0) {
				cli_error("release of layer %s: %s", v->name, wsp_errmsg(pg));
				goto out;
			}
		}
		struct wt_pass_result res;
		if (wt_work_pass_end(w, &res))
			goto out;
		b->row[r].wall_ns = wt_now_ns() - t0;
		b->row[r].gbps = wt_gbps(b->s.raw_bytes, b->row[r].wall_ns);
		wsp_get_stats(pg, &s1);
		b->row[r].bytes_h2d = s1.bytes_h2d - s0.bytes_h2d;
		b->row[r].bytes_read = s1.bytes_read - s0.bytes_read;
		b->row[r].host_decoded = s1.bytes_decoded - s0.bytes_decoded;
		b->row[r].host_decode_ns = s1.decode_ns - s0.decode_ns;
	}
	rc = 0;
out:
	wt_work_close(w);
	wsp_close(pg);
	return rc;
}

static uint64_t mem_available(void)
{
	long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
}

static double disk_x_ratio(const struct bench *b)
{
	return b->disk * (b->s.stored_bytes ? (double)b->s.raw_bytes / b->s.stored_bytes : 1);
}

/* The disk ceiling of rows (1)-(3), and what follows from it. */
static void use_disk(struct bench *b, const struct wt_disk_ceiling *dc)
{
	b->dc = *dc;
	b->disk = dc->gbps;
	b->direct = dc->direct;
	b->dropped = dc->dropped;
	b->disk_side = disk_x_ratio(b) < b->decode ? disk_x_ratio(b) : b->decode;
}

static double ceiling_of(const struct bench *b, int r)
{
	if (r == R_COLD && b->gpu_decodes)
		return disk_x_ratio(b);
	return r == R_WARM ? b->h2d_pinned : b->disk_side;
}

static const char *ceiling_name(const struct bench *b, int r)
{
	if (r == R_COLD && b->gpu_decodes)
		return "disk_x_ratio";
	return r == R_WARM ? "h2d_pinned" : "disk_side";
}

static json_t *num_or_null(double v)
{
	return v >= 0 ? json_real(v) : json_null();
}

static int report_json(const struct bench *b)
{
	char dn[300];
	json_t *rows = json_array();
	for (int r = 0; rows && r < R_N; r++) {
		bool ok = !b->row[r].skip[0];
		double ceil = ceiling_of(b, r), base = b->row[R_NAIVE].skip[0] ? -1 : b->row[R_NAIVE].gbps;
		json_array_append_new(
			rows, json_pack("{s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:s,s:o,s:o,s:s?}", "name", row_key[r], "label", row_label[r],
					"bytes_h2d", ok ? json_integer((json_int_t)b->row[r].bytes_h2d) : json_null(),
					"bytes_read", ok ? json_integer((json_int_t)b->row[r].bytes_read) : json_null(),
					"host_decoded_bytes", ok && r >= R_COLD ? json_integer((json_int_t)b->row[r].host_decoded) : json_null(),
					"host_decode_s", num_or_null(ok && r >= R_COLD ? b->row[r].host_decode_ns / 1e9 : -1),
					"gbps", num_or_null(ok ? b->row[r].gbps : -1), "wall_s",
					num_or_null(ok ? b->row[r].wall_ns / 1e9 : -1), "ceiling",
					ceiling_name(b, r), "fraction_of_ceiling",
					num_or_null(ok && ceil > 0 ? b->row[r].gbps / ceil : -1), "speedup",
					num_or_null(ok && base > 0 ? b->row[r].gbps / base : -1), "skipped",
					ok ? NULL : b->row[r].skip));
	}
	json_t *ceil = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:i,s:I,s:b,s:b,s:o,s:b,s:o,s:o}",
				 "disk_probe_gbps", json_real(b->probe.gbps), "disk_probe_bytes",
				 json_integer((json_int_t)(b->probe.limit < b->s.stored_bytes ? b->probe.limit
											       : b->s.stored_bytes)),
				 "disk_before_cold_gbps", num_or_null(b->spanned ? b->before.gbps : -1),
				 "disk_after_cold_gbps", num_or_null(b->spanned ? b->after.gbps : -1),
				 "h2d_pinned_gbps", num_or_null(b->h2d_pinned),
				 "h2d_pageable_gbps", num_or_null(b->h2d_pageable), "disk_gbps", num_or_null(b->disk),
				 "disk_threads", (int)b->dc.threads, "disk_request_bytes", (json_int_t)b->dc.req_bytes,
				 "disk_direct", b->direct, "page_cache_dropped", b->dropped, "decode_gbps",
				 num_or_null(b->decode), "decode_from_memory", true, "disk_side_gbps",
				 num_or_null(b->disk_side), "disk_x_ratio_gbps", num_or_null(disk_x_ratio(b)));
	json_t *model = json_pack("{s:i,s:I,s:I,s:f}", "layers", (int)b->s.n_layers, "raw_bytes",
				  (json_int_t)b->s.raw_bytes, "stored_bytes", (json_int_t)b->s.stored_bytes, "ratio",
				  b->s.stored_bytes ? (double)b->s.raw_bytes / b->s.stored_bytes : 0.0);
	json_t *root = json_pack("{s:s,s:s,s:s,s:o,s:o,s:o}", "version", wsp_version_string(), "pack", b->pack,
				 "device", wt_device_name(b->device, dn, sizeof(dn)), "model", model, "ceilings", ceil,
				 "loaders", rows);
	if (!root) {
		cli_error("out of memory building JSON");
		return CLI_EXIT_FAIL;
	}
	int rc = wt_json_print(root);
	json_decref(root);
	return rc;
}

/* "disk read, first 2.00 GiB, O_DIRECT, 8 x 8 MiB    1.88 GB/s ...". */
static void disk_line(const struct bench *b, const struct wt_disk_ceiling *dc, const char *when)
{
	char what[96], span[32], how[32];
	uint64_t read = dc->limit && dc->limit < b->s.stored_bytes ? dc->limit : b->s.stored_bytes;
	if (dc->threads)
		snprintf(how, sizeof(how), "%u x %" PRIu64 " MiB", dc->threads, dc->req_bytes >> 20);
	else
		snprintf(how, sizeof(how), "pager I/O");
	snprintf(what, sizeof(what), "disk, %s %s, %s", when, wt_size(read, span, sizeof(span)), how);
	printf("  %-36s %8.2f GB/s of stored bytes%s%s\n", what, dc->gbps,
	       dc->direct ? "" : " (buffered)", dc == &b->probe && b->dropped ? " (page cache dropped)" : "");
}

static void report_text(const struct bench *b)
{
	char dn[300], a[32], c[32];
	double ratio = b->s.stored_bytes ? (double)b->s.raw_bytes / b->s.stored_bytes : 0;
	printf("pack    %s: %u layers, %s raw, %s stored (ratio %.3f)\n", b->pack, b->s.n_layers,
	       wt_size(b->s.raw_bytes, a, sizeof(a)), wt_size(b->s.stored_bytes, c, sizeof(c)), ratio);
	printf("device  %s\n\nceilings (GB/s = 1e9 bytes/s)\n", wt_device_name(b->device, dn, sizeof(dn)));
	if (b->h2d_pinned >= 0) {
		printf("  host->GPU, pinned, 64 MiB copies     %8.2f GB/s\n", b->h2d_pinned);
		printf("  host->GPU, pageable, 64 MiB copies   %8.2f GB/s\n", b->h2d_pageable);
	} else {
		printf("  host->GPU                            skipped (no GPU)\n");
	}
	disk_line(b, &b->probe, "first");
	if (b->spanned) {
		disk_line(b, &b->before, "before (3),");
		disk_line(b, &b->after, "after (3),");
	}
	printf("  decode, all threads, from memory     %8.2f GB/s of raw bytes\n", b->decode);
	printf("  disk x ratio%s %8.2f GB/s of weights\n",
	       b->spanned ? ", the better around (3)" : "                        ", disk_x_ratio(b));
	printf("  disk side: min(disk x ratio, decode) %8.2f GB/s of weights\n\n", b->disk_side);
	printf("%-32s %9s %12s %9s %12s\n", "loader", "GB/s", "of ceiling", "speed-up", "copied");
	for (int r = 0; r < R_N; r++) {
		if (b->row[r].skip[0]) {
			printf("%-32s %s\n", row_label[r], b->row[r].skip);
			continue;
		}
		double ceil = ceiling_of(b, r);
		printf("%-32s %9.2f %11.1f%%", row_label[r], b->row[r].gbps,
		       ceil > 0 ? 100 * b->row[r].gbps / ceil : 0.0);
		if (!b->row[R_NAIVE].skip[0] && b->row[R_NAIVE].gbps > 0)
			printf(" %8.2fx", b->row[r].gbps / b->row[R_NAIVE].gbps);
		else
			printf(" %9s", "-");
		printf(" %12s\n", wt_size(b->row[r].bytes_h2d, a, sizeof(a)));
		if (r == R_COLD)
			printf("%-32s the host decoded %s in %.2f s of its threads%s\n", "",
			       wt_size(b->row[r].host_decoded, a, sizeof(a)), b->row[r].host_decode_ns / 1e9,
			       b->gpu_decodes ? "; the GPU the rest (ceiling: disk x ratio)" : "");
	}
	printf("\nGB/s: raw weight bytes used per second; ceiling: disk side for (1)-(3), pinned\n"
	       "host->GPU for (4); copied: bytes moved host->GPU in the timed pass.  The pager\n"
	       "can beat a ceiling when layers stay in GPU slots between passes.\n");
	if (!b->dropped)
		printf("page cache not dropped (needs root; WSPAGER_NO_DROP_CACHES unset): the naive loaders\n"
		       "may read from it, the pager reads with O_DIRECT where the file system allows.\n");
}

int wt_cmd_bench(int argc, char **argv)
{
	struct bench b;
	memset(&b, 0, sizeof(b));
	int rc = 0, dev_req = 0;
	bool dev_set = false, failed = false;
	const struct cli_opt opts[] = {
		CLI_OPT("device", 0, CLI_CALL, &dev_req, .call = wt_opt_device, .given = &dev_set),
		CLI_OPT("host-cache", 0, CLI_SIZE, &b.host_cache, .nonzero = true,
			.given = &b.host_cache_set),
		CLI_OPT("json", 0, CLI_TRUE, &b.json),
	};
	rc = cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), wt_help);
	if (rc == CLI_HELP)
		return CLI_EXIT_OK;
	if (rc)
		return rc;
	if (optind >= argc)
		return cli_usage("missing PACK");
	if (optind + 1 < argc)
		return cli_usage("unexpected argument '%s'", argv[optind + 1]);
	b.pack = argv[optind];
	if ((rc = wt_pick_device("--device", dev_req, dev_set, &b.device)))
		return rc;
	if ((rc = wt_pack_open(b.pack, &b.pk)))
		return rc;
	rc = CLI_EXIT_FAIL;
	if (wsp_pack_summary(b.pk, &b.s) < 0)
		goto out;
	b.h2d_pinned = b.h2d_pageable = -1;

#ifdef WSP_HAVE_CUDA
	if (b.device != WSP_DEVICE_HOST && wt_ceil_h2d(b.device, &b.h2d_pinned, &b.h2d_pageable))
		goto out;
#endif
	if (wt_ceil_disk(b.pack, b.pk, b.s.n_shards, WT_DISK_PROBE, NULL, &b.probe))
		goto out;
	if (wt_ceil_decode(b.pk, b.s.raw_bytes, false, &b.decode))
		goto out;
	use_disk(&b, &b.probe);

	if (b.device == WSP_DEVICE_HOST) {
		for (int r = 0; r < R_N; r++)
			skip_row(&b, r, "skipped (no GPU)");
	} else {
		/* A loader that fails is reported and the others still run:
		 * the ceilings and the other rows remain useful. */
#ifdef WSP_HAVE_CUDA
		if (naive(&b, false, R_NAIVE))
			failed = true, skip_row(&b, R_NAIVE, "failed (see the error above)");
		if (naive(&b, true, R_PINNED))
			failed = true, skip_row(&b, R_PINNED, "failed (see the error above)");
#endif
		/* The disk reading what (3) reads, right before and after it:
		 * virtual disks (and their hosts' caches) give the first GiB of
		 * a file faster than a whole model, and move from minute to
		 * minute. */
		uint64_t span = b.s.stored_bytes < DISK_SPAN ? 0 : DISK_SPAN;
		if (wt_ceil_disk(b.pack, b.pk, b.s.n_shards, span, &b.probe, &b.before))
			goto out;
		if (pager(&b, b.host_cache, b.host_cache_set, 1, R_COLD))
			failed = true, skip_row(&b, R_COLD, "failed (see the error above)");
		else
			b.gpu_decodes = b.row[R_COLD].host_decoded * 10 < b.s.raw_bytes;
		if (wt_ceil_disk(b.pack, b.pk, b.s.n_shards, span, &b.probe, &b.after))
			goto out;
		b.spanned = true;
		use_disk(&b, b.after.gbps > b.before.gbps ? &b.after : &b.before);
		/* Room for every layer, rounded to the cache's pages. */
		uint64_t warm = b.s.raw_bytes + (uint64_t)b.s.n_layers * (4u << 20) + (64u << 20);
		uint64_t avail = mem_available();
		if (avail && warm > avail / 10 * 9) {
			char a[32], c[32];
			snprintf(b.row[R_WARM].skip, sizeof(b.row[R_WARM].skip),
				 "skipped (model needs %s of host cache, %s available)", wt_size(warm, a, sizeof(a)),
				 wt_size(avail, c, sizeof(c)));
		} else if (pager(&b, warm, true, 3, R_WARM)) {
			failed = true;
			skip_row(&b, R_WARM, "failed (see the error above)");
		}
	}
	if (b.json) {
		rc = report_json(&b);
	} else {
		report_text(&b);
		rc = fflush(stdout) == EOF ? CLI_EXIT_FAIL : 0;
	}
	if (failed)
		rc = CLI_EXIT_FAIL;
out:
	wsp_pack_close(b.pk);
	return rc;
}
