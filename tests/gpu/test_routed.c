/* Read-ahead where the order depends on the data: blocks of one shared
 * layer and eight experts, of which each pass runs two chosen at random
 * (routed experts), with a host tier of 40% of the model.  The predictor
 * cannot call the experts, and reading them ahead mostly wastes the read;
 * the pager leaves such layers to demand once their read-ahead keeps being
 * wasted, so the bytes read stay close to those of demand loading only
 * (WSP_OPEN_NO_PREFETCH), while the shared layers, which it does call,
 * are still read ahead.  An engine that knows the router's choice says so
 * (wsp_hint_next, then wsp_acquire_flags with WSP_ACQUIRE_UNPREDICTED |
 * WSP_ACQUIRE_NO_READAHEAD): nothing is read in vain and nothing is left
 * to learn.  Bad flags and hints are refused.  Host backend. */
#include <inttypes.h>

#include "pager_util.h"
#include "../lib/testpack.h"

#define BLOCKS 8
#define EXPERTS 8
#define PER_BLOCK (1 + EXPERTS)
#define PASSES 300

struct run {
	uint64_t read, prefetches, wasted, shared_hits, shared, left_out;
};

static uint32_t next_rand(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/* flags: wsp_options.flags; routed: the engine hints and flags the experts. */
static struct run run(const char *pack, uint64_t host_bytes, unsigned flags, int routed)
{
	struct wsp_options o;
	wsp_options_init(&o);
	o.device = WSP_DEVICE_HOST;
	o.gpu_slots = 3;
	o.page_bytes = 64 << 10;
	o.decode_threads = 2;
	o.io_threads = 2;
	o.host_cache_bytes = host_bytes;
	o.flags = flags;
	char err[512];
	wsp_pager *pg;
	CHECK_RC(wsp_open(pack, &o, &pg, err, sizeof(err)), 0);
	struct run r = { 0 };
	uint32_t seed = 12345;
	const struct wsp_layer *L;
	struct wsp_stats st;
	for (int pass = 0; pass < PASSES; pass++)
		for (uint32_t b = 0; b < BLOCKS; b++) {
			uint32_t e1 = next_rand(&seed) % EXPERTS, e2 = next_rand(&seed) % (EXPERTS - 1);
			e2 += e2 >= e1;
			uint32_t seq[3] = { b * PER_BLOCK, b * PER_BLOCK + 1 + e1, b * PER_BLOCK + 1 + e2 };
			for (int k = 0; k < 3; k++) {
				CHECK_RC(wsp_get_stats(pg, &st), 0);
				uint64_t hits = st.gpu_hits + st.host_hits;
				if (routed && k == 1)   /* the router chose */
					CHECK_RC(wsp_hint_next(pg, seq + 1, 2), 0);
				CHECK_RC(wsp_acquire_flags(pg, seq[k], NULL, routed && k ? WSP_ACQUIRE_UNPREDICTED |
							   WSP_ACQUIRE_NO_READAHEAD : 0, &L), 0);
				CHECK(t_view_bad(L) == 0);
				CHECK_RC(wsp_release(pg, seq[k], NULL), 0);
				if (k == 0 && pass >= PASSES / 2) {   /* learned by then */
					CHECK_RC(wsp_get_stats(pg, &st), 0);
					r.shared++;
					r.shared_hits += st.gpu_hits + st.host_hits > hits;
				}
			}
		}
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	r.read = st.bytes_read;
	r.prefetches = st.prefetches;
	r.wasted = st.prefetch_wasted;
	r.left_out = st.readahead_left_out;
	uint32_t past = BLOCKS * PER_BLOCK, none = 0;
	CHECK_RC(wsp_acquire_flags(pg, 0, NULL, 4, &L), -EINVAL);
	CHECK(strstr(wsp_errmsg(pg), "unknown flags"));
	CHECK_RC(wsp_hint_next(pg, &past, 1), WSP_ENOTFOUND);
	CHECK_RC(wsp_hint_next(pg, NULL, 1), -EINVAL);
	CHECK_RC(wsp_hint_next(pg, &none, 0), 0);
	wsp_reset_prediction(pg);   /* forgets what read-ahead learned too */
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.readahead_left_out == 0);
	wsp_close(pg);
	return r;
}

int main(void)
{
	const char *root = t_scratch("routed");
	char pack[600];
	snprintf(pack, sizeof(pack), "%s/pack", root);
	struct t_pack_spec spec = { .layers = BLOCKS * PER_BLOCK, .tensors_per_layer = 2,
				    .tensor_bytes = 32 << 10, .codec = WSP_CODEC_RAW };
	CHECK_RC(t_make_pack(pack, &spec), 0);
	uint64_t model = (uint64_t)spec.layers * spec.tensors_per_layer * spec.tensor_bytes;
	uint64_t host = model * 40 / 100;

	struct run spec_on = run(pack, host, 0, 0), demand = run(pack, host, WSP_OPEN_NO_PREFETCH, 0);
	struct run hinted = run(pack, host, 0, 1);
	printf("read-ahead: read %.2fx the model, %" PRIu64 " layers left to demand; shared "
	       "layers found in a tier %" PRIu64 " of %" PRIu64 " times\n",
	       (double)spec_on.read / model, spec_on.left_out, spec_on.shared_hits, spec_on.shared);
	printf("demand only: read %.2fx the model; shared layers found %" PRIu64 " of %" PRIu64 "\n",
	       (double)demand.read / model, demand.shared_hits, demand.shared);
	/* Most experts are left to demand, no shared layer is, and the bytes
	 * read come within a quarter of demand loading's (before the pager
	 * left layers to demand, this run read 143.5x the model: 2.8x). */
	CHECK(spec_on.left_out >= BLOCKS * EXPERTS * 3 / 4 && spec_on.left_out <= BLOCKS * EXPERTS);
	CHECK(spec_on.read * 100 <= demand.read * 125);
	CHECK(spec_on.prefetches > 0 && spec_on.shared_hits * 10 >= spec_on.shared * 9);
	CHECK(demand.left_out == 0);
	printf("hinted by the engine: read %.2fx the model, %" PRIu64 " layers left to demand; "
	       "shared layers found %" PRIu64 " of %" PRIu64 "\n", (double)hinted.read / model,
	       hinted.left_out, hinted.shared_hits, hinted.shared);
	CHECK(hinted.left_out == 0 && hinted.read * 100 <= demand.read * 105);
	CHECK(hinted.shared_hits * 10 >= hinted.shared * 9);
	t_rmrf(root);
	return 0;
}
