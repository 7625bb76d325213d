/*
 * The CUDA half of EXPRANS (exprans.h is the C half and the reference):
 * decode chunks that are already in device memory, one warp a block of
 * 32768 values of 2 or 4 bytes (its 32 lanes are the stream's 32
 * interleaved rANS lanes),
 * thread blocks of 8 warps, each with the chunk's decode table in shared
 * memory.
 * Plain copies and zero fills ride in the same launch (a layer's other
 * chunks and its padding).
 * The kernel checks everything the reference decoder checks and reports
 * per chunk in a status word instead of stopping: a corrupt chunk's status
 * is non-zero and its output must not be used.  Enqueued on a stream; the
 * host does not wait.  The kernel is built only with CUDA (exprans_gpu.cu);
 * the status text is in exprans.c, for messages anywhere.
 */
#ifndef WSP_PACK_EXPRANS_EXPRANS_GPU_H
#define WSP_PACK_EXPRANS_EXPRANS_GPU_H

#include <stdint.h>

#include "pack/exprans/exprans_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a job does.  A layer kept packed is a list of jobs: its exprans
 * chunks decoded, its other chunks (already raw) copied, the padding
 * between its tensors zeroed, all in one launch. */
enum exprans_gpu_kind {
	EXPRANS_GPU_DECODE = 0,   /* in_bytes of stream at in_off -> n values at out_off */
	EXPRANS_GPU_COPY = 1,     /* in_bytes raw bytes at in_off -> out_off */
	EXPRANS_GPU_ZERO = 2,     /* in_bytes zero bytes at out_off */
};

struct exprans_gpu_job {
	uint64_t in_off;          /* from the launch's input base; a stream 2-byte aligned */
	uint64_t out_off;         /* from the output base; aligned to `width` for DECODE */
	uint64_t in_bytes;
	uint64_t n;               /* DECODE: values the chunk must hold */
	uint32_t kind;            /* enum exprans_gpu_kind */
	uint32_t width;           /* DECODE: bytes a value, 2 (bf16, f16) or 4 (f32) */
	uint32_t flags;           /* DECODE: the stream's layout, EXPRANS_LOW_PLANES (width
				     4) | EXPRANS_TOP_BIT (exprans.h; the chunk's transform) */
};

/* Status bits (0: decoded and checked). */
#define EXPRANS_GPU_BAD_HEADER 1u    /* short, misaligned, not n values, or a width not 2 or 4 */
#define EXPRANS_GPU_BAD_FREQ 2u      /* frequencies malformed, or not summing to 4096 (0 if empty) */
#define EXPRANS_GPU_BAD_LANES 4u     /* a lane length, or the total, is wrong */
#define EXPRANS_GPU_BAD_START 8u     /* a lane starts below 2^16 */
#define EXPRANS_GPU_OVERRUN 16u      /* a lane reads past its stream */
#define EXPRANS_GPU_BAD_END 32u      /* a lane does not end used up, in 2^16 */
#define EXPRANS_GPU_TOO_BIG 64u      /* more blocks than a chunk may have here */
#define EXPRANS_GPU_BAD_PACKED 128u  /* a packed byte plane malformed, or naming no symbol */

/* Values a chunk may hold for the GPU decoder (512 blocks: 32 MiB of bf16,
 * 64 MiB of f32). */
#define EXPRANS_GPU_MAX_VALUES (512ull * 32768ull)

/* Run jobs[0..n_jobs) (the array in device memory) from `in` to `out`
 * (device memory) on `stream` (a cudaStream_t; NULL the default stream);
 * layouts is the OR of the DECODE jobs' flags (with EXPRANS_TOP_BIT a
 * second kernel runs for those jobs; a job of a layout not in it fails
 * BAD_HEADER); max_out bounds any job's output bytes (it sizes the grid).  status[i]
 * (device memory) gets job i's bits (0 for COPY and ZERO jobs).  Returns 0
 * or the cudaError_t of the launch.  With n_jobs 0 it only loads the
 * kernel (do it before the first use: a lazy load can wait for the device
 * to go idle). */
int exprans_gpu_decode(const uint8_t *in, uint8_t *out, const struct exprans_gpu_job *jobs,
		       unsigned n_jobs, unsigned layouts, uint64_t max_out, uint32_t *status,
		       void *stream);
/* The same without the status words' clearing before the launch: status
 * must be zero on entry (cudaMemset once after allocating it).  After the
 * decode, one small kernel stores job i's word in report[i] (device-
 * writable memory, e.g. mapped pinned host memory) and sets status[i]
 * back to zero for the next call.  The pager uses this: no memset and no
 * device->host copy beside the link's host->device copies. */
int exprans_gpu_decode_report(const uint8_t *in, uint8_t *out,
			      const struct exprans_gpu_job *jobs, unsigned n_jobs, unsigned layouts,
			      uint64_t max_out, uint32_t *status, uint32_t *report, void *stream);
/* The first problem named in a status word, for messages. */
const char *exprans_gpu_status_text(uint32_t status);

#ifdef __cplusplus
}
#endif

#endif
