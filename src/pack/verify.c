/*
 * wsp_pack_verify: decode every layer on worker threads and check every
 * chunk and tensor checksum.  The error kept is that of the lowest failing
 * layer, so the report does not depend on thread timing.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/fdio.h"
#include "common/util.h"
#include "common/workers.h"
#include "pack/fsutil.h"
#include "pack/pack.h"

struct vstate {
	struct wsp_pack_s *pk;
	pthread_mutex_t mu;
	uint32_t next;
	uint32_t bad_layer;        /* lowest failing layer, or UINT32_MAX */
	int rc, cancelled;
	uint64_t done, total;
	wsp_progress_fn progress;
	void *ctx;
};

static void fail(struct vstate *v, uint32_t li, int rc, const char *msg)
{
	pthread_mutex_lock(&v->mu);
	if (li < v->bad_layer) {
		v->bad_layer = li;
		v->rc = rc;
		wspi_err_set(&v->pk->err, rc, "%s", msg);
	}
	pthread_mutex_unlock(&v->mu);
}

static void *vworker(void *arg)
{
	struct vstate *v = arg;
	struct wsp_pack_s *pk = v->pk;
	struct chunk_stream cs = {0};
	struct wspi_err err;
	int rc;

	wspi_err_init(&err);
	/* a chunk at a time: memory does not grow with a layer's size */
	if ((rc = chunk_stream_init(pk, &cs, &err)) < 0) {
		fail(v, 0, rc, err.msg);
		goto out;
	}
	for (;;) {
		pthread_mutex_lock(&v->mu);
		uint32_t li = v->next;
		int stop = li >= pk->m.hdr->n_layers || li > v->bad_layer || v->cancelled;
		if (!stop)
			v->next++;
		pthread_mutex_unlock(&v->mu);
		if (stop)
			break;
		wspi_err_clear(&err);
		rc = pack_stream_layer(pk, li, &cs, NULL, NULL, &err);
		if (rc < 0) {
			fail(v, li, rc, err.msg);
			continue;
		}
		pthread_mutex_lock(&v->mu);
		v->done += pk->m.layers[li].raw_bytes;
		/* one caller of the callback at a time */
		if (v->progress && !v->cancelled && v->progress(v->ctx, v->done, v->total)) {
			v->cancelled = 1;
		}
		pthread_mutex_unlock(&v->mu);
	}
out:
	chunk_stream_free(&cs);
	wspi_err_destroy(&err);
	return NULL;
}

/* The bytes of shard `si` in [from, to) are zero (wspack(5): the padding
 * between layers and after the last one).  `after` names what precedes. */
static int check_gap(struct wsp_pack_s *pk, uint32_t si, uint64_t from, uint64_t to,
		     const char *after, char *buf, size_t len)
{
	char path[4200];
	int fd = pack_shard_fd(pk, si, &pk->err);

	if (fd < 0)
		return fd;
	while (from < to) {
		uint64_t n = WSP_MIN((uint64_t)len, to - from), got = 0;
		int rc = fd_read_at(fd, buf, n, from, &got);
		pack_shard_path(pk, si, path, sizeof(path));
		if (rc < 0)
			return WSP_ERR(&pk->err, rc, "%s: reading the padding at %llu: %s", path,
				       (unsigned long long)from, wsp_strerror(rc));
		for (uint64_t i = 0; i < n; i++)
			if (buf[i])
				return WSP_ERR(&pk->err, WSP_EFORMAT, "%s: byte %llu of the padding "
					       "after %s is 0x%02x, not zero", path,
					       (unsigned long long)(from + i), after,
					       (unsigned char)buf[i]);
		from += n;
	}
	return 0;
}

/* Every byte of every shard outside the layers' stored regions is zero:
 * nothing can hide in a pack that verifies. */
static int check_padding(struct wsp_pack_s *pk)
{
	const struct wspi_manifest *m = &pk->m;
	size_t len = 1 << 20;
	char *buf = malloc(len);
	int rc = 0;

	if (!buf)
		return WSP_ERR(&pk->err, -ENOMEM, "out of memory");
	for (uint32_t si = 0; si < m->hdr->n_shards && rc == 0; si++) {
		uint64_t end = 0;
		const char *after = "the start of the shard";
		/* manifest.c checked: a shard's layers come in increasing offset
		 * order and do not overlap */
		for (uint32_t li = 0; li < m->hdr->n_layers && rc == 0; li++) {
			const struct wspm_layer *l = &m->layers[li];
			if (l->shard != si)
				continue;
			rc = check_gap(pk, si, end, l->offset, after, buf, len);
			end = l->offset + l->stored_bytes;
			after = pk->layers[li].name;
		}
		if (rc == 0)
			rc = check_gap(pk, si, end, m->shards[si].size, after, buf, len);
	}
	free(buf);
	return rc;
}

int wsp_pack_verify(wsp_pack *pk, unsigned threads, wsp_progress_fn progress, void *ctx)
{
	struct vstate v;
	uint64_t per = 0, budget;

	if (!pk)
		return -EINVAL;
	memset(&v, 0, sizeof(v));
	v.pk = pk;
	v.bad_layer = UINT32_MAX;
	v.progress = progress;
	v.ctx = ctx;
	pthread_mutex_init(&v.mu, NULL);
	for (uint32_t i = 0; i < pk->m.hdr->n_layers; i++)
		v.total += pk->m.layers[i].raw_bytes;
	if (!threads)
		threads = wspi_cpu_count();
	/* Each worker holds about three chunks (stored, decoded, the decoder's
	 * scratch): keep them within half of the memory this process may use,
	 * and refuse up front chunks too large for even one. */
	per = 3 * (pk->max_chunk_raw + 4096);
	budget = wspi_memory_available(NULL) / 2;
	if (budget && per > budget) {
		pthread_mutex_destroy(&v.mu);
		return WSP_ERR(&pk->err, WSP_ETOOBIG, "%s: chunks of up to %llu bytes: a verify "
			       "thread needs about %llu bytes, more than half of the %llu available",
			       pk->dir, (unsigned long long)pk->max_chunk_raw, (unsigned long long)per,
			       (unsigned long long)(2 * budget));
	}
	if (budget && threads > budget / per)
		threads = budget / per ? (unsigned)(budget / per) : 1;
	if (threads > pk->m.hdr->n_layers)
		threads = pk->m.hdr->n_layers ? pk->m.hdr->n_layers : 1;
	wspi_run_workers(vworker, &v, threads);   /* fewer if the system gives fewer */
	pthread_mutex_destroy(&v.mu);
	if (v.rc < 0)
		return v.rc;
	if (v.cancelled)
		return WSP_ERR(&pk->err, -ECANCELED, "%s: verify cancelled", pk->dir);
	return check_padding(pk);
}
