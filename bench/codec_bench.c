/*
 * codec_bench: compression ratio and speed of the chunk codec on synthetic
 * Gaussian weights (std 0.02, like trained bf16 layers), through exactly the
 * chunk_encode / chunk_decode path the converter and host cache use.
 *
 *	bench/codec_bench [--size MiB] [--chunk KiB] [--levels 1,3,-1]
 *	                  [--threads N] [--dtype bf16|f16|f32] [--spans N]
 *	                  [--reps N] [--profile]
 *
 * For each level and transform (none, bytes, exp) it prints the ratio
 * raw/stored, compression GB/s on all threads, decode GB/s of raw output on
 * one thread and on all threads (decode + inverse transform + XXH3 verify),
 * and, as a ceiling, memcpy GB/s on one thread.  A last row does the same
 * for the exprans codec (the converter's default) on the same data, so the
 * two codecs' decode speeds compare within one run, and one more for exprans
 * with the top mantissa bit coded (`ex-top`: what `wspack convert
 * --smallest` writes).  Numbers only; no assertion.
 */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"   /* the XXH3 the library checks chunks with */
#include <zstd.h>

#include "common/util.h"
#include "pack/chunk.h"
#include "pack/transform.h"

struct job {
	const uint8_t *raw;
	uint8_t *stored;           /* one slot of chunk_encode_bound(chunk) per chunk */
	uint8_t *out;
	struct wspm_chunk *chunks;
	uint64_t total, chunk, slot;
	size_t n_chunks;
	unsigned spans;            /* destination segments per chunk (decode) */
	int level, dtype, failed;
	enum wsp_codec codec;      /* zstd (with xform) or exprans */
	int top_bit;               /* exprans: code the top mantissa bit (--smallest) */
	enum wspm_transform xform;
	atomic_size_t next;
	atomic_uint_least64_t cpu_ns;   /* CPU time of all workers of the last run */
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Box-Muller, fixed seed: N(0, 0.02) rounded to nearest-even bf16/f16 or f32. */
static void gen(uint8_t *p, uint64_t bytes, int dtype)
{
	unsigned es = wsp_dtype_bits(dtype) / 8;
	uint64_t i;

	for (i = 0; i + es <= bytes; i += es) {
		double u1 = ((double)(rng() >> 11) + 1.0) / 9007199254740993.0;
		double u2 = (double)(rng() >> 11) / 9007199254740992.0;
		float f = (float)(0.02 * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
		uint32_t x;
		memcpy(&x, &f, 4);
		if (dtype == WSP_DTYPE_BF16) {
			uint16_t h = (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
			memcpy(p + i, &h, 2);
		} else if (dtype == WSP_DTYPE_F16) {
			_Float16 h = (_Float16)f;
			memcpy(p + i, &h, 2);
		} else {
			memcpy(p + i, &x, 4);
		}
	}
}

static void *encode_worker(void *arg)
{
	struct job *j = arg;
	struct chunk_encoder *e;
	struct wspi_err err;
	size_t k;

	uint64_t c0 = thread_cpu_ns();

	wspi_err_init(&err);
	if (chunk_encoder_create(j->level, j->chunk, &e) < 0) {
		j->failed = 1;
		return NULL;
	}
	chunk_encoder_set_top_bit(e, j->top_bit);
	while ((k = atomic_fetch_add(&j->next, 1)) < j->n_chunks) {
		uint64_t off = k * j->chunk, n = WSP_MIN(j->chunk, j->total - off);
		if (chunk_encode_xform(e, j->raw + off, n, j->dtype, j->codec, j->xform,
				 j->stored + k * j->slot, &j->chunks[k], &err) < 0) {
			fprintf(stderr, "encode: %s\n", err.msg);
			j->failed = 1;
		}
	}
	chunk_encoder_free(e);
	wspi_err_destroy(&err);
	atomic_fetch_add(&j->cpu_ns, thread_cpu_ns() - c0);
	return NULL;
}

static void *decode_worker(void *arg)
{
	struct job *j = arg;
	struct chunk_decoder *d;
	struct wspi_err err;
	struct wspi_span sp[64];
	size_t k;

	uint64_t c0 = thread_cpu_ns();

	wspi_err_init(&err);
	if (chunk_decoder_create(j->chunk, &d) < 0) {
		j->failed = 1;
		return NULL;
	}
	while ((k = atomic_fetch_add(&j->next, 1)) < j->n_chunks) {
		const struct wspm_chunk *c = &j->chunks[k];
		uint64_t off = k * j->chunk, piece = c->raw_bytes / j->spans / 256 * 256, at = 0;
		unsigned s;
		for (s = 0; s < j->spans; s++) {
			sp[s].ptr = j->out + off + at;
			sp[s].len = s + 1 < j->spans ? piece : c->raw_bytes - at;
			at += sp[s].len;
		}
		if (chunk_decode(d, c, j->dtype, j->stored + k * j->slot, sp, j->spans, &err) < 0) {
			fprintf(stderr, "decode chunk %zu: %s\n", k, err.msg);
			j->failed = 1;
		}
	}
	chunk_decoder_free(d);
	wspi_err_destroy(&err);
	atomic_fetch_add(&j->cpu_ns, thread_cpu_ns() - c0);
	return NULL;
}

/* Run fn on `threads` threads over all chunks; seconds elapsed. */
static double run(struct job *j, void *(*fn)(void *), unsigned threads)
{
	pthread_t t[256];
	uint64_t t0 = wspi_now_ns();
	unsigned i;

	atomic_store(&j->next, 0);
	atomic_store(&j->cpu_ns, 0);
	for (i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, fn, j) != 0)
			exit(1);
	for (i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	if (j->failed)
		exit(1);
	return (double)(wspi_now_ns() - t0) / 1e9;
}

/* Where one thread's decode time goes, stage by stage (per CPU-second), for
 * the last configuration encoded: zstd alone, inverse transform alone, XXH3
 * alone, each over the whole data set (so out of cache, unlike the fused
 * decode path). */
static void profile(struct job *j, int reps)
{
	double tz = 1e30, tx = 1e30, th = 1e30;
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	uint8_t *planes = aligned_alloc(4096, wspi_align_up(j->total, 4096));
	volatile uint64_t sink = 0;
	int r;

	if (!dc || !planes)
		exit(1);
	for (r = 0; r < reps; r++) {
		uint64_t t0 = thread_cpu_ns(), t1, t2, t3;
		size_t k;
		for (k = 0; k < j->n_chunks; k++) {
			const struct wspm_chunk *c = &j->chunks[k];
			if (c->codec == WSP_CODEC_ZSTD)
				ZSTD_decompressDCtx(dc, planes + k * j->chunk, c->raw_bytes,
						    j->stored + k * j->slot, c->stored_bytes);
			else
				memcpy(planes + k * j->chunk, j->stored + k * j->slot, c->raw_bytes);
		}
		t1 = thread_cpu_ns();
		for (k = 0; k < j->n_chunks; k++) {
			const struct wspm_chunk *c = &j->chunks[k];
			int es = xform_elem_bytes(c->transform, j->dtype);
			xform_inverse_range(c->transform, (unsigned)es, planes + k * j->chunk,
					    c->raw_bytes, 0, c->raw_bytes, j->out + k * j->chunk);
		}
		t2 = thread_cpu_ns();
		for (k = 0; k < j->n_chunks; k++)
			sink += wspi_xxh3(j->out + k * j->chunk, j->chunks[k].raw_bytes);
		t3 = thread_cpu_ns();
		tz = WSP_MIN(tz, (double)(t1 - t0) / 1e9);
		tx = WSP_MIN(tx, (double)(t2 - t1) / 1e9);
		th = WSP_MIN(th, (double)(t3 - t2) / 1e9);
	}
	printf("               stages, per CPU-second: zstd %.2f GB/s, inverse transform %.2f GB/s, "
	       "XXH3 %.2f GB/s\n", (double)j->total / tz / 1e9, (double)j->total / tx / 1e9,
	       (double)j->total / th / 1e9);
	ZSTD_freeDCtx(dc);
	free(planes);
}

/* Best wall time of `reps` runs; *cpu (may be NULL) gets the best CPU
 * time summed over the workers, which other processes on a busy machine
 * do not inflate the way they inflate wall time. */
static double best_of(struct job *j, void *(*fn)(void *), unsigned threads, int reps,
		      double *cpu)
{
	double best = 1e30, best_cpu = 1e30;
	int r;

	for (r = 0; r < reps; r++) {
		best = WSP_MIN(best, run(j, fn, threads));
		best_cpu = WSP_MIN(best_cpu, (double)atomic_load(&j->cpu_ns) / 1e9);
	}
	if (cpu)
		*cpu = best_cpu;
	return best;
}

/* Encode with j's codec, decode on one thread and on all, check the bytes
 * and print the row. */
static int measure(struct job *j, const uint8_t *raw, unsigned threads, int reps,
		   const char *name, int prof)
{
	uint64_t stored = 0, size = j->total;
	double ce, d1, dn, cc, dc;
	size_t k;

	ce = best_of(j, encode_worker, threads, 1, &cc);
	for (k = 0; k < j->n_chunks; k++)
		stored += j->chunks[k].stored_bytes;
	d1 = best_of(j, decode_worker, 1, reps, &dc);
	dn = best_of(j, decode_worker, threads, reps, NULL);
	if (memcmp(j->out, raw, size) != 0) {
		fprintf(stderr, "decoded bytes differ (%s)\n", name);
		return -1;
	}
	memset(j->out, 0, size);
	if (j->codec == WSP_CODEC_ZSTD)
		printf("%6d", j->level);
	else
		printf("%6s", "-");
	printf(" %-7s %7.3f %8.2f %8.2f %8.2f %8.2f %8.2f\n", name,
	       (double)size / (double)stored, (double)size / ce / 1e9, (double)size / cc / 1e9,
	       (double)size / d1 / 1e9, (double)size / dc / 1e9, (double)size / dn / 1e9);
	if (prof)
		profile(j, reps);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' }, { "chunk", required_argument, NULL, 'c' },
		{ "levels", required_argument, NULL, 'l' }, { "threads", required_argument, NULL, 't' },
		{ "dtype", required_argument, NULL, 'd' }, { "spans", required_argument, NULL, 'p' },
		{ "reps", required_argument, NULL, 'r' }, { "profile", no_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t size = 256ull << 20, chunk = 4ull << 20;
	const char *levels = "1,3,-1";
	unsigned threads = wspi_cpu_count(), spans = 1;
	int dtype = WSP_DTYPE_BF16, reps = 3, prof = 0, o;
	struct job j;
	char *lv, *tok, *save;
	uint8_t *raw, *copy;
	double secs, csecs;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 's': size = strtoull(optarg, NULL, 0) << 20; break;
		case 'c': chunk = strtoull(optarg, NULL, 0) << 10; break;
		case 'l': levels = optarg; break;
		case 't': threads = (unsigned)atoi(optarg); break;
		case 'p': spans = (unsigned)atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'P': prof = 1; break;
		case 'd':
			dtype = wsp_dtype_from_name(!strcmp(optarg, "bf16") ? "BF16" :
						    !strcmp(optarg, "f16") ? "F16" : "F32");
			break;
		default:
			fprintf(stderr, "usage: %s [--size MiB] [--chunk KiB] [--levels 1,3] "
				"[--threads N] [--dtype bf16|f16|f32] [--spans N] [--reps N] [--profile]\n", argv[0]);
			return 2;
		}
	}
	if (!size || !chunk || chunk > UINT32_MAX || !threads || threads > 256 || !spans ||
	    spans > 64 || reps < 1) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}

	memset(&j, 0, sizeof(j));
	j.total = size;
	j.chunk = chunk;
	j.dtype = dtype;
	j.spans = spans;
	j.n_chunks = (size_t)((size + chunk - 1) / chunk);
	j.slot = wspi_align_up(chunk_encode_bound(chunk), 64);
	raw = aligned_alloc(4096, size);
	copy = aligned_alloc(4096, size);
	j.out = aligned_alloc(4096, size);
	j.stored = aligned_alloc(4096, wspi_align_up(j.slot * j.n_chunks, 4096));
	j.chunks = calloc(j.n_chunks, sizeof(*j.chunks));
	if (!raw || !copy || !j.out || !j.stored || !j.chunks)
		return 1;
	gen(raw, size, dtype);
	j.raw = raw;
	memset(j.out, 0, size);
	memset(copy, 0, size);

	secs = csecs = 1e30;
	for (o = 0; o < reps; o++) {
		uint64_t t0 = wspi_now_ns(), c0 = thread_cpu_ns();
		memcpy(copy, raw, size);
		secs = WSP_MIN(secs, (double)(wspi_now_ns() - t0) / 1e9);
		csecs = WSP_MIN(csecs, (double)(thread_cpu_ns() - c0) / 1e9);
	}
	printf("data: %s N(0, 0.02), %llu MiB, chunk %llu KiB, %u threads, %u segment(s) per chunk\n",
	       wsp_dtype_name(dtype), (unsigned long long)(size >> 20),
	       (unsigned long long)(chunk >> 10), threads, spans);
	printf("memcpy, 1 thread: %.2f GB/s (%.2f per CPU-second)\n\n", (double)size / secs / 1e9,
	       (double)size / csecs / 1e9);
	printf("GB/s of raw bytes; compN/decN: wall time on all threads; dec1: wall time on one\n"
	       "thread; comp1c/dec1c: per CPU-second of the workers (robust on a busy machine)\n\n");
	printf("%6s %-7s %7s %8s %8s %8s %8s %8s\n", "level", "xform", "ratio", "compN",
	       "comp1c", "dec1", "dec1c", "decN");

	lv = strdup(levels);
	j.codec = WSP_CODEC_ZSTD;
	for (tok = strtok_r(lv, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		static const char *names[] = { "none", "bytes", "exp" };
		static const enum wspm_transform xf[] = { WSPM_XFORM_NONE, WSPM_XFORM_BYTES,
							  WSPM_XFORM_EXP_BF16 };
		int x;
		for (x = 0; x < 3; x++) {
			j.level = atoi(tok);
			j.xform = xf[x];
			if (x == 2 && dtype == WSP_DTYPE_F32)
				j.xform = WSPM_XFORM_EXP_F32;
			if (x == 2 && dtype == WSP_DTYPE_F16)
				continue;
			if (measure(&j, raw, threads, reps, names[x], prof) < 0)
				return 1;
		}
	}
	free(lv);
	/* exprans has no level or transform: one row */
	j.codec = WSP_CODEC_EXPRANS;
	j.xform = WSPM_XFORM_NONE;
	if (measure(&j, raw, threads, reps, "exprans", 0) < 0)
		return 1;
	j.top_bit = 1;
	if (dtype != WSP_DTYPE_F16 && measure(&j, raw, threads, reps, "ex-top", 0) < 0)
		return 1;
	free(raw);
	free(copy);
	free(j.out);
	free(j.stored);
	free(j.chunks);
	return 0;
}
