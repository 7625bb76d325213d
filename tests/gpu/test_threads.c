/* Host backend: several threads acquire and release layers at once (as
 * many threads as slots, each holding one layer at a time, so a slot is
 * always available).  Every view must hold the right bytes; run under
 * -fsanitize=thread to look for races. */
#include <inttypes.h>
#include <pthread.h>

#include "pager_util.h"

#define THREADS 3
#define ROUNDS 150

struct worker {
	wsp_pager *pg;
	uint32_t n_layers;
	unsigned seed;
	int failed;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < ROUNDS && !w->failed; i++) {
		/* Mostly a cyclic scan (predictable), sometimes a jump. */
		uint32_t l = (rand_r(&w->seed) % 4 == 0) ? (uint32_t)rand_r(&w->seed) % w->n_layers
							  : (uint32_t)i % w->n_layers;
		const struct wsp_layer *L;
		int rc = wsp_acquire(w->pg, l, NULL, &L);
		if (rc < 0) {
			fprintf(stderr, "acquire %u: %s: %s\n", l, wsp_strerror(rc),
				wsp_errmsg(w->pg));
			w->failed = 1;
			break;
		}
		if (L->index != l || t_view_bad(L))
			w->failed = 1;
		if (i % 16 == 0) {
			struct wsp_stats st;
			wsp_get_stats(w->pg, &st);
			wsp_prefetch(w->pg, (l + 3) % w->n_layers);
		}
		rc = wsp_release(w->pg, l, NULL);
		if (rc < 0) {
			fprintf(stderr, "release %u: %s\n", l, wsp_errmsg(w->pg));
			w->failed = 1;
		}
	}
	return NULL;
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	char err[512];
	wsp_pager *pg;
	pthread_t th[THREADS];
	struct worker w[THREADS];

	t_model_make(&m, "gpu-threads", 6, 128, 256);
	t_host_options(&o, &m, 50, THREADS);
	/* The pread backend: thread sanitizers and valgrind see its hand-offs
	 * (io_uring's go through the kernel, where they cannot look). */
	o.io = WSP_IO_PREAD;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .pg = pg, .n_layers = m.sum.n_layers, .seed = 17u + i };
		CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		CHECK(!w[i].failed);
	}
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.acquires == (uint64_t)THREADS * ROUNDS);
	CHECK(st.gpu_hits + st.host_hits + st.misses == st.acquires);
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
