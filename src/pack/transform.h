/*
 * Reversible per-chunk transforms that make float weights compress better.
 *
 * A chunk of `len` bytes holds n = len / esize whole elements followed by
 * len % esize tail bytes.  The transformed form is esize planes of n bytes
 * each, then the tail bytes verbatim:
 *
 *	WSPM_XFORM_BYTES     plane k = byte k of every element (little-endian)
 *	WSPM_XFORM_EXP_BF16  plane 0 = the 8 exponent bits of every bf16,
 *	                     plane 1 = sign << 7 | the 7 mantissa bits
 *	WSPM_XFORM_EXP_F32   plane 0 = the 8 exponent bits of every f32,
 *	                     plane 1 = sign << 7 | mantissa bits 22..16,
 *	                     plane 2 = mantissa bits 15..8, plane 3 = bits 7..0
 *
 * Grouping the exponents exactly (as ZipNN does) puts the low-entropy part
 * of every value into one plane that zstd's entropy coder shrinks well,
 * while the near-random sign/mantissa plane no longer dilutes it.
 */
#ifndef WSP_PACK_TRANSFORM_H
#define WSP_PACK_TRANSFORM_H

#include <stddef.h>
#include "pack/manifest.h"

/* Element size in bytes that transform `t` works on for `dtype`: 0 for
 * WSPM_XFORM_NONE, 2/4/8 for the others; WSP_EFORMAT when `t` is unknown
 * or does not fit the dtype (BYTES on a 1-byte or sub-byte dtype). */
int xform_elem_bytes(enum wspm_transform t, int dtype);

/* Transform `len` bytes of `src` into `dst` (no overlap). */
void xform_forward(enum wspm_transform t, unsigned esize, const void *src, size_t len,
		   void *dst);

/* Undo the transform for raw bytes [off, off + n) of a chunk whose
 * transformed form (`len` bytes) is at `planes`, writing them to `dst`.
 * Any off and n within len work; element-aligned ranges take the fast path.
 * Callers walk the destination segments with it. */
void xform_inverse_range(enum wspm_transform t, unsigned esize, const void *planes,
			 size_t len, size_t off, size_t n, void *dst);

#endif
