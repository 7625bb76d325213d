/* An updated layer is served by the write-back room, so the read-ahead
 * never reads its (stale) bytes from the pack: with a host tier smaller
 * than the model, passes over every layer keep reading the others (the
 * trace's read events) and never the updated one, and acquires of it give
 * the new bytes.  (The read-ahead used to read it from the pack.)  Host
 * backend. */
#include <string.h>

#include "../gpu/pager_util.h"

enum { WATCHED = 3 };
static uint64_t reads_watched, reads_others;

static void on_trace(void *ctx, const struct wsp_trace_event *ev)
{
	(void)ctx;
	if (ev->stage == WSP_STAGE_READ)
		__atomic_fetch_add(ev->layer == WATCHED ? &reads_watched : &reads_others, 1,
				   __ATOMIC_RELAXED);
}

static void pass(wsp_pager *pg, uint32_t n)
{
	for (uint32_t l = 0; l < n; l++)
		t_use_layer(pg, l);
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	const struct wsp_layer *L;
	char err[512];
	wsp_pager *pg;

	t_model_make(&m, "update-readahead", 8, 256, 512);
	const uint32_t n = m.sum.n_layers, k = WATCHED;
	t_host_options(&o, &m, 30, 2);   /* layers cycle through the host tier */
	o.trace = on_trace;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	pass(pg, n);
	pass(pg, n);   /* the order is learned */

	/* layer k updated: its first tensor's bytes flipped */
	uint64_t bytes;
	uint8_t *v = t_update_flipped(pg, k, &bytes);

	pass(pg, n);
	__atomic_store_n(&reads_watched, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&reads_others, 0, __ATOMIC_RELAXED);
	for (int p = 0; p < 3; p++)
		pass(pg, n);
	/* The host tier's threads may still be reading ahead. */
	uint64_t others = __atomic_load_n(&reads_others, __ATOMIC_RELAXED);
	uint64_t watched = __atomic_load_n(&reads_watched, __ATOMIC_RELAXED);
	printf("three passes after the update: %llu reads of other layers, %llu of layer %u\n",
	       (unsigned long long)others, (unsigned long long)watched, k);
	CHECK(others >= 3 * (n - 1) / 2);   /* the host tier keeps reading */
	CHECK(watched == 0);
	CHECK_RC(wsp_acquire(pg, k, NULL, &L), 0);
	CHECK(memcmp(L->tensors[0].data, v, bytes) == 0);
	CHECK_RC(wsp_release(pg, k, NULL), 0);

	wsp_close(pg);
	free(v);
	t_model_remove(&m);
	return 0;
}
