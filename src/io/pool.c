/*
 * The thread-pool backends: pread (the fallback when io_uring is refused)
 * and mmap+memcpy (a last resort).  Both share one pool of workers; each
 * worker takes a piece and runs its attempts in a loop until the piece ends.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "io/engine.h"

static void *worker(void *arg)
{
	struct io_engine *io = arg;

	for (;;) {
		struct io_piece *p;

		pthread_mutex_lock(&io->lock);
		while (!io->work_head && !io->stopping)
			pthread_cond_wait(&io->work_cv, &io->lock);
		p = io->work_head;
		if (!p) {
			pthread_mutex_unlock(&io->lock);
			break;
		}
		io->work_head = p->next;
		if (!io->work_head)
			io->work_tail = NULL;
		pthread_mutex_unlock(&io->lock);

		for (;;) {
			int64_t res;
			int fd;

			/* the descriptor may change under us (O_DIRECT fallback) */
			pthread_mutex_lock(&io->lock);
			fd = io->files[p->file].fd;
			p->direct = io->files[p->file].direct;
			pthread_mutex_unlock(&io->lock);
			io_fault_consult(io, p);
			res = io->pool_read(io, p, fd);
			if (io_piece_step(io, p, res) == STEP_DONE)
				break;
		}
		io_piece_finish(io, p);
	}
	return NULL;
}

int io_pool_start(struct io_engine *io, unsigned n, struct wspi_err *err)
{
	io->workers = calloc(n, sizeof(*io->workers));
	if (!io->workers)
		return WSP_ERR(err, -ENOMEM, "io: out of memory");
	io->stopping = 0;
	for (io->n_workers = 0; io->n_workers < n; io->n_workers++) {
		int ret = pthread_create(&io->workers[io->n_workers], NULL, worker, io);
		if (ret) {
			io_pool_stop(io);
			return WSP_ERR(err, -ret, "io: cannot start a worker thread: %s", strerror(ret));
		}
	}
	return 0;
}

void io_pool_issue(struct io_engine *io, struct io_piece *p)
{
	p->next = NULL;
	if (io->work_tail)
		io->work_tail->next = p;
	else
		io->work_head = p;
	io->work_tail = p;
	pthread_cond_signal(&io->work_cv);
}

void io_pool_stop(struct io_engine *io)
{
	pthread_mutex_lock(&io->lock);
	io->stopping = 1;
	pthread_cond_broadcast(&io->work_cv);
	pthread_mutex_unlock(&io->lock);
	for (unsigned i = 0; i < io->n_workers; i++)
		pthread_join(io->workers[i], NULL);
	free(io->workers);
	io->workers = NULL;
	io->n_workers = 0;
}

/* ---------------------------------------------------------------------- */
/* pread                                                                   */

static int64_t pread_attempt(struct io_engine *io, struct io_piece *p, int fd)
{
	ssize_t n = p->write ? pwrite(fd, io_attempt_buf(p), io_attempt_len(p), (off_t)io_attempt_off(p))
			     : pread(fd, io_attempt_buf(p), io_attempt_len(p), (off_t)io_attempt_off(p));

	(void)io;
	return n < 0 ? -errno : n;
}

static int pread_start(struct io_engine *io, struct wspi_err *err)
{
	io->pool_read = pread_attempt;
	return io_pool_start(io, io->cfg.threads, err);
}

const struct io_backend io_backend_pread = {
	.name = "pread",
	.start = pread_start,
	.issue = io_pool_issue,
	.stop = io_pool_stop,
};

/* ---------------------------------------------------------------------- */
/* mmap                                                                    */

/* Touching a mapped page beyond the end of a file raises SIGBUS, so the
 * range is checked against the file's current size first and a shrunken file
 * becomes a short read (then -EIO "file shrank").  A file truncated between
 * the fstat and the memcpy can still raise SIGBUS: that window cannot be
 * closed without a signal handler, which a library must not install; it is
 * why mmap is only a fallback. */
static int64_t mmap_attempt(struct io_engine *io, struct io_piece *p, int fd)
{
	struct io_file *f = &io->files[p->file];
	uint64_t off = io_attempt_off(p), len = io_attempt_len(p), limit;
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	limit = WSP_MIN((uint64_t)st.st_size, f->map_len);
	if (off >= limit)
		return 0;
	len = WSP_MIN(len, limit - off);
	memcpy(io_attempt_buf(p), (const char *)f->map + off, len);
	return (int64_t)len;
}

static void unmap_files(struct io_engine *io)
{
	for (unsigned i = 0; i < io->n_files; i++) {
		struct io_file *f = &io->files[i];
		if (f->map)
			munmap(f->map, f->map_len);
		f->map = NULL;
		f->map_len = 0;
	}
}

static int mmap_start(struct io_engine *io, struct wspi_err *err)
{
	int rc;

	for (unsigned i = 0; i < io->n_files; i++) {
		struct io_file *f = &io->files[i];
		struct stat st;
		void *m;

		if (fstat(f->fd, &st) < 0) {
			rc = WSP_ERR(err, -errno, "%s: fstat: %s", f->path, strerror(errno));
			goto fail;
		}
		if (st.st_size <= 0)
			continue;   /* nothing to map: every read of it is past the end */
		m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, f->fd, 0);
		if (m == MAP_FAILED) {
			rc = WSP_ERR(err, -errno, "%s: mmap: %s", f->path, strerror(errno));
			goto fail;
		}
		madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL);
		f->map = m;
		f->map_len = (uint64_t)st.st_size;
	}
	io->pool_read = mmap_attempt;
	rc = io_pool_start(io, io->cfg.threads, err);
	if (rc == 0)
		return 0;
fail:
	unmap_files(io);
	return rc;
}

static void mmap_stop(struct io_engine *io)
{
	io_pool_stop(io);
	unmap_files(io);
}

const struct io_backend io_backend_mmap = {
	.name = "mmap",
	.start = mmap_start,
	.issue = io_pool_issue,
	.stop = mmap_stop,
};
