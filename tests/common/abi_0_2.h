/* The public structs exactly as WSPAGER_0.2 laid them out, frozen: a
 * program built against the 0.2 header sees these.  Never edit this file;
 * tests/common/test_abi_layout.c checks that the current header keeps every
 * field here at the same offset and every struct at the same size. */
#ifndef WSP_TESTS_ABI_0_2_H
#define WSP_TESTS_ABI_0_2_H

#include <stdint.h>
#include "wspager.h"   /* enums, callback types, WSP_MAX_RANK */

struct wsp_tensor_v0_2 {
	const char *name;       /* full name, e.g. "model.layers.7.mlp.up_proj.weight" */
	const char *short_name; /* name inside its layer, e.g. "mlp.up_proj.weight" */
	enum wsp_dtype dtype;
	unsigned rank;
	uint64_t shape[WSP_MAX_RANK];
	uint64_t bytes;         /* raw size: elements x dtype size */
	uint64_t checksum;      /* wsp_checksum64() of the raw bytes */
	uint32_t layer;         /* index of its layer */
	/* Where the bytes are: inside wsp_acquire()'s view, a device pointer
	 * (host pointer for WSP_DEVICE_HOST); NULL in the pack's own tensors
	 * (wsp_pack_layer, wsp_pack_find_tensor).  Read-only: the pager's
	 * tiers hold the only copy, and a write would reach the next acquire. */
	const void *data;
	uint64_t reserved[4];
};

struct wsp_layer_v0_2 {
	uint32_t index;
	const char *name;       /* e.g. "model.layers.7" */
	uint32_t n_tensors;
	const struct wsp_tensor *tensors;  /* n_tensors entries */
	uint64_t raw_bytes;     /* size once decoded, tensors aligned inside */
	uint64_t stored_bytes;  /* size on disk */
	const void *data;       /* start of the layer's slot (wsp_acquire only), read-only */
	uint64_t reserved[4];
};

struct wsp_pack_summary_v0_2 {
	uint32_t n_layers, n_tensors, n_shards, n_sources;
	uint64_t n_chunks;
	uint64_t raw_bytes;          /* sum of tensor bytes */
	uint64_t stored_bytes;       /* sum of chunk bytes on disk */
	uint64_t max_layer_raw_bytes;
	uint64_t chunk_bytes;        /* nominal raw chunk size */
	unsigned format_version;
	const char *metadata_json;   /* the first source's __metadata__ as JSON, or NULL */
	uint64_t reserved[8];
};

struct wsp_options_v0_2 {
	uint64_t host_cache_bytes;  /* pinned host tier budget; default 1/4 of RAM, at most 8 GiB */
	unsigned gpu_slots;         /* GPU tier: slots of the largest layer; default 3 */
	int device;                 /* CUDA ordinal, or WSP_DEVICE_HOST; default 0 */
	enum wsp_io_backend io;     /* default WSP_IO_AUTO */
	unsigned queue_depth;       /* io_uring depth / read requests in flight; default 32 */
	unsigned io_threads;        /* pread backend workers; default 4 */
	unsigned decode_threads;    /* 0: one per core */
	enum wsp_policy policy;     /* eviction in both tiers; default WSP_POLICY_PREDICT */
	unsigned lookahead;         /* layers to prefetch ahead; 0: as many as the tiers hold */
	uint64_t page_bytes;        /* host cache page size; default 2 MiB */
	unsigned flags;             /* WSP_OPEN_* */
	wsp_log_fn log;  void *log_ctx;
	wsp_trace_fn trace; void *trace_ctx;
	uint64_t reserved[16];      /* zero (wsp_options_init) */
};

struct wsp_stats_v0_2 {
	uint64_t acquires;
	uint64_t gpu_hits;          /* acquire found the layer already in a slot */
	uint64_t host_hits;         /* ...in the host cache, not in a slot */
	uint64_t misses;            /* ...not even in the host cache */
	uint64_t predicted;         /* acquire of the layer the predictor named first */
	uint64_t prefetches;        /* layers loaded ahead of need */
	uint64_t prefetch_wasted;   /* loaded ahead, evicted unused */
	uint64_t host_evictions, gpu_evictions;
	uint64_t bytes_read;        /* from disk */
	uint64_t bytes_decoded;     /* raw bytes produced by decoding */
	uint64_t bytes_h2d;         /* copied into slots */
	uint64_t read_ns, decode_ns, h2d_ns;  /* busy time of each stage, summed over workers */
	uint64_t acquire_block_ns;  /* host time blocked inside wsp_acquire */
	uint64_t host_cache_bytes;  /* budget actually in use (after clamping) */
	uint64_t pinned_bytes;      /* page-locked bytes (0 when pinning is off) */
	uint64_t slot_bytes;        /* size of one GPU slot */
	unsigned gpu_slots;
	char io_backend[16];        /* "uring", "pread", "mmap" */
	int direct_io;              /* 1 when reads bypass the page cache */
	uint64_t staging_bytes;     /* read staging arena, outside the host budget */
	uint64_t acquire_failures;  /* acquires that failed (not counted above) */
	uint64_t reserved[15];
};

struct wsp_convert_options_v0_2 {
	int level;                 /* zstd level; default 1 */
	uint64_t chunk_bytes;      /* raw bytes per chunk; default 4 MiB */
	uint64_t shard_bytes;      /* target shard size; default 4 GiB (layers never split) */
	enum wsp_codec codec;      /* default zstd; chunks that do not shrink are stored raw */
	int transform;             /* byte/exponent grouping of float dtypes; default 1 */
	unsigned threads;          /* 0: all cores */
	const char *group_regex;   /* extended regex whose first group names the layer; NULL: built-in */
	unsigned flags;            /* WSP_CONVERT_FORCE */
	wsp_progress_fn progress; void *progress_ctx;
	/* Notices about the inputs that do not stop the conversion: tensors a
	 * shard holds but the index does not name (kept), *.safetensors files
	 * of the directory that are not used (ignored).  Called on the calling
	 * thread; NULL (the default): not reported. */
	wsp_log_fn log; void *log_ctx;
	uint64_t reserved[16];     /* zero (wsp_convert_options_init) */
};

struct wsp_generate_options_v0_2 {
	unsigned layers;           /* default 8 */
	unsigned hidden;           /* default 1024 */
	unsigned intermediate;     /* default 2816 */
	unsigned vocab;            /* default 8192 */
	unsigned heads, kv_heads;  /* default hidden/64 and heads/4 (at least 1) */
	enum wsp_dtype dtype;      /* default BF16 (F16, F32 also) */
	uint64_t shard_bytes;      /* >0: shard into files of about this size plus an index; default 0 */
	uint64_t seed;             /* default 1 */
	unsigned flags;            /* WSP_CONVERT_FORCE */
	wsp_progress_fn progress; void *progress_ctx;
	uint64_t reserved[8];      /* zero (wsp_generate_options_init) */
};

#endif
