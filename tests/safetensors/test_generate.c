/* The synthetic checkpoint generator: Llama names and shapes, realistic
 * value statistics, determinism, sharding with an index, and no output left
 * behind on refusal or cancellation. */
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

#include "sthelp.h"

static struct wspi_err err;

static void small(struct wsp_generate_options *o)
{
	wsp_generate_options_init(o);
	o->layers = 2;
	o->hidden = 64;
	o->intermediate = 160;
	o->vocab = 300;
	o->heads = 4;
	o->kv_heads = 2;
}

static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	CHECK(f);
	CHECK(fseek(f, 0, SEEK_END) == 0);
	*len = (size_t)ftell(f);
	rewind(f);
	unsigned char *b = malloc(*len + 1);
	CHECK(b && fread(b, 1, *len, f) == *len);
	fclose(f);
	return b;
}

static const struct st_tensor *find(const struct st_file *f, const char *name)
{
	for (uint32_t i = 0; i < f->n_tensors; i++)
		if (!strcmp(f->tensors[i].name, name))
			return &f->tensors[i];
	fprintf(stderr, "no tensor %s\n", name);
	exit(1);
}

static float elem(const unsigned char *data, int dtype, uint64_t i)
{
	uint16_t h;
	uint32_t x;
	float v;
	switch (dtype) {
	case WSP_DTYPE_BF16:
		memcpy(&h, data + 2 * i, 2);
		x = (uint32_t)h << 16;
		memcpy(&v, &x, 4);
		return v;
	case WSP_DTYPE_F16: {
		memcpy(&h, data + 2 * i, 2);
		int e = (h >> 10) & 31, m = h & 1023;
		v = e ? ldexpf(1.0f + m / 1024.0f, e - 15) : ldexpf(m / 1024.0f, -14);
		return (h & 0x8000) ? -v : v;
	}
	default:
		memcpy(&v, data + 4 * i, 4);
		return v;
	}
}

/* Mean and standard deviation of a tensor's values. */
static void stats(const char *path, const char *name, double *mean, double *sd)
{
	size_t len;
	unsigned char *b = slurp(path, &len);
	struct st_file f;
	CHECK_RC(st_parse_named(path, b, len, len, &f, &err), 0);
	const struct st_tensor *t = find(&f, name);
	const unsigned char *data = b + 8 + f.header_len + t->begin;
	uint64_t n = (t->end - t->begin) / (wsp_dtype_bits(t->dtype) / 8);
	double s = 0, s2 = 0;
	for (uint64_t i = 0; i < n; i++) {
		double v = elem(data, t->dtype, i);
		s += v;
		s2 += v * v;
	}
	*mean = s / n;
	*sd = sqrt(s2 / n - *mean * *mean);
	st_file_free(&f);
	free(b);
}

static void shapes(const char *path)
{
	struct st_file f;
	CHECK_RC(st_open(path, &f, &err), 0);
	CHECK(f.n_tensors == 2 * 9 + 3);
	CHECK(f.header_len % 8 == 0);
	CHECK(f.metadata_json && !strcmp(f.metadata_json, "{\"format\":\"pt\",\"generator\":\"wspager\"}"));
	for (uint32_t i = 0; i < f.n_tensors; i++)
		CHECK(f.tensors[i].key_order == i);   /* data in header-key order */
	const struct st_tensor *t = find(&f, "model.embed_tokens.weight");
	CHECK(t == &f.tensors[0] && t->rank == 2 && t->shape[0] == 300 && t->shape[1] == 64);
	CHECK(t->dtype == WSP_DTYPE_BF16);
	t = find(&f, "model.layers.1.self_attn.k_proj.weight");
	CHECK(t->rank == 2 && t->shape[0] == 32 && t->shape[1] == 64);
	t = find(&f, "model.layers.1.self_attn.q_proj.weight");
	CHECK(t->shape[0] == 64 && t->shape[1] == 64);
	t = find(&f, "model.layers.0.mlp.down_proj.weight");
	CHECK(t->shape[0] == 64 && t->shape[1] == 160);
	t = find(&f, "model.layers.0.mlp.gate_proj.weight");
	CHECK(t->shape[0] == 160 && t->shape[1] == 64);
	t = find(&f, "model.layers.0.post_attention_layernorm.weight");
	CHECK(t->rank == 1 && t->shape[0] == 64);
	t = find(&f, "model.norm.weight");
	CHECK(t->rank == 1);
	t = find(&f, "lm_head.weight");
	CHECK(t == &f.tensors[f.n_tensors - 1] && t->shape[0] == 300);
	st_file_free(&f);
}

static int cancel_cb(void *ctx, uint64_t done, uint64_t total)
{
	return ++*(int *)ctx >= 2;
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

int main(void)
{
	wspi_err_init(&err);
	const char *dir = t_scratch("stgen");
	char p1[700], p2[700], p3[700], eb[512];
	snprintf(p1, sizeof(p1), "%s/a.safetensors", dir);
	snprintf(p2, sizeof(p2), "%s/b.safetensors", dir);
	snprintf(p3, sizeof(p3), "%s/sharded", dir);
	struct wsp_generate_options o;
	small(&o);
	CHECK_RC(wsp_generate(p1, &o, eb, sizeof(eb)), 0);
	shapes(p1);
	double mean, sd;
	stats(p1, "model.layers.1.mlp.up_proj.weight", &mean, &sd);
	CHECK(fabs(mean) < 0.002 && sd > 0.018 && sd < 0.022);
	stats(p1, "model.layers.0.input_layernorm.weight", &mean, &sd);
	CHECK(fabs(mean - 1.0) < 0.03 && sd > 0.02 && sd < 0.1);

	/* Same seed, same bytes; another seed, other bytes. */
	CHECK_RC(wsp_generate(p2, &o, eb, sizeof(eb)), 0);
	size_t la, lb;
	unsigned char *a = slurp(p1, &la), *b = slurp(p2, &lb);
	CHECK(la == lb && !memcmp(a, b, la));
	free(b);
	/* An existing output is refused, and replaced with force. */
	o.seed = 2;
	CHECK_RC(wsp_generate(p2, &o, eb, sizeof(eb)), WSP_EEXIST);
	CHECK(strstr(eb, p2));
	o.flags = WSP_CONVERT_FORCE;
	CHECK_RC(wsp_generate(p2, &o, eb, sizeof(eb)), 0);
	b = slurp(p2, &lb);
	CHECK(la == lb && memcmp(a, b, la) != 0);
	CHECK(!memcmp(a, b, 8 + 64));   /* same header, other values */
	free(a);
	free(b);

	/* Other dtypes. */
	small(&o);
	o.dtype = WSP_DTYPE_F16;
	o.flags = WSP_CONVERT_FORCE;
	CHECK_RC(wsp_generate(p2, &o, eb, sizeof(eb)), 0);
	stats(p2, "lm_head.weight", &mean, &sd);
	CHECK(fabs(mean) < 0.002 && sd > 0.018 && sd < 0.022);
	o.dtype = WSP_DTYPE_F32;
	CHECK_RC(wsp_generate(p2, &o, eb, sizeof(eb)), 0);
	stats(p2, "model.embed_tokens.weight", &mean, &sd);
	CHECK(fabs(mean) < 0.002 && sd > 0.018 && sd < 0.022);
	o.dtype = WSP_DTYPE_I8;
	CHECK_RC(wsp_generate(p2, &o, eb, sizeof(eb)), WSP_EDTYPE);
	small(&o);
	o.heads = 5;
	CHECK_RC(wsp_generate(p2, &o, eb, sizeof(eb)), -EINVAL);

	/* Sharded: numbered files plus an index that st_set_open accepts. */
	small(&o);
	o.shard_bytes = 20000;
	CHECK_RC(wsp_generate(p3, &o, eb, sizeof(eb)), 0);
	const char *in[] = {p3};
	struct st_set s;
	CHECK_RC(st_set_open(in, 1, &s, NULL, NULL, &err), 0);
	CHECK(s.has_index && s.n_files > 2);
	char want[64];
	snprintf(want, sizeof(want), "model-00001-of-%05u.safetensors", s.n_files);
	CHECK(strstr(s.files[0].path, want));
	uint64_t total = 0, tensors = 0;
	for (uint32_t i = 0; i < s.n_files; i++) {
		tensors += s.files[i].n_tensors;
		for (uint32_t k = 0; k < s.files[i].n_tensors; k++)
			total += s.files[i].tensors[k].end - s.files[i].tensors[k].begin;
	}
	CHECK(tensors == 21);
	char ts[64];
	snprintf(ts, sizeof(ts), "\"total_size\": %llu", (unsigned long long)total);
	CHECK(strstr(s.index_json, ts));
	st_set_free(&s);
	CHECK_RC(wsp_generate(p3, &o, eb, sizeof(eb)), WSP_EEXIST);
	o.flags = WSP_CONVERT_FORCE;
	CHECK_RC(wsp_generate(p3, &o, eb, sizeof(eb)), 0);

	/* Cancelled from the progress callback: nothing is left behind. */
	int entries = count_entries(dir), calls = 0;
	small(&o);
	o.layers = 8;
	o.hidden = 1024;
	o.progress = cancel_cb;
	o.progress_ctx = &calls;
	snprintf(p1, sizeof(p1), "%s/cancelled.safetensors", dir);
	CHECK_RC(wsp_generate(p1, &o, eb, sizeof(eb)), -ECANCELED);
	CHECK(access(p1, F_OK) != 0 && count_entries(dir) == entries);
	o.shard_bytes = 1 << 20;
	calls = 0;
	CHECK_RC(wsp_generate(p1, &o, eb, sizeof(eb)), -ECANCELED);
	CHECK(access(p1, F_OK) != 0 && count_entries(dir) == entries);
	t_rmrf(dir);
	wspi_err_destroy(&err);
	return 0;
}
