/* wsp_options.on_demand: layers named there are never read ahead of need,
 * neither in pack order before the pager has learned nor by prediction,
 * while the other layers still are; acquired, they are read then.  An
 * unknown name is refused at open.  Host backend. */
#include <inttypes.h>

#include "pager_util.h"

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	const struct wsp_layer *L;
	char err[512];
	wsp_pager *pg;
	wsp_pack *pk;

	t_model_make(&m, "on-demand", 6, 128, 256);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	/* blocks 1 and 3 (layers 2 and 4 of the pack) run only "sometimes" */
	const char *skip[] = { "model.layers.1", "model.layers.3", NULL };
	uint64_t others = 0, skipped = 0;
	for (uint32_t i = 0; i < m.sum.n_layers; i++) {
		const struct wsp_layer *l = wsp_pack_layer(pk, i);
		uint64_t b = (l->stored_bytes + 4095) / 4096 * 4096;
		if (!strcmp(l->name, skip[0]) || !strcmp(l->name, skip[1]))
			skipped += b;
		else
			others += b;
	}
	t_host_options(&o, &m, 100, 3);   /* the whole model fits: speculation reads it all */
	o.on_demand = skip;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	for (int pass = 0; pass < 3; pass++)
		for (uint32_t i = 0; i < m.sum.n_layers; i++) {
			const char *name = wsp_pack_layer(pk, i)->name;
			if (!strcmp(name, skip[0]) || !strcmp(name, skip[1]))
				continue;
			t_use_layer(pg, i);
		}
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("read %" PRIu64 " bytes; the layers run hold %" PRIu64 ", the on-demand ones %" PRIu64
	       "\n", st.bytes_read, others, skipped);
	CHECK(st.bytes_read > 0 && st.bytes_read <= others);
	CHECK(st.prefetches > 0);   /* the others were still read ahead */
	uint64_t before = st.bytes_read;
	/* acquired, an on-demand layer is read then, intact */
	const struct wsp_layer *l3 = wsp_pack_find_layer(pk, "model.layers.3");
	CHECK_RC(wsp_acquire(pg, l3->index, NULL, &L), 0);
	CHECK(t_view_bad(L) == 0);
	CHECK_RC(wsp_release(pg, l3->index, NULL), 0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.bytes_read > before && st.bytes_read <= others + skipped);
	wsp_close(pg);

	const char *bad[] = { "model.layers.99", NULL };
	o.on_demand = bad;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), WSP_ENOTFOUND);
	CHECK(strstr(err, "model.layers.99"));
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
