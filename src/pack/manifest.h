/*
 * The pack manifest: on-disk layout and the validated in-memory view.
 *
 * A pack is a directory:
 *	PACK/manifest.wspm        this file, mmapped at open
 *	PACK/shard-00000.wsd ...  chunk data; each layer contiguous in one shard,
 *	                          starting at a multiple of 4096 and padded to one
 *
 * manifest.wspm, all integers little-endian, every table 8-byte aligned:
 *	struct wspm_header        at offset 0
 *	struct wspm_shard[]       n_shards
 *	struct wspm_source[]      n_sources  (original safetensors files)
 *	struct wspm_layer[]       n_layers   (pack order)
 *	struct wspm_tensor[]      n_tensors  (grouped by layer, contiguous)
 *	struct wspm_chunk[]       n_chunks   (grouped by tensor, contiguous)
 *	strings                   NUL-terminated names, referenced by offset
 *	blobs                     original safetensors header JSON text, verbatim,
 *	                          and the index JSON when there was one
 * header.checksum = XXH3-64 of the whole file with the checksum field zeroed.
 * The normative description is man/wspack.5.
 */
#ifndef WSP_PACK_MANIFEST_H
#define WSP_PACK_MANIFEST_H

#include <stdint.h>
#include "common/error.h"
#include "wspager.h"

#define WSPM_MAGIC "WSPPACK\x1a"   /* 8 bytes; \x1a stops `type`/`cat` */
#define WSPM_VERSION 1
#define WSPM_FILE "manifest.wspm"
#define WSPM_SHARD_FMT "shard-%05u.wsd"
#define WSPM_MAX_FILE (1ull << 32)      /* manifests above 4 GiB are refused */
#define WSPM_MAX_NAME 1024              /* tensor/layer name bytes */

enum wspm_transform {
	WSPM_XFORM_NONE = 0,
	WSPM_XFORM_BYTES = 1,    /* byte planes: all byte 0s, then all byte 1s, ... */
	WSPM_XFORM_EXP_BF16 = 2, /* bf16: plane of exponents, plane of sign|mantissa */
	WSPM_XFORM_EXP_F32 = 3,  /* f32: exponent plane, then 3 sign|mantissa planes */
};

struct wspm_header {
	char magic[8];
	uint32_t version;
	uint32_t header_size;      /* sizeof(struct wspm_header) */
	uint64_t file_size;
	uint64_t checksum;
	uint32_t n_shards, n_sources, n_layers, n_tensors;
	uint64_t n_chunks;
	uint64_t chunk_bytes;      /* nominal raw chunk size */
	uint64_t shards_off, sources_off, layers_off, tensors_off, chunks_off;
	uint64_t strings_off, strings_size, blobs_off, blobs_size;
	uint32_t flags;            /* WSPM_F_* */
	uint32_t reserved0;
	uint64_t index_off;        /* into blobs: model.safetensors.index.json verbatim, */
	uint64_t index_len;        /* when flags has WSPM_F_HAS_INDEX (else both 0) */
	uint64_t reserved[2];
};
#define WSPM_F_HAS_INDEX 1u        /* source had model.safetensors.index.json */
#define WSPM_NO_SOURCE 0xffffffffu /* wspm_tensor.source of a pack built without sources */

struct wspm_shard {
	uint64_t name_off;         /* into strings: "shard-00000.wsd" */
	uint64_t size;             /* file size, multiple of 4096 */
};

struct wspm_source {
	uint64_t name_off;         /* file name as in the input ("model-00001-of-00002.safetensors") */
	uint64_t header_off;       /* into blobs: the original JSON header, verbatim */
	uint64_t header_len;       /* its length (the file's 8-byte prefix value) */
	uint64_t data_bytes;       /* size of the data section */
};

struct wspm_layer {
	uint64_t name_off;
	uint32_t first_tensor, n_tensors;
	uint32_t shard, reserved;
	uint64_t offset;           /* in shard, multiple of 4096 */
	uint64_t stored_bytes;     /* chunks, contiguous from offset */
	uint64_t raw_bytes;        /* decoded layout: tensors at 256-aligned offsets */
};

struct wspm_tensor {
	uint64_t name_off;         /* full name */
	uint64_t short_name_off;   /* name inside the layer */
	uint8_t dtype, rank;
	uint8_t reserved[6];
	uint64_t shape[WSP_MAX_RANK];
	uint32_t layer;
	uint32_t source;           /* index into sources */
	uint64_t source_offset;    /* begin within that source's data section */
	uint64_t raw_bytes;
	uint64_t layer_offset;     /* position in the layer's decoded layout */
	uint64_t checksum;         /* wsp_checksum64 of the raw bytes */
	uint64_t first_chunk;
	uint64_t n_chunks;         /* 0 for an empty tensor */
	uint32_t source_order;     /* position in the source header's key order */
	uint32_t reserved2;
};

struct wspm_chunk {
	uint64_t offset;           /* in the layer's shard */
	uint32_t stored_bytes;
	uint32_t raw_bytes;
	uint8_t codec;             /* enum wsp_codec */
	uint8_t transform;         /* enum wspm_transform */
	uint8_t stored_check[6];   /* EXPRANS: wspm_stored_check() of the stored bytes,
	                              little-endian; 0 in packs written without it */
	uint64_t checksum;         /* XXH3-64 of the raw (decoded, untransformed) bytes */
};

/* The 48-bit check of a chunk's stored bytes: XXH3-64's low 48 bits with
 * bit 0 set, so that a recorded check is never 0.  It lets a host that
 * ships packed chunks to the GPU check them without decoding. */
uint64_t wspm_stored_check(const void *stored, uint64_t len);
/* The check recorded in c (0: none). */
uint64_t wspm_chunk_stored_check(const struct wspm_chunk *c);
void wspm_chunk_set_stored_check(struct wspm_chunk *c, uint64_t check);

/* A validated, read-only view of a mapped manifest.  Every index and offset
 * in it has been checked: users may trust them. */
struct wspi_manifest {
	const void *map;           /* whole file */
	uint64_t map_size;
	const struct wspm_header *hdr;
	const struct wspm_shard *shards;
	const struct wspm_source *sources;
	const struct wspm_layer *layers;
	const struct wspm_tensor *tensors;
	const struct wspm_chunk *chunks;
	const char *strings;
	const char *blobs;
};

/* Validate `len` bytes at `data` as a manifest (the fuzz target's entry).
 * Does not touch shard files. */
int wspm_parse(const void *data, uint64_t len, struct wspi_manifest *out, struct wspi_err *err);
/* The second part of wspm_parse (msources.c), on a manifest whose tables
 * already passed the first: reserved fields zero, short names unique in a
 * layer, source names unique, each source's stored safetensors header
 * describing exactly the tensors that point at it, the stored index valid. */
int wspm_check_names_and_sources(const struct wspi_manifest *m, struct wspi_err *err);
/* mmap PACK/manifest.wspm, parse, and check that every shard exists with the
 * recorded size.  wspm_unmap releases. */
int wspm_map(const char *pack_dir, struct wspi_manifest *out, struct wspi_err *err);
void wspm_unmap(struct wspi_manifest *m);
/* header.checksum of a complete manifest image (the field taken as zero). */
uint64_t wspm_checksum(const void *data, uint64_t len);

static inline const char *wspm_str(const struct wspi_manifest *m, uint64_t off)
{
	return m->strings + off;
}

#endif
