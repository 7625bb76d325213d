/* pack_clean_stale_tmp removes the temporaries of dead writers and nothing
 * else: not one whose lock a live writer holds, not one without a lock file,
 * not one whose lock file lacks our signature (another program's),
 * not one holding anything but regular files, not what a symlink points to,
 * not names outside "<out>.tmp-XXXXXX".  And a committed output holds no
 * lock file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pack/fsutil.h"
#include "pack/manifest.h"
#include "pack/writer.h"
#include "testlib.h"
#include "wspager.h"

static char dir[512];
static char notes[8192];

static void log_cb(void *ctx, const char *message)
{
	(void)ctx;
	strncat(notes, message, sizeof(notes) - strlen(notes) - 2);
	strcat(notes, "\n");
}

static const char *at(const char *name)
{
	static char buf[4][1024];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

static int exists(const char *name)
{
	struct stat st;
	return lstat(at(name), &st) == 0;
}

static void put_file(const char *name, const char *text)
{
	int fd = open(at(name), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

/* A temporary as a writer leaves it: the lock file and a shard. */
static void fake_tmp(const char *name, int with_lock)
{
	char path[600];

	CHECK(mkdir(at(name), 0700) == 0);
	snprintf(path, sizeof(path), "%s/shard-00000.wsd", name);
	put_file(path, "partial shard");
	if (with_lock) {   /* 1: ours, 2: another program's file of that name */
		snprintf(path, sizeof(path), "%s/%s", name, PACK_TMP_LOCK);
		put_file(path, with_lock == 1 ? PACK_TMP_SIGNATURE : "");
	}
}

static void fakes_and_symlinks(const char *out)
{
	char path[600];
	int held;

	fake_tmp("out.wsp.tmp-AAAAAA", 1);   /* dead owner: removed */
	fake_tmp("out.wsp.tmp-BBBBBB", 1);   /* live owner: kept */
	fake_tmp("out.wsp.tmp-CCCCCC", 0);   /* no lock file: kept */
	fake_tmp("out.wsp.tmp-MMMMMM", 2);   /* a lock file not ours: kept */
	fake_tmp("out.wsp.tmp-EEEEEE", 1);   /* holds a directory: kept whole */
	snprintf(path, sizeof(path), "%s/sub", "out.wsp.tmp-EEEEEE");
	CHECK(mkdir(at(path), 0700) == 0);
	fake_tmp("other.tmp-FFFFFF", 1);     /* another output's */
	fake_tmp("out.wsp.tmp-GGGGGGG", 1);  /* not the pattern */
	fake_tmp("out.wsp.bak-HHHHHH", 1);   /* not the pattern */
	put_file("out.wsp.tmp-IIIIII", "");  /* a file named like one */
	/* A symlink named like a temporary, to a directory that looks stale. */
	fake_tmp("target", 1);
	CHECK(symlink("target", at("out.wsp.tmp-DDDDDD")) == 0);

	/* flock locks belong to the open file description: this one conflicts
	 * with the one the cleanup opens, as another process's would. */
	snprintf(path, sizeof(path), "out.wsp.tmp-BBBBBB/%s", PACK_TMP_LOCK);
	held = open(at(path), O_RDONLY | O_CLOEXEC);
	CHECK(held >= 0);
	CHECK(flock(held, LOCK_EX | LOCK_NB) == 0);

	notes[0] = '\0';
	CHECK_RC(pack_clean_stale_tmp(out, log_cb, NULL), 1);
	fprintf(stderr, "notes:\n%s", notes);
	CHECK(!exists("out.wsp.tmp-AAAAAA"));
	CHECK(strstr(notes, "removed the temporary") && strstr(notes, "out.wsp.tmp-AAAAAA"));
	CHECK(exists("out.wsp.tmp-BBBBBB/shard-00000.wsd"));
	CHECK(exists("out.wsp.tmp-CCCCCC/shard-00000.wsd"));
	CHECK(exists("out.wsp.tmp-MMMMMM/shard-00000.wsd"));
	CHECK(!strstr(notes, "MMMMMM"));
	CHECK(exists("out.wsp.tmp-EEEEEE/shard-00000.wsd"));
	CHECK(exists("out.wsp.tmp-EEEEEE/" PACK_TMP_LOCK));
	CHECK(strstr(notes, "kept the temporary") && strstr(notes, "out.wsp.tmp-EEEEEE") &&
	      strstr(notes, "sub"));
	CHECK(exists("other.tmp-FFFFFF/shard-00000.wsd"));
	CHECK(exists("out.wsp.tmp-GGGGGGG/shard-00000.wsd"));
	CHECK(exists("out.wsp.bak-HHHHHH/shard-00000.wsd"));
	CHECK(exists("out.wsp.tmp-IIIIII"));
	CHECK(exists("out.wsp.tmp-DDDDDD"));
	CHECK(exists("target/shard-00000.wsd") && exists("target/" PACK_TMP_LOCK));
	CHECK(!strstr(notes, "BBBBBB") && !strstr(notes, "CCCCCC") && !strstr(notes, "DDDDDD"));

	/* Released, it is stale like any other. */
	close(held);
	notes[0] = '\0';
	CHECK_RC(pack_clean_stale_tmp(out, log_cb, NULL), 1);
	CHECK(!exists("out.wsp.tmp-BBBBBB"));
	/* With a trailing slash, the output names the same directory. */
	fake_tmp("out.wsp.tmp-JJJJJJ", 1);
	char *slash = malloc(strlen(out) + 2);
	CHECK(slash);
	strcat(strcpy(slash, out), "/");
	CHECK_RC(pack_clean_stale_tmp(slash, NULL, NULL), 1);
	free(slash);
	CHECK(!exists("out.wsp.tmp-JJJJJJ"));
}

/* Old outputs moved aside by a forced replace ("<out>.old-XXXXXX", marked
 * with our lock): put back when the output is missing (a kill between the
 * two renames of the fallback), removed once it is there; never without
 * our lock, never while their lock is held. */
static void old_outputs(void)
{
	fake_tmp("p.wsp.old-NNNNNN", 1);
	notes[0] = '\0';
	CHECK_RC(pack_clean_stale_tmp(at("p.wsp"), log_cb, NULL), 1);
	CHECK(!exists("p.wsp.old-NNNNNN") && exists("p.wsp/shard-00000.wsd"));
	CHECK(!exists("p.wsp/" PACK_TMP_LOCK));
	CHECK(strstr(notes, "put back") && strstr(notes, "p.wsp.old-NNNNNN"));

	fake_tmp("p.wsp.old-OOOOOO", 1);      /* p.wsp is there now: removed */
	fake_tmp("p.wsp.old-QQQQQQ", 0);      /* not ours: kept */
	fake_tmp("q.wsp.old-RRRRRR", 1);      /* held by a live writer: kept */
	int held = open(at("q.wsp.old-RRRRRR/" PACK_TMP_LOCK), O_RDONLY | O_CLOEXEC);
	CHECK(held >= 0 && flock(held, LOCK_EX | LOCK_NB) == 0);
	CHECK_RC(pack_clean_stale_tmp(at("p.wsp"), log_cb, NULL), 1);
	CHECK_RC(pack_clean_stale_tmp(at("q.wsp"), log_cb, NULL), 0);
	CHECK(!exists("p.wsp.old-OOOOOO") && exists("p.wsp/shard-00000.wsd"));
	CHECK(exists("p.wsp.old-QQQQQQ/shard-00000.wsd"));
	CHECK(exists("q.wsp.old-RRRRRR/shard-00000.wsd") && !exists("q.wsp"));
	close(held);
}

/* A forced commit over an existing output swaps them in one step and leaves
 * nothing beside it: no temporary, no old output, no lock file. */
static void forced_commit(void)
{
	struct wspi_err err;
	char *tmp;
	int lock;

	wspi_err_init(&err);
	fake_tmp("f.wsp", 0);                 /* the old output */
	CHECK_RC(pack_make_locked_tmpdir(at("f.wsp"), &tmp, &lock, &err), 0);
	int fd = open(at("new-marker"), O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0);
	close(fd);
	char path[700];
	snprintf(path, sizeof(path), "%s/new-marker", tmp);
	CHECK(rename(at("new-marker"), path) == 0);
	CHECK_RC(pack_commit_locked_dir(tmp, at("f.wsp"), 1, &err), 0);
	close(lock);
	CHECK(exists("f.wsp/new-marker") && !exists("f.wsp/shard-00000.wsd"));
	CHECK(!exists("f.wsp/" PACK_TMP_LOCK) && access(tmp, F_OK) < 0);
	DIR *d = opendir(dir);
	struct dirent *e;
	CHECK(d);
	while ((e = readdir(d)))
		CHECK(strncmp(e->d_name, "f.wsp.", 6) != 0);
	closedir(d);
	free(tmp);
	wspi_err_destroy(&err);
}

/* The real lock: held while the writer lives, free once it is gone. */
static void real_writers(const char *out)
{
	char *tmp = NULL, name[600];
	struct wspi_err err;
	int lock, p[2], status;
	pid_t pid;

	wspi_err_init(&err);
	CHECK_RC(pack_make_locked_tmpdir(out, &tmp, &lock, &err), 0);
	CHECK(lock >= 0);
	CHECK_RC(pack_clean_stale_tmp(out, NULL, NULL), 0);
	CHECK(access(tmp, F_OK) == 0);

	/* A writer that dies without any cleanup of its own. */
	CHECK(pipe(p) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		char *t = NULL;
		int l;
		if (pack_make_locked_tmpdir(out, &t, &l, &err) < 0)
			_exit(2);
		if (write(p[1], t, strlen(t) + 1) < 0)
			_exit(2);
		_exit(0);
	}
	close(p[1]);
	memset(name, 0, sizeof(name));
	CHECK(read(p[0], name, sizeof(name) - 1) > 0);
	close(p[0]);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(access(name, F_OK) == 0);
	notes[0] = '\0';
	CHECK_RC(pack_clean_stale_tmp(out, log_cb, NULL), 1);
	CHECK(access(name, F_OK) < 0 && errno == ENOENT);
	CHECK(strstr(notes, name + strlen(dir) + 1));
	CHECK(access(tmp, F_OK) == 0);   /* ours, still held */

	CHECK(pack_rmtree(tmp) == 0);
	close(lock);
	free(tmp);
	wspi_err_destroy(&err);
}

/* A written pack has no lock file, and its writer leaves no temporary. */
static void committed(void)
{
	static const float v[4] = { 1, 2, 3, 4 };
	const uint64_t shape[1] = { 4 };
	struct pack_writer *pw;
	struct wspi_err err;

	wspi_err_init(&err);
	CHECK_RC(pack_writer_create(at("w.wsp"), NULL, &pw, &err), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "layers.0.w", NULL, WSP_DTYPE_F32, 1, shape, v,
					sizeof(v), 0, 0, 0), 0);
	CHECK_RC(pack_writer_finish(pw), 0);
	pack_writer_free(pw);
	CHECK(exists("w.wsp/" WSPM_FILE));
	CHECK(!exists("w.wsp/" PACK_TMP_LOCK));
	CHECK(!exists("w.wsp/" PACK_TMP_LOCK "-new"));
	wspi_err_destroy(&err);
}

/* wsp_convert and wsp_pack_unpack clean up beside their outputs, and say
 * so through the convert's log. */
static void through_the_api(void)
{
	static const char json[] = "{\"layers.0.w\":{\"dtype\":\"F32\",\"shape\":[2],"
				   "\"data_offsets\":[0,8]}}";
	char hdr[sizeof(json) + 8];
	uint64_t hl = (sizeof(json) - 1 + 7) / 8 * 8;   /* padded with spaces */
	const float v[2] = { 1, 2 };
	const char *inputs[1] = { NULL };
	struct wsp_convert_options opt;
	char msg[512], st[600], pk_dir[600];
	wsp_pack *pk;
	int fd;

	snprintf(st, sizeof(st), "%s", at("m.safetensors"));
	fd = open(st, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	memset(hdr, ' ', sizeof(hdr));
	memcpy(hdr, json, sizeof(json) - 1);
	CHECK(fd >= 0);
	CHECK(write(fd, &hl, 8) == 8 && write(fd, hdr, hl) == (ssize_t)hl);
	CHECK(write(fd, v, sizeof(v)) == (ssize_t)sizeof(v));
	close(fd);
	inputs[0] = st;

	fake_tmp("c.wsp.tmp-KKKKKK", 1);
	wsp_convert_options_init(&opt);
	opt.log = log_cb;
	notes[0] = '\0';
	snprintf(pk_dir, sizeof(pk_dir), "%s", at("c.wsp"));
	CHECK_RC(wsp_convert(inputs, 1, pk_dir, &opt, msg, sizeof(msg)), 0);
	CHECK(!exists("c.wsp.tmp-KKKKKK"));
	CHECK(strstr(notes, "removed the temporary") && strstr(notes, "c.wsp.tmp-KKKKKK"));
	CHECK(!exists("c.wsp/" PACK_TMP_LOCK));

	fake_tmp("u.tmp-LLLLLL", 1);
	CHECK_RC(wsp_pack_open(pk_dir, &pk, msg, sizeof(msg)), 0);
	CHECK_RC(wsp_pack_unpack(pk, at("u"), 0, NULL, NULL), 0);
	wsp_pack_close(pk);
	CHECK(!exists("u.tmp-LLLLLL"));
	CHECK(exists("u/m.safetensors") && !exists("u/" PACK_TMP_LOCK));
}

int main(void)
{
	snprintf(dir, sizeof(dir), "%s", t_scratch("stale"));
	char out[600];
	snprintf(out, sizeof(out), "%s", at("out.wsp"));   /* at()'s buffers are reused */
	fakes_and_symlinks(out);
	snprintf(out, sizeof(out), "%s", at("r.wsp"));
	real_writers(out);
	committed();
	old_outputs();
	forced_commit();
	through_the_api();
	t_rmrf(dir);
	return 0;
}
