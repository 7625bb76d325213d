/* Host backend: a finished load is a message.  The host tier's thread only
 * posts it; the pager's own thread takes it up and copies a hinted layer
 * into a slot, with no call from the caller needed: a layer hinted and then
 * left alone is in a slot once it has landed, and its acquire is a GPU
 * hit.  Closing while loads land and are taken up (hints, then close at
 * once, many times) loses nothing and leaks nothing (ASan, TSan lanes). */
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
	/* Only the stats are read meanwhile (they reap finished copies). */
	for (int i = 0; i < 10000; i++) {
		CHECK_RC(wsp_get_stats(pg, &st), 0);
		if (st.bytes_h2d >= L->raw_bytes)
			break;
		usleep(1000);
	}
	printf("hinted, then left alone: %" PRIu64 " bytes copied into a slot (the layer has %"
	       PRIu64 ")\n", st.bytes_h2d, L->raw_bytes);
	CHECK(st.bytes_h2d == L->raw_bytes);
	CHECK_RC(wsp_acquire(pg, 2, NULL, &v), 0);
	CHECK(t_view_bad(v) == 0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.gpu_hits == 1 && st.acquires == 1);
	CHECK_RC(wsp_release(pg, 2, NULL), 0);
	wsp_close(pg);

	/* Close while layers land. */
	uint32_t all[64], n = m.sum.n_layers < 64 ? m.sum.n_layers : 64;
	for (uint32_t i = 0; i < n; i++)
		all[i] = i;
	for (int round = 0; round < 50; round++) {
		CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
		CHECK_RC(wsp_hint_next(pg, all, n), 0);
		if (round % 2)
			usleep(200);
		wsp_close(pg);
	}
	t_model_remove(&m);
	return 0;
}
