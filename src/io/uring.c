/*
 * io_uring backend.
 *
 * Submission: any thread that calls io_submit(), and the reaper when it
 * resubmits the rest of a short read, prepares SQEs under the engine lock
 * (the same lock that guards the piece pool and the request FIFO, so taking
 * a piece and issuing it is one critical section).  A dedicated submitter
 * thread would add a hand-off and a wake-up per piece for nothing: the lock
 * is held only to fill SQEs and enter the kernel once per batch.
 *
 * Completion: one reaper thread per engine waits on the CQ.  It is the only
 * consumer of the CQ, so the CQ side needs no lock.  Each SQE carries the
 * address of its piece record as user_data; completions are matched by that
 * tag, never by their order.  A NOP with user_data NULL tells the reaper to
 * leave (sent by stop() once no request is in flight).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "io/engine.h"

/* The submitter fills a piece before its SQE is published and the reaper
 * reads it after the CQE hands it back: the kernel orders the two, which a
 * thread sanitizer cannot see.  Tell it, so that TSan builds report real
 * races in the engine rather than this hand-off. */
#ifndef __has_feature
#define __has_feature(x) 0   /* GCC before 14 */
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define ring_publish(p) __tsan_release(p)
#define ring_receive(p) __tsan_acquire(p)
#else
#define ring_publish(p) ((void)(p))
#define ring_receive(p) ((void)(p))
#endif

#define IO_FIXED_IOV_MAX (1ull << 30)   /* the kernel's limit for one registered iovec */

static void *reaper(void *arg)
{
	struct io_engine *io = arg;

	for (;;) {
		struct io_uring_cqe *cqe;
		struct io_piece *p;
		int res, ret;

		ret = io_uring_wait_cqe(&io->ring, &cqe);
		if (ret == -EINTR || ret == -EAGAIN)
			continue;
		if (ret < 0) {
			/* cannot happen with a valid ring; do not spin */
			usleep(1000);
			continue;
		}
		p = io_uring_cqe_get_data(cqe);
		if (p)
			ring_receive(p);
		res = cqe->res;
		io_uring_cqe_seen(&io->ring, cqe);
		if (!p)
			break;
		if (io_piece_step(io, p, res) == STEP_AGAIN) {
			pthread_mutex_lock(&io->lock);
			io_backend_uring.issue(io, p);
			io_backend_uring.flush(io);
			pthread_mutex_unlock(&io->lock);
		} else {
			io_piece_finish(io, p);
		}
	}
	return NULL;
}

static int fixed_buffer_index(const struct io_engine *io, const char *buf, uint64_t len)
{
	for (unsigned i = 0; i < io->n_bufs; i++) {
		const char *base = io->bufs[i].iov_base;
		if (buf >= base && len <= io->bufs[i].iov_len &&
		    (uint64_t)(buf - base) <= io->bufs[i].iov_len - len)
			return (int)i;
	}
	return -1;
}

static struct io_uring_sqe *get_sqe(struct io_engine *io)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);

	/* The SQ has queue_depth entries and at most queue_depth pieces are in
	 * flight, each with at most one SQE, so this only waits if an earlier
	 * flush could not push its SQEs to the kernel. */
	while (!sqe) {
		io_uring_submit(&io->ring);
		sqe = io_uring_get_sqe(&io->ring);
		if (!sqe)
			usleep(50);
	}
	return sqe;
}

static void uring_issue(struct io_engine *io, struct io_piece *p)
{
	struct io_file *f = &io->files[p->file];
	struct io_uring_sqe *sqe = get_sqe(io);
	char *buf;
	unsigned len;
	uint64_t off;
	int fd = io->files_registered ? (int)p->file : f->fd;
	int idx;

	p->direct = f->direct;
	io_fault_consult(io, p);
	buf = io_attempt_buf(p);
	len = (unsigned)io_attempt_len(p);   /* at most max_request <= 1 GiB */
	off = io_attempt_off(p);
	idx = io->bufs_registered ? fixed_buffer_index(io, buf, len) : -1;
	if (p->write && idx >= 0)
		io_uring_prep_write_fixed(sqe, fd, buf, len, off, idx);
	else if (p->write)
		io_uring_prep_write(sqe, fd, buf, len, off);
	else if (idx >= 0)
		io_uring_prep_read_fixed(sqe, fd, buf, len, off, idx);
	else
		io_uring_prep_read(sqe, fd, buf, len, off);
	if (io->files_registered)
		sqe->flags |= IOSQE_FIXED_FILE;
	/* A buffered read that hits the page cache would be copied inline by
	 * io_uring_enter, under the engine lock, by one thread: send it to the
	 * kernel's io-wq workers instead so that copies run in parallel
	 * (measured in docs/PERFORMANCE-io.md). */
	if (!p->direct)
		sqe->flags |= IOSQE_ASYNC;
	ring_publish(p);
	io_uring_sqe_set_data(sqe, p);
}

static void uring_flush(struct io_engine *io)
{
	unsigned tries = 0;

	while (io_uring_sq_ready(&io->ring) > 0) {
		int ret = io_uring_submit(&io->ring);
		if (ret > 0)
			continue;
		/* -EBUSY/-EAGAIN: the CQ or the kernel is momentarily full; the
		 * reaper drains it without this lock.  Anything else leaves the
		 * SQEs in the ring for the next flush. */
		if (++tries > 20000)
			break;
		usleep(50);
	}
}

static void uring_file_changed(struct io_engine *io, unsigned i)
{
	int fd = io->files[i].fd;

	/* The old descriptor stays in flight requests' hands until they end */
	if (io->files_registered && io_uring_register_files_update(&io->ring, i, &fd, 1) != 1) {
		/* cannot update the table: stop using fixed files altogether */
		io_uring_unregister_files(&io->ring);
		io->files_registered = 0;
	}
}

static int uring_start(struct io_engine *io, struct wspi_err *err)
{
	struct io_uring_params params;
	int ret, *fds;

	memset(&params, 0, sizeof(params));
	ret = io_uring_queue_init_params(io->cfg.queue_depth, &io->ring, &params);
	if (ret < 0)
		return WSP_ERR(err, ret, "io_uring_queue_init: %s%s", strerror(-ret),
			       ret == -EPERM || ret == -ENOSYS || ret == -EACCES
				       ? " (io_uring refused here; use the pread backend)" : "");
	io->ring_ok = 1;

	fds = malloc(sizeof(*fds) * (io->n_files ? io->n_files : 1));
	if (!fds) {
		io_uring_queue_exit(&io->ring);
		return WSP_ERR(err, -ENOMEM, "io: out of memory");
	}
	for (unsigned i = 0; i < io->n_files; i++)
		fds[i] = io->files[i].fd;
	ret = io->n_files ? io_uring_register_files(&io->ring, fds, io->n_files) : -EINVAL;
	free(fds);
	io->files_registered = ret == 0;
	if (ret < 0 && io->n_files)
		io_notice_once(io, NOTICE_FILES, "io_uring: cannot register files (%s): using plain descriptors",
			       strerror(-ret));

	ret = pthread_create(&io->reaper, NULL, reaper, io);
	if (ret) {
		io_uring_queue_exit(&io->ring);
		io->ring_ok = 0;
		return WSP_ERR(err, -ret, "io: cannot start the completion thread: %s", strerror(ret));
	}
	return 0;
}

static void uring_stop(struct io_engine *io)
{
	struct io_uring_sqe *sqe;

	pthread_mutex_lock(&io->lock);
	sqe = get_sqe(io);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, NULL);
	uring_flush(io);
	pthread_mutex_unlock(&io->lock);
	pthread_join(io->reaper, NULL);
	/* exiting the ring unregisters its files and buffers */
	io_uring_queue_exit(&io->ring);
	io->ring_ok = 0;
}

/* The buffer must stay mapped until the engine is closed: the kernel holds
 * its pages pinned. */
static int uring_register_buffer(struct io_engine *io, void *buf, uint64_t len)
{
	unsigned n_new = (unsigned)((len + IO_FIXED_IOV_MAX - 1) / IO_FIXED_IOV_MAX);
	int ret;

	pthread_mutex_lock(&io->lock);
	if (io->n_bufs + n_new > IO_MAX_BUFS) {
		pthread_mutex_unlock(&io->lock);
		return -E2BIG;
	}
	if (io->bufs_registered) {
		io_uring_unregister_buffers(&io->ring);
		io->bufs_registered = 0;
	}
	/* the kernel takes at most 1 GiB per iovec: cut larger buffers */
	for (uint64_t at = 0; at < len; at += IO_FIXED_IOV_MAX) {
		io->bufs[io->n_bufs].iov_base = (char *)buf + at;
		io->bufs[io->n_bufs].iov_len = WSP_MIN(IO_FIXED_IOV_MAX, len - at);
		io->n_bufs++;
	}
	ret = io_uring_register_buffers(&io->ring, io->bufs, io->n_bufs);
	if (ret == 0) {
		io->bufs_registered = 1;
	} else if (ret == -ENOMEM || ret == -EPERM) {
		io_notice_once(io, NOTICE_MEMLOCK,
			       "io_uring: cannot register buffers (RLIMIT_MEMLOCK): using unregistered reads");
		ret = 0;
	} else {
		io->n_bufs -= n_new;   /* forget the refused buffer, keep the others */
		if (io->n_bufs && io_uring_register_buffers(&io->ring, io->bufs, io->n_bufs) == 0)
			io->bufs_registered = 1;
	}
	pthread_mutex_unlock(&io->lock);
	return ret;
}

const struct io_backend io_backend_uring = {
	.name = "uring",
	.start = uring_start,
	.issue = uring_issue,
	.flush = uring_flush,
	.file_changed = uring_file_changed,
	.register_buffer = uring_register_buffer,
	.stop = uring_stop,
};
