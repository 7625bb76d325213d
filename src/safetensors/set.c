/*
 * Checkpoint sets: which safetensors files make up one model.
 *
 * A directory with model.safetensors.index.json is read the way transformers
 * reads it: the index's weight_map names the shards.  Files are always kept
 * whole (the pack must unpack byte-identically), so tensors that the index
 * does not list, and shards it does not name, are reported but not dropped
 * or added: the index is followed.
 */
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "common/fdio.h"
#include "safetensors/safetensors.h"

#define INDEX_NAME "model.safetensors.index.json"
#define MAX_NOTICES 20   /* per kind; then one line with the count */

struct tensor_ref {
	const char *name;
	uint32_t file;
};

void st_set_free(struct st_set *s)
{
	if (!s)
		return;
	if (s->files)
		for (uint32_t i = 0; i < s->n_files; i++)
			st_file_free(&s->files[i]);
	free(s->files);
	free(s->dir);
	free(s->index_json);
	memset(s, 0, sizeof(*s));
}

static void say(void (*notice)(void *, const char *), void *ctx, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void say(void (*notice)(void *, const char *), void *ctx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	wspi_vnotice(notice, ctx, fmt, ap);
	va_end(ap);
}

static char *join(const char *dir, const char *name)
{
	char *p;
	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

static int is_regular(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int st_suffix(const struct dirent *d)
{
	size_t n = strlen(d->d_name);
	return d->d_name[0] != '.' && n > 12 && strcmp(d->d_name + n - 12, ".safetensors") == 0;
}

/* The *.safetensors names in `dir`, sorted; returns the count. */
static int list_dir(const char *dir, struct dirent ***names, struct wspi_err *err)
{
	int n = scandir(dir, names, st_suffix, alphasort);
	if (n < 0)
		return WSP_ERR(err, -errno, "%s: %s", dir, strerror(errno));
	return n;
}

static void free_list(struct dirent **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static int cmp_ref(const void *a, const void *b)
{
	const struct tensor_ref *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->file > y->file) - (x->file < y->file);
}

/* All tensors of the set sorted by name (for lookups); fails on a tensor
 * that two files hold. */
static int build_refs(struct st_set *s, struct tensor_ref **out, size_t *count,
		      struct wspi_err *err)
{
	size_t total = 0;
	for (uint32_t f = 0; f < s->n_files; f++)
		if (ckd_add(&total, total, (size_t)s->files[f].n_tensors))
			return WSP_ERR(err, WSP_ETOOBIG, "%s: too many tensors", s->dir);
	struct tensor_ref *refs = calloc(total ? total : 1, sizeof(*refs));
	if (!refs)
		return WSP_ERR(err, -ENOMEM, "%s: out of memory", s->dir);
	size_t k = 0;
	for (uint32_t f = 0; f < s->n_files; f++)
		for (uint32_t i = 0; i < s->files[f].n_tensors; i++)
			refs[k++] = (struct tensor_ref){s->files[f].tensors[i].name, f};
	qsort(refs, total, sizeof(*refs), cmp_ref);
	for (size_t i = 1; i < total; i++)
		if (strcmp(refs[i - 1].name, refs[i].name) == 0) {
			int rc = WSP_ERR(err, WSP_EFORMAT, "tensor '%.160s' is in both %s and %s",
					 refs[i].name, s->files[refs[i - 1].file].path,
					 s->files[refs[i].file].path);
			free(refs);
			return rc;
		}
	*out = refs;
	*count = total;
	return 0;
}

static int check_duplicates(struct st_set *s, struct wspi_err *err)
{
	struct tensor_ref *refs;
	size_t n;
	WSP_TRY(build_refs(s, &refs, &n, err));
	free(refs);
	return 0;
}

static int open_files(struct st_set *s, const char *dir, char *const *names, size_t n,
		      struct wspi_err *err)
{
	s->files = calloc(n ? n : 1, sizeof(*s->files));
	if (!s->files)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		char *path = dir ? join(dir, names[i]) : strdup(names[i]);
		if (!path)
			return WSP_ERR(err, -ENOMEM, "out of memory");
		int rc = st_open(path, &s->files[i], err);
		free(path);
		if (rc < 0)
			return rc;
		s->n_files++;
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads the whole index (bounded) and keeps it verbatim. */
static int read_index(struct st_set *s, const char *path, struct wspi_err *err)
{
	int fd = wspi_open_regular(path, O_RDONLY, err);
	if (fd < 0)
		return fd;
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) != 0) {
		rc = WSP_ERR(err, -errno, "%s: stat: %s", path, strerror(errno));
		goto out;
	}
	if ((uint64_t)st.st_size > ST_MAX_HEADER) {
		rc = WSP_ERR(err, WSP_ETOOBIG, "%s: index of %lld bytes above the limit", path,
			     (long long)st.st_size);
		goto out;
	}
	s->index_len = (uint64_t)st.st_size;
	s->index_json = malloc(s->index_len + 1);
	if (!s->index_json) {
		rc = WSP_ERR(err, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	rc = fd_read_at(fd, s->index_json, s->index_len, 0, NULL);
	if (rc < 0) {
		rc = rc == WSP_EFORMAT ? WSP_ERR(err, rc, "%s: truncated while reading", path)
				       : WSP_ERR(err, rc, "%s: read: %s", path, strerror(-rc));
		goto out;
	}
	s->index_json[s->index_len] = '\0';
out:
	close(fd);
	return rc;
}

/* Shard names come from an untrusted file: only plain names in the directory. */
static int valid_shard_name(const char *name)
{
	return *name && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

static int check_against_index(struct st_set *s, const char *ipath, json_t *wmap,
			       void (*notice)(void *, const char *), void *ctx,
			       struct wspi_err *err)
{
	struct tensor_ref *refs;
	size_t n_refs;
	WSP_TRY(build_refs(s, &refs, &n_refs, err));
	int rc = 0;
	const char *tname;
	json_t *val;
	json_object_foreach (wmap, tname, val) {
		struct tensor_ref key = {tname, 0}, *hit = NULL;
		/* Names are unique here: build_refs() refused duplicates. */
		for (size_t lo = 0, hi = n_refs; lo < hi;) {
			size_t mid = lo + (hi - lo) / 2;
			int c = strcmp(refs[mid].name, key.name);
			if (c == 0) {
				hit = &refs[mid];
				break;
			}
			if (c < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		const char *want = json_string_value(val);
		if (!hit) {
			rc = WSP_ERR(err, WSP_EFORMAT,
				     "%s: tensor '%.160s' is mapped to %s, which does not hold it",
				     ipath, tname, want);
			goto out;
		}
		const char *in = s->files[hit->file].path;
		const char *base = strrchr(in, '/');
		base = base ? base + 1 : in;
		if (strcmp(base, want) != 0) {
			rc = WSP_ERR(err, WSP_EFORMAT,
				     "%s: tensor '%.160s' is mapped to %s but found in %s", ipath,
				     tname, want, in);
			goto out;
		}
	}
	uint64_t orphans = 0;
	for (uint32_t f = 0; f < s->n_files; f++)
		for (uint32_t i = 0; i < s->files[f].n_tensors; i++) {
			const char *name = s->files[f].tensors[i].name;
			if (json_object_get(wmap, name))
				continue;
			if (orphans++ < MAX_NOTICES)
				say(notice, ctx, "%s: tensor '%.160s' is not in the index (kept)",
				    s->files[f].path, name);
		}
	if (orphans > MAX_NOTICES)
		say(notice, ctx, "%s: %llu tensors in all are not in the index (kept)", ipath,
		    (unsigned long long)orphans);
out:
	free(refs);
	return rc;
}

static int open_index(struct st_set *s, const char *ipath, void (*notice)(void *, const char *),
		      void *ctx, struct wspi_err *err)
{
	WSP_TRY(read_index(s, ipath, err));
	s->has_index = 1;
	json_error_t jerr;
	json_t *root = json_loadb(s->index_json, s->index_len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return WSP_ERR(err, WSP_EFORMAT, "%s: not valid JSON (line %d column %d): %s", ipath,
			       jerr.line, jerr.column, jerr.text);
	int rc = 0;
	char **shards = NULL;
	size_t n_shards = 0;
	struct dirent **names = NULL;
	int n_names = 0;
	json_t *wmap = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
	if (!json_is_object(wmap)) {
		rc = WSP_ERR(err, WSP_EFORMAT, "%s: no weight_map object", ipath);
		goto out;
	}
	shards = calloc(json_object_size(wmap) + 1, sizeof(*shards));
	if (!shards) {
		rc = WSP_ERR(err, -ENOMEM, "%s: out of memory", ipath);
		goto out;
	}
	const char *tname;
	json_t *val;
	json_object_foreach (wmap, tname, val) {
		if (!json_is_string(val) || !valid_shard_name(json_string_value(val))) {
			rc = WSP_ERR(err, WSP_EFORMAT,
				     "%s: tensor '%.160s' maps to something that is not a file name",
				     ipath, tname);
			goto out;
		}
		shards[n_shards++] = (char *)json_string_value(val);
	}
	qsort(shards, n_shards, sizeof(*shards), cmp_str);
	size_t u = 0;
	for (size_t i = 0; i < n_shards; i++)
		if (u == 0 || strcmp(shards[u - 1], shards[i]) != 0)
			shards[u++] = shards[i];
	n_shards = u;
	/* Fail fast on a missing shard, before reading any of them. */
	for (size_t i = 0; i < n_shards; i++) {
		char *p = join(s->dir, shards[i]);
		int ok = p && is_regular(p);
		free(p);
		if (!ok) {
			rc = WSP_ERR(err, -ENOENT, "%s: names shard %s, which is missing", ipath,
				     shards[i]);
			goto out;
		}
	}
	rc = open_files(s, s->dir, shards, n_shards, err);
	if (rc < 0)
		goto out;
	rc = check_against_index(s, ipath, wmap, notice, ctx, err);
	if (rc < 0)
		goto out;
	n_names = list_dir(s->dir, &names, err);
	if (n_names < 0) {
		rc = n_names;
		n_names = 0;
		goto out;
	}
	for (int i = 0; i < n_names; i++)
		if (!bsearch(&(const char *){names[i]->d_name}, shards, n_shards, sizeof(*shards),
			     cmp_str))
			say(notice, ctx, "%s/%s: not named in the index (ignored)", s->dir,
			    names[i]->d_name);
out:
	free_list(names, n_names);
	free(shards);
	json_decref(root);
	return rc;
}

/* A directory without safetensors: say what it holds instead, if it holds a
 * checkpoint of another format. */
static int no_safetensors(const char *dir, struct wspi_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[PATH_MAX];

	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.' || snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >=
						   (int)sizeof(path) || !is_regular(path))
			continue;
		const char *kind = st_foreign_file(path);
		if (kind && strstr(e->d_name, ".json") == NULL) {
			int rc = WSP_ERR(err, -ENOENT, "%s: no %s and no .safetensors files; %s is %s",
					 dir, INDEX_NAME, e->d_name, kind);
			closedir(d);
			return rc;
		}
	}
	if (d)
		closedir(d);
	return WSP_ERR(err, -ENOENT, "%s: no %s and no .safetensors files", dir, INDEX_NAME);
}

static int open_dir(struct st_set *s, const char *dir, void (*notice)(void *, const char *),
		    void *ctx, struct wspi_err *err)
{
	s->dir = strdup(dir);
	char *ipath = join(dir, INDEX_NAME), *single = join(dir, "model.safetensors");
	int rc = 0;
	struct dirent **names = NULL;
	int n_names = 0;
	if (!s->dir || !ipath || !single) {
		rc = WSP_ERR(err, -ENOMEM, "out of memory");
		goto out;
	}
	if (access(ipath, F_OK) == 0) {
		rc = open_index(s, ipath, notice, ctx, err);
		goto out;
	}
	n_names = list_dir(dir, &names, err);
	if (n_names < 0) {
		rc = n_names;
		n_names = 0;
		goto out;
	}
	if (is_regular(single)) {
		char *one = "model.safetensors";
		for (int i = 0; i < n_names; i++)
			if (strcmp(names[i]->d_name, one) != 0)
				say(notice, ctx, "%s/%s: ignored: the directory has model.safetensors",
				    dir, names[i]->d_name);
		rc = open_files(s, dir, &one, 1, err);
		goto out;
	}
	if (n_names == 0) {
		rc = no_safetensors(dir, err);
		goto out;
	}
	char **list = calloc((size_t)n_names, sizeof(*list));
	if (!list) {
		rc = WSP_ERR(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < n_names; i++)
		list[i] = names[i]->d_name;
	rc = open_files(s, dir, list, (size_t)n_names, err);
	free(list);
	if (rc == 0)
		rc = check_duplicates(s, err);
out:
	free_list(names, n_names);
	free(ipath);
	free(single);
	return rc;
}

static const char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');
	return b ? b + 1 : path;
}

/* Explicit files: their names must differ, since unpack writes them into one
 * directory. */
static int open_list(struct st_set *s, const char *const *inputs, size_t n, struct wspi_err *err)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < i; j++)
			if (strcmp(base_name(inputs[i]), base_name(inputs[j])) == 0)
				return WSP_ERR(err, WSP_EFORMAT, "%s and %s have the same file name",
					       inputs[j], inputs[i]);
	char *first = strdup(inputs[0]);
	if (!first)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	s->dir = strdup(dirname(first));
	free(first);
	if (!s->dir)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	WSP_TRY(open_files(s, NULL, (char *const *)inputs, n, err));
	return check_duplicates(s, err);
}

int st_set_open(const char *const *inputs, size_t n, struct st_set *out,
		void (*notice)(void *ctx, const char *msg), void *ctx, struct wspi_err *err)
{
	memset(out, 0, sizeof(*out));
	if (n == 0 || !inputs)
		return WSP_ERR(err, -EINVAL, "no input given");
	struct stat st;
	int rc;
	if (n == 1 && stat(inputs[0], &st) == 0 && S_ISDIR(st.st_mode))
		rc = open_dir(out, inputs[0], notice, ctx, err);
	else
		rc = open_list(out, inputs, n, err);
	if (rc < 0)
		st_set_free(out);
	return rc;
}
