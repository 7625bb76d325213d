/* The predictor under concurrent observers and readers (as the host cache,
 * the GPU slot pool and wsp_acquire use it): answers stay well-formed. */
#include <pthread.h>

#include "predict/predict.h"
#include "testlib.h"

#define N 48
#define ITER 20000

static struct predictor *pred;

static void *observer(void *arg)
{
	uint32_t start = (uint32_t)(uintptr_t)arg;

	for (uint32_t i = 0; i < ITER; i++)
		predictor_observe(pred, (start + i) % N);
	return NULL;
}

static void *reader(void *arg)
{
	uint32_t out[N], layers[N];
	uint64_t dist[N];

	(void)arg;
	for (uint32_t i = 0; i < N; i++)
		layers[i] = i;
	for (int i = 0; i < ITER / 4; i++) {
		unsigned k = predictor_next(pred, out, N);
		unsigned char seen[N] = { 0 };
		CHECK(k >= 1 && k <= N);
		for (unsigned j = 0; j < k; j++) {
			CHECK(out[j] < N && !seen[out[j]]);
			seen[out[j]] = 1;
		}
		uint64_t d = predictor_distance(pred, out[0]);
		CHECK(d >= 1);   /* the walk may have moved on since: NEVER is fine */
		predictor_distances(pred, layers, dist, N);
		for (unsigned j = 0; j < N; j++)
			CHECK(dist[j] >= 1);
		struct evict_cand c[N];
		for (unsigned j = 0; j < N; j++)
			c[j] = (struct evict_cand){ .layer = j, .last_use = j, .distance = dist[j] };
		int v = evict_choose(WSP_POLICY_PREDICT, c, N);
		CHECK(v >= 0 && v < N);
	}
	return NULL;
}

int main(void)
{
	pthread_t t[6];

	CHECK_RC(predictor_create(N, &pred), 0);
	for (int i = 0; i < 3; i++)
		CHECK(pthread_create(&t[i], NULL, observer, (void *)(uintptr_t)(i * 7)) == 0);
	for (int i = 3; i < 6; i++)
		CHECK(pthread_create(&t[i], NULL, reader, NULL) == 0);
	for (int i = 0; i < 6; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	/* Quiet again: single passes are learned as before. */
	predictor_reset(pred);
	for (uint32_t i = 0; i < N; i++)
		predictor_observe(pred, i);
	for (uint32_t i = 0; i < N; i++)
		CHECK(predictor_distance(pred, i) == i + 1);
	predictor_free(pred);
	return 0;
}
