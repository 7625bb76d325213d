/* Opening and closing an engine 200 times (each backend, three files, a read
 * each time, and a failed open) leaves no descriptor, mapping or thread
 * behind. */
#include <dirent.h>
#include <errno.h>

#include "iotest.h"

#define FILE_SIZE (200000ull)

/* The kernel's io-wq workers (iou-wrk-*) show up as tasks of the process
 * and leave some time after the ring is gone: they are not ours to count. */
static int kernel_worker(const char *tid)
{
	char path[300], comm[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%s/comm", tid);
	f = fopen(path, "r");
	if (!f)
		return 1;   /* already gone */
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	return strncmp(comm, "iou-", 4) == 0;
}

static int count_entries(const char *dirpath)
{
	DIR *d = opendir(dirpath);
	struct dirent *e;
	int tasks = strcmp(dirpath, "/proc/self/task") == 0;
	int n = 0;

	CHECK(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && !(tasks && kernel_worker(e->d_name)))
			n++;
	closedir(d);
	return n - (strcmp(dirpath, "/proc/self/fd") == 0);   /* the DIR's own fd */
}

/* Mappings of our files (thread stacks are cached by libc: not counted). */
static int count_maps(const char *dir)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024];
	int n = 0;

	CHECK(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, dir) != NULL;
	fclose(f);
	return n;
}

int main(void)
{
	const char *dir = t_scratch("io-leak");
	char paths_buf[3][600];
	const char *paths[4];
	struct wspi_err err;
	char *buf = t_aligned(FILE_SIZE);
	int fds0, tasks0, maps0;

	for (int i = 0; i < 3; i++) {
		snprintf(paths_buf[i], sizeof(paths_buf[i]), "%s/f%d", dir, i);
		t_write_words(paths_buf[i], FILE_SIZE + (uint64_t)i);
		paths[i] = paths_buf[i];
	}
	wspi_err_init(&err);
	fds0 = count_entries("/proc/self/fd");
	tasks0 = count_entries("/proc/self/task");
	maps0 = count_maps(dir);
	for (int round = 0; round < 200; round++) {
		for (int be = WSP_IO_AUTO; be <= WSP_IO_MMAP; be++) {
			struct io_config cfg;
			struct io_engine *io;
			if (!t_backend_wanted(be))
				continue;
			io_config_init(&cfg);
			cfg.backend = be;
			cfg.direct = round & 1;
			int rc = io_engine_open(&cfg, paths, 3, &io, &err);
			if (be == WSP_IO_URING && (rc == -EPERM || rc == -ENOSYS))
				continue;
			CHECK_RC(rc, 0);
			unsigned f = (unsigned)(round % 3);
			CHECK_RC(io_read(io, f, 4096, FILE_SIZE - 4096, buf, &err), 0);
			CHECK(t_check_words(buf, 4096, FILE_SIZE - 4096) == UINT64_MAX);
			io_engine_close(io);
		}
		/* mid-loop: the mmap backend's mappings are visible while open */
		if (round == 0 && t_backend_wanted(WSP_IO_MMAP)) {
			struct io_config c2;
			struct io_engine *m;
			io_config_init(&c2);
			c2.backend = WSP_IO_MMAP;
			CHECK_RC(io_engine_open(&c2, paths, 3, &m, &err), 0);
			CHECK(count_maps(dir) == maps0 + 3);
			io_engine_close(m);
		}
		/* a failed open (the third file is missing) frees what it took */
		struct io_config cfg;
		struct io_engine *io;
		io_config_init(&cfg);
		cfg.backend = t_backend_wanted(WSP_IO_URING) ? (enum wsp_io_backend)(round % 4)
							       : WSP_IO_PREAD;
		paths[3] = "/nonexistent/wsp-io-leak";
		const char *bad[3] = { paths[0], paths[1], paths[3] };
		CHECK_RC(io_engine_open(&cfg, bad, 3, &io, &err), -ENOENT);
		CHECK(strstr(err.msg, "/nonexistent/wsp-io-leak"));
	}
	fprintf(stderr, "fds %d -> %d, threads %d -> %d, maps %d -> %d\n", fds0,
		count_entries("/proc/self/fd"), tasks0, count_entries("/proc/self/task"), maps0,
		count_maps(dir));
	CHECK(count_entries("/proc/self/fd") == fds0);
	CHECK(count_entries("/proc/self/task") == tasks0);
	CHECK(count_maps(dir) == maps0);
	free(buf);
	wspi_err_destroy(&err);
	t_rmrf(dir);
	return 0;
}
