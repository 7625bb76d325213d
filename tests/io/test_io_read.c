/* Every backend, direct and buffered: many concurrent random reads of a
 * self-describing file of odd size (tail included, lengths that are not
 * multiples of 4096, requests split into many pieces); every byte checked.
 * Reading past the end is an error naming the file. */
#include <errno.h>
#include <stdatomic.h>

#include "iotest.h"

#define FILE_SIZE (5ull * 1048576 + 12345)   /* odd: the last word is partial */
#define THREADS 4
#define ROUNDS 25
#define BATCH 3
#define ARENA (8u << 20)

static atomic_ullong checked;   /* bytes verified: shows the test did work */

struct batch {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int left;
};

struct job {
	struct io_engine *io;
	int direct;
	unsigned seed;
	char *arena;   /* registered fixed buffer (uring), or NULL */
	int tid;
};

struct slot {
	struct io_req req;
	struct batch *b;
	int idx;
	int result;
	int fired;
};

static void slot_done(struct io_req *r, int result)
{
	struct slot *s = (struct slot *)r;   /* req is the first member */
	struct batch *b = s->b;
	pthread_mutex_lock(&b->lock);
	s->result = result;
	s->fired++;
	b->left--;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->lock);
}

static void pick(unsigned *seed, int direct, uint64_t *off, uint64_t *len)
{
	unsigned kind = rand_r(seed) % 5;
	uint64_t o = ((uint64_t)rand_r(seed) * 7919u) % FILE_SIZE;

	if (direct)
		o &= ~4095ull;
	switch (kind) {
	case 0:
		*len = 1 + rand_r(seed) % 10000;
		break;
	case 1:
		*len = 1 + rand_r(seed) % (600u << 10);
		break;
	case 2:
		*len = (uint64_t)(1 + rand_r(seed) % 256) * 4096;   /* whole blocks */
		break;
	case 3:   /* the tail, to the last byte */
		o = FILE_SIZE - 1 - rand_r(seed) % (300u << 10);
		if (direct)
			o &= ~4095ull;
		*len = FILE_SIZE - o;
		break;
	default:
		*len = 0;
	}
	if (o + *len > FILE_SIZE)
		*len = FILE_SIZE - o;
	*off = o;
}

static void *reader(void *arg)
{
	struct job *j = arg;
	struct batch b;
	struct slot slots[BATCH];
	char *bufs[BATCH];
	struct wspi_err err;

	wspi_err_init(&err);
	pthread_mutex_init(&b.lock, NULL);
	pthread_cond_init(&b.cv, NULL);
	for (int i = 0; i < BATCH; i++)
		bufs[i] = j->arena ? j->arena + (uint64_t)i * (ARENA / BATCH & ~4095u)
				   : t_aligned(FILE_SIZE);
	for (int round = 0; round < ROUNDS; round++) {
		b.left = BATCH;
		for (int i = 0; i < BATCH; i++) {
			struct slot *s = &slots[i];
			memset(s, 0, sizeof(*s));
			s->b = &b;
			pick(&j->seed, j->direct, &s->req.offset, &s->req.length);
			if (j->arena && io_span(s->req.length) > ARENA / BATCH - 4096)
				s->req.length = ARENA / BATCH - 8192;
			s->req.buf = bufs[i];
			s->req.done = slot_done;
			s->req.ctx = &b;
			CHECK_RC(io_submit(j->io, &s->req), 0);
		}
		pthread_mutex_lock(&b.lock);
		while (b.left)
			pthread_cond_wait(&b.cv, &b.lock);
		pthread_mutex_unlock(&b.lock);
		for (int i = 0; i < BATCH; i++) {
			struct slot *s = &slots[i];
			uint64_t bad;
			CHECK(s->fired == 1);
			if (s->result) {
				fprintf(stderr, "read %llu+%llu failed: %d\n",
					(unsigned long long)s->req.offset,
					(unsigned long long)s->req.length, s->result);
				exit(1);
			}
			bad = t_check_words(bufs[i], s->req.offset, s->req.length);
			checked += s->req.length;
			if (bad != UINT64_MAX) {
				fprintf(stderr, "thread %d: read %llu+%llu: wrong byte at %llu\n", j->tid,
					(unsigned long long)s->req.offset,
					(unsigned long long)s->req.length, (unsigned long long)bad);
				exit(1);
			}
		}
		/* and a synchronous one */
		uint64_t off, len;
		pick(&j->seed, j->direct, &off, &len);
		CHECK_RC(io_read(j->io, 0, off, len, bufs[0], &err), 0);
		CHECK(t_check_words(bufs[0], off, len) == UINT64_MAX);
	}
	if (!j->arena)
		for (int i = 0; i < BATCH; i++)
			free(bufs[i]);
	pthread_cond_destroy(&b.cv);
	pthread_mutex_destroy(&b.lock);
	wspi_err_destroy(&err);
	return NULL;
}

static int run(const char *path, enum wsp_io_backend be, int direct)
{
	struct io_config cfg;
	struct io_engine *io;
	struct wspi_err err;
	const char *paths[1] = { path };
	pthread_t th[THREADS];
	struct job jobs[THREADS];
	char *arena = NULL;
	int rc;

	wspi_err_init(&err);
	io_config_init(&cfg);
	cfg.backend = be;
	cfg.direct = direct;
	cfg.queue_depth = 8;             /* fewer piece records than pieces wanted */
	cfg.threads = 3;
	cfg.max_request = 256u << 10;    /* many pieces per request */
	rc = io_engine_open(&cfg, paths, 1, &io, &err);
	if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES) {
		fprintf(stderr, "%s: not available here (%s), skipped\n", t_backend_names[be], err.msg);
		wspi_err_destroy(&err);
		return 0;
	}
	CHECK_RC(rc, 0);
	CHECK(strcmp(io_engine_backend(io), t_backend_names[be]) == 0);
	fprintf(stderr, "%s direct=%d: engine direct=%d\n", io_engine_backend(io), direct,
		io_engine_direct(io));
	if (!direct || be == WSP_IO_MMAP)
		CHECK(io_engine_direct(io) == 0);
	if (be != WSP_IO_MMAP) {
		/* one thread reads into a registered buffer (READ_FIXED for uring) */
		arena = t_aligned(ARENA);
		CHECK_RC(io_engine_register_buffer(io, arena, ARENA), 0);
	}
	for (int t = 0; t < THREADS; t++) {
		jobs[t] = (struct job){ .io = io, .direct = direct, .seed = 1234u + 77u * t + be * 7 + direct,
					.arena = t == 0 ? arena : NULL, .tid = t };
		CHECK(pthread_create(&th[t], NULL, reader, &jobs[t]) == 0);
	}
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);

	/* past the end: an error naming the file, never a short buffer */
	char *buf = t_aligned(1 << 20);
	uint64_t off = (FILE_SIZE - 5000) & ~4095ull;
	rc = io_read(io, 0, off, FILE_SIZE - off + 10000, buf, &err);
	CHECK_RC(rc, -EIO);
	CHECK(strstr(err.msg, path) && strstr(err.msg, "truncated"));
	free(buf);

	/* misaligned direct requests are never issued */
	if (direct && be != WSP_IO_MMAP) {
		buf = t_aligned(8192);
		CHECK_RC(io_read(io, 0, 100, 10, buf, &err), -EINVAL);
		CHECK(strstr(err.msg, "aligned"));
		CHECK_RC(io_read(io, 0, 0, 10, buf + 8, &err), -EINVAL);
		free(buf);
	}
	io_engine_close(io);
	free(arena);
	wspi_err_destroy(&err);
	return 0;
}

int main(void)
{
	const char *dir = t_scratch("io-read");
	char path[600];

	snprintf(path, sizeof(path), "%s/words", dir);
	t_write_words(path, FILE_SIZE);
	for (int be = WSP_IO_URING; be <= WSP_IO_MMAP; be++)
		for (int direct = 0; direct <= 1; direct++)
			if (t_backend_wanted(be))
				run(path, be, direct);
	t_rmrf(dir);
	fprintf(stderr, "%llu bytes checked\n", (unsigned long long)checked);
	CHECK(checked > 0);
	return 0;
}
