/* wsp_checksum64: see wspager.h for the definition; the GPU code in
 * tools/ and tests/ computes the same function on the device. */
#include <string.h>

#include "common/util.h"
#include "wspager.h"

#define WSP_CK_K 0x9E3779B97F4A7C15ull

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

uint64_t wspi_checksum64_part(const void *data, uint64_t bytes, uint64_t first_word)
{
	const unsigned char *p = data;
	uint64_t words = bytes / 8, sum = 0, i;
	for (i = 0; i < words; i++) {
		uint64_t w;
		memcpy(&w, p + i * 8, 8);   /* little-endian hosts only */
		sum += mix64(w ^ ((first_word + i) * WSP_CK_K));
	}
	if (bytes % 8) {
		uint64_t w = 0;
		memcpy(&w, p + words * 8, bytes % 8);
		sum += mix64(w ^ ((first_word + words) * WSP_CK_K));
	}
	return sum;
}

uint64_t wsp_checksum64(const void *data, uint64_t bytes)
{
	return wspi_checksum64_part(data, bytes, 0);
}

void wspi_ck_add(struct wspi_ck *c, const void *data, uint64_t bytes)
{
	const unsigned char *p = data;
	unsigned have = c->pos % 8;

	if (have) {   /* complete the word the last piece began */
		uint64_t k = 8 - have < bytes ? 8 - have : bytes;
		memcpy(c->tail + have, p, k);
		p += k;
		bytes -= k;
		c->pos += k;
		if (c->pos % 8)
			return;
		c->sum += wspi_checksum64_part(c->tail, 8, c->pos / 8 - 1);
	}
	uint64_t whole = bytes / 8 * 8;
	c->sum += wspi_checksum64_part(p, whole, c->pos / 8);
	c->pos += whole;
	memcpy(c->tail, p + whole, bytes - whole);
	c->pos += bytes - whole;
}

uint64_t wspi_ck_end(const struct wspi_ck *c)
{
	unsigned have = c->pos % 8;
	return have ? c->sum + wspi_checksum64_part(c->tail, have, c->pos / 8) : c->sum;
}
