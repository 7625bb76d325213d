/* What read-ahead has been worth, per layer (see readahead.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "predict/readahead.h"

/* Left to demand once this many reads ahead were wasted and they outnumber
 * the uses (most of them missed: each use then cost more than two reads);
 * counts are halved when their sum reaches DECAY_AT. */
#define MIN_WASTED 4u
#define DECAY_AT 64u

struct readahead {
	pthread_mutex_t lock;
	uint32_t n;
	uint8_t *pending;     /* read ahead, not acquired since */
	uint32_t *used, *wasted;
};

int readahead_create(uint32_t n_layers, struct readahead **out)
{
	struct readahead *ra = calloc(1, sizeof(*ra));
	size_t n = n_layers ? n_layers : 1;
	if (ra) {
		ra->n = n_layers;
		ra->pending = calloc(n, 1);
		ra->used = calloc(n, sizeof(*ra->used));
		ra->wasted = calloc(n, sizeof(*ra->wasted));
	}
	if (!ra || !ra->pending || !ra->used || !ra->wasted) {
		readahead_free(ra);
		*out = NULL;
		return -ENOMEM;
	}
	pthread_mutex_init(&ra->lock, NULL);
	*out = ra;
	return 0;
}

void readahead_free(struct readahead *ra)
{
	if (!ra)
		return;
	if (ra->pending && ra->used && ra->wasted)
		pthread_mutex_destroy(&ra->lock);
	free(ra->pending);
	free(ra->used);
	free(ra->wasted);
	free(ra);
}

static int wasteful(const struct readahead *ra, uint32_t l)
{
	return ra->wasted[l] >= MIN_WASTED && ra->wasted[l] > ra->used[l];
}

static void decay(struct readahead *ra, uint32_t l)
{
	if (ra->used[l] + ra->wasted[l] >= DECAY_AT) {
		ra->used[l] /= 2;
		ra->wasted[l] /= 2;
	}
}

void readahead_started(struct readahead *ra, uint32_t l)
{
	if (l >= ra->n)
		return;
	pthread_mutex_lock(&ra->lock);
	ra->pending[l] = 1;
	pthread_mutex_unlock(&ra->lock);
}

void readahead_unused(struct readahead *ra, uint32_t l)
{
	if (l >= ra->n)
		return;
	pthread_mutex_lock(&ra->lock);
	if (ra->pending[l])
		ra->wasted[l]++;
	ra->pending[l] = 0;
	decay(ra, l);
	pthread_mutex_unlock(&ra->lock);
}

void readahead_acquired(struct readahead *ra, uint32_t l)
{
	if (l >= ra->n)
		return;
	pthread_mutex_lock(&ra->lock);
	if (ra->pending[l])
		ra->used[l]++;
	ra->pending[l] = 0;
	decay(ra, l);
	pthread_mutex_unlock(&ra->lock);
}

int readahead_skip(struct readahead *ra, uint32_t l)
{
	if (l >= ra->n)
		return 0;
	pthread_mutex_lock(&ra->lock);
	int skip = wasteful(ra, l);
	pthread_mutex_unlock(&ra->lock);
	return skip;
}

uint32_t readahead_left_out(struct readahead *ra)
{
	uint32_t n = 0;
	pthread_mutex_lock(&ra->lock);
	for (uint32_t l = 0; l < ra->n; l++)
		n += (uint32_t)wasteful(ra, l);
	pthread_mutex_unlock(&ra->lock);
	return n;
}

void readahead_reset(struct readahead *ra)
{
	pthread_mutex_lock(&ra->lock);
	for (uint32_t l = 0; l < ra->n; l++) {
		ra->pending[l] = 0;
		ra->used[l] = ra->wasted[l] = 0;
	}
	pthread_mutex_unlock(&ra->lock);
}

uint64_t readahead_bytes(const struct readahead *ra)
{
	return ra ? sizeof(*ra) + (uint64_t)ra->n * (1 + sizeof(*ra->used) + sizeof(*ra->wasted)) : 0;
}
