/* wsp_provide and wsp_pack_layer_extent, host backend: with the pager
 * reading nothing ahead, layers whose stored bytes are handed in load
 * without a disk read and acquire intact (from the second layer on, in a
 * buffer an earlier layer's bytes were copied into, of its size or
 * larger: the host tier keeps them for reuse); bytes for a present layer are
 * not needed (0); a wrong length is -EINVAL and an unknown layer
 * WSP_ENOTFOUND, each saying why; damaged bytes fail the load that uses
 * them (an acquire that joins that load says so), and the disk gives the
 * layer intact.  wsp_provide_device, which needs a GPU, is -ENOTSUP here. */
#include <fcntl.h>
#include <inttypes.h>
#include <unistd.h>

#include "pager_util.h"

/* The layer's stored bytes, read as another process would. */
static uint8_t *stored_bytes(wsp_pack *pk, uint32_t layer)
{
	uint32_t shard;
	uint64_t offset;
	char path[4096];
	const struct wsp_layer *l = wsp_pack_layer(pk, layer);
	CHECK_RC(wsp_pack_layer_extent(pk, layer, &shard, &offset), 0);
	CHECK(offset % 4096 == 0);
	CHECK(wsp_pack_shard_path(pk, shard, path, sizeof(path)) < (int)sizeof(path));
	uint8_t *buf = malloc(l->stored_bytes);
	int fd = open(path, O_RDONLY);
	CHECK(buf && fd >= 0);
	CHECK(pread(fd, buf, l->stored_bytes, (off_t)offset) == (ssize_t)l->stored_bytes);
	close(fd);
	return buf;
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	const struct wsp_layer *L;
	char err[512];
	wsp_pager *pg;
	wsp_pack *pk;

	t_model_make(&m, "provide", 6, 128, 256);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	uint32_t n = m.sum.n_layers, shard;
	uint64_t offset;
	CHECK_RC(wsp_pack_layer_extent(pk, n, &shard, &offset), WSP_ENOTFOUND);
	CHECK_RC(wsp_pack_layer_extent(pk, 0, NULL, &offset), -EINVAL);

	t_host_options(&o, &m, 200, 3);
	o.flags |= WSP_OPEN_NO_PREFETCH;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < n; i++) {
			uint8_t *b = stored_bytes(pk, i);
			uint64_t len = wsp_pack_layer(pk, i)->stored_bytes;
			/* the first pass needs them; the second finds the layers present */
			CHECK_RC(wsp_provide(pg, i, b, len), pass == 0 ? 1 : 0);
			free(b);
			CHECK_RC(wsp_acquire(pg, i, NULL, &L), 0);
			CHECK(t_view_bad(L) == 0);
			CHECK_RC(wsp_release_view(pg, L, NULL), 0);
		}
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("2 passes of %u provided layers: %" PRIu64 " bytes read from disk, %" PRIu64
	       " misses\n", n, st.bytes_read, st.misses);
	CHECK(st.bytes_read == 0 && st.acquires == 2ull * n);

	uint8_t *b = stored_bytes(pk, 1);
	CHECK_RC(wsp_provide(pg, 1, b, wsp_pack_layer(pk, 1)->stored_bytes - 1), -EINVAL);
	CHECK(strstr(wsp_errmsg(pg), "stores"));
	CHECK_RC(wsp_provide(pg, n, b, 1), WSP_ENOTFOUND);
	CHECK_RC(wsp_provide(pg, 1, NULL, 1), -EINVAL);
	/* The host backend decodes nothing on a device: wsp_provide_device
	 * says so (asked, or handed bytes), and the caller uses wsp_provide. */
	CHECK_RC(wsp_provide_device(pg, 1, NULL, 0, NULL), -ENOTSUP);
	CHECK(strstr(wsp_errmsg(pg), "decodes nothing on its device") != NULL);
	CHECK_RC(wsp_provide_device(pg, 1, b, 1, NULL), -ENOTSUP);
	CHECK_RC(wsp_provide_device(pg, 1, NULL, 1, NULL), -EINVAL);
	CHECK_RC(wsp_provide_device(pg, n, NULL, 0, NULL), WSP_ENOTFOUND);
	free(b);
	wsp_close(pg);

	/* Damaged bytes: that load fails and its bytes are never served.  The
	 * load starts at wsp_provide, so the acquire right after it either
	 * joins it and fails with the reason (then the next acquire reads the
	 * disk), or comes after it failed and reads the disk itself; both end
	 * with the layer intact from the disk.  (Which one happens is timing:
	 * under ASan on a busy machine the load failed first.) */
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	uint32_t victim = n / 2;
	b = stored_bytes(pk, victim);
	uint64_t len = wsp_pack_layer(pk, victim)->stored_bytes;
	b[len / 2] ^= 0x5a;
	int rc = wsp_provide(pg, victim, b, len);
	free(b);
	CHECK(rc == 1);
	rc = wsp_acquire(pg, victim, NULL, &L);
	printf("acquire after damaged bytes: %d (%s)\n", rc,
	       rc < 0 ? wsp_errmsg(pg) : "the load had failed already: read from the disk");
	if (rc < 0) {
		CHECK(strstr(wsp_errmsg(pg), "bytes handed in (wsp_provide)") != NULL);
		CHECK_RC(wsp_acquire(pg, victim, NULL, &L), 0);
	}
	CHECK(t_view_bad(L) == 0);
	CHECK_RC(wsp_release_view(pg, L, NULL), 0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.bytes_read >= len);
	wsp_close(pg);

	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
