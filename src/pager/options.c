/* Defaults of struct wsp_options. */
#include <string.h>
#include <unistd.h>

#include "pager/pager.h"
#include "wspager.h"

#define DEFAULT_HOST_CAP (8ull << 30)

/* min(8 GiB, RAM / 4): a cache that takes more would push the rest of the
 * system (and the page cache the pager itself benefits from) out. */
uint64_t pager_default_host_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || psize <= 0)
		return 1ull << 30;
	uint64_t ram = (uint64_t)pages * (uint64_t)psize;
	return ram / 4 < DEFAULT_HOST_CAP ? ram / 4 : DEFAULT_HOST_CAP;
}

void wsp_options_init(struct wsp_options *opt)
{
	if (!opt)
		return;
	memset(opt, 0, sizeof(*opt));
	opt->host_cache_bytes = pager_default_host_bytes();
	opt->gpu_slots = 3;
	opt->device = 0;
	opt->io = WSP_IO_AUTO;
	opt->queue_depth = 32;
	opt->io_threads = 4;
	opt->decode_threads = 0;
	opt->policy = WSP_POLICY_PREDICT;
	opt->lookahead = 0;
	opt->page_bytes = 2ull << 20;
	opt->flags = 0;
}
