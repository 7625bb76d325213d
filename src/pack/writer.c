/*
 * Pack writer: collects tensor declarations, then in pack_writer_finish()
 * groups them into layers (layout.c), compresses chunks on worker threads
 * and writes shards in order with a bounded window of chunks in flight,
 * writes the manifest last, and commits the temporary directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "pack/fsutil.h"
#include "pack/writer_int.h"

#define DEFAULT_CHUNK (4ull << 20)
#define DEFAULT_SHARD (4ull << 30)

/* The defaults live beside the writer that applies them (convert.c only
 * calls into the writer). */
void wsp_convert_options_init(struct wsp_convert_options *opt)
{
	if (!opt)
		return;
	memset(opt, 0, sizeof(*opt));   /* progress and log: NULL, none */
	opt->level = 1;
	opt->chunk_bytes = DEFAULT_CHUNK;
	opt->shard_bytes = DEFAULT_SHARD;
	opt->codec = WSP_CODEC_AUTO;   /* exprans, or zstd where clearly smaller */
	opt->transform = 1;
}

static int check_plain_name(struct pack_writer *pw, const char *what, const char *name)
{
	size_t n = strnlen(name, WSPM_MAX_NAME + 1);

	if (n == 0 || n > WSPM_MAX_NAME)
		return WSP_ERR(pw->err, WSP_EFORMAT, "%s name is empty or longer than %u bytes", what,
			       WSPM_MAX_NAME);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			return WSP_ERR(pw->err, WSP_EFORMAT, "%s \"%.64s\": control character in name",
				       what, name);
	return 0;
}

/* opt.layer_order into pw (the caller's strings live only during the call). */
static int copy_layer_order(struct pack_writer *pw, const char *const *names, struct wspi_err *err)
{
	uint32_t n = 0;
	while (names && names[n]) {
		if (++n == UINT32_MAX)
			return WSP_ERR(err, WSP_ETOOBIG, "layer_order: too many names");
	}
	if (!n)
		return 0;
	if (!(pw->layer_order = calloc(n, sizeof(*pw->layer_order))))
		return WSP_ERR(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		if (!(pw->layer_order[i] = strdup(names[i])))
			return WSP_ERR(err, -ENOMEM, "out of memory");
		pw->n_layer_order = i + 1;
	}
	return 0;
}

int pack_writer_create(const char *out_dir, const struct wsp_convert_options *opt,
		       struct pack_writer **out, struct wspi_err *err)
{
	struct wsp_convert_options defaults;
	struct pack_writer *pw;
	size_t n = strlen(out_dir);
	int rc;

	*out = NULL;
	if (!opt) {
		wsp_convert_options_init(&defaults);
		opt = &defaults;
	}
	if (opt->codec != WSP_CODEC_ZSTD && opt->codec != WSP_CODEC_RAW &&
	    opt->codec != WSP_CODEC_EXPRANS && opt->codec != WSP_CODEC_AUTO)
		return WSP_ERR(err, -EINVAL, "unknown codec %d", (int)opt->codec);
	if (opt->chunk_bytes && (opt->chunk_bytes % WSP_ALIGN_TENSOR || opt->chunk_bytes > (1ull << 30)))
		return WSP_ERR(err, -EINVAL, "chunk size %llu is not a multiple of %u up to 1 GiB",
			       (unsigned long long)opt->chunk_bytes, WSP_ALIGN_TENSOR);
	while (n > 1 && out_dir[n - 1] == '/')
		n--;
	if (n == 0)
		return WSP_ERR(err, -EINVAL, "empty output path");
	pw = calloc(1, sizeof(*pw));
	if (!pw || !(pw->out = strndup(out_dir, n))) {
		free(pw);
		return WSP_ERR(err, -ENOMEM, "out of memory");
	}
	pw->tmp_lock = -1;
	pw->err = err;
	pw->opt = *opt;
	pw->opt.group_regex = NULL;
	pw->opt.progress = opt->progress;
	if (!pw->opt.chunk_bytes)
		pw->opt.chunk_bytes = DEFAULT_CHUNK;
	if (!pw->opt.shard_bytes)
		pw->opt.shard_bytes = DEFAULT_SHARD;
	if (!pw->opt.threads)
		pw->opt.threads = wspi_cpu_count();
	pw->opt.group_map = NULL;   /* the caller's strings: only through pw->map */
	pw->opt.layer_order = NULL;   /* ...and through pw->layer_order */
	if ((rc = copy_layer_order(pw, opt->layer_order, err)) < 0) {
		pack_writer_free(pw);
		return rc;
	}
	if (opt->group_map && (rc = pack_group_map_build(opt->group_map, &pw->map, &pw->n_map,
							  err)) < 0) {
		pack_writer_free(pw);
		return rc;
	}
	if (opt->group_regex) {
		rc = pack_group_compile(opt->group_regex, &pw->re, err);
		if (rc < 0) {
			pack_writer_free(pw);
			return rc;
		}
		pw->has_re = 1;
	}
	rc = pack_check_output(pw->out, !!(opt->flags & WSP_CONVERT_FORCE), err);
	if (rc < 0) {
		pack_writer_free(pw);
		return rc;
	}
	/* Temporaries of killed runs would otherwise stay forever. */
	pack_clean_stale_tmp(pw->out, opt->log, opt->log_ctx);
	/* The temporary directory is made now so that an unwritable output
	 * location fails before any work is done. */
	rc = pack_make_locked_tmpdir(pw->out, &pw->tmp, &pw->tmp_lock, err);
	if (rc < 0) {
		pack_writer_free(pw);
		return rc;
	}
	*out = pw;
	return 0;
}

int pack_writer_add_source(struct pack_writer *pw, const char *file_name, const char *header,
			   uint64_t header_len, uint64_t data_bytes)
{
	struct pw_source *s;

	if (pw->finishing)
		return WSP_ERR(pw->err, WSP_ESTATE, "source %s: the pack is already written", file_name);
	WSP_TRY(check_plain_name(pw, "source", file_name));
	if (strchr(file_name, '/'))
		return WSP_ERR(pw->err, WSP_EFORMAT, "source \"%s\": not a plain file name", file_name);
	if (pw->n_sources >= UINT32_MAX - 1)
		return WSP_ERR(pw->err, WSP_ETOOBIG, "too many source files");
	if (wspi_grow((void **)&pw->sources, &pw->cap_sources, pw->n_sources + 1, sizeof(*s), 8) < 0)
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	s = &pw->sources[pw->n_sources];
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->name = strdup(file_name);
	s->header = malloc(header_len ? header_len : 1);
	if (!s->name || !s->header) {
		free(s->name);
		free(s->header);
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	}
	if (header_len)
		memcpy(s->header, header, header_len);
	s->header_len = header_len;
	s->data_bytes = data_bytes;
	return (int)pw->n_sources++;
}

int pack_writer_set_source_file(struct pack_writer *pw, uint32_t source, int fd, const char *path,
				uint64_t data_offset)
{
	char *copy;

	if (source >= pw->n_sources || fd < 0)
		return WSP_ERR(pw->err, -EINVAL, "no source %u or no file descriptor", source);
	copy = strdup(path);
	if (!copy)
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	free(pw->sources[source].path);
	pw->sources[source].path = copy;
	pw->sources[source].fd = fd;
	pw->sources[source].data_offset = data_offset;
	return 0;
}

int pack_writer_set_feed(struct pack_writer *pw, pack_writer_feed_fn feed, void *ctx)
{
	if (pw->finishing || pw->n_tensors)
		return WSP_ERR(pw->err, WSP_ESTATE, "a feed is set before any tensor");
	pw->feed = feed;
	pw->feed_ctx = ctx;
	return 0;
}

int pack_writer_set_index(struct pack_writer *pw, const char *json, uint64_t len)
{
	char *copy = malloc(len ? len : 1);

	if (!copy)
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	if (len)
		memcpy(copy, json, len);
	free(pw->index_json);
	pw->index_json = copy;
	pw->index_len = len;
	pw->has_index = 1;
	return 0;
}

int pack_writer_add_tensor(struct pack_writer *pw, const char *name, const char *layer, int dtype,
			   unsigned rank, const uint64_t *shape, const void *data, uint64_t bytes,
			   uint32_t source, uint64_t source_offset, uint32_t source_order)
{
	char group[WSPM_MAX_NAME + 1];
	struct pw_tensor *t;
	uint64_t want, end;
	int rc, short_off;

	if (pw->finishing)
		return WSP_ERR(pw->err, WSP_ESTATE, "tensor %s: the pack is already written", name);
	WSP_TRY(check_plain_name(pw, "tensor", name));
	if (dtype < 0 || dtype >= WSP_DTYPE_COUNT)
		return WSP_ERR(pw->err, WSP_EDTYPE, "tensor %s: unknown dtype %d", name, dtype);
	if (rank > WSP_MAX_RANK)
		return WSP_ERR(pw->err, WSP_ETOOBIG, "tensor %s: rank %u above %u", name, rank,
			       WSP_MAX_RANK);
	rc = wspi_tensor_bytes(dtype, rank, shape, &want);
	if (rc < 0 || want != bytes)
		return WSP_ERR(pw->err, rc < 0 ? rc : WSP_EFORMAT,
			       "tensor %s: %llu bytes given, shape and dtype give %s%llu", name,
			       (unsigned long long)bytes, rc < 0 ? "no valid size " : "",
			       (unsigned long long)(rc < 0 ? 0 : want));
	if (pw->n_sources == 0) {
		source = WSPM_NO_SOURCE;
	} else if (source >= pw->n_sources || ckd_add(&end, source_offset, bytes) ||
		   end > pw->sources[source].data_bytes) {
		return WSP_ERR(pw->err, WSP_EFORMAT, "tensor %s: source %u range [%llu, +%llu) invalid",
			       name, source, (unsigned long long)source_offset,
			       (unsigned long long)bytes);
	}
	if (!data && bytes && !pw->feed && (source == WSPM_NO_SOURCE || pw->sources[source].fd < 0))
		return WSP_ERR(pw->err, -EINVAL, "tensor %s: no data and no source file to read it from",
			       name);
	uint32_t map_rank = UINT32_MAX, map_pos = UINT32_MAX;
	if (!layer && pw->map) {
		const struct group_map_entry *e = pack_group_map_find(pw->map, pw->n_map, name);
		if (e) {
			layer = e->layer;
			map_rank = e->rank;
			map_pos = e->pos;
		}
	}
	if (layer) {
		if (strlen(layer) > WSPM_MAX_NAME)
			return WSP_ERR(pw->err, WSP_ETOOBIG, "tensor %s: layer name too long", name);
		strcpy(group, layer);
		size_t g = strlen(group);
		short_off = !strncmp(name, group, g) && name[g] == '.' && name[g + 1] ? (int)g + 1 : 0;
	} else {
		short_off = pack_group_name_re(name, pw->has_re ? &pw->re : NULL, group, sizeof(group));
		if (short_off < 0)
			return WSP_ERR(pw->err, short_off, "tensor %s: cannot derive its layer name", name);
	}
	WSP_TRY(check_plain_name(pw, "layer", group));
	if (pw->n_tensors >= UINT32_MAX - 1)
		return WSP_ERR(pw->err, WSP_ETOOBIG, "too many tensors");
	if (wspi_grow((void **)&pw->tensors, &pw->cap_tensors, pw->n_tensors + 1, sizeof(*t), 64) < 0)
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	t = &pw->tensors[pw->n_tensors];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	t->group = strdup(group);
	if (!t->name || !t->group) {
		free(t->name);
		free(t->group);
		return WSP_ERR(pw->err, -ENOMEM, "out of memory");
	}
	t->short_off = (uint32_t)short_off;
	t->map_rank = map_rank;
	t->map_pos = map_pos;
	t->dtype = dtype;
	t->rank = rank;
	for (unsigned i = 0; i < rank; i++)
		t->shape[i] = shape[i];
	t->data = data;
	t->bytes = bytes;
	t->source = source;
	t->source_offset = source_offset;
	t->source_order = source_order;
	pw->n_tensors++;
	return 0;
}

void pack_writer_free(struct pack_writer *pw)
{
	if (!pw)
		return;
	if (pw->tmp)
		pack_rmtree(pw->tmp);   /* nothing half-written stays behind */
	if (pw->tmp_lock >= 0)
		close(pw->tmp_lock);    /* after the removal, which it protects */
	for (uint32_t i = 0; i < pw->n_sources; i++) {
		free(pw->sources[i].name);
		free(pw->sources[i].header);
		free(pw->sources[i].path);
	}
	for (uint32_t i = 0; i < pw->n_tensors; i++) {
		free(pw->tensors[i].name);
		free(pw->tensors[i].group);
	}
	if (pw->has_re)
		regfree(&pw->re);
	free(pw->map);
	for (uint32_t i = 0; i < pw->n_layer_order; i++)
		free(pw->layer_order[i]);
	free(pw->layer_order);
	free(pw->sources);
	free(pw->tensors);
	free(pw->index_json);
	free(pw->layers);
	free(pw->order);
	free(pw->chunks);
	free(pw->chunk_tensor);
	free(pw->shard_size);
	free(pw->tmp);
	free(pw->out);
	free(pw);
}

int pack_writer_finish(struct pack_writer *pw)
{
	int rc;

	if (pw->finishing)
		return WSP_ERR(pw->err, WSP_ESTATE, "pack writer already finished");
	pw->finishing = 1;
	rc = pw_layout(pw);
	if (rc == 0)
		rc = pw_write_shards(pw);
	if (rc == 0)
		rc = pw_write_manifest(pw);
	if (rc == 0)
		rc = pack_commit_locked_dir(pw->tmp, pw->out, !!(pw->opt.flags & WSP_CONVERT_FORCE),
					    pw->err);
	if (rc < 0)
		return rc;   /* pack_writer_free removes the temporary directory */
	free(pw->tmp);
	pw->tmp = NULL;
	return 0;
}
