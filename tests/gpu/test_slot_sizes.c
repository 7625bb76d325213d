/* Slots sized by what they hold (host backend): a model whose embedding and
 * head are much larger than its blocks gets at most two slots of the
 * largest layer's size and the others of the blocks' size; every layer
 * still goes through, each into a slot it fits; a block fits a large slot
 * when the small ones are held, a large layer never fits a small one
 * (WSP_ESTATE naming the slots).  A model of like-sized layers keeps one
 * size.  The stats and `wspager run` say what was saved. */
#include <inttypes.h>

#include "pager_util.h"

static void make(struct t_model *m, const char *tag, unsigned vocab)
{
	char model[600], err[512];
	struct wsp_generate_options g;
	struct wsp_convert_options c;
	wsp_pack *pk;
	snprintf(m->dir, sizeof(m->dir), "%s", t_scratch(tag));
	snprintf(model, sizeof(model), "%s/model.safetensors", m->dir);
	snprintf(m->pack, sizeof(m->pack), "%s/pack", m->dir);
	wsp_generate_options_init(&g);
	g.layers = 4;
	g.hidden = 128;
	g.intermediate = 256;
	g.vocab = vocab;
	CHECK_RC(wsp_generate(model, &g, err, sizeof(err)), 0);
	wsp_convert_options_init(&c);
	c.threads = 2;
	const char *in[] = { model };
	CHECK_RC(wsp_convert(in, 1, m->pack, &c, err, sizeof(err)), 0);
	CHECK_RC(wsp_pack_open(m->pack, &pk, err, sizeof(err)), 0);
	wsp_pack_summary(pk, &m->sum);
	wsp_pack_close(pk);
}

static wsp_pager *open_pager(const struct t_model *m, unsigned slots)
{
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	t_host_options(&o, m, 100, slots);
	o.flags |= WSP_OPEN_NO_PREFETCH;   /* only what is acquired moves */
	CHECK_RC(wsp_open(m->pack, &o, &pg, err, sizeof(err)), 0);
	return pg;
}

int main(void)
{
	struct t_model m;
	struct wsp_stats st;
	const struct wsp_layer *L, *held[8];

	/* vocab 8192 x hidden 128 bf16: embedding and head 2 MiB, blocks ~0.3 MiB */
	make(&m, "slot-sizes", 8192);
	uint32_t n = m.sum.n_layers, embed = 0, head = n - 1;
	wsp_pager *pg = open_pager(&m, 4);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	uint64_t small = (st.slots_total_bytes - 2 * st.slot_bytes) / 2;
	printf("4 slots: %" PRIu64 " bytes in all, %" PRIu64 " if each were the largest (%" PRIu64
	       "); small slots %" PRIu64 "\n", st.slots_total_bytes, 4 * st.slot_bytes, st.slot_bytes,
	       small);
	CHECK(st.slot_bytes >= m.sum.max_layer_raw_bytes && st.slot_bytes < m.sum.max_layer_raw_bytes + 256);
	CHECK(small * 4 < st.slot_bytes && st.slots_total_bytes * 10 < 4 * st.slot_bytes * 7);
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < n; l++)
			t_use_layer(pg, l);
	/* Embedding and head held together with two blocks: four slots do. */
	CHECK_RC(wsp_acquire(pg, embed, NULL, &held[0]), 0);
	CHECK_RC(wsp_acquire(pg, head, NULL, &held[1]), 0);
	CHECK_RC(wsp_acquire(pg, 1, NULL, &held[2]), 0);
	CHECK_RC(wsp_acquire(pg, 2, NULL, &held[3]), 0);
	CHECK_RC(wsp_acquire(pg, 3, NULL, &L), WSP_ESTATE);
	for (int k = 0; k < 4; k++)
		CHECK(t_view_bad(held[k]) == 0);
	/* With the head released, a third block takes its large slot. */
	CHECK_RC(wsp_release_view(pg, held[1], NULL), 0);
	CHECK_RC(wsp_acquire(pg, 3, NULL, &held[1]), 0);
	CHECK(t_view_bad(held[1]) == 0);
	/* ... and then the head has nowhere to go: no small slot fits it. */
	CHECK_RC(wsp_release_view(pg, held[2], NULL), 0);   /* a small slot frees */
	CHECK_RC(wsp_acquire(pg, head, NULL, &L), WSP_ESTATE);
	CHECK(strstr(wsp_errmsg(pg), "slots") != NULL);
	for (int k = 0; k < 4; k++)
		if (k != 2)
			CHECK_RC(wsp_release_view(pg, held[k], NULL), 0);
	t_use_layer(pg, head);
	wsp_close(pg);

	/* Two slots: one large, one small. */
	pg = open_pager(&m, 2);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.slots_total_bytes < 2 * st.slot_bytes);
	for (uint32_t l = 0; l < n; l++)
		t_use_layer(pg, l);
	wsp_close(pg);
	t_model_remove(&m);

	/* Like-sized layers (vocab 512: the embedding is smaller than a block):
	 * one size for every slot, as before. */
	make(&m, "slot-sizes-even", 512);
	pg = open_pager(&m, 3);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.slots_total_bytes == 3 * st.slot_bytes);
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
