/* A host reference's pages into contiguous device memory (see pagecopy.h). */
#include "common/util.h"
#include "gpu/pagecopy.h"

/* Pieces of one copy: adjacent cache pages are merged so that copies are
 * large (>= 2 MiB pages, up to this bound) and few. */
#define PAGECOPY_MAX (64ull << 20)

/* Whether a and b lie in one pinning piece of the arena.  Each piece is
 * its own cudaHostRegister range, and CUDA takes a pinned copy's source as
 * one range: with copies merged across pieces, some ran at ~23 GB/s where
 * the others ran at 54, and none did once they stopped at the pieces. */
static int same_piece(const struct hcache_ref *ref, const char *a, const char *b)
{
	if (!ref->piece_bytes || !ref->arena)
		return 1;
	return (uint64_t)(a - ref->arena) / ref->piece_bytes ==
	       (uint64_t)(b - ref->arena) / ref->piece_bytes;
}

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
		       ref->pages[k] == src + n && same_piece(ref, src, ref->pages[k])) {
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
