/*
 * wspager verify: decode every chunk of a pack and check every checksum
 * (wsp_pack_verify); on a GPU, also stream every layer through the pager and
 * checksum each tensor on the device against the manifest, which checks the
 * whole path the weights take.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "wspager-tool.h"

static void log_cb(void *ctx, const char *message)
{
	(void)ctx;
	fprintf(stderr, "wspager: %s\n", message);
}

/* Every layer once, in pack order, checksummed on the device. */
static int device_check(const char *path, int device, unsigned threads, uint64_t *tensors)
{
	struct wsp_options opt;
	wsp_options_init(&opt);
	opt.device = device;
	opt.decode_threads = threads;
	opt.log = log_cb;
	wsp_pager *pg = NULL;
	char err[512] = "";
	int rc = wsp_open(path, &opt, &pg, err, sizeof(err));
	if (rc < 0) {
		wt_open_error(path, err, rc);
		return CLI_EXIT_FAIL;
	}
	const wsp_pack *pk = wsp_pager_pack(pg);
	struct wsp_pack_summary s;
	struct wt_work *w = NULL;
	struct wt_pass_result res;
	rc = CLI_EXIT_FAIL;
	if (wsp_pack_summary(pk, &s) < 0)
		goto out;
	struct wt_work_cfg wc = {.device = device, .batch = 1, .checksum_all = true, .max_steps = s.n_layers};
	if (wt_work_open(&wc, pk, &w) || wt_work_pass_begin(w))
		goto out;
	struct cli_progress prog;
	cli_progress_begin(&prog, "device check");
	uint64_t done = 0;
	for (uint32_t i = 0; i < s.n_layers; i++) {
		const struct wsp_layer *v;
		if (wsp_acquire(pg, i, wt_work_stream(w), &v) < 0) {
			cli_progress_end(&prog);
			wt_acquire_error(pg, wsp_pack_layer(pk, i)->name);
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
		done += v->raw_bytes;
		cli_progress_update(&prog, done, s.raw_bytes);
	}
	cli_progress_end(&prog);
	if (wt_work_pass_end(w, &res))
		goto out;
	*tensors = res.checksums;
	rc = 0;
out:
	wt_work_close(w);
	wsp_close(pg);
	return rc;
}

int wt_cmd_verify(int argc, char **argv)
{
	int device = 0;
	bool device_set = false;
	unsigned threads = 0;
	const struct cli_opt opts[] = {
		CLI_OPT("device", 0, CLI_CALL, &device, .call = wt_opt_device, .given = &device_set),
		CLI_OPT("threads", 0, CLI_UINT, &threads, .max = 4096),
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
	wsp_pack_summary(pk, &s);
	struct cli_progress prog;
	wsp_progress_fn fn = cli_progress_begin(&prog, "verify");
	uint64_t t0 = wt_now_ns();
	rc = wsp_pack_verify(pk, threads, fn, &prog);
	uint64_t t1 = wt_now_ns();
	cli_progress_end(&prog);
	if (rc < 0) {
		const char *m = wsp_pack_errmsg(pk);
		cli_error("verify failed: %s", m && *m ? m : wsp_strerror(rc));
		wsp_pack_close(pk);
		return CLI_EXIT_FAIL;
	}
	char a[32];
	printf("%s: ok: %" PRIu32 " layers, %" PRIu32 " tensors, %" PRIu64 " chunks, %s decoded and checked"
	       " in %.2f s (%.2f GB/s)\n",
	       path, s.n_layers, s.n_tensors, s.n_chunks, wt_size(s.raw_bytes, a, sizeof(a)), (t1 - t0) / 1e9,
	       wt_gbps(s.raw_bytes, t1 - t0));
	fflush(stdout);
	wsp_pack_close(pk);

	int dev;
	if ((rc = wt_pick_device("--device", device, device_set, &dev)))
		return rc;
	if (dev != WSP_DEVICE_HOST) {
		uint64_t n = 0;
		char dn[300];
		if ((rc = device_check(path, dev, threads, &n)))
			return rc;
		printf("%s: ok: %" PRIu64 " tensors match their checksums on %s after paging\n", path, n,
		       wt_device_name(dev, dn, sizeof(dn)));
	}
	return fflush(stdout) == EOF ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
