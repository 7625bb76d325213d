/* wb_fill: a layer's new values into its buffer (see fill.h).  A copy or a
 * narrowing is memory-bound, so large tensors are split into ranges over
 * the cores; checksums (one sequential hash per tensor) go a tensor a
 * thread. */
#include <string.h>

#include "common/util.h"
#include "common/workers.h"
#include "writeback/fill.h"

#define FILL_MAX_THREADS 32u
#define FILL_MIN_BYTES (4ull << 20)   /* a thread's share at least */

int wb_narrow_ok(enum wsp_dtype dt)
{
	return dt == WSP_DTYPE_F32 || dt == WSP_DTYPE_BF16;
}

struct fill_part {
	const struct wspm_tensor *mt;
	const void *const *values;
	uint8_t *base;
	uint64_t *checksums;
	uint32_t n;
	unsigned part, parts;
	int from_f32;
};

/* Elements [a, b) of tensor i. */
static void fill_range(const struct fill_part *p, uint32_t i, uint64_t a, uint64_t b)
{
	const struct wspm_tensor *t = &p->mt[i];
	uint8_t *dst = p->base + t->layer_offset;
	if (!p->from_f32 || t->dtype == WSP_DTYPE_F32) {
		unsigned esize = wsp_dtype_bits((enum wsp_dtype)t->dtype) / 8;
		memcpy(dst + a * esize, (const uint8_t *)p->values[i] + a * esize, (b - a) * esize);
		return;
	}
	const uint32_t *src = p->values[i];
	uint16_t *out = (uint16_t *)dst;
	for (uint64_t k = a; k < b; k++)   /* BF16 (wb_narrow_ok) */
		out[k] = wb_bf16_of(src[k]);
}

/* Part k of every tensor's elements (the split never changes a byte). */
static void *fill_part(void *arg)
{
	const struct fill_part *p = arg;
	for (uint32_t i = 0; i < p->n; i++) {
		if (!p->values[i])
			continue;
		uint64_t n = p->mt[i].raw_bytes / (wsp_dtype_bits((enum wsp_dtype)p->mt[i].dtype) / 8);
		uint64_t per = (n + p->parts - 1) / p->parts;
		uint64_t a = WSP_MIN(n, per * p->part), b = WSP_MIN(n, a + per);
		if (b > a)
			fill_range(p, i, a, b);
	}
	return NULL;
}

/* Tensors part, part + parts, ...: their checksums. */
static void *sum_part(void *arg)
{
	const struct fill_part *p = arg;
	for (uint32_t i = p->part; i < p->n; i += p->parts)
		p->checksums[i] = wsp_checksum64(p->base + p->mt[i].layer_offset, p->mt[i].raw_bytes);
	return NULL;
}

void wb_fill(uint8_t *base, const struct wspm_tensor *mt, uint32_t n, const void *const *values,
	     int from_f32, uint64_t *checksums)
{
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < n; i++)
		if (values[i])
			bytes += mt[i].raw_bytes;
	unsigned t = WSP_MIN(wspi_cpu_count(), FILL_MAX_THREADS);
	t = (unsigned)WSP_MAX(WSP_MIN((uint64_t)t, bytes / FILL_MIN_BYTES), 1);
	struct fill_part parts[FILL_MAX_THREADS];
	for (unsigned k = 0; k < t; k++)
		parts[k] = (struct fill_part){ .mt = mt, .values = values, .base = base,
					       .checksums = checksums, .n = n, .part = k, .parts = t,
					       .from_f32 = from_f32 };
	wspi_run_parts(fill_part, parts, sizeof(parts[0]), t);
	unsigned s = WSP_MAX(WSP_MIN(t, n), 1u);
	for (unsigned k = 0; k < s; k++)
		parts[k].parts = s;
	wspi_run_parts(sum_part, parts, sizeof(parts[0]), s);
}
