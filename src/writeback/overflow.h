/*
 * The overflow file: where updated layers go when the write-back room's
 * memory budget is full.  A nameless file (O_TMPFILE; a name unlinked at
 * once where the filesystem has none), so a crash or kill leaves nothing
 * behind and nothing else can open it.  Written and read through the I/O
 * engine (src/io: io_uring, else pread/pwrite threads), several requests in
 * flight, and O_DIRECT where the filesystem takes it: the page cache would
 * otherwise keep in memory what was spilled to save memory.  Offsets and lengths are multiples of 4096, buffers 4096-aligned.
 * The checksums are the caller's (dirty.c keeps each tensor's, in memory).
 */
#ifndef WSP_WRITEBACK_OVERFLOW_H
#define WSP_WRITEBACK_OVERFLOW_H

#include <stdint.h>
#include "common/error.h"

struct overflow;

/* Make the file for `what` ("updated layers", in messages): in `dir`, or
 * without one in `pack_dir`, else $TMPDIR or /var/tmp (a pack on a
 * read-only disk can still be trained). */
int overflow_open(const char *dir, const char *pack_dir, const char *what,
		  struct overflow **out, struct wspi_err *err);
/* The directory it was made in. */
const char *overflow_dir(const struct overflow *of);
void overflow_close(struct overflow *of);
int overflow_write(struct overflow *of, uint64_t off, const void *buf, uint64_t len,
		   struct wspi_err *err);
int overflow_read(struct overflow *of, uint64_t off, void *buf, uint64_t len,
		  struct wspi_err *err);
/* "io_uring, O_DIRECT", "pread/pwrite", ...: for the notice that says where
 * updated layers go. */
const char *overflow_how(const struct overflow *of);

#endif
