/* RLIMIT_MEMLOCK too small for registered buffers: registering a 64 MiB
 * buffer is not an error, the engine says so once and reads into the buffer
 * correctly without fixed buffers. */
#include <errno.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "iotest.h"

#define FILE_SIZE (9ull * 1048576 + 55)
#define BUF (64u << 20)

/* Root's CAP_IPC_LOCK ignores RLIMIT_MEMLOCK: drop it from this process. */
static int drop_ipc_lock(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d) < 0)
		return -errno;
	d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	d[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
	if (syscall(SYS_capset, &h, d) < 0)
		return -errno;
	return 0;
}

int main(void)
{
	const char *dir = t_scratch("io-memlock");
	char path[600];
	struct t_notices notes;
	struct io_engine *io;
	struct wspi_err err;
	struct rlimit rl = { .rlim_cur = 64 << 10, .rlim_max = 64 << 10 };
	char *buf;
	int rc;

	snprintf(path, sizeof(path), "%s/words", dir);
	t_write_words(path, FILE_SIZE);
	t_notices_init(&notes);
	wspi_err_init(&err);
	CHECK(drop_ipc_lock() == 0);
	CHECK(setrlimit(RLIMIT_MEMLOCK, &rl) == 0);

	struct io_config cfg;
	const char *paths[1] = { path };
	io_config_init(&cfg);
	cfg.backend = WSP_IO_URING;
	cfg.notice = t_notice;
	cfg.notice_ctx = &notes;
	rc = io_engine_open(&cfg, paths, 1, &io, &err);
	if (rc < 0) {
		t_rmrf(dir);
		/* EPERM/ENOSYS: no io_uring here.  ENOMEM: the kernel charges the
		 * rings to the user's locked memory, which other processes of the
		 * same user are using (the limit is compared with the user's total) */
		if (rc == -EPERM || rc == -ENOSYS || rc == -ENOMEM)
			SKIP("io_uring ring not available under a 64 KiB RLIMIT_MEMLOCK: %s", err.msg);
		fprintf(stderr, "io_engine_open: %s\n", err.msg);
		return 1;
	}
	buf = t_aligned(BUF);
	CHECK_RC(io_engine_register_buffer(io, buf, BUF), 0);
	CHECK(notes.count == 1);
	CHECK(t_notices_with(&notes,
			     "io_uring: cannot register buffers (RLIMIT_MEMLOCK): using unregistered reads") == 1);
	/* a second registration is refused the same way, silently */
	CHECK_RC(io_engine_register_buffer(io, buf, 1 << 20), 0);
	CHECK(notes.count == 1);

	CHECK_RC(io_read(io, 0, 0, FILE_SIZE, buf, &err), 0);
	CHECK(t_check_words(buf, 0, FILE_SIZE) == UINT64_MAX);
	CHECK_RC(io_read(io, 0, 8192, 3000000, buf + (32u << 20), &err), 0);
	CHECK(t_check_words(buf + (32u << 20), 8192, 3000000) == UINT64_MAX);
	io_engine_close(io);
	free(buf);
	wspi_err_destroy(&err);
	t_rmrf(dir);
	return 0;
}
