/* The wrappers behind failalloc.h.  One atomic countdown shared by all
 * threads, so failures also land in worker threads. */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

#include "failalloc.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);

static atomic_uint_fast64_t countdown, counted;
static atomic_int fired;

void failalloc_arm(uint64_t nth)
{
	atomic_store(&fired, 0);
	atomic_store(&counted, 0);
	atomic_store(&countdown, nth);
}

int failalloc_fired(void)
{
	return atomic_load(&fired);
}

uint64_t failalloc_count(void)
{
	return atomic_load(&counted);
}

/* 1 when this allocation must fail. */
static int should_fail(void)
{
	atomic_fetch_add(&counted, 1);
	uint_fast64_t c = atomic_load(&countdown);
	while (c > 0) {
		if (atomic_compare_exchange_weak(&countdown, &c, c - 1)) {
			if (c == 1) {
				atomic_store(&fired, 1);
				return 1;
			}
			return 0;
		}
	}
	return 0;
}

void *__wrap_malloc(size_t n)
{
	if (should_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t m)
{
	if (should_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_calloc(n, m);
}

void *__wrap_realloc(void *p, size_t n)
{
	if (should_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_realloc(p, n);
}

int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
	if (should_fail())
		return ENOMEM;
	return __real_posix_memalign(p, a, n);
}

void *__wrap_aligned_alloc(size_t a, size_t n)
{
	if (should_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_aligned_alloc(a, n);
}

char *__wrap_strdup(const char *s)
{
	if (should_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
	if (should_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_strndup(s, n);
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	/* only anonymous mappings are allocations; file maps are I/O */
	if ((flags & MAP_ANONYMOUS) && should_fail()) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return __real_mmap(addr, len, prot, flags, fd, off);
}
