/*
 * Short-lived threads, started and joined in one place.  Two shapes:
 *
 *   wspi_run_parts    n parts of an array, one each: fn(parts + k * size).
 *                     Part 0 runs on the calling thread, the others on
 *                     threads of their own; a part whose thread cannot
 *                     start runs on the caller afterwards.
 *   wspi_run_workers  n threads running fn(arg) on one shared arg (they take
 *                     their work from it); when no thread can start,
 *                     fn(arg) runs on the caller.
 *
 * Both return when every part or worker is done: the work is always done,
 * with fewer threads when the system will not give them.
 */
#ifndef WSP_COMMON_WORKERS_H
#define WSP_COMMON_WORKERS_H

#include <stddef.h>

typedef void *(*wspi_thread_fn)(void *);

void wspi_run_parts(wspi_thread_fn fn, void *parts, size_t size, unsigned n);
/* Returns how many threads ran fn (0: the caller did, once). */
unsigned wspi_run_workers(wspi_thread_fn fn, void *arg, unsigned n);

#endif
