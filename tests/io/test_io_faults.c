/* Injected faults, for the uring and pread backends, direct and buffered:
 * short reads are completed by resubmitting the rest; EIO on the Nth piece
 * fails its request once, naming path and offset, and the engine goes on;
 * an EAGAIN storm shorter than the bound is ridden out, a longer one fails;
 * a file truncated behind the engine's back is an error (for mmap too, not
 * SIGBUS). */
#include <errno.h>
#include <stdatomic.h>

#include "iotest.h"

#define FILE_SIZE (3ull * 1048576 + 777)
#define PIECE (64u << 10)

enum mode { F_NONE, F_SHORT, F_EIO_NTH, F_EAGAIN };

struct fault {
	enum mode mode;
	atomic_int consults;
	atomic_int shorts;
	int nth;                  /* F_EIO_NTH: fail the consult with this index */
	atomic_ullong failed_at;  /* offset of the failed attempt */
	atomic_int storm_left;    /* F_EAGAIN: EAGAINs still to return */
};

static int hook(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	struct fault *f = ctx;
	int n = atomic_fetch_add(&f->consults, 1);

	(void)file;
	switch (f->mode) {
	case F_SHORT:
		/* a few bytes short; the small re-reads of the rest go through */
		if (len > 8192) {
			atomic_fetch_add(&f->shorts, 1);
			return (int)(len - 3);
		}
		return 0;
	case F_EIO_NTH:
		if (n == f->nth) {
			f->failed_at = off;
			return -EIO;
		}
		return 0;
	case F_EAGAIN:
		if (atomic_fetch_sub(&f->storm_left, 1) > 0)
			return -EAGAIN;
		return 0;
	default:
		return 0;
	}
}

struct once {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int calls, result;
};

static void once_done(struct io_req *r, int result)
{
	struct once *o = r->ctx;
	pthread_mutex_lock(&o->lock);
	o->calls++;
	o->result = result;
	pthread_cond_broadcast(&o->cv);
	pthread_mutex_unlock(&o->lock);
}

static void reset(struct fault *f, enum mode m)
{
	f->mode = F_NONE;
	f->consults = 0;
	f->shorts = 0;
	f->failed_at = UINT64_MAX;
	f->storm_left = 0;
	f->mode = m;
}

static void read_ok(struct io_engine *io, uint64_t off, uint64_t len, char *buf)
{
	struct wspi_err err;
	wspi_err_init(&err);
	int rc = io_read(io, 0, off, len, buf, &err);
	if (rc)
		fprintf(stderr, "read %llu+%llu: %s\n", (unsigned long long)off,
			(unsigned long long)len, err.msg);
	CHECK_RC(rc, 0);
	CHECK(t_check_words(buf, off, len) == UINT64_MAX);
	wspi_err_destroy(&err);
}

static void run(const char *path, enum wsp_io_backend be, int direct)
{
	struct fault f;
	struct io_config cfg;
	struct io_engine *io;
	struct wspi_err err;
	const char *paths[1] = { path };
	char *buf = t_aligned(FILE_SIZE);
	char msg[64];
	int rc;

	memset(&f, 0, sizeof(f));
	reset(&f, F_NONE);
	wspi_err_init(&err);
	io_config_init(&cfg);
	cfg.backend = be;
	cfg.direct = direct;
	cfg.max_request = PIECE;
	cfg.queue_depth = 8;
	cfg.fault = hook;
	cfg.fault_ctx = &f;
	rc = io_engine_open(&cfg, paths, 1, &io, &err);
	if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES) {
		fprintf(stderr, "%s not available: skipped\n", t_backend_names[be]);
		free(buf);
		return;
	}
	CHECK_RC(rc, 0);
	fprintf(stderr, "%s direct=%d\n", io_engine_backend(io), io_engine_direct(io));

	/* short reads everywhere: whole file, the tail, an odd length */
	reset(&f, F_SHORT);
	read_ok(io, 0, FILE_SIZE, buf);
	read_ok(io, 1048576, 300001, buf);
	read_ok(io, FILE_SIZE & ~4095ull, FILE_SIZE % 4096, buf);
	CHECK(f.shorts >= (int)(FILE_SIZE / PIECE));

	/* EIO on the 5th piece of a 2 MiB read (32 pieces) */
	reset(&f, F_NONE);
	f.nth = 5;
	f.mode = F_EIO_NTH;
	struct once o = { .calls = 0 };
	pthread_mutex_init(&o.lock, NULL);
	pthread_cond_init(&o.cv, NULL);
	struct io_req r = { .file = 0, .offset = 0, .length = 2u << 20, .buf = buf,
			    .done = once_done, .ctx = &o, .err = &err };
	CHECK_RC(io_submit(io, &r), 0);
	pthread_mutex_lock(&o.lock);
	while (!o.calls)
		pthread_cond_wait(&o.cv, &o.lock);
	pthread_mutex_unlock(&o.lock);
	CHECK_RC(o.result, -EIO);
	CHECK(f.failed_at != UINT64_MAX);
	snprintf(msg, sizeof(msg), "offset %llu", (unsigned long long)f.failed_at);
	fprintf(stderr, "  EIO: %s\n", err.msg);
	CHECK(strstr(err.msg, path) && strstr(err.msg, msg));
	/* later requests still work, and no second call for the failed one */
	reset(&f, F_NONE);
	read_ok(io, 0, FILE_SIZE, buf);
	CHECK(o.calls == 1);

	/* EAGAIN storms: 16 (the bound) are ridden out, 1000 are not */
	reset(&f, F_EAGAIN);
	f.storm_left = 16;
	read_ok(io, 4096, PIECE, buf);
	CHECK(f.consults == 17);
	reset(&f, F_EAGAIN);
	f.storm_left = 1000;
	wspi_err_clear(&err);
	CHECK_RC(io_read(io, 0, 8192, 3 * PIECE, buf, &err), -EAGAIN);
	fprintf(stderr, "  EAGAIN: %s\n", err.msg);
	CHECK(strstr(err.msg, path));
	reset(&f, F_NONE);
	read_ok(io, 8192, 3 * PIECE, buf);

	io_engine_close(io);
	CHECK(o.calls == 1);
	pthread_cond_destroy(&o.cv);
	pthread_mutex_destroy(&o.lock);
	wspi_err_destroy(&err);
	free(buf);
}

/* The file shrinks after the engine opened it. */
static void run_truncated(const char *dir, enum wsp_io_backend be, int direct)
{
	char path[600];
	struct io_engine *io;
	struct wspi_err err;
	char *buf = t_aligned(1 << 20);
	const uint64_t new_size = 1048576 + 100;

	snprintf(path, sizeof(path), "%s/shrinks-%d-%d", dir, be, direct);
	t_write_words(path, FILE_SIZE);
	wspi_err_init(&err);
	if (t_open(be, direct, path, NULL, &io, &err) == T_SKIP) {
		free(buf);
		return;
	}
	read_ok(io, 1048576, 8192, buf);
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)new_size) == 0);
	close(fd);
	CHECK_RC(io_read(io, 0, 1048576, 65536, buf, &err), -EIO);
	fprintf(stderr, "  %s direct=%d truncated: %s\n", io_engine_backend(io), direct, err.msg);
	CHECK(strstr(err.msg, path) && strstr(err.msg, "truncated at offset 1048676"));
	/* wholly past the new end */
	CHECK_RC(io_read(io, 0, 2 * 1048576, 4096, buf, &err), -EIO);
	CHECK(strstr(err.msg, "truncated at offset 2097152"));
	/* what is still there reads fine */
	read_ok(io, 1048576 - 4096, 4096 + 100, buf);
	io_engine_close(io);
	unlink(path);
	wspi_err_destroy(&err);
	free(buf);
}

int main(void)
{
	const char *dir = t_scratch("io-faults");
	char path[600];

	snprintf(path, sizeof(path), "%s/words", dir);
	t_write_words(path, FILE_SIZE);
	for (int be = WSP_IO_URING; be <= WSP_IO_PREAD; be++)
		for (int direct = 0; direct <= 1; direct++)
			if (t_backend_wanted(be))
				run(path, be, direct);
	for (int be = WSP_IO_URING; be <= WSP_IO_MMAP; be++)
		for (int direct = 0; direct <= 1; direct++)
			if (t_backend_wanted(be))
				run_truncated(dir, be, direct);
	t_rmrf(dir);
	return 0;
}
