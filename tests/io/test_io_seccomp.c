/* io_uring refused for real (a seccomp filter makes io_uring_setup fail with
 * EPERM, as in containers): AUTO falls back to pread, says so once, reads
 * correctly; an explicit io_uring backend is a clear error.  The same with
 * ENOSYS (a kernel built without io_uring), in a child of its own so that
 * its filter does not stack with the EPERM one. */
#include <errno.h>
#include <liburing.h>
#include <sys/wait.h>

#include "iotest.h"
#include "seccomp.h"

#define FILE_SIZE (2ull * 1048576 + 4321)

/* Every byte of the file read back through io, in pieces and whole. */
static void read_all(struct io_engine *io, char *buf, struct wspi_err *err)
{
	for (uint64_t off = 0; off < FILE_SIZE; off += 300 * 4096) {
		uint64_t len = FILE_SIZE - off < 700001 ? FILE_SIZE - off : 700001;
		CHECK_RC(io_read(io, 0, off, len, buf, err), 0);
		CHECK(t_check_words(buf, off, len) == UINT64_MAX);
	}
	CHECK_RC(io_read(io, 0, 0, FILE_SIZE, buf, err), 0);
	CHECK(t_check_words(buf, 0, FILE_SIZE) == UINT64_MAX);
}

/* In a child: io_uring_setup fails with ENOSYS.  Exits 0, 1 or 77. */
static void enosys_child(const char *path, char *buf)
{
	struct t_notices notes;
	struct io_engine *io;
	struct io_uring ring;
	struct wspi_err err;
	int rc;

	t_notices_init(&notes);
	wspi_err_init(&err);
	rc = t_seccomp_refuse_uring_with(ENOSYS);
	if (rc < 0)
		SKIP("cannot install a seccomp filter: %s", strerror(-rc));
	CHECK_RC(io_uring_queue_init(8, &ring, 0), -ENOSYS);

	CHECK_RC(t_open(WSP_IO_AUTO, 1, path, &notes, &io, &err), 0);
	CHECK(strcmp(io_engine_backend(io), "pread") == 0);
	CHECK(notes.count == 1);
	CHECK(t_notices_with(&notes, "io_uring refused (ENOSYS): using the pread backend") == 1);
	read_all(io, buf, &err);
	io_engine_close(io);
	CHECK(notes.count == 1);
	fprintf(stderr, "ENOSYS: one notice, reads correct through the pread backend\n");

	struct io_config cfg;
	const char *paths[1] = { path };
	io_config_init(&cfg);
	cfg.backend = WSP_IO_URING;
	io = (void *)1;
	CHECK_RC(io_engine_open(&cfg, paths, 1, &io, &err), -ENOSYS);
	CHECK(io == NULL);
	fprintf(stderr, "explicit uring (ENOSYS): %s\n", err.msg);
	CHECK(strstr(err.msg, "io_uring") && strstr(err.msg, "use the pread backend"));
	wspi_err_destroy(&err);
	exit(0);
}

int main(void)
{
	const char *dir = t_scratch("io-seccomp");
	char path[600];
	struct t_notices notes;
	struct io_engine *io;
	struct io_uring ring;
	struct wspi_err err;
	char *buf = t_aligned(FILE_SIZE);
	int rc;

	snprintf(path, sizeof(path), "%s/words", dir);
	t_write_words(path, FILE_SIZE);
	t_notices_init(&notes);
	wspi_err_init(&err);

	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		enosys_child(path, buf);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st));
	if (WEXITSTATUS(st) == T_SKIP) {
		t_rmrf(dir);
		SKIP("cannot install a seccomp filter (ENOSYS case)");
	}
	CHECK(WEXITSTATUS(st) == 0);

	rc = t_seccomp_refuse_uring();
	if (rc < 0) {
		t_rmrf(dir);
		SKIP("cannot install a seccomp filter: %s", strerror(-rc));
	}
	/* the filter works: */
	CHECK_RC(io_uring_queue_init(8, &ring, 0), -EPERM);

	CHECK_RC(t_open(WSP_IO_AUTO, 1, path, &notes, &io, &err), 0);
	CHECK(strcmp(io_engine_backend(io), "pread") == 0);
	CHECK(notes.count == 1);
	CHECK(t_notices_with(&notes, "io_uring refused (EPERM): using the pread backend") == 1);
	for (uint64_t off = 0; off < FILE_SIZE; off += 300 * 4096) {
		uint64_t len = FILE_SIZE - off < 700001 ? FILE_SIZE - off : 700001;
		CHECK_RC(io_read(io, 0, off, len, buf, &err), 0);
		CHECK(t_check_words(buf, off, len) == UINT64_MAX);
	}
	CHECK_RC(io_read(io, 0, 0, FILE_SIZE, buf, &err), 0);
	CHECK(t_check_words(buf, 0, FILE_SIZE) == UINT64_MAX);
	io_engine_close(io);
	CHECK(notes.count == 1);

	/* asked for io_uring by name: no silent fallback */
	struct io_config cfg;
	const char *paths[1] = { path };
	io_config_init(&cfg);
	cfg.backend = WSP_IO_URING;
	cfg.notice = t_notice;
	cfg.notice_ctx = &notes;
	io = (void *)1;
	CHECK_RC(io_engine_open(&cfg, paths, 1, &io, &err), -EPERM);
	CHECK(io == NULL);
	fprintf(stderr, "explicit uring: %s\n", err.msg);
	CHECK(strstr(err.msg, "io_uring") && strstr(err.msg, "not permitted"));

	free(buf);
	wspi_err_destroy(&err);
	t_rmrf(dir);
	return 0;
}
