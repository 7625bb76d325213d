/* evict_choose() and evict_plan() on hand-made candidate lists. */
#include "predict/predict.h"
#include "testlib.h"

#define NEVER PREDICT_NEVER

static void test_choose(void)
{
	const struct evict_cand c[] = {
		{ .layer = 10, .last_use = 50, .distance = 3 },
		{ .layer = 11, .last_use = 20, .distance = 7 },
		{ .layer = 12, .last_use = 90, .distance = NEVER },
		{ .layer = 13, .last_use = 10, .distance = 1 },
		{ .layer = 14, .last_use = 40, .distance = NEVER },
		{ .layer = 15, .last_use = 30, .distance = 7 },
	};

	CHECK(evict_choose(WSP_POLICY_LRU, c, 0) == -1);
	CHECK(evict_choose(WSP_POLICY_PREDICT, c, 0) == -1);
	CHECK(evict_choose(WSP_POLICY_LRU, NULL, 3) == -1);
	/* LRU: smallest last_use, whatever the distance. */
	CHECK(evict_choose(WSP_POLICY_LRU, c, 6) == 3);
	CHECK(evict_choose(WSP_POLICY_LRU, c, 3) == 1);
	CHECK(evict_choose(WSP_POLICY_LRU, c, 1) == 0);
	/* PREDICT: NEVER is the furthest; two NEVERs: the older (last_use 40). */
	CHECK(evict_choose(WSP_POLICY_PREDICT, c, 6) == 4);
	CHECK(evict_choose(WSP_POLICY_PREDICT, c, 4) == 2);
	/* Largest finite distance; tie 7/7 broken by LRU (last_use 20 < 30). */
	CHECK(evict_choose(WSP_POLICY_PREDICT, c, 2) == 1);
	const struct evict_cand t[] = {
		{ .layer = 1, .last_use = 30, .distance = 7 },
		{ .layer = 2, .last_use = 20, .distance = 7 },
		{ .layer = 3, .last_use = 40, .distance = 2 },
	};
	CHECK(evict_choose(WSP_POLICY_PREDICT, t, 3) == 1);
	CHECK(evict_choose(WSP_POLICY_PREDICT, t + 2, 1) == 0);
}

static void load(struct evict_cand *dst, uint64_t *bytes, const struct evict_cand *src,
		 const uint64_t *src_bytes, unsigned n)
{
	memcpy(dst, src, n * sizeof(*dst));
	memcpy(bytes, src_bytes, n * sizeof(*bytes));
}

static void test_plan(void)
{
	const struct evict_cand c0[] = {
		{ .layer = 0, .last_use = 5, .distance = 4 },
		{ .layer = 1, .last_use = 1, .distance = 9 },
		{ .layer = 2, .last_use = 3, .distance = NEVER },
		{ .layer = 3, .last_use = 2, .distance = 2 },
	};
	const uint64_t b0[] = { 100, 200, 50, 400 };
	struct evict_cand c[4];
	uint64_t b[4];

	/* Nothing needed: no victims. */
	load(c, b, c0, b0, 4);
	CHECK_RC(evict_plan(WSP_POLICY_PREDICT, c, b, 4, 0, 3), 0);
	/* PREDICT: NEVER (50 bytes) then distance 9 (200) cover 250. */
	load(c, b, c0, b0, 4);
	CHECK_RC(evict_plan(WSP_POLICY_PREDICT, c, b, 4, 250, 3), 2);
	CHECK(c[0].layer == 2 && b[0] == 50 && c[1].layer == 1 && b[1] == 200);
	/* Every candidate is still in the array (permuted, bytes alongside). */
	CHECK(c[2].layer + c[3].layer == 3 && b[2] + b[3] == 500);
	for (int i = 2; i < 4; i++)
		CHECK(b[i] == b0[c[i].layer]);
	/* Admission: the incoming entry is needed at 5; layer 0 (at 4) is
	 * needed sooner, so room for 300 can only be made wrongly: bypass. */
	load(c, b, c0, b0, 4);
	CHECK_RC(evict_plan(WSP_POLICY_PREDICT, c, b, 4, 300, 5), -ENOSPC);
	/* Incoming needed at 4: a tie with layer 0 may go. */
	load(c, b, c0, b0, 4);
	CHECK_RC(evict_plan(WSP_POLICY_PREDICT, c, b, 4, 300, 4), 3);
	CHECK(c[2].layer == 0);
	/* Incoming never used again: only NEVER candidates may go. */
	load(c, b, c0, b0, 4);
	CHECK_RC(evict_plan(WSP_POLICY_PREDICT, c, b, 4, 50, NEVER), 1);
	CHECK_RC(evict_plan(WSP_POLICY_PREDICT, c, b, 4, 51, NEVER), -ENOSPC);
	/* Distance 0 = a demand load: admission off, everything may go. */
	load(c, b, c0, b0, 4);
	CHECK_RC(evict_plan(WSP_POLICY_PREDICT, c, b, 4, 750, 0), 4);
	CHECK(c[3].layer == 3);
	/* More than everything: -ENOSPC. */
	load(c, b, c0, b0, 4);
	CHECK_RC(evict_plan(WSP_POLICY_PREDICT, c, b, 4, 751, 0), -ENOSPC);
	CHECK_RC(evict_plan(WSP_POLICY_LRU, c, b, 0, 1, 0), -ENOSPC);
	/* LRU: oldest first (1, 3, 2), never refuses on distance. */
	load(c, b, c0, b0, 4);
	CHECK_RC(evict_plan(WSP_POLICY_LRU, c, b, 4, 601, NEVER), 3);
	CHECK(c[0].layer == 1 && c[1].layer == 3 && c[2].layer == 2);
	/* Huge sizes do not wrap the running total. */
	const struct evict_cand h0[] = {
		{ .layer = 0, .last_use = 1, .distance = 9 },
		{ .layer = 1, .last_use = 2, .distance = 8 },
	};
	const uint64_t hb[] = { UINT64_MAX - 1, 5 };
	load(c, b, h0, hb, 2);
	CHECK_RC(evict_plan(WSP_POLICY_LRU, c, b, 2, UINT64_MAX, 0), 2);
}

int main(void)
{
	test_choose();
	test_plan();
	return 0;
}
