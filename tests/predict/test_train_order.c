/*
 * A training step's order through the host tier: the forward pass (the
 * embedding, the blocks, the final norm, the head), then the backward pass
 * in reverse without the embedding (its backward needs no weights), with
 * and without gradient checkpointing (each block's forward recomputed just
 * before its backward).  In every step after the first, PREDICT must hit
 * as often as BELADY does in that step, at every cache size: no miss that
 * the cache size could have avoided.  Per-step hits are the difference of
 * replays of the first k and k-1 steps (exact for PREDICT, which is online;
 * for BELADY, the optimum over the first k steps less that over k-1).
 */
#include <stdio.h>

#include "testlib.h"
#include "wspager.h"
#include "traces.h"

#define BLOCKS 32u
#define STEPS 8u

/* Layers: 0 embedding, 1..BLOCKS blocks, BLOCKS+1 norm, BLOCKS+2 head. */
static void train_step(struct trace *t, int checkpointing)
{
	for (uint32_t i = 0; i < BLOCKS + 3; i++)
		trace_push(t, i);
	trace_push(t, BLOCKS + 2);
	trace_push(t, BLOCKS + 1);
	for (uint32_t i = BLOCKS; i >= 1; i--) {
		if (checkpointing)
			trace_push(t, i);
		trace_push(t, i);
	}
}

static long hits(const uint64_t *bytes, uint32_t n, const struct trace *t, size_t len,
		 uint64_t cache, enum wsp_sim_policy pol)
{
	struct wsp_sim_result r;
	CHECK_RC(wsp_simulate(bytes, n, t->at, len, cache, pol, &r), 0);
	return (long)r.hits;
}

int main(void)
{
	const uint32_t n = BLOCKS + 3;
	uint64_t bytes[BLOCKS + 3], total = 0;
	for (uint32_t i = 0; i < n; i++) {
		/* embedding and head 3 MiB, the rest 1 MiB */
		bytes[i] = (i == 0 || i == n - 1) ? 3u << 20 : 1u << 20;
		total += bytes[i];
	}
	static const unsigned percent[] = { 10, 25, 50, 75, 90 };
	for (int ckpt = 0; ckpt < 2; ckpt++) {
		struct trace t = { 0 };
		size_t step_len = 0;
		for (unsigned s = 0; s < STEPS; s++) {
			train_step(&t, ckpt);
			if (!step_len)
				step_len = t.len;
		}
		for (unsigned c = 0; c < sizeof(percent) / sizeof(percent[0]); c++) {
			uint64_t cache = total * percent[c] / 100;
			long p_prev = hits(bytes, n, &t, step_len, cache, WSP_SIM_PREDICT);
			long b_prev = hits(bytes, n, &t, step_len, cache, WSP_SIM_BELADY);
			long p_sum = 0, b_sum = 0;
			for (unsigned k = 2; k <= STEPS; k++) {
				long p = hits(bytes, n, &t, k * step_len, cache, WSP_SIM_PREDICT);
				long b = hits(bytes, n, &t, k * step_len, cache, WSP_SIM_BELADY);
				if (p - p_prev < b - b_prev)
					fprintf(stderr, "checkpointing %d, cache %u%%, step %u: PREDICT %ld hits, "
						"BELADY %ld\n", ckpt, percent[c], k, p - p_prev, b - b_prev);
				CHECK(p - p_prev >= b - b_prev);
				p_sum += p - p_prev;
				b_sum += b - b_prev;
				p_prev = p;
				b_prev = b;
			}
			/* LRU for comparison (not asserted) */
			long l_sum = hits(bytes, n, &t, STEPS * step_len, cache, WSP_SIM_LRU) -
				     hits(bytes, n, &t, step_len, cache, WSP_SIM_LRU);
			printf("checkpointing %d, cache %2u%%: steps 2-%u, %zu accesses each: PREDICT %ld "
			       "hits, BELADY %ld, LRU %ld\n", ckpt, percent[c], STEPS, step_len, p_sum,
			       b_sum, l_sum);
		}
		trace_free(&t);
	}
	return 0;
}
