/*
 * The overflow file's file system fills up (a 4 MiB tmpfs, mounted in a
 * mount namespace of the test's own): every update still succeeds, the
 * layers the file cannot take stay in memory over the budget with one
 * notice, every layer reads back as updated, and wsp_save writes all of
 * them to a pack on another file system that has room.  Needs root for the
 * mount; skips (77) without it.  Host backend.
 */
#include <inttypes.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "rel.h"

#define LAYERS 12

static unsigned full_notices;

static void on_notice(void *ctx, const char *msg)
{
	(void)ctx;
	printf("notice: %s\n", msg);
	if (strstr(msg, "No space left on device") && strstr(msg, "over their budget"))
		full_notices++;
}

int main(void)
{
	const char *dir = t_scratch("ovfull");
	char pack[1024], ovf[1024], out[1024], err[512];
	snprintf(pack, sizeof(pack), "%s/m.wsp", dir);
	snprintf(ovf, sizeof(ovf), "%s/small-fs", dir);
	snprintf(out, sizeof(out), "%s/saved.wsp", dir);
	rel_make_pack(dir, pack, LAYERS - 3, 256, 512, 1024);   /* + embed, norm, head */

	CHECK(mkdir(ovf, 0700) == 0);
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("wsp-test", ovf, "tmpfs", 0, "size=4m") < 0) {
		printf("SKIP: cannot mount a small tmpfs here (%s)\n", strerror(errno));
		t_rmrf(dir);
		return 77;
	}

	struct wsp_options o;
	wsp_options_init(&o);
	o.device = WSP_DEVICE_HOST;
	o.host_cache_bytes = 64 << 20;
	o.updated_bytes = 3 << 20;
	o.overflow_dir = ovf;
	o.log = on_notice;
	wsp_pager *pg;
	CHECK_RC(wsp_open(pack, &o, &pg, err, sizeof(err)), 0);
	struct wsp_pack_summary s;
	CHECK_RC(wsp_pack_summary(wsp_pager_pack(pg), &s), 0);
	CHECK(s.n_layers == LAYERS && s.raw_bytes > 4 * (8u << 20) / 4);

	/* Update every layer: each byte of its raw layout xor a pattern. */
	uint64_t *want[LAYERS];
	uint8_t *buf = malloc(s.max_layer_raw_bytes);
	CHECK(buf);
	for (uint32_t l = 0; l < s.n_layers; l++) {
		const struct wsp_layer *L;
		const void *vals[64] = { 0 };
		CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
		CHECK(L->n_tensors <= 64);
		memcpy(buf, L->data, L->raw_bytes);
		for (uint64_t i = 0; i < L->raw_bytes; i++)
			buf[i] ^= (uint8_t)(0x5a + 3 * l + i);
		want[l] = calloc(L->n_tensors, sizeof(uint64_t));
		CHECK(want[l]);
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			const uint8_t *p = buf + ((const uint8_t *)L->tensors[t].data -
						  (const uint8_t *)L->data);
			vals[t] = p;
			want[l][t] = wsp_checksum64(p, L->tensors[t].bytes);
		}
		CHECK_RC(wsp_release(pg, l, NULL), 0);
		int rc = wsp_update(pg, l, vals);
		if (rc < 0)
			printf("update of layer %u with the overflow's disk full: %s\n", l, wsp_errmsg(pg));
		CHECK_RC(rc, 0);
	}
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("updated %" PRIu64 " KiB: %" PRIu64 " KiB in memory (budget %llu KiB), %" PRIu64
	       " KiB in the overflow file; %u notice\n", st.updated_bytes >> 10,
	       st.updated_resident >> 10, (unsigned long long)o.updated_bytes >> 10,
	       st.overflow_written >> 10, full_notices);
	CHECK(full_notices == 1);
	CHECK(st.overflow_written > 0 && st.updated_resident > o.updated_bytes);

	/* Every layer reads as updated, the spilled ones too. */
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < s.n_layers; l++) {
			const struct wsp_layer *L;
			CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
			for (uint32_t t = 0; t < L->n_tensors; t++)
				CHECK(wsp_checksum64(L->tensors[t].data, L->tensors[t].bytes) ==
				      want[l][t]);
			CHECK_RC(wsp_release(pg, l, NULL), 0);
		}

	/* Saved elsewhere, where there is room: every update is in it. */
	int rc = wsp_save(pg, out, 0, NULL, NULL);
	if (rc < 0)
		printf("save: %s\n", wsp_errmsg(pg));
	CHECK_RC(rc, 0);
	wsp_close(pg);
	wsp_pack *pk;
	CHECK_RC(wsp_pack_open(out, &pk, err, sizeof(err)), 0);
	CHECK_RC(wsp_pack_verify(pk, 0, NULL, NULL), 0);
	for (uint32_t l = 0; l < s.n_layers; l++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, l);
		for (uint32_t t = 0; t < L->n_tensors; t++)
			CHECK(L->tensors[t].checksum == want[l][t]);
		free(want[l]);
	}
	wsp_pack_close(pk);
	printf("saved %s: every layer as updated\n", out);
	free(buf);
	umount(ovf);
	t_rmrf(dir);
	return 0;
}
