/* The overflow file (see overflow.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "writeback/overflow.h"

#define RING_DEPTH 8u
#define PIECE_BYTES (1ull << 20)   /* per request: eight in flight keep a disk busy */

struct overflow {
	int fd;
	int direct;
	int has_ring, use_ring;
	struct io_uring ring;
	char *dir;
	char how[48];
};

/* A file no other process can open and no crash leaves behind. */
static int open_nameless(const char *dir, int *direct)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC | O_DIRECT, 0600);
	*direct = fd >= 0;
	if (fd < 0 && (errno == EINVAL || errno == EOPNOTSUPP))
		fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 || (errno != EISDIR && errno != EOPNOTSUPP && errno != EINVAL))
		return fd;
	/* No O_TMPFILE on this filesystem: a name, unlinked at once. */
	size_t n = strlen(dir) + 32;
	char *path = malloc(n);
	if (!path) {
		errno = ENOMEM;
		return -1;
	}
	snprintf(path, n, "%s/.wsp-overflow-XXXXXX", dir);
	fd = mkostemp(path, O_CLOEXEC);
	if (fd >= 0) {
		unlink(path);
		int fl = fcntl(fd, F_GETFL);
		*direct = fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0;
	}
	free(path);
	return fd;
}

static int open_in(const char *dir, const char *what, struct overflow **out,
		   struct wspi_err *err)
{
	struct overflow *of = calloc(1, sizeof(*of));
	if (!of || !(of->dir = strdup(dir))) {
		free(of);
		return WSP_ERR(err, -ENOMEM, "overflow file: out of memory");
	}
	of->fd = open_nameless(dir, &of->direct);
	if (of->fd < 0) {
		int e = errno;
		free(of->dir);
		free(of);
		return WSP_ERR(err, -e, "overflow file for %s in %s: %s", what, dir, strerror(e));
	}
	of->use_ring = of->has_ring = io_uring_queue_init(RING_DEPTH, &of->ring, 0) == 0;
	snprintf(of->how, sizeof(of->how), "%s%s", of->use_ring ? "io_uring" : "pread/pwrite",
		 of->direct ? ", O_DIRECT" : "");
	*out = of;
	return 0;
}

int overflow_open(const char *dir, const char *pack_dir, const char *what,
		  struct overflow **out, struct wspi_err *err)
{
	const char *tmp = getenv("TMPDIR");
	const char *dirs[] = { dir, dir ? NULL : pack_dir,
			       dir ? NULL : (tmp && *tmp ? tmp : "/var/tmp") };
	int rc = -ENOENT;
	*out = NULL;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]) && !*out; i++)
		if (dirs[i])
			rc = open_in(dirs[i], what, out, err);
	return *out ? 0 : rc;
}

const char *overflow_dir(const struct overflow *of)
{
	return of->dir;
}

void overflow_close(struct overflow *of)
{
	if (!of)
		return;
	if (of->has_ring)
		io_uring_queue_exit(&of->ring);
	close(of->fd);
	free(of->dir);
	free(of);
}

const char *overflow_how(const struct overflow *of)
{
	return of->how;
}

struct span {
	uint64_t off, len;
	char *buf;
};

static void queue(struct overflow *of, int wr, const struct span *s, unsigned i)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&of->ring);   /* never NULL: <= RING_DEPTH out */
	if (wr)
		io_uring_prep_write(sqe, of->fd, s->buf, (unsigned)s->len, s->off);
	else
		io_uring_prep_read(sqe, of->fd, s->buf, (unsigned)s->len, s->off);
	io_uring_sqe_set_data64(sqe, i);
}

/* Up to RING_DEPTH pieces in flight; a short transfer continues where it
 * stopped.  Returns 0 or -errno (0 bytes moved is -EIO). */
static int ring_io(struct overflow *of, int wr, uint64_t off, char *buf, uint64_t len)
{
	struct span fl[RING_DEPTH];
	unsigned busy = 0;
	uint64_t next = 0;
	int rc = 0;
	for (;;) {
		for (unsigned i = 0; i < RING_DEPTH && rc == 0 && next < len; i++) {
			if (busy & (1u << i))
				continue;
			uint64_t n = len - next < PIECE_BYTES ? len - next : PIECE_BYTES;
			fl[i] = (struct span){ off + next, n, buf + next };
			next += n;
			queue(of, wr, &fl[i], i);
			busy |= 1u << i;
		}
		if (!busy)
			return rc;
		/* Submits whatever is queued (also after an interrupted call),
		 * and waits for one completion. */
		int s = io_uring_submit_and_wait(&of->ring, 1);
		struct io_uring_cqe *cqe = NULL;
		if (s >= 0)
			s = io_uring_peek_cqe(&of->ring, &cqe);
		if (s == -EINTR || s == -EAGAIN || s == -EBUSY)
			continue;
		if (s < 0) {
			/* The ring itself failed (not an I/O error): later
			 * transfers use pread/pwrite; the ring is torn down at
			 * close, which also ends what may still be in flight. */
			of->use_ring = 0;
			return s;
		}
		unsigned i = (unsigned)io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&of->ring, cqe);
		if (res == -EINTR || res == -EAGAIN) {
			queue(of, wr, &fl[i], i);
		} else if (res <= 0) {
			rc = rc ? rc : res ? res : -EIO;
			busy &= ~(1u << i);
		} else if ((uint64_t)res < fl[i].len && rc == 0) {
			fl[i].off += (uint64_t)res;
			fl[i].buf += res;
			fl[i].len -= (uint64_t)res;
			queue(of, wr, &fl[i], i);
		} else {
			busy &= ~(1u << i);
		}
	}
}

static int plain_io(struct overflow *of, int wr, uint64_t off, char *buf, uint64_t len)
{
	while (len) {
		ssize_t n = wr ? pwrite(of->fd, buf, len, (off_t)off) : pread(of->fd, buf, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		off += (uint64_t)n;
		buf += n;
		len -= (uint64_t)n;
	}
	return 0;
}

static int transfer(struct overflow *of, int wr, uint64_t off, char *buf, uint64_t len,
		    struct wspi_err *err)
{
	int rc = of->use_ring ? ring_io(of, wr, off, buf, len) : plain_io(of, wr, off, buf, len);
	if (rc < 0)
		return WSP_ERR(err, rc, "overflow file in %s: %s of %" PRIu64 " bytes at %" PRIu64
			       ": %s", of->dir, wr ? "write" : "read", len, off, strerror(-rc));
	return 0;
}

int overflow_write(struct overflow *of, uint64_t off, const void *buf, uint64_t len,
		   struct wspi_err *err)
{
	return transfer(of, 1, off, (char *)buf, len, err);
}

int overflow_read(struct overflow *of, uint64_t off, void *buf, uint64_t len, struct wspi_err *err)
{
	return transfer(of, 0, off, buf, len, err);
}
