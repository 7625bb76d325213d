/* A layer waiting in a slot is not pushed out by its own acquire.  Host
 * backend, two slots, the whole model in the host tier; after a pass that
 * teaches the predictor the cycle, a second thread keeps asking for the
 * three layers after the caller's (wsp_prefetch) while the caller waits for
 * each layer to be in a slot and acquires it: every such acquire must be a
 * GPU hit.  A pager that counted the layer as used before holding its slot
 * saw its next use a pass away for that moment, and a prefetch could take
 * the slot (then the acquire copied it again from the host tier). */
#include <inttypes.h>
#include <pthread.h>
#include <unistd.h>

#include "pager/pager.h"
#include "pager_util.h"

#define PASSES 40

struct asker {
	wsp_pager *pg;
	uint32_t n_layers;
	uint32_t at;   /* the caller's last acquired layer (atomic) */
	int stop;      /* atomic */
};

static void *ask(void *arg)
{
	struct asker *a = arg;
	while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
		uint32_t at = __atomic_load_n(&a->at, __ATOMIC_ACQUIRE);
		for (uint32_t k = 1; k <= 3; k++)
			CHECK_RC(wsp_prefetch(a->pg, (at + k) % a->n_layers), 0);
	}
	return NULL;
}

/* Bounded wait for `layer` to be in a slot. */
static int wait_slot(wsp_pager *pg, uint32_t layer)
{
	for (int i = 0; i < 20000; i++) {
		pthread_mutex_lock(&pg->lock);
		int in = slots_find(&pg->sp, layer) != NULL;
		pthread_mutex_unlock(&pg->lock);
		if (in)
			return 1;
		usleep(100);
	}
	return 0;
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	char err[512];
	wsp_pager *pg;
	pthread_t th;

	t_model_make(&m, "acquire-held", 6, 128, 256);
	uint32_t n = m.sum.n_layers;
	t_host_options(&o, &m, 100, 2);
	o.flags |= WSP_OPEN_NO_PREFETCH;   /* only the asking thread moves layers up */
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	for (int pass = 0; pass < 2; pass++)   /* learn the cycle; load the host tier */
		for (uint32_t l = 0; l < n; l++)
			t_use_layer(pg, l);

	struct asker a = { .pg = pg, .n_layers = n, .at = n - 1 };
	CHECK(pthread_create(&th, NULL, ask, &a) == 0);
	wsp_reset_stats(pg);
	uint64_t waited = 0;
	for (int pass = 0; pass < PASSES; pass++) {
		for (uint32_t l = 0; l < n; l++) {
			if (!wait_slot(pg, l)) {
				fprintf(stderr, "pass %d: layer %u never reached a slot\n", pass, l);
				exit(1);
			}
			waited++;
			t_use_layer(pg, l);
			__atomic_store_n(&a.at, l, __ATOMIC_RELEASE);
		}
	}
	__atomic_store_n(&a.stop, 1, __ATOMIC_RELEASE);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	fprintf(stderr, "acquires %" PRIu64 " of layers waited into a slot: gpu %" PRIu64
		" host %" PRIu64 " miss %" PRIu64 " predicted %" PRIu64 "\n",
		st.acquires, st.gpu_hits, st.host_hits, st.misses, st.predicted);
	CHECK(st.acquires == waited);
	CHECK(st.predicted == st.acquires);   /* the cycle was learned */
	CHECK(st.gpu_hits == st.acquires);
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
