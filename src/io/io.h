/*
 * The I/O engine: asynchronous reads of shard files, and writes to files a
 * caller opened itself (io_engine_open_fds: the overflow files).
 *
 * Backends: io_uring (registered files, optional registered buffers, O_DIRECT),
 * a pread thread pool, and mmap+memcpy.  WSP_IO_AUTO tries io_uring and falls
 * back to pread when it is refused (EPERM/ENOSYS/io_uring_disabled); O_DIRECT
 * falls back to buffered reads when refused (EINVAL on tmpfs/overlayfs);
 * registered buffers are skipped when RLIMIT_MEMLOCK is too small.  Each
 * fallback is reported once through config.notice.
 *
 * Every request is split into pieces of at most max_request bytes, issued up
 * to queue_depth at a time, matched on completion by tag, short reads
 * resubmitted for the rest, -EAGAIN retried a bounded number of times, a
 * zero-byte read before the requested end is an error (-EIO, "file shrank").
 */
#ifndef WSP_IO_IO_H
#define WSP_IO_IO_H

#include <stdint.h>
#include "common/error.h"
#include "wspager.h"

struct io_engine;
struct io_req;

/* Test-only fault injection, consulted for every piece before it is issued
 * (or, for io_uring, applied to its completion).  Return 0 to proceed
 * normally, a negative errno to fail the piece with it, or a positive n to
 * make the piece a short read of n bytes.  NULL in production. */
typedef int (*io_fault_fn)(void *ctx, unsigned file, uint64_t offset, uint64_t len);
/* Both config.fault and config.notice may be called from several engine
 * threads at once, and must not call back into the engine. */

struct io_config {
	enum wsp_io_backend backend;
	unsigned queue_depth;      /* pieces in flight; default 32 */
	unsigned threads;          /* pread workers; default 4 */
	int direct;                /* try O_DIRECT */
	uint64_t max_request;      /* piece size; default 1 MiB */
	void (*notice)(void *ctx, const char *msg);
	void *notice_ctx;
	io_fault_fn fault;
	void *fault_ctx;
};
void io_config_init(struct io_config *c);

struct io_req {
	unsigned file;             /* index into the engine's paths */
	uint64_t offset;           /* direct I/O: multiple of 4096 */
	uint64_t length;           /* bytes wanted; direct I/O reads up to a multiple
	                              of 4096, so `buf` must hold io_span(length) */
	void *buf;                 /* direct I/O: 4096-aligned */
	int write;                 /* write `length` bytes of buf instead (a file of
	                              io_engine_open_fds; direct: length 4096-aligned) */
	/* Called exactly once from an engine thread: result 0 when all `length`
	 * bytes are in buf, else a negative code with detail in *err. */
	void (*done)(struct io_req *r, int result);
	void *ctx;
	struct wspi_err *err;       /* where failures are described; may be NULL */
	/* engine-private bookkeeping */
	uint64_t priv_done, priv_pending;
	int priv_result;
};

static inline uint64_t io_span(uint64_t length)
{
	return (length + 4095) / 4096 * 4096;
}

int io_engine_open(const struct io_config *cfg, const char *const *paths, unsigned n_paths,
		   struct io_engine **out, struct wspi_err *err);
/* The same over descriptors the caller opened (read-write; the engine
 * keeps duplicates, so the caller may close its own): reads and writes,
 * direct where the descriptor is O_DIRECT.  names[i] stands for file i in
 * messages.  Not with the mmap backend. */
int io_engine_open_fds(const struct io_config *cfg, const int *fds, const char *const *names,
		       unsigned n, struct io_engine **out, struct wspi_err *err);
/* Waits for requests in flight, then frees everything. */
void io_engine_close(struct io_engine *io);
/* Register `len` bytes at `buf` as a fixed buffer (io_uring only; a no-op for
 * the others).  Failing for RLIMIT_MEMLOCK is not an error: the engine then
 * uses plain reads and says so once.  Call before the first submit.  The
 * buffer must stay mapped until io_engine_close() (its pages are pinned). */
int io_engine_register_buffer(struct io_engine *io, void *buf, uint64_t len);
/* Queue a read; never blocks except while queue_depth pieces are in flight. */
int io_submit(struct io_engine *io, struct io_req *r);
/* Synchronous read (submit + wait).  Not from a done callback: that thread
 * may be the one that would complete it. */
int io_read(struct io_engine *io, unsigned file, uint64_t offset, uint64_t length, void *buf,
	    struct wspi_err *err);
/* Synchronous write (submit + wait), the same way. */
int io_write(struct io_engine *io, unsigned file, uint64_t offset, uint64_t length,
	     const void *buf, struct wspi_err *err);
const char *io_engine_backend(const struct io_engine *io);   /* "uring" "pread" "mmap" */
int io_engine_direct(const struct io_engine *io);            /* reads bypass the page cache */

#endif
