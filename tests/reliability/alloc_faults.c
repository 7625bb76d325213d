/*
 * SQLite-style allocation faults: for N = 1, 2, ... fail the Nth allocation
 * the library makes during an operation, until the operation completes
 * without reaching N.  Every failed run must return a negative code with a
 * message, leak nothing (ASan/LSan builds check at exit) and leave the
 * process able to run the operation again.  Operations: opening a pack and
 * reading every layer; opening a pager on the host backend and streaming
 * every layer; converting a small checkpoint.
 */
#include <inttypes.h>
#include <signal.h>

#include "failalloc.h"
#include "rel.h"

static char pack[1024], src[1024], out[1024];

static int op_pack_read(char *err, size_t errlen)
{
	wsp_pack *pk;
	int rc = wsp_pack_open(pack, &pk, err, errlen);
	if (rc < 0)
		return rc;
	struct wsp_pack_summary s;
	rc = wsp_pack_summary(pk, &s);
	void *buf = rc < 0 ? NULL : malloc(s.max_layer_raw_bytes ? s.max_layer_raw_bytes : 1);
	for (uint32_t l = 0; rc >= 0 && buf && l < s.n_layers; l++)
		rc = wsp_pack_read_layer(pk, l, buf);
	if (rc < 0)
		snprintf(err, errlen, "%s", wsp_pack_errmsg(pk));
	free(buf);
	wsp_pack_close(pk);
	return rc;
}

static int op_pager(char *err, size_t errlen)
{
	struct wsp_options opt;
	wsp_options_init(&opt);
	opt.device = WSP_DEVICE_HOST;
	opt.host_cache_bytes = 4ull << 20;
	opt.page_bytes = 256 << 10;
	opt.decode_threads = 2;
	wsp_pager *pg;
	int rc = wsp_open(pack, &opt, &pg, err, errlen);
	if (rc < 0)
		return rc;
	const wsp_pack *pk = wsp_pager_pack(pg);
	struct wsp_pack_summary s;
	wsp_pack_summary(pk, &s);
	for (int pass = 0; pass < 2 && rc >= 0; pass++)
		for (uint32_t l = 0; rc >= 0 && l < s.n_layers; l++) {
			const struct wsp_layer *L;
			rc = wsp_acquire(pg, l, NULL, &L);
			if (rc < 0) {
				snprintf(err, errlen, "%s", wsp_errmsg(pg));
				break;
			}
			for (uint32_t t = 0; t < L->n_tensors; t++)
				if (wsp_checksum64(L->tensors[t].data, L->tensors[t].bytes) !=
				    L->tensors[t].checksum) {
					fprintf(stderr, "corrupt data after a fault in layer %u\n", l);
					exit(1);
				}
			wsp_release(pg, l, NULL);
		}
	wsp_close(pg);
	return rc;
}

static int op_convert(char *err, size_t errlen)
{
	struct wsp_convert_options c;
	wsp_convert_options_init(&c);
	c.threads = 2;
	c.flags = WSP_CONVERT_FORCE;
	const char *in[] = {src};
	return wsp_convert(in, 1, out, &c, err, errlen);
}

static void run(const char *name, int (*op)(char *, size_t))
{
	uint64_t n, failures = 0;
	for (n = 1;; n++) {
		char err[512] = "";
		failalloc_arm(n);
		int rc = op(err, sizeof(err));
		int fired = failalloc_fired();
		failalloc_arm(0);
		if (!fired) {
			if (rc < 0) {
				fprintf(stderr, "%s: failed without a fault: %s: %s\n", name, wsp_strerror(rc), err);
				exit(1);
			}
			break;
		}
		if (rc >= 0)
			continue;   /* the failure was absorbed (e.g. an optional cache) */
		failures++;
		if (err[0] == '\0') {
			fprintf(stderr, "%s: allocation %" PRIu64 " failed with %s but no message\n", name, n,
				wsp_strerror(rc));
			exit(1);
		}
		if (n <= 3 || n % 50 == 0)
			printf("%s: fault at allocation %" PRIu64 ": %s: %s\n", name, n, wsp_strerror(rc), err);
	}
	printf("%s: %" PRIu64 " allocations, %" PRIu64 " clean failures, then success\n", name, n - 1,
	       failures);
	CHECK(failures > 0);
}

int main(void)
{
	alarm(600);   /* a hang after a fault is a failure, not a stuck suite */
	const char *dir = t_scratch("allocfault");
	snprintf(pack, sizeof(pack), "%s/m.wsp", dir);
	snprintf(src, sizeof(src), "%s/src.safetensors", dir);
	snprintf(out, sizeof(out), "%s/out.wsp", dir);
	rel_make_pack(dir, pack, 3, 128, 352, 512);
	char err[512];
	struct wsp_generate_options g;
	wsp_generate_options_init(&g);
	g.layers = 2;
	g.hidden = 128;
	g.intermediate = 352;
	g.vocab = 512;
	CHECK_RC(wsp_generate(src, &g, err, sizeof(err)), 0);

	run("pack read", op_pack_read);
	run("pager", op_pager);
	run("convert", op_convert);
	t_rmrf(dir);
	return 0;
}
