/*
 * safetensors reader: parse and validate headers, resolve sharded checkpoints.
 *
 * File layout: u64 little-endian N, then N bytes of UTF-8 JSON
 *	{"__metadata__": {str: str}, "NAME": {"dtype": "BF16", "shape": [..],
 *	 "data_offsets": [begin, end]}, ...}
 * then the data section.  Every check of ../shared/RELIABILITY.md items 1-11
 * happens in st_parse(): a header that parses is safe to use.
 */
#ifndef WSP_SAFETENSORS_H
#define WSP_SAFETENSORS_H

#include <stdint.h>
#include "common/error.h"
#include "wspager.h"

#define ST_MAX_HEADER (100ull << 20)   /* headers above 100 MB are refused */
#define ST_MAX_TENSORS (1u << 20)
#define ST_MAX_NAME 1024

struct st_tensor {
	char *name;                  /* NUL-terminated, validated UTF-8, no NUL inside */
	int dtype;                   /* enum wsp_dtype */
	unsigned rank;
	uint64_t shape[WSP_MAX_RANK];
	uint64_t begin, end;         /* within the data section; end-begin == bytes */
	uint32_t key_order;          /* position of its key in the header text, counting
	                                tensors only (__metadata__ is not counted) */
};

struct st_file {
	char *path;
	uint64_t file_size;
	uint64_t header_len;         /* N */
	char *header;                /* the N header bytes, verbatim, plus a NUL after them */
	char *metadata_json;         /* __metadata__ re-serialized compactly, or NULL */
	uint32_t n_tensors;
	struct st_tensor *tensors;   /* sorted by begin (data order) */
};

/* Parse `len` bytes starting with the 8-byte length prefix; `file_size` is the
 * size of the whole file (checks that the data section is exactly covered).
 * Pass file_size = UINT64_MAX when only the header is at hand (the data
 * section is then only checked for contiguity).  The fuzz target's entry. */
int st_parse(const void *buf, uint64_t len, uint64_t file_size, struct st_file *out,
	     struct wspi_err *err);
/* st_parse, with `path` (may be NULL) named in messages and kept in out->path. */
int st_parse_named(const char *path, const void *buf, uint64_t len, uint64_t file_size,
		   struct st_file *out, struct wspi_err *err);
/* What a file that is not safetensors is, from its first bytes `head` (or
 * its name): PyTorch zip or pickle, NumPy .npy/.npz, GGUF, ONNX, JSON; with
 * how to get safetensors from it.  NULL when it looks like none of them. */
const char *st_foreign_kind(const char *path, const unsigned char *head, size_t n);
/* The same, reading the file's first bytes (NULL when unreadable). */
const char *st_foreign_file(const char *path);
/* Open a .safetensors file, read and parse its header. */
int st_open(const char *path, struct st_file *out, struct wspi_err *err);
void st_file_free(struct st_file *f);

/* A checkpoint: one or more files. */
struct st_set {
	char *dir;                   /* directory of the files */
	uint32_t n_files;
	struct st_file *files;       /* index: shards sorted by name; else argument or name order */
	int has_index;
	char *index_json;            /* model.safetensors.index.json verbatim, or NULL */
	uint64_t index_len;
};

/* Resolve inputs: one directory (model.safetensors.index.json, else one
 * model.safetensors, else all *.safetensors sorted) or a list of files.
 * With an index: a missing shard fails naming it; tensors absent from the
 * index and stray files are reported through `notice` (may be NULL) and the
 * index is followed; a tensor named twice across files fails. */
int st_set_open(const char *const *inputs, size_t n, struct st_set *out,
		void (*notice)(void *ctx, const char *msg), void *ctx, struct wspi_err *err);
void st_set_free(struct st_set *s);

#endif
