/*
 * Slots filled from packed layers.  The host tier keeps a layer's EXPRANS
 * chunks as stored (the packed form, pack.h); to fill a slot the copy
 * stream ships those packed bytes into one of two device staging buffers,
 * and one of two decode streams (fills take turns) runs the layer's jobs
 * from there into the slot (decode the EXPRANS chunks, copy the others,
 * zero the padding) and copies the jobs' status words back to the host.
 * The link carries the packed bytes, ~1.5x fewer than raw bf16, and the
 * next layer's copy runs while this one decodes.
 * Optionally packed layers also stay in device memory (a GPU tier), so a
 * model ~1.4x larger than the slots' memory streams without the link.
 *
 * The chunks' stored bytes were checked on the host when the layer was loaded
 * (hcache); the GPU decoder checks each stream's structure again and a
 * refusal is reported by unpacker_check once the fill's work is done.
 * Not thread-safe: the pager serializes calls with its mutex.
 */
#ifndef WSP_GPU_UNPACK_H
#define WSP_GPU_UNPACK_H

#include <stdint.h>
#include "cache/hcache.h"
#include "common/error.h"
#include "gpu/device.h"
#include "pack/pack.h"

struct unpacker;

/* The job tables of every packed layer, on the device, and the staging
 * buffers; with gpu_bytes > 0 also a GPU tier of packed layers: up to that
 * many bytes of them stay on the device after their copy (a layer that
 * does not fit displaces only layers filled less often), and their next
 * fills decode from there without touching the link.  *out is NULL (and 0 returned) when no layer is kept
 * packed. */
int unpacker_create(struct dev *d, const struct wsp_pack_s *pk, const struct hcache *hc,
		    uint64_t gpu_bytes, struct unpacker **out, struct wspi_err *err);
/* After the device's streams are idle. */
void unpacker_destroy(struct unpacker *u);
/* 0 when its status words could not be page-locked (each fill then waits
 * for its decode to end). */
int unpacker_pinned(const struct unpacker *u);

/* Enqueue the fill of `slot` (device memory, the layer's raw size) from the
 * packed `ref`: the slot's bytes are complete at the point of decode queue
 * *queue right after this returns; the pages are read until that point
 * too.  *copied: the bytes it sends over the link (0 when the
 * GPU tier holds the layer).  The copy goes to a staging buffer or the GPU
 * tier, never the slot: the decode queue it uses, unpacker_device_queue(),
 * must already be ordered after whatever may still read the slot; the copy
 * queue need not be. */
int unpacker_fill(struct unpacker *u, void *slot, const struct hcache_ref *ref,
		  uint64_t *copied, int *queue, struct wspi_err *err);
/* Whether a slot can be filled with `layer` from its packed form in device
 * memory: 1 for any layer with chunks when the unpacker exists. */
int unpacker_fills_from_device(const struct unpacker *u, uint32_t layer);
/* The size of `layer`'s packed form (when the unpacker exists). */
uint64_t unpacker_packed_bytes(const struct unpacker *u, uint32_t layer);
/* The decode queue the next unpacker_fill or unpacker_fill_device decodes on.  The caller
 * orders that queue after the packed bytes and after whatever may still
 * read the slot: not the copy queue, whose waits would sit behind the
 * copies of other streams (a stream of host->device copies, such as the
 * caller's own parts, would hold the decode back until it drains). */
int unpacker_device_queue(const struct unpacker *u);
/* Enqueue the fill of `slot` from `packed`: the layer's packed form
 * (pack.h) in device memory, read at the current point of decode queue
 * unpacker_device_queue(), which is also *queue: the slot is complete at
 * its point right after this returns.  Nothing here checks the chunks'
 * bytes: their readers did (wsp_pack_read_part). */
int unpacker_fill_device(struct unpacker *u, void *slot, uint32_t layer, const void *packed,
			 int *queue, struct wspi_err *err);
/* Fills decoded from the GPU tier, and the bytes it holds now. */
void unpacker_counters(const struct unpacker *u, uint64_t *hits, uint64_t *bytes);
void unpacker_reset_counters(struct unpacker *u);
/* After the fill of `layer` has completed on decode queue `queue` (the
 * fill's *queue): 0, or the status bits of the first job the GPU refused,
 * with a message naming its chunk in msg. */
uint32_t unpacker_check(struct unpacker *u, const struct wsp_pack_s *pk, uint32_t layer,
			int queue, char *msg, size_t len);

#endif
