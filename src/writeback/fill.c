/* wb_fill: a layer's new values into its buffer (see fill.h).  A copy or a
 * narrowing is memory-bound, so every tensor is split into ranges over the
 * cores; each range's part of the tensor's checksum (a sum over its words,
 * wspi_checksum64_part) is taken block by block right after the block is
 * written, while it is in the cache: one pass over memory, and no tensor,
 * however large, hashed by one thread alone. */
#include <string.h>

#include "common/util.h"
#include "common/workers.h"
#include "writeback/fill.h"

#define FILL_MAX_THREADS 32u
#define FILL_MIN_BYTES (4ull << 20)   /* a thread's share at least */
#define FILL_BLOCK_BYTES (256u << 10)  /* written, then summed, while in L2 */

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

/* The unit a tensor is split in: its element, or a byte for sub-byte dtypes. */
static uint64_t unit_bytes(const struct wspm_tensor *t)
{
	unsigned bits = wsp_dtype_bits((enum wsp_dtype)t->dtype);
	return bits >= 8 ? bits / 8 : 1;
}

/* Elements [a, b) of tensor i. */
static void fill_range(const struct fill_part *p, uint32_t i, uint64_t a, uint64_t b)
{
	const struct wspm_tensor *t = &p->mt[i];
	uint8_t *dst = p->base + t->layer_offset;
	if (!p->from_f32 || t->dtype == WSP_DTYPE_F32) {
		uint64_t esize = unit_bytes(t);
		memcpy(dst + a * esize, (const uint8_t *)p->values[i] + a * esize, (b - a) * esize);
		return;
	}
	const uint32_t *src = p->values[i];
	uint16_t *out = (uint16_t *)dst;
	for (uint64_t k = a; k < b; k++)   /* BF16 (wb_narrow_ok) */
		out[k] = wb_bf16_of(src[k]);
}

/* Part k of every tensor, in blocks: written (where values[i] is given),
 * then summed into checksums[i].  Ranges are whole 8-byte words but for a
 * tensor's last, so that the parts' sums add up to wsp_checksum64. */
static void *fill_part(void *arg)
{
	const struct fill_part *p = arg;
	for (uint32_t i = 0; i < p->n; i++) {
		const struct wspm_tensor *t = &p->mt[i];
		uint64_t esize = unit_bytes(t), n = t->raw_bytes / esize;
		uint64_t per = (n + p->parts - 1) / p->parts;
		per = (per + 7) & ~7ull;   /* 8 elements: a whole number of words */
		uint64_t a = WSP_MIN(n, per * p->part), b = WSP_MIN(n, a + per);
		uint64_t block = FILL_BLOCK_BYTES / esize, sum = 0;
		const uint8_t *dst = p->base + t->layer_offset;
		for (uint64_t x = a; x < b; x += block) {
			uint64_t y = WSP_MIN(b, x + block);
			if (p->values[i])
				fill_range(p, i, x, y);
			uint64_t from = x * esize, to = WSP_MIN(y * esize, t->raw_bytes);
			sum += wspi_checksum64_part(dst + from, to - from, from / 8);
		}
		if (b > a)
			__atomic_fetch_add(&p->checksums[i], sum, __ATOMIC_RELAXED);
	}
	return NULL;
}

void wb_fill_parts(uint8_t *base, const struct wspm_tensor *mt, uint32_t n,
		   const void *const *values, int from_f32, uint64_t *checksums, unsigned parts)
{
	struct fill_part part[FILL_MAX_THREADS];
	parts = WSP_MAX(WSP_MIN(parts, FILL_MAX_THREADS), 1u);
	for (uint32_t i = 0; i < n; i++)
		checksums[i] = 0;   /* the parts add up into it */
	for (unsigned k = 0; k < parts; k++)
		part[k] = (struct fill_part){ .mt = mt, .values = values, .base = base,
					      .checksums = checksums, .n = n, .part = k,
					      .parts = parts, .from_f32 = from_f32 };
	wspi_run_parts(fill_part, part, sizeof(part[0]), parts);
}

void wb_fill(uint8_t *base, const struct wspm_tensor *mt, uint32_t n, const void *const *values,
	     int from_f32, uint64_t *checksums)
{
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < n; i++)
		bytes += mt[i].raw_bytes;
	unsigned t = WSP_MIN(wspi_cpu_count(), FILL_MAX_THREADS);
	t = (unsigned)WSP_MAX(WSP_MIN((uint64_t)t, bytes / FILL_MIN_BYTES), 1);
	wb_fill_parts(base, mt, n, values, from_f32, checksums, t);
}
