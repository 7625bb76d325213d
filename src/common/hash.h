/* XXH3-64 of bulk bytes (chunk checksums, stored-bytes checks, spills),
 * with the AVX2 kernel where the CPU has it.
 *
 * Distributions build libxxhash for the baseline x86-64 (SSE2): 20 GB/s a
 * core on the development machine's EPYC, against 48 GB/s for the same
 * function built for AVX2.  A chunk decoded on the host is hashed once or
 * twice (its output, and an exprans chunk's stored bytes), so the hash
 * took a fifth of a 2.5 GB/s decode.  The values are XXH3's own, whichever
 * kernel runs. */
#ifndef WSP_COMMON_HASH_H
#define WSP_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t's layout, to embed it */
#include <xxhash.h>

uint64_t wspi_xxh3(const void *p, size_t n);
void wspi_xxh3_reset(XXH3_state_t *st);
void wspi_xxh3_update(XXH3_state_t *st, const void *p, size_t n);
uint64_t wspi_xxh3_digest(const XXH3_state_t *st);

#endif
