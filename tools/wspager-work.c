/*
 * wspager(1): the workload run on every acquired layer.
 *
 * GPU: each 2-D BF16/F16/F32 weight W (out x in) is applied as Y = X * W^T to
 * `batch` rows of activations with cublasGemmEx (compute in FP32); every other
 * tensor is checksummed by a kernel into a device array that is compared with
 * the manifest once per pass, so that checking never stalls the stream.  Two
 * events per layer (compute begins, compute ends) give the compute time and
 * the time the GPU sat idle waiting for the next layer's weights.
 *
 * Host backend: every tensor is checksummed with wsp_checksum64 at once and
 * every 2-D BF16 weight is also applied to a vector (y = W x, in float); the
 * same two timestamps are taken with the host clock.
 */
#include "config.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#ifdef WSP_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "wspager-cublas.h"
#include "wspager-kernels.h"
#endif

#include "wspager-tool.h"

struct wt_check {
	uint32_t layer, tensor;
	uint64_t expect;
};

struct wt_work {
	struct wt_work_cfg cfg;
	const wsp_pack *pk;
	struct wt_step_time *times;   /* max_steps */
	size_t step;
	uint64_t gemms, checksums, flops;
	uint64_t base_ns;
	uint64_t max_tensors;
	struct wt_check *checks;      /* device checksums awaiting comparison */
	size_t n_checks, cap_checks;
	float *hx;                    /* host backend: the vector of the matvecs */
	uint64_t hx_len;
	volatile float sink;          /* keeps the matvec results alive */
#ifdef WSP_HAVE_CUDA
	cudaStream_t stream;
	cublasHandle_t blas;
	void *x[3];                   /* activations: BF16, F16, F32 */
	void *y;
	unsigned long long *dsum, *hsum;
	cudaEvent_t base, *ev;        /* 2 per step */
	int n_ev;
#endif
};

static bool gpu(const struct wt_work *w)
{
	return w->cfg.device != WSP_DEVICE_HOST;
}

static bool host_matvec_ok(const struct wsp_tensor *t)
{
	return t->rank == 2 && t->dtype == WSP_DTYPE_BF16 && t->shape[0] > 0 && t->shape[1] > 0;
}

#ifdef WSP_HAVE_CUDA
static int cuda_fail(cudaError_t ce, const char *what)
{
	cli_error("CUDA: %s: %s (%s)", what, cudaGetErrorString(ce), cudaGetErrorName(ce));
	return CLI_EXIT_FAIL;
}
#define CUDA_TRY(call, what)                                  \
	do {                                                  \
		cudaError_t ce_ = (call);                     \
		if (ce_ != cudaSuccess)                       \
			return cuda_fail(ce_, (what));        \
	} while (0)

static int dt_slot(enum wsp_dtype dt)
{
	switch (dt) {
	case WSP_DTYPE_BF16: return 0;
	case WSP_DTYPE_F16: return 1;
	case WSP_DTYPE_F32: return 2;
	default: return -1;
	}
}

static const cudaDataType cuda_types[3] = {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F};
static const unsigned dt_size[3] = {2, 2, 4};
static const enum wsp_dtype slot_dtype[3] = {WSP_DTYPE_BF16, WSP_DTYPE_F16, WSP_DTYPE_F32};

/* A weight the GEMM can take: 2-D, a float type cuBLAS multiplies, sizes int. */
static bool gemm_ok(const struct wsp_tensor *t)
{
	return t->rank == 2 && dt_slot(t->dtype) >= 0 && t->shape[0] > 0 && t->shape[1] > 0 &&
	       t->shape[0] <= INT_MAX && t->shape[1] <= INT_MAX;
}

static int alloc_dev(void **p, uint64_t bytes, const char *what)
{
	char sz[32];
	cudaError_t ce = cudaMalloc(p, bytes ? bytes : 1);
	if (ce != cudaSuccess) {
		size_t freeb = 0, total = 0;
		cudaMemGetInfo(&freeb, &total);
		char fr[32];
		cli_error("CUDA: cudaMalloc of %s for %s: %s (%s free)", wt_size(bytes, sz, sizeof(sz)), what,
			 cudaGetErrorString(ce), wt_size(freeb, fr, sizeof(fr)));
		*p = NULL;
		return CLI_EXIT_FAIL;
	}
	return 0;
}

static int gpu_gemm(struct wt_work *w, const struct wsp_layer *v, const struct wsp_tensor *t);

/*
 * Run every GEMM shape of the pack, and the checksum kernel, once before any
 * timing: cuBLAS picks and loads its kernels on first use of a shape, and
 * CUDA loads modules lazily, which would otherwise be charged to the first
 * pass.  The weights come from a scratch buffer (contents do not matter).
 */
static int gpu_warmup(struct wt_work *w)
{
	struct wsp_pack_summary s;
	uint64_t max_w = 0;
	void *scratch = NULL;
	if (wsp_pack_summary(w->pk, &s) < 0)
		return CLI_EXIT_FAIL;
	for (uint32_t l = 0; l < s.n_layers; l++) {
		const struct wsp_layer *L = wsp_pack_layer(w->pk, l);
		for (uint32_t i = 0; L && !w->cfg.checksum_all && i < L->n_tensors; i++)
			if (gemm_ok(&L->tensors[i]) && L->tensors[i].bytes > max_w)
				max_w = L->tensors[i].bytes;
	}
	if (w->cap_checks) {
		int ce = wt_cuda_checksum(w->dsum, 8, &w->dsum[0], w->stream);
		if (ce)
			return cuda_fail((cudaError_t)ce, "checksum kernel (warm-up)");
	}
	if (max_w) {
		if (alloc_dev(&scratch, max_w, "GEMM warm-up"))
			return CLI_EXIT_FAIL;
		CUDA_TRY(cudaMemsetAsync(scratch, 0, max_w, w->stream), "cudaMemsetAsync");
	}
	/* Distinct shapes only: a model repeats the same few in every block. */
	struct { int dt; uint64_t out, in; } seen[64];
	unsigned n_seen = 0;
	int rc = 0;
	for (uint32_t l = 0; max_w && !rc && l < s.n_layers; l++) {
		const struct wsp_layer *L = wsp_pack_layer(w->pk, l);
		for (uint32_t i = 0; !rc && i < L->n_tensors; i++) {
			struct wsp_tensor t = L->tensors[i];
			if (!gemm_ok(&t))
				continue;
			unsigned k;
			for (k = 0; k < n_seen; k++)
				if (seen[k].dt == (int)t.dtype && seen[k].out == t.shape[0] && seen[k].in == t.shape[1])
					break;
			if (k < n_seen)
				continue;
			if (n_seen < 64) {
				seen[n_seen].dt = (int)t.dtype;
				seen[n_seen].out = t.shape[0];
				seen[n_seen].in = t.shape[1];
				n_seen++;
			}
			t.data = scratch;
			rc = gpu_gemm(w, L, &t);
		}
	}
	cudaError_t ce = cudaStreamSynchronize(w->stream);
	cudaFree(scratch);
	if (!rc && ce != cudaSuccess)
		return cuda_fail(ce, "warm-up");
	return rc;
}

static int gpu_open(struct wt_work *w)
{
	const wsp_pack *pk = w->pk;
	struct wsp_pack_summary s;
	uint64_t max_in[3] = {0, 0, 0}, max_out = 0;

	CUDA_TRY(cudaSetDevice(w->cfg.device), "cudaSetDevice");
	if (wsp_pack_summary(pk, &s) < 0) {
		cli_error("cannot read the pack summary");
		return CLI_EXIT_FAIL;
	}
	for (uint32_t l = 0; l < s.n_layers; l++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, l);
		for (uint32_t i = 0; L && i < L->n_tensors; i++) {
			const struct wsp_tensor *t = &L->tensors[i];
			if (w->cfg.checksum_all || !gemm_ok(t))
				continue;
			int k = dt_slot(t->dtype);
			if (t->shape[1] > max_in[k])
				max_in[k] = t->shape[1];
			if (t->shape[0] > max_out)
				max_out = t->shape[0];
		}
	}
	CUDA_TRY(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking), "cudaStreamCreate");
	if (wt_cublas_load() < 0)
		return CLI_EXIT_FAIL;
	cublasStatus_t bs = wt_blas.create(&w->blas);
	if (bs != CUBLAS_STATUS_SUCCESS) {
		w->blas = NULL;
		cli_error("cuBLAS: cublasCreate: %s", wt_blas.status_string(bs));
		return CLI_EXIT_FAIL;
	}
	bs = wt_blas.set_stream(w->blas, w->stream);
	if (bs != CUBLAS_STATUS_SUCCESS) {
		cli_error("cuBLAS: cublasSetStream: %s", wt_blas.status_string(bs));
		return CLI_EXIT_FAIL;
	}
	for (int k = 0; k < 3; k++) {
		uint64_t n, bytes;
		if (!max_in[k])
			continue;
		if (__builtin_mul_overflow(max_in[k], (uint64_t)w->cfg.batch, &n) ||
		    __builtin_mul_overflow(n, (uint64_t)dt_size[k], &bytes)) {
			cli_error("activation buffer size overflows");
			return CLI_EXIT_FAIL;
		}
		if (alloc_dev(&w->x[k], bytes, "activations"))
			return CLI_EXIT_FAIL;
		int ce = wt_cuda_fill(w->x[k], n, slot_dtype[k], w->stream);
		if (ce)
			return cuda_fail((cudaError_t)ce, "activation fill kernel");
	}
	if (max_out) {
		uint64_t bytes;
		if (__builtin_mul_overflow(max_out, (uint64_t)w->cfg.batch * 4, &bytes)) {
			cli_error("output buffer size overflows");
			return CLI_EXIT_FAIL;
		}
		if (alloc_dev(&w->y, bytes, "GEMM outputs"))
			return CLI_EXIT_FAIL;
	}
	if (alloc_dev((void **)&w->dsum, w->cap_checks * sizeof(*w->dsum), "checksums"))
		return CLI_EXIT_FAIL;
	CUDA_TRY(cudaMallocHost((void **)&w->hsum, (w->cap_checks ? w->cap_checks : 1) * sizeof(*w->hsum)),
		 "cudaMallocHost (checksum results)");
	CUDA_TRY(cudaEventCreate(&w->base), "cudaEventCreate");
	w->ev = calloc(2 * (w->cfg.max_steps ? w->cfg.max_steps : 1), sizeof(*w->ev));
	if (!w->ev) {
		cli_error("out of memory");
		return CLI_EXIT_FAIL;
	}
	for (size_t i = 0; i < 2 * w->cfg.max_steps; i++) {
		CUDA_TRY(cudaEventCreate(&w->ev[i]), "cudaEventCreate");
		w->n_ev++;
	}
	CUDA_TRY(cudaStreamSynchronize(w->stream), "activation fill");
	return gpu_warmup(w);
}

static void gpu_close(struct wt_work *w)
{
	if (w->stream)
		cudaStreamSynchronize(w->stream);
	for (int i = 0; i < w->n_ev; i++)
		cudaEventDestroy(w->ev[i]);
	free(w->ev);
	if (w->base)
		cudaEventDestroy(w->base);
	for (int k = 0; k < 3; k++)
		cudaFree(w->x[k]);
	cudaFree(w->y);
	cudaFree(w->dsum);
	cudaFreeHost(w->hsum);
	if (w->blas)
		wt_blas.destroy(w->blas);
	if (w->stream)
		cudaStreamDestroy(w->stream);
}

static int gpu_gemm(struct wt_work *w, const struct wsp_layer *v, const struct wsp_tensor *t)
{
	int k = dt_slot(t->dtype);
	int out = (int)t->shape[0], in = (int)t->shape[1], b = (int)w->cfg.batch;
	const float alpha = 1.0f, beta = 0.0f;
	/* Row-major W (out x in) is column-major W^T; Y^T = W * X^T in
	 * column-major terms, i.e. C(out x b) = op(A)=W * B(in x b). */
	cublasStatus_t bs = wt_blas.gemm_ex(w->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, b, in, &alpha, t->data,
					 cuda_types[k], in, w->x[k], cuda_types[k], in, &beta, w->y,
					 cuda_types[k], out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (bs != CUBLAS_STATUS_SUCCESS) {
		cli_error("cuBLAS: GEMM on %s (%s, %" PRIu64 "x%" PRIu64 ", batch %d) in layer %s: %s", t->name,
			 wsp_dtype_name(t->dtype), t->shape[0], t->shape[1], b, v->name, wt_blas.status_string(bs));
		return CLI_EXIT_FAIL;
	}
	w->gemms++;
	w->flops += 2ull * t->shape[0] * t->shape[1] * w->cfg.batch;
	return 0;
}

static int gpu_layer(struct wt_work *w, const struct wsp_layer *v)
{
	CUDA_TRY(cudaEventRecord(w->ev[2 * w->step], w->stream), "cudaEventRecord");
	for (uint32_t i = 0; i < v->n_tensors; i++) {
		const struct wsp_tensor *t = &v->tensors[i];
		if (!w->cfg.checksum_all && gemm_ok(t)) {
			if (gpu_gemm(w, v, t))
				return CLI_EXIT_FAIL;
			continue;
		}
		if (w->n_checks >= w->cap_checks) {
			cli_error("internal: more checksums than planned in layer %s", v->name);
			return CLI_EXIT_FAIL;
		}
		struct wt_check *c = &w->checks[w->n_checks];
		c->layer = v->index;
		c->tensor = i;
		c->expect = t->checksum;
		int ce = wt_cuda_checksum(t->data, t->bytes, &w->dsum[w->n_checks], w->stream);
		if (ce) {
			cli_error("CUDA: checksum kernel on %s in layer %s: %s", t->name, v->name,
				 cudaGetErrorString((cudaError_t)ce));
			return CLI_EXIT_FAIL;
		}
		w->n_checks++;
		w->checksums++;
	}
	CUDA_TRY(cudaEventRecord(w->ev[2 * w->step + 1], w->stream), "cudaEventRecord");
	return 0;
}

static int gpu_pass_begin(struct wt_work *w)
{
	if (w->cap_checks)
		CUDA_TRY(cudaMemsetAsync(w->dsum, 0, w->cap_checks * sizeof(*w->dsum), w->stream), "cudaMemsetAsync");
	CUDA_TRY(cudaStreamSynchronize(w->stream), "cudaStreamSynchronize");
	/* The stream is idle, so the base event fires right away: device
	 * times measured from it map onto the host clock. */
	w->base_ns = wt_now_ns();
	CUDA_TRY(cudaEventRecord(w->base, w->stream), "cudaEventRecord");
	return 0;
}

static int gpu_pass_end(struct wt_work *w)
{
	CUDA_TRY(cudaStreamSynchronize(w->stream), "workload on the compute stream");
	for (size_t i = 0; i < w->step; i++) {
		float b_ms = 0, e_ms = 0;
		CUDA_TRY(cudaEventElapsedTime(&b_ms, w->base, w->ev[2 * i]), "cudaEventElapsedTime");
		CUDA_TRY(cudaEventElapsedTime(&e_ms, w->base, w->ev[2 * i + 1]), "cudaEventElapsedTime");
		w->times[i].begin_ns = w->base_ns + (uint64_t)((double)b_ms * 1e6);
		w->times[i].end_ns = w->base_ns + (uint64_t)((double)e_ms * 1e6);
	}
	if (w->n_checks)
		CUDA_TRY(cudaMemcpy(w->hsum, w->dsum, w->n_checks * sizeof(*w->hsum), cudaMemcpyDeviceToHost),
			 "copying checksums back");
	return 0;
}
#endif /* WSP_HAVE_CUDA */

int wt_work_open(const struct wt_work_cfg *cfg, const wsp_pack *pk, struct wt_work **out)
{
	struct wsp_pack_summary s;
	*out = NULL;
	struct wt_work *w = calloc(1, sizeof(*w));
	if (!w || wsp_pack_summary(pk, &s) < 0) {
		free(w);
		cli_error("out of memory");
		return CLI_EXIT_FAIL;
	}
	w->cfg = *cfg;
	w->pk = pk;
	for (uint32_t l = 0; l < s.n_layers; l++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, l);
		if (L && L->n_tensors > w->max_tensors)
			w->max_tensors = L->n_tensors;
	}
	w->times = calloc(cfg->max_steps ? cfg->max_steps : 1, sizeof(*w->times));
	if (gpu(w) && __builtin_mul_overflow((uint64_t)cfg->max_steps, w->max_tensors, &w->cap_checks)) {
		free(w->times);
		free(w);
		cli_error("too many layers");
		return CLI_EXIT_FAIL;
	}
	w->checks = calloc(w->cap_checks ? w->cap_checks : 1, sizeof(*w->checks));
	if (!w->times || !w->checks) {
		wt_work_close(w);
		cli_error("out of memory");
		return CLI_EXIT_FAIL;
	}
	if (!gpu(w) && !cfg->checksum_all) {
		/* The matvec vector: as long as the widest BF16 weight row. */
		for (uint32_t l = 0; l < s.n_layers; l++) {
			const struct wsp_layer *L = wsp_pack_layer(pk, l);
			for (uint32_t i = 0; L && i < L->n_tensors; i++)
				if (host_matvec_ok(&L->tensors[i]) && L->tensors[i].shape[1] > w->hx_len &&
				    L->tensors[i].shape[1] <= (1u << 28))
					w->hx_len = L->tensors[i].shape[1];
		}
		if (w->hx_len && !(w->hx = malloc(w->hx_len * sizeof(*w->hx)))) {
			wt_work_close(w);
			cli_error("out of memory");
			return CLI_EXIT_FAIL;
		}
		for (uint64_t i = 0; i < w->hx_len; i++)
			w->hx[i] = (float)((i * 2654435761u >> 7) & 1023) / 1024.0f - 0.5f;
	}
	if (gpu(w)) {
#ifdef WSP_HAVE_CUDA
		if (gpu_open(w)) {
			wt_work_close(w);
			return CLI_EXIT_FAIL;
		}
#else
		wt_work_close(w);
		cli_error("built without CUDA: only --device host is available");
		return CLI_EXIT_FAIL;
#endif
	}
	*out = w;
	return 0;
}

void wt_work_close(struct wt_work *w)
{
	if (!w)
		return;
#ifdef WSP_HAVE_CUDA
	if (gpu(w))
		gpu_close(w);
#endif
	free(w->hx);
	free(w->checks);
	free(w->times);
	free(w);
}

void *wt_work_stream(struct wt_work *w)
{
#ifdef WSP_HAVE_CUDA
	if (gpu(w))
		return w->stream;
#endif
	return NULL;
}

/* Make the workload's device current: over several devices the caller
 * moves between workloads, and a stream or cuBLAS handle works only on
 * its own device. */
static int use_device(struct wt_work *w)
{
#ifdef WSP_HAVE_CUDA
	if (gpu(w))
		CUDA_TRY(cudaSetDevice(w->cfg.device), "cudaSetDevice");
#endif
	(void)w;
	return 0;
}

int wt_work_pass_begin(struct wt_work *w)
{
	if (use_device(w))
		return CLI_EXIT_FAIL;
	w->step = 0;
	w->n_checks = 0;
	w->gemms = w->checksums = w->flops = 0;
#ifdef WSP_HAVE_CUDA
	if (gpu(w))
		return gpu_pass_begin(w);
#endif
	w->base_ns = wt_now_ns();
	return 0;
}

/* y = W x for a 2-D BF16 weight, in float: the host backend's stand-in for
 * the GEMM (one row at a time; bf16 is the top half of a float). */
static void host_matvec(struct wt_work *w, const struct wsp_tensor *t)
{
	const uint16_t *p = t->data;
	uint64_t out = t->shape[0], in = t->shape[1];
	float total = 0;
	for (uint64_t r = 0; r < out; r++) {
		float acc = 0;
		for (uint64_t c = 0; c < in; c++) {
			uint32_t bits = (uint32_t)p[r * in + c] << 16;
			float f;
			memcpy(&f, &bits, sizeof(f));
			acc += f * w->hx[c];
		}
		total += acc;
	}
	w->sink = total;
	w->gemms++;
	w->flops += 2 * out * in;
}

static int host_layer(struct wt_work *w, const struct wsp_layer *v)
{
	for (uint32_t i = 0; i < v->n_tensors; i++) {
		const struct wsp_tensor *t = &v->tensors[i];
		if (t->bytes && !t->data) {
			cli_error("layer %s, tensor %s: no data in the acquired view", v->name, t->name);
			return CLI_EXIT_FAIL;
		}
		uint64_t got = wsp_checksum64(t->data, t->bytes);
		if (got != t->checksum) {
			cli_error("checksum mismatch in layer %s, tensor %s: computed %016" PRIx64
				 ", manifest says %016" PRIx64,
				 v->name, t->name, got, t->checksum);
			return CLI_EXIT_FAIL;
		}
		w->checksums++;
		if (w->hx && host_matvec_ok(t) && t->shape[1] <= w->hx_len)
			host_matvec(w, t);
	}
	return 0;
}

int wt_work_layer(struct wt_work *w, const struct wsp_layer *view)
{
	if (w->step >= w->cfg.max_steps) {
		cli_error("internal: more layers in one pass than planned");
		return CLI_EXIT_FAIL;
	}
	struct wt_step_time *st = &w->times[w->step];
	st->layer = view->index;
	int rc;
	if (use_device(w))
		return CLI_EXIT_FAIL;
#ifdef WSP_HAVE_CUDA
	if (gpu(w)) {
		rc = gpu_layer(w, view);
		w->step++;
		return rc;
	}
#endif
	st->begin_ns = wt_now_ns();
	rc = host_layer(w, view);
	st->end_ns = wt_now_ns();
	w->step++;
	return rc;
}

int wt_work_pass_end(struct wt_work *w, struct wt_pass_result *res)
{
	memset(res, 0, sizeof(*res));
	if (use_device(w))
		return CLI_EXIT_FAIL;
#ifdef WSP_HAVE_CUDA
	if (gpu(w)) {
		if (gpu_pass_end(w))
			return CLI_EXIT_FAIL;
		for (size_t i = 0; i < w->n_checks; i++) {
			const struct wt_check *c = &w->checks[i];
			if (w->hsum[i] == c->expect)
				continue;
			const struct wsp_layer *L = wsp_pack_layer(w->pk, c->layer);
			const char *tn = L && c->tensor < L->n_tensors ? L->tensors[c->tensor].name : "?";
			cli_error("checksum mismatch in layer %s, tensor %s: device computed %016llx, manifest says %016" PRIx64,
				 L ? L->name : "?", tn, w->hsum[i], c->expect);
			return CLI_EXIT_FAIL;
		}
	}
#endif
	uint64_t prev_end = w->base_ns;
	for (size_t i = 0; i < w->step; i++) {
		const struct wt_step_time *st = &w->times[i];
		if (st->end_ns > st->begin_ns)
			res->compute_ns += st->end_ns - st->begin_ns;
		if (st->begin_ns > prev_end)
			res->wait_ns += st->begin_ns - prev_end;
		prev_end = st->end_ns;
	}
	res->gemms = w->gemms;
	res->checksums = w->checksums;
	res->flops = w->flops;
	res->steps = w->step;
	res->times = w->times;
	return 0;
}
