/* The pipeline's news reaches the front end as messages: every load's end
 * (demands, prefetches, a failed load) is taken up by one thread, the front
 * end's own, which tells the host tier's user (on_ready) - never a read or
 * decode thread, never a caller.  Checked by noting the thread of each
 * on_ready, with four decode threads and three callers; and a prefetch
 * deferred while pinning goes on starts once hcache_pin_wait returns. */
#include "cache_test.h"

#define CALLERS 3
#define MAX_SEEN 64

static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t seen[MAX_SEEN];
static unsigned n_seen, n_ready, n_failed;

static void on_ready(void *ctx, uint32_t layer, int status)
{
	(void)ctx;
	(void)layer;
	pthread_mutex_lock(&seen_lock);
	unsigned k = 0;
	while (k < n_seen && !pthread_equal(seen[k], pthread_self()))
		k++;
	if (k == n_seen && n_seen < MAX_SEEN)
		seen[n_seen++] = pthread_self();
	n_ready++;
	n_failed += status < 0;
	pthread_mutex_unlock(&seen_lock);
}

struct caller {
	struct hcache *hc;
	const struct t_pack_spec *spec;
	struct wsp_pack_s *pk;
	unsigned seed;
	pthread_t self;
	int failed;
};

static void *work(void *arg)
{
	struct caller *c = arg;
	uint32_t n = c->pk->m.hdr->n_layers;
	struct wspi_err err;
	wspi_err_init(&err);
	c->self = pthread_self();
	for (int r = 0; r < 60 && !c->failed; r++) {
		uint32_t l = (uint32_t)rand_r(&c->seed) % n;
		struct hcache_ref ref;
		if (hcache_get(c->hc, l, &ref, &err) < 0) {
			fprintf(stderr, "get %u: %s\n", l, err.msg);
			c->failed = 1;
			break;
		}
		c->failed |= ct_check_layer(c->spec, c->pk, &ref) != 0;
		(void)hcache_request(c->hc, (l + 1) % n, 1);
		hcache_put(c->hc, &ref);
	}
	wspi_err_destroy(&err);
	return NULL;
}

static int pin(void *ctx, void *p, uint64_t len, struct wspi_err *err)
{
	(void)ctx, (void)p, (void)len, (void)err;
	return 0;
}

static void unpin(void *ctx, void *p)
{
	(void)ctx, (void)p;
}

int main(void)
{
	const char *root = t_scratch("cache-inbox");
	char dir[600];
	struct t_pack_spec spec = {
		.layers = 10, .tensors_per_layer = 2, .tensor_bytes = 40000,
		.compressible = 1, .codec = WSP_CODEC_ZSTD, .chunk_bytes = 8192,
	};
	snprintf(dir, sizeof(dir), "%s/p", root);
	CHECK_RC(t_make_pack(dir, &spec), 0);
	struct wsp_pack_s *pk = ct_open_pack(dir);
	const uint64_t page = 4096;
	uint64_t lp = (pk->m.layers[0].raw_bytes + page - 1) / page;
	struct hcache_config cfg;
	struct hcache *hc;
	struct wspi_err err;
	wspi_err_init(&err);

	/* Room for CALLERS + 1 layers: loads keep ending while callers get. */
	ct_config(&cfg, WSP_IO_PREAD, (CALLERS + 1) * lp * page, page);
	cfg.decode_threads = 4;
	cfg.on_ready = on_ready;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
	/* A load that fails ends the same way: layer 0's bytes handed in wrong. */
	uint8_t *bad = calloc(1, pk->m.layers[0].stored_bytes);
	struct hcache_ref r;
	CHECK(bad && hcache_provide(hc, 0, bad) == 1);
	CHECK(hcache_get(hc, 0, &r, &err) < 0);
	free(bad);
	struct caller c[CALLERS];
	pthread_t th[CALLERS];
	for (int i = 0; i < CALLERS; i++) {
		c[i] = (struct caller){ .hc = hc, .spec = &spec, .pk = pk, .seed = 5u + (unsigned)i };
		CHECK(pthread_create(&th[i], NULL, work, &c[i]) == 0);
	}
	for (int i = 0; i < CALLERS; i++) {
		CHECK(pthread_join(th[i], NULL) == 0);
		CHECK(!c[i].failed);
	}
	hcache_destroy(hc);

	pthread_mutex_lock(&seen_lock);
	printf("%u loads ended (%u failed), told by %u thread(s)\n", n_ready, n_failed, n_seen);
	CHECK(n_ready > 0 && n_failed >= 1 && n_seen == 1);
	for (int i = 0; i < CALLERS; i++)
		CHECK(!pthread_equal(seen[0], c[i].self));
	CHECK(!pthread_equal(seen[0], pthread_self()));
	pthread_mutex_unlock(&seen_lock);

	/* pin_later: a prefetch deferred for pages has started once
	 * hcache_pin_wait returns (the pages' news was taken up). */
	ct_config(&cfg, WSP_IO_PREAD, 4 * lp * page, page);
	cfg.pin = pin;
	cfg.unpin = unpin;
	cfg.pin_later = 1;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
	CHECK_RC(hcache_request(hc, 2, 1), 0);   /* deferred: no pages yet */
	CHECK_RC(hcache_pin_start(hc, &err), 0);
	CHECK_RC(hcache_pin_wait(hc, &err), 0);
	struct hcache_stats st;
	hcache_get_stats(hc, &st);
	CHECK(st.prefetches == 1 && st.loads == 1);
	hcache_destroy(hc);

	pack_close(pk);
	wspi_err_destroy(&err);
	t_rmrf(root);
	return 0;
}
