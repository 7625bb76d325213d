/*
 * gpu_bench: the GPU tier against the machine's own ceiling, in one run.
 *
 *  0. ceiling: pinned host->GPU bandwidth, cudaMemcpyAsync of 64 MiB pieces
 *     from cudaHostRegister'ed memory (2 GiB, ~40 ms);
 *  1. host-resident streaming: a pack that fits in the host tier, many
 *     passes of acquire/release with no compute: GB/s moved into slots as a
 *     fraction of the ceiling (target >= 95%).  The link's rate moves by
 *     several percent from one second to the next on some machines, so the
 *     passes run in rounds (default 8 of 5 passes, ~0.1 s each) with the
 *     ceiling measured before and after each round; a round's fraction is
 *     against the better of its two, and the median round is the result;
 *  2. overlap: a compute kernel per layer that takes 1.2x the largest
 *     layer's transfer time: its raw bytes at the ceiling, or at the rate
 *     measured in 1 when that is faster (packed layers: the link carries
 *     fewer bytes, or none from a GPU tier); the
 *     fraction of run time the compute stream waited for weights, measured
 *     with events as the gaps between one layer's compute end and the next
 *     one's start (target <= 3%).
 *
 * Exits 77 without a CUDA device.  Usage:
 * With --codec exprans the pack's bf16 chunks are exponent-rANS coded: the
 * host tier keeps them packed, the link carries ~1.5x fewer bytes and the
 * GPU decodes them into the slots; "streaming" then counts raw weights
 * delivered, which can pass the ceiling.
 *
 * --gpu-packed SIZE adds a GPU tier of packed layers of that size: fills of
 * the layers it holds decode on the device without the link.
 *
 * --gpu-free SIZE first takes all but SIZE of the device's free memory (a
 * ballast allocation, as another program's tensors would), so a model
 * larger than the memory left can be shown streaming from the GPU tier:
 * the table then gives the model's raw size over the free memory.
 *
 *	gpu_bench [--layers N] [--hidden H] [--rounds R] [--passes P] [--slots S] [--codec C]
 *	          [--gpu-packed SIZE] [--gpu-free SIZE]
 *	          [--device D] [--dir DIR] [--keep]
 */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "cuda_bench.h"

#include "common/util.h"
#include "wspager.h"

int wsp_bench_launch_spin(const void *w, uint64_t spin_ns, unsigned long long *sink,
			  cudaStream_t s);

struct args {
	unsigned layers, hidden, rounds, passes, slots;   /* passes: a round's */
	int exprans;                 /* --codec exprans (else zstd): the GPU decodes, the link
	                                carries packed bytes */
	uint64_t gpu_packed;         /* --gpu-packed SIZE: a GPU tier of packed layers */
	uint64_t gpu_free;           /* --gpu-free SIZE: device memory left to the pager */
	int device, keep;
	const char *dir;
};

/* 0. The ceiling: 64 MiB pieces from page-locked memory, kept for the
 * whole run so that it can be measured between rounds. */
struct ceiling {
	void *host, *dev;
	cudaStream_t s;
	cudaEvent_t a, b;
};

#define CEILING_BYTES (512ull << 20)
#define CEILING_PIECE (64ull << 20)

static void ceiling_init(struct ceiling *c)
{
	c->host = mmap(NULL, CEILING_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (c->host == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	memset(c->host, 1, CEILING_BYTES);
	CU(cudaHostRegister(c->host, CEILING_BYTES, cudaHostRegisterDefault));
	CU(cudaMalloc(&c->dev, CEILING_BYTES));
	CU(cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking));
	CU(cudaEventCreate(&c->a));
	CU(cudaEventCreate(&c->b));
}

static void ceiling_copies(struct ceiling *c, int reps)
{
	for (int r = 0; r < reps; r++)
		for (uint64_t off = 0; off < CEILING_BYTES; off += CEILING_PIECE)
			CU(cudaMemcpyAsync((char *)c->dev + off, (char *)c->host + off, CEILING_PIECE,
					   cudaMemcpyHostToDevice, c->s));
}

/* GB/s of 4 x 512 MiB, after a warm-up pass. */
static double ceiling_measure(struct ceiling *c)
{
	const int reps = 4;
	ceiling_copies(c, 1);
	CU(cudaEventRecord(c->a, c->s));
	ceiling_copies(c, reps);
	CU(cudaEventRecord(c->b, c->s));
	CU(cudaEventSynchronize(c->b));
	return (double)CEILING_BYTES * reps / (ms_between(c->a, c->b) * 1e6);
}

static void ceiling_free(struct ceiling *c)
{
	CU(cudaEventDestroy(c->a));
	CU(cudaEventDestroy(c->b));
	CU(cudaStreamDestroy(c->s));
	CU(cudaFree(c->dev));
	CU(cudaHostUnregister(c->host));
	munmap(c->host, CEILING_BYTES);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Sorts v[0..n) and returns its median. */
static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void make_pack(const struct args *a, const char *dir, char *pack, size_t len)
{
	char model[700], err[512];
	struct wsp_generate_options g;
	struct wsp_convert_options c;
	snprintf(pack, len, "%s/pack-%s", dir, a->exprans ? "exprans" : "zstd");
	if (access(pack, F_OK) == 0)
		return;   /* --dir with a pack from an earlier run */
	snprintf(model, sizeof(model), "%s/model.safetensors", dir);
	wsp_generate_options_init(&g);
	g.layers = a->layers;
	g.hidden = a->hidden;
	g.intermediate = a->hidden * 11 / 4;
	g.vocab = 8192;
	fprintf(stderr, "generating %u layers of hidden %u ...\n", a->layers, a->hidden);
	int rc = wsp_generate(model, &g, err, sizeof(err));
	if (rc == 0) {
		wsp_convert_options_init(&c);
		c.codec = a->exprans ? WSP_CODEC_EXPRANS : WSP_CODEC_ZSTD;
		const char *in[] = { model };
		rc = wsp_convert(in, 1, pack, &c, err, sizeof(err));
	}
	if (rc < 0) {
		fprintf(stderr, "preparing the pack: %s\n", err);
		exit(1);
	}
	unlink(model);
}

static void pass(wsp_pager *pg, uint32_t n, cudaStream_t s, uint64_t spin_ns,
		 unsigned long long *sink, cudaEvent_t *ev_start, cudaEvent_t *ev_end)
{
	for (uint32_t l = 0; l < n; l++) {
		const struct wsp_layer *L;
		if (wsp_acquire(pg, l, s, &L) < 0) {
			fprintf(stderr, "acquire %u: %s\n", l, wsp_errmsg(pg));
			exit(1);
		}
		if (spin_ns) {
			CU(cudaEventRecord(ev_start[l], s));
			CU((cudaError_t)wsp_bench_launch_spin(L->data, spin_ns, sink, s));
			CU(cudaEventRecord(ev_end[l], s));
		}
		if (wsp_release(pg, l, s) < 0) {
			fprintf(stderr, "release %u: %s\n", l, wsp_errmsg(pg));
			exit(1);
		}
	}
}

static void log_notice(void *ctx, const char *msg)
{
	fprintf(stderr, "notice: %s\n", msg);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

int main(int argc, char **argv)
{
	struct args a = { .layers = 16, .hidden = 2048, .rounds = 8, .passes = 5, .slots = 3,
			  .device = 0 };
	static const struct option lo[] = {
		{ "layers", 1, 0, 'l' }, { "hidden", 1, 0, 'H' }, { "passes", 1, 0, 'p' },
		{ "slots", 1, 0, 's' },  { "device", 1, 0, 'd' }, { "dir", 1, 0, 'D' },
		{ "keep", 0, 0, 'k' },   { "codec", 1, 0, 'c' }, { "gpu-packed", 1, 0, 'g' },
		{ "gpu-free", 1, 0, 'f' }, { "rounds", 1, 0, 'r' }, { 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'l': a.layers = (unsigned)atoi(optarg); break;
		case 'H': a.hidden = (unsigned)atoi(optarg); break;
		case 'p': a.passes = (unsigned)atoi(optarg); break;
		case 'r': a.rounds = (unsigned)atoi(optarg); break;
		case 's': a.slots = (unsigned)atoi(optarg); break;
		case 'd': a.device = atoi(optarg); break;
		case 'D': a.dir = optarg; break;
		case 'k': a.keep = 1; break;
		case 'c':
			if (strcmp(optarg, "exprans") && strcmp(optarg, "zstd")) {
				fprintf(stderr, "--codec: zstd or exprans\n");
				return 2;
			}
			a.exprans = strcmp(optarg, "exprans") == 0;
			break;
		case 'g':
		case 'f':
			if (wsp_parse_size(optarg, c == 'g' ? &a.gpu_packed : &a.gpu_free) < 0) {
				fprintf(stderr, "--%s: a size, e.g. 2G\n",
					c == 'g' ? "gpu-packed" : "gpu-free");
				return 2;
			}
			break;
		default:
			fprintf(stderr, "usage: %s [--layers N] [--hidden H] [--rounds R] [--passes P] "
					"[--slots S] "
					"[--device D] [--dir DIR] [--keep] [--codec zstd|exprans] "
					"[--gpu-packed SIZE] [--gpu-free SIZE]\n", argv[0]);
			return 2;
		}
	}
	int ndev = 0;
	cudaError_t crc = cudaGetDeviceCount(&ndev);
	if (crc != cudaSuccess || ndev == 0) {
		fprintf(stderr, "skip: no CUDA device (%s)\n",
			crc != cudaSuccess ? cudaGetErrorString(crc) : "count 0");
		return 77;
	}
	if (a.rounds < 1 || a.passes < 2 || a.layers < 2 || a.slots < 2) {
		fprintf(stderr, "need at least 1 round, 2 passes, 2 layers and 2 slots\n");
		return 2;
	}
	CU(cudaSetDevice(a.device));

	char tmpl[600], pack[700];
	const char *dir = a.dir;
	if (!dir) {
		const char *t = getenv("TMPDIR");
		snprintf(tmpl, sizeof(tmpl), "%s/wsp-gpu-bench-XXXXXX", t && *t ? t : "/tmp");
		if (!mkdtemp(tmpl)) {
			perror("mkdtemp");
			return 1;
		}
		dir = tmpl;
	}
	make_pack(&a, dir, pack, sizeof(pack));

	/* Before the ballast: the ceiling's buffers stay for every round. */
	struct ceiling cl;
	ceiling_init(&cl);

	/* --gpu-free: what the device has beyond SIZE goes to a ballast. */
	void *ballast = NULL;
	size_t free_b = 0, total_b = 0;
	CU(cudaMemGetInfo(&free_b, &total_b));
	if (a.gpu_free) {
		if (a.gpu_free < free_b)
			CU(cudaMalloc(&ballast, free_b - a.gpu_free));
		CU(cudaMemGetInfo(&free_b, &total_b));
	}

	/* A host tier holding the whole model: after a warm pass every acquire
	 * is served from pinned host pages. */
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	wsp_options_init(&o);
	o.device = a.device;
	o.gpu_slots = a.slots;
	o.gpu_packed_bytes = a.gpu_packed;
	o.log = log_notice;
	/* What this measures is the GPU decoding (exprans) at the link: the
	 * pager's trial of raw copies would run in the middle of the rounds. */
	o.flags |= WSP_OPEN_GPU_DECODE;
	wsp_pack *pk;
	struct wsp_pack_summary sum;
	if (wsp_pack_open(pack, &pk, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	wsp_pack_summary(pk, &sum);
	wsp_pack_close(pk);
	o.host_cache_bytes = sum.raw_bytes + (uint64_t)sum.n_layers * o.page_bytes +
			     4 * sum.max_layer_raw_bytes;
	uint64_t t_open = wspi_now_ns();
	if (wsp_open(pack, &o, &pg, err, sizeof(err)) < 0) {
		fprintf(stderr, "wsp_open: %s\n", err);
		return 1;
	}
	uint32_t n = sum.n_layers;
	cudaStream_t s;
	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	unsigned long long *sink;
	CU(cudaMalloc((void **)&sink, sizeof(*sink)));
	const unsigned passes = a.rounds * a.passes;   /* step 2 runs as many */
	cudaEvent_t t0, t1, *ev = calloc((size_t)2 * n * passes, sizeof(*ev));
	double *round_ceiling = calloc(a.rounds + 1, sizeof(double));
	double *round_frac = calloc(a.rounds, sizeof(double));
	double *round_gbs = calloc(a.rounds, sizeof(double));
	if (!ev || !round_ceiling || !round_frac || !round_gbs)
		return 1;
	CU(cudaEventCreate(&t0));
	CU(cudaEventCreate(&t1));
	for (size_t i = 0; i < (size_t)2 * n * passes; i++)
		CU(cudaEventCreate(&ev[i]));

	for (int w = 0; w < 2; w++)   /* load from disk, then settle */
		pass(pg, n, s, 0, sink, NULL, NULL);
	CU(cudaStreamSynchronize(s));
	/* The steady state: the host tier pins itself in the background after
	 * the open, and every CUDA call waits for the driver while it does. */
	struct wsp_stats st;
	for (int k = 0; k < 6000; k++) {
		wsp_get_stats(pg, &st);
		if (st.pinned_bytes + o.page_bytes > st.host_cache_bytes)
			break;
		usleep(10000);
	}
	double pinned_s = (wspi_now_ns() - t_open) / 1e9;

	/* 1. Streaming with no compute, in rounds between ceilings.  Each
	 * round starts with the pipeline empty (the ceiling's sync); with 5
	 * passes of ~20 ms that costs a round well under 1%. */
	wsp_reset_stats(pg);
	double stream_ms = 0, host_s = 0;
	round_ceiling[0] = ceiling_measure(&cl);
	for (unsigned r = 0; r < a.rounds; r++) {
		uint64_t h0 = wspi_now_ns();
		CU(cudaEventRecord(t0, s));
		for (unsigned p = 0; p < a.passes; p++)
			pass(pg, n, s, 0, sink, NULL, NULL);
		CU(cudaEventRecord(t1, s));
		host_s += (wspi_now_ns() - h0) / 1e9;   /* enqueueing only */
		CU(cudaEventSynchronize(t1));
		double ms = ms_between(t0, t1);
		stream_ms += ms;
		round_ceiling[r + 1] = ceiling_measure(&cl);
		double best = WSP_MAX(round_ceiling[r], round_ceiling[r + 1]);
		round_gbs[r] = (double)a.passes * sum.raw_bytes / (ms * 1e6);
		round_frac[r] = round_gbs[r] / best;
	}
	double frac_median = median(round_frac, a.rounds), gbs_median = median(round_gbs, a.rounds);
	double ceiling = median(round_ceiling, a.rounds + 1);   /* for step 2 and the totals */
	double ceiling_lo = round_ceiling[0], ceiling_hi = round_ceiling[a.rounds];
	wsp_get_stats(pg, &st);
	/* Every acquire needs its layer in a slot (more layers than slots):
	 * each pass delivers the whole model.  With exprans the link carries
	 * fewer bytes (bytes_h2d) than are delivered. */
	uint64_t moved = st.bytes_h2d, delivered = (uint64_t)passes * sum.raw_bytes;
	double stream_gbs = delivered / (stream_ms * 1e6);
	double link_gbs = moved / (stream_ms * 1e6);
	double busy_gbs = st.h2d_ns ? moved / (double)st.h2d_ns : 0;
	double packed = delivered ? (double)moved / (double)delivered : 1;
	uint64_t s1_hits = st.gpu_hits, s1_host = st.host_hits, s1_miss = st.misses;

	/* 2. Overlap: compute per layer = 1.2 x its transfer, at the ceiling
	 * or at the faster rate 1 measured (packed layers). */
	uint64_t spin_ns = (uint64_t)(1.2 * (double)sum.max_layer_raw_bytes /
				      WSP_MAX(ceiling, stream_gbs));
	wsp_reset_stats(pg);
	for (unsigned p = 0; p < passes; p++)
		pass(pg, n, s, spin_ns, sink, ev + (size_t)2 * n * p, ev + (size_t)2 * n * p + n);
	CU(cudaStreamSynchronize(s));
	wsp_get_stats(pg, &st);
	double gaps = 0, total;
	cudaEvent_t first = ev[0], last = ev[(size_t)2 * n * (passes - 1) + n + n - 1];
	total = ms_between(first, last);
	for (unsigned p = 0; p < passes; p++)
		for (uint32_t l = 0; l < n; l++) {
			size_t i = (size_t)2 * n * p + l;
			if (p == 0 && l == 0)
				continue;
			cudaEvent_t prev_end = l ? ev[i - 1 + n] : ev[(size_t)2 * n * (p - 1) + n + n - 1];
			gaps += ms_between(prev_end, ev[i]);
		}

	char b1[32], b2[32], b3[32];
	printf("gpu_bench: %u layers (largest %s, total %s), %u slots, %u rounds of %u passes, %s "
	       "host cache\n", n, wsp_format_size(sum.max_layer_raw_bytes, b1, sizeof(b1)),
	       wsp_format_size(sum.raw_bytes, b2, sizeof(b2)), a.slots, a.rounds, a.passes,
	       wsp_format_size(st.host_cache_bytes, b3, sizeof(b3)));
	printf("| measurement | result | target |\n| --- | --- | --- |\n");
	printf("| host tier pinned (%s) | %.2f s after the open | |\n",
	       wsp_format_size(st.pinned_bytes, b1, sizeof(b1)), pinned_s);
	printf("| pinned host->GPU, 64 MiB cudaMemcpyAsync, 2 GiB before and after each round "
	       "(ceiling) | median %.1f GB/s (%.1f-%.1f) | |\n", ceiling, ceiling_lo, ceiling_hi);
	if (a.gpu_free)
		printf("| device memory free when the pager opened (a ballast holds the rest) | %s: "
		       "the model's raw weights are %.2fx that | |\n",
		       wsp_format_size(free_b, b1, sizeof(b1)), (double)sum.raw_bytes / (double)free_b);
	printf("| host-resident streaming, no compute (%s): rounds against the better ceiling "
	       "around each | median %.1f%% (%.1f-%.1f) | >= 95%% |\n",
	       a.exprans ? "exprans, GPU decode" : "zstd, host decode", 100.0 * frac_median,
	       100.0 * round_frac[0], 100.0 * round_frac[a.rounds - 1]);
	printf("| ... rounds' GB/s of raw weights | median %.1f (%.1f-%.1f) | |\n", gbs_median,
	       round_gbs[0], round_gbs[a.rounds - 1]);
	printf("| ... all rounds | %.1f GB/s of raw weights = %.1f%% of the median ceiling | |\n",
	       stream_gbs, 100.0 * stream_gbs / ceiling);
	printf("| ... bytes over the link | %.1f GB/s (%.3f of the raw bytes) = %.1f%% of the median "
	       "ceiling | |\n", link_gbs, packed, 100.0 * link_gbs / ceiling);
	if (a.gpu_packed)
		printf("| ... fills from the GPU tier of packed layers (%s held) | %" PRIu64 " of %" PRIu64
		       " | |\n", wsp_format_size(st.packed_gpu_bytes, b1, sizeof(b1)),
		       st.packed_gpu_hits, st.acquires);
	printf("| ... copy%s busy rate (bytes_h2d / h2d_ns) | %.1f GB/s | |\n",
	       a.exprans ? " and decode" : " engine", busy_gbs);
	printf("| ... acquires: gpu hits / host hits / misses | %" PRIu64 " / %" PRIu64 " / %" PRIu64
	       " | misses 0 |\n", s1_hits, s1_host, s1_miss);
	printf("| ... host time to enqueue %u passes | %.3f s (the GPU took %.3f s) | |\n",
	       passes, host_s, stream_ms / 1e3);
	printf("| overlap: compute %.2f ms per layer (1.2x transfer) | stream waited %.2f%% of %.1f ms"
	       " | <= 3%% |\n", spin_ns / 1e6, total > 0 ? 100.0 * gaps / total : 0.0, total);
	printf("| ... acquire_block_ns during overlap | %.3f ms | |\n", st.acquire_block_ns / 1e6);

	for (size_t i = 0; i < (size_t)2 * n * passes; i++)
		CU(cudaEventDestroy(ev[i]));
	free(ev);
	free(round_ceiling);
	free(round_frac);
	free(round_gbs);
	CU(cudaEventDestroy(t0));
	CU(cudaEventDestroy(t1));
	CU(cudaFree(sink));
	CU(cudaStreamDestroy(s));
	wsp_close(pg);
	CU(cudaFree(ballast));
	ceiling_free(&cl);
	if (!a.dir && !a.keep)
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	else
		fprintf(stderr, "pack kept in %s\n", pack);
	return 0;
}
