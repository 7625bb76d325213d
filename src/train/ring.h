/*
 * Landing gradients through a ring: a tensor's push copied out of the
 * device in chunks into a few small pinned buffers, each chunk widened into
 * its fp32 accumulator (assigned, for a first push since zeroing, or added
 * to the sum there) as soon as it has landed, its buffer then reused for a
 * later chunk.
 *
 * Why: a device's writes into host memory stay in the CPU's last-level
 * cache for a while (on CPUs that put them there), so a chunk read back
 * right after it lands costs the host's memory nothing, and a ring that
 * small is never written back to it either: the host's memory carries
 * the fp32 sums alone, 4 bytes an element of bf16 where landing a layer
 * whole and widening it later costs 8 (the copy's 2 written, 2 read back,
 * 4 written); adding to a sum, 8 (the sum read and written) where staging
 * costs 12.  A ring also bounds how far the copies run ahead of the
 * widening, which is what keeps the chunks in the cache (bench/
 * landing_bench: the same copies into a ring of 512 MiB widen no faster
 * than whole layers).
 *
 * The copies run on the device's landing queue, issued by the caller
 * (wb_ring_issue) as buffers come free; the ring's own threads widen.
 */
#ifndef WSP_TRAIN_RING_H
#define WSP_TRAIN_RING_H

#include <stdint.h>

#include "common/error.h"
#include "gpu/device.h"
#include "wspager.h"

/* Buffers in the ring, and the bytes of each (a variable: tests shrink it
 * so that small tensors cross many chunks). */
#define WB_RING_SLOTS 16u
extern uint64_t wspi_ring_chunk_bytes;
/* Called (when set: tests) by a thread before it widens a part of chunk
 * number `chunk`: a test holds a chunk back to see that later ones cannot
 * make it look done. */
extern void (*wspi_ring_part_hook)(uint64_t chunk);

struct wb_ring;

/* One tensor to land: n elements of dtype dt at device address src,
 * widened into dst (fp32): assigned, as a first push is, or with `add`
 * added to what dst holds.  The caller lands no two jobs into the same
 * dst at once (their chunks are widened by different threads). */
struct ring_job {
	float *dst;
	const void *src;
	uint64_t n;
	enum wsp_dtype dt;
	int add;
};

/* The ring's buffers (pinned where the device pins) and up to `threads`
 * widening threads; an error when neither the buffers nor one thread
 * could be had (the caller lands whole layers then). */
int wb_ring_create(struct dev *d, unsigned threads, struct wb_ring **out, struct wspi_err *err);
/* Stops the threads and frees the buffers; nothing may be landing. */
void wb_ring_destroy(struct wb_ring *r);
/* The functions below: one caller at a time (the write-back's worker).
 *
 * Issue every chunk of the jobs (their sources ready on the device: the
 * caller has seen the work that made them), landing older copies as their
 * buffers are needed; returns once all are issued, not widened, so that
 * the next call's chunks follow these with the ring kept full.  *end: the
 * number after the last chunk, what wb_ring_wait takes.  After a failure
 * (a copy refused here, or an earlier chunk's copy or wait) nothing more
 * is issued: chunks from the failed one on are skipped, and every wait
 * that covers them returns the error. */
int wb_ring_issue(struct wb_ring *r, const struct ring_job *jobs, uint32_t n_jobs, uint64_t *end,
		  struct wspi_err *err);
/* Lands the copies that are done; with `block`, when none was, waits until
 * one more chunk has landed or been widened (at once when nothing is in
 * flight).  Returns the number of chunks done: each numbered below it is
 * in its accumulator (or skipped after a failure). */
uint64_t wb_ring_progress(struct wb_ring *r, int block);
/* Returns once every chunk numbered below `end` is done, with the error of
 * a failed one among them.  A failure is forgotten once it was returned
 * with nothing in flight: the ring then lands again. */
int wb_ring_wait(struct wb_ring *r, uint64_t end, struct wspi_err *err);

#endif
