/* libFuzzer target for chunk_decode.
 *
 * Input: a 16-byte header, then the stored chunk bytes:
 *	byte 0 codec, 1 transform, 2 dtype, 3 number of segments (1..16, low
 *	4 bits; bit 7: record the stored bytes' true check, as a writer does),
 *	bytes 4..7 raw_bytes (LE, at most 1 MiB), 8..15 the XXH3 checksum.
 * Each destination segment is its own heap block of exactly its size, so a
 * write past any segment is caught by ASan.  A decode that reports success
 * must have produced bytes whose XXH3 matches the recorded checksum. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/error.h"
#include "pack/chunk.h"
#include "pack/manifest.h"

#define FUZZ_MAX_RAW (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One decoder for all inputs, like a decode worker; freed at exit so that
 * leak checkers stay quiet. */
static struct chunk_decoder *dec;

static void free_decoder(void)
{
	chunk_decoder_free(dec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wspi_span sp[16];
	struct wspm_chunk c;
	struct wspi_err err;
	unsigned n, k;
	uint32_t raw;
	uint64_t at = 0;
	int rc;

	if (size < 16)
		return 0;
	if (!dec) {
		if (chunk_decoder_create(FUZZ_MAX_RAW, &dec) < 0)
			abort();
		atexit(free_decoder);
	}
	memset(&c, 0, sizeof(c));
	memcpy(&raw, data + 4, 4);
	if (raw > FUZZ_MAX_RAW || size - 16 > UINT32_MAX)
		return 0;
	c.codec = data[0];
	c.transform = data[1];
	c.raw_bytes = raw;
	c.stored_bytes = (uint32_t)(size - 16);
	memcpy(&c.checksum, data + 8, 8);
	if (data[3] & 0x80)
		wspm_chunk_set_stored_check(&c, wspm_stored_check(data + 16, c.stored_bytes));
	n = data[3] % 16 + 1;
	for (k = 0; k < n; k++) {
		size_t len = k + 1 < n ? raw / n / 2 * 2 : raw - at;
		sp[k].ptr = malloc(len ? len : 1);
		sp[k].len = len;
		if (!sp[k].ptr)
			abort();
		at += len;
	}
	wspi_err_init(&err);
	rc = chunk_decode(dec, &c, data[2], data + 16, sp, n, &err);
	if (rc == 0) {
		XXH3_state_t *s = XXH3_createState();
		XXH3_64bits_reset(s);
		for (k = 0; k < n; k++)
			XXH3_64bits_update(s, sp[k].ptr, sp[k].len);
		if (XXH3_64bits_digest(s) != c.checksum)
			abort();   /* success with wrong bytes */
		XXH3_freeState(s);
	} else if (!err.msg[0]) {
		abort();           /* every error has a message */
	}
	wspi_err_destroy(&err);
	for (k = 0; k < n; k++)
		free(sp[k].ptr);
	return 0;
}
