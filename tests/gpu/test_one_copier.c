/* Copies into slots start on one thread, the pager's own, and never on a
 * caller's: demands from several threads at once, the read-ahead after
 * each acquire, and hints (wsp_hint_next, wsp_prefetch) all go through it.
 * Host backend, with the device's host-to-slot copy wrapped to note the
 * thread that starts each copy; a host tier smaller than the model, so
 * demands also wait for loads. */
#include <pthread.h>

#include "pager/pager.h"
#include "pager_util.h"

#define THREADS 4
#define ROUNDS 200

static const struct dev_ops *real;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
#define MAX_SEEN 64
static pthread_t seen[MAX_SEEN];   /* the distinct threads that started copies */
static unsigned n_copiers;
static uint64_t n_copies;

static int noting_copy(struct dev *d, void *dst, const void *src, uint64_t len,
		       struct wspi_err *err)
{
	pthread_mutex_lock(&seen_lock);
	unsigned k = 0;
	while (k < n_copiers && !pthread_equal(seen[k], pthread_self()))
		k++;
	if (k == n_copiers && n_copiers < MAX_SEEN)
		seen[n_copiers++] = pthread_self();
	n_copies++;
	pthread_mutex_unlock(&seen_lock);
	return real->copy_h2d(d, dst, src, len, err);
}

struct caller {
	wsp_pager *pg;
	uint32_t n_layers;
	unsigned seed;
	pthread_t self;
	int failed;
};

static void *work(void *arg)
{
	struct caller *c = arg;
	c->self = pthread_self();
	for (int i = 0; i < ROUNDS && !c->failed; i++) {
		uint32_t l = rand_r(&c->seed) % 3 ? (uint32_t)i % c->n_layers
						  : (uint32_t)rand_r(&c->seed) % c->n_layers;
		const struct wsp_layer *L;
		if (wsp_acquire(c->pg, l, NULL, &L) < 0) {
			fprintf(stderr, "acquire %u: %s\n", l, wsp_errmsg(c->pg));
			c->failed = 1;
			break;
		}
		c->failed |= L->index != l || t_view_bad(L);
		if (i % 8 == 0) {
			uint32_t next[2] = { (l + 1) % c->n_layers, (l + 2) % c->n_layers };
			c->failed |= wsp_hint_next(c->pg, next, 2) != 0;
			c->failed |= wsp_prefetch(c->pg, (l + 3) % c->n_layers) != 0;
		}
		c->failed |= wsp_release(c->pg, l, NULL) != 0;
	}
	return NULL;
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	struct caller c[THREADS];
	pthread_t th[THREADS];
	char err[512];
	wsp_pager *pg;

	t_model_make(&m, "one-copier", 8, 128, 256);
	t_host_options(&o, &m, 60, THREADS + 2);
	o.flags |= WSP_OPEN_NO_PREFETCH;   /* nothing moves before the wrapper is in */
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	/* Swapped before any call that posts to the pager's thread: it reads
	 * the operations only after taking the pager's lock. */
	struct dev_ops noting = *pg->dev->ops;
	real = pg->dev->ops;
	noting.copy_h2d = noting_copy;
	pg->dev->ops = &noting;
	pg->opt.flags &= ~(unsigned)WSP_OPEN_NO_PREFETCH;   /* and now read ahead */

	for (int t = 0; t < THREADS; t++) {
		c[t] = (struct caller){ .pg = pg, .n_layers = m.sum.n_layers, .seed = 11u + t };
		CHECK(pthread_create(&th[t], NULL, work, &c[t]) == 0);
	}
	for (int t = 0; t < THREADS; t++)
		CHECK(pthread_join(th[t], NULL) == 0);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	pthread_mutex_lock(&pg->lock);
	uint64_t early = pg->sp.prefetch_fills;
	pthread_mutex_unlock(&pg->lock);
	pthread_mutex_lock(&seen_lock);
	printf("%llu acquires (%llu gpu hits, %llu host hits, %llu misses), %llu prefetched "
	       "fills: %llu copies started, by %u thread(s)\n",
	       (unsigned long long)st.acquires, (unsigned long long)st.gpu_hits,
	       (unsigned long long)st.host_hits, (unsigned long long)st.misses,
	       (unsigned long long)early, (unsigned long long)n_copies, n_copiers);
	for (int t = 0; t < THREADS; t++)
		CHECK(!c[t].failed);
	CHECK(st.acquires == (uint64_t)THREADS * ROUNDS);
	CHECK(st.misses > 0 && early > 0);   /* both kinds of fill ran */
	CHECK(n_copies > 0 && n_copiers == 1);
	for (int t = 0; t < THREADS; t++)
		CHECK(!pthread_equal(seen[0], c[t].self));
	CHECK(!pthread_equal(seen[0], pthread_self()));
	pthread_mutex_unlock(&seen_lock);
	/* The wrapper stays in until the pager is closed: its thread may still
	 * be reading ahead, and reads the operations only under its lock. */
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
