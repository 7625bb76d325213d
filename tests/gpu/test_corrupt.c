/* Host backend: a corrupt chunk in one layer.  Acquiring that layer fails
 * with the decoder's error and a message naming the layer; no slot ever
 * holds it (a later acquire fails again instead of handing out stale or
 * half-written bytes); every other layer still acquires with exact bytes. */
#include <fcntl.h>

#include "pack/pack.h"
#include "pager_util.h"

static void flip_byte(const char *pack_dir, uint32_t layer)
{
	char err[512], path[1024];
	wsp_pack *pk;
	CHECK_RC(wsp_pack_open(pack_dir, &pk, err, sizeof(err)), 0);
	const struct wspm_layer *ml = &pk->m.layers[layer];
	pack_shard_path(pk, ml->shard, path, sizeof(path));
	uint64_t at = ml->offset + ml->stored_bytes / 2;
	wsp_pack_close(pk);
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	unsigned char b;
	CHECK(pread(fd, &b, 1, (off_t)at) == 1);
	b ^= 0x5a;
	CHECK(pwrite(fd, &b, 1, (off_t)at) == 1);
	close(fd);
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	const struct wsp_layer *L;
	const uint32_t bad = 2;

	t_model_make(&m, "gpu-corrupt", 5, 128, 256);
	flip_byte(m.pack, bad);
	t_host_options(&o, &m, 100, 3);
	o.flags |= WSP_OPEN_NO_DIRECT;   /* the flipped byte, not a stale page cache */
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);

	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < m.sum.n_layers; l++) {
			int rc = wsp_acquire(pg, l, NULL, &L);
			if (l == bad) {
				if (rc != WSP_ECHECKSUM && rc != WSP_EZSTD) {
					fprintf(stderr, "layer %u: rc %d (%s): %s\n", l, rc,
						wsp_strerror(rc), wsp_errmsg(pg));
					exit(1);
				}
				CHECK(L == NULL);
				const char *name = wsp_pack_layer(wsp_pager_pack(pg), l)->name;
				if (!strstr(wsp_errmsg(pg), name)) {
					fprintf(stderr, "message \"%s\" does not name %s\n",
						wsp_errmsg(pg), name);
					exit(1);
				}
				CHECK_RC(wsp_release(pg, l, NULL), WSP_ESTATE);
				continue;
			}
			CHECK_RC(rc, 0);
			CHECK(t_view_bad(L) == 0);
			CHECK_RC(wsp_release(pg, l, NULL), 0);
		}
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
