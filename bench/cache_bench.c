/*
 * cache_bench: the host tier against its own ceilings, in one run.
 *
 *  (a) raw O_DIRECT read bandwidth of the pack's shards (the I/O engine,
 *      large requests, several in flight; page cache dropped when root);
 *  (b) decode throughput of all workers from memory (every chunk of the
 *      pack decoded from an in-memory copy);
 *  (c) a cold read of the whole pack into the host tier (budget >= pack):
 *      GB/s of raw weights, as a fraction of
 *      min(disk GB/s x compression ratio, decode GB/s);
 *  (d) a warm pass: hits only, nothing read or decoded.
 *
 * Usage: cache_bench [--pack DIR] [--dir SCRATCH] [--layers N] [--hidden H]
 *        [--intermediate I] [--threads T] [--page BYTES] [--backend auto|uring|pread|mmap]
 *        [--rounds N]   (default 3; each phase is reported best-of-rounds)
 *        [--keep]       keep the generated pack (its path is printed)
 *        [--staging BYTES]  the host tier's read staging (default: its own)
 * Without --pack a synthetic Llama-shaped bf16 model is generated and
 * converted (zstd -1, byte grouping) in SCRATCH (default $TMPDIR or /var/tmp).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache/hcache.h"
#include "common/error.h"
#include "common/util.h"
#include "io/io.h"
#include "pack/chunk.h"
#include "pack/pack.h"

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

static void die(const char *what, int rc, const char *msg)
{
	fprintf(stderr, "cache_bench: %s: %s%s%s\n", what, wsp_strerror(rc), msg && *msg ? ": " : "",
		msg ? msg : "");
	exit(1);
}

static void drop_caches(void)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0)
		return;
	if (write(fd, "3\n", 2) != 2)
		fprintf(stderr, "cache_bench: could not drop the page cache\n");
	close(fd);
}

static void notice(void *ctx, const char *msg)
{
	fprintf(stderr, "notice: %s\n", msg);
}

/* ---- (a) raw read bandwidth ------------------------------------------- */

struct rd {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned in_flight;
	unsigned free_buf[16], n_free;
	struct io_req reqs[16];
	int rc;
};

static void rd_done(struct io_req *r, int result)
{
	struct rd *s = r->ctx;
	pthread_mutex_lock(&s->lock);
	if (result < 0 && !s->rc)
		s->rc = result;
	s->in_flight--;
	s->free_buf[s->n_free++] = (unsigned)(r - s->reqs);
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static double raw_read(struct wsp_pack_s *pk, enum wsp_io_backend be, uint64_t *bytes, const char **backend,
		       int *direct)
{
	enum { NBUF = 8 };
	const uint64_t req_bytes = 32ull << 20;
	uint32_t n = pk->m.hdr->n_shards;
	char **paths = calloc(n, sizeof(*paths));
	for (uint32_t i = 0; i < n; i++) {
		char buf[4096];
		pack_shard_path(pk, i, buf, sizeof(buf));
		paths[i] = strdup(buf);
	}
	struct io_config cfg;
	io_config_init(&cfg);
	cfg.backend = be;
	cfg.direct = 1;
	cfg.notice = notice;
	struct io_engine *io;
	struct wspi_err err;
	wspi_err_init(&err);
	int rc = io_engine_open(&cfg, (const char *const *)paths, n, &io, &err);
	if (rc < 0)
		die("io_engine_open", rc, err.msg);
	void *buf = mmap(NULL, NBUF * req_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		die("mmap", -errno, NULL);
	memset(buf, 0, NBUF * req_bytes);
	io_engine_register_buffer(io, buf, NBUF * req_bytes);
	struct wspi_err errs[NBUF];
	static struct rd st;
	memset(&st, 0, sizeof(st));
	pthread_mutex_init(&st.lock, NULL);
	pthread_cond_init(&st.cond, NULL);
	for (unsigned b = 0; b < NBUF; b++) {
		st.free_buf[st.n_free++] = b;
		wspi_err_init(&errs[b]);
	}
	*bytes = 0;
	drop_caches();
	uint64_t t0 = wspi_now_ns();
	for (uint32_t f = 0; f < n; f++) {
		uint64_t size = pk->m.shards[f].size;
		for (uint64_t off = 0; off < size; off += req_bytes) {
			pthread_mutex_lock(&st.lock);
			while (!st.n_free)
				pthread_cond_wait(&st.cond, &st.lock);
			unsigned b = st.free_buf[--st.n_free];
			st.in_flight++;
			pthread_mutex_unlock(&st.lock);
			st.reqs[b] = (struct io_req){
				.file = f, .offset = off, .length = WSP_MIN(req_bytes, size - off),
				.buf = (uint8_t *)buf + b * req_bytes, .done = rd_done, .ctx = &st,
				.err = &errs[b],
			};
			*bytes += st.reqs[b].length;
			rc = io_submit(io, &st.reqs[b]);
			if (rc < 0)
				die("io_submit", rc, errs[b].msg);
		}
	}
	pthread_mutex_lock(&st.lock);
	while (st.in_flight)
		pthread_cond_wait(&st.cond, &st.lock);
	pthread_mutex_unlock(&st.lock);
	uint64_t t1 = wspi_now_ns();
	if (st.rc < 0)
		die("read", st.rc, NULL);
	*backend = io_engine_backend(io);
	*direct = io_engine_direct(io);
	static char name[16];
	snprintf(name, sizeof(name), "%s", *backend);
	*backend = name;
	io_engine_close(io);
	munmap(buf, NBUF * req_bytes);
	for (uint32_t i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
	return (double)*bytes / secs(t1 - t0) / 1e9;
}

/* ---- (b) decode throughput from memory --------------------------------- */

struct dec_job {
	struct wsp_pack_s *pk;
	uint8_t **shard_data;
	uint64_t max_raw;
	uint64_t *next;   /* shared chunk cursor */
	pthread_mutex_t *lock;
	uint64_t raw, busy, cpu;
	int rc;
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *dec_worker(void *arg)
{
	struct dec_job *j = arg;
	const struct wspi_manifest *m = &j->pk->m;
	struct chunk_decoder *d;
	struct wspi_err err;
	wspi_err_init(&err);
	if ((j->rc = chunk_decoder_create(j->max_raw, &d)) < 0)
		return NULL;
	/* Large pages, like the cache arena, so that both decode into the same
	 * kind of memory. */
	size_t dlen = wspi_align_up(j->max_raw ? j->max_raw : 1, 2u << 20);
	uint64_t cpu0 = thread_cpu_ns();
	uint8_t *dst = mmap(NULL, dlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (dst == MAP_FAILED) {
		j->rc = -errno;
		chunk_decoder_free(d);
		return NULL;
	}
	if (!getenv("CB_NO_HUGE"))
		(void)madvise(dst, dlen, MADV_HUGEPAGE);
	memset(dst, 0, dlen);
	for (;;) {
		pthread_mutex_lock(j->lock);
		uint64_t t = (*j->next)++;
		pthread_mutex_unlock(j->lock);
		if (t >= m->hdr->n_tensors)
			break;
		const struct wspm_tensor *T = &m->tensors[t];
		const uint8_t *base = j->shard_data[m->layers[T->layer].shard];
		for (uint64_t k = 0; k < T->n_chunks; k++) {
			const struct wspm_chunk *c = &m->chunks[T->first_chunk + k];
			struct wspi_span sp = { dst, c->raw_bytes };
			uint64_t b0 = wspi_now_ns();
			int rc = chunk_decode(d, c, T->dtype, base + c->offset, &sp, 1, &err);
			j->busy += wspi_now_ns() - b0;
			if (rc < 0) {
				j->rc = rc;
				fprintf(stderr, "decode: %s\n", err.msg);
				break;
			}
			j->raw += c->raw_bytes;
		}
	}
	j->cpu = thread_cpu_ns() - cpu0;
	munmap(dst, dlen);
	chunk_decoder_free(d);
	wspi_err_destroy(&err);
	return NULL;
}

static uint8_t **load_shards(struct wsp_pack_s *pk)
{
	uint32_t n = pk->m.hdr->n_shards;
	uint8_t **data = calloc(n, sizeof(*data));
	for (uint32_t i = 0; i < n; i++) {
		char path[4096];
		pack_shard_path(pk, i, path, sizeof(path));
		uint64_t size = pk->m.shards[i].size;
		data[i] = malloc(size ? size : 1);
		int fd = open(path, O_RDONLY);
		if (fd < 0)
			die(path, -errno, NULL);
		for (uint64_t off = 0; off < size;) {
			ssize_t r = pread(fd, data[i] + off, size - off, (off_t)off);
			if (r <= 0)
				die(path, r < 0 ? -errno : -EIO, NULL);
			off += (uint64_t)r;
		}
		close(fd);
	}
	return data;
}

/* Returns the wall-clock rate; *cpu_rate gets raw bytes per CPU-second of
 * the workers times their number: what the threads would reach with the
 * cores to themselves (on a busy machine the wall rate is far lower). */
static double decode_rate(struct wsp_pack_s *pk, uint8_t **data, unsigned threads, uint64_t max_raw,
			  double *cpu_rate)
{
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	uint64_t next = 0;
	struct dec_job *jobs = calloc(threads, sizeof(*jobs));
	pthread_t *tid = calloc(threads, sizeof(*tid));
	uint64_t t0 = wspi_now_ns();
	for (unsigned i = 0; i < threads; i++) {
		jobs[i] = (struct dec_job){ pk, data, max_raw, &next, &lock, 0, 0, 0, 0 };
		pthread_create(&tid[i], NULL, dec_worker, &jobs[i]);
	}
	uint64_t raw = 0, busy = 0, cpu = 0;
	for (unsigned i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		if (jobs[i].rc < 0)
			die("decode", jobs[i].rc, NULL);
		raw += jobs[i].raw;
		busy += jobs[i].busy;
		cpu += jobs[i].cpu;
	}
	*cpu_rate = (double)raw / secs(cpu) / 1e9 * threads;
	uint64_t t1 = wspi_now_ns();
	if (getenv("CB_VERBOSE"))
		fprintf(stderr, "decode: wall %.3f s, busy %.3f s, cpu %.3f s over %u threads\n", secs(t1 - t0),
			secs(busy), secs(cpu), threads);
	free(jobs);
	free(tid);
	return (double)raw / secs(t1 - t0) / 1e9;
}

/* ---- (c, d) through the host tier -------------------------------------- */

/* Stands in for cudaHostRegister: fault the pages in, as pinning does. */
static int prefault(void *ctx, void *p, uint64_t len, struct wspi_err *err)
{
#ifdef MADV_POPULATE_WRITE
	if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
		return 0;
#endif
	memset(p, 0, len);
	return 0;
}

static int parse_backend(const char *s)
{
	if (!strcmp(s, "auto"))
		return WSP_IO_AUTO;
	if (!strcmp(s, "uring"))
		return WSP_IO_URING;
	if (!strcmp(s, "pread"))
		return WSP_IO_PREAD;
	if (!strcmp(s, "mmap"))
		return WSP_IO_MMAP;
	fprintf(stderr, "cache_bench: unknown backend %s\n", s);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *pack = NULL, *scratch = getenv("TMPDIR");
	unsigned layers = 12, hidden = 2048, inter = 5632, threads = 0, rounds = 3;
	int keep = 0;
	uint64_t page = 0, staging = 0;
	enum wsp_io_backend be = WSP_IO_AUTO;
	static const struct option opts[] = {
		{ "pack", required_argument, NULL, 'p' },
		{ "dir", required_argument, NULL, 'd' },
		{ "layers", required_argument, NULL, 'l' },
		{ "hidden", required_argument, NULL, 'H' },
		{ "intermediate", required_argument, NULL, 'I' },
		{ "threads", required_argument, NULL, 't' },
		{ "page", required_argument, NULL, 'P' },
		{ "backend", required_argument, NULL, 'b' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "keep", no_argument, NULL, 'k' },
		{ "staging", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "p:d:l:H:I:t:P:b:r:ks:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': pack = optarg; break;
		case 'd': scratch = optarg; break;
		case 'l': layers = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'H': hidden = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'I': inter = (unsigned)strtoul(optarg, NULL, 0); break;
		case 't': threads = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'P':
			if (wsp_parse_size(optarg, &page) < 0) {
				fprintf(stderr, "cache_bench: bad size %s\n", optarg);
				return 2;
			}
			break;
		case 'b': be = parse_backend(optarg); break;
		case 'r': rounds = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'k': keep = 1; break;
		case 's':
			if (wsp_parse_size(optarg, &staging) < 0) {
				fprintf(stderr, "cache_bench: bad size %s\n", optarg);
				return 2;
			}
			break;
		default:
			fprintf(stderr, "usage: %s [--pack DIR] [--dir SCRATCH] [--layers N] [--hidden H] "
					"[--intermediate I] [--threads T] [--page BYTES] "
					"[--backend auto|uring|pread|mmap] [--rounds N] [--keep] [--staging BYTES]\n", argv[0]);
			return c == 'h' ? 0 : 2;
		}
	}
	if (!threads)
		threads = wspi_cpu_count();
	if (!rounds)
		rounds = 1;
	char tmp[4096] = "", gen[4200], out[4200];
	char errbuf[512];
	if (!pack) {
		snprintf(tmp, sizeof(tmp), "%s/wsp-cache-bench-XXXXXX",
			 scratch && *scratch ? scratch : "/var/tmp");
		if (!mkdtemp(tmp))
			die("mkdtemp", -errno, tmp);
		snprintf(gen, sizeof(gen), "%s/model.safetensors", tmp);
		snprintf(out, sizeof(out), "%s/model.wsp", tmp);
		struct wsp_generate_options g;
		wsp_generate_options_init(&g);
		g.layers = layers;
		g.hidden = hidden;
		g.intermediate = inter;
		fprintf(stderr, "generating a %u-layer model (hidden %u, intermediate %u)...\n", layers,
			hidden, inter);
		int rc = wsp_generate(gen, &g, errbuf, sizeof(errbuf));
		if (rc < 0)
			die("wsp_generate", rc, errbuf);
		struct wsp_convert_options co;
		wsp_convert_options_init(&co);
		const char *in[1] = { gen };
		rc = wsp_convert(in, 1, out, &co, errbuf, sizeof(errbuf));
		if (rc < 0)
			die("wsp_convert", rc, errbuf);
		unlink(gen);
		pack = out;
	}

	struct wsp_pack_s *pk;
	struct wspi_err err;
	wspi_err_init(&err);
	int rc = pack_open(pack, &pk, &err);
	if (rc < 0)
		die("pack_open", rc, err.msg);
	const struct wspi_manifest *m = &pk->m;
	uint64_t raw = 0, stored = 0, max_raw = 0;
	for (uint64_t k = 0; k < m->hdr->n_chunks; k++) {
		raw += m->chunks[k].raw_bytes;
		stored += m->chunks[k].stored_bytes;
		max_raw = WSP_MAX(max_raw, m->chunks[k].raw_bytes);
	}
	uint64_t layout = 0;
	for (uint32_t l = 0; l < m->hdr->n_layers; l++)
		layout += wspi_align_up(m->layers[l].raw_bytes, page ? page : 2ull << 20);
	double ratio = (double)raw / (double)stored;
	char s1[32], s2[32];
	printf("pack: %s\n", pack);
	printf("  %u layers, %" PRIu64 " chunks, raw %s, stored %s, ratio %.3f\n", m->hdr->n_layers,
	       m->hdr->n_chunks, wsp_format_size(raw, s1, sizeof(s1)),
	       wsp_format_size(stored, s2, sizeof(s2)), ratio);
	printf("  %u cores, %u decode threads, staging %s, root: %s\n", wspi_cpu_count(), threads,
	       staging ? "as asked" : "default",
	       geteuid() == 0 ? "yes (page cache dropped before each cold read)" : "no");

	/* One round: (a), (b), (c), (d) in turn.  On a shared machine every
	 * phase is taken best-of-rounds, and each round's own fraction is shown
	 * too, so that load from other processes is visible. */
	uint8_t **data = load_shards(pk);
	struct hcache_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.budget_bytes = layout + (64ull << 20);
	cfg.page_bytes = page;
	cfg.staging_bytes = staging;
	cfg.decode_threads = threads;
	cfg.policy = WSP_POLICY_LRU;
	io_config_init(&cfg.io);
	cfg.io.backend = be;
	cfg.io.direct = 1;
	cfg.pin = prefault;   /* as cudaHostRegister would: pages faulted in up front */
	cfg.notice = notice;
	double disk = 0, dec = 0, dec_cpu = 0, cold_gbs = 0;
	uint64_t disk_bytes, cold_ns = 0, warm_ns = 0;
	const char *backend = "";
	int direct = 0, ok = 1;
	struct hcache_stats cold = { 0 }, warm = { 0 };
	for (unsigned r = 0; r < rounds; r++) {
		double a = raw_read(pk, be, &disk_bytes, &backend, &direct);
		double bcpu;
		double b = decode_rate(pk, data, threads, max_raw, &bcpu);
		struct hcache *hc;
		if ((rc = hcache_create(&cfg, pk, &hc, &err)) < 0)
			die("hcache_create", rc, err.msg);
		hcache_pin_wait(hc, NULL);
		drop_caches();
		uint64_t t0 = wspi_now_ns();
		for (uint32_t l = 0; l < m->hdr->n_layers; l++)
			hcache_request(hc, l, 1);   /* everything is ahead of need */
		for (uint32_t l = 0; l < m->hdr->n_layers; l++) {
			struct hcache_ref ref;
			if ((rc = hcache_get(hc, l, &ref, &err)) < 0)
				die("hcache_get", rc, err.msg);
			hcache_put(hc, &ref);
		}
		uint64_t t1 = wspi_now_ns();
		struct hcache_stats cs, ws;
		hcache_get_stats(hc, &cs);
		double cr = (double)raw / secs(t1 - t0) / 1e9;
		/* (d) warm pass */
		hcache_reset_stats(hc);
		uint64_t t2 = wspi_now_ns();
		for (uint32_t l = 0; l < m->hdr->n_layers; l++) {
			struct hcache_ref ref;
			if ((rc = hcache_get(hc, l, &ref, &err)) < 0)
				die("hcache_get", rc, err.msg);
			hcache_put(hc, &ref);
		}
		uint64_t t3 = wspi_now_ns();
		hcache_get_stats(hc, &ws);
		hcache_destroy(hc);
		ok &= ws.bytes_read == 0 && ws.bytes_decoded == 0 && ws.misses == 0 &&
		      ws.hits == m->hdr->n_layers;
		fprintf(stderr, "round %u: disk %.2f GB/s stored, decode %.2f GB/s, cold %.2f GB/s = %.0f%% of this round's ceiling %.2f\n",
			r + 1, a, b, cr, 100.0 * cr / WSP_MIN(a * ratio, b), WSP_MIN(a * ratio, b));
		disk = WSP_MAX(disk, a);
		dec = WSP_MAX(dec, b);
		dec_cpu = WSP_MAX(dec_cpu, bcpu);
		if (cr > cold_gbs) {
			cold_gbs = cr;
			cold = cs;
			cold_ns = t1 - t0;
		}
		warm = ws;
		warm_ns = t3 - t2;
	}
	for (uint32_t i = 0; i < m->hdr->n_shards; i++)
		free(data[i]);
	free(data);
	double ceiling = WSP_MIN(disk * ratio, dec);

	printf("\n| measurement (best of %u rounds) | result |\n| --- | --- |\n", rounds);
	printf("| (a) raw read of the shards, %s%s, 32 MiB requests x 8 | %.2f GB/s stored (%.2f GB/s of weights at ratio %.3f) |\n",
	       backend, direct ? " O_DIRECT" : " buffered", disk, disk * ratio, ratio);
	printf("| (b) decode from memory, %u threads | %.2f GB/s of weights (wall); %.2f GB/s from CPU time (per-core rate x %u) |\n",
	       threads, dec, dec_cpu, threads);
	printf("| ceiling min(a x ratio, b) | %.2f GB/s (with b from CPU time: %.2f GB/s) |\n", ceiling,
	       WSP_MIN(disk * ratio, dec_cpu));
	printf("| (c) cold read into the host tier | %.2f GB/s of weights = **%.0f%%** of the ceiling (%.3f s; reads in flight %.2f s, decode busy %.2f s over %u workers) |\n",
	       cold_gbs, 100.0 * cold_gbs / ceiling, secs(cold_ns), secs(cold.read_ns),
	       secs(cold.decode_ns), threads);
	printf("| (c) against the CPU-time ceiling | **%.0f%%** (differs from the line above only on a busy machine) |\n",
	       100.0 * cold_gbs / WSP_MIN(disk * ratio, dec_cpu));
	char s3[32];
	printf("| (c) counters | misses %" PRIu64 ", hits %" PRIu64 ", loads %" PRIu64 ", read %s, decoded %s, staging %s |\n",
	       cold.misses, cold.hits, cold.loads, wsp_format_size(cold.bytes_read, s1, sizeof(s1)),
	       wsp_format_size(cold.bytes_decoded, s2, sizeof(s2)),
	       wsp_format_size(cold.staging_bytes, s3, sizeof(s3)));
	printf("| (d) warm pass | %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64 " bytes read, %" PRIu64 " decoded, %.1f us per get |\n",
	       warm.hits, warm.misses, warm.bytes_read, warm.bytes_decoded,
	       (double)warm_ns / 1e3 / m->hdr->n_layers);
	pack_close(pk);
	wspi_err_destroy(&err);
	if (tmp[0] && !keep) {
		char cmd[4300];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
		if (system(cmd) != 0)
			fprintf(stderr, "cache_bench: could not remove %s\n", tmp);
	}
	return ok ? 0 : 1;
}
