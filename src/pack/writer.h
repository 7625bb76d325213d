/*
 * Pack writer: the converter's back end, also used by tests to build packs
 * from synthetic tensors without going through safetensors files.
 *
 * Tensors are declared with a pointer to their raw bytes, which must stay
 * valid until pack_writer_finish() (the converter points into mmapped source
 * files).  finish() groups tensors into layers, orders layers, compresses
 * chunks on all threads, writes shards and the manifest under a temporary
 * directory name, fsyncs, and renames it to the output path.
 */
#ifndef WSP_PACK_WRITER_H
#define WSP_PACK_WRITER_H

#include <stdint.h>
#include "common/error.h"
#include "wspager.h"

struct pack_writer;

/* Fails with WSP_EEXIST if out_dir exists and WSP_CONVERT_FORCE is not set. */
int pack_writer_create(const char *out_dir, const struct wsp_convert_options *opt,
		       struct pack_writer **out, struct wsp_err *err);
/* Declare an original safetensors file; `header` is its JSON header verbatim.
 * Returns the source index (>= 0). */
int pack_writer_add_source(struct pack_writer *pw, const char *file_name, const char *header,
			   uint64_t header_len, uint64_t data_bytes);
/* Record model.safetensors.index.json verbatim (optional). */
int pack_writer_set_index(struct pack_writer *pw, const char *json, uint64_t len);
/* Add a tensor.  `layer` names its group explicitly, or NULL to derive it
 * from the name with the grouping rule (opt->group_regex or the built-in). */
int pack_writer_add_tensor(struct pack_writer *pw, const char *name, const char *layer, int dtype,
			   unsigned rank, const uint64_t *shape, const void *data, uint64_t bytes,
			   uint32_t source, uint64_t source_offset, uint32_t source_order);
/* Write everything; on failure nothing that looks like a pack is left. */
int pack_writer_finish(struct pack_writer *pw);
/* Free the writer (after finish, or instead of it: then removes temporaries). */
void pack_writer_free(struct pack_writer *pw);

/* The built-in layer rule: "<prefix>.(layers|h|blocks).N" for numbered
 * blocks; otherwise the name without its last component.  Writes the group
 * name into buf; returns the length of the group prefix in `name` consumed
 * (so name + ret + 1 is the short name), or a negative code. */
int pack_group_name(const char *name, const char *regex, char *buf, size_t len);

#endif
