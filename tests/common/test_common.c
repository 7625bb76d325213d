/* src/common: error strings, size parsing, checksum, hashes, dtype sizes,
 * array growth. */
#include <stdint.h>

#include "common/hash.h"
#include "common/util.h"
#include "testlib.h"
#include "wspager.h"

static void test_strerror(void)
{
	CHECK(strcmp(wsp_strerror(0), "success") == 0);
	CHECK(strcmp(wsp_strerror(-ENOENT), strerror(ENOENT)) == 0);
	CHECK(strcmp(wsp_strerror(WSP_ECHECKSUM), "checksum mismatch") == 0);
	CHECK(strcmp(wsp_strerror(WSP_EBIGENDIAN), "big-endian hosts are not supported") == 0);
	CHECK(strcmp(wsp_strerror(-99999), "unknown error") == 0);
}

static void test_sizes(void)
{
	uint64_t v = 0;
	CHECK_RC(wsp_parse_size("4096", &v), 0); CHECK(v == 4096);
	CHECK_RC(wsp_parse_size("512M", &v), 0); CHECK(v == 512ull << 20);
	CHECK_RC(wsp_parse_size("1.5GiB", &v), 0); CHECK(v == 3ull << 29);
	CHECK_RC(wsp_parse_size("8g", &v), 0); CHECK(v == 8ull << 30);
	CHECK_RC(wsp_parse_size("2KB", &v), 0); CHECK(v == 2048);
	CHECK_RC(wsp_parse_size("", &v), -EINVAL);
	CHECK_RC(wsp_parse_size("-1G", &v), -EINVAL);
	CHECK_RC(wsp_parse_size("12X", &v), -EINVAL);
	CHECK_RC(wsp_parse_size("nan", &v), -EINVAL);
	CHECK_RC(wsp_parse_size("1e30T", &v), -ERANGE);
	char buf[32];
	CHECK(strcmp(wsp_format_size(1536ull << 20, buf, sizeof(buf)), "1.50 GiB") == 0);
	CHECK(strcmp(wsp_format_size(17, buf, sizeof(buf)), "17 B") == 0);
}

static void test_checksum(void)
{
	unsigned char a[64], b[64];
	for (int i = 0; i < 64; i++)
		a[i] = b[i] = (unsigned char)(i * 7 + 1);
	CHECK(wsp_checksum64(a, 64) == wsp_checksum64(b, 64));
	/* swapping two words must change it (position-sensitive) */
	memcpy(b, a + 8, 8);
	memcpy(b + 8, a, 8);
	CHECK(wsp_checksum64(a, 64) != wsp_checksum64(b, 64));
	/* a single flipped bit in the tail must change it */
	memcpy(b, a, 64);
	b[61] ^= 0x10;
	CHECK(wsp_checksum64(a, 61 + 2) != wsp_checksum64(b, 61 + 2));
	CHECK(wsp_checksum64(a, 0) == 0);
	/* the definition in wspager.h, checked against an independent value:
	 * one zero word at index 0 -> mix64(0) == 0 */
	uint64_t z = 0;
	CHECK(wsp_checksum64(&z, 8) == 0);
	/* pieces of whole words, summed in any order, give the whole */
	unsigned char big[1000];
	for (int i = 0; i < 1000; i++)
		big[i] = (unsigned char)(i * 131 + 7);
	uint64_t whole = wsp_checksum64(big, 997);
	uint64_t parts = wspi_checksum64_part(big + 512, 485, 64) + wspi_checksum64_part(big, 256, 0) +
			 wspi_checksum64_part(big + 256, 256, 32);
	CHECK(parts == whole);
	CHECK(wspi_checksum64_part(big + 256, 256, 31) != wspi_checksum64_part(big + 256, 256, 32));
	/* pieces of any sizes, in order, through the accumulator */
	static const unsigned cuts[][6] = { {997}, {1, 996}, {3, 5, 8, 981}, {7, 7, 7, 7, 969},
					    {500, 1, 1, 495}, {0, 997} };
	for (unsigned k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
		struct wspi_ck ck = {0};
		unsigned at = 0;
		for (unsigned j = 0; j < 6 && at < 997; j++) {
			wspi_ck_add(&ck, big + at, cuts[k][j]);
			at += cuts[k][j];
		}
		CHECK(at == 997 && wspi_ck_end(&ck) == whole);
	}
}

/* wspi_xxh3 (the AVX2 build where the CPU has it) gives libxxhash's
 * values, in one call and fed in pieces: packs written by either read with
 * the other.  Lengths cover XXH3's size classes (0-16, 17-128, 129-240,
 * its 1 KiB stripes and blocks) and unaligned starts. */
static void test_xxh3(void)
{
	enum { MAX = 70000 };
	unsigned char *buf = malloc(MAX + 7);
	XXH3_state_t *st = XXH3_createState();
	CHECK(buf && st);
	uint64_t z = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < MAX + 7; i++) {
		z ^= z << 13, z ^= z >> 7, z ^= z << 17;
		buf[i] = (unsigned char)z;
	}
	static const size_t lens[] = { 0, 1, 3, 4, 8, 9, 16, 17, 64, 128, 129, 200, 240, 241,
				       1023, 1024, 1025, 4096, 65536, 69999, MAX };
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		for (size_t at = 0; at < 8; at += 7) {
			const unsigned char *p = buf + at;
			size_t n = lens[i];
			uint64_t want = XXH3_64bits(p, n);
			CHECK(wspi_xxh3(p, n) == want);
			for (size_t piece = 1; piece <= 4096; piece *= 64) {
				wspi_xxh3_reset(st);
				for (size_t o = 0; o < n; o += piece)
					wspi_xxh3_update(st, p + o, o + piece < n ? piece : n - o);
				CHECK(wspi_xxh3_digest(st) == want);
			}
		}
	XXH3_freeState(st);
	free(buf);
}

static void test_dtypes(void)
{
	CHECK(wsp_dtype_from_name("BF16") == WSP_DTYPE_BF16);
	CHECK(wsp_dtype_from_name("bf16") == WSP_EDTYPE);
	CHECK(wsp_dtype_from_name(NULL) == WSP_EDTYPE);
	CHECK(wsp_dtype_bits(WSP_DTYPE_F64) == 64);
	CHECK(wsp_dtype_bits(WSP_DTYPE_COUNT) == 0);
	for (int i = 0; i < WSP_DTYPE_COUNT; i++)
		CHECK(wsp_dtype_from_name(wsp_dtype_name(i)) == i);
	uint64_t bytes, shape[3] = {2, 3, 5};
	CHECK_RC(wspi_tensor_bytes(WSP_DTYPE_F32, 3, shape, &bytes), 0); CHECK(bytes == 120);
	CHECK_RC(wspi_tensor_bytes(WSP_DTYPE_F32, 0, shape, &bytes), 0); CHECK(bytes == 4);
	uint64_t zero[2] = {0, 7};
	CHECK_RC(wspi_tensor_bytes(WSP_DTYPE_BF16, 2, zero, &bytes), 0); CHECK(bytes == 0);
	uint64_t huge[2] = {1ull << 40, 1ull << 30};
	CHECK_RC(wspi_tensor_bytes(WSP_DTYPE_BF16, 2, huge, &bytes), WSP_ETOOBIG);
	uint64_t odd[1] = {3};
	CHECK_RC(wspi_tensor_bytes(WSP_DTYPE_F4, 1, odd, &bytes), WSP_EFORMAT);
	uint64_t f6[1] = {4};
	CHECK_RC(wspi_tensor_bytes(WSP_DTYPE_F6_E2M3, 1, f6, &bytes), 0); CHECK(bytes == 3);
}

/* wspi_grow: doubling from `first`, contents kept, refusals leave the
 * array as it was. */
static void test_grow(void)
{
	uint32_t *a = NULL;
	size_t cap = 0;
	CHECK_RC(wspi_grow((void **)&a, &cap, 0, sizeof(*a), 4), 0);
	CHECK(a == NULL && cap == 0);
	for (uint32_t i = 0; i < 1000; i++) {
		CHECK_RC(wspi_grow((void **)&a, &cap, i + 1, sizeof(*a), 4), 0);
		a[i] = i;
	}
	CHECK(cap == 1024);
	for (uint32_t i = 0; i < 1000; i++)
		CHECK(a[i] == i);
	uint32_t *was = a;
	CHECK_RC(wspi_grow((void **)&a, &cap, SIZE_MAX / 2, sizeof(*a), 4), -ENOMEM);
	CHECK_RC(wspi_grow((void **)&a, &cap, SIZE_MAX, 1, 4), -ENOMEM);
	CHECK(a == was && cap == 1024 && a[999] == 999);
	free(a);
	char *b = NULL;
	size_t bc = 0;
	CHECK_RC(wspi_grow((void **)&b, &bc, 5000, 1, 4096), 0);
	CHECK(bc == 8192);
	free(b);
}

int main(void)
{
	test_strerror();
	test_sizes();
	test_checksum();
	test_xxh3();
	test_dtypes();
	test_grow();
	CHECK(wsp_version_number() == WSP_VERSION_NUMBER);
	return 0;
}
