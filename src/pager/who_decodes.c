/*
 * Who decodes packed layers, measured while running (trial.h has the rules
 * and why).  Acquires are counted in windows of whole steps (from a place
 * in the cycle of acquires back to it, a pass at least); each window's
 * wall time goes to the trial, steady when no acquire in it had to wait
 * for a read from disk.  When the trial asks for raw copies, a
 * thread of this room makes them (hcache_add_raw, with a few workers) and
 * posts how many it made; the next acquire hands that to the trial, and
 * the thread waits for the verdict (the GPU: it drops the copies).
 * Handing raw copies out or the packed form while the forms take turns
 * (hcache_use_raw), or dropping the copies (hcache_hand_raw), is the host
 * tier's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "common/workers.h"
#include "pager/pager.h"

void who_decodes_init(struct wsp_pager_s *pg)
{
	struct who_decodes *w = &pg->who;
	uint32_t n = pg->pk->m.hdr->n_layers, paged = 0;
	for (uint32_t l = 0; l < n; l++)
		paged += !pg->on_demand[l];
	memset(w, 0, sizeof(*w));
	trial_init(&w->t);
	w->cond_made = pthread_cond_init(&w->wake, NULL) == 0;
	/* At least a pass of the layers read ahead, to where it began
	 * (trial.h): a training step's forward and backward, or an inference
	 * pass (routed experts come on top). */
	w->window = WSP_MAX((uint64_t)paged, 4);
	/* No trial where no copy could be made: a pack the host tier cannot
	 * hold whole (its budget left nothing beyond the arena), which would
	 * never give a steady window either. */
	int on = pg->sp.unpack && !(pg->opt.flags & WSP_OPEN_GPU_DECODE) &&
		 hcache_raw_room(pg->hc) > 0;
	w->enabled = on;
	__atomic_store_n(&w->on, on, __ATOMIC_RELAXED);
	w->choice = on ? WSP_DECODE_TRYING : pg->sp.unpack ? WSP_DECODE_GPU : WSP_DECODE_HOST;
}

/* The copies are made by a few threads at once, each taking the next
 * layer (one thread decodes ~1.5-2.5 GB/s: an 8 GB model's copies would
 * take seconds more), sharing this. */
struct making {
	struct wsp_pager_s *pg;
	pthread_mutex_t lock;
	uint32_t next, made;
	int failed;
};

static void *make_some(void *arg)
{
	struct making *mk = arg;
	struct wsp_pager_s *pg = mk->pg;
	struct wspi_err err;
	wspi_err_init(&err);
	for (;;) {
		pthread_mutex_lock(&pg->lock);
		int stop = pg->who.maker_stop;
		pthread_mutex_unlock(&pg->lock);
		pthread_mutex_lock(&mk->lock);
		uint32_t l = mk->next++;
		stop |= mk->failed;
		pthread_mutex_unlock(&mk->lock);
		if (stop || l >= pg->pk->m.hdr->n_layers)
			break;
		if (src_updated(pg, l))   /* training's bytes: served from elsewhere */
			continue;
		int rc = hcache_add_raw(pg->hc, l, &err);
		pthread_mutex_lock(&mk->lock);
		int first = rc < 0 && !mk->failed;
		mk->failed |= rc < 0;
		mk->made += rc > 0;
		pthread_mutex_unlock(&mk->lock);
		if (first) {
			/* The packed bytes in memory fail their checks: keep to
			 * the GPU, whose decode checks them at each fill too. */
			char msg[WSP_ERRMSG_MAX + 64];
			snprintf(msg, sizeof(msg), "raw copies for the host to decode: %s", err.msg);
			pager_notice(pg, msg);
		}
	}
	wspi_err_destroy(&err);
	return NULL;
}

static void *maker_main(void *arg)
{
	struct wsp_pager_s *pg = arg;
	struct making mk = { .pg = pg };
	pthread_mutex_init(&mk.lock, NULL);
	wspi_run_workers(make_some, &mk, WSP_MAX(1u, WSP_MIN(wspi_cpu_count() / 2, 8u)));
	pthread_mutex_destroy(&mk.lock);
	uint32_t made = mk.failed ? 0 : mk.made;   /* failed: the copies made go too */
	struct who_decodes *w = &pg->who;
	pthread_mutex_lock(&pg->lock);
	w->made = made;
	w->made_posted = 1;
	while (!w->verdict && !w->maker_stop)
		pthread_cond_wait(&w->wake, &pg->lock);
	int drop = w->verdict == WSP_DECODE_GPU && !w->maker_stop;
	pthread_mutex_unlock(&pg->lock);
	if (drop)
		hcache_hand_raw(pg->hc, 0);
	/* Said only now: unpinning the copies takes the driver for a while,
	 * and whoever waits for the choice should not time that. */
	pthread_mutex_lock(&pg->lock);
	if (w->verdict)   /* none when stopped: a reset or the close says the rest */
		w->choice = w->verdict;
	pthread_mutex_unlock(&pg->lock);
	return NULL;
}

/* Carry out what the trial said (without the pager's lock), unless a
 * reset came in between (gen: the trial's generation when it said so). */
static void act(struct wsp_pager_s *pg, enum trial_action a, unsigned gen)
{
	struct who_decodes *w = &pg->who;
	char msg[320];
	switch (a) {
	case TRIAL_NONE:
		return;
	case TRIAL_MAKE_COPIES:
		pthread_mutex_lock(&pg->lock);
		if (gen != w->gen) {   /* reset meanwhile: the new trial asks anew */
			pthread_mutex_unlock(&pg->lock);
			return;
		}
		w->maker_started = w->cond_made &&
				   pthread_create(&w->maker, NULL, maker_main, pg) == 0;
		if (!w->maker_started) {   /* no thread: as if no copy could be made */
			w->made = 0;
			w->made_posted = 1;
		}
		pthread_mutex_unlock(&pg->lock);
		return;
	case TRIAL_HAND_RAW:
	case TRIAL_HAND_PACKED:
		if (gen == __atomic_load_n(&w->gen, __ATOMIC_RELAXED))
			hcache_use_raw(pg->hc, a == TRIAL_HAND_RAW);
		return;
	case TRIAL_KEEP_GPU:
	case TRIAL_KEEP_HOST: {
		int host = a == TRIAL_KEEP_HOST;
		pthread_mutex_lock(&pg->lock);
		if (gen != w->gen) {
			pthread_mutex_unlock(&pg->lock);
			return;
		}
		w->verdict = host ? WSP_DECODE_HOST : WSP_DECODE_GPU;
		if (!w->maker_started)   /* else the maker says it, after dropping any copies */
			w->choice = w->verdict;
		pthread_cond_broadcast(&w->wake);
		uint64_t p = w->t.packed_ns, r = w->t.raw_ns;
		unsigned ratio = w->t.ratio_permille;
		uint64_t span = w->span;
		int gave_up = w->t.gave_up;
		pthread_mutex_unlock(&pg->lock);
		if (host && gen == __atomic_load_n(&w->gen, __ATOMIC_RELAXED))
			hcache_use_raw(pg->hc, 1);   /* the turns' last window was packed */
		if (gave_up)
			snprintf(msg, sizeof(msg), "who decodes: %u windows of %" PRIu64 " acquires "
				 "in a row read layers from disk, none steady enough to time: the "
				 "GPU decodes", TRIAL_GIVE_UP, span);
		else if (r)
			snprintf(msg, sizeof(msg), "who decodes: windows of %" PRIu64 " acquires took %.1f ms "
				 "with packed layers (the GPU decoding) and %.1f ms with raw ones "
				 "(decoded on the host; medians of %u windows each, the forms taking "
				 "turns; raw / packed by two pairs, median %.3f): the %s decodes from "
				 "now on", span, p / 1e6, r / 1e6, TRIAL_PAIRS, ratio / 1e3,
				 host ? "host" : "GPU");
		else
			snprintf(msg, sizeof(msg), "who decodes: no raw copy could be made (no "
				 "packed layer that training has not updated, or no room for one in "
				 "the host budget beyond the pack): the GPU decodes");
		pager_notice(pg, msg);
		return;
	}
	}
}

void who_decodes_acquired(struct wsp_pager_s *pg, uint32_t layer)
{
	struct who_decodes *w = &pg->who;
	if (!__atomic_load_n(&w->on, __ATOMIC_RELAXED))
		return;
	uint64_t now = wspi_now_ns();
	enum trial_action a = TRIAL_NONE;
	pthread_mutex_lock(&pg->lock);
	if (w->made_posted) {
		w->made_posted = 0;
		a = trial_copies_made(&w->t, w->made);
		w->started = 0;   /* the next window starts after the switch */
	} else if (!w->started) {
		w->started = 1;
		w->t0 = now;
		w->misses0 = pg->misses;
		w->count = 0;
		w->begin_prev = w->prev;
		w->begin = layer;
	} else if (trial_window_ends(++w->count, w->window,
				     w->prev == w->begin_prev && layer == w->begin)) {
		a = trial_window(&w->t, now - w->t0, pg->misses == w->misses0);
		w->span = w->count;
		w->t0 = now;   /* the next window begins here */
		w->misses0 = pg->misses;
		w->count = 0;
		w->begin_prev = w->prev;
		w->begin = layer;
	}
	w->prev = layer;
	if (w->t.phase == TRIAL_DONE && a == TRIAL_NONE)
		__atomic_store_n(&w->on, 0, __ATOMIC_RELAXED);   /* decided: nothing more to count */
	unsigned gen = w->gen;
	pthread_mutex_unlock(&pg->lock);
	act(pg, a, gen);
}

/* The maker thread, stopped and joined (it may be waiting for a verdict);
 * it may be started again after. */
static void maker_join(struct wsp_pager_s *pg)
{
	struct who_decodes *w = &pg->who;
	pthread_mutex_lock(&pg->lock);
	w->maker_stop = 1;
	pthread_cond_broadcast(&w->wake);
	int joined = w->maker_started;
	w->maker_started = 0;
	pthread_mutex_unlock(&pg->lock);
	if (joined)
		pthread_join(w->maker, NULL);
	pthread_mutex_lock(&pg->lock);
	w->maker_stop = 0;
	pthread_mutex_unlock(&pg->lock);
}

void who_decodes_reset(struct wsp_pager_s *pg)
{
	struct who_decodes *w = &pg->who;
	if (!w->enabled || !w->cond_made)
		return;
	maker_join(pg);
	/* The fills done give their host references back, so that dropping
	 * the copies waits for nothing this thread would have to hand back. */
	pager_reap(pg, 1);
	hcache_hand_raw(pg->hc, 0);
	pthread_mutex_lock(&pg->lock);
	__atomic_store_n(&w->gen, w->gen + 1, __ATOMIC_RELAXED);
	trial_init(&w->t);
	w->started = w->made_posted = w->verdict = 0;
	w->made = 0;
	w->choice = WSP_DECODE_TRYING;
	__atomic_store_n(&w->on, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&pg->lock);
}

void who_decodes_stop(struct wsp_pager_s *pg)
{
	struct who_decodes *w = &pg->who;
	if (!w->cond_made)
		return;   /* never set up */
	maker_join(pg);
	pthread_cond_destroy(&w->wake);
	w->cond_made = 0;
}

int who_decodes_choice(struct wsp_pager_s *pg)
{
	pthread_mutex_lock(&pg->lock);
	int c = pg->who.choice;
	pthread_mutex_unlock(&pg->lock);
	return c;
}
