/* The facts of a pack, one layout for `wspack info` and `wspager info`:
 * as JSON (documented in wspack(1), INFO JSON) and as text. */
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
/* The text: the summary and a table per dtype; layers 1 adds a line per
 * layer, 2 also its tensors (name, dtype, shape). */
void pi_print_text(const char *path, const wsp_pack *pk, int layers);

#endif
