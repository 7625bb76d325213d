/*
 * The GPU slot pool: N slots carved out of one device allocation, the first
 * n_big of the largest layer's size and the others of a smaller class (the
 * largest of the other layers: see the pager's slot_sizes).  A layer goes
 * only into a slot it fits, a small one preferably into a small slot.  A slot is FREE, FILLING (copies enqueued on the copy stream,
 * fill event recorded after them) or READY (holds a layer); independently,
 * `refs` counts the acquires not yet released (IN_USE when > 0).
 *
 * Ordering rules, all enforced on the device, never by a host sync:
 *  - a user stream that acquires a slot waits on the slot's fill event;
 *  - every release records an event on the releasing stream, and the next
 *    fill of that slot makes the queue that writes it first (the copy
 *    stream; the decode stream for a fill from device memory) wait on all
 *    of them, so a slot is never overwritten before every user stream is
 *    done with it;
 *  - the host cache reference a fill copies from is kept until an event
 *    recorded after the copies has completed (slots_reap).
 * A packed layer's fill (gpu/unpack.h) copies on the copy stream and
 * decodes on a decode stream; its fill and end events are recorded on
 * the decode stream, after the decode.  A fill from device memory uses
 * the decode stream alone.
 *
 * Not thread-safe: the pager serializes every call with its mutex.
 */
#ifndef WSP_GPU_SLOTS_H
#define WSP_GPU_SLOTS_H

#include <stdint.h>
#include "cache/hcache.h"
#include "predict/predict.h"
#include "common/error.h"
#include "gpu/device.h"
#include "pack/pack.h"

enum slot_state { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY };

struct slot_release {
	void *stream;
	struct dev_event *ev;
};

/* One acquire's view: wsp_acquire hands out &hold->view, a copy of its
 * slot's view, so that each acquire can be released by the view it got. */
struct slot_hold {
	struct wsp_layer view;
	struct slot_hold *next;    /* the slot's holds (latest first), or the free list */
};

struct slot {
	unsigned index;
	enum slot_state state;
	uint32_t layer;            /* valid unless FREE */
	unsigned refs;             /* acquires not yet released */
	uint64_t last_use;         /* pool clock at the last acquire */
	int prefetched;            /* filled ahead of need, not acquired since */
	void *base;                /* device (or host) address of the slot */
	uint64_t bytes;            /* its size */
	struct dev_event *fill_ev; /* recorded on the copy stream after the fill */
	struct slot_release *rel;  /* releases since the last fill, one per stream */
	unsigned n_rel;
	size_t cap_rel;
	struct wsp_layer view;     /* what each hold copies */
	struct wsp_tensor *tensors;
	struct slot_hold *holds;   /* one per acquire not yet released (refs of them) */
};

/* A host reference kept until the copies that read it have completed. */
struct pending_put {
	struct hcache_ref ref;
	struct dev_event *start, *end;   /* timing events around the copies (and decode) */
	uint64_t bytes;                  /* sent over the link */
	int queue;                       /* where the fill completes (a decode queue when packed) */
	int from_device;                 /* from packed bytes in device memory: no host ref */
};

/* A completed copy, handed back by slots_reap: the host reference to put
 * and, for traces, when the copies ran (CLOCK_MONOTONIC, derived from
 * device events relative to an epoch event; 0 when unknown). */
struct slot_done {
	struct hcache_ref ref;
	int host_ref;                    /* ref is a host reference to put back */
	uint64_t begin_ns, end_ns, bytes;
	int ok;                          /* the copy completed without error */
	uint32_t decode_status;          /* a packed fill the GPU decoder refused */
	char decode_msg[256];            /* ...which chunk, and why */
};

struct unpacker;

struct slot_pool {
	struct dev *dev;
	struct unpacker *unpack;         /* fills from packed layers; NULL if none */
	const struct wsp_pack_s *pk;     /* for the unpacker's messages */
	struct dev_event *epoch;         /* timing event of known host time */
	uint64_t epoch_ns;
	unsigned n;
	struct slot *slots;
	void *mem;
	uint64_t slot_bytes;             /* the largest slot's size */
	uint64_t small_bytes;            /* the other slots' size (slot_bytes if one class) */
	uint64_t total_bytes;            /* all slots */
	uint64_t clock;
	struct dev_event **spare_ev;     /* recycled events (ordering, no timing) */
	unsigned n_spare;
	size_t cap_spare;
	struct dev_event **spare_tev;    /* recycled timing events */
	unsigned n_spare_t;
	size_t cap_spare_t;
	struct pending_put *pend;
	unsigned n_pend;
	size_t cap_pend;
	/* Released holds, oldest first; one is reused only once more than
	 * HOLD_REUSE_AFTER wait, so that a view released twice is seen as
	 * not acquired instead of releasing another acquire's hold. */
	struct slot_hold *free_head, *free_tail;
	unsigned n_free_holds;
	/* eviction scratch, n entries, used under the pager's lock */
	struct evict_cand *cand;
	struct slot **cand_slot;
	/* counters (the pager reads them under its lock) */
	uint64_t bytes_h2d, h2d_ns, fills, gpu_evictions, prefetch_fills, prefetch_wasted;
};

/* Allocate n slots, n_big of big_bytes and the others of small_bytes
 * (each rounded up to 256), and their events; max_tensors bounds a layer's
 * tensor count.  Errors: WSP_ETOOBIG when the total overflows, the
 * device's allocation error otherwise. */
int slots_init(struct slot_pool *sp, struct dev *d, unsigned n, unsigned n_big, uint64_t big_bytes,
	       uint64_t small_bytes, uint32_t max_tensors, struct wspi_err *err);
/* Waits for the copy stream, then frees everything; pending host references
 * must have been handed back with slots_reap(..., wait=1) first. */
void slots_destroy(struct slot_pool *sp);

/* The slot holding `layer` (FILLING or READY), or NULL. */
struct slot *slots_find(struct slot_pool *sp, uint32_t layer);

/* Enqueue the copy of `layer` from `ref` into slot s (refs must be 0).  On
 * success the pool owns *ref until the copy completes.  On failure the slot
 * is FREE and *ref is still the caller's to put (copies that were enqueued
 * have completed or the device is broken). */
int slots_fill(struct slot_pool *sp, struct slot *s, const struct wsp_pack_s *pk,
	       uint32_t layer, const struct hcache_ref *ref, int prefetch, struct wspi_err *err);

/* Enqueue the fill of `layer` into slot s (refs must be 0) from its packed
 * form (pack.h) in device memory, there once `stream` reaches its current
 * point (unpacker_fill_device); the slot counts as filled ahead of need,
 * and `stream` is made to wait for the fill, so that the caller may free
 * or reuse the bytes in its order.  -ENOTSUP when the device decodes
 * nothing; on failure the slot is FREE. */
int slots_fill_device(struct slot_pool *sp, struct slot *s, const struct wsp_pack_s *pk,
		      uint32_t layer, const void *packed, void *stream, struct wspi_err *err);

/* Forget the copy of `layer` a slot holds (its bytes changed): 1 when a
 * slot held it, 0 when none did, -EBUSY when it is acquired.  The releases
 * recorded on the slot still order its next fill. */
int slots_forget(struct slot_pool *sp, uint32_t layer);

/* Take a use of s for `stream`: the stream waits on the fill event;
 * *view is this use's own view (until its release). */
int slots_use(struct slot_pool *sp, struct slot *s, void *stream, const struct wsp_layer **view,
	      struct wspi_err *err);

/* End the use of s that got `view` (NULL: its latest use) on `stream`
 * (records the release event there).  WSP_ESTATE when no such use. */
int slots_unuse(struct slot_pool *sp, struct slot *s, void *stream, const struct wsp_layer *view,
		struct wspi_err *err);

/* The slot whose use got `view` and is not released yet; NULL if none
 * (compares addresses only: view is never read). */
struct slot *slots_of_view(struct slot_pool *sp, const struct wsp_layer *view);

/* Move the copies that have completed into out[] (at most max); with
 * wait=1 wait for them.  Returns the number written. */
unsigned slots_reap(struct slot_pool *sp, struct slot_done *out, unsigned max, int wait);

#endif
