/*
 * Private to src/io: the engine's state shared by the common logic
 * (engine.c) and the backends (uring.c, pool.c, mmap.c).
 *
 * A request (struct io_req) is split into pieces of at most max_request
 * bytes.  Pieces live in a pool of queue_depth records; a request waits in a
 * FIFO until its pieces can all be issued.  Each piece is read by one or more
 * attempts (short reads, retries); when it ends, piece_finish() accounts it
 * to its request, which completes once all its issued pieces have ended.
 */
#ifndef WSP_IO_ENGINE_H
#define WSP_IO_ENGINE_H

#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>
#include <liburing.h>

#include "io/io.h"

#define IO_ALIGN 4096u
#define IO_EAGAIN_MAX 16        /* -EAGAIN reissues of one piece before giving up */
#define IO_MAX_PIECE (1ull << 30)  /* one SQE/pread length: stay far below INT_MAX */
#define IO_MAX_BUFS 64          /* registered iovecs (a buffer is cut into 1 GiB iovecs) */

struct io_engine;

struct io_file {
	const char *path;
	int fd;
	int old_fd;             /* the O_DIRECT descriptor replaced by a buffered one: kept
	                           open until close, a worker may still be reading it */
	int direct;             /* reads through fd bypass the page cache */
	int given;              /* fd came from the caller (io_engine_open_fds): never
	                           reopened by path, and writable */
	void *map;              /* mmap backend */
	uint64_t map_len;
};

/* A request being served. */
struct io_rq {
	struct io_req *r;
	struct io_rq *next;     /* FIFO of requests with pieces left to issue */
	uint64_t read_len;      /* length, or io_span(length) when the file is read direct */
	uint64_t n_pieces, issued;
	unsigned outstanding;   /* pieces issued and not yet ended */
	int queued;             /* in the FIFO */
	int result;             /* first error */
	char msg[WSP_ERRMSG_MAX];
};

struct io_piece {
	struct io_rq *rq;
	struct io_piece *next;  /* free list / worker queue */
	unsigned file;
	uint64_t off;           /* file offset of the piece */
	char *buf;
	uint64_t len;           /* bytes asked for (a multiple of 4096 when direct) */
	uint64_t want;          /* bytes that must arrive (<= len; less only at the tail) */
	uint64_t done;          /* bytes of the piece known to be in buf */
	uint64_t cur;           /* where the current attempt starts, within the piece */
	unsigned eagain;
	int direct;             /* this attempt goes through an O_DIRECT descriptor */
	int write;              /* the request writes */
	int fault;              /* fault injected into the current attempt: <0 error, >0 short */
};

enum { STEP_AGAIN = 0, STEP_DONE = 1 };

struct io_backend {
	const char *name;
	/* Start threads / ring.  May return -EPERM etc. so that AUTO falls back. */
	int (*start)(struct io_engine *io, struct wspi_err *err);
	/* Issue one attempt of p.  Called with io->lock held; must not block. */
	void (*issue)(struct io_engine *io, struct io_piece *p);
	/* After a batch of issue(): push it to the kernel.  io->lock held. */
	void (*flush)(struct io_engine *io);
	/* A descriptor of file i changed (O_DIRECT fallback).  io->lock held. */
	void (*file_changed)(struct io_engine *io, unsigned i);
	int (*register_buffer)(struct io_engine *io, void *buf, uint64_t len);
	/* Stop and free everything started; no request is in flight. */
	void (*stop)(struct io_engine *io);
};

struct io_engine {
	struct io_config cfg;
	const struct io_backend *be;
	struct io_file *files;
	unsigned n_files;
	int direct_wanted;      /* cfg.direct and the backend can do it */

	pthread_mutex_t lock;
	pthread_cond_t idle_cv; /* active dropped to 0 */
	struct io_piece *pieces, *free_pieces;
	struct io_rq *fifo_head, *fifo_tail;
	uint64_t active;        /* requests accepted and not yet completed */
	unsigned noticed;       /* NOTICE_* bits already said */

	/* pool backends (pread, mmap) */
	pthread_t *workers;
	unsigned n_workers;
	pthread_cond_t work_cv;
	struct io_piece *work_head, *work_tail;
	int stopping;
	int64_t (*pool_read)(struct io_engine *io, struct io_piece *p, int fd);  /* bytes or -errno */

	/* io_uring backend */
	struct io_uring ring;
	int ring_ok, files_registered;
	pthread_t reaper;
	struct iovec bufs[IO_MAX_BUFS];
	unsigned n_bufs, bufs_registered;
};

enum {
	NOTICE_URING = 1u << 0,
	NOTICE_DIRECT = 1u << 1,
	NOTICE_MEMLOCK = 1u << 2,
	NOTICE_FILES = 1u << 3,
};

extern const struct io_backend io_backend_uring, io_backend_pread, io_backend_mmap;

/* engine.c */
void io_notice_once(struct io_engine *io, unsigned kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Consult the fault hook for the attempt about to be issued (lock held). */
void io_fault_consult(struct io_engine *io, struct io_piece *p);
/* Judge the result of one attempt (a byte count or -errno, before any fault
 * is applied).  STEP_AGAIN: issue the next attempt (p->cur set);
 * STEP_DONE: the piece ended, its request's result updated on failure. */
int io_piece_step(struct io_engine *io, struct io_piece *p, int64_t res);
/* The piece ended: account it, issue waiting pieces, complete its request. */
void io_piece_finish(struct io_engine *io, struct io_piece *p);
/* Pool backends: start n workers that run pool_read on queued pieces. */
int io_pool_start(struct io_engine *io, unsigned n, struct wspi_err *err);
void io_pool_issue(struct io_engine *io, struct io_piece *p);
void io_pool_stop(struct io_engine *io);

static inline uint64_t io_attempt_off(const struct io_piece *p)
{
	return p->off + p->cur;
}
static inline uint64_t io_attempt_len(const struct io_piece *p)
{
	return p->len - p->cur;
}
static inline char *io_attempt_buf(const struct io_piece *p)
{
	return p->buf + p->cur;
}

#endif
