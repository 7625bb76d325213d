/* Writes through the engine, on descriptors the caller opened
 * (io_engine_open_fds, as the overflow files use it), for the uring and
 * pread backends, buffered and O_DIRECT where the file system takes it:
 *  - bytes written in several pieces in flight read back exactly, through
 *    the engine and through the caller's own descriptor (closed meanwhile:
 *    the engine keeps a duplicate);
 *  - short writes (injected) continue where they stopped;
 *  - an error (injected ENOSPC) fails the write with a message naming the
 *    file, the operation and the errno;
 *  - a direct write of a length that is not 4096-aligned is refused;
 *  - an engine over paths, and the mmap backend, never write. */
#include <errno.h>

#include "iotest.h"

#define SIZE (3u << 20)

struct fault {
	int mode;          /* 0 none, 1 short writes, 2 ENOSPC; set between requests */
	unsigned calls;    /* engine threads count at once: atomic */
};

static int hook(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	struct fault *f = ctx;
	(void)file;
	(void)off;
	__atomic_fetch_add(&f->calls, 1, __ATOMIC_RELAXED);
	int mode = __atomic_load_n(&f->mode, __ATOMIC_RELAXED);
	if (mode == 1 && len > 8192)
		return 4096;   /* a short write, aligned so that direct attempts stay aligned */
	if (mode == 2)
		return -ENOSPC;
	return 0;
}

static void run(const char *dir, enum wsp_io_backend be, int direct)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/w-%d-%d", dir, (int)be, direct);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0600);
	if (fd < 0 && direct) {
		printf("%s direct: O_DIRECT refused here, skipped\n", t_backend_names[be]);
		return;
	}
	CHECK(fd >= 0);
	struct fault f = { 0 };
	struct io_config cfg;
	io_config_init(&cfg);
	cfg.backend = be;
	cfg.direct = direct;
	cfg.queue_depth = 4;
	cfg.max_request = 1 << 20;
	cfg.fault = hook;
	cfg.fault_ctx = &f;
	struct io_engine *io;
	struct wspi_err err;
	wspi_err_init(&err);
	const char *names[1] = { "test file" };
	CHECK_RC(io_engine_open_fds(&cfg, &fd, names, 1, &io, &err), 0);
	uint8_t *buf = NULL, *back = NULL;
	CHECK(posix_memalign((void **)&buf, 4096, SIZE) == 0 && posix_memalign((void **)&back, 4096, SIZE) == 0);
	for (uint64_t i = 0; i < SIZE; i++)
		buf[i] = t_word_byte(i);

	CHECK_RC(io_write(io, 0, 0, SIZE, buf, &err), 0);
	memset(back, 0, SIZE);
	CHECK_RC(io_read(io, 0, 0, SIZE, back, &err), 0);
	CHECK(t_check_words(back, 0, SIZE) == UINT64_MAX);
	memset(back, 0, SIZE);
	CHECK(pread(fd, back, SIZE, 0) == (ssize_t)SIZE);
	CHECK(t_check_words(back, 0, SIZE) == UINT64_MAX);
	close(fd);   /* the engine has its own */

	/* short writes, then the rest: the same bytes at another offset */
	__atomic_store_n(&f.mode, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&f.calls, 0, __ATOMIC_RELAXED);
	CHECK_RC(io_write(io, 0, SIZE, SIZE, buf, &err), 0);
	CHECK(__atomic_load_n(&f.calls, __ATOMIC_RELAXED) > 3);   /* more attempts than pieces */
	__atomic_store_n(&f.mode, 0, __ATOMIC_RELAXED);
	memset(back, 0, SIZE);
	CHECK_RC(io_read(io, 0, SIZE, SIZE, back, &err), 0);
	CHECK(t_check_words(back, 0, SIZE) == UINT64_MAX);

	__atomic_store_n(&f.mode, 2, __ATOMIC_RELAXED);
	CHECK_RC(io_write(io, 0, 0, 1 << 20, buf, &err), -ENOSPC);
	printf("%s%s: %s\n", t_backend_names[be], direct ? " direct" : "", err.msg);
	CHECK(strstr(err.msg, "test file: write of") && strstr(err.msg, strerror(ENOSPC)));
	__atomic_store_n(&f.mode, 0, __ATOMIC_RELAXED);
	wspi_err_clear(&err);
	if (direct && io_engine_direct(io)) {
		CHECK_RC(io_write(io, 0, 0, 4096 + 100, buf, &err), -EINVAL);
		CHECK(strstr(err.msg, "must be 4096-aligned"));
		wspi_err_clear(&err);
	}
	io_engine_close(io);

	/* an engine over paths reads only */
	const char *paths[1] = { path };
	cfg.fault = NULL;
	CHECK_RC(io_engine_open(&cfg, paths, 1, &io, &err), 0);
	CHECK_RC(io_write(io, 0, 0, 4096, buf, &err), -EINVAL);
	CHECK(strstr(err.msg, "open for reading only"));
	io_engine_close(io);
	unlink(path);
	wspi_err_destroy(&err);
	free(buf);
	free(back);
}

int main(void)
{
	const char *dir = t_scratch("io-write");
	for (int be = WSP_IO_URING; be <= WSP_IO_PREAD; be++)
		for (int direct = 0; direct <= 1; direct++)
			if (t_backend_wanted(be))
				run(dir, be, direct);

	/* mmap cannot write: refused at open */
	struct io_config cfg;
	struct io_engine *io = NULL;
	struct wspi_err err;
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	io_config_init(&cfg);
	cfg.backend = WSP_IO_MMAP;
	wspi_err_init(&err);
	const char *names[1] = { "x" };
	CHECK_RC(io_engine_open_fds(&cfg, &fd, names, 1, &io, &err), -EINVAL);
	CHECK(io == NULL && strstr(err.msg, "mmap"));
	close(fd);
	wspi_err_destroy(&err);
	t_rmrf(dir);
	return 0;
}
