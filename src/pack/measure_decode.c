/*
 * wsp_pack_measure_decode: the decode-side ceiling, measured from memory.
 * The stored bytes of whole layers are read first (untimed), so that the
 * timed part is the work the host cache's decode pool does and nothing else:
 * chunk_decode (zstd, the transform, the chunk checksums) with one decoder
 * per worker, chunk by chunk.  Timing wsp_pack_verify instead measures the
 * disk whenever the page cache is cold.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pack/fsutil.h"
#include "pack/pack.h"

/* Each worker decodes into its own destination, at rolling positions: large
 * enough that the writes go to memory, as the host cache's pages do, rather
 * than staying in a core's cache. */
#define DEST_BYTES (64ull << 20)
#define MAX_WORKERS 1024u

struct md_job {
	uint64_t chunk;        /* index into the manifest's chunks */
	uint64_t in_tensor;    /* chunk number within its tensor, for messages */
	uint32_t tensor, layer;
	const uint8_t *stored;
};

struct md_state {
	struct wsp_pack_s *pk;
	struct md_job *jobs;
	uint64_t n_jobs, dest_bytes, max_chunk_raw;
	_Atomic uint64_t next;
	_Atomic uint64_t bad_job;    /* lowest failing job, or UINT64_MAX */
	pthread_mutex_t mu;
	pthread_cond_t cond;
	unsigned ready;              /* workers set up and waiting for `go` */
	int go, rc;
};

/* Keep the error of the lowest failing job, so that the report does not
 * depend on thread timing. */
static void md_fail(struct md_state *s, uint64_t job, int rc, const char *msg)
{
	pthread_mutex_lock(&s->mu);
	if (job < atomic_load(&s->bad_job)) {
		atomic_store(&s->bad_job, job);
		s->rc = rc;
		wspi_err_set(&s->pk->err, rc, "%s", msg);
	}
	pthread_mutex_unlock(&s->mu);
}

static void md_job_error(struct md_state *s, uint64_t j, int rc, struct wspi_err *err)
{
	const struct wspi_manifest *m = &s->pk->m;
	const struct md_job *job = &s->jobs[j];
	const struct wspm_chunk *ch = &m->chunks[job->chunk];
	char path[PATH_MAX + 32];

	pack_shard_path(s->pk, m->layers[job->layer].shard, path, sizeof(path));
	/* the same context as pack_load_layer's messages */
	wspi_err_prefix(err, "%s: layer %u (%s), tensor %s, chunk %llu at offset %llu", path,
		       job->layer, wspm_str(m, m->layers[job->layer].name_off),
		       wspm_str(m, m->tensors[job->tensor].name_off),
		       (unsigned long long)job->in_tensor, (unsigned long long)ch->offset);
	md_fail(s, j, rc, err->msg);
}

static void *md_worker(void *arg)
{
	struct md_state *s = arg;
	const struct wspi_manifest *m = &s->pk->m;
	struct chunk_decoder *dec = NULL;
	uint8_t *dest = NULL;
	uint64_t pos = 0;
	struct wspi_err err;
	int rc;

	wspi_err_init(&err);
	rc = chunk_decoder_create(s->max_chunk_raw ? s->max_chunk_raw : 1, &dec);
	if (rc < 0 || !(dest = malloc(s->dest_bytes))) {
		md_fail(s, 0, rc < 0 ? rc : -ENOMEM, "measure decode: out of memory for a worker");
	} else {
		/* fault the destination in before the clock starts */
		memset(dest, 0, s->dest_bytes);
	}
	pthread_mutex_lock(&s->mu);
	s->ready++;
	pthread_cond_broadcast(&s->cond);
	while (!s->go)
		pthread_cond_wait(&s->cond, &s->mu);
	pthread_mutex_unlock(&s->mu);
	if (!dest)
		goto out;
	for (;;) {
		uint64_t j = atomic_fetch_add(&s->next, 1);
		if (j >= s->n_jobs || j > atomic_load(&s->bad_job))
			break;
		const struct md_job *job = &s->jobs[j];
		const struct wspm_chunk *ch = &m->chunks[job->chunk];
		if (pos + ch->raw_bytes > s->dest_bytes)
			pos = 0;
		struct wspi_span span = { dest + pos, ch->raw_bytes };
		wspi_err_clear(&err);
		rc = chunk_decode(dec, ch, m->tensors[job->tensor].dtype, job->stored, &span, 1, &err);
		if (rc < 0)
			md_job_error(s, j, rc, &err);
		pos += ch->raw_bytes;
	}
out:
	chunk_decoder_free(dec);
	free(dest);
	wspi_err_destroy(&err);
	return NULL;
}

/* The layers to measure: whole layers in pack order whose stored bytes fit
 * in `budget` (at least the first non-empty one).  Returns the count and
 * their stored bytes, chunks and largest chunk. */
static uint32_t pick_layers(const struct wspi_manifest *m, uint64_t budget, uint64_t *stored,
			    uint64_t *n_chunks, uint64_t *max_chunk)
{
	uint32_t n = 0;

	*stored = *n_chunks = *max_chunk = 0;
	for (; n < m->hdr->n_layers; n++) {
		const struct wspm_layer *l = &m->layers[n];
		uint64_t sum;
		if (ckd_add(&sum, *stored, l->stored_bytes) || (*stored && sum > budget))
			break;
		*stored = sum;
		for (uint32_t k = 0; k < l->n_tensors; k++) {
			const struct wspm_tensor *t = &m->tensors[l->first_tensor + k];
			*n_chunks += t->n_chunks;
			for (uint64_t c = 0; c < t->n_chunks; c++)
				*max_chunk = WSP_MAX(*max_chunk, m->chunks[t->first_chunk + c].raw_bytes);
		}
	}
	return n;
}

/* Read the stored regions of layers [0, n) into `buf`, back to back, and
 * list their chunks as jobs.  Untimed. */
static int load_stored(struct wsp_pack_s *pk, uint32_t n, uint8_t *buf, struct md_job *jobs,
		       uint64_t *raw)
{
	const struct wspi_manifest *m = &pk->m;
	uint64_t at = 0, nj = 0;

	*raw = 0;
	for (uint32_t li = 0; li < n; li++) {
		const struct wspm_layer *l = &m->layers[li];
		int rc = pack_read_stored(pk, li, buf + at, &pk->err);
		if (rc < 0)
			return rc;
		for (uint32_t k = 0; k < l->n_tensors; k++) {
			uint32_t ti = l->first_tensor + k;
			const struct wspm_tensor *t = &m->tensors[ti];
			for (uint64_t c = 0; c < t->n_chunks; c++) {
				const struct wspm_chunk *ch = &m->chunks[t->first_chunk + c];
				/* the manifest was validated at open: chunks lie
				 * inside their layer's stored region */
				jobs[nj++] = (struct md_job){ .chunk = t->first_chunk + c, .in_tensor = c,
							      .tensor = ti, .layer = li,
							      .stored = buf + at + (ch->offset - l->offset) };
				*raw += ch->raw_bytes;
			}
		}
		at += l->stored_bytes;
	}
	return 0;
}

static unsigned worker_count(unsigned threads, uint64_t n_jobs, uint64_t dest_bytes, uint64_t avail)
{
	if (!threads)
		threads = wspi_cpu_count();
	threads = WSP_MIN(threads, MAX_WORKERS);
	if (threads > n_jobs)
		threads = n_jobs ? (unsigned)n_jobs : 1;
	/* the destinations share the quarter of memory the stored bytes may use */
	if (avail && threads > avail / 4 / dest_bytes)
		threads = avail / 4 / dest_bytes ? (unsigned)(avail / 4 / dest_bytes) : 1;
	return threads ? threads : 1;
}

int wsp_pack_measure_decode(wsp_pack *pk, unsigned threads, uint64_t limit, uint64_t *raw_bytes,
			    uint64_t *ns)
{
	struct md_state s;
	uint64_t avail, budget, stored, n_chunks, max_chunk, raw = 0, t0 = 0, t1;
	uint8_t *buf = NULL;
	pthread_t *th = NULL;
	unsigned started = 0;
	uint32_t n_layers;
	int rc;

	if (!pk || !raw_bytes || !ns)
		return -EINVAL;
	*raw_bytes = *ns = 0;
	/* The stored bytes are held in memory at once: at most a quarter of
	 * what this process may use, so that measuring never pushes the
	 * machine into swap or the OOM killer. */
	avail = wspi_memory_available(NULL);
	budget = avail ? avail / 4 : UINT64_MAX;
	if (limit)
		budget = WSP_MIN(budget, limit);
	n_layers = pick_layers(&pk->m, budget, &stored, &n_chunks, &max_chunk);
	if (!n_chunks)
		return 0;   /* nothing stored: nothing to decode */

	memset(&s, 0, sizeof(s));
	s.pk = pk;
	s.n_jobs = n_chunks;
	s.max_chunk_raw = max_chunk;
	s.dest_bytes = WSP_MAX(DEST_BYTES, max_chunk);
	atomic_init(&s.next, 0);
	atomic_init(&s.bad_job, UINT64_MAX);
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.cond, NULL);
	if (n_chunks > SIZE_MAX / sizeof(*s.jobs) ||
	    !(s.jobs = malloc(n_chunks * sizeof(*s.jobs))) || !(buf = malloc(stored ? stored : 1))) {
		rc = WSP_ERR(&pk->err, -ENOMEM, "measure decode: out of memory for %llu stored bytes",
			     (unsigned long long)stored);
		goto out;
	}
	rc = load_stored(pk, n_layers, buf, s.jobs, &raw);
	if (rc < 0)
		goto out;

	threads = worker_count(threads, n_chunks, s.dest_bytes, avail);
	if (!(th = calloc(threads, sizeof(*th)))) {
		rc = WSP_ERR(&pk->err, -ENOMEM, "measure decode: out of memory");
		goto out;
	}
	for (; started < threads; started++) {
		int e = pthread_create(&th[started], NULL, md_worker, &s);
		if (e) {
			md_fail(&s, 0, -e, "measure decode: cannot start a worker thread");
			break;
		}
	}
	/* The clock starts once every worker has its decoder and destination. */
	pthread_mutex_lock(&s.mu);
	while (s.ready < started)
		pthread_cond_wait(&s.cond, &s.mu);
	if (s.rc < 0)
		atomic_store(&s.next, UINT64_MAX / 2);   /* set-up failed: workers stop at once */
	t0 = wspi_now_ns();
	s.go = 1;
	pthread_cond_broadcast(&s.cond);
	pthread_mutex_unlock(&s.mu);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	t1 = wspi_now_ns();
	rc = s.rc;
	if (rc == 0) {
		*raw_bytes = raw;
		*ns = t1 > t0 ? t1 - t0 : 1;
	}
out:
	free(th);
	free(buf);
	free(s.jobs);
	pthread_cond_destroy(&s.cond);
	pthread_mutex_destroy(&s.mu);
	return rc;
}
