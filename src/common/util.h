/* Small helpers every layer uses: checked arithmetic, alignment, clocks. */
#ifndef WSP_COMMON_UTIL_H
#define WSP_COMMON_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Checked arithmetic: true on overflow (C23 ckd_* semantics). Every size that
 * comes from a file goes through these. */
#define ckd_add(r, a, b) __builtin_add_overflow((a), (b), (r))
#define ckd_mul(r, a, b) __builtin_mul_overflow((a), (b), (r))
#define ckd_sub(r, a, b) __builtin_sub_overflow((a), (b), (r))

#define WSP_ALIGN_DIRECT 4096u   /* O_DIRECT offset/length/buffer alignment */
#define WSP_ALIGN_TENSOR 256u    /* tensor start inside a layer (cuBLAS likes >= 256) */

static inline uint64_t wspi_align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}
static inline uint64_t wspi_align_down(uint64_t x, uint64_t a)
{
	return x / a * a;
}
static inline bool wspi_is_aligned(uint64_t x, uint64_t a)
{
	return x % a == 0;
}

static inline uint64_t wspi_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define WSP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define WSP_MAX(a, b) ((a) > (b) ? (a) : (b))
#define WSP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Room for `need` elements of `elem` bytes in the array *arr of capacity
 * *cap, doubling it from `first` (at least 1): 0, or -ENOMEM when memory
 * or size_t runs out (then *arr and *cap are unchanged). */
int wspi_grow(void **arr, size_t *cap, size_t need, size_t elem, size_t first);

/* Large buffers that come and go (training state, updated layers): their
 * own anonymous mapping, page-aligned and zeroed, so that freeing one
 * gives its memory back to the system at once (malloc keeps freed blocks
 * under its growing mmap threshold, ~32 MiB, in its heaps).  NULL when
 * there is no memory; wspi_unmap_bytes takes the same size (NULL: nothing). */
void *wspi_map_bytes(uint64_t bytes);
void wspi_unmap_bytes(void *p, uint64_t bytes);

/* Number of online CPUs, at least 1. */
unsigned wspi_cpu_count(void);
/* Memory the process may use: min(MemAvailable, cgroup limit - usage); 0 if
 * unknown.  `why` (may be NULL) receives which limit was the smaller. */
uint64_t wspi_memory_available(const char **why);

/* Bytes of a tensor: elements x bits / 8, checked; WSP_ETOOBIG on overflow,
 * WSP_EFORMAT when sub-byte elements do not fill whole bytes. */
int wspi_tensor_bytes(int dtype, unsigned rank, const uint64_t *shape, uint64_t *bytes);

/* The part of wsp_checksum64 contributed by `bytes` bytes starting at word
 * `first_word` of the checksummed buffer.  The checksum is a sum of terms
 * that each depend on one word and its index, so pieces (chunks) add their
 * parts in any order, as long as each piece but the last is whole words. */
uint64_t wspi_checksum64_part(const void *data, uint64_t bytes, uint64_t first_word);

/* After a JSON text of `bytes` was parsed and its tree freed: return the
 * freed heap pages to the system when the text was large (its tree was
 * millions of small blocks, which glibc keeps otherwise, uncounted by any
 * budget).  Nothing elsewhere than glibc. */
void wspi_release_after_json(uint64_t bytes);

/* wsp_checksum64 of a buffer given in consecutive pieces of any sizes:
 * zero-initialise, add the pieces in order, then end. */
struct wspi_ck {
	uint64_t sum, pos;
	unsigned char tail[8];   /* the bytes of a word not yet whole */
};
void wspi_ck_add(struct wspi_ck *c, const void *data, uint64_t bytes);
uint64_t wspi_ck_end(const struct wspi_ck *c);

/* open(path, flags) for reading a file that must be regular: opened
 * non-blocking, so that a FIFO or device in its place never hangs the
 * caller, then checked with fstat.  Returns the descriptor (blocking again),
 * or -errno / -EINVAL ("not a regular file") with "PATH: why" in `err`. */
struct wspi_err;
int wspi_open_regular(const char *path, int flags, struct wspi_err *err);

#endif
