/* Allocation fault injection for tests linked with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,
 * --wrap=aligned_alloc,--wrap=strdup,--wrap=strndup,--wrap=mmap:
 * only the library's own calls are intercepted (libc-internal ones are not). */
#ifndef WSP_FAILALLOC_H
#define WSP_FAILALLOC_H

#include <stdint.h>

/* Fail the nth allocation from now (1 = the next one); 0 disarms. */
void failalloc_arm(uint64_t nth);
/* Whether the armed failure has been delivered. */
int failalloc_fired(void);
/* Allocations counted since the last arm. */
uint64_t failalloc_count(void);

#endif
