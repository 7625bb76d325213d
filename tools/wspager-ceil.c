/*
 * wspager bench: the machine's own ceilings, measured in the same run as the
 * loaders they judge: host-to-GPU copy bandwidth (pinned and pageable), raw
 * disk bandwidth of the pack's shards (O_DIRECT), and decode throughput
 * (from memory: wsp_pack_measure_decode).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef WSP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "wspager-tool.h"

#define H2D_BYTES (64u << 20)
#define H2D_REPS 10
#define DISK_ALIGN 4096u
#define DISK_THREADS 32

bool wt_drop_caches(void)
{
	if (geteuid() != 0 || !wt_drop_caches_allowed())
		return false;
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool ok = write(fd, "3\n", 2) == 2;
	close(fd);
	return ok;
}

#ifdef WSP_HAVE_CUDA
static int cuda_fail(cudaError_t ce, const char *what)
{
	cli_error("CUDA: %s: %s (%s)", what, cudaGetErrorString(ce), cudaGetErrorName(ce));
	return CLI_EXIT_FAIL;
}
#define CK(call, what)                                                \
	do {                                                          \
		cudaError_t ce_ = (call);                             \
		if (ce_ != cudaSuccess) {                             \
			rc = cuda_fail(ce_, (what));                  \
			goto out;                                     \
		}                                                     \
	} while (0)

int wt_ceil_h2d(int device, double *pinned_gbps, double *pageable_gbps)
{
	void *host = NULL, *dev = NULL;
	bool registered = false;
	cudaStream_t st = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	int rc = 0;
	CK(cudaSetDevice(device), "cudaSetDevice");
	if (posix_memalign(&host, 4096, H2D_BYTES)) {
		cli_error("out of memory (%u MiB copy buffer)", H2D_BYTES >> 20);
		return CLI_EXIT_FAIL;
	}
	memset(host, 0x5a, H2D_BYTES);  /* fault the pages in before timing */
	CK(cudaMalloc(&dev, H2D_BYTES), "cudaMalloc (64 MiB copy target)");
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
	CK(cudaEventCreate(&e0), "cudaEventCreate");
	CK(cudaEventCreate(&e1), "cudaEventCreate");

	/* Pageable first: plain malloc'd memory, synchronous copies, as a naive
	 * loader does. */
	CK(cudaMemcpy(dev, host, H2D_BYTES, cudaMemcpyHostToDevice), "cudaMemcpy (pageable)");
	uint64_t t0 = wt_now_ns();
	for (int i = 0; i < H2D_REPS; i++)
		CK(cudaMemcpy(dev, host, H2D_BYTES, cudaMemcpyHostToDevice), "cudaMemcpy (pageable)");
	*pageable_gbps = wt_gbps((uint64_t)H2D_BYTES * H2D_REPS, wt_now_ns() - t0);

	CK(cudaHostRegister(host, H2D_BYTES, cudaHostRegisterDefault), "cudaHostRegister (64 MiB)");
	registered = true;
	CK(cudaMemcpyAsync(dev, host, H2D_BYTES, cudaMemcpyHostToDevice, st), "cudaMemcpyAsync (pinned)");
	CK(cudaEventRecord(e0, st), "cudaEventRecord");
	for (int i = 0; i < H2D_REPS; i++)
		CK(cudaMemcpyAsync(dev, host, H2D_BYTES, cudaMemcpyHostToDevice, st), "cudaMemcpyAsync (pinned)");
	CK(cudaEventRecord(e1, st), "cudaEventRecord");
	CK(cudaEventSynchronize(e1), "pinned copies");
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
	*pinned_gbps = ms > 0 ? (double)H2D_BYTES * H2D_REPS / (ms * 1e6) : 0;
out:
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	if (st)
		cudaStreamDestroy(st);
	if (registered)
		cudaHostUnregister(host);
	cudaFree(dev);
	free(host);
	return rc;
}
#endif

struct disk_file {
	int fd;
	uint64_t size;
	const char *path;
};

/* One read pattern over the shards: `threads` readers taking `req`-byte
 * requests in file order from a shared counter, up to `limit` bytes. */
struct disk_job {
	struct disk_file *files;
	unsigned n_files;
	uint64_t req, n_reqs, limit;
	uint64_t *first_req;          /* per file: index of its first request */
	_Atomic uint64_t next;
	_Atomic uint64_t bytes;
	_Atomic int err;
	char errmsg[256];
	pthread_mutex_t lock;
};

static void *disk_worker(void *arg)
{
	struct disk_job *j = arg;
	void *buf;
	if (posix_memalign(&buf, DISK_ALIGN, j->req)) {
		atomic_store(&j->err, -ENOMEM);
		return NULL;
	}
	for (;;) {
		uint64_t r = atomic_fetch_add(&j->next, 1);
		if (r >= j->n_reqs || atomic_load(&j->err) || atomic_load(&j->bytes) >= j->limit)
			break;
		unsigned f = 0;
		while (f + 1 < j->n_files && j->first_req[f + 1] <= r)
			f++;
		uint64_t off = (r - j->first_req[f]) * j->req;
		struct disk_file *df = &j->files[f];
		/* O_DIRECT wants aligned lengths: ask for a whole request and
		 * accept the short read at the end of the file. */
		ssize_t n = pread(df->fd, buf, j->req, (off_t)off);
		if (n < 0 || (n == 0 && off < df->size)) {
			int e = n < 0 ? errno : EIO;
			pthread_mutex_lock(&j->lock);
			if (!atomic_load(&j->err)) {
				snprintf(j->errmsg, sizeof(j->errmsg), "%s: read at %llu: %s", df->path,
					 (unsigned long long)off, strerror(e));
				atomic_store(&j->err, -e);
			}
			pthread_mutex_unlock(&j->lock);
			break;
		}
		atomic_fetch_add(&j->bytes, (uint64_t)n);
	}
	free(buf);
	return NULL;
}

static int disk_pattern(struct disk_file *files, unsigned n_files, unsigned threads, uint64_t req,
			uint64_t limit, double *gbps)
{
	struct disk_job j;
	memset(&j, 0, sizeof(j));
	j.files = files;
	j.n_files = n_files;
	j.req = req;
	j.limit = limit;
	j.first_req = calloc(n_files ? n_files : 1, sizeof(*j.first_req));
	if (!j.first_req) {
		cli_error("out of memory");
		return CLI_EXIT_FAIL;
	}
	for (unsigned i = 0; i < n_files; i++) {
		j.first_req[i] = j.n_reqs;
		j.n_reqs += (files[i].size + req - 1) / req;
	}
	pthread_mutex_init(&j.lock, NULL);
	pthread_t th[DISK_THREADS];
	unsigned started = 0;
	if (threads > DISK_THREADS)
		threads = DISK_THREADS;
	uint64_t t0 = wt_now_ns();
	for (; started < threads; started++)
		if (pthread_create(&th[started], NULL, disk_worker, &j))
			break;
	if (!started)
		disk_worker(&j);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	uint64_t t1 = wt_now_ns();
	int rc = 0;
	if (atomic_load(&j.err)) {
		cli_error("%s", j.errmsg[0] ? j.errmsg : "out of memory");
		rc = CLI_EXIT_FAIL;
	} else {
		*gbps = wt_gbps(atomic_load(&j.bytes), t1 - t0);
	}
	pthread_mutex_destroy(&j.lock);
	free(j.first_req);
	return rc;
}

int wt_ceil_disk(const char *pack, wsp_pack *pk, unsigned n_shards, uint64_t limit,
		 const struct wt_disk_ceiling *only, struct wt_disk_ceiling *out)
{
	/* Disks differ in what they like (a virtual disk may prefer a few
	 * large requests, an NVMe drive a deep queue): the ceiling is the
	 * best of a few patterns, each over at most `limit` bytes; with
	 * `only`, of its winning pattern alone. */
	struct pattern { unsigned threads; uint64_t req; };
	static const struct pattern all[] = {
		{1, 16u << 20}, {4, 4u << 20}, {8, 8u << 20}, {32, 4u << 20},
	};
	struct pattern pat[sizeof(all) / sizeof(all[0])];
	size_t n_pat = 0;
	for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
		if (!only || (only->threads == all[k].threads && only->req_bytes == all[k].req))
			pat[n_pat++] = all[k];
	struct disk_file *files = calloc(n_shards ? n_shards : 1, sizeof(*files));
	char **paths = calloc(n_shards ? n_shards : 1, sizeof(*paths));
	int rc = 0;
	memset(out, 0, sizeof(*out));
	out->direct = true;
	if (!paths || !files) {
		cli_error("out of memory");
		rc = CLI_EXIT_FAIL;
		goto out;
	}
	for (unsigned i = 0; i < n_shards; i++) {
		int need = wsp_pack_shard_path(pk, i, NULL, 0);
		if (need < 0 || !(paths[i] = malloc((size_t)need + 1))) {
			cli_error("shard %u: %s", i, need < 0 ? wsp_strerror(need) : "out of memory");
			rc = CLI_EXIT_FAIL;
			goto out;
		}
		wsp_pack_shard_path(pk, i, paths[i], (size_t)need + 1);
		int fd = open(paths[i], O_RDONLY | O_CLOEXEC | (out->direct ? O_DIRECT : 0));
		if (fd < 0 && errno == EINVAL && out->direct) {
			/* tmpfs and overlayfs refuse O_DIRECT: measure buffered
			 * (earlier shards stay O_DIRECT; the report says buffered). */
			out->direct = false;
			fd = open(paths[i], O_RDONLY | O_CLOEXEC);
		}
		if (fd < 0) {
			cli_error("%s: %s", paths[i], strerror(errno));
			rc = CLI_EXIT_FAIL;
			goto out;
		}
		files[i].fd = fd;
		files[i].path = paths[i];
		struct stat sb;
		if (fstat(fd, &sb) < 0) {
			cli_error("%s: %s", paths[i], strerror(errno));
			rc = CLI_EXIT_FAIL;
			goto out;
		}
		files[i].size = (uint64_t)sb.st_size;
	}
	out->limit = limit;
	bool dropped = false;
	for (size_t k = 0; k < n_pat; k++) {
		double g = 0;
		/* Buffered reads would hit the cache the previous pattern
		 * filled: drop it (root), else one pattern is all we can do. */
		dropped = wt_drop_caches();
		if (k == 0)
			out->dropped = dropped;
		else if (!out->direct && !dropped)
			break;
		if ((rc = disk_pattern(files, n_shards, pat[k].threads, pat[k].req,
					 limit ? limit : UINT64_MAX, &g)))
			goto out;
		if (g > out->gbps) {
			out->gbps = g;
			out->threads = pat[k].threads;
			out->req_bytes = pat[k].req;
		}
	}
	/* And the pager's own read path (io_uring, whole layers): the cold run
	 * must be compared with what its reads can get, or a faster engine
	 * shows up as more than 100% of a pread-only ceiling. */
	dropped = wt_drop_caches();
	if (!n_pat)
		out->dropped = dropped;
	if (dropped || out->direct) {
		uint64_t bytes = 0, ns = 0;
		if (wsp_pack_measure_read(pk, NULL, limit, &bytes, &ns) < 0) {
			cli_error("%s: %s", pack, wsp_pack_errmsg(pk));
			rc = CLI_EXIT_FAIL;
			goto out;
		}
		double g = ns ? (double)bytes / (double)ns : 0;
		if (g > out->gbps) {
			out->gbps = g;
			out->threads = 0;   /* 0: the pager's I/O engine */
			out->req_bytes = 0;
		}
	}
out:
	for (unsigned i = 0; files && i < n_shards; i++)
		if (files[i].path)
			close(files[i].fd);
	for (unsigned i = 0; paths && i < n_shards; i++)
		free(paths[i]);
	free(paths);
	free(files);
	return rc;
}

int wt_ceil_decode(wsp_pack *pk, uint64_t raw_bytes, bool warm_first, double *gbps)
{
	uint64_t raw = 0, ns = 0;
	/* Decoding from memory (the stored bytes are read first, untimed):
	 * timing a verify pass measured the disk whenever the page cache was
	 * cold, so neither a warm-up pass nor the pack's size matter now. */
	(void)raw_bytes;
	(void)warm_first;
	if (wsp_pack_measure_decode(pk, 0, 0, &raw, &ns) < 0) {
		cli_error("decode: %s", wsp_pack_errmsg(pk));
		return CLI_EXIT_FAIL;
	}
	*gbps = wt_gbps(raw, ns);
	return 0;
}
