/* The facts of a pack as JSON, one schema for `wspack info --json` and
 * `wspager info --json` (documented in wspack(1), INFO JSON). */
#ifndef WSP_TOOLS_PACKINFO_H
#define WSP_TOOLS_PACKINFO_H

#include <jansson.h>
#include "wspager.h"

/* pack, format_version, layers, tensors, shards, sources, chunks,
 * chunk_bytes, raw_bytes, stored_bytes, ratio, max_layer_raw_bytes,
 * largest_layer, dtypes {NAME: tensors, raw_bytes, stored_bytes, ratio},
 * metadata.  NULL when out of memory. */
json_t *pi_pack_json(const char *path, const wsp_pack *pk);
/* One layer: index, name, tensors, raw_bytes, stored_bytes. */
json_t *pi_layer_json(const struct wsp_layer *L);

#endif
