/* wsp_acquire_wait: more threads holding layers than slots wait for a
 * release instead of failing with WSP_ESTATE (every call succeeds, the
 * views are right); with every slot held and nobody releasing, it times out
 * with -ETIMEDOUT after about the time asked.  Host backend. */
#include <inttypes.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "pager_util.h"

#define THREADS 12
#define ROUNDS 100

struct worker {
	wsp_pager *pg;
	uint32_t n_layers;
	unsigned seed;
	int bad;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < ROUNDS; i++) {
		uint32_t l = (uint32_t)rand_r(&w->seed) % w->n_layers;
		const struct wsp_layer *L;
		int rc = wsp_acquire_wait(w->pg, l, NULL, &L, 30ull * 1000000000u);
		if (rc < 0) {
			if (w->bad++ < 3)
				fprintf(stderr, "acquire_wait %u: %s: %s\n", l, wsp_strerror(rc),
					wsp_errmsg(w->pg));
			continue;
		}
		if (L->index != l || t_view_bad(L))
			w->bad++;
		usleep(100);   /* hold it a little, as a layer's compute would */
		CHECK_RC(wsp_release(w->pg, l, NULL), 0);
	}
	return NULL;
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	const struct wsp_layer *a, *b, *c;
	char err[512];
	wsp_pager *pg;
	pthread_t th[THREADS];
	struct worker w[THREADS];
	int bad = 0;

	t_model_make(&m, "acquire-wait", 4, 128, 256);
	t_host_options(&o, &m, 100, 2);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	for (int t = 0; t < THREADS; t++) {
		w[t] = (struct worker){ .pg = pg, .n_layers = m.sum.n_layers, .seed = 3 + t };
		CHECK(pthread_create(&th[t], NULL, work, &w[t]) == 0);
	}
	for (int t = 0; t < THREADS; t++) {
		CHECK(pthread_join(th[t], NULL) == 0);
		bad += w[t].bad;
	}
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("%d threads x %d waiting acquires on 2 slots: %d failed; %" PRIu64 " acquires, %" PRIu64
	       " counted as failed\n", THREADS, ROUNDS, bad, st.acquires, st.acquire_failures);
	CHECK(bad == 0);
	CHECK(st.acquires == THREADS * ROUNDS);
	/* a waiting acquire counts once: its tries that found no slot are not
	 * failures of the call, which succeeded */
	CHECK(st.acquire_failures == 0);

	/* both slots held, nobody releasing: -ETIMEDOUT after ~50 ms */
	CHECK_RC(wsp_acquire(pg, 0, NULL, &a), 0);
	CHECK_RC(wsp_acquire(pg, 1, NULL, &b), 0);
	struct timespec ts0, ts1;
	clock_gettime(CLOCK_MONOTONIC, &ts0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	uint64_t failures = st.acquire_failures;
	CHECK_RC(wsp_acquire_wait(pg, 2, NULL, &c, 50ull * 1000000u), -ETIMEDOUT);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.acquire_failures == failures + 1);   /* one call, one failure */
	clock_gettime(CLOCK_MONOTONIC, &ts1);
	uint64_t waited = (uint64_t)(ts1.tv_sec - ts0.tv_sec) * 1000000000u + (uint64_t)ts1.tv_nsec - (uint64_t)ts0.tv_nsec;
	printf("timed out after %.1f ms: %s\n", waited / 1e6, wsp_errmsg(pg));
	CHECK(waited >= 45ull * 1000000u);
	CHECK(strstr(wsp_errmsg(pg), "every slot stayed held"));
	/* the layer itself held: no wait at all */
	CHECK_RC(wsp_acquire_wait(pg, 1, NULL, &c, 0), 0);
	CHECK_RC(wsp_release(pg, 1, NULL), 0);
	CHECK_RC(wsp_release(pg, 1, NULL), 0);
	CHECK_RC(wsp_acquire_wait(pg, 2, NULL, &c, 0), 0);   /* a slot is free now */
	CHECK_RC(wsp_release(pg, 2, NULL), 0);
	CHECK_RC(wsp_release(pg, 0, NULL), 0);
	CHECK_RC(wsp_acquire_wait(NULL, 0, NULL, &c, 0), -EINVAL);
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
