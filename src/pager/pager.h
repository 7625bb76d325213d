/* The wsp_pager handle, shared by the files of src/pager. */
#ifndef WSP_PAGER_PAGER_H
#define WSP_PAGER_PAGER_H

#include <pthread.h>
#include <stdint.h>

#include "cache/hcache.h"
#include "common/error.h"
#include "gpu/device.h"
#include "gpu/slots.h"
#include "pack/pack.h"
#include "predict/predict.h"
#include "predict/readahead.h"
#include "writeback/dirty.h"
#include "writeback/state.h"
#include "train/grads.h"
#include "pager/trial.h"
#include "wspager.h"

/* Predicted layers examined per acquire at most (bounds a stack array). */
#define PAGER_MAX_AHEAD 256u
#define PAGER_MAX_NOTICES 32u

/* A demand: wsp_acquire of a layer no slot holds, served by the pager's
 * thread (copier.c).  It carries its own completion. */
enum pager_outcome { PAGER_GPU_HIT, PAGER_HOST_HIT, PAGER_MISS };
struct pager_demand {
	uint32_t layer;
	void *stream;
	const struct wsp_layer **view;
	const void *packed_dev;        /* a wsp_provide_device: fill from these, no use */
	struct wspi_err *err;          /* the caller's */
	enum pager_outcome how;        /* set by the thread, with these: */
	uint64_t blocked_ns;           /* waited for the host tier's load */
	int rc;
	unsigned done;                 /* written under the lock, read also spinning */
	struct pager_demand *next;
};

/* What is posted to the pager's thread (copier.c, which alone writes it;
 * under the pager's lock): demands, in order, then layers for an early
 * fill in a ring of n_layers, each layer in it at most once (queued). */
struct pager_inbox {
	struct pager_demand *demands, **tail;
	uint32_t *ring;
	uint32_t head, n;
	uint8_t *queued;
	uint8_t *asked;              /* posted by the read-ahead or a hint, with: */
	uint64_t *ask_dist;          /* its admission distance; else landed */
	unsigned posted;             /* posts so far (written under the lock, read
	                                also by the thread spinning for work) */
	pthread_cond_t work;         /* something posted, or closing */
	pthread_cond_t served;       /* a demand is done */
	pthread_t thread;
	int conds, started;
};

/* who_decodes.c: the trial of who decodes packed layers (trial.h).  Under
 * the pager's lock, but for the maker thread's own locals. */
struct who_decodes {
	int on;                      /* the trial runs: a GPU that decodes, no flag */
	struct trial t;
	uint64_t window;             /* acquires a window, at least */
	uint64_t span;               /* acquires the last window had */
	uint64_t count, t0, misses0; /* the window so far */
	uint32_t prev;               /* the layer acquired before this one */
	uint32_t begin_prev, begin;  /* ... and the two that began the window */
	int started;
	int choice;                  /* WSP_DECODE_* */
	/* The maker thread makes the raw copies, posts how many (made), then
	 * waits for the verdict: the GPU (it drops the copies; a fill may
	 * still hold one, and only callers' threads hand such back) or the
	 * host. */
	pthread_t maker;
	pthread_cond_t wake;         /* a verdict, or stopping */
	int maker_started, maker_stop, made_posted, verdict, cond_made;
	uint32_t made;
	int enabled;                 /* the trial may run on this pager at all */
	unsigned gen;                /* trials started (wsp_reset_prediction starts one) */
};

struct wsp_pager_s {
	struct wsp_pack_s *pk;
	struct wsp_options opt;
	struct predictor *pred;
	struct readahead *ra;        /* which layers read-ahead pays for */
	struct dev *dev;
	struct hcache *hc;
	struct wb *wb;               /* gradients written back; made at the first push */
	struct dirty *dirty;         /* updated layers; made at the first wsp_update */
	struct state_store *state;   /* training state; made at the first wsp_state_put */
	pthread_mutex_t save_lock;   /* one wsp_update or wsp_save at a time */
	struct wspi_err err;
	struct pager_group *group;   /* several devices: the members (group.c); then
	                                nothing below is used */

	/* Everything below is guarded by lock.  Never held across a call
	 * into the host cache: its threads post to the inbox under it
	 * (on_ready), so the only lock order is pager -> predictor/device. */
	pthread_mutex_t lock;
	pthread_cond_t progress;     /* a layer was released (wsp_acquire_wait), or
	                                the last reaped reference went back */
	struct slot_pool sp;
	unsigned reaping;            /* host references reaped from finished copies,
	                                not yet handed back (pager_reap) */
	/* Only the pager's thread starts copies into slots (copier.c): the
	 * callers' demands and the early fills are posted to it. */
	struct pager_inbox in;
	int closing;
	unsigned host_ahead;         /* predicted layers requested into the host tier */
	unsigned gpu_ahead;          /* predicted layers copied into slots early */
	uint8_t *hinted;             /* wsp_prefetch() hints not yet served */
	uint8_t *on_demand;          /* per layer: never read ahead (wsp_options.on_demand) */
	uint64_t acquires, gpu_hits, host_hits, misses, predicted, acquire_block_ns;
	uint64_t acquire_failures;
	struct who_decodes who;
	int decode_rc;               /* the GPU refused a packed layer: sticky */
	char decode_msg[WSP_ERRMSG_MAX];

	pthread_mutex_t log_lock;
	char *notices[PAGER_MAX_NOTICES];   /* given once each */
	unsigned n_notices;
};

/* wsp_options.gpu_slots above this is refused (a typo, not a plan). */
#define WSP_MAX_GPU_SLOTS 4096u

/* messages.c: notices and the per-thread detail of a failed call. */
void pager_notice(void *ctx, const char *msg);
/* End of a public call that used the local `err`: on failure its message
 * becomes this thread's wsp_errmsg() for `pg`.  Destroys err; returns rc. */
int pager_result(struct wsp_pager_s *pg, struct wspi_err *err, int rc);
/* A group member's result: its failure's message becomes the group's. */
int pgroup_pass(struct wsp_pager_s *pg, const struct wsp_pager_s *member, int rc);
/* wsp_close: the thread's last error no longer names pg. */
void pager_forget_errors(const struct wsp_pager_s *pg);
/* min(8 GiB, RAM / 4). */
uint64_t pager_default_host_bytes(void);
/* hcache on_ready hook (a host-tier thread): posts the layer to the inbox. */
void pager_on_ready(void *ctx, uint32_t layer, int status);
/* The host tier evicted a prefetched layer unused (cache lock held). */
void pager_on_unused(void *ctx, uint32_t layer);
/* copier.c: start and stop the pager's thread (stop: it copies nothing
 * more; free: and its inbox goes). */
int pager_copier_start(struct wsp_pager_s *pg, struct wspi_err *err);
void pager_copier_stop(struct wsp_pager_s *pg);
void pager_copier_free(struct wsp_pager_s *pg);
/* Post `layer` for an early fill: `asked` by the read-ahead or a hint with
 * admission distance `dist`, else it landed (the thread then decides). */
void pager_post(struct wsp_pager_s *pg, uint32_t layer, int asked, uint64_t dist);
/* Queue demand d and wait until the thread has served it (under pg->lock). */
void pager_demand_wait(struct wsp_pager_s *pg, struct pager_demand *d);
/* copier.c: hand back host references whose copies are done (wait: all
 * of them), on any thread.  Called without the lock. */
void pager_reap(struct wsp_pager_s *pg, int wait);
/* Start moving the predicted successors of the last acquire up the tiers. */
void pager_prefetch_ahead(struct wsp_pager_s *pg);
/* copier.c: whether `layer` may go into slot s in pass 0 (slots of its
 * smallest fitting size) or 1 (any it fits). */
int pager_slot_fits(const struct wsp_pager_s *pg, const struct slot *s, uint32_t layer, int pass);
/* messages.c: the error for a layer index out of range. */
int pager_bad_layer(struct wsp_pager_s *pg, uint32_t layer, struct wspi_err *err);

/* who_decodes.c: set up the trial at open (after the tiers); count an
 * acquire (without the lock; it may run the trial's next step); stop the
 * maker thread before the host tier goes; and the choice so far
 * (wsp_who_decodes is in stats.c, beside the group's). */
void who_decodes_init(struct wsp_pager_s *pg);
void who_decodes_acquired(struct wsp_pager_s *pg, uint32_t layer);
void who_decodes_stop(struct wsp_pager_s *pg);
/* wsp_reset_prediction: the choice is made again, any copies dropped. */
void who_decodes_reset(struct wsp_pager_s *pg);
/* WSP_DECODE_* for this pager (one device). */
int who_decodes_choice(struct wsp_pager_s *pg);

/* group.c: a pager over several devices routes each call to a member. */
int pgroup_open(struct wsp_pager_s *pg, const char *path);
void pgroup_close(struct wsp_pager_s *pg);
/* The member `layer` belongs to, or WSP_ENOTFOUND (as the group's error). */
int pgroup_member(struct wsp_pager_s *pg, uint32_t layer, struct wsp_pager_s **member);
/* Training and saving on a group: WSP_ESTATE, saying why. */
int pgroup_refuse(struct wsp_pager_s *pg, const char *call);
int pgroup_hint_next(struct wsp_pager_s *pg, const uint32_t *layers, size_t n);
void pgroup_reset_prediction(struct wsp_pager_s *pg);
int pgroup_get_stats(struct wsp_pager_s *pg, struct wsp_stats *out);
void pgroup_reset_stats(struct wsp_pager_s *pg);
int pgroup_who_decodes(struct wsp_pager_s *pg);

/* source.c: a layer's current bytes come from the updated-layer store
 * (what training made) over the pack's (the host tier, or the pack itself
 * for a save); acquire, the read-ahead and save ask here alone. */
/* 1: ref holds the layer's bytes; 0: not in the host tier yet; < 0: an
 * updated layer that could not be read back (err says why). */
int src_try_get(struct wsp_pager_s *pg, uint32_t layer, struct hcache_ref *ref,
		struct wspi_err *err);
void src_put(struct wsp_pager_s *pg, struct hcache_ref *ref);
/* 1 when training has updated `layer`: the write-back room serves it, and
 * the pack's (stale) bytes are never worth reading ahead. */
int src_updated(struct wsp_pager_s *pg, uint32_t layer);
/* After slots_fill from ref: an updated layer's view gets its checksums. */
void src_fix_view(struct wsp_pager_s *pg, struct slot *s, const struct hcache_ref *ref);
/* Hand `layer`'s current bytes to `piece`, tensor by tensor, each checked
 * against its checksum: an updated layer's from its store (never brought
 * back into memory if spilled), any other decoded from the pack a chunk at
 * a time through `cs`.  0 or < 0. */
int src_stream(struct wsp_pager_s *pg, uint32_t layer, struct chunk_stream *cs,
	       pack_piece_fn piece, void *ctx, struct wspi_err *err);

#endif
