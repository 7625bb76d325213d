/* The GPU slot pool: see slots.h for the ordering rules. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "gpu/pagecopy.h"
#include "gpu/slots.h"
#include "gpu/unpack.h"

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	return wspi_grow(arr, cap, need, elem, 8);
}

static int get_event(struct slot_pool *sp, int timing, struct dev_event **out,
		     struct wspi_err *err)
{
	if (timing && sp->n_spare_t) {
		*out = sp->spare_tev[--sp->n_spare_t];
		return 0;
	}
	if (!timing && sp->n_spare) {
		*out = sp->spare_ev[--sp->n_spare];
		return 0;
	}
	return sp->dev->ops->event_create(sp->dev, timing, out, err);
}

/* Recycling needs no completion: a re-record never affects waits already
 * enqueued on the previous record. */
static void put_event(struct slot_pool *sp, int timing, struct dev_event *ev)
{
	if (!ev)
		return;
	if (timing) {
		if (grow((void **)&sp->spare_tev, &sp->cap_spare_t, sp->n_spare_t + 1,
			 sizeof(*sp->spare_tev)) == 0) {
			sp->spare_tev[sp->n_spare_t++] = ev;
			return;
		}
	} else if (grow((void **)&sp->spare_ev, &sp->cap_spare, sp->n_spare + 1,
			sizeof(*sp->spare_ev)) == 0) {
		sp->spare_ev[sp->n_spare++] = ev;
		return;
	}
	sp->dev->ops->event_destroy(sp->dev, ev);
}

int slots_init(struct slot_pool *sp, struct dev *d, unsigned n, unsigned n_big, uint64_t big_bytes,
	       uint64_t small_bytes, uint32_t max_tensors, struct wspi_err *err)
{
	uint64_t total, small_total;
	int rc;
	memset(sp, 0, sizeof(*sp));
	sp->dev = d;
	if (n == 0)
		return WSP_ERR(err, -EINVAL, "gpu_slots is 0: at least one slot is needed");
	big_bytes = wspi_align_up(big_bytes ? big_bytes : 1, 256);
	small_bytes = wspi_align_up(small_bytes ? small_bytes : 1, 256);
	if (n_big > n || small_bytes > big_bytes)
		n_big = n;
	if (ckd_mul(&total, (uint64_t)n_big, big_bytes) ||
	    ckd_mul(&small_total, (uint64_t)(n - n_big), small_bytes) ||
	    ckd_add(&total, total, small_total) || total > (1ull << 62))
		return WSP_ERR(err, WSP_ETOOBIG, "%u slots of up to %llu bytes overflow", n,
			       (unsigned long long)big_bytes);
	sp->slots = calloc(n, sizeof(*sp->slots));
	sp->cand = calloc(n, sizeof(*sp->cand));
	sp->cand_slot = calloc(n, sizeof(*sp->cand_slot));
	if (!sp->slots || !sp->cand || !sp->cand_slot) {
		free(sp->slots);
		free(sp->cand);
		free(sp->cand_slot);
		sp->slots = NULL;
		sp->cand = NULL;
		sp->cand_slot = NULL;
		return WSP_ERR(err, -ENOMEM, "out of memory for %u slots", n);
	}
	sp->n = n;
	sp->slot_bytes = big_bytes;
	sp->small_bytes = n_big < n ? small_bytes : big_bytes;
	sp->total_bytes = total;
	rc = d->ops->alloc(d, total, &sp->mem, err);
	if (rc < 0) {
		wspi_err_prefix(err, "%u slot%s of %llu bytes in all", n, n == 1 ? "" : "s",
				(unsigned long long)total);
		goto fail;
	}
	/* The epoch: device event times become host times relative to it.
	 * The host clock is read before the record: the event completes no
	 * earlier, so mapped times are never later than the real ones (a
	 * trace event never ends in the future). */
	sp->epoch_ns = wspi_now_ns();
	if ((rc = d->ops->event_create(d, 1, &sp->epoch, err)) < 0 ||
	    (rc = d->ops->record(d, sp->epoch, DEV_Q_COPY, NULL, err)) < 0 ||
	    (rc = d->ops->event_sync(d, sp->epoch, err)) < 0)
		goto fail;
	uint64_t at = 0;
	for (unsigned i = 0; i < n; i++) {
		struct slot *s = &sp->slots[i];
		s->index = i;
		s->bytes = i < n_big ? big_bytes : small_bytes;
		s->base = (char *)sp->mem + at;
		at += s->bytes;
		s->tensors = calloc(max_tensors ? max_tensors : 1, sizeof(*s->tensors));
		if (!s->tensors) {
			rc = WSP_ERR(err, -ENOMEM, "out of memory for slot views");
			goto fail;
		}
		if ((rc = d->ops->event_create(d, 0, &s->fill_ev, err)) < 0)
			goto fail;
	}
	return 0;
fail:
	slots_destroy(sp);
	return rc;
}

void slots_destroy(struct slot_pool *sp)
{
	struct dev *d = sp->dev;
	if (!d)
		return;
	(void)d->ops->sync_copy(d, NULL);
	unpacker_destroy(sp->unpack);
	for (unsigned i = 0; sp->slots && i < sp->n; i++) {
		struct slot *s = &sp->slots[i];
		for (unsigned k = 0; k < s->n_rel; k++)
			d->ops->event_destroy(d, s->rel[k].ev);
		free(s->rel);
		if (s->fill_ev)
			d->ops->event_destroy(d, s->fill_ev);
		free(s->tensors);
		while (s->holds) {   /* acquires never released */
			struct slot_hold *h = s->holds;
			s->holds = h->next;
			free(h);
		}
	}
	while (sp->free_head) {
		struct slot_hold *h = sp->free_head;
		sp->free_head = h->next;
		free(h);
	}
	for (unsigned k = 0; k < sp->n_pend; k++) {
		/* Should not happen (the pager reaps with wait=1 first); the
		 * references then leak rather than being put behind its back. */
		d->ops->event_destroy(d, sp->pend[k].start);
		d->ops->event_destroy(d, sp->pend[k].end);
	}
	for (unsigned k = 0; k < sp->n_spare; k++)
		d->ops->event_destroy(d, sp->spare_ev[k]);
	for (unsigned k = 0; k < sp->n_spare_t; k++)
		d->ops->event_destroy(d, sp->spare_tev[k]);
	if (sp->epoch)
		d->ops->event_destroy(d, sp->epoch);
	if (sp->mem)
		d->ops->free(d, sp->mem);
	free(sp->pend);
	free(sp->cand);
	free(sp->cand_slot);
	free(sp->spare_ev);
	free(sp->spare_tev);
	free(sp->slots);
	memset(sp, 0, sizeof(*sp));
}

struct slot *slots_find(struct slot_pool *sp, uint32_t layer)
{
	for (unsigned i = 0; i < sp->n; i++)
		if (sp->slots[i].state != SLOT_FREE && sp->slots[i].layer == layer)
			return &sp->slots[i];
	return NULL;
}

/* The view handed out: the pack's tensors with data pointing into the slot. */
static void build_view(struct slot *s, const struct wsp_pack_s *pk, uint32_t layer)
{
	const struct wsp_layer *pl = &pk->layers[layer];
	const struct wspm_layer *ml = &pk->m.layers[layer];
	s->view = *pl;
	s->view.data = s->base;
	for (uint32_t i = 0; i < pl->n_tensors; i++) {
		s->tensors[i] = pl->tensors[i];
		s->tensors[i].data = (char *)s->base + pk->m.tensors[ml->first_tensor + i].layer_offset;
	}
	s->view.tensors = s->tensors;
}

int slots_forget(struct slot_pool *sp, uint32_t layer)
{
	struct slot *s = slots_find(sp, layer);
	if (!s)
		return 0;
	if (s->refs)
		return -EBUSY;
	s->state = SLOT_FREE;
	s->prefetched = 0;
	return 1;
}

/* A fill of `layer` starting: it must fit the slot; its timing events
 * taken, the slot emptied, and queue q (the one that writes the slot
 * first: the copy queue, or a decode queue for a packed fill) ordered after
 * every release of the slot and its previous fill; the fill's start is
 * timed from there. */
static int fill_begin(struct slot_pool *sp, struct slot *s, const struct wsp_pack_s *pk,
		      uint32_t layer, int q, struct pending_put *pp, struct wspi_err *err)
{
	struct dev *d = sp->dev;
	uint64_t raw = pk->layers[layer].raw_bytes;
	int rc;
	if (raw > s->bytes)
		return WSP_ERR(err, WSP_ETOOBIG, "layer %u: %llu bytes do not fit slot %u of %llu",
			       layer, (unsigned long long)raw, s->index,
			       (unsigned long long)s->bytes);
	if (grow((void **)&sp->pend, &sp->cap_pend, sp->n_pend + 1, sizeof(*sp->pend)) < 0)
		return WSP_ERR(err, -ENOMEM, "out of memory for pending copies");
	if ((rc = get_event(sp, 1, &pp->start, err)) < 0)
		return rc;
	if ((rc = get_event(sp, 1, &pp->end, err)) < 0) {
		put_event(sp, 1, pp->start);
		pp->start = NULL;
		return rc;
	}

	if (s->state != SLOT_FREE) {
		sp->gpu_evictions++;
		if (s->prefetched)
			sp->prefetch_wasted++;
	}
	s->state = SLOT_FREE;
	s->prefetched = 0;

	/* The rule of the pool: the queue that writes into this slot waits
	 * for every stream that released it. */
	for (unsigned i = 0; i < s->n_rel; i++) {
		rc = d->ops->wait(d, q, NULL, s->rel[i].ev, err);
		if (rc < 0)
			return rc;
	}
	for (unsigned i = 0; i < s->n_rel; i++)
		put_event(sp, 0, s->rel[i].ev);
	s->n_rel = 0;
	/* And after the slot's previous fill: a packed layer's decode writes
	 * it from a decode stream, which the others do not follow (a fill
	 * never used is replaced without a release to wait for). */
	if ((rc = d->ops->wait(d, q, NULL, s->fill_ev, err)) < 0)
		return rc;
	return d->ops->record(d, pp->start, q, NULL, err);
}

/* A fill's end, its work enqueued up to queue pp->queue. */
static int fill_end(struct slot_pool *sp, struct slot *s, const struct wsp_pack_s *pk,
		    uint32_t layer, struct pending_put *pp, int prefetch, struct wspi_err *err)
{
	struct dev *d = sp->dev;
	int rc;
	if ((rc = d->ops->record(d, s->fill_ev, pp->queue, NULL, err)) < 0 ||
	    (rc = d->ops->record(d, pp->end, pp->queue, NULL, err)) < 0)
		return rc;
	sp->pend[sp->n_pend++] = *pp;
	s->state = SLOT_FILLING;
	s->layer = layer;
	s->prefetched = prefetch;
	s->last_use = ++sp->clock;
	build_view(s, pk, layer);
	sp->fills++;
	if (prefetch)
		sp->prefetch_fills++;
	return 0;
}

/* Never hand out a half-filled slot, and never return the host pages
 * while a copy may still read them. */
static int fill_failed(struct slot_pool *sp, struct slot *s, uint32_t layer,
		       struct pending_put *pp, int rc, struct wspi_err *err)
{
	wspi_err_prefix(err, "layer %u into slot %u", layer, s->index);
	(void)sp->dev->ops->sync_copy(sp->dev, NULL);
	if (pp->start)
		put_event(sp, 1, pp->start);
	if (pp->end)
		put_event(sp, 1, pp->end);
	return rc;
}

int slots_fill(struct slot_pool *sp, struct slot *s, const struct wsp_pack_s *pk,
	       uint32_t layer, const struct hcache_ref *ref, int prefetch, struct wspi_err *err)
{
	struct dev *d = sp->dev;
	struct pending_put pp = { .ref = *ref, .bytes = ref->bytes, .queue = DEV_Q_COPY };
	int rc;

	if ((uint64_t)ref->n_pages * ref->page_bytes < ref->bytes)
		return WSP_ERR(err, WSP_ESTATE, "layer %u: host entry has %u pages for %llu bytes",
			       layer, ref->n_pages, (unsigned long long)ref->bytes);
	if (ref->packed && !sp->unpack)
		return WSP_ERR(err, WSP_ESTATE, "layer %u is packed but the device cannot decode it",
			       layer);
	/* A packed layer's bytes cross into a staging buffer (or the GPU tier),
	 * never into the slot; only its decode writes the slot.  So only the
	 * decode queue waits for the slot's releases, and the copy over the
	 * link runs while the slot's last layer may still be in use: at a
	 * pass's turn, when every slot holds a layer needed sooner, the link
	 * would otherwise sit idle until the GPU let one go. */
	int q = ref->packed ? unpacker_device_queue(sp->unpack) : DEV_Q_COPY;
	if ((rc = fill_begin(sp, s, pk, layer, q, &pp, err)) < 0 ||
	    (rc = ref->packed ? unpacker_fill(sp->unpack, s->base, ref, &pp.bytes, &pp.queue, err)
			      : copy_ref_pages(d, s->base, ref, ref->raw_bytes, err)) < 0 ||
	    (rc = fill_end(sp, s, pk, layer, &pp, prefetch, err)) < 0)
		return fill_failed(sp, s, layer, &pp, rc, err);
	return 0;
}

int slots_fill_device(struct slot_pool *sp, struct slot *s, const struct wsp_pack_s *pk,
		      uint32_t layer, const void *packed, void *stream, struct wspi_err *err)
{
	struct dev *d = sp->dev;
	/* No host reference to put back: the caller owns the packed bytes. */
	struct pending_put pp = { .ref = { .layer = layer, .raw_bytes = pk->layers[layer].raw_bytes,
					   .packed = 1 },
				  .from_device = 1, .queue = DEV_Q_COPY };
	struct dev_event *ready = NULL;
	int rc;

	if (!unpacker_fills_from_device(sp->unpack, layer))
		return WSP_ERR(err, -ENOTSUP, "layer %u: this device decodes nothing", layer);
	/* The bytes are there once `stream` reaches this point: the decode
	 * queue waits for it, and for the slot's releases, itself (not
	 * through the copy queue: unpack.h says why). */
	int q = unpacker_device_queue(sp->unpack);
	if ((rc = get_event(sp, 0, &ready, err)) < 0)
		return rc;
	if ((rc = d->ops->record(d, ready, DEV_Q_USER, stream, err)) < 0 ||
	    (rc = d->ops->wait(d, q, NULL, ready, err)) < 0 ||
	    (rc = fill_begin(sp, s, pk, layer, q, &pp, err)) < 0 ||
	    (rc = unpacker_fill_device(sp->unpack, s->base, layer, packed, &pp.queue, err)) < 0 ||
	    (rc = fill_end(sp, s, pk, layer, &pp, 1, err)) < 0) {
		put_event(sp, 0, ready);
		return fill_failed(sp, s, layer, &pp, rc, err);
	}
	put_event(sp, 0, ready);
	/* What follows on `stream` (freeing the bytes, or writing the next
	 * layer's into them) comes after the decode that reads them.  Failing
	 * that, the fill stands: later acquires wait for it as for any. */
	return d->ops->wait(d, DEV_Q_USER, stream, s->fill_ev, err);
}

#define HOLD_REUSE_AFTER 64u

static struct slot_hold *new_hold(struct slot_pool *sp)
{
	struct slot_hold *h = NULL;
	if (sp->n_free_holds > HOLD_REUSE_AFTER) {   /* the oldest released */
		h = sp->free_head;
		sp->free_head = h->next;
		if (!sp->free_head)
			sp->free_tail = NULL;
		sp->n_free_holds--;
	}
	return h ? h : malloc(sizeof(*h));
}

static void retire_hold(struct slot_pool *sp, struct slot_hold *h)
{
	h->next = NULL;
	if (sp->free_tail)
		sp->free_tail->next = h;
	else
		sp->free_head = h;
	sp->free_tail = h;
	sp->n_free_holds++;
}

int slots_use(struct slot_pool *sp, struct slot *s, void *stream, const struct wsp_layer **view,
	      struct wspi_err *err)
{
	struct slot_hold *h = new_hold(sp);
	if (!h)
		return WSP_ERR(err, -ENOMEM, "out of memory for an acquire");
	int rc = sp->dev->ops->wait(sp->dev, DEV_Q_USER, stream, s->fill_ev, err);
	if (rc < 0) {
		retire_hold(sp, h);
		return rc;
	}
	h->view = s->view;
	h->next = s->holds;
	s->holds = h;
	s->refs++;
	s->prefetched = 0;
	s->last_use = ++sp->clock;
	*view = &h->view;
	return 0;
}

struct slot *slots_of_view(struct slot_pool *sp, const struct wsp_layer *view)
{
	for (unsigned i = 0; i < sp->n; i++)
		for (struct slot_hold *h = sp->slots[i].holds; h; h = h->next)
			if (&h->view == view)
				return &sp->slots[i];
	return NULL;
}

int slots_unuse(struct slot_pool *sp, struct slot *s, void *stream, const struct wsp_layer *view,
		struct wspi_err *err)
{
	struct dev *d = sp->dev;
	struct slot_release *r = NULL;
	int rc, fresh = 0;
	struct slot_hold **hp = &s->holds;
	while (*hp && view && &(*hp)->view != view)
		hp = &(*hp)->next;
	if (!*hp)
		return WSP_ERR(err, WSP_ESTATE, "slot %u: no such use to release", s->index);
	/* A later point on the same stream covers an earlier one. */
	for (unsigned i = 0; i < s->n_rel; i++)
		if (s->rel[i].stream == stream)
			r = &s->rel[i];
	if (!r) {
		if (grow((void **)&s->rel, &s->cap_rel, s->n_rel + 1, sizeof(*s->rel)) < 0)
			return WSP_ERR(err, -ENOMEM, "out of memory for a release event");
		struct dev_event *ev;
		if ((rc = get_event(sp, 0, &ev, err)) < 0)
			return rc;
		r = &s->rel[s->n_rel++];
		r->stream = stream;
		r->ev = ev;
		fresh = 1;
	}
	/* Unrecorded, the release is not done: the use stays counted (the slot
	 * is never reused under a stream nothing orders it after), and an
	 * event that was never recorded is not kept to be waited on. */
	if ((rc = d->ops->record(d, r->ev, DEV_Q_USER, stream, err)) < 0) {
		if (fresh) {
			put_event(sp, 0, r->ev);
			s->n_rel--;
		}
		return rc;
	}
	struct slot_hold *h = *hp;
	*hp = h->next;
	retire_hold(sp, h);
	s->refs--;
	return 0;
}

/* Host time of a completed timing event (0 when it cannot be had). */
static uint64_t event_time(struct slot_pool *sp, struct dev_event *ev)
{
	uint64_t ns;
	if (sp->dev->ops->elapsed_ns(sp->dev, sp->epoch, ev, &ns, NULL) < 0)
		return 0;
	return sp->epoch_ns + ns;
}

unsigned slots_reap(struct slot_pool *sp, struct slot_done *out, unsigned max, int wait)
{
	struct dev *d = sp->dev;
	unsigned n = 0, i = 0;
	while (i < sp->n_pend && n < max) {
		struct pending_put *pp = &sp->pend[i];
		int done = d->ops->query(d, pp->end, NULL);
		if (done == 0 && wait)
			done = d->ops->event_sync(d, pp->end, NULL) == 0 ? 1 : -1;
		if (done == 0) {
			/* Fills complete in order (the decode stream follows the
			 * copy stream): later ones are not done either, or will be
			 * at the next reap. */
			break;
		}
		struct slot_done *sd = &out[n++];
		memset(sd, 0, sizeof(*sd));
		/* On a device error the copy is over one way or another (the
		 * context is broken); the pages may go back. */
		sd->ref = pp->ref;
		sd->host_ref = !pp->from_device;
		sd->bytes = pp->bytes;
		sd->ok = done > 0;
		if (done > 0) {
			uint64_t ns = 0;
			if (d->ops->elapsed_ns(d, pp->start, pp->end, &ns, NULL) == 0)
				sp->h2d_ns += ns;
			sp->bytes_h2d += pp->bytes;
			sd->begin_ns = event_time(sp, pp->start);
			sd->end_ns = event_time(sp, pp->end);
			if (pp->ref.packed)
				sd->decode_status = unpacker_check(sp->unpack, sp->pk, pp->ref.layer,
								   pp->queue, sd->decode_msg,
								   sizeof(sd->decode_msg));
		}
		put_event(sp, 1, pp->start);
		put_event(sp, 1, pp->end);
		i++;
	}
	if (i) {
		memmove(sp->pend, sp->pend + i, (sp->n_pend - i) * sizeof(*sp->pend));
		sp->n_pend -= i;
	}
	/* Fills whose copies are done are READY. */
	for (unsigned k = 0; k < sp->n; k++)
		if (sp->slots[k].state == SLOT_FILLING &&
		    d->ops->query(d, sp->slots[k].fill_ev, NULL) == 1)
			sp->slots[k].state = SLOT_READY;
	return n;
}
