/*
 * Synthetic Llama-shaped checkpoints, since no real model can be downloaded.
 *
 * Values are Gaussian with std 0.02 (norm weights 1 + small noise), like
 * trained weights, so that compression ratios are realistic.  They come from
 * a counter-based generator keyed by (seed, tensor, block): any thread may
 * produce any block and the output does not depend on the thread count.
 * The normal is approximate (binomial popcount plus a uniform fraction): it
 * has the right mean, variance and shape within about 5.7 sigma, at one
 * 64-bit hash per value.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/workers.h"
#include "common/outguard.h"
#include "common/util.h"
#include "common/fdio.h"
#include "safetensors/safetensors.h"

#define BLOCK_ELEMS (1u << 20)
#define GEN_NAME_MAX 96

struct gen_tensor {
	char name[GEN_NAME_MAX];
	unsigned rank;
	uint64_t shape[2];
	int is_norm;
	uint64_t elems, bytes;
	uint32_t shard;
	uint64_t file_off;    /* absolute offset of its data in its shard file */
	uint64_t first_block; /* global block number of its first block */
};

struct gen_shard {
	char name[64];
	int fd;
	uint32_t first, count;  /* tensors [first, first + count) */
	uint64_t data_bytes;
	char *header;           /* padded JSON */
	size_t header_len;
};

struct gen {
	const struct wsp_generate_options *opt;
	struct gen_tensor *t;
	uint32_t n_t;
	struct gen_shard *s;
	uint32_t n_s;
	uint64_t total_bytes, total_blocks;
	unsigned esize;
	/* shared by the workers */
	pthread_mutex_t lock;
	uint64_t next_block, done_bytes;
	int stop;
	struct wspi_err *err;
};

void wsp_generate_options_init(struct wsp_generate_options *opt)
{
	if (!opt)
		return;
	memset(opt, 0, sizeof(*opt));
	opt->layers = 8;
	opt->hidden = 1024;
	opt->intermediate = 2816;
	opt->vocab = 8192;
	opt->dtype = WSP_DTYPE_BF16;
	opt->seed = 1;
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint16_t f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	x += 0x7fffu + ((x >> 16) & 1u);   /* round to nearest even; no NaN here */
	return (uint16_t)(x >> 16);
}

static uint16_t f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
	int exp = (int)((x >> 23) & 0xffu) - 127 + 15;
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00u);
	if (exp <= 0) {                     /* subnormal half */
		if (exp < -10)
			return (uint16_t)sign;
		mant |= 0x800000u;
		unsigned shift = (unsigned)(14 - exp);
		uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1)))
			h++;
		return (uint16_t)(sign | h);
	}
	uint32_t h = (uint32_t)exp << 10 | mant >> 13, rem = mant & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++;                        /* a carry into the exponent is still right */
	return (uint16_t)(sign | h);
}

/* Fill `out` with n values of element `first` onwards of tensor `ti`. */
static void fill(const struct gen *g, uint32_t ti, uint64_t first, uint64_t n, void *out)
{
	const struct gen_tensor *t = &g->t[ti];
	const float inv_sd = (float)(1.0 / sqrt(8.0 + 1.0 / 12.0));
	const float scale = t->is_norm ? 0.05f : 0.02f, base = t->is_norm ? 1.0f : 0.0f;
	uint64_t key = mix64(g->opt->seed ^ mix64(ti + 0x9e3779b97f4a7c15ull));
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = mix64(key + (first + i) * 0x9e3779b97f4a7c15ull);
		float z = ((float)__builtin_popcount((uint32_t)r) - 16.0f +
			   (float)(r >> 40) * (1.0f / 16777216.0f) - 0.5f) * inv_sd;
		float v = base + scale * z;
		switch (g->opt->dtype) {
		case WSP_DTYPE_BF16: ((uint16_t *)out)[i] = f32_to_bf16(v); break;
		case WSP_DTYPE_F16: ((uint16_t *)out)[i] = f32_to_f16(v); break;
		default: ((float *)out)[i] = v; break;
		}
	}
}

static void *worker(void *arg)
{
	struct gen *g = arg;
	void *buf = malloc((size_t)BLOCK_ELEMS * g->esize);
	if (!buf) {
		pthread_mutex_lock(&g->lock);
		g->stop = 1;
		pthread_mutex_unlock(&g->lock);
		wspi_err_set_first(g->err, -ENOMEM, "out of memory");
		return NULL;
	}
	for (;;) {
		pthread_mutex_lock(&g->lock);
		uint64_t b = g->next_block++;
		int stop = g->stop;
		pthread_mutex_unlock(&g->lock);
		if (stop || b >= g->total_blocks)
			break;
		uint32_t lo = 0, hi = g->n_t;   /* the tensor holding block b */
		while (hi - lo > 1) {
			uint32_t mid = lo + (hi - lo) / 2;
			if (g->t[mid].first_block <= b)
				lo = mid;
			else
				hi = mid;
		}
		const struct gen_tensor *t = &g->t[lo];
		uint64_t first = (b - t->first_block) * BLOCK_ELEMS;
		uint64_t n = WSP_MIN((uint64_t)BLOCK_ELEMS, t->elems - first);
		fill(g, lo, first, n, buf);
		int rc = fd_write_at(g->s[t->shard].fd, buf, n * g->esize, t->file_off + first * g->esize);
		pthread_mutex_lock(&g->lock);
		if (rc < 0) {
			g->stop = 1;
			wspi_err_set_first(g->err, rc, "%s: write: %s", g->s[t->shard].name, strerror(-rc));
		} else {
			g->done_bytes += n * g->esize;
			if (g->opt->progress && !g->stop &&
			    g->opt->progress(g->opt->progress_ctx, g->done_bytes, g->total_bytes)) {
				g->stop = 1;
				wspi_err_set_first(g->err, -ECANCELED, "generation cancelled");
			}
		}
		pthread_mutex_unlock(&g->lock);
	}
	free(buf);
	return NULL;
}

static int add_tensor(struct gen *g, uint32_t cap, const char *name, unsigned rank, uint64_t d0,
		      uint64_t d1, int is_norm)
{
	if (g->n_t >= cap)
		return WSP_ETOOBIG;
	struct gen_tensor *t = &g->t[g->n_t++];
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->rank = rank;
	t->shape[0] = d0;
	t->shape[1] = d1;
	t->is_norm = is_norm;
	int rc = wspi_tensor_bytes(g->opt->dtype, rank, t->shape, &t->bytes);
	t->elems = t->bytes / g->esize;
	return rc;
}

/* Llama names and shapes (transformers' LlamaForCausalLM). */
static int plan_tensors(struct gen *g, struct wspi_err *err)
{
	const struct wsp_generate_options *o = g->opt;
	unsigned heads = o->heads ? o->heads : WSP_MAX(o->hidden / 64, 1u);
	unsigned kv = o->kv_heads ? o->kv_heads : WSP_MAX(heads / 4, 1u);
	if (!o->layers || !o->hidden || !o->intermediate || !o->vocab || o->layers > 100000)
		return WSP_ERR(err, -EINVAL, "generate: layers, hidden, intermediate and vocab must be "
			       "positive (layers at most 100000)");
	if (o->hidden % heads || kv > heads || heads % kv)
		return WSP_ERR(err, -EINVAL, "generate: hidden %u, heads %u, kv_heads %u do not divide",
			       o->hidden, heads, kv);
	uint64_t h = o->hidden, kv_dim = (uint64_t)kv * (o->hidden / heads);
	uint32_t cap = 9 * o->layers + 3;
	g->t = calloc(cap, sizeof(*g->t));
	if (!g->t)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	static const char *const attn[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
	static const char *const mlp[] = {"gate_proj", "up_proj", "down_proj"};
	char nm[GEN_NAME_MAX];
	int rc = add_tensor(g, cap, "model.embed_tokens.weight", 2, o->vocab, h, 0);
	for (unsigned l = 0; l < o->layers && rc == 0; l++) {
		snprintf(nm, sizeof(nm), "model.layers.%u.input_layernorm.weight", l);
		rc |= add_tensor(g, cap, nm, 1, h, 0, 1);
		for (int i = 0; i < 4; i++) {
			snprintf(nm, sizeof(nm), "model.layers.%u.self_attn.%s.weight", l, attn[i]);
			rc |= add_tensor(g, cap, nm, 2, i == 1 || i == 2 ? kv_dim : h, h, 0);
		}
		snprintf(nm, sizeof(nm), "model.layers.%u.post_attention_layernorm.weight", l);
		rc |= add_tensor(g, cap, nm, 1, h, 0, 1);
		for (int i = 0; i < 3; i++) {
			snprintf(nm, sizeof(nm), "model.layers.%u.mlp.%s.weight", l, mlp[i]);
			rc |= add_tensor(g, cap, nm, 2, i == 2 ? h : o->intermediate,
					 i == 2 ? o->intermediate : h, 0);
		}
	}
	if (rc == 0)
		rc = add_tensor(g, cap, "model.norm.weight", 1, h, 0, 1);
	if (rc == 0)
		rc = add_tensor(g, cap, "lm_head.weight", 2, o->vocab, h, 0);
	if (rc < 0)
		return WSP_ERR(err, WSP_ETOOBIG, "generate: tensor sizes overflow");
	for (uint32_t i = 0; i < g->n_t; i++) {
		g->t[i].first_block = g->total_blocks;
		if (ckd_add(&g->total_bytes, g->total_bytes, g->t[i].bytes))
			return WSP_ERR(err, WSP_ETOOBIG, "generate: model size overflows");
		g->total_blocks += (g->t[i].elems + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
	}
	return 0;
}

/* Greedy sharding as transformers does: a new shard when the next tensor
 * would push the current one past shard_bytes. */
static int plan_shards(struct gen *g, struct wspi_err *err)
{
	g->s = calloc(g->n_t, sizeof(*g->s));
	if (!g->s)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < g->n_t; i++) {
		struct gen_shard *cur = g->n_s ? &g->s[g->n_s - 1] : NULL;
		if (!cur || (g->opt->shard_bytes && cur->count &&
			     cur->data_bytes + g->t[i].bytes > g->opt->shard_bytes)) {
			cur = &g->s[g->n_s++];
			cur->first = i;
			cur->fd = -1;
		}
		g->t[i].shard = g->n_s - 1;
		g->t[i].file_off = cur->data_bytes;   /* header length added later */
		cur->data_bytes += g->t[i].bytes;
		cur->count++;
	}
	for (uint32_t s = 0; s < g->n_s; s++)
		snprintf(g->s[s].name, sizeof(g->s[s].name),
			 g->opt->shard_bytes ? "model-%05u-of-%05u.safetensors" : "model.safetensors",
			 s + 1, g->n_s);
	return 0;
}

static int build_header(struct gen *g, struct gen_shard *s, struct wspi_err *err)
{
	json_t *root = json_object(), *meta = json_pack("{s:s,s:s}", "format", "pt", "generator",
							 "wspager");
	int bad = !root || !meta || json_object_set_new(root, "__metadata__", meta);
	const char *dt = wsp_dtype_name(g->opt->dtype);
	for (uint32_t i = s->first; i < s->first + s->count && !bad; i++) {
		const struct gen_tensor *t = &g->t[i];
		uint64_t begin = t->file_off;
		json_t *shape = json_array();
		for (unsigned d = 0; d < t->rank && shape; d++)
			bad |= json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
		json_t *e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", dt, "shape", shape,
				      "data_offsets", (json_int_t)begin, (json_int_t)(begin + t->bytes));
		bad |= !e || json_object_set_new(root, t->name, e);
	}
	char *text = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (!text)
		return WSP_ERR(err, -ENOMEM, "generate: cannot build the header");
	size_t n = strlen(text), padded = (size_t)wspi_align_up(n, 8);
	s->header = malloc(8 + padded);
	if (!s->header) {
		free(text);
		return WSP_ERR(err, -ENOMEM, "out of memory");
	}
	for (int i = 0; i < 8; i++)
		s->header[i] = (char)((uint64_t)padded >> (8 * i));
	memcpy(s->header + 8, text, n);
	memset(s->header + 8 + n, ' ', padded - n);   /* the reference pads with spaces */
	s->header_len = 8 + padded;
	free(text);
	for (uint32_t i = s->first; i < s->first + s->count; i++)
		g->t[i].file_off += s->header_len;
	return 0;
}

static int write_index(struct gen *g, const char *dir, struct wspi_err *err)
{
	json_t *wmap = json_object(), *root = json_pack("{s:{s:I},s:o}", "metadata", "total_size",
							  (json_int_t)g->total_bytes, "weight_map", wmap);
	int bad = !root;
	for (uint32_t i = 0; i < g->n_t && !bad; i++)
		bad |= json_object_set_new(wmap, g->t[i].name, json_string(g->s[g->t[i].shard].name));
	char *path = NULL;
	if (asprintf(&path, "%s/model.safetensors.index.json", dir) < 0)
		path = NULL;
	/* As transformers writes it: json.dumps(indent=2, sort_keys=True) + "\n". */
	char *text = bad ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	json_decref(root);
	int rc = !text || !path ? -ENOMEM : 0;
	if (rc == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		size_t n = strlen(text);
		if (fd < 0 || fd_write_at(fd, text, n, 0) || fd_write_at(fd, "\n", 1, n) || fsync(fd))
			rc = errno ? -errno : -EIO;
		if (fd >= 0)
			close(fd);
	}
	free(text);
	if (rc < 0)
		WSP_ERR(err, rc, "%s: cannot write the index", path ? path : dir);
	free(path);
	return rc;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(p);
}

static void rmtree(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int run_workers(struct gen *g)
{
	unsigned n = WSP_MIN(wspi_cpu_count(), 64u);
	if ((uint64_t)n > g->total_blocks)
		n = (unsigned)WSP_MAX(g->total_blocks, 1);
	wspi_run_workers(worker, g, n);
	return g->err->code < 0 ? g->err->code : 0;
}

/* Writes every shard into `dir` (a fresh temporary directory, or for a single
 * file, writes the one shard to `file`). */
static int write_shards(struct gen *g, const char *dir, const char *file)
{
	int rc = 0;
	for (uint32_t s = 0; s < g->n_s && rc == 0; s++) {
		struct gen_shard *sh = &g->s[s];
		char *path = NULL;
		if (file)
			path = strdup(file);
		else if (asprintf(&path, "%s/%s", dir, sh->name) < 0)
			path = NULL;
		if (!path)
			return WSP_ERR(g->err, -ENOMEM, "out of memory");
		rc = build_header(g, sh, g->err);
		if (rc == 0) {
			sh->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (file ? 0 : O_EXCL), 0666);
			if (sh->fd < 0)
				rc = WSP_ERR(g->err, -errno, "%s: %s", path, strerror(errno));
		}
		if (rc == 0 && (ftruncate(sh->fd, (off_t)(sh->header_len + sh->data_bytes)) ||
				fd_write_at(sh->fd, sh->header, sh->header_len, 0)))
			rc = WSP_ERR(g->err, -errno, "%s: write: %s", path, strerror(errno));
		free(path);
	}
	if (rc == 0)
		rc = run_workers(g);
	for (uint32_t s = 0; s < g->n_s; s++) {
		if (g->s[s].fd >= 0) {
			if (rc == 0 && fsync(g->s[s].fd))
				rc = WSP_ERR(g->err, -errno, "%s: fsync: %s", g->s[s].name,
					     strerror(errno));
			close(g->s[s].fd);
			g->s[s].fd = -1;
		}
	}
	return rc;
}

static void fsync_parent(const char *path)
{
	char *d = strdup(path);
	if (!d)
		return;
	char *slash = strrchr(d, '/');
	const char *parent = slash ? (slash == d ? "/" : (*slash = '\0', d)) : ".";
	int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(d);
}

/* Replaces `out` by `tmp` (both in one directory) so that no mix of old and
 * new can ever be seen: a directory over a directory in one atomic swap
 * where the file system has it (`out` is the old or the new one at every
 * instant), else by moving the old output aside first. */
static int install(const char *tmp, const char *out, int is_dir, struct wspi_err *err)
{
	struct stat st;
	char *old = NULL;
	if (is_dir && lstat(out, &st) == 0 && S_ISDIR(st.st_mode) &&
	    renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) == 0) {
		fsync_parent(out);
		rmtree(tmp);   /* the old output, now under the temporary name */
		return 0;
	}
	if (lstat(out, &st) == 0 && (is_dir || S_ISDIR(st.st_mode))) {
		if (asprintf(&old, "%s.old.%ld", out, (long)getpid()) < 0)
			return WSP_ERR(err, -ENOMEM, "out of memory");
		if (rename(out, old)) {
			int rc = WSP_ERR(err, -errno, "%s: cannot move the old output aside: %s", out,
					 strerror(errno));
			free(old);
			return rc;
		}
	}
	if (rename(tmp, out)) {
		int rc = WSP_ERR(err, -errno, "%s: rename: %s", out, strerror(errno));
		if (old && rename(old, out) == 0) {
			free(old);
			return rc;
		}
		free(old);
		return rc;
	}
	fsync_parent(out);
	if (old) {
		rmtree(old);
		free(old);
	}
	return 0;
}

/* A forced run replaces only a previous checkpoint: a directory of
 * safetensors files and an index, or a .safetensors file that parses. */
static int check_output(const char *out, const struct wsp_generate_options *opt,
			struct wspi_err *err)
{
	int force = !!(opt->flags & WSP_CONVERT_FORCE);
	struct st_file f;
	struct stat st;

	WSP_TRY(out_check_inputs(out, NULL, 0, err));
	WSP_TRY(out_check_replaceable(out, force, 1, out_checkpoint_entry, NULL,
				      "a safetensors checkpoint", err));
	if (!force || lstat(out, &st) < 0 || S_ISDIR(st.st_mode))
		return 0;
	memset(&f, 0, sizeof(f));
	int rc = st_open(out, &f, err);
	st_file_free(&f);
	if (rc < 0) {
		wspi_err_prefix(err, "%s is not a safetensors file that force may replace", out);
		return WSP_EEXIST;
	}
	return 0;
}

static int generate(const char *out, const struct wsp_generate_options *opt, struct wspi_err *err)
{
	struct gen g = {.opt = opt, .err = err};
	pthread_mutex_init(&g.lock, NULL);
	char *tmp = NULL;
	int rc, tmp_made = 0;
	if (opt->dtype != WSP_DTYPE_BF16 && opt->dtype != WSP_DTYPE_F16 && opt->dtype != WSP_DTYPE_F32) {
		rc = WSP_ERR(err, WSP_EDTYPE, "generate: dtype must be BF16, F16 or F32");
		goto out;
	}
	g.esize = wsp_dtype_bits(opt->dtype) / 8;
	rc = plan_tensors(&g, err);
	if (rc == 0)
		rc = plan_shards(&g, err);
	if (rc < 0)
		goto out;
	rc = check_output(out, opt, err);
	if (rc < 0)
		goto out;
	if (asprintf(&tmp, "%s.tmp.XXXXXX", out) < 0) {
		tmp = NULL;
		rc = WSP_ERR(err, -ENOMEM, "out of memory");
		goto out;
	}
	/* mkstemp/mkdtemp make private modes; give the usual ones. */
	mode_t mask = umask(0);
	umask(mask);
	if (opt->shard_bytes) {
		tmp_made = mkdtemp(tmp) != NULL;
		if (tmp_made)
			chmod(tmp, 0777 & ~mask);
	} else {
		int fd = mkstemp(tmp);
		tmp_made = fd >= 0;
		if (fd >= 0) {
			fchmod(fd, 0666 & ~mask);
			close(fd);
		}
	}
	if (!tmp_made) {
		rc = WSP_ERR(err, -errno, "%s: cannot create a temporary output: %s", tmp,
			     strerror(errno));
		goto out;
	}
	rc = write_shards(&g, tmp, opt->shard_bytes ? NULL : tmp);
	if (rc == 0 && opt->shard_bytes)
		rc = write_index(&g, tmp, err);
	if (rc == 0 && opt->shard_bytes) {
		int fd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
	}
	if (rc == 0)
		rc = install(tmp, out, opt->shard_bytes != 0, err);
	if (rc == 0)
		tmp_made = 0;
out:
	if (tmp_made)
		rmtree(tmp);   /* never leave a half-written checkpoint */
	free(tmp);
	if (g.s)
		for (uint32_t s = 0; s < g.n_s; s++)
			free(g.s[s].header);
	free(g.s);
	free(g.t);
	pthread_mutex_destroy(&g.lock);
	return rc;
}

int wsp_generate(const char *out, const struct wsp_generate_options *opt, char *errbuf,
		 size_t errlen)
{
	struct wspi_err err;
	wspi_err_init(&err);
	struct wsp_generate_options def;
	if (!opt) {
		wsp_generate_options_init(&def);
		opt = &def;
	}
	int rc = 0;
	for (size_t i = 0; i < WSP_ARRAY_SIZE(opt->reserved); i++)
		if (opt->reserved[i])
			rc = WSP_ERR(&err, -EINVAL, "wsp_generate_options: reserved fields are not "
				     "zero (fill the struct with wsp_generate_options_init)");
	if (rc == 0)
		rc = out ? generate(out, opt, &err) : WSP_ERR(&err, -EINVAL, "generate: no output path");
	if (errbuf && errlen)
		wspi_err_copy(&err, errbuf, errlen);
	wspi_err_destroy(&err);
	return rc;
}
