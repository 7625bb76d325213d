/* File-system helpers of the pack area (see fsutil.h). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack/fsutil.h"

int pack_pwrite_full(int fd, const void *buf, uint64_t len, uint64_t off)
{
	const char *p = buf;

	while (len) {
		ssize_t w = pwrite(fd, p, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		p += w;
		off += (uint64_t)w;
		len -= (uint64_t)w;
	}
	return 0;
}

int pack_pread_full(int fd, void *buf, uint64_t len, uint64_t off, uint64_t *got)
{
	char *p = buf;
	uint64_t done = 0;

	while (done < len) {
		uint64_t want = len - done;
		ssize_t r = pread(fd, p + done, want > (1u << 30) ? (1u << 30) : want,
				  (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (got)
				*got = done;
			return r < 0 ? -errno : WSP_EFORMAT;
		}
		done += (uint64_t)r;
	}
	if (got)
		*got = done;
	return 0;
}

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

int pack_make_tmpdir(const char *out, char **tmp, struct wsp_err *err)
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

int pack_commit_dir(const char *tmp, const char *out, int force, struct wsp_err *err)
{
	struct stat st;
	char *old = NULL;
	int rc;

	if ((rc = pack_fsync_dir(tmp)) < 0)
		return WSP_ERR(err, rc, "%s: fsync: %s", tmp, strerror(-rc));
	if (lstat(out, &st) == 0) {
		if (!force)
			return WSP_ERR(err, WSP_EEXIST, "%s exists (use force to replace it)", out);
		/* Move the old output aside under a fresh name, so that the new
		 * one replaces it in one rename and the old is removed last. */
		size_t n = strlen(out);
		old = malloc(n + 16);
		if (!old)
			return WSP_ERR(err, -ENOMEM, "out of memory");
		snprintf(old, n + 16, "%s.old-XXXXXX", out);
		if (!mkdtemp(old) || rmdir(old) < 0 || rename(out, old) < 0) {
			rc = -errno;
			free(old);
			return WSP_ERR(err, rc, "%s: cannot move the old output aside: %s", out,
				       strerror(-rc));
		}
	} else if (errno != ENOENT) {
		rc = -errno;
		return WSP_ERR(err, rc, "%s: %s", out, strerror(-rc));
	}
	if (rename(tmp, out) < 0) {
		rc = -errno;
		if (old && rename(old, out) < 0)
			fprintf(stderr, "wspager: could not restore %s from %s\n", out, old);
		free(old);
		return WSP_ERR(err, rc, "rename %s -> %s: %s", tmp, out, strerror(-rc));
	}
	fsync_parent(out);
	if (old) {
		pack_rmtree(old);
		free(old);
	}
	return 0;
}
