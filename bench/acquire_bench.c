/* What an acquire costs the caller's thread, by outcome: a GPU hit (the
 * layer is in a slot) and a host hit (in the host tier, copied into the one
 * slot: the demand goes to the pager's thread and back).  Opened with one
 * slot and no read-ahead, so every host hit is a demand.  Use a pack of
 * small layers (`wspack generate --hidden 64 ...`) to see the call's own
 * cost rather than the copy's: on the host backend the copy is a memcpy
 * inside the call; on a GPU it is only enqueued.
 * The host hits are measured twice: back to back, and with 200 us of the
 * caller's own work between them (a forward's kernels being launched), by
 * which time the pager's thread has gone to sleep and must be woken.
 * Usage: acquire_bench PACK [--device N|host] [--rounds R]
 * Prints the median and the 90th percentile per acquire+release pair, in
 * microseconds of wall time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wspager.h"

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int pair(wsp_pager *pg, uint32_t layer, double *us)
{
	const struct wsp_layer *v;
	double t0 = now_us();
	int rc = wsp_acquire(pg, layer, NULL, &v);
	if (rc == 0)
		rc = wsp_release(pg, layer, NULL);
	*us = now_us() - t0;
	if (rc < 0)
		fprintf(stderr, "acquire_bench: layer %u: %s\n", layer, wsp_errmsg(pg));
	return rc;
}

/* The caller's own work between two acquires: a busy wait. */
static void work_for(double us)
{
	double end = now_us() + us;
	while (now_us() < end)
		;
}

static void report(const char *what, double *t, unsigned n)
{
	qsort(t, n, sizeof(*t), cmp_double);
	printf("%-36s median %8.2f us   p90 %8.2f us   (%u pairs)\n", what, t[n / 2],
	       t[n * 9 / 10], n);
}

int main(int argc, char **argv)
{
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	unsigned rounds = 2000;

	if (argc < 2) {
		fprintf(stderr, "usage: acquire_bench PACK [--device N|host] [--rounds R]\n");
		return 2;
	}
	wsp_options_init(&o);
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--device"))
			o.device = !strcmp(argv[i + 1], "host") ? WSP_DEVICE_HOST : atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = (unsigned)atoi(argv[i + 1]);
	}
	o.gpu_slots = 1;
	o.flags |= WSP_OPEN_NO_PREFETCH | WSP_OPEN_GPU_DECODE;   /* the acquire path alone */
	if (wsp_open(argv[1], &o, &pg, err, sizeof(err)) < 0) {
		fprintf(stderr, "acquire_bench: %s\n", err);
		return 1;
	}
	struct wsp_pack_summary sum;
	wsp_pack_summary(wsp_pager_pack(pg), &sum);
	uint32_t n = sum.n_layers;
	double *t = malloc(rounds * sizeof(*t));
	int rc = n < 3 || !t ? -1 : 0;
	for (uint32_t l = 0; l < n && rc == 0; l++)   /* every layer into the host tier */
		rc = pair(pg, l, &t[0]);
	for (unsigned i = 0; i < rounds && rc == 0; i++)
		rc = pair(pg, 1, &t[i]);
	if (rc == 0)
		report("GPU hit (layer in its slot)", t, rounds);
	for (unsigned i = 0; i < rounds && rc == 0; i++)
		rc = pair(pg, 1 + i % 2, &t[i]);
	if (rc == 0)
		report("host hit (copied into the slot)", t, rounds);
	for (unsigned i = 0; i < rounds && rc == 0; i++) {
		work_for(200);
		rc = pair(pg, 1 + i % 2, &t[i]);
	}
	if (rc == 0)
		report("host hit, 200 us after the last call", t, rounds);
	free(t);
	wsp_close(pg);
	return rc < 0;
}
