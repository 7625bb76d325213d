/* Host backend: the pager's trace events.  Every completed copy into a slot
 * is one WSP_STAGE_H2D event (their bytes add up to bytes_h2d, begin <= end,
 * on the CLOCK_MONOTONIC time line of the run), and every acquire that had to
 * wait for the host tier is one WSP_STAGE_WAIT event. */
#include <inttypes.h>
#include <stdatomic.h>

#include "common/util.h"
#include "pager_util.h"

static atomic_ulong n_h2d, n_wait, h2d_bytes, bad_events;
static uint64_t t_start;

static void on_trace(void *ctx, const struct wsp_trace_event *ev)
{
	uint64_t now = wspi_now_ns();
	if (ev->begin_ns > ev->end_ns || ev->begin_ns < t_start || ev->end_ns > now)
		atomic_fetch_add(&bad_events, 1);
	if (ev->stage == WSP_STAGE_H2D) {
		atomic_fetch_add(&n_h2d, 1);
		atomic_fetch_add(&h2d_bytes, ev->bytes);
	} else if (ev->stage == WSP_STAGE_WAIT) {
		atomic_fetch_add(&n_wait, 1);
	}
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	char err[512];
	wsp_pager *pg;

	t_model_make(&m, "gpu-trace", 5, 128, 256);
	t_host_options(&o, &m, 50, 2);
	o.flags |= WSP_OPEN_NO_PREFETCH;   /* every first acquire waits */
	o.trace = on_trace;
	t_start = wspi_now_ns();
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < m.sum.n_layers; l++) {
			const struct wsp_layer *L;
			CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
			CHECK_RC(wsp_release(pg, l, NULL), 0);
		}
	CHECK_RC(wsp_get_stats(pg, &st), 0);   /* also hands back finished copies */
	fprintf(stderr, "h2d events %lu (%lu bytes; stats %" PRIu64 "), wait events %lu, misses %"
		PRIu64 "\n", (unsigned long)n_h2d, (unsigned long)h2d_bytes, st.bytes_h2d,
		(unsigned long)n_wait, st.misses);
	CHECK(n_h2d == st.host_hits + st.misses);   /* one copy per non-GPU hit */
	CHECK(h2d_bytes == st.bytes_h2d);
	CHECK(n_wait == st.misses);
	CHECK(st.misses >= m.sum.n_layers);   /* at least the first pass */
	CHECK(bad_events == 0);
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
