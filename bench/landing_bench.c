/* Gradients out of the GPU and widened into fp32 host accumulators: where
 * the bf16 lands decides what the host's memory carries.
 *
 *   landing_bench [--mib N] [--threads T] [--chunk KIB] [--rings MIB,...]
 *                 [--layer MIB] [--lib-chunks KIB,...] [--tensor MIB] [--reps R]
 *
 * N MiB of bf16 gradients (default 2048) leave the device and are widened
 * into N/2 Mi fp32 accumulators (touched beforehand, as from a second
 * step on), with the write-back's own loop (streaming stores), on T
 * threads (default: all cores but one).  Ways, each against ceilings
 * measured in the same run:
 *
 *   d2h       device->host copies alone, 64 MiB each, into pinned memory
 *             (the link's ceiling, in bf16 elements a second);
 *   widen     the widening alone, from a pinned buffer far larger than the
 *             caches (the host memory's ceiling for this work);
 *   layers    as the write-back lands a first push today: whole layers
 *             (--layer MiB, default 256) copied into landing buffers that
 *             hold them all, each layer widened once its copy is done while
 *             the next ones copy;
 *   ring R    copies of --chunk KiB (default 512) into a ring of R MiB of
 *             pinned buffers, each chunk widened as soon as it lands and
 *             its buffer reused for a later chunk.  A ring small enough to
 *             stay in the last-level cache (where the CPU puts what a
 *             device writes, on CPUs that do) is never read from memory.
 *   library   the write-back's own ring (src/train/ring.c: its buffers,
 *             threads and issuing), with its chunks of each --lib-chunks
 *             KiB (default 2048,4096), the gradients as tensors of
 *             --tensor MiB (default 64) issued in one call and waited for,
 *             as the write-back's worker lands a batch of first pushes.
 *
 * Prints one line a way with G elements/s, best of R repetitions, and
 * its ratio to the link.  Exits 77 without a GPU. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/cuda_bench.h"
#include "common/util.h"
#include "common/workers.h"
#include "gpu/device.h"
#include "train/ring.h"
#include "train/tofloat.h"

#define MAX_THREADS 256u
#define MAX_RINGS 8

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* What every way shares. */
static uint16_t *dev_src;     /* the gradients on the device */
static uint16_t *landing;     /* pinned, N bytes: widen's source, layers' landing */
static float *acc;            /* the accumulators, 2N bytes */
static uint64_t n_elem;
static unsigned n_threads;

struct part {
	float *dst;
	const uint16_t *src;
	uint64_t n;
};

static void *widen_part(void *arg)
{
	const struct part *p = arg;
	wb_accumulate(p->dst, p->src, WSP_DTYPE_BF16, p->n, 1);
	return NULL;
}

/* Widen n elements of src into dst on every thread, split evenly. */
static void widen_split(float *dst, const uint16_t *src, uint64_t n)
{
	struct part parts[MAX_THREADS];
	uint64_t per = (n + n_threads - 1) / n_threads;
	per = (per + 15) & ~(uint64_t)15;    /* 64-byte aligned pieces of dst */
	for (unsigned k = 0; k < n_threads; k++) {
		uint64_t b = WSP_MIN(n, per * k), e = WSP_MIN(n, per * (k + 1));
		parts[k] = (struct part){ dst + b, src + b, e - b };
	}
	wspi_run_parts(widen_part, parts, sizeof(parts[0]), n_threads);
}

static double way_d2h(cudaStream_t s)
{
	const uint64_t piece = 64ull << 20, bytes = n_elem * 2;
	double t0 = now_s();
	for (uint64_t off = 0; off < bytes; off += piece)
		CU(cudaMemcpyAsync((char *)landing + off, (const char *)dev_src + off,
				   WSP_MIN(piece, bytes - off), cudaMemcpyDeviceToHost, s));
	CU(cudaStreamSynchronize(s));
	return n_elem / (now_s() - t0);
}

static double way_widen(void)
{
	double t0 = now_s();
	widen_split(acc, landing, n_elem);
	return n_elem / (now_s() - t0);
}

static double way_layers(cudaStream_t s, uint64_t layer_bytes)
{
	uint64_t bytes = n_elem * 2, n_layers = (bytes + layer_bytes - 1) / layer_bytes;
	cudaEvent_t *ev = calloc(n_layers, sizeof(*ev));
	if (!ev) {
		fprintf(stderr, "landing_bench: out of memory\n");
		exit(1);
	}
	for (uint64_t l = 0; l < n_layers; l++)
		CU(cudaEventCreateWithFlags(&ev[l], cudaEventDisableTiming));
	double t0 = now_s();
	for (uint64_t l = 0; l < n_layers; l++) {
		uint64_t off = l * layer_bytes;
		CU(cudaMemcpyAsync((char *)landing + off, (const char *)dev_src + off,
				   WSP_MIN(layer_bytes, bytes - off), cudaMemcpyDeviceToHost, s));
		CU(cudaEventRecord(ev[l], s));
	}
	for (uint64_t l = 0; l < n_layers; l++) {
		uint64_t off = l * layer_bytes;
		CU(cudaEventSynchronize(ev[l]));
		widen_split(acc + off / 2, landing + off / 2, WSP_MIN(layer_bytes, bytes - off) / 2);
	}
	double rate = n_elem / (now_s() - t0);
	for (uint64_t l = 0; l < n_layers; l++)
		CU(cudaEventDestroy(ev[l]));
	free(ev);
	return rate;
}

/* The ring: chunk c lands in slot c % K.  A slot is FREE, then IN_FLIGHT
 * (its copy issued), LANDED (the issuing thread saw its event), and FREE
 * again once a widening thread has widened it. */
enum { FREE, IN_FLIGHT, LANDED };

struct ring {
	uint16_t *buf;                 /* K x chunk elements, pinned */
	uint64_t chunk;                /* elements a chunk */
	uint64_t k, n_chunks;
	_Atomic int *state;
	_Atomic uint64_t *holds;       /* the chunk each slot holds */
	_Atomic uint64_t next;         /* the next chunk to claim for widening */
};

static void *ring_worker(void *arg)
{
	struct ring *r = arg;
	for (;;) {
		uint64_t c = atomic_fetch_add(&r->next, 1);
		if (c >= r->n_chunks)
			return NULL;
		uint64_t s = c % r->k;
		while (atomic_load_explicit(&r->state[s], memory_order_acquire) != LANDED ||
		       atomic_load_explicit(&r->holds[s], memory_order_relaxed) != c)
			sched_yield();   /* spinning starves whoever it waits for */
		uint64_t n = WSP_MIN(r->chunk, n_elem - c * r->chunk);
		wb_accumulate(acc + c * r->chunk, r->buf + s * r->chunk, WSP_DTYPE_BF16, n, 1);
		atomic_store_explicit(&r->state[s], FREE, memory_order_release);
	}
}

struct issuer {
	struct ring *r;
	cudaStream_t s;
	cudaEvent_t *ev;
};

static void *ring_issuer(void *arg)
{
	struct issuer *is = arg;
	struct ring *r = is->r;
	uint64_t issued = 0, landed = 0;
	while (landed < r->n_chunks) {
		while (issued < r->n_chunks && issued - landed < r->k &&
		       atomic_load_explicit(&r->state[issued % r->k], memory_order_acquire) == FREE) {
			uint64_t s = issued % r->k, n = WSP_MIN(r->chunk, n_elem - issued * r->chunk);
			atomic_store_explicit(&r->holds[s], issued, memory_order_relaxed);
			atomic_store_explicit(&r->state[s], IN_FLIGHT, memory_order_relaxed);
			CU(cudaMemcpyAsync(r->buf + s * r->chunk, dev_src + issued * r->chunk, n * 2,
					   cudaMemcpyDeviceToHost, is->s));
			CU(cudaEventRecord(is->ev[s], is->s));
			issued++;
		}
		if (landed < issued) {
			cudaError_t q = cudaEventQuery(is->ev[landed % r->k]);
			if (q == cudaSuccess) {
				atomic_store_explicit(&r->state[landed % r->k], LANDED,
						      memory_order_release);
				landed++;
				continue;
			}
			if (q != cudaErrorNotReady)
				CU(q);
		}
		sched_yield();
	}
	return NULL;
}

static double way_ring(cudaStream_t s, uint64_t ring_bytes, uint64_t chunk_bytes)
{
	struct ring r = { .chunk = chunk_bytes / 2 };
	r.k = WSP_MAX(ring_bytes / chunk_bytes, 2);
	r.n_chunks = (n_elem + r.chunk - 1) / r.chunk;
	r.state = calloc(r.k, sizeof(*r.state));
	r.holds = calloc(r.k, sizeof(*r.holds));
	cudaEvent_t *ev = calloc(r.k, sizeof(*ev));
	if (!r.state || !r.holds || !ev) {
		fprintf(stderr, "landing_bench: out of memory\n");
		exit(1);
	}
	CU(cudaHostAlloc((void **)&r.buf, r.k * chunk_bytes, cudaHostAllocDefault));
	memset(r.buf, 0, r.k * chunk_bytes);
	for (uint64_t k = 0; k < r.k; k++)
		CU(cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
	struct issuer is = { &r, s, ev };
	pthread_t tid[MAX_THREADS + 1];
	unsigned workers = n_threads, started = 0;
	double t0 = now_s();
	if (pthread_create(&tid[0], NULL, ring_issuer, &is) != 0) {
		fprintf(stderr, "landing_bench: cannot start the issuing thread\n");
		exit(1);
	}
	for (unsigned k = 0; k < workers; k++)
		if (pthread_create(&tid[1 + started], NULL, ring_worker, &r) == 0)
			started++;
	if (!started)
		ring_worker(&r);
	for (unsigned k = 0; k <= started; k++)
		pthread_join(tid[k], NULL);
	double rate = n_elem / (now_s() - t0);
	for (uint64_t k = 0; k < r.k; k++)
		CU(cudaEventDestroy(ev[k]));
	CU(cudaFreeHost(r.buf));
	free(ev);
	free(r.state);
	free(r.holds);
	return rate;
}

/* The library's ring, chunks of chunk_bytes, the gradients as tensors of
 * tensor_bytes in one call; its threads as many as the bench's. */
static double way_library(struct dev *d, uint64_t chunk_bytes, uint64_t tensor_bytes)
{
	wspi_ring_chunk_bytes = chunk_bytes;
	struct wspi_err e;
	wspi_err_init(&e);
	struct wb_ring *r;
	if (wb_ring_create(d, n_threads, &r, &e) < 0) {
		fprintf(stderr, "landing_bench: the library's ring: %s\n", e.msg);
		exit(1);
	}
	uint64_t per = tensor_bytes / 2, n_jobs = (n_elem + per - 1) / per;
	struct ring_job *jobs = calloc(n_jobs, sizeof(*jobs));
	if (!jobs) {
		fprintf(stderr, "landing_bench: out of memory\n");
		exit(1);
	}
	for (uint64_t j = 0; j < n_jobs; j++)
		jobs[j] = (struct ring_job){ acc + j * per, dev_src + j * per,
					     WSP_MIN(per, n_elem - j * per), WSP_DTYPE_BF16 };
	uint64_t end;
	double t0 = now_s();
	if (wb_ring_issue(r, jobs, (uint32_t)n_jobs, &end, &e) < 0 ||
	    wb_ring_wait(r, end, &e) < 0) {
		fprintf(stderr, "landing_bench: the library's ring: %s\n", e.msg);
		exit(1);
	}
	double rate = n_elem / (now_s() - t0);
	wb_ring_destroy(r);
	free(jobs);
	wspi_err_destroy(&e);
	return rate;
}

static void check(const char *way)
{
	/* The device's values are (i % 65536) as bf16 bits: spot checks. */
	for (uint64_t i = 0; i < n_elem; i += n_elem / 1021 + 1) {
		uint32_t u;
		memcpy(&u, &acc[i], 4);
		if (u != (uint32_t)(uint16_t)(i * 2654435761u >> 16) << 16) {
			fprintf(stderr, "landing_bench: %s: element %llu is wrong\n", way,
				(unsigned long long)i);
			exit(1);
		}
	}
	memset(acc, 0, n_elem * 4);
}

/* "a,b,c" into out (MAX_RINGS at most); how many. */
static unsigned parse_list(char *p, uint64_t *out)
{
	unsigned n = 0;
	while (*p && n < MAX_RINGS) {
		out[n++] = strtoull(p, &p, 0);
		if (*p == ',')
			p++;
		else if (*p)
			break;
	}
	return n;
}

int main(int argc, char **argv)
{
	uint64_t mib = 2048, chunk_kib = 512, layer_mib = 256;
	uint64_t rings[MAX_RINGS] = { 2, 8, 32, 512 }, libs[MAX_RINGS] = { 2048, 4096 };
	uint64_t tensor_mib = 64;
	unsigned n_rings = 4, n_libs = 2, threads = 0, reps = 3;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			mib = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--chunk") && i + 1 < argc)
			chunk_kib = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--layer") && i + 1 < argc)
			layer_mib = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--tensor") && i + 1 < argc)
			tensor_mib = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--rings") && i + 1 < argc)
			n_rings = parse_list(argv[++i], rings);
		else if (!strcmp(argv[i], "--lib-chunks") && i + 1 < argc)
			n_libs = parse_list(argv[++i], libs);
		else {
			fprintf(stderr, "usage: landing_bench [--mib N] [--threads T] [--chunk KIB] "
				"[--rings MIB,...] [--layer MIB] [--lib-chunks KIB,...] [--tensor MIB] "
				"[--reps R]\n");
			return 2;
		}
	}
	int n_dev = 0;
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
		printf("landing_bench: no GPU\n");
		return 77;
	}
	uint64_t cpus = wspi_cpu_count();
	n_threads = threads ? threads : (unsigned)(cpus > 2 ? cpus - 1 : 1);
	n_threads = WSP_MIN(n_threads, MAX_THREADS);
	n_elem = (mib << 20) / 2;
	int lib_ok = 1;
	for (unsigned k = 0; k < n_libs; k++)
		lib_ok &= libs[k] > 0 && (libs[k] << 10) % 64 == 0;
	if (!chunk_kib || (chunk_kib << 10) % 64 || !layer_mib || !n_elem || !tensor_mib ||
	    !lib_ok) {
		fprintf(stderr, "landing_bench: sizes must be positive, the chunk a multiple of 64 B\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	cudaStream_t s;
	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CU(cudaMalloc((void **)&dev_src, n_elem * 2));
	CU(cudaHostAlloc((void **)&landing, n_elem * 2, cudaHostAllocDefault));
	uint16_t *host = landing;
	for (uint64_t i = 0; i < n_elem; i++)
		host[i] = (uint16_t)(i * 2654435761u >> 16);
	CU(cudaMemcpy(dev_src, host, n_elem * 2, cudaMemcpyHostToDevice));
	if (!(acc = aligned_alloc(64, n_elem * 4))) {
		fprintf(stderr, "landing_bench: out of memory for %llu MiB of accumulators\n",
			(unsigned long long)(n_elem * 4 >> 20));
		return 1;
	}
	memset(acc, 0, n_elem * 4);
	struct dev *d;
	struct wspi_err e;
	wspi_err_init(&e);
	if (dev_open(0, &d, &e) < 0) {
		fprintf(stderr, "landing_bench: the library's device: %s\n", e.msg);
		return 1;
	}
	printf("landing_bench: %llu MiB of bf16 gradients, %u widening threads, chunks of %llu KiB\n",
	       (unsigned long long)mib, n_threads, (unsigned long long)chunk_kib);

	double d2h = 0, widen = 0, layers = 0, ring[MAX_RINGS] = { 0 }, lib[MAX_RINGS] = { 0 };
	for (unsigned rep = 0; rep < reps; rep++) {
		d2h = WSP_MAX(d2h, way_d2h(s));
		widen = WSP_MAX(widen, way_widen());
		check("widen");
		layers = WSP_MAX(layers, way_layers(s, layer_mib << 20));
		check("layers");
		for (unsigned k = 0; k < n_rings; k++) {
			ring[k] = WSP_MAX(ring[k], way_ring(s, rings[k] << 20, chunk_kib << 10));
			check("ring");
		}
		for (unsigned k = 0; k < n_libs; k++) {
			lib[k] = WSP_MAX(lib[k], way_library(d, libs[k] << 10, tensor_mib << 20));
			check("library");
		}
	}
	printf("d2h (the link)         %6.2f G elements/s (%.2f GB/s)\n", d2h / 1e9, d2h * 2 / 1e9);
	printf("widen (host memory)    %6.2f G elements/s (%.2f GB/s at 6 B) = %.2fx the link\n",
	       widen / 1e9, widen * 6 / 1e9, widen / d2h);
	printf("layers of %4llu MiB     %6.2f G elements/s = %.2fx the link\n",
	       (unsigned long long)layer_mib, layers / 1e9, layers / d2h);
	for (unsigned k = 0; k < n_rings; k++)
		printf("ring of %4llu MiB       %6.2f G elements/s = %.2fx the link\n",
		       (unsigned long long)rings[k], ring[k] / 1e9, ring[k] / d2h);
	for (unsigned k = 0; k < n_libs; k++)
		printf("library, %u x %4llu KiB %6.2f G elements/s = %.2fx the link\n", WB_RING_SLOTS,
		       (unsigned long long)libs[k], lib[k] / 1e9, lib[k] / d2h);
	dev_close(d);
	wspi_err_destroy(&e);
	CU(cudaFree(dev_src));
	CU(cudaFreeHost(landing));
	free(acc);
	return 0;
}
