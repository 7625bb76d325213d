/*
 * Updated layers: what an optimizer step made, kept beside the host cache
 * (which holds only what the pack says).  A dirty layer is one buffer of
 * its raw layout (tensors at their offsets, padding zero), pinned where the
 * device pins, with each tensor's new checksum; the pager fills slots from
 * it instead of the host cache.  A buffer being copied from when an update
 * comes is left to its copy and replaced by a new one.
 *
 * Not yet: a budget for dirty layers and the writable overflow file they
 * would spill to; every dirty layer stays in memory until wsp_close.
 */
#ifndef WSP_WRITEBACK_DIRTY_H
#define WSP_WRITEBACK_DIRTY_H

#include <stdint.h>
#include "cache/hcache.h"
#include "common/error.h"
#include "gpu/device.h"
#include "pack/pack.h"

struct dirty;

int dirty_create(struct dev *d, struct wsp_pack_s *pk, struct dirty **out, struct wsp_err *err);
void dirty_destroy(struct dirty *dt);

/* Replace `layer`'s tensors: values[i] is tensor i's new raw bytes (host
 * memory), or NULL to keep its current value (then read from the pack if
 * the layer is still clean). */
int dirty_update(struct dirty *dt, uint32_t layer, const void *const *values,
		 struct wsp_err *err);
/* 1 and a reference to the layer's buffer when it is dirty (a one-page
 * hcache_ref the slots copy from; hand it back with dirty_put), else 0. */
int dirty_get(struct dirty *dt, uint32_t layer, struct hcache_ref *ref);
/* 1 when `ref` was one of dirty_get's (now handed back), 0 when not ours. */
int dirty_put(struct dirty *dt, const struct hcache_ref *ref);
/* The new checksum of tensor k of the dirty layer behind `ref`. */
uint64_t dirty_checksum(const struct hcache_ref *ref, uint32_t k);
/* Copy the layer's current bytes into dst (raw_bytes): 1 when dirty, 0
 * when clean (dst untouched). */
int dirty_copy(struct dirty *dt, uint32_t layer, void *dst);
/* Layers updated so far and their bytes. */
void dirty_counters(struct dirty *dt, uint64_t *layers, uint64_t *bytes);

#endif
