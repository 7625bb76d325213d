/*
 * A host-tier reference's pages into contiguous device memory: one copy per
 * run of pages adjacent in host memory and in one pinning piece (up to
 * 64 MiB), enqueued on the copy stream.  Slot fills of raw layers and the
 * staging of packed ones both use it.
 */
#ifndef WSP_GPU_PAGECOPY_H
#define WSP_GPU_PAGECOPY_H

#include <stdint.h>
#include "cache/hcache.h"
#include "common/error.h"
#include "gpu/device.h"

/* The first `len` bytes of ref's pages to dst. */
int copy_ref_pages(struct dev *d, void *dst, const struct hcache_ref *ref, uint64_t len,
		   struct wspi_err *err);

#endif
