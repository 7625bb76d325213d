/*
 * The I/O engine's common part: configuration, opening the files (with the
 * O_DIRECT fallback), choosing the backend (with the io_uring fallback),
 * splitting requests into pieces, judging each attempt's result (short
 * reads, -EAGAIN, truncation) and completing requests exactly once.
 *
 * The backends only move bytes: they issue an attempt of a piece and hand
 * its result to io_piece_step(); everything that decides what a result
 * means lives here, so that io_uring and the thread pool behave the same.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "io/engine.h"

void io_config_init(struct io_config *c)
{
	memset(c, 0, sizeof(*c));
	c->backend = WSP_IO_AUTO;
	c->queue_depth = 32;
	c->threads = 4;
	c->direct = 1;
	c->max_request = 1u << 20;
}

void io_notice_once(struct io_engine *io, unsigned kind, const char *fmt, ...)
{
	va_list ap;

	/* Atomic so that it may be said from any thread, with or without the
	 * engine lock; the callback must not call back into the engine. */
	if (__atomic_fetch_or(&io->noticed, kind, __ATOMIC_ACQ_REL) & kind)
		return;
	if (!io->cfg.notice)
		return;
	va_start(ap, fmt);
	wspi_vnotice(io->cfg.notice, io->cfg.notice_ctx, fmt, ap);
	va_end(ap);
}

static const char *errno_name(int e)
{
	switch (e) {
	case EPERM: return "EPERM";
	case ENOSYS: return "ENOSYS";
	case EACCES: return "EACCES";
	case EINVAL: return "EINVAL";
	case ENOMEM: return "ENOMEM";
	default: return "error";
	}
}

/* ---------------------------------------------------------------------- */
/* Files                                                                   */

static int open_file(struct io_engine *io, struct io_file *f, int direct, struct wspi_err *err)
{
	int fd = -1;

	if (direct) {
		fd = open(f->path, O_RDONLY | O_CLOEXEC | O_DIRECT | O_NONBLOCK);
		if (fd < 0 && errno == EINVAL)
			io_notice_once(io, NOTICE_DIRECT, "O_DIRECT refused on %s (EINVAL): buffered reads",
				       f->path);
		else if (fd < 0)
			return WSP_ERR(err, -errno, "%s: open: %s", f->path, strerror(errno));
		if (fd >= 0) {   /* opened only to learn whether O_DIRECT works */
			close(fd);
			fd = wspi_open_regular(f->path, O_RDONLY | O_DIRECT, err);
			if (fd < 0)
				return fd;
		}
	}
	f->direct = fd >= 0;
	if (fd < 0) {
		fd = wspi_open_regular(f->path, O_RDONLY, err);
		if (fd < 0)
			return fd;
	}
	f->fd = fd;
	return 0;
}

/* Close the descriptors; the caller's duplicates too when `given` (they are
 * kept while a backend that failed to start gives way to another). */
static void close_files(struct io_engine *io, int given)
{
	for (unsigned i = 0; i < io->n_files; i++) {
		struct io_file *f = &io->files[i];
		if (f->given && !given)
			continue;
		if (f->fd >= 0)
			close(f->fd);
		if (f->old_fd >= 0)
			close(f->old_fd);
		f->fd = f->old_fd = -1;
	}
}

static int open_files(struct io_engine *io, struct wspi_err *err)
{
	for (unsigned i = 0; i < io->n_files; i++) {
		if (io->files[i].given)
			continue;   /* the caller's, duplicated at open */
		int rc = open_file(io, &io->files[i], io->direct_wanted, err);
		if (rc < 0) {
			close_files(io, 0);
			return rc;
		}
	}
	return 0;
}

/* A caller's descriptor without O_DIRECT: a new open file description (so
 * the flag is its own) would need a path; the duplicate shares the caller's
 * flags, which is what the caller asked for by giving it: clear it there. */
static int buffered_dup(int fd, const char *name, struct wspi_err *err)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	int fl = d >= 0 ? fcntl(d, F_GETFL) : -1;
	if (fl < 0 || fcntl(d, F_SETFL, fl & ~O_DIRECT) < 0) {
		int e = errno;
		if (d >= 0)
			close(d);
		return WSP_ERR(err, -e, "%s: buffered descriptor: %s", name, strerror(e));
	}
	return d;
}

/* A direct read of f was refused with EINVAL: continue with a buffered
 * descriptor.  Pieces already issued on the old one finish there. */
static int direct_fallback(struct io_engine *io, unsigned i, struct wspi_err *why)
{
	struct io_file *f = &io->files[i];
	int rc = 0;

	pthread_mutex_lock(&io->lock);
	if (f->direct) {
		int fd = f->given ? buffered_dup(f->fd, f->path, why)
				  : wspi_open_regular(f->path, O_RDONLY, why);
		if (fd < 0) {
			rc = fd;
		} else {
			f->old_fd = f->fd;
			f->fd = fd;
			f->direct = 0;
			if (io->be->file_changed)
				io->be->file_changed(io, i);
			io_notice_once(io, NOTICE_DIRECT, "O_DIRECT refused on %s (EINVAL): buffered reads",
				       f->path);
		}
	}
	pthread_mutex_unlock(&io->lock);
	return rc;
}

/* ---------------------------------------------------------------------- */
/* Open / close                                                            */

static void engine_free(struct io_engine *io)
{
	if (!io)
		return;
	if (io->files) {
		close_files(io, 1);
		for (unsigned i = 0; i < io->n_files; i++)
			free((char *)io->files[i].path);
		free(io->files);
	}
	free(io->pieces);
	pthread_cond_destroy(&io->work_cv);
	pthread_cond_destroy(&io->idle_cv);
	pthread_mutex_destroy(&io->lock);
	free(io);
}

static int start_backend(struct io_engine *io, const struct io_backend *be, struct wspi_err *err)
{
	int rc;

	io->be = be;
	/* mmap goes through the page cache whatever we ask for */
	io->direct_wanted = io->cfg.direct && be != &io_backend_mmap;
	rc = open_files(io, err);
	if (rc < 0)
		return rc;
	rc = be->start(io, err);
	if (rc < 0)
		close_files(io, 0);
	return rc;
}

/* An engine of n files (none open yet) with cfg's defaults filled in. */
static int engine_new(const struct io_config *cfg, unsigned n, struct io_engine **out,
		      struct wspi_err *err)
{
	struct io_engine *io;

	*out = NULL;
	if (n > 65536)
		return WSP_ERR(err, WSP_ETOOBIG, "io: %u files is too many", n);
	io = calloc(1, sizeof(*io));
	if (!io)
		return WSP_ERR(err, -ENOMEM, "io: out of memory");
	pthread_mutex_init(&io->lock, NULL);
	pthread_cond_init(&io->idle_cv, NULL);
	pthread_cond_init(&io->work_cv, NULL);
	io->cfg = *cfg;
	if (!io->cfg.queue_depth)
		io->cfg.queue_depth = 32;
	io->cfg.queue_depth = WSP_MIN(io->cfg.queue_depth, 4096u);
	if (!io->cfg.threads)
		io->cfg.threads = 4;
	io->cfg.threads = WSP_MIN(io->cfg.threads, 256u);
	if (!io->cfg.max_request)
		io->cfg.max_request = 1u << 20;
	/* pieces stay 4096-aligned so that every direct attempt is aligned */
	io->cfg.max_request = wspi_align_up(WSP_MIN(io->cfg.max_request, IO_MAX_PIECE), IO_ALIGN);

	io->n_files = n;
	io->files = calloc(n ? n : 1, sizeof(*io->files));
	io->pieces = calloc(io->cfg.queue_depth, sizeof(*io->pieces));
	if (!io->files || !io->pieces) {
		engine_free(io);
		return WSP_ERR(err, -ENOMEM, "io: out of memory");
	}
	for (unsigned i = 0; i < n; i++)
		io->files[i].fd = io->files[i].old_fd = -1;
	for (unsigned i = 0; i < io->cfg.queue_depth; i++) {
		io->pieces[i].next = io->free_pieces;
		io->free_pieces = &io->pieces[i];
	}
	*out = io;
	return 0;
}

/* Start the configured backend (AUTO: io_uring, else pread); the engine
 * is freed on failure. */
static int engine_start(struct io_engine *io, struct io_engine **out, struct wspi_err *err)
{
	int rc;

	switch (io->cfg.backend) {
	case WSP_IO_AUTO:
		rc = start_backend(io, &io_backend_uring, err);
		/* EPERM: seccomp or kernel.io_uring_disabled; ENOSYS: no io_uring;
		 * ENOMEM: kernels before 5.12 charge the rings to RLIMIT_MEMLOCK */
		if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES || rc == -ENOMEM) {
			io_notice_once(io, NOTICE_URING, "io_uring refused (%s): using the pread backend",
				       errno_name(-rc));
			wspi_err_clear(err);
			rc = start_backend(io, &io_backend_pread, err);
		}
		break;
	case WSP_IO_URING:
		rc = start_backend(io, &io_backend_uring, err);
		break;
	case WSP_IO_PREAD:
		rc = start_backend(io, &io_backend_pread, err);
		break;
	case WSP_IO_MMAP:
		rc = start_backend(io, &io_backend_mmap, err);
		break;
	default:
		rc = WSP_ERR(err, -EINVAL, "io: unknown backend %d", (int)io->cfg.backend);
	}
	if (rc < 0) {
		engine_free(io);
		return rc;
	}
	*out = io;
	return 0;
}

int io_engine_open(const struct io_config *cfg, const char *const *paths, unsigned n_paths,
		   struct io_engine **out, struct wspi_err *err)
{
	struct io_engine *io;

	*out = NULL;
	if (!cfg || (!paths && n_paths))
		return WSP_ERR(err, -EINVAL, "io: no configuration or paths");
	WSP_TRY(engine_new(cfg, n_paths, &io, err));
	for (unsigned i = 0; i < n_paths; i++) {
		io->files[i].path = strdup(paths[i]);
		if (!io->files[i].path) {
			engine_free(io);
			return WSP_ERR(err, -ENOMEM, "io: out of memory");
		}
	}
	return engine_start(io, out, err);
}

int io_engine_open_fds(const struct io_config *cfg, const int *fds, const char *const *names,
		       unsigned n, struct io_engine **out, struct wspi_err *err)
{
	struct io_engine *io;

	*out = NULL;
	if (!cfg || (!fds && n) || (!names && n))
		return WSP_ERR(err, -EINVAL, "io: no configuration or descriptors");
	if (cfg->backend == WSP_IO_MMAP)
		return WSP_ERR(err, -EINVAL, "io: the mmap backend cannot write");
	WSP_TRY(engine_new(cfg, n, &io, err));
	for (unsigned i = 0; i < n; i++) {
		struct io_file *f = &io->files[i];
		int fl = fcntl(fds[i], F_GETFL);
		f->given = 1;
		f->path = strdup(names[i]);
		f->fd = fl < 0 ? -1 : fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		if (!f->path || f->fd < 0) {
			int e = !f->path ? ENOMEM : errno;
			engine_free(io);
			return WSP_ERR(err, -e, "io: %s: %s", names[i], strerror(e));
		}
		f->direct = (fl & O_DIRECT) != 0;
	}
	return engine_start(io, out, err);
}

void io_engine_close(struct io_engine *io)
{
	if (!io)
		return;
	pthread_mutex_lock(&io->lock);
	while (io->active)
		pthread_cond_wait(&io->idle_cv, &io->lock);
	pthread_mutex_unlock(&io->lock);
	io->be->stop(io);
	engine_free(io);
}

int io_engine_register_buffer(struct io_engine *io, void *buf, uint64_t len)
{
	if (!buf || !len)
		return -EINVAL;
	return io->be->register_buffer ? io->be->register_buffer(io, buf, len) : 0;
}

const char *io_engine_backend(const struct io_engine *io)
{
	return io->be->name;
}

int io_engine_direct(const struct io_engine *io)
{
	struct io_engine *m = (struct io_engine *)io;
	int all = io->n_files > 0 && io->direct_wanted;

	pthread_mutex_lock(&m->lock);
	for (unsigned i = 0; i < io->n_files && all; i++)
		all = io->files[i].direct;
	pthread_mutex_unlock(&m->lock);
	return all;
}

/* ---------------------------------------------------------------------- */
/* Requests and pieces                                                     */

static void fifo_unlink(struct io_engine *io, struct io_rq *rq)
{
	struct io_rq **pp = &io->fifo_head, *prev = NULL;

	while (*pp && *pp != rq) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (!*pp)
		return;
	*pp = rq->next;
	if (io->fifo_tail == rq)
		io->fifo_tail = prev;
	rq->next = NULL;
	rq->queued = 0;
}

/* Issue as many waiting pieces as there are free piece records, oldest
 * request first.  Lock held. */
static void pump(struct io_engine *io)
{
	uint64_t max = io->cfg.max_request;
	int issued = 0;

	while (io->free_pieces && io->fifo_head) {
		struct io_rq *rq = io->fifo_head;
		struct io_req *r = rq->r;
		struct io_piece *p = io->free_pieces;
		uint64_t start = rq->issued * max;

		io->free_pieces = p->next;
		memset(p, 0, sizeof(*p));
		p->rq = rq;
		p->file = r->file;
		p->off = r->offset + start;
		p->buf = (char *)r->buf + start;
		p->len = rq->read_len > start ? WSP_MIN(max, rq->read_len - start) : 0;
		p->want = r->length > start ? WSP_MIN(p->len, r->length - start) : 0;
		p->write = r->write;
		rq->outstanding++;
		if (++rq->issued == rq->n_pieces) {
			io->fifo_head = rq->next;
			if (!io->fifo_head)
				io->fifo_tail = NULL;
			rq->next = NULL;
			rq->queued = 0;
		}
		io->be->issue(io, p);
		issued = 1;
	}
	if (issued && io->be->flush)
		io->be->flush(io);
}

int io_submit(struct io_engine *io, struct io_req *r)
{
	struct io_rq *rq;
	uint64_t end, span;

	if (!io || !r || !r->done || (!r->buf && r->length))
		return WSP_ERR(r ? r->err : NULL, -EINVAL, "io_submit: missing request, buffer or callback");
	if (r->file >= io->n_files)
		return WSP_ERR(r->err, -EINVAL, "io_submit: file %u out of range (%u files)", r->file,
			       io->n_files);
	if (ckd_add(&end, r->offset, r->length) || ckd_add(&span, r->length, IO_ALIGN) ||
	    ckd_add(&end, r->offset, span))
		return WSP_ERR(r->err, WSP_ETOOBIG, "%s: %s of %llu bytes at offset %llu overflows",
			       io->files[r->file].path, r->write ? "write" : "read",
			       (unsigned long long)r->length,
			       (unsigned long long)r->offset);
	if (r->write && !io->files[r->file].given)
		return WSP_ERR(r->err, -EINVAL, "io_submit: %s is open for reading only",
			       io->files[r->file].path);
	/* A direct write cannot round its length up as a direct read does. */
	if (r->write && io->direct_wanted && !wspi_is_aligned(r->length, IO_ALIGN))
		return WSP_ERR(r->err, -EINVAL, "%s: direct write of %llu bytes: the length must be "
			       "%u-aligned", io->files[r->file].path, (unsigned long long)r->length,
			       IO_ALIGN);
	/* The caller's promise for direct I/O, checked even when the file fell
	 * back to buffered reads so that a misaligned caller fails everywhere. */
	if (io->direct_wanted && (!wspi_is_aligned(r->offset, IO_ALIGN) ||
				  !wspi_is_aligned((uintptr_t)r->buf, IO_ALIGN)))
		return WSP_ERR(r->err, -EINVAL,
			       "%s: direct read at offset %llu into %p: offset and buffer must be "
			       "%u-aligned", io->files[r->file].path, (unsigned long long)r->offset,
			       r->buf, IO_ALIGN);

	rq = calloc(1, sizeof(*rq));
	if (!rq)
		return WSP_ERR(r->err, -ENOMEM, "io_submit: out of memory");
	rq->r = r;
	r->priv_done = 0;
	r->priv_result = 0;

	pthread_mutex_lock(&io->lock);
	rq->read_len = io->files[r->file].direct && !r->write ? io_span(r->length) : r->length;
	rq->n_pieces = rq->read_len ? (rq->read_len + io->cfg.max_request - 1) / io->cfg.max_request
				    : 1;   /* an empty read still completes through a piece */
	r->priv_pending = rq->n_pieces;
	rq->queued = 1;
	if (io->fifo_tail)
		io->fifo_tail->next = rq;
	else
		io->fifo_head = rq;
	io->fifo_tail = rq;
	io->active++;
	pump(io);
	pthread_mutex_unlock(&io->lock);
	return 0;
}

void io_fault_consult(struct io_engine *io, struct io_piece *p)
{
	int f = 0;

	if (io->cfg.fault) {
		f = io->cfg.fault(io->cfg.fault_ctx, p->file, io_attempt_off(p), io_attempt_len(p));
		if (f > 0 && (uint64_t)f >= io_attempt_len(p))
			f = 0;   /* not shorter than asked: no fault */
	}
	p->fault = f;
}

static int piece_fail(struct io_engine *io, struct io_piece *p, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int piece_fail(struct io_engine *io, struct io_piece *p, int code, const char *fmt, ...)
{
	struct io_rq *rq = p->rq;
	va_list ap;

	pthread_mutex_lock(&io->lock);
	if (!rq->result) {
		rq->result = code;
		va_start(ap, fmt);
		vsnprintf(rq->msg, sizeof(rq->msg), fmt, ap);
		va_end(ap);
	}
	/* issue nothing more of a failed request */
	if (rq->queued)
		fifo_unlink(io, rq);
	pthread_mutex_unlock(&io->lock);
	return STEP_DONE;
}

int io_piece_step(struct io_engine *io, struct io_piece *p, int64_t res)
{
	struct io_file *f = &io->files[p->file];
	const char *op = p->write ? "write" : "read";
	uint64_t got;

	if (p->fault < 0)
		res = p->fault;
	else if (p->fault > 0 && res > p->fault)
		res = p->fault;
	p->fault = 0;

	if (res == -EINTR)
		return STEP_AGAIN;
	if (res == -EAGAIN) {
		if (++p->eagain <= IO_EAGAIN_MAX)
			return STEP_AGAIN;
		return piece_fail(io, p, -EAGAIN, "%s: %s at offset %llu: %s (gave up after %d retries)",
				  f->path, op, (unsigned long long)io_attempt_off(p), strerror(EAGAIN),
				  IO_EAGAIN_MAX);
	}
	/* Attempts are always aligned, so EINVAL from a direct read means the
	 * filesystem refuses direct reads (some accept the O_DIRECT open). */
	if (res == -EINVAL && p->direct) {
		struct wspi_err why;
		int rc;

		wspi_err_init(&why);
		rc = direct_fallback(io, p->file, &why);
		if (rc < 0)
			piece_fail(io, p, rc, "%s", why.msg);
		wspi_err_destroy(&why);
		return rc < 0 ? STEP_DONE : STEP_AGAIN;
	}
	if (res < 0)
		return piece_fail(io, p, (int)res, "%s: %s of %llu bytes at offset %llu: %s", f->path,
				  op, (unsigned long long)io_attempt_len(p),
				  (unsigned long long)io_attempt_off(p), strerror((int)-res));
	got = p->cur + (uint64_t)res;
	if (got > p->done) {
		p->done = got;
	} else if (p->done < p->want && p->write) {
		return piece_fail(io, p, -EIO, "%s: write at offset %llu wrote nothing", f->path,
				  (unsigned long long)(p->off + got));
	} else if (p->done < p->want) {
		/* nothing new arrived: the file ends here */
		return piece_fail(io, p, -EIO, "%s: file shrank or is truncated at offset %llu",
				  f->path, (unsigned long long)(p->off + got));
	}
	/* Direct reads may stop short at EOF inside the last aligned block of
	 * the span; what counts is that the bytes asked for arrived. */
	if (p->done >= p->want)
		return STEP_DONE;
	/* Short: ask for the rest.  A direct attempt must start aligned, so it
	 * reads (or writes) the partial block again. */
	p->cur = p->direct ? wspi_align_down(p->done, IO_ALIGN) : p->done;
	return STEP_AGAIN;
}

void io_piece_finish(struct io_engine *io, struct io_piece *p)
{
	struct io_rq *rq = p->rq;
	struct io_req *r = rq->r;
	int complete, result;

	pthread_mutex_lock(&io->lock);
	r->priv_done += p->done;
	r->priv_pending--;
	rq->outstanding--;
	p->rq = NULL;
	p->next = io->free_pieces;
	io->free_pieces = p;
	complete = !rq->queued && !rq->outstanding;
	pump(io);
	pthread_mutex_unlock(&io->lock);
	if (!complete)
		return;

	result = rq->result;
	r->priv_result = result;
	r->priv_pending = 0;   /* pieces of a failed request are never issued */
	if (result < 0)
		wspi_err_set(r->err, result, "%s", rq->msg);
	free(rq);
	/* r belongs to the caller from here on: do not touch it after done() */
	r->done(r, result);

	pthread_mutex_lock(&io->lock);
	if (--io->active == 0)
		pthread_cond_broadcast(&io->idle_cv);
	pthread_mutex_unlock(&io->lock);
}

/* ---------------------------------------------------------------------- */
/* Synchronous read                                                        */

struct sync_wait {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int finished, result;
};

static void sync_done(struct io_req *r, int result)
{
	struct sync_wait *w = r->ctx;

	pthread_mutex_lock(&w->lock);
	w->finished = 1;
	w->result = result;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->lock);
}

static int io_sync(struct io_engine *io, int write, unsigned file, uint64_t offset,
		   uint64_t length, void *buf, struct wspi_err *err)
{
	struct sync_wait w = { .finished = 0 };
	struct io_req r = {
		.file = file, .offset = offset, .length = length, .buf = buf, .write = write,
		.done = sync_done, .ctx = &w, .err = err,
	};
	int rc;

	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cv, NULL);
	rc = io_submit(io, &r);
	if (rc == 0) {
		pthread_mutex_lock(&w.lock);
		while (!w.finished)
			pthread_cond_wait(&w.cv, &w.lock);
		pthread_mutex_unlock(&w.lock);
		rc = w.result;
	}
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.lock);
	return rc;
}

int io_read(struct io_engine *io, unsigned file, uint64_t offset, uint64_t length, void *buf,
	    struct wspi_err *err)
{
	return io_sync(io, 0, file, offset, length, buf, err);
}

int io_write(struct io_engine *io, unsigned file, uint64_t offset, uint64_t length,
	     const void *buf, struct wspi_err *err)
{
	return io_sync(io, 1, file, offset, length, (void *)buf, err);
}
