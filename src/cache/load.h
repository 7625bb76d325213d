/*
 * The record of a layer's load in flight (load.c): its jobs still pending,
 * its first error and that error's message.  The loader owns the records
 * (one a layer) and queues them; the front end starts a load and reads its
 * result when it has ended; the decode pool, which reaches a load through
 * the slice it decodes (s->load), skips the jobs of a load that failed and
 * records a failure.  This file calls nobody.  Private to src/cache.
 */
#ifndef WSP_CACHE_LOAD_H
#define WSP_CACHE_LOAD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct hc_load {
	atomic_uint_fast64_t pending;  /* chunk jobs left + 1 held by the loader */
	atomic_int status;             /* first error of this load, 0 if none */
	struct wspi_err err;           /* its message, by the first failure */
	struct hc_load *next;          /* load queue link (the loader's stage_lock) */
};

/* A load of n_jobs chunk jobs starts (before it is queued). */
void hc_load_begin(struct hc_load *ld, uint64_t n_jobs);
/* n of its jobs are done (or will never run): 1 when that ends the load. */
int hc_load_put(struct hc_load *ld, uint64_t n);
/* When it has ended: 0, or its first error with the message in msg. */
int hc_load_result(struct hc_load *ld, char *msg, size_t size);
/* Whether it has failed already (its other jobs are skipped). */
int hc_load_failed(struct hc_load *ld);
/* Record a failure: 1 and the message when it is the load's first. */
int hc_load_fail(struct hc_load *ld, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
