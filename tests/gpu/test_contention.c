/* Host backend, contention.  (1) Two threads, each holding at most one
 * layer, two slots and a host tier of two layers: every acquire succeeds
 * (a prefetch or another thread's in-flight copy never makes a demand fail
 * with -ENOSPC).  (2) More threads than slots: acquires that find every slot
 * held fail with WSP_ESTATE, and the counters count only the successes
 * (acquires == gpu_hits + host_hits + misses == successes) and the failures
 * apart (acquire_failures). */
#include <inttypes.h>
#include <pthread.h>

#include "pager_util.h"

struct worker {
	wsp_pager *pg;
	uint32_t n_layers;
	unsigned seed, rounds;
	int retry_estate;
	uint64_t ok, estate, other;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	for (unsigned i = 0; i < w->rounds; i++) {
		uint32_t l = (uint32_t)rand_r(&w->seed) % w->n_layers;
		const struct wsp_layer *L;
		int rc = wsp_acquire(w->pg, l, NULL, &L);
		if (rc == WSP_ESTATE) {
			w->estate++;
			if (w->retry_estate)
				i--;
			continue;
		}
		if (rc < 0) {
			if (w->other++ < 3)
				fprintf(stderr, "acquire %u: %s: %s\n", l, wsp_strerror(rc),
					wsp_errmsg(w->pg));
			continue;
		}
		w->ok++;
		if (L->index != l || t_view_bad(L))
			w->other++;
		CHECK_RC(wsp_release(w->pg, l, NULL), 0);
	}
	return NULL;
}

static void run(const struct t_model *m, unsigned threads, unsigned slots, uint64_t cache,
		unsigned rounds, struct worker *sum)
{
	struct wsp_options o;
	struct wsp_stats st;
	char err[512];
	wsp_pager *pg;
	pthread_t th[64];
	struct worker w[64];

	t_host_options(&o, m, 0, slots);
	o.host_cache_bytes = cache;
	CHECK_RC(wsp_open(m->pack, &o, &pg, err, sizeof(err)), 0);
	memset(sum, 0, sizeof(*sum));
	for (unsigned t = 0; t < threads; t++) {
		w[t] = (struct worker){ .pg = pg, .n_layers = m->sum.n_layers, .seed = 7 + t,
					.rounds = rounds, .retry_estate = 1 };
		CHECK(pthread_create(&th[t], NULL, work, &w[t]) == 0);
	}
	for (unsigned t = 0; t < threads; t++) {
		CHECK(pthread_join(th[t], NULL) == 0);
		sum->ok += w[t].ok;
		sum->estate += w[t].estate;
		sum->other += w[t].other;
	}
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("%u threads, %u slots, cache %" PRIu64 " KiB: %" PRIu64 " ok, %" PRIu64
	       " busy, %" PRIu64 " other errors; stats: %" PRIu64 " acquires (%" PRIu64
	       " gpu + %" PRIu64 " host + %" PRIu64 " miss), %" PRIu64 " failed\n",
	       threads, slots, cache >> 10, sum->ok, sum->estate, sum->other, st.acquires,
	       st.gpu_hits, st.host_hits, st.misses, st.acquire_failures);
	CHECK(st.acquires == sum->ok);
	CHECK(st.gpu_hits + st.host_hits + st.misses == st.acquires);
	CHECK(st.acquire_failures == sum->estate + sum->other);
	wsp_close(pg);
}

int main(void)
{
	struct t_model m;
	struct worker sum;

	/* blocks of ~1.1 MiB; the cache holds two of them */
	t_model_make(&m, "contention", 6, 256, 512);
	uint64_t two = 2 * m.sum.max_layer_raw_bytes + (128 << 10);
	for (int rep = 0; rep < 5; rep++) {
		run(&m, 2, 2, two, 600, &sum);
		CHECK(sum.other == 0);   /* no -ENOSPC, nothing else either */
		CHECK(sum.estate == 0);  /* as many slots as holders */
	}
	run(&m, 16, 2, two, 100, &sum);
	CHECK(sum.other == 0);
	CHECK(sum.ok == 16 * 100);
	t_model_remove(&m);
	return 0;
}
