/*
 * stream: the smallest complete use of libwspager.
 *
 * Generates a small synthetic checkpoint, converts it into a pack, then
 * streams every layer through the pager for several passes with a host
 * cache smaller than the model, checking each tensor's bytes against the
 * checksum the pack stores.  Prints the pager's statistics at the end.
 *
 *	stream            host device backend (works on any machine)
 *	stream --gpu N    CUDA device N (weights are not checked: they live on
 *	                  the GPU, where tests/gpu checks them with a kernel)
 *
 * Only the public API (wspager.h) is used.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wspager.h>

#define PASSES 3

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int stream_pack(const char *pack, int device)
{
	struct wsp_options opt;
	char err[512];
	wsp_pager *pg;
	int rc, bad = 0;

	wsp_options_init(&opt);
	opt.device = device;
	opt.gpu_slots = 3;
	opt.page_bytes = 64 << 10;

	/* A host tier of about half the model: the pager must evict and the
	 * predictor must bring layers back in time. */
	wsp_pack *pk;
	struct wsp_pack_summary sum;
	if ((rc = wsp_pack_open(pack, &pk, err, sizeof(err))) < 0) {
		fprintf(stderr, "wsp_pack_open: %s\n", err);
		return 1;
	}
	wsp_pack_summary(pk, &sum);
	opt.host_cache_bytes = sum.raw_bytes / 2 > 4 * sum.max_layer_raw_bytes
				       ? sum.raw_bytes / 2 : 4 * sum.max_layer_raw_bytes;
	wsp_pack_close(pk);

	if ((rc = wsp_open(pack, &opt, &pg, err, sizeof(err))) < 0) {
		fprintf(stderr, "wsp_open: %s (%s)\n", err, wsp_strerror(rc));
		return rc == WSP_ENODEVICE ? 77 : 1;
	}
	const wsp_pack *ppk = wsp_pager_pack(pg);
	wsp_pack_summary(ppk, &sum);

	for (int pass = 0; pass < PASSES; pass++) {
		for (uint32_t l = 0; l < sum.n_layers; l++) {
			const struct wsp_layer *L;
			/* NULL: the legacy default stream (ignored on the host). */
			if ((rc = wsp_acquire(pg, l, NULL, &L)) < 0) {
				fprintf(stderr, "acquire %u: %s\n", l, wsp_errmsg(pg));
				wsp_close(pg);
				return 1;
			}
			for (uint32_t t = 0; device == WSP_DEVICE_HOST && t < L->n_tensors; t++) {
				const struct wsp_tensor *T = &L->tensors[t];
				if (wsp_checksum64(T->data, T->bytes) != T->checksum) {
					fprintf(stderr, "pass %d: %s: checksum mismatch\n", pass,
						T->name);
					bad++;
				}
			}
			if ((rc = wsp_release(pg, l, NULL)) < 0) {
				fprintf(stderr, "release %u: %s\n", l, wsp_errmsg(pg));
				wsp_close(pg);
				return 1;
			}
		}
	}

	struct wsp_stats st;
	char b1[32], b2[32], b3[32];
	wsp_get_stats(pg, &st);
	printf("%u layers x %d passes, %s host cache, %u slots of %s\n", sum.n_layers, PASSES,
	       wsp_format_size(st.host_cache_bytes, b1, sizeof(b1)), st.gpu_slots,
	       wsp_format_size(st.slot_bytes, b2, sizeof(b2)));
	printf("acquires %" PRIu64 ": gpu hits %" PRIu64 ", host hits %" PRIu64
	       ", misses %" PRIu64 ", predicted %" PRIu64 "\n",
	       st.acquires, st.gpu_hits, st.host_hits, st.misses, st.predicted);
	printf("read %s from disk (%s backend%s), copied %s into slots\n",
	       wsp_format_size(st.bytes_read, b1, sizeof(b1)), st.io_backend,
	       st.direct_io ? ", O_DIRECT" : "", wsp_format_size(st.bytes_h2d, b3, sizeof(b3)));
	wsp_close(pg);
	if (bad)
		fprintf(stderr, "%d tensors did not match their checksums\n", bad);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	int device = WSP_DEVICE_HOST;
	if (argc == 3 && strcmp(argv[1], "--gpu") == 0) {
		device = atoi(argv[2]);
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [--gpu N]\n", argv[0]);
		return 2;
	}

	char model[600], pack[600], err[512];
	const char *tmp = getenv("TMPDIR");
	char tdir[512];
	snprintf(tdir, sizeof(tdir), "%s/wsp-stream-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	char *base = mkdtemp(tdir);
	if (!base) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(model, sizeof(model), "%s/model.safetensors", base);
	snprintf(pack, sizeof(pack), "%s/model.wsp", base);

	struct wsp_generate_options g;
	wsp_generate_options_init(&g);
	g.layers = 6;
	g.hidden = 256;
	g.intermediate = 512;
	g.vocab = 512;
	int rc = wsp_generate(model, &g, err, sizeof(err));
	if (rc == 0) {
		struct wsp_convert_options c;
		wsp_convert_options_init(&c);
		c.chunk_bytes = 256 << 10;
		const char *inputs[] = { model };
		rc = wsp_convert(inputs, 1, pack, &c, err, sizeof(err));
	}
	if (rc < 0)
		fprintf(stderr, "preparing the pack: %s (%s)\n", err, wsp_strerror(rc));
	else
		rc = stream_pack(pack, device);
	nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return rc < 0 ? 1 : rc;
}
