/*
 * safetensors header parser.
 *
 * Everything in a header is untrusted: the length prefix is bounded before
 * anything is allocated, jansson does the JSON (strict UTF-8, duplicate keys
 * rejected), and every size goes through checked arithmetic.  The rules are
 * those of the reference implementation (huggingface/safetensors,
 * Metadata::validate): the header starts with '{' and may be padded with
 * trailing spaces; tensors sorted by offsets must cover the data section
 * exactly, without gap or overlap; each byte range equals shape x dtype size;
 * __metadata__ maps strings to strings.  A header that parses is safe to use.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "common/fdio.h"
#include "safetensors/safetensors.h"

/* Names in messages are cut so that the file name always fits. */
#define NM "%.160s"

static uint64_t get_le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* configure refuses big-endian hosts; this guards builds that bypass it. */
static int host_is_big_endian(void)
{
	const union {
		uint32_t u;
		unsigned char c[4];
	} probe = {.u = 1};
	return probe.c[0] != 1;
}

void st_file_free(struct st_file *f)
{
	if (!f)
		return;
	if (f->tensors)
		for (uint32_t i = 0; i < f->n_tensors; i++)
			free(f->tensors[i].name);
	free(f->tensors);
	free(f->header);
	free(f->metadata_json);
	free(f->path);
	memset(f, 0, sizeof(*f));
}

/* A non-negative JSON integer, as the reference's usize fields require. */
static int get_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int parse_metadata(const char *path, json_t *meta, struct st_file *out, struct wspi_err *err)
{
	if (!json_is_object(meta))
		return WSP_ERR(err, WSP_EFORMAT, "%s: __metadata__ is not an object", path);
	const char *key;
	json_t *val;
	json_object_foreach (meta, key, val)
		if (!json_is_string(val))
			return WSP_ERR(err, WSP_EFORMAT,
				       "%s: __metadata__ value of '" NM "' is not a string", path, key);
	out->metadata_json = json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!out->metadata_json)
		return WSP_ERR(err, -ENOMEM, "%s: out of memory", path);
	return 0;
}

static int parse_tensor(const char *path, const char *name, size_t name_len, json_t *info,
			uint64_t data_size, struct st_tensor *t, struct wspi_err *err)
{
	if (name_len == 0)
		return WSP_ERR(err, WSP_EFORMAT, "%s: a tensor has an empty name", path);
	if (name_len > ST_MAX_NAME)
		return WSP_ERR(err, WSP_EFORMAT, "%s: tensor name of %zu bytes (limit %d): '%.60s...'",
			       path, name_len, ST_MAX_NAME, name);
	if (memchr(name, '\0', name_len))
		return WSP_ERR(err, WSP_EFORMAT, "%s: tensor name '" NM "' contains a NUL byte", path,
			       name);
	if (!json_is_object(info))
		return WSP_ERR(err, WSP_EFORMAT, "%s: tensor '" NM "': entry is not an object", path,
			       name);
	json_t *dt = json_object_get(info, "dtype");
	json_t *shape = json_object_get(info, "shape");
	json_t *offs = json_object_get(info, "data_offsets");
	if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
		return WSP_ERR(err, WSP_EFORMAT,
			       "%s: tensor '" NM "': needs string dtype, array shape and data_offsets",
			       path, name);
	int dtype = wsp_dtype_from_name(json_string_value(dt));
	if (dtype < 0)
		return WSP_ERR(err, WSP_EDTYPE, "%s: tensor '" NM "': unknown dtype '%.40s'", path, name,
			       json_string_value(dt));
	size_t rank = json_array_size(shape);
	if (rank > WSP_MAX_RANK)
		return WSP_ERR(err, WSP_ETOOBIG, "%s: tensor '" NM "': rank %zu above the limit %d",
			       path, name, rank, WSP_MAX_RANK);
	for (size_t i = 0; i < rank; i++)
		if (get_u64(json_array_get(shape, i), &t->shape[i]))
			return WSP_ERR(err, WSP_EFORMAT,
				       "%s: tensor '" NM "': shape[%zu] is not a non-negative integer",
				       path, name, i);
	if (json_array_size(offs) != 2 || get_u64(json_array_get(offs, 0), &t->begin) ||
	    get_u64(json_array_get(offs, 1), &t->end))
		return WSP_ERR(err, WSP_EFORMAT,
			       "%s: tensor '" NM "': data_offsets is not two non-negative integers",
			       path, name);
	if (t->end < t->begin)
		return WSP_ERR(err, WSP_EFORMAT,
			       "%s: tensor '" NM "': data_offsets reversed [%llu, %llu]", path, name,
			       (unsigned long long)t->begin, (unsigned long long)t->end);
	if (data_size != UINT64_MAX && t->end > data_size)
		return WSP_ERR(err, WSP_EFORMAT,
			       "%s: tensor '" NM "': data_offsets end %llu past the data section (%llu bytes)",
			       path, name, (unsigned long long)t->end, (unsigned long long)data_size);
	uint64_t bytes;
	int rc = wspi_tensor_bytes(dtype, (unsigned)rank, t->shape, &bytes);
	if (rc == WSP_ETOOBIG)
		return WSP_ERR(err, WSP_ETOOBIG, "%s: tensor '" NM "': shape x dtype size overflows",
			       path, name);
	if (rc < 0)
		return WSP_ERR(err, rc, "%s: tensor '" NM "': %s elements do not fill whole bytes",
			       path, name, json_string_value(dt));
	if (bytes != t->end - t->begin)
		return WSP_ERR(err, WSP_EFORMAT,
			       "%s: tensor '" NM "': data_offsets hold %llu bytes, shape x dtype is %llu",
			       path, name, (unsigned long long)(t->end - t->begin),
			       (unsigned long long)bytes);
	t->dtype = dtype;
	t->rank = (unsigned)rank;
	t->name = strndup(name, name_len);
	if (!t->name)
		return WSP_ERR(err, -ENOMEM, "%s: out of memory", path);
	return 0;
}

static int cmp_offsets(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return x->key_order < y->key_order ? -1 : x->key_order > y->key_order;
}

/* Sorted by offsets, the ranges must tile [0, data_size) exactly (the
 * reference's rule).  Empty tensors take no room and may share an offset. */
static int check_layout(const char *path, struct st_file *f, uint64_t data_size,
			struct wspi_err *err)
{
	qsort(f->tensors, f->n_tensors, sizeof(*f->tensors), cmp_offsets);
	uint64_t pos = 0;
	for (uint32_t i = 0; i < f->n_tensors; i++) {
		const struct st_tensor *t = &f->tensors[i];
		if (t->begin < pos)
			return WSP_ERR(err, WSP_EFORMAT,
				       "%s: tensor '" NM "': bytes [%llu, %llu) overlap the previous tensor '" NM "'",
				       path, t->name, (unsigned long long)t->begin,
				       (unsigned long long)t->end, f->tensors[i - 1].name);
		if (t->begin > pos)
			return WSP_ERR(err, WSP_EFORMAT,
				       "%s: tensor '" NM "': gap of %llu bytes before its data at %llu",
				       path, t->name, (unsigned long long)(t->begin - pos),
				       (unsigned long long)t->begin);
		pos = t->end;
	}
	if (data_size != UINT64_MAX && pos != data_size)
		return WSP_ERR(err, WSP_EFORMAT,
			       "%s: %llu trailing bytes after the last tensor's data",
			       path, (unsigned long long)(data_size - pos));
	return 0;
}

/*
 * The number of members of the top-level object, counted without parsing:
 * commas at depth 1 outside strings, plus one when it has any member.  For
 * valid JSON this is exactly the key count, so refusing above the cap never
 * refuses a header that jansson would accept under it; for invalid JSON the
 * count is meaningless but the header is refused either way.  It lets the
 * tensor-count cap act before jansson builds a tree of about 20 bytes per
 * header byte (a 56 MB header of 2^20+2 tensors took 1.1 GB of RSS).
 * *escapes is set when a string holds a backslash escape.
 */
static size_t count_members(const char *s, size_t n, int *escapes)
{
	size_t depth = 0, commas = 0;
	int in_str = 0, any = 0;

	*escapes = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (in_str) {
			if (c == '\\') {
				*escapes = 1;
				i++;    /* the escaped character cannot end the string */
			} else if (c == '"')
				in_str = 0;
			continue;
		}
		switch (c) {
		case '"':
			in_str = 1;
			any |= depth == 1;
			break;
		case '{':
		case '[':
			depth++;
			break;
		case '}':
		case ']':
			if (depth)
				depth--;
			break;
		case ',':
			commas += depth == 1;
			break;
		}
	}
	return any ? commas + 1 : 0;
}

static int parse_json(const char *path, struct st_file *out, uint64_t data_size,
		      struct wspi_err *err)
{
	/* The reference (0.4+) requires '{' first; leading whitespace is not a header. */
	if (out->header_len == 0 || out->header[0] != '{')
		return WSP_ERR(err, WSP_EFORMAT, "%s: header does not start with '{'", path);
	/* The checks made after parsing below, made first.  One member may be
	 * __metadata__, unless the text shows it is not there: without escapes
	 * that key can only be written as "__metadata__". */
	int escapes;
	size_t n_members = count_members(out->header, out->header_len, &escapes);
	size_t limit = (size_t)ST_MAX_TENSORS + 1;
	if (!escapes && !memmem(out->header, out->header_len, "\"__metadata__\"", 14))
		limit = ST_MAX_TENSORS;
	if (n_members > limit)
		return WSP_ERR(err, WSP_ETOOBIG, "%s: %zu tensors, above the limit %u", path,
			       n_members, ST_MAX_TENSORS);
	json_error_t jerr;
	json_t *root = json_loadb(out->header, out->header_len,
				  JSON_REJECT_DUPLICATES | JSON_PRESERVE_ORDER, &jerr);
	if (!root)
		return WSP_ERR(err, WSP_EFORMAT, "%s: header is not valid JSON (line %d column %d): %s",
			       path, jerr.line, jerr.column, jerr.text);
	int rc = 0;
	if (!json_is_object(root)) {
		rc = WSP_ERR(err, WSP_EFORMAT, "%s: header is not a JSON object", path);
		goto out;
	}
	size_t n_keys = json_object_size(root);
	if (n_keys > (size_t)ST_MAX_TENSORS + 1) {
		rc = WSP_ERR(err, WSP_ETOOBIG, "%s: %zu tensors, above the limit %u", path, n_keys,
			     ST_MAX_TENSORS);
		goto out;
	}
	out->tensors = calloc(n_keys ? n_keys : 1, sizeof(*out->tensors));
	if (!out->tensors) {
		rc = WSP_ERR(err, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	/* jansson iterates objects in insertion order, i.e. header text order. */
	for (void *it = json_object_iter(root); it; it = json_object_iter_next(root, it)) {
		const char *key = json_object_iter_key(it);
		size_t key_len = json_object_iter_key_len(it);
		json_t *val = json_object_iter_value(it);
		if (key_len == 12 && memcmp(key, "__metadata__", 12) == 0) {
			rc = parse_metadata(path, val, out, err);
		} else {
			struct st_tensor *t = &out->tensors[out->n_tensors];
			t->key_order = out->n_tensors;
			rc = parse_tensor(path, key, key_len, val, data_size, t, err);
			if (rc == 0)
				out->n_tensors++;
		}
		if (rc < 0)
			goto out;
	}
	if (out->n_tensors > ST_MAX_TENSORS) {
		rc = WSP_ERR(err, WSP_ETOOBIG, "%s: %u tensors, above the limit %u", path,
			     out->n_tensors, ST_MAX_TENSORS);
		goto out;
	}
	rc = check_layout(path, out, data_size, err);
out:
	json_decref(root);
	/* (the pager checks a pack's headers at open) */
	wspi_release_after_json(out->header_len);
	return rc;
}

int st_parse_named(const char *path, const void *buf, uint64_t len, uint64_t file_size,
		   struct st_file *out, struct wspi_err *err)
{
	memset(out, 0, sizeof(*out));
	if (!path)
		path = "<buffer>";
	if (host_is_big_endian())
		return WSP_ERR(err, WSP_EBIGENDIAN, "%s: safetensors files are little-endian; "
			       "this big-endian host is not supported", path);
	if (len < 8 || (file_size != UINT64_MAX && file_size < 8))
		return WSP_ERR(err, WSP_EFORMAT, "%s: file too short for a safetensors header", path);
	uint64_t n = get_le64(buf), stop;
	if (n > ST_MAX_HEADER)
		return WSP_ERR(err, WSP_ETOOBIG, "%s: header length %llu above the limit %llu", path,
			       (unsigned long long)n, (unsigned long long)ST_MAX_HEADER);
	if (ckd_add(&stop, n, 8) || (file_size != UINT64_MAX && stop > file_size))
		return WSP_ERR(err, WSP_EFORMAT, "%s: header length %llu larger than the file (%llu bytes)",
			       path, (unsigned long long)n, (unsigned long long)file_size);
	if (stop > len)
		return WSP_ERR(err, WSP_EFORMAT, "%s: header truncated: %llu of %llu bytes", path,
			       (unsigned long long)(len - 8), (unsigned long long)n);
	uint64_t data_size = file_size == UINT64_MAX ? UINT64_MAX : file_size - stop;

	int rc = -ENOMEM;
	out->path = strdup(path);
	out->header = malloc(n + 1);
	if (!out->path || !out->header) {
		WSP_ERR(err, rc, "%s: out of memory", path);
		goto fail;
	}
	memcpy(out->header, (const unsigned char *)buf + 8, n);
	out->header[n] = '\0';
	out->header_len = n;
	out->file_size = file_size;
	rc = parse_json(path, out, data_size, err);
	if (rc < 0)
		goto fail;
	return 0;
fail:
	st_file_free(out);
	return rc;
}

int st_parse(const void *buf, uint64_t len, uint64_t file_size, struct st_file *out,
	     struct wspi_err *err)
{
	return st_parse_named(NULL, buf, len, file_size, out, err);
}

/* Reads exactly len bytes at off: a short read is an error, never a short buffer. */
static int read_full(int fd, const char *path, void *buf, uint64_t len, uint64_t off,
		     struct wspi_err *err)
{
	int rc = fd_read_at(fd, buf, len, off, NULL);
	if (rc == WSP_EFORMAT)
		return WSP_ERR(err, rc, "%s: file truncated while reading the header", path);
	if (rc < 0)
		return WSP_ERR(err, rc, "%s: read: %s", path, strerror(-rc));
	return 0;
}

int st_open(const char *path, struct st_file *out, struct wspi_err *err)
{
	memset(out, 0, sizeof(*out));
	int fd = wspi_open_regular(path, O_RDONLY, err);
	if (fd < 0)
		return fd;
	struct stat st;
	unsigned char prefix[8], *buf = NULL;
	int rc;
	if (fstat(fd, &st) != 0) {
		rc = WSP_ERR(err, -errno, "%s: stat: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = WSP_ERR(err, -EINVAL, "%s: not a regular file", path);
		goto out;
	}
	uint64_t size = (uint64_t)st.st_size;
	if (size < 8) {
		rc = WSP_ERR(err, WSP_EFORMAT, "%s: file too short for a safetensors header", path);
		goto out;
	}
	rc = read_full(fd, path, prefix, 8, 0, err);
	if (rc < 0)
		goto out;
	/* Bound the length before allocating: st_parse repeats the checks. */
	uint64_t n = get_le64(prefix);
	if (n > ST_MAX_HEADER || n > size - 8) {
		const char *kind = st_foreign_file(path);
		if (kind)
			rc = WSP_ERR(err, WSP_EFORMAT, "%s: not a safetensors file: this is %s", path,
				     kind);
		else
			rc = st_parse_named(path, prefix, 8, size, out, err);
		goto out;
	}
	buf = malloc(n + 8);
	if (!buf) {
		rc = WSP_ERR(err, -ENOMEM, "%s: out of memory for a %llu-byte header", path,
			     (unsigned long long)n);
		goto out;
	}
	memcpy(buf, prefix, 8);
	rc = read_full(fd, path, buf + 8, n, 8, err);
	if (rc == 0)
		rc = st_parse_named(path, buf, n + 8, size, out, err);
out:
	free(buf);
	close(fd);
	return rc;
}
