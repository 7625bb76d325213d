/* File-system helpers of the pack area (see fsutil.h). */
#include <errno.h>
#include <fcntl.h>
#include <ctype.h>
#include <dirent.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fdio.h"
#include "common/outguard.h"
#include "pack/fsutil.h"
#include "pack/manifest.h"

int pack_fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0 && errno != EINVAL)
		rc = -errno;
	close(fd);
	return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) < 0 ? -1 : 0;
	return unlink(path) < 0 ? -1 : 0;
}

int pack_rmtree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 ? -errno : 0;
	return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0 ? -errno : 0;
}

int pack_make_tmpdir(const char *out, char **tmp, struct wspi_err *err)
{
	size_t n = strlen(out);
	char *t;

	while (n > 1 && out[n - 1] == '/')   /* "out/" names the same directory */
		n--;
	t = malloc(n + 16);
	if (!t)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	memcpy(t, out, n);
	strcpy(t + n, ".tmp-XXXXXX");
	if (!mkdtemp(t)) {
		int rc = -errno;
		free(t);
		return WSP_ERR(err, rc, "%.*s: cannot create a temporary directory beside it: %s",
			       (int)n, out, strerror(-rc));
	}
	/* mkdtemp makes it private; the output gets the modes the umask gives. */
	chmod(t, 0777 & ~out_umask());
	*tmp = t;
	return 0;
}

static int fsync_parent(const char *path)
{
	char *copy = strdup(path);
	int rc;

	if (!copy)
		return -ENOMEM;
	rc = pack_fsync_dir(dirname(copy));
	free(copy);
	return rc;
}

static int empty_tmp(int dfd, char *what, size_t wlen, const char *keep);

/* Write the signed lock file into the directory `dfd` (under "-new", then
 * renamed: a lock file that can be found holds the signature) and flock it;
 * its fd, or -errno. */
static int make_lock(int dfd)
{
	int fd = openat(dfd, PACK_TMP_LOCK "-new", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0 ||
	    fd_write_at(fd, PACK_TMP_SIGNATURE, strlen(PACK_TMP_SIGNATURE), 0) < 0 ||
	    renameat(dfd, PACK_TMP_LOCK "-new", dfd, PACK_TMP_LOCK) < 0) {
		int rc = -errno;
		unlinkat(dfd, PACK_TMP_LOCK "-new", 0);
		close(fd);
		return rc;
	}
	return fd;
}

/* Remove the directory `path` that make_lock marked, its lock file last:
 * a kill part-way leaves a directory the next run's cleanup recognizes
 * (pack_clean_stale_tmp).  Only regular files are removed. */
static void remove_marked(const char *path)
{
	char what[NAME_MAX + 1];
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return;
	if (empty_tmp(dfd, what, sizeof(what), PACK_TMP_LOCK) == 0)
		unlinkat(dfd, PACK_TMP_LOCK, 0);
	close(dfd);
	rmdir(path);
}

/* Mark the old output `out` as ours to remove (its lock file): where a kill
 * leaves it under a temporary name, the next run removes it (or puts it
 * back, see pack_clean_stale_tmp).  The lock's fd, or -errno. */
static int mark_old(const char *out)
{
	int dfd = open(out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), fd;
	if (dfd < 0)
		return -errno;
	fd = make_lock(dfd);
	close(dfd);
	return fd;
}

static void unmark_old(const char *dir, int lock_fd)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/%s", dir, PACK_TMP_LOCK) < (int)sizeof(path))
		unlink(path);
	close(lock_fd);
}

/* Where the file system cannot swap two names (no RENAME_EXCHANGE): the old
 * output, marked, goes aside as "<out>.old-XXXXXX", the new one takes its
 * name, the old is removed.  A kill between the two renames leaves no `out`
 * for a moment; the next run puts the old one back. */
static int replace_in_two(const char *tmp, const char *out, int lock_fd, struct wspi_err *err)
{
	size_t n = strlen(out);
	char *old = malloc(n + 16);
	int rc;

	if (!old)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	snprintf(old, n + 16, "%s.old-XXXXXX", out);
	if (!mkdtemp(old) || rmdir(old) < 0 || rename(out, old) < 0) {
		rc = -errno;
		unmark_old(out, lock_fd);
		free(old);
		return WSP_ERR(err, rc, "%s: cannot move the old output aside: %s", out,
			       strerror(-rc));
	}
	if (rename(tmp, out) < 0) {
		rc = -errno;
		if (rename(old, out) == 0) {
			unmark_old(out, lock_fd);
		} else {   /* left marked: the next run's cleanup puts it back */
			fprintf(stderr, "wspager: could not restore %s from %s\n", out, old);
			close(lock_fd);
		}
		free(old);
		return WSP_ERR(err, rc, "rename %s -> %s: %s", tmp, out, strerror(-rc));
	}
	fsync_parent(out);
	remove_marked(old);
	close(lock_fd);
	free(old);
	return 0;
}

int pack_commit_dir(const char *tmp, const char *out, int force, struct wspi_err *err)
{
	struct stat st;
	int rc, lock_fd;

	if ((rc = pack_fsync_dir(tmp)) < 0)
		return WSP_ERR(err, rc, "%s: fsync: %s", tmp, strerror(-rc));
	if (lstat(out, &st) < 0) {
		if (errno != ENOENT)
			return WSP_ERR(err, -errno, "%s: %s", out, strerror(errno));
		if (rename(tmp, out) < 0)
			return WSP_ERR(err, -errno, "rename %s -> %s: %s", tmp, out, strerror(errno));
		fsync_parent(out);
		return 0;
	}
	if (!force)
		return WSP_ERR(err, WSP_EEXIST, "%s exists (use force to replace it)", out);
	if ((lock_fd = mark_old(out)) < 0)
		return WSP_ERR(err, lock_fd, "%s: cannot mark the old output for removal: %s", out,
			       strerror(-lock_fd));
	/* One atomic swap: `out` is the old or the new output at every instant;
	 * the old one, now under the temporary's name, is removed after. */
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) == 0) {
		fsync_parent(out);
		remove_marked(tmp);
		close(lock_fd);
		return 0;
	}
	if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
		rc = -errno;
		unmark_old(out, lock_fd);
		return WSP_ERR(err, rc, "exchange %s and %s: %s", tmp, out, strerror(-rc));
	}
	return replace_in_two(tmp, out, lock_fd, err);
}

int pack_make_locked_tmpdir(const char *out, char **tmp, int *lock_fd, struct wspi_err *err)
{
	int dfd, fd = -1, rc = 0;

	*lock_fd = -1;
	WSP_TRY(pack_make_tmpdir(out, tmp, err));
	/* Made and locked under another name, then renamed: a lock file that
	 * can be found is one whose lock was taken, so a cleanup never takes
	 * the lock of a writer that has not locked it yet. */
	dfd = open(*tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		rc = -errno;
	else if ((fd = make_lock(dfd)) < 0)
		rc = fd;
	if (dfd >= 0)
		close(dfd);
	if (rc < 0) {
		WSP_ERR(err, rc, "%s: cannot lock the temporary directory: %s", *tmp, strerror(-rc));
		pack_rmtree(*tmp);
		free(*tmp);
		*tmp = NULL;
		return rc;
	}
	*lock_fd = fd;
	return 0;
}

int pack_commit_locked_dir(const char *tmp, const char *out, int force, struct wspi_err *err)
{
	char path[PATH_MAX];

	WSP_TRY(pack_commit_dir(tmp, out, force, err));
	/* Removed after the rename, not before: a kill in between leaves an
	 * empty stray file in a complete output rather than a temporary that
	 * no cleanup would recognize.  The lock stays held by the open fd. */
	if (snprintf(path, sizeof(path), "%s/%s", out, PACK_TMP_LOCK) < (int)sizeof(path) &&
	    unlink(path) == 0)
		pack_fsync_dir(out);
	return 0;
}

static void note(wsp_log_fn log, void *ctx, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void note(wsp_log_fn log, void *ctx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	wspi_vnotice(log, ctx, fmt, ap);
	va_end(ap);
}

/* "<base><tag>" (tag ".tmp-" or ".old-") and six characters of mkdtemp's
 * alphabet. */
static int is_tmp_name(const char *name, const char *base, size_t blen, const char *tag)
{
	if (strncmp(name, base, blen) || strncmp(name + blen, tag, 5))
		return 0;
	name += blen + 5;
	for (int i = 0; i < 6; i++)
		if (!isalnum((unsigned char)name[i]))
			return 0;
	return name[6] == '\0';
}

/* Empty the temporary `dfd` but for the entry `keep` (may be NULL) and
 * report what prevents it: 0, or -ENOTEMPTY naming in *what an entry that
 * is not a regular file (nothing is removed then), or -errno. */
static int empty_tmp(int dfd, char *what, size_t wlen, const char *keep)
{
	int fd = dup(dfd), rc = 0;
	struct dirent *e;
	struct stat st;
	DIR *d;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		rc = -errno;
		close(fd);
		return rc;
	}
	/* Checked first, so that a temporary holding anything unexpected is
	 * left whole for a person to look at. */
	for (int pass = 0; pass < 2 && rc == 0; pass++) {
		rewinddir(d);
		while (rc == 0 && (e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
			    (keep && !strcmp(e->d_name, keep)))
				continue;
			if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
				rc = -errno;
			} else if (!S_ISREG(st.st_mode)) {
				snprintf(what, wlen, "%s", e->d_name);
				rc = -ENOTEMPTY;
			} else if (pass == 1 && unlinkat(dfd, e->d_name, 0) < 0) {
				rc = -errno;
			}
		}
	}
	closedir(d);
	return rc;
}

static int is_our_lock(int fd)
{
	char buf[64];
	struct stat st;
	size_t n = strlen(PACK_TMP_SIGNATURE);
	ssize_t r;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != n)
		return 0;
	r = pread(fd, buf, n, 0);
	return r == (ssize_t)n && !memcmp(buf, PACK_TMP_SIGNATURE, n);
}

/* Entries of the directory `dfd` other than "." and ".." and `but`; -1 on
 * error. */
static int count_entries(int dfd, const char *but)
{
	int fd = dup(dfd), n = 0;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, but);
	closedir(d);
	return n;
}

/* A temporary killed while its lock file was being made: it holds only
 * "<lock>-new" (made and flocked before it is signed and renamed), which
 * no live writer holds.  1 removed, 0 left. */
static int clean_half_locked(int pfd, const char *name, const char *shown, size_t shown_len,
			     wsp_log_fn log, void *ctx)
{
	int dfd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), lfd, done = 0;
	if (dfd < 0)
		return 0;
	lfd = openat(dfd, PACK_TMP_LOCK "-new", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0 &&
	    count_entries(dfd, PACK_TMP_LOCK "-new") == 0 &&
	    unlinkat(dfd, PACK_TMP_LOCK "-new", 0) == 0 && unlinkat(pfd, name, AT_REMOVEDIR) == 0)
		done = 1;
	if (lfd >= 0)
		close(lfd);
	close(dfd);
	if (done)
		note(log, ctx, "removed the temporary %.*s%s left by an interrupted run",
		     (int)shown_len, shown, name);
	return done;
}

/* One candidate `name` in the directory `pfd`: 1 removed (or put back),
 * 0 left.  `restore`: the output's base name when `name` is an old output
 * moved aside ("<out>.old-XXXXXX"): put back if the output is missing. */
static int clean_one(int pfd, const char *name, const char *shown, size_t shown_len,
		     const char *restore, wsp_log_fn log, void *ctx)
{
	char what[NAME_MAX + 1] = "";
	int dfd, lfd, rc;

	/* O_NOFOLLOW | O_DIRECTORY: a symlink or anything but a directory is
	 * not ours to look into. */
	dfd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return 0;
	/* No lock file, or one that is not ours (a regular file holding our
	 * signature): some other program's directory, not a dead run of ours. */
	lfd = openat(dfd, PACK_TMP_LOCK, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (lfd < 0 && errno == ENOENT && !restore) {
		close(dfd);
		return clean_half_locked(pfd, name, shown, shown_len, log, ctx);
	}
	if (lfd < 0 || !is_our_lock(lfd)) {
		if (lfd >= 0)
			close(lfd);
		close(dfd);
		return 0;
	}
	if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
		rc = -errno;
		if (rc != -EWOULDBLOCK)   /* EWOULDBLOCK: a live writer holds it */
			note(log, ctx, "cannot lock %.*s%s/%s: %s", (int)shown_len, shown, name,
			     PACK_TMP_LOCK, strerror(-rc));
		close(lfd);
		close(dfd);
		return 0;
	}
	struct stat st;
	if (restore && fstatat(pfd, restore, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT) {
		/* killed between moving the old output aside and putting the new
		 * one in its place: the old one goes back */
		rc = renameat(pfd, name, pfd, restore) < 0 ? -errno : 0;
		if (rc == 0)
			unlinkat(dfd, PACK_TMP_LOCK, 0);
		close(lfd);
		close(dfd);
		if (rc < 0)
			note(log, ctx, "cannot put back %.*s%s as %.*s%s: %s", (int)shown_len, shown,
			     name, (int)shown_len, shown, restore, strerror(-rc));
		else
			note(log, ctx, "put back %.*s%s, left aside by an interrupted run, as "
			     "%.*s%s", (int)shown_len, shown, name, (int)shown_len, shown, restore);
		return rc == 0;
	}
	/* The lock file last: a kill part-way leaves it, and so a temporary
	 * the next run still recognizes. */
	rc = empty_tmp(dfd, what, sizeof(what), PACK_TMP_LOCK);
	if (rc == 0 && unlinkat(dfd, PACK_TMP_LOCK, 0) < 0)
		rc = -errno;
	if (rc == 0 && unlinkat(pfd, name, AT_REMOVEDIR) < 0)
		rc = -errno;
	close(lfd);
	close(dfd);
	if (rc == -ENOTEMPTY && *what)
		note(log, ctx, "kept the temporary %.*s%s left by an interrupted run: it holds %s, "
		     "which is not a regular file", (int)shown_len, shown, name, what);
	else if (rc < 0)
		note(log, ctx, "cannot remove the temporary %.*s%s left by an interrupted run: %s",
		     (int)shown_len, shown, name, strerror(-rc));
	else
		note(log, ctx, "removed the temporary %.*s%s left by an interrupted run",
		     (int)shown_len, shown, name);
	return rc == 0;
}

int pack_clean_stale_tmp(const char *out, wsp_log_fn log, void *log_ctx)
{
	size_t n = strlen(out), b;
	char parent[PATH_MAX];
	struct dirent *e;
	int pfd, removed = 0;
	DIR *d;

	while (n > 1 && out[n - 1] == '/')
		n--;
	for (b = n; b > 0 && out[b - 1] != '/'; b--)
		;
	if (b == n || n >= sizeof(parent))
		return 0;   /* no base name ("/"), or a path no temporary can have */
	if (b == 0)
		strcpy(parent, ".");
	else
		snprintf(parent, sizeof(parent), "%.*s", b > 1 ? (int)b - 1 : 1, out);
	pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0) {
		/* a missing parent fails the output's own creation, with its message */
		if (errno != ENOENT)
			note(log, log_ctx, "cannot look for stale temporaries in %s: %s", parent,
			     strerror(errno));
		return 0;
	}
	d = fdopendir(pfd);
	if (!d) {
		note(log, log_ctx, "cannot look for stale temporaries in %s: %s", parent,
		     strerror(errno));
		close(pfd);
		return 0;
	}
	while ((e = readdir(d)))
		if (is_tmp_name(e->d_name, out + b, n - b, ".tmp-"))
			removed += clean_one(pfd, e->d_name, out, b, NULL, log, log_ctx);
		else if (is_tmp_name(e->d_name, out + b, n - b, ".old-") && n - b < NAME_MAX) {
			char base[NAME_MAX + 1];
			snprintf(base, sizeof(base), "%.*s", (int)(n - b), out + b);
			removed += clean_one(pfd, e->d_name, out, b, base, log, log_ctx);
		}
	closedir(d);
	return removed;
}

/* Entries of a pack directory: the manifest, shard files, and the lock file
 * (or its "-new") that a kill between the commit and its removal, or while
 * a forced replace marks the old pack, can leave. */
static int pack_entry(void *ctx, const char *name, const struct stat *st)
{
	unsigned n;
	char tail;

	(void)ctx;
	if (!S_ISREG(st->st_mode))
		return 0;
	if (!strcmp(name, WSPM_FILE) || !strcmp(name, PACK_TMP_LOCK) ||
	    !strcmp(name, PACK_TMP_LOCK "-new"))
		return 1;
	return sscanf(name, "shard-%5u.wsd%c", &n, &tail) == 1 && strlen(name) == 15;
}

int pack_check_output(const char *out, int force, struct wspi_err *err)
{
	struct wspi_manifest m;
	struct stat st;
	int rc;

	WSP_TRY(out_check_replaceable(out, force, 0, pack_entry, NULL, "a pack", err));
	if (!force || lstat(out, &st) < 0 || !S_ISDIR(st.st_mode))
		return 0;
	/* Only shard-like names are there; unless it is empty, its manifest must
	 * also be valid, or the directory is something else that looks alike. */
	char probe[PATH_MAX];
	snprintf(probe, sizeof(probe), "%s/%s", out, WSPM_FILE);
	if (lstat(probe, &st) < 0) {
		DIR *d = opendir(out);
		struct dirent *e;
		int empty = 1;
		while (d && (e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				empty = 0;
		if (d)
			closedir(d);
		if (empty)
			return 0;
	}
	rc = wspm_map(out, &m, err);
	if (rc < 0) {
		wspi_err_prefix(err, "%s is not a pack that force may replace", out);
		return WSP_EEXIST;
	}
	wspm_unmap(&m);
	return 0;
}
