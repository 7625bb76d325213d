/*
 * A spill store: per key (a layer), at most one page-aligned buffer,
 * page-locked where the device pins (copies to and from the device run
 * straight from it), kept in memory up to a budget.  Past the budget the
 * least recently used buffer nobody holds is written to an unnamed overflow
 * file (overflow.h, made at the first spill) with an XXH3-64 of its bytes,
 * and its memory freed; the next use reads it back and checks it.  A
 * buffer is never lost: a spill that fails (a full disk) keeps it in memory
 * over the budget, said once, and fails no call.
 *
 * The updated layers (dirty.c) and the optimizer state (state.c) are each
 * one; what their buffers hold is theirs.  Not locked: every call runs
 * under its owner's lock (the file's I/O too).
 */
#ifndef WSP_WRITEBACK_SPILL_H
#define WSP_WRITEBACK_SPILL_H

#include <stdint.h>
#include "common/error.h"
#include "gpu/device.h"
#include "wspager.h"

struct spill;

struct spill_config {
	uint64_t budget;           /* bytes of buffers in memory (held ones may pass it) */
	const char *dir;           /* the overflow file's directory (overflow_open), */
	const char *pack_dir;      /* else the pack's, else a temporary one */
	const char *what;          /* "updated layers", "training state": in messages
	                              (a constant: not copied) */
	int plural;                /* what is plural ("updated layers go", ...) */
	const char *const *names;  /* per key, what messages call it; NULL: its number */
	wsp_log_fn log;            /* where the file is, said once */
	void *log_ctx;
};

struct spill_counters {
	uint64_t resident;          /* bytes of buffers in memory now (superseded ones too) */
	uint64_t spilled, read_back;  /* bytes written to / read from the overflow file */
};

int spill_create(struct dev *d, uint32_t n_keys, const struct spill_config *cfg,
		 struct spill **out, struct wspi_err *err);
void spill_destroy(struct spill *sp);

/* Give `key` a fixed place in the file (off, cap bytes: multiples of 4096),
 * e.g. one per layer of a sparse file; without one a key's place is taken
 * at the end of the file at its first spill and kept. */
void spill_place(struct spill *sp, uint32_t key, uint64_t off, uint64_t cap);

/* A superseded buffer's memory, out of the store (still counted as
 * resident until spill_free_superseded). */
struct spill_mem {
	void *mem;
	uint64_t cap;
	int pinned;
};

/* A new buffer of `bytes` for `key`, zeros, in memory, used now (room is
 * made first; bytes 0 counts as 1).  What the key had, in memory or in the
 * file, is forgotten: its memory freed, or, with `superseded`, handed out
 * there for the holders still reading it (the new buffer has none).  On an
 * error the key keeps what it had.  WSP_ESTATE when its buffer is held and
 * `superseded` is NULL. */
int spill_new(struct spill *sp, uint32_t key, uint64_t bytes, struct spill_mem *superseded,
	      void **mem, struct wspi_err *err);
void spill_free_superseded(struct spill *sp, struct spill_mem *m);
/* Forget `key`'s buffer, in memory and in the file (not a held one). */
void spill_drop(struct spill *sp, uint32_t key);
/* `key`'s buffer in memory, used now: read back and checked when it was
 * spilled (WSP_ECHECKSUM when the file gave other bytes; it stays in the
 * file).  -ENOENT when the key has none. */
int spill_get(struct spill *sp, uint32_t key, void **mem, struct wspi_err *err);
/* Its size as given to spill_new (0: none). */
uint64_t spill_bytes(const struct spill *sp, uint32_t key);
/* In memory now (not spilled)? */
int spill_resident(const struct spill *sp, uint32_t key);
/* Held buffers never leave memory (a copy reads them, a caller has them). */
void spill_hold(struct spill *sp, uint32_t key);
void spill_unhold(struct spill *sp, uint32_t key);
unsigned spill_holders(const struct spill *sp, uint32_t key);
/* Its bytes were written (the file's copy is stale); used now. */
void spill_changed(struct spill *sp, uint32_t key);
/* Spill what the budget asks, now (after holders let go). */
void spill_trim(struct spill *sp);

/* Read `len` bytes at `at` of a spilled key's copy in the file, without
 * bringing it into memory (for a save that must not need the memory).
 * While spill_keep_place(key, 1), nothing is written to its place. */
int spill_read_file(struct spill *sp, uint32_t key, uint64_t at, void *buf, uint64_t len,
		    struct wspi_err *err);
void spill_keep_place(struct spill *sp, uint32_t key, int keep);

void spill_counters(const struct spill *sp, struct spill_counters *out);

#endif
