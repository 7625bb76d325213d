/* The overflow file (see overflow.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/io.h"
#include "writeback/overflow.h"

/* Requests of 1 MiB, eight in flight: they keep a disk busy. */
#define PIECE_BYTES (1u << 20)
#define IN_FLIGHT 8u

struct overflow {
	struct io_engine *io;      /* over the file: io_uring, else pread/pwrite threads */
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
	int direct = 0;
	if (!of || !(of->dir = strdup(dir))) {
		free(of);
		return WSP_ERR(err, -ENOMEM, "overflow file: out of memory");
	}
	int fd = open_nameless(dir, &direct);
	if (fd < 0) {
		int e = errno;
		free(of->dir);
		free(of);
		return WSP_ERR(err, -e, "overflow file for %s in %s: %s", what, dir, strerror(e));
	}
	/* The engine's messages name the file by its directory: it has no name. */
	char label[WSP_ERRMSG_MAX];
	const char *names[1] = { label };
	snprintf(label, sizeof(label), "overflow file in %s", dir);
	struct io_config cfg;
	io_config_init(&cfg);
	cfg.backend = WSP_IO_AUTO;
	cfg.queue_depth = IN_FLIGHT;
	cfg.threads = 2;
	cfg.max_request = PIECE_BYTES;
	cfg.direct = direct;
	int rc = io_engine_open_fds(&cfg, &fd, names, 1, &of->io, err);
	close(fd);   /* the engine keeps its own descriptor */
	if (rc < 0) {
		free(of->dir);
		free(of);
		return rc;
	}
	snprintf(of->how, sizeof(of->how), "%s%s",
		 strcmp(io_engine_backend(of->io), "uring") == 0 ? "io_uring" : "pread/pwrite",
		 direct ? ", O_DIRECT" : "");
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
	io_engine_close(of->io);
	free(of->dir);
	free(of);
}

const char *overflow_how(const struct overflow *of)
{
	return of->how;
}

int overflow_write(struct overflow *of, uint64_t off, const void *buf, uint64_t len,
		   struct wspi_err *err)
{
	return io_write(of->io, 0, off, len, buf, err);
}

int overflow_read(struct overflow *of, uint64_t off, void *buf, uint64_t len, struct wspi_err *err)
{
	return io_read(of->io, 0, off, len, buf, err);
}
