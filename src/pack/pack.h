/* The wsp_pack handle: a mapped manifest plus the public layer/tensor views
 * built from it.  Shared by the pack API (pack.c) and the pager. */
#ifndef WSP_PACK_PACK_H
#define WSP_PACK_PACK_H

#include "common/error.h"
#include "pack/manifest.h"
#include "wspager.h"

struct wsp_pack_s {
	char *dir;
	struct wsp_manifest m;
	struct wsp_layer *layers;     /* n_layers, names point into the manifest */
	struct wsp_tensor *tensors;   /* n_tensors, data = NULL */
	struct wsp_err err;
	/* name lookup: indices sorted by name */
	uint32_t *layer_by_name, *tensor_by_name;
	int *shard_fds;               /* opened lazily by wsp_pack_read_layer/verify; -1 */
};

/* Build the handle from a directory (used by wsp_pack_open and wsp_open). */
int pack_open(const char *dir, struct wsp_pack_s **out, struct wsp_err *err);
void pack_close(struct wsp_pack_s *pk);

/* Absolute path of shard i into buf. */
void pack_shard_path(const struct wsp_pack_s *pk, uint32_t shard, char *buf, size_t len);

#endif
