/* The output directory: an existing one is refused unless forced; force
 * replaces it completely; a failed or cancelled write leaves neither the
 * output nor a temporary directory behind. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack/writer.h"
#include "testlib.h"
#include "wspager.h"

/* Number of entries in dir (besides . and ..). */
static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	CHECK(d);
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static int cancel_at_half(void *ctx, uint64_t done, uint64_t total)
{
	int *calls = ctx;
	(*calls)++;
	CHECK(done <= total);
	return done * 2 >= total;
}

static int count_progress(void *ctx, uint64_t done, uint64_t total)
{
	uint64_t *last = ctx;
	CHECK(done >= *last && done <= total);
	*last = done;
	return 0;
}

/* Build a 2-layer pack of U64 tensors through the writer with `opt`. */
static int build(const char *out, struct wsp_convert_options *opt, struct wspi_err *err,
		 uint64_t fill)
{
	static uint64_t data[2][4096];
	struct pack_writer *pw;
	uint64_t shape = 4096;
	int rc;

	for (int i = 0; i < 4096; i++)
		data[0][i] = data[1][i] = fill + (uint64_t)i;
	rc = pack_writer_create(out, opt, &pw, err);
	if (rc < 0)
		return rc;
	if ((rc = pack_writer_add_tensor(pw, "layers.0.w", NULL, WSP_DTYPE_U64, 1, &shape, data[0],
					 sizeof(data[0]), 0, 0, 0)) == 0)
		rc = pack_writer_add_tensor(pw, "layers.1.w", NULL, WSP_DTYPE_U64, 1, &shape, data[1],
					    sizeof(data[1]), 0, 0, 0);
	if (rc == 0)
		rc = pack_writer_finish(pw);
	pack_writer_free(pw);
	return rc;
}

static uint64_t first_word(const char *pack)
{
	char msg[512];
	wsp_pack *pk;
	uint64_t buf[4096];
	CHECK_RC(wsp_pack_open(pack, &pk, msg, sizeof(msg)), 0);
	CHECK_RC(wsp_pack_read_layer(pk, 0, buf), 0);
	wsp_pack_close(pk);
	return buf[0];
}

int main(void)
{
	struct wsp_convert_options opt;
	struct wspi_err err;
	char out[700];
	const char *tmp = t_scratch("output");
	char top[600];

	snprintf(top, sizeof(top), "%s", tmp);
	snprintf(out, sizeof(out), "%s/pack", top);
	wspi_err_init(&err);
	wsp_convert_options_init(&opt);
	opt.chunk_bytes = 4096;
	uint64_t last = 0;
	opt.progress = count_progress;
	opt.progress_ctx = &last;
	CHECK_RC(build(out, &opt, &err, 100), 0);
	CHECK(last == 2 * 4096 * 8);
	CHECK(first_word(out) == 100);
	CHECK(count_entries(top) == 1);
	opt.progress = NULL;

	/* exists: refused, untouched */
	CHECK_RC(build(out, &opt, &err, 200), WSP_EEXIST);
	CHECK(strstr(err.msg, out));
	CHECK(first_word(out) == 100);
	/* also with a trailing slash */
	char slash[710];
	snprintf(slash, sizeof(slash), "%s/", out);
	CHECK_RC(build(slash, &opt, &err, 200), WSP_EEXIST);
	CHECK(count_entries(top) == 1);

	/* forced: replaced completely, nothing left beside it */
	opt.flags = WSP_CONVERT_FORCE;
	CHECK_RC(build(out, &opt, &err, 300), 0);
	CHECK(first_word(out) == 300);
	CHECK(count_entries(top) == 1);
	CHECK(count_entries(out) == 2);   /* manifest + one shard */

	/* forced over a plain file: not a previous output, refused and kept */
	char file[620];
	snprintf(file, sizeof(file), "%s/afile", top);
	int fd = open(file, O_CREAT | O_WRONLY, 0644);
	CHECK(fd >= 0);
	CHECK(write(fd, "keep", 4) == 4);
	close(fd);
	CHECK_RC(build(file, &opt, &err, 400), WSP_EEXIST);
	CHECK(strstr(err.msg, "not a pack"));
	struct stat fst;
	CHECK(stat(file, &fst) == 0 && S_ISREG(fst.st_mode) && fst.st_size == 4);
	CHECK(count_entries(top) == 2);
	t_rmrf(file);

	/* cancelled in the middle: the old output stays, no temporaries */
	int calls = 0;
	opt.progress = cancel_at_half;
	opt.progress_ctx = &calls;
	CHECK_RC(build(out, &opt, &err, 500), -ECANCELED);
	CHECK(calls >= 1);
	CHECK(first_word(out) == 300);
	CHECK(count_entries(top) == 1);
	/* ... and with no old output, nothing at all */
	t_rmrf(out);
	opt.flags = 0;
	CHECK_RC(build(out, &opt, &err, 500), -ECANCELED);
	CHECK(count_entries(top) == 0);
	opt.progress = NULL;

	/* an output location that cannot hold a directory fails at once */
	snprintf(file, sizeof(file), "%s/afile", top);
	fd = open(file, O_CREAT | O_WRONLY, 0644);
	close(fd);
	char below[700];
	snprintf(below, sizeof(below), "%s/sub/pack", file);
	CHECK_RC(build(below, &opt, &err, 1), -ENOTDIR);
	CHECK(strstr(err.msg, below));
	/* a read-only parent (meaningful when not root) */
	if (geteuid() != 0) {
		char ro[620];
		snprintf(ro, sizeof(ro), "%s/ro", top);
		CHECK(mkdir(ro, 0555) == 0);
		snprintf(below, sizeof(below), "%s/pack", ro);
		CHECK_RC(build(below, &opt, &err, 1), -EACCES);
		CHECK(count_entries(ro) == 0);
		rmdir(ro);
	}
	t_rmrf(file);
	CHECK(count_entries(top) == 0);

	/* bad options */
	opt.chunk_bytes = 1000;
	CHECK_RC(build(out, &opt, &err, 1), -EINVAL);
	CHECK(count_entries(top) == 0);
	wspi_err_destroy(&err);
	t_rmrf(top);
	return 0;
}
