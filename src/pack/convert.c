/*
 * wsp_convert: safetensors checkpoints -> pack.  The safetensors area
 * validates the inputs; this opens each file and hands its header and every
 * tensor to the pack writer, which preads the tensors' bytes while it
 * compresses (an input that shrinks meanwhile is an error, never SIGBUS).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/outguard.h"
#include "common/util.h"
#include "pack/writer.h"
#include "safetensors/safetensors.h"

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

static int open_input(const struct st_file *f, int *fd, struct wspi_err *err)
{
	struct stat st;

	*fd = wspi_open_regular(f->path, O_RDONLY, err);
	if (*fd < 0)
		return *fd;
	if (fstat(*fd, &st) < 0 || (uint64_t)st.st_size != f->file_size)
		return WSP_ERR(err, WSP_EFORMAT, "%s: changed size while converting", f->path);
	posix_fadvise(*fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	return 0;
}

static int add_file(struct pack_writer *pw, const struct st_set *set, uint32_t fi, int fd,
		    struct wspi_err *err)
{
	const struct st_file *f = &set->files[fi];
	uint64_t data_off = 8 + f->header_len;
	const char *name = base_name(f->path);
	int src, rc;

	/* unpack writes the sources into one directory: names must differ */
	for (uint32_t j = 0; j < fi; j++)
		if (!strcmp(base_name(set->files[j].path), name))
			return WSP_ERR(err, WSP_EFORMAT, "%s and %s have the same file name",
				       set->files[j].path, f->path);
	src = pack_writer_add_source(pw, name, f->header, f->header_len, f->file_size - data_off);
	if (src < 0) {
		wspi_err_prefix(err, "%s", f->path);
		return src;
	}
	rc = pack_writer_set_source_file(pw, (uint32_t)src, fd, f->path, data_off);
	if (rc < 0)
		return rc;
	for (uint32_t k = 0; k < f->n_tensors; k++) {
		const struct st_tensor *t = &f->tensors[k];
		rc = pack_writer_add_tensor(pw, t->name, NULL, t->dtype, t->rank, t->shape, NULL,
					    t->end - t->begin, (uint32_t)src, t->begin, t->key_order);
		if (rc < 0) {
			wspi_err_prefix(err, "%s", f->path);
			return rc;
		}
	}
	return 0;
}

int wsp_convert(const char *const *inputs, size_t n_inputs, const char *out,
		const struct wsp_convert_options *opt, char *errbuf, size_t errlen)
{
	struct wsp_convert_options defaults;
	struct wspi_err err;
	struct st_set set;
	struct pack_writer *pw = NULL;
	int *fds = NULL;
	int rc;

	wspi_err_init(&err);
	memset(&set, 0, sizeof(set));
	if (!opt) {
		wsp_convert_options_init(&defaults);
		opt = &defaults;
	}
	if (!inputs || !out) {
		rc = WSP_ERR(&err, -EINVAL, "convert: no %s given", out ? "inputs" : "output");
		goto out;
	}
	for (size_t i = 0; i < n_inputs; i++)
		if (!inputs[i]) {
			rc = WSP_ERR(&err, -EINVAL, "convert: input %zu is NULL", i);
			goto out;
		}
	for (size_t i = 0; i < WSP_ARRAY_SIZE(opt->reserved); i++)
		if (opt->reserved[i]) {
			rc = WSP_ERR(&err, -EINVAL, "wsp_convert_options: reserved fields are not "
				     "zero (fill the struct with wsp_convert_options_init)");
			goto out;
		}
	rc = out_check_inputs(out, inputs, n_inputs, &err);
	if (rc < 0)
		goto out;
	rc = st_set_open(inputs, n_inputs, &set, opt->log, opt->log_ctx, &err);
	if (rc < 0)
		goto out;
	rc = pack_writer_create(out, opt, &pw, &err);
	if (rc < 0)
		goto out;
	fds = malloc((set.n_files ? set.n_files : 1) * sizeof(*fds));
	if (!fds) {
		rc = WSP_ERR(&err, -ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < set.n_files; i++)
		fds[i] = -1;
	for (uint32_t i = 0; i < set.n_files && rc == 0; i++) {
		rc = open_input(&set.files[i], &fds[i], &err);
		if (rc == 0)
			rc = add_file(pw, &set, i, fds[i], &err);
	}
	if (rc == 0 && set.has_index && set.index_json)
		rc = pack_writer_set_index(pw, set.index_json, set.index_len);
	if (rc == 0)
		rc = pack_writer_finish(pw);
out:
	pack_writer_free(pw);
	for (uint32_t i = 0; fds && i < set.n_files; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
	st_set_free(&set);
	if (errbuf && errlen)
		wspi_err_copy(&err, errbuf, errlen);
	wspi_err_destroy(&err);
	return rc;
}
