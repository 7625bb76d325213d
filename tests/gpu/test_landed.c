/* Host backend: a finished load is a message, not a call back up.  A
 * hinted layer that lands while the caller is away stays in the host tier:
 * the host tier's thread only posts it, and no copy into a slot starts
 * until the caller's next call into the pager takes it up (here an empty
 * wsp_hint_next); then the acquire is a GPU hit.  So every GPU copy starts
 * on a thread that called the pager. */
#include <inttypes.h>
#include <unistd.h>

#include "pager_util.h"

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	const struct wsp_layer *v;
	char err[512];
	wsp_pager *pg;

	t_model_make(&m, "gpu-landed", 4, 128, 256);
	t_host_options(&o, &m, 100, 2);
	o.flags |= WSP_OPEN_NO_PREFETCH;   /* only what is hinted or acquired moves */
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	const struct wsp_layer *L = wsp_pack_layer(wsp_pager_pack(pg), 2);
	CHECK(L != NULL);

	uint32_t want = 2;
	CHECK_RC(wsp_hint_next(pg, &want, 1), 0);
	/* Wait until the host tier has read and decoded it, then a while
	 * longer, for a copy a host-tier thread might start. */
	for (int i = 0; i < 5000; i++) {
		CHECK_RC(wsp_get_stats(pg, &st), 0);
		if (st.bytes_read >= L->stored_bytes && st.bytes_decoded >= L->raw_bytes)
			break;
		usleep(1000);
	}
	CHECK(st.bytes_read >= L->stored_bytes && st.bytes_decoded >= L->raw_bytes);
	usleep(200 * 1000);
	CHECK_RC(wsp_get_stats(pg, &st), 0);   /* reaps whatever copy has completed */
	printf("landed while away: %" PRIu64 " bytes copied into slots\n", st.bytes_h2d);
	CHECK(st.bytes_h2d == 0);

	CHECK_RC(wsp_hint_next(pg, NULL, 0), 0);   /* a call: what landed is taken up */
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("after the next call: %" PRIu64 " bytes (the layer has %" PRIu64 ")\n",
	       st.bytes_h2d, L->raw_bytes);
	CHECK(st.bytes_h2d == L->raw_bytes);
	CHECK_RC(wsp_acquire(pg, 2, NULL, &v), 0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.gpu_hits == 1 && st.acquires == 1);
	CHECK_RC(wsp_release(pg, 2, NULL), 0);
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
