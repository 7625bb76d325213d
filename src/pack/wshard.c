/*
 * The writer's output stage: chunks are encoded on worker threads (one
 * chunk_encoder each) inside a bounded window, and the calling thread writes
 * them in pack order, so memory stays at window x chunk size whatever the
 * model size.  Then the manifest is written last.  With a feed
 * (pack_writer_set_feed) a thread of its own fills each slot's raw chunk in
 * pack order and the workers encode a chunk once it is whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fdio.h"
#include "common/util.h"
#include "pack/chunk.h"
#include "pack/fsutil.h"
#include "pack/writer_int.h"

struct slot {
	void *buf;
	void *raw;                 /* with a feed: the chunk's raw bytes */
	int done, rc;
};

struct pipe {
	struct pack_writer *pw;
	pthread_mutex_t mu;
	pthread_cond_t cv_work, cv_done;   /* cv_work also: a slot came free */
	uint64_t next, written, window;
	uint64_t filled, fill_pos; /* with a feed: chunks whole, bytes of the next */
	int stop, feed_rc;
	struct slot *slots;
	size_t bound;
};

/* The raw bytes of chunk k of tensor t: in memory, or read from its source
 * file into `rbuf` (a short read means the input changed: an error). */
static int chunk_raw(struct pack_writer *pw, const struct pw_tensor *t, uint64_t k, uint32_t len,
		     void *rbuf, const void **raw)
{
	uint64_t off = k * pw->opt.chunk_bytes, got = 0;
	const struct pw_source *s;
	int rc;

	if (t->data) {
		*raw = (const char *)t->data + off;
		return 0;
	}
	s = &pw->sources[t->source];
	rc = fd_read_at(s->fd, rbuf, len, s->data_offset + t->source_offset + off, &got);
	if (rc < 0)
		return wspi_err_set_first(pw->err, rc, "%s: tensor %s: %s at byte %llu", s->path,
					 t->name,
					 rc == WSP_EFORMAT ? "short read (the file changed while converting)"
							   : strerror(-rc),
					 (unsigned long long)(s->data_offset + t->source_offset + off + got));
	*raw = rbuf;
	return 0;
}

/* Encode chunk i into its slot and add its part of the tensor checksum. */
static int encode_one(struct pipe *p, struct chunk_encoder *enc, uint64_t i, void *buf, void *rbuf)
{
	struct pack_writer *pw = p->pw;
	struct pw_tensor *t = &pw->tensors[pw->chunk_tensor[i]];
	uint64_t k = i - t->first_chunk;
	struct wspm_chunk *c = &pw->chunks[i];
	const void *raw = NULL;
	int rc;

	if (pw->feed)
		raw = p->slots[i % p->window].raw;
	else
		WSP_TRY(chunk_raw(pw, t, k, c->raw_bytes, rbuf, &raw));
	__atomic_fetch_add(&t->checksum,
			   wspi_checksum64_part(raw, c->raw_bytes, k * pw->opt.chunk_bytes / 8),
			   __ATOMIC_RELAXED);
	rc = chunk_encode(enc, raw, c->raw_bytes, t->dtype, pw->opt.codec, pw->opt.transform, buf, c,
			  pw->err);
	if (rc < 0)
		wspi_err_prefix(pw->err, "tensor %s, chunk %llu", t->name, (unsigned long long)k);
	return rc;
}

static void *worker(void *arg)
{
	struct pipe *p = arg;
	struct chunk_encoder *enc = NULL;
	void *rbuf = malloc(p->pw->opt.chunk_bytes);
	int rc = chunk_encoder_create(p->pw->opt.level, p->pw->opt.chunk_bytes, &enc);

	if (rc < 0)
		wspi_err_set_first(p->pw->err, rc, "cannot create a chunk encoder");
	else
		chunk_encoder_set_top_bit(enc, !!(p->pw->opt.flags & WSP_CONVERT_SMALLEST));
	if (rc >= 0 && !rbuf)
		rc = wspi_err_set_first(p->pw->err, -ENOMEM, "out of memory for a chunk buffer");
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (!p->stop && p->next < p->pw->n_chunks &&
		       (p->next >= p->written + p->window || (p->pw->feed && p->next >= p->filled)))
			pthread_cond_wait(&p->cv_work, &p->mu);
		if (p->stop || p->next >= p->pw->n_chunks) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		uint64_t i = p->next++;
		struct slot *s = &p->slots[i % p->window];
		pthread_mutex_unlock(&p->mu);

		int r = rc < 0 ? rc : encode_one(p, enc, i, s->buf, rbuf);

		pthread_mutex_lock(&p->mu);
		s->rc = r;
		s->done = 1;
		pthread_cond_broadcast(&p->cv_done);
		pthread_mutex_unlock(&p->mu);
	}
	chunk_encoder_free(enc);
	free(rbuf);
	return NULL;
}

static int open_shard(struct pack_writer *pw, uint32_t shard, int *fd)
{
	char path[4096];
	uint64_t *sizes = realloc(pw->shard_size, (shard + 1) * sizeof(*sizes));

	if (!sizes)
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	pw->shard_size = sizes;
	sizes[shard] = 0;
	pw->n_shards = shard + 1;
	snprintf(path, sizeof(path), "%s/" WSPM_SHARD_FMT, pw->tmp, shard);
	*fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (*fd < 0)
		return WSP_ERR(pw->err, -errno, "%s: %s", path, strerror(errno));
	return 0;
}

/* Pad the shard to a multiple of 4096 and make it durable. */
static int close_shard(struct pack_writer *pw, uint32_t shard, int fd, uint64_t end)
{
	char path[4096];
	int rc = 0;

	pw->shard_size[shard] = wspi_align_up(end, WSP_ALIGN_DIRECT);
	if (ftruncate(fd, (off_t)pw->shard_size[shard]) < 0 || fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0) {
		snprintf(path, sizeof(path), "%s/" WSPM_SHARD_FMT, pw->tmp, shard);
		return WSP_ERR(pw->err, rc, "%s: %s", path, strerror(-rc));
	}
	return 0;
}

/* The consumer side: wait for chunk i, write it at *pos of the shard. */
static int write_chunk(struct pipe *p, uint64_t i, int fd, uint32_t shard, uint64_t *pos)
{
	struct pack_writer *pw = p->pw;
	struct slot *s = &p->slots[i % p->window];
	int rc;

	pthread_mutex_lock(&p->mu);
	while (!s->done && !p->stop)
		pthread_cond_wait(&p->cv_done, &p->mu);
	rc = s->done ? s->rc : p->feed_rc ? p->feed_rc : -ECANCELED;   /* the feed failed */
	pthread_mutex_unlock(&p->mu);
	if (rc < 0)
		return rc;
	pw->chunks[i].offset = *pos;
	rc = fd_write_at(fd, s->buf, pw->chunks[i].stored_bytes, *pos);
	if (rc < 0) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/" WSPM_SHARD_FMT, pw->tmp, shard);
		return WSP_ERR(pw->err, rc, "%s: write: %s", path, strerror(-rc));
	}
	*pos += pw->chunks[i].stored_bytes;
	pthread_mutex_lock(&p->mu);
	s->done = 0;
	p->written++;
	pthread_cond_broadcast(&p->cv_work);
	pthread_mutex_unlock(&p->mu);
	return 0;
}

static int write_layers(struct pipe *p)
{
	struct pack_writer *pw = p->pw;
	uint64_t pos = 0, done = 0, total = 0, ci = 0;
	uint32_t shard = 0;
	int fd = -1, rc = 0;

	for (uint32_t l = 0; l < pw->n_layers; l++)
		total += pw->layers[l].raw_chunk_bytes;
	for (uint32_t l = 0; l < pw->n_layers && rc == 0; l++) {
		struct pw_layer *L = &pw->layers[l];
		uint64_t start = wspi_align_up(pos, WSP_ALIGN_DIRECT);
		/* The stored size is known only after compression; the raw size
		 * bounds it (chunks that do not shrink are stored raw).  A layer
		 * is never split across shards. */
		if (fd < 0) {
			rc = open_shard(pw, shard, &fd);
			start = 0;
		} else if (start > 0 && start + L->raw_chunk_bytes > pw->opt.shard_bytes) {
			rc = close_shard(pw, shard, fd, pos);
			fd = -1;
			if (rc == 0)
				rc = open_shard(pw, ++shard, &fd);
			start = 0;
		}
		if (rc < 0)
			break;
		L->shard = shard;
		L->offset = start;
		pos = start;
		for (uint64_t k = 0; k < L->n_chunks && rc == 0; k++, ci++) {
			rc = write_chunk(p, ci, fd, shard, &pos);
			if (rc == 0 && pw->opt.progress) {
				done += pw->chunks[ci].raw_bytes;
				if (pw->opt.progress(pw->opt.progress_ctx, done, total))
					rc = WSP_ERR(pw->err, -ECANCELED, "conversion cancelled");
			}
		}
		L->stored_bytes = pos - start;
	}
	if (fd >= 0) {
		if (rc == 0)
			rc = close_shard(pw, shard, fd, pos);
		else
			close(fd);
	}
	return rc;
}

int pack_writer_push(struct pack_writer *pw, uint32_t tensor, uint64_t offset, const void *data,
		     uint64_t len)
{
	struct pipe *p = pw->pipe;
	const char *from = data;
	if (!p || tensor >= pw->n_tensors || offset > pw->tensors[tensor].bytes ||
	    len > pw->tensors[tensor].bytes - offset)
		return wspi_err_set_first(pw->err, -EINVAL, "pack_writer_push: no feed running, or "
					  "not a range of tensor %u", tensor);
	const struct pw_tensor *t = &pw->tensors[tensor];
	while (len > 0) {
		uint64_t j = t->first_chunk + offset / pw->opt.chunk_bytes;
		uint64_t within = offset % pw->opt.chunk_bytes;
		pthread_mutex_lock(&p->mu);
		while (!p->stop && j >= p->written + p->window)   /* its slot still in use */
			pthread_cond_wait(&p->cv_work, &p->mu);
		int stop = p->stop, in_order = j == p->filled && within == p->fill_pos;
		pthread_mutex_unlock(&p->mu);
		if (stop)
			return -ECANCELED;   /* the writer's own error is set */
		if (!in_order)
			return wspi_err_set_first(pw->err, WSP_ESTATE, "tensor %s: bytes from %llu "
						  "pushed out of the pack's order", t->name,
						  (unsigned long long)offset);
		uint64_t take = WSP_MIN(len, pw->chunks[j].raw_bytes - within);
		memcpy((char *)p->slots[j % p->window].raw + within, from, take);
		from += take;
		offset += take;
		len -= take;
		pthread_mutex_lock(&p->mu);
		p->fill_pos += take;
		if (p->fill_pos == pw->chunks[j].raw_bytes) {
			p->filled++;
			p->fill_pos = 0;
			pthread_cond_broadcast(&p->cv_work);
		}
		pthread_mutex_unlock(&p->mu);
	}
	return 0;
}

/* The feed's thread: a failure, or an end before every chunk is whole,
 * stops the pipe and the writer returns it. */
static void *feeder(void *arg)
{
	struct pipe *p = arg;
	struct pack_writer *pw = p->pw;
	int rc = pw->feed(pw->feed_ctx, pw);
	pthread_mutex_lock(&p->mu);
	if (rc == 0 && p->filled < pw->n_chunks)
		rc = wspi_err_set_first(pw->err, WSP_ESTATE, "the feed ended with %llu of %llu "
					"chunks given", (unsigned long long)p->filled,
					(unsigned long long)pw->n_chunks);
	if (rc < 0) {
		p->feed_rc = rc;
		p->stop = 1;
		pthread_cond_broadcast(&p->cv_work);
		pthread_cond_broadcast(&p->cv_done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int pw_write_shards(struct pack_writer *pw)
{
	struct pipe p;
	unsigned n_threads = pw->opt.threads, started = 0;
	pthread_t *th, feed_th;
	int rc = 0, feeding = 0;

	/* Chunks add their parts; an empty tensor's checksum stays 0, which
	 * is wsp_checksum64 of no bytes. */
	for (uint32_t i = 0; i < pw->n_tensors; i++)
		pw->tensors[i].checksum = 0;
	memset(&p, 0, sizeof(p));
	p.pw = pw;
	if (n_threads > pw->n_chunks)
		n_threads = pw->n_chunks ? (unsigned)pw->n_chunks : 1;
	p.window = 2ull * n_threads + 2;
	p.bound = chunk_encode_bound(pw->opt.chunk_bytes);
	p.slots = calloc(p.window, sizeof(*p.slots));
	th = calloc(n_threads, sizeof(*th));
	if (!p.slots || !th) {
		free(p.slots);
		free(th);
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	}
	for (uint64_t i = 0; i < p.window && rc == 0; i++)
		if (!(p.slots[i].buf = malloc(p.bound)) ||
		    (pw->feed && !(p.slots[i].raw = malloc(pw->opt.chunk_bytes))))
			rc = WSP_ERR(pw->err, -ENOMEM, "out of memory for chunk buffers");
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv_work, NULL);
	pthread_cond_init(&p.cv_done, NULL);
	for (unsigned i = 0; i < n_threads && rc == 0 && pw->n_chunks; i++, started++)
		if ((rc = -pthread_create(&th[i], NULL, worker, &p)) < 0)
			WSP_ERR(pw->err, rc, "cannot start a compression thread");
	pw->pipe = &p;
	if (rc == 0 && pw->feed) {
		if ((rc = -pthread_create(&feed_th, NULL, feeder, &p)) < 0)
			WSP_ERR(pw->err, rc, "cannot start the feed's thread");
		feeding = rc == 0;
	}
	if (rc == 0)
		rc = write_layers(&p);
	pthread_mutex_lock(&p.mu);
	p.stop = 1;
	pthread_cond_broadcast(&p.cv_work);
	pthread_mutex_unlock(&p.mu);
	if (feeding)
		pthread_join(feed_th, NULL);
	if (rc == 0 && p.feed_rc)   /* the feed failed after the last chunk */
		rc = p.feed_rc;
	pw->pipe = NULL;
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&p.mu);
	pthread_cond_destroy(&p.cv_work);
	pthread_cond_destroy(&p.cv_done);
	for (uint64_t i = 0; i < p.window; i++) {
		free(p.slots[i].buf);
		free(p.slots[i].raw);
	}
	free(p.slots);
	free(th);
	return rc;
}
