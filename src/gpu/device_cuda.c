/*
 * The CUDA backend: slots in one cudaMalloc, a non-blocking copy stream,
 * events without timing for ordering (with timing for h2d_ns), pinning by
 * cudaHostRegister.  Calls may come from any thread (user threads, the
 * host cache's decode and pinning threads), so each one makes the pager's
 * device current and restores the caller's device afterwards: the library
 * never changes which device the application's thread works on.
 */
#include "config.h"   /* WSP_HAVE_CUDA */

#ifdef WSP_HAVE_CUDA
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "gpu/device.h"
#include "pack/exprans/exprans_gpu.h"

struct cuda_priv {
	cudaStream_t copy;   /* host -> GPU */
	cudaStream_t back;   /* GPU -> host (write-back) */
	cudaStream_t land;   /* GPU -> host (landing chunks) */
	cudaStream_t decode[DEV_DECODE_QUEUES]; /* packed layers into slots */
	cudaMemPool_t pool;  /* packed layers kept on the GPU; made at first use */
	int has_pool;
};

struct dev_event {
	cudaEvent_t ev;
};

#define CU_ERR(err, rc, call) \
	WSP_ERR((err), WSP_ECUDA, "%s: %s (%s)", (call), cudaGetErrorString(rc), cudaGetErrorName(rc))

/* Make d current; *prev receives the caller's device (-1 when it had none). */
static int enter(struct dev *d, int *prev, struct wspi_err *err)
{
	cudaError_t rc = cudaGetDevice(prev);
	if (rc != cudaSuccess) {
		*prev = -1;
		(void)cudaGetLastError();
	}
	if (*prev == d->ordinal)
		return 0;
	rc = cudaSetDevice(d->ordinal);
	if (rc != cudaSuccess)
		return CU_ERR(err, rc, "cudaSetDevice");
	return 0;
}

static void leave(struct dev *d, int prev)
{
	if (prev >= 0 && prev != d->ordinal)
		(void)cudaSetDevice(prev);
}

static cudaStream_t copy_stream(struct dev *d)
{
	return ((struct cuda_priv *)d->priv)->copy;
}

static cudaStream_t queue_stream(struct dev *d, int q, void *stream)
{
	struct cuda_priv *cp = d->priv;
	if (q >= DEV_Q_DECODE && q < DEV_Q_DECODE + DEV_DECODE_QUEUES)
		return cp->decode[q - DEV_Q_DECODE];
	return q == DEV_Q_COPY ? cp->copy : q == DEV_Q_BACK ? cp->back :
	       q == DEV_Q_LAND ? cp->land : (cudaStream_t)stream;
}

static void cuda_close(struct dev *d)
{
	struct cuda_priv *cp = d->priv;
	int prev;
	if (cp) {
		if (enter(d, &prev, NULL) == 0) {
			(void)cudaStreamSynchronize(cp->copy);
			(void)cudaStreamDestroy(cp->copy);
			if (cp->back) {
				(void)cudaStreamSynchronize(cp->back);
				(void)cudaStreamDestroy(cp->back);
			}
			if (cp->land) {
				(void)cudaStreamSynchronize(cp->land);
				(void)cudaStreamDestroy(cp->land);
			}
			for (int k = 0; k < DEV_DECODE_QUEUES; k++)
				if (cp->decode[k]) {
					(void)cudaStreamSynchronize(cp->decode[k]);
					(void)cudaStreamDestroy(cp->decode[k]);
				}
			if (cp->has_pool)
				(void)cudaMemPoolDestroy(cp->pool);
			leave(d, prev);
		}
		free(cp);
	}
	free(d);
}

static int cuda_alloc(struct dev *d, uint64_t bytes, void **out, struct wspi_err *err)
{
	int prev, ret;
	void *p = NULL;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	cudaError_t rc = cudaMalloc(&p, bytes ? (size_t)bytes : 256);
	if (rc != cudaSuccess) {
		size_t free_b = 0, total_b = 0;
		(void)cudaGetLastError();   /* not sticky: clear it */
		cudaError_t mrc = cudaMemGetInfo(&free_b, &total_b);
		if (mrc != cudaSuccess)
			(void)cudaGetLastError();
		ret = WSP_ERR(err, WSP_ECUDA,
			      "cudaMalloc of %llu bytes failed: %s; free %llu of %llu bytes "
			      "(cudaMemGetInfo) on %s",
			      (unsigned long long)bytes, cudaGetErrorString(rc),
			      (unsigned long long)free_b, (unsigned long long)total_b, d->desc);
		leave(d, prev);
		return ret;
	}
	leave(d, prev);
	*out = p;
	return 0;
}

static void cuda_free(struct dev *d, void *p)
{
	int prev;
	if (p && enter(d, &prev, NULL) == 0) {
		(void)cudaFree(p);
		leave(d, prev);
	}
}

static int cuda_event_create(struct dev *d, int timing, struct dev_event **out,
			     struct wspi_err *err)
{
	int prev, ret;
	struct dev_event *e = calloc(1, sizeof(*e));
	if (!e)
		return WSP_ERR(err, -ENOMEM, "out of memory for an event");
	if ((ret = enter(d, &prev, err)) < 0) {
		free(e);
		return ret;
	}
	cudaError_t rc = cudaEventCreateWithFlags(&e->ev, timing ? cudaEventDefault
							     : cudaEventDisableTiming);
	leave(d, prev);
	if (rc != cudaSuccess) {
		free(e);
		return CU_ERR(err, rc, "cudaEventCreateWithFlags");
	}
	*out = e;
	return 0;
}

static void cuda_event_destroy(struct dev *d, struct dev_event *e)
{
	int prev;
	if (!e)
		return;
	if (enter(d, &prev, NULL) == 0) {
		(void)cudaEventDestroy(e->ev);
		leave(d, prev);
	}
	free(e);
}

static int cuda_record(struct dev *d, struct dev_event *e, int q, void *stream,
		       struct wspi_err *err)
{
	int prev, ret;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	cudaError_t rc = cudaEventRecord(e->ev, queue_stream(d, q, stream));
	leave(d, prev);
	return rc == cudaSuccess ? 0 : CU_ERR(err, rc, "cudaEventRecord");
}

static int cuda_wait(struct dev *d, int q, void *stream, struct dev_event *e,
		     struct wspi_err *err)
{
	int prev, ret;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	cudaError_t rc = cudaStreamWaitEvent(queue_stream(d, q, stream),
					     e->ev, 0);
	leave(d, prev);
	return rc == cudaSuccess ? 0 : CU_ERR(err, rc, "cudaStreamWaitEvent");
}

static int cuda_query(struct dev *d, struct dev_event *e, struct wspi_err *err)
{
	int prev, ret;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	cudaError_t rc = cudaEventQuery(e->ev);
	leave(d, prev);
	if (rc == cudaSuccess)
		return 1;
	if (rc == cudaErrorNotReady) {
		(void)cudaGetLastError();   /* older runtimes record it as the last error */
		return 0;
	}
	return CU_ERR(err, rc, "cudaEventQuery");
}

static int cuda_event_sync(struct dev *d, struct dev_event *e, struct wspi_err *err)
{
	int prev, ret;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	cudaError_t rc = cudaEventSynchronize(e->ev);
	leave(d, prev);
	return rc == cudaSuccess ? 0 : CU_ERR(err, rc, "cudaEventSynchronize");
}

static int cuda_elapsed_ns(struct dev *d, struct dev_event *a, struct dev_event *b,
			   uint64_t *ns, struct wspi_err *err)
{
	int prev, ret;
	float ms = 0;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	cudaError_t rc = cudaEventElapsedTime(&ms, a->ev, b->ev);
	leave(d, prev);
	if (rc != cudaSuccess)
		return CU_ERR(err, rc, "cudaEventElapsedTime");
	*ns = ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
	return 0;
}

static int cuda_copy_h2d(struct dev *d, void *dst, const void *src, uint64_t len,
			 struct wspi_err *err)
{
	int prev, ret;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	cudaError_t rc = cudaMemcpyAsync(dst, src, (size_t)len, cudaMemcpyHostToDevice,
					 copy_stream(d));
	leave(d, prev);
	return rc == cudaSuccess ? 0 : CU_ERR(err, rc, "cudaMemcpyAsync");
}

static int cuda_copy_d2h(struct dev *d, int q, void *dst, const void *src, uint64_t len,
			 struct wspi_err *err)
{
	int prev, ret;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	cudaError_t rc = cudaMemcpyAsync(dst, src, (size_t)len, cudaMemcpyDeviceToHost,
					 queue_stream(d, q, NULL));
	leave(d, prev);
	return rc == cudaSuccess ? 0 : CU_ERR(err, rc, "cudaMemcpyAsync (device to host)");
}

static int cuda_sync_copy(struct dev *d, struct wspi_err *err)
{
	int prev, ret;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	/* The decode stream writes slots too (after the copy stream). */
	cudaError_t rc = cudaStreamSynchronize(copy_stream(d));
	for (int k = 0; k < DEV_DECODE_QUEUES && rc == cudaSuccess; k++)
		rc = cudaStreamSynchronize(queue_stream(d, DEV_Q_DECODE + k, NULL));
	leave(d, prev);
	return rc == cudaSuccess ? 0 : CU_ERR(err, rc, "cudaStreamSynchronize(copy and decode streams)");
}

static int cuda_unpack(struct dev *d, int q, const void *in, void *out,
		       const struct exprans_gpu_job *jobs,
		       unsigned n_jobs, unsigned layouts, uint64_t max_out, uint32_t *status_dev,
		       uint32_t *status_host, uint32_t *status_view, struct wspi_err *err)
{
	int prev, ret;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	cudaStream_t s = queue_stream(d, q, NULL);
	cudaError_t rc;
	const char *what = n_jobs ? "the decode kernel's launch" : "loading the decode kernel";
	if (status_view || !n_jobs) {
		rc = (cudaError_t)exprans_gpu_decode_report(in, out, jobs, n_jobs, layouts, max_out,
							    status_dev, status_view, s);
	} else {
		rc = (cudaError_t)exprans_gpu_decode(in, out, jobs, n_jobs, layouts, max_out,
						     status_dev, s);
		if (rc == cudaSuccess) {
			rc = cudaMemcpyAsync(status_host, status_dev, n_jobs * sizeof(*status_dev),
					     cudaMemcpyDeviceToHost, s);
			what = "cudaMemcpyAsync (decode status)";
		}
	}
	leave(d, prev);
	return rc == cudaSuccess ? 0 : CU_ERR(err, rc, what);
}

/* A pool of the pager's own, which keeps what is freed (no release to
 * the driver at each sync) and never hands the application's memory. */
static int make_pool(struct dev *d, struct cuda_priv *cp, struct wspi_err *err)
{
	struct cudaMemPoolProps props = {
		.allocType = cudaMemAllocationTypePinned,
		.location = { .type = cudaMemLocationTypeDevice, .id = d->ordinal },
	};
	cudaError_t rc = cudaMemPoolCreate(&cp->pool, &props);
	if (rc != cudaSuccess)
		return CU_ERR(err, rc, "cudaMemPoolCreate");
	uint64_t keep = UINT64_MAX;
	(void)cudaMemPoolSetAttribute(cp->pool, cudaMemPoolAttrReleaseThreshold, &keep);
	cp->has_pool = 1;
	return 0;
}

static int cuda_alloc_async(struct dev *d, int q, uint64_t bytes, void **out, struct wspi_err *err)
{
	struct cuda_priv *cp = d->priv;
	int prev, ret;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	if (!cp->has_pool && (ret = make_pool(d, cp, err)) < 0) {
		leave(d, prev);
		return ret;
	}
	cudaError_t rc = cudaMallocFromPoolAsync(out, (size_t)bytes, cp->pool, queue_stream(d, q, NULL));
	leave(d, prev);
	if (rc == cudaErrorMemoryAllocation) {
		(void)cudaGetLastError();
		return WSP_ERR(err, -ENOMEM, "cudaMallocFromPoolAsync of %llu bytes: out of device "
			       "memory", (unsigned long long)bytes);
	}
	return rc == cudaSuccess ? 0 : CU_ERR(err, rc, "cudaMallocFromPoolAsync");
}

static void cuda_free_async(struct dev *d, int q, void *p)
{
	int prev;
	if (p && enter(d, &prev, NULL) == 0) {
		(void)cudaFreeAsync(p, queue_stream(d, q, NULL));
		leave(d, prev);
	}
}

static int cuda_pin(struct dev *d, void *p, uint64_t len, struct wspi_err *err)
{
	int prev, ret;
	if ((ret = enter(d, &prev, err)) < 0)
		return ret;
	cudaError_t rc = cudaHostRegister(p, (size_t)len, cudaHostRegisterDefault);
	leave(d, prev);
	if (rc != cudaSuccess) {
		(void)cudaGetLastError();
		return WSP_ERR(err, WSP_ECUDA, "cudaHostRegister of %llu bytes: %s",
			       (unsigned long long)len, cudaGetErrorString(rc));
	}
	return 0;
}

static void cuda_unpin(struct dev *d, void *p)
{
	int prev;
	if (enter(d, &prev, NULL) == 0) {
		if (cudaHostUnregister(p) != cudaSuccess)
			(void)cudaGetLastError();
		leave(d, prev);
	}
}

static void *cuda_host_view(struct dev *d, void *p)
{
	int prev;
	void *view = NULL;
	if (enter(d, &prev, NULL) < 0)
		return NULL;
	if (cudaHostGetDevicePointer(&view, p, 0) != cudaSuccess) {
		(void)cudaGetLastError();
		view = NULL;
	}
	leave(d, prev);
	return view;
}

static const struct dev_ops cuda_ops = {
	.name = "cuda",
	.close = cuda_close,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.record = cuda_record,
	.wait = cuda_wait,
	.query = cuda_query,
	.event_sync = cuda_event_sync,
	.elapsed_ns = cuda_elapsed_ns,
	.copy_h2d = cuda_copy_h2d,
	.copy_d2h = cuda_copy_d2h,
	.sync_copy = cuda_sync_copy,
	.unpack = cuda_unpack,
	.alloc_async = cuda_alloc_async,
	.free_async = cuda_free_async,
	.pin = cuda_pin,
	.unpin = cuda_unpin,
	.host_view = cuda_host_view,
};

int dev_cuda_open(int ordinal, struct dev **out, struct wspi_err *err)
{
	int count = 0, prev, ret;
	cudaError_t rc = cudaGetDeviceCount(&count);
	if (rc != cudaSuccess) {
		(void)cudaGetLastError();
		return WSP_ERR(err, WSP_ENODEVICE, "no CUDA device: cudaGetDeviceCount: %s",
			       cudaGetErrorString(rc));
	}
	if (count == 0)
		return WSP_ERR(err, WSP_ENODEVICE, "no CUDA device (cudaGetDeviceCount gives 0)");
	if (ordinal >= count)
		return WSP_ERR(err, WSP_ENODEVICE, "CUDA device %d does not exist (%d device%s)",
			       ordinal, count, count == 1 ? "" : "s");

	struct dev *d = calloc(1, sizeof(*d));
	struct cuda_priv *cp = calloc(1, sizeof(*cp));
	if (!d || !cp) {
		free(d);
		free(cp);
		return WSP_ERR(err, -ENOMEM, "out of memory for the CUDA device");
	}
	d->ops = &cuda_ops;
	d->ordinal = ordinal;
	struct cudaDeviceProp prop;
	rc = cudaGetDeviceProperties(&prop, ordinal);
	if (rc != cudaSuccess) {
		free(d);
		free(cp);
		return CU_ERR(err, rc, "cudaGetDeviceProperties");
	}
	snprintf(d->desc, sizeof(d->desc), "%.100s (CUDA device %d)", prop.name, ordinal);
	if ((ret = enter(d, &prev, err)) < 0) {
		free(d);
		free(cp);
		return ret;
	}
	rc = cudaStreamCreateWithFlags(&cp->copy, cudaStreamNonBlocking);
	if (rc == cudaSuccess) {
		rc = cudaStreamCreateWithFlags(&cp->back, cudaStreamNonBlocking);
		if (rc != cudaSuccess)
			(void)cudaStreamDestroy(cp->copy);
	}
	if (rc == cudaSuccess) {
		rc = cudaStreamCreateWithFlags(&cp->land, cudaStreamNonBlocking);
		if (rc != cudaSuccess) {
			(void)cudaStreamDestroy(cp->copy);
			(void)cudaStreamDestroy(cp->back);
		}
	}
	for (int k = 0; k < DEV_DECODE_QUEUES && rc == cudaSuccess; k++) {
		rc = cudaStreamCreateWithFlags(&cp->decode[k], cudaStreamNonBlocking);
		if (rc != cudaSuccess) {
			(void)cudaStreamDestroy(cp->copy);
			(void)cudaStreamDestroy(cp->back);
			(void)cudaStreamDestroy(cp->land);
			while (k-- > 0)
				(void)cudaStreamDestroy(cp->decode[k]);
		}
	}
	leave(d, prev);
	if (rc != cudaSuccess) {
		free(d);
		free(cp);
		return CU_ERR(err, rc, "cudaStreamCreateWithFlags");
	}
	d->priv = cp;
	*out = d;
	return 0;
}
#endif /* WSP_HAVE_CUDA */
