/*
 * The front end's inbox and its thread: see inbox.h.  The front end's
 * logic for each message is in entries.c (hc_entry_load_ended,
 * hc_entries_pages_ready); this file only carries the messages to it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hcache_int.h"

/* Messages taken up at a time, out of the lock. */
#define INBOX_BATCH 64u

static void *inbox_main(void *arg)
{
	struct hcache *hc = arg;
	struct hc_inbox *in = &hc->in;
	uint32_t batch[INBOX_BATCH];

	pthread_mutex_lock(&in->lock);
	for (;;) {
		while (!in->n && !in->pages_ready && !in->stop)
			pthread_cond_wait(&in->cond, &in->lock);
		if (!in->n && !in->pages_ready)
			break;   /* stopping, and nothing is left */
		unsigned k = 0;
		for (; k < INBOX_BATCH && in->n; k++) {
			batch[k] = in->ended[in->head];
			in->head = (in->head + 1) % hc->n_layers;
			in->n--;
		}
		int pages = in->pages_ready;
		in->pages_ready = 0;
		in->busy = 1;
		pthread_mutex_unlock(&in->lock);
		for (unsigned i = 0; i < k; i++)
			hc_entry_load_ended(hc, batch[i]);
		if (pages)
			hc_entries_pages_ready(hc);
		pthread_mutex_lock(&in->lock);
		in->busy = 0;
		pthread_cond_broadcast(&in->cond);   /* for hc_inbox_drain */
	}
	pthread_mutex_unlock(&in->lock);
	return NULL;
}

int hc_inbox_start(struct hcache *hc, struct wspi_err *err)
{
	struct hc_inbox *in = &hc->in;
	in->ended = calloc(hc->n_layers ? hc->n_layers : 1, sizeof(*in->ended));
	if (!in->ended)
		return WSP_ERR(err, -ENOMEM, "host cache: out of memory");
	pthread_mutex_init(&in->lock, NULL);
	pthread_cond_init(&in->cond, NULL);
	in->inited = 1;
	int rc = pthread_create(&in->thread, NULL, inbox_main, hc);
	if (rc)
		return WSP_ERR(err, -rc, "host cache: cannot start a thread: %s", strerror(rc));
	in->started = 1;
	return 0;
}

void hc_inbox_post_ended(struct hcache *hc, uint32_t layer)
{
	struct hc_inbox *in = &hc->in;
	pthread_mutex_lock(&in->lock);
	in->ended[(in->head + in->n) % hc->n_layers] = layer;
	in->n++;
	pthread_cond_broadcast(&in->cond);
	pthread_mutex_unlock(&in->lock);
}

void hc_inbox_post_pages(struct hcache *hc)
{
	struct hc_inbox *in = &hc->in;
	pthread_mutex_lock(&in->lock);
	in->pages_ready = 1;
	pthread_cond_broadcast(&in->cond);
	pthread_mutex_unlock(&in->lock);
}

void hc_inbox_drain(struct hcache *hc)
{
	struct hc_inbox *in = &hc->in;
	if (!in->started)
		return;
	pthread_mutex_lock(&in->lock);
	while (in->n || in->pages_ready || in->busy)
		pthread_cond_wait(&in->cond, &in->lock);
	pthread_mutex_unlock(&in->lock);
}

void hc_inbox_fini(struct hcache *hc)
{
	struct hc_inbox *in = &hc->in;
	if (in->started) {
		pthread_mutex_lock(&in->lock);
		in->stop = 1;
		pthread_cond_broadcast(&in->cond);
		pthread_mutex_unlock(&in->lock);
		pthread_join(in->thread, NULL);
	}
	if (in->inited) {
		pthread_mutex_destroy(&in->lock);
		pthread_cond_destroy(&in->cond);
	}
	free(in->ended);
	memset(in, 0, sizeof(*in));
}
