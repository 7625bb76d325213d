/*
 * Training state kept for the caller: per layer, one buffer (an
 * optimizer's fp32 masters and moments, 12 bytes a parameter for AdamW: six
 * times a bf16 model).  The caller takes the buffer (state_acquire), reads
 * and writes it in place (copies to and from the device run straight from
 * it: page-locked where the device pins), and hands it back
 * (state_release).  Buffers handed back stay in memory up to a budget;
 * past it the least recently used are written to an unnamed overflow file
 * (overflow.h), with a checksum kept in memory, and their memory freed;
 * taking one again reads it back and checks it.  Never lost: a spill that
 * fails keeps the buffer in memory and fails the call that needed room.
 * Thread-safe (one lock; file I/O under it).
 */
#ifndef WSP_WRITEBACK_STATE_H
#define WSP_WRITEBACK_STATE_H

#include <stdint.h>
#include "common/error.h"
#include "gpu/device.h"
#include "wspager.h"

struct state_store;

struct state_config {
	uint32_t n_layers;
	uint64_t budget;           /* bytes of buffers in memory (buffers taken may pass it) */
	const char *dir;           /* the overflow file's directory (overflow_open), */
	const char *pack_dir;      /* else the pack's, else a temporary one */
	wsp_log_fn log;            /* where it went, said once */
	void *log_ctx;
};

int state_create(struct dev *d, const struct state_config *cfg, struct state_store **out,
		 struct wspi_err *err);
void state_destroy(struct state_store *st);

/* `layer`'s buffer of `bytes` bytes, taken: its contents, or zeros when it
 * had none of that size (one of another size is replaced).  Read back from
 * the file and checked if it was spilled (WSP_ECHECKSUM if the file gave
 * other bytes).  Taken again before it is handed back: the same buffer. */
int state_acquire(struct state_store *st, uint32_t layer, uint64_t bytes, void **data,
		  struct wspi_err *err);
/* Hand `layer`'s buffer back; `changed`: its contents are new (the file's
 * copy, if any, is stale).  WSP_ESTATE when it is not taken. */
int state_release(struct state_store *st, uint32_t layer, int changed, struct wspi_err *err);
/* Its size (0: none). */
uint64_t state_size(struct state_store *st, uint32_t layer);

struct state_counters {
	uint64_t resident;          /* bytes of buffers in memory now */
	uint64_t held;              /* bytes of buffers, wherever they are */
	uint64_t spilled, read_back;  /* bytes written to / read from the overflow file */
};
void state_counters(struct state_store *st, struct state_counters *out);

#endif
