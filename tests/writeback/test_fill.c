/* wb_fill (wsp_update's copy): every tensor's bytes land at its offset and
 * its checksum is wsp_checksum64 of them, whatever the number of parts the
 * tensors are split in: sizes that are not whole words, a sub-byte dtype,
 * an empty tensor, a kept tensor (values NULL: only summed), one larger
 * than the blocks the parts work in; and fp32 values narrowed to bf16. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/testlib.h"
#include "writeback/fill.h"

#define N 7

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

int main(void)
{
	/* dtype, raw bytes */
	static const struct { enum wsp_dtype dt; uint64_t bytes; } spec[N] = {
		{ WSP_DTYPE_BF16, 2 * 1500003 },   /* a tail of 6 bytes, many blocks */
		{ WSP_DTYPE_F32, 4 * 262145 },     /* a tail of 4 */
		{ WSP_DTYPE_U8, 13 },
		{ WSP_DTYPE_F4, 5 },               /* sub-byte: bytes */
		{ WSP_DTYPE_BF16, 0 },             /* empty */
		{ WSP_DTYPE_F16, 2 * 400001 },     /* kept (values NULL) */
		{ WSP_DTYPE_F64, 8 * 3 },
	};
	struct wspm_tensor mt[N];
	uint64_t at = 0;
	memset(mt, 0, sizeof(mt));
	for (int i = 0; i < N; i++) {
		mt[i].dtype = (uint8_t)spec[i].dt;
		mt[i].raw_bytes = spec[i].bytes;
		mt[i].layer_offset = at;
		at += (spec[i].bytes + 63) & ~63ull;
	}
	uint8_t *base = malloc(at + 1), *want = malloc(at + 1);
	uint8_t *src[N];
	const void *values[N];
	CHECK(base && want);
	for (uint64_t k = 0; k < at; k++)
		want[k] = (uint8_t)next();
	for (int i = 0; i < N; i++) {
		src[i] = malloc(spec[i].bytes + 1);
		CHECK(src[i]);
		for (uint64_t k = 0; k < spec[i].bytes; k++)
			src[i][k] = (uint8_t)next();
		values[i] = i == 5 ? NULL : src[i];
		if (values[i])
			memcpy(want + mt[i].layer_offset, src[i], spec[i].bytes);
	}
	static const unsigned parts[] = { 1, 2, 3, 7, 32 };
	for (size_t p = 0; p < sizeof(parts) / sizeof(parts[0]); p++) {
		uint64_t sums[N];
		/* the kept tensor's bytes are what the buffer held */
		for (uint64_t k = 0; k < at; k++)
			base[k] = (uint8_t)~want[k];
		memcpy(base + mt[5].layer_offset, want + mt[5].layer_offset, spec[5].bytes);
		memset(sums, 0xab, sizeof(sums));
		wb_fill_parts(base, mt, N, values, 0, sums, parts[p]);
		for (int i = 0; i < N; i++) {
			const uint8_t *got = base + mt[i].layer_offset;
			CHECK(memcmp(got, want + mt[i].layer_offset, spec[i].bytes) == 0);
			CHECK(sums[i] == wsp_checksum64(got, spec[i].bytes));
		}
	}

	/* fp32 values narrowed into the bf16 tensor, copied into the f32 one */
	uint32_t n0 = (uint32_t)(spec[0].bytes / 2), n1 = (uint32_t)(spec[1].bytes / 4);
	uint32_t *f0 = malloc(4ull * n0), *f1 = malloc(4ull * n1);
	CHECK(f0 && f1);
	for (uint32_t k = 0; k < n0; k++)
		f0[k] = (uint32_t)next();   /* NaNs and infinities among them */
	for (uint32_t k = 0; k < n1; k++)
		f1[k] = (uint32_t)next();
	const void *narrow[N] = { f0, f1 };
	for (size_t p = 0; p < sizeof(parts) / sizeof(parts[0]); p++) {
		uint64_t sums[N];
		wb_fill_parts(base, mt, 2, narrow, 1, sums, parts[p]);
		const uint16_t *b0 = (const uint16_t *)(base + mt[0].layer_offset);
		for (uint32_t k = 0; k < n0; k++)
			CHECK(b0[k] == wb_bf16_of(f0[k]));
		CHECK(memcmp(base + mt[1].layer_offset, f1, spec[1].bytes) == 0);
		CHECK(sums[0] == wsp_checksum64(b0, spec[0].bytes));
		CHECK(sums[1] == wsp_checksum64(base + mt[1].layer_offset, spec[1].bytes));
	}
	for (int i = 0; i < N; i++)
		free(src[i]);
	free(f0);
	free(f1);
	free(base);
	free(want);
	return 0;
}
