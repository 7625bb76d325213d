/* XXH3 built for AVX2 from the system's xxhash.h (its header-only mode):
 * every function of this file is compiled for AVX2, and hash.c calls them
 * only where the CPU has it. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC target("avx2")
#endif
#include <immintrin.h>   /* xxhash.h includes it only where __AVX2__ is set */
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include "common/hash.h"

uint64_t wspi_xxh3_avx2(const void *p, size_t n);
void wspi_xxh3_reset_avx2(XXH3_state_t *st);
void wspi_xxh3_update_avx2(XXH3_state_t *st, const void *p, size_t n);
uint64_t wspi_xxh3_digest_avx2(const XXH3_state_t *st);

uint64_t wspi_xxh3_avx2(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

void wspi_xxh3_reset_avx2(XXH3_state_t *st)
{
	XXH3_64bits_reset(st);
}

void wspi_xxh3_update_avx2(XXH3_state_t *st, const void *p, size_t n)
{
	XXH3_64bits_update(st, p, n);
}

uint64_t wspi_xxh3_digest_avx2(const XXH3_state_t *st)
{
	return XXH3_64bits_digest(st);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
/* not x86-64: hash.c uses libxxhash alone */
typedef int wspi_hash_avx2_unused;
#endif
