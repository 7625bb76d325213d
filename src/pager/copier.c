/*
 * The pager's own thread: the one thread that starts copies into slots.
 *
 * Everything that wants a layer in a slot posts a message here and this
 * thread alone acts on it:
 *   - a demand (wsp_acquire of a layer no slot holds) carries its own
 *     completion: the thread fills a slot, hands the caller's stream the
 *     fill, and marks the demand done; the caller waits for that alone;
 *     so does a wsp_provide_device, whose fill decodes bytes the caller
 *     has in device memory (no host reference, no use handed out);
 *   - a layer for an early fill: one the host tier finished loading
 *     (pager_on_ready), or one the read-ahead or a hint asks for
 *     (pager_post with its admission distance).
 * So host references are taken only here, and a demand short of host pages
 * knows the only holders there are: its own copies in flight, which it
 * reaps.  Demands go first; early fills wait behind them.  The copies'
 * completions are handed back here too (pager_reap, on whichever thread
 * asks: the callers reap as they go).
 *
 * State: struct pager_inbox in struct wsp_pager_s, under pg->lock, written
 * only by this file.  pg->lock is never held across a host-cache call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pager/pager.h"

#define REAP_BATCH 32u

/* The GPU refused a packed layer it was filling a slot with (only a bug or
 * memory changed after the host checked the chunks can do it): the slot is
 * dropped, and every later acquire fails with this error, since streams
 * may already have used the slot. */
static void decode_failed(struct wsp_pager_s *pg, const struct slot_done *sd)
{
	pthread_mutex_lock(&pg->lock);
	int first = pg->decode_rc == 0;
	if (first) {
		pg->decode_rc = WSP_ECHECKSUM;
		snprintf(pg->decode_msg, sizeof(pg->decode_msg), "GPU decode of %s", sd->decode_msg);
	}
	struct slot *s = slots_find(&pg->sp, sd->ref.layer);
	if (s && !s->refs)
		slots_forget(&pg->sp, sd->ref.layer);
	pthread_mutex_unlock(&pg->lock);
	if (first)
		pager_notice(pg, pg->decode_msg);
}

void pager_reap(struct wsp_pager_s *pg, int wait)
{
	struct slot_done done[REAP_BATCH];
	unsigned n;
	do {
		pthread_mutex_lock(&pg->lock);
		n = slots_reap(&pg->sp, done, REAP_BATCH, wait);
		pg->reaping += n;
		pthread_mutex_unlock(&pg->lock);
		for (unsigned i = 0; i < n; i++) {
			/* Traced here, outside the lock: when the copies ran. */
			if (pg->opt.trace && done[i].ok && done[i].end_ns) {
				struct wsp_trace_event ev = {
					.stage = WSP_STAGE_H2D, .layer = done[i].ref.layer,
					.begin_ns = done[i].begin_ns, .end_ns = done[i].end_ns,
					.bytes = done[i].bytes,
				};
				pg->opt.trace(pg->opt.trace_ctx, &ev);
			}
			if (done[i].decode_status)
				decode_failed(pg, &done[i]);
			if (done[i].host_ref)
				src_put(pg, &done[i].ref);
		}
		pthread_mutex_lock(&pg->lock);
		pg->reaping -= n;
		if (n && !pg->reaping)
			pthread_cond_broadcast(&pg->progress);
		pthread_mutex_unlock(&pg->lock);
	} while (n == REAP_BATCH);
}

/* Slots `layer` may go into in pass `pass`: pass 0 only those of the
 * smallest size that fits it (a small layer keeps off the large slots
 * while small ones serve), pass 1 every slot it fits. */
int pager_slot_fits(const struct wsp_pager_s *pg, const struct slot *s, uint32_t layer, int pass)
{
	uint64_t raw = pg->pk->layers[layer].raw_bytes;
	if (raw > s->bytes)
		return 0;
	return pass || raw > pg->sp.small_bytes || s->bytes == pg->sp.small_bytes;
}

/* A slot for demanded `layer`: a free one it fits, else the policy's victim
 * among those no stream uses.  NULL when every such slot is acquired.
 * Under pg->lock. */
static struct slot *demand_victim(struct wsp_pager_s *pg, uint32_t layer)
{
	struct slot_pool *sp = &pg->sp;
	for (int pass = 0; pass < 2; pass++) {
		unsigned n = 0;
		for (unsigned i = 0; i < sp->n; i++) {
			struct slot *s = &sp->slots[i];
			if (s->refs || !pager_slot_fits(pg, s, layer, pass))
				continue;
			if (s->state == SLOT_FREE)
				return s;
			sp->cand[n].layer = s->layer;
			sp->cand[n].last_use = s->last_use;
			sp->cand[n].distance = predictor_distance(pg->pred, s->layer);
			sp->cand_slot[n++] = s;
		}
		int k = evict_choose(pg->opt.policy, sp->cand, n);
		if (k >= 0)
			return sp->cand_slot[k];
	}
	return NULL;
}

/* Admission for an early fill of `layer` (the host cache's rule): a free
 * slot it fits, or the unused one whose layer is predicted furthest (the
 * predictive policy's victim), if further than `dist`. */
static struct slot *prefetch_victim(struct wsp_pager_s *pg, uint32_t layer, uint64_t dist)
{
	for (int pass = 0; pass < 2; pass++) {
		struct evict_pick pick;
		evict_pick_init(&pick, WSP_POLICY_PREDICT);
		for (unsigned i = 0; i < pg->sp.n; i++) {
			struct slot *s = &pg->sp.slots[i];
			if (s->refs || !pager_slot_fits(pg, s, layer, pass))
				continue;
			if (s->state == SLOT_FREE)
				return s;
			struct evict_cand c = { s->layer, s->last_use,
						predictor_distance(pg->pred, s->layer) };
			evict_pick_offer(&pick, (long)i, &c);
		}
		if (pick.best >= 0 && pick.cand.distance > dist)
			return &pg->sp.slots[pick.best];
	}
	return NULL;
}

/* Copy `layer` into a slot ahead of need if its bytes are at hand (the host
 * tier, or the updated-layer store) and the admission rule allows. */
static void early_fill(struct wsp_pager_s *pg, uint32_t layer, uint64_t dist)
{
	struct hcache_ref ref;
	int used = 0;

	pthread_mutex_lock(&pg->lock);
	int in_slot = slots_find(&pg->sp, layer) != NULL;
	pthread_mutex_unlock(&pg->lock);
	if (in_slot || src_try_get(pg, layer, &ref, NULL) != 1)
		return;   /* an updated layer that fails to come back: the acquire reports */
	pthread_mutex_lock(&pg->lock);
	struct slot *s = prefetch_victim(pg, layer, dist);
	/* A failed early copy is dropped quietly: the acquire that needs the
	 * layer tries again and reports. */
	if (s && slots_fill(&pg->sp, s, pg->pk, layer, &ref, 1, NULL) == 0) {
		src_fix_view(pg, s, &ref);
		used = 1;
		pg->hinted[layer] = 0;
	}
	pthread_mutex_unlock(&pg->lock);
	if (!used)
		src_put(pg, &ref);
}

/* The host tier's reference for a demand, waiting for its load.  -ENOSPC
 * from the host tier means that every page is held.  Only copies into slots
 * hold host pages, and only this thread starts them: once they are all
 * back (this thread reaps, and waits for references other threads are
 * handing back) a second try settles it. */
static int get_host(struct wsp_pager_s *pg, uint32_t layer, struct hcache_ref *ref,
		    struct wspi_err *err)
{
	int rc = hcache_get(pg->hc, layer, ref, err);
	if (rc != -ENOSPC)
		return rc;
	pager_reap(pg, 1);
	pthread_mutex_lock(&pg->lock);
	while (pg->reaping)
		pthread_cond_wait(&pg->progress, &pg->lock);
	pthread_mutex_unlock(&pg->lock);
	wspi_err_clear(err);
	return hcache_get(pg->hc, layer, ref, err);
}

/* Serve a wsp_provide_device: d's layer into a slot from the stored bytes
 * in device memory, unless a slot holds it (0); also 0 when every slot it
 * fits is acquired (then it comes up the tiers at its acquire). */
static void serve_device(struct wsp_pager_s *pg, struct pager_demand *d)
{
	pthread_mutex_lock(&pg->lock);
	struct slot *s = slots_find(&pg->sp, d->layer);
	d->rc = 0;
	if (!s && (s = demand_victim(pg, d->layer)) != NULL) {
		d->rc = slots_fill_device(&pg->sp, s, pg->pk, d->layer, d->packed_dev, d->stream,
					  d->err);
		if (d->rc == 0)
			d->rc = 1;
		else
			wspi_err_prefix(d->err, "wsp_provide_device: layer %u (%s)", d->layer,
					pg->pk->layers[d->layer].name);
	}
	pthread_mutex_unlock(&pg->lock);
}

/* Serve demand d: its layer into a slot (unless one holds it by now) and
 * the slot handed to its stream.  Sets d's outcome and result. */
static void serve(struct wsp_pager_s *pg, struct pager_demand *d)
{
	struct hcache_ref ref;
	uint32_t layer = d->layer;
	const char *name = pg->pk->layers[layer].name;
	int rc;

	if (d->packed_dev) {
		serve_device(pg, d);
		return;
	}

	pthread_mutex_lock(&pg->lock);
	struct slot *s = slots_find(&pg->sp, layer);   /* an early fill came first */
	if (s) {
		d->how = PAGER_GPU_HIT;
		d->rc = slots_use(&pg->sp, s, d->stream, d->view, d->err);
		pthread_mutex_unlock(&pg->lock);
		return;
	}
	pthread_mutex_unlock(&pg->lock);

	rc = src_try_get(pg, layer, &ref, d->err);
	d->how = rc == 1 ? PAGER_HOST_HIT : PAGER_MISS;
	if (rc == 0) {
		/* The one place a demand waits for the disk. */
		uint64_t t0 = wspi_now_ns();
		rc = get_host(pg, layer, &ref, d->err);
		d->blocked_ns = wspi_now_ns() - t0;
		if (pg->opt.trace) {
			struct wsp_trace_event ev = {
				.stage = WSP_STAGE_WAIT, .layer = layer, .begin_ns = t0,
				.end_ns = t0 + d->blocked_ns, .bytes = pg->pk->layers[layer].raw_bytes,
			};
			pg->opt.trace(pg->opt.trace_ctx, &ev);
		}
	}
	if (rc < 0) {
		wspi_err_prefix(d->err, "acquire of layer %u (%s)", layer, name);
		d->rc = rc;
		return;
	}

	int filled = 0;   /* then the copy holds ref until it is reaped */
	pthread_mutex_lock(&pg->lock);
	s = demand_victim(pg, layer);
	if (!s) {
		rc = WSP_ERR(d->err, WSP_ESTATE,
			     "acquire of layer %u (%s): all %u slots hold acquired layers; "
			     "release one first or open with more gpu_slots", layer, name, pg->sp.n);
	} else if ((rc = slots_fill(&pg->sp, s, pg->pk, layer, &ref, 0, d->err)) < 0) {
		wspi_err_prefix(d->err, "acquire of layer %u (%s)", layer, name);
	} else {
		filled = 1;
		src_fix_view(pg, s, &ref);
		rc = slots_use(&pg->sp, s, d->stream, d->view, d->err);
	}
	pthread_mutex_unlock(&pg->lock);
	if (!filled)
		src_put(pg, &ref);
	d->rc = rc;
}

/* Both sides of a hand-off spin this long before they sleep: waking a
 * sleeping thread costs tens of microseconds, many times a host hit's own
 * cost, and in a forward pass the next demand (or the demand's completion)
 * usually comes sooner. */
#define HANDOFF_SPIN_NS 30000u

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Spin until *word differs from `old` (1), or for at most HANDOFF_SPIN_NS (0). */
static int spin_while(const unsigned *word, unsigned old)
{
	uint64_t end = wspi_now_ns() + HANDOFF_SPIN_NS;
	do {
		if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old)
			return 1;
		cpu_relax();
	} while (wspi_now_ns() < end);
	return 0;
}

/* What the thread takes next (under pg->lock): a demand first. */
static struct pager_demand *take_demand(struct pager_inbox *in)
{
	struct pager_demand *d = in->demands;
	if (d) {
		in->demands = d->next;
		if (!in->demands)
			in->tail = &in->demands;
	}
	return d;
}

static void *copier_main(void *arg)
{
	struct wsp_pager_s *pg = arg;
	struct pager_inbox *in = &pg->in;
	uint32_t n = pg->pk->m.hdr->n_layers;

	pthread_mutex_lock(&pg->lock);
	for (;;) {
		while (!in->demands && !in->n && !pg->closing) {
			unsigned seen = in->posted;
			pthread_mutex_unlock(&pg->lock);
			int moved = spin_while(&in->posted, seen);
			pthread_mutex_lock(&pg->lock);
			if (!moved && !in->demands && !in->n && !pg->closing)
				pthread_cond_wait(&in->work, &pg->lock);
		}
		if (pg->closing)
			break;
		struct pager_demand *d = take_demand(in);
		if (d) {
			pthread_mutex_unlock(&pg->lock);
			serve(pg, d);
			pthread_mutex_lock(&pg->lock);
			__atomic_store_n(&d->done, 1, __ATOMIC_RELEASE);
			pthread_cond_broadcast(&in->served);
			continue;
		}
		uint32_t layer = in->ring[in->head];
		in->head = (in->head + 1) % n;
		in->n--;
		in->queued[layer] = 0;
		int asked = in->asked[layer];
		uint64_t dist = in->ask_dist[layer];
		in->asked[layer] = 0;
		int hinted = pg->hinted[layer];
		pthread_mutex_unlock(&pg->lock);

		if (!asked) {   /* landed: copied up if hinted or predicted near */
			dist = predictor_distance(pg->pred, layer);
			asked = hinted || (!(pg->opt.flags & WSP_OPEN_NO_PREFETCH) &&
					   !pg->on_demand[layer] && dist <= pg->gpu_ahead);
		}
		if (asked)
			early_fill(pg, layer, dist);
		pthread_mutex_lock(&pg->lock);
	}
	/* Closing: a demand still queued (an acquire racing wsp_close, which
	 * the API forbids) fails rather than waits forever. */
	for (struct pager_demand *d; (d = take_demand(in)) != NULL;) {
		d->rc = WSP_ERR(d->err, WSP_ESTATE, "acquire of layer %u: the pager is closing",
				d->layer);
		__atomic_store_n(&d->done, 1, __ATOMIC_RELEASE);
	}
	pthread_cond_broadcast(&in->served);
	pthread_mutex_unlock(&pg->lock);
	return NULL;
}

void pager_post(struct wsp_pager_s *pg, uint32_t layer, int asked, uint64_t dist)
{
	struct pager_inbox *in = &pg->in;
	uint32_t n = pg->pk->m.hdr->n_layers;

	pthread_mutex_lock(&pg->lock);
	if (!pg->closing) {
		if (asked) {
			in->asked[layer] = 1;
			in->ask_dist[layer] = dist;
		}
		if (!in->queued[layer]) {   /* each layer in the ring at most once */
			in->ring[(in->head + in->n) % n] = layer;
			in->n++;
			in->queued[layer] = 1;
			__atomic_store_n(&in->posted, in->posted + 1, __ATOMIC_RELEASE);
			pthread_cond_signal(&in->work);
		}
	}
	pthread_mutex_unlock(&pg->lock);
}

void pager_demand_wait(struct wsp_pager_s *pg, struct pager_demand *d)
{
	struct pager_inbox *in = &pg->in;

	d->done = 0;
	d->next = NULL;
	*in->tail = d;
	in->tail = &d->next;
	__atomic_store_n(&in->posted, in->posted + 1, __ATOMIC_RELEASE);
	pthread_cond_signal(&in->work);
	pthread_mutex_unlock(&pg->lock);
	spin_while(&d->done, 0);   /* a host hit is served in microseconds */
	pthread_mutex_lock(&pg->lock);
	while (!d->done)
		pthread_cond_wait(&in->served, &pg->lock);
}

int pager_copier_start(struct wsp_pager_s *pg, struct wspi_err *err)
{
	struct pager_inbox *in = &pg->in;
	uint32_t n = pg->pk->m.hdr->n_layers;

	in->ring = calloc(n, sizeof(*in->ring));
	in->ask_dist = calloc(n, sizeof(*in->ask_dist));
	in->queued = calloc(n, 1);
	in->asked = calloc(n, 1);
	if (!in->ring || !in->ask_dist || !in->queued || !in->asked)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	in->tail = &in->demands;
	pthread_cond_init(&in->work, NULL);
	pthread_cond_init(&in->served, NULL);
	in->conds = 1;
	int rc = pthread_create(&in->thread, NULL, copier_main, pg);
	if (rc != 0)
		return WSP_ERR(err, -rc, "cannot start the pager's thread: %s", strerror(rc));
	in->started = 1;
	return 0;
}

void pager_copier_stop(struct wsp_pager_s *pg)
{
	struct pager_inbox *in = &pg->in;

	pthread_mutex_lock(&pg->lock);
	pg->closing = 1;
	if (in->conds)
		pthread_cond_broadcast(&in->work);
	pthread_mutex_unlock(&pg->lock);
	if (in->started)
		pthread_join(in->thread, NULL);
	in->started = 0;
}

void pager_copier_free(struct wsp_pager_s *pg)
{
	struct pager_inbox *in = &pg->in;

	pager_copier_stop(pg);
	free(in->ring);
	free(in->ask_dist);
	free(in->queued);
	free(in->asked);
	if (in->conds) {
		pthread_cond_destroy(&in->work);
		pthread_cond_destroy(&in->served);
	}
	memset(in, 0, sizeof(*in));
}
