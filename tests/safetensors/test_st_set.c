/* RELIABILITY items 12 and 13: resolving a checkpoint made of several files.
 * Missing shards fail naming them; tensors and files the index does not name
 * are reported and the index is followed; a tensor in two files fails. */
#include <sys/stat.h>

#include "sthelp.h"

static struct wspi_err err;
static char notes[8192];

static void note(void *ctx, const char *msg)
{
	(void)ctx;
	strncat(notes, msg, sizeof(notes) - strlen(notes) - 2);
	strcat(notes, "\n");
}

/* A file of U8 tensors `names` (comma-separated), 2 bytes each. */
static void write_st(const char *dir, const char *file, const char *names)
{
	char hdr[4096] = "{", path[1024], list[1024];
	snprintf(list, sizeof(list), "%s", names);
	uint64_t off = 0;
	for (char *save, *n = strtok_r(list, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
		size_t k = strlen(hdr);
		snprintf(hdr + k, sizeof(hdr) - k,
			 "%s\"%s\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[%llu,%llu]}",
			 off ? "," : "", n, (unsigned long long)off, (unsigned long long)off + 2);
		off += 2;
	}
	strcat(hdr, "}");
	size_t len;
	unsigned char *b = st_image(hdr, strlen(hdr), off, &len);
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	FILE *fp = fopen(path, "wb");
	CHECK(fp && fwrite(b, 1, len, fp) == len && fclose(fp) == 0);
	free(b);
}

static void write_text(const char *dir, const char *file, const char *text)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	FILE *fp = fopen(path, "w");
	CHECK(fp && fputs(text, fp) >= 0 && fclose(fp) == 0);
}

static int open_dir(const char *dir, struct st_set *s)
{
	const char *in[] = {dir};
	notes[0] = '\0';
	wspi_err_clear(&err);
	return st_set_open(in, 1, s, note, NULL, &err);
}

static const char *mkdirs(const char *base, const char *name)
{
	static char d[8][1024];
	static int k;
	char *p = d[k++ % 8];
	snprintf(p, sizeof(d[0]), "%s/%s", base, name);
	CHECK(mkdir(p, 0755) == 0);
	return p;
}

#define INDEX(map) "{\"metadata\":{\"total_size\":8},\"weight_map\":{" map "}}"

int main(void)
{
	wspi_err_init(&err);
	const char *base = t_scratch("stset");
	struct st_set s;

	/* The ordinary sharded checkpoint. */
	const char *d = mkdirs(base, "ok");
	write_st(d, "model-00001-of-00002.safetensors", "a,b");
	write_st(d, "model-00002-of-00002.safetensors", "c");
	write_text(d, "model.safetensors.index.json",
		   INDEX("\"c\":\"model-00002-of-00002.safetensors\","
			 "\"a\":\"model-00001-of-00002.safetensors\","
			 "\"b\":\"model-00001-of-00002.safetensors\""));
	CHECK_RC(open_dir(d, &s), 0);
	CHECK(s.n_files == 2 && s.has_index && s.index_json && notes[0] == '\0');
	CHECK(strstr(s.files[0].path, "model-00001-of-00002.safetensors"));
	CHECK(s.files[0].n_tensors == 2 && s.files[1].n_tensors == 1);
	CHECK(s.index_len == strlen(s.index_json) && strstr(s.index_json, "weight_map"));
	st_set_free(&s);

	/* 12: a shard named in the index is missing. */
	d = mkdirs(base, "missing");
	write_st(d, "model-00001-of-00002.safetensors", "a");
	write_text(d, "model.safetensors.index.json",
		   INDEX("\"a\":\"model-00001-of-00002.safetensors\","
			 "\"b\":\"model-00002-of-00002.safetensors\""));
	CHECK_RC(open_dir(d, &s), -ENOENT);
	CHECK(strstr(err.msg, "model-00002-of-00002.safetensors"));
	CHECK(s.files == NULL && s.dir == NULL);

	/* 13: a tensor absent from the index and a stray file: reported, kept/ignored. */
	d = mkdirs(base, "orphans");
	write_st(d, "model-00001-of-00001.safetensors", "a,orphan_t");
	write_st(d, "extra.safetensors", "z");
	write_text(d, "model.safetensors.index.json",
		   INDEX("\"a\":\"model-00001-of-00001.safetensors\""));
	CHECK_RC(open_dir(d, &s), 0);
	CHECK(s.n_files == 1 && s.files[0].n_tensors == 2);
	CHECK(strstr(notes, "orphan_t"));
	CHECK(strstr(notes, "extra.safetensors"));
	st_set_free(&s);

	/* The index maps a tensor to a file that does not hold it. */
	d = mkdirs(base, "moved");
	write_st(d, "s1.safetensors", "a");
	write_st(d, "s2.safetensors", "b");
	write_text(d, "model.safetensors.index.json",
		   INDEX("\"a\":\"s2.safetensors\",\"b\":\"s1.safetensors\""));
	CHECK_RC(open_dir(d, &s), WSP_EFORMAT);
	CHECK(strstr(err.msg, "'a'") || strstr(err.msg, "'b'"));
	write_text(d, "model.safetensors.index.json",
		   INDEX("\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\",\"ghost\":\"s2.safetensors\""));
	CHECK_RC(open_dir(d, &s), WSP_EFORMAT);
	CHECK(strstr(err.msg, "'ghost'") && strstr(err.msg, "s2.safetensors"));

	/* A tensor in two files, with and without an index. */
	d = mkdirs(base, "dup");
	write_st(d, "s1.safetensors", "a,x");
	write_st(d, "s2.safetensors", "x");
	CHECK_RC(open_dir(d, &s), WSP_EFORMAT);
	CHECK(strstr(err.msg, "'x'") && strstr(err.msg, "s1.safetensors") &&
	      strstr(err.msg, "s2.safetensors"));
	write_text(d, "model.safetensors.index.json",
		   INDEX("\"a\":\"s1.safetensors\",\"x\":\"s1.safetensors\",\"x2\":\"s2.safetensors\""));
	CHECK_RC(open_dir(d, &s), WSP_EFORMAT);
	CHECK(strstr(err.msg, "s1.safetensors") && strstr(err.msg, "s2.safetensors"));

	/* A strict index: duplicate keys, no weight_map, a path instead of a name. */
	d = mkdirs(base, "badindex");
	write_st(d, "s1.safetensors", "a");
	write_text(d, "model.safetensors.index.json",
		   "{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s1.safetensors\"}}");
	CHECK_RC(open_dir(d, &s), WSP_EFORMAT);
	CHECK(strstr(err.msg, "model.safetensors.index.json"));
	write_text(d, "model.safetensors.index.json", "{\"metadata\":{}}");
	CHECK_RC(open_dir(d, &s), WSP_EFORMAT);
	write_text(d, "model.safetensors.index.json", "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}");
	CHECK_RC(open_dir(d, &s), WSP_EFORMAT);
	CHECK(strstr(err.msg, "'a'"));

	/* No index: model.safetensors alone wins; otherwise all files sorted. */
	d = mkdirs(base, "single");
	write_st(d, "model.safetensors", "a");
	write_st(d, "other.safetensors", "b");
	CHECK_RC(open_dir(d, &s), 0);
	CHECK(s.n_files == 1 && !s.has_index && strstr(notes, "other.safetensors"));
	st_set_free(&s);
	d = mkdirs(base, "sorted");
	write_st(d, "b.safetensors", "y");
	write_st(d, "a.safetensors", "x");
	CHECK_RC(open_dir(d, &s), 0);
	CHECK(s.n_files == 2 && strstr(s.files[0].path, "/a.safetensors"));
	st_set_free(&s);
	d = mkdirs(base, "empty");
	CHECK_RC(open_dir(d, &s), -ENOENT);
	CHECK(strstr(err.msg, d));

	/* A list of files: argument order; equal file names refused. */
	{
		char p1[1024], p2[1024], p3[1024];
		snprintf(p1, sizeof(p1), "%s/sorted/b.safetensors", base);
		snprintf(p2, sizeof(p2), "%s/sorted/a.safetensors", base);
		snprintf(p3, sizeof(p3), "%s/single/model.safetensors", base);
		const char *in[] = {p1, p2, p3};
		CHECK_RC(st_set_open(in, 3, &s, note, NULL, &err), 0);
		CHECK(s.n_files == 3 && !strcmp(s.files[0].path, p1) && !s.has_index);
		st_set_free(&s);
		snprintf(p2, sizeof(p2), "%s/dup/s1.safetensors", base);
		snprintf(p3, sizeof(p3), "%s/moved/s1.safetensors", base);
		const char *same[] = {p2, p3};
		CHECK_RC(st_set_open(same, 2, &s, note, NULL, &err), WSP_EFORMAT);
		const char *none[] = {"/nonexistent/x.safetensors"};
		CHECK_RC(st_set_open(none, 1, &s, NULL, NULL, &err), -ENOENT);
		CHECK(strstr(err.msg, "/nonexistent/x.safetensors"));
		CHECK_RC(st_set_open(none, 0, &s, NULL, NULL, &err), -EINVAL);
	}
	st_set_free(NULL);
	t_rmrf(base);
	wspi_err_destroy(&err);
	return 0;
}
