/*
 * The front end's inbox: a mailbox, see inbox.h.  The thread that reads it
 * is the front end's (hcache.c); this file calls nobody.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hcache_int.h"

int hc_inbox_init(struct hcache *hc, struct wspi_err *err)
{
	struct hc_inbox *in = &hc->in;
	in->n_layers = hc->n_layers ? hc->n_layers : 1;
	in->ended = calloc(in->n_layers, sizeof(*in->ended));
	if (!in->ended)
		return WSP_ERR(err, -ENOMEM, "host cache: out of memory");
	pthread_mutex_init(&in->lock, NULL);
	pthread_cond_init(&in->cond, NULL);
	in->inited = 1;
	return 0;
}

void hc_inbox_fini(struct hcache *hc)
{
	struct hc_inbox *in = &hc->in;
	if (in->inited) {
		pthread_mutex_destroy(&in->lock);
		pthread_cond_destroy(&in->cond);
	}
	free(in->ended);
	memset(in, 0, sizeof(*in));
}

void hc_inbox_post_ended(struct hcache *hc, uint32_t layer)
{
	struct hc_inbox *in = &hc->in;
	pthread_mutex_lock(&in->lock);
	in->ended[(in->head + in->n) % in->n_layers] = layer;
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

int hc_inbox_take(struct hcache *hc, uint32_t *out, unsigned max, int *pages)
{
	struct hc_inbox *in = &hc->in;
	int k = 0;
	pthread_mutex_lock(&in->lock);
	while (!in->n && !in->pages_ready && !in->stop)
		pthread_cond_wait(&in->cond, &in->lock);
	if (!in->n && !in->pages_ready) {
		pthread_mutex_unlock(&in->lock);
		return -1;   /* stopped, and nothing is left */
	}
	for (; (unsigned)k < max && in->n; k++) {
		out[k] = in->ended[in->head];
		in->head = (in->head + 1) % in->n_layers;
		in->n--;
	}
	*pages = in->pages_ready;
	in->pages_ready = 0;
	in->busy = 1;
	pthread_mutex_unlock(&in->lock);
	return k;
}

void hc_inbox_done(struct hcache *hc)
{
	struct hc_inbox *in = &hc->in;
	pthread_mutex_lock(&in->lock);
	in->busy = 0;
	pthread_cond_broadcast(&in->cond);
	pthread_mutex_unlock(&in->lock);
}

void hc_inbox_drain(struct hcache *hc)
{
	struct hc_inbox *in = &hc->in;
	if (!in->inited)
		return;
	pthread_mutex_lock(&in->lock);
	while ((in->n || in->pages_ready || in->busy) && !in->stop)
		pthread_cond_wait(&in->cond, &in->lock);
	pthread_mutex_unlock(&in->lock);
}

void hc_inbox_stop(struct hcache *hc)
{
	struct hc_inbox *in = &hc->in;
	if (!in->inited)
		return;
	pthread_mutex_lock(&in->lock);
	in->stop = 1;
	pthread_cond_broadcast(&in->cond);
	pthread_mutex_unlock(&in->lock);
}
