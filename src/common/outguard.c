/* What an output path may be (see outguard.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/outguard.h"

/* Deeper than any real tree; bounds the walk on a looping file system. */
#define WALK_MAX_DEPTH 4096

/* The last component of `path`, trailing slashes ignored, into buf. */
static void last_component(const char *path, char *buf, size_t len)
{
	size_t n = strlen(path), b;

	while (n > 1 && path[n - 1] == '/')
		n--;
	for (b = n; b > 0 && path[b - 1] != '/'; b--)
		;
	snprintf(buf, len, "%.*s", (int)(n - b), path + b);
}

/* An O_PATH descriptor of `path`, or of its nearest existing ancestor when
 * it does not exist yet (what it will lie in).  -errno on failure. */
static int open_nearest(const char *path)
{
	char *p = strdup(path);
	int fd = -ENOMEM;

	if (!p)
		return -ENOMEM;
	for (;;) {
		fd = open(*p ? p : ".", O_PATH | O_CLOEXEC);
		if (fd >= 0 || errno != ENOENT)
			break;
		char *slash = strrchr(p, '/');
		while (slash && slash > p && slash[1] == '\0') {   /* "a/b/" */
			*slash = '\0';
			slash = strrchr(p, '/');
		}
		if (!slash)
			*p = '\0';            /* relative: the working directory */
		else if (slash == p)
			p[1] = '\0';          /* "/x": the root */
		else
			*slash = '\0';
	}
	if (fd < 0)
		fd = -errno;
	free(p);
	return fd;
}

/* 1 when (dev, ino) is the object `fd` or one of its ancestors; takes `fd`.
 * Walks ".." rather than comparing path strings, so that every name a tree
 * can be reached by gives the same answer. */
static int lies_within(int fd, dev_t dev, ino_t ino)
{
	struct stat st, up;
	int found = 0;

	for (int depth = 0; depth < WALK_MAX_DEPTH; depth++) {
		if (fstat(fd, &st) < 0)
			break;
		if (st.st_dev == dev && st.st_ino == ino) {
			found = 1;
			break;
		}
		int parent = S_ISDIR(st.st_mode) ? openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC)
						 : -1;
		if (parent < 0 || fstat(parent, &up) < 0 ||
		    (up.st_dev == st.st_dev && up.st_ino == st.st_ino)) {   /* the root */
			if (parent >= 0)
				close(parent);
			break;
		}
		close(fd);
		fd = parent;
	}
	close(fd);
	return found;
}

/* Whether `path` (or where it would be created) lies within `st`'s object. */
static int path_within(const char *path, const struct stat *st)
{
	struct stat own;
	int fd = open_nearest(path);

	if (fd < 0)
		return 0;
	if (fstat(fd, &own) == 0 && !S_ISDIR(own.st_mode)) {
		/* a file: itself, then the directory that holds it */
		close(fd);
		if (own.st_dev == st->st_dev && own.st_ino == st->st_ino)
			return 1;
		char *dir = strdup(path);
		if (!dir)
			return 0;
		fd = open_nearest(dirname(dir));
		free(dir);
		if (fd < 0)
			return 0;
	}
	return lies_within(fd, st->st_dev, st->st_ino);
}

int out_check_inputs(const char *out, const char *const *inputs, size_t n_inputs,
		     struct wspi_err *err)
{
	char last[256];
	struct stat ost, ist;
	int out_exists;

	last_component(out, last, sizeof(last));
	if (!*out || !strcmp(last, ".") || !strcmp(last, "..") || !strcmp(last, "/") || !*last)
		return WSP_ERR(err, -EINVAL, "output %s: give a new name, not an existing directory "
			       "such as \".\", \"..\" or \"/\"", *out ? out : "\"\"");
	out_exists = stat(out, &ost) == 0;
	/* A file of the parent directory that a symlink `out` points to is an
	 * input too: stat follows it, as the writers' rename would not; the
	 * stricter reading is the safe one. */
	for (size_t i = 0; i < n_inputs; i++) {
		const char *in = inputs[i];
		if (!in || stat(in, &ist) < 0)
			continue;   /* a missing input fails with its own message */
		if (out_exists && ost.st_dev == ist.st_dev && ost.st_ino == ist.st_ino)
			return WSP_ERR(err, -EINVAL, "output %s is the input %s", out, in);
		if (S_ISDIR(ist.st_mode) && path_within(out, &ist))
			return WSP_ERR(err, -EINVAL, "output %s lies inside the input %s", out, in);
		if (out_exists && S_ISDIR(ost.st_mode) && path_within(in, &ost))
			return WSP_ERR(err, -EINVAL, "output %s contains the input %s", out, in);
	}
	return 0;
}

int out_checkpoint_entry(void *ctx, const char *name, const struct stat *st)
{
	size_t n = strlen(name);

	(void)ctx;
	if (!S_ISREG(st->st_mode))
		return 0;
	return !strcmp(name, "model.safetensors.index.json") ||
	       (n > 12 && !strcmp(name + n - 12, ".safetensors"));
}

/* Append `name` to the list of unexpected entries (a few are enough). */
static void list_add(char *list, size_t len, int *count, const char *name)
{
	size_t used = strlen(list);

	if (++*count > 4) {
		if (*count == 5 && used + 5 < len)
			strcat(list, ", ...");
		return;
	}
	snprintf(list + used, len - used, "%s\"%.64s\"", used ? ", " : "", name);
}

int out_check_replaceable(const char *out, int force, int file_ok, out_entry_fn entry_ok,
			  void *ctx, const char *kind, struct wspi_err *err)
{
	char list[400] = "", last[256];
	struct dirent *e;
	struct stat st;
	int count = 0, fd;
	DIR *d;

	if (lstat(out, &st) < 0)
		return errno == ENOENT ? 0 : WSP_ERR(err, -errno, "%s: %s", out, strerror(errno));
	if (!force)
		return WSP_ERR(err, WSP_EEXIST, "%s exists (use force to replace it)", out);
	if (!S_ISDIR(st.st_mode)) {
		last_component(out, last, sizeof(last));
		if (file_ok && entry_ok(ctx, last, &st))
			return 0;
		return WSP_ERR(err, WSP_EEXIST, "%s is not %s; force replaces only a previous "
			       "output, so remove it yourself if it must go", out, kind);
	}
	fd = open(out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || !(d = fdopendir(fd))) {
		int rc = -errno;
		if (fd >= 0)
			close(fd);
		return WSP_ERR(err, rc, "%s: %s", out, strerror(-rc));
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !entry_ok(ctx, e->d_name, &st))
			list_add(list, sizeof(list), &count, e->d_name);
	}
	closedir(d);
	if (count)
		return WSP_ERR(err, WSP_EEXIST, "%s is not %s: it holds %s; force replaces only a "
			       "previous output, so remove it yourself if it must go", out, kind, list);
	return 0;
}

unsigned out_umask(void)
{
	char line[128];
	unsigned mask = 022;
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return mask;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Umask: %o", &mask) == 1)
			break;
	fclose(f);
	return mask & 0777;
}
