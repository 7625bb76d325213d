/* wsp_errmsg() is per thread: several threads fail at once, each with its
 * own layer number or name, and each reads back exactly its own detail. */
#include <inttypes.h>
#include <pthread.h>

#include "pager_util.h"

#define THREADS 8
#define ROUNDS 2000

struct worker {
	wsp_pager *pg;
	uint32_t n_layers;
	int id, bad;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	char want[64];
	const struct wsp_layer *L;

	for (int i = 0; i < ROUNDS; i++) {
		if (i % 2) {
			uint32_t layer = w->n_layers + (uint32_t)w->id;   /* out of range */
			CHECK_RC(wsp_acquire(w->pg, layer, NULL, &L), WSP_ENOTFOUND);
			snprintf(want, sizeof(want), "no layer %" PRIu32 " ", layer);
		} else {
			snprintf(want, sizeof(want), "no-such-layer-%d", w->id);
			CHECK_RC(wsp_acquire_by_name(w->pg, want, NULL, &L), WSP_ENOTFOUND);
		}
		if (!strstr(wsp_errmsg(w->pg), want)) {
			if (w->bad++ < 3)
				fprintf(stderr, "thread %d wants \"%s\", reads \"%s\"\n", w->id, want,
					wsp_errmsg(w->pg));
		}
	}
	return NULL;
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	pthread_t th[THREADS];
	struct worker w[THREADS];
	int bad = 0;

	t_model_make(&m, "thread-errors", 2, 128, 256);
	t_host_options(&o, &m, 100, 2);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	CHECK(strcmp(wsp_errmsg(pg), "") == 0);   /* no failed call yet */
	for (int t = 0; t < THREADS; t++) {
		w[t] = (struct worker){ .pg = pg, .n_layers = m.sum.n_layers, .id = t };
		CHECK(pthread_create(&th[t], NULL, work, &w[t]) == 0);
	}
	for (int t = 0; t < THREADS; t++) {
		CHECK(pthread_join(th[t], NULL) == 0);
		bad += w[t].bad;
	}
	printf("%d threads x %d failed calls: %d read another thread's message\n", THREADS, ROUNDS,
	       bad);
	CHECK(bad == 0);
	/* this thread failed nothing: its message is still empty */
	CHECK(strcmp(wsp_errmsg(pg), "") == 0);
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
