/*
 * wsp_simulate(): the rules of the replay, LRU on cyclic scans, Belady
 * against an exhaustive optimum, and PREDICT against Belady.
 */
#include <stdio.h>

#include "common/util.h"
#include "predict/predict.h"
#include "testlib.h"
#include "traces.h"

static struct wsp_sim_result sim(const uint64_t *bytes, uint32_t n, const uint32_t *trace,
				 size_t len, uint64_t cache, enum wsp_sim_policy pol)
{
	struct wsp_sim_result r;
	CHECK_RC(wsp_simulate(bytes, n, trace, len, cache, pol, &r), 0);
	CHECK(r.accesses == len && r.hits + r.misses == len);
	return r;
}

/*
 * The most hits any policy can get on `trace` over n <= 8 equal layers with
 * room for `slots`, where a missed layer may be cached (evicting any one) or
 * not: dynamic programming over every set of resident layers.
 */
static long optimum(const uint32_t *trace, size_t len, uint32_t n, unsigned slots)
{
	long best[256], next[256], result = 0;
	unsigned states = 1u << n;

	CHECK(n <= 8);
	for (unsigned m = 0; m < states; m++)
		best[m] = -1;
	best[0] = 0;
	for (size_t t = 0; t < len; t++) {
		unsigned x = 1u << trace[t];
		for (unsigned m = 0; m < states; m++)
			next[m] = -1;
		for (unsigned m = 0; m < states; m++) {
			long h = best[m];
			if (h < 0)
				continue;
			if (m & x) {
				next[m] = WSP_MAX(next[m], h + 1);
				continue;
			}
			next[m] = WSP_MAX(next[m], h);        /* not cached */
			if ((unsigned)__builtin_popcount(m) < slots) {
				next[m | x] = WSP_MAX(next[m | x], h);
				continue;
			}
			for (unsigned y = 1; y < states; y <<= 1)
				if (m & y)
					next[(m & ~y) | x] = WSP_MAX(next[(m & ~y) | x], h);
		}
		memcpy(best, next, sizeof(best));
	}
	for (unsigned m = 0; m < states; m++)
		result = WSP_MAX(result, best[m]);
	return result;
}

static void test_errors(void)
{
	const uint64_t bytes[2] = { 1, 1 };
	const uint32_t trace[3] = { 0, 1, 2 };
	struct wsp_sim_result r;

	CHECK_RC(wsp_simulate(bytes, 2, trace, 2, 1, WSP_SIM_LRU, NULL), -EINVAL);
	CHECK_RC(wsp_simulate(NULL, 2, trace, 2, 1, WSP_SIM_LRU, &r), -EINVAL);
	CHECK_RC(wsp_simulate(bytes, 2, NULL, 2, 1, WSP_SIM_LRU, &r), -EINVAL);
	CHECK_RC(wsp_simulate(bytes, 2, trace, 2, 1, (enum wsp_sim_policy)7, &r), -EINVAL);
	for (int pol = 0; pol < 3; pol++) {
		CHECK_RC(wsp_simulate(bytes, 2, trace, 3, 1, (enum wsp_sim_policy)pol, &r),
			 WSP_ENOTFOUND);
		CHECK_RC(wsp_simulate(bytes, 2, trace, 0, 1, (enum wsp_sim_policy)pol, &r), 0);
		CHECK(r.accesses == 0 && r.hits == 0 && r.bytes_read == 0);
		CHECK_RC(wsp_simulate(NULL, 0, NULL, 0, 1, (enum wsp_sim_policy)pol, &r), 0);
	}
}

static void test_rules(void)
{
	/* Layer 1 is larger than the cache: always a miss, never cached. */
	const uint64_t bytes[3] = { 10, 100, 10 };
	const uint32_t trace[] = { 0, 1, 2, 1, 0, 2, 1 };
	/* Cache of 2: 0 1 0 2 0 1.  LRU evicts 1 for 2 and 2 for 1: 2 hits.
	 * Belady does not cache 2 (never used again): 3 hits. */
	const uint64_t eq[3] = { 1, 1, 1 };
	const uint32_t t2[] = { 0, 1, 0, 2, 0, 1 };

	for (int pol = 0; pol < 3; pol++) {
		struct wsp_sim_result r = sim(bytes, 3, trace, 7, 50, (enum wsp_sim_policy)pol);
		CHECK(r.hits == 2 && r.misses == 5);
		CHECK(r.bytes_read == 10 + 100 + 10 + 100 + 100);
	}
	CHECK(sim(eq, 3, t2, 6, 2, WSP_SIM_LRU).hits == 2);
	CHECK(sim(eq, 3, t2, 6, 2, WSP_SIM_BELADY).hits == 3);
	CHECK(sim(eq, 3, t2, 6, 2, WSP_SIM_BELADY).bytes_read == 3);
	/* A cache of 0 bytes holds only empty layers. */
	const uint64_t z[2] = { 0, 5 };
	const uint32_t t3[] = { 0, 0, 1, 1 };
	CHECK(sim(z, 2, t3, 4, 0, WSP_SIM_PREDICT).hits == 1);
	/* Sizes near the top of the range: no wrap-around anywhere. */
	const uint64_t big[3] = { 1ull << 62, 1ull << 62, 1ull << 62 };
	const uint32_t t4[] = { 0, 1, 2, 0, 1, 2 };
	for (int pol = 0; pol < 3; pol++) {
		struct wsp_sim_result r = sim(big, 3, t4, 6, UINT64_MAX, (enum wsp_sim_policy)pol);
		CHECK(r.hits == 3 && r.bytes_read == 3ull << 62);
	}
	const uint64_t huge[2] = { 1ull << 63, 1ull << 63 };
	struct wsp_sim_result r;
	CHECK_RC(wsp_simulate(huge, 2, t4, 2, UINT64_MAX, WSP_SIM_LRU, &r), WSP_ETOOBIG);
	CHECK(r.accesses == 0 && r.bytes_read == 0);
}

/* Cyclic passes over n equal layers with a cache of n/2. */
static void test_cyclic(uint32_t n, unsigned passes)
{
	struct trace tr = { 0 };
	uint64_t bytes[64];
	unsigned slots = n / 2;
	long prev_p = 0, prev_b = 0, first_p = 0, first_b = 0;

	CHECK(n <= 64);
	trace_passes(&tr, n, passes);
	layer_sizes(bytes, n, 0);
	/* LRU: every access of a cyclic scan larger than the cache misses. */
	CHECK(sim(bytes, n, tr.at, tr.len, (uint64_t)slots << 20, WSP_SIM_LRU).hits == 0);
	if (n <= 8) {
		long opt = optimum(tr.at, tr.len, n, slots);
		long bel = (long)sim(bytes, n, tr.at, tr.len, (uint64_t)slots << 20,
				     WSP_SIM_BELADY).hits;
		if (bel != opt) {
			fprintf(stderr, "cyclic n=%u: Belady %ld hits, optimum %ld\n", n, bel, opt);
			exit(1);
		}
	}
	/* PREDICT after the first pass: per pass within 1 hit of Belady. */
	for (unsigned p = 1; p <= passes; p++) {
		size_t len = (size_t)p * n;
		long hp = (long)sim(bytes, n, tr.at, len, (uint64_t)slots << 20,
				    WSP_SIM_PREDICT).hits;
		long hb = (long)sim(bytes, n, tr.at, len, (uint64_t)slots << 20,
				    WSP_SIM_BELADY).hits;
		if (p == 1) {
			first_p = hp;
			first_b = hb;
		} else if (labs((hp - prev_p) - (hb - prev_b)) > 1) {
			fprintf(stderr, "cyclic n=%u pass %u: PREDICT +%ld, BELADY +%ld\n", n, p,
				hp - prev_p, hb - prev_b);
			exit(1);
		}
		prev_p = hp;
		prev_b = hb;
	}
	/* The optimum of a cyclic scan with bypass: keep `slots` layers for
	 * good, each hit once per pass after the first. */
	CHECK(prev_b == (long)(passes - 1) * slots);
	printf("cyclic scan, %u layers, cache %u, %u passes: LRU 0, PREDICT %ld, BELADY %ld hits "
	       "(first pass %ld / %ld)\n", n, slots, passes, prev_p, prev_b, first_p, first_b);
	trace_free(&tr);
}

/* Belady equals the exhaustive optimum for equal sizes, on any trace. */
static void test_belady_optimal(void)
{
	uint64_t seed = 9, bytes[8];
	uint32_t trace[48];

	layer_sizes(bytes, 8, 0);
	for (int round = 0; round < 300; round++) {
		uint32_t n = 2 + (uint32_t)(t_rand(&seed) % 7);
		size_t len = 8 + t_rand(&seed) % 40;
		unsigned slots = 1 + (unsigned)(t_rand(&seed) % (n - 1));
		/* Mix of loops and jumps, so there is something to get right. */
		uint32_t cur = 0;
		for (size_t t = 0; t < len; t++) {
			cur = t_rand(&seed) % 3 ? (cur + 1) % n : (uint32_t)(t_rand(&seed) % n);
			trace[t] = cur;
		}
		long opt = optimum(trace, len, n, slots);
		long bel = (long)sim(bytes, n, trace, len, (uint64_t)slots << 20,
				     WSP_SIM_BELADY).hits;
		long lru = (long)sim(bytes, n, trace, len, (uint64_t)slots << 20, WSP_SIM_LRU).hits;
		long pre = (long)sim(bytes, n, trace, len, (uint64_t)slots << 20,
				     WSP_SIM_PREDICT).hits;
		if (bel != opt || lru > opt || pre > opt) {
			fprintf(stderr, "round %d: n=%u slots=%u len=%zu: optimum %ld, Belady %ld, "
				"LRU %ld, PREDICT %ld\n", round, n, slots, len, opt, bel, lru, pre);
			exit(1);
		}
	}
}

int main(void)
{
	test_errors();
	test_rules();
	for (uint32_t n = 4; n <= 8; n++)
		test_cyclic(n, 8);
	test_cyclic(32, 10);
	test_cyclic(64, 6);
	test_belady_optimal();
	return 0;
}
