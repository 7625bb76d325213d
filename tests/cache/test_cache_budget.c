/* Budget and pinning.
 *  - A budget above the memory available (1 PiB) is clamped, with a notice
 *    saying so; the cache works.
 *  - A budget that cannot hold the largest layer: WSP_ETOOBIG naming it.
 *  - A budget past the pack: the tier takes every layer at once, in whole
 *    pages, and no more.
 *  - A page size that is not a multiple of 4096: -EINVAL.
 *  - Pinning through the hook: every piece pinned then unpinned once; a pin
 *    failure is reported (notice, stats, hcache_pin_wait) and the pages are
 *    still served, unpinned.
 *  - A prefetch that finds no room while pinning goes on is deferred until
 *    the next piece is pinned, then loaded.
 *  - pin_later: no pinning and no pages before hcache_pin_start. */
#include "cache_test.h"

struct pins {
	pthread_mutex_t lock;
	int calls, unpins, fail_on;
	uint64_t bytes;
};

static int pin(void *ctx, void *p, uint64_t len, struct wspi_err *err)
{
	struct pins *ps = ctx;
	pthread_mutex_lock(&ps->lock);
	int n = ++ps->calls;
	if (n != ps->fail_on)
		ps->bytes += len;
	pthread_mutex_unlock(&ps->lock);
	if (n == ps->fail_on)
		return WSP_ERR(err, -ENOMEM, "fake pin: no locked memory left");
	return 0;
}

/* A pin that holds back every piece after the first until released. */
struct slow_pin {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int calls, open, ready[8];
};

static int slow_pin(void *ctx, void *p, uint64_t len, struct wspi_err *err)
{
	struct slow_pin *sp = ctx;
	pthread_mutex_lock(&sp->lock);
	if (sp->calls++ > 0)
		while (!sp->open)
			pthread_cond_wait(&sp->cond, &sp->lock);
	pthread_mutex_unlock(&sp->lock);
	return 0;
}

static void slow_unpin(void *ctx, void *p)
{
}

static void slow_ready(void *ctx, uint32_t layer, int status)
{
	struct slow_pin *sp = ctx;
	pthread_mutex_lock(&sp->lock);
	if (layer < 8)
		sp->ready[layer] = status < 0 ? -1 : 1;
	pthread_cond_broadcast(&sp->cond);
	pthread_mutex_unlock(&sp->lock);
}

static void unpin(void *ctx, void *p)
{
	struct pins *ps = ctx;
	pthread_mutex_lock(&ps->lock);
	ps->unpins++;
	pthread_mutex_unlock(&ps->lock);
}

static void use_all(struct hcache *hc, struct wsp_pack_s *pk, const struct t_pack_spec *spec)
{
	struct wspi_err err;
	wspi_err_init(&err);
	for (uint32_t l = 0; l < pk->m.hdr->n_layers; l++) {
		struct hcache_ref ref;
		CHECK_RC(hcache_get(hc, l, &ref, &err), 0);
		CHECK(ct_check_layer(spec, pk, &ref) == 0);
		hcache_put(hc, &ref);
	}
	wspi_err_destroy(&err);
}

int main(void)
{
	const char *root = t_scratch("cache-budget");
	char dir[600];
	struct t_pack_spec spec = {
		.layers = 3, .tensors_per_layer = 2, .tensor_bytes = 100000,
		.compressible = 0, .codec = WSP_CODEC_RAW, .chunk_bytes = 65536,
	};
	snprintf(dir, sizeof(dir), "%s/p", root);
	CHECK_RC(t_make_pack(dir, &spec), 0);
	struct wsp_pack_s *pk = ct_open_pack(dir);
	struct ct_notices nt = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct hcache_config cfg;
	struct hcache *hc;
	struct hcache_stats st;
	struct wspi_err err;
	wspi_err_init(&err);

	/* 1 PiB: clamped to the memory available, said once. */
	uint64_t avail = wspi_memory_available(NULL);
	ct_config(&cfg, WSP_IO_PREAD, 1ull << 50, 0);
	cfg.notice = ct_notice;
	cfg.notice_ctx = &nt;
	if (!avail) {
		fprintf(stderr, "memory available unknown: clamp not testable\n");
	} else {
		CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
		hcache_get_stats(hc, &st);
		CHECK(st.budget_bytes > 0 && st.budget_bytes <= avail);
		CHECK(strstr(nt.text, "above the memory available"));
		use_all(hc, pk, &spec);
		hcache_destroy(hc);
	}

	/* Largest layer does not fit. */
	uint64_t biggest = 0;
	for (uint32_t l = 0; l < pk->m.hdr->n_layers; l++)
		biggest = WSP_MAX(biggest, pk->m.layers[l].raw_bytes);
	ct_config(&cfg, WSP_IO_PREAD, biggest - 1, 4096);
	hc = (void *)1;
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), WSP_ETOOBIG);
	CHECK(hc == NULL);
	fprintf(stderr, "expected: %s\n", err.msg);
	CHECK(strstr(err.msg, "model.layers.") && strstr(err.msg, "budget"));
	ct_config(&cfg, WSP_IO_PREAD, wspi_align_up(biggest, 4096), 4096);
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);   /* exactly enough */
	use_all(hc, pk, &spec);
	hcache_destroy(hc);
	ct_config(&cfg, WSP_IO_PREAD, 1 << 20, 1000);
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), -EINVAL);

	/* The tier is no bigger than the pack, whatever the budget: every layer
	 * at once, each in whole pages. */
	uint64_t pack_pages = 0;
	for (uint32_t l = 0; l < pk->m.hdr->n_layers; l++)
		pack_pages += (pk->m.layers[l].raw_bytes + 4095) / 4096;
	ct_config(&cfg, WSP_IO_PREAD, 600ull << 20, 4096);
	CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
	hcache_get_stats(hc, &st);
	CHECK(st.budget_bytes == pack_pages * 4096);
	use_all(hc, pk, &spec);
	hcache_destroy(hc);

	/* Pinning: the pack's 147 pages of 4 KiB (600 MiB asked) in 3 pieces
	 * of 64 pages (the last shorter). */
	const uint64_t piece = 64 * 4096;
	CHECK(pack_pages * 4096 > 2 * piece && pack_pages * 4096 <= 3 * piece);
	for (int fail_on = 0; fail_on <= 2; fail_on += 2) {
		struct pins ps = { .lock = PTHREAD_MUTEX_INITIALIZER, .fail_on = fail_on };
		memset(nt.text, 0, sizeof(nt.text));
		ct_config(&cfg, WSP_IO_PREAD, 600ull << 20, 4096);
		cfg.pin_piece_bytes = piece;
		cfg.pin = pin;
		cfg.unpin = unpin;
		cfg.pin_ctx = &ps;
		cfg.notice = ct_notice;
		cfg.notice_ctx = &nt;
		CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
		use_all(hc, pk, &spec);
		int rc = hcache_pin_wait(hc, &err);
		hcache_get_stats(hc, &st);
		if (!fail_on) {
			CHECK_RC(rc, 0);
			CHECK(st.pinned_bytes == st.budget_bytes && st.pin_error == 0);
		} else {
			CHECK_RC(rc, -ENOMEM);
			fprintf(stderr, "expected: %s\n", err.msg);
			CHECK(strstr(err.msg, "fake pin") && strstr(err.msg, "pageable"));
			CHECK(strstr(nt.text, "fake pin"));
			CHECK(st.pin_error == -ENOMEM && st.pinned_bytes == piece);
		}
		use_all(hc, pk, &spec);
		hcache_destroy(hc);
		/* After a failure the thread stops pinning: 2 calls, 1 unpin. */
		CHECK(ps.calls == (fail_on ? 2 : 3) && ps.unpins == (fail_on ? 1 : 3));
	}

	/* pin_later: nothing is pinned, or handed out, before hcache_pin_start;
	 * a prefetch made before waits for it; a second start is a no-op; a
	 * cache destroyed without it pinned nothing. */
	{
		struct pins ps = { .lock = PTHREAD_MUTEX_INITIALIZER };
		struct hcache_ref r0;
		ct_config(&cfg, WSP_IO_PREAD, 600ull << 20, 4096);
		cfg.pin_piece_bytes = piece;
		cfg.pin = pin;
		cfg.unpin = unpin;
		cfg.pin_ctx = &ps;
		cfg.pin_later = 1;
		CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
		CHECK_RC(hcache_request(hc, 0, 1), 0);   /* deferred: no pages yet */
		hcache_get_stats(hc, &st);
		CHECK(st.loads == 0 && st.pinned_bytes == 0);
		pthread_mutex_lock(&ps.lock);
		CHECK(ps.calls == 0);
		pthread_mutex_unlock(&ps.lock);
		CHECK_RC(hcache_pin_start(hc, &err), 0);
		CHECK_RC(hcache_pin_start(hc, &err), 0);
		CHECK_RC(hcache_pin_wait(hc, &err), 0);
		CHECK_RC(hcache_get(hc, 0, &r0, &err), 0);
		hcache_get_stats(hc, &st);
		CHECK(st.prefetch_hits == 1 && st.pinned_bytes == st.budget_bytes);
		CHECK(ct_check_layer(&spec, pk, &r0) == 0);
		hcache_put(hc, &r0);
		hcache_destroy(hc);
		CHECK(ps.calls == 3 && ps.unpins == 3);

		struct pins none = { .lock = PTHREAD_MUTEX_INITIALIZER };
		cfg.pin_ctx = &none;
		CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
		hcache_destroy(hc);
		CHECK(none.calls == 0 && none.unpins == 0);
		cfg.pin_later = 0;
	}

	/* A prefetch that finds no room while pinning is still going on is
	 * deferred, not dropped: 128 MiB pages, 2 per 256 MiB piece, 2 pieces;
	 * layers 0 and 1 held fill the first piece, the second is held back. */
	{
		struct slow_pin sp = { .lock = PTHREAD_MUTEX_INITIALIZER,
				       .cond = PTHREAD_COND_INITIALIZER };
		struct hcache_ref r0, r1, r2;
		ct_config(&cfg, WSP_IO_PREAD, 512ull << 20, 128ull << 20);
		cfg.pin = slow_pin;
		cfg.unpin = slow_unpin;
		cfg.pin_ctx = &sp;
		cfg.on_ready = slow_ready;
		cfg.ready_ctx = &sp;
		CHECK_RC(hcache_create(&cfg, pk, &hc, &err), 0);
		CHECK_RC(hcache_get(hc, 0, &r0, &err), 0);
		CHECK_RC(hcache_get(hc, 1, &r1, &err), 0);
		CHECK_RC(hcache_request(hc, 2, 1), 0);   /* deferred */
		CHECK(!hcache_contains(hc, 2));
		hcache_get_stats(hc, &st);
		CHECK(st.loads == 2);
		pthread_mutex_lock(&sp.lock);
		sp.open = 1;
		pthread_cond_broadcast(&sp.cond);
		/* Bounded only so that a broken deferral fails instead of hanging. */
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 20;
		while (!sp.ready[2])
			if (pthread_cond_timedwait(&sp.cond, &sp.lock, &until) == ETIMEDOUT)
				break;
		CHECK(sp.ready[2] == 1);
		pthread_mutex_unlock(&sp.lock);
		hcache_get_stats(hc, &st);
		CHECK(st.loads == 3 && st.prefetches == 1);
		CHECK_RC(hcache_get(hc, 2, &r2, &err), 0);
		hcache_get_stats(hc, &st);
		CHECK(st.prefetch_hits == 1 && st.misses == 2);
		CHECK(ct_check_layer(&spec, pk, &r2) == 0);
		hcache_put(hc, &r0);
		hcache_put(hc, &r1);
		hcache_put(hc, &r2);
		hcache_destroy(hc);
	}

	pack_close(pk);
	wspi_err_destroy(&err);
	t_rmrf(root);
	return 0;
}
