/* The dispatch of hash.h: libxxhash, or its AVX2 build (hash_avx2.c). */
#include "common/hash.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WSP_HASH_AVX2 1
uint64_t wspi_xxh3_avx2(const void *p, size_t n);
void wspi_xxh3_reset_avx2(XXH3_state_t *st);
void wspi_xxh3_update_avx2(XXH3_state_t *st, const void *p, size_t n);
uint64_t wspi_xxh3_digest_avx2(const XXH3_state_t *st);

/* A load and a test of what the runtime read from cpuid at start-up. */
static int have_avx2(void)
{
	return __builtin_cpu_supports("avx2");
}
#else
#define WSP_HASH_AVX2 0
#endif

uint64_t wspi_xxh3(const void *p, size_t n)
{
#if WSP_HASH_AVX2
	if (have_avx2())
		return wspi_xxh3_avx2(p, n);
#endif
	return XXH3_64bits(p, n);
}

void wspi_xxh3_reset(XXH3_state_t *st)
{
#if WSP_HASH_AVX2
	if (have_avx2()) {
		wspi_xxh3_reset_avx2(st);
		return;
	}
#endif
	XXH3_64bits_reset(st);
}

void wspi_xxh3_update(XXH3_state_t *st, const void *p, size_t n)
{
#if WSP_HASH_AVX2
	if (have_avx2()) {
		wspi_xxh3_update_avx2(st, p, n);
		return;
	}
#endif
	XXH3_64bits_update(st, p, n);
}

uint64_t wspi_xxh3_digest(const XXH3_state_t *st)
{
#if WSP_HASH_AVX2
	if (have_avx2())
		return wspi_xxh3_digest_avx2(st);
#endif
	return XXH3_64bits_digest(st);
}
