/*
 * wsp_pack_measure_read: the disk-side ceiling of a cold run, measured with
 * the pager's own read path (the same I/O engine configuration, whole-layer
 * requests in pack order), so that "cold run / ceiling" compares the pager
 * with what its reads can get from this disk, not with another method.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "io/io.h"
#include "pack/pack.h"
#include "wspager.h"

#define MEASURE_INFLIGHT_BYTES (256ull << 20)

struct measure {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned free_bufs;
	int first_error;
	struct wspi_err *err;
};

struct measure_req {
	struct io_req r;
	struct measure *m;
	int busy;
};

static void measure_done(struct io_req *r, int result)
{
	struct measure_req *q = r->ctx;
	struct measure *m = q->m;
	pthread_mutex_lock(&m->lock);
	if (result < 0 && !m->first_error)
		m->first_error = result;
	q->busy = 0;
	m->free_bufs++;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

int wsp_pack_measure_read(wsp_pack *pk, const struct wsp_options *opt, uint64_t limit,
			  uint64_t *bytes, uint64_t *ns)
{
	if (!pk || !bytes || !ns)
		return -EINVAL;
	struct wsp_options defaults;
	if (!opt) {
		wsp_options_init(&defaults);
		opt = &defaults;
	}
	const struct wspi_manifest *mf = &pk->m;
	uint32_t n_shards = mf->hdr->n_shards, n_layers = mf->hdr->n_layers;
	uint64_t span = io_span(pk->max_layer_stored ? pk->max_layer_stored : 1);
	unsigned n_bufs = (unsigned)WSP_MAX(2, WSP_MIN(32, MEASURE_INFLIGHT_BYTES / span));
	char **paths = calloc(n_shards ? n_shards : 1, sizeof(*paths));
	struct measure_req *reqs = calloc(n_bufs, sizeof(*reqs));
	void **bufs = calloc(n_bufs, sizeof(*bufs));
	struct io_engine *io = NULL;
	struct measure m = {.free_bufs = n_bufs, .err = &pk->err};
	int rc = 0;
	pthread_mutex_init(&m.lock, NULL);
	pthread_cond_init(&m.cond, NULL);
	if (!paths || !reqs || !bufs) {
		rc = WSP_ERR(&pk->err, -ENOMEM, "measure read: out of memory");
		goto out;
	}
	for (uint32_t s = 0; s < n_shards; s++) {
		char p[4096];
		pack_shard_path(pk, s, p, sizeof(p));
		if (!(paths[s] = strdup(p))) {
			rc = WSP_ERR(&pk->err, -ENOMEM, "measure read: out of memory");
			goto out;
		}
	}
	for (unsigned i = 0; i < n_bufs; i++)
		if (posix_memalign(&bufs[i], 4096, span)) {
			bufs[i] = NULL;
			rc = WSP_ERR(&pk->err, -ENOMEM, "measure read: cannot allocate %llu bytes",
				     (unsigned long long)span);
			goto out;
		}
	struct io_config cfg;
	io_config_init(&cfg);
	cfg.backend = opt->io;
	if (opt->queue_depth)
		cfg.queue_depth = opt->queue_depth;
	if (opt->io_threads)
		cfg.threads = opt->io_threads;
	cfg.direct = !(opt->flags & WSP_OPEN_NO_DIRECT);
	rc = io_engine_open(&cfg, (const char *const *)paths, n_shards, &io, &pk->err);
	if (rc < 0)
		goto out;

	uint64_t total = 0, t0 = wspi_now_ns();
	for (uint32_t l = 0; l < n_layers && rc == 0; l++) {
		const struct wspm_layer *L = &mf->layers[l];
		if (!L->stored_bytes)
			continue;
		if (limit && total >= limit)
			break;
		pthread_mutex_lock(&m.lock);
		while (!m.free_bufs)
			pthread_cond_wait(&m.cond, &m.lock);
		rc = m.first_error;
		unsigned i = 0;
		while (reqs[i].busy)
			i++;
		reqs[i].busy = 1;
		m.free_bufs--;
		pthread_mutex_unlock(&m.lock);
		if (rc < 0)
			break;
		struct measure_req *q = &reqs[i];
		memset(&q->r, 0, sizeof(q->r));
		q->m = &m;
		q->r.file = L->shard;
		q->r.offset = L->offset;
		q->r.length = L->stored_bytes;
		q->r.buf = bufs[i];
		q->r.done = measure_done;
		q->r.ctx = q;
		q->r.err = &pk->err;
		rc = io_submit(io, &q->r);
		if (rc < 0) {
			pthread_mutex_lock(&m.lock);
			q->busy = 0;
			m.free_bufs++;
			pthread_mutex_unlock(&m.lock);
			break;
		}
		total += L->stored_bytes;
	}
	/* Wait for every request, also after an error: buffers are still
	 * being written by the kernel until their completion arrives. */
	pthread_mutex_lock(&m.lock);
	while (m.free_bufs < n_bufs)
		pthread_cond_wait(&m.cond, &m.lock);
	if (rc == 0)
		rc = m.first_error;
	pthread_mutex_unlock(&m.lock);
	*ns = wspi_now_ns() - t0;
	*bytes = total;
out:
	io_engine_close(io);
	for (unsigned i = 0; bufs && i < n_bufs; i++)
		free(bufs[i]);
	for (uint32_t s = 0; paths && s < n_shards; s++)
		free(paths[s]);
	free(bufs);
	free(reqs);
	free(paths);
	pthread_cond_destroy(&m.cond);
	pthread_mutex_destroy(&m.lock);
	return rc;
}
