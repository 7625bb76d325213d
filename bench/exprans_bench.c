/*
 * exprans_bench: the exponent-rANS codec (codec 2) against this machine's
 * ceilings, in one run, on SIZE bytes of bf16 of two kinds (Gaussian, std
 * 0.02; heavy-tailed: a Gaussian over a log-normal scale), in chunks of
 * CHUNK raw bytes (a pack's default), each coded twice: plain, then with
 * the top mantissa bit coded with the exponent (EXPRANS_TOP_BIT):
 *
 *  - ratio (raw / stored) and encode GB/s on all cores;
 *  - CPU decode GB/s of raw output on one thread (the C reference);
 *  - GPU decode GB/s of raw output, compressed chunks already on the GPU;
 *  - the ceiling: pinned host->GPU GB/s of the raw bytes;
 *  - streaming with GPU decode: compressed chunks in pinned host memory,
 *    copied in groups on one stream and decoded on another (two staging
 *    buffers), GB/s of raw weights delivered, and its ratio to the
 *    ceiling (the link carries compressed bytes, so it can pass 1.0).
 *
 * Then fp32 of five kinds (trained: Gaussian; upcast from bf16, exactly and
 * with 4 noisy low bits; with fp16's 10 mantissa bits; bf16 widened with a
 * random byte 1 and one random bit in byte 0), chunks of --f32-chunk bytes
 * coded as the converter codes them by default (the low halves coded where
 * that pays; the top bit only with WSP_CONVERT_SMALLEST, so not here):
 * ratio beside zstd's (with its byte transform), CPU decode on one thread,
 * GPU decode, against the same ceiling (--f32-size bytes of each).
 *
 * Every GPU output is compared with the original bytes; a mismatch or a
 * non-zero status is an error (exit 1).  Numbers only, no targets asserted.
 * Exits 77 without a CUDA device.
 *	exprans_bench [--size BYTES] [--chunk BYTES] [--group BYTES] [--reps N]
 *	              [--f32-size BYTES] [--f32-chunk BYTES]
 * (--group: one group size instead of 16, 64 and 256 MiB).
 */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "cuda_bench.h"

#include "common/util.h"
#include "pack/chunk.h"
#include "pack/exprans/exprans.h"
#include "pack/exprans/exprans_gpu.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- data: per-thread xorshift, Box-Muller --------------------------------- */

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static double gauss(uint64_t *s)
{
	double u1 = ((double)(next(s) >> 11) + 1.0) / 9007199254740993.0;
	double u2 = (double)(next(s) >> 11) / 9007199254740992.0;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint16_t bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);   /* round to nearest even */
}

struct job {
	int heavy;
	unsigned flags;       /* the layout: 0, or EXPRANS_TOP_BIT */
	uint16_t *raw;
	uint64_t n;           /* values in the whole buffer */
	uint64_t chunk;       /* values a chunk */
	uint8_t *enc;         /* chunk i at i * slot */
	uint64_t slot;
	uint64_t *len;
	unsigned t, nt;
};

static void *gen_part(void *arg)
{
	struct job *j = arg;
	uint64_t s = 0x9e3779b97f4a7c15ull * (j->t + 1) + (uint64_t)j->heavy;
	uint64_t a = j->n * j->t / j->nt, b = j->n * (j->t + 1) / j->nt;
	for (uint64_t i = a; i < b; i++) {
		double std = j->heavy ? 0.02 * exp(1.5 * gauss(&s)) : 0.02;
		j->raw[i] = bf16((float)(std * gauss(&s)));
	}
	return NULL;
}

static void *enc_part(void *arg)
{
	struct job *j = arg;
	uint64_t chunks = (j->n + j->chunk - 1) / j->chunk;
	for (uint64_t c = j->t; c < chunks; c += j->nt) {
		uint64_t n = WSP_MIN(j->chunk, j->n - c * j->chunk);
		int64_t len = exprans_encode(j->raw + c * j->chunk, n, 2, j->flags, j->enc + c * j->slot,
					     j->slot);
		if (len < 0) {
			fprintf(stderr, "encode failed: %lld\n", (long long)len);
			exit(1);
		}
		j->len[c] = (uint64_t)len;
	}
	return NULL;
}

static void run_threads(void *(*fn)(void *), struct job *proto, unsigned nt)
{
	pthread_t th[256];
	struct job js[256];
	for (unsigned t = 0; t < nt; t++) {
		js[t] = *proto;
		js[t].t = t;
		js[t].nt = nt;
		pthread_create(&th[t], NULL, fn, &js[t]);
	}
	for (unsigned t = 0; t < nt; t++)
		pthread_join(th[t], NULL);
}

static void check_output(const uint16_t *dout, const uint16_t *raw, uint64_t n, const uint32_t *dstatus,
			 uint64_t chunks, const char *what)
{
	uint16_t *back = malloc(n * 2);
	uint32_t *st = malloc(chunks * 4);
	if (!back || !st) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	CU(cudaMemcpy(back, dout, n * 2, cudaMemcpyDeviceToHost));
	CU(cudaMemcpy(st, dstatus, chunks * 4, cudaMemcpyDeviceToHost));
	for (uint64_t c = 0; c < chunks; c++)
		if (st[c]) {
			fprintf(stderr, "%s: chunk %llu: %s\n", what, (unsigned long long)c,
				exprans_gpu_status_text(st[c]));
			exit(1);
		}
	if (memcmp(back, raw, n * 2)) {
		fprintf(stderr, "%s: GPU output differs from the original bytes\n", what);
		exit(1);
	}
	free(back);
	free(st);
}

/* Streaming: groups of chunks (a layer each) copied compressed on one
 * stream into one of two staging buffers and decoded on another into
 * dout; with hcomp NULL, the raw bytes copied straight into dout in the
 * same groups instead (the like-for-like baseline).  Returns the best GB/s
 * of raw weights over `reps` passes. */
static double streaming(const struct job *j, const uint8_t *hcomp, const uint64_t *at,
			uint64_t chunks, uint16_t *dout, uint32_t *dstatus, uint64_t group_bytes,
			uint64_t chunk_bytes, unsigned reps)
{
	uint64_t size = j->n * 2;
	cudaEvent_t e0, e1;
	CU(cudaEventCreate(&e0));
	CU(cudaEventCreate(&e1));
	uint64_t per_group = WSP_MAX(1, group_bytes / chunk_bytes);
	uint64_t groups = (chunks + per_group - 1) / per_group, stage_cap = 0;
	for (uint64_t g = 0; g < groups; g++) {
		uint64_t a = g * per_group, b = WSP_MIN(chunks, a + per_group);
		stage_cap = WSP_MAX(stage_cap, at[b] - at[a]);
	}
	uint8_t *stage[2];
	struct exprans_gpu_job *sjobs[2], *hsjobs;
	CU(cudaMalloc((void **)&stage[0], stage_cap));
	CU(cudaMalloc((void **)&stage[1], stage_cap));
	CU(cudaMalloc((void **)&sjobs[0], per_group * sizeof(struct exprans_gpu_job)));
	CU(cudaMalloc((void **)&sjobs[1], per_group * sizeof(struct exprans_gpu_job)));
	CU(cudaMallocHost((void **)&hsjobs, groups * per_group * sizeof(struct exprans_gpu_job)));
	cudaStream_t copy, dec;
	cudaEvent_t copied[2], decoded[2];
	CU(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
	CU(cudaStreamCreateWithFlags(&dec, cudaStreamNonBlocking));
	for (int b = 0; b < 2; b++) {
		CU(cudaEventCreateWithFlags(&copied[b], cudaEventDisableTiming));
		CU(cudaEventCreateWithFlags(&decoded[b], cudaEventDisableTiming));
	}
	/* Each group's job table (pointers into its staging buffer), built
	 * once: a pager would keep them with the layer. */
	for (uint64_t g = 0; g < groups; g++) {
		uint64_t a = g * per_group, b = WSP_MIN(chunks, a + per_group);
		for (uint64_t c = a; c < b; c++)
			hsjobs[c] = (struct exprans_gpu_job){ .in_off = at[c] - at[a],
							      .out_off = c * chunk_bytes,
							      .in_bytes = j->len[c],
							      .n = WSP_MIN(j->chunk, j->n - c * j->chunk),
							      .width = 2, .flags = j->flags };
	}
	CU(cudaMemset(dout, 0, size));
	double best = 0;
	for (unsigned r = 0; r < reps + 1; r++) {   /* the first pass warms up */
		CU(cudaDeviceSynchronize());
		CU(cudaEventRecord(e0, copy));
		for (uint64_t g = 0; g < groups; g++) {
			unsigned s = g & 1;
			uint64_t a = g * per_group, b = WSP_MIN(chunks, a + per_group);
			if (!hcomp) {   /* the baseline: raw bytes, no decode */
				uint64_t off = a * chunk_bytes, len = (b - a) * chunk_bytes;
				CU(cudaMemcpyAsync((uint8_t *)dout + off, (const uint8_t *)j->raw + off,
						   len, cudaMemcpyHostToDevice, copy));
				continue;
			}
			if (g >= 2)
				CU(cudaStreamWaitEvent(copy, decoded[s], 0));
			CU(cudaMemcpyAsync(stage[s], hcomp + at[a], at[b] - at[a],
					   cudaMemcpyHostToDevice, copy));
			CU(cudaMemcpyAsync(sjobs[s], hsjobs + a, (b - a) * sizeof(struct exprans_gpu_job),
					   cudaMemcpyHostToDevice, copy));
			CU(cudaEventRecord(copied[s], copy));
			CU(cudaStreamWaitEvent(dec, copied[s], 0));
			if (exprans_gpu_decode(stage[s], (uint8_t *)dout, sjobs[s], (unsigned)(b - a),
					       j->flags, chunk_bytes, dstatus + a, dec)) {
				fprintf(stderr, "launch failed\n");
				exit(1);
			}
			CU(cudaEventRecord(decoded[s], dec));
		}
		if (hcomp)
			CU(cudaStreamWaitEvent(copy, decoded[(groups - 1) & 1], 0));
		CU(cudaEventRecord(e1, copy));
		CU(cudaEventSynchronize(e1));
		if (r)
			best = WSP_MAX(best, (double)size / (ms_between(e0, e1) * 1e-3) / 1e9);
	}

	for (int b = 0; b < 2; b++) {
		cudaEventDestroy(copied[b]);
		cudaEventDestroy(decoded[b]);
		cudaFree(stage[b]);
		cudaFree(sjobs[b]);
	}
	cudaStreamDestroy(copy);
	cudaStreamDestroy(dec);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFreeHost(hsjobs);
	return best;
}

static void bench_kind(int heavy, unsigned flags, uint64_t size, uint64_t chunk_bytes,
		       uint64_t group_bytes, unsigned reps, unsigned nt)
{
	const char *name = heavy ? "heavy-tailed" : "Gaussian";
	struct job j = { .heavy = heavy, .flags = flags, .n = size / 2, .chunk = chunk_bytes / 2 };
	uint64_t chunks = (j.n + j.chunk - 1) / j.chunk;
	j.slot = wspi_align_up(exprans_bound(j.chunk, 2, flags), 16);
	CU(cudaMallocHost((void **)&j.raw, size));
	j.enc = malloc(chunks * j.slot);
	j.len = calloc(chunks, sizeof(*j.len));
	if (!j.enc || !j.len) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	run_threads(gen_part, &j, nt);

	double t0 = now_s();
	run_threads(enc_part, &j, nt);
	double enc_s = now_s() - t0;
	/* The stored chunks packed (16-aligned) as a pack's shard holds them. */
	uint64_t *at = malloc((chunks + 1) * sizeof(*at)), stored = 0;
	at[0] = 0;
	for (uint64_t c = 0; c < chunks; c++) {
		stored += j.len[c];
		at[c + 1] = at[c] + wspi_align_up(j.len[c], 16);
	}
	uint8_t *hcomp;
	CU(cudaMallocHost((void **)&hcomp, at[chunks]));
	for (uint64_t c = 0; c < chunks; c++)
		memcpy(hcomp + at[c], j.enc + c * j.slot, j.len[c]);
	double ratio = (double)size / (double)stored;

	/* CPU reference decode, one thread, over up to 256 MiB. */
	uint64_t cpu_chunks = WSP_MIN(chunks, (256ull << 20) / chunk_bytes);
	uint16_t *cpu_out = malloc(chunk_bytes);
	t0 = now_s();
	for (uint64_t c = 0; c < cpu_chunks; c++) {
		uint64_t n = WSP_MIN(j.chunk, j.n - c * j.chunk);
		if (exprans_decode(hcomp + at[c], j.len[c], cpu_out, n, 2, flags, NULL) < 0) {
			fprintf(stderr, "CPU decode failed\n");
			exit(1);
		}
	}
	double cpu_gbs = (double)(cpu_chunks * chunk_bytes) / (now_s() - t0) / 1e9;
	free(cpu_out);

	/* GPU decode, compressed chunks already on the device. */
	uint8_t *dcomp;
	uint16_t *dout;
	uint32_t *dstatus;
	struct exprans_gpu_job *jobs = malloc(chunks * sizeof(*jobs)), *djobs;
	CU(cudaMalloc((void **)&dcomp, at[chunks]));
	CU(cudaMalloc((void **)&dout, size));
	CU(cudaMalloc((void **)&dstatus, chunks * 4));
	CU(cudaMalloc((void **)&djobs, chunks * sizeof(*jobs)));
	CU(cudaMemcpy(dcomp, hcomp, at[chunks], cudaMemcpyHostToDevice));
	for (uint64_t c = 0; c < chunks; c++)
		jobs[c] = (struct exprans_gpu_job){ .in_off = at[c], .out_off = c * chunk_bytes,
						    .in_bytes = j.len[c],
						    .n = WSP_MIN(j.chunk, j.n - c * j.chunk),
						    .width = 2, .flags = flags };
	CU(cudaMemcpy(djobs, jobs, chunks * sizeof(*jobs), cudaMemcpyHostToDevice));
	cudaEvent_t e0, e1;
	CU(cudaEventCreate(&e0));
	CU(cudaEventCreate(&e1));
	CU(cudaMemset(dout, 0, size));
	if (exprans_gpu_decode(dcomp, (uint8_t *)dout, djobs, (unsigned)chunks, flags, chunk_bytes,
			       dstatus, NULL)) {   /* warm-up, checked */
		fprintf(stderr, "launch failed\n");
		exit(1);
	}
	CU(cudaDeviceSynchronize());
	check_output(dout, j.raw, j.n, dstatus, chunks, "GPU decode");
	CU(cudaEventRecord(e0, NULL));
	for (unsigned r = 0; r < reps; r++)
		exprans_gpu_decode(dcomp, (uint8_t *)dout, djobs, (unsigned)chunks, flags, chunk_bytes,
				   dstatus, NULL);
	CU(cudaEventRecord(e1, NULL));
	CU(cudaEventSynchronize(e1));
	double gpu_gbs = (double)size * reps / (ms_between(e0, e1) * 1e-3) / 1e9;

	/* The ceiling: pinned raw bytes host -> GPU, the best of reps + 1. */
	double h2d_gbs = 0;
	for (unsigned r = 0; r < reps + 1; r++) {
		CU(cudaEventRecord(e0, NULL));
		CU(cudaMemcpyAsync(dout, j.raw, size, cudaMemcpyHostToDevice, NULL));
		CU(cudaEventRecord(e1, NULL));
		CU(cudaEventSynchronize(e1));
		h2d_gbs = WSP_MAX(h2d_gbs, (double)size / (ms_between(e0, e1) * 1e-3) / 1e9);
	}

	double stream_gbs[3], raw_gbs[3];
	uint64_t stream_group[3] = { 16ull << 20, 64ull << 20, 256ull << 20 };
	unsigned n_groups = group_bytes ? 1 : 3;
	if (group_bytes)
		stream_group[0] = group_bytes;
	for (unsigned q = 0; q < n_groups; q++) {
		raw_gbs[q] = streaming(&j, NULL, at, chunks, dout, dstatus, stream_group[q],
				       chunk_bytes, reps);
		stream_gbs[q] = streaming(&j, hcomp, at, chunks, dout, dstatus, stream_group[q],
					  chunk_bytes, reps);
	}
	check_output(dout, j.raw, j.n, dstatus, chunks, "streaming");

	printf("%s bf16%s, %.2f GiB in %llu chunks of %llu KiB:\n", name,
	       flags ? ", top mantissa bit coded" : "", (double)size / (1 << 30),
	       (unsigned long long)chunks, (unsigned long long)(chunk_bytes >> 10));
	printf("  ratio %.3f; encode %.2f GB/s on %u threads (%.3f a thread)\n", ratio,
	       (double)size / enc_s / 1e9, nt, (double)size / enc_s / 1e9 / nt);
	printf("  CPU decode, 1 thread: %.2f GB/s\n", cpu_gbs);
	printf("  GPU decode: %.1f GB/s of raw output\n", gpu_gbs);
	printf("  ceiling, pinned host->GPU of the raw bytes: %.1f GB/s\n", h2d_gbs);
	for (unsigned q = 0; q < n_groups; q++)
		printf("  groups of %llu MiB: raw over the link %.1f GB/s; compressed + GPU decode "
		       "%.1f GB/s of raw weights = %.2f x raw, %.2f x the ceiling\n",
		       (unsigned long long)(stream_group[q] >> 20), raw_gbs[q], stream_gbs[q],
		       stream_gbs[q] / raw_gbs[q], stream_gbs[q] / h2d_gbs);

	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(dcomp);
	cudaFree(dout);
	cudaFree(dstatus);
	cudaFree(djobs);
	cudaFreeHost(hcomp);
	cudaFreeHost(j.raw);
	free(jobs);
	free(at);
	free(j.enc);
	free(j.len);
}

/* --- fp32: trained, and upcast from narrower types ------------------------ */

static const char *const f32_kinds[] = { "trained (Gaussian)", "upcast from bf16",
					 "upcast from bf16, 4 noisy low bits",
					 "fp16's 10 mantissa bits",
					 "bf16 widened, random byte 1, byte 0 0 or 128" };
#define F32_KINDS 5u

static uint32_t f32_value(unsigned kind, uint64_t *s)
{
	float f = (float)(0.02 * gauss(s));
	uint32_t x;
	memcpy(&x, &f, 4);
	switch (kind) {
	case 1: return (uint32_t)bf16(f) << 16;
	case 2: return (uint32_t)bf16(f) << 16 | (uint32_t)(next(s) & 0xf);
	case 3: return x & 0xffffe000u;
	case 4: return (uint32_t)bf16(f) << 16 | (uint32_t)(next(s) & 0xff) << 8 |
		       (uint32_t)(next(s) & 1) << 7;
	default: return x;
	}
}

static void bench_f32(unsigned kind, uint64_t size, uint64_t chunk_bytes, unsigned reps,
		      double h2d_gbs)
{
	uint64_t n = size / 4, per = chunk_bytes / 4, chunks = (n + per - 1) / per, s = 42 + kind;
	uint64_t slot = wspi_align_up(chunk_encode_bound(chunk_bytes), 16);
	uint32_t *raw, *back = malloc(chunk_bytes);
	uint8_t *enc = malloc(chunks * slot), *zs = malloc(slot), *hcomp;
	uint64_t *at = malloc((chunks + 1) * sizeof(*at)), stored = 0, zstored = 0, coded = 0;
	uint64_t top = 0;
	unsigned layouts = 0;
	struct exprans_gpu_job *jobs = malloc(chunks * sizeof(*jobs)), *djobs;
	struct chunk_encoder *ce;
	struct wspm_chunk c, z;
	struct wspi_err err;
	wspi_err_init(&err);
	CU(cudaMallocHost((void **)&raw, size));
	if (!back || !enc || !zs || !at || !jobs || chunk_encoder_create(3, chunk_bytes, &ce)) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	for (uint64_t i = 0; i < n; i++)
		raw[i] = f32_value(kind, &s);
	at[0] = 0;
	for (uint64_t k = 0; k < chunks; k++) {
		uint64_t m = WSP_MIN(per, n - k * per);
		if (chunk_encode(ce, raw + k * per, m * 4, WSP_DTYPE_F32, WSP_CODEC_EXPRANS, 1,
				 enc + k * slot, &c, &err) < 0 || c.codec != WSP_CODEC_EXPRANS ||
		    chunk_encode(ce, raw + k * per, m * 4, WSP_DTYPE_F32, WSP_CODEC_ZSTD, 1, zs, &z,
				 &err) < 0) {
			fprintf(stderr, "f32 %s: encode failed: %s\n", f32_kinds[kind], err.msg);
			exit(1);
		}
		coded += !!(c.transform & EXPRANS_LOW_PLANES);
		top += !!(c.transform & EXPRANS_TOP_BIT);
		layouts |= c.transform;
		jobs[k] = (struct exprans_gpu_job){
			.in_off = at[k], .out_off = k * chunk_bytes, .in_bytes = c.stored_bytes, .n = m,
			.width = 4, .kind = EXPRANS_GPU_DECODE, .flags = c.transform };
		stored += c.stored_bytes;
		zstored += z.stored_bytes;
		at[k + 1] = at[k] + wspi_align_up(c.stored_bytes, 16);
	}
	CU(cudaMallocHost((void **)&hcomp, at[chunks]));
	for (uint64_t k = 0; k < chunks; k++)
		memcpy(hcomp + at[k], enc + k * slot, jobs[k].in_bytes);

	/* CPU decode, one thread, every chunk checked */
	double t0 = now_s();
	for (uint64_t k = 0; k < chunks; k++) {
		if (exprans_decode(hcomp + at[k], jobs[k].in_bytes, back, jobs[k].n, 4, jobs[k].flags,
				   &err) < 0 || memcmp(back, raw + k * per, jobs[k].n * 4)) {
			fprintf(stderr, "f32 %s: CPU decode of chunk %llu wrong\n", f32_kinds[kind],
				(unsigned long long)k);
			exit(1);
		}
	}
	double cpu_gbs = (double)size / (now_s() - t0) / 1e9;

	uint8_t *dcomp, *dout;
	uint32_t *dstatus;
	CU(cudaMalloc((void **)&dcomp, at[chunks]));
	CU(cudaMalloc((void **)&dout, size));
	CU(cudaMalloc((void **)&dstatus, chunks * 4));
	CU(cudaMalloc((void **)&djobs, chunks * sizeof(*jobs)));
	CU(cudaMemcpy(dcomp, hcomp, at[chunks], cudaMemcpyHostToDevice));
	CU(cudaMemcpy(djobs, jobs, chunks * sizeof(*jobs), cudaMemcpyHostToDevice));
	CU(cudaMemset(dout, 0, size));
	if (exprans_gpu_decode(dcomp, dout, djobs, (unsigned)chunks, layouts, chunk_bytes, dstatus,
			       NULL)) {
		fprintf(stderr, "launch failed\n");
		exit(1);
	}
	CU(cudaDeviceSynchronize());
	check_output((const uint16_t *)dout, (const uint16_t *)raw, n * 2, dstatus, chunks,
		     "f32 GPU decode");
	cudaEvent_t e0, e1;
	CU(cudaEventCreate(&e0));
	CU(cudaEventCreate(&e1));
	CU(cudaEventRecord(e0, NULL));
	for (unsigned r = 0; r < reps; r++)
		exprans_gpu_decode(dcomp, dout, djobs, (unsigned)chunks, layouts, chunk_bytes, dstatus,
				   NULL);
	CU(cudaEventRecord(e1, NULL));
	CU(cudaEventSynchronize(e1));
	double gpu_gbs = (double)size * reps / (ms_between(e0, e1) * 1e-3) / 1e9;
	printf("f32 %s, %.2f GiB in %llu KiB chunks: ratio %.3f (zstd with its transform %.3f; "
	       "low halves coded in %llu, top bit in %llu of %llu chunks); CPU decode, 1 thread: "
	       "%.2f GB/s; GPU "
	       "decode: %.1f GB/s of raw output = %.1f x the link's %.1f GB/s\n", f32_kinds[kind],
	       (double)size / (1 << 30), (unsigned long long)(chunk_bytes >> 10),
	       (double)size / (double)stored, (double)size / (double)zstored,
	       (unsigned long long)coded, (unsigned long long)top, (unsigned long long)chunks,
	       cpu_gbs, gpu_gbs,
	       gpu_gbs / h2d_gbs, h2d_gbs);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(dcomp);
	cudaFree(dout);
	cudaFree(dstatus);
	cudaFree(djobs);
	cudaFreeHost(hcomp);
	cudaFreeHost(raw);
	chunk_encoder_free(ce);
	wspi_err_destroy(&err);
	free(back), free(enc), free(zs), free(at), free(jobs);
}

/* The ceiling for the fp32 lines: pinned host->GPU of `size` bytes, best of 3. */
static double h2d_ceiling(uint64_t size)
{
	void *h, *d;
	double best = 0;
	cudaEvent_t e0, e1;
	CU(cudaMallocHost(&h, size));
	CU(cudaMalloc(&d, size));
	memset(h, 1, size);
	CU(cudaEventCreate(&e0));
	CU(cudaEventCreate(&e1));
	for (int r = 0; r < 3; r++) {
		CU(cudaEventRecord(e0, NULL));
		CU(cudaMemcpyAsync(d, h, size, cudaMemcpyHostToDevice, NULL));
		CU(cudaEventRecord(e1, NULL));
		CU(cudaEventSynchronize(e1));
		best = WSP_MAX(best, (double)size / (ms_between(e0, e1) * 1e-3) / 1e9);
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFreeHost(h);
	cudaFree(d);
	return best;
}

int main(int argc, char **argv)
{
	uint64_t size = 1ull << 30, chunk = 1ull << 20, group = 0, f32_size = 256ull << 20;
	uint64_t f32_chunk = 0;   /* 0: --chunk */
	unsigned reps = 5;
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' }, { "chunk", required_argument, NULL, 'c' },
		{ "group", required_argument, NULL, 'g' }, { "reps", required_argument, NULL, 'r' },
		{ "f32-size", required_argument, NULL, 'f' },
		{ "f32-chunk", required_argument, NULL, 'k' },
		{ NULL, 0, NULL, 0 },
	};
	int o;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 's': size = strtoull(optarg, NULL, 0); break;
		case 'c': chunk = strtoull(optarg, NULL, 0); break;
		case 'g': group = strtoull(optarg, NULL, 0); break;
		case 'r': reps = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'f': f32_size = strtoull(optarg, NULL, 0); break;
		case 'k': f32_chunk = strtoull(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: exprans_bench [--size B] [--chunk B] [--group B] [--reps N] "
				"[--f32-size B] [--f32-chunk B]\n");
			return 2;
		}
	}
	if (chunk < 2 || chunk % 2 || chunk / 2 > EXPRANS_GPU_MAX_VALUES || size < chunk || !reps) {
		fprintf(stderr, "exprans_bench: need an even chunk of at most %llu bytes, size >= chunk, "
			"reps >= 1\n", EXPRANS_GPU_MAX_VALUES * 2);
		return 2;
	}
	size -= size % chunk;
	int devs = 0;
	if (cudaGetDeviceCount(&devs) != cudaSuccess || devs == 0) {
		printf("exprans_bench: no CUDA device\n");
		return 77;
	}
	struct cudaDeviceProp prop;
	CU(cudaGetDeviceProperties(&prop, 0));
	long nt = sysconf(_SC_NPROCESSORS_ONLN);
	nt = nt < 1 ? 1 : nt > 256 ? 256 : nt;
	printf("exprans_bench on %s, %ld CPU threads\n", prop.name, nt);
	for (unsigned flags = 0; flags <= EXPRANS_TOP_BIT; flags += EXPRANS_TOP_BIT) {
		bench_kind(0, flags, size, chunk, group, reps, (unsigned)nt);
		bench_kind(1, flags, size, chunk, group, reps, (unsigned)nt);
	}
	f32_chunk = f32_chunk ? f32_chunk : chunk;
	if (f32_size && (f32_chunk % 4 || f32_chunk / 4 > EXPRANS_GPU_MAX_VALUES ||
			 f32_size < f32_chunk)) {
		fprintf(stderr, "exprans_bench: --f32-chunk must be a multiple of 4 of at most %llu "
			"bytes, and at most --f32-size (0: no fp32)\n", EXPRANS_GPU_MAX_VALUES * 4);
		return 2;
	}
	f32_size -= f32_size % f32_chunk;
	if (f32_size) {
		double link = h2d_ceiling(f32_size);
		for (unsigned k = 0; k < F32_KINDS; k++)
			bench_f32(k, f32_size, f32_chunk, reps, link);
	}
	return 0;
}
