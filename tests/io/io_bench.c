/* io_bench: read a file (1 GiB by default, created if missing) with each I/O
 * backend, direct and buffered, in layer-sized requests kept in flight from
 * several submitter threads as the host cache's loader does, after dropping
 * the page cache when root.  Prints GB/s.  Not a test: no assertions on
 * time; it only fails when a read fails or returns wrong bytes.
 *
 *   io_bench [--file PATH] [--size MiB] [--request MiB] [--inflight N]
 *            [--depth N] [--piece KiB] [--threads N] [--register] [--warm]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "common/util.h"
#include "iotest.h"

static uint64_t opt_size = 1024ull << 20, opt_req = 64ull << 20, opt_piece = 1u << 20;
static unsigned opt_inflight = 4, opt_depth = 32, opt_threads = 4;
static int opt_register, opt_warm;

struct submitter {
	struct io_engine *io;
	char *buf;                   /* opt_inflight/2 request buffers */
	atomic_ullong *next;         /* next offset to read, shared */
	int failed;
};

struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int finished, result;
};

static void req_done(struct io_req *r, int result)
{
	struct waiter *w = r->ctx;
	pthread_mutex_lock(&w->lock);
	w->finished = 1;
	w->result = result;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->lock);
}

/* Two requests per submitter in flight: while one completes, the other
 * keeps the queue full. */
static void *submit_loop(void *arg)
{
	struct submitter *s = arg;
	struct io_req r[2];
	struct waiter w[2];
	struct wspi_err err;
	int busy[2] = { 0, 0 };

	wspi_err_init(&err);
	for (int i = 0; i < 2; i++) {
		pthread_mutex_init(&w[i].lock, NULL);
		pthread_cond_init(&w[i].cv, NULL);
	}
	for (int i = 0;; i ^= 1) {
		if (busy[i]) {
			pthread_mutex_lock(&w[i].lock);
			while (!w[i].finished)
				pthread_cond_wait(&w[i].cv, &w[i].lock);
			pthread_mutex_unlock(&w[i].lock);
			busy[i] = 0;
			if (w[i].result) {
				fprintf(stderr, "read failed: %s\n", err.msg);
				s->failed = 1;
			}
			/* spot-check the bytes: one word per MiB */
			for (uint64_t at = 0; at + 8 <= r[i].length; at += 1 << 20)
				if (t_check_words((char *)r[i].buf + at, r[i].offset + at, 8) != UINT64_MAX)
					s->failed = 1;
		}
		uint64_t off = atomic_fetch_add(s->next, opt_req);
		if (off >= opt_size) {
			if (busy[i ^ 1])
				continue;
			break;
		}
		w[i].finished = 0;
		r[i] = (struct io_req){ .file = 0, .offset = off,
					.length = WSP_MIN(opt_req, opt_size - off),
					.buf = s->buf + (uint64_t)i * io_span(opt_req),
					.done = req_done, .ctx = &w[i], .err = &err };
		if (io_submit(s->io, &r[i]) < 0) {
			fprintf(stderr, "io_submit: %s\n", err.msg);
			s->failed = 1;
			break;
		}
		busy[i] = 1;
	}
	wspi_err_destroy(&err);
	return NULL;
}

static void drop_caches(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	/* failure (not root) is ignored: the numbers are then warm ones */
	if (fd >= 0) {
		sync();
		ssize_t n = write(fd, "3\n", 2);
		(void)n;
		close(fd);
	}
}

static int bench(const char *path, enum wsp_io_backend be, int direct)
{
	struct io_config cfg;
	struct io_engine *io;
	struct wspi_err err;
	const char *paths[1] = { path };
	unsigned n_sub = opt_inflight / 2 ? opt_inflight / 2 : 1;
	struct submitter subs[64];
	pthread_t th[64];
	atomic_ullong next = 0;
	char *arena;
	uint64_t arena_len = (uint64_t)n_sub * 2 * io_span(opt_req);
	int failed = 0;

	wspi_err_init(&err);
	io_config_init(&cfg);
	cfg.backend = be;
	cfg.direct = direct;
	cfg.queue_depth = opt_depth;
	cfg.threads = opt_threads;
	cfg.max_request = opt_piece;
	if (io_engine_open(&cfg, paths, 1, &io, &err) < 0) {
		printf("%-6s %-8s  unavailable: %s\n", t_backend_names[be], direct ? "direct" : "buffered",
		       err.msg);
		return 0;
	}
	arena = t_aligned(arena_len);
	memset(arena, 0, arena_len);   /* fault the pages in outside the timing */
	if (opt_register)
		io_engine_register_buffer(io, arena, arena_len);
	if (!opt_warm)
		drop_caches();

	uint64_t t0 = wspi_now_ns();
	for (unsigned i = 0; i < n_sub; i++) {
		subs[i] = (struct submitter){ .io = io, .buf = arena + (uint64_t)i * 2 * io_span(opt_req),
					      .next = &next };
		pthread_create(&th[i], NULL, submit_loop, &subs[i]);
	}
	for (unsigned i = 0; i < n_sub; i++) {
		pthread_join(th[i], NULL);
		failed |= subs[i].failed;
	}
	double s = (double)(wspi_now_ns() - t0) / 1e9;
	printf("%-6s %-8s %s  %6.2f GB/s  (%.3f s)\n", io_engine_backend(io),
	       direct ? "direct" : "buffered", io_engine_direct(io) ? "bypass" : "cached",
	       (double)opt_size / s / 1e9, s);
	fflush(stdout);
	io_engine_close(io);
	free(arena);
	wspi_err_destroy(&err);
	return failed;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "file", required_argument, NULL, 'f' },
		{ "size", required_argument, NULL, 's' },
		{ "request", required_argument, NULL, 'r' },
		{ "inflight", required_argument, NULL, 'i' },
		{ "depth", required_argument, NULL, 'd' },
		{ "piece", required_argument, NULL, 'p' },
		{ "threads", required_argument, NULL, 't' },
		{ "register", no_argument, NULL, 'R' },
		{ "warm", no_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	char path[600] = "";
	int c, failed = 0;
	struct stat st;

	while ((c = getopt_long(argc, argv, "f:s:r:i:d:p:t:Rw", opts, NULL)) != -1) {
		switch (c) {
		case 'f': snprintf(path, sizeof(path), "%s", optarg); break;
		case 's': opt_size = strtoull(optarg, NULL, 0) << 20; break;
		case 'r': opt_req = strtoull(optarg, NULL, 0) << 20; break;
		case 'i': opt_inflight = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'd': opt_depth = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'p': opt_piece = strtoull(optarg, NULL, 0) << 10; break;
		case 't': opt_threads = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'R': opt_register = 1; break;
		case 'w': opt_warm = 1; break;
		default:
			fprintf(stderr, "usage: %s [--file PATH] [--size MiB] [--request MiB] "
					"[--inflight N] [--depth N] [--piece KiB] [--threads N] "
					"[--register] [--warm]\n", argv[0]);
			return 2;
		}
	}
	if (!opt_req || !opt_size || opt_inflight > 128) {
		fprintf(stderr, "bad sizes\n");
		return 2;
	}
	if (!*path) {
		const char *t = getenv("TMPDIR");
		snprintf(path, sizeof(path), "%s/wsp-io-bench.dat", t && *t ? t : "/tmp");
	}
	if (stat(path, &st) < 0 || (uint64_t)st.st_size < opt_size) {
		fprintf(stderr, "writing %s (%llu MiB)\n", path, (unsigned long long)(opt_size >> 20));
		t_write_words(path, opt_size);
	}
	printf("file %s, %llu MiB, requests %llu MiB x %u in flight, pieces %llu KiB, depth %u, "
	       "pread threads %u, %s, %s\n", path, (unsigned long long)(opt_size >> 20),
	       (unsigned long long)(opt_req >> 20), (opt_inflight / 2 ? opt_inflight / 2 : 1) * 2,
	       (unsigned long long)(opt_piece >> 10), opt_depth, opt_threads,
	       opt_register ? "registered buffers" : "plain buffers",
	       opt_warm ? "warm cache" : "caches dropped before each run (when root)");
	for (int be = WSP_IO_URING; be <= WSP_IO_MMAP; be++)
		for (int direct = 1; direct >= 0; direct--)
			if (!(be == WSP_IO_MMAP && direct))
				failed |= bench(path, be, direct);
	return failed;
}
