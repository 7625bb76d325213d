/* A host reference's pages into contiguous device memory (see pagecopy.h). */
#include "common/util.h"
#include "gpu/pagecopy.h"

/* Pieces of one copy: adjacent cache pages are merged so that copies are
 * large (>= 2 MiB pages, up to this bound) and few. */
#define PAGECOPY_MAX (64ull << 20)

int copy_ref_pages(struct dev *d, void *dst, const struct hcache_ref *ref, uint64_t len,
		   struct wspi_err *err)
{
	uint64_t off = 0;
	uint32_t k = 0;
	while (off < len) {
		const char *src = ref->pages[k];
		uint64_t n = WSP_MIN(ref->page_bytes, len - off);
		k++;
		while (off + n < len && k < ref->n_pages && n < PAGECOPY_MAX &&
		       ref->pages[k] == src + n) {
			n += WSP_MIN(ref->page_bytes, len - off - n);
			k++;
		}
		int rc = d->ops->copy_h2d(d, (char *)dst + off, src, n, err);
		if (rc < 0)
			return rc;
		off += n;
	}
	return 0;
}
