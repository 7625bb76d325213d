/* The wsp_pack handle: a mapped manifest plus the public layer/tensor views
 * built from it.  Shared by the pack API (pack.c) and the pager. */
#ifndef WSP_PACK_PACK_H
#define WSP_PACK_PACK_H

#include <pthread.h>
#include "common/error.h"
#include "pack/chunk.h"
#include "pack/manifest.h"
#include "wspager.h"

struct wsp_pack_s {
	char *dir;
	struct wspi_manifest m;
	struct wsp_layer *layers;     /* n_layers, names point into the manifest */
	struct wsp_tensor *tensors;   /* n_tensors, data = NULL */
	struct wspi_err err;
	/* name lookup: indices sorted by name */
	uint32_t *layer_by_name, *tensor_by_name;
	int *shard_fds;               /* opened lazily by wsp_pack_read_layer/verify; -1 */
	/* pack area internals */
	pthread_mutex_t lock;         /* shard_fds, metadata_json */
	char *metadata_json;          /* wsp_pack_summary's, made on first use */
	int metadata_done;
	uint64_t max_chunk_raw;       /* largest chunk raw size (decoder scratch) */
	uint64_t max_chunk_stored;    /* largest chunk stored size (chunk_stream) */
	uint64_t max_layer_stored;    /* largest stored region of a layer */
	struct chunk_decoder *dec;    /* wsp_pack_read_layer's */
	void *rbuf;                   /* its read buffer, max_layer_stored bytes */
};

/* The packed form of a layer, what a GPU fills a slot from: its chunks in
 * file order, each at a 16-aligned offset, EXPRANS chunks as stored and the
 * others as their raw bytes, the gaps zero.  The host tier keeps layers
 * with an EXPRANS chunk so (hcache.h), and processes that read a layer
 * together exchange its parts so (wsp_pack_read_part); this is the one
 * place that says where a chunk goes. */
#define PACK_PACKED_ALIGN 16u
static inline int pack_chunk_stays_stored(const struct wspm_chunk *c)
{
	return c->codec == WSP_CODEC_EXPRANS;
}
/* Where the chunk after c goes, c being at `at`. */
static inline uint64_t pack_packed_next(uint64_t at, const struct wspm_chunk *c)
{
	uint64_t n = pack_chunk_stays_stored(c) ? c->stored_bytes : c->raw_bytes;
	return (at + n + PACK_PACKED_ALIGN - 1) & ~(uint64_t)(PACK_PACKED_ALIGN - 1);
}

/* Build the handle from a directory (used by wsp_pack_open and wsp_open). */
int pack_open(const char *dir, struct wsp_pack_s **out, struct wspi_err *err);
void pack_close(struct wsp_pack_s *pk);

/* The memory the open pack holds: its tables and the manifest's mapping
 * (read whole at open, so resident). */
uint64_t pack_bytes(const struct wsp_pack_s *pk);

/* Absolute path of shard i into buf. */
void pack_shard_path(const struct wsp_pack_s *pk, uint32_t shard, char *buf, size_t len);
/* The read-only descriptor of shard i, opened on first use (thread-safe). */
int pack_shard_fd(struct wsp_pack_s *pk, uint32_t shard, struct wspi_err *err);

/* Read layer `li`'s stored region (stored_bytes) into `stored`; a short read
 * is WSP_EFORMAT naming the shard, layer and byte range. */
int pack_read_stored(struct wsp_pack_s *pk, uint32_t li, void *stored, struct wspi_err *err);

/* Read layer `li`'s stored region into `stored` (layer stored_bytes) and
 * decode it into `dst` (layer raw_bytes): tensors at their offsets, padding
 * zeroed, every chunk and tensor checksum checked.  Errors name the shard,
 * layer, tensor and chunk.  `dec` is the caller's (one per thread). */
int pack_load_layer(struct wsp_pack_s *pk, uint32_t li, struct chunk_decoder *dec, void *stored,
		    void *dst, struct wspi_err *err);

/* Bytes [off, off + len) of tensor `t`, handed on as they are decoded;
 * 0 or a negative code (which stops the walk). */
typedef int (*pack_piece_fn)(void *ctx, const struct wspm_tensor *t, uint64_t off,
			     const void *data, uint64_t len);

/* One thread's buffers for pack_stream_layer: a decoder and a stored and a
 * raw buffer of the largest chunk. */
struct chunk_stream {
	struct chunk_decoder *dec;
	void *stored, *raw;
};
int chunk_stream_init(struct wsp_pack_s *pk, struct chunk_stream *cs, struct wspi_err *err);
void chunk_stream_free(struct chunk_stream *cs);

/* Decode layer `li` a chunk at a time, handing each chunk's bytes to
 * `piece` (may be NULL: a check only) in tensor order, and check every
 * chunk's and tensor's checksum (accumulated across its chunks).  Memory:
 * `cs` only, whatever the layer's size.  Errors name the shard, layer,
 * tensor and chunk. */
int pack_stream_layer(struct wsp_pack_s *pk, uint32_t li, struct chunk_stream *cs,
		      pack_piece_fn piece, void *pctx, struct wspi_err *err);

#endif
