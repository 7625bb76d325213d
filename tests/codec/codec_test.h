/* Helpers shared by the codec tests: deterministic data, segment layouts
 * with guard bytes between them, encode + decode in one call. */
#ifndef WSP_TESTS_CODEC_TEST_H
#define WSP_TESTS_CODEC_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "wspager.h"
#include "common/error.h"
#include "common/util.h"
#include "pack/chunk.h"
#include "pack/transform.h"

static uint64_t t_rng = 0x243F6A8885A308D3ull;

static inline uint64_t t_rand(void)
{
	/* splitmix64: fixed seed, same data on every run */
	uint64_t z = (t_rng += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline double t_gauss(double std)
{
	double u1 = ((double)(t_rand() >> 11) + 1.0) / 9007199254740993.0;
	double u2 = (double)(t_rand() >> 11) / 9007199254740992.0;
	return std * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Kinds of test data. */
enum t_data { T_RANDOM, T_GAUSS, T_SMALLINT };

/* Fill `n` bytes of elements of `dtype` (bytes past the last whole element
 * are random). */
static inline void t_fill(void *buf, size_t n, int dtype, enum t_data kind)
{
	uint8_t *p = buf;
	unsigned es = wsp_dtype_bits(dtype) / 8;
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)t_rand();
	if (kind == T_RANDOM || es == 0)
		return;
	for (i = 0; i + es <= n; i += es) {
		float f = (float)t_gauss(0.02);
		uint32_t x;
		uint64_t v;
		memcpy(&x, &f, 4);
		switch (kind == T_SMALLINT ? 0 : es) {
		case 2:
			x = dtype == WSP_DTYPE_F16 ? ((x >> 16) & 0x8000) | (((x >> 13) - 0x1c000) & 0x7fff)
						  : x >> 16;
			memcpy(p + i, &x, 2);
			break;
		case 4:
			memcpy(p + i, &x, 4);
			break;
		case 8: {
			double d = t_gauss(0.02);
			memcpy(p + i, &d, 8);
			break;
		}
		default:
			v = t_rand() % 7;
			memset(p + i, 0, es);
			memcpy(p + i, &v, WSP_MIN(es, 8u));
			break;
		}
	}
}

/* A destination of `total` bytes cut into segments at the given cut
 * points, each segment followed by a guard band that must stay intact. */
#define T_GUARD 64
#define T_MAX_SPANS 4096
struct t_dest {
	uint8_t *buf;
	size_t buf_len;
	struct wspi_span spans[T_MAX_SPANS];
	unsigned n;
};

/* cuts: sorted offsets in (0, total); may repeat (empty segments). */
static inline void t_dest_init(struct t_dest *d, size_t total, const size_t *cuts, unsigned n_cuts)
{
	size_t prev = 0, pos = T_GUARD;
	unsigned k;

	CHECK(n_cuts + 1 <= T_MAX_SPANS);
	d->buf_len = total + (size_t)(n_cuts + 2) * T_GUARD;
	d->buf = malloc(d->buf_len);
	CHECK(d->buf);
	memset(d->buf, 0xA5, d->buf_len);
	d->n = 0;
	for (k = 0; k <= n_cuts; k++) {
		size_t end = k < n_cuts ? cuts[k] : total;
		d->spans[d->n].ptr = d->buf + pos;
		d->spans[d->n].len = end - prev;
		d->n++;
		pos += end - prev + T_GUARD;
		prev = end;
	}
}

/* The segments hold `want` and every guard byte is untouched. */
static inline int t_dest_equal(const struct t_dest *d, const void *want)
{
	const uint8_t *w = want;
	uint8_t *p = d->buf;
	size_t off = 0, i;
	unsigned k;

	for (k = 0; k < d->n; k++) {
		uint8_t *s = d->spans[k].ptr;
		for (; p < s; p++)
			if (*p != 0xA5)
				return 0;
		if (memcmp(s, w + off, d->spans[k].len) != 0)
			return 0;
		off += d->spans[k].len;
		p = s + d->spans[k].len;
	}
	for (i = (size_t)(p - d->buf); i < d->buf_len; i++)
		if (d->buf[i] != 0xA5)
			return 0;
	return 1;
}

static inline void t_dest_free(struct t_dest *d)
{
	free(d->buf);
	d->buf = NULL;
}

static inline int t_cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	return x < y ? -1 : x > y;
}

/* n random cut points in [0, total], multiples of `align`. */
static inline unsigned t_random_cuts(size_t *cuts, unsigned n, size_t total, size_t align)
{
	unsigned k;

	for (k = 0; k < n; k++)
		cuts[k] = total / align ? (size_t)(t_rand() % (total / align + 1)) * align : 0;
	qsort(cuts, n, sizeof(*cuts), t_cmp_size);
	return n;
}

#endif
