/*
 * wspager(1): declarations shared by the subcommands.  The tool uses only the
 * public API (wspager.h) plus the CUDA runtime and cuBLAS for its workload.
 */
#ifndef WSPAGER_TOOL_H
#define WSPAGER_TOOL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "wspager.h"

/* Messages, usage errors, option values and the progress line: cli.h,
 * shared with wspack. */

/* ---- option values (wspager-util.c): 0, or the usage error ---- */
/* "host" -> WSP_DEVICE_HOST, or a CUDA ordinal. */
int wt_opt_device(const char *opt, const char *arg, void *dest);   /* int *dest (CLI_CALL) */
/* --devices LIST: comma-separated devices as --device takes them. */
#define WT_MAX_DEVICES 16u
struct wt_devices {
	int dev[WT_MAX_DEVICES];
	unsigned n;
};
int wt_opt_devices(const char *opt, const char *arg, void *dest);  /* struct wt_devices * */

/* ---- clocks and resources ---- */
uint64_t wt_now_ns(void);            /* CLOCK_MONOTONIC */
struct wt_cpu { uint64_t user_ns, sys_ns; };
void wt_cpu_now(struct wt_cpu *c);   /* getrusage(RUSAGE_SELF): all threads */
double wt_gbps(uint64_t bytes, uint64_t ns);  /* 1e9 bytes per second */
const char *wt_size(uint64_t bytes, char *buf, size_t len); /* wsp_format_size */

/* ---- devices ---- */
/* Resolve the device to use.  `explicit_dev` tells whether it was given
 * (`opt`, "--device" or "--devices", names it in messages): without it, a
 * machine with no usable GPU falls back to the host backend and says so
 * once; with it, a missing GPU is an error.  Returns 0 or CLI_EXIT_FAIL
 * (message printed). */
int wt_pick_device(const char *opt, int requested, bool explicit_dev, int *out);
/* "host" or "cuda:N (name)" into buf. */
const char *wt_device_name(int device, char *buf, size_t len);

/* ---- the workload (wspager-work.c) ----
 * Per layer: on a GPU, every 2-D BF16/F16/F32 weight is applied as
 * Y = X * W^T (cuBLAS GEMM, batch rows) and every other tensor is
 * checksummed on the device; the checksums are compared at pass end.  On the
 * host backend every tensor is checksummed at once. */
struct wt_work;
struct wt_work_cfg {
	int device;            /* CUDA ordinal or WSP_DEVICE_HOST */
	unsigned batch;        /* activation rows */
	bool checksum_all;     /* checksum every tensor (verify), no GEMMs */
	size_t max_steps;      /* most layers computed in one pass */
};
struct wt_step_time {
	uint64_t begin_ns, end_ns;  /* compute of one step, CLOCK_MONOTONIC */
	uint32_t layer;
};
struct wt_pass_result {
	uint64_t compute_ns;   /* sum of the steps' compute time */
	uint64_t wait_ns;      /* GPU idle between steps (weights not there yet) */
	uint64_t gemms, checksums;
	uint64_t flops;
	size_t steps;
	const struct wt_step_time *times;  /* steps entries, valid until next pass */
};
int wt_work_open(const struct wt_work_cfg *cfg, const wsp_pack *pk, struct wt_work **out);
void wt_work_close(struct wt_work *w);
/* The compute stream (cudaStream_t), NULL on the host backend. */
void *wt_work_stream(struct wt_work *w);
int wt_work_pass_begin(struct wt_work *w);
/* Run the workload on an acquired view (device pointers, or host pointers on
 * the host backend).  Errors are printed; returns 0 or CLI_EXIT_FAIL. */
int wt_work_layer(struct wt_work *w, const struct wsp_layer *view);
/* Wait for the stream, check the checksums, collect timings. */
int wt_work_pass_end(struct wt_work *w, struct wt_pass_result *res);

/* ---- trace collection (wspager-trace.c) ---- */
struct wt_trace;
/* Creates PATH's temporary file at once (a bad path fails before the run).
 * Refuses a PATH inside the pack being read, and an existing one unless
 * `force`. */
int wt_trace_new(const char *path, const char *pack, bool force, struct wt_trace **out);
void wt_trace_free(struct wt_trace *t);
/* The wsp_trace_fn to put in wsp_options.trace, ctx = the wt_trace. */
void wt_trace_cb(void *ctx, const struct wsp_trace_event *ev);
void wt_trace_compute(struct wt_trace *t, const struct wt_pass_result *res, unsigned pass);
/* Write the Chrome trace-event JSON, fsync, rename onto the path. */
int wt_trace_write(struct wt_trace *t);

/* ---- ceilings (wspager-ceil.c) ---- */
/* sync + echo 3 > /proc/sys/vm/drop_caches when root; true if done. */
bool wt_drop_caches(void);
/* Host-to-GPU copies of 64 MiB: pinned (cudaHostRegister, async, events) and
 * pageable (malloc, cudaMemcpy).  GB/s = 1e9 bytes/s. */
int wt_ceil_h2d(int device, double *pinned_gbps, double *pageable_gbps);
/* Read the pack's shards (at most 2 GiB) O_DIRECT where the file system
 * allows (else buffered, direct = false) with a few patterns of threads and
 * request sizes, after dropping the page cache when root; the best wins. */
struct wt_disk_ceiling {
	double gbps;              /* stored bytes per second, 1e9 */
	unsigned threads;         /* the winning pattern; 0: the pager's I/O engine */
	uint64_t req_bytes;
	uint64_t limit;           /* bytes each pattern read at most; 0: all */
	bool direct, dropped;
};
/* The disk's read bandwidth over the pack's first `limit` bytes (0: all of
 * them): the best of a few pread patterns (or only the one `only` won with,
 * when not NULL) and of the pager's own read path (wsp_pack_measure_read;
 * reported as threads = 0). */
#define WT_DISK_PROBE (2ull << 30)
int wt_ceil_disk(const char *pack, wsp_pack *pk, unsigned n_shards, uint64_t limit,
		 const struct wt_disk_ceiling *only, struct wt_disk_ceiling *out);
/* wsp_pack_measure_decode with all threads (stored bytes read into memory
 * first, untimed): GB/s of raw bytes.  raw_bytes and warm_first are unused. */
int wt_ceil_decode(wsp_pack *pk, uint64_t raw_bytes, bool warm_first, double *gbps);

/* ---- subcommands ---- */
void wt_help(FILE *f);
/* Read an order file (layer names, one per line, '#' comments) into layer
 * indices; errors name the file and line. */
int wt_read_order(const char *path, const wsp_pack *pk, uint32_t **out, size_t *n_out);
int wt_cmd_run(int argc, char **argv);
int wt_cmd_bench(int argc, char **argv);
int wt_cmd_simulate(int argc, char **argv);
int wt_cmd_verify(int argc, char **argv);
int wt_cmd_info(int argc, char **argv);

/* "wspager: PATH: detail" for a failed wsp_open/wsp_pack_open. */
void wt_open_error(const char *path, const char *err, int rc);
/* Open a pack read-only; prints "wspager: PATH: detail" on failure. */
int wt_pack_open(const char *path, wsp_pack **out);
/* "wspager: <why acquire failed>" naming the layer once. */
void wt_acquire_error(wsp_pager *pg, const char *layer);
/* A name from a file, safe to print (wsp_escape_text into a per-thread
 * buffer, valid until the next call on this thread). */
const char *wt_text(const char *untrusted);
/* False when WSPAGER_NO_DROP_CACHES is set (tests, shared machines). */
bool wt_drop_caches_allowed(void);
/* Print a jansson value to stdout (indented) with a newline; 0 or CLI_EXIT_FAIL. */
struct json_t;
int wt_json_print(struct json_t *v);

#endif
