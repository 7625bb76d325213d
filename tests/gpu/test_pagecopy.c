/* copy_ref_pages: adjacent pages of a host-tier reference go in one copy,
 * but never across a pinning piece (each piece is its own cudaHostRegister
 * range, and a copy over two is not a pinned copy to CUDA), nor past
 * 64 MiB; pages apart in memory start a new copy; the bytes arrive in
 * order.  A recording device stands in for the GPU. */
#include <stdlib.h>
#include <string.h>

#include "cache/hcache.h"
#include "gpu/device.h"
#include "gpu/pagecopy.h"
#include "testlib.h"

#define PAGE 4096u

struct copy { const char *src; uint64_t len; };
static struct copy copies[64];
static unsigned n_copies;

static int record_h2d(struct dev *d, void *dst, const void *src, uint64_t len,
		      struct wspi_err *err)
{
	(void)d;
	(void)err;
	if (n_copies < 64)
		copies[n_copies++] = (struct copy){ src, len };
	memcpy(dst, src, len);
	return 0;
}

int main(void)
{
	static const struct dev_ops ops = { .copy_h2d = record_h2d };
	struct dev d = { .ops = &ops };
	struct wspi_err err;
	wspi_err_init(&err);
	/* 16 pages in pieces of 4; the reference takes pages 2-7, then 12, 13. */
	char *arena = aligned_alloc(PAGE, 16 * PAGE);
	for (unsigned i = 0; i < 16 * PAGE; i++)
		arena[i] = (char)(i * 7 + i / PAGE);
	void *pages[8];
	unsigned idx[8] = { 2, 3, 4, 5, 6, 7, 12, 13 };
	for (int k = 0; k < 8; k++)
		pages[k] = arena + idx[k] * PAGE;
	struct hcache_ref ref = { .n_pages = 8, .pages = pages, .page_bytes = PAGE,
				  .arena = arena, .piece_bytes = 4 * PAGE };
	char *dst = malloc(8 * PAGE);
	uint64_t len = 8 * PAGE - 100;   /* the last page partly */
	CHECK_RC(copy_ref_pages(&d, dst, &ref, len, &err), 0);
	/* pages 2-3 | 4-7 (a new piece at 4) | 12-13 (apart in memory) */
	CHECK(n_copies == 3);
	CHECK(copies[0].src == arena + 2 * PAGE && copies[0].len == 2 * PAGE);
	CHECK(copies[1].src == arena + 4 * PAGE && copies[1].len == 4 * PAGE);
	CHECK(copies[2].src == arena + 12 * PAGE && copies[2].len == 2 * PAGE - 100);
	for (int k = 0; k < 8; k++) {
		uint64_t n = k < 7 ? PAGE : PAGE - 100;
		CHECK(memcmp(dst + k * PAGE, pages[k], n) == 0);
	}

	/* Without pieces (memory pinned as one range, or not at all): one
	 * copy per run of adjacent pages. */
	n_copies = 0;
	ref.piece_bytes = 0;
	CHECK_RC(copy_ref_pages(&d, dst, &ref, len, &err), 0);
	CHECK(n_copies == 2 && copies[0].len == 6 * PAGE);
	free(dst);
	free(arena);
	wspi_err_destroy(&err);
	return 0;
}
