/* Helpers for the io tests: self-describing files (each 8-byte word holds
 * its own offset, little-endian), byte-exact checks, a notice recorder. */
#ifndef WSP_TESTS_IOTEST_H
#define WSP_TESTS_IOTEST_H

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/io.h"
#include "testlib.h"

/* The byte at offset `at` of a self-describing file. */
static inline uint8_t t_word_byte(uint64_t at)
{
	uint64_t word = at & ~7ull;
	return (uint8_t)(word >> (8 * (at & 7)));
}

static inline void t_write_words(const char *path, uint64_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	uint64_t chunk = 1 << 20, at = 0;
	uint8_t *b = malloc(chunk);

	CHECK(fd >= 0 && b);
	while (at < size) {
		uint64_t n = size - at < chunk ? size - at : chunk;
		for (uint64_t i = 0; i < n; i++)
			b[i] = t_word_byte(at + i);
		CHECK(write(fd, b, n) == (ssize_t)n);
		at += n;
	}
	CHECK(fsync(fd) == 0);
	close(fd);
	free(b);
}

/* Returns the first offset that is wrong, or UINT64_MAX when all are right. */
static inline uint64_t t_check_words(const void *buf, uint64_t off, uint64_t len)
{
	const uint8_t *b = buf;
	for (uint64_t i = 0; i < len; i++)
		if (b[i] != t_word_byte(off + i))
			return off + i;
	return UINT64_MAX;
}

struct t_notices {
	pthread_mutex_t lock;
	int count;
	char last[512];
	char all[4096];
};

static inline void t_notice(void *ctx, const char *msg)
{
	struct t_notices *n = ctx;
	pthread_mutex_lock(&n->lock);
	n->count++;
	snprintf(n->last, sizeof(n->last), "%s", msg);
	size_t used = strlen(n->all);
	snprintf(n->all + used, sizeof(n->all) - used, "%s\n", msg);
	pthread_mutex_unlock(&n->lock);
	fprintf(stderr, "notice: %s\n", msg);
}

static inline void t_notices_init(struct t_notices *n)
{
	memset(n, 0, sizeof(*n));
	pthread_mutex_init(&n->lock, NULL);
}

/* How many notices contain `needle`. */
static inline int t_notices_with(struct t_notices *n, const char *needle)
{
	int c = 0;
	pthread_mutex_lock(&n->lock);
	for (const char *s = n->all; (s = strstr(s, needle)); s++)
		c++;
	pthread_mutex_unlock(&n->lock);
	return c;
}

static inline void *t_aligned(uint64_t len)
{
	void *p = NULL;
	CHECK(posix_memalign(&p, 4096, io_span(len) ? io_span(len) : 4096) == 0);
	return p;
}

/* Open an engine; returns 77 (skip) when io_uring is refused here. */
static inline int t_open(enum wsp_io_backend be, int direct, const char *path,
			 struct t_notices *notes, struct io_engine **io, struct wspi_err *err)
{
	struct io_config cfg;
	io_config_init(&cfg);
	cfg.backend = be;
	cfg.direct = direct;
	if (notes) {
		cfg.notice = t_notice;
		cfg.notice_ctx = notes;
	}
	const char *paths[1] = { path };
	int rc = io_engine_open(&cfg, paths, 1, io, err);
	if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES) {
		fprintf(stderr, "io_uring not available here: %s\n", err->msg);
		return T_SKIP;
	}
	if (rc < 0) {
		fprintf(stderr, "io_engine_open: %s\n", err->msg);
		exit(1);
	}
	return 0;
}

static const char *const t_backend_names[] = { "auto", "uring", "pread", "mmap" };

/* WSP_TEST_IO_BACKEND=pread limits a test to one backend (valgrind does not
 * see the kernel's io_uring writes, so it runs the pread backend only). */
static inline int t_backend_wanted(enum wsp_io_backend be)
{
	const char *only = getenv("WSP_TEST_IO_BACKEND");
	return !only || !*only || strcmp(only, t_backend_names[be]) == 0;
}

#endif
