/* Where the sections of an exprans stream lie (wspack(5)), for tests that
 * damage or inspect one section: the stream of n values starts with its
 * count, and its first section at byte 4. */
#ifndef WSP_TESTS_CODEC_EXPRANS_SECTIONS_H
#define WSP_TESTS_CODEC_EXPRANS_SECTIONS_H

#include <stdint.h>

/* The length of the section at enc[at]: a packed plane's header and
 * indices; a compact header of one symbol; or frequencies (full or
 * compact), the lane table and the lanes it lists. */
static inline uint64_t exprans_section_len(const uint8_t *enc, uint64_t at, uint64_t n)
{
	unsigned h = enc[at] | enc[at + 1] << 8;
	if ((h & 0xc000u) == 0x4000u) {   /* packed */
		unsigned k = h & 0x3fffu, b = 1;
		while ((1u << b) < k)
			b++;
		uint64_t bytes = (n * b + 7) / 8;
		return 2 + k + (k & 1) + bytes + (bytes & 1);
	}
	uint64_t head = 2 * 256;   /* full frequencies */
	if (h & 0x8000u) {
		unsigned k = h & 0x7fffu;
		if (k == 1)
			return 4;
		head = 2 + k + (k & 1) + 2 * k;
	}
	uint64_t nb = (n + 32767) / 32768, len = head + nb * 32 * 2;
	for (uint64_t i = 0; i < nb * 32; i++)
		len += (uint64_t)(enc[at + head + 2 * i] | enc[at + head + 2 * i + 1] << 8);
	return len;
}

/* The form of the top-bit stream's last section (the sign and bits 5..0
 * of each upper half): 0 one symbol, 1 packed, 2 lanes. */
static inline int exprans_sign_mant_form(const uint8_t *enc, uint64_t n, unsigned flags)
{
	uint64_t at = 6 + exprans_section_len(enc, 6, n);
	if (flags & 1u)   /* the two byte planes */
		for (int k = 0; k < 2; k++)
			at += exprans_section_len(enc, at, n);
	unsigned h = enc[at] | enc[at + 1] << 8;
	if ((h & 0xc000u) == 0x4000u)
		return 1;
	return (h & 0x8000u) && (h & 0x7fffu) == 1 ? 0 : 2;
}

/* Upper halves h (Gaussian bf16) whose sign and bits 5..0 make that
 * section take each form: form 0, all zero (one symbol); 1, 16 values
 * about equally likely (packed at 4 bits); 2, mostly zero (lanes).  r: a
 * random source. */
static inline uint16_t exprans_shape_sign_mant(uint16_t h, int form, uint64_t (*r)(void))
{
	h &= 0x7fc0;
	if (form == 1)
		h |= (uint16_t)(r() & 0xf);
	else if (form == 2 && r() % 16 == 0)
		h |= (uint16_t)(r() & 0x3f);
	return h;
}

#endif
