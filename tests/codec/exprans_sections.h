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

#endif
