/* Random faults under concurrency (uring and pread, direct): several threads
 * keep batches of multi-piece requests in flight while the fault hook fails
 * some pieces with EIO and shortens others.  Every request's done is called
 * exactly once; a successful request has every byte right, a failed one
 * says -EIO naming the file.  Buffers of a failed batch are reused at once
 * for other offsets: a late write from an aborted request would show up as
 * wrong bytes there ("nothing stale survives an aborted batch"). */
#include <errno.h>
#include <stdatomic.h>

#include "iotest.h"

#define FILE_SIZE (6ull * 1048576 + 333)
#define THREADS 4
#define ROUNDS 30
#define BATCH 4
#define PIECE (32u << 10)

static atomic_uint consults;
static atomic_int failures, successes;

static int hook(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	unsigned n = atomic_fetch_add(&consults, 1);
	uint64_t h = (off * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)n * 0xBF58476D1CE4E5B9ull);

	(void)ctx, (void)file;
	h ^= h >> 31;
	if (h % 53 == 0)
		return -EIO;
	if (h % 7 == 0 && len > 8192)
		return (int)(len / 2 + 5);   /* short and unaligned */
	return 0;
}

struct slot {
	struct io_req req;   /* first: the callback casts back */
	pthread_mutex_t *lock;
	pthread_cond_t *cv;
	int *left;
	int calls, result;
};

static void slot_done(struct io_req *r, int result)
{
	struct slot *s = (struct slot *)r;
	pthread_mutex_lock(s->lock);
	s->calls++;
	s->result = result;
	--*s->left;
	pthread_cond_signal(s->cv);
	pthread_mutex_unlock(s->lock);
}

struct job {
	struct io_engine *io;
	const char *path;
	unsigned seed;
};

static void *reader(void *arg)
{
	struct job *j = arg;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
	struct slot slots[BATCH];
	struct wspi_err errs[BATCH];
	char *bufs[BATCH];
	int left;

	for (int i = 0; i < BATCH; i++) {
		bufs[i] = t_aligned(1 << 20);
		wspi_err_init(&errs[i]);
	}
	for (int round = 0; round < ROUNDS; round++) {
		left = BATCH;
		for (int i = 0; i < BATCH; i++) {
			struct slot *s = &slots[i];
			uint64_t off = ((uint64_t)rand_r(&j->seed) * 4096) % FILE_SIZE & ~4095ull;
			uint64_t len = 1 + (uint64_t)rand_r(&j->seed) % (1 << 20);
			if (off + len > FILE_SIZE)
				len = FILE_SIZE - off;
			memset(bufs[i], 0xEE, 1 << 20);
			wspi_err_clear(&errs[i]);
			*s = (struct slot){ .lock = &lock, .cv = &cv, .left = &left };
			s->req = (struct io_req){ .file = 0, .offset = off, .length = len, .buf = bufs[i],
						  .done = slot_done, .err = &errs[i] };
			CHECK_RC(io_submit(j->io, &s->req), 0);
		}
		pthread_mutex_lock(&lock);
		while (left)
			pthread_cond_wait(&cv, &lock);
		pthread_mutex_unlock(&lock);
		for (int i = 0; i < BATCH; i++) {
			struct slot *s = &slots[i];
			CHECK(s->calls == 1);
			if (s->result == 0) {
				CHECK(t_check_words(bufs[i], s->req.offset, s->req.length) == UINT64_MAX);
				atomic_fetch_add(&successes, 1);
			} else {
				CHECK_RC(s->result, -EIO);
				CHECK(errs[i].code == -EIO && strstr(errs[i].msg, j->path));
				atomic_fetch_add(&failures, 1);
			}
		}
	}
	for (int i = 0; i < BATCH; i++) {
		free(bufs[i]);
		wspi_err_destroy(&errs[i]);
	}
	return NULL;
}

int main(void)
{
	const char *dir = t_scratch("io-stress");
	char path[600];

	snprintf(path, sizeof(path), "%s/words", dir);
	t_write_words(path, FILE_SIZE);
	for (int be = WSP_IO_URING; be <= WSP_IO_PREAD; be++) {
		struct io_config cfg;
		struct io_engine *io;
		struct wspi_err err;
		const char *paths[1] = { path };
		pthread_t th[THREADS];
		struct job jobs[THREADS];

		if (!t_backend_wanted(be))
			continue;
		wspi_err_init(&err);
		io_config_init(&cfg);
		cfg.backend = be;
		cfg.queue_depth = 16;
		cfg.threads = 4;
		cfg.max_request = PIECE;
		cfg.fault = hook;
		int rc = io_engine_open(&cfg, paths, 1, &io, &err);
		if (rc == -EPERM || rc == -ENOSYS)
			continue;
		CHECK_RC(rc, 0);
		failures = successes = 0;
		for (int t = 0; t < THREADS; t++) {
			jobs[t] = (struct job){ .io = io, .path = path, .seed = 99u + (unsigned)t };
			CHECK(pthread_create(&th[t], NULL, reader, &jobs[t]) == 0);
		}
		for (int t = 0; t < THREADS; t++)
			pthread_join(th[t], NULL);
		io_engine_close(io);
		fprintf(stderr, "%s: %d requests succeeded, %d failed\n", t_backend_names[be],
			(int)successes, (int)failures);
		CHECK(successes > 0 && failures > 0);
		wspi_err_destroy(&err);
	}
	t_rmrf(dir);
	return 0;
}
