/*
 * The device under the GPU tier: slot memory, a copy stream into the GPU, a
 * write-back stream out of it (gradients, src/writeback), events, and
 * page-locking of host memory.
 *
 * Two backends behind one small table of operations:
 *  - CUDA (device_cuda.c, built only with WSP_HAVE_CUDA): slots are one
 *    cudaMalloc, copies are cudaMemcpyAsync on a non-blocking copy stream,
 *    events are cudaEvents, pinning is cudaHostRegister.
 *  - host (device_host.c, WSP_DEVICE_HOST): slots are aligned host memory,
 *    copies are memcpy on the calling thread, an event is complete as soon
 *    as it is recorded (it keeps the time of recording, for h2d_ns).
 *
 * "Streams" are the user's cudaStream_t passed through as void * (NULL is
 * the legacy default stream); the host backend ignores them.  Every CUDA
 * failure becomes WSP_ECUDA with the call and cudaGetErrorString() in *err.
 * Device calls may come from any thread: the CUDA backend makes its device
 * current for the duration of each call and restores the caller's.
 */
#ifndef WSP_GPU_DEVICE_H
#define WSP_GPU_DEVICE_H

#include <stdint.h>
#include "config.h"   /* WSP_HAVE_CUDA */
#include "common/error.h"
#include "wspager.h"

struct dev;
struct dev_event;

/* Where an event is recorded or waited for: the user's stream (passed
 * beside), the copy stream (host -> GPU), the write-back stream (GPU ->
 * host), the landing stream (GPU -> host, gradients copied in chunks as
 * the host widens them: train/ring.c; apart from the write-back stream,
 * whose copies wait for the user's work, so that a chunk never waits for
 * a later gradient) or one of the decode streams (packed layers into slots):
 * DEV_Q_DECODE + k, k < DEV_DECODE_QUEUES.  The library's streams are
 * apart so gradients leaving the GPU never queue behind weights coming in,
 * and the next layer's copy runs while this one decodes.  Two decode
 * streams let two layers decode at once: one layer's blocks (~1400 warps
 * for 86 MiB) occupy a sixth of an H100's warp slots. */
enum dev_queue { DEV_Q_USER = 0, DEV_Q_COPY = 1, DEV_Q_BACK = 2, DEV_Q_LAND = 3, DEV_Q_DECODE = 4 };
#define DEV_DECODE_QUEUES 2

struct exprans_gpu_job;

struct dev_ops {
	const char *name;
	void (*close)(struct dev *d);
	int (*alloc)(struct dev *d, uint64_t bytes, void **out, struct wspi_err *err);
	void (*free)(struct dev *d, void *p);
	int (*event_create)(struct dev *d, int timing, struct dev_event **out,
			    struct wspi_err *err);
	void (*event_destroy)(struct dev *d, struct dev_event *ev);
	/* Record on queue q (enum dev_queue; `stream` for DEV_Q_USER). */
	int (*record)(struct dev *d, struct dev_event *ev, int q, void *stream,
		      struct wspi_err *err);
	/* Make queue q wait for ev. */
	int (*wait)(struct dev *d, int q, void *stream, struct dev_event *ev,
		    struct wspi_err *err);
	/* 1 complete, 0 not yet, negative on error. */
	int (*query)(struct dev *d, struct dev_event *ev, struct wspi_err *err);
	int (*event_sync)(struct dev *d, struct dev_event *ev, struct wspi_err *err);
	/* Time between two completed timing events. */
	int (*elapsed_ns)(struct dev *d, struct dev_event *a, struct dev_event *b,
			  uint64_t *ns, struct wspi_err *err);
	/* Enqueue a host -> slot copy on the copy stream (src pinned or not). */
	int (*copy_h2d)(struct dev *d, void *dst, const void *src, uint64_t len,
			struct wspi_err *err);
	/* Enqueue a device -> host copy on queue q, DEV_Q_BACK or DEV_Q_LAND
	 * (dst pinned for the copy to be asynchronous). */
	int (*copy_d2h)(struct dev *d, int q, void *dst, const void *src, uint64_t len,
			struct wspi_err *err);
	/* Wait for everything enqueued on the copy and decode streams. */
	int (*sync_copy)(struct dev *d, struct wspi_err *err);
	/* On decode queue q: run jobs[0..n_jobs) (device memory) from `in`
	 * to `out` (src/pack/exprans/exprans_gpu.h; layouts: the OR of the
	 * jobs' flags, which kernels to launch); their n_jobs status
	 * words end in status_host.  With status_view (status_host as the
	 * device sees it: host_view) a kernel stores them there and leaves
	 * status_dev zero, as it must be on entry; without, status_dev is
	 * cleared first and copied back (status_host pinned for that copy to
	 * be asynchronous).  n_jobs 0: load the kernels only (at open).  NULL
	 * without a GPU. */
	int (*unpack)(struct dev *d, int q, const void *in, void *out,
		      const struct exprans_gpu_job *jobs,
		      unsigned n_jobs, unsigned layouts, uint64_t max_out, uint32_t *status_dev,
		      uint32_t *status_host, uint32_t *status_view, struct wspi_err *err);
	/* Stream-ordered device memory from the pager's own pool: allocated
	 * in the order of queue q, freed in the order of queue q (never a
	 * host sync).  -ENOMEM (with the detail) when the device has none.
	 * NULL without a GPU. */
	int (*alloc_async)(struct dev *d, int q, uint64_t bytes, void **out, struct wspi_err *err);
	void (*free_async)(struct dev *d, int q, void *p);
	int (*pin)(struct dev *d, void *p, uint64_t len, struct wspi_err *err);
	void (*unpin)(struct dev *d, void *p);
	/* The address at which the device's kernels reach host memory p,
	 * pinned by pin; NULL when they cannot (or no GPU: NULL op). */
	void *(*host_view)(struct dev *d, void *p);
};

struct dev {
	const struct dev_ops *ops;
	int ordinal;               /* CUDA ordinal, or WSP_DEVICE_HOST */
	char desc[128];            /* "NVIDIA H200 (device 0)" / "host memory" */
	void *priv;                /* backend state */
};

/* Open `ordinal` (a CUDA device) or WSP_DEVICE_HOST.  WSP_ENODEVICE when no
 * such device exists or the library was built without CUDA. */
int dev_open(int ordinal, struct dev **out, struct wspi_err *err);
void dev_close(struct dev *d);

int dev_host_open(struct dev **out, struct wspi_err *err);
#ifdef WSP_HAVE_CUDA
int dev_cuda_open(int ordinal, struct dev **out, struct wspi_err *err);
#endif

/* Hooks with the signatures struct hcache_config expects (ctx = struct dev). */
int dev_pin_hook(void *ctx, void *p, uint64_t len, struct wspi_err *err);
void dev_unpin_hook(void *ctx, void *p);

static inline int dev_is_host(const struct dev *d)
{
	return d->ordinal == WSP_DEVICE_HOST;
}

#endif
