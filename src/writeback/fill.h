/* Writing a layer's new tensor values into its buffer (wsp_update,
 * wsp_update_f32): copied, or narrowed from fp32, with each tensor's
 * checksum, in one pass split over threads. */
#ifndef WSP_WRITEBACK_FILL_H
#define WSP_WRITEBACK_FILL_H

#include <stdint.h>
#include "pack/manifest.h"

/* 1 for the dtypes fp32 values can be narrowed to here (F32, BF16). */
int wb_narrow_ok(enum wsp_dtype dt);
/* For each of the layer's n tensors `mt` whose values[i] is not NULL, write
 * them at base + mt[i].layer_offset: the raw bytes, or (from_f32) fp32
 * values narrowed to the tensor's dtype (BF16: round to nearest even, as
 * torch converts; a NaN to 0x7fc0); then checksums[i] = wsp_checksum64 of
 * every tensor's bytes.  Every tensor is split over the cores. */
void wb_fill(uint8_t *base, const struct wspm_tensor *mt, uint32_t n, const void *const *values,
	     int from_f32, uint64_t *checksums);
/* As wb_fill, in `parts` parts (1 .. 32) on as many threads (wb_fill picks
 * them by the layer's size and the cores; tests pick them). */
void wb_fill_parts(uint8_t *base, const struct wspm_tensor *mt, uint32_t n,
		   const void *const *values, int from_f32, uint64_t *checksums, unsigned parts);
/* One fp32 value as bf16, as torch rounds it. */
static inline uint16_t wb_bf16_of(uint32_t u)
{
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return 0x7fc0;
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#endif
