/* Short-lived threads, started and joined in one place (see workers.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/workers.h"

#define STACK_THREADS 64u

/* Room for n thread ids: `local` when it is enough, else the heap (NULL
 * when that fails: the caller then runs everything itself). */
static pthread_t *ids(pthread_t *local, unsigned n)
{
	return n <= STACK_THREADS ? local : malloc(n * sizeof(pthread_t));
}

void wspi_run_parts(wspi_thread_fn fn, void *parts, size_t size, unsigned n)
{
	pthread_t local[STACK_THREADS], *th = ids(local, n);
	uint8_t *p = parts;
	unsigned started = 0;
	while (th && started + 1 < n &&
	       pthread_create(&th[started + 1], NULL, fn, p + (started + 1) * size) == 0)
		started++;
	if (n)
		fn(p);
	for (unsigned k = 1; k <= started; k++)
		pthread_join(th[k], NULL);
	for (unsigned k = started + 1; k < n; k++)   /* parts whose thread did not start */
		fn(p + k * size);
	if (th != local)
		free(th);
}

unsigned wspi_run_workers(wspi_thread_fn fn, void *arg, unsigned n)
{
	pthread_t local[STACK_THREADS], *th = ids(local, n);
	unsigned started = 0;
	while (th && started < n && pthread_create(&th[started], NULL, fn, arg) == 0)
		started++;
	if (started == 0)
		fn(arg);
	for (unsigned k = 0; k < started; k++)
		pthread_join(th[k], NULL);
	if (th != local)
		free(th);
	return started;
}
