/* Tiny helpers shared by the C tests: checks that report file:line and make
 * the test fail (exit 1), skip (exit 77), and scratch directories. */
#ifndef WSP_TESTLIB_H
#define WSP_TESTLIB_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T_SKIP 77

#define CHECK(cond)                                                                \
	do {                                                                       \
		if (!(cond)) {                                                     \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,     \
				__LINE__, #cond);                                  \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

/* expr must return `want` (an exact return code). */
#define CHECK_RC(expr, want)                                                       \
	do {                                                                       \
		long long got_ = (long long)(expr);                                \
		if (got_ != (long long)(want)) {                                   \
			fprintf(stderr, "%s:%d: %s returned %lld (%s), want %lld\n",   \
				__FILE__, __LINE__, #expr, got_,                   \
				wsp_strerror((int)got_), (long long)(want));       \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

#define SKIP(...)                                                                  \
	do {                                                                       \
		fprintf(stderr, "skip: " __VA_ARGS__);                             \
		fputc('\n', stderr);                                               \
		exit(T_SKIP);                                                      \
	} while (0)

/* A fresh scratch directory under $TMPDIR (or /tmp), removed by t_cleanup().
 * Returns its path (static storage). */
static inline const char *t_scratch(const char *tag)
{
	static char dir[512];
	const char *base = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/wsp-%s-XXXXXX", base && *base ? base : "/tmp", tag);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(1);
	}
	return dir;
}

/* A bf16 value, given as its bits, as the float it denotes. */
static inline float t_bf16f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Gradient k of tensor t of a layer: deterministic bf16 values, some
 * negative, some tiny, the first -0 (the gradient tests' data). */
static inline void t_fill_grad(uint16_t *g, uint64_t n, uint32_t layer, uint32_t t, unsigned k)
{
	uint64_t x = 0x9E3779B97F4A7C15ull * (layer * 131u + t * 7u + k + 1);
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		g[i] = (uint16_t)(0x3000 + (x % 0x1000)) | (uint16_t)((x >> 20 & 1) << 15);
	}
	if (n)
		g[0] = 0x8000;
}

/* n listings of rows in order of row, as a caller that does not mark
 * repeats lists an embedding's tokens: about a quarter list the row before
 * again, the others the next row, or (one time in `skip`) the one after.
 * Returns the last row listed. */
static inline int64_t t_rows_listed(int64_t *list, int n, uint64_t seed, unsigned skip)
{
	uint64_t x = seed;
	int64_t row = 0;
	for (int k = 0; k < n; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (k && x % 4 == 0)   /* listed again */
			list[k] = list[k - 1];
		else
			list[k] = row = row + 1 + (x % skip == 0);
	}
	return row;
}

/* acc (n fp32) equals want (n floats) bit for bit; else says where (the
 * gradient tests' comparison). */
static inline int t_same_floats(const float *acc, const float *want, uint64_t n, const char *what)
{
	for (uint64_t i = 0; i < n; i++)
		if (memcmp(&acc[i], &want[i], 4) != 0) {
			fprintf(stderr, "%s: element %llu: %a, want %a\n", what, (unsigned long long)i,
				acc[i], want[i]);
			return 0;
		}
	return 1;
}

static inline void t_rmrf(const char *path)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", path);
}

#endif
