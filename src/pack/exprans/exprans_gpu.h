/*
 * The CUDA half of EXPRANS (exprans.h is the C half and the reference):
 * decode chunks that are already in device memory, one warp a block of
 * 32768 values (its 32 lanes are the stream's 32 interleaved rANS lanes),
 * thread blocks of 8 warps, each with the chunk's decode table in shared
 * memory.
 * The kernel checks everything the reference decoder checks and reports
 * per chunk in a status word instead of stopping: a corrupt chunk's status
 * is non-zero and its output must not be used.  Enqueued on a stream; the
 * host does not wait.  Built only with CUDA.
 */
#ifndef WSP_PACK_EXPRANS_EXPRANS_GPU_H
#define WSP_PACK_EXPRANS_EXPRANS_GPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct exprans_gpu_job {
	const uint8_t *in;        /* device: the chunk's stored bytes, 2-byte aligned */
	uint16_t *out;            /* device: n bf16 values */
	uint64_t in_bytes;
	uint64_t n;               /* values the chunk must hold */
};

/* Status bits (0: decoded and checked). */
#define EXPRANS_GPU_BAD_HEADER 1u    /* short, misaligned, or not n values */
#define EXPRANS_GPU_BAD_FREQ 2u      /* frequencies do not sum to 4096 (0 if empty) */
#define EXPRANS_GPU_BAD_LANES 4u     /* a lane length, or the total, is wrong */
#define EXPRANS_GPU_BAD_START 8u     /* a lane starts below 2^16 */
#define EXPRANS_GPU_OVERRUN 16u      /* a lane reads past its stream */
#define EXPRANS_GPU_BAD_END 32u      /* a lane does not end used up, in 2^16 */
#define EXPRANS_GPU_TOO_BIG 64u      /* more blocks than a chunk may have here */

/* Values a chunk may hold for the GPU decoder (512 blocks: 32 MiB of bf16). */
#define EXPRANS_GPU_MAX_VALUES (512ull * 32768ull)

/* Decode jobs[0..n_jobs) (the array in device memory; no job with more
 * than max_n values) on `stream` (a cudaStream_t; NULL the default
 * stream); status[i] (device memory) gets job i's bits.  Returns 0 or the
 * cudaError_t of the launch. */
int exprans_gpu_decode(const struct exprans_gpu_job *jobs, unsigned n_jobs, uint64_t max_n,
		       uint32_t *status, void *stream);
/* The first problem named in a status word, for messages. */
const char *exprans_gpu_status_text(uint32_t status);

#ifdef __cplusplus
}
#endif

#endif
