/*
 * Pack writer: the converter's back end, also used by tests to build packs
 * from synthetic tensors without going through safetensors files.
 *
 * Tensors are declared with a pointer to their raw bytes, which must stay
 * valid until pack_writer_finish(), or are read from their source file with
 * pread during finish (the converter's way: pack_writer_set_source_file).
 * finish() groups tensors into layers, orders layers, compresses chunks on
 * all threads, writes shards and the manifest under a temporary directory
 * name, fsyncs, and renames it to the output path.
 */
#ifndef WSP_PACK_WRITER_H
#define WSP_PACK_WRITER_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>
#include "common/error.h"
#include "wspager.h"

struct pack_writer;

/* Fails with WSP_EEXIST if out_dir exists and WSP_CONVERT_FORCE is not set.
 * `err` must outlive the writer: later calls (add_*, finish) report into it. */
int pack_writer_create(const char *out_dir, const struct wsp_convert_options *opt,
		       struct pack_writer **out, struct wspi_err *err);
/* Declare an original safetensors file; `header` is its JSON header verbatim.
 * Returns the source index (>= 0). */
int pack_writer_add_source(struct pack_writer *pw, const char *file_name, const char *header,
			   uint64_t header_len, uint64_t data_bytes);
/* Let tensors of `source` be read from `fd` (at data_offset + their
 * source_offset) during finish, instead of from memory: pass data = NULL to
 * pack_writer_add_tensor.  Reads use pread, so an input that shrinks
 * meanwhile is a clear error naming `path`, never SIGBUS.  fd stays the
 * caller's and must stay open until finish returns. */
int pack_writer_set_source_file(struct pack_writer *pw, uint32_t source, int fd, const char *path,
				uint64_t data_offset);
/* The tensors' bytes pushed in pack order instead (wsp_save: a pack made
 * from a pager's layers, no files in between): during finish, `feed` runs
 * on a thread of its own and calls pack_writer_push with every tensor's
 * raw bytes, tensor after tensor in the order of the pack being written,
 * each from offset 0 up, in pieces of any size; it returns 0, or a
 * negative error code (its message set into the writer's err with
 * wspi_err_set_first).  Bytes pushed out of that order fail the push.
 * Memory stays at the writer's window of chunks.  Set before any tensor;
 * tensors then take data = NULL. */
typedef int (*pack_writer_feed_fn)(void *ctx, struct pack_writer *pw);
int pack_writer_set_feed(struct pack_writer *pw, pack_writer_feed_fn feed, void *ctx);
/* Hand over bytes [offset, offset + len) of tensor `tensor` (its index in
 * declaration order); blocks while the window is full.  0, -ECANCELED when
 * the writer stopped for an error of its own, or an error (set into err)
 * for bytes out of order. */
int pack_writer_push(struct pack_writer *pw, uint32_t tensor, uint64_t offset, const void *data,
		     uint64_t len);
/* Record model.safetensors.index.json verbatim (optional). */
int pack_writer_set_index(struct pack_writer *pw, const char *json, uint64_t len);
/* Add a tensor.  `layer` names its group explicitly, or NULL to derive it
 * from the name with the grouping rule (opt->group_regex or the built-in).
 * `data` may be NULL when the source has a file (pack_writer_set_source_file). */
int pack_writer_add_tensor(struct pack_writer *pw, const char *name, const char *layer, int dtype,
			   unsigned rank, const uint64_t *shape, const void *data, uint64_t bytes,
			   uint32_t source, uint64_t source_offset, uint32_t source_order);
/* Write everything; on failure nothing that looks like a pack is left. */
int pack_writer_finish(struct pack_writer *pw);
/* Free the writer (after finish, or instead of it: then removes temporaries). */
void pack_writer_free(struct pack_writer *pw);

/* The layer rule.  With `regex` (POSIX extended), its first capture group
 * names the layer when it matches.  Otherwise the built-in rule:
 * "<prefix>.(layers|h|blocks).N.<rest>" belongs to group "<prefix>.<word>.N"
 * (the prefix may be empty: "h.3.attn.w" -> "h.3"), except that a routed
 * expert inside it, "<prefix>.<word>.N.<...>.experts.E.<rest>", is a group of
 * its own ("<prefix>.<word>.N.<...>.experts.E"); any other name to the name
 * without its last dot component; a name without dots is its own group.
 * Writes the group name into buf.  Returns the offset of the short name in
 * `name`: strlen(group) + 1 when name starts with "GROUP.", else 0 (the short
 * name is then the full name); or -EINVAL for a bad regex, WSP_ETOOBIG when
 * buf is too small. */
int pack_group_name(const char *name, const char *regex, char *buf, size_t len);
/* The same with a regex compiled once by the caller (NULL: built-in rule). */
int pack_group_name_re(const char *name, const regex_t *re, char *buf, size_t len);
/* Compile a --group regex (REG_EXTENDED, at least one capture group). */
int pack_group_compile(const char *regex, regex_t *re, struct wspi_err *err);
/* For a group "<block>.<...>.experts.<E>" of the built-in rule, the length
 * of "<block>" ("<prefix>.<word>.N": the expert orders after that block);
 * else strlen(group). */
size_t pack_group_block(const char *group);

/* wsp_convert_options.group_map, sorted by tensor name for lookups: layers
 * are ordered by rank, the tensors of a layer by pos. */
struct group_map_entry {
	const char *tensor, *layer;
	uint32_t rank;             /* position of the layer's first pair */
	uint32_t pos;              /* position of this pair: order inside the layer */
};
/* Validate and index the NULL-terminated pairs (strings stay the caller's):
 * -EINVAL for a tensor without a layer, an empty name or a tensor mapped
 * twice. */
int pack_group_map_build(const char *const *pairs, struct group_map_entry **out, uint32_t *n,
			 struct wspi_err *err);
const struct group_map_entry *pack_group_map_find(const struct group_map_entry *m, uint32_t n,
						  const char *tensor);

#endif
