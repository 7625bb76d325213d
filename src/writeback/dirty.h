/*
 * Updated layers: what an optimizer step made, kept beside the host cache
 * (which holds only what the pack says).  A dirty layer is one buffer of
 * its raw layout (tensors at their offsets, padding zero), pinned where the
 * device pins, with each tensor's new checksum; the pager fills slots from
 * it instead of the host cache.  A buffer being copied from when an update
 * comes is left to its copy and replaced by a new one.
 *
 * The buffers in memory are bounded by a budget: past it, the least
 * recently used dirty layer no copy is reading is written to the overflow
 * file (overflow.h) and its memory freed; the next use reads it back and
 * checks every tensor against the checksum kept in memory.  Dirty layers
 * are never dropped: a spill that fails (a full disk) keeps the layers in
 * memory over the budget, said once, and fails no call.
 */
#ifndef WSP_WRITEBACK_DIRTY_H
#define WSP_WRITEBACK_DIRTY_H

#include <stdint.h>
#include "cache/hcache.h"
#include "common/error.h"
#include "gpu/device.h"
#include "pack/pack.h"

struct dirty;

struct dirty_config {
	uint64_t budget;           /* bytes of dirty buffers in memory (a soft bound:
	                              buffers copies are reading cannot leave) */
	const char *dir;           /* overflow file's directory; NULL: the pack's,
	                              else $TMPDIR or /var/tmp */
	wsp_log_fn log;            /* where the overflow file is, said once */
	void *log_ctx;
};

int dirty_create(struct dev *d, struct wsp_pack_s *pk, const struct dirty_config *cfg,
		 struct dirty **out, struct wspi_err *err);
void dirty_destroy(struct dirty *dt);

/* Replace `layer`'s tensors: values[i] is tensor i's new raw bytes (host
 * memory; from_f32: its values as fp32, narrowed to its dtype, which
 * wb_narrow_ok accepts), or NULL to keep its current value (then read from
 * the pack if the layer is still clean). */
int dirty_update(struct dirty *dt, uint32_t layer, const void *const *values, int from_f32,
		 struct wspi_err *err);
/* 1 and a reference to the layer's buffer when it is dirty (a one-page
 * hcache_ref the slots copy from; hand it back with dirty_put), 0 when
 * clean, < 0 when a spilled layer cannot be read back (never the pack's
 * stale bytes instead). */
int dirty_get(struct dirty *dt, uint32_t layer, struct hcache_ref *ref, struct wspi_err *err);
/* 1 when `layer` is updated: its bytes are here, never the pack's. */
int dirty_has(struct dirty *dt, uint32_t layer);
/* 1 when `ref` was one of dirty_get's (now handed back), 0 when not ours. */
int dirty_put(struct dirty *dt, const struct hcache_ref *ref);
/* 1 when `ref` is a reference dirty_get gave (not yet handed back). */
int dirty_owns(struct dirty *dt, const struct hcache_ref *ref);
/* The new checksum of tensor k of the dirty layer behind `ref` (one of
 * dirty_get's). */
uint64_t dirty_checksum(const struct hcache_ref *ref, uint32_t k);
/* Hand the layer's current bytes to `piece`, tensor by tensor: 1 when
 * dirty, 0 when clean (nothing handed), < 0 on an error of the overflow
 * file or of `piece`.  A spilled layer is read from the overflow file a few
 * MiB at a time and checked, never brought back into memory: this works
 * however full memory and the overflow's disk are (wsp_save). */
int dirty_stream(struct dirty *dt, uint32_t layer, pack_piece_fn piece, void *pctx,
		 struct wspi_err *err);

struct dirty_counters {
	uint64_t layers, bytes;     /* updated so far, wherever they are */
	uint64_t resident;          /* bytes of dirty buffers in memory now */
	uint64_t spilled, read_back;  /* bytes written to / read from the overflow file */
};
void dirty_counters(struct dirty *dt, struct dirty_counters *out);

#endif
