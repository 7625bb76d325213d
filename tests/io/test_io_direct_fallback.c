/* O_DIRECT refused: on tmpfs (/dev/shm) where the kernel refuses it, with a
 * seccomp filter that makes O_DIRECT opens fail with EINVAL as tmpfs and
 * overlayfs do, and when the first direct read fails with EINVAL.  Each time:
 * one notice naming the file, io_engine_direct() == 0, correct reads. */
#include <errno.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "iotest.h"
#include "seccomp.h"

#define FILE_SIZE (1048576 + 999)

static void check_reads(struct io_engine *io)
{
	struct wspi_err err;
	char *buf = t_aligned(FILE_SIZE);

	wspi_err_init(&err);
	CHECK_RC(io_read(io, 0, 0, FILE_SIZE, buf, &err), 0);
	CHECK(t_check_words(buf, 0, FILE_SIZE) == UINT64_MAX);
	CHECK_RC(io_read(io, 0, 40960, 5001, buf, &err), 0);
	CHECK(t_check_words(buf, 40960, 5001) == UINT64_MAX);
	/* the caller's alignment promise is still checked */
	CHECK_RC(io_read(io, 0, 4095, 10, buf, &err), -EINVAL);
	wspi_err_destroy(&err);
	free(buf);
}

static atomic_int consults;

static int einval_first(void *ctx, unsigned file, uint64_t off, uint64_t len)
{
	(void)ctx, (void)file, (void)off, (void)len;
	return atomic_fetch_add(&consults, 1) == 0 ? -EINVAL : 0;
}

static void expect_fallback(struct t_notices *notes, const char *path)
{
	char want[700];

	snprintf(want, sizeof(want), "O_DIRECT refused on %s (EINVAL): buffered reads", path);
	CHECK(notes->count == 1);
	CHECK(t_notices_with(notes, want) == 1);
}

int main(void)
{
	struct stat st;
	const char *dir;
	char path[600];
	struct io_engine *io;
	struct wspi_err err;
	int fd, rc;

	if (stat("/dev/shm", &st) < 0 || !S_ISDIR(st.st_mode))
		SKIP("no /dev/shm");
	setenv("TMPDIR", "/dev/shm", 1);
	dir = t_scratch("io-direct");
	snprintf(path, sizeof(path), "%s/words", dir);
	t_write_words(path, FILE_SIZE);
	wspi_err_init(&err);

	/* 1. tmpfs itself (Linux >= 6.6 accepts O_DIRECT there) */
	fd = open(path, O_RDONLY | O_DIRECT);
	int tmpfs_refuses = fd < 0 && errno == EINVAL;
	if (fd >= 0)
		close(fd);
	for (int be = WSP_IO_AUTO; be <= WSP_IO_PREAD; be += 2) {
		struct t_notices notes;
		t_notices_init(&notes);
		CHECK_RC(t_open(be, 1, path, &notes, &io, &err), 0);
		fprintf(stderr, "tmpfs, %s: direct=%d (kernel %s O_DIRECT there)\n",
			io_engine_backend(io), io_engine_direct(io),
			tmpfs_refuses ? "refuses" : "accepts");
		if (tmpfs_refuses) {
			expect_fallback(&notes, path);
			CHECK(io_engine_direct(io) == 0);
		}
		check_reads(io);
		io_engine_close(io);
	}

	/* 2. the open succeeds and the first direct read says EINVAL */
	for (int be = WSP_IO_URING; be <= WSP_IO_PREAD; be++) {
		struct t_notices notes;
		struct io_config cfg;
		const char *paths[1] = { path };
		t_notices_init(&notes);
		io_config_init(&cfg);
		cfg.backend = be;
		cfg.notice = t_notice;
		cfg.notice_ctx = &notes;
		cfg.fault = einval_first;
		consults = 0;
		rc = io_engine_open(&cfg, paths, 1, &io, &err);
		if (rc == -EPERM || rc == -ENOSYS)
			continue;
		CHECK_RC(rc, 0);
		if (!io_engine_direct(io)) {   /* already buffered: nothing to test */
			io_engine_close(io);
			continue;
		}
		check_reads(io);
		fprintf(stderr, "first read EINVAL, %s: direct=%d\n", io_engine_backend(io),
			io_engine_direct(io));
		CHECK(io_engine_direct(io) == 0);
		expect_fallback(&notes, path);
		io_engine_close(io);
	}

	/* 3. O_DIRECT opens refused for real, as overlayfs does */
	rc = t_seccomp_refuse_direct();
	if (rc < 0) {
		t_rmrf(dir);
		SKIP("cannot install a seccomp filter: %s", strerror(-rc));
	}
	CHECK(open(path, O_RDONLY | O_DIRECT) < 0 && errno == EINVAL);
	for (int be = WSP_IO_AUTO; be <= WSP_IO_PREAD; be++) {
		struct t_notices notes;
		t_notices_init(&notes);
		if (t_open(be, 1, path, &notes, &io, &err) == T_SKIP)
			continue;
		fprintf(stderr, "O_DIRECT open refused, %s: direct=%d\n", io_engine_backend(io),
			io_engine_direct(io));
		CHECK(io_engine_direct(io) == 0);
		expect_fallback(&notes, path);
		check_reads(io);
		io_engine_close(io);
		CHECK(notes.count == 1);
	}
	wspi_err_destroy(&err);
	t_rmrf(dir);
	return 0;
}
