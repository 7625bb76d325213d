/* Internals of the pack writer, shared by writer.c (declarations),
 * layout.c (layers, order, chunk plan) and wshard.c (compression, shards,
 * manifest). */
#ifndef WSP_PACK_WRITER_INT_H
#define WSP_PACK_WRITER_INT_H

#include <regex.h>
#include <stdint.h>
#include "common/error.h"
#include "pack/manifest.h"
#include "pack/writer.h"

struct pw_source {
	char *name;
	char *header;
	uint64_t header_len, data_bytes;
	int fd;                    /* -1, or where its tensors' bytes are read */
	char *path;                /* of fd, for messages */
	uint64_t data_offset;      /* of the data section in fd */
};

struct pw_tensor {
	char *name, *group;
	uint32_t short_off;        /* short name = name + short_off */
	int dtype;
	unsigned rank;
	uint64_t shape[WSP_MAX_RANK];
	const void *data;          /* NULL: read from the source's fd */
	uint64_t bytes;
	uint32_t source, source_order;
	uint64_t source_offset;
	uint32_t map_rank;         /* its layer's rank in group_map, or UINT32_MAX */
	uint32_t map_pos;          /* its pair's position there, or UINT32_MAX */
	/* filled by the layout */
	uint32_t layer;
	uint64_t layer_offset, first_chunk, n_chunks;
	uint64_t checksum;         /* summed from the chunks' parts by the workers */
};

struct pw_layer {
	const char *name;          /* a tensor's group string */
	uint32_t first_tensor, n_tensors;   /* into pw->order */
	uint64_t raw_bytes, raw_chunk_bytes; /* decoded layout; sum of chunk raw bytes */
	uint64_t first_chunk, n_chunks;
	uint32_t shard;
	uint64_t offset, stored_bytes;
};

struct pack_writer {
	char *out, *tmp;
	int tmp_lock;              /* holds tmp's lock file's flock (fsutil.h); -1 */
	struct wsp_convert_options opt;
	regex_t re;
	int has_re;
	struct group_map_entry *map;   /* opt.group_map indexed; NULL without one */
	uint32_t n_map;
	char **layer_order;            /* opt.layer_order copied; NULL without one */
	uint32_t n_layer_order;
	int finishing;             /* finish was called: no more declarations */
	pack_writer_feed_fn feed;  /* NULL, or where the tensors' bytes come from */
	void *feed_ctx;
	struct pipe *pipe;         /* while shards are written with a feed */
	struct wspi_err *err;

	struct pw_source *sources;
	uint32_t n_sources;
	size_t cap_sources;
	char *index_json;
	uint64_t index_len;
	int has_index;

	struct pw_tensor *tensors; /* in declaration order */
	uint32_t n_tensors;
	size_t cap_tensors;

	/* layout */
	struct pw_layer *layers;   /* pack order */
	uint32_t n_layers;
	uint32_t *order;           /* tensor indices in pack order */
	struct wspm_chunk *chunks; /* n_chunks, pack order */
	uint32_t *chunk_tensor;    /* tensor index of each chunk */
	uint64_t n_chunks;
	uint64_t *shard_size;
	uint32_t n_shards;
};

int pw_layout(struct pack_writer *pw);
int pw_write_shards(struct pack_writer *pw);
int pw_write_manifest(struct pack_writer *pw);

#endif
