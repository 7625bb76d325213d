/* Host backend: slot bookkeeping seen through the API.
 *  - a layer already in a slot is a GPU hit (acquired twice, or again
 *    after release); each acquire gets a view of its own over the same
 *    slot, and wsp_release_view releases exactly that acquire (a view
 *    released twice is WSP_ESTATE, not another holder's release);
 *  - holding more layers than slots is WSP_ESTATE with a clear message,
 *    and releasing one makes room;
 *  - releasing a layer not acquired is WSP_ESTATE; bad indices and names
 *    are WSP_ENOTFOUND; wsp_layer_tensor finds short and full names. */
#include <inttypes.h>

#include "pager_util.h"

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	const struct wsp_layer *a, *b, *c;
	char err[512];
	wsp_pager *pg;

	t_model_make(&m, "gpu-slots", 4, 128, 256);
	t_host_options(&o, &m, 100, 2);
	o.flags |= WSP_OPEN_NO_PREFETCH;   /* only what is acquired moves */
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);

	/* Nested acquire of one layer: one slot, counted twice. */
	CHECK_RC(wsp_acquire(pg, 0, NULL, &a), 0);
	CHECK_RC(wsp_acquire(pg, 0, NULL, &b), 0);
	CHECK(a != b && a->data == b->data && a->tensors == b->tensors && a->index == b->index);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.acquires == 2 && st.gpu_hits == 1 && st.misses + st.host_hits == 1);
	/* Two components holding layer 0: each releases its own use once. */
	CHECK_RC(wsp_release_view(pg, b, NULL), 0);
	CHECK_RC(wsp_release_view(pg, b, NULL), WSP_ESTATE);   /* b's owner, twice */
	CHECK(strstr(wsp_errmsg(pg), "not acquired") != NULL);
	CHECK(t_view_bad(a) == 0);                             /* a still holds it */
	CHECK_RC(wsp_acquire(pg, 0, NULL, &b), 0);
	CHECK_RC(wsp_release_view(pg, NULL, NULL), -EINVAL);

	/* Two slots, both in use: a third layer cannot be placed. */
	CHECK_RC(wsp_acquire(pg, 1, NULL, &b), 0);
	CHECK_RC(wsp_acquire(pg, 2, NULL, &c), WSP_ESTATE);
	CHECK(c == NULL);
	CHECK(strstr(wsp_errmsg(pg), "slots") != NULL);
	CHECK_RC(wsp_release(pg, 0, NULL), 0);
	CHECK_RC(wsp_acquire(pg, 2, NULL, &c), WSP_ESTATE);   /* 0 still held once */
	CHECK_RC(wsp_release(pg, 0, NULL), 0);
	CHECK_RC(wsp_release(pg, 0, NULL), WSP_ESTATE);       /* no longer acquired */
	CHECK(strstr(wsp_errmsg(pg), "not acquired") != NULL);
	CHECK_RC(wsp_acquire(pg, 2, NULL, &c), 0);            /* takes 0's slot */
	CHECK(t_view_bad(c) == 0);
	CHECK_RC(wsp_release(pg, 2, NULL), 0);

	/* Again after release: still in its slot, a GPU hit. */
	wsp_reset_stats(pg);
	CHECK_RC(wsp_acquire(pg, 2, NULL, &c), 0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.gpu_hits == 1 && st.bytes_h2d == 0);
	CHECK(t_view_bad(c) == 0);

	/* Tensor lookup inside a view, by short and by full name. */
	for (uint32_t t = 0; t < c->n_tensors; t++) {
		const struct wsp_tensor *T = &c->tensors[t];
		CHECK(wsp_layer_tensor(c, T->short_name) == T);
		CHECK(wsp_layer_tensor(c, T->name) == T);
		CHECK(T->data >= c->data);
		CHECK((uintptr_t)T->data % 256 == 0);
	}
	CHECK(wsp_layer_tensor(c, "no.such.tensor") == NULL);
	CHECK_RC(wsp_release(pg, 2, NULL), 0);
	CHECK_RC(wsp_release(pg, 1, NULL), 0);

	/* By name, and bad names/indices. */
	const wsp_pack *pk = wsp_pager_pack(pg);
	const struct wsp_layer *pl = wsp_pack_layer(pk, 3);
	CHECK(pl != NULL);
	CHECK_RC(wsp_acquire_by_name(pg, pl->name, NULL, &c), 0);
	CHECK(c->index == 3 && t_view_bad(c) == 0);
	CHECK_RC(wsp_release(pg, 3, NULL), 0);
	CHECK_RC(wsp_acquire_by_name(pg, "model.layers.999", NULL, &c), WSP_ENOTFOUND);
	CHECK_RC(wsp_acquire(pg, m.sum.n_layers, NULL, &c), WSP_ENOTFOUND);
	CHECK_RC(wsp_release(pg, m.sum.n_layers, NULL), WSP_ENOTFOUND);
	CHECK_RC(wsp_prefetch(pg, m.sum.n_layers), WSP_ENOTFOUND);
	CHECK_RC(wsp_prefetch(pg, 1), 0);

	/* Closing with a layer still acquired releases it. */
	CHECK_RC(wsp_acquire(pg, 1, NULL, &c), 0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.prefetches <= 1);   /* only the explicit hint prefetched */
	wsp_close(pg);
	wsp_close(NULL);
	t_model_remove(&m);
	return 0;
}
