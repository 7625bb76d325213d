/*
 * wspager — a disk-to-GPU tiered weight pager.
 *
 * Model weights live on disk in a *pack* (zstd-compressed, checksummed shard
 * files written by wspack).  The pager moves them through three tiers:
 *
 *   disk  --io_uring/O_DIRECT-->  pinned host cache  --copy stream-->  GPU slots
 *
 * and a predictor learns the order in which the program asks for layers, so
 * that the next layers are already on their way while the current one runs.
 *
 * Reading order of this header:
 *   1. version and error codes
 *   2. data types and dtypes
 *   3. packs: open a pack read-only, list layers and tensors, verify, unpack
 *   4. the pager: options, open/close, acquire/release, prefetch, statistics
 *   5. converting safetensors checkpoints into packs; generating test models
 *   6. utilities (checksums, sizes)
 *
 * Conventions (as in liburing): every function that can fail returns 0, or a
 * non-negative count, on success and a negative code on failure: -errno for
 * operating-system errors, WSP_E* codes (all below -4095) for everything else.
 * errno is never the error channel.  wsp_strerror() names a code; the detail
 * (file, layer, tensor, chunk, the CUDA error string) of a pager call's
 * failure is kept per thread (wsp_errmsg), of a pack's per handle
 * (wsp_pack_errmsg).  Functions that take no handle take a caller buffer
 * `errbuf` (may be NULL) for that detail.
 *
 * NULL: a NULL handle or a NULL pointer a call needs is -EINVAL; free/close
 * functions accept NULL; lookups on NULL return NULL.  Handles are opaque.
 *
 * Structures that grow: every public struct ends in `reserved` space that
 * later versions turn into new fields without moving the old ones, so its
 * size and layout stay those of WSPAGER_0.2.  Structs the caller fills
 * (options) must be filled by their *_init() function, or zeroed: the
 * library refuses non-zero reserved fields with -EINVAL, so that a value a
 * later version gives meaning to is never silently ignored.  Structs the
 * library fills (stats, summary, views) have their reserved space zeroed.
 * Views handed out are read-only: their data pointers are const.
 */
#ifndef WSPAGER_H
#define WSPAGER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ====================================================================== */
/* 1. Version and errors                                                   */
/* ====================================================================== */

#define WSP_VERSION_MAJOR 0
#define WSP_VERSION_MINOR 4
#define WSP_VERSION_PATCH 0
#define WSP_VERSION_NUMBER (WSP_VERSION_MAJOR * 10000 + WSP_VERSION_MINOR * 100 + WSP_VERSION_PATCH)

/* The version of the library actually linked, as WSP_VERSION_NUMBER. */
unsigned wsp_version_number(void);
/* "MAJOR.MINOR.PATCH" of the linked library. */
const char *wsp_version_string(void);

/*
 * Project error codes.  Append-only: never renumber, never remove.
 * They sit below -4095 so that they never collide with -errno.
 */
enum wsp_error {
	WSP_EFORMAT = -4096,   /* malformed file: safetensors header, index, manifest */
	WSP_ECHECKSUM = -4097, /* stored checksum does not match the data */
	WSP_EZSTD = -4098,     /* zstd refused a frame (corrupt, truncated, bomb) */
	WSP_ECUDA = -4099,     /* a CUDA runtime call failed; message has the CUDA string */
	WSP_ECUBLAS = -4100,   /* a cuBLAS call failed */
	WSP_EVERSION = -4101,  /* pack format version not supported by this library */
	WSP_EDTYPE = -4102,    /* unknown or unsupported dtype */
	WSP_ETOOBIG = -4103,   /* a size or count beyond a limit, or arithmetic overflow */
	WSP_ENOTFOUND = -4104, /* no such layer or tensor */
	WSP_ENODEVICE = -4105, /* no CUDA device (or the requested one does not exist) */
	WSP_ESTATE = -4106,    /* call not valid in the handle's current state */
	WSP_EEXIST = -4107,    /* output exists and overwriting was not asked for */
	WSP_EBIGENDIAN = -4108 /* big-endian host: packs and safetensors are little-endian */
};

/* A static string naming any return code of this library (also -errno). */
const char *wsp_strerror(int code);

/* ====================================================================== */
/* 2. Data types                                                           */
/* ====================================================================== */

/* Element types: every dtype of the safetensors format.  Append-only. */
enum wsp_dtype {
	WSP_DTYPE_BOOL = 0,
	WSP_DTYPE_U8,
	WSP_DTYPE_I8,
	WSP_DTYPE_F8_E5M2,
	WSP_DTYPE_F8_E4M3,
	WSP_DTYPE_I16,
	WSP_DTYPE_U16,
	WSP_DTYPE_F16,
	WSP_DTYPE_BF16,
	WSP_DTYPE_I32,
	WSP_DTYPE_U32,
	WSP_DTYPE_F32,
	WSP_DTYPE_F64,
	WSP_DTYPE_I64,
	WSP_DTYPE_U64,
	WSP_DTYPE_F8_E8M0,
	WSP_DTYPE_C64,
	WSP_DTYPE_F4,       /* two values per byte */
	WSP_DTYPE_F6_E2M3,  /* four values per three bytes */
	WSP_DTYPE_F6_E3M2,
	WSP_DTYPE_COUNT
};

/* The safetensors name ("BF16"), or NULL for an invalid value. */
const char *wsp_dtype_name(enum wsp_dtype dt);
/* Size of one element in bits (1-byte types: 8; F4: 4; F6_*: 6); 0 if invalid. */
unsigned wsp_dtype_bits(enum wsp_dtype dt);
/* Parse a safetensors dtype name; returns the dtype or WSP_EDTYPE. */
int wsp_dtype_from_name(const char *name);

#define WSP_MAX_RANK 8

/* A tensor, as stored in a pack and as handed out by wsp_acquire(). */
struct wsp_tensor {
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

/* A layer: the unit of paging, a group of tensors used together. */
struct wsp_layer {
	uint32_t index;
	const char *name;       /* e.g. "model.layers.7" */
	uint32_t n_tensors;
	const struct wsp_tensor *tensors;  /* n_tensors entries */
	uint64_t raw_bytes;     /* size once decoded, tensors aligned inside */
	uint64_t stored_bytes;  /* size on disk */
	const void *data;       /* start of the layer's slot (wsp_acquire only), read-only */
	uint64_t reserved[4];
};

/* ====================================================================== */
/* 3. Packs: read-only access                                              */
/* ====================================================================== */

typedef struct wsp_pack_s wsp_pack;

/*
 * Open the pack directory `path` (it holds `manifest.wspm` and the shards).
 * The manifest is validated completely here: a pack that opens is
 * internally consistent.  Thread-safe once open: all lookups are read-only.
 */
int wsp_pack_open(const char *path, wsp_pack **out, char *errbuf, size_t errlen);
void wsp_pack_close(wsp_pack *pk);
const char *wsp_pack_errmsg(const wsp_pack *pk);

struct wsp_pack_summary {
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
int wsp_pack_summary(const wsp_pack *pk, struct wsp_pack_summary *out);

/* Layers and tensors by index or name; NULL when out of range / absent.
 * Pointers stay valid until wsp_pack_close(). */
const struct wsp_layer *wsp_pack_layer(const wsp_pack *pk, uint32_t index);
const struct wsp_layer *wsp_pack_find_layer(const wsp_pack *pk, const char *name);
const struct wsp_tensor *wsp_pack_find_tensor(const wsp_pack *pk, const char *full_name);
/* The path of shard file `shard` (0 .. n_shards - 1): the pack directory
 * joined with the shard's name (wspack(5)), into buf (len bytes, may be 0).
 * Returns the length of the whole path, as snprintf does: a value >= len
 * means buf was too small.  -EINVAL for a NULL pack or buf with len > 0,
 * WSP_ENOTFOUND for a shard out of range (added in 0.2). */
int wsp_pack_shard_path(const wsp_pack *pk, uint32_t shard, char *buf, size_t len);
/* Where a layer's stored bytes are (added in 0.3): the shard and the
 * offset in it (a multiple of 4096) of its stored_bytes bytes, which are
 * contiguous.  -EINVAL, or WSP_ENOTFOUND for a layer out of range.  With
 * wsp_provide, processes that share a pack read one part each and
 * exchange them. */
int wsp_pack_layer_extent(const wsp_pack *pk, uint32_t layer, uint32_t *shard, uint64_t *offset);
/* Processes that read a layer together (added in 0.4) each read one part
 * and exchange the parts, in the layer's packed form: its chunks in file
 * order, each at a 16-aligned offset, exponent-rANS chunks as stored and
 * the others decoded (raw bytes), the gaps zero - what a GPU fills a slot
 * from (wsp_provide_device).  Part k of n holds whole chunks: it ends after
 * the first chunk whose stored bytes reach (k + 1) / n of the layer's, so
 * the parts follow each other and cover the layer (a part may be empty),
 * and their readers together read the layer's stored bytes once. */
struct wsp_part {
	uint64_t offset, bytes;              /* in the layer's packed form */
	uint64_t stored_offset, stored_bytes; /* what is read, from the layer's
						 start (wsp_pack_layer_extent) */
};
/* Where part `part` of `parts` of layer is (*out); with dst (room for `cap`
 * bytes) also read it into dst[0 .. out->bytes) and check each chunk - its
 * stored check where recorded, else its decoded bytes against their
 * checksum - so that a GPU decodes only checked bytes: WSP_ECHECKSUM (or
 * WSP_EZSTD) names a chunk that does not match, -EINVAL a small cap.  The
 * layer's whole packed size is part 0 of 1's bytes.  Calls on one handle
 * may run at once (they share its error message). */
int wsp_pack_read_part(wsp_pack *pk, uint32_t layer, unsigned part, unsigned parts, void *dst,
		       uint64_t cap, struct wsp_part *out);
/* Raw and stored bytes of the tensors of dtype `dt` (either pointer may be
 * NULL); returns how many tensors have that dtype, or -EINVAL. */
int wsp_pack_dtype_bytes(const wsp_pack *pk, enum wsp_dtype dt, uint64_t *raw, uint64_t *stored);
/* WSP_CODEC_EXPRANS (added in 0.2): bf16 chunks with their exponents
 * rANS-coded in lanes a GPU decodes in parallel, sign and mantissa raw
 * (wspack(5)); f16 and f32 alike, f32 with its low halves coded too where
 * they have structure (since 0.3: fp32 upcast from bf16 or f16); chunks of
 * other dtypes are stored with zstd.
 * WSP_CODEC_AUTO (the default since 0.3), chosen per chunk: exprans, unless
 * zstd (with the byte transform) stores it in more than 3% fewer bytes;
 * packs record each chunk's codec, never AUTO. */
enum wsp_codec { WSP_CODEC_ZSTD = 0, WSP_CODEC_RAW = 1, WSP_CODEC_EXPRANS = 2,
		 WSP_CODEC_AUTO = 3 };
/* Raw and stored bytes of the chunks of dtype `dt` stored with `codec`
 * (either pointer may be NULL); returns how many chunks, or -EINVAL (also
 * for WSP_CODEC_AUTO, which no chunk records) (added in 0.3). */
int wsp_pack_codec_bytes(const wsp_pack *pk, enum wsp_dtype dt, enum wsp_codec codec,
			 uint64_t *raw, uint64_t *stored);

/* Progress callback for long operations: done/total in raw bytes. Returning
 * non-zero cancels the operation, which then fails with -ECANCELED. */
typedef int (*wsp_progress_fn)(void *ctx, uint64_t done, uint64_t total);

/* Decode every chunk with `threads` workers (0: all cores) and check every
 * checksum.  Returns 0, or the first error with the shard, layer, tensor and
 * chunk in the pack's message. */
int wsp_pack_verify(wsp_pack *pk, unsigned threads, wsp_progress_fn progress, void *ctx);

/* The decode-side ceiling, measured from memory: read the stored bytes of
 * whole layers in pack order (up to `limit` stored bytes, 0: all; in either
 * case at most a quarter of the memory this process may use, and at least
 * the first layer) into memory first, untimed; then decode every chunk with
 * `threads` workers (0: all cores), each with its own decoder and
 * destination, exactly as the host cache decodes (zstd, the transform, the
 * chunk checksums), timing only that.  *raw_bytes receives the tensor bytes
 * produced (padding excluded) and *ns the time.  Errors: those of reading,
 * WSP_ECHECKSUM, WSP_EZSTD, WSP_EFORMAT, with the shard, layer, tensor and
 * chunk in the pack's message (then *raw_bytes and *ns are 0). */
int wsp_pack_measure_decode(wsp_pack *pk, unsigned threads, uint64_t limit,
			    uint64_t *raw_bytes, uint64_t *ns);

/* Read and decode `layer` into `dst` (its raw_bytes, host memory) on the
 * calling thread with plain buffered reads: the simple synchronous path that
 * naive loaders take (tools use it for comparisons).  Checks every checksum.
 * Not thread-safe for one handle. */
int wsp_pack_read_layer(wsp_pack *pk, uint32_t layer, void *dst);

/* Read the pack's shard data (at most `limit` bytes, 0: all) through the
 * pager's own I/O engine exactly as a cold run issues it (whole layers in
 * pack order; backend, O_DIRECT and queue depth from `opt`, or the defaults
 * when NULL), without decoding.  The disk-side ceiling a cold run is measured
 * against.  *bytes and *ns receive what was read and how long it took. */
struct wsp_options;
int wsp_pack_measure_read(wsp_pack *pk, const struct wsp_options *opt, uint64_t limit,
			  uint64_t *bytes, uint64_t *ns);

#define WSP_UNPACK_FORCE 1u  /* replace an existing output directory */
/* Write the original safetensors files (and model.safetensors.index.json if
 * the source had one) into `out_dir`, byte-identical to the inputs: same
 * header text, same tensor order, same __metadata__.  Written to a temporary
 * name and renamed, so a failed unpack leaves no output that looks complete. */
int wsp_pack_unpack(wsp_pack *pk, const char *out_dir, unsigned flags,
		    wsp_progress_fn progress, void *ctx);

/* ====================================================================== */
/* 4. The pager                                                            */
/* ====================================================================== */

typedef struct wsp_pager_s wsp_pager;

#define WSP_DEVICE_HOST (-1)   /* third tier in host memory, copies are memcpy */

enum wsp_io_backend { WSP_IO_AUTO = 0, WSP_IO_URING, WSP_IO_PREAD, WSP_IO_MMAP };
enum wsp_policy { WSP_POLICY_PREDICT = 0, WSP_POLICY_LRU };

/* Trace events, for timelines (wspager run --trace-json).  H2D is a slot
 * fill (its copy, and for a packed layer its decode on the GPU), given
 * when the pager reaps the fill once it is done: at a later acquire or
 * fill, wsp_get_stats or wsp_close, not as the device finishes it (see
 * wsp_open(3)); D2H (added in 0.2) a gradient push's copies out of the
 * device. */
enum wsp_stage { WSP_STAGE_READ = 0, WSP_STAGE_DECODE, WSP_STAGE_H2D, WSP_STAGE_WAIT,
		 WSP_STAGE_D2H };
struct wsp_trace_event {
	enum wsp_stage stage;
	uint32_t layer;
	uint64_t begin_ns, end_ns;   /* CLOCK_MONOTONIC */
	uint64_t bytes;
	int thread;                  /* worker index within the stage */
};
/* Called from library threads, possibly concurrently: must be thread-safe,
 * and must not call the pager (the pager's own thread, which starts the
 * copies, calls it too: an acquire from there would wait for itself). */
typedef void (*wsp_trace_fn)(void *ctx, const struct wsp_trace_event *ev);
/* Notices such as "io_uring refused (EPERM): using the pread backend".  Each
 * kind of notice is given once per pager.  Called from any thread. */
typedef void (*wsp_log_fn)(void *ctx, const char *message);

struct wsp_options {
	uint64_t host_cache_bytes;  /* pinned host tier budget; default 1/4 of RAM, at most 8 GiB;
	                               the tier takes no more than the pack's layers */
	unsigned gpu_slots;         /* GPU tier: slots for acquired and prefetched layers;
	                               default 3.  When a few layers (embeddings, heads)
	                               are much larger than the rest, up to two slots take
	                               their size and the others only the rest's (0.2) */
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
	/* Layers loaded only on demand (added in 0.2, out of the reserved
	 * space): NULL, or a NULL-terminated list of layer names that the pager
	 * never reads ahead of need, neither in pack order before it has
	 * learned nor by prediction; they move up the tiers only when acquired
	 * or named in wsp_prefetch().  For modules that run only sometimes
	 * (routed experts, task heads): what never runs is never read.  An
	 * unknown name is WSP_ENOTFOUND.  Read during wsp_open() only. */
	const char *const *on_demand;
	/* Training (added in 0.2): host memory for the layers wsp_update has
	 * changed.  Past it the least recently used of them go to an unnamed
	 * overflow file and come back, checked, when used; never lost.
	 * wsp_options_init leaves 0: a quarter of host_cache_bytes, at least
	 * two of the largest layer. */
	uint64_t updated_bytes;
	/* The overflow file's directory; NULL: the pack's directory, else
	 * $TMPDIR, else /var/tmp. */
	const char *overflow_dir;
	/* A GPU tier of packed layers (added in 0.2; 0, the default: none):
	 * up to this many bytes of device memory, besides the slots, keep
	 * packed layers (exprans packs on a GPU, WSP_OPEN_HOST_DECODE not
	 * set) after their copy, so that their next fills decode on the
	 * device without touching the link.  A layer that does not fit
	 * displaces only layers filled less often: a loop over more layers
	 * than fit keeps a fixed set of them. */
	uint64_t gpu_packed_bytes;
	/* Training state (added in 0.2): host memory for the buffers of
	 * wsp_state_acquire (an optimizer's masters and moments).  Past it the
	 * least recently released go to an unnamed overflow file
	 * (overflow_dir) and come back, checked, when acquired; never lost.
	 * wsp_options_init leaves 0: a quarter of host_cache_bytes. */
	uint64_t state_bytes;
	/* Several devices (added in 0.3): with n_devices >= 2 the pager feeds
	 * `devices` (CUDA ordinals, or WSP_DEVICE_HOST, each named once) and
	 * `device` is not used.  Each layer belongs to one of them:
	 * layer_devices[layer] is an index into `devices` (NULL: consecutive
	 * layers, balanced by raw bytes, as a pipeline splits a model).  Each
	 * device gets its own GPU tier (gpu_slots slots, gpu_packed_bytes)
	 * filled over its own link, and the share of host_cache_bytes its
	 * layers' raw bytes are of the model's; a layer is read from disk and
	 * cached once, by the device it belongs to.  Acquire a layer with a
	 * stream of its device (wsp_layer_device).  Training (wsp_grad_*,
	 * wsp_state_*, wsp_update, wsp_save) needs one device: with several
	 * it is refused.  Read during wsp_open() only. */
	const int *devices;
	const uint32_t *layer_devices;
	unsigned n_devices;
	unsigned reserved_u32;      /* zero */
	uint64_t reserved[8];       /* zero (wsp_options_init) */
};
#define WSP_OPEN_NO_DIRECT  1u   /* buffered reads even where O_DIRECT works */
#define WSP_OPEN_NO_PIN     2u   /* do not page-lock the host cache (slower H2D; says so) */
#define WSP_OPEN_NO_PREFETCH 4u  /* only load what is acquired (for comparisons) */
/* host_cache_bytes bounds all the pager's host memory: the cache, its read
 * staging and the decoders' buffers (then each at most an eighth of the
 * budget: fewer decode threads, unless decode_threads is set) and, on
 * WSP_DEVICE_HOST, the slots; the cache gets what is left (added in 0.2). */
#define WSP_OPEN_HOST_TOTAL 8u
/* Decode every chunk on the host and keep layers raw in the host tier.  By
 * default, with a GPU, the host tier keeps EXPRANS chunks (wspack(5),
 * codec 2) as stored, ~1.5x smaller, after checking their stored bytes
 * (no host decode), and the GPU decodes them at each slot fill, so the link carries fewer bytes (added
 * in 0.2). */
#define WSP_OPEN_HOST_DECODE 16u
/* Who decodes is otherwise measured while running: with a GPU that decodes
 * and a host budget beyond the pack's raw size, the pager times windows of
 * acquires with packed layers and with raw copies of them decoded once on
 * the host (in what the budget leaves beyond the pack), taking turns, and
 * keeps the faster (wsp_who_decodes; a notice gives the figures).  A step bound by
 * the link keeps the GPU decoding; one bound by compute, whose kernels the
 * GPU's decode would delay, gets raw layers.  This flag skips the trial:
 * the GPU decodes (added in 0.2). */
#define WSP_OPEN_GPU_DECODE 32u

/* Fill `opt` with the defaults above. */
void wsp_options_init(struct wsp_options *opt);

/*
 * Open a pack for paging.  Allocates the host cache and the GPU slots once,
 * starts the I/O and decode workers, and begins prefetching in pack order.
 * Errors: -ENOENT and WSP_EFORMAT for the pack, WSP_ETOOBIG when a layer is
 * larger than a slot could ever be, WSP_ECUDA/-ENOMEM when slots or pinned
 * memory cannot be had (message says how much was asked and how much is free).
 * On failure *out is NULL and `errbuf` holds the detail.
 */
int wsp_open(const char *path, const struct wsp_options *opt, wsp_pager **out,
	     char *errbuf, size_t errlen);

/* Stop the workers, wait for in-flight copies, free everything.  Layers still
 * acquired are released.  Not concurrently with any other call on `pg`. */
void wsp_close(wsp_pager *pg);

/* The detailed message of the calling thread's last failed call on `pg`
 * ("" if it has had none): per thread, so concurrent acquires never see each
 * other's errors.  Valid until this thread's next failed call.  Thread-safe. */
const char *wsp_errmsg(wsp_pager *pg);

/* The pack behind the pager; owned by the pager.  Lookups are thread-safe;
 * it also takes the calls that read (verify, read_layer, measure, unpack),
 * one at a time on it, and not during wsp_save() (they share its messages). */
wsp_pack *wsp_pager_pack(const wsp_pager *pg);
/* The device `layer` belongs to (added in 0.3): its CUDA ordinal or
 * WSP_DEVICE_HOST into *device, and its position in wsp_options.devices
 * into *index (0 with one device; index may be NULL).  0, or WSP_ENOTFOUND
 * for a layer the pack does not have. */
int wsp_layer_device(wsp_pager *pg, uint32_t layer, int *device, unsigned *index);

/*
 * Make `layer` usable on `stream` (a cudaStream_t, or NULL for the legacy
 * default stream; ignored for WSP_DEVICE_HOST).  On return, work enqueued on
 * `stream` after this call sees the weights: the stream waits on the copy's
 * event, the host does not.  The host blocks only while the layer has not yet
 * reached the host tier (a layer never predicted nor prefetched).
 * `*view` holds device pointers for every tensor; it stays valid until the
 * matching wsp_release() or wsp_release_view().  Each acquire gets a view of
 * its own (over the same slot for the same layer).  A layer may be acquired
 * again before release (counted).  Thread-safe: several threads may acquire
 * different or the same layers at once.
 */
int wsp_acquire(wsp_pager *pg, uint32_t layer, void *stream, const struct wsp_layer **view);
/* As wsp_acquire, but when every slot holds an acquired layer, wait until a
 * release frees one, for at most `timeout_ns` nanoseconds; then -ETIMEDOUT.
 * For more threads than slots, instead of retrying WSP_ESTATE.  Thread-safe. */
int wsp_acquire_wait(wsp_pager *pg, uint32_t layer, void *stream, const struct wsp_layer **view,
		     uint64_t timeout_ns);
/* As wsp_acquire, with WSP_ACQUIRE_* flags (added in 0.2): per acquire,
 * what the predictor and read-ahead make of it.  -EINVAL for other bits. */
#define WSP_ACQUIRE_UNPREDICTED  1u  /* not learnt from: its place in the order
					 depends on data (a routed expert) */
#define WSP_ACQUIRE_NO_READAHEAD 2u  /* start no read-ahead after it (the caller
					 hints what comes next, wsp_hint_next) */
int wsp_acquire_flags(wsp_pager *pg, uint32_t layer, void *stream, unsigned flags,
		      const struct wsp_layer **view);
/* As wsp_acquire, by layer name. */
int wsp_acquire_by_name(wsp_pager *pg, const char *name, void *stream, const struct wsp_layer **view);

/* The tensor `short_name` (or full name) of an acquired view; NULL if absent. */
const struct wsp_tensor *wsp_layer_tensor(const struct wsp_layer *view, const char *name);

/* End this use of `layer`: an event is recorded on `stream`, and the slot is
 * refilled only after the stream has passed it.  Never blocks.  Thread-safe. */
int wsp_release(wsp_pager *pg, uint32_t layer, void *stream);
/* As wsp_release, for the one acquire that returned `view` (added in 0.2):
 * each acquire gets a view of its own, so components sharing a layer
 * release exactly their own use; a view released already is WSP_ESTATE
 * (detected until 64 later releases of the pager have recycled its memory),
 * where wsp_release(layer) would drop another holder's use.  Thread-safe. */
int wsp_release_view(wsp_pager *pg, const struct wsp_layer *view, void *stream);

/* Hint that `layer` will be needed soon: start moving it up the tiers.
 * Never blocks; returns 0 even when the tiers are full (the hint is dropped).
 * Thread-safe. */
int wsp_prefetch(wsp_pager *pg, uint32_t layer);
/* Hint that the next acquires will be layers[0 .. n), in that order (a
 * router's choice of experts, an engine's own schedule): each is moved up
 * the tiers now as needed at its place in the list, before what the
 * predictor would read.  Never blocks; what the tiers have no room for is
 * dropped.  WSP_ENOTFOUND (nothing hinted) for a layer out of range.
 * Thread-safe (added in 0.2). */
int wsp_hint_next(wsp_pager *pg, const uint32_t *layers, size_t n);
/* Hand the pager `layer`'s stored bytes (added in 0.3): its stored_bytes
 * bytes from wsp_pack_layer_extent's offset, got elsewhere (from other
 * processes, each of which read a part).  They are copied; the layer's next
 * load into the host tier uses them instead of reading the disk (and checks
 * them as it checks what it reads: bytes that do not match the manifest
 * fail that load), and that load starts now.  Returns 1 when taken, 0 when
 * the layer is present or loading already (the bytes were not needed),
 * -EINVAL (len is not the layer's stored_bytes), WSP_ENOTFOUND, -ENOMEM.
 * Open the pager with WSP_OPEN_NO_PREFETCH to have it read nothing ahead on
 * its own.  Thread-safe. */
int wsp_provide(wsp_pager *pg, uint32_t layer, const void *stored, uint64_t len);
/* As wsp_provide, with the layer's packed form (struct wsp_part) in the
 * pager's device memory (added in 0.4): there once `stream` (a
 * cudaStream_t; NULL the legacy default stream) reaches its current point,
 * as after an all-gather of the parts over the GPUs' own links.  The layer
 * is decoded from it into a slot, ahead of its acquire, without the host
 * tier or the host->device link; `stream` is made to wait for that decode,
 * so the bytes may be freed or reused in its order.  Nothing checks them
 * on the host here: read them with wsp_pack_read_part.  Returns 1 when
 * taken; 0 when not (a slot holds the layer, every slot it fits is
 * acquired, or training has updated it: its acquire brings it as usual);
 * -ENOTSUP when the pager decodes nothing on its device (no GPU, a pack
 * without exponent-rANS chunks, WSP_OPEN_HOST_DECODE: use wsp_provide);
 * -EINVAL (len is not the packed size), WSP_ENOTFOUND.  With packed NULL
 * and len 0 it only answers: 1, or -ENOTSUP.  A GPU refusal of the bytes
 * fails later acquires, as for any fill.  Thread-safe. */
int wsp_provide_device(wsp_pager *pg, uint32_t layer, const void *packed, uint64_t len,
		       void *stream);

/* Forget the learned execution order (e.g. when the workload changes), and
 * measure who decodes again (WSP_OPEN_GPU_DECODE). */
void wsp_reset_prediction(wsp_pager *pg);

struct wsp_stats {
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
	uint64_t slot_bytes;        /* size of the largest GPU slot */
	unsigned gpu_slots;
	char io_backend[16];        /* "uring", "pread", "mmap" */
	int direct_io;              /* 1 when reads bypass the page cache */
	uint64_t staging_bytes;     /* read staging arena, outside the host budget */
	uint64_t acquire_failures;  /* acquires that failed (not counted above) */
	uint64_t grad_pushes;       /* wsp_grad_push calls queued (added in 0.2) */
	uint64_t bytes_d2h;         /* gradient bytes copied out of the device (0.2) */
	uint64_t grad_add_ns;       /* host time adding them into fp32 (0.2) */
	uint64_t updated_layers;    /* layers wsp_update has changed (0.2; not reset) */
	uint64_t updated_bytes;     /* their bytes, in memory or spilled (0.2; not reset) */
	uint64_t updated_resident;  /* of those, bytes in host memory now (0.2) */
	uint64_t overflow_written;  /* bytes spilled to the overflow files: updated
	                               layers and training state (0.2) */
	uint64_t overflow_read;     /* bytes read back from them (0.2) */
	uint64_t packed_gpu_hits;   /* fills decoded from the GPU tier of packed layers (0.2) */
	uint64_t packed_gpu_bytes;  /* device bytes that tier holds now (0.2; not reset) */
	uint64_t readahead_left_out; /* layers no longer read ahead: their reads ahead were
	                                mostly wasted (0.2; until wsp_reset_prediction) */
	uint64_t slots_total_bytes; /* device bytes of all slots, which are sized by what
	                               they hold (0.2; was gpu_slots x slot_bytes) */
	uint64_t state_held;        /* bytes of training state the pager keeps
	                               (wsp_state_acquire; 0.2; not reset) */
	uint64_t state_resident;    /* of those, bytes in host memory now (0.2) */
	uint64_t reserved[1];
};
/* The counters, each read at one moment (not all under one lock: see
 * wsp_get_stats(3)).  Thread-safe. */
int wsp_get_stats(wsp_pager *pg, struct wsp_stats *out);
/* Zero the counters (not the configuration fields). */
void wsp_reset_stats(wsp_pager *pg);

/* Who decodes the packed layers (WSP_OPEN_GPU_DECODE says how it is
 * chosen): one of these, or -EINVAL (added in 0.2).  Thread-safe. */
#define WSP_DECODE_GPU 1       /* the GPU, at each fill */
#define WSP_DECODE_HOST 2      /* the host: the link carries raw layers (also for
                                  a pack with no exprans chunk) */
#define WSP_DECODE_TRYING 3    /* being measured */
#define WSP_DECODE_MIXED 4     /* several devices that chose differently */
int wsp_who_decodes(wsp_pager *pg);

/* ---------------------------------------------------------------------- */
/* 4b. Training: gradients written back (added in 0.2)                     */
/* ---------------------------------------------------------------------- */

/* `layer` argument of wsp_grad_query, _wait and _zero meaning every layer. */
#define WSP_ALL_LAYERS UINT32_MAX

/*
 * Hand the pager a layer's gradients.  grads[i] is the gradient of the
 * layer's tensor i (wsp_layer.tensors order): device memory (host memory on
 * WSP_DEVICE_HOST), contiguous, the tensor's dtype and size; NULL for a
 * tensor without one.  Gradients exist for F32, F16 and BF16 tensors
 * (WSP_EDTYPE otherwise).  The copies out of the device run on the pager's
 * write-back stream after the work enqueued on `stream` so far (an event:
 * the host does not wait, and the copies never queue behind weights coming
 * in), and a library thread adds them into fp32 accumulators in host
 * memory, one per tensor; pushes of a layer add up (micro-batches) until
 * wsp_grad_zero.  A tensor's push (64 KiB or more) is copied out in
 * chunks once its gradient is ready and widened (or added) as each chunk
 * lands (wsp_grad_push(3)).  The gradient memory must stay valid and
 * unchanged until wsp_grad_query() gives 1 for the layer.  A push may
 * carry only some of the layer's tensors (e.g. each as soon as the
 * backward has made it), so that the copies start early.  Returns at once unless all the pager's
 * staging buffers (three of the largest layer's size, pinned, made at the
 * first push; needed by pushes that add to earlier ones of tensors under
 * 64 KiB) or all its 32 push slots are in flight: then it waits for the
 * oldest.
 * Thread-safe.  A copy or addition that fails is kept and returned by
 * every later grad call.
 */
int wsp_grad_push(wsp_pager *pg, uint32_t layer, const void *const *grads, void *stream);
/*
 * One tensor's whole gradient as fp32, whatever the tensor's dtype (F32,
 * F16 or BF16: WSP_EDTYPE otherwise): `grad` is device memory (host memory
 * on WSP_DEVICE_HOST), contiguous, 4 bytes per element of tensor `tensor`
 * of `layer`, ordered after `stream` and kept valid as wsp_grad_push's is.
 * It adds up with the layer's other pushes as one in the tensor's dtype
 * would, widened: the sums are the same bits.  Its use: the tensor's first
 * push since wsp_grad_zero is copied straight into its accumulator (pinned
 * in place at that first push, on a device that pins), so that no host
 * thread widens it; it costs twice a bf16 gradient's bytes on the link,
 * which a caller whose host memory, not its link, is the bottleneck can
 * spend on some tensors.  A later push is staged and added: WSP_ETOOBIG
 * when 4 x its elements exceed a staging buffer (the largest layer's
 * bytes).  WSP_ENOTFOUND for a tensor the layer lacks.  Added in 0.5.
 */
int wsp_grad_push_f32(wsp_pager *pg, uint32_t layer, uint32_t tensor, const void *grad,
		      void *stream);
/*
 * A gradient that is zero outside some rows (an embedding's: only the rows
 * of the batch's tokens), handed over as those rows: rows[k] (int64) names
 * a row of tensor `tensor` of `layer` (an index into its first dimension)
 * whose gradient is at values + k x (the row's bytes), for k < n_rows.
 * Every other row's gradient is zero.  A negative entry is padding and is
 * skipped, so that a caller can mark repeated rows without first counting
 * the distinct ones; a row listed twice is added twice.  rows and values
 * are device memory (host memory on WSP_DEVICE_HOST), ordered after
 * `stream` and kept valid as wsp_grad_push's are; the push adds into the
 * tensor's accumulator like a push of the whole gradient (rows not listed
 * keep their bits, where adding a zero row would turn a -0 into +0).
 * WSP_ETOOBIG
 * when n_rows x (8 + the row's bytes) exceeds a staging buffer (the
 * largest layer's size): push the whole gradient instead.  A row past the
 * first dimension fails the addition (kept, as wsp_grad_push's failures
 * are).  Added in 0.2.
 */
int wsp_grad_push_rows(wsp_pager *pg, uint32_t layer, uint32_t tensor, const int64_t *rows,
		       uint64_t n_rows, const void *values, void *stream);
/* 1 when every push of `layer` (or WSP_ALL_LAYERS) is accumulated, 0 if not. */
int wsp_grad_query(wsp_pager *pg, uint32_t layer);
/* Block until every push of `layer` (or WSP_ALL_LAYERS) is accumulated. */
int wsp_grad_wait(wsp_pager *pg, uint32_t layer);

struct wsp_grads {
	uint32_t layer;
	uint32_t n_tensors;
	/* Per tensor: its fp32 accumulator (elements as in the tensor, row
	 * major), NULL while no push has given it a gradient.  The pager's
	 * memory, valid until wsp_close; the caller may read and write it
	 * (an optimizer reads it, a clip scales it) while no push of the
	 * layer is in flight. */
	float *const *data;
	uint64_t pushes;            /* accumulated since the last wsp_grad_zero */
	uint64_t reserved[8];
};
/* The layer's accumulators, once its pushes are accumulated. */
int wsp_grad_get(wsp_pager *pg, uint32_t layer, struct wsp_grads *out);
/* Zero the accumulators of `layer` (or WSP_ALL_LAYERS), after their pushes:
 * lazily (the next push overwrites, the next wsp_grad_get clears the rest). */
int wsp_grad_zero(wsp_pager *pg, uint32_t layer);

/*
 * Training state the pager keeps for the caller, per layer: one buffer (an
 * optimizer's fp32 masters and moments for the layer, 12 bytes a parameter
 * for AdamW, six times a bf16 model), so that a model whose weights and
 * optimizer state exceed host memory trains within it.
 * wsp_state_acquire takes `layer`'s buffer of `bytes` (> 0) bytes: host
 * memory, 4096-aligned, page-locked where the device pins (copies to and
 * from the device run straight from it), holding what it held when last
 * released, or zeros when the layer had none of that size (one of another
 * size is replaced).  The caller reads and writes it until
 * wsp_state_release, `changed` saying whether it wrote.  Released buffers
 * stay in memory up to wsp_options.state_bytes; past it the least recently
 * released go to an unnamed overflow file, and the next acquire reads
 * them back and checks them (WSP_ECHECKSUM if the file gave other bytes).
 * wsp_state_size gives the layer's size (0: none).  Thread-safe.  Added in
 * 0.2.
 */
int wsp_state_acquire(wsp_pager *pg, uint32_t layer, uint64_t bytes, void **data);
int wsp_state_release(wsp_pager *pg, uint32_t layer, int changed);
int64_t wsp_state_size(wsp_pager *pg, uint32_t layer);

/* One AdamW step, as torch.optim.AdamW takes it (decoupled weight decay, no
 * amsgrad), over n fp32 elements in host memory, in place: param,
 * exp_avg and exp_avg_sq are updated from grad in one pass per element,
 * split over `threads` (0: all cores).  `step` counts from 1 (the bias
 * corrections).  -EINVAL for NULL arrays, step 0 or non-zero reserved. */
struct wsp_adamw {
	double lr, beta1, beta2, eps, weight_decay;
	uint64_t step;
	unsigned threads;
	uint64_t reserved[4];       /* zero */
};
int wsp_adamw_step(float *param, const float *grad, float *exp_avg, float *exp_avg_sq,
		   uint64_t n, const struct wsp_adamw *hp);

/*
 * New values for `layer` (an optimizer step): values[i] is tensor i's new
 * raw bytes in host memory (its dtype, its size), or NULL to keep it.  From
 * then on the layer is "updated": every acquire copies it from the pager's
 * write-back room instead of the host cache, and its view's checksums are
 * those of the new bytes.  A slot copy of the old bytes is dropped; the
 * layer must not be acquired (WSP_ESTATE).  The values are copied before
 * the call returns.  Updated layers are kept in host memory up to
 * wsp_options.updated_bytes (outside the host cache budget), the rest in
 * the overflow file, until wsp_close; the pack on disk is never written.
 * An error writing the overflow file fails the call and changes nothing.
 */
int wsp_update(wsp_pager *pg, uint32_t layer, const void *const *values);
/* As wsp_update, from fp32 values (added in 0.3: an optimizer's fp32
 * masters, without a conversion pass of the caller's): values[i] holds
 * tensor i's elements as floats, narrowed to its dtype in the copy (BF16:
 * round to nearest even, as torch converts, and a NaN to the quiet NaN
 * 0x7fc0, where torch's vectorised CPU conversion gives 0xffff; F32:
 * copied).
 * -EINVAL, naming it, for a tensor of another dtype. */
int wsp_update_f32(wsp_pager *pg, uint32_t layer, const float *const *values);

/*
 * Write a new pack at `out` from the current layers, updated or not: the
 * same layers, tensors, order and safetensors sources as the open pack, so
 * that `wspack unpack` of it gives the checkpoint with the new values.
 * Atomic: the output appears complete or not at all (temporary directory,
 * fsync, rename); a temporary left by a killed save is removed by the next
 * save to the same output.  Needs free disk for the model's raw bytes twice
 * over while it runs (its safetensors files, then the pack) and memory for
 * one layer.  `out` must not be the open pack (-EINVAL); an existing `out`
 * is WSP_EEXIST unless WSP_SAVE_FORCE (then only a pack is replaced).
 * progress (may be NULL) is called after each layer is written out; a
 * non-zero return cancels (-ECANCELED).  One save or update at a time.
 */
#define WSP_SAVE_FORCE 1u
int wsp_save(wsp_pager *pg, const char *out, unsigned flags, wsp_progress_fn progress, void *ctx);

/* ====================================================================== */
/* 5. Converting checkpoints                                               */
/* ====================================================================== */


struct wsp_convert_options {
	int level;                 /* zstd level; default 1 */
	uint64_t chunk_bytes;      /* raw bytes per chunk; default 4 MiB */
	uint64_t shard_bytes;      /* target shard size; default 4 GiB (layers never split) */
	enum wsp_codec codec;      /* default AUTO (0.3; EXPRANS in 0.2, zstd before); zstd
	                              chunks that do not shrink are stored raw */
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
	/* Explicit grouping (added in 0.2, out of the reserved space): NULL, or
	 * pairs of strings {tensor, layer, tensor, layer, ..., NULL}.  A tensor
	 * named here goes to that layer, whatever group_regex or the built-in
	 * rule says; layers named here come first in the pack, in the order of
	 * their first pair (give the execution order), and inside a layer the
	 * tensors named here come first, in their order (consecutive tensors
	 * whose sizes are multiples of 256 are then adjacent in the layer).  A
	 * tensor named twice is -EINVAL.  The strings need only live during
	 * wsp_convert(). */
	const char *const *group_map;
	/* Layer order (added in 0.2): NULL, or a NULL-terminated list of layer
	 * names (after grouping) that come first in the pack, in this order:
	 * the order a run takes them (wspager run --order's file).  Before the
	 * layers group_map orders; the rest follow the built-in order.  A name
	 * no layer has is WSP_ENOTFOUND; the strings need only live during
	 * wsp_convert(). */
	const char *const *layer_order;
	uint64_t reserved[14];     /* zero (wsp_convert_options_init) */
};
#define WSP_CONVERT_FORCE 1u   /* replace an existing output */
/* Smallest packs: exponent-rANS chunks also code each value's top mantissa
 * bit with its exponent where that makes them smaller (about 0.5%; added
 * in 0.3.2).  Off by default: such chunks decode slower on a GPU (a real
 * fp32 CNN streamed from the host tier at two thirds of the speed), and
 * readers up to 0.3.1 refuse them. */
#define WSP_CONVERT_SMALLEST 2u

void wsp_convert_options_init(struct wsp_convert_options *opt);

/*
 * Convert safetensors checkpoints into the pack directory `out`.  `inputs`
 * are .safetensors files, or one directory holding
 * model.safetensors.index.json (or a single model.safetensors).  Written
 * under a temporary name, fsynced and renamed: a killed or failed run leaves
 * no pack that looks valid.  Errors name the file and tensor.
 */
int wsp_convert(const char *const *inputs, size_t n_inputs, const char *out,
		const struct wsp_convert_options *opt, char *errbuf, size_t errlen);

/* Synthetic Llama-shaped checkpoints (Gaussian bf16 weights scaled like
 * trained ones: std 0.02, norms near 1), for demos, tests and benchmarks. */
struct wsp_generate_options {
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
void wsp_generate_options_init(struct wsp_generate_options *opt);
/* Write the checkpoint: `out` is a .safetensors file when shard_bytes is 0,
 * otherwise a directory of shards and model.safetensors.index.json. */
int wsp_generate(const char *out, const struct wsp_generate_options *opt,
		 char *errbuf, size_t errlen);

/* Cache simulation (wspager simulate): replay a trace of layer indices
 * against a host cache of `cache_bytes`, without disk or GPU.  The predictor
 * and eviction code are the pager's own; BELADY is the offline optimum. */
enum wsp_sim_policy { WSP_SIM_LRU = 0, WSP_SIM_PREDICT, WSP_SIM_BELADY };
struct wsp_sim_result {
	uint64_t accesses, hits, misses;
	uint64_t bytes_read;       /* bytes that would be read from disk */
};
int wsp_simulate(const uint64_t *layer_bytes, uint32_t n_layers, const uint32_t *trace,
		 size_t n_trace, uint64_t cache_bytes, enum wsp_sim_policy policy,
		 struct wsp_sim_result *out);

/* ====================================================================== */
/* 6. Utilities                                                            */
/* ====================================================================== */

/*
 * The checksum the pack stores per tensor and that GPU code recomputes on the
 * device: the bytes are taken as little-endian 64-bit words w[i] (the tail
 * zero-padded), and the result is the sum mod 2^64 of mix64(w[i] ^ (i * K))
 * with K = 0x9E3779B97F4A7C15 and mix64 the splitmix64 finalizer.  It is
 * order-independent to compute, so a GPU computes it in parallel, yet it
 * catches moved, swapped and flipped bytes.
 */
uint64_t wsp_checksum64(const void *data, uint64_t bytes);

/* Parse "512M", "8G", "1.5GiB", "4096" (binary units) into bytes. Returns 0 or
 * -EINVAL / -ERANGE. */
int wsp_parse_size(const char *text, uint64_t *out);
/* Format bytes as "1.46 GiB" into buf; returns buf. */
char *wsp_format_size(uint64_t bytes, char *buf, size_t len);
/* Copy untrusted text (tensor, layer and file names, lines of input files)
 * into buf, safe to print on a terminal: control bytes, DEL, invalid UTF-8,
 * C1 controls and invisible format characters (bidi overrides, zero-width
 * characters) become \xNN per byte; other text, non-ASCII too, is kept.
 * Truncated to fit `len` (never inside an escape); returns buf.  Every
 * message of this library is passed through it already. */
char *wsp_escape_text(const char *text, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* WSPAGER_H */
